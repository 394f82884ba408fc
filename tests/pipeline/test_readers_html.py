"""Tests for pipeline/html.py: WARC and HTML input, charsets, main-text
extraction, quarantine reasons, and a build from a WARC file to MindRecord
with the page's URL reachable from lineage."""

from __future__ import annotations

import gzip
import io
import json
import zlib

import pyarrow.parquet as pq
import pytest
import yaml
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from pipeline import html as H
from pipeline.readers import Quarantined, Record, read_file

NAV = ('<div class="nav"><ul><li><a href="/">首页</a></li><li><a href="/news">新闻中心</a></li>'
       '<li><a href="/login">登录注册</a></li></ul></div>')
ZH_1 = "长江是中国第一长河，全长约六千三百公里，自西向东流经青海、西藏、四川、云南、重庆、湖北、湖南、江西、安徽、江苏和上海。"
ZH_2 = "长江流域是中国经济最发达的地区之一，沿江分布着许多重要城市，航运、灌溉和发电都依靠这条大河。"
ZH_3 = "黄河是中国第二长河，发源于青海省巴颜喀拉山脉，流经九个省区，最后注入渤海，被称为中华民族的母亲河。"
ZH_4 = "黄河中游流经黄土高原，河水携带大量泥沙，下游河床逐年抬高，形成了举世闻名的地上河，历代治理黄河都是国家大事。"
TW_1 = "臺灣位於東亞島弧中央，北回歸線穿過島的中南部，氣候溫暖潮濕，山脈縱貫南北，最高峰為玉山。"
EN_1 = "The river carries melted snow from the mountains toward the distant ocean every spring."
EN_2 = "Farmers along its banks depend on the seasonal floods to water their fields and renew the soil."
EN_NAV = ('<nav><ul><li><a href="/">Home</a></li><li><a href="/shop">Shop online</a></li>'
          '<li><a href="/contact">Contact us today</a></li></ul></nav>')
EN_FOOTER = "<footer><p>Copyright 2024 Example Widgets Incorporated. All rights reserved.</p></footer>"


def _page(title: str, paragraphs: list[str], nav: str = "", head: str = "", footer: str = "") -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html><html><head>{head}<title>{title}</title></head><body>{nav}"
            f"<article><h1>{title}</h1>{body}</article>{footer}</body></html>")


def _response(writer: WARCWriter, url: str, body: bytes, ctype: str, status: str = "200 OK"):
    http = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
    record = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
    writer.write_record(record)
    return record.rec_headers.get_header("WARC-Record-ID")


