"""Stage tallies (``Stage.tally``) and record columns on real builds: a stage
that edits text and records its edits as list<struct>
(tests/pipeline/edits_stage.py, like ``pii``) and the documented example stage
docs/examples/digits_stage.py count per source; the manifest, report.html,
explain and lineage show it; the numbers equal what documents/ and
decisions/ of the version hold, with 1 and 2 workers and after a resume."""

from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.config import REPO_ROOT, ConfigError, parse_config

EXAMPLES = REPO_ROOT / "docs" / "examples"
HERE = Path(__file__).parent

PROSE = ["The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
         "A small boat drifted down the quiet river as the evening light faded behind the distant hills."]
# web: one e-mail and one year; two years and two e-mails; 3 digits of 66 non-space characters
# (under 10 %); a table whose three years are masked (36 digits of 72 non-space characters after
# the edits: dropped by digits, its edits in decisions/digits).
ONE_EACH = "Write to ann.lee@example.com before 2024 about the river and the hills and the quiet boat."
TWO_EACH = "In 1999 and 2003 the farmer wrote to bob@mail.org and to carl@mail.org about the wooden fence."
FEW_DIGITS = "The farmer sold 12 eggs and 3 hens at the market near the river on a quiet morning today."
TABLE = "year north south east\n2024 1187 3342 9981\n2025 1203 3391 9902\n2026 1255 3402 9876"
# code: 21 digits of 39 non-space characters (kept: code is skipped); an e-mail and 2048 (a "year")
CODE = ["x = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]", "# contact: dev@corp.io\nprint(2048)"]

EXPECTED = {
    "masker": {"code": {"documents_edited": 1, "email": 1, "year": 1},
               "web": {"documents_edited": 3, "email": 3, "year": 6}},
    "digits": {"code": {"with_digits": 1, "with_digits/30pct_and_more": 1},
               "web": {"with_digits": 2, "with_digits/30pct_and_more": 1, "with_digits/under_10pct": 1}},
}


@pytest.fixture()
def plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(HERE))
    yield
    for name in ("digits_stage", "edits_stage"):
        sys.modules.pop(name, None)


def _config(tmp_path: Path, workers: int) -> Path:
    web = tmp_path / "web.jsonl"
    web.write_text("".join(json.dumps({"text": t}) + "\n"
                           for t in [*PROSE * 10, ONE_EACH, *PROSE * 2, TWO_EACH, FEW_DIGITS, TABLE]),
                   encoding="utf-8")
    code = tmp_path / "code.jsonl"
    code.write_text("".join(json.dumps({"text": t}) + "\n" for t in CODE), encoding="utf-8")
    data = {"seed": 5, "plugins": ["digits_stage", "edits_stage"],
            "sources": {"web": {"paths": [str(web)]}, "code": {"paths": [str(code)], "lang": "code"}},
            "executor": {"num_workers": workers}, "ingest": {"partition_max_docs": 5},
            "heuristics": {"enabled": False}, "perplexity": {"enabled": False}, "dedup": {"enabled": False},
            # the masker plugin stands for pii here (on by default; it would take the e-mails first)
            "pii": {"enabled": False},
            "langid": {"allowed_languages": ["en", "code"]}, "tokenize": {"vocab_size": 300},
            "output": {"seq_length": 16}}
    path = tmp_path / f"c{workers}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _tallies(manifest: dict) -> dict:
    return {s: {src: c["tally"] for src, c in manifest["stages"][s]["per_source"].items()}
            for s in ("masker", "digits")}


def _entered(version_dir: Path, manifest: dict, stage: str) -> pa.Table:
    """Every document that entered ``stage``, read back from the version:
    the kept ones (documents/) and those dropped by it or a later stage
    (decisions/<stage>/)."""
    order = manifest["stage_order"]
    files = sorted((version_dir / "documents").glob("*.parquet"))
    for later in order[order.index(stage):]:
        files += sorted((version_dir / "decisions" / later).glob("*.parquet"))
    tables = [pq.read_table(f) for f in files]
    columns = ["source", *(c for c in tables[0].column_names if c.startswith(stage + "_"))]
    return pa.concat_tables([t.select(columns) for t in tables if t.num_rows], promote_options="permissive")


