"""Read a version's Megatron indexed dataset (``output.formats: [megatron]``)
with numpy alone: no MindSpore, no mindformers, nothing from ``stages/``.

The files are ``megatron/corpus_text_document.bin`` and ``.idx``
(``pipeline.layout.megatron_prefix``), in the format of Megatron-LM's
``IndexedDataset`` as mindformers 1.8 reads it
(``mindformers/dataset/blended_datasets/indexed_dataset.py``, ``_IndexReader``):

``.idx``, little-endian::

    b"MMIDIDX\\x00\\x00"             9 bytes, the magic
    version          uint64        1
    dtype code       uint8         DType: 4 = int32, 8 = uint16 (the token dtype of .bin)
    sequence_count   uint64        n
    document_count   uint64        m (length of document_indices)
    sequence_lengths int32[n]      tokens of each sequence
    sequence_pointers int64[n]     byte offset of each sequence in .bin
    document_indices int64[m]      sequence index where each document starts, then n

``.bin``: the token ids of every sequence, end to end, in the dtype of the
header. In a version, ``.bin`` is exactly the packed sample stream: every
sample's ``seq_length + 1`` tokens in global sample order (the rows of
``shards/`` concatenated); sequence ``k`` is the ``k``-th lineage row (one
document piece within one sample, ordered by ``sample_index``, ``segment``),
so the pointers are contiguous; ``document_indices`` is ``0..n`` (each piece
is its own document for the reader); every document's last piece ends with
the tokenizer's EOS. The writer is ``pipeline.formats``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

#: The first 9 bytes of an ``.idx`` file (Megatron-LM, mindformers ``_INDEX_HEADER``).
IDX_MAGIC = b"MMIDIDX\x00\x00"
#: The only index version Megatron-LM and mindformers 1.8 write and read.
IDX_VERSION = 1
#: ``DType`` codes of mindformers 1.8's ``indexed_dataset.py`` (Megatron-LM's).
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
               7: np.float32, 8: np.uint16}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}
#: magic + version (uint64) + dtype code (uint8) + sequence and document counts (uint64 each).
HEADER_BYTES = len(IDX_MAGIC) + 8 + 1 + 8 + 8
#: Megatron's ``DType.optimal_dtype``: uint16 when the vocabulary's size
#: (largest id + 1) is below 65,500, else int32.
UINT16_CARDINALITY = 65500


def token_dtype(max_token_id: int) -> np.dtype:
    """The ``.bin`` token dtype for a vocabulary whose largest id is
    ``max_token_id``: Megatron's ``DType.optimal_dtype(cardinality)`` with
    cardinality ``max_token_id + 1`` (uint16 below 65,500, else int32)."""
    return np.dtype(np.uint16 if max_token_id + 1 < UINT16_CARDINALITY else np.int32)


def read_header(path: str | Path) -> tuple[np.dtype, int, int]:
    """``(token dtype, sequence_count, document_count)`` of an ``.idx`` file.

    Raises:
        ValueError: not an index file (magic, version or dtype code).
    """
    with open(path, "rb") as fh:
        head = fh.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or head[:len(IDX_MAGIC)] != IDX_MAGIC:
        raise ValueError(f"{path}: not a Megatron index (no MMIDIDX header)")
    (version,) = struct.unpack_from("<Q", head, len(IDX_MAGIC))
    (code,) = struct.unpack_from("<B", head, len(IDX_MAGIC) + 8)
    count, docs = struct.unpack_from("<QQ", head, len(IDX_MAGIC) + 9)
    if version != IDX_VERSION or code not in DTYPE_CODES:
        raise ValueError(f"{path}: index version {version}, dtype code {code}: expected version 1 and a known code")
    return np.dtype(DTYPE_CODES[code]), int(count), int(docs)


def read_idx(path: str | Path) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
    """Read an ``.idx`` file (memory-mapped arrays: O(1) memory until touched).

    Returns:
        ``(dtype, sequence_lengths int32[n], sequence_pointers int64[n]
        (bytes into .bin), document_indices int64[m])``.

    Raises:
        ValueError: not an index file, or its size does not match its counts.
    """
    dtype, n, m = read_header(path)
    size = Path(path).stat().st_size
    expected = HEADER_BYTES + 4 * n + 8 * n + 8 * m
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, its counts ({n} sequences, {m} documents) need {expected}")
    lengths = np.memmap(path, np.int32, "r", offset=HEADER_BYTES, shape=(n,)) if n else np.zeros(0, np.int32)
    pointers = np.memmap(path, np.int64, "r", offset=HEADER_BYTES + 4 * n, shape=(n,)) if n else \
        np.zeros(0, np.int64)
    docs = np.memmap(path, np.int64, "r", offset=HEADER_BYTES + 12 * n, shape=(m,)) if m else np.zeros(0, np.int64)
    return dtype, lengths, pointers, docs


def read_tokens(prefix: str | Path, first_token: int, count: int, dtype: np.dtype | None = None) -> np.ndarray:
    """Tokens ``[first_token, first_token + count)`` of ``<prefix>.bin``
    (token offsets, not bytes), as int32. Sample ``i`` of a version is
    ``read_tokens(prefix, i * (seq_length + 1), seq_length + 1)``; sequence
    ``k`` is ``read_tokens(prefix, pointers[k] // itemsize, lengths[k])``.

    Args:
        prefix: the path without ``.bin``/``.idx`` (``<version>/megatron/corpus_text_document``).
        dtype: the token dtype (default: read from ``<prefix>.idx``).

    Raises:
        ValueError: the range is outside the file.
    """
    dtype = np.dtype(dtype) if dtype is not None else read_header(f"{prefix}.idx")[0]
    path = Path(f"{prefix}.bin")
    total = path.stat().st_size // dtype.itemsize
    if first_token < 0 or count < 0 or first_token + count > total:
        raise ValueError(f"{path}: tokens {first_token}..{first_token + count} outside its {total} tokens")
    with open(path, "rb") as fh:
        fh.seek(first_token * dtype.itemsize)
        data = fh.read(count * dtype.itemsize)
    return np.frombuffer(data, dtype).astype(np.int32)


def read_sequence(prefix: str | Path, k: int) -> np.ndarray:
    """Sequence ``k`` of the dataset (int32), through its ``.idx`` entry."""
    dtype, lengths, pointers, _ = read_idx(f"{prefix}.idx")
    return read_tokens(prefix, int(pointers[k]) // dtype.itemsize, int(lengths[k]), dtype)