def _warc(tmp_path, gz: bool = True):
    """A WARC holding: warcinfo (1), a GBK page with its charset in the HTTP
    header (2), a request (3), a GBK page with only <meta charset> (4), a
    Big5 page with http-equiv (5), a UTF-8 page with navigation (6), a PNG
    (7), a 404 (8), a record cut in half (9), and a last good page (10).
    Returns (path, {ordinal: record id})."""
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=gz)
    ids = {}
    w.write_record(w.create_warcinfo_record("crawl.warc.gz", {"software": "test"}))
    ids[2] = _response(w, "http://example.cn/changjiang", _page("长江", [ZH_1, ZH_2], NAV).encode("gbk"),
                       "text/html; charset=GBK")
    w.write_record(w.create_warc_record("http://example.cn/changjiang", "request",
                                        payload=io.BytesIO(b"GET /changjiang HTTP/1.1\r\n\r\n")))
    ids[4] = _response(w, "http://example.cn/huanghe",
                       _page("黄河", [ZH_3, ZH_4], NAV, head='<meta charset="gbk">').encode("gbk"), "text/html")
    ids[5] = _response(w, "http://example.tw/taiwan",
                       _page("臺灣", [TW_1], head='<meta http-equiv="Content-Type" content="text/html; charset=big5">'
                             ).encode("big5"), "text/html")
    ids[6] = _response(w, "https://example.com/river", _page("The river", [EN_1, EN_2], EN_NAV, footer=EN_FOOTER)
                       .encode("utf-8"), "text/html; charset=utf-8")
    _response(w, "https://example.com/logo.png", b"\x89PNG\r\n\x1a\n" + bytes(200), "image/png")
    _response(w, "https://example.com/missing", _page("Not found", ["Nothing here."]).encode(), "text/html",
              "404 Not Found")
    cut_at = buf.tell()
    _response(w, "https://example.com/cut", _page("Cut", [EN_1 * 20]).encode(), "text/html")
    cut_end = buf.tell()
    ids[10] = _response(w, "https://example.com/last", _page("Last", [EN_2, EN_1]).encode(), "text/html")
    data = buf.getvalue()
    data = data[:cut_at] + data[cut_at:(cut_at + cut_end) // 2] + data[cut_end:]  # record 9 cut in half
    path = tmp_path / ("crawl.warc.gz" if gz else "crawl.warc")
    path.write_bytes(data)
    return path, ids


def _read(path, fmt="warc", extractor="trafilatura", **kw):
    return list(read_file(path, path.name, fmt, kw.get("text_field", "text"), "file", 1 << 20, None, None,
                          extractor))


def test_warc_pages_come_out_as_main_text_with_url_and_record_id(tmp_path):
    path, ids = _warc(tmp_path)
    items = _read(path)
    docs = {i.line: i for i in items if isinstance(i, Record)}
    bad = {i.line: i for i in items if isinstance(i, Quarantined)}
    assert sorted(docs) == [2, 4, 5, 6, 10]
    assert {n: q.reason for n, q in bad.items()} == {
        7: "read.not_html", 8: "read.http_status", 9: "read.truncated_record"}
    assert "image/png" in bad[7].detail and "https://example.com/logo.png" in bad[7].detail
    assert "404" in bad[8].detail
    # GBK by HTTP header, GBK by <meta charset> only, Big5 by http-equiv: decoded right
    assert ZH_1 in docs[2].text and ZH_2 in docs[2].text
    assert ZH_3 in docs[4].text
    assert TW_1 in docs[5].text
    for n in (2, 4):
        assert "新闻中心" not in docs[n].text and "登录注册" not in docs[n].text  # navigation gone
    assert EN_1 in docs[6].text and EN_2 in docs[6].text
    assert "Shop online" not in docs[6].text and "Contact us today" not in docs[6].text
    assert "All rights reserved" not in docs[6].text
    meta = {n: json.loads(d.meta) for n, d in docs.items()}
    assert meta[2]["url"] == "http://example.cn/changjiang" and meta[6]["url"] == "https://example.com/river"
    assert {n: m["warc_record_id"] for n, m in meta.items()} == ids
    assert (meta[2]["charset"], meta[2]["charset_source"]) == ("gb18030", "http")
    assert (meta[4]["charset"], meta[4]["charset_source"]) == ("gb18030", "meta")
    assert meta[5]["charset"] == "big5hkscs" and meta[5]["charset_source"] == "meta"
    assert meta[6]["http_status"] == 200 and meta[6]["content_type"] == "text/html; charset=utf-8"
    assert meta[2]["warc_date"].endswith("Z")
    # the offset is where the record's gzip member starts: it decompresses to that record alone
    raw = path.read_bytes()
    member = zlib.decompressobj(31).decompress(raw[meta[6]["warc_offset"]:])  # stops at the member's end
    assert b"WARC-Target-URI: https://example.com/river" in member
    assert bad[9].byte_offset > meta[6]["warc_offset"] and meta[10]["warc_offset"] > bad[9].byte_offset


def test_uncompressed_warc_and_a_record_cut_at_the_end(tmp_path):
    path, ids = _warc(tmp_path, gz=False)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 40])  # the last record loses its end
    items = _read(path)
    docs = {i.line: i for i in items if isinstance(i, Record)}
    assert [2, 4, 5, 6] == sorted(docs)[:4]
    assert ZH_1 in docs[2].text and json.loads(docs[6].meta)["warc_record_id"] == ids[6]
    assert any(isinstance(i, Quarantined) and i.reason == "read.truncated_record" for i in items)


