"""LSH banding for dedup: the S-curve of ``num_bands`` x ``rows_per_band``,
and (per band spill group) the candidate pairs of equal band keys, verified
on the full MinHash signatures or on the exact shingle sets.

A band record ``(band, key, g)`` (:func:`stages.dedup.minhash.band_keys`,
spilled by :func:`stages.dedup.signatures.partition_signatures`) puts document
``g`` in one bucket per band; two documents sharing a bucket in any band are
a candidate pair (probability :func:`candidate_probability`), and a
candidate is an edge when it reaches ``jaccard_threshold``
(:func:`band_group_edges`). Edges go to the connected-components steps
(:mod:`stages.dedup.components`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from common.spill import write_buckets
from stages.base import read_kept, view_columns
from stages.dedup.components import write_edges
from stages.dedup.exchange import HANDLE_SHIFT, node_group, read_spill
from stages.dedup.signatures import document_shingle_sets, exact_jaccard, load_signatures

if TYPE_CHECKING:
    from stages.dedup.config import Config

# Buckets up to this many documents give all k(k-1)/2 candidate pairs; a larger
# bucket gives each member paired with the bucket's first member and with its
# neighbour in handle order (2k - 3 pairs), which is enough to connect a
# bucket of true near-duplicates (our choice; a bucket of 64 is 2,016 pairs).
ALL_PAIRS_MAX_BUCKET = 64
_VERIFY_CHUNK = 65536


# ----------------------------------------------------------------------------- S-curve


def candidate_probability(jaccard: float, num_bands: int, rows_per_band: int) -> float:
    """Probability that LSH makes two documents a candidate pair.

    ``P = 1 - (1 - J^r)^b`` for Jaccard similarity ``J``, ``b = num_bands``
    bands of ``r = rows_per_band`` rows (Leskovec, Rajaraman, Ullman, *Mining
    of Massive Datasets*, ch. 3.4).
    """
    return 1.0 - (1.0 - jaccard**rows_per_band) ** num_bands


def s_curve(num_bands: int, rows_per_band: int, points: int = 21) -> list[tuple[float, float]]:
    """The LSH S-curve as ``points`` pairs ``(jaccard, candidate_probability)``
    for ``jaccard`` evenly spaced over [0, 1], for reports and plots."""
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    return [(j, candidate_probability(j, num_bands, rows_per_band))
            for j in (i / (points - 1) for i in range(points))]


# ----------------------------------------------------------------------------- candidates and edges


def bucket_pairs(handles: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Candidate pairs of sorted buckets.

    Args:
        handles: int64[n], bucket members, ascending inside each bucket.
        starts: int64[B + 1], bucket b is ``handles[starts[b]:starts[b+1]]``.

    Returns:
        int64[P, 2] pairs ``(smaller, larger)``: all pairs of a bucket of at
        most :data:`ALL_PAIRS_MAX_BUCKET` members, else each member with the
        first and with its successor.
    """
    sizes = np.diff(starts)
    out = [np.empty((0, 2), np.int64)]
    for size in np.unique(sizes[sizes > 1]):
        st = starts[:-1][sizes == size]
        if size <= ALL_PAIRS_MAX_BUCKET:
            iu, ju = np.triu_indices(int(size), 1)
        else:
            steps = np.arange(1, size)
            iu = np.r_[np.zeros(size - 1, np.int64), steps[:-1]]
            ju = np.r_[steps, steps[1:]]
        out.append(np.stack([handles[(st[:, None] + iu).ravel()], handles[(st[:, None] + ju).ravel()]], 1))
    pairs = np.concatenate(out)
    return np.unique(pairs, axis=0) if len(pairs) else pairs


