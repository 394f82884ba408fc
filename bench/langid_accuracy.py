"""Language-ID accuracy: the langid stage against the bare lid.176 model.

Two data sets:

* ``multi``: the gold records (:func:`bench.multi_split.gold`) of one part of
  ``../shared/corpus-multi`` (``--part dev`` by default; the held-out part is
  the lead's, measured once at the end). Right = :func:`bench.multi_split.correct`.
* ``corpus``: the prose documents of ``../shared/corpus`` against the
  corpus's own ``lang`` label (agreement, not accuracy: e.g. ROT13 fortunes
  labelled ``es``).

The bare model is lid.176 ``predict`` (k=1) on each whole document with its
whitespace folded (``" ".join(text.split())``), its label merged the way
the stage merges it (``yue``/``wuu`` -> ``zh``).

    .venv/bin/python -m bench.langid_accuracy [--part dev] [--corpus-limit N]

Prints Markdown tables: per source, per language, documents >= 200
characters, overall; stage and model side by side.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import pyarrow as pa

from bench.multi_split import correct, gold, records
from stages.base import StageContext
from stages.lang_codes import canonical

LONG_CHARS = 200


def bare_label(text: str) -> str | None:
    """lid.176's k=1 label for the whole document, whitespace folded,
    Chinese labels merged; None for a document without text."""
    from stages.langid import CHINESE_LABELS, load_model

    flat = " ".join(text.split())
    if not flat:
        return None
    (_, label), = load_model().f.predict(flat + "\n", 1, 0.0, "replace")
    code = label[len("__label__"):]
    return CHINESE_LABELS.get(code, code)


def _table(rows: list[dict]) -> pa.Table:
    n = len(rows)
    return pa.table({
        "id": [r["id"] for r in rows], "source": [r["source"] for r in rows],
        "file": [r.get("file", "f") for r in rows], "line": pa.array(range(1, n + 1), pa.int64()),
        "text": [r["text"] for r in rows], "meta": ["{}"] * n,
        "lang_hint": pa.array([None] * n, pa.string()),
    })


def stage_labels(rows: list[dict], config: dict | None = None) -> tuple[list[str | None], float]:
    """The stage's ``langid_lang`` per row and its CPU seconds."""
    import tempfile

    from stages import langid

    with tempfile.TemporaryDirectory() as tmp:
        ctx = StageContext(work_dir=tmp, cache_dir=tmp, seed=0, tools_dir=tmp)
        stage = langid.LangIdStage(langid.Config(**(config or {})), ctx)
        out, t0 = [], time.process_time()
        for start in range(0, len(rows), 2000):
            out += stage.process(_table(rows[start:start + 2000]))["langid_lang"].to_pylist()
        return out, time.process_time() - t0


def score(rows: list[dict], golds: list[str], stage: list, bare: list, key) -> dict:
    """``{group: [n, stage right, bare right]}`` by ``key(row)``."""
    table: dict = defaultdict(lambda: [0, 0, 0])
    for row, g, s, b in zip(rows, golds, stage, bare):
        for k in key(row):
            cell = table[k]
            cell[0] += 1
            cell[1] += correct(s, g)
            cell[2] += correct(b, g)
    return dict(table)


def markdown(title: str, table: dict) -> str:
    lines = [f"| {title} | docs | stage | bare | stage-bare |", "|---|---:|---:|---:|---:|"]
    for k in sorted(table, key=lambda k: (-table[k][0], k)):
        n, s, b = table[k]
        lines.append(f"| {k} | {n} | {s / n:.2%} | {b / n:.2%} | {s - b:+d} |")
    return "\n".join(lines)


def multi(part: str, config: dict | None = None) -> str:
    rows = [r for r in records(part) if gold(r)]
    golds = [gold(r) for r in rows]
    stage, cpu = stage_labels(rows, config)
    bare = [bare_label(r["text"]) for r in rows]
    every = score(rows, golds, stage, bare, lambda r: ["all"] + (
        [f">= {LONG_CHARS} chars"] if len(r["text"]) >= LONG_CHARS else []))
    out = [f"## corpus-multi {part}: {len(rows)} gold documents, stage {cpu:.1f} CPU s", "",
           markdown("set", every), "", markdown("source", score(rows, golds, stage, bare,
                                                                 lambda r: [r["source"]])),
           "", markdown("language", score(rows, golds, stage, bare, lambda r: [gold(r)]))]
    wrong = defaultdict(int)
    for g, s in zip(golds, stage):
        if not correct(s, g):
            wrong[f"{g}->{s}"] += 1
    out += ["", "stage errors: " + ", ".join(f"{k} {v}" for k, v in
                                             sorted(wrong.items(), key=lambda kv: -kv[1])[:30])]
    return "\n".join(out)


