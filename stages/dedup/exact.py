"""Phase 1 of dedup: document ids, exact-duplicate keys and every
document's keeper key, then the exact-duplicate groups.

1. :func:`document_keys` (per partition): spills the ids (for
   :func:`check_unique_ids`, one :func:`repeated_id` task per id group), the
   keeper key of every document (``nodes``, for the clustering steps) and,
   when exact dedup is on, the blake2b-128 digest of each exact-normalized
   text (:func:`stages.dedup.normalize.exact_normalize`).
2. :func:`exact_group` (per exact-digest group): the keeper of each group of
   equal exact digests (smallest keeper key ``(k1, k2, id)``) and its members;
   writes the members by the partition that must skip them (no signature) and
   by the node group of their keeper (to meet its near-duplicate cluster).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.spill import read_bucket, write_buckets
from stages.base import read_kept, view_columns
from stages.dedup.exchange import document_handles, node_group, partition_of, read_spill, write_spill
from stages.dedup.keepers import keeper_columns, keeper_keys
from stages.dedup.normalize import exact_normalize

if TYPE_CHECKING:
    from stages.dedup.config import Config

REASON_EXACT = "dedup.exact_duplicate"
NO_SOURCE = "(no source)"  # the per-source count of documents whose source is null
EXACT_HASH_NAME = "blake2b-128(nfkc+casefold+collapse_whitespace)"
COUNTS = pa.schema([("g", pa.int64()), ("n", pa.int64())])
EXACT_MEMBERS = pa.schema([("g", pa.int64()), ("id", pa.string()), ("keeper_g", pa.int64()),
                           ("keeper_id", pa.string())])


# ----------------------------------------------------------------------------- ids, exact keys


def document_keys(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 1 over one partition: spill the ids (uniqueness check)
    and, when exact dedup is on, the exact-dedup records.

    Args:
        item: ``path``, ``partition`` (int), ``config`` (the stage's
            :class:`~stages.dedup.config.Config`: ``keep``, ``exact``),
            ``spill`` (directory), ``id_groups``, ``exact_groups``,
            ``node_groups`` (the keeper keys of every document go to
            ``spill/nodes`` by node group, for the clustering steps).

    Returns:
        ``{"documents": kept rows, "chars": their characters, "lines": their
        lines (``"\\n"`` count + 1), "sources": kept rows per source}``.
    """
    path, partition, spill = item["path"], item["partition"], Path(item["spill"])
    config: Config = item["config"]
    columns = keeper_columns(path, config.keep)
    table = read_kept(path, columns + (["source"] if "source" in view_columns(path) else []))
    n = table.num_rows
    ids = table["id"]
    import xxhash

    id_hashes = np.fromiter((xxhash.xxh3_64_intdigest(i.encode("utf-8")) for i in ids.to_pylist()),
                            np.uint64, n)
    write_spill(pa.table({"id": ids}), id_hashes, item["id_groups"], spill / "ids", partition)
    normalized = ([exact_normalize(t or "") for t in table["text"].to_pylist()]
                  if config.exact or config.keep != "smallest_id" else None)  # digests and normalized lengths
    k1, k2 = keeper_keys(table, config.keep, normalized)
    g = document_handles(partition, np.arange(n))
    write_buckets(pa.table({"g": pa.array(g, pa.int64()), "k1": k1, "k2": k2, "id": ids}),
                  node_group(g, item["node_groups"]), spill / "nodes" / f"part-{partition:05d}.parquet")
    if config.exact:
        digests = b"".join(hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in normalized)
        d = np.frombuffer(digests, "<u8").reshape(n, 2) if n else np.zeros((0, 2), np.uint64)
        records = pa.table({"d0": pa.array(d[:, 0], pa.uint64()), "d1": pa.array(d[:, 1], pa.uint64()),
                            "k1": k1, "k2": k2, "id": ids, "g": pa.array(g, pa.int64())})
        write_spill(records, d[:, 0], item["exact_groups"], spill / "exact", partition)
    text = table["text"]
    lines = int(pc.sum(pc.count_substring(text, "\n")).as_py() or 0) + n
    chars = int(pc.sum(pc.utf8_length(text)).as_py() or 0)
    return {"documents": n, "chars": chars, "lines": lines, "sources": source_counts(table)}


