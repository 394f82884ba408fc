"""Document order, packing into ``seq_length + 1`` windows, and sample shuffle.

Pure functions over numpy arrays (not a Stage); the assemble step of the build
calls them in this order::

    order = document_order(doc_ids, repeats, seed)        # int64[m, 2]
    samples, segments = pack(token_arrays, order, seq_length)
    permutation = shuffle_samples(len(samples), seed)     # write order

All randomness comes from a counter-based hash (SplitMix64 over the seed and
xxh64 of document ids), not from ``numpy.random``, so the result is the same on
every platform and numpy version.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ORDER_SALT = 0x6F72646572  # "order"
_SHUFFLE_SALT = 0x73687566  # "shuf"


def id_hash(doc_id: str, seed: int) -> int:
    """xxh64 of the UTF-8 document id, seeded by ``seed`` (taken mod 2^64):
    the deterministic, order-independent key used for sampling and ordering
    documents (tokenizer training sample, mixture, document order)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele et al. 2014) over uint64[n]; wraps mod 2^64."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def document_order(doc_ids: list[str], repeats: np.ndarray, seed: int) -> np.ndarray:
    """A seeded global shuffle of every copy of every document.

    Args:
        doc_ids: n unique document ids.
        repeats: int[n] copies of each document (``mixture_repeats``; >= 0).
        seed: the build seed.

    Returns:
        int64[m, 2], m = ``repeats.sum()``: rows of (index into ``doc_ids``,
        repeat index 0..repeats-1). The sequence of (id, repeat) pairs depends
        only on the set of (id, repeats) and the seed, not on input order:
        copies are sorted by a hash of (seed, xxh64(id), repeat), ties by id.

    Raises:
        ValueError: length mismatch, duplicate ids or negative repeats.
    """
    repeats = np.asarray(repeats)
    if repeats.shape != (len(doc_ids),):
        raise ValueError(f"repeats has shape {repeats.shape}, expected ({len(doc_ids)},)")
    if (repeats < 0).any():
        raise ValueError("repeats must be >= 0")
    by_id = sorted(range(len(doc_ids)), key=doc_ids.__getitem__)
    if any(doc_ids[a] == doc_ids[b] for a, b in zip(by_id, by_id[1:])):
        raise ValueError("document_order: duplicate document ids")
    by_id = np.array(by_id, dtype=np.int64)
    hashes = np.fromiter((id_hash(doc_ids[i], seed) for i in by_id),
                         dtype=np.uint64, count=len(by_id))
    counts = repeats[by_id].astype(np.int64)
    doc = np.repeat(by_id, counts)
    rank = np.repeat(np.arange(len(by_id), dtype=np.int64), counts)  # id rank, tie-break
    starts = np.cumsum(counts) - counts
    repeat = np.arange(len(doc), dtype=np.int64) - np.repeat(starts, counts)
    with np.errstate(over="ignore"):
        key = _splitmix64(np.repeat(hashes, counts) ^ _splitmix64(
            repeat.astype(np.uint64) + np.uint64(_ORDER_SALT)))
    perm = np.lexsort((repeat, rank, key))
    return np.stack([doc[perm], repeat[perm]], axis=1).astype(np.int64)