def band_group_edges(task: dict[str, Any]) -> dict[str, int]:
    """Worker: LSH candidates of one band spill group, verified.

    Sorts the group's band records by (band, key, g); records with equal
    (band, key) are a bucket; bucket pairs (:func:`bucket_pairs`) become edges
    when the exact Jaccard similarity of their shingle sets reaches
    ``jaccard_threshold`` (``verify: exact``, the default). The exact
    similarity is computed only for pairs whose signature estimate lies
    within :func:`verify_margin` of the threshold (their texts are read from
    ``paths``); a pair above that band is an edge, one below is not
    (:func:`agreement_cuts`). With ``verify: signature`` a pair is an edge
    when at least ``ceil(jaccard_threshold * num_perm)`` signature values
    agree, and no text is read.

    Args:
        task: ``spill`` (spill dir), ``group`` (index), ``signatures`` (dir),
            ``config`` (:class:`~stages.dedup.config.Config`: ``num_bands``,
            ``rows_per_band``, ``jaccard_threshold``, ``verify``,
            ``verify_margin_sd``, shingling),
            ``paths`` (the partitions),
            ``node_groups``, ``candidate_groups``.

    Writes:
        ``spill/edges/band-KKKKK.parquet``: the verified edges, both
        directions, by node group (the connected-components input);
        ``spill/candidates/band-KKKKK.parquet``: the candidate pairs
        (``a, b, checked``) by pair hash (counted once each by
        :func:`distinct_candidates`).

    Returns:
        ``{"candidates", "edges"}`` found in this group (a pair may be found
        in several groups).
    """
    pairs, edges, checked = _band_group_pairs(task)
    spill, name = Path(task["spill"]), f"band-{task['group']:05d}.parquet"
    write_edges(edges[:, 0], edges[:, 1], task["node_groups"], spill / "edges" / name)
    key = node_group(pairs[:, 0] * np.int64(1_000_003) + pairs[:, 1], task["candidate_groups"]) if len(pairs) else \
        np.zeros(0, np.int64)
    write_buckets(pa.table({"a": pa.array(pairs[:, 0], pa.int64()), "b": pa.array(pairs[:, 1], pa.int64()),
                            "checked": pa.array(checked, pa.bool_())}), key, spill / "candidates" / name)
    return {"candidates": int(len(pairs)), "edges": int(len(edges))}


def distinct_candidates(task: dict[str, Any]) -> dict[str, int]:
    """Worker: distinct candidate pairs of one candidate group, and how many
    of them needed the exact Jaccard check (``verify: exact``; a pair is
    checked in each band group that finds it, counted once here).

    Returns:
        ``{"candidates", "exact_checks"}``.
    """
    table = read_spill(Path(task["spill"]) / "candidates", task["group"])
    if table is None:
        return {"candidates": 0, "exact_checks": 0}
    pairs, first = np.unique(np.stack([table["a"].to_numpy(), table["b"].to_numpy()], 1), axis=0,
                             return_index=True)
    checked = table["checked"].to_numpy(zero_copy_only=False)[first]
    return {"candidates": int(len(pairs)), "exact_checks": int(np.count_nonzero(checked))}


def verify_margin(config: Config) -> float:
    """The half-width (Jaccard units) of the band around ``jaccard_threshold``
    t in which ``verify: exact`` computes the exact Jaccard similarity:
    ``verify_margin_sd * sqrt(t * (1 - t) / num_perm)``, i.e. that many
    standard deviations of the signature estimate of a pair whose true
    Jaccard is t (the estimate is a binomial share of ``num_perm``
    agreements; Broder 1997). Default 4 x sqrt(0.8 * 0.2 / 112) = 0.151."""
    t = config.jaccard_threshold
    return config.verify_margin_sd * float(np.sqrt(t * (1.0 - t) / config.num_perm))


