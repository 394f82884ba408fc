"""Input readers: JSONL (plain, ``.gz``, ``.zst``), Parquet and plain text.

Every record becomes a document with a stable id ``"<source>:<file>:<line>"``
(``file`` as resolved from the config, relative to the repo root when inside
it; ``line`` the 1-based line of the record in the decompressed JSONL or text
file, or the 1-based row of a Parquet file). The id survives every stage and
is the key for dedup, lineage and reports.

A record that cannot be read is never dropped silently: it becomes a
:class:`Quarantined` entry with file, line, byte offset and a reason code
(``read.invalid_utf8``, ``read.legacy_encoding``, ``read.invalid_json``,
``read.not_object``, ``read.missing_text``, ``read.text_not_string``,
``read.empty_text``, ``read.lone_surrogate``, ``read.nul_byte``,
``read.missing_id``, ``read.duplicate_id``, ``read.record_too_large``,
``read.truncated_file``, ``read.empty_file``, ``read.unreadable_file``), and is
counted in the manifest.

Inputs may be local paths or fsspec URLs (``s3://bucket/dir/*.jsonl.zst``;
Huawei OBS and MinIO speak S3), with per-source ``storage_options``.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import zstandard

READ_CHUNK = 1 << 20
_CJK = re.compile("[\u4e00-\u9fff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


@dataclasses.dataclass
class Record:
    """One document as read: ``line`` is 1-based (row for Parquet)."""

    line: int
    text: str
    meta: str
    doc_id: str | None = None  # the record's own id (``id_field``), if configured


@dataclasses.dataclass
class Quarantined:
    """One input record that could not become a document."""

    file: str
    line: int
    byte_offset: int
    reason: str
    detail: str


def is_url(path: str | Path) -> bool:
    """True for an fsspec URL such as ``s3://bucket/key`` (not a local path)."""
    return "://" in str(path)


def resolve_paths(patterns: list[str], base: str | Path, storage_options: dict | None = None) -> list[str]:
    """Expand files and globs (``**`` allowed) relative to ``base`` (a local
    directory or an fsspec URL); sorted, unique.

    Local matches are returned as absolute paths, remote ones as URLs
    (``s3://bucket/key``).

    Raises:
        FileNotFoundError: a pattern matches no file (named in the message).
    """
    out: set[str] = set()
    for pattern in patterns:
        if is_url(base) and not is_url(pattern):
            pattern = str(base).rstrip("/") + "/" + pattern.lstrip("/")
        if is_url(pattern):
            import fsspec

            fs, _, _ = fsspec.get_fs_token_paths(pattern, storage_options=storage_options or {})
            protocol = pattern.split("://", 1)[0]
            matches = [f"{protocol}://{p}" for p in fs.glob(pattern.split("://", 1)[1]) if fs.isfile(p)]
        else:
            full = pattern if Path(pattern).is_absolute() else str(base / pattern)
            matches = [str(Path(p).resolve()) for p in glob.glob(full, recursive=True) if Path(p).is_file()]
        if not matches:
            raise FileNotFoundError(f"input pattern {pattern!r} matches no file (looked in {base})")
        out.update(matches)
    return sorted(out)


def display_path(path: str | Path, base: str | Path) -> str:
    """The path as recorded in ids: relative to ``base`` when inside it (for a
    local directory or a URL prefix), else absolute / the full URL."""
    if is_url(path) or is_url(base):
        prefix = str(base).rstrip("/") + "/"
        return str(path)[len(prefix):] if str(path).startswith(prefix) else str(path)
    try:
        return Path(path).resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return Path(path).resolve().as_posix()


def open_input(path: str | Path, storage_options: dict | None = None):
    """Open a local file or fsspec URL for binary reading (no decompression)."""
    if is_url(path):
        import fsspec

        return fsspec.open(str(path), "rb", **(storage_options or {})).open()
    return open(path, "rb")


