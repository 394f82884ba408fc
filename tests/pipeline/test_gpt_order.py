"""pipeline.gpt_order against a line-by-line port of mindformers 1.8's helpers.cpp
``build_sample_idx`` (the C++ loop), and known windows. The comparison with
mindformers' own GPTDataset is in tests/pipeline/test_mindformers.py (its venv)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline import gpt_order


def reference_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch,
                         drop_last=True, add_extra=1):
    """helpers.cpp build_sample_idx, statement by statement (mindformers 1.8.0)."""
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - add_extra) // seq_length
    else:
        num_samples = math.ceil(np.float32(num_epochs * tokens_per_epoch - add_extra) / np.float32(seq_length))
    out = [(0, 0)]
    doc_idx_index, doc_offset, sample_index = 0, 0, 1
    while sample_index <= num_samples:
        remaining = seq_length + add_extra
        while remaining != 0:
            doc_length = sizes[doc_idx[doc_idx_index]] - doc_offset
            remaining -= doc_length
            if remaining <= 0:
                doc_offset += remaining + doc_length - add_extra
                remaining = 0
            else:
                if doc_idx_index == len(doc_idx) - 1:
                    doc_offset = sizes[doc_idx[doc_idx_index]] - add_extra
                    break
                doc_idx_index += 1
                doc_offset = 0
        out.append((doc_idx_index, doc_offset))
        sample_index += 1
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("add_extra", [1, 0])
@pytest.mark.parametrize("seed", range(12))
def test_sample_index_equals_the_cpp_loop(seed, add_extra):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    # lengths 1..30 with some exact multiples of seq_length, so that windows end on boundaries
    seq_length = int(rng.integers(2, 12))
    sizes = rng.integers(1, 30, n).astype(np.int32)
    sizes[rng.random(n) < 0.3] = seq_length
    epochs = int(rng.integers(1, 4))
    doc_idx = np.tile(np.arange(n, dtype=np.int32), epochs)
    rng.shuffle(doc_idx)
    total = int(sizes.sum())
    if epochs * total - add_extra < seq_length:
        return
    for drop_last in (True, False):
        want = reference_sample_idx(sizes, doc_idx, seq_length, epochs, total, drop_last, add_extra)
        got = gpt_order.build_sample_index(sizes, doc_idx, seq_length, epochs, total, drop_last, bool(add_extra))
        np.testing.assert_array_equal(got, want)


def test_known_windows_overlap_by_one_token():
    # 3 sequences of 5, 3, 4 tokens; seq_length 4: GPTDataset windows hold 5 tokens and
    # start every 4 tokens of the shuffled stream
    lengths = np.array([5, 3, 4], dtype=np.int32)
    stream = np.arange(100, 112)  # sequence 0 = 100..104, 1 = 105..107, 2 = 108..111
    starts = np.array([0, 5, 8])
    order = gpt_order.build_order(lengths, seed=1, seq_length=4, num_samples=2)
    assert order.num_epochs == 1
    # numpy's RandomState(1) shuffles [0, 1, 2] to [0, 2, 1] (Mersenne Twister, fixed)
    np.testing.assert_array_equal(order.document_index, [0, 2, 1])
    # stream in read order: 100 101 102 103 104 | 108 109 110 111 | 105 106 107;
    # windows start at tokens 0 and 4 of it: (sequence position, offset)
    np.testing.assert_array_equal(order.sample_index, [[0, 0], [0, 4], [1, 3]])
    assert len(order) == 2  # (12 - 1) // 4
    np.testing.assert_array_equal(order.shuffle_index, [1, 0])
    assert order.pieces(0) == [(0, 4, 1), (2, 0, 4)]
    assert order.pieces(1) == [(0, 0, 5)]
    assert order.tokens(0, stream, starts).tolist() == [104, 108, 109, 110, 111]
    assert order.tokens(1, stream, starts).tolist() == [100, 101, 102, 103, 104]
    with pytest.raises(IndexError):
        order.pieces(2)


def test_num_epochs_and_separate_final_epoch():
    # 10 tokens per epoch, seq_length 3: 3 samples per epoch; 4 samples need 13 tokens
    assert gpt_order.num_epochs_for(10, 4, 3) == 2
    assert gpt_order.num_epochs_for(10, 3, 3) == 1
    assert gpt_order.num_epochs_for(10, None, 3) == 1
    lengths = np.array([4, 6], dtype=np.int32)
    order = gpt_order.build_order(lengths, seed=7, seq_length=3, num_samples=4)
    # epoch 2 supplies 4 - 3 = 1 sample < int(0.8 * 3): the last epoch is shuffled apart
    assert order.num_epochs == 2
    assert sorted(order.document_index[:2]) == [0, 1] and sorted(order.document_index[2:]) == [0, 1]
    assert len(order) == 6  # (20 - 1) // 3
    assert sorted(order.shuffle_index[:3]) == [0, 1, 2] and sorted(order.shuffle_index[3:]) == [3, 4, 5]


def test_every_piece_length_adds_up():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 200, 500).astype(np.int32)
    order = gpt_order.build_order(lengths, seed=5, seq_length=64, num_samples=3000)
    assert int(lengths.sum()) == 49_510  # 3000 * 64 + 1 tokens need 4 epochs
    assert order.num_epochs == 4 and len(order) == (4 * 49_510 - 1) // 64
    for i in range(0, len(order), 37):
        pieces = order.pieces(i)
        assert sum(n for _, _, n in pieces) == 65
        assert all(0 <= o and o + n <= lengths[s] for s, o, n in pieces)


def test_bad_input():
    with pytest.raises(ValueError, match="seq_length"):
        gpt_order.build_order(np.array([5], np.int32), 1, 1, None)
    with pytest.raises(ValueError, match="non-empty"):
        gpt_order.build_order(np.array([], np.int32), 1, 4, None)
