"""Dedup's clusters and their keepers, as tasks over spill files (after the
connected components of :mod:`stages.dedup.components`):

1. :func:`component_members` (per node group): each node's component label
   joined with its keeper key and exact-duplicate count, bucketed by label.
2. :func:`component_keepers` (per label group): the keeper of each component
   and every member's Jaccard estimate to it (signatures read through a
   memory map).
3. :func:`final_records` (per node group): exact duplicates follow their
   keeper into its component; one row per cluster member, bucketed by the
   partition that holds it.
4. :func:`partition_removed` (per partition): ``removed/<partition>``, and
   the removed documents per source (for the ``warn_removed_share`` check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.io import write_table_atomic
from common.spill import read_bucket, write_buckets
from stages.base import read_kept, view_columns
from stages.dedup.components import LABELS, segments
from stages.dedup.exact import COUNTS, EXACT_MEMBERS, NO_SOURCE, REASON_EXACT
from stages.dedup.exchange import node_group, partition_of
from stages.dedup.signatures import load_signatures

REASON_NEAR = "dedup.near_duplicate"
NODES = pa.schema([("g", pa.int64()), ("k1", pa.float64()), ("k2", pa.int64()), ("id", pa.string())])
COMPONENT_MEMBERS = pa.schema([("label", pa.int64()), ("g", pa.int64()), ("k1", pa.float64()),
                               ("k2", pa.int64()), ("id", pa.string()), ("exact", pa.int64())])
NEAR = pa.schema([("g", pa.int64()), ("id", pa.string()), ("keeper_g", pa.int64()), ("keeper_id", pa.string()),
                  ("similarity", pa.float64())])
FINAL = pa.schema([("id", pa.string()), ("keeper", pa.string()), ("similarity", pa.float64()),
                   ("reason", pa.string()), ("g", pa.int64())])


# ----------------------------------------------------------------------------- keepers


def component_members(task: dict[str, Any]) -> int:
    """Worker: join one node group's labels with the nodes' keeper keys and
    exact-duplicate counts; write ``label, g, k1, k2, id, exact`` by label
    group. Returns the members written."""
    labels = read_bucket([Path(f) for f in task["labels"]], task["group"], schema=LABELS)
    # a star centre gets its own label from every task that saw one of its leaves
    labels = labels.group_by("g").aggregate([("label", "min")]).rename_columns(["g", "label"]).sort_by("g") \
        if labels.num_rows else labels
    nodes = read_bucket([Path(f) for f in task["nodes"]], task["group"], schema=NODES).sort_by("g")
    counts = read_bucket([Path(f) for f in task["counts"]], task["group"], schema=COUNTS)
    g = labels["g"].to_numpy() if labels.num_rows else np.zeros(0, np.int64)
    node_g = nodes["g"].to_numpy() if nodes.num_rows else np.zeros(0, np.int64)
    at = np.searchsorted(node_g, g)
    if len(g) and (at.max() >= len(node_g) or (node_g[at] != g).any()):
        raise RuntimeError("dedup: a near-duplicate node has no keeper key")
    exact = np.zeros(len(g), np.int64)
    if counts.num_rows and len(g):
        cg = counts["g"].to_numpy()
        order = np.argsort(cg)
        cg, cn = cg[order], counts["n"].to_numpy()[order]
        pos = np.clip(np.searchsorted(cg, g), 0, len(cg) - 1)
        hit = cg[pos] == g
        exact[hit] = cn[pos[hit]]
    take = pa.array(at)
    table = pa.table({"label": labels["label"], "g": pa.array(g, pa.int64()), "k1": nodes["k1"].take(take),
                      "k2": nodes["k2"].take(take), "id": nodes["id"].take(take),
                      "exact": pa.array(exact, pa.int64())})
    write_buckets(table, node_group(labels["label"].to_numpy() if labels.num_rows else np.zeros(0, np.int64),
                                    task["groups"]), Path(task["out"]))
    return table.num_rows


def component_keepers(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: per component of one label group, the keeper (smallest keeper
    key) and each member's estimated Jaccard to it; write ``g, id, keeper_g,
    keeper_id, similarity`` (null for keepers) by the member's node group.

    Returns:
        ``{"components", "members", "sizes": {documents: components}}``
        (documents: members plus their exact duplicates).
    """
    table = read_bucket([Path(f) for f in task["files"]], task["group"], schema=COMPONENT_MEMBERS)
    out = Path(task["out"])
    if table.num_rows == 0:
        write_buckets(NEAR.empty_table(), np.zeros(0, np.int64), out)
        return {"components": 0, "members": 0, "sizes": {}}
    table = table.sort_by([("label", "ascending"), ("k1", "ascending"), ("k2", "ascending"), ("id", "ascending")])
    starts = segments(table["label"].to_numpy())
    first = np.repeat(starts[:-1], np.diff(starts))
    g = table["g"].to_numpy()
    keeper_g = g[first]
    similarity = np.empty(len(g), np.float64)
    chunk = 65536
    for s in range(0, len(g), chunk):  # bounded temporaries
        rows = slice(s, s + chunk)
        agree = load_signatures(Path(task["signatures"]), g[rows], task["num_perm"]) == \
            load_signatures(Path(task["signatures"]), keeper_g[rows], task["num_perm"])
        similarity[rows] = np.count_nonzero(agree, axis=1) / task["num_perm"]
    is_keeper = np.arange(len(g)) == first
    result = pa.table({"g": pa.array(g), "id": table["id"], "keeper_g": pa.array(keeper_g),
                       "keeper_id": table["id"].take(pa.array(first)),
                       "similarity": pa.array(similarity, pa.float64(), mask=is_keeper)})
    write_buckets(result, node_group(g, task["groups"]), out)
    docs = np.add.reduceat(1 + table["exact"].to_numpy(), starts[:-1])
    sizes, counts = np.unique(docs, return_counts=True)
    return {"components": int(len(starts) - 1), "members": int(len(g)),
            "sizes": {int(k): int(v) for k, v in zip(sizes, counts)}}


