"""The global steps of dedup as tasks, so the driver holds counts, never the
duplicates.

Every step reads one spill group (``common.spill``: one file per map task, one
row group per bucket) and writes its results, bucketed for the next step:

1. :func:`exact_group` (per exact-digest group): the keeper of each group of
   equal exact digests (smallest keeper key ``(k1, k2, id)``) and its members;
   writes the members by the partition that must skip them (no signature) and
   by the node group of their keeper (to meet its near-duplicate cluster).
2. Near-duplicate edges come from the band groups (``dedup_phases``), both
   directions, bucketed by node group.
3. :func:`star_step`: connected components by alternating *large-star* and
   *small-star* (Kiveris et al. 2014, "Connected Components in MapReduce and
   Beyond"): each step is one pass over the edges, grouped by node; the edge
   set converges to one star per component, centred on its smallest handle,
   in O(log^2 n) steps (a handful for near-duplicate graphs). The driver only
   compares each step's edge-set fingerprint (a sum of 64-bit hashes and a
   count) with the previous steps'.
4. :func:`component_members` (per node group): each node's component label
   joined with its keeper key and exact-duplicate count, bucketed by label.
5. :func:`component_keepers` (per label group): the keeper of each component
   and every member's Jaccard estimate to it (signatures read through a
   memory map).
6. :func:`final_records` (per node group): exact duplicates follow their
   keeper into its component; one row per cluster member, bucketed by the
   partition that holds it.
7. :func:`partition_removed` (per partition): ``removed/<partition>``.

The result is the same as connected components over all edges in one process
(tests/stages/test_dedup.py compares against scipy on random graphs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.spill import read_bucket, write_buckets

REASON_EXACT = "dedup.exact_duplicate"
REASON_NEAR = "dedup.near_duplicate"
HANDLE_SHIFT = 32
# Star steps before giving up (never reached: near-duplicate graphs converge
# in under 10; a path of 10**6 nodes needs ~40).
MAX_STAR_STEPS = 200
_MIX = np.uint64(0x9E3779B97F4A7C15)
_EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
LABELS = pa.schema([("g", pa.int64()), ("label", pa.int64())])
NODES = pa.schema([("g", pa.int64()), ("k1", pa.float64()), ("k2", pa.int64()), ("id", pa.string())])
COUNTS = pa.schema([("g", pa.int64()), ("n", pa.int64())])
EXACT_MEMBERS = pa.schema([("g", pa.int64()), ("id", pa.string()), ("keeper_g", pa.int64()),
                           ("keeper_id", pa.string())])
COMPONENT_MEMBERS = pa.schema([("label", pa.int64()), ("g", pa.int64()), ("k1", pa.float64()),
                               ("k2", pa.int64()), ("id", pa.string()), ("exact", pa.int64())])
NEAR = pa.schema([("g", pa.int64()), ("id", pa.string()), ("keeper_g", pa.int64()), ("keeper_id", pa.string()),
                  ("similarity", pa.float64())])
FINAL = pa.schema([("id", pa.string()), ("keeper", pa.string()), ("similarity", pa.float64()),
                   ("reason", pa.string()), ("g", pa.int64())])


def node_group(handles: np.ndarray, groups: int) -> np.ndarray:
    """The spill group of each node handle (a multiplicative hash, so
    consecutive rows of one partition spread over the groups)."""
    with np.errstate(over="ignore"):
        mixed = np.asarray(handles).astype(np.uint64) * _MIX
    return ((mixed >> np.uint64(32)) % np.uint64(groups)).astype(np.int64)


def partition_of(handles: np.ndarray) -> np.ndarray:
    return (np.asarray(handles, np.int64) >> np.int64(HANDLE_SHIFT)).astype(np.int64)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.parquet")) if folder.exists() else []


def _fingerprint(src: np.ndarray, dst: np.ndarray) -> int:
    """Order-independent hash of a set of directed pairs (sum of mixed
    64-bit hashes, mod 2**64)."""
    if not len(src):
        return 0
    with np.errstate(over="ignore"):
        h = (src.astype(np.uint64) * _MIX) ^ (dst.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019))
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return int(h.sum(dtype=np.uint64))


def _segments(keys: np.ndarray) -> np.ndarray:
    """Start of each run of equal values in a sorted array, plus its length."""
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True]) if len(keys) else np.zeros(1, np.int64)


# ----------------------------------------------------------------------------- 1. exact groups


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


# ----------------------------------------------------------------------------- 3. connected components


def write_edges(src: np.ndarray, dst: np.ndarray, groups: int, path: Path) -> None:
    """Undirected edges in large-star form: both directions, by source group."""
    s = np.concatenate([src, dst]).astype(np.int64)
    d = np.concatenate([dst, src]).astype(np.int64)
    write_buckets(pa.table({"src": s, "dst": d}, schema=_EDGE_SCHEMA), node_group(s, groups), path)


def star_step(task: dict[str, Any]) -> dict[str, int]:
    """Worker: one large-star or small-star step for one node group.

    Args:
        task: ``kind`` (``large``/``small``, or ``labels`` at the fixed point:
            write each node's star centre), ``files`` (this step's input:
            ``src, dst``), ``group``, ``groups``, ``out`` (this task's output
            file, in the next step's form).

    Large-star (input: every edge in both directions, grouped by ``src``): for
    each node ``u``, with ``m`` the smallest of ``u`` and its neighbours, link
    every neighbour larger than ``u`` to ``m``. Small-star (input: every edge
    once, at its larger end): for each node ``u`` with smaller neighbours
    ``N``, ``m = min(N)``: link ``u`` and every node of ``N`` to ``m``.

    Returns:
        ``{"count", "fingerprint"}`` of this step's input edge set (each
        undirected edge once), for the driver's convergence test.
    """
    table = read_bucket([Path(f) for f in task["files"]], task["group"], schema=_EDGE_SCHEMA)
    src, dst = table["src"].to_numpy(), table["dst"].to_numpy()
    if len(src):
        pairs = np.unique(np.stack([src, dst], 1), axis=0)
        src, dst = pairs[:, 0], pairs[:, 1]
    if task["kind"] in ("small", "labels_small"):
        stats = {"count": len(src), "fingerprint": _fingerprint(dst, src)}
    else:
        once = src < dst
        stats = {"count": int(once.sum()), "fingerprint": _fingerprint(src[once], dst[once])}
    out = Path(task["out"])
    starts = _segments(src)
    lows = np.minimum.reduceat(dst, starts[:-1]) if len(src) else np.zeros(0, np.int64)
    nodes = src[starts[:-1]] if len(src) else np.zeros(0, np.int64)
    m = np.minimum(lows, nodes)
    m_each = np.repeat(m, np.diff(starts))
    if task["kind"] in ("labels", "labels_small"):
        # A star per component: each node's label is its star centre.
        labels_g = np.concatenate([src, m]) if len(src) else np.zeros(0, np.int64)
        labels = np.concatenate([m_each, m]) if len(src) else np.zeros(0, np.int64)
        table = pa.table({"g": pa.array(labels_g, pa.int64()), "label": pa.array(labels, pa.int64())})
        if len(labels_g):
            table = pa.table({"g": table["g"], "label": table["label"]}).group_by("g").aggregate(
                [("label", "min")]).rename_columns(["g", "label"])
        write_buckets(table, node_group(table["g"].to_numpy(), task["groups"]), out)
        return stats
    if task["kind"] == "large":
        keep = dst > src
        v, to = dst[keep], m_each[keep]
        # next: small-star, each edge at its larger end (v > src >= m)
        write_buckets(pa.table({"src": v, "dst": to}, schema=_EDGE_SCHEMA), node_group(v, task["groups"]), out)
    else:
        v = np.concatenate([dst, nodes])
        to = np.concatenate([m_each, m])
        keep = v != to
        v, to = v[keep], to[keep]
        s = np.concatenate([v, to])
        d = np.concatenate([to, v])
        write_buckets(pa.table({"src": s, "dst": d}, schema=_EDGE_SCHEMA), node_group(s, task["groups"]), out)
    return stats


def connected_components(edge_files: list[Path], work: Path, groups: int, mapper) -> tuple[list[Path], int]:
    """Driver: alternate large-star and small-star steps until the input
    edge set of three steps in a row is the same (two steps left it as it
    was: one star per component), then write each node's label (the
    smallest handle of its component) to ``work/labels/``.

    Returns:
        (label files: ``g, label`` bucketed by node group, distinct edges of
        the input).

    Raises:
        RuntimeError: no convergence in :data:`MAX_STAR_STEPS` steps.
    """
    files, history = list(edge_files), []
    for step in range(MAX_STAR_STEPS):
        kind = "large" if step % 2 == 0 else "small"
        out = work / f"step-{step:03d}"
        results = mapper(star_step, [
            {"kind": kind, "files": [str(f) for f in files], "group": j, "groups": groups,
             "out": str(out / f"group-{j:05d}.parquet")} for j in range(groups)])
        history.append((sum(r["count"] for r in results), sum(r["fingerprint"] for r in results) % (1 << 64)))
        if len(history) >= 3 and history[-1] == history[-2] == history[-3]:
            break
        files = sorted(out.glob("*.parquet"))
    else:
        raise RuntimeError(f"dedup: connected components did not converge in {MAX_STAR_STEPS} steps")
    out = work / "labels"
    mapper(star_step, [{"kind": "labels" if kind == "large" else "labels_small", "files": [str(f) for f in files],
                        "group": j, "groups": groups, "out": str(out / f"group-{j:05d}.parquet")}
                       for j in range(groups)])
    return sorted(out.glob("*.parquet")), history[0][0]


# ----------------------------------------------------------------------------- 4-5. keepers


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
    from stages.dedup.phases import load_signatures

    table = read_bucket([Path(f) for f in task["files"]], task["group"], schema=COMPONENT_MEMBERS)
    out = Path(task["out"])
    if table.num_rows == 0:
        write_buckets(NEAR.empty_table(), np.zeros(0, np.int64), out)
        return {"components": 0, "members": 0, "sizes": {}}
    table = table.sort_by([("label", "ascending"), ("k1", "ascending"), ("k2", "ascending"), ("id", "ascending")])
    starts = _segments(table["label"].to_numpy())
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


# ----------------------------------------------------------------------------- 6-7. final records


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


def partition_removed(task: dict[str, Any]) -> int:
    """Worker: ``removed/<name>`` for one partition (``id, keeper,
    similarity, reason``, sorted by id), when it holds cluster members.
    Returns the rows written."""
    table = read_bucket([Path(f) for f in task["files"]], task["partition"], schema=FINAL)
    if table.num_rows == 0:
        return 0
    table = table.drop_columns(["g"]).sort_by("id")
    out = Path(task["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return table.num_rows
