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

from common.spill import read_bucket, write_buckets
from stages.dedup import minhash as mh
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
# Node records (handle, keeper key, id: ~60 bytes) per group of the clustering
# steps; edges of a group are fewer than its documents' duplicates.
NODE_RECORDS_PER_GROUP = 500_000
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
            ``spill`` (directory), ``id_groups``, ``exact_groups``,
            ``node_groups`` (the keeper keys of every document go to
            ``spill/nodes`` by node group, for the clustering steps).

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
    from stages.dedup.cluster import node_group

    k1, k2 = keeper_keys(table, cfg["keep"])
    g = _handles(partition, np.arange(n))
    write_buckets(pa.table({"g": pa.array(g, pa.int64()), "k1": k1, "k2": k2, "id": ids}),
                  node_group(g, item["node_groups"]), spill / "nodes" / f"part-{partition:05d}.parquet")
    if cfg["exact"]:
        digests = b"".join(hashlib.blake2b(mh.exact_normalize(t or "").encode("utf-8"), digest_size=16).digest()
                           for t in table["text"].to_pylist())
        d = np.frombuffer(digests, "<u8").reshape(n, 2) if n else np.zeros((0, 2), np.uint64)
        records = pa.table({"d0": pa.array(d[:, 0], pa.uint64()), "d1": pa.array(d[:, 1], pa.uint64()),
                            "k1": k1, "k2": k2, "id": ids, "g": pa.array(g, pa.int64())})
        write_spill(records, d[:, 0], item["exact_groups"], spill / "exact", partition)
    text = table["text"]
    lines = int(pc.sum(pc.count_substring(text, "\n")).as_py() or 0) + n
    chars = int(pc.sum(pc.utf8_length(text)).as_py() or 0)
    return {"documents": n, "chars": chars, "lines": lines}


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
            ``skip_files`` (the exact steps' ``skip`` spill: handles of the
            exact duplicates, by partition; they are not signed),
            ``signatures`` (directory).

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
    rows = np.setdiff1d(np.arange(n), skip_rows(item["skip_files"], partition))
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


def band_group_edges(task: dict[str, Any]) -> dict[str, int]:
    """Worker: LSH candidates of one band spill group, verified on full signatures.

    Sorts the group's band records by (band, key, g); records with equal
    (band, key) are a bucket; bucket pairs (:func:`bucket_pairs`) become edges
    when at least ``ceil(jaccard_threshold * num_perm)`` signature values agree
    (``verify: signature``), or when the exact Jaccard similarity of their
    shingle sets reaches ``jaccard_threshold`` (``verify: exact``; reads the
    candidates' texts from ``paths``).

    Args:
        task: ``spill`` (spill dir), ``group`` (index), ``signatures`` (dir),
            ``cfg`` (the dedup config as a dict), ``paths`` (the partitions),
            ``node_groups``, ``candidate_groups``.

    Writes:
        ``spill/edges/band-KKKKK.parquet``: the verified edges, both
        directions, by node group (the connected-components input);
        ``spill/candidates/band-KKKKK.parquet``: the candidate pairs by pair
        hash (counted once each by :func:`distinct_candidates`).

    Returns:
        ``{"candidates", "edges"}`` found in this group (a pair may be found
        in several groups).
    """
    pairs, edges, _ = _band_group_pairs(task)
    from stages.dedup.cluster import node_group, write_edges

    spill, name = Path(task["spill"]), f"band-{task['group']:05d}.parquet"
    write_edges(edges[:, 0], edges[:, 1], task["node_groups"], spill / "edges" / name)
    key = node_group(pairs[:, 0] * np.int64(1_000_003) + pairs[:, 1], task["candidate_groups"]) if len(pairs) else \
        np.zeros(0, np.int64)
    write_buckets(pa.table({"a": pa.array(pairs[:, 0], pa.int64()), "b": pa.array(pairs[:, 1], pa.int64())}),
                  key, spill / "candidates" / name)
    return {"candidates": int(len(pairs)), "edges": int(len(edges))}


def distinct_candidates(task: dict[str, Any]) -> int:
    """Worker: distinct candidate pairs of one candidate group."""
    table = read_spill(Path(task["spill"]) / "candidates", task["group"])
    if table is None:
        return 0
    return len(np.unique(np.stack([table["a"].to_numpy(), table["b"].to_numpy()], 1), axis=0))


def _band_group_pairs(task: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidate pairs int64[C, 2], edges int64[E, 2], similarity float64[E])
    of one band spill group (see :func:`band_group_edges`)."""
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


# ----------------------------------------------------------------------------- phase 3: lines


def partition_lines(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 3 over one partition: spill the hashes of the lines that
    take part in line-level dedup (:func:`stages.dedup_minhash.line_hashes`)
    of every document that survived document-level dedup and whose language
    (``langid_lang``, else ``lang_hint``) is not in ``line_skip_languages``.

    Args:
        item: ``path``, ``partition``, ``cfg``, ``spill``, ``line_groups``,
            ``skip_files`` (the final cluster records, by partition: members
            with a reason were removed as duplicates and take no part).

    Returns:
        ``{"lines": lines spilled, "documents": documents that took part}``.
    """
    path, partition, cfg = item["path"], item["partition"], item["cfg"]
    table = read_kept(path, _keep_columns(path, cfg["keep"], []))
    n = table.num_rows
    rows = np.setdiff1d(np.arange(n), skip_rows(item["skip_files"], partition, removed_only=True))
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


def duplicate_lines(task: dict[str, Any]) -> int:
    """Worker: for each normalized line hash of one line spill group, the
    *owner* is the occurrence with the smallest ``(k1, k2, id, line)``; every
    occurrence of that line in another document is removed (repeats inside
    the owner document stay: the heuristics stage judges in-document
    repetition).

    Writes ``spill/line_removals/group-KKKKK.parquet`` (``id``, ``line``
    int32, ``g``) bucketed by partition. Returns the lines removed.
    """
    from stages.dedup.cluster import partition_of

    spill = Path(task["spill"])
    out = spill / "line_removals" / f"group-{task['group']:05d}.parquet"
    table = read_spill(spill / "lines", task["group"])
    if table is None:
        write_buckets(pa.table({"id": pa.array([], pa.string()), "line": pa.array([], pa.int32()),
                                "g": pa.array([], pa.int64())}), np.zeros(0, np.int64), out)
        return 0
    table, starts = _sorted_group_starts(table, ["h"], ["k1", "k2", "id", "line"])
    first = np.repeat(starts[:-1], np.diff(starts))
    g = table["g"].to_numpy()
    drop = np.flatnonzero(g != g[first])
    removals = pa.table({"id": table["id"].take(pa.array(drop)), "line": table["line"].take(pa.array(drop)),
                         "g": pa.array(g[drop], pa.int64())})
    write_buckets(removals, partition_of(g[drop]), out)
    return len(drop)


def partition_line_removals(task: dict[str, Any]) -> int:
    """Worker: ``lines/<name>`` for one partition (``id``, ``line``, sorted),
    when lines of it are removed. Returns the rows written."""
    files = spill_files(Path(task["spill"]) / "line_removals")
    table = read_bucket(files, task["partition"]) if files else None
    if table is None or table.num_rows == 0:
        return 0
    table = table.drop_columns(["g"]).sort_by([("id", "ascending"), ("line", "ascending")])
    _write_atomic(table, Path(task["out"]))
    return table.num_rows
