"""Tests for pipeline/executor.py: a task's error reaches the driver as a
picklable ``Exception`` naming the task, under 1 worker and a process pool."""

from __future__ import annotations

import pickle

import pytest

from pipeline.executor import LocalExecutor, PartitionError, TaskError


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