def pack(token_arrays: Sequence[np.ndarray], order: np.ndarray,
         seq_length: int) -> tuple[np.ndarray, pa.Table]:
    """Concatenate documents in ``order`` and cut ``seq_length + 1`` windows.

    The window is ``seq_length + 1`` tokens because the model trains on
    ``input_ids[:, :-1]`` against ``input_ids[:, 1:]`` (mindformers
    convention). Documents are not padded or separated beyond the EOS each
    already ends with; a document may span several samples.

    Args:
        token_arrays: n 1-D integer arrays (``tokenize_input_ids``, EOS last),
            indexed by the first column of ``order``.
        order: int64[m, 2] (doc index, repeat) from :func:`document_order`.
        seq_length: model sequence length (> 0).

    Returns:
        ``samples``: int32[num_samples, seq_length + 1],
        ``num_samples = total // (seq_length + 1)``;
        ``segments``: one row per (sample, document piece), ordered by sample
        then position: ``sample_index`` int64, ``doc_index`` int64, ``repeat``
        int32, ``doc_token_start``/``doc_token_end`` int64 (range within the
        document's ids, end exclusive), ``sample_token_start``/
        ``sample_token_end`` int32 (range within the sample).

        The last partial window (``total % (seq_length + 1)`` tokens, the end
        of the last documents in ``order``) is dropped, as mindformers'
        preprocessing does: those tokens are in no sample and no segment row.
        Their count is in ``segments.schema.metadata[b"dropped_tail_tokens"]``
        (also ``b"total_tokens"`` and ``b"seq_length"``).

    Raises:
        ValueError: bad ``seq_length``, ``order`` shape, index out of range, or
            a token array that is not 1-D.
    """
    if seq_length <= 0:
        raise ValueError(f"seq_length must be > 0, got {seq_length}")
    order = np.asarray(order, dtype=np.int64).reshape(-1, 2) if len(order) else \
        np.zeros((0, 2), np.int64)
    docs = order[:, 0]
    if len(docs) and (docs.min() < 0 or docs.max() >= len(token_arrays)):
        raise ValueError("order refers to a document index outside token_arrays")
    pieces = [np.asarray(token_arrays[d]) for d in docs]
    if any(p.ndim != 1 for p in pieces):
        raise ValueError("every token array must be 1-D")
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    window = seq_length + 1
    total = int(lengths.sum())
    num_samples = total // window
    tokens = np.concatenate(pieces).astype(np.int32, copy=False) if pieces else \
        np.zeros(0, np.int32)
    samples = tokens[: num_samples * window].reshape(num_samples, window)

    # Global [start, end) of each copy, then one piece per sample it touches.
    ends = np.cumsum(lengths)
    starts = ends - lengths
    present = (lengths > 0) & (starts < num_samples * window)
    starts, ends, entry = starts[present], ends[present], np.flatnonzero(present)
    first = starts // window
    last = np.minimum((ends - 1) // window, num_samples - 1)
    count = last - first + 1
    piece_entry = np.repeat(entry, count)
    piece_start = np.repeat(starts, count)
    piece_end = np.repeat(ends, count)
    sample = np.repeat(first, count) + (
        np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count))
    lo = np.maximum(piece_start, sample * window)
    hi = np.minimum(piece_end, (sample + 1) * window)
    segments = pa.table({
        "sample_index": pa.array(sample, pa.int64()),
        "doc_index": pa.array(order[piece_entry, 0], pa.int64()),
        "repeat": pa.array(order[piece_entry, 1].astype(np.int32), pa.int32()),
        "doc_token_start": pa.array(lo - piece_start, pa.int64()),
        "doc_token_end": pa.array(hi - piece_start, pa.int64()),
        "sample_token_start": pa.array((lo - sample * window).astype(np.int32), pa.int32()),
        "sample_token_end": pa.array((hi - sample * window).astype(np.int32), pa.int32()),
    })
    segments = segments.replace_schema_metadata({
        "dropped_tail_tokens": str(total - num_samples * window),
        "total_tokens": str(total),
        "seq_length": str(seq_length),
    })
    return samples, segments


def shuffle_samples(num_samples: int, seed: int) -> np.ndarray:
    """The global sample order written to the shards.

    Returns:
        int64[num_samples], a permutation of ``0..num_samples-1``: samples
        sorted by SplitMix64(seed, index). Fixed at write time, so readers
        iterate in order and need no shuffle buffer.

    Raises:
        ValueError: ``num_samples < 0``.
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    seed_key = _splitmix64(np.array([(seed ^ _SHUFFLE_SALT) & 0xFFFFFFFFFFFFFFFF], np.uint64))
    with np.errstate(over="ignore"):
        keys = _splitmix64(np.arange(num_samples, dtype=np.uint64) ^ seed_key[0])
    return np.argsort(keys, kind="stable").astype(np.int64)
