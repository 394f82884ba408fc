"""How dedup's records meet across workers: spill groups and document
handles, so that driver memory does not grow with the corpus.

Every global grouping (equal ids, equal exact digests, equal LSH band keys,
equal lines, the nodes of the clustering steps) goes through the same
*spill*: each worker writes its records to one file per map task
(``common.spill``: one row group per group), the group ``K`` being the
record's key modulo the number of groups; one task then reads **one group
at a time** (every worker's file for that group), sorts it and emits what it
found. The number of groups is chosen from an upper bound of the record count
(:func:`spill_groups`), so one group holds at most about ``*_RECORDS_PER_GROUP``
records whatever the corpus size. What the driver keeps between groups is
proportional to the *duplicates* (exact groups, verified edges, removed lines),
not to the documents.

A document is addressed by its handle ``g = partition << 32 | kept_row``
(int64, :func:`document_handles`) inside one ``fit``; handles never leave ``fit``.
Every keeper choice uses the keeper key ``(k1, k2, id)``
(:func:`stages.dedup.keepers.keeper_keys`), never ``g``, so it does not
depend on partitioning or input order.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.io import write_table_atomic
from common.spill import read_bucket, write_buckets

HANDLE_SHIFT = 32  # g = partition << 32 | row: up to 4.29e9 kept rows per partition
# Records per spill group; our choice, sized so one group needs at most ~60 MB
# in the driver (a band record is 18 bytes, sorting adds ~3x; exact and line
# records carry the document id, ~60-100 bytes with Arrow's sort). Measured
# peak RSS: bench/dedup.py (docs/stages/dedup.md).
ID_RECORDS_PER_GROUP = 500_000
EXACT_RECORDS_PER_GROUP = 250_000
BAND_RECORDS_PER_GROUP = 1_000_000
LINE_RECORDS_PER_GROUP = 250_000
# Node records (handle, keeper key, id: ~60 bytes) per group of the clustering
# steps; edges of a group are fewer than its documents' duplicates.
NODE_RECORDS_PER_GROUP = 500_000
MAX_SPILL_GROUPS = 4096
# Multiplier of the node-group hash (2^64 / golden ratio: Fibonacci hashing).
MIX_64 = np.uint64(0x9E3779B97F4A7C15)


# ----------------------------------------------------------------------------- spill groups


def spill_groups(records: int, per_group: int) -> int:
    """Number of spill groups for ``records`` records (an upper bound is
    fine): ``ceil(records / per_group)``, clamped to ``[1, MAX_SPILL_GROUPS]``."""
    return max(1, min(MAX_SPILL_GROUPS, math.ceil(records / per_group)))


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` (zstd Parquet) through a temporary file of
    this process and a rename, so a reader never sees a partial file."""
    write_table_atomic(table, path, compression="zstd")


def write_spill(table: pa.Table, keys: np.ndarray, num_groups: int, directory: Path,
                partition: int) -> None:
    """Write ``table``'s rows to their groups: row i goes to group
    ``keys[i] % num_groups`` (keys uint64[n]), in one file per map task,
    ``directory/part-PPPPP.parquet`` (``common.spill``: a row group per group)."""
    group = (np.asarray(keys, np.uint64) % np.uint64(num_groups)).astype(np.int64)
    write_buckets(table, group, Path(directory) / f"part-{partition:05d}.parquet")


def spill_files(directory: Path) -> list[Path]:
    """The map files of one spill, in map (partition) order."""
    return sorted(Path(directory).glob("*.parquet")) if Path(directory).exists() else []


def read_spill(directory: Path, group: int) -> pa.Table | None:
    """All workers' records of one group (files in partition order), or None."""
    files = spill_files(directory)
    if not files:
        return None
    table = read_bucket(files, group)
    return table if table.num_rows else None


# ----------------------------------------------------------------------------- handles


def document_handles(partition: int, rows: np.ndarray) -> np.ndarray:
    """int64[n] handles ``partition << HANDLE_SHIFT | row`` of kept rows
    ``rows`` (int[n]) of one partition."""
    return (np.int64(partition) << np.int64(HANDLE_SHIFT)) + np.asarray(rows, np.int64)


def node_group(handles: np.ndarray, groups: int) -> np.ndarray:
    """The spill group of each node handle (a multiplicative hash, so
    consecutive rows of one partition spread over the groups)."""
    with np.errstate(over="ignore"):
        mixed = np.asarray(handles).astype(np.uint64) * MIX_64
    return ((mixed >> np.uint64(32)) % np.uint64(groups)).astype(np.int64)


def partition_of(handles: np.ndarray) -> np.ndarray:
    """int64[n]: the partition of each handle (its high 32 bits)."""
    return (np.asarray(handles, np.int64) >> np.int64(HANDLE_SHIFT)).astype(np.int64)


def skip_rows(files: list[str], partition: int, removed_only: bool = False) -> np.ndarray:
    """Sorted kept-row positions of one partition's handles in a spill
    bucketed by partition (column ``g``; with ``removed_only``, rows whose
    ``reason`` is not null)."""
    if not files:
        return np.zeros(0, np.int64)
    table = read_bucket([Path(f) for f in files], partition,
                        schema=pa.schema([("g", pa.int64()), ("reason", pa.string())]) if removed_only else
                        pa.schema([("g", pa.int64())]))
    if removed_only and table.num_rows:
        table = table.filter(pc.is_valid(table["reason"]))
    g = table["g"].to_numpy() if table.num_rows else np.zeros(0, np.int64)
    return np.sort(g & np.int64((1 << HANDLE_SHIFT) - 1))