def _rewrap(text: str, width: int) -> str:
    """``text`` folded, then broken into lines of at most ``width``
    characters at spaces (hard cuts in text without spaces), no blank line."""
    words, lines, line = " ".join(text.split()).split(" "), [], ""
    for word in words:
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return "\n".join(lines)


SHAPES = {
    "as is": lambda t: t,
    "no blank lines": lambda t: "\n".join(line for line in t.splitlines() if line.strip()),
    "rows of <= 40 chars": lambda t: _rewrap(t, 40),
    "one line": lambda t: " ".join(t.split()),
}


def shapes(part: str, config: dict | None = None) -> str:
    """The gold records of ``part`` re-shaped (:data:`SHAPES`); the bare
    model reads the same folded text for every shape."""
    rows = [r for r in records(part) if gold(r)]
    golds = [gold(r) for r in rows]
    bare = [bare_label(r["text"]) for r in rows]
    table = {}
    for name, shape in SHAPES.items():
        shaped = [{**r, "text": shape(r["text"])} for r in rows]
        stage, _ = stage_labels(shaped, config)
        table[name] = score(rows, golds, stage, bare, lambda r: ["x"])["x"]
    return "\n".join([f"## corpus-multi {part}, gold documents re-shaped", "", markdown("shape", table)])


def mixed(part: str, config: dict | None = None) -> str:
    """Partly untranslated pages: ``MAX_EN_IDENTICAL < en_identical_frac <=
    0.4`` (most of the prose in the record's language, gold = that)."""
    from bench.multi_split import MAX_EN_IDENTICAL

    rows = [r for r in records(part) if r["lang"] not in ("en", "he")
            and MAX_EN_IDENTICAL < ((r.get("meta") or {}).get("en_identical_frac") or 0) <= 0.4]
    golds = [r["lang"] for r in rows]
    stage, _ = stage_labels(rows, config)
    bare = [bare_label(r["text"]) for r in rows]
    return "\n".join([f"## corpus-multi {part}, mixed pages (untranslated share 0.1-0.4): {len(rows)}",
                      "", markdown("language", score(rows, golds, stage, bare, lambda r: [r["lang"]]))])


def short_cjk(part: str, config: dict | None = None) -> str:
    """Lines of 2-30 characters of the zh/ja/ko gold records, at least half
    of their letters Han/kana/hangul (gold = the record's language)."""
    import re

    cjk = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
    rows = []
    for r in records(part):
        if gold(r) not in ("zh", "ja", "ko"):
            continue
        for line in dict.fromkeys(r["text"].splitlines()):
            line = line.strip()
            letters = sum(map(str.isalpha, line))
            if 2 <= len(line) <= 30 and letters and len(cjk.findall(line)) * 2 >= letters:
                rows.append({**r, "id": f"{r['id']}#{len(rows)}", "text": line})
    golds = [gold(r) for r in rows]
    stage, _ = stage_labels(rows, config)
    bare = [bare_label(r["text"]) for r in rows]
    return "\n".join([f"## corpus-multi {part}, short CJK lines (2-30 chars): {len(rows)}", "",
                      markdown("language", score(rows, golds, stage, bare, lambda r: [gold(r)]))])


def corpus(limit: int | None, config: dict | None = None) -> str:
    from bench.quality import CORPUS, load_corpus

    table = load_corpus(CORPUS, limit)
    rows = [r for r in table.to_pylist() if r["lang_hint"] is None]
    golds = [canonical(r["label"]) for r in rows]
    stage, cpu = stage_labels(rows, config)
    t0 = time.process_time()
    bare = [bare_label(r["text"]) for r in rows]
    bare_cpu = time.process_time() - t0
    chars = sum(len(r["text"]) for r in rows)
    out = [f"## ../shared/corpus: {len(rows)} prose documents, {chars / 1e6:.1f} M chars; stage "
           f"{cpu:.1f} CPU s ({len(rows) / cpu:,.0f} docs/s), bare model {bare_cpu:.1f} s "
           f"({len(rows) / bare_cpu:,.0f} docs/s)", "",
           markdown("source/label", score(rows, golds, stage, bare,
                                          lambda r: [f"{r['source']}/{r['label']}"]))]
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="dev", choices=("dev", "heldout"))
    ap.add_argument("--corpus-limit", type=int, default=None)
    ap.add_argument("--skip-multi", action="store_true")
    ap.add_argument("--skip-corpus", action="store_true")
    ap.add_argument("--extra", action="store_true", help="also shapes, mixed pages, short CJK")
    args = ap.parse_args()
    if not args.skip_multi:
        print(multi(args.part))
    if args.extra:
        print(shapes(args.part), mixed(args.part), short_cjk(args.part), sep="\n\n")
    if not args.skip_corpus:
        print(corpus(args.corpus_limit))
