"""Write the output formats of a version from its one packed sample stream
(``output.formats``; docs/loader_and_lineage.md, "Formats").

The assembly (``pipeline.assemble``, phase 3) hands each shard task its
samples (``int32[n, seq_length + 1]``, in global order) and their lineage
segments; this module turns them into

* ``mindrecord_shifted`` rows (:func:`shifted_columns`): mindformers' packed
  columns, the shift done once at build time;
* a byte range of the Megatron ``.bin`` (:class:`BinRange`), written in place
  into a file the driver sized beforehand (:func:`prepare_bin`), with the
  sequence lengths of the range as a small part file; the driver then streams
  the ``.idx`` from the parts (:func:`write_idx`).

Readers are in :mod:`pipeline.megatron` (pure numpy, for training jobs and
tests); nothing here is needed to read a version.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Iterable

import numpy as np

from common.errors import naming_path
from common.io import commit, temp_path
from pipeline.megatron import CODE_OF, HEADER_BYTES, IDX_MAGIC, IDX_VERSION

#: Column order of a ``mindrecord_shifted`` row: mindformers 1.8's packed
#: dataset (``hf_dataloader.py``: ``['input_ids', 'labels', 'loss_mask',
#: 'position_ids', 'actual_seq_len']``, also the order ``GPTDataset`` returns
#: with ``create_compressed_eod_mask``).
SHIFTED_COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "actual_seq_len")
# Rows hashed and written per call when a range of the .bin is written:
# bounds the converted copy (our choice).
_BIN_CHUNK_ROWS = 4096


def shifted_columns(rows: np.ndarray, seg_sample: np.ndarray, seg_end: np.ndarray, eod_pad_length: int,
                    eod_mask_loss: bool = False) -> dict[str, np.ndarray]:
    """mindformers' pre-shifted packed columns for ``n`` samples.

    With ``S = seq_length`` and ``w`` a sample's ``S + 1`` tokens:

    * ``input_ids = w[:S]``, ``labels = w[1:S + 1]``;
    * ``actual_seq_len``: the ascending distinct ends (exclusive) of the
      sample's document pieces clipped to ``S``, ``S`` always last, padded to
      ``eod_pad_length`` with ``S``; no leading 0. This is what mindformers
      1.8's ``GPTDataset._get_eod_attention_mask`` computes from the EOD
      tokens of the inputs (EOD positions + 1, then ``seq_length``) and what
      its ``_get_packed_data`` pads; best-fit padding is one more range
      ending at ``S``;
    * ``position_ids``: ``t`` minus the last end ``<= t`` (0 after each
      document end), as ``reset_position_ids``/``eod_reset`` give;
    * ``loss_mask``: 1, but 0 where the label is best-fit padding (a token
      of no piece; mindformers masks labels equal to the pad id) and, with
      ``eod_mask_loss``, 0 where the input is a document's last token (its
      EOS): Megatron's ``eod_mask_loss`` (``loss_mask[data == eod] = 0``).

    Args:
        rows: int32[n, S + 1] samples.
        seg_sample: int64[k] row (0..n-1) of each lineage segment of these samples.
        seg_end: int[k] the segment's ``sample_token_end`` (exclusive, not clipped: S + 1 when
            the piece reaches the end of the window).
        eod_pad_length: width of ``actual_seq_len`` (``output.eod_pad_length``).
        eod_mask_loss: ``output.eod_mask_loss``.

    Returns:
        ``{name: int32 array}`` in :data:`SHIFTED_COLUMNS` order: four of
        ``[n, S]`` and ``actual_seq_len`` ``[n, eod_pad_length]``. Memory
        O(n * S).

    Raises:
        ValueError: a sample holds more than ``eod_pad_length`` ends (the
            assembly checks this for the whole version before writing: see
            ``pipeline.assemble``), or a sample has no segment.
    """
    n, window = rows.shape
    seq = window - 1
    seg_sample = np.asarray(seg_sample, np.int64)
    seg_end = np.asarray(seg_end, np.int64)
    if n and (np.bincount(seg_sample, minlength=n) == 0).any():
        raise ValueError("a sample has no lineage segment")
    used = np.zeros(n, np.int64)
    np.maximum.at(used, seg_sample, seg_end)
    t = np.arange(seq, dtype=np.int64)
    loss_mask = (t[None, :] + 1 < used[:, None]).astype(np.int32)
    if eod_mask_loss:
        inside = seg_end <= seq  # the piece's last token is an input: the document's EOS
        loss_mask[seg_sample[inside], seg_end[inside] - 1] = 0
    # Distinct clipped ends per sample, seq always included.
    clipped = np.minimum(seg_end, seq)
    keys = np.unique(np.concatenate([seg_sample * (seq + 1) + clipped, np.arange(n, dtype=np.int64) * (seq + 1) + seq]))
    sample, end = keys // (seq + 1), keys % (seq + 1)
    counts = np.bincount(sample, minlength=n)
    if counts.max(initial=0) > eod_pad_length:
        worst = int(counts.argmax())
        raise ValueError(f"sample row {worst} holds {int(counts[worst])} document ends, more than "
                         f"output.eod_pad_length = {eod_pad_length}")
    actual = np.full((n, eod_pad_length), seq, np.int32)
    actual[sample, np.arange(len(keys)) - np.repeat(np.cumsum(counts) - counts, counts)] = end
    reset = np.zeros((n, seq), np.int64)
    inner = end < seq
    reset[sample[inner], end[inner]] = end[inner]
    position_ids = (t[None, :] - np.maximum.accumulate(reset, axis=1)).astype(np.int32)
    return {"input_ids": np.ascontiguousarray(rows[:, :seq], np.int32),
            "labels": np.ascontiguousarray(rows[:, 1:], np.int32),
            "loss_mask": loss_mask, "position_ids": position_ids, "actual_seq_len": actual}


def prepare_bin(path: Path, num_tokens: int, dtype: np.dtype) -> None:
    """Create the Megatron ``.bin`` at its final size (``num_tokens`` x
    itemsize bytes, sparse) so that shard tasks on any machine write their
    ranges in place. An existing file of that size is kept: its ranges were
    written by finished tasks (their markers vouch for them) and a resumed
    task rewrites its whole range."""
    size = int(num_tokens) * np.dtype(dtype).itemsize
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size == size:
        return
    with naming_path(path), open(path, "wb") as fh:
        fh.truncate(size)


class BinRange:
    """One shard task's byte range of the ``.bin``: its rows, in order,
    written with positional writes from token ``first_token`` on, and their
    sha256 (the digest of exactly the range's bytes). Rewriting a range
    writes the same bytes, so a task killed half-way is simply run again.

    Args:
        path: the ``.bin`` (already sized by :func:`prepare_bin`).
        first_token: the range's first token (first sample x (seq_length + 1)).
        dtype: the token dtype (:func:`pipeline.megatron.token_dtype`).
    """

    def __init__(self, path: Path, first_token: int, dtype: np.dtype):
        self.path, self.dtype = Path(path), np.dtype(dtype)
        self.offset = int(first_token) * self.dtype.itemsize
        self.start = self.offset
        self.hash = hashlib.sha256()
        with naming_path(self.path):
            self.fd = os.open(self.path, os.O_WRONLY)

    def write(self, rows: np.ndarray) -> None:
        """Append ``rows`` (int32[n, seq_length + 1]) to the range."""
        flat = np.asarray(rows).reshape(-1)
        if flat.size and (flat.min() < 0 or (self.dtype == np.uint16 and flat.max() > 0xFFFF)):
            raise ValueError(f"{self.path}: a token id does not fit {self.dtype.name}")
        step = _BIN_CHUNK_ROWS * (rows.shape[1] if rows.ndim == 2 else 1)
        for lo in range(0, flat.size, step):
            data = flat[lo:lo + step].astype(self.dtype).tobytes()
            self.hash.update(data)
            with naming_path(self.path):
                written = 0
                while written < len(data):
                    written += os.pwrite(self.fd, data[written:], self.offset + written)
            self.offset += len(data)

    def close(self) -> dict:
        """Flush to disk; ``{"first_byte", "bytes", "sha256"}`` of the range."""
        with naming_path(self.path):
            os.fsync(self.fd)
            os.close(self.fd)
        return {"first_byte": self.start, "bytes": self.offset - self.start, "sha256": self.hash.hexdigest()}


def save_lengths(lengths: np.ndarray, path: Path) -> None:
    """A shard's sequence lengths (int32, lineage-row order) as an ``.npy``
    part file, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    with naming_path(tmp), open(tmp, "wb") as fh:
        np.save(fh, np.asarray(lengths, np.int32), allow_pickle=False)
    commit(tmp, path)


def write_idx(path: Path, dtype: np.dtype, length_parts: Iterable[Path]) -> dict:
    """Stream the ``.idx`` (header in :mod:`pipeline.megatron`) from the
    shards' length parts, in shard order: lengths, then pointers (running
    byte offsets, contiguous), then ``document_indices = 0..n`` (each
    sequence its own document). Memory: one part; the file is read once per
    section, written atomically.

    Returns:
        ``{"name" (file name), "bytes", "sha256", "sequences", "tokens"}``.
    """
    dtype = np.dtype(dtype)
    parts = list(length_parts)
    n = sum(int(np.load(p, mmap_mode="r").shape[0]) for p in parts)
    tmp = temp_path(path)
    digest = hashlib.sha256()
    size = 0

    def put(fh, data: bytes) -> None:
        nonlocal size
        fh.write(data)
        digest.update(data)
        size += len(data)

    path.parent.mkdir(parents=True, exist_ok=True)
    tokens = 0
    with naming_path(tmp), open(tmp, "wb") as fh:
        put(fh, IDX_MAGIC + struct.pack("<Q", IDX_VERSION) + struct.pack("<B", CODE_OF[dtype])
            + struct.pack("<QQ", n, n + 1))
        for p in parts:
            put(fh, np.load(p).astype("<i4").tobytes())
        offset = 0
        for p in parts:
            lengths = np.load(p).astype(np.int64)
            ends = np.cumsum(lengths)
            put(fh, ((ends - lengths + offset) * dtype.itemsize).astype("<i8").tobytes())
            offset += int(ends[-1]) if len(ends) else 0
        tokens = offset
        chunk = 1 << 20
        for lo in range(0, n + 1, chunk):
            put(fh, np.arange(lo, min(n + 1, lo + chunk), dtype="<i8").tobytes())
        fh.flush()
        os.fsync(fh.fileno())
    commit(tmp, path)
    assert size == HEADER_BYTES + 12 * n + 8 * (n + 1)
    return {"name": path.name, "bytes": size, "sha256": digest.hexdigest(), "sequences": n, "tokens": tokens}
