"""Tests for stages/quality_classifier/: fastText models trained with
tools/bin/fasttext (tools/build_fasttext.sh) on real text of data/sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bench.multi import shuffle_words
from stages.base import Partitions, StageContext
from stages.quality_classifier import QualityClassifierStage
from stages.quality_classifier.config import Config
from stages.quality_classifier.stage import REASON_LOW_SCORE
from stages.quality_classifier.train import model_text, train_model, training_flags

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "bin"
SAMPLE = ROOT / "data" / "sample"
pytestmark = pytest.mark.skipif(not (TOOLS / "fasttext").exists(),
                                reason="tools/bin/fasttext missing: run tools/build_fasttext.sh first")


def _kjv() -> list[dict]:
    with gzip.open(SAMPLE / "books-kjv.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _table(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.table({
        "id": [r[0] for r in rows], "source": [r[1] for r in rows], "file": ["f"] * len(rows),
        "line": pa.array(range(1, len(rows) + 1), pa.int64()), "text": [r[2] for r in rows],
        "meta": ["{}"] * len(rows), "lang_hint": pa.array([None] * len(rows), pa.string()),
        "chars": pa.array([len(r[2]) for r in rows], pa.int64()),
    })


@pytest.fixture(scope="module")
def salad_parts(tmp_path_factory):
    """The 150 King James Bible chapters of the sample as source
    ``reference`` and each one's word salad (words of each line shuffled) as
    source ``web``, in two partitions."""
    root = tmp_path_factory.mktemp("qc")
    rows = []
    for i, rec in enumerate(_kjv()):
        rows.append((f"reference:{i}", "reference", rec["text"]))
        rows.append((f"web:{i}", "web", shuffle_words(rec["text"], "en", f"salad:{i}")))
    paths = []
    for k in range(2):
        path = root / f"part-{k}.parquet"
        pq.write_table(_table(rows[k::2]), path)
        paths.append(path)
    return root, paths


def _stage(tmp: Path, cache: Path, **kw) -> QualityClassifierStage:
    cfg = Config(enabled=True, reference_source="reference", **kw)
    ctx = StageContext(work_dir=tmp / "work", cache_dir=cache, seed=7, tools_dir=TOOLS)
    return QualityClassifierStage(cfg, ctx)


def _local_map(fn, items):
    return [fn(item) for item in items]


def test_classifier_separates_prose_from_its_word_salad_on_held_out_split(salad_parts, tmp_path):
    root, paths = salad_parts
    stage = _stage(tmp_path, root / "cache", percentile=50.0)
    fit = stage.fit(Partitions(paths, _local_map))
    model = fit.facts["models"]["*"]
    assert model["available"] == {"positives": 150, "negatives": 150}
    at_half = model["held_out_pr"][0]
    assert at_half["threshold"] == 0.5
    assert at_half["positives"] + at_half["negatives"] == 300 - model["train"]["positives"] - \
        model["train"]["negatives"]
    # measured (seed 7): precision 1.0 and recall 1.0 on 15 + 18 held-out
    # documents (docs/stages/quality_classifier.md); pinned with a margin
    assert at_half["precision"] >= 0.9
    assert at_half["recall"] >= 0.9
    assert fit.warnings == ()
    assert abs(model["held_out_corpus_dropped"] - 0.5) < 0.05
    # process: every document scored, reasons only below the threshold, buckets 0..9
    table = pq.read_table(paths[0])
    out = stage.process(table)
    scores = out["quality_classifier_score"].to_pylist()
    assert all(0.0 <= s <= 1.0 for s in scores)
    threshold = model["threshold"]
    assert out["reason"].to_pylist() == [REASON_LOW_SCORE if s < threshold else None for s in scores]
    assert set(out["quality_classifier_bucket"].to_pylist()) <= set(range(10))
    tally = QualityClassifierStage.tally(out.select(["quality_classifier_bucket", "keep", "reason"]))
    assert sum(tally.values()) == table.num_rows
    assert all(k.startswith("bucket_") for k in tally)


def test_model_cache_is_reused_for_same_data_and_params_and_rebuilt_when_they_change(tmp_path):
    cache = tmp_path / "cache"
    lines = [f"__label__reference {model_text(t, 5000)}" for t in ("The cat sat on the mat.", "A dog ran home.")]
    lines += ["__label__corpus mat the on sat cat the", "home ran dog a"]
    flags = training_flags(Config(), 7)
    first, trained = train_model(lines, flags, TOOLS, cache)
    assert trained
    again, trained = train_model(lines, flags, TOOLS, cache)
    assert (again, trained) == (first, False)
    other, trained = train_model(lines, training_flags(Config(epoch=6), 7), TOOLS, cache)
    assert trained and other != first
    changed, trained = train_model(lines[:-1], flags, TOOLS, cache)
    assert trained and changed not in (first, other)
    # deterministic: a fresh cache trains the same bytes
    fresh, _ = train_model(lines, flags, TOOLS, tmp_path / "cache2")
    assert fresh.read_bytes() == first.read_bytes()


def test_model_text_is_one_lowercased_line_with_chinese_words_split():
    assert model_text("我爱北京天安门。 Hello  World\n\tBye __label__x", 5000) == \
        "我 爱 北京 天安门 。 hello world bye label x"
    assert model_text("Hello World", 7) == "hello w"


def test_same_model_whatever_the_partitioning(salad_parts, tmp_path):
    """The sample is drawn and ordered by seeded id hashes: the 300 documents
    in one partition or in two give the same model bytes and cut-offs."""
    root, paths = salad_parts
    one = tmp_path / "one.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(p) for p in reversed(paths)]), one)
    facts = []
    for n, parts in enumerate(([one], paths)):
        stage = _stage(tmp_path / str(n), tmp_path / f"cache{n}", sample_docs=100)
        facts.append(stage.fit(Partitions(parts, _local_map)).facts["models"]["*"])
    assert facts[0] == facts[1]
    assert facts[0]["train"]["positives"] + facts[0]["held_out_pr"][0]["positives"] < 150  # sampled


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="reference_source: required key is missing"):
        Config(enabled=True)
    with pytest.raises(ValueError, match="not both"):
        Config(enabled=True, reference_source="a", reference_files=["x.jsonl"])
    with pytest.raises(ValueError, match="per_language: needs reference_source"):
        Config(enabled=True, reference_files=["x.jsonl"], per_language=True)
    assert Config().enabled is False  # off by default: needs a reference
    errors = QualityClassifierStage.preflight(Config(enabled=True, reference_files=["/nonexistent.jsonl"]))
    assert errors == ["quality_classifier.reference_files.0: /nonexistent.jsonl: no such file"]


def test_build_with_the_stage_counts_the_reason_and_writes_held_out_pr(tmp_path):
    """A small real build: the sample's King James chapters as the reference
    source and their word salad as source ``web``; the version's manifest
    holds the held-out precision/recall and the drops by reason."""
    import yaml

    from pipeline.build import build

    data = tmp_path / "data"
    data.mkdir()
    chapters = _kjv()[:80]
    with open(data / "books.jsonl", "w", encoding="utf-8") as fh:
        for rec in chapters:
            fh.write(json.dumps({"text": rec["text"]}) + "\n")
    with open(data / "salad.jsonl", "w", encoding="utf-8") as fh:
        for i, rec in enumerate(chapters):
            fh.write(json.dumps({"text": shuffle_words(rec["text"], "en", f"salad:{i}")}) + "\n")
    cfg = {
        "seed": 7,
        "sources": {"books": {"paths": [str(data / "books.jsonl")]}, "web": {"paths": [str(data / "salad.jsonl")]}},
        "executor": {"num_workers": 1},
        "perplexity": {"enabled": False},
        "heuristics": {"enabled": False},
        "dedup": {"enabled": False},
        "quality_classifier": {"enabled": True, "reference_source": "books", "threshold": 0.5},
        "tokenize": {"vocab_size": 1000},
        "output": {"seq_length": 128},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    build("q1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    manifest = json.loads((tmp_path / "corpora" / "q1" / "manifest.json").read_text())
    entry = manifest["stages"]["quality_classifier"]
    model = entry["fit"]["models"]["*"]
    pr = model["held_out_pr"][0]
    assert pr["threshold"] == 0.5 and pr["precision"] >= 0.9 and pr["recall"] >= 0.9
    assert model["threshold"] == 0.5 and model["threshold_from"] == "threshold"
    # measured: every salad document scores below 0.5, every chapter above
    assert entry["per_source"]["web"]["dropped"] == {"quality_classifier.low_score": 80}
    assert entry["per_source"]["books"]["dropped"] == {} and entry["per_source"]["books"]["kept"] == 80
    assert sum(entry["totals"]["tally"].values()) == 160


def test_reference_files_train_against_the_corpus_sample(salad_parts, tmp_path):
    """Positives from JSONL files (the chapters) instead of a source: the
    corpus partitions then hold only the salad, all of it negatives."""
    root, paths = salad_parts
    ref = tmp_path / "ref.jsonl.gz"
    with gzip.open(ref, "wt", encoding="utf-8") as fh:
        for rec in _kjv():
            fh.write(json.dumps({"text": rec["text"]}) + "\n")
        fh.write("not json\n")
    salad_only = []
    for k, path in enumerate(paths):
        table = pq.read_table(path)
        out = tmp_path / f"salad-{k}.parquet"
        pq.write_table(table.filter(pa.compute.equal(table["source"], "web")), out)
        salad_only.append(out)
    cfg = Config(enabled=True, reference_files=[str(ref)], percentile=None)
    assert QualityClassifierStage.preflight(cfg) == []
    stage = QualityClassifierStage(cfg, StageContext(work_dir=tmp_path / "w", cache_dir=root / "cache", seed=7,
                                                     tools_dir=TOOLS))
    fit = stage.fit(Partitions(salad_only, _local_map))
    model = fit.facts["models"]["*"]
    assert model["available"] == {"positives": 150, "negatives": 150}
    assert model["threshold"] is None and model["threshold_from"] == "none"
    assert len(model["held_out_pr"]) == 1
    pr = model["held_out_pr"][0]
    assert pr["precision"] >= 0.9 and pr["recall"] >= 0.9
    out = stage.process(pq.read_table(salad_only[0]))
    assert out["reason"].null_count == out.num_rows  # no threshold: nothing dropped


def test_per_language_models_skip_a_language_with_too_few_documents(salad_parts, tmp_path):
    """``per_language``: en (the chapters and their salad) gets a model; 10
    documents labelled de do not (min_docs 20): a warning, and their rows
    stay unscored (null score and bucket, tally ``unscored``)."""
    root, paths = salad_parts
    tables = []
    for k, path in enumerate(paths):
        table = pq.read_table(path)
        langs = ["de" if k == 0 and i < 10 else "en" for i in range(table.num_rows)]
        table = table.append_column("langid_lang", pa.array(langs, pa.string()))
        out = tmp_path / f"lang-{k}.parquet"
        pq.write_table(table, out)
        tables.append(out)
    stage = _stage(tmp_path, root / "cache", per_language=True)
    fit = stage.fit(Partitions(tables, _local_map))
    assert sorted(fit.facts["models"]) == ["en"]
    # partition 0 holds the chapters, so the 10 de documents are all reference
    assert "reference and 0 corpus documents to train on (available: 10 / 0), fewer than min_docs 20" in \
        fit.facts["skipped"]["de"]
    assert fit.warnings and fit.warnings[0].startswith("language de: no quality model")
    out = stage.process(pq.read_table(tables[0]))
    scores = out["quality_classifier_score"].to_pylist()
    assert scores[:10] == [None] * 10 and None not in scores[10:]
    tally = QualityClassifierStage.tally(out.select(["quality_classifier_bucket", "keep", "reason"]))
    assert tally["unscored"] == 10


def test_build_config_refuses_an_unknown_reference_source():
    from pipeline.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="quality_classifier.reference_source: 'wiki' is not a configured source"):
        parse_config({"sources": {"web": {"paths": ["x.jsonl"]}}, "perplexity": {"enabled": False},
                      "quality_classifier": {"enabled": True, "reference_source": "wiki"}})
    with pytest.raises(ConfigError, match="quality_classifier.reference_source: required key is missing"):
        parse_config({"sources": {"web": {"paths": ["x.jsonl"]}}, "perplexity": {"enabled": False},
                      "quality_classifier": {"enabled": True}})


def test_the_percentile_drops_its_share_of_fortunes_near_the_floor_score(tmp_path):
    """Debian Reference (the sample's 93 documents) against 1,000 fortunes:
    most fortunes score just above fastText's floor (1e-5); the threshold is
    kept exact (not rounded, which made them one tie), so the 10th
    percentile drops 10% of the held-out fortunes. The fortunes the model
    trained on score higher than held-out ones here (measured: 9 of the 89
    held out dropped, 23 of the 911 trained on), so on a corpus that is
    mostly its own training sample the rule drops less than its share."""
    with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
        text = zstandard.ZstdDecompressor().stream_reader(fh).read().decode("utf-8")
    fortunes = [json.loads(line)["text"] for line in text.splitlines()[:1000]]
    reference = pq.read_table(SAMPLE / "reference-debref.parquet")["text"].to_pylist()
    rows = [(f"reference:{i}", "reference", t) for i, t in enumerate(reference)]
    rows += [(f"web:{i}", "web", t) for i, t in enumerate(fortunes)]
    path = tmp_path / "part.parquet"
    pq.write_table(_table(rows), path)
    stage = _stage(tmp_path, tmp_path / "cache")
    fit = stage.fit(Partitions([path], _local_map))
    model = fit.facts["models"]["*"]
    assert model["train"] == {"positives": 85, "negatives": 911}
    assert 1e-5 < model["threshold"] < 1.01e-5
    assert model["tie_fraction"] == 0.0
    assert model["held_out_corpus_dropped"] == pytest.approx(0.10, abs=0.005)
    assert model["held_out_auc"] >= 0.95  # measured 1.0 (8 + 89 held out)
    assert fit.warnings == ()
    out = stage.process(pq.read_table(path))
    web = out.filter(pa.compute.equal(out["source"], "web"))
    dropped = web["reason"].to_pylist().count(REASON_LOW_SCORE)
    assert 20 <= dropped <= 60, dropped  # measured 32


def test_a_percentile_on_exactly_tied_scores_drops_a_share_of_the_tie(tmp_path):
    """Scores that are exactly equal at the percentile: the tied documents
    are dropped at the share that makes the rule drop the percentile."""
    stage = _stage(tmp_path, tmp_path / "cache", percentile=10.0)
    scores = sorted([1e-5] * 40 + [0.001 * i for i in range(1, 161)])  # 200 scores, 40 tied lowest
    threshold, source, tie_fraction = stage._threshold(scores)
    assert (threshold, source) == (1e-5, "p10 of held-out corpus sample")
    assert tie_fraction == 0.5  # 20 of the 40 tied = 10% of 200
    assert stage._threshold([0.1, 0.2, 0.3]) == (pytest.approx(0.12), "p10 of held-out corpus sample", 0.0)
    fixed = _stage(tmp_path, tmp_path / "cache", threshold=0.3)
    assert fixed._threshold(scores) == (0.3, "threshold", 0.0)
