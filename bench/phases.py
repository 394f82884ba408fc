"""A staged mixture (``mixture.phases``) on the development corpus: realized
against target per phase, what each phase leaves unread at common global
batches, and what the schedule costs the build.

Builds one version of ``--corpus`` (default ``../shared/corpus``) with a main
phase and an annealing phase (weights below; the annealing phase favours the
edited sources: KJV, Debian Reference, CPython, as annealing recipes favour
high-quality data, e.g. Llama 3 section 3.1.3), as a user would::

    .venv/bin/python -m bench.phases [--corpus ../shared/corpus] [--out bench-results/phases] [--reuse]

and writes ``<out>/phases.json`` and ``<out>/phases.md``. Units: tokens
(EOS included), seconds (wall, from the manifest's run facts), bytes.
Not part of ``make bench`` (one build of the corpus, ~10 minutes on 2 CPUs).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml

from bench.__main__ import bench_config
from pipeline import layout
from pipeline.build import build
from pipeline.config import REPO_ROOT
from pipeline.manifest import load_manifest
from pipeline.order import Stream

MAIN = {"web": 0.4, "manuals": 0.3, "books": 0.1, "reference": 0.1, "code": 0.1}
ANNEAL = {"web": 0.05, "manuals": 0.2, "books": 0.25, "reference": 0.25, "code": 0.25}
BATCHES = (64, 256, 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO_ROOT.parent / "shared" / "corpus")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "phases")
    parser.add_argument("--main-tokens", type=int, default=8_000_000)
    parser.add_argument("--anneal-tokens", type=int, default=2_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reuse", action="store_true", help="report on the version a previous run left")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cfg = bench_config(args.corpus, 2048)
    cfg["executor"] = {"num_workers": args.workers}
    cfg["mixture"] = {"phases": [
        {"name": "main", "token_budget": args.main_tokens, "weights": MAIN, "max_epochs": {s: 4 for s in MAIN}},
        {"name": "anneal", "token_budget": args.anneal_tokens, "weights": ANNEAL,
         "max_epochs": {s: 4 for s in ANNEAL}}]}
    (out / "phases.yaml").write_text(yaml.safe_dump(cfg))
    if (out / "corpora" / "phases" / layout.MANIFEST).exists() and args.reuse:
        m = load_manifest(out / "corpora" / "phases")
    else:
        shutil.rmtree(out / "corpora", ignore_errors=True)
        m = build("phases", out / "phases.yaml", out / "corpora", log=print).manifest
    facts = {p["name"]: p for p in m["mixture"]["phases"]}
    rows = []
    for phase in m["phases"]:
        fact = facts[phase["name"]]
        for src, packed in sorted(phase["packed_per_source"].items()):
            f = fact["per_source"][src]
            rows.append({"phase": phase["name"], "source": src, "available_tokens": f["available_tokens"],
                         "target_share": f["target_share"], "capped": f["capped"],
                         "realized_tokens": packed["tokens"], "realized_share": packed["share"],
                         "share_error_pp": packed["share_error_pp"], "epochs_in_phase": f["epochs"],
                         "sampled_documents": f["sampled_documents"], "documents": f["documents"]})
    schedule = {}
    for b in BATCHES:
        try:
            schedule[b] = Stream.of(m, b).schedule()
        except ValueError as exc:  # a phase smaller than the global batch: the loader refuses it
            schedule[b] = str(exc)
    report = {"corpus": str(args.corpus), "phases": m["phases"], "per_source": rows,
              "schedule": {str(b): s for b, s in schedule.items()},
              "stage_seconds": m["run"]["stage_seconds"], "wall_seconds": m["run"]["wall_seconds"],
              "peak_rss": m["run"].get("peak_rss"), "num_samples": m["num_samples"]}
    (out / "phases.json").write_text(json.dumps(report, indent=1))
    lines = [f"# mixture.phases on {args.corpus} (`python -m bench.phases`)", "",
             "| phase | source | target share | realized tokens | realized share | error (pp) | epochs in phase |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['source']} | {r['target_share']:.3f} | {r['realized_tokens']:,} | "
                     f"{r['realized_share']:.4f} | {r['share_error_pp']:+.3f} | {r['epochs_in_phase']:.2f} |")
    lines += ["", "| phase | budget | tokens sampled | samples | first sample | tail dropped |",
              "|---|---:|---:|---:|---:|---:|"]
    for p in m["phases"]:
        lines.append(f"| {p['name']} | {p['token_budget']:,} | {p['tokens_sampled']:,} | {p['num_samples']:,} | "
                     f"{p['first_sample']:,} | {p['tokens_dropped_tail']:,} |")
    lines += ["", "| global batch | " + " | ".join(f"{p['name']}: first step, steps, unread samples"
                                                   for p in m["phases"]) + " |",
              "|---:|" + "---|" * len(m["phases"])]
    for b, s in schedule.items():
        cells = [f"{x['first_step']}, {x['steps']}, {x['unread_samples']}" for x in s] if isinstance(s, list) \
            else [f"refused: {s}"]
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    secs = m["run"]["stage_seconds"]
    lines += ["", f"Build wall {m['run']['wall_seconds']:.0f} s; mixture stage {secs.get('mixture', 0):.1f} s "
              f"(fit + process, two phases: two passes over id, source, tokens); assemble "
              f"{secs.get('assemble', 0):.1f} s; peak RSS {json.dumps(m['run'].get('peak_rss'))}."]
    (out / "phases.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
