"""Input readers: JSONL (plain, ``.gz``, ``.zst``), Parquet and plain text.

Every record becomes a document with a stable id ``"<source>:<file>:<line>"``
(``file`` as resolved from the config, relative to the repo root when inside
it; ``line`` the 1-based line of the record in the decompressed JSONL or text
file, or the 1-based row of a Parquet file). The id survives every stage and
is the key for dedup, lineage and reports.

A record that cannot be read is never dropped silently: it becomes a
:class:`Quarantined` entry with file, line, byte offset and a reason code
(``read.invalid_utf8``, ``read.legacy_encoding``, ``read.invalid_json``,
``read.too_deeply_nested``, ``read.not_object``, ``read.missing_text``,
``read.text_not_string``, ``read.empty_text``, ``read.lone_surrogate``,
``read.missing_id``, ``read.duplicate_id``, ``read.record_too_large``,
``read.record_error``; web pages add those of :mod:`pipeline.html`), and is
counted in the manifest. A file that cannot be
read whole gets one file-level entry (:data:`FILE_REASONS`) after the records
read before the failure; no error of one record or one file stops a build.

NUL characters (``\\u0000`` escapes in JSON, NUL bytes in text) are a property
of the text, not unreadable input: they are removed and counted
(:attr:`Record.nul_chars`).

Compression is taken from the name (``.gz``, ``.zst``; zstd windows up to
2^31 bytes, as ``zstd --long=31`` writes) and, for objects, from their
``Content-Encoding``, and checked against the first bytes: a name that does
not match the bytes is ``read.wrong_compression``, not a truncated file.

Inputs may be local paths or fsspec URLs (``s3://bucket/dir/*.jsonl.zst``;
Huawei OBS and MinIO speak S3), with per-source ``storage_options``. Both are
matched by one glob matcher (:func:`resolve_paths`), which skips hidden files
and partial-upload or temporary names (:func:`skipped_input`) on both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import zstandard

READ_CHUNK = 1 << 20
# zstd's largest window on 64-bit machines (ZSTD_WINDOWLOG_MAX_64 = 31): what
# ``zstd --long=31`` writes. Memory is allocated as the window fills.
ZSTD_MAX_WINDOW = 1 << 31
# Deeper JSON is quarantined (``read.too_deeply_nested``) before it is parsed:
# a fixed limit, well below Python's recursion limit (1,000) whatever the
# caller's stack, so the same record is read the same way in every process.
MAX_JSON_DEPTH = 512
# Quarantine reasons of a whole file (one entry, ``byte_offset`` -1, or line 0
# for an empty file); every other reason is one record's.
FILE_REASONS = frozenset({
    "read.unreadable_file", "read.truncated_file", "read.corrupt_file", "read.wrong_compression",
    "read.unsupported_encoding", "read.file_error", "read.empty_file"})
# File-level failures that may not recur (permissions, network, a reader
# bug): not cached, so a re-run reads the file again.
RETRY_REASONS = frozenset({"read.unreadable_file", "read.file_error"})
_CJK = re.compile("[\u4e00-\u9fff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")


@dataclasses.dataclass
class Record:
    """One document as read: ``line`` is 1-based (row for Parquet);
    ``nul_chars`` NUL characters were removed from its text."""

    line: int
    text: str
    meta: str
    doc_id: str | None = None  # the record's own id (``id_field``), if configured
    nul_chars: int = 0


@dataclasses.dataclass
class Quarantined:
    """One input record (or, with a reason in :data:`FILE_REASONS`, the rest
    of a file) that could not become a document."""

    file: str
    line: int
    byte_offset: int
    reason: str
    detail: str


class ListingError(OSError):
    """An input directory or object prefix could not be listed: the inputs of
    a source are unknown, so the build stops before any work."""


def is_url(path: str | Path) -> bool:
    """True for an fsspec URL such as ``s3://bucket/key`` (not a local path)."""
    return "://" in str(path)


# Names that are not (yet) data: partial downloads and uploads, editors' and
# tools' temporary files (Hadoop ``._COPYING_``, gsutil ``.gstmp``, rsync and
# aws-cli write dot-files, which are skipped anyway).
PARTIAL_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".crdownload", ".download", ".incomplete",
                    ".filepart", "._copying_", ".gstmp", ".swp", "~")
# Directories and markers of Hadoop/Spark output committers.
SKIPPED_NAMES = frozenset({"_temporary", "_SUCCESS", "_FAILURE"})