def input_identity(path: str | Path, storage_options: dict | None = None) -> dict:
    """What identifies an input's content without reading it: ``size`` and
    ``mtime_ns`` of a local file; ``size`` and ``etag`` (or the last-modified
    time) of an object. A digest cached under this identity is reused
    (``pipeline.build.input_digest``)."""
    if is_url(path):
        import fsspec

        fs, _, (key,) = fsspec.get_fs_token_paths(str(path), storage_options=storage_options or {})
        info = fs.info(key)
        tag = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime")
        return {"size": int(info.get("size") or 0), "etag": str(tag)}
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def input_size_and_sha256(path: str | Path, storage_options: dict | None = None) -> tuple[int, str]:
    """(bytes, hex sha256) of an input file, read in 1 MiB chunks."""
    import hashlib

    h = hashlib.sha256()
    size = 0
    with open_input(path, storage_options) as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def detect_format(path: Path) -> str:
    """``jsonl``, ``parquet`` or ``text`` from the file name."""
    name = Path(str(path)).name.lower()
    for comp in (".gz", ".zst"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "text"


class TruncatedInput(Exception):
    """A compressed input ended before its end-of-stream marker."""


def _open_binary(path: str | Path, storage_options: dict | None = None) -> io.BufferedIOBase:
    name = str(path).lower()
    raw = open_input(path, storage_options)
    if name.endswith(".gz"):
        gz = gzip.GzipFile(fileobj=raw, mode="rb")
        gz.myfileobj = raw  # GzipFile closes myfileobj on close()
        return gz
    if name.endswith(".zst"):
        return _ZstdStrict(raw)
    return raw


class _ZstdStrict(io.RawIOBase):
    """Multi-frame zstd reader that raises :class:`TruncatedInput` when the
    last frame is incomplete (``stream_reader`` returns partial data silently,
    see shared/notes/dependencies.md)."""

    def __init__(self, raw):
        self._fh = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._pending and not self._eof:
            chunk = self._fh.read(READ_CHUNK)
            if not chunk:
                self._eof = True
                # Raising here would lose what the caller's buffer holds:
                # flag it, and the line reader raises after the last line.
                self.truncated = self._started and not self._obj.eof
                break
            self._started = True
            out = []
            while chunk:
                out.append(self._obj.decompress(chunk))
                if self._obj.eof:
                    chunk = self._obj.unused_data
                    self._obj = self._dctx.decompressobj()
                    self._started = bool(chunk)
                else:
                    chunk = b""
            self._pending = b"".join(out)
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    _started = False
    truncated = False

    def close(self) -> None:
        self._fh.close()
        super().close()


def _lines(stream, max_bytes: int) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield (line number, byte offset, raw line without ``\\n``/``\\r\\n``).

    Only ``\\n`` separates records (Unicode line and paragraph separators inside
    strings do not). A line longer than ``max_bytes`` is skipped in bounded
    memory and yielded as ``None``.
    """
    offset = 0
    lineno = 0
    buf = io.BufferedReader(stream, READ_CHUNK) if not isinstance(stream, io.BufferedIOBase) else stream
    while True:
        raw = buf.readline(max_bytes + 1)
        if not raw:
            if getattr(stream, "truncated", False):
                raise TruncatedInput("zstd stream ends inside a frame")
            return
        lineno += 1
        start = offset
        offset += len(raw)
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            # Too long: consume the rest of the line without keeping it.
            while raw and not raw.endswith(b"\n"):
                raw = buf.readline(READ_CHUNK)
                offset += len(raw)
            yield lineno, start, None
            continue
        if not raw.endswith(b"\n") and getattr(stream, "truncated", False):
            # The cut-off last line of a truncated file is not a record.
            raise TruncatedInput("zstd stream ends inside a frame")
        yield lineno, start, raw.rstrip(b"\n").rstrip(b"\r")


def _check_text(text, file: str, line: int, offset: int) -> tuple[str | None, Quarantined | None]:
    if text is None:
        return None, Quarantined(file, line, offset, "read.missing_text", "no text field")
    if not isinstance(text, str):
        return None, Quarantined(file, line, offset, "read.text_not_string", type(text).__name__)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None, Quarantined(file, line, offset, "read.lone_surrogate", "text holds a lone surrogate")
    if not text.strip():
        return None, Quarantined(file, line, offset, "read.empty_text", repr(text[:20]))
    if "\x00" in text:
        return None, Quarantined(file, line, offset, "read.nul_byte",
                                 f"NUL at character {text.index(chr(0))}")
    return text, None


def _undecodable(raw: bytes, exc: UnicodeDecodeError, file: str, line: int, offset: int) -> Quarantined:
    """Quarantine bytes that are not UTF-8, naming a legacy CJK encoding
    (GB18030 covers GBK and GB2312) when the bytes read as CJK text in it."""
    try:
        legacy = raw.decode("gb18030")
    except UnicodeDecodeError:
        legacy = None
    if legacy is not None and _CJK.search(legacy) and not _CONTROL.search(legacy):
        return Quarantined(file, line, offset, "read.legacy_encoding",
                           f"not UTF-8 ({exc.reason} at byte {exc.start}); decodes as GB18030")
    return Quarantined(file, line, offset, "read.invalid_utf8", f"{exc.reason} at byte {exc.start}")


def read_jsonl(path: str | Path, file: str, text_field: str, max_bytes: int, id_field: str | None = None,
               storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Records of a JSONL file (plain, ``.gz`` or ``.zst``); see module doc."""
    with _open_binary(path, storage_options) as stream:
        for lineno, offset, raw in _lines(stream, max_bytes):
            if raw is None:
                yield Quarantined(file, lineno, offset, "read.record_too_large", f"> {max_bytes} bytes")
                continue
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue  # blank line: not a record
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield _undecodable(raw, exc, file, lineno, offset)
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Quarantined(file, lineno, offset, "read.invalid_json", str(exc)[:120])
                continue
            if not isinstance(obj, dict):
                yield Quarantined(file, lineno, offset, "read.not_object", type(obj).__name__)
                continue
            text, bad = _check_text(obj.pop(text_field, None), file, lineno, offset)
            if bad:
                yield bad
                continue
            doc_id = None
            if id_field is not None:
                doc_id = obj.get(id_field)
                if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
                    yield Quarantined(file, lineno, offset, "read.missing_id", f"{id_field}={doc_id!r:.40}")
                    continue
                doc_id = str(doc_id)
            yield Record(lineno, text, json.dumps(obj, ensure_ascii=False, sort_keys=True), doc_id)


def read_text(path: str | Path, file: str, unit: str, max_bytes: int,
              storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Plain text: the whole file as one document (line 1), or one per line."""
    if unit == "line":
        with _open_binary(path, storage_options) as stream:
            for lineno, offset, raw in _lines(stream, max_bytes):
                if raw is None:
                    yield Quarantined(file, lineno, offset, "read.record_too_large", f"> {max_bytes} bytes")
                    continue
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield _undecodable(raw, exc, file, lineno, offset)
                    continue
                if line.strip():
                    text, bad = _check_text(line, file, lineno, offset)
                    yield bad or Record(lineno, text, "{}")
        return
    with _open_binary(path, storage_options) as stream:
        data = stream.read(max_bytes + 1)
        if getattr(stream, "truncated", False):
            raise TruncatedInput("zstd stream ends inside a frame")
    if len(data) > max_bytes:
        yield Quarantined(file, 1, 0, "read.record_too_large", f"> {max_bytes} bytes")
        return
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield _undecodable(data, exc, file, 1, 0)
        return
    text, bad = _check_text(text, file, 1, 0)
    yield bad or Record(1, text, "{}")


def read_parquet(path: str | Path, file: str, text_field: str, id_field: str | None = None,
                 storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Rows of a Parquet file; other columns go to ``meta`` as JSON."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(open_input(path, storage_options))
    if text_field not in pf.schema_arrow.names:
        raise ValueError(f"{file}: no column {text_field!r} (columns: {', '.join(pf.schema_arrow.names)})")
    row = 0
    for batch in pf.iter_batches(batch_size=4096):
        cols = batch.to_pydict()
        texts = cols.pop(text_field)
        for i, text in enumerate(texts):
            row += 1
            text, bad = _check_text(text, file, row, 0)
            if bad:
                yield bad
                continue
            meta = {k: v[i] for k, v in cols.items()}
            if isinstance(meta.get("meta"), str):
                try:
                    meta.update(json.loads(meta.pop("meta")))
                except json.JSONDecodeError:
                    pass
            doc_id = None
            if id_field is not None:
                doc_id = meta.get(id_field)
                if doc_id is None or doc_id == "":
                    yield Quarantined(file, row, 0, "read.missing_id", f"{id_field}={doc_id!r:.40}")
                    continue
                doc_id = str(doc_id)
            yield Record(row, text, json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str), doc_id)


def _encodable(value: str | None) -> bool:
    if value is None:
        return True
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _check_fields(item: Record | Quarantined, file: str) -> Record | Quarantined:
    """A record whose other fields or id hold a lone surrogate (a JSON
    ``\ud83d`` escape) cannot be stored as UTF-8: quarantined as
    ``read.lone_surrogate`` like one in the text, instead of failing its file."""
    if isinstance(item, Record) and not (_encodable(item.meta) and _encodable(item.doc_id)):
        where = "the id" if not _encodable(item.doc_id) else "a field other than the text"
        return Quarantined(file, item.line, -1, "read.lone_surrogate", f"{where} holds a lone surrogate")
    return item


def read_file(path: str | Path, file: str, fmt: str, text_field: str, text_unit: str,
              max_bytes: int, id_field: str | None = None,
              storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """All records of one input file, quarantining what cannot be read.

    A file that cannot be opened, or that ends early (truncated ``.gz`` or
    ``.zst``), yields the records read so far and then one
    ``read.unreadable_file`` or ``read.truncated_file`` entry; a file with no
    record at all yields one ``read.empty_file`` entry (line 0).
    """
    fmt = detect_format(path) if fmt == "auto" else fmt
    last_line = 0
    seen = 0
    try:
        if fmt == "jsonl":
            it = read_jsonl(path, file, text_field, max_bytes, id_field, storage_options)
        elif fmt == "parquet":
            it = read_parquet(path, file, text_field, id_field, storage_options)
        else:
            it = read_text(path, file, text_unit, max_bytes, storage_options)
        for item in it:
            last_line = item.line
            seen += 1
            yield _check_fields(item, file)
    except (EOFError, TruncatedInput, zstandard.ZstdError, gzip.BadGzipFile) as exc:
        yield Quarantined(file, last_line + 1, -1, "read.truncated_file", f"{type(exc).__name__}: {exc}"[:160])
        return
    except (OSError, ValueError) as exc:  # includes pyarrow.ArrowInvalid (a ValueError)
        yield Quarantined(file, last_line + 1, -1, "read.unreadable_file", f"{type(exc).__name__}: {exc}"[:160])
        return
    if seen == 0:
        yield Quarantined(file, 0, 0, "read.empty_file", "no record in the file")
