"""Held-out precision and recall of the quality classifier stage (issue 18) on
real splits of ``../shared/corpus``.

Runs the stage's own ``fit`` (sample, fastText training with
tools/bin/fasttext, held-out scoring with fasttext-predict) on document
tables written from the development corpus, with the stage's defaults unless
a row says otherwise, and prints one table row per experiment:

* ``kjv-salad``: King James chapters (reference) against the word salad of
  the same chapters (negatives: the words of each line shuffled, seeded by
  the id). The chapters of the bundled sample (data/sample, on which epoch,
  lr and chunk_words were chosen) are left out: 1,039 chapters the defaults
  were not tuned on.
* ``manpages-salad``: man pages in six languages and their word salad
  (rjieba words for zh), every 4th page.
* ``manpages-vs-fortunes``: man pages (documentation) against fortunes
  (quotes, jokes, poems) in de/ru/es/zh, the kind of split a user names a
  reference for; multilingual and ``per_language`` (language from the
  record, as langid would give it).

    PYTHONPATH=$PWD .venv/bin/python -m bench.quality_classifier [--only NAME] [--corpus DIR]

About two minutes on one core. Writes nothing but a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import gzip
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.corpus import records
from bench.multi import shuffle_words
from pipeline.config import REPO_ROOT
from stages.base import Partitions, StageContext
from stages.quality_classifier import QualityClassifierStage
from stages.quality_classifier.config import Config

CORPUS = REPO_ROOT.parent / "shared" / "corpus"
TOOLS = REPO_ROOT / "tools" / "bin"
PART_DOCS = 2000


def _sample_kjv_ids() -> set[str]:
    with gzip.open(REPO_ROOT / "data" / "sample" / "books-kjv.jsonl.gz", "rt", encoding="utf-8") as fh:
        return {json.loads(line)["meta"]["orig_id"] for line in fh}


def _salad_lang(lang: str) -> str:
    return "zh" if lang.startswith("zh") else lang


def _rows(name: str, corpus: Path) -> list[tuple[str, str, str, str]]:
    """``(id, source, lang, text)``; source ``reference`` or ``corpus``."""
    rows = []
    if name == "kjv-salad":
        skip = _sample_kjv_ids()
        for _, _, rec in records(corpus, ("dev-kjv",)):
            if rec["id"] in skip:
                continue
            rows.append((rec["id"], "reference", "en", rec["text"]))
            rows.append(("salad:" + rec["id"], "corpus", "en", shuffle_words(rec["text"], "en", rec["id"])))
    elif name == "manpages-salad":
        for _, line, rec in records(corpus, ("dev-manpages",)):
            if line % 4:
                continue
            rows.append((rec["id"], "reference", rec["lang"], rec["text"]))
            rows.append(("salad:" + rec["id"], "corpus", rec["lang"],
                         shuffle_words(rec["text"], _salad_lang(rec["lang"]), rec["id"])))
    elif name.startswith("manpages-vs-fortunes"):
        for _, _, rec in records(corpus, ("dev-manpages", "dev-fortunes")):
            if rec["lang"] in ("de", "ru", "es", "zh"):
                rows.append((rec["id"], "reference" if rec["source"] == "manpages" else "corpus", rec["lang"],
                             rec["text"]))
    return rows


def _partitions(rows, root: Path) -> list[Path]:
    paths = []
    for k in range(0, len(rows), PART_DOCS):
        chunk = rows[k:k + PART_DOCS]
        path = root / f"part-{k // PART_DOCS:05d}.parquet"
        pq.write_table(pa.table({
            "id": [r[0] for r in chunk], "source": [r[1] for r in chunk], "file": ["f"] * len(chunk),
            "line": pa.array(range(len(chunk)), pa.int64()), "text": [r[3] for r in chunk],
            "meta": ["{}"] * len(chunk), "lang_hint": pa.array([None] * len(chunk), pa.string()),
            "chars": pa.array([len(r[3]) for r in chunk], pa.int64()), "langid_lang": [r[2] for r in chunk]}),
            path)
        paths.append(path)
    return paths


def _local_map(fn, items):
    return [fn(item) for item in items]


EXPERIMENTS = {
    "kjv-salad": {},
    "kjv-salad one line per document": {"chunk_words": 10_000},
    "kjv-salad epoch 5 lr 0.1 (fastText defaults)": {"epoch": 5, "lr": 0.1},
    "kjv-salad dim 100 bucket 2M (fastText defaults)": {"dim": 100, "bucket": 2_000_000},
    "manpages-salad": {},
    "manpages-vs-fortunes": {},
    "manpages-vs-fortunes 1 negative per positive": {"negatives_per_positive": 1.0},
    "manpages-vs-fortunes 3 negatives per positive": {"negatives_per_positive": 3.0},
    "manpages-vs-fortunes per_language": {"per_language": True},
}


def run(name: str, overrides: dict, root: Path, corpus: Path) -> None:
    base = name.split(" ")[0]
    parts = root / base
    if not parts.exists():
        parts.mkdir()
        _partitions(_rows(base, corpus), parts)
    paths = sorted(parts.glob("part-*.parquet"))
    cfg = Config(enabled=True, reference_source="reference", **overrides)
    work = Path(tempfile.mkdtemp(dir=root))
    stage = QualityClassifierStage(cfg, StageContext(work_dir=work, cache_dir=root / "cache", seed=1234,
                                                     tools_dir=TOOLS))
    start = time.perf_counter()
    fit = stage.fit(Partitions(paths, _local_map))
    seconds = time.perf_counter() - start
    for key, model in sorted(fit.facts["models"].items()):
        at_half = model["held_out_pr"][0]
        applied = model["held_out_pr"][-1]
        size = (work / ("model-all.bin" if key == "*" else f"model-{key}.bin")).stat().st_size / 2 ** 20
        print(f"| {name} | {key} | {model['train']['positives']:,} / {model['train']['negatives']:,} | "
              f"{at_half['positives']} / {at_half['negatives']} | {model['held_out_auc']} | "
              f"{at_half['precision']} / {at_half['recall']} | "
              f"{applied['threshold']:.2g} ({model['held_out_corpus_dropped']:.1%}) | "
              f"{applied['precision']} / {applied['recall']} | {size:.0f} | "
              f"{seconds:.0f} |", flush=True)
    for key, why in fit.facts["skipped"].items():
        print(f"| {name} | {key} | skipped: {why} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="experiment name (repeatable)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the development corpus (../shared/corpus)")
    args = parser.parse_args()
    if not (args.corpus / "dev-kjv.jsonl.zst").is_file():
        parser.error(f"{args.corpus}: no dev-kjv.jsonl.zst (pass --corpus)")
    print("| experiment | model | train ref / corpus docs | held-out ref / corpus | AUC | P / R at 0.5 | "
          "threshold p10 (corpus dropped) | P / R at it | model MiB | fit s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in EXPERIMENTS.items():
            if args.only and name not in args.only:
                continue
            run(name, overrides, Path(tmp), args.corpus)


if __name__ == "__main__":
    main()