def _skipped_component(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED_NAMES or name.startswith(("_started_", "_committed_"))


def skipped_input(relative: str) -> bool:
    """True when a path matched by a wildcard is not input data: a hidden
    name (a component starting with ``.``), a committer's ``_temporary``
    directory or ``_SUCCESS`` marker, or a partial or temporary file
    (:data:`PARTIAL_SUFFIXES`, case-insensitive). ``relative`` is the part of
    the path below the pattern's literal directory, ``/``-separated. The same
    rule holds for local files and objects."""
    parts = relative.split("/")
    return any(_skipped_component(p) for p in parts) or parts[-1].lower().endswith(PARTIAL_SUFFIXES)


def _has_magic(part: str) -> bool:
    return any(ch in part for ch in "*?[")


def _glob_match(pattern: list[str], parts: list[str]) -> bool:
    """Component-wise glob: ``*``, ``?``, ``[...]`` within one component
    (``fnmatch``, case-sensitive), ``**`` for zero or more components."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(pattern[1:], parts[1:])


def _local_files(root: str, maxdepth: int | None) -> Iterator[str]:
    """``/``-separated paths, relative to ``root``, of the files under it, at
    most ``maxdepth`` components deep (symlinks followed, each directory once).

    Raises:
        ListingError: a directory below ``root`` cannot be listed.
    """
    seen: set[tuple[int, int]] = set()
    stack = [(root, "", 0)]
    while stack:
        path, rel, depth = stack.pop()
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
        except OSError as exc:
            raise ListingError(f"cannot list input directory {path}: {exc.strerror or exc}") from exc
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_dir:
                if maxdepth is None or depth + 1 < maxdepth:  # hidden ones too: as a listing of objects
                    stack.append((entry.path, sub, depth + 1))
            elif is_file:
                yield sub


def resolve_paths(patterns: list[str], base: str | Path, storage_options: dict | None = None,
                  skipped: list[str] | None = None) -> list[str]:
    """Expand files and globs (``*``, ``?``, ``[...]``, ``**``) relative to
    ``base`` (a local directory or an fsspec URL); sorted, unique.

    One matcher for disk and object storage: the files below a pattern's
    literal directory are listed (``os.scandir`` / ``fs.find``), matched
    component by component (:func:`_glob_match`: ``*`` matches any name,
    also one starting with ``.``), and those :func:`skipped_input` rejects
    (hidden, partial-upload and temporary names) are left out and appended to
    ``skipped``. A pattern without wildcards names its file, whatever its name.

    Local matches are returned as absolute paths (symlinks resolved), remote
    ones as URLs (``s3://bucket/key``).

    Raises:
        FileNotFoundError: a pattern matches no file (named in the message,
            with the number of files skipped).
        ListingError: a directory under a pattern cannot be listed.
    """
    out: set[str] = set()
    for pattern in patterns:
        if is_url(base) and not is_url(pattern):
            pattern = str(base).rstrip("/") + "/" + pattern.lstrip("/")
        remote = is_url(pattern)
        if remote:
            import fsspec

            protocol, full = pattern.split("://", 1)
            fs, _, _ = fsspec.get_fs_token_paths(pattern, storage_options=storage_options or {})
        else:
            full = pattern if Path(pattern).is_absolute() else str(Path(base) / pattern)
        parts = full.split("/")
        first = next((i for i, p in enumerate(parts) if _has_magic(p)), None)
        matches: list[str] = []
        left_out: list[str] = []
        if first is None:  # a literal name: that file, hidden or not
            if remote and fs.isfile(full):
                matches = [f"{protocol}://{full}"]
            elif not remote and Path(full).is_file():
                matches = [str(Path(full).resolve())]
        else:
            prefix, rest = "/".join(parts[:first]), parts[first:]
            maxdepth = None if "**" in rest else len(rest)
            if remote:
                try:
                    listed = fs.find(prefix, maxdepth=maxdepth, withdirs=False) if prefix else []
                except OSError as exc:
                    raise ListingError(f"cannot list {protocol}://{prefix}: {exc}") from exc
                rels = [p[len(prefix.rstrip("/")) + 1:] for p in listed]
            else:
                top = prefix or ("/" if full.startswith("/") else ".")
                rels = list(_local_files(top, maxdepth)) if os.path.isdir(top) else []
            for rel in sorted(rels):
                if not _glob_match(rest, rel.split("/")):
                    continue
                name = f"{prefix}/{rel}" if prefix else ("/" + rel if full.startswith("/") else rel)
                if skipped_input(rel):
                    left_out.append(f"{protocol}://{name}" if remote else name)
                else:
                    matches.append(f"{protocol}://{name}" if remote else str(Path(name).resolve()))
        if skipped is not None:
            skipped.extend(left_out)
        if not matches:
            why = f"; {len(left_out)} hidden or partial file(s) skipped" if left_out else ""
            raise FileNotFoundError(f"input pattern {pattern!r} matches no file (looked in {base}{why})")
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
    """(bytes, hex sha256) of an input file (local or fsspec), read in 1 MiB
    chunks (:func:`common.io.sha256_stream`)."""
    from common.io import sha256_stream

    with open_input(path, storage_options) as fh:
        return sha256_stream(fh)


def detect_format(path: Path) -> str:
    """``jsonl``, ``parquet``, ``warc`` (``.warc``, ``.arc``), ``html``
    (``.html``, ``.htm``, ``.xhtml``) or ``text`` from the file name."""
    name = Path(str(path)).name.lower()
    for comp in (".gz", ".zst"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".warc", ".arc")):
        return "warc"
    if name.endswith((".html", ".htm", ".xhtml")):
        return "html"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "text"


class TruncatedInput(Exception):
    """A compressed input ended before its end-of-stream marker."""


class WrongCompression(Exception):
    """A file's name or ``Content-Encoding`` does not match its bytes (a plain
    file named ``.gz``, gzip bytes named ``.jsonl``, ...)."""


class UnsupportedEncoding(Exception):
    """An object's ``Content-Encoding`` is not one this reader decodes."""


def _kind(head: bytes) -> str | None:
    """``gzip``, ``zstd`` (also a leading skippable frame, as pzstd writes)
    or None from a file's first 4 bytes."""
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head[:4] == _ZSTD_MAGIC or (len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50):
        return "zstd"
    return None


def _describe(head: bytes) -> str:
    kind = _kind(head)
    return f"{kind} data" if kind else f"not compressed (starts {head!r})"


def content_encoding(path: str | Path, storage_options: dict | None = None) -> str | None:
    """The ``Content-Encoding`` of an object (lower case; None when unset and
    for local files). s3fs's ``info`` leaves it out: S3-compatible stores are
    asked with one ``HeadObject``."""
    if not is_url(path):
        return None
    import fsspec

    fs, _, (key,) = fsspec.get_fs_token_paths(str(path), storage_options=storage_options or {})
    info = fs.info(key)
    enc = info.get("ContentEncoding") or info.get("content_encoding") or info.get("Content-Encoding")
    if enc is None and hasattr(fs, "call_s3") and hasattr(fs, "split_path"):
        bucket, name, version = fs.split_path(key)
        head = fs.call_s3("head_object", Bucket=bucket, Key=name, **({"VersionId": version} if version else {}))
        enc = head.get("ContentEncoding")
    return enc.strip().lower() if enc else None


def _peek(stream) -> tuple[bytes, io.BufferedIOBase]:
    buf = stream if hasattr(stream, "peek") else io.BufferedReader(stream, READ_CHUNK)
    return buf.peek(4)[:4], buf


def _decoder(kind: str, stream, stack: contextlib.ExitStack):
    if kind == "gzip":
        return stack.enter_context(gzip.GzipFile(fileobj=stream, mode="rb"))
    return stack.enter_context(io.BufferedReader(_ZstdStrict(stream), READ_CHUNK))


@contextlib.contextmanager
def _open_binary(path: str | Path, storage_options: dict | None = None) -> Iterator[io.BufferedIOBase]:
    """The decompressed bytes of an input, as a buffered stream.

    Layers: the object's ``Content-Encoding`` (``gzip``/``x-gzip``,
    ``zstd``), then the name's ``.gz``/``.zst``; each checked against the
    magic bytes. A ``.gz`` object stored with ``Content-Encoding: gzip``
    (the common upload practice) is decoded once.

    Raises:
        WrongCompression: a name or encoding that the bytes contradict.
        UnsupportedEncoding: another ``Content-Encoding`` (``br``, ``deflate``...).
    """
    name = str(path).lower()
    suffix = "gzip" if name.endswith(".gz") else "zstd" if name.endswith(".zst") else None
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open_input(path, storage_options))
        encoding = content_encoding(path, storage_options)
        codecs = [c.strip() for c in (encoding or "").split(",") if c.strip() not in ("", "identity")]
        by_encoding = None
        if codecs:
            if len(codecs) > 1 or codecs[0] not in ("gzip", "x-gzip", "zstd"):
                raise UnsupportedEncoding(f"Content-Encoding {encoding!r} (gzip and zstd are decoded)")
            by_encoding = "zstd" if codecs[0] == "zstd" else "gzip"
            head, stream = _peek(stream)
            if head and _kind(head) != by_encoding:
                raise WrongCompression(f"Content-Encoding {encoding} but the bytes are {_describe(head)}")
            stream = _decoder(by_encoding, stream, stack)
        head, stream = _peek(stream)
        kind = _kind(head)
        if not head:
            pass  # empty: nothing to decode
        elif suffix and kind == suffix:
            stream = _decoder(suffix, stream, stack)
        elif suffix and by_encoding == suffix:
            pass  # the Content-Encoding was the file's own compression
        elif suffix:
            raise WrongCompression(f"named {'.gz' if suffix == 'gzip' else '.zst'} but {_describe(head)}")
        elif kind:
            raise WrongCompression(f"the bytes are {kind} data but the name has no .gz or .zst")
        yield stream