def test_a_warc_gzipped_whole_is_streamed(tmp_path):
    """A .warc gzipped as one stream (not per record) is one gzip member
    larger than a record may be: its records are streamed, in order, with
    their offsets in the decompressed stream."""
    plain, ids = _warc(tmp_path, gz=False)
    whole = tmp_path / "whole.warc.gz"
    whole.write_bytes(gzip.compress(plain.read_bytes()))
    items = list(read_file(whole, whole.name, "warc", "text", "file", 4096, None, None, "trafilatura"))
    docs = {i.line: i for i in items if isinstance(i, Record)}
    assert [2, 4, 5, 6] == sorted(docs)[:4] and ZH_1 in docs[2].text and EN_2 in docs[6].text
    meta = json.loads(docs[6].meta)
    assert meta["warc_record_id"] == ids[6] and meta["warc_member_offset"] == 0
    assert plain.read_bytes()[meta["warc_offset"]:].startswith(b"WARC/1.0")
    # cut short: what was read stays, the end is read.truncated_record
    whole.write_bytes(whole.read_bytes()[:-200])
    items = list(read_file(whole, whole.name, "warc", "text", "file", 4096, None, None, "trafilatura"))
    assert ZH_1 in next(i for i in items if isinstance(i, Record) and i.line == 2).text
    assert items[-1].reason == "read.truncated_record"


def test_arc_files_gzipped_per_record_and_plain(tmp_path):
    """ARC (the format before WARC): the response's URL and archive date,
    no record id (none is made up: the same file gives the same meta)."""
    body = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=gbk\r\n\r\n"
            + _page("长江", [ZH_1, ZH_2], NAV).encode("gbk"))
    version = b"1 0 Example\nURL IP-address Archive-date Content-type Archive-length\n"
    filedesc = b"filedesc://crawl.arc 0.0.0.0 20240101000000 text/plain %d\n" % len(version) + version + b"\n"
    response = b"http://example.cn/changjiang 1.2.3.4 20240102030405 text/html %d\n" % len(body) + body + b"\n"
    (tmp_path / "crawl.arc.gz").write_bytes(gzip.compress(filedesc) + gzip.compress(response))
    (tmp_path / "crawl.arc").write_bytes(filedesc + response)
    for name in ("crawl.arc.gz", "crawl.arc"):
        (doc,) = _read(tmp_path / name, fmt="auto")
        assert doc.line == 2 and ZH_2 in doc.text and "新闻中心" not in doc.text
        meta = json.loads(doc.meta)
        assert (meta["url"], meta["warc_date"], meta["warc_record_id"]) == (
            "http://example.cn/changjiang", "2024-01-02T03:04:05Z", None)
        assert (meta["charset"], meta["charset_source"]) == ("gb18030", "http")
        assert _read(tmp_path / name, fmt="auto")[0].meta == doc.meta  # deterministic


def test_resiliparse_extractor_reads_the_same_pages(tmp_path):
    path, _ = _warc(tmp_path)
    docs = {i.line: i for i in _read(path, extractor="resiliparse") if isinstance(i, Record)}
    assert ZH_1 in docs[2].text and EN_2 in docs[6].text
    assert json.loads(docs[6].meta)["extractor"] == "resiliparse"


