"""Executors: run a picklable function over items, in order, on a pool.

The local executor is a ``concurrent.futures.ProcessPoolExecutor`` with the
``spawn`` start method (fork after pyarrow / tokenizers threads have started
can deadlock). Per-partition stage work goes through :func:`process_partition`,
which writes its output atomically (temporary name, then ``os.replace``), so a
partition file that exists is complete and a crashed build resumes by skipping
it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stages.base import KEEP, REASON, StageContext, read_kept

PARQUET_OPTS = {"compression": "zstd", "compression_level": 3}


class LocalExecutor:
    """Run work on this machine.

    Args:
        num_workers: processes; 1 runs in the calling process (no pickling),
            which is what tests and debugging want.
    """

    def __init__(self, num_workers: int = 1):
        self.num_workers = num_workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, in parallel when there are workers.

        Raises:
            Whatever ``fn`` raised for the first failing item (other items'
            finished outputs stay on disk).
        """
        items = list(items)
        if self.num_workers <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.num_workers, mp_context=multiprocessing.get_context("spawn"))
        return list(self._pool.map(fn, items))

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