class _ZstdStrict(io.RawIOBase):
    """Multi-frame zstd reader (windows up to :data:`ZSTD_MAX_WINDOW`) that
    raises :class:`TruncatedInput` when the stream ends inside a frame
    (``stream_reader`` returns partial data silently, see
    shared/notes/dependencies.md). The raise comes when the caller asks past
    the last complete byte, so every complete line before it is read."""

    def __init__(self, raw):
        self._fh = raw
        self._dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._obj = self._dctx.decompressobj()
        self._pending = b""
        self._eof = False
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._pending and not self._eof:
            chunk = self._fh.read(READ_CHUNK)
            if not chunk:
                self._eof = True
                if self._started and not self._obj.eof:
                    raise TruncatedInput("zstd stream ends inside a frame")
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


def _lines(stream, max_bytes: int) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield (line number, byte offset, raw line without ``\\n``/``\\r\\n``).

    Only ``\\n`` separates records (Unicode line and paragraph separators inside
    strings do not). A line longer than ``max_bytes`` is skipped in bounded
    memory and yielded as ``None``.
    """
    offset = 0
    lineno = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        lineno += 1
        start = offset
        offset += len(raw)
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            # Too long: consume the rest of the line without keeping it.
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(READ_CHUNK)
                offset += len(raw)
            yield lineno, start, None
            continue
        yield lineno, start, raw.rstrip(b"\n").rstrip(b"\r")


def _check_text(text, file: str, line: int, offset: int) -> tuple[str | None, int, Quarantined | None]:
    """(text without NUL characters, NUL characters removed, None) or
    (None, 0, the reason the record is quarantined)."""
    if text is None:
        return None, 0, Quarantined(file, line, offset, "read.missing_text", "no text field")
    if not isinstance(text, str):
        return None, 0, Quarantined(file, line, offset, "read.text_not_string", type(text).__name__)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None, 0, Quarantined(file, line, offset, "read.lone_surrogate", "text holds a lone surrogate")
    nul = text.count("\x00")
    if nul:
        text = text.replace("\x00", "")
    if not text.strip():
        return None, 0, Quarantined(file, line, offset, "read.empty_text",
                                    repr(text[:20]) + (f" after removing {nul} NUL" if nul else ""))
    return text, nul, None


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


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``raw`` nests arrays/objects deeper than
    ``limit`` levels (brackets inside strings do not count). Linear; only
    lines with more than ``limit`` opening brackets are scanned."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for ch in _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", raw)):
        if ch in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _jsonl_record(raw: bytes, lineno: int, offset: int, file: str, text_field: str,
                  id_field: str | None) -> Record | Quarantined | None:
    """One JSONL line (without its newline) as a record, a quarantine entry,
    or None for a blank line."""
    if not raw.strip():
        return None  # blank line: not a record
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _undecodable(raw, exc, file, lineno, offset)
    if json_depth_exceeds(raw):
        return Quarantined(file, lineno, offset, "read.too_deeply_nested",
                           f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return Quarantined(file, lineno, offset, "read.invalid_json", str(exc)[:120])
    if not isinstance(obj, dict):
        return Quarantined(file, lineno, offset, "read.not_object", type(obj).__name__)
    text, nul, bad = _check_text(obj.pop(text_field, None), file, lineno, offset)
    if bad:
        return bad
    doc_id = None
    if id_field is not None:
        doc_id = obj.get(id_field)
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
            return Quarantined(file, lineno, offset, "read.missing_id", f"{id_field}={doc_id!r:.40}")
        doc_id = str(doc_id)
    return Record(lineno, text, json.dumps(obj, ensure_ascii=False, sort_keys=True), doc_id, nul)


def _record_error(exc: Exception, file: str, line: int, offset: int) -> Quarantined:
    """An unexpected error on one record: that record is quarantined."""
    if isinstance(exc, RecursionError):
        return Quarantined(file, line, offset, "read.too_deeply_nested", f"RecursionError: {exc}"[:160])
    return Quarantined(file, line, offset, "read.record_error", f"{type(exc).__name__}: {exc}"[:160])


def read_jsonl(path: str | Path, file: str, text_field: str, max_bytes: int, id_field: str | None = None,
               storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Records of a JSONL file (plain, ``.gz`` or ``.zst``); see module doc.
    An unexpected error on one line quarantines that line
    (``read.record_error``, or ``read.too_deeply_nested`` for a
    ``RecursionError``) and reading goes on."""
    with _open_binary(path, storage_options) as stream:
        for lineno, offset, raw in _lines(stream, max_bytes):
            if raw is None:
                yield Quarantined(file, lineno, offset, "read.record_too_large", f"> {max_bytes} bytes")
                continue
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                item = _jsonl_record(raw, lineno, offset, file, text_field, id_field)
            except Exception as exc:  # noqa: BLE001 - one record never stops a file
                item = _record_error(exc, file, lineno, offset)
            if item is not None:
                yield item


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
                    text, nul, bad = _check_text(line, file, lineno, offset)
                    yield bad or Record(lineno, text, "{}", None, nul)
        return
    with _open_binary(path, storage_options) as stream:
        data = stream.read(max_bytes + 1)
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
    text, nul, bad = _check_text(text, file, 1, 0)
    yield bad or Record(1, text, "{}", None, nul)


