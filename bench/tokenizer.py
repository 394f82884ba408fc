"""Tokenizer benchmark: BPE training time and peak memory, encoding speed, and
what the training sample's shares do to each language.

    .venv/bin/python -m bench.tokenizer [--train-mb 100] [--vocab-size 32768] [--out bench-results]
    .venv/bin/python -m bench.tokenizer --shares [--vocab-size 32768] [--train-max-chars 20000000]

* training: ``--train-mb`` MB of UTF-8 text from ``../shared/corpus`` (its
  documents in a seeded shuffle, repeated when the corpus is smaller), trained with
  the pipeline's defaults except ``vocab_size``, in a child process: wall
  seconds, CPU seconds and the child's peak RSS;
* encoding: the whole corpus (one pass) encoded with ``tokenizers``
  (``RAYON_NUM_THREADS=1``) and with the tiktoken encoder the stage uses, 1 and
  2 threads: tokens/s per core (tokens / CPU seconds) and wall tokens/s.

* sample shares (``--shares``, :func:`run_shares`): two tokenizers trained
  on ``../shared/corpus`` by the stage's own ``training_sample`` and
  ``train_bpe``, one on the corpus's own mix (``train_source_weights:
  corpus``, the sampling before issue 16) and one on the build default (the
  mixture's target shares, ``configs/default.yaml`` ``mixture.weights``,
  resolved by ``pipeline.config``), then characters per token per language on
  the *held-out* part of ``../shared/corpus-multi`` (``bench.multi_split``;
  gold-labelled records only, so a page labelled zh that is untranslated
  English does not count as Chinese), beside the reference tokenizers that
  ``make setup`` unpacks into ``.reference-tokenizers/`` (Qwen's
  ``qwen.tiktoken``, Mistral's Tekken).

Skips (returns a note) when ``../shared/corpus`` is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.config import REPO_ROOT
from stages.tokenize import train_bpe

SHARED = REPO_ROOT.parent / "shared" / "corpus"

_CHILD = r"""
import io, json, resource, sys, time, zstandard
from pathlib import Path
mode, corpus, arg, tok_path = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
texts = []
for f in sorted(corpus.glob("dev-*.jsonl.zst")):
    with open(f, "rb") as fh:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
            texts.append(json.loads(line)["text"])
