"""Connected components of dedup's near-duplicate graph, as tasks over
spill files, so the driver holds counts, never the edges.

Near-duplicate edges come from the band groups (:mod:`stages.dedup.lsh`),
both directions, bucketed by node group (:func:`write_edges`).
:func:`star_step`: connected components by alternating *large-star* and
*small-star* (Kiveris et al. 2014, "Connected Components in MapReduce and
Beyond"): each step is one pass over the edges, grouped by node; the edge
set converges to one star per component, centred on its smallest handle,
in O(log^2 n) steps (a handful for near-duplicate graphs). The driver
(:func:`connected_components`) only compares each step's edge-set
fingerprint (a sum of 64-bit hashes and a count) with the previous steps'.

The result is the same as connected components over all edges in one process
(tests/stages/test_dedup_components.py compares against scipy on random graphs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from common.spill import read_bucket, write_buckets
from stages.dedup.exchange import MIX_64, node_group

# Star steps before giving up (never reached: near-duplicate graphs converge
# in under 10; a path of 10**6 nodes needs ~40).
MAX_STAR_STEPS = 200
_EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
LABELS = pa.schema([("g", pa.int64()), ("label", pa.int64())])


def _fingerprint(src: np.ndarray, dst: np.ndarray) -> int:
    """Order-independent hash of a set of directed pairs (sum of mixed
    64-bit hashes, mod 2**64)."""
    if not len(src):
        return 0
    with np.errstate(over="ignore"):
        h = (src.astype(np.uint64) * MIX_64) ^ (dst.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019))
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return int(h.sum(dtype=np.uint64))


def segments(keys: np.ndarray) -> np.ndarray:
    """Start of each run of equal values in a sorted array, plus its length."""
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True]) if len(keys) else np.zeros(1, np.int64)


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
    starts = segments(src)
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