def test_charset_order_and_labels():
    assert H.codecs_for("GBK") == ("gb18030",) and H.codecs_for("x-gbk") == ("gb18030",)
    assert H.codecs_for("gb2312") == ("gb18030",) and H.codecs_for("Big5")[0] == "big5hkscs"
    assert H.codecs_for("ISO-8859-1") == ("cp1252",) and H.codecs_for("no-such-charset") == ()
    assert H.http_charset('text/html; Charset="utf-8"') == "utf-8" and H.http_charset("text/html") is None
    # a GB18030-only character (four bytes) on a page labelled GBK decodes right
    body = _page("测试", ["㐀这是一个只有 GB18030 才能编码的字：𠀀。"]).encode("gb18030")
    text, codec, source, replaced = H.decode_html(body, "gbk")
    assert "𠀀" in text and (codec, source, replaced) == ("gb18030", "http", 0)
    # the HTTP header wins over a <meta> that disagrees
    body = _page("x", [ZH_1], head='<meta charset="utf-8">').encode("gbk")
    assert H.decode_html(body, "GBK")[1:3] == ("gb18030", "http")
    # a wrong header that does not decode falls through to <meta>
    assert H.decode_html(body.replace(b"utf-8", b"gbk"), "utf-8")[1:3] == ("gb18030", "meta")
    # no label at all: detected
    body = _page("长江", [ZH_1, ZH_2, ZH_3]).encode("gb18030")
    text, codec, source, _ = H.decode_html(body)
    assert source == "detected" and ZH_3 in text
    # one stray byte: the labelled charset with one U+FFFD, the text around it intact
    body = _page("长江", [ZH_1, ZH_2, ZH_3]).encode("gbk")
    at = body.index(ZH_2[:4].encode("gbk"))
    text, codec, source, replaced = H.decode_html(body[:at] + b"\xff" + body[at:], "gbk")
    assert (codec, source, replaced) == ("gb18030", "http", 1) and ZH_2 in text and ZH_3 in text
    # a UTF-8 BOM is the charset
    assert H.decode_html(b"\xef\xbb\xbf<p>caf\xc3\xa9</p>", "latin-1")[0:3] == ("<p>café</p>", "utf-8", "bom")
    # bytes no charset decodes: undecodable
    with pytest.raises(H.UndecodableHTML):
        H.decode_html(b"<p>" + bytes(range(0x80, 0x100)) * 20 + b"</p>", "utf-8")


def test_html_files_and_html_records(tmp_path):
    page = tmp_path / "huanghe.html"
    page.write_bytes(_page("黄河", [ZH_3, ZH_4], NAV, head='<meta charset="gb2312">').encode("gbk"))
    (item,) = _read(page, fmt="auto")
    assert isinstance(item, Record) and ZH_3 in item.text and "新闻中心" not in item.text
    assert json.loads(item.meta)["charset_source"] == "meta"
    empty = tmp_path / "empty.html"
    empty.write_text("<html><head><title>t</title></head><body><script>var x = 1;</script></body></html>")
    (item,) = _read(empty, fmt="html")
    assert isinstance(item, Quarantined) and item.reason == "read.empty_extraction"
    binary = tmp_path / "image.html"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(300))
    (item,) = _read(binary, fmt="html")
    assert item.reason == "read.not_html"
    # JSONL: the HTML in a field (text_field), the other fields kept in meta
    jsonl = tmp_path / "pages.jsonl"
    jsonl.write_text(json.dumps({"html": _page("River", [EN_1, EN_2], EN_NAV), "url": "https://e.com/r"}) + "\n"
                     + json.dumps({"html": "<html><body></body></html>", "url": "https://e.com/empty"}) + "\n")
    doc, bad = _read(jsonl, fmt="html", text_field="html")
    assert doc.line == 1 and EN_2 in doc.text and "Shop online" not in doc.text
    assert json.loads(doc.meta)["url"] == "https://e.com/r"
    assert (bad.line, bad.reason) == (2, "read.empty_extraction")
    # id_field: the record's own id
    doc, _ = list(read_file(jsonl, "pages.jsonl", "html", "html", "file", 1 << 20, "url"))
    assert doc.doc_id == "https://e.com/r"
    # Parquet: a binary column of pages in their own charsets (decoded by header/meta/detection), and a string one
    import pyarrow as pa

    table = pa.table({"html": pa.array([_page("黄河", [ZH_3, ZH_4], NAV, head='<meta charset="gbk">').encode("gbk"),
                                        _page("River", [EN_1, EN_2], EN_NAV).encode("utf-8")], pa.binary()),
                      "url": ["http://example.cn/huanghe", "https://e.com/r"]})
    pq.write_table(table, tmp_path / "pages.parquet")
    zh, en = _read(tmp_path / "pages.parquet", fmt="html", text_field="html")
    assert ZH_4 in zh.text and "新闻中心" not in zh.text and EN_1 in en.text
    assert json.loads(zh.meta)["url"] == "http://example.cn/huanghe" and json.loads(zh.meta)["charset"] == "gb18030"