# ----------------------------------------------------------------------------- final records


def final_records(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: one node group's cluster members as ``removed`` rows: its near
    members (reason ``dedup.near_duplicate``, keepers with null reason), the
    exact duplicates of its nodes (pointing at their keeper's final keeper:
    similarity 1.0 when that is their exact keeper, else the exact keeper's
    similarity to it), and a keeper row for an exact keeper in no near
    cluster. Written by the member's partition (``id, keeper, similarity,
    reason, g``).

    Returns:
        ``{"rows", "sizes": {documents: clusters}}`` for the exact-only clusters.
    """
    near = read_bucket([Path(f) for f in task["near"]], task["group"], schema=NEAR).sort_by("g")
    exact = read_bucket([Path(f) for f in task["exact"]], task["group"], schema=EXACT_MEMBERS)
    ng = near["g"].to_numpy() if near.num_rows else np.zeros(0, np.int64)
    ids, keepers, sims, reasons, handles = [near["id"]], [near["keeper_id"]], [near["similarity"]], [], [ng]
    reasons.append(pc.if_else(pc.is_valid(near["similarity"]), REASON_NEAR, pa.scalar(None, pa.string())))
    sizes: dict[int, int] = {}
    if exact.num_rows:
        eg = exact["keeper_g"].to_numpy()
        pos = np.clip(np.searchsorted(ng, eg), 0, max(len(ng) - 1, 0))
        in_near = (ng[pos] == eg) if len(ng) else np.zeros(len(eg), bool)
        final_id = pa.array(np.where(in_near, np.asarray(near["keeper_id"].take(pa.array(pos)).to_pylist(),
                                                            dtype=object) if len(ng) else None,
                                     np.asarray(exact["keeper_id"].to_pylist(), dtype=object)).tolist(),
                            pa.string())
        near_sim = near["similarity"].take(pa.array(pos)).to_numpy(zero_copy_only=False) if len(ng) else \
            np.zeros(len(eg))
        near_keeper_g = near["keeper_g"].take(pa.array(pos)).to_numpy() if len(ng) else np.zeros(len(eg), np.int64)
        sim = np.where(in_near & (near_keeper_g != eg), near_sim, 1.0)
        ids.append(exact["id"])
        keepers.append(final_id)
        sims.append(pa.array(sim, pa.float64()))
        reasons.append(pa.array([REASON_EXACT] * exact.num_rows, pa.string()))
        handles.append(exact["g"].to_numpy())
        # keeper rows for exact keepers that are in no near cluster
        alone = ~in_near
        kg, first = np.unique(eg[alone], return_index=True)
        if len(kg):
            kid = exact["keeper_id"].filter(pa.array(alone)).take(pa.array(first))
            ids.append(kid)
            keepers.append(kid)
            sims.append(pa.nulls(len(kg), pa.float64()))
            reasons.append(pa.nulls(len(kg), pa.string()))
            handles.append(kg)
            members = np.unique(eg[alone], return_counts=True)[1] + 1
            for k, v in zip(*np.unique(members, return_counts=True)):
                sizes[int(k)] = sizes.get(int(k), 0) + int(v)
    table = pa.table({"id": pa.concat_arrays([_arr(x) for x in ids]),
                      "keeper": pa.concat_arrays([_arr(x) for x in keepers]),
                      "similarity": pa.concat_arrays([_arr(x).cast(pa.float64()) for x in sims]),
                      "reason": pa.concat_arrays([_arr(x).cast(pa.string()) for x in reasons]),
                      "g": pa.array(np.concatenate(handles).astype(np.int64))})
    write_buckets(table, partition_of(table["g"].to_numpy()), Path(task["out"]))
    return {"rows": table.num_rows, "sizes": sizes}


def _arr(x) -> pa.Array:
    return x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x


def partition_removed(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: ``removed/<name>`` for one partition (``id, keeper,
    similarity, reason``, sorted by id), when it holds cluster members, and
    its removed documents per source and reason.

    Args:
        task: ``files`` (the final spill), ``partition`` (index), ``path``
            (the partition, for its ``source`` column), ``out``.

    Returns:
        ``{"rows": rows written, "removed": {source: {reason: documents}}}``.
    """
    table = read_bucket([Path(f) for f in task["files"]], task["partition"], schema=FINAL)
    if table.num_rows == 0:
        return {"rows": 0, "removed": {}}
    table = table.drop_columns(["g"]).sort_by("id")
    write_table_atomic(table, Path(task["out"]))
    removed = table.filter(pc.is_valid(table["reason"]))
    counts: dict[str, dict[str, int]] = {}
    if removed.num_rows:
        path = task["path"]
        docs = read_kept(path, ["id", "source"] if "source" in view_columns(path) else ["id"])
        sources = (pc.fill_null(docs["source"].cast(pa.string()), NO_SOURCE).take(
            pc.index_in(removed["id"], value_set=docs["id"])).to_pylist() if "source" in docs.column_names
            else [NO_SOURCE] * removed.num_rows)
        for source, reason in zip(sources, removed["reason"].to_pylist()):
            counts.setdefault(source, {}).setdefault(reason, 0)
            counts[source][reason] += 1
    return {"rows": table.num_rows, "removed": counts}