def _independent(version_dir: Path, manifest: dict) -> dict:
    """The tallies counted from the version's tables, by this test's own code."""
    out: dict = {"masker": {}, "digits": {}}
    for row in _entered(version_dir, manifest, "masker").to_pylist():
        t = out["masker"].setdefault(row["source"], {"documents_edited": 0})
        t["documents_edited"] += bool(row["masker_edits"])
        for e in row["masker_edits"]:
            t[e["type"]] = t.get(e["type"], 0) + 1
        assert row["masker_count"] == len(row["masker_edits"])
    for row in _entered(version_dir, manifest, "digits").to_pylist():
        t = out["digits"].setdefault(row["source"], {})
        share = row["digits_share"]
        if share:
            band = "under_10pct" if share < 0.1 else "10_to_30pct" if share < 0.3 else "30pct_and_more"
            t["with_digits"] = t.get("with_digits", 0) + 1
            t[f"with_digits/{band}"] = t.get(f"with_digits/{band}", 0) + 1
    return {s: {src: dict(sorted(t.items())) for src, t in v.items()} for s, v in out.items()}


def _report_cells(html: str) -> dict:
    cells: dict = {}
    for stage, key, source, value in re.findall(r'<span data-tally-stage="([^"]+)" data-key="([^"]+)" '
                                                r'data-source="([^"]+)">([\d,]+)</span>', html):
        cells.setdefault(stage, {}).setdefault(source, {})[key] = int(value.replace(",", ""))
    return cells


