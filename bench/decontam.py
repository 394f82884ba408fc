"""Decontamination benchmark: precision and recall of the decontaminate
stage on planted benchmark items, and its speed per core.

Planted set: every item of the bundled eval sets (``data/evalsets``: GSM8K
and HumanEval in English, GAOKAO-Bench multiple choice in Chinese), each
inserted at a paragraph break of a real host document in four variants:
``verbatim``; ``punctuation`` (ASCII punctuation made full-width, full-width
made ASCII); ``one_word`` (one unit in the middle of the item replaced: a
word for English and code, a character for Chinese); ``question_only``
(GSM8K's question without the worked answer, GAOKAO's stem without its
options, HumanEval's prompt without the solution). Negatives: host documents
alone; hosts quoting items of the same benchmarks that are NOT in the index
(``bench/data/decontam``); hosts with only the eval sets' common phrases
(grams in at least 3 items: ``下列有关...的叙述，正确的是``).

Split, fixed before any tuning: an item is held out when the first 8 hex
digits of ``sha256("decontam-split-v1:<set>:<id>")`` are even (about half);
hosts of the dev part come from ``../shared/corpus`` (zh: fortunes,
debref, man pages; en: fortunes, KJV, debref), hosts of the held-out part
from the held-out part of ``../shared/corpus-multi``
(:func:`bench.multi_split.held_out`). The gram lengths and coverage were
chosen on the dev part (``--part dev``); ``make bench`` reports the held-out
part. Every eval item is in the index in both parts (the stage cannot know
which are held out); scores count only the part's own planted items.

Scoring (item level): a planted document is a true positive when its hits
include the planted item's id; every hit naming another item, and every hit
in a negative document, is a false positive. Precision = right hits / all
hits; recall = planted documents found / planted documents.

    .venv/bin/python -m bench.decontam [--part heldout|dev] [--grid]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared"
SPLIT_SALT = "decontam-split-v1:"
EVAL_SETS = {  # name -> (file stem, fields, language, question-only field)
    "gsm8k": ("gsm8k", ["question", "answer"], "en"),
    "humaneval": ("humaneval", ["prompt", "canonical_solution"], "en"),
    "gaokao_mcq": ("gaokao_mcq", ["question"], "zh"),
}
VARIANTS = ("verbatim", "punctuation", "one_word", "question_only")
HOST_MIN, HOST_MAX = 400, 4000
_ASCII_PUNCT = ",.?!:;()[]=+-*/#%<>\"'"
_TO_FULL = {c: chr(ord(c) + 0xFEE0) for c in _ASCII_PUNCT}
_TO_HALF = {chr(ord(c) + 0xFEE0): c for c in _ASCII_PUNCT} | {"。": ".", "、": ",", "（": "(", "）": ")"}
_OPTION_RE = re.compile(r"\s*A\s*[．.、]")


def held_out(set_name: str, item_id: str) -> bool:
    """Whether an item is in the held-out part (about half, by a salted sha256)."""
    digest = hashlib.sha256(f"{SPLIT_SALT}{set_name}:{item_id}".encode()).hexdigest()
    return int(digest[:8], 16) % 2 == 0


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def item_text(set_name: str, rec: dict, variant: str, rng: random.Random) -> str:
    """The text planted for one item and variant (see the module docstring)."""
    fields = EVAL_SETS[set_name][1]
    if variant == "question_only":
        if set_name == "gaokao_mcq":
            q = rec["question"]
            m = _OPTION_RE.search(q)
            return q[:m.start()] if m else q
        return rec[fields[0]]
    text = "\n".join(rec[f] for f in fields)
    if variant == "punctuation":
        return "".join(_TO_FULL.get(c, _TO_HALF.get(c, c)) for c in text)
    if variant == "one_word":
        from stages.decontaminate.normalize import UNIT_RE

        spans = [m.span() for m in UNIT_RE.finditer(text)]
        lo, hi = len(spans) // 3, max(len(spans) // 3 + 1, 2 * len(spans) // 3)
        s, e = spans[rng.randrange(lo, hi)]
        word = text[s:e]
        new = "换" if len(word) == 1 and ord(word) > 0x2E80 else ("zebra" if word.lower() != "zebra" else "lion")
        return text[:s] + new + text[e:]
    return text


def _zst_records(path: Path):
    import zstandard

    with open(path, "rb") as fh:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
            yield json.loads(line)


def hosts(part: str, per_lang: int, seed: int = 0, shared: Path = SHARED) -> dict[str, list[str]]:
    """Host documents by language (``en``, ``zh``) of ``part``: texts of
    HOST_MIN..HOST_MAX characters (longer ones cut at a line break), at
    most ``per_lang`` each, a seeded draw."""
    out: dict[str, list[str]] = {"en": [], "zh": []}
    if part == "dev":
        recs = []
        for stem in ("dev-fortunes", "dev-debref", "dev-kjv", "dev-manpages"):
            recs += [r for r in _zst_records(shared / "corpus" / f"{stem}.jsonl.zst") if r.get("lang") in out]
    else:
        from bench.multi_split import records

        # every zh page of the held-out part, partly untranslated ones included
        # (only ~16 held-out zh pages of 400+ chars are mostly Chinese)
        recs = [r for r in records("heldout", shared / "corpus-multi") if r.get("lang") in out]
    rng = random.Random(seed)
    rng.shuffle(recs)
    for r in recs:
        text = r["text"]
        if len(text) < HOST_MIN or len(out[r["lang"]]) >= per_lang:
            continue
        if len(text) > HOST_MAX:
            cut = text.rfind("\n", 0, HOST_MAX)
            text = text[:cut if cut > HOST_MIN else HOST_MAX]
        out[r["lang"]].append(text)
    return out


def plant(host: str, insert: str, rng: random.Random) -> str:
    """``insert`` as its own paragraph at a random line break of ``host``."""
    breaks = [m.end() for m in re.finditer("\n", host)] or [len(host)]
    at = rng.choice(breaks)
    return host[:at] + "\n" + insert + "\n" + host[at:]


def common_phrases(eval_root: Path, min_items: int = 3, n: int = 8) -> dict[str, list[str]]:
    """Phrases in at least ``min_items`` items of an eval set (by language):
    the most frequent character n-grams of their normalised text, as written
    in the first item holding them."""
    out: dict[str, list[str]] = {"en": [], "zh": []}
    for name, (stem, fields, lang) in EVAL_SETS.items():
        counts: Counter = Counter()
        first: dict[str, str] = {}
        for rec in _read_jsonl(eval_root / "data" / "evalsets" / f"{stem}.jsonl"):
            text = rec[fields[0]]
            size = n if lang == "zh" else 4 * n
            grams = {text[i:i + size] for i in range(0, max(0, len(text) - size))}
            for g in grams:
                if "\n" not in g and g.strip() == g:
                    counts[g] += 1
                    first.setdefault(g, g)
        out[lang] += [g for g, c in counts.most_common(12) if c >= min_items][:6]
    return out


def make_documents(part: str, eval_root: Path, seed: int = 0, host_count: int = 300,
                   shared: Path = SHARED) -> list[dict]:
    """The documents of ``part``: ``{"text", "kind", "lang", "variant",
    "item"}`` (``item``: ``set:id`` planted, else None), in a seeded order."""
    rng = random.Random(f"{seed}:{part}")
    host = hosts(part, host_count, seed, shared)
    docs: list[dict] = []
    cursor = {"en": 0, "zh": 0}

    def next_host(lang: str) -> str:
        text = host[lang][cursor[lang] % len(host[lang])]
        cursor[lang] += 1
        return text

    for name, (stem, _, lang) in EVAL_SETS.items():
        for rec in _read_jsonl(eval_root / "data" / "evalsets" / f"{stem}.jsonl"):
            if held_out(name, rec["id"]) != (part == "heldout"):
                continue
            for variant in VARIANTS:
                docs.append({"text": plant(next_host(lang), item_text(name, rec, variant, rng), rng),
                             "kind": "planted", "lang": lang, "variant": variant, "item": f"{name}:{rec['id']}"})
        negatives = eval_root / "bench" / "data" / "decontam" / f"{stem}_negatives.jsonl"
        for rec in _read_jsonl(negatives) if negatives.exists() else []:
            if held_out(name, rec["id"]) != (part == "heldout"):
                continue
            docs.append({"text": plant(next_host(lang), item_text(name, rec, "verbatim", rng), rng),
                         "kind": "other_items", "lang": lang, "variant": "verbatim", "item": None})
    for lang, texts in host.items():
        for text in texts:
            docs.append({"text": text, "kind": "host", "lang": lang, "variant": None, "item": None})
    for lang, phrases in common_phrases(eval_root).items():
        for i in range(100):
            picked = rng.sample(phrases, min(3, len(phrases)))
            text = next_host(lang)
            for p in picked:
                text = plant(text, p, rng)
            docs.append({"text": text, "kind": "common_phrases", "lang": lang, "variant": None, "item": None})
    return docs


def eval_config(eval_root: Path, **overrides) -> dict:
    """The stage config of the benchmark: the three bundled eval sets."""
    sets = {name: {"path": str(eval_root / "data" / "evalsets" / f"{stem}.jsonl"), "fields": fields,
                   "id_field": "id"} for name, (stem, fields, _) in EVAL_SETS.items()}
    return {"eval_sets": sets, "mode": "annotate", **overrides}


def run_stage(docs: list[dict], work: Path, config: dict) -> tuple[list[list[dict]], dict, float]:
    """fit (corpus frequency over these documents) + process in this process.
    Returns (spans per document, fit facts, process CPU seconds)."""
    from stages.base import Partitions, StageContext
    from stages.decontaminate import Config, DecontaminateStage

    work.mkdir(parents=True, exist_ok=True)
    n = len(docs)
    texts = [d["text"] for d in docs]
    part = work / "part-00000-00000.parquet"
    pq.write_table(pa.table({"id": [f"b:{i}" for i in range(n)], "source": ["bench"] * n, "text": texts,
                             "chars": pa.array([len(t) for t in texts], pa.int64())}), part)
    cfg = Config(**config)
    ctx = StageContext(work_dir=work / "work", cache_dir=work / "cache", seed=0, tools_dir=work)
    facts = DecontaminateStage(cfg, ctx).fit(Partitions([part], lambda fn, items: [fn(i) for i in items])).facts
    stage = DecontaminateStage(cfg, ctx)
    table = pq.read_table(part)
    t0 = time.process_time()
    out = stage.process(table)
    seconds = time.process_time() - t0
    return out["decontaminate_spans"].to_pylist(), facts, seconds


def score(docs: list[dict], spans: list[list[dict]], min_coverage: float = 0.0,
          min_matched_units: int = 10**9) -> dict[str, Any]:
    """Precision/recall by language and variant (and overall); hits with
    coverage below ``min_coverage`` and fewer than ``min_matched_units``
    matched units are dropped (a hit's coverage and matched units do not
    depend on the thresholds, so one low-threshold run scores them all)."""
    rows: dict[tuple[str, str], Counter] = {}

    def row(lang: str, variant: str) -> Counter:
        return rows.setdefault((lang, variant), Counter())

    for doc, hits in zip(docs, spans):
        found = {f"{h['eval_set']}:{h['item']}" for h in hits if h["coverage"] >= min_coverage
                 or h.get("matched", 0) >= min_matched_units}
        keys = [(doc["lang"], doc["variant"] if doc["kind"] == "planted" else doc["kind"]), (doc["lang"], "all"), ("all", "all")]
        for key in keys:
            r = row(*key)
            if doc["kind"] == "planted":
                r["planted"] += 1
                r["found"] += doc["item"] in found
                r["right_hits"] += doc["item"] in found
                r["wrong_hits"] += len(found - {doc["item"]})
            else:
                r["negative_docs"] += 1
                r["negative_docs_hit"] += bool(found)
                r["wrong_hits"] += len(found)
    out = {}
    for (lang, variant), r in sorted(rows.items()):
        hits = r["right_hits"] + r["wrong_hits"]
        out[f"{lang}/{variant}"] = {
            **dict(r), "precision": round(r["right_hits"] / hits, 4) if hits else None,
            "recall": round(r["found"] / r["planted"], 4) if r["planted"] else None}
    return out


def grid(eval_root: Path, work: Path, docs: list[dict], cjk_lengths=(5, 6, 8, 10, 13),
         coverages=(0.4, 0.5, 0.6, 0.7, 0.8), matched=(30, 40, 60, 10**9)) -> list[dict]:
    """Recall and precision per (CJK gram length, min_coverage,
    min_matched_units) on ``docs``: one run per gram length at thresholds
    low enough to keep every cluster, scored at each pair."""
    from stages.decontaminate import Config, DecontaminateStage
    from stages.decontaminate.match import find_hits
    from stages.decontaminate.stage import INDEX_DIR, _load

    out = []
    for n in cjk_lengths:
        config = eval_config(eval_root, ngram_cjk=n, min_coverage=0.05, min_matched_units=10**6)
        run_stage(docs[:1], work / f"grid-{n}", config)  # fit: the index
        index, lengths = _load(work / f"grid-{n}" / "work" / INDEX_DIR)
        cfg = Config(**config)
        spans = [[{"eval_set": h.eval_set, "item": h.item, "coverage": h.coverage, "matched": h.matched}
                  for h in find_hits(d["text"], index, cfg, lengths)] for d in docs]
        for c in coverages:
            for m in matched:
                s = score(docs, spans, c, m)
                out.append({"ngram_cjk": n, "min_coverage": c, "min_matched_units": m if m < 10**9 else None,
                            **{k: {"precision": s[k]["precision"], "recall": s[k]["recall"]}
                               for k in ("zh/all", "en/all", "all/all", "zh/question_only", "en/question_only",
                                         "zh/one_word") if k in s}})
    return out


def short_items_grid(work: Path, docs: list[dict], eval_root: Path, part: str = "dev",
                     lengths=(4, 5, 6, 8, 10, 13)) -> list[dict]:
    """Why Chinese needs a shorter gram: GAOKAO question stems alone (their
    options cut off: 10-60 characters, the length of a C-Eval question) as
    the eval items, planted verbatim and with one character changed into the
    zh hosts of ``docs``; recall by stem length and false hits on the zh
    negatives of ``docs`` (hosts, common phrases, other items), per CJK gram
    length, at the default coverage rule."""
    from stages.decontaminate.normalize import units

    rng = random.Random(f"short:{part}")
    stems = []
    for rec in _read_jsonl(eval_root / "data" / "evalsets" / "gaokao_mcq.jsonl"):
        if held_out("gaokao_mcq", rec["id"]) != (part == "heldout"):
            continue
        stem = item_text("gaokao_mcq", rec, "question_only", rng)
        n_units = len(units(stem)[0])
        if 10 <= n_units <= 60:
            stems.append({"id": rec["id"], "question": stem, "units": n_units})
    path = work / "stems.jsonl"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in stems), encoding="utf-8")
    zh_hosts = [d["text"] for d in docs if d["lang"] == "zh" and d["kind"] == "host"]
    planted = []
    for i, stem in enumerate(stems):
        for variant in ("verbatim", "one_word"):
            text = item_text("gaokao_mcq", stem, variant, rng) if variant == "one_word" else stem["question"]
            planted.append({"text": plant(zh_hosts[i % len(zh_hosts)], text, rng), "kind": "planted", "lang": "zh",
                            "variant": variant, "item": f"stems:{stem['id']}",
                            "short": "10-29 units" if stem["units"] < 30 else "30-60 units"})
    negatives = [d for d in docs if d["lang"] == "zh" and d["kind"] != "planted"]
    out = []
    for n in lengths:
        cfg = {"eval_sets": {"stems": {"path": str(path), "fields": ["question"], "id_field": "id"}},
               "mode": "annotate", "ngram_cjk": n}
        spans, _, _ = run_stage(planted + negatives, work / f"short-{n}", cfg)
        row: dict[str, Any] = {"ngram_cjk": n, "stems": len(stems)}
        for doc, hits in zip(planted, spans):
            key = f"{doc['variant']} {doc['short']}"
            got = row.setdefault(key, [0, 0])
            got[0] += doc["item"] in {f"stems:{h['item']}" for h in hits}
            got[1] += 1
        row["negative_docs_hit"] = sum(bool(h) for h in spans[len(planted):])
        row["negative_docs"] = len(negatives)
        out.append(row)
    return out


def run(out_dir: Path, part: str = "heldout", eval_root: Path = REPO_ROOT, tune: bool = False,
        shared: Path = SHARED) -> str:
    """Build the ``part`` documents, run the stage with its defaults, write
    ``out_dir/decontam.json`` and ``decontam.md``; return the Markdown."""
    import shutil
    import tempfile

    out_dir.mkdir(parents=True, exist_ok=True)
    need = shared / ("corpus" if part == "dev" else "corpus-multi")
    if not need.exists() or not (eval_root / "data" / "evalsets").exists():
        return f"## Decontamination\n\nSkipped: no {need} or no data/evalsets.\n"
    tmp = Path(tempfile.mkdtemp(prefix="bench-decontam-"))
    try:
        docs = make_documents(part, eval_root, shared=shared)
        spans, facts, seconds = run_stage(docs, tmp / "default", eval_config(eval_root))
        from stages.decontaminate import Config

        defaults = Config()
        table = score(docs, spans, 0.0)
        chars = sum(len(d["text"]) for d in docs)
        result: dict[str, Any] = {
            "part": part, "documents": len(docs), "chars": chars,
            "planted_items": len({d["item"] for d in docs if d["item"]}),
            "kinds": dict(Counter(d["kind"] for d in docs)),
            "config": {"ngram_words": defaults.ngram_words, "ngram_cjk": defaults.ngram_cjk,
                       "min_coverage": defaults.min_coverage, "min_field_units": defaults.min_field_units,
                       "min_field_grams": defaults.min_field_grams,
                       "min_matched_units": defaults.min_matched_units},
            "index": {k: facts[k] for k in ("items", "cjk_items", "too_short", "distinct_grams", "template_grams",
                                            "corpus_common_grams", "unmatchable_items")},
            "scores": table,
            "process_cpu_seconds": round(seconds, 3),
            "documents_per_s": round(len(docs) / seconds, 1), "chars_per_s": round(chars / seconds),
        }
        if tune:
            result["grid"] = grid(eval_root, tmp, docs)
            result["short_items"] = short_items_grid(tmp / "short", docs, eval_root, part)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    name = "decontam" if part == "heldout" else f"decontam-{part}"
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    md = [f"## Decontamination ({part} part)", "",
          f"{result['planted_items']} planted items x {len(VARIANTS)} variants, {len(docs):,} documents "
          f"({result['kinds']}), {chars:,} chars; ngram_cjk {defaults.ngram_cjk}, ngram_words "
          f"{defaults.ngram_words}, min_coverage {defaults.min_coverage}.", "",
          "| language | variant / negatives | planted | found | negative docs | negative docs hit | wrong hits | "
          "precision | recall |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, r in table.items():
        lang, variant = key.split("/")
        md.append(f"| {lang} | {variant} | {r.get('planted', 0)} | {r.get('found', 0)} | {r.get('negative_docs', 0)} "
                  f"| {r.get('negative_docs_hit', 0)} | {r.get('wrong_hits', 0)} | "
                  f"{'-' if r['precision'] is None else format(r['precision'], '.3f')} | "
                  f"{'-' if r['recall'] is None else format(r['recall'], '.3f')} |")
    md += ["", f"process(): {result['documents_per_s']:,} documents/s, {result['chars_per_s'] / 1e6:.2f} M chars/s "
           f"per core (CPU seconds of one process, {seconds:.2f} s)."]
    if tune:
        md += ["", "| ngram_cjk | min_coverage | min_matched_units | zh P | zh R | zh question-only R | "
               "zh one-word R | en P | en R | en question-only R |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for g in result["grid"]:
            md.append(f"| {g['ngram_cjk']} | {g['min_coverage']} | {g['min_matched_units'] or '-'} | "
                      f"{g['zh/all']['precision']} | {g['zh/all']['recall']} | {g['zh/question_only']['recall']} | "
                      f"{g['zh/one_word']['recall']} | {g['en/all']['precision']} | {g['en/all']['recall']} | "
                      f"{g['en/question_only']['recall']} |")
    if tune:
        keys = [k for k in result["short_items"][0] if k[0].isalpha() and " " in k]
        md += ["", f"Short items ({result['short_items'][0]['stems']} GAOKAO stems of 10-60 units as the eval set): "
               "recall found/planted, and zh negative documents hit", "",
               "| ngram_cjk | " + " | ".join(sorted(keys)) + " | negatives hit |",
               "|---:|" + "---:|" * (len(keys) + 1)]
        for r in result["short_items"]:
            md.append(f"| {r['ngram_cjk']} | " + " | ".join(f"{r[k][0]}/{r[k][1]}" for k in sorted(keys))
                      + f" | {r['negative_docs_hit']}/{r['negative_docs']} |")
    text = "\n".join(md) + "\n"
    (out_dir / f"{name}.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("heldout", "dev"), default="heldout")
    ap.add_argument("--grid", action="store_true", help="also the gram length x coverage grid (tuning: dev)")
    ap.add_argument("--eval-root", type=Path, default=REPO_ROOT)
    ap.add_argument("--shared", type=Path, default=SHARED, help="folder of corpus/ and corpus-multi/")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    args = ap.parse_args()
    print(run(args.out, args.part, args.eval_root, args.grid, args.shared))


if __name__ == "__main__":
    main()
