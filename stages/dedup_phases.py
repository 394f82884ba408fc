"""The phases of dedup, with driver memory that does not grow with the corpus.

Every global grouping (equal ids, equal exact digests, equal LSH band keys,
equal lines) goes through the same *spill*: each worker writes its records to
``<spill>/<kind>/group-KKKKK/part-PPPPP.parquet``, the group ``K`` being the
record's key modulo the number of groups; the driver then reads **one group
at a time** (every worker's file for that group), sorts it and emits what it
found. The number of groups is chosen from an upper bound of the record count
(:func:`spill_groups`), so one group holds at most about ``*_RECORDS_PER_GROUP``
records whatever the corpus size. What the driver keeps between groups is
proportional to the *duplicates* (exact groups, verified edges, removed lines),
not to the documents.

A document is addressed by its handle ``g = partition << 32 | kept_row``
(int64) inside one ``fit``; handles never leave ``fit``. Every keeper choice
uses the keeper key ``(k1, k2, id)`` (:func:`keeper_keys`), never ``g``, so it
does not depend on partitioning or input order.

Worker functions (top-level, picklable, for ``partitions.map``):
:func:`document_keys`, :func:`partition_signatures`, :func:`partition_lines`.
Driver functions: :func:`check_unique_ids`, :func:`exact_duplicates`,
:func:`near_duplicate_edges`, :func:`near_clusters`, :func:`removed_table`,
:func:`duplicate_lines`.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages import dedup_minhash as mh
from stages.base import read_kept, view_columns

REASON_EXACT = "dedup.exact_duplicate"
REASON_NEAR = "dedup.near_duplicate"

HANDLE_SHIFT = 32  # g = partition << 32 | row: up to 4.29e9 kept rows per partition
# Records per spill group; our choice, sized so one group needs at most ~60 MB
# in the driver (a band record is 18 bytes, sorting adds ~3x; exact and line
# records carry the document id, ~60-100 bytes with Arrow's sort). Measured
# peak RSS: bench/dedup.py (docs/stages/dedup.md).
ID_RECORDS_PER_GROUP = 500_000
EXACT_RECORDS_PER_GROUP = 250_000
BAND_RECORDS_PER_GROUP = 1_000_000
LINE_RECORDS_PER_GROUP = 250_000
MAX_SPILL_GROUPS = 4096
# Buckets up to this many documents give all k(k-1)/2 candidate pairs; a larger
# bucket gives each member paired with the bucket's first member and with its
# neighbour in handle order (2k - 3 pairs), which is enough to connect a
# bucket of true near-duplicates (our choice; a bucket of 64 is 2,016 pairs).
ALL_PAIRS_MAX_BUCKET = 64
_VERIFY_CHUNK = 65536


# ----------------------------------------------------------------------------- spill


def spill_groups(records: int, per_group: int) -> int:
    """Number of spill groups for ``records`` records (an upper bound is
    fine): ``ceil(records / per_group)``, clamped to ``[1, MAX_SPILL_GROUPS]``."""
    return max(1, min(MAX_SPILL_GROUPS, math.ceil(records / per_group)))


def _write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def write_spill(table: pa.Table, keys: np.ndarray, num_groups: int, directory: Path,
                partition: int) -> None:
    """Write ``table``'s rows to their groups: row i goes to group
    ``keys[i] % num_groups`` (keys uint64[n]), file
    ``directory/group-KKKKK/part-PPPPP.parquet``. Groups without rows get no file."""
    if table.num_rows == 0:
        return
    group = (np.asarray(keys, np.uint64) % np.uint64(num_groups)).astype(np.int64)
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    bounds = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = table.take(pa.array(order[lo:hi]))
        _write_atomic(part, directory / f"group-{sorted_groups[lo]:05d}" / f"part-{partition:05d}.parquet")


def read_spill(directory: Path, group: int) -> pa.Table | None:
    """All workers' records of one group (files in partition order), or None."""
    folder = directory / f"group-{group:05d}"
    files = sorted(folder.glob("part-*.parquet")) if folder.exists() else []
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f) for f in files])


# ----------------------------------------------------------------------------- keeper keys