def test_gzip_member_scan_skips_a_corrupt_member(tmp_path):
    members = [gzip.compress(f"member {i} ".encode() * 50) for i in range(3)]
    broken = bytearray(members[1])
    broken[30:40] = b"\x00" * 10  # inside the deflate data
    out = list(H._gzip_members(io.BytesIO(members[0] + bytes(broken) + members[2]), 1 << 20))
    assert out[0] == (0, b"member 0 " * 50, None)
    assert out[1][0] == len(members[0]) and out[1][1] is None and out[1][2] is not None
    assert out[-1] == (len(members[0]) + len(broken), b"member 2 " * 50, None)


DOCS = [
    "Rivers carry melted snow toward distant oceans, and the water feeds farms along the way.",
    "Careful gardeners water their tomatoes before sunrise so the leaves dry before the heat of noon.",
    "Modern libraries lend laptops, cameras and musical instruments to anyone with a library card.",
    "The orchestra rehearsed the final movement three times yesterday before the evening concert began.",
    "Volunteers repaired the wooden bridge after the spring flood damaged it beyond safe use for walkers.",
    "Our neighbours planted apple trees along the fence behind their house last autumn and watered them.",
    "The museum opened a new gallery where visitors can touch replicas of ancient tools and pottery.",
    "Engineers tested the prototype engine in cold weather to see whether it would start every morning.",
    "During the long winter evenings the family gathered around the kitchen table to play cards together.",
    "Students who practise speaking a foreign language with native speakers improve their pronunciation.",
    "The baker explained that good bread needs patience, because the dough must rest for several hours.",
    "After the storm passed, fishermen inspected their boats in the harbour and counted the broken nets.",
]


