"""Write packed samples as MindRecord shards, deterministically.

A version's samples are one ``int32[num_samples, seq_length + 1]`` array, already
in the final (globally shuffled) order. :func:`write_shards` cuts it into
consecutive row ranges and writes each range with its own
``FileWriter(shard_num=1)``: with ``shard_num > 1`` MindSpore spreads the rows of
one call across files at random, so the layout would change run to run
(docs/loader_and_lineage.md, /work/shared/notes/dependencies.md).

Schema: ``{"input_ids": {"type": "int32", "shape": [seq_length + 1]}}`` plus any
extra int32 columns of fixed width, e.g. ``actual_seq_len`` (the document
boundaries, ``pipeline.packing.document_boundaries``). A fixed shape (rather than
mindformers' ``[-1]``) records the row length in every shard's own header, so
the loader checks each shard against the manifest's ``seq_length`` without
reading a row, and batches need no padding; the stored bytes are the same
(measured).

Writing the same samples twice gives byte-identical ``.mindrecord`` *and*
``.mindrecord.db`` files, in any directory: the SQLite index holds only the row
offsets and the file's base name (table ``SHARD_NAME``), no path or timestamp
(measured with MindSpore 2.10; tests/pipeline/test_writer.py checks it). Because
the ``.db`` names its data file, a shard must never be renamed; publish by
renaming the whole version directory.

MindSpore is imported inside the functions that need it, so that this
module stays cheap to import.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from common.io import sha256_file
from pipeline import layout

COLUMN = "input_ids"
SCHEMA_DESC = "mindcorpus packed pretraining samples"

# Upper bound on the uncompressed int32 payload of one shard (rows x (seq_length+1)
# x 4 bytes). Our choice: ~1 GiB of payload is ~131k rows at seq_length 2048, a
# file of ~0.55 GiB on disk at a 32k vocabulary (int32 arrays are stored
# compressed, ~2.2 bytes/token measured), written in ~10 s at the measured
# 12-15k rows/s, with a small SQLite index; many shards per version let copies
# and checksums run in parallel.
DEFAULT_MAX_SHARD_BYTES = 1 << 30

# MindRecord stores an int32 array compressed; the worst case we measured is
# 4.12 bytes/token (values near +-2**31), so 5 bytes/token + 1 KiB bounds a row.
_STORED_BYTES_PER_TOKEN = 5
_STORED_ROW_OVERHEAD = 1024
# FileWriter limits (MindSpore 2.10 docs): page 32 KiB..256 MiB, header 16 KiB..128 MiB.
_MIN_PAGE, _MAX_PAGE = 1 << 15, 1 << 28
_MIN_HEADER, _MAX_HEADER = 1 << 14, 1 << 27
# The header holds ~200 bytes per page (measured); 256 leaves headroom.
_HEADER_BYTES_PER_PAGE = 256
# Target pages per shard: bounds the header (~256 KiB) while the partly filled
# last page (sparse on disk, but counted in the file size) stays <= ~0.2 %.
_TARGET_PAGES = 512
# Rows per write_raw_data call: 1000 rows/call writes ~12-15k rows/s, one row/call
# ~1.2k rows/s (measured, dependencies.md).
_WRITE_CHUNK_ROWS = 1000

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.-]+$")

#: The most int32 values one row may hold: at the worst-case stored size
#: (5 bytes per value + 1 KiB) a row must fit half of MindRecord's largest
#: page, 256 MiB (:func:`page_and_header_size`): 26,843,340 values.
MAX_ROW_VALUES = (_MAX_PAGE // 2 - _STORED_ROW_OVERHEAD) // _STORED_BYTES_PER_TOKEN
#: The longest ``seq_length`` a version can store: a row holds
#: ``seq_length + 1`` input ids and up to ``seq_length`` document ends
#: (``actual_seq_len``), so ``2 * seq_length + 1 <= MAX_ROW_VALUES``:
#: 13,421,669 tokens.
MAX_SEQ_LENGTH = (MAX_ROW_VALUES - 1) // 2


class ShardWriteError(RuntimeError):
    """MindRecord could not write (or commit) a shard file.

    Attributes:
        path: the shard's data file (its ``.db`` index sits next to it).
        cause: MindSpore's own reason, one line (e.g. ``No free disk to be
            used while writing mindrecord files``).
    """

    def __init__(self, path: str, cause: str):
        super().__init__(str(path), cause)
        self.path, self.cause = str(path), cause

    def __str__(self) -> str:
        return f"cannot write MindRecord shard {self.path}: {self.cause}"


def mindspore_reason(exc: BaseException) -> str:
    """The one line of a MindSpore error that says what went wrong.

    MindSpore's errors span ~15 lines (a banner, the message, a C++ call
    stack); the message is the line after ``Dataset Pipeline Error Message``
    (``[ERROR] ...``), or the first non-empty line of other errors.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("[ERROR]"):
            return line.removeprefix("[ERROR]").strip()
    meaningful = [line for line in lines if not line.startswith(("-", "Exception thrown from dataset pipeline"))]
    return (meaningful or lines or [type(exc).__name__])[0]


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def page_and_header_size(num_rows: int, row_length: int) -> tuple[int, int]:
    """MindRecord page and header sizes (bytes) for one shard of ``num_rows`` rows
    of ``row_length`` int32 tokens.

    MindSpore's defaults (page 32 MiB, header 16 MiB) make even a 10-row file
    ~50 MB (dependencies.md). Here the page is a power of two of at least 32 KiB,
    at least twice the worst-case stored row (so every page but the last is at
    least half full), and about 1/512 of the shard's worst-case stored bytes; the
    header is sized for the resulting worst-case page count at 256 bytes/page.

    Raises:
        ValueError: a row cannot fit the largest page (256 MiB), or the header
            would exceed MindRecord's 128 MiB limit.
    """
    row_bound = _STORED_BYTES_PER_TOKEN * row_length + _STORED_ROW_OVERHEAD
    payload_bound = num_rows * row_bound
    page = _next_pow2(max(_MIN_PAGE, 2 * row_bound, payload_bound // _TARGET_PAGES))
    if page > _MAX_PAGE:
        if 2 * row_bound > _MAX_PAGE:
            raise ValueError(f"a row of {row_length} tokens does not fit a MindRecord page")
        page = _MAX_PAGE
    max_pages = -(-payload_bound // (page // 2)) + 1
    header = _next_pow2(_MIN_HEADER + _HEADER_BYTES_PER_PAGE * max_pages)
    if header > _MAX_HEADER:
        raise ValueError(
            f"shard of {num_rows} rows needs a {header}-byte MindRecord header (max {_MAX_HEADER});"
            " lower max_shard_bytes"
        )
    return page, header


def validate_samples(samples: Any, min_width: int = 2) -> np.ndarray:
    """Check that ``samples`` is a non-empty ``int32[n, L]`` array of token ids.

    MindSpore's FileWriter drops a row of the wrong dtype or shape with only a
    WARNING, so every check happens here, before writing.

    Returns:
        ``samples`` as a C-contiguous int32 array (a copy only if it was not).
    Raises:
        TypeError: not a numpy array, or dtype is not int32.
        ValueError: not 2-D, no rows, rows shorter than 2 tokens (a row holds
            ``seq_length + 1`` tokens), or a negative token id.
    """
    if not isinstance(samples, np.ndarray):
        raise TypeError(f"samples must be a numpy int32 array, got {type(samples).__name__}")
    if samples.dtype != np.int32:
        raise TypeError(f"samples must have dtype int32, got {samples.dtype}")
    if samples.ndim != 2:
        raise ValueError(f"samples must be 2-D [num_samples, seq_length + 1], got shape {samples.shape}")
    if samples.shape[0] == 0:
        raise ValueError("samples has no rows: nothing to write")
    if samples.shape[1] < min_width:
        raise ValueError(f"rows must hold >= {min_width} values (seq_length + 1 for input_ids), "
                         f"got {samples.shape[1]}")
    if samples.min() < 0:
        raise ValueError("samples contain a negative token id")
    return np.ascontiguousarray(samples)


class ShardWriter:
    """One MindRecord file + ``.db`` written in row chunks, so a shard of any
    size is written with the memory of one chunk.

    Args:
        path: the data file (must not exist).
        widths: column name -> row width (int32 columns of fixed shape),
            ``input_ids`` first.
        page, header: MindRecord page and header sizes (bytes), the same for
            every shard of a version (:func:`page_and_header_size`).
    """

    def __init__(self, path: Path, widths: dict[str, int], page: int, header: int):
        from mindspore.mindrecord import FileWriter

        self.path = Path(path)
        self.names = list(widths)
        self.rows = 0
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        with self._naming_the_shard():
            self._writer = FileWriter(str(path), shard_num=1, overwrite=False)
            self._writer.add_schema({name: {"type": "int32", "shape": [widths[name]]} for name in self.names},
                                    SCHEMA_DESC)
            self._writer.set_header_size(header)
            self._writer.set_page_size(page)

    @contextlib.contextmanager
    def _naming_the_shard(self):
        """MindSpore's write errors (RuntimeError, OSError: a full disk, a
        read-only directory) become one :class:`ShardWriteError` naming the
        file; the writer is dropped, so its files are closed (a worker goes on
        with other tasks, and a re-run removes the partial shard)."""
        try:
            yield
        except (RuntimeError, OSError) as exc:
            if isinstance(exc, ShardWriteError):
                raise
            self._writer = None
            reason = mindspore_reason(exc) if not isinstance(exc, OSError) or exc.errno is None else \
                f"{os.strerror(exc.errno)} ({errno.errorcode.get(exc.errno, exc.errno)})"
            raise ShardWriteError(str(self.path), reason) from exc

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """Append rows: ``columns`` name -> validated int32[n, width], same n.

        Rows reach MindRecord in calls of exactly ``_WRITE_CHUNK_ROWS`` rows
        from the start of the shard (the rest at :meth:`close`), because the
        file's layout depends on how rows are split across calls: the same
        rows give the same bytes however the caller hands them over.
        """
        self._pending.append({name: columns[name] for name in self.names})
        self._pending_rows += columns[COLUMN].shape[0]
        self.rows += columns[COLUMN].shape[0]
        if self._pending_rows >= _WRITE_CHUNK_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self._pending:
            return
        merged = {name: np.concatenate([p[name] for p in self._pending]) if len(self._pending) > 1
                  else self._pending[0][name] for name in self.names}
        n = merged[COLUMN].shape[0]
        full = n if final else n - n % _WRITE_CHUNK_ROWS
        for start in range(0, full, _WRITE_CHUNK_ROWS):
            stop = min(start + _WRITE_CHUNK_ROWS, full)
            chunk = {name: merged[name][start:stop] for name in self.names}
            with self._naming_the_shard():
                self._writer.write_raw_data([{name: chunk[name][i] for name in self.names}
                                             for i in range(len(chunk[COLUMN]))])
        rest = {name: merged[name][full:] for name in self.names}
        self._pending = [rest] if n > full else []
        self._pending_rows = n - full

    def close(self) -> int:
        """Commit, check that the file holds every row written, and give both
        files the process umask's permissions. Returns the rows.

        Raises:
            ShardWriteError: MindSpore could not write or commit the file.
            RuntimeError: MindSpore committed a different number of rows.
        """
        from mindspore.mindrecord import FileReader

        self._flush(final=True)
        with self._naming_the_shard():
            self._writer.commit()
        reader = FileReader(str(self.path))
        try:
            written = reader.len()
        finally:
            reader.close()
        if written != self.rows:
            raise RuntimeError(
                f"{self.path}: MindRecord holds {written} rows after commit, expected {self.rows}"
                " (FileWriter dropped rows; see its WARNING lines)"
            )
        # FileWriter creates both files with mode 0600; a corpus is shared between
        # users like every other file of the version: apply the process umask.
        umask = os.umask(0)
        os.umask(umask)
        for file in (self.path, layout.shard_index(self.path)):
            os.chmod(file, 0o666 & ~umask)
        return written


def write_one_shard(path: Path, columns: dict[str, np.ndarray], page: int, header: int) -> None:
    """Write ``columns`` (name -> int32[n, width], validated, same n) to one
    MindRecord file + ``.db`` with the given page and header sizes (bytes), then
    check that the committed file holds exactly ``n`` rows."""
    writer = ShardWriter(path, {name: values.shape[1] for name, values in columns.items()}, page, header)
    writer.write(columns)
    writer.close()


def write_shards(
    samples: np.ndarray,
    out_dir: str | Path,
    prefix: str = layout.SHARD_PREFIX,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    columns: dict[str, np.ndarray] | None = None,
) -> list[dict]:
    """Write ``samples`` as MindRecord shards under ``out_dir/shards/``.

    Args:
        samples: ``int32[num_samples, seq_length + 1]`` token ids in the final
            sample order; shard k holds the next ``rows_per_shard`` rows, so the
            global row index (shards in returned order) equals the row of
            ``samples``.
        out_dir: the version directory being assembled (``shards/`` is created).
        prefix: file name prefix, ``[A-Za-z0-9_.-]+``.
        max_shard_bytes: upper bound on a shard's uncompressed payload,
            ``rows * (seq_length + 1) * 4`` bytes (default 1 GiB, see
            ``DEFAULT_MAX_SHARD_BYTES``). The file on disk is typically ~55 % of
            it at a 32k vocabulary. At least one row goes in each shard. Shard
            boundaries depend only on (num_samples, seq_length, max_shard_bytes),
            not on ``columns``.
        columns: extra columns, name -> ``int32[num_samples, width]`` (width
            >= 1, values >= 0), stored next to ``input_ids`` in the same rows,
            e.g. ``{"actual_seq_len": ...}``. Names ``[A-Za-z0-9_]+``, not
            ``input_ids``.

    Returns:
        One dict per shard, in order: ``name`` (relative to ``out_dir``, e.g.
        ``shards/corpus-00000.mindrecord``), ``sha256`` (hex, data file),
        ``db_sha256`` (hex, the ``.db`` index), ``rows`` (int), ``bytes`` (int,
        data file size).

    Raises:
        TypeError / ValueError: see :func:`validate_samples` (also applied to
            each extra column); a column with another row count or a bad name;
            bad prefix or ``max_shard_bytes < 1``.
        FileExistsError: a shard file already exists (never overwritten).
        ShardWriteError: MindSpore could not write a shard (full disk, ...).
        RuntimeError: MindSpore committed a different number of rows.
    """
    samples = validate_samples(samples)
    all_columns = {COLUMN: samples}
    for name, values in (columns or {}).items():
        if name == COLUMN or not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"bad extra column name {name!r}")
        values = validate_samples(values, min_width=1)
        if values.shape[0] != samples.shape[0]:
            raise ValueError(f"column {name} has {values.shape[0]} rows, input_ids {samples.shape[0]}")
        all_columns[name] = values
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"prefix must match {_PREFIX_RE.pattern}, got {prefix!r}")
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes must be >= 1, got {max_shard_bytes}")
    out_dir = Path(out_dir)
    (out_dir / layout.SHARDS).mkdir(parents=True, exist_ok=True)
    num_rows, row_length = samples.shape
    rows_per_shard = max(1, max_shard_bytes // (4 * row_length))
    # One page/header size for every shard: MindDataset refuses to read files
    # whose header metadata differ ("metadata ... is different from others").
    stored_width = sum(values.shape[1] for values in all_columns.values())
    page, header = page_and_header_size(min(rows_per_shard, num_rows), stored_width)

    shards = []
    for index, start in enumerate(range(0, num_rows, rows_per_shard)):
        name = layout.shard_name(index, prefix)
        path = out_dir / name
        for existing in (path, layout.shard_index(path)):
            if existing.exists():
                raise FileExistsError(f"{existing} exists; shards are never overwritten")
        rows = samples[start : start + rows_per_shard]
        write_one_shard(path, {n: v[start : start + rows_per_shard] for n, v in all_columns.items()},
                         page, header)
        shards.append(
            {
                "name": name,
                "sha256": sha256_file(path),
                "db_sha256": sha256_file(layout.shard_index(path)),
                "rows": int(rows.shape[0]),
                "bytes": path.stat().st_size,
            }
        )
    return shards
