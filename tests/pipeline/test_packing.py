"""Tests for pipeline/packing.py: document order, packing, sample shuffle."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.packing import (
    document_boundaries,
    document_order,
    pack,
    pack_best_fit,
    shuffle_samples,
)


def _docs(lengths: list[int]) -> list[np.ndarray]:
    """Document d holds tokens 1000*(d+1) + 0..len-1, so pieces are traceable."""
    return [np.arange(n, dtype=np.int32) + 1000 * (d + 1) for d, n in enumerate(lengths)]


def test_pack_hand_case():
    docs = _docs([5, 3, 9])
    order = np.array([[0, 0], [1, 0], [2, 0]])
    samples, segments = pack(docs, order, seq_length=7)
    # 17 tokens, windows of 8: 2 samples, 1 token (the last of doc 2) dropped.
    assert samples.dtype == np.int32 and samples.shape == (2, 8)
    assert samples.tolist() == [
        [1000, 1001, 1002, 1003, 1004, 2000, 2001, 2002],
        [3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007]]
    assert segments.to_pydict() == {
        "sample_index": [0, 0, 1],
        "doc_index": [0, 1, 2],
        "repeat": [0, 0, 0],
        "doc_token_start": [0, 0, 0],
        "doc_token_end": [5, 3, 8],
        "sample_token_start": [0, 5, 0],
        "sample_token_end": [5, 8, 8],
    }
    meta = segments.schema.metadata
    assert meta[b"dropped_tail_tokens"] == b"1" and meta[b"total_tokens"] == b"17"


def test_pack_document_spanning_samples_and_repeats():
    docs = _docs([5, 3, 9])
    order = np.array([[2, 0], [0, 0], [2, 1]])  # doc 2 twice
    samples, segments = pack(docs, order, seq_length=3)  # windows of 4; 23 tokens
    assert samples.shape == (5, 4)
    rows = list(zip(*segments.to_pydict().values()))
    assert rows == [
        (0, 2, 0, 0, 4, 0, 4), (1, 2, 0, 4, 8, 0, 4), (2, 2, 0, 8, 9, 0, 1),
        (2, 0, 0, 0, 3, 1, 4), (3, 0, 0, 3, 5, 0, 2), (3, 2, 1, 0, 2, 2, 4),
        (4, 2, 1, 2, 6, 0, 4)]
    assert segments.schema.metadata[b"dropped_tail_tokens"] == b"3"


def test_segments_give_back_every_document():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=40).tolist()
    docs = _docs(lengths)
    repeats = rng.integers(0, 3, size=40)
    order = document_order([f"d{i}" for i in range(40)], repeats, seed=3)
    samples, seg = pack(docs, order, seq_length=16)
    s = seg.to_pydict()
    pieces: dict[tuple[int, int], list[int]] = {}
    for k in range(seg.num_rows):
        window = samples[s["sample_index"][k], s["sample_token_start"][k]:s["sample_token_end"][k]]
        doc = docs[s["doc_index"][k]][s["doc_token_start"][k]:s["doc_token_end"][k]]
        assert window.tolist() == doc.tolist()
        pieces.setdefault((s["doc_index"][k], s["repeat"][k]), []).extend(doc.tolist())
    # Every copy is whole, except those reaching into the dropped tail.
    dropped = int(seg.schema.metadata[b"dropped_tail_tokens"])
    total = int(sum(lengths[d] for d, _ in order))
    assert total == samples.size + dropped and dropped < 17
    end = 0
    for d, r in order.tolist():
        got, end = pieces.get((d, r), []), end + lengths[d]
        if end <= samples.size:
            assert got == docs[d].tolist()
        else:  # reaches into the tail: a prefix (possibly empty) survives
            assert got == docs[d][: len(got)].tolist()
            assert len(got) == max(0, lengths[d] - (end - samples.size))
    # Pieces tile the samples exactly.
    starts, ends = s["sample_token_start"], s["sample_token_end"]
    assert sum(e - b for b, e in zip(starts, ends)) == samples.size


def test_pack_edge_cases():
    samples, seg = pack([], np.zeros((0, 2), np.int64), seq_length=8)
    assert samples.shape == (0, 9) and seg.num_rows == 0
    samples, seg = pack(_docs([4]), np.array([[0, 0]]), seq_length=8)  # shorter than a window
    assert samples.shape == (0, 9) and seg.schema.metadata[b"dropped_tail_tokens"] == b"4"
    samples, seg = pack([np.zeros(0, np.int32), *_docs([4])], np.array([[0, 0], [1, 0]]), 3)
    assert samples.shape == (1, 4) and seg.column("doc_index").to_pylist() == [1]
    with pytest.raises(ValueError, match="seq_length"):
        pack(_docs([4]), np.array([[0, 0]]), seq_length=0)
    with pytest.raises(ValueError, match="outside"):
        pack(_docs([4]), np.array([[1, 0]]), seq_length=2)


def test_document_order_copies_and_order_independence():
    ids = ["web:a:1", "web:a:2", "books:b:1", "code:c:1"]
    repeats = np.array([2, 0, 1, 3])
    order = document_order(ids, repeats, seed=0)
    assert order.dtype == np.int64 and order.shape == (6, 2)
    assert sorted(map(tuple, order.tolist())) == [
        (0, 0), (0, 1), (2, 0), (3, 0), (3, 1), (3, 2)]
    assert np.array_equal(order, document_order(ids, repeats, seed=0))
    # Reversed input: the same sequence of (id, repeat).
    rev = document_order(ids[::-1], repeats[::-1], seed=0)
    assert [(ids[d], r) for d, r in order.tolist()] == \
        [(ids[::-1][d], r) for d, r in rev.tolist()]
    many = [f"doc{i}" for i in range(50)]
    assert not np.array_equal(document_order(many, np.ones(50), 0),
                              document_order(many, np.ones(50), 1))
    with pytest.raises(ValueError, match="duplicate"):
        document_order(["a", "a"], np.array([1, 1]), 0)
    with pytest.raises(ValueError, match=">= 0"):
        document_order(["a"], np.array([-1]), 0)


def test_shuffle_samples():
    perm = shuffle_samples(1000, seed=0)
    assert perm.dtype == np.int64
    assert np.array_equal(np.sort(perm), np.arange(1000))
    assert np.array_equal(perm, shuffle_samples(1000, seed=0))
    assert not np.array_equal(perm, shuffle_samples(1000, seed=1))
    assert not np.array_equal(perm, np.arange(1000))
    assert shuffle_samples(0, seed=0).tolist() == []
    with pytest.raises(ValueError):
        shuffle_samples(-1, seed=0)


def test_best_fit_hand_case():
    docs = _docs([5, 3, 9, 2, 7])
    order = np.array([[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]])
    samples, seg = pack_best_fit(docs, order, seq_length=7, pad_id=0)
    # doc 2 (9 tokens) gives one full window + a 1-token remainder. Remainders
    # longest first: 7 -> new bin A (1 free), 5 -> new bin B (3 free), 3 -> B (full),
    # 2 -> new bin C (6 free), 1 -> A, the tightest fit (full).
    assert samples.tolist() == [
        [3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007],
        [5000, 5001, 5002, 5003, 5004, 5005, 5006, 3008],
        [1000, 1001, 1002, 1003, 1004, 2000, 2001, 2002],
        [4000, 4001, 0, 0, 0, 0, 0, 0]]
    assert seg.to_pydict() == {
        "sample_index": [0, 1, 1, 2, 2, 3],
        "doc_index": [2, 4, 2, 0, 1, 3],
        "repeat": [0, 0, 0, 0, 0, 0],
        "doc_token_start": [0, 0, 8, 0, 0, 0],
        "doc_token_end": [8, 7, 9, 5, 3, 2],
        "sample_token_start": [0, 0, 7, 0, 5, 0],
        "sample_token_end": [8, 7, 8, 5, 8, 2],
    }
    meta = seg.schema.metadata
    assert (meta[b"padding_tokens"], meta[b"dropped_tail_tokens"], meta[b"method"]) == (b"6", b"0", b"best_fit")


def test_best_fit_never_splits_a_short_document_and_keeps_every_token():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, size=120).tolist() + [70, 33]  # two longer than a window of 33
    docs = _docs(lengths)
    order = document_order([f"d{i}" for i in range(len(docs))], np.ones(len(docs), np.int64), seed=5)
    samples, seg = pack_best_fit(docs, order, seq_length=32, pad_id=0)
    s = seg.to_pydict()
    pieces: dict[int, list[tuple[int, list[int]]]] = {}
    for k in range(seg.num_rows):
        row = samples[s["sample_index"][k], s["sample_token_start"][k]:s["sample_token_end"][k]].tolist()
        pieces.setdefault(s["doc_index"][k], []).append((s["doc_token_start"][k], row))
    assert sorted(pieces) == list(range(len(docs)))  # nothing dropped
    for d, parts in pieces.items():
        if lengths[d] < 33:
            assert len(parts) == 1  # shorter than a window: one piece
        assert [t for _, part in sorted(parts) for t in part] == docs[d].tolist()
    padding = int(seg.schema.metadata[b"padding_tokens"])
    assert samples.size == sum(lengths) + padding
    assert (samples == 0).sum() == padding  # pad id 0 only in free space (tokens are >= 1000)
    # best fit packs tighter than one document per sample
    assert samples.shape[0] < sum(-(-n // 33) for n in lengths)


def test_document_boundaries_hand_cases():
    docs = _docs([5, 3, 9, 2, 7])
    order = np.array([[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]])
    samples, seg = pack(docs, order, seq_length=7)
    # sample 0: docs end after 5 and 8 tokens (8 -> clipped to seq_length 7);
    # sample 2: [3008] ends at 1, doc 3 at 3, doc 4 runs to the end.
    assert document_boundaries(seg, len(samples), 7).tolist() == [[5, 7, 7], [7, 7, 7], [1, 3, 7]]
    samples, seg = pack_best_fit(docs, order, seq_length=7)
    bounds = document_boundaries(seg, len(samples), 7)
    assert bounds.dtype == np.int32 and bounds.tolist() == [[7, 7], [7, 7], [5, 7], [2, 7]]
    with pytest.raises(ValueError, match="outside"):
        document_boundaries(seg, 2, 7)


def test_boundaries_match_an_end_of_document_reset_on_eos():
    """For concat-split, resetting after every EOS in input_ids[:-1] (mindformers'
    eod_reset) gives the same sequence ends as the stored boundaries."""
    rng = np.random.default_rng(2)
    eos = 1
    docs = [np.r_[rng.integers(5, 100, size=n - 1), eos].astype(np.int32) for n in rng.integers(1, 30, 60)]
    order = document_order([f"d{i}" for i in range(60)], rng.integers(0, 3, 60), seed=0)
    samples, seg = pack(docs, order, seq_length=16)
    bounds = document_boundaries(seg, len(samples), 16)
    for row, ends in zip(samples, bounds):
        from_eos = sorted(set((np.flatnonzero(row[:-1] == eos) + 1).tolist()) | {16})
        assert sorted(set(ends.tolist())) == from_eos


def test_copies_of_a_document_are_spread_apart():
    ids = [f"web:w:{i}" for i in range(3000)]
    repeats = np.ones(3000, np.int64)
    repeats[:40] = np.arange(40) % 4 + 2  # 40 documents with 2..5 copies
    for seed in (0, 1):
        order = document_order(ids, repeats, seed)
        m = len(order)
        for d in range(40):
            positions = np.flatnonzero(order[:, 0] == d)
            r = len(positions)
            assert r == repeats[d]
            # copy k in the k-th r-th of the stream; neighbours >= ~m / (2r) apart
            assert (positions // (m / r)).astype(int).tolist() == list(range(r))
            assert np.diff(positions).min() > 0.4 * m / r


def test_pack_pieces_past_two_to_the_31_tokens():
    """A range of the document order that starts 5e9 tokens into the stream
    (a version of more than 2**31 tokens) is cut exactly as the same copies at
    offset 0, shifted by whole windows: no 32-bit arithmetic anywhere."""
    from pipeline.packing import pack_pieces

    lengths = np.array([7, 20, 3, 9], np.int64)
    window = 8
    shift_windows = 625_000_000  # 5e9 tokens
    near = pack_pieces(lengths, 5, window, 6)
    far = pack_pieces(lengths, 5 + shift_windows * window, window, shift_windows + 6)
    assert far[0].min() > 2**31 // window and far[0].dtype == np.int64
    np.testing.assert_array_equal(far[0] - shift_windows, near[0])
    for a, b in zip(near[1:], far[1:]):
        np.testing.assert_array_equal(a, b)