def test_tallies_and_edits_of_a_real_build(plugins, tmp_path):
    from pipeline.build import build
    from pipeline.explain import explain_document, format_explanation
    from pipeline.lineage import format_document_lineage, lineage_for_document

    one = build("v1", _config(tmp_path, 1), tmp_path / "corpora", log=lambda m: None)
    m = one.manifest
    assert m["stage_order"] == ["langid", "masker", "digits", "tokenize", "mixture"]
    assert _tallies(m) == EXPECTED
    assert _independent(one.version_dir, m) == EXPECTED
    assert m["stages"]["masker"]["totals"]["tally"] == {"documents_edited": 4, "email": 4, "year": 7}
    assert list(m["stages"]["masker"]["totals"]["tally"]) == sorted(m["stages"]["masker"]["totals"]["tally"])
    assert m["stages"]["masker"]["tally_columns"] == {
        "masker_edits": "each replacement: type, code-point span in the text received, placeholder"}
    assert "tally" not in m["stages"]["langid"]["totals"] and "tally_columns" not in m["stages"]["langid"]
    assert all("tally" not in c for c in m["stages"]["tokenize"]["per_source"].values())
    # the placeholders in the kept text are the tallied edits of kept documents
    docs = pa.concat_tables([pq.read_table(f) for f in sorted((one.version_dir / "documents").glob("*.parquet"))])
    assert sum(t.count("<EMAIL>") for t in docs["text"].to_pylist()) == 4
    assert sum(t.count("<YEAR>") for t in docs["text"].to_pylist()) == 7 - 3       # the table was dropped
    # the lineage segments carry the scalar columns, not the list of edits
    segments = pq.read_schema(next((one.version_dir / "lineage").glob("*.parquet"))).names
    assert "masker_count" in segments and "masker_types" in segments and "masker_edits" not in segments

    # report.html: a table key x source (+ total) per tallying stage, equal to the manifest
    html = (one.version_dir / "report.html").read_text(encoding="utf-8")
    assert "<h2 id='tallies'>Stage tallies</h2>" in html and "<h3 id='tally-masker'>masker</h3>" in html
    cells = _report_cells(html)
    for stage, per_source in EXPECTED.items():
        keys = {k for t in per_source.values() for k in t}
        for src in ("code", "web"):
            assert cells[stage][src] == {k: per_source[src].get(k, 0) for k in keys}
        assert cells[stage]["total"] == m["stages"][stage]["totals"]["tally"]

    # explain: a kept document's edits, one line each, in the text and the JSON
    web = tmp_path / "web.jsonl"
    two_each = f"web:{web}:26"
    result = explain_document(one.version_dir, two_each)
    masker = next(s for s in result["stages"] if s["stage"] == "masker")
    edits = next(c for c in masker["checks"] if c["name"] == "masker_edits")
    assert edits["value"] == 4 and edits["records"]["more"] == 0
    assert edits["records"]["elements"] == [
        {"type": "year", "start": 3, "end": 7, "replacement": "<YEAR>"},
        {"type": "year", "start": 12, "end": 16, "replacement": "<YEAR>"},
        {"type": "email", "start": 37, "end": 49, "replacement": "<EMAIL>"},
        {"type": "email", "start": 57, "end": 70, "replacement": "<EMAIL>"}]
    assert TWO_EACH[37:49] == "bob@mail.org" and TWO_EACH[3:7] == "1999"
    text = format_explanation(result)
    assert "      - type=email start=37 end=49 replacement=<EMAIL>\n" in text
    # a dropped document's edits come from decisions/digits
    dropped = explain_document(one.version_dir, f"web:{web}:28")
    assert dropped["dropped_by"] == "digits" and dropped["reason"] == "digits.too_many"
    masker = next(s for s in dropped["stages"] if s["stage"] == "masker")
    assert [e["start"] for e in next(c for c in masker["checks"] if c["name"] == "masker_edits")
            ["records"]["elements"]] == [22, 42, 62]
    # lineage --doc: the decisions line, then the edits
    found = lineage_for_document(one.version_dir, two_each, global_batch=2)
    assert found["document"]["records"]["masker_edits"]["count"] == 4
    lines = format_document_lineage(found)
    assert "masker count 4 types email:2,year:2" in lines
    assert "  masker_edits: 4\n    - type=year start=3 end=7 replacement=<YEAR>\n" in lines

    # 2 workers: the same numbers (and the same stage entries)
    two = build("v2", _config(tmp_path, 2), tmp_path / "corpora", log=lambda m: None)
    for stage in ("masker", "digits"):
        assert two.manifest["stages"][stage]["per_source"] == m["stages"][stage]["per_source"]
        assert two.manifest["stages"][stage]["totals"] == m["stages"][stage]["totals"]

    # resume: the stages' partitions are tallied from their layers (masker: one layer redone)
    shutil.move(one.version_dir, tmp_path / "v1-first")
    work = tmp_path / "corpora" / ".work" / "v1"
    for stage in ("masker", "digits"):
        state_path = work / stage / "_STATE.json"
        state = json.loads(state_path.read_text())
        state_path.write_text(json.dumps({k: v for k, v in state.items()
                                          if k not in ("done", "report", "kept_per_partition")}))
    layers = sorted((work / "masker").glob("part-*.parquet"))
    assert len(layers) >= 4
    layers[2].unlink()
    again = build("v1", _config(tmp_path, 1), tmp_path / "corpora", log=lambda m: None)
    events = [json.loads(line) for line in (work / "run.log.jsonl").read_text().splitlines()]
    starts = [e for e in events if e.get("event") == "stage_start" and e.get("stage") == "masker"]
    assert starts[-1]["resumed_partitions"] == len(layers) - 1
    for stage in ("masker", "digits"):
        assert again.manifest["stages"][stage]["per_source"] == m["stages"][stage]["per_source"]
        assert again.manifest["stages"][stage]["totals"] == m["stages"][stage]["totals"]


def test_tally_rows_put_parents_first_and_cap_children():
    from pipeline.report import tally_rows

    per_source = {"a": {"gsm8k": 40, "documents_hit": 41, "ceval": 1, "ceval/7": 1,
                        **{f"gsm8k/{i}": 1 for i in range(35)}},
                  "b": {"gsm8k": 2, "gsm8k/3": 2, "documents_hit": 2}}
    rows = tally_rows(per_source)
    keys = [r[0] for r in rows]
    assert keys[:4] == ["ceval", "ceval/7", "documents_hit", "gsm8k"]
    assert keys[4] == "gsm8k/3" and rows[4][1] == {"a": 1, "b": 2} and rows[4][2] == 3   # largest total first
    assert keys[5:8] == ["gsm8k/0", "gsm8k/1", "gsm8k/10"]                                # then by key
    assert len(keys) == 4 + 30 + 1
    assert rows[-1][0] == "gsm8k/… 5 more" and rows[-1][3] == "more" and rows[-1][2] == 5
    assert rows[-1][1] == {"a": 5, "b": 0}


