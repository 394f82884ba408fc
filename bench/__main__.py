"""``make bench``: stage throughput per core, loader throughput, lineage lookup.

Builds one version of the development corpus (``../shared/corpus`` when it is
there, else the bundled sample) with ONE worker process, so each stage's
seconds are one core's seconds, then reads it back through MindSpore.
Results go to ``bench-results/bench.json`` and ``bench-results/bench.md``.

    .venv/bin/python -m bench [--corpus DIR] [--out DIR] [--seq-length 2048] [--topics quality dedup ...]

After the build it runs the topic benchmarks: ``bench.quality`` (language ID,
heuristics, perplexity throughput), ``bench.multi`` (language ID against the
bare lid.176 model, drop shares per language and reason, word salad and
perplexity coverage on the held-out part of ``../shared/corpus-multi``), ``bench.dedup`` (precision/recall per
Jaccard band, speed and peak RSS at 100k and 1M documents), ``bench.decontam`` (precision/recall of
benchmark decontamination on planted eval items, held-out part; documents/s and chars/s per core), ``bench.tokenizer``
(training time and memory, encoding tokens/s; the training sample's shares: old
sampling vs the mixture default vs Qwen and Tekken on held-out corpus-multi), ``bench.pii`` (the PII
stage against the heuristics stage on the same documents, per core; replacements per type per source)
and ``bench.loader`` (loader throughput at seq_length 4096, lineage lookups on a 10M-sample table).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import yaml

from pipeline.build import build
from pipeline.config import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared" / "corpus"


def bench_config(corpus: Path | None, seq_length: int) -> dict:
    if corpus is not None:
        sources = {
            "web": {"paths": [str(corpus / "dev-fortunes.jsonl.zst")]},
            "manuals": {"paths": [str(corpus / "dev-manpages.jsonl.zst")]},
            "books": {"paths": [str(corpus / "dev-kjv.jsonl.zst")]},
            "reference": {"paths": [str(corpus / "dev-debref.jsonl.zst")]},
            "code": {"paths": [str(corpus / "dev-code.jsonl.zst")], "lang": "code"},
        }
    else:
        sources = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())["sources"]
        for src in sources.values():
            src["paths"] = [str(REPO_ROOT / p) for p in src["paths"]]
    default = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    return {
        "seed": 1234,
        "sources": sources,
        "executor": {"num_workers": 1},
        # ~2 MB partitions: the stage rates of one worker over many partitions
        "ingest": {"partition_bytes": 2 * 1024 * 1024},
        "langid": default["langid"],
        "perplexity": default["perplexity"],
        # the bundled eval sets (GSM8K, HumanEval, GAOKAO-Bench items): the stage's
        # documents/s and characters/s per core on the corpus; pii runs by default
        "decontaminate": default["decontaminate"],
        "tokenize": default["tokenize"],
        "output": {"seq_length": seq_length},
    }


def stage_rows(manifest: dict) -> list[dict]:
    secs = manifest["run"]["stage_seconds"]
    rows = []
    ing = manifest["ingest"]["per_source"]
    n = sum(s["documents_in"] for s in ing.values())
    c = sum(s["chars_in"] for s in ing.values())
    rows.append({"stage": "ingest", "documents": n, "chars": c, "seconds": secs["ingest"]})
    for name in manifest["stage_order"]:
        tot = manifest["stages"][name]["totals"]
        rows.append({"stage": name, "documents": tot["documents_in"], "chars": tot["chars_in"],
                     "seconds": secs[name]})
    rows.append({"stage": "assemble", "documents": manifest["accounting"]["kept"],
                 "chars": None, "seconds": secs["assemble"]})
    for r in rows:
        s = max(r["seconds"], 1e-9)
        r["documents_per_s"] = round(r["documents"] / s, 1)
        r["mchars_per_s"] = round(r["chars"] / s / 1e6, 3) if r["chars"] is not None else None
    return rows


def bench_loader(vdir: Path, manifest: dict, workers: int, global_batch: int = 8) -> dict:
    from pipeline.loader import create_dataset

    ds = create_dataset(vdir, global_batch=global_batch, num_parallel_workers=workers)
    lat = []
    n = 0
    t0 = time.perf_counter()
    last = t0
    for columns in ds.create_tuple_iterator(output_numpy=True):
        batch = columns[0]  # input_ids; actual_seq_len follows
        now = time.perf_counter()
        lat.append(now - last)
        last = now
        n += batch.shape[0]
    wall = time.perf_counter() - t0
    seq = manifest["seq_length"] + 1
    return {"workers": workers, "global_batch": global_batch, "samples": n,
            "samples_per_s": round(n / wall, 1), "tokens_per_s": round(n * seq / wall),
            "p99_batch_latency_ms": round(float(np.percentile(lat[1:] or lat, 99)) * 1000, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=SHARED if SHARED.exists() else None)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--topics", nargs="*", default=["quality", "multi", "dedup", "decontam", "pii", "tokenizer", "loader", "html"],
                    help="topic benchmarks to run after the build (bench/<topic>.py)")
    args = ap.parse_args()

    out = args.out
    corpora = out / "corpora"
    if corpora.exists():
        shutil.rmtree(corpora)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "configs" / "bench.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(bench_config(args.corpus, args.seq_length)))
    print(f"benchmark corpus: {args.corpus or 'bundled sample'}; one worker process")
    result = build("bench", cfg_path, corpora, num_workers=1, log=print)
    manifest = result.manifest
    rows = stage_rows(manifest)
    loader = [bench_loader(result.version_dir, manifest, w) for w in (1, 2)]

    from pipeline.lineage import lineage_for_step

    t0 = time.perf_counter()
    lineage_for_step(result.version_dir, 0, 8)
    lineage_s = time.perf_counter() - t0

    report = {"corpus": str(args.corpus or "bundled sample"), "stages": rows, "loader": loader,
              "lineage_step_lookup_s": round(lineage_s, 3), "build_wall_s": manifest["run"]["wall_seconds"],
              "peak_rss": manifest["run"]["peak_rss"], "num_samples": manifest["num_samples"],
              "num_tokens": manifest["num_tokens"], "machine": manifest["run"]["machine"]}
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    lines = [f"# mindcorpus benchmark ({report['corpus']}, {report['machine']})", "",
             "| stage | documents | chars | seconds (1 core) | documents/s | M chars/s per core |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['stage']} | {r['documents']:,} | {r['chars'] or 0:,} | {r['seconds']:.2f} | "
                     f"{r['documents_per_s']:,.0f} | {r['mchars_per_s'] if r['mchars_per_s'] is not None else '-'} |")
    lines += ["", "| loader workers | global batch | samples/s | tokens/s | p99 batch latency (ms) |",
              "|---:|---:|---:|---:|---:|"]
    for ld in loader:
        lines.append(f"| {ld['workers']} | {ld['global_batch']} | {ld['samples_per_s']:,} | "
                     f"{ld['tokens_per_s']:,} | {ld['p99_batch_latency_ms']} |")
    lines += ["", f"lineage lookup for one step: {lineage_s:.3f} s; build wall {report['build_wall_s']} s; "
              f"peak RSS {report['peak_rss']}; {report['num_samples']:,} samples, {report['num_tokens']:,} tokens"]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    # Topic benchmarks (each writes its JSON under out/ and returns Markdown).
    import importlib

    for topic in args.topics:
        module = importlib.import_module(f"bench.{topic}")
        print(f"\n== bench.{topic}")
        section = module.run(out)
        lines += ["", section]
        (out / "bench.md").write_text("\n".join(lines) + "\n")
        print(section)


if __name__ == "__main__":
    main()
