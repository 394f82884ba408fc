import gzip
import io
import random
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pathlib import Path
import zstandard

from pipeline.readers import Quarantined, Record, detect_format, read_file, resolve_paths


def _read(path, fmt="auto", unit="file", max_bytes=1 << 20):
    return list(read_file(path, path.name, fmt, "text", unit, max_bytes))


def test_jsonl_plain_gz_zst_give_same_records(tmp_path):
    lines = [{"text": "第一行。", "lang": "zh"}, {"text": "second", "n": 2}]
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines).encode()
    (tmp_path / "a.jsonl").write_bytes(data)
    with gzip.open(tmp_path / "a.jsonl.gz", "wb") as fh:
        fh.write(data)
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    for name in ("a.jsonl", "a.jsonl.gz", "a.jsonl.zst"):
        recs = _read(tmp_path / name)
        assert [(r.line, r.text) for r in recs] == [(1, "第一行。"), (2, "second")]
        assert json.loads(recs[0].meta) == {"lang": "zh"}


def test_multi_frame_zst_reads_every_frame(tmp_path):
    c = zstandard.ZstdCompressor()
    frames = [c.compress((json.dumps({"text": f"doc {i}"}) + "\n").encode()) for i in range(3)]
    (tmp_path / "m.jsonl.zst").write_bytes(b"".join(frames))
    assert [r.text for r in _read(tmp_path / "m.jsonl.zst")] == ["doc 0", "doc 1", "doc 2"]


def test_bad_records_are_quarantined_with_reasons_and_good_ones_kept(tmp_path):
    raw = b"\n".join([
        b'\xef\xbb\xbf{"text": "bom first"}',
        b'{"text": "ok\\u2028still one record"}\r',
        b'{"text": "bad \xff byte"}',
        b"not json",
        b"[1, 2]",
        b'{"other": 1}',
        b'{"text": 5}',
        b'{"text": "   "}',
        b'{"text": "\\ud800 lone"}',
        b'{"text": "' + b"x" * 300 + b'"}',
        b'{"text": "last good"}',
    ]) + b"\n"
    (tmp_path / "bad.jsonl").write_bytes(raw)
    out = list(read_file(tmp_path / "bad.jsonl", "bad.jsonl", "auto", "text", "file", 200))
    good = [r for r in out if isinstance(r, Record)]
    bad = [q for q in out if isinstance(q, Quarantined)]
    assert [(r.line, r.text) for r in good] == [
        (1, "bom first"), (2, "ok\u2028still one record"), (11, "last good")]
    assert [(q.line, q.reason) for q in bad] == [
        (3, "read.invalid_utf8"), (4, "read.invalid_json"), (5, "read.not_object"),
        (6, "read.missing_text"), (7, "read.text_not_string"), (8, "read.empty_text"),
        (9, "read.lone_surrogate"), (10, "read.record_too_large")]
    # byte offsets point at the start of each bad line
    assert raw[bad[0].byte_offset:].startswith(b'{"text": "bad')


