"""Tests for pipeline/executor.py: the per-partition runner and its
process-wide stage cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.executor import fit_digest, process_partition
from stages.base import Partitions, PartitionRef, StageContext, read_kept
from stages.tokenize import Config, TokenizeStage


def _partition(path: Path, texts: list[str]) -> PartitionRef:
    n = len(texts)
    pq.write_table(pa.table({
        "id": [f"src:f:{i}" for i in range(n)], "source": ["src"] * n, "file": ["f"] * n,
        "line": pa.array(range(1, n + 1), pa.int64()), "text": texts, "meta": ["{}"] * n,
        "lang_hint": pa.nulls(n, pa.string()), "chars": pa.array([len(t) for t in texts], pa.int64()),
    }), path)
    return PartitionRef(str(path))


def _fit(ctx: StageContext, config: Config, part: PartitionRef) -> dict:
    if ctx.work_dir.exists():
        shutil.rmtree(ctx.work_dir)
    ctx.work_dir.mkdir(parents=True)
    return TokenizeStage(config, ctx).fit(Partitions([part], mapper=lambda fn, items: [fn(i) for i in items]))


def test_two_fits_under_one_fingerprint_do_not_share_a_cached_stage(tmp_path):
    """Two builds in one process (one worker: the driver runs the tasks) with
    the same stage, config, work directory and fingerprint but different
    fits: the second build's partition is encoded with its own tokenizer,
    not with the one the cached stage object loaded for the first."""
    config = Config(vocab_size=300, heldout_fraction=0.0)
    ctx = StageContext(work_dir=tmp_path / "fit", cache_dir=tmp_path / "cache", seed=0, tools_dir=tmp_path)
    english = _partition(tmp_path / "en.parquet",
                         [f"the quick brown fox jumps over the lazy dog number {i}" for i in range(40)])
    chinese = _partition(tmp_path / "zh.parquet",
                         [f"我们今天去北京，天气很好，数据清洗之后打包成样本 {i}" for i in range(40)])
    probe = _partition(tmp_path / "probe.parquet", ["the quick brown fox", "我们今天去北京"])
    config_json = config.model_dump_json()

    def run(fit_key: str, out: Path) -> list[list[int]]:
        task = ("tokenize", config_json, ctx, probe, str(out), "same-fingerprint", 1 << 20, fit_key)
        assert process_partition(task)["kept"] == 2
        return read_kept(probe.with_layer(out), ["tokenize_input_ids"])["tokenize_input_ids"].to_pylist()

    first_facts = _fit(ctx, config, english)
    first_key = fit_digest(first_facts, ctx.work_dir)
    first = run(first_key, tmp_path / "out-1.parquet")

    second_facts = _fit(ctx, config, chinese)
    second_key = fit_digest(second_facts, ctx.work_dir)
    assert second_key != first_key
    assert second_facts["tokenizer_sha256"] != first_facts["tokenizer_sha256"]
    second = run(second_key, tmp_path / "out-2.parquet")

    fresh = TokenizeStage(config, ctx).process(read_kept(probe))["tokenize_input_ids"].to_pylist()
    assert second == fresh
    assert second != first
    # English-trained BPE: "the quick brown fox" in few tokens; the zh-trained one needs more
    assert len(first[0]) < len(second[0])


def test_fit_digest_follows_the_fit_s_facts_and_files(tmp_path):
    work = tmp_path / "fit"
    assert fit_digest({"a": 1}, work) == fit_digest({"a": 1}, work)       # missing dir: empty
    work.mkdir()
    empty = fit_digest({"a": 1}, work)
    assert fit_digest({"a": 2}, work) != empty
    (work / "model.bin").write_bytes(b"one")
    one = fit_digest({"a": 1}, work)
    assert one != empty and len(one) == 16
    assert fit_digest({"a": 1}, work) == one                               # listed, not changed
    (work / "model.bin").write_bytes(b"one, longer")
    assert fit_digest({"a": 1}, work) != one