def test_build_from_a_warc_to_mindrecord_with_the_url_in_lineage(tmp_path):
    """A real build: a WARC of twelve English pages (with navigation), a PNG
    and a cut record -> MindRecord; every kept document's lineage leads back
    to its URL and WARC record id; the two bad records are counted."""
    from pipeline import layout
    from pipeline.build import build
    from pipeline.explain import explain_document, find_documents, format_explanation
    from pipeline.lineage import lineage_for_step

    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    urls = {}
    for i, text in enumerate(DOCS):
        url = f"https://example.org/page/{i}"
        rid = _response(w, url, _page(f"Page {i}", [text, DOCS[(i + 5) % len(DOCS)]], EN_NAV, footer=EN_FOOTER)
                        .encode(), "text/html; charset=utf-8")
        urls[url] = rid
    _response(w, "https://example.org/logo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")
    start = buf.tell()
    _response(w, "https://example.org/cut", _page("Cut", [DOCS[0]]).encode(), "text/html")
    data = buf.getvalue()
    (tmp_path / "crawl.warc.gz").write_bytes(data[:start + (len(data) - start) // 2])
    cfg = {"sources": {"web": {"paths": [str(tmp_path / "crawl.warc.gz")]}}, "executor": {"num_workers": 1},
           "perplexity": {"enabled": False, "reference_source": "web"}, "tokenize": {"vocab_size": 300},
           "output": {"seq_length": 32}}
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(cfg))
    result = build("w1", tmp_path / "w.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    assert m["accounting"]["quarantined"] == 2
    quarantine = [json.loads(line) for line in (result.version_dir / layout.QUARANTINE).read_text().splitlines()]
    assert sorted(q["reason"] for q in quarantine) == ["read.not_html", "read.truncated_record"]
    assert (result.version_dir / layout.shard_name(0)).is_file() and m["num_samples"] > 0
    kept = pq.read_table(result.version_dir / layout.DOCUMENTS, columns=["id"])["id"].to_pylist()
    assert len(kept) >= 10
    records = lineage_for_step(result.version_dir, 0, 2)
    doc_ids = sorted({s["doc_id"] for r in records for s in r["segments"]})
    assert doc_ids and all(d.startswith("web:") for d in doc_ids)
    rows = find_documents(result.version_dir, doc_ids, m, with_text=True)
    for doc_id in doc_ids:
        meta = json.loads(rows[doc_id][1]["meta"])
        assert urls[meta["url"]] == meta["warc_record_id"]
        assert "Shop online" not in rows[doc_id][1]["text"]
    # explain names the page of a document
    explained = explain_document(result.version_dir, doc_ids[0])
    meta = json.loads(rows[doc_ids[0]][1]["meta"])
    assert explained["page"]["url"] == meta["url"] and explained["page"]["warc_record_id"] == meta["warc_record_id"]
    assert f"page {meta['url']}" in format_explanation(explained).splitlines()[1]


def test_invalid_and_hostile_charset_labels_are_ignored(tmp_path):
    # a NUL in the label (codecs.lookup raised ValueError: read.record_error),
    # "undefined"/"punycode" (raise on decode), UTF-7 and unicode_escape
    # (decode ASCII pages into other text): each label is ignored, the page
    # decodes as UTF-8 by detection or fallback, its text unchanged
    body = _page("C++", ["Use C++ +ADw-script+AD4- and write \\u0041 in strings, says the river guide."]).encode()
    for label in ("x-foo\x00", "undefined", "punycode", "utf-7", "unicode_escape", "raw-unicode-escape"):
        assert H.codecs_for(label) == ()
        text, codec, source, replaced = H.decode_html(body, label)
        assert (text, replaced) == (body.decode(), 0) and source != "http", label
    assert H.codecs_for("GBK") == ("gb18030",)
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    _response(w, "http://example.com/nul", body, "text/html; charset=x-foo\x00bar")
    path = tmp_path / "nul.warc.gz"
    path.write_bytes(buf.getvalue())
    [rec] = _read(path)
    assert isinstance(rec, Record) and "Use C++ +ADw-script+AD4- and write \\u0041" in rec.text


def test_a_page_too_long_for_trafilatura_is_quarantined_not_extracted_for_minutes(tmp_path):
    # 9 MB of distinct paragraphs: trafilatura took ~25 s on it (its time
    # grows as the square of the page); now read.record_too_large at once,
    # while resiliparse (linear) still extracts it
    paragraphs = [f"{EN_1} Paragraph {i}." for i in range(90_000)]
    body = _page("Long", paragraphs).encode()
    assert len(body) > H.EXTRACTOR_MAX_CHARS["trafilatura"]
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    _response(w, "http://example.com/long", body, "text/html; charset=utf-8")
    path = tmp_path / "long.warc.gz"
    path.write_bytes(buf.getvalue())
    [q] = list(read_file(path, path.name, "warc", "text", "file", 64 << 20, None, None, "trafilatura"))
    assert isinstance(q, Quarantined) and q.reason == "read.record_too_large"
    assert f"{len(body)} characters of HTML > {4 << 20} (trafilatura's limit)" in q.detail
    [rec] = list(read_file(path, path.name, "warc", "text", "file", 64 << 20, None, None, "resiliparse"))
    assert isinstance(rec, Record) and "Paragraph 89999." in rec.text


def test_brotli_content_encoding_is_decoded_and_a_brotli_bomb_stops_at_the_limit(tmp_path):
    # Browser-made WARCs (browsertrix, webrecorder) keep "Content-Encoding: br"
    # bodies. warcio's br decoder set an attribute that brotli 1.1+ refuses:
    # every such page was read.corrupt_record (AttributeError)
    import brotli

    page = _page("The river", [EN_1, EN_2]).encode()
    bomb = brotli.compress(b"<p>" + b"a" * (50 << 20) + b"</p>", quality=5)    # 99 bytes -> 50 MB
    assert len(bomb) < 200
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    for url, body in (("https://example.com/br", brotli.compress(page)), ("https://example.com/bomb", bomb)):
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "br")],
                                protocol="HTTP/1.1")
        w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http))
    path = tmp_path / "br.warc.gz"
    path.write_bytes(buf.getvalue())
    rec, q = _read(path)                                                 # max_bytes: 1 MiB
    assert isinstance(rec, Record) and rec.text == f"The river\n{EN_1}\n{EN_2}"
    assert json.loads(rec.meta)["url"] == "https://example.com/br"
    assert isinstance(q, Quarantined) and q.reason == "read.record_too_large"
    assert q.detail == "https://example.com/bomb: > 1048576 bytes"
    # the work: the decoder stops one byte past the limit, not at 50 MB
    decoder = H._Brotli()
    decoder.limit = 1 << 20
    assert len(decoder.decompress(bomb)) == (1 << 20) + 1 and decoder.overflow
    assert decoder.decompress(b"more") == b""


