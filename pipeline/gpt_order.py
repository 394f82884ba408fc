"""The order in which mindformers' ``GPTDataset`` reads a Megatron indexed dataset.

mindformers 1.8 reads the ``megatron`` format (``megatron/corpus_text_document.bin/.idx``)
through ``BlendedMegatronDatasetDataLoader`` -> ``GPTDataset``
(``mindformers/dataset/blended_datasets/gpt_dataset.py``). ``GPTDataset`` does not read the
sequences in file order: it always

1. shuffles the sequences (``_build_document_index``: ``num_epochs`` copies of the
   sequence ids, int32, shuffled with ``numpy.random.RandomState(random_seed)``),
2. cuts the shuffled token stream into windows of ``seq_length + 1`` tokens that overlap
   by one token (``add_extra_token_to_sequence``; ``helpers.cpp`` ``build_sample_idx``),
3. shuffles the windows with the same ``RandomState`` (``_build_shuffle_index``).

So the windows a model trains on are *not* the MindRecord samples of the version, and
exact lineage for this format means reproducing those three arrays. This module does it
with numpy alone (no mindformers, no C++ helper): :func:`build_order` returns the same
``document_index`` int32[num_epochs * num_sequences], ``sample_index``
int64[num_gpt_samples + 1, 2] and ``shuffle_index`` uint32[num_gpt_samples] (int64 past
2**32 - 2 samples) that ``GPTDataset`` builds (tests/pipeline/test_mindformers.py compares
them with mindformers' own, array for array), and :meth:`GPTOrder.pieces` maps a
``GPTDataset`` sample to its ``(sequence, offset, length)`` pieces. A sequence of our
Megatron file is one lineage row (sequence ``k`` = the ``k``-th row of ``lineage/`` in
``(sample_index, segment)`` order), so a piece is a span of one document.

Cost: ``build_sample_index`` is O(num_epochs * num_sequences + num_gpt_samples) with
``cumsum``/``searchsorted`` (helpers.cpp walks the same arrays in a C++ loop). Memory: 4 B
per sequence per epoch kept (``document_index``), 12 B more per sequence per epoch while
building (the gathered lengths and their int64 cumulative sum), 16 B per sample
(``sample_index``) and 4 B per sample (``shuffle_index``). Measured: 10 M sequences
(3.0 B tokens, 732,507 samples at ``seq_length`` 4096) build in 4.4-7 s on the shared
2-core machine, ~160 MB above the lengths. At 1 TB of text (~250 B tokens at ~4
bytes/token, ~600 M lineage rows at ``seq_length`` 4096, one epoch) that is ~2.4 GB kept,
~9.6 GB at the peak of the build, ~1.2 GB for 61 M samples, and minutes of
``RandomState.shuffle``: the same arrays and shuffles ``GPTDataset`` itself builds (rank 0
first, then the other ranks read its cache).
``GPTDataset`` saves them as ``.npy`` under ``path_to_cache`` (default
``<data_path prefix>/cache/GPTDataset_indices/``, a *directory* named after the prefix):
``<md5>-GPTDataset-train-{description.txt,document_index.npy,sample_index.npy,
shuffle_index.npy}``; :func:`load_cached_order` memory-maps them when present, so a lineage
lookup after training reads 16 B per sample looked up, not the whole index.

Source of every rule: mindformers 1.8.0,
``mindformers/dataset/blended_datasets/gpt_dataset.py`` (``_get_num_epochs``,
``_build_document_index``, ``_build_shuffle_index``, the ``separate_final_epoch`` threshold
0.80, ``_query_document_sample_shuffle_indices``), ``.../helpers.cpp`` (``build_sample_idx``)
and ``.../megatron_dataset.py`` (the cache's ``unique_description``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: ``GPTDataset`` keeps the final epoch out of the global shuffle when it supplies fewer
#: than this share of an epoch's samples (gpt_dataset.py, ``threshold = 0.80``).
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80


def num_epochs_for(num_tokens_per_epoch: int, num_samples: int | None, seq_length: int,
                   add_extra_token: bool = True) -> int:
    """``GPTDataset._get_num_epochs``: the fewest epochs (>= 1) whose tokens cover
    ``num_samples * seq_length + add_extra_token`` tokens (1 when ``num_samples`` is None).

    Raises:
        ValueError: ``num_tokens_per_epoch < 1`` (mindformers would loop forever).
    """
    if num_samples is None:
        return 1
    if num_tokens_per_epoch < 1:
        raise ValueError("the dataset has no tokens")
    requested = num_samples * seq_length + int(add_extra_token)
    return max(1, -(-requested // num_tokens_per_epoch))


def build_document_index(num_sequences: int, num_epochs: int, rng: np.random.RandomState,
                         separate_final_epoch: bool) -> np.ndarray:
    """``_build_document_index`` over sequences ``0 .. num_sequences - 1`` (the train split
    of ``split: "1, 0, 0"``): int32[num_epochs * num_sequences], shuffled by ``rng``
    (consumed exactly as mindformers consumes it)."""
    if not separate_final_epoch or num_epochs == 1:
        index = np.tile(np.arange(num_sequences, dtype=np.int32), num_epochs)
        rng.shuffle(index)
        return index
    first = build_document_index(num_sequences, num_epochs - 1, rng, False)
    last = build_document_index(num_sequences, 1, rng, False)
    return np.concatenate((first, last))


def build_sample_index(sequence_lengths: np.ndarray, document_index: np.ndarray, seq_length: int,
                       num_epochs: int, tokens_per_epoch: int, drop_last_partial_sequence: bool = True,
                       add_extra_token: bool = True) -> np.ndarray:
    """helpers.cpp ``build_sample_idx``, vectorised.

    Sample ``j`` starts at token ``j * seq_length`` of the stream of sequences in
    ``document_index`` order; row ``j`` is ``(position in document_index, offset in that
    sequence)``. A start that falls exactly on a sequence boundary is written as the
    C++ loop writes it: with the extra token, the next non-empty sequence at offset 0;
    without it, the previous sequence at offset = its length.

    Args:
        sequence_lengths: int32[num_sequences] (the ``.idx`` lengths).
        document_index: int32[num_epochs * num_sequences].

    Returns:
        int64[num_gpt_samples + 1, 2], ``num_gpt_samples = (num_epochs * tokens_per_epoch -
        add_extra_token) // seq_length`` (ceil when not dropping the partial last one).
    """
    add = int(add_extra_token)
    total = num_epochs * tokens_per_epoch
    if drop_last_partial_sequence:
        num_samples = (total - add) // seq_length
    else:  # C++: ceil(float(x) / seq_length), single precision
        num_samples = int(math.ceil(np.float32(total - add) / np.float32(seq_length)))
    sizes = np.asarray(sequence_lengths)
    ends = np.cumsum(sizes[document_index], dtype=np.int64)  # 8 B per read sequence
    starts = np.arange(num_samples + 1, dtype=np.int64) * seq_length
    position = np.searchsorted(ends, starts, side="right" if add else "left")
    out = np.empty((num_samples + 1, 2), dtype=np.int64)
    inside = position < len(ends)
    position = np.minimum(position, len(ends) - 1)
    out[:, 0] = position
    out[:, 1] = starts - (ends[position] - sizes[document_index[position]])
    out[0] = (0, 0)
    if not drop_last_partial_sequence and (not inside[-1] or num_samples * seq_length + add > total):
        # the C++ loop ran out of sequences: it stops at the last one
        out[-1] = (len(ends) - 1, int(sizes[document_index[-1]]) - add)
    return out


def build_shuffle_index(num_samples: int, total_size: int, rng: np.random.RandomState) -> np.ndarray:
    """``_build_shuffle_index``: ``[0, num_samples)`` shuffled, then ``[num_samples,
    total_size)`` shuffled; uint32, int64 past ``2**32 - 2``."""
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


@dataclass(frozen=True)
class GPTOrder:
    """The three index arrays of one ``GPTDataset`` (train split) and how to read them.

    Attributes:
        document_index: int32[num_epochs * num_sequences], sequence ids in read order.
        sample_index: int64[len + 1, 2], (position in ``document_index``, offset).
        shuffle_index: uint32/int64[len], GPTDataset sample ``i`` -> row of ``sample_index``.
        sequence_lengths: int32[num_sequences].
        seq_length: model input length; a sample reads ``seq_length + add_extra_token``.
        num_epochs: epochs the document index spans.
        add_extra_token: ``add_extra_token_to_sequence`` (mindformers default True).
    """

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray
    sequence_lengths: np.ndarray
    seq_length: int
    num_epochs: int
    add_extra_token: bool = True

    def __len__(self) -> int:
        """``len(GPTDataset)``: every sample the index holds (>= the requested
        ``num_samples``; the trainer then ``take``s ``sizes[0] // global_batch_size``
        steps)."""
        return int(self.sample_index.shape[0]) - 1

    def pieces(self, sample: int) -> list[tuple[int, int, int]]:
        """GPTDataset sample ``sample`` as ``(sequence, offset, length)`` pieces, in
        order: ``_query_document_sample_shuffle_indices`` without reading tokens.
        The lengths add up to ``seq_length + add_extra_token`` (less only for a partial
        last sample, which mindformers pads).

        Raises:
            IndexError: ``sample`` outside ``[0, len(self))``.
        """
        if not 0 <= sample < len(self):
            raise IndexError(f"GPTDataset sample {sample} outside [0, {len(self)})")
        row = int(self.shuffle_index[sample])
        (beg, beg_offset), (end, end_offset) = self.sample_index[row], self.sample_index[row + 1]
        beg, beg_offset, end, end_offset = int(beg), int(beg_offset), int(end), int(end_offset)
        extra = int(self.add_extra_token)
        if beg == end:
            return [(int(self.document_index[beg]), beg_offset, end_offset - beg_offset + extra)]
        out = []
        for position in range(beg, end + 1):
            sequence = int(self.document_index[position])
            offset = beg_offset if position == beg else 0
            length = (int(self.sequence_lengths[sequence]) - offset if position < end
                      else end_offset + extra)
            out.append((sequence, offset, length))
        return out

    def tokens(self, sample: int, stream: np.ndarray, sequence_starts: np.ndarray) -> np.ndarray:
        """The ``seq_length + add_extra_token`` token ids of GPTDataset sample ``sample``
        read from ``stream`` (the ``.bin`` as a 1-D array) at ``sequence_starts``
        (int64[num_sequences], token offsets of the sequences), as int64 like
        mindformers; a partial last sample is padded with -1 (mindformers' pad default)."""
        parts = [np.asarray(stream[int(sequence_starts[s]) + o:int(sequence_starts[s]) + o + n])
                 for s, o, n in self.pieces(sample)]
        out = np.concatenate(parts).astype(np.int64)
        want = self.seq_length + int(self.add_extra_token)
        return np.pad(out, (0, want - len(out)), constant_values=-1) if len(out) < want else out


def build_order(sequence_lengths: np.ndarray, seed: int, seq_length: int, num_samples: int | None,
                add_extra_token: bool = True) -> GPTOrder:
    """``GPTDataset._build_document_sample_shuffle_indices`` for the train split of a
    single-prefix ``data_path`` with ``split: "1, 0, 0"`` (what ``python -m pipeline
    mindformers`` prints).

    Args:
        sequence_lengths: int32[num_sequences], the ``.idx`` sequence lengths (tokens).
        seed: ``config.seed`` of the data loader (mindformers' ``random_seed``, default 1234).
        seq_length: ``config.seq_length``.
        num_samples: ``sizes[0]`` of the data loader (the requested samples), or None for
            one epoch.
        add_extra_token: ``add_extra_token_to_sequence`` (default True).

    Raises:
        ValueError: no sequences, a negative length, or ``seq_length < 2`` (helpers.cpp
            asserts ``seq_length > 1``).
    """
    lengths = np.asarray(sequence_lengths, dtype=np.int32)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError("sequence_lengths must be a non-empty 1-D array")
    if lengths.min() < 0:
        raise ValueError("sequence_lengths holds a negative length")
    if seq_length < 2:
        raise ValueError(f"seq_length must be >= 2, got {seq_length}")
    add = int(add_extra_token)
    tokens_per_epoch = int(lengths.sum(dtype=np.int64))
    epochs = num_epochs_for(tokens_per_epoch, num_samples, seq_length, add_extra_token)
    separate_final_epoch = False
    if epochs > 1:
        sans_final = ((epochs - 1) * tokens_per_epoch - add) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - add) // seq_length
        separate_final_epoch = from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
    rng = np.random.RandomState(seed)
    document_index = build_document_index(len(lengths), epochs, rng, separate_final_epoch)
    sample_index = build_sample_index(lengths, document_index, seq_length, epochs, tokens_per_epoch,
                                      True, add_extra_token)
    total = sample_index.shape[0] - 1
    shuffle_index = build_shuffle_index(sans_final if separate_final_epoch else total, total, rng)
    return GPTOrder(document_index, sample_index, shuffle_index, lengths, seq_length, epochs,
                    bool(add_extra_token))


