"""Bucketed spill files: the one all-to-all exchange of the streaming assembly.

A *map* task (one per partition, or per pack bucket, ...) that has rows for
many destinations writes them into ONE Parquet file, rows grouped by
destination bucket, one row group per non-empty bucket, and the list of
buckets in the file's metadata (:func:`write_buckets`). A *reduce* task for
bucket ``b`` reads row group ``b`` of every map file, in map order
(:func:`read_bucket`). So an exchange of M map tasks into R buckets is M files
(not M x R), each reduce reads only its own bytes, and no process ever holds
more than one map task's output or one bucket.

Order is part of the contract: rows of one bucket come back file by file in
the order of ``paths``, and within a file in the order they were given
(stable), so a reduce that sorts by a total key gives the same bytes whatever
the number of workers. Files are written atomically (:mod:`common.io`:
temporary name, then rename): a file that exists is complete, which is what a
resumed build relies on.

Sizes: a row group holds one bucket's rows of one map task; the metadata costs
~100 bytes per row group. See docs/architecture.md ("Scale") for how bucket
counts are chosen and what the exchange costs at 1 TB.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.io import atomic_path

BUCKETS_KEY = b"mindcorpus.buckets"
# zstd level 1: spill files are read once and deleted; level 1 writes ~2x
# faster than 3 for ~10% more bytes (measured on token spills, docs/architecture.md).
SPILL_COMPRESSION = {"compression": "zstd", "compression_level": 1}


def write_buckets(table: pa.Table, buckets: np.ndarray, path: Path) -> dict[int, int]:
    """Write ``table`` to ``path`` grouped by bucket, atomically.

    Args:
        table: n rows.
        buckets: int64[n], each row's bucket (>= 0).
        path: the spill file; its directory is created.

    Returns:
        bucket -> rows written, for the non-empty buckets.

    Raises:
        ValueError: ``buckets`` has another length or a negative value.
        OSError: the file cannot be written (names it: a full disk, ...).
    """
    buckets = np.asarray(buckets, np.int64)
    if buckets.shape != (table.num_rows,):
        raise ValueError(f"{len(buckets)} buckets for {table.num_rows} rows")
    if len(buckets) and buckets.min() < 0:
        raise ValueError("negative bucket")
    order = np.argsort(buckets, kind="stable")
    sorted_buckets = buckets[order]
    bounds = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]]) if len(buckets) else \
        np.zeros(0, np.int64)
    bounds = np.r_[bounds, len(buckets)]
    present = [int(sorted_buckets[b]) for b in bounds[:-1]]
    schema = table.schema.with_metadata({**(table.schema.metadata or {}),
                                         BUCKETS_KEY: json.dumps(present).encode()})
    counts = {}
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema, **SPILL_COMPRESSION) as writer:
        for lo, hi, bucket in zip(bounds[:-1], bounds[1:], present):
            part = table.take(pa.array(order[lo:hi]))
            writer.write_table(part.replace_schema_metadata(schema.metadata), row_group_size=max(1, hi - lo))
            counts[bucket] = int(hi - lo)
        if not present:
            writer.write_table(table.slice(0, 0).replace_schema_metadata(schema.metadata))
    return counts


_OPEN: OrderedDict[str, tuple[pq.ParquetFile, dict[int, int]]] = OrderedDict()
_OPEN_MAX = 64  # open spill files kept per process (footer parsed once); our choice


def _open(path: Path) -> tuple[pq.ParquetFile, dict[int, int]]:
    key = str(path)
    hit = _OPEN.get(key)
    if hit is not None:
        _OPEN.move_to_end(key)
        return hit
    parquet = pq.ParquetFile(path)
    meta = parquet.schema_arrow.metadata or {}
    present = json.loads(meta.get(BUCKETS_KEY, b"[]"))
    hit = (parquet, {bucket: group for group, bucket in enumerate(present)})
    _OPEN[key] = hit
    while len(_OPEN) > _OPEN_MAX:
        _OPEN.popitem(last=False)
    return hit


def read_bucket(paths: list[Path], bucket: int, columns: list[str] | None = None,
                schema: pa.Schema | None = None) -> pa.Table:
    """Rows of ``bucket`` from every spill file in ``paths``, file by file.

    Args:
        paths: spill files written by :func:`write_buckets` (missing files are
            an error: a reduce never runs before all its maps).
        bucket: the bucket.
        columns: columns to read (all when None).
        schema: the result's schema when no file has the bucket (default: the
            first file's).

    Returns:
        The concatenated rows (possibly none), without the bucket metadata.
    """
    tables = []
    first_schema = schema
    for path in paths:
        parquet, groups = _open(Path(path))
        if first_schema is None:
            first_schema = parquet.schema_arrow
        group = groups.get(int(bucket))
        if group is not None:
            tables.append(parquet.read_row_group(group, columns=columns))
    if not tables:
        base = (first_schema or pa.schema([])).remove_metadata()
        empty = base.empty_table()
        return empty.select(columns) if columns is not None else empty
    return pa.concat_tables([t.replace_schema_metadata(None) for t in tables])


def forget(paths: list[Path] | None = None) -> None:
    """Drop cached open files (all, or those of ``paths``), e.g. before deleting them."""
    if paths is None:
        _OPEN.clear()
        return
    for path in paths:
        _OPEN.pop(str(path), None)