def keeper_keys(table: pa.Table, keep: str) -> tuple[np.ndarray, np.ndarray]:
    """The order-independent keeper key of each document: the keeper of a
    group is the member with the smallest ``(k1, k2, id)``.

    Args:
        table: n documents with ``text`` or ``chars`` (raw characters), and
            ``perplexity_value`` for ``lowest_perplexity``.
        keep: ``longest`` (k1 = -characters), ``smallest_id`` (k1 = k2 = 0),
            ``lowest_perplexity`` (k1 = perplexity, null last; k2 = -characters).

    Returns:
        ``(k1 float64[n], k2 int64[n])``.

    Raises:
        ValueError: ``lowest_perplexity`` without a ``perplexity_value`` column.
    """
    n = table.num_rows
    if "chars" in table.column_names:
        chars = table["chars"].to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        chars = pc.utf8_length(table["text"]).to_numpy(zero_copy_only=False).astype(np.int64)
    zeros_f, zeros_i = np.zeros(n, np.float64), np.zeros(n, np.int64)
    if keep == "longest":
        return -chars.astype(np.float64), zeros_i
    if keep == "smallest_id":
        return zeros_f, zeros_i
    if keep == "lowest_perplexity":
        if "perplexity_value" not in table.column_names:
            raise ValueError("dedup keep=lowest_perplexity needs the perplexity stage's "
                             "perplexity_value column (enable the perplexity stage)")
        ppl = pc.fill_null(table["perplexity_value"].cast(pa.float64()), np.inf)
        ppl = ppl.to_numpy(zero_copy_only=False).astype(np.float64)
        return np.where(np.isnan(ppl), np.inf, ppl), -chars
    raise ValueError(f"unknown keep rule {keep!r}")


def _keep_columns(path, keep: str, extra: list[str]) -> list[str]:
    names = view_columns(path)
    cols = ["id", "text"] + [c for c in ("chars", "langid_lang", "lang_hint") if c in names]
    if keep == "lowest_perplexity" and "perplexity_value" in names:
        cols.append("perplexity_value")
    return cols + [c for c in extra if c in names and c not in cols]


def _handles(partition: int, rows: np.ndarray) -> np.ndarray:
    return (np.int64(partition) << np.int64(HANDLE_SHIFT)) + np.asarray(rows, np.int64)


# ----------------------------------------------------------------------------- phase 1: ids, exact


