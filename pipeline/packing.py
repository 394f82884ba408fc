"""Document order, packing into ``seq_length + 1`` windows, document boundaries,
and sample shuffle: the output side of the build (not a stage).

Two kinds of function live here:

* what the streaming assembly (``pipeline.assemble``) calls on each range of
  the document order: :func:`copy_keys` (each copy's position key),
  :func:`pack_pieces` / :func:`pack_best_fit` (windows of one range) and
  :func:`sample_shuffle_keys` (each sample's shuffle key);
* the whole-array reference the assembly is tested against
  (tests/pipeline/test_assemble.py), never called by the build:
  :func:`document_order`, :func:`pack`, :func:`document_boundaries` and
  :func:`shuffle_samples`, which compose as::

    order = document_order(doc_ids, repeats, seed)            # int64[m, 2]
    samples, segments = pack(token_arrays, order, seq_length)  # or pack_best_fit(...)
    actual_seq_len = document_boundaries(segments, len(samples), seq_length)
    permutation = shuffle_samples(len(samples), seed)         # write order

All randomness comes from a counter-based hash (SplitMix64 over the seed and
the seeded xxh64 of document ids, :func:`common.hashing.id_hash`), not from
``numpy.random``, so the result is the same on every platform and numpy
version.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from common.hashing import id_hashes

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ORDER_SALT = 0x6F72646572  # "order"
_SHUFFLE_SALT = 0x73687566  # "shuf"
PACKING_METHODS = ("concat_split", "best_fit")


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele et al. 2014) over uint64[n]; wraps mod 2^64."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _unit_float(x: np.ndarray) -> np.ndarray:
    """uint64[n] -> float64[n] in [0, 1) from the top 53 bits (exact, IEEE)."""
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def document_order(doc_ids: list[str], repeats: np.ndarray, seed: int) -> np.ndarray:
    """A seeded global shuffle of every copy of every document, with the copies
    of an up-sampled document spread apart.

    The whole-array reference the streaming assembly is tested against;
    the build never calls it (see the module docstring).

    Copy ``k`` of a document with ``r`` copies gets the position key
    ``(k + j) / r`` with ``j = 0.25 + 0.5 * u`` for ``r > 1`` and ``j = u`` for
    ``r == 1``, where ``u`` in ``[0, 1)`` is a hash of (seed, id, k). Copies are
    sorted by key (ties by id, then copy). So copy k lies in the k-th of r equal
    parts of the stream, inside that part's middle half: two copies of one
    document are at least ``1 / (2r)`` of the stream apart (in expectation over
    the other documents' keys), never neighbours by chance, while their
    positions still differ per copy and per seed. Our choice, in the spirit of
    Megatron-LM's per-epoch reshuffle (each repeat in its own pass) without
    making every pass hold the same documents in the same order.

    Args:
        doc_ids: n unique document ids.
        repeats: int[n] copies of each document (``mixture_repeats``; >= 0).
        seed: the build seed.

    Returns:
        int64[m, 2], m = ``repeats.sum()``: rows of (index into ``doc_ids``,
        repeat index 0..repeats-1). The sequence of (id, repeat) pairs depends
        only on the set of (id, repeats) and the seed, not on input order.

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
    hashes = id_hashes([doc_ids[i] for i in by_id], seed)
    entry, repeat, key = copy_keys(hashes, repeats[by_id])
    doc = by_id[entry]
    perm = np.lexsort((repeat, entry, key))  # entry = id rank: ties by id, then copy
    return np.stack([doc[perm], repeat[perm]], axis=1).astype(np.int64)


def copy_keys(hashes: np.ndarray, repeats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The position key of every copy of every document (see
    :func:`document_order`), computable one partition at a time: the key of a
    copy depends only on its document's id hash, its copy number and its
    document's copy count.

    Args:
        hashes: uint64[n], ``common.hashing.id_hash(id, seed)`` of each document.
        repeats: int[n] >= 0, copies of each document.

    Returns:
        ``(entry int64[m], repeat int64[m], key float64[m])``, ``m =
        repeats.sum()``: for each copy, the index of its document in
        ``hashes``, its copy number, and its key in ``[0, 1)``; copies in
        document order, then copy order. The document order sorts copies by
        ``(key, id, repeat)``.
    """
    counts = np.asarray(repeats).astype(np.int64)
    hashes = np.asarray(hashes, np.uint64)
    entry = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    repeat = np.arange(len(entry), dtype=np.int64) - np.repeat(starts, counts)
    with np.errstate(over="ignore"):
        u = _unit_float(_splitmix64(np.repeat(hashes, counts) ^ _splitmix64(
            repeat.astype(np.uint64) + np.uint64(_ORDER_SALT))))
    copies = np.repeat(counts, counts).astype(np.float64)
    jitter = np.where(copies > 1, 0.25 + 0.5 * u, u)
    key = (repeat.astype(np.float64) + jitter) / np.maximum(copies, 1.0)
    return entry, repeat, key


def _check_order(token_arrays: Sequence[np.ndarray], order: np.ndarray,
                 seq_length: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
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
    return order, pieces, lengths


def _segments_table(sample, order, entry, doc_start, doc_end, sample_start, sample_end,
                    metadata: dict[str, str]) -> pa.Table:
    table = pa.table({
        "sample_index": pa.array(np.asarray(sample, np.int64), pa.int64()),
        "doc_index": pa.array(order[entry, 0], pa.int64()),
        "repeat": pa.array(order[entry, 1].astype(np.int32), pa.int32()),
        "doc_token_start": pa.array(np.asarray(doc_start, np.int64), pa.int64()),
        "doc_token_end": pa.array(np.asarray(doc_end, np.int64), pa.int64()),
        "sample_token_start": pa.array(np.asarray(sample_start).astype(np.int32), pa.int32()),
        "sample_token_end": pa.array(np.asarray(sample_end).astype(np.int32), pa.int32()),
    })
    return table.replace_schema_metadata(metadata)


def pack(token_arrays: Sequence[np.ndarray], order: np.ndarray,
         seq_length: int) -> tuple[np.ndarray, pa.Table]:
    """Concatenate documents in ``order`` and cut ``seq_length + 1`` windows
    (``concat_split``, the default packing).

    The whole-array reference the streaming assembly is tested against;
    the build never calls it (see the module docstring).

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
        Schema metadata (strings): ``dropped_tail_tokens``, ``total_tokens``,
        ``padding_tokens`` (always 0 here), ``seq_length``, ``method``.

    Raises:
        ValueError: bad ``seq_length``, ``order`` shape, index out of range, or
            a token array that is not 1-D.
    """
    order, pieces, lengths = _check_order(token_arrays, order, seq_length)
    window = seq_length + 1
    total = int(lengths.sum())
    num_samples = total // window
    tokens = np.concatenate(pieces).astype(np.int32, copy=False) if pieces else \
        np.zeros(0, np.int32)
    samples = tokens[: num_samples * window].reshape(num_samples, window)

    sample, piece_entry, doc_start, doc_end, sample_start, sample_end = pack_pieces(
        lengths, 0, window, num_samples)
    segments = _segments_table(sample, order, piece_entry, doc_start, doc_end,
                               sample_start, sample_end, {
                                   "dropped_tail_tokens": str(total - num_samples * window),
                                   "total_tokens": str(total),
                                   "padding_tokens": "0",
                                   "seq_length": str(seq_length),
                                   "method": "concat_split",
                               })
    return samples, segments


def pack_pieces(lengths: np.ndarray, start: int, window: int,
                num_samples: int) -> tuple[np.ndarray, ...]:
    """Where consecutive copies land in a concatenated token stream cut into
    windows: one piece per (copy, window) they share.

    Copies of ``lengths`` tokens follow each other from global token offset
    ``start``; window ``k`` is tokens ``[k * window, (k + 1) * window)``; only
    windows ``k < num_samples`` exist (tokens past them are the dropped tail).
    ``start`` lets one range of the document order be cut on its own with
    the same result as the whole stream.

    Returns:
        ``(sample, entry, doc_start, doc_end, sample_start, sample_end)``,
        int64 arrays, one item per piece, ordered by copy then window: the
        window number, the copy's index in ``lengths``, the token range within
        the copy and within the window (ends exclusive).
    """
    lengths = np.asarray(lengths, np.int64)
    ends = start + np.cumsum(lengths)
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
    return (sample, piece_entry.astype(np.int64), lo - piece_start, hi - piece_start,
            lo - sample * window, hi - sample * window)


def pack_best_fit(token_arrays: Sequence[np.ndarray], order: np.ndarray, seq_length: int,
                  pad_id: int = 0) -> tuple[np.ndarray, pa.Table]:
    """Best-fit-decreasing packing: no document shorter than a window is split.

    Each copy of ``n`` tokens is cut into ``n // (seq_length + 1)`` full windows
    (each a sample of its own) and a remainder of ``n % (seq_length + 1)``
    tokens. Remainders are placed, longest first (ties by their place in
    ``order``), into the open sample with the least free space that still
    holds them, else into a new sample; free space left at the end is filled
    with ``pad_id``. This is the "best-fit packing" of Ding et al. 2024
    ("Fewer Truncations Improve Language Modeling"): truncation only where a
    document is longer than a window, at the cost of some padding (measured on
    the dev corpus: docs/stages/mixture_packing.md). mindformers' loss ignores
    ``pad_token_id`` labels (default 0), so padding does not train.

    Args:
        token_arrays, order, seq_length: as :func:`pack`.
        pad_id: token id written into free space (the tokenizer's pad id, 0
            here: ``manifest.json`` -> ``tokenizer.special_token_ids.pad``).

    Returns:
        ``samples`` int32[num_samples, seq_length + 1] (full windows in copy
        order, then packed samples in creation order; the build shuffles them
        afterwards) and ``segments`` as :func:`pack` (padding has no segment
        row). Metadata ``dropped_tail_tokens`` is 0 (nothing is dropped),
        ``padding_tokens`` the pad count, ``method`` ``best_fit``.

    Raises:
        ValueError: as :func:`pack`; ``pad_id < 0``.
    """
    if pad_id < 0:
        raise ValueError(f"pad_id must be >= 0, got {pad_id}")
    order, pieces, lengths = _check_order(token_arrays, order, seq_length)
    window = seq_length + 1
    full = lengths // window
    rest = lengths - full * window
    num_full = int(full.sum())

    # Full windows: sample k of copy e starts at doc token k * window.
    full_entry = np.repeat(np.arange(len(lengths)), full)
    full_k = np.arange(num_full, dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)

    # Remainders, longest first, placed by best fit. free[c] = stack of open bins
    # with c free tokens; `has` marks non-empty stacks for a vectorised search.
    items = np.flatnonzero(rest > 0)
    items = items[np.lexsort((items, -rest[items]))]
    free: list[list[int]] = [[] for _ in range(window + 1)]
    has = np.zeros(window + 1, dtype=bool)
    bin_used: list[int] = []
    placed_bin = np.empty(len(items), np.int64)
    placed_at = np.empty(len(items), np.int64)
    for k, e in enumerate(items.tolist()):
        size = int(rest[e])
        hit = int(np.argmax(has[size:])) + size if has[size:].any() else -1
        if hit < 0:
            b, used = len(bin_used), 0
            bin_used.append(0)
        else:
            b = free[hit].pop()
            if not free[hit]:
                has[hit] = False
            used = bin_used[b]
        placed_bin[k], placed_at[k] = b, used
        bin_used[b] = used + size
        left = window - bin_used[b]
        if left > 0:
            free[left].append(b)
            has[left] = True

    num_bins = len(bin_used)
    samples = np.full((num_full + num_bins, window), pad_id, dtype=np.int32)
    for s, (e, k) in enumerate(zip(full_entry.tolist(), full_k.tolist())):
        samples[s] = pieces[e][k * window:(k + 1) * window]
    for k, e in enumerate(items.tolist()):
        b, at = num_full + int(placed_bin[k]), int(placed_at[k])
        samples[b, at:at + rest[e]] = pieces[e][full[e] * window:]

    seg_sample = np.concatenate([np.arange(num_full, dtype=np.int64), num_full + placed_bin])
    seg_entry = np.concatenate([full_entry, items]).astype(np.int64)
    seg_doc_start = np.concatenate([full_k * window, full[items] * window])
    seg_doc_end = np.concatenate([(full_k + 1) * window, lengths[items]])
    seg_start = np.concatenate([np.zeros(num_full, np.int64), placed_at])
    seg_end = np.concatenate([np.full(num_full, window, np.int64), placed_at + rest[items]])
    by_position = np.lexsort((seg_start, seg_sample))
    total = int(lengths.sum())
    segments = _segments_table(
        seg_sample[by_position], order, seg_entry[by_position], seg_doc_start[by_position],
        seg_doc_end[by_position], seg_start[by_position], seg_end[by_position], {
            "dropped_tail_tokens": "0",
            "total_tokens": str(total),
            "padding_tokens": str(samples.size - total),
            "seq_length": str(seq_length),
            "method": "best_fit",
        })
    return samples, segments


def document_boundaries(segments: pa.Table, num_samples: int, seq_length: int) -> np.ndarray:
    """Per sample, where documents end within the model input, in mindformers'
    compressed end-of-document format (``actual_seq_len``).

    The whole-array reference the streaming assembly is tested against;
    the build never calls it (see the module docstring).

    The model input of a sample is ``input_ids[:seq_length]`` (labels are
    ``input_ids[1:]``). Row ``i`` holds the ascending, distinct end offsets
    (exclusive) of the document pieces of sample ``i`` clipped to
    ``seq_length``, the last real entry always ``seq_length`` (best-fit padding
    counts as one more piece ending there), then padded to the version's width
    by repeating ``seq_length``. E.g. pieces ``[0, 5) [5, 9)`` of a
    ``seq_length`` 8 sample give ``[5, 8]``. Attention and position ids reset
    after each entry: this is what mindformers' ``compressed_eod_mask`` /
    flash-attention TND layout takes as ``actual_seq_len`` (cumulative sequence
    ends, last = seq_length; its ``asl_batch_wrapper`` offsets rows within a
    micro batch), and the same positions follow from ``eod_reset`` on the EOS
    tokens of a concat-split sample. Padding by repeating the last end adds
    zero-length sequences.

    Args:
        segments: the segments table of :func:`pack`/:func:`pack_best_fit`
            (``sample_index``, ``sample_token_end``), any row order.
        num_samples: rows of the sample array.
        seq_length: the model sequence length.

    Returns:
        int32[num_samples, width], ``width`` = the largest number of pieces in
        one sample (>= 1).

    Raises:
        ValueError: a segment's sample index outside ``[0, num_samples)``.
    """
    sample = segments["sample_index"].to_numpy().astype(np.int64)
    end = np.minimum(segments["sample_token_end"].to_numpy().astype(np.int64), seq_length)
    if len(sample) and (sample.min() < 0 or sample.max() >= num_samples):
        raise ValueError("segments refer to a sample outside [0, num_samples)")
    sample = np.concatenate([sample, np.arange(num_samples, dtype=np.int64)])
    end = np.concatenate([end, np.full(num_samples, seq_length, np.int64)])
    keys = np.unique(sample * (seq_length + 1) + end)
    sample, end = keys // (seq_length + 1), keys % (seq_length + 1)
    counts = np.bincount(sample, minlength=num_samples)
    width = max(1, int(counts.max()) if num_samples else 1)
    out = np.full((num_samples, width), seq_length, dtype=np.int32)
    column = np.arange(len(keys)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[sample, column] = end
    return out


def sample_shuffle_keys(indices: np.ndarray, seed: int) -> np.ndarray:
    """The shuffle key of each packed sample: SplitMix64(index XOR a seeded
    constant), uint64[n]. Distinct indices give distinct keys (SplitMix64 is a
    bijection of uint64), so the written order, samples sorted by key, is a
    total order that any task can place one key range at a time."""
    seed_key = _splitmix64(np.array([(seed ^ _SHUFFLE_SALT) & 0xFFFFFFFFFFFFFFFF], np.uint64))
    with np.errstate(over="ignore"):
        return _splitmix64(np.asarray(indices).astype(np.uint64) ^ seed_key[0])


def shuffle_samples(num_samples: int, seed: int) -> np.ndarray:
    """The global sample order written to the shards.

    The whole-array reference the streaming assembly is tested against;
    the build never calls it (see the module docstring).

    Returns:
        int64[num_samples], a permutation of ``0..num_samples-1``: samples
        sorted by :func:`sample_shuffle_keys`. Fixed at write time, so readers
        iterate in order and need no shuffle buffer. (A build never
        materialises this array: it places samples by key range, see
        ``pipeline.assemble``.)

    Raises:
        ValueError: ``num_samples < 0``.
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    keys = sample_shuffle_keys(np.arange(num_samples, dtype=np.uint64), seed)
    return np.argsort(keys, kind="stable").astype(np.int64)
