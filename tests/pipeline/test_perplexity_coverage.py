"""A language without a perplexity model is reported, not silent: in the
manifest (facts ``coverage``, warnings), the build summary, report.html and
``diff`` (issue 15). Two real builds of a small config."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from rich.console import Console

from common.errors import StageFailure
from pipeline.build import build
from pipeline.cli import summary_table, warning_lines
from pipeline.config import REPO_ROOT
from pipeline.failures import failure_line
from pipeline.report import render
from pipeline.versions import diff_versions, format_diff

SAMPLE = REPO_ROOT / "data" / "sample"
pytestmark = pytest.mark.skipif(not (REPO_ROOT / "tools" / "bin" / "lmplz").exists(),
                                reason="tools/bin/lmplz missing: run tools/build_kenlm.sh")


def _config(root: Path, name: str, **perplexity) -> Path:
    data = root / "data"
    if not data.exists():
        data.mkdir(parents=True)
        with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
            lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
        (data / "web.jsonl").write_text("".join(lines[::25][:120]), encoding="utf-8")
        table = pq.read_table(SAMPLE / "reference-debref.parquet")
        keep = pc.is_in(table["lang"], value_set=pa.array(["en", "zh"]))
        pq.write_table(table.filter(keep), data / "reference.parquet")        # debref en + zh, 30 pages
    cfg = {"seed": 3, "executor": {"num_workers": 2}, "tokenize": {"vocab_size": 600}, "output": {"seq_length": 64},
           "sources": {"web": {"paths": [str(data / "web.jsonl")]},
                       "reference": {"paths": [str(data / "reference.parquet")]}},
           "perplexity": {"reference_source": "reference", "lmplz_memory": "64M", "min_reference_chars": 50_000,
                          **perplexity}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("cov")
    corpora = root / "corpora"
    v1 = build("v1", _config(root, "v1"), corpora, log=lambda m: None).manifest
    v2 = build("v2", _config(root, "v2", languages=["zh"]), corpora, log=lambda m: None).manifest
    return corpora, v1, v2


def test_unscored_languages_are_in_the_manifest_summary_and_report(two_versions):
    corpora, v1, v2 = two_versions
    cov1, cov2 = v1["stages"]["perplexity"]["fit"]["coverage"], v2["stages"]["perplexity"]["fit"]["coverage"]
    assert sorted(cov1["scored"]) == ["en", "zh"] and sorted(cov2["scored"]) == ["zh"], (cov1, v1["stages"]["perplexity"]["fit"]["skipped"])
    assert cov2["unscored"]["en"] == {**cov1["scored"]["en"], "why": "not in perplexity.languages ['zh']"}
    assert "en" not in cov1["unscored"] and "zh" not in cov1["unscored"] and cov1["unscored"]   # web: de, ru, es...
    assert cov1["documents"] == v1["stages"]["perplexity"]["totals"]["documents_in"]
    warnings = v2["stages"]["perplexity"]["warnings"]
    en = cov2["unscored"]["en"]
    assert (f"language en: no model (not in perplexity.languages ['zh']); its {en['docs']:,} documents "
            f"({en['chars']:,} chars) are kept without a perplexity or bucket (give more reference text or "
            "perplexity.models)") in warnings
    assert warnings[0].startswith(f"{len(cov2['unscored'])} of {len(cov2['unscored']) + 1} languages have no model")
    console = Console(width=200, record=True)
    console.print(summary_table(v2))
    text = console.export_text()
    assert any([t for t in line.split() if t != "│"] == ["no", "model:", "en", f"{en['docs']:,}", f"{en['chars']:,}"]
               for line in text.splitlines()), text
    assert [line for line in warning_lines(v2) if line.startswith("warning [perplexity] language en:")]
    page = render(corpora / "v2")
    assert "perplexity: languages with and without a model" in page and "not in perplexity.languages" in page


def test_diff_headline_names_the_language_that_lost_its_model(two_versions):
    corpora, v1, _ = two_versions
    diff = diff_versions(corpora / "v1", corpora / "v2")
    docs = v1["stages"]["perplexity"]["fit"]["coverage"]["scored"]["en"]["docs"]
    assert diff["headlines"] == [f"perplexity: language en lost its model (v1 scored {docs:,} docs; v2: {docs:,} "
                                 "docs unscored: not in perplexity.languages ['zh'])"]
    assert format_diff(diff).splitlines()[1] == diff["headlines"][0]
    back = diff_versions(corpora / "v2", corpora / "v1")
    assert back["headlines"] == [f"perplexity: language en gained a model (v1 scores {docs:,} docs)"]


def test_a_stage_failure_is_the_builds_one_line():
    assert failure_line(StageFailure("perplexity: language en has no model (...)")) == \
        "perplexity: language en has no model (...)"