def document_keys(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 1 over one partition: spill the ids (uniqueness check)
    and, when exact dedup is on, the exact-dedup records.

    Args:
        item: ``path``, ``partition`` (int), ``cfg`` (``Config.model_dump()``),
            ``spill`` (directory), ``id_groups``, ``exact_groups``.

    Returns:
        ``{"documents": kept rows, "chars": their characters, "lines": their
        lines (``"\\n"`` count + 1)}``.
    """
    path, partition, cfg, spill = item["path"], item["partition"], item["cfg"], Path(item["spill"])
    table = read_kept(path, _keep_columns(path, cfg["keep"], []))
    n = table.num_rows
    ids = table["id"]
    import xxhash

    id_hashes = np.fromiter((xxhash.xxh3_64_intdigest(i.encode("utf-8")) for i in ids.to_pylist()),
                            np.uint64, n)
    write_spill(pa.table({"id": ids}), id_hashes, item["id_groups"], spill / "ids", partition)
    if cfg["exact"] and n:
        digests = b"".join(hashlib.blake2b(mh.exact_normalize(t or "").encode("utf-8"), digest_size=16).digest()
                           for t in table["text"].to_pylist())
        d = np.frombuffer(digests, "<u8").reshape(n, 2)
        k1, k2 = keeper_keys(table, cfg["keep"])
        records = pa.table({"d0": d[:, 0], "d1": d[:, 1], "k1": k1, "k2": k2, "id": ids,
                            "g": _handles(partition, np.arange(n))})
        write_spill(records, d[:, 0], item["exact_groups"], spill / "exact", partition)
    text = table["text"]
    lines = int(pc.sum(pc.count_substring(text, "\n")).as_py() or 0) + n
    chars = int(pc.sum(pc.utf8_length(text)).as_py() or 0)
    return {"documents": n, "chars": chars, "lines": lines}


def check_unique_ids(spill: Path, groups: int) -> None:
    """Raise ``ValueError("dedup: document id '...' occurs more than once")``
    when an id was spilled twice (ids of one group are compared sorted)."""
    for k in range(groups):
        table = read_spill(spill / "ids", k)
        if table is None:
            continue
        ids = table["id"]
        if len(pc.unique(ids)) != len(ids):
            s = pc.sort_indices(ids)
            ordered = ids.take(s).to_pylist()
            dup = next(a for a, b in zip(ordered, ordered[1:]) if a == b)
            raise ValueError(f"dedup: document id {dup!r} occurs more than once")


def _sorted_group_starts(table: pa.Table, group_columns: list[str],
                         order_columns: list[str]) -> tuple[pa.Table, np.ndarray]:
    """Sort ``table`` by group then order columns; return it and the row
    indices where a new group starts (plus the row count at the end)."""
    table = table.sort_by([(c, "ascending") for c in group_columns + order_columns])
    change = np.zeros(max(table.num_rows - 1, 0), bool)
    for c in group_columns:
        v = table[c].to_numpy()
        change |= v[1:] != v[:-1]
    return table, np.flatnonzero(np.r_[True, change, True]) if table.num_rows else np.zeros(1, np.int64)


def exact_duplicates(spill: Path, groups: int) -> pa.Table:
    """Driver: exact-duplicate groups, one spill group at a time.

    Returns:
        Table ``g`` (int64), ``id``, ``keeper_g``, ``keeper_id``: one row per
        document whose exact digest equals that of a better-keyed document
        (the group's keeper, smallest ``(k1, k2, id)``); keepers are not rows.
    """
    out = []
    for k in range(groups):
        table = read_spill(spill / "exact", k)
        if table is None:
            continue
        table, starts = _sorted_group_starts(table, ["d0", "d1"], ["k1", "k2", "id"])
        sizes = np.diff(starts)
        first = np.repeat(starts[:-1], sizes)
        dup = np.flatnonzero(np.arange(table.num_rows) != first)
        if not len(dup):
            continue
        out.append(pa.table({"g": table["g"].take(pa.array(dup)), "id": table["id"].take(pa.array(dup)),
                             "keeper_g": table["g"].take(pa.array(first[dup])),
                             "keeper_id": table["id"].take(pa.array(first[dup]))}))
    if not out:
        return pa.table({"g": pa.array([], pa.int64()), "id": pa.array([], pa.string()),
                         "keeper_g": pa.array([], pa.int64()), "keeper_id": pa.array([], pa.string())})
    return pa.concat_tables(out)


# ----------------------------------------------------------------------------- phase 2: signatures, bands


def _shingle_texts(texts: list[str], langs: list[str | None], cfg: dict[str, Any]
                   ) -> tuple[list[str], np.ndarray]:
    """Near-normalized (and, for CJK, script-folded) texts and whether each
    uses character shingles: exactly what signatures are computed from."""
    normalized = mh.near_normalize_batch(texts)
    char_mode = np.array([mh.uses_char_shingles(t, lang) for t, lang in zip(normalized, langs)], bool)
    fold = cfg.get("fold_chinese_script", "none")
    if fold != "none":
        foldable = [i for i in np.flatnonzero(char_mode) if langs[i] not in mh.NO_FOLD_LANGS]
        for i, t in zip(foldable, mh.fold_script([normalized[i] for i in foldable], fold)):
            normalized[i] = t
    return normalized, char_mode


def document_shingle_sets(texts: list[str], langs: list[str | None], cfg: dict[str, Any]) -> list[np.ndarray]:
    """Each document's set of shingle hashes (sorted unique uint32), from the
    same normalization, folding and shingles as its MinHash signature; empty
    for a text that is empty after normalization."""
    normalized, char_mode = _shingle_texts(texts, langs, cfg)
    return [np.unique(mh.shingle_hashes(t, bool(c), cfg["ngram_words"], cfg["ngram_chars"]))
            for t, c in zip(normalized, char_mode)]


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A ∩ B| / |A ∪ B| of two sorted unique hash arrays (0.0 when both are empty)."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - inter
    return inter / union if union else 0.0


def document_signatures(texts: list[str], langs: list[str | None], cfg: dict[str, Any]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """MinHash signatures of documents (pure; the same in any process).

    Args:
        texts: D raw texts; langs: D ``langid_lang`` values (None = unknown).
        cfg: ``Config.model_dump()`` (``ngram_words``, ``ngram_chars``,
            ``num_bands``, ``rows_per_band``, ``seed``, ``fold_chinese_script``).

    Returns:
        ``(positions int64[m], signatures uint32[m, num_perm])`` for the
        documents whose near-normalized text is not empty, in input order.
    """
    num_perm = cfg["num_bands"] * cfg["rows_per_band"]
    normalized, char_mode = _shingle_texts(texts, langs, cfg)
    positions, signatures = [], []
    for char_shingles in (True, False):
        members = np.flatnonzero(char_mode == char_shingles)
        if not len(members):
            continue
        tokens, lengths = mh.shingle_tokens([normalized[i] for i in members], char_shingles)
        nonempty = lengths > 0
        if not nonempty.any():
            continue
        hashes, offsets = mh.ngram_hashes(tokens, lengths[nonempty],
                                          cfg["ngram_chars"] if char_shingles else cfg["ngram_words"])
        positions.append(members[nonempty])
        signatures.append(mh.minhash_signatures(hashes, offsets, num_perm, cfg["seed"]))
    if not positions:
        return np.empty(0, np.int64), np.empty((0, num_perm), np.uint32)
    positions_all = np.concatenate(positions)
    order = np.argsort(positions_all, kind="stable")
    return positions_all[order].astype(np.int64), np.concatenate(signatures)[order]


def partition_signatures(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 2 over one partition: sign every kept row that is not an
    exact duplicate, store the signatures, spill the LSH band records.

    Args:
        item: ``path``, ``partition``, ``cfg``, ``spill``, ``band_groups``,
            ``skip`` (int64[k] kept-row positions not to sign: exact
            duplicates), ``signatures`` (directory).

    Writes:
        ``signatures/part-PPPPP.npy``: uint32[kept rows, num_perm], zero rows
        for documents not signed; ``spill/bands``: ``band`` uint16, ``key``
        uint64 (:func:`stages.dedup_minhash.band_keys`), ``g`` int64.

    Returns:
        ``{"signed": m, "empty": rows that were empty after normalization}``.
    """
    path, partition, cfg = item["path"], item["partition"], item["cfg"]
    table = read_kept(path, _keep_columns(path, cfg["keep"], []))
    n = table.num_rows
    rows = np.setdiff1d(np.arange(n), np.asarray(item["skip"], np.int64))
    texts = table["text"].take(pa.array(rows)).to_pylist()
    langs = (table["langid_lang"].take(pa.array(rows)).to_pylist() if "langid_lang" in table.column_names
             else [None] * len(rows))
    positions, signatures = document_signatures(texts, langs, cfg)
    signed = rows[positions]
    num_perm = cfg["num_bands"] * cfg["rows_per_band"]
    dense = np.zeros((n, num_perm), np.uint32)
    dense[signed] = signatures
    out = Path(item["signatures"]) / f"part-{partition:05d}.npy"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, dense)
    os.replace(tmp, out)
    keys = mh.band_keys(signatures, cfg["num_bands"], cfg["rows_per_band"])  # [m, bands]
    m = len(signed)
    records = pa.table({"band": np.tile(np.arange(cfg["num_bands"], dtype=np.uint16), m),
                        "key": keys.ravel(), "g": np.repeat(_handles(partition, signed), cfg["num_bands"])})
    write_spill(records, keys.ravel(), item["band_groups"], Path(item["spill"]) / "bands", partition)
    return {"signed": m, "empty": len(rows) - m}


def load_signatures(directory: Path, handles: np.ndarray, num_perm: int) -> np.ndarray:
    """uint32[len(handles), num_perm]: the stored signatures of ``handles``,
    read partition by partition through a memory map (only touched pages)."""
    handles = np.asarray(handles, np.int64)
    out = np.empty((len(handles), num_perm), np.uint32)
    parts = handles >> np.int64(HANDLE_SHIFT)
    rows = handles & np.int64((1 << HANDLE_SHIFT) - 1)
    for p in np.unique(parts):
        sel = np.flatnonzero(parts == p)
        stored = np.load(directory / f"part-{int(p):05d}.npy", mmap_mode="r")
        out[sel] = stored[rows[sel]]
        del stored
    return out


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


def band_group_edges(task: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Worker: LSH candidates of one band spill group, verified on full signatures.

    Sorts the group's band records by (band, key, g); records with equal
    (band, key) are a bucket; bucket pairs (:func:`bucket_pairs`) become edges
    when at least ``ceil(jaccard_threshold * num_perm)`` signature values agree
    (``verify: signature``), or when the exact Jaccard similarity of their
    shingle sets reaches ``jaccard_threshold`` (``verify: exact``; reads the
    candidates' texts from ``paths``).

    Args:
        task: ``spill`` (spill dir), ``group`` (index), ``signatures`` (dir),
            ``cfg`` (the dedup config as a dict), ``paths`` (the partitions).

    Returns:
        (candidate pairs int64[C, 2], edges int64[E, 2], similarity float64[E]).
    """
    cfg = task["cfg"]
    num_perm = cfg["num_bands"] * cfg["rows_per_band"]
    needed = int(np.ceil(cfg["jaccard_threshold"] * num_perm - 1e-9))
    empty = (np.empty((0, 2), np.int64), np.empty((0, 2), np.int64), np.empty(0, np.int64))
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
    nodes = np.unique(pairs)
    signatures = load_signatures(Path(task["signatures"]), nodes, num_perm)
    a, b = np.searchsorted(nodes, pairs[:, 0]), np.searchsorted(nodes, pairs[:, 1])
    agree = np.concatenate([np.count_nonzero(signatures[a[s:s + _VERIFY_CHUNK]] ==
                                             signatures[b[s:s + _VERIFY_CHUNK]], axis=1)
                            for s in range(0, len(pairs), _VERIFY_CHUNK)])
    if cfg.get("verify", "signature") == "exact":
        rows = _document_rows(task["paths"], nodes, ["text", "langid_lang"])  # handle order = nodes
        langs = rows["langid_lang"].to_pylist() if "langid_lang" in rows.column_names else [None] * rows.num_rows
        sets = document_shingle_sets(rows["text"].to_pylist(), langs, cfg)
        similarity = np.array([exact_jaccard(sets[i], sets[j]) for i, j in zip(a, b)], np.float64)
        passed = similarity >= cfg["jaccard_threshold"]
    else:
        similarity = agree / num_perm
        passed = agree >= needed
    return pairs, pairs[passed], similarity[passed]


def near_duplicate_edges(spill: Path, groups: int, signature_dir: Path, cfg: dict[str, Any],
                         mapper=None, paths: list[str] | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Driver: the verified near-duplicate edges of all band spill groups.

    Each group is independent (:func:`band_group_edges`), so ``mapper``
    (``Partitions.map``: the local pool or Ray) runs them in parallel — the
    global dedup phase distributed by band partition. Without a mapper the
    groups run here, one at a time.

    Returns:
        ``(edges int64[E, 2], similarity float64[E], candidate_pairs)``:
        distinct edges sorted, their estimated Jaccard, and the number of
        distinct candidate pairs. Independent of input order.
    """
    tasks = [{"spill": str(spill), "group": k, "signatures": str(signature_dir), "cfg": cfg,
              "paths": list(paths or [])} for k in range(groups)]
    results = mapper(band_group_edges, tasks) if mapper else [band_group_edges(t) for t in tasks]
    candidates = [r[0] for r in results if len(r[0])]
    if not candidates:
        return np.empty((0, 2), np.int64), np.empty(0, np.float64), 0
    n_candidates = len(np.unique(np.concatenate(candidates), axis=0))
    all_edges = np.concatenate([r[1] for r in results])
    all_similarity = np.concatenate([r[2] for r in results])
    if not len(all_edges):
        return np.empty((0, 2), np.int64), np.empty(0, np.float64), n_candidates
    unique, index = np.unique(all_edges, axis=0, return_index=True)
    return unique, all_similarity[index], n_candidates


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


def near_clusters(edges: np.ndarray, paths: list[str], signature_dir: Path,
                  cfg: dict[str, Any]) -> pa.Table:
    """Driver: connected components of the verified edges (scipy), one keeper
    per component by the keeper key.

    Returns:
        Table ``g``, ``id``, ``keeper_g``, ``keeper_id``, ``similarity``
        (float64: estimated Jaccard to the keeper; null for the keeper), one
        row per document in an edge.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not len(edges):
        return pa.table({"g": pa.array([], pa.int64()), "id": pa.array([], pa.string()),
                         "keeper_g": pa.array([], pa.int64()), "keeper_id": pa.array([], pa.string()),
                         "similarity": pa.array([], pa.float64())})
    nodes = np.unique(edges)
    a, b = np.searchsorted(nodes, edges[:, 0]), np.searchsorted(nodes, edges[:, 1])
    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(len(nodes), len(nodes)))
    _, labels = connected_components(graph, directed=False)
    columns = ["id", "chars", "perplexity_value"]
    if any("chars" not in view_columns(p) for p in paths):
        columns.append("text")  # lengths from the text only when a partition lacks ``chars``
    docs = _document_rows(paths, nodes, columns)  # handle order = nodes
    k1, k2 = keeper_keys(docs, cfg["keep"])
    table = pa.table({"label": labels, "k1": k1, "k2": k2, "id": docs["id"], "g": nodes})
    table, starts = _sorted_group_starts(table, ["label"], ["k1", "k2", "id"])
    first = np.repeat(starts[:-1], np.diff(starts))
    g = table["g"].to_numpy()
    keeper_g = g[first]
    num_perm = cfg["num_bands"] * cfg["rows_per_band"]
    similarity = np.empty(len(g), np.float64)
    for s in range(0, len(g), _VERIFY_CHUNK):  # bounded temporaries
        rows = slice(s, s + _VERIFY_CHUNK)
        agree = load_signatures(signature_dir, g[rows], num_perm) == \
            load_signatures(signature_dir, keeper_g[rows], num_perm)
        similarity[rows] = np.count_nonzero(agree, axis=1) / num_perm
    is_keeper = np.arange(len(g)) == first
    return pa.table({"g": g, "id": table["id"], "keeper_g": keeper_g,
                     "keeper_id": table["id"].take(pa.array(first)),
                     "similarity": pa.array(similarity, pa.float64(), mask=is_keeper)})


def removed_table(exact: pa.Table, near: pa.Table) -> pa.Table:
    """Driver: ``id, keeper, similarity, reason, g`` for every member of every
    cluster with more than one document, sorted by id (``g``: the member's
    handle, so the table can be split by partition).

    An exact duplicate points at the final keeper of its exact keeper's
    cluster: similarity 1.0 when that is its exact keeper, else the exact
    keeper's similarity to the final keeper (equal normalized text, equal
    signature). A keeper's own row has ``keeper == id`` and null similarity
    and reason.
    """
    near_keeper = dict(zip(near["g"].to_pylist(),
                           zip(near["keeper_g"].to_pylist(), near["keeper_id"].to_pylist(),
                               near["similarity"].to_pylist())))
    ids, keepers, sims, reasons, handles = [], [], [], [], []
    for g, i, kid, sim in zip(near["g"].to_pylist(), near["id"].to_pylist(), near["keeper_id"].to_pylist(),
                              near["similarity"].to_pylist()):
        ids.append(i)
        keepers.append(kid)
        sims.append(sim)
        reasons.append(None if sim is None else REASON_NEAR)
        handles.append(g)
    exact_keepers: dict[str, int] = {}
    for g, i, eg, eid in zip(exact["g"].to_pylist(), exact["id"].to_pylist(), exact["keeper_g"].to_pylist(),
                             exact["keeper_id"].to_pylist()):
        if eg in near_keeper:
            fg, fid, fsim = near_keeper[eg]
            sim = 1.0 if fg == eg else fsim
        else:
            fid, sim = eid, 1.0
            exact_keepers[eid] = eg
        ids.append(i)
        keepers.append(fid)
        sims.append(sim)
        reasons.append(REASON_EXACT)
        handles.append(g)
    for eid, eg in exact_keepers.items():
        ids.append(eid)
        keepers.append(eid)
        sims.append(None)
        reasons.append(None)
        handles.append(eg)
    table = pa.table({"id": pa.array(ids, pa.string()), "keeper": pa.array(keepers, pa.string()),
                      "similarity": pa.array(sims, pa.float64()), "reason": pa.array(reasons, pa.string()),
                      "g": pa.array(handles, pa.int64())})
    return table.sort_by("id")


# ----------------------------------------------------------------------------- phase 3: lines


def partition_lines(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 3 over one partition: spill the hashes of the lines that
    take part in line-level dedup (:func:`stages.dedup_minhash.line_hashes`)
    of every document that survived document-level dedup and whose language
    (``langid_lang``, else ``lang_hint``) is not in ``line_skip_languages``.

    Args:
        item: ``path``, ``partition``, ``cfg``, ``spill``, ``line_groups``,
            ``skip`` (int64 kept-row positions removed as duplicates).

    Returns:
        ``{"lines": lines spilled, "documents": documents that took part}``.
    """
    path, partition, cfg = item["path"], item["partition"], item["cfg"]
    table = read_kept(path, _keep_columns(path, cfg["keep"], []))
    n = table.num_rows
    rows = np.setdiff1d(np.arange(n), np.asarray(item["skip"], np.int64))
    k1, k2 = keeper_keys(table, cfg["keep"])
    skip_langs = set(cfg["line_skip_languages"])
    langs = table["langid_lang"].to_pylist() if "langid_lang" in table.column_names else [None] * n
    hints = table["lang_hint"].to_pylist() if "lang_hint" in table.column_names else [None] * n
    texts, ids = table["text"].to_pylist(), table["id"]
    hashes, numbers, owners = [], [], []
    documents = 0
    for r in rows.tolist():
        if (langs[r] or hints[r]) in skip_langs or hints[r] in skip_langs:
            continue
        h, lines = mh.line_hashes(texts[r] or "", cfg["line_min_chars"])
        if len(h):
            documents += 1
            hashes.append(h)
            numbers.append(lines)
            owners.append(np.full(len(h), r, np.int64))
    if not hashes:
        return {"lines": 0, "documents": 0}
    h, lines, owner = np.concatenate(hashes), np.concatenate(numbers), np.concatenate(owners)
    records = pa.table({"h": h, "k1": k1[owner], "k2": k2[owner], "id": ids.take(pa.array(owner)),
                        "g": _handles(partition, owner), "line": lines})
    write_spill(records, h, item["line_groups"], Path(item["spill"]) / "lines", partition)
    return {"lines": len(h), "documents": documents}


def duplicate_lines(spill: Path, groups: int, out_dir: Path) -> dict[str, int]:
    """Driver: for each normalized line hash, the *owner* is the occurrence
    with the smallest ``(k1, k2, id, line)``; every occurrence of that line in
    another document is removed (repeats inside the owner document stay: the
    heuristics stage judges in-document repetition).

    Writes ``out_dir/lines-KKKKK.parquet`` (``id``, ``line`` int32, sorted),
    one file per spill group with removals.

    Returns:
        ``{"lines_removed": n, "line_groups_written": files}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    removed = written = 0
    for k in range(groups):
        table = read_spill(spill / "lines", k)
        if table is None:
            continue
        table, starts = _sorted_group_starts(table, ["h"], ["k1", "k2", "id", "line"])
        first = np.repeat(starts[:-1], np.diff(starts))
        g = table["g"].to_numpy()
        drop = np.flatnonzero(g != g[first])
        if not len(drop):
            continue
        out = pa.table({"id": table["id"].take(pa.array(drop)),
                        "line": table["line"].take(pa.array(drop))}).sort_by([("id", "ascending"),
                                                                               ("line", "ascending")])
        _write_atomic(out, out_dir / f"lines-{k:05d}.parquet")
        removed += len(drop)
        written += 1
    return {"lines_removed": removed, "line_groups_written": written}