def test_meta_charset_after_thousands_of_unclosed_meta_fragments():
    # 2,500 "<meta " without ">" in the first 16 KB: the lazy [^>]*? scan ran
    # from each to the end of the window (0.7 s per page, quadratic); it now
    # stops at the next "<" (0.1 ms). The charset after them is still found.
    head = b"<html><head>" + b"<meta " * 2500 + b'<meta charset="gbk"><title>t</title></head>'
    assert len(head) < H.META_SCAN_BYTES
    assert H.meta_charset(head) == "gbk"
    body = head + _page("长江", [ZH_1]).encode("gbk")
    text, codec, source, replaced = H.decode_html(body)
    assert (codec, source, replaced) == ("gb18030", "meta", 0) and ZH_1 in text
    assert H.meta_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=big5">') == "big5"


def test_an_uncompressed_warc_is_read_again_after_a_record_with_a_wrong_content_length(tmp_path):
    # record 2 says 10 bytes more than it holds: warcio reads into record 3's
    # header and fails there. Before, that ended the file (records 3 and 4
    # lost behind one read.corrupt_record); now the reader finds the next
    # "WARC/1.x" line and goes on, as the gzip path does per member.
    import re

    chunks = []
    for i in range(4):
        buf = io.BytesIO()
        _response(WARCWriter(buf, gzip=False), f"https://example.com/{i}", _page(f"Page {i}", [EN_1, EN_2]).encode(),
                  "text/html; charset=utf-8")
        data = buf.getvalue()
        if i == 1:
            n = int(re.search(rb"Content-Length: (\d+)", data).group(1))
            data = data.replace(b"Content-Length: %d" % n, b"Content-Length: %d" % (n + 10), 1)
        chunks.append(data)
    path = tmp_path / "off.warc"
    path.write_bytes(b"".join(chunks))
    out = _read(path)
    assert [(type(o).__name__, o.line) for o in out] == [("Record", 1), ("Record", 2), ("Quarantined", 3),
                                                          ("Record", 4), ("Record", 5)]
    assert out[2].reason == "read.corrupt_record"
    assert [json.loads(o.meta)["url"] for o in out if isinstance(o, Record)] == [
        f"https://example.com/{i}" for i in range(4)]
    assert [json.loads(o.meta)["warc_offset"] for o in out if isinstance(o, Record)][2:] == [
        len(chunks[0]) + len(chunks[1]), sum(map(len, chunks[:3]))]


def test_a_page_nested_past_256_levels_keeps_its_text():
    # 300 unclosed <font> tags (old forum pages): libxml2 stopped the tree at
    # depth 256 and trafilatura returned the title alone ("长江"), the page
    # kept without its text
    html = ("<html><body><article><h1>长江</h1>" + "<font color=red>" * 300 + f"<p>{ZH_1}</p><p>{ZH_2}</p>"
            + "</article></body></html>")
    assert H.extract_text(html) == f"长江\n{ZH_1}\n{ZH_2}"
