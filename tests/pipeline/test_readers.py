import gzip
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