def load_cached_order(path_to_cache: str | Path, dataset_path: str, sequence_lengths: np.ndarray,
                      seed: int, seq_length: int, num_samples: int | None,
                      add_extra_token: bool = True) -> GPTOrder | None:
    """The arrays ``GPTDataset`` cached under ``path_to_cache``, memory-mapped, when a
    cache entry's ``description.txt`` matches ``dataset_path`` (the ``data_path`` prefix
    as given), ``num_samples``, ``seed`` and ``seq_length``; else None (build with
    :func:`build_order`). The cache does not record ``add_extra_token_to_sequence``: the
    caller's value is trusted."""
    folder = Path(path_to_cache)
    for description in sorted(folder.glob("*-GPTDataset-train-description.txt")):
        try:
            found = json.loads(description.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (found.get("dataset_path"), found.get("num_samples"), found.get("random_seed"),
                found.get("sequence_length")) != (dataset_path, num_samples, seed, seq_length):
            continue
        stem = str(description)[: -len("description.txt")]
        arrays = [np.load(stem + f"{name}.npy", mmap_mode="r", allow_pickle=False)
                  for name in ("document_index", "sample_index", "shuffle_index")]
        lengths = np.asarray(sequence_lengths, dtype=np.int32)
        epochs = len(arrays[0]) // max(1, len(lengths))
        return GPTOrder(*arrays, lengths, seq_length, epochs, bool(add_extra_token))
    return None