def parquet_column_problem(path: str | Path, text_field: str, id_field: str | None = None,
                           storage_options: dict | None = None) -> str | None:
    """Why a Parquet file's schema cannot give ``text_field`` (and
    ``id_field``), or None when it can. Reads the footer only.

    ``text_field`` must be a column of a string or binary type (binary text
    is decoded as UTF-8 row by row); ``id_field`` a column, or possibly a key
    of a JSON ``meta`` column. The message names the columns that exist.

    Raises:
        OSError, ValueError: the footer cannot be read (the file is
            quarantined when it is ingested).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_input(path, storage_options) as fh:
        schema = pq.ParquetFile(fh).schema_arrow
    names = schema.names
    columns = ", ".join(f"{n} ({schema.field(n).type})" for n in names)
    if text_field not in names:
        return f"text_field {text_field!r} is not a column (columns: {columns})"
    typ = schema.field(text_field).type
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ)
            or pa.types.is_large_binary(typ) or getattr(pa.types, "is_string_view", lambda t: False)(typ)
            or getattr(pa.types, "is_binary_view", lambda t: False)(typ)):
        return f"text_field {text_field!r} is a {typ} column, not text (columns: {columns})"
    if id_field is not None and id_field not in names and "meta" not in names:
        return f"id_field {id_field!r} is not a column (columns: {columns})"
    return None


def _parquet_meta(meta: dict) -> dict:
    """Columns other than the text as meta; a ``meta`` column holding a JSON
    object is merged in (its keys win), any other value stays as ``meta``."""
    value = meta.get("meta")
    if isinstance(value, (str, bytes)):
        try:
            parsed = json.loads(value)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            meta.pop("meta")
            meta.update(parsed)
    return meta


def _json_default(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def read_parquet(path: str | Path, file: str, text_field: str, id_field: str | None = None,
                 storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Rows of a Parquet file; other columns go to ``meta`` as JSON
    (:func:`_parquet_meta`). A binary text column (BYTE_ARRAY without a UTF8
    annotation) is decoded as strict UTF-8: rows that are not UTF-8 are
    quarantined (``read.invalid_utf8``/``read.legacy_encoding``). An
    unexpected error on one row quarantines that row (``read.record_error``).

    Raises:
        ValueError: ``text_field`` is not a column (the build checks this
            before any work, :func:`parquet_column_problem`).
    """
    import pyarrow.parquet as pq

    with open_input(path, storage_options) as fh:
        pf = pq.ParquetFile(fh)
        if text_field not in pf.schema_arrow.names:
            raise ValueError(f"{file}: no column {text_field!r} (columns: {', '.join(pf.schema_arrow.names)})")
        row = 0
        for batch in pf.iter_batches(batch_size=4096):
            cols = batch.to_pydict()
            texts = cols.pop(text_field)
            for i, text in enumerate(texts):
                row += 1
                try:
                    item = _parquet_row(text, {k: v[i] for k, v in cols.items()}, file, row, id_field)
                except Exception as exc:  # noqa: BLE001 - one row never stops a file
                    item = _record_error(exc, file, row, 0)
                yield item