from stages.tokenize import Config, HFEncoder, TiktokenEncoder, train_bpe
from tokenizers import Tokenizer
if mode == "train":
    import random
    random.Random(0).shuffle(texts)  # every source and language in any prefix
    budget, sample, used = arg * 1_000_000, [], 0
    while used < budget:
        for t in texts:
            n = len(t.encode("utf-8"))
            if used + n > budget:
                break
            sample.append(t); used += n
        else:
            continue
        break
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w, c = time.perf_counter(), time.process_time()
    tok = train_bpe(iter(sample), Config(vocab_size=int(sys.argv[5]), train_max_chars=10**12))
    out = {"bytes": used, "chars": sum(map(len, sample)), "wall_s": time.perf_counter() - w,
           "cpu_s": time.process_time() - c, "vocab_size": tok.get_vocab_size(),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rss_before_training_mb": rss0 / 1024}
    tok.save(tok_path)
else:
    tok = Tokenizer.from_file(tok_path)
    enc = HFEncoder(tok) if mode == "tokenizers" else TiktokenEncoder(tok, threads=arg)
    w, c = time.perf_counter(), time.process_time()
    ids = enc.encode_batch(texts)
    cpu, wall = time.process_time() - c, time.perf_counter() - w
    n = sum(map(len, ids))
    out = {"encoder": mode, "threads": arg, "tokens": n, "chars": sum(map(len, texts)),
           "cpu_s": cpu, "wall_s": wall, "tokens_per_cpu_s": n / cpu, "tokens_per_wall_s": n / wall}
print(json.dumps(out))
"""


def _child(*args: str, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, **(env or {})}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(out_dir: Path, train_mb: int = 100, vocab_size: int = 32768, corpus: Path = SHARED,
        tokenizer: Path | None = None, shares: bool = True) -> str:
    """Run the benchmark; write ``out_dir/tokenizer.json`` (results) and return
    a Markdown section. ``train_mb=0`` skips training and encodes with
    ``tokenizer`` (a ``tokenizer.json`` of this stage's shape). ``shares``
    appends :func:`run_shares` (``make bench`` runs both)."""
    if shares:
        return run(out_dir, train_mb, vocab_size, corpus, tokenizer, shares=False) + "\n" + run_shares(
            out_dir, vocab_size=vocab_size, corpus=corpus)
    if not corpus.is_dir():
        return "## Tokenizer\n\nskipped: no development corpus at ../shared/corpus\n"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_path = str(tokenizer or out_dir / f"bench-tokenizer-{vocab_size}.json")
    train = _child("train", str(corpus), str(train_mb), tok_path, str(vocab_size)) if train_mb else None
    rows = [_child("tokenizers", str(corpus), "1", tok_path, env={"RAYON_NUM_THREADS": "1"}),
            _child("tiktoken", str(corpus), "1", tok_path),
            _child("tiktoken", str(corpus), "2", tok_path)]
    (out_dir / "tokenizer.json").write_text(json.dumps({"train": train, "encode": rows}, indent=1))
    lines = ["## Tokenizer", ""]
    if train:
        lines += [f"Training ({train['bytes'] / 1e6:.0f} MB, {train['chars']:,} characters, vocab "
             f"{train['vocab_size']:,}): {train['wall_s']:.0f} s wall, {train['cpu_s']:.0f} s CPU, "
             f"peak RSS {train['peak_rss_mb']:.0f} MB ({train['rss_before_training_mb']:.0f} MB "
             "before training: the text held in memory).", ""]
    lines += [f"Encoding the whole corpus once with `{Path(tok_path).name}`:", "",
             "| encoder | threads | tokens | tokens/s per core (CPU) | tokens/s (wall) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['encoder']} | {r['threads']} | {r['tokens']:,} | "
                     f"{r['tokens_per_cpu_s'] / 1e6:.2f} M | {r['tokens_per_wall_s'] / 1e6:.2f} M |")
    return "\n".join(lines) + "\n"


REFERENCE_DIR = REPO_ROOT / ".reference-tokenizers"
#: The reference tokenizers ``make setup`` unpacks (name -> file).
REFERENCES = {"qwen": REFERENCE_DIR / "qwen.tiktoken", "tekken": REFERENCE_DIR / "tekken_240911.json"}
#: ``../shared/corpus`` files -> the source names of configs/default.yaml (as ``bench.bench_config``).
SOURCES = {"dev-fortunes": "web", "dev-manpages": "manuals", "dev-kjv": "books", "dev-debref": "reference",
           "dev-code": "code"}
#: The languages of ``../shared/corpus`` (the held-out figure is per language).
LANGS = ("zh", "en", "de", "fr", "ja", "ru", "es")


def _partitions(corpus: Path, out: Path, docs_per_part: int = 5000):
    """The corpus as stage-input partitions (``id``, ``source``, ``text``,
    ``chars``, ``lang_hint`` = the record's ``lang``, ``keep``), one file
    per ``docs_per_part`` records: the language comes from the package, as
    after language ID, and no filter runs (the bench measures the sample, not
    the filters)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from stages.base import Partitions

    out.mkdir(parents=True, exist_ok=True)
    paths, rows = [], []

    def flush():
        if rows:
            path = out / f"part-{len(paths):05d}.parquet"
            pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), path)
            paths.append(path)
            rows.clear()

    for stem, source in SOURCES.items():
        with open(corpus / f"{stem}.jsonl.zst", "rb") as fh:
            for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
                rec = json.loads(line)
                text = rec.get("text") or ""
                rows.append({"id": f"{source}:{rec['id']}", "source": source, "text": text, "chars": len(text),
                             "lang_hint": "code" if source == "code" else rec.get("lang"), "keep": True})
                if len(rows) >= docs_per_part:
                    flush()
        flush()
    return Partitions(paths, mapper=lambda fn, items: [fn(x) for x in items])


def heldout_docs(multi: Path, langs=LANGS) -> list[dict]:
    """Gold-labelled records of the held-out part of ``multi``
    (``../shared/corpus-multi``) in ``langs`` (``bench.multi_split``), as
    report documents."""
    from bench.multi_split import gold, records

    return [{"text": r["text"], "lang": gold(r), "source": r["file"]} for r in records("heldout", multi)
            if r.get("text") and gold(r) in langs]


def run_shares(out_dir: Path, vocab_size: int = 32768, train_max_chars: int = 20_000_000,
               corpus: Path = SHARED, seed: int = 1234, multi: Path | None = None,
               zh_share: float | None = 0.3) -> str:
    """Old sampling (the corpus's own mix) against the new default (the
    mixture's target shares) and, with ``zh_share``, language shares that
    raise Chinese to that share of the sample (the other languages keep their
    corpus proportions): the training sample's realised language shares and
    characters per token per language on held-out documentation, beside the
    reference tokenizers. Writes ``out_dir/tokenizer_shares.json``; returns a
    Markdown section. Trains two or three tokenizers (minutes each at 20 M
    characters on 2 loaded cores)."""
    import copy

    import yaml

    from bench.multi_split import MULTI
    from pipeline.config import parse_config
    from pipeline.tokenizer_report import comparison_lines, run_report
    from stages.tokenize import sample_shares, training_sample

    multi = Path(multi or MULTI)
    if not corpus.is_dir() or not multi.is_dir():
        return "## Tokenizer sample shares\n\nskipped: no ../shared/corpus or ../shared/corpus-multi\n"
    out_dir = Path(out_dir)
    work = out_dir / "tokenizer-shares"
    parts = _partitions(corpus, work / "parts")
    default = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    variants = {}
    runs = [("old: corpus mix", {"train_source_weights": "corpus"}),
            ("new: mixture.weights", {"train_source_weights": None})]
    if zh_share is not None:
        runs.append((f"zh {zh_share:.0%}: train_language_weights", None))
    for name, keys in runs:
        if keys is None:  # the corpus's language mix with zh raised to zh_share
            avail: dict = {}
            for key, chars in variants["old: corpus mix"]["available"].items():
                lang = key.split("\0")[1]
                avail[lang] = avail.get(lang, 0) + chars
            rest = sum(c for lang, c in avail.items() if lang != "zh")
            keys = {"train_source_weights": "corpus", "train_language_weights": {
                lang: round(zh_share if lang == "zh" else (1 - zh_share) * c / rest, 6)
                for lang, c in sorted(avail.items())}}
        data = copy.deepcopy(default)
        data["tokenize"] = {**data.get("tokenize", {}), "vocab_size": vocab_size,
                            "train_max_chars": train_max_chars, **keys}
        config = parse_config(data, "bench").tokenize  # the build's own resolution of the default
        counts: dict = {}
        t0 = time.perf_counter()
        tok = train_bpe(training_sample(parts, config, seed, counts, work / "spill"), config)
        path = work / f"{name.split(':')[0]}-{vocab_size}.json"
        tok.save(str(path))
        shares = sample_shares(counts, config)
        variants[name] = {"tokenizer": str(path), "train_s": round(time.perf_counter() - t0, 1),
                          "sample_chars": counts["chars"], "available": counts["available"],
                          "language_weights": shares["language_weights"],
                          "source_weights": shares["source_weights"],
                          "by_language": shares["by_language"], "by_source": shares["by_source"]}
    docs = heldout_docs(multi)
    refs = {n: p for n, p in REFERENCES.items() if p.is_file()}
    report = run_report({**{n: Path(v["tokenizer"]) for n, v in variants.items()}, **refs}, docs,
                        references=list(refs))
    cpt = {n: {lang: t["metrics"]["language"][lang]["chars_per_token"] for lang in t["metrics"]["language"]}
           for n, t in report["tokenizers"].items()}
    fallback = {n: {lang: t["metrics"]["language"][lang]["byte_fallback_rate"]
                    for lang in t["metrics"]["language"]} for n, t in report["tokenizers"].items()}
    result = {"vocab_size": vocab_size, "train_max_chars": train_max_chars, "seed": seed,
              "heldout": report["corpus"], "variants": variants, "chars_per_token": cpt,
              "byte_fallback_rate": fallback, "references": {n: str(p) for n, p in refs.items()},
              "comparison": comparison_lines(report)}
    (out_dir / "tokenizer_shares.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    langs = [lang for lang in LANGS if lang in report["corpus"]["languages"]]
    lines = ["## Tokenizer sample shares", "",
             f"{vocab_size:,}-token BPE trained on ../shared/corpus (train_max_chars {train_max_chars:,}, seed "
             f"{seed}); characters per token on the held-out part of ../shared/corpus-multi (gold-labelled "
             f"records, {report['corpus']['documents']:,} documents, {report['corpus']['chars']:,} characters).",
             "", "| tokenizer | sample zh share | " + " | ".join(langs) + " |",
             "|---|---:|" + "---:|" * len(langs)]
    for n in report["tokenizers"]:
        zh = variants[n]["by_language"].get("zh", {}).get("realised_share") if n in variants else None
        lines.append(f"| {n} | {'-' if zh is None else f'{100 * zh:.1f}%'} | "
                     + " | ".join(f"{cpt[n].get(lang, 0):.3f}" for lang in langs) + " |")
    missing = sorted(set(REFERENCES) - set(refs))
    if missing:
        lines += ["", f"reference tokenizers absent (make setup unpacks them): {', '.join(missing)}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-mb", type=int, default=100)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="with --train-mb 0: encode with this tokenizer.json")
    parser.add_argument("--shares", action="store_true", help="only the sample-shares comparison (run_shares)")
    parser.add_argument("--train-max-chars", type=int, default=20_000_000, help="with --shares")
    parser.add_argument("--corpus", type=Path, default=SHARED, help="the development corpus")
    parser.add_argument("--multi", type=Path, default=None, help="with --shares: ../shared/corpus-multi")
    parser.add_argument("--zh-share", type=float, default=0.3, help="with --shares: the third variant's zh share")
    a = parser.parse_args()
    if a.shares:
        print(run_shares(a.out, a.vocab_size, a.train_max_chars, a.corpus, multi=a.multi, zh_share=a.zh_share))
    else:
        print(run(a.out, a.train_mb, a.vocab_size, a.corpus, tokenizer=a.tokenizer))
