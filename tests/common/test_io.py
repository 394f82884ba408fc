"""Tests for common/io.py: atomic writes (no temporary file left, an existing
file intact when writing fails) and file digests."""

import errno
import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.io import (atomic_path, json_text, sha256_file, sha256_stream, temp_path, write_bytes_atomic,
                       write_json_atomic, write_table_atomic)


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_temp_path_is_hidden_per_process_and_in_the_same_directory(tmp_path):
    assert temp_path(tmp_path / "a" / "x.json") == tmp_path / "a" / f".x.json.{os.getpid()}.tmp"


def test_json_serialisations_are_byte_exact(tmp_path):
    obj = {"b": [1, 2], "a": "é"}
    # the default: the manifest's form
    assert json_text(obj) == '{\n  "a": "é",\n  "b": [\n    1,\n    2\n  ]\n}\n'
    assert json_text(obj) == json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    # compact, ASCII, no newline (assembly markers); insertion order (heartbeat)
    assert json_text(obj, indent=None, ensure_ascii=True, final_newline=False) == '{"a": "\\u00e9", "b": [1, 2]}'
    assert json_text(obj, indent=None, sort_keys=False, ensure_ascii=True,
                     final_newline=False) == '{"b": [1, 2], "a": "\\u00e9"}'
    write_json_atomic(obj, tmp_path / "sub" / "x.json", indent=1)
    assert (tmp_path / "sub" / "x.json").read_bytes() == '{\n "a": "é",\n "b": [\n  1,\n  2\n ]\n}\n'.encode()
    assert _names(tmp_path / "sub") == ["x.json"]


def test_a_value_that_does_not_serialise_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    write_json_atomic({"done": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_json_atomic({"done": {1, 2}}, path)        # a set is not JSON
    assert path.read_bytes() == before == b'{\n  "done": 1\n}\n'
    assert _names(tmp_path) == ["state.json"]


def test_a_failing_block_removes_the_temporary_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "part.parquet"
    write_table_atomic(pa.table({"x": [1, 2, 3]}), path, compression="zstd")
    with pytest.raises(RuntimeError, match="half written"):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"PAR1 and then")
            raise RuntimeError("half written")
    assert pq.read_table(path)["x"].to_pylist() == [1, 2, 3]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert _names(tmp_path) == ["part.parquet"]


def test_an_os_error_without_a_file_name_names_the_temporary(tmp_path):
    path = tmp_path / "x.bin"
    with pytest.raises(OSError) as info:
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(temp_path(path))
    assert _names(tmp_path) == []


def test_write_bytes_replaces_and_fsyncs(tmp_path):
    path = tmp_path / "manifest.sha256"
    write_bytes_atomic(b"old\n", path)
    write_bytes_atomic(b"new\n", path, fsync=True)
    assert path.read_bytes() == b"new\n"
    assert _names(tmp_path) == ["manifest.sha256"]


def test_sha256_of_a_known_content_equals_hashlib(tmp_path):
    path = tmp_path / "data.bin"
    data = bytes(range(256)) * 5000                       # 1.28 MB: more than one 1 MiB block
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    (tmp_path / "abc").write_bytes(b"abc")
    assert sha256_file(tmp_path / "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    with open(path, "rb") as fh:
        fh.read(6)
        assert sha256_stream(fh, chunk=1000) == (len(data) - 6, hashlib.sha256(data[6:]).hexdigest())
    with pytest.raises(FileNotFoundError):
        sha256_file(tmp_path / "missing")