def _parquet_row(text, meta: dict, file: str, row: int, id_field: str | None) -> Record | Quarantined:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _undecodable(text, exc, file, row, 0)
    text, nul, bad = _check_text(text, file, row, 0)
    if bad:
        return bad
    meta = _parquet_meta(meta)
    doc_id = None
    if id_field is not None:
        doc_id = meta.get(id_field)
        if doc_id is None or doc_id == "":
            return Quarantined(file, row, 0, "read.missing_id", f"{id_field}={doc_id!r:.40}")
        doc_id = str(doc_id)
    return Record(row, text, json.dumps(meta, ensure_ascii=False, sort_keys=True, default=_json_default),
                  doc_id, nul)


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


def file_failure(exc: BaseException) -> str:
    """The file-level reason (:data:`FILE_REASONS`) for an error that ended
    the reading of a file."""
    if isinstance(exc, (EOFError, TruncatedInput)):
        return "read.truncated_file"
    if isinstance(exc, WrongCompression):
        return "read.wrong_compression"
    if isinstance(exc, UnsupportedEncoding):
        return "read.unsupported_encoding"
    if isinstance(exc, (zstandard.ZstdError, gzip.BadGzipFile, zlib.error)):
        return "read.corrupt_file"
    if isinstance(exc, (OSError, ValueError)):  # includes pyarrow.ArrowInvalid (a ValueError)
        return "read.unreadable_file"
    return "read.file_error"


