"""Dedup's Chinese script folding on zh_CN / zh_TW man-page twins: how many
twins dedup finds, the twins' character 5-gram Jaccard after folding, and how
many Simplified (zh_CN) pages folding changes.

    .venv/bin/python -m bench.script_fold [FILE.jsonl.zst ...] [--folds none t2s tw2sp]
        [--normalize char|phrase|phrase-tw]

Default files: ``../shared/corpus/dev-manpages.jsonl.zst`` (703 pairs) and
the sample's ``data/sample/manuals-manpages.jsonl.zst`` (40 pairs). A twin is
a zh_CN page and the zh_TW page of the same path (``meta.path`` with
``zh_CN`` -> ``zh_TW``; the zh_TW pages are OpenCC conversions of the zh_CN
ones). Dedup runs on the whole file (every language) with the package
language labels as ``langid_lang``; a twin is *found* when both pages end in
the same cluster. Uses only ``stages.dedup``'s public functions, so it runs
against an older tree too (``PYTHONPATH=<tree>``) for a before/after.
Prints one JSON object per file and fold.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = (REPO_ROOT.parent / "shared" / "corpus" / "dev-manpages.jsonl.zst",
                 REPO_ROOT / "data" / "sample" / "manuals-manpages.jsonl.zst")


def read_rows(path: Path) -> list[dict]:
    """``id``, ``source``, ``text``, ``lang`` (package label), ``script``
    (package label: ``Hans``/``Hant``) and ``path`` of
    every record of a ``.jsonl.zst`` file."""
    import zstandard

    rows = []
    with open(path, "rb") as fh:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
            rec = json.loads(line)
            meta = rec.get("meta") or {}
            rows.append({"id": rec.get("id") or f"{path.name}:{len(rows) + 1}", "source": "manpages",
                         "text": rec["text"], "lang": rec.get("lang") or meta.get("label_lang"),
                         "path": meta.get("path"), "script": rec.get("script") or meta.get("label_script")})
    return rows


def twins(rows: list[dict]) -> list[tuple[int, int]]:
    """Row index pairs (zh_CN, zh_TW) of the same man page path."""
    by_path = {r["path"]: i for i, r in enumerate(rows) if r["lang"] == "zh" and r["path"]}
    return [(i, by_path[p.replace("/zh_CN/", "/zh_TW/")]) for p, i in sorted(by_path.items())
            if "/zh_CN/" in p and p.replace("/zh_CN/", "/zh_TW/") in by_path]


def _shingles(text: str, n: int = 5) -> set[str]:
    text = text.replace(" ", "")
    return {text[i:i + n] for i in range(max(1, len(text) - n + 1))}


def normalize_first(rows: list[dict], normalize: str) -> None:
    """Run the ``script_normalize`` stage (``t2s``, ``level`` and ``region``
    from ``normalize``: ``char``, ``phrase`` or ``phrase-tw``) over the zh
    rows in place, as a build with the stage enabled does before dedup."""
    import pyarrow as pa

    from stages.script_normalize import Config, ScriptNormalizeStage

    level, _, region = normalize.partition("-")
    stage = ScriptNormalizeStage(Config(enabled=True, level=level, region=region or "none"), None)
    zh = [r for r in rows if r["lang"] == "zh"]
    out = stage.process(pa.table({"text": [r["text"] for r in zh], "chars": [len(r["text"]) for r in zh],
                                  "langid_lang": ["zh"] * len(zh)}))
    for r, text in zip(zh, out["text"].to_pylist()):
        r["text"] = text


def measure(path: Path, fold: str, work: Path, normalize: str | None = None) -> dict:
    """Twins found by dedup, twin Jaccard (median, pairs >= 0.8) and
    Simplified pages (package label ``Hans``) whose folded shingles differ
    from their unfolded ones; with ``normalize``, after the
    ``script_normalize`` stage (:func:`normalize_first`)."""
    from bench.dedup import run_dedup, write_partitions
    from stages.dedup import fold_script, near_normalize_batch

    rows = read_rows(path)
    if normalize:
        normalize_first(rows, normalize)
    pairs = twins(rows)
    hans = [i for i, r in enumerate(rows) if r["lang"] == "zh" and r["script"] == "Hans"]
    zh = sorted({i for pair in pairs for i in pair} | set(hans))
    normalized = near_normalize_batch([rows[i]["text"] for i in zh])
    folded = dict(zip(zh, fold_script(normalized, fold)))
    unfolded = dict(zip(zh, normalized))
    jaccards = []
    for a, b in pairs:
        sa, sb = _shingles(folded[a]), _shingles(folded[b])
        jaccards.append(len(sa & sb) / len(sa | sb))
    simplified_changed = [rows[i]["id"] for i in hans if _shingles(folded[i]) != _shingles(unfolded[i])]
    parts = write_partitions(rows, work / "parts")
    facts, out, _ = run_dedup(parts, work / "dedup", fold_chinese_script=fold)
    cluster = dict(zip(out["id"].to_pylist(), out["dedup_cluster"].to_pylist()))
    reason = dict(zip(out["id"].to_pylist(), out["reason"].to_pylist()))
    found = sum(1 for a, b in pairs if cluster[rows[a]["id"]] is not None
                and cluster[rows[a]["id"]] == cluster[rows[b]["id"]])
    zh_ids = {rows[i]["id"] for i in range(len(rows)) if rows[i]["lang"] == "zh"}
    return {"file": str(path), "fold": fold, "script_normalize": normalize, "pairs": len(pairs), "twins_found": found,
            "zh_near_removed": sum(1 for i in zh_ids if reason[i] == "dedup.near_duplicate"),
            "near_duplicates_all": facts["near_duplicates"],
            "jaccard_median": round(statistics.median(jaccards), 3),
            "pairs_jaccard_ge_0.8": sum(j >= 0.8 for j in jaccards),
            "simplified": len(hans), "simplified_changed": len(simplified_changed), "simplified_changed_ids": simplified_changed[:10]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, default=list(DEFAULT_FILES))
    ap.add_argument("--folds", nargs="*", default=["none", "t2s", "tw2sp"])
    ap.add_argument("--normalize", choices=("char", "phrase", "phrase-tw"),
                    help="run the script_normalize stage (t2s) before dedup")
    args = ap.parse_args()
    for path in args.files:
        for fold in args.folds:
            with tempfile.TemporaryDirectory() as tmp:
                print(json.dumps(measure(path, fold, Path(tmp), args.normalize), ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
