"""Executors: run a picklable function over items, in order, on a pool.

The local executor is a ``concurrent.futures.ProcessPoolExecutor`` with the
``spawn`` start method (fork after pyarrow / tokenizers threads have started
can deadlock). Per-partition stage work goes through :func:`process_partition`,
which writes its output atomically (temporary name, then ``os.replace``), so a
partition file that exists is complete and a crashed build resumes by skipping
it.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stages.base import KEEP, REASON, StageContext, read_kept

PARQUET_OPTS = {"compression": "zstd", "compression_level": 3}


def _gather(completions, total: int, on_done: Callable[[int, Any], None] | None) -> list[Any]:
    """Collect ``(index, get_result)`` pairs in completion order: call
    ``on_done`` for each success, let every task finish, then raise one
    :class:`PartitionError` for all failures (a Ray task's error is unwrapped
    to the exception the task raised)."""
    results: list[Any] = [None] * total
    errors: list[tuple[int, BaseException]] = []
    for i, get in completions:
        try:
            results[i] = get()
        except Exception as exc:  # noqa: BLE001 - re-raised below with the others
            cause = getattr(exc, "cause", None)
            errors.append((i, cause if isinstance(cause, BaseException) else exc))
            continue
        if on_done:
            on_done(i, results[i])
    if errors:
        errors.sort(key=lambda e: e[0])
        raise PartitionError(errors, total) from errors[0][1]
    return results


class PartitionError(RuntimeError):
    """Some calls of an executor ``map`` failed; the others finished.

    Attributes:
        errors: (item index, exception) for each failed call, by index.
    """

    def __init__(self, errors: list[tuple[int, BaseException]], total: int):
        self.errors = errors
        first = errors[0][1]
        super().__init__(f"{len(errors)} of {total} tasks failed; first (task {errors[0][0]}): "
                         f"{type(first).__name__}: {first}")


def _die_with_parent() -> None:
    """Worker initializer: on Linux, ask the kernel to SIGKILL this worker when
    the driver dies, so a killed build leaves no orphan workers behind
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); elsewhere a no-op."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
        except OSError:
            pass


class LocalExecutor:
    """Run work on this machine.

    Args:
        num_workers: processes; 1 runs in the calling process (no pickling),
            which is what tests and debugging want.
    """

    def __init__(self, num_workers: int = 1):
        self.num_workers = num_workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """``[fn(x) for x in items]``, in parallel when there are workers.

        Args:
            fn: a picklable module-level function.
            items: its arguments, one call each.
            on_done: called in this process as ``on_done(index, result)`` when
                each call finishes, in completion order (progress, heartbeat).

        Returns:
            The results in the order of ``items``.

        Raises:
            PartitionError: one or more calls failed. Every other call still
                ran to its end first, so their outputs are on disk for a re-run.
        """
        items = list(items)
        if self.num_workers <= 1 or len(items) <= 1:
            return _gather(((i, functools.partial(fn, x)) for i, x in enumerate(items)), len(items), on_done)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.num_workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_die_with_parent)
        futures = {self._pool.submit(fn, x): i for i, x in enumerate(items)}
        return _gather(((futures[f], f.result) for f in as_completed(futures)), len(items), on_done)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_table_atomic(table: pa.Table, path: Path) -> None:
    """Write Parquet to ``path.tmp-<pid>`` then rename: readers never see a half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, **PARQUET_OPTS)
    os.replace(tmp, path)


def write_json_atomic(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


_STAGE_CACHE: dict[tuple, Any] = {}


def _stage(name: str, config_json: str, ctx: StageContext):
    key = (name, config_json, ctx)
    if key not in _STAGE_CACHE:
        from stages import stage_class

        cls = stage_class(name)
        _STAGE_CACHE[key] = cls(cls.Config.model_validate_json(config_json), ctx)
    return _STAGE_CACHE[key]


def process_partition(task: tuple[str, str, StageContext, str, str]) -> str:
    """Run one stage on one partition: read the kept rows of ``in_path``, call
    ``Stage.process``, check its contract, write ``out_path`` atomically.

    Args:
        task: (stage name, stage config as JSON, context, input path, output path).

    Returns:
        The output path.

    Raises:
        RuntimeError: the stage broke its contract (rows added, removed or
            reordered; ``keep``/``reason`` missing).
    """
    name, config_json, ctx, in_path, out_path = task
    stage = _stage(name, config_json, ctx)
    table = read_kept(Path(in_path))
    out = stage.process(table)
    if out.num_rows != table.num_rows or out.column("id") != table.column("id"):
        raise RuntimeError(f"stage {name} changed the rows of {in_path}")
    for col in (KEEP, REASON):
        if col not in out.column_names:
            raise RuntimeError(f"stage {name} returned no {col!r} column for {in_path}")
    write_table_atomic(out, Path(out_path))
    return out_path


class RayExecutor:
    """Run work as Ray tasks on an existing cluster (``executor: {kind: ray}``).

    The same picklable functions as the local pool, so a stage behaves the
    same: outputs are the same files under the same names, written atomically
    to a filesystem every node sees (a shared mount, or object storage for
    the inputs). Results come back in the order of ``items``.

    Args:
        address: the cluster (``ray://host:10001``, ``host:6379`` or
            ``auto``); None starts a local Ray instance.
        num_cpus_per_task: CPUs Ray reserves for each task.
    """

    def __init__(self, address: str | None, num_cpus_per_task: float = 1.0):
        import ray

        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        self._ray = ray
        self.num_cpus_per_task = num_cpus_per_task
        self._task = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Same contract as :meth:`LocalExecutor.map`."""
        ray = self._ray
        if self._task is None:
            self._task = ray.remote(num_cpus=self.num_cpus_per_task, max_retries=2)(_apply)
        fn_ref = ray.put(fn)  # functions, partials and bound methods alike
        refs = [self._task.remote(fn_ref, x) for x in items]
        index = {ref: i for i, ref in enumerate(refs)}

        def completions():
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield index[ready[0]], functools.partial(ray.get, ready[0])

        return _gather(completions(), len(refs), on_done)

    def close(self) -> None:
        pass  # the cluster outlives the build

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _apply(fn: Callable[[Any], Any], x: Any) -> Any:
    return fn(x)


def make_executor(cfg, num_workers: int):
    """The executor a config asks for: ``local`` (process pool of
    ``num_workers``) or ``ray`` (tasks on ``cfg.address``)."""
    if cfg.kind == "ray":
        return RayExecutor(cfg.address, cfg.num_cpus_per_task)
    return LocalExecutor(num_workers)
