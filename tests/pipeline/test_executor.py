"""Tests for pipeline/executor.py: a task's error reaches the driver as a
picklable ``Exception`` naming the task, under 1 worker and a process pool;
the per-partition runner and its process-wide stage cache."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.executor import LocalExecutor, PartitionError, TaskError, fit_digest, process_partition
from stages.base import Partitions, PartitionRef, StageContext, read_kept
from stages.tokenize import Config, TokenizeStage


def _encode_spaces(n: int) -> int:
    """A real native panic for n = 1,000,000: tiktoken with GPT-2's uncapped
    whitespace rule overflows its regex engine's stack and the Rust
    ``unwrap`` panics (``pyo3_runtime.PanicException``, a BaseException)."""
    import tiktoken

    encoding = tiktoken.Encoding("gpt2-regex", pat_str=r"\s+(?!\S)|\s+",
                                 mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={})
    return len(encoding.encode_ordinary(" " * n))


class _Unpicklable(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.callback = lambda: None  # a lambda does not pickle


def _raise_unpicklable(n: int) -> int:
    if n == 2:
        raise _Unpicklable("holds a lambda")
    return n


def _raise_value_error(n: int) -> int:
    if n == 2:
        raise ValueError("bad item 2")
    return n


@pytest.mark.parametrize("workers", [1, 2])
def test_native_panic_becomes_a_picklable_task_error(workers):
    done = []
    with LocalExecutor(workers) as executor:
        with pytest.raises(PartitionError) as caught:
            executor.map(_encode_spaces, [10, 1_000_000, 20], on_done=lambda i, r: done.append((i, r)))
    # The other tasks finished, with their real results.
    assert sorted(done) == [(0, 10), (2, 20)]
    [(index, err)] = caught.value.errors
    assert index == 1 and type(err) is TaskError
    assert err.cause_type == "pyo3_runtime.PanicException"
    assert err.task == "_encode_spaces 1000000"
    assert "StackOverflow" in err.cause_message
    assert "encode_ordinary" in err.traceback_text
    assert str(err).startswith("task _encode_spaces 1000000 failed: pyo3_runtime.PanicException: ")
    assert "1 of 3 tasks failed; first (task 1): TaskError: task _encode_spaces 1000000" in str(caught.value)
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.cause_type) == (TaskError, str(err), err.cause_type)


@pytest.mark.parametrize("workers", [1, 2])
def test_unpicklable_exception_becomes_a_task_error(workers):
    with LocalExecutor(workers) as executor:
        with pytest.raises(PartitionError) as caught:
            executor.map(_raise_unpicklable, [1, 2, 3])
    [(index, err)] = caught.value.errors
    assert index == 1 and type(err) is TaskError
    assert err.cause_type == f"{_Unpicklable.__module__}._Unpicklable"
    assert err.cause_message == "holds a lambda"
    assert err.task == "_raise_unpicklable 2"


def test_picklable_exception_is_kept_as_it_is():
    with LocalExecutor(1) as executor:
        with pytest.raises(PartitionError) as caught:
            executor.map(_raise_value_error, [1, 2, 3])
    [(index, err)] = caught.value.errors
    assert index == 1 and type(err) is ValueError and str(err) == "bad item 2"


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
    return TokenizeStage(config, ctx).fit(Partitions([part], mapper=lambda fn, items: [fn(i) for i in items])).facts


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
    def run(fit_key: str, out: Path) -> list[list[int]]:
        task = ("tokenize", (), config, ctx, probe, str(out), "same-fingerprint", 1 << 20, fit_key)
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
