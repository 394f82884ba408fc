"""Files written whole or not at all, and file digests: one implementation
for the stages and the pipeline.

A file that exists is complete, which is what a resumed build relies on: a
writer writes a temporary file in the target's directory (:func:`temp_path`:
``.<name>.<pid>.tmp``, hidden, and per process so that two workers writing
the same output never share one) and renames it into place with
``os.replace`` (atomic within a file system, :func:`commit`). When writing
fails (a full disk, a value that does not serialise), the temporary file is
removed and a file already at the path stays as it was; an ``OSError`` that
names no file names the temporary one (:func:`common.errors.naming_path`).
``fsync`` only where asked: the manifest and its digest, the files that say
a version is complete, are flushed to disk before the rename; every other
file is rebuilt by a re-run if a crash loses it.

Serialisation is the caller's choice and is kept byte for byte: a JSON file
names its ``indent``, ``sort_keys``, ``ensure_ascii`` and final newline
(:func:`json_text`; the defaults are the form of the manifest and of the
build's state files), a Parquet file its write options.

Standard library only (pyarrow is imported by :func:`write_table_atomic`
when it runs), so the loader and the lineage lookup can use it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from common.errors import naming_path

# Read size of the digests: 1 MiB, the block every digest of the project used
# before this module (bounded memory whatever the file's size).
DIGEST_CHUNK = 1 << 20


def temp_path(path: str | os.PathLike) -> Path:
    """The temporary name ``path`` is written under before :func:`commit`:
    ``.<name>.<pid>.tmp`` in the same directory (same file system, so the
    rename is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def commit(tmp: str | os.PathLike, path: str | os.PathLike, fsync: bool = False) -> None:
    """Rename the finished temporary file ``tmp`` to ``path`` (``os.replace``:
    atomic, replaces an existing file). With ``fsync``, the file's data
    reaches the disk first.

    Raises:
        OSError: from ``fsync`` or the rename (``tmp`` is missing, ``path``
            is a directory, another file system).
    """
    if fsync:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, fsync: bool = False, make_parents: bool = True,
                name_errors: bool = True) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; renamed into place
    when the block ends without an exception, removed when it raises.

    Args:
        path: the file to write.
        fsync: flush the file to disk before the rename (:func:`commit`).
        make_parents: create ``path``'s directory first.
        name_errors: an ``OSError`` of the block that names no file is
            re-raised naming the temporary file. False for a block that also
            reads other files (an ingest streaming its input), whose errors
            must not be blamed on the file being written.

    Yields:
        The temporary path (:func:`temp_path`); the block writes it.

    Raises:
        Whatever the block raises (the temporary file removed, ``path``
        untouched).
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with naming_path(tmp) if name_errors else contextlib.nullcontext():
            yield tmp
        commit(tmp, path, fsync)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(data: bytes, path: str | os.PathLike, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path, fsync) as tmp:
        tmp.write_bytes(data)


def json_text(obj: Any, indent: int | None = 2, sort_keys: bool = True, ensure_ascii: bool = False,
              final_newline: bool = True) -> str:
    """``json.dumps(obj, indent=..., sort_keys=..., ensure_ascii=...)``, plus
    ``"\\n"`` with ``final_newline``. The defaults are the manifest's form
    (2-space indent, sorted keys, UTF-8 text, final newline).

    Raises:
        TypeError: a value JSON cannot hold (a set, bytes, an object).
        ValueError: a circular reference.
    """
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return text + "\n" if final_newline else text


def write_json_atomic(obj: Any, path: str | os.PathLike, indent: int | None = 2, sort_keys: bool = True,
                      ensure_ascii: bool = False, final_newline: bool = True, fsync: bool = False) -> None:
    """Write ``obj`` as JSON (:func:`json_text` with these arguments, UTF-8)
    to ``path`` atomically. ``obj`` is serialised before any file is
    opened: a value that does not serialise raises ``TypeError`` and
    leaves no file behind."""
    write_bytes_atomic(json_text(obj, indent, sort_keys, ensure_ascii, final_newline).encode("utf-8"), path, fsync)


def write_table_atomic(table, path: str | os.PathLike, **write_options: Any) -> None:
    """Write the Arrow ``table`` as Parquet to ``path`` atomically;
    ``write_options`` go to ``pyarrow.parquet.write_table`` unchanged
    (compression, row group size, dictionaries: each writer keeps its own)."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **write_options)


def sha256_stream(fh: BinaryIO, chunk: int = DIGEST_CHUNK) -> tuple[int, str]:
    """(bytes read, hex SHA-256) of what is left in a binary file object,
    read in ``chunk``-byte blocks (a local file, an fsspec object)."""
    digest = hashlib.sha256()
    size = 0
    while block := fh.read(chunk):
        digest.update(block)
        size += len(block)
    return size, digest.hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = DIGEST_CHUNK) -> str:
    """Hex SHA-256 of a local file's bytes, read in 1 MiB blocks.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError``, ...).
    """
    with open(path, "rb") as fh:
        return sha256_stream(fh, chunk)[1]