def read_file(path: str | Path, file: str, fmt: str, text_field: str, text_unit: str,
              max_bytes: int, id_field: str | None = None,
              storage_options: dict | None = None, extractor: str | None = None) -> Iterator[Record | Quarantined]:
    """All records of one input file, quarantining what cannot be read.

    ``html`` and ``warc`` inputs are web pages: their records are the pages'
    main text by ``extractor`` (``pipeline.html``, its own reasons there).

    A file that cannot be read whole yields the records read so far and then
    one file-level entry (``byte_offset`` -1, ``line`` one past the last
    record): ``read.unreadable_file`` (cannot be opened or read: permissions,
    I/O, not Parquet), ``read.truncated_file`` (a ``.gz``/``.zst`` that ends
    early), ``read.corrupt_file`` (compressed data that does not decode),
    ``read.wrong_compression``, ``read.unsupported_encoding`` or
    ``read.file_error`` (any other error, named in ``detail``); a file with
    no record at all yields one ``read.empty_file`` entry (line 0). Nothing
    is raised for a bad file.
    """
    fmt = detect_format(path) if fmt == "auto" else fmt
    last_line = 0
    seen = 0
    try:
        if fmt == "jsonl":
            it = read_jsonl(path, file, text_field, max_bytes, id_field, storage_options)
        elif fmt == "parquet":
            it = read_parquet(path, file, text_field, id_field, storage_options)
        elif fmt in ("html", "warc"):
            from pipeline import html

            extractor = extractor or html.DEFAULT_EXTRACTOR
            it = (html.read_warc(path, file, max_bytes, extractor, storage_options) if fmt == "warc"
                  else html.read_html(path, file, text_field, max_bytes, extractor, storage_options, id_field))
        else:
            it = read_text(path, file, text_unit, max_bytes, storage_options)
        for item in it:
            last_line = item.line
            seen += 1
            yield _check_fields(item, file)
    except Exception as exc:  # noqa: BLE001 - one file never stops a build
        yield Quarantined(file, last_line + 1, -1, file_failure(exc), f"{type(exc).__name__}: {exc}"[:200])
        return
    if seen == 0:
        yield Quarantined(file, 0, 0, "read.empty_file", "no record in the file")