def test_truncated_zst_and_gz_keep_read_records_and_quarantine_the_rest(tmp_path):
    rng = random.Random(0)
    data = "".join(json.dumps({"text": " ".join(f"w{rng.randrange(10**6)}" for _ in range(100))}) + "\n"
                   for i in range(2000)).encode()
    z = zstandard.ZstdCompressor().compress(data)
    (tmp_path / "t.jsonl.zst").write_bytes(z[: len(z) // 2])
    g = gzip.compress(data)
    (tmp_path / "t.jsonl.gz").write_bytes(g[: len(g) // 2])
    for name in ("t.jsonl.zst", "t.jsonl.gz"):
        out = _read(tmp_path / name)
        assert isinstance(out[-1], Quarantined) and out[-1].reason == "read.truncated_file", name
        assert all(isinstance(r, Record) for r in out[:-1])
        assert 0 < len(out) - 1 < 2000


def test_parquet_rows_and_meta(tmp_path):
    pq.write_table(pa.table({"body": ["甲", None, "丙"], "lang": ["zh", "zh", "zh"]}), tmp_path / "p.parquet")
    out = list(read_file(tmp_path / "p.parquet", "p.parquet", "auto", "body", "file", 1 << 20))
    assert [(r.line, r.text, json.loads(r.meta)) for r in out if isinstance(r, Record)] == [
        (1, "甲", {"lang": "zh"}), (3, "丙", {"lang": "zh"})]
    assert [(q.line, q.reason) for q in out if isinstance(q, Quarantined)] == [(2, "read.missing_text")]


def test_text_file_and_line_units(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    return 1\n\n", encoding="utf-8")
    assert [(r.line, r.text) for r in _read(tmp_path / "a.py")] == [(1, "def f():\n    return 1\n\n")]
    (tmp_path / "b.txt").write_text("one\n\ntwo\r\n", encoding="utf-8")
    assert [(r.line, r.text) for r in _read(tmp_path / "b.txt", unit="line")] == [(1, "one"), (3, "two")]
    (tmp_path / "empty.txt").write_bytes(b"")
    assert [q.reason for q in _read(tmp_path / "empty.txt")] == ["read.empty_text"]


def test_detect_format_and_resolve_paths(tmp_path):
    assert detect_format(tmp_path / "x.jsonl.zst") == "jsonl"
    assert detect_format(tmp_path / "x.parquet") == "parquet"
    assert detect_format(tmp_path / "x.py") == "text"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("b")
    (tmp_path / "d" / "a.txt").write_text("a")
    assert [Path(p).name for p in resolve_paths(["d/*.txt"], tmp_path)] == ["a.txt", "b.txt"]
    with pytest.raises(FileNotFoundError, match="nothing.txt"):
        resolve_paths(["nothing.txt"], tmp_path)


def test_lone_surrogate_outside_the_text_quarantines_only_its_record(tmp_path):
    """A lone surrogate in another field (or in the id) cannot be stored as
    UTF-8: that record is quarantined, the others are read."""
    raw = (b'{"text": "Ein guter Satz.", "title": "bad\\ud83d"}\n'
           b'{"text": "Noch ein Satz.", "doc_id": "x\\ud800"}\n'
           b'{"text": "Und der dritte.", "doc_id": "ok"}\n')
    (tmp_path / "s.jsonl").write_bytes(raw)
    out = list(read_file(tmp_path / "s.jsonl", "s.jsonl", "auto", "text", "file", 1 << 20, "doc_id"))
    assert [(q.line, q.reason, q.detail) for q in out if isinstance(q, Quarantined)] == [
        (1, "read.missing_id", "doc_id=None"),
        (2, "read.lone_surrogate", "the id holds a lone surrogate")]
    assert [r.text for r in out if isinstance(r, Record)] == ["Und der dritte."]
    out = list(read_file(tmp_path / "s.jsonl", "s.jsonl", "auto", "text", "file", 1 << 20))
    assert [(q.line, q.reason) for q in out if isinstance(q, Quarantined)] == [  # doc_id is then meta
        (1, "read.lone_surrogate"), (2, "read.lone_surrogate")]


# --------------------------------------------------------------------------- issue 13: nothing lost, no silent failure

def _jsonl(n: int, start: int = 0) -> bytes:
    return "".join(json.dumps({"text": f"document {i}", "n": i}) + "\n" for i in range(start, start + n)).encode()


def _split(out):
    return ([r for r in out if isinstance(r, Record)], [(q.line, q.reason) for q in out if isinstance(q, Quarantined)])


def test_deeply_nested_line_is_quarantined_and_the_rest_of_the_file_read(tmp_path):
    """A line nested 100,000 deep (RecursionError in json.loads before) is one
    quarantined record; 500 levels (under MAX_JSON_DEPTH) read as meta; an
    integer json cannot convert (ValueError, not JSONDecodeError) is one
    record's error, not the file's."""
    from pipeline.readers import MAX_JSON_DEPTH

    deep = b'{"text": "deep", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    nested_ok = b'{"text": "nested ok", "a": ' + b"[" * 500 + b"]" * 500 + b"}\n"
    brackets_in_text = json.dumps({"text": "[" * 2000}).encode() + b"\n"
    huge_int = b'{"text": "big number", "n": ' + b"7" * 5000 + b"}\n"
    (tmp_path / "n.jsonl").write_bytes(_jsonl(2) + deep + nested_ok + brackets_in_text + huge_int + _jsonl(2, 2))
    good, bad = _split(_read(tmp_path / "n.jsonl", max_bytes=1 << 20))
    assert MAX_JSON_DEPTH == 512
    assert [(r.line, r.text) for r in good] == [(1, "document 0"), (2, "document 1"), (4, "nested ok"),
                                                 (5, "[" * 2000), (7, "document 2"), (8, "document 3")]
    assert json.loads(good[2].meta)["a"] == json.loads("[" * 500 + "]" * 500)
    assert bad == [(3, "read.too_deeply_nested"), (6, "read.record_error")]
    q = [x for x in _read(tmp_path / "n.jsonl", max_bytes=1 << 20) if isinstance(x, Quarantined)]
    assert q[0].detail == "JSON nested deeper than 512 levels"
    assert q[1].detail.startswith("ValueError: Exceeds the limit (4300 digits)")


def test_zstd_long_31_window_is_read_whole(tmp_path):
    """``zstd --long=31`` frames declare a 2 GiB window, which zstandard's
    default decompressor refuses (128 MiB): every record is read."""
    data = _jsonl(3000)
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(data)
    z = buf.getvalue()
    assert zstandard.get_frame_parameters(z).window_size == 2**31
    with pytest.raises(zstandard.ZstdError, match="too much memory"):
        zstandard.ZstdDecompressor().decompressobj().decompress(z)
    (tmp_path / "long.jsonl.zst").write_bytes(z)
    good, bad = _split(_read(tmp_path / "long.jsonl.zst"))
    assert bad == []
    assert [r.text for r in good] == [f"document {i}" for i in range(3000)]


def test_compression_that_does_not_match_the_name_gets_its_own_reason(tmp_path):
    data = _jsonl(5)
    (tmp_path / "plain.jsonl.gz").write_bytes(data)
    (tmp_path / "plain.jsonl.zst").write_bytes(data)
    (tmp_path / "gzip.jsonl").write_bytes(gzip.compress(data))
    (tmp_path / "empty.jsonl.gz").write_bytes(b"")
    g = bytearray(gzip.compress(_jsonl(2000)))
    g[-8] ^= 0xFF  # a wrong CRC-32 in the trailer: every record decodes, the check at the end fails
    (tmp_path / "damaged.jsonl.gz").write_bytes(bytes(g))
    out = {name: _read(tmp_path / name) for name in
           ("plain.jsonl.gz", "plain.jsonl.zst", "gzip.jsonl", "empty.jsonl.gz", "damaged.jsonl.gz")}
    assert [(q.reason, q.detail) for q in out["plain.jsonl.gz"]] == [
        ("read.wrong_compression", "WrongCompression: named .gz but not compressed (starts b'{\"te')")]
    assert [(q.reason, q.line) for q in out["plain.jsonl.zst"]] == [("read.wrong_compression", 1)]
    assert [(q.reason, q.detail) for q in out["gzip.jsonl"]] == [
        ("read.wrong_compression", "WrongCompression: the bytes are gzip data but the name has no .gz or .zst")]
    assert [q.reason for q in out["empty.jsonl.gz"]] == ["read.empty_file"]
    good, bad = _split(out["damaged.jsonl.gz"])
    assert [r.text for r in good] == [f"document {i}" for i in range(2000)]
    assert bad == [(2001, "read.corrupt_file")] and out["damaged.jsonl.gz"][-1].detail.startswith(
        "BadGzipFile: CRC check failed")


def test_nul_in_text_is_removed_and_counted_not_quarantined(tmp_path):
    (tmp_path / "nul.jsonl").write_bytes(b'{"text": "a\\u0000b\\u0000c"}\n{"text": "\\u0000\\u0000"}\n'
                                         b'{"text": "clean"}\n')
    good, bad = _split(_read(tmp_path / "nul.jsonl"))
    assert [(r.line, r.text, r.nul_chars) for r in good] == [(1, "abc", 2), (3, "clean", 0)]
    assert bad == [(2, "read.empty_text")]
    (tmp_path / "nul.txt").write_bytes(b"one\x00 line\nsecond\n")
    good, bad = _split(_read(tmp_path / "nul.txt", unit="line"))
    assert [(r.text, r.nul_chars) for r in good] == [("one line", 1), ("second", 0)] and bad == []


def test_parquet_binary_text_column_is_decoded_as_strict_utf8(tmp_path):
    table = pa.table({"text": pa.array([b"plain", "中文文本".encode(), b"caf\xe9", None, "第二".encode()],
                                       pa.binary()),
                      "tag": pa.array([b"x", b"y", b"z", b"w", b"\xff"], pa.binary())})
    pq.write_table(table, tmp_path / "b.parquet")
    assert pq.ParquetFile(tmp_path / "b.parquet").schema_arrow.field("text").type == pa.binary()
    good, bad = _split(_read(tmp_path / "b.parquet"))
    assert [(r.line, r.text, json.loads(r.meta)) for r in good] == [
        (1, "plain", {"tag": "x"}), (2, "中文文本", {"tag": "y"}), (5, "第二", {"tag": "\\xff"})]
    assert bad == [(3, "read.invalid_utf8"), (4, "read.missing_text")]
    pq.write_table(table.cast(pa.schema([("text", pa.large_binary()), ("tag", pa.binary())])), tmp_path / "l.parquet")
    assert [r.text for r in _split(_read(tmp_path / "l.parquet"))[0]] == ["plain", "中文文本", "第二"]


def test_parquet_meta_column_values(tmp_path):
    """A JSON-object ``meta`` is merged; a non-JSON value or a JSON string
    stays as ``meta``; every row is read (nothing dropped, nothing lost)."""
    metas = ['{"url": "u1", "year": 2020}', "not json {", '"a json string"', "[1, 2]", None, "7"]
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(6)], "meta": metas, "lang": ["en"] * 6}),
                   tmp_path / "m.parquet")
    good, bad = _split(_read(tmp_path / "m.parquet"))
    assert bad == []
    assert [json.loads(r.meta) for r in good] == [
        {"url": "u1", "year": 2020, "lang": "en"}, {"meta": "not json {", "lang": "en"},
        {"meta": '"a json string"', "lang": "en"}, {"meta": "[1, 2]", "lang": "en"},
        {"meta": None, "lang": "en"}, {"meta": "7", "lang": "en"}]
    assert [r.line for r in good] == [1, 2, 3, 4, 5, 6]


def test_parquet_column_problem_names_the_field_and_the_columns(tmp_path):
    from pipeline.readers import parquet_column_problem

    pq.write_table(pa.table({"text": ["a"], "n": [1], "doc": ["d"]}), tmp_path / "p.parquet")
    assert parquet_column_problem(tmp_path / "p.parquet", "text") is None
    assert parquet_column_problem(tmp_path / "p.parquet", "text", "doc") is None
    assert parquet_column_problem(tmp_path / "p.parquet", "txet") == (
        "text_field 'txet' is not a column (columns: text (string), n (int64), doc (string))")
    assert parquet_column_problem(tmp_path / "p.parquet", "n") == (
        "text_field 'n' is a int64 column, not text (columns: text (string), n (int64), doc (string))")
    assert parquet_column_problem(tmp_path / "p.parquet", "text", "id").startswith("id_field 'id' is not a column")


def test_unopenable_input_is_one_file_level_entry(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    out = _read(tmp_path / "dir.jsonl")
    assert [(q.line, q.byte_offset, q.reason) for q in out] == [(1, -1, "read.unreadable_file")]
    assert out[0].detail.startswith("IsADirectoryError: [Errno 21] Is a directory")


# --------------------------------------------------------------------------- one matcher for disk and S3

LAYOUT = {
    "a.jsonl": 1, "b.jsonl": 2, "sub/c.jsonl": 3, "sub/deeper/d.jsonl": 4, "_under.jsonl": 5,
    # not data: hidden, partial uploads and downloads, temporary names, committer output
    ".hidden.jsonl": 90, "sub/.e.jsonl": 91, ".cache/f.jsonl": 92, "g.jsonl.part": 93, "h.jsonl.tmp": 94,
    "i.jsonl._COPYING_": 95, "j.jsonl~": 96, "_temporary/0/k.jsonl": 97, "l.jsonl.crdownload": 98,
}


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    client.create_bucket(Bucket="corpus")
    storage = {"key": "test", "secret": "test",
               "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    yield client, storage
    server.stop()


def test_glob_matches_the_same_files_on_disk_and_on_s3(tmp_path, s3_server):
    client, storage = s3_server
    for name, i in LAYOUT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(_jsonl(1, i))
        client.put_object(Bucket="corpus", Key=f"glob/{name}", Body=_jsonl(1, i))
    patterns = [["*.jsonl"], ["**/*.jsonl"], ["sub/*"], ["*"], ["**"], ["sub/**/*.jsonl", "*.jsonl"]]
    expected = [["_under.jsonl", "a.jsonl", "b.jsonl"],
                ["_under.jsonl", "a.jsonl", "b.jsonl", "sub/c.jsonl", "sub/deeper/d.jsonl"],
                ["sub/c.jsonl"],
                ["_under.jsonl", "a.jsonl", "b.jsonl"],
                ["_under.jsonl", "a.jsonl", "b.jsonl", "sub/c.jsonl", "sub/deeper/d.jsonl"],
                ["_under.jsonl", "a.jsonl", "b.jsonl", "sub/c.jsonl", "sub/deeper/d.jsonl"]]
    for pats, want in zip(patterns, expected):
        disk_skipped, s3_skipped = [], []
        disk = [Path(p).relative_to(tmp_path.resolve()).as_posix()
                for p in resolve_paths(pats, tmp_path, skipped=disk_skipped)]
        s3 = [p.removeprefix("s3://corpus/glob/")
              for p in resolve_paths(pats, "s3://corpus/glob", storage, skipped=s3_skipped)]
        assert disk == s3 == want, pats
        assert ([Path(p).relative_to(tmp_path).as_posix() for p in disk_skipped]
                == [p.removeprefix("s3://corpus/glob/") for p in s3_skipped]), pats
    # every non-data name is skipped under "**" on both
    _, skipped = resolve_paths(["**"], tmp_path, skipped=(s := [])), s
    assert sorted(Path(p).relative_to(tmp_path).as_posix() for p in skipped) == sorted(
        n for n, i in LAYOUT.items() if i >= 90)
    # a name given without wildcards is read, hidden or not
    assert resolve_paths([".hidden.jsonl"], tmp_path) == [str((tmp_path / ".hidden.jsonl").resolve())]
    assert resolve_paths([".hidden.jsonl"], "s3://corpus/glob", storage) == ["s3://corpus/glob/.hidden.jsonl"]
    for base in (tmp_path, "s3://corpus/glob"):
        with pytest.raises(FileNotFoundError, match=r"'.*h.jsonl\*' matches no file .*1 hidden or partial file"):
            resolve_paths(["h.jsonl*"], base, storage)


def test_content_encoding_gzip_object_is_decoded(s3_server):
    """An object stored gzip-compressed with ``Content-Encoding: gzip`` (s3fs
    returns the stored bytes): decoded, whether its name ends in .gz or not."""
    client, storage = s3_server
    data = _jsonl(50)
    client.put_object(Bucket="corpus", Key="enc/a.jsonl", Body=gzip.compress(data), ContentEncoding="gzip")
    client.put_object(Bucket="corpus", Key="enc/b.jsonl.gz", Body=gzip.compress(data), ContentEncoding="gzip")
    client.put_object(Bucket="corpus", Key="enc/c.jsonl.zst", Body=zstandard.ZstdCompressor().compress(data),
                      ContentEncoding="zstd")
    client.put_object(Bucket="corpus", Key="enc/d.jsonl", Body=data, ContentEncoding="br")
    client.put_object(Bucket="corpus", Key="enc/e.jsonl", Body=data, ContentEncoding="gzip")
    for name in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst"):
        out = list(read_file(f"s3://corpus/enc/{name}", name, "auto", "text", "file", 1 << 20,
                             storage_options=storage))
        good, bad = _split(out)
        assert bad == [] and [r.text for r in good] == [f"document {i}" for i in range(50)], name
    for name, reason in (("d.jsonl", "read.unsupported_encoding"), ("e.jsonl", "read.wrong_compression")):
        out = list(read_file(f"s3://corpus/enc/{name}", name, "auto", "text", "file", 1 << 20,
                             storage_options=storage))
        assert [(q.line, q.reason) for q in out] == [(1, reason)], name