def _stage_module(tmp_path: Path, monkeypatch, name: str, body: str) -> str:
    mods = tmp_path / "mods"
    mods.mkdir(exist_ok=True)
    (mods / f"{name}_mod.py").write_text(textwrap.dedent(f'''
        from stages.base import Column, Stage, StageConfig

        class S(Stage):
            name = {name!r}
            order = 255
        ''') + textwrap.indent(textwrap.dedent(body), "    "))
    monkeypatch.syspath_prepend(str(mods))
    return f"{name}_mod"


@pytest.mark.parametrize("name, body, message", [
    ("undeclared", 'columns = {"undeclared_x": Column("int32", "x")}\ntally_columns = ("undeclared_y",)',
     r"tally_columns \['undeclared_y'\] are not among its declared columns"),
    ("bare", 'columns = {"bare_x": Column("int32", "x")}\ntally_columns = "bare_x"',
     r"tally_columns must be a tuple of column names"),
    ("nested", 'columns = {"nested_x": Column("list<struct<a: int32>>", "x", lineage=True)}',
     r"column\(s\) \['nested_x'\] are marked lineage=True but are not scalar"),
])
def test_tally_and_lineage_declarations_are_checked_at_load(tmp_path, monkeypatch, name, body, message):
    module = _stage_module(tmp_path, monkeypatch, name, body)
    data = {"plugins": [module], "sources": {"web": {"paths": [str(tmp_path / "x.jsonl")]}}}
    with pytest.raises(ConfigError, match=message):
        parse_config(data, origin="c.yaml")
    sys.modules.pop(module, None)


def test_a_tally_that_is_not_str_to_int_stops_with_the_stage_named():
    import numpy as np

    from pipeline.executor import partition_tally
    from stages.base import Column, Stage

    view = pa.table({"source": ["web", "web", "code"], "chars": pa.array([3, 4, 5], pa.int64()),
                     "odd_n": pa.array([1, 2, 3], pa.int32()), "keep": [True, False, True],
                     "reason": [None, "odd.x", None]})

    class Good(Stage):
        name, order = "odd", 1
        columns = {"odd_n": Column("int32", "n")}
        tally_columns = ("odd_n",)

        @classmethod
        def tally(cls, table):
            assert table.column_names == ["odd_n", "keep", "reason"]
            return {"n": int(pc.sum(table["odd_n"]).as_py()), "dropped": int(pc.sum(pc.invert(table["keep"])).as_py())}

    assert partition_tally("odd", Good, view, "part-00000-00000.parquet") == {
        "code": {"dropped": 0, "n": 3}, "web": {"dropped": 1, "n": 3}}

    class Numpy(Good):
        @classmethod
        def tally(cls, table):
            return {"n": np.int64(3)}

    class Listed(Good):
        @classmethod
        def tally(cls, table):
            return [("n", 3)]

    with pytest.raises(RuntimeError, match=r"stage odd on part-00000-00000.parquet: tally entry 'n': np.int64\(3\) \(int64\) "
                                           r"is not str -> int"):
        partition_tally("odd", Numpy, view, "part-00000-00000.parquet")
    with pytest.raises(RuntimeError, match=r"stage odd on p: tally returned list, not a dict"):
        partition_tally("odd", Listed, view, "p")


def test_python_m_pipeline_stages_shows_a_stage_tally(plugins):
    from pipeline.contract import describe, format_stages

    found = {s["name"]: s for s in describe(("digits_stage", "edits_stage"))}
    assert found["masker"]["tally_columns"] == ["masker_edits"]
    assert found["digits"]["tally_columns"] == ["digits_share"] and found["langid"]["tally_columns"] == []
    text = format_stages(list(found.values()))
    assert ("       tally    over masker_edits (counts per source in the manifest's "
            "stages.masker.per_source.<source>.tally and in report.html)\n") in text
    tallied = sorted(name for name, st in found.items() if st["tally_columns"])
    assert tallied == ["decontaminate", "digits", "masker", "pii", "quality_classifier", "script_normalize"]
    assert text.count("       tally    over") == len(tallied)