def source_counts(table: pa.Table) -> dict[str, int]:
    """Rows per ``source`` of a table (null or a missing column:
    :data:`NO_SOURCE`), sorted by source."""
    if table.num_rows == 0:
        return {}
    if "source" not in table.column_names:
        return {NO_SOURCE: table.num_rows}
    counts = pc.value_counts(pc.fill_null(table["source"].cast(pa.string()), NO_SOURCE))
    return dict(sorted((c["values"].as_py(), c["counts"].as_py()) for c in counts))


def repeated_id(task: dict[str, Any]) -> str | None:
    """Worker: an id that occurs twice in one id spill group, or None."""
    table = read_spill(Path(task["spill"]) / "ids", task["group"])
    if table is None:
        return None
    ids = table["id"]
    if len(pc.unique(ids)) == len(ids):
        return None
    ordered = ids.take(pc.sort_indices(ids)).to_pylist()
    return next(a for a, b in zip(ordered, ordered[1:]) if a == b)


def check_unique_ids(spill: Path, groups: int, mapper=None) -> None:
    """Raise ``ValueError("dedup: document id '...' occurs more than once")``
    when an id was spilled twice (each group checked by one task)."""
    tasks = [{"spill": str(spill), "group": k} for k in range(groups)]
    found = mapper(repeated_id, tasks) if mapper else [repeated_id(t) for t in tasks]
    dup = next((d for d in found if d is not None), None)
    if dup is not None:
        raise ValueError(f"dedup: document id {dup!r} occurs more than once")


# ----------------------------------------------------------------------------- exact groups


def exact_group(task: dict[str, Any]) -> dict[str, int]:
    """Worker: the exact-duplicate groups of one exact spill group.

    Args:
        task: ``files`` (exact spill: ``d0, d1, k1, k2, id, g``), ``group``,
            ``node_groups``, ``out`` (directory).

    Writes (one file each, ``<out>/<kind>/group-KKKKK.parquet``):
        ``skip``: ``g`` of every duplicate, by its partition;
        ``members``: ``g, id, keeper_g, keeper_id`` of every duplicate, by
        its keeper's node group;
        ``counts``: ``g`` (keeper), ``n`` (its duplicates), by node group.

    Returns:
        ``{"duplicates": n}``.
    """
    table = read_bucket([Path(f) for f in task["files"]], task["group"])
    name = f"group-{task['group']:05d}.parquet"
    out = Path(task["out"])
    empty = {"skip": pa.table({"g": pa.array([], pa.int64())}), "members": EXACT_MEMBERS.empty_table(),
             "counts": COUNTS.empty_table()}
    if table.num_rows == 0:
        for kind, t in empty.items():
            write_buckets(t, np.zeros(0, np.int64), out / kind / name)
        return {"duplicates": 0}
    table = table.sort_by([(c, "ascending") for c in ("d0", "d1", "k1", "k2", "id")])
    d0, d1 = table["d0"].to_numpy(), table["d1"].to_numpy()
    starts = np.flatnonzero(np.r_[True, (d0[1:] != d0[:-1]) | (d1[1:] != d1[:-1]), True])
    first = np.repeat(starts[:-1], np.diff(starts))
    dup = np.flatnonzero(np.arange(table.num_rows) != first)
    g = table["g"].to_numpy()
    keeper = first[dup]
    members = pa.table({"g": pa.array(g[dup]), "id": table["id"].take(pa.array(dup)),
                        "keeper_g": pa.array(g[keeper]), "keeper_id": table["id"].take(pa.array(keeper))})
    write_buckets(pa.table({"g": pa.array(g[dup])}), partition_of(g[dup]), out / "skip" / name)
    write_buckets(members, node_group(g[keeper], task["node_groups"]), out / "members" / name)
    sizes = np.diff(starts)
    keepers = starts[:-1][sizes > 1]
    counts = pa.table({"g": pa.array(g[keepers]), "n": pa.array((sizes[sizes > 1] - 1).astype(np.int64))})
    write_buckets(counts, node_group(g[keepers], task["node_groups"]), out / "counts" / name)
    return {"duplicates": int(len(dup))}