def agreement_cuts(config: Config) -> tuple[int, int, int]:
    """``(low, needed, high)``: signature agreements (of ``num_perm``) at
    ``t - margin``, ``t`` and ``t + margin`` (:func:`verify_margin`), rounded
    up. With ``verify: exact`` a candidate pair with at least ``high``
    agreements is an edge and one with fewer than ``low`` is not, without
    reading its text; the exact Jaccard decides the pairs in between. With
    ``verify: signature``, ``low == needed == high``."""
    num_perm = config.num_perm
    t = config.jaccard_threshold
    needed = int(np.ceil(t * num_perm - 1e-9))
    if config.verify != "exact":
        return needed, needed, needed
    margin = verify_margin(config)
    low = max(0, int(np.ceil((t - margin) * num_perm - 1e-9)))
    high = int(np.ceil((t + margin) * num_perm - 1e-9))
    return low, needed, high


def _band_group_pairs(task: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidate pairs int64[C, 2], edges int64[E, 2], bool[C]: the pair's
    exact Jaccard was computed) of one band spill group (see
    :func:`band_group_edges`)."""
    config: Config = task["config"]
    num_perm = config.num_perm
    empty = (np.empty((0, 2), np.int64), np.empty((0, 2), np.int64), np.empty(0, bool))
    table = read_spill(Path(task["spill"]) / "bands", task["group"])
    if table is None:
        return empty
    band, key, g = (table[c].to_numpy() for c in ("band", "key", "g"))
    del table
    order = np.lexsort((g, key, band))
    band, key, g = band[order], key[order], g[order]
    change = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(np.r_[True, change, True])
    pairs = bucket_pairs(g, starts)
    del band, key, g, order
    if not len(pairs):
        return empty
    nodes = np.sort(pairs, axis=None)
    nodes = nodes[np.r_[True, nodes[1:] != nodes[:-1]]]  # np.unique: hash-based in numpy 2.4, far slower here
    signatures = load_signatures(Path(task["signatures"]), nodes, num_perm)
    a, b = np.searchsorted(nodes, pairs[:, 0]), np.searchsorted(nodes, pairs[:, 1])
    agree = np.concatenate([np.count_nonzero(signatures[a[s:s + _VERIFY_CHUNK]] ==
                                             signatures[b[s:s + _VERIFY_CHUNK]], axis=1)
                            for s in range(0, len(pairs), _VERIFY_CHUNK)])
    del signatures
    low, needed, high = agreement_cuts(config)
    passed = agree >= high
    checked = (agree >= low) & (agree < high)
    unsure = np.flatnonzero(checked)
    if len(unsure):  # verify: exact, estimate within the margin: the exact shingle Jaccard decides
        read = np.unique(np.r_[a[unsure], b[unsure]])  # positions in nodes, ascending
        rows = _document_rows(task["paths"], nodes[read], ["text", "langid_lang"])  # handle order
        langs = rows["langid_lang"].to_pylist() if "langid_lang" in rows.column_names else [None] * rows.num_rows
        sets = document_shingle_sets(rows["text"].to_pylist(), langs, config)
        ia, ib = np.searchsorted(read, a[unsure]), np.searchsorted(read, b[unsure])
        passed[unsure] = [exact_jaccard(sets[i], sets[j]) >= config.jaccard_threshold for i, j in zip(ia, ib)]
    return pairs, pairs[passed], checked


def _document_rows(paths: list[str], handles: np.ndarray, columns: list[str]) -> pa.Table:
    """The kept rows ``handles`` (any order) of the partitions, in handle
    order, with ``columns`` that exist, plus ``g``."""
    handles = np.sort(np.asarray(handles, np.int64))
    parts = handles >> np.int64(HANDLE_SHIFT)
    tables = []
    for p in np.unique(parts):
        rows = handles[parts == p] & np.int64((1 << HANDLE_SHIFT) - 1)
        names = view_columns(paths[int(p)])
        t = read_kept(paths[int(p)], [c for c in columns if c in names]).take(pa.array(rows))
        tables.append(t.append_column("g", pa.array(handles[parts == p])))
    return pa.concat_tables(tables, promote_options="default")
