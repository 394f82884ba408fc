"""Tests for pipeline/examples.py and `inspect VERSION --stage S`: seeded random examples."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.examples import format_examples, sample_examples


@pytest.fixture()
def version(tmp_path: Path) -> Path:
    vdir = tmp_path / "corpora" / "v9"
    (vdir / "decisions").mkdir(parents=True)
    (vdir / "manifest.json").write_text("{}")
    n = 30
    dropped = pa.table({
        "id": [f"web:f:{i}" for i in range(n)],
        "source": ["web"] * n,
        "text": [f"第{i}行\n很长很长的一句话" for i in range(n)],
        "chars": [10] * n,
        "langid_lang": ["zh"] * n,
        "heuristics_unbroken_run": pa.array([200 + i for i in range(n)], pa.int64()),
        "heuristics_num_words": pa.array([None] * n, pa.int64()),
        "reason": ["heuristics.max_unbroken_run" if i % 3 else "heuristics.min_words"
                   for i in range(n)],
    })
    pq.write_table(dropped, vdir / "decisions" / "heuristics.parquet")
    pq.write_table(dropped.slice(0, 0), vdir / "decisions" / "langid.parquet")
    kept = pa.table({"id": ["a:f:1", "a:f:2"], "source": ["a", "a"], "text": ["kept one", "kept two"],
                     "chars": [8, 8], "heuristics_unbroken_run": pa.array([4, 3], pa.int64()),
                     "reason": pa.array([None, None], pa.string())})
    pq.write_table(kept, vdir / "documents.parquet")
    return vdir


def test_dropped_examples_for_a_reason_are_seeded_and_order_independent(version):
    rows = sample_examples(version, "heuristics", "heuristics.max_unbroken_run", n=5, seed=3)
    assert len(rows) == 5
    assert {r["reason"] for r in rows} == {"heuristics.max_unbroken_run"}
    assert all(r["heuristics_unbroken_run"] == 200 + int(r["id"].split(":")[-1]) for r in rows)
    assert "langid_lang" not in rows[0]                      # only this stage's columns
    assert sample_examples(version, "heuristics", "heuristics.max_unbroken_run", 5, seed=3) == rows
    other = sample_examples(version, "heuristics", "heuristics.max_unbroken_run", 5, seed=4)
    assert [r["id"] for r in other] != [r["id"] for r in rows]
    more = sample_examples(version, "heuristics", "heuristics.max_unbroken_run", 8, seed=3)
    assert [r["id"] for r in more[:5]] == [r["id"] for r in rows]   # growing n extends
    # the file order does not matter
    path = version / "decisions" / "heuristics.parquet"
    table = pq.read_table(path)
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), path)
    assert sample_examples(version, "heuristics", "heuristics.max_unbroken_run", 5, seed=3) == rows


def test_all_reasons_kept_and_fewer_than_n(version):
    assert len(sample_examples(version, "heuristics", None, n=100)) == 30
    assert len(sample_examples(version, "heuristics", "heuristics.min_words", n=100)) == 10
    kept = sample_examples(version, "heuristics", n=10, kept=True)
    assert sorted(r["id"] for r in kept) == ["a:f:1", "a:f:2"]
    assert all(r["reason"] is None for r in kept)


def test_clear_errors(version):
    with pytest.raises(ValueError, match=r"stages with decisions: heuristics, langid"):
        sample_examples(version, "perplexity")
    with pytest.raises(ValueError, match=r"heuristics.max_unbroken_run \(20\), heuristics.min_words \(10\)"):
        sample_examples(version, "heuristics", "heuristics.nope")
    with pytest.raises(ValueError, match="cannot be used with --kept"):
        sample_examples(version, "heuristics", "heuristics.min_words", kept=True)
    with pytest.raises(ValueError, match="n must be >= 1"):
        sample_examples(version, "heuristics", n=0)


def test_format_shows_values_and_text_without_line_breaks(version):
    rows = sample_examples(version, "heuristics", "heuristics.min_words", n=1)
    text = format_examples(rows, "heuristics", max_chars=6)
    lines = text.splitlines()
    assert len(lines) == 3
    assert "reason=heuristics.min_words" in lines[0] and rows[0]["id"] in lines[0]
    assert lines[1].strip() == f"unbroken_run={rows[0]['heuristics_unbroken_run']}"  # nulls hidden
    assert lines[2].strip().startswith("第") and "⏎" in lines[2] and lines[2].endswith("…")
    assert format_examples([], "heuristics") == "(no example)"


def test_cli_inspect_stage_reason(version):
    runner = CliRunner()
    root = str(version.parent)
    res = runner.invoke(app, ["inspect", "v9", "--corpora-root", root, "--stage", "heuristics",
                              "--reason", "heuristics.min_words", "-n", "2", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["reason"] for r in rows] == ["heuristics.min_words"] * 2
    res = runner.invoke(app, ["inspect", "v9", "--corpora-root", root, "--stage", "heuristics",
                              "-n", "1", "--kept"])
    assert res.exit_code == 0 and "reason=kept" in res.output
    res = runner.invoke(app, ["inspect", "v9", "--corpora-root", root, "--stage", "dedup"])
    assert res.exit_code == 2 and "no decisions for stage 'dedup'" in res.output
