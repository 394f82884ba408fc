"""Tests for pipeline/layout.py: it is the one owner of a version directory's
file names (a literal elsewhere fails here), and its helpers give the names a
version has always had."""

import ast
from pathlib import Path

import pytest

from pipeline import layout

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("pipeline", "stages", "bench", "scripts")
# A literal equal to a layout name that is not a version-directory file: the
# file, the name and why it stays a literal.
ALLOWED = {
    ("stages/tokenize.py", "tokenizer.json"): "the stage's own fit file (work/tokenize/fit/); stages import "
                                              "nothing from pipeline/",
    ("bench/tokenizer.py", "tokenizer.json"): "the tokenizer benchmark's results file (bench-results/<bench>.json)",
}


def _layout_names() -> tuple[set[str], set[str], set[str]]:
    """(file names, folder names, suffixes) that pipeline/layout.py defines."""
    files = {layout.MANIFEST, layout.MANIFEST_DIGEST, layout.CONFIG, layout.TOKENIZER, layout.QUARANTINE,
             layout.REPORT, layout.RUN_LOG}
    files |= {f"{layout.TOKENIZER_REPORT_STEM}.{ext}" for ext in ("md", "json", "html")}
    folders = {layout.SHARDS, layout.LINEAGE, layout.LINEAGE_BY_DOC, layout.DOCUMENTS, layout.EXCERPTS,
               layout.DECISIONS, layout.TOKENIZER_REPORT_DIR, layout.SHIFTED, layout.MEGATRON}
    files |= {layout.table_file_v1(Path(), t).name
              for t in folders - {layout.SHARDS, layout.TOKENIZER_REPORT_DIR, layout.SHIFTED, layout.MEGATRON}}
    return files, folders, {layout.SHARD_SUFFIX, layout.SHARD_INDEX_SUFFIX}


def literal_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every version-directory name written as a literal in
    ``source``: a string equal to a file name or ending in ``/<file name>``;
    a folder name used as a path (``x / "documents"``, ``"documents/..."``,
    an f-string starting ``"documents/"``) or bound to a name of its own
    (``SHARD_DIR = "shards"``: a second definition); a string or f-string
    ending in a shard suffix (``.mindrecord``, ``.db``). Docstrings,
    dictionary keys and prose that merely contains a name are not literals of
    the layout."""
    files, folders, suffixes = _layout_names()
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    path_operands = {id(side) for node in ast.walk(tree) if isinstance(node, ast.BinOp)
                     and isinstance(node.op, ast.Div) for side in (node.left, node.right)}
    in_fstring = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    bound = {id(node.value) for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [p.value for p in node.values if isinstance(p, ast.Constant)]
            first, last = node.values[0], node.values[-1]
            if isinstance(first, ast.Constant) and first.value.split("/")[0] in folders and "/" in first.value:
                found.append((node.lineno, first.value.split("/")[0]))
            if isinstance(last, ast.Constant) and any(last.value.endswith(s) for s in suffixes):
                found.append((node.lineno, next(s for s in suffixes if last.value.endswith(s))))
            found += [(node.lineno, p) for p in parts if p in files]
            continue
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings \
                or id(node) in in_fstring:
            continue
        text = node.value
        if text in files or any(text.endswith("/" + f) for f in files):
            found.append((node.lineno, text))
        elif text in folders and (id(node) in path_operands or id(node) in bound):
            found.append((node.lineno, text))
        elif "/" in text and text.split("/")[0] in folders:
            found.append((node.lineno, text))
        elif any(text.endswith(s) for s in suffixes) and len(text) > 4:
            found.append((node.lineno, text))
    return sorted(found)


def test_the_scan_finds_each_kind_of_literal_and_nothing_else():
    source = '''
"""Docstring naming manifest.json and documents/ is prose."""
def f(vdir, manifest, path, stage):
    a = vdir / "manifest.json"
    b = vdir / "documents" / "part-00000.parquet"
    c = "shards/corpus-00000.mindrecord"
    d = f"{path}.db"
    e = f"decisions/{stage}"
    g = "corpora/v1/report.html"
    h = vdir / "lineage.parquet"
    ok = (manifest["shards"], {"documents": 3}, "see report.html for more", f"{stage}: no documents",
          vdir / layout.DOCUMENTS, "decisions")
    return a, b, c, d, e, g, h, ok
SHARD_DIR = "shards"
'''
    assert literal_names(source) == [(4, "manifest.json"), (5, "documents"), (6, "shards/corpus-00000.mindrecord"),
                                     (7, ".db"), (8, "decisions"), (9, "corpora/v1/report.html"),
                                     (10, "lineage.parquet"), (14, "shards")]


def test_no_version_file_name_is_written_outside_layout():
    offences = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "pipeline/layout.py" or "/data/" in rel:
                continue
            for line, name in literal_names(path.read_text(encoding="utf-8")):
                if (rel, name) not in ALLOWED:
                    offences.append(f"{rel}:{line}: {name!r}")
    assert not offences, ("version-directory names written as literals; use pipeline.layout's constants:\n"
                          + "\n".join(offences))


def test_names_a_version_has_always_had():
    assert layout.shard_name(0) == "shards/corpus-00000.mindrecord"
    assert layout.shard_name(12, "bench") == "shards/bench-00012.mindrecord"
    assert layout.shard_index(Path("v1/shards/corpus-00003.mindrecord")) == Path("v1/shards/corpus-00003.mindrecord.db")
    assert layout.part_name(7) == "part-00007.parquet"
    assert layout.table_file_v1(Path("v"), layout.LINEAGE) == Path("v/lineage.parquet")
    assert layout.table_file_v1(Path("v"), layout.DECISIONS, "dedup") == Path("v/decisions/dedup.parquet")
    assert layout.table_dir(Path("v"), layout.DECISIONS, "langid") == Path("v/decisions/langid")
    assert [layout.MANIFEST, layout.MANIFEST_DIGEST, layout.CONFIG, layout.TOKENIZER, layout.QUARANTINE,
            layout.REPORT, layout.RUN_LOG] == ["manifest.json", "manifest.sha256", "config.yaml", "tokenizer.json",
                                               "quarantine.jsonl", "report.html", "run.log.jsonl"]


@pytest.mark.parametrize("doc_id, parts, part", [
    ("web:data/sample/web-fortunes.jsonl.zst:17", 8, 1),
    ("wiki:zh.jsonl:3", 1024, 244),
])
def test_id_part_of_known_ids(doc_id, parts, part):
    # values from before id_part used common.hashing.id_hash (xxh64, seed "part")
    assert layout.id_part(doc_id, parts) == part
    assert layout.id_parts([doc_id, doc_id], parts).tolist() == [part, part]
