"""HTML and WARC input: web pages in, main text out, with lineage to the page.

Two source formats (``sources.<name>.format``, :class:`pipeline.config.SourceConfig`):

* ``html``: raw HTML. A ``.jsonl``/``.json``/``.ndjson`` file (optionally
  ``.gz``/``.zst``) or a ``.parquet`` file holds one page per record, the HTML
  in ``text_field``; any other file is one page (its bytes, decoded as below).
* ``warc``: WARC (and ARC) files, gzip per record as Common Crawl ships them
  (``.warc.gz``) or uncompressed. Only ``response`` records are read; their
  HTTP headers are parsed by ``warcio``.

A page becomes a :class:`pipeline.readers.Record` whose text is the page's
main text (:func:`extract_text`; the extractor and its measured choice:
docs/inputs_html_warc.md) and whose ``meta`` (a JSON object) leads back to
the page: for WARC ``url`` (``WARC-Target-URI``), ``warc_date``,
``warc_record_id`` (null for ARC, which has none; ARC's ``archive-date``
becomes ``warc_date`` in the same ISO form), ``warc_offset`` (byte offset of the record, or of its gzip
member, in the file: what a Common Crawl index calls ``offset``),
``http_status``, ``content_type``; for every page ``charset`` and
``charset_source`` (``bom``, ``http``, ``meta``, ``detected``, or ``str`` when
the HTML came as a JSON string) and ``html_bytes``.

A WARC record's ``line`` is its 1-based ordinal among all records of the file
(``warcinfo`` and ``request`` records count), so ids
``<source>:<file>:<ordinal>`` are stable for the same file bytes.

Charset (:func:`decode_html`): a byte-order mark, then the HTTP
``Content-Type`` charset, then ``<meta charset>``/``http-equiv`` in the first
:data:`META_SCAN_BYTES` bytes, then detection (``charset-normalizer``), each
tried as a strict decode in that order; labels map as browsers map them
(WHATWG Encoding Standard): GBK/GB2312 decode as GB18030 (a superset), Big5
as Big5-HKSCS (then cp950), ISO-8859-1/ASCII as windows-1252.

What does not become a document is quarantined (``pipeline.readers.Quarantined``,
counted in the manifest, listed in ``quarantine.jsonl``; the detail names the
URL when there is one):

* ``read.not_html``: a response whose ``Content-Type`` is not HTML
  (:data:`HTML_TYPES`), or an HTML file whose bytes are not markup.
* ``read.http_status``: a response whose status is not 200 (redirects and
  error pages carry no page text; Common Crawl keeps them apart anyway).
* ``read.truncated_record``: a record (or gzip member) that ends before its
  ``Content-Length`` or end-of-stream marker.
* ``read.corrupt_record``: a record that does not parse (bad gzip data, not a
  WARC header); reading resumes at the next gzip member (uncompressed: at the
  next ``WARC/1.x`` line), so one bad record never stops a file.
* ``read.undecodable_html``: no charset decodes the page (more than
  :data:`MAX_REPLACEMENT_FRACTION` of its characters would be U+FFFD).
* ``read.empty_extraction``: the extractor found no main text.
* ``read.extraction_error``: the extractor raised.
* ``read.record_too_large``: a record (HTML bytes) above ``ingest.max_record_bytes``,
  or a page longer than its extractor's :data:`EXTRACTOR_MAX_CHARS`.
* ``read.record_error``: any other error on one record (named in the detail).

Memory is O(one record): a gzip member is decompressed whole (up to
``max_bytes``); an uncompressed file, and a member larger than that (a WARC
gzipped whole, not per record), are streamed.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import re
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path

from pipeline.readers import (Quarantined, Record, _check_text, _json_default, _open_binary, _parquet_meta,
                              _record_error, detect_format, open_input, read_jsonl)

EXTRACTORS = ("trafilatura", "resiliparse")
# The extractor used when a source names none (the default of
# ``sources.<name>.extractor``): trafilatura scored F1 0.93 (zh) / 0.96 (en)
# against a hand-made reference on 32 held-out pages, resiliparse 0.81 / 0.86
# at ~20x the speed (docs/inputs_html_warc.md, bench/html.py).
DEFAULT_EXTRACTOR = "trafilatura"
HTML_TYPES = ("text/html", "application/xhtml+xml")
#: Characters of HTML an extractor is given at most; a longer page is
#: ``read.record_too_large``. trafilatura's time grows about as the square of
#: the page: 2.2 MB 1.4 s, 4.4 MB 4.7 s, 8.9 MB 25 s, 20 MB ~100 s (measured on
#: one core, pages of distinct paragraphs; docs/inputs_html_warc.md), so one
#: 64 MB page would hold a worker for ~15 minutes. 4 Mi characters bounds a
#: page to ~5 s; Common Crawl truncates payloads at 1 MiB. resiliparse is
#: linear (17.8 MB in 0.6 s): no limit but ``ingest.max_record_bytes``.
EXTRACTOR_MAX_CHARS = {"trafilatura": 4 << 20}
# HTTP statuses whose body is a page (anything else: read.http_status).
OK_STATUSES = frozenset({200})
# Bytes scanned for <meta charset>: the WHATWG prescan reads 1,024; pages in
# the wild put long <script>/<style> blocks before it, so a wider window.
META_SCAN_BYTES = 16384
# Bytes handed to charset-normalizer (its own default sample is smaller).
DETECT_BYTES = 65536
# A page decoded with its best charset may keep a few bad bytes (a cut
# multibyte sequence, a stray byte): up to 1% of characters as U+FFFD are
# accepted, more is read.undecodable_html. Our own choice (browsers accept any).
MAX_REPLACEMENT_FRACTION = 0.01

_META_CHARSET = re.compile(rb"<meta[^<>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.I)
_MARKUP = re.compile(rb"<\s*(!doctype|html|head|body|meta|title|div|p|a|span|table|br)\b", re.I)
_GZIP_MEMBER = b"\x1f\x8b\x08"
# Compressed bytes fed to zlib at a time: bounds how far past a cut member's
# end a zlib error may surface (to tell a cut member from a corrupt one).
_FEED = 4096
# Labels decoded with another codec, as browsers do (WHATWG Encoding Standard):
# the GBK family as its superset GB18030, Big5 as Big5-HKSCS (cp950 second:
# Microsoft's extension, e.g. the euro sign), Latin-1 and ASCII as windows-1252.
_ALIASES = {
    "gbk": ("gb18030",), "gb2312": ("gb18030",), "cp936": ("gb18030",), "gb18030": ("gb18030",),
    "big5": ("big5hkscs", "cp950"), "big5hkscs": ("big5hkscs", "cp950"), "cp950": ("cp950", "big5hkscs"),
    "latin_1": ("cp1252",), "ascii": ("cp1252",), "cp1252": ("cp1252",),
}
# Python codecs that are no charset of a web page: UTF-7 (the HTML standard
# forbids it: it smuggles markup past filters), the escape and IDNA
# transforms (``unicode_escape`` turns a page's ``\\u0041`` into ``A``) and
# ``undefined`` (raises on any byte). A label naming one is ignored.
_NOT_PAGE_CODECS = frozenset({"utf-7", "unicode-escape", "raw-unicode-escape", "punycode", "idna", "undefined"})
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


class _Brotli:
    """A ``Content-Encoding: br`` decoder in the shape warcio's readers call
    (``decompress``, ``unused_data``, ``flush``): warcio sets ``unused_data``
    on ``brotli.Decompressor`` itself, which the ``brotli`` package (1.1+)
    refuses (AttributeError: every brotli page was ``read.corrupt_record``).
    Output stops at ``limit`` bytes (set by the reader to
    ``max_record_bytes + 1``): ``overflow`` is then set and the rest is
    discarded, so a brotli bomb (a few KB inflating to GB) costs at most the
    limit; warcio's own gzip path is bounded by deflate's 1032:1 ratio per
    block."""

    unused_data = None

    def __init__(self) -> None:
        import brotli

        self._d = brotli.Decompressor()
        self.limit = 1 << 30
        self.out = 0
        self.overflow = False

    def decompress(self, data: bytes) -> bytes:
        if self.overflow:
            return b""
        room = self.limit - self.out + 1
        got = self._d.process(data, output_buffer_limit=room)[:room]   # the buffer may grow past room by a block
        self.out += len(got)
        if self.out > self.limit or not self._d.can_accept_more_data():
            self.overflow = True
        return got

    def flush(self) -> bytes:
        return b""


def _use_our_brotli() -> None:
    """Register :class:`_Brotli` for warcio's ``br`` content encoding."""
    from warcio.bufferedreaders import BufferedReader

    try:
        import brotli  # noqa: F401
    except ImportError:  # pragma: no cover - brotli absent: warcio leaves br undecoded
        return
    BufferedReader.DECOMPRESSORS["br"] = _Brotli


class UndecodableHTML(ValueError):
    """No charset decodes the page's bytes."""


def codecs_for(label: str | None) -> tuple[str, ...]:
    """Python codecs for a charset label (``"GBK"``, ``"x-gbk"``, ``"utf8"``,
    ``"Big5"``), in the order to try them; ``()`` for an unknown or invalid
    label, or one naming a codec of :data:`_NOT_PAGE_CODECS`."""
    if not label:
        return ()
    label = label.strip().strip("\"'").lower()
    if label.startswith("x-"):
        label = label[2:]
    try:
        name = codecs.lookup(label).name
    except (LookupError, ValueError):  # ValueError: a NUL in the label
        return ()
    if name in _NOT_PAGE_CODECS:
        return ()
    return _ALIASES.get({"iso8859-1": "latin_1"}.get(name, name), (name,))


def http_charset(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a ``Content-Type`` header value, or None."""
    if not content_type:
        return None
    for part in content_type.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    return None


def meta_charset(head: bytes) -> str | None:
    """The charset of the first ``<meta charset=...>`` or ``<meta
    http-equiv="Content-Type" content="...; charset=...">`` in ``head``."""
    m = _META_CHARSET.search(head)
    return m.group(1).decode("ascii", "replace") if m else None


def decode_html(body: bytes, header_charset: str | None = None) -> tuple[str, str, str, int]:
    """Decode a page's bytes: BOM, then ``header_charset`` (from HTTP), then
    the ``<meta>`` charset, then detection (charset-normalizer), each a strict
    decode; when none is strict, the first candidate (in the same order, then
    UTF-8) whose decode with U+FFFD replacement leaves at most
    :data:`MAX_REPLACEMENT_FRACTION` of the characters bad. Time: a few
    decodes of the page, plus detection of its first :data:`DETECT_BYTES`
    bytes when no label decodes it.

    Returns:
        ``(text, codec, source, replaced)``: codec is a Python codec name
        (``gb18030`` for a GBK page), source one of ``bom``, ``http``,
        ``meta``, ``detected``, ``fallback`` (UTF-8 when nothing else was
        found); ``replaced`` the number of U+FFFD characters put in.

    Raises:
        UndecodableHTML: no candidate decodes the bytes.
    """
    for bom, codec in _BOMS:
        if body.startswith(bom):
            text = body[len(bom):].decode(codec, "replace")
            return text, codec, "bom", text.count("\ufffd")
    candidates: list[tuple[str, str]] = []
    for source, label in (("http", header_charset), ("meta", meta_charset(body[:META_SCAN_BYTES]))):
        candidates += [(c, source) for c in codecs_for(label)]
    for codec, source in candidates:
        try:
            return body.decode(codec), codec, source, 0
        except (UnicodeDecodeError, LookupError):
            continue
    detected = _detect(body)
    if detected:
        for codec in codecs_for(detected):
            try:
                return body.decode(codec), codec, "detected", 0
            except (UnicodeDecodeError, LookupError):
                continue
        candidates += [(c, "detected") for c in codecs_for(detected)]
    candidates.append(("utf-8", "fallback"))
    fewest = None
    for codec, source in candidates:  # the first that stays within the limit, in the same order
        text = body.decode(codec, "replace")
        bad = text.count("\ufffd")
        if bad <= MAX_REPLACEMENT_FRACTION * max(len(text), 1):
            return text, codec, source, bad
        fewest = min(fewest or (bad, len(text), codec, source), (bad, len(text), codec, source))
    bad, n, codec, source = fewest
    raise UndecodableHTML(f"{bad} of {n} characters undecodable even as {codec} ({source}), the best of "
                          f"{', '.join(dict.fromkeys(c for c, _ in candidates))}")


def _detect(body: bytes) -> str | None:
    from charset_normalizer import from_bytes

    best = from_bytes(body[:DETECT_BYTES]).best()
    return best.encoding if best is not None else None


def _trafilatura_deep_trees() -> None:
    """Let trafilatura's parser build trees deeper than libxml2's default 256
    levels: its ``HTML_PARSER`` (read by ``trafilatura.utils.load_html`` at
    each call) with the same options plus ``huge_tree=True``. Without it, a
    page with 255+ unclosed tags (old forum pages nest ``<font>`` without
    closing it) parses to its first levels only: the text below them was
    lost, the page kept with its title alone. Nothing else changes for a
    page within the default limits."""
    global _DEEP_PARSER
    from lxml.html import HTMLParser
    from trafilatura import utils

    if _DEEP_PARSER is None or utils.HTML_PARSER is not _DEEP_PARSER:
        _DEEP_PARSER = HTMLParser(collect_ids=False, default_doctype=False, encoding="utf-8", remove_comments=True,
                                  remove_pis=True, huge_tree=True)   # trafilatura's options + huge_tree
        utils.HTML_PARSER = _DEEP_PARSER


_DEEP_PARSER = None


def extract_text(html: str, extractor: str = DEFAULT_EXTRACTOR) -> str:
    """The main text of one page (boilerplate, navigation, scripts removed),
    paragraphs separated by newlines; ``""`` when none is found.

    ``trafilatura``: ``trafilatura.extract`` with tables, without comments or
    metadata, no deduplication (dedup is a stage of its own).
    ``resiliparse``: ``extract_plain_text(main_content=True)`` without alt
    texts or link targets. Time is O(page size).

    Raises:
        ValueError: an unknown extractor. Anything the library raises on a
            page is raised (the reader quarantines it as ``read.extraction_error``).
    """
    if extractor == "trafilatura":
        import trafilatura

        logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
        _trafilatura_deep_trees()
        out = trafilatura.extract(html, include_comments=False, include_tables=True, deduplicate=False,
                                  with_metadata=False, output_format="txt")
        return (out or "").strip()
    if extractor == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        return extract_plain_text(HTMLTree.parse(html), main_content=True, alt_texts=False, links=False,
                                  list_bullets=False).strip()
    raise ValueError(f"unknown extractor {extractor!r} (one of {', '.join(EXTRACTORS)})")


def _page(html: str, meta: dict, file: str, line: int, offset: int, extractor: str,
          where: str) -> Record | Quarantined:
    """One decoded page as a record of its main text, or its quarantine entry."""
    limit = EXTRACTOR_MAX_CHARS.get(extractor)
    if limit is not None and len(html) > limit:
        return Quarantined(file, line, offset, "read.record_too_large",
                           f"{where}{len(html)} characters of HTML > {limit} ({extractor}'s limit)"[:200])
    try:
        text = extract_text(html, extractor)
    except Exception as exc:  # noqa: BLE001 - one page never stops a file
        return Quarantined(file, line, offset, "read.extraction_error", f"{where}{type(exc).__name__}: {exc}"[:200])
    if not text.strip():
        return Quarantined(file, line, offset, "read.empty_extraction",
                           f"{where}no main text in {len(html)} chars of HTML")
    text, nul, bad = _check_text(text, file, line, offset)
    if bad:
        return bad
    meta = {**meta, "extractor": extractor}
    return Record(line, text, json.dumps(meta, ensure_ascii=False, sort_keys=True, default=_json_default), None, nul)


def page_from_bytes(body: bytes, meta: dict, file: str, line: int, offset: int, extractor: str,
                    header_charset: str | None = None, where: str = "") -> Record | Quarantined:
    """Decode (:func:`decode_html`) and extract one page given as bytes."""
    try:
        html, codec, source, replaced = decode_html(body, header_charset)
    except UndecodableHTML as exc:
        return Quarantined(file, line, offset, "read.undecodable_html", f"{where}{exc}"[:200])
    meta = {**meta, "charset": codec, "charset_source": source, "html_bytes": len(body)}
    if replaced:
        meta["charset_replaced"] = replaced
    return _page(html, meta, file, line, offset, extractor, where)


# -- html ---------------------------------------------------------------------------------------------------------

def read_html(path: str | Path, file: str, text_field: str, max_bytes: int, extractor: str,
              storage_options: dict | None = None, id_field: str | None = None) -> Iterator[Record | Quarantined]:
    """Pages of a ``format: html`` input: records of a JSONL/Parquet file
    whose ``text_field`` holds the HTML (a string, or in Parquet also bytes,
    decoded by :func:`decode_html`; the other fields stay in ``meta``;
    ``id_field`` as for JSONL/Parquet), or the whole file as one page (line
    1). See the module doc. Memory: one page (JSONL), one batch of
    :data:`PARQUET_BATCH` rows (Parquet)."""
    container = detect_format(path)
    if container == "jsonl":
        for item in read_jsonl(path, file, text_field, max_bytes, id_field, storage_options):
            if isinstance(item, Quarantined):
                yield item
                continue
            meta = json.loads(item.meta)
            meta.update({"charset": "str", "charset_source": "str", "html_chars": len(item.text)})
            page = _page(item.text, meta, file, item.line, 0, extractor, "")
            if isinstance(page, Record):
                page.doc_id = item.doc_id
            yield page
        return
    if container == "parquet":
        yield from _read_html_parquet(path, file, text_field, max_bytes, extractor, storage_options, id_field)
        return
    with _open_binary(path, storage_options) as stream:
        body = stream.read(max_bytes + 1)
    if len(body) > max_bytes:
        yield Quarantined(file, 1, 0, "read.record_too_large", f"> {max_bytes} bytes")
    elif not _MARKUP.search(body[:META_SCAN_BYTES]):
        yield Quarantined(file, 1, 0, "read.not_html", f"no HTML markup in the first {META_SCAN_BYTES} bytes")
    else:
        yield page_from_bytes(body, {}, file, 1, 0, extractor)


# Rows of a Parquet file of pages read at a time (pages are ~10-100 KB, not
# the ~1 KB of a text row: the Parquet reader's 4,096 would hold ~400 MB).
PARQUET_BATCH = 256


def _read_html_parquet(path, file: str, text_field: str, max_bytes: int, extractor: str,
                       storage_options: dict | None, id_field: str | None) -> Iterator[Record | Quarantined]:
    import pyarrow.parquet as pq

    with open_input(path, storage_options) as fh:
        pf = pq.ParquetFile(fh)
        if text_field not in pf.schema_arrow.names:
            raise ValueError(f"{file}: no column {text_field!r} (columns: {', '.join(pf.schema_arrow.names)})")
        row = 0
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH):
            cols = batch.to_pydict()
            pages = cols.pop(text_field)
            for i, page in enumerate(pages):
                row += 1
                try:
                    meta = _parquet_meta({k: v[i] for k, v in cols.items()})
                    doc_id = None
                    if id_field is not None:
                        doc_id = meta.get(id_field)
                        if doc_id is None or doc_id == "":
                            yield Quarantined(file, row, 0, "read.missing_id", f"{id_field}={doc_id!r:.40}")
                            continue
                        doc_id = str(doc_id)
                    if page is None:
                        item = Quarantined(file, row, 0, "read.missing_text", "no HTML")
                    elif isinstance(page, bytes):
                        item = (Quarantined(file, row, 0, "read.record_too_large", f"> {max_bytes} bytes")
                                if len(page) > max_bytes else page_from_bytes(page, meta, file, row, 0, extractor))
                    else:
                        item = _page(str(page), {**meta, "charset": "str", "charset_source": "str",
                                                 "html_chars": len(str(page))}, file, row, 0, extractor, "")
                    if isinstance(item, Record):
                        item.doc_id = doc_id
                except Exception as exc:  # noqa: BLE001 - one row never stops a file
                    item = _record_error(exc, file, row, 0)
                yield item


# -- warc ---------------------------------------------------------------------------------------------------------

def _gzip_members(stream, max_bytes: int) -> Iterator[tuple[int, bytes | None, str | None]]:
    """``(byte offset, decompressed member or None, problem or None)`` for
    each gzip member of a stream. Problems: ``truncated`` (the stream ends
    inside the member), ``corrupt: <zlib message>``, ``too_large`` (more
    than ``max_bytes`` decompressed: decoded to its end without being kept).
    After a truncated or corrupt member the scan resumes one byte after its
    start, at the next gzip magic (``1f 8b 08``), so the members after a cut
    one are still read; after a too-large one (cut or not), at the point its
    decoding stopped. Memory: one member's compressed bytes plus at most
    ``max_bytes`` of its content (a too-large member's compressed bytes are
    dropped as they are decoded)."""
    buf = b""
    base = 0  # file offset of buf[0]
    eof = False

    def fill() -> bool:
        nonlocal buf, eof
        chunk = b"" if eof else stream.read(1 << 20)
        if not chunk:
            eof = True
            return False
        buf += chunk
        return True

    while True:
        start = buf.find(_GZIP_MEMBER)
        while start < 0:
            if eof:
                return
            drop = max(len(buf) - 2, 0)
            base, buf = base + drop, buf[drop:]
            fill()
            start = buf.find(_GZIP_MEMBER)
        base, buf = base + start, buf[start:]
        offset = base
        d = zlib.decompressobj(31)
        out: list[bytes] = []
        size = pos = 0
        problem = None
        while True:
            if size > max_bytes and pos:  # too large: no rescan will come, keep no compressed bytes
                base, buf, pos = base + pos, buf[pos:], 0
            if pos >= len(buf) and not fill():
                problem = "truncated"
                break
            fed = min(len(buf), pos + _FEED)
            try:
                piece = d.decompress(buf[pos:fed], 1 << 20)
            except zlib.error as exc:
                # A member cut short runs into the next one: zlib fails on
                # the next member's bytes. Fed in steps of _FEED bytes, so the
                # failure lies within _FEED bytes after the next magic.
                cut = buf.find(_GZIP_MEMBER, 1, fed) if size <= max_bytes else -1
                problem = f"truncated (next member at byte {base + cut})" if cut > 0 else f"corrupt: {exc}"
                break
            pos = fed - len(d.unconsumed_tail) - len(d.unused_data)
            size += len(piece)
            if size <= max_bytes:
                out.append(piece)
            else:
                out.clear()
            if d.eof:
                break
        if size > max_bytes:  # the caller streams it again, and sees its end (or its cut) itself
            base, buf = base + pos, buf[pos:]
            yield offset, None, "too_large"
            continue
        if problem is None:
            base, buf = base + pos, buf[pos:]
            yield offset, b"".join(out), None
            continue
        yield offset, None, problem
        base, buf = base + 1, buf[1:]


def _warc_records(data, file: str, first_line: int, base_offset: int, max_bytes: int, extractor: str,
                  member_offset: int | None = None, starts: list[int] | None = None
                  ) -> Iterator[tuple[int, Record | Quarantined | None]]:
    """``(records seen, item)`` for each record of a WARC/ARC byte stream
    (uncompressed: one gzip member's content, or a whole plain file); item
    None for a record that is not a response. Each record's offset is
    appended to ``starts`` when given. Raises what warcio raises on data
    that is not a record (the caller quarantines it)."""
    from warcio.archiveiterator import ArchiveIterator

    _use_our_brotli()
    # ARC records stay ARC (arc2warc would invent a random WARC-Record-ID: not deterministic)
    it = ArchiveIterator(data, arc2warc=False, check_digests=False)
    line = first_line
    for record in it:
        offset = base_offset + it.offset  # the record's start (get_record_offset() would read it to its end)
        if starts is not None:
            starts.append(offset)
        try:
            item = _warc_item(record, file, line, offset, max_bytes, extractor, member_offset)
        except Exception as exc:  # noqa: BLE001 - one record never stops a file
            item = _record_error(exc, file, line, offset)
        yield 1, item
        line += 1


def _warc_item(record, file: str, line: int, offset: int, max_bytes: int, extractor: str,
               member_offset: int | None = None) -> Record | Quarantined | None:
    if record.rec_type != "response":
        return None
    h = record.rec_headers
    if record.format == "arc":  # ARC: no record id; the date is YYYYMMDDhhmmss
        url = h.get_header("uri") or ""
        date = h.get_header("archive-date") or ""
        date = (f"{date[:4]}-{date[4:6]}-{date[6:8]}T{date[8:10]}:{date[10:12]}:{date[12:14]}Z"
                if len(date) == 14 and date.isdigit() else date or None)
        meta = {"url": url, "warc_date": date, "warc_record_id": None, "warc_offset": offset}
    else:
        url = h.get_header("WARC-Target-URI") or ""
        meta = {"url": url, "warc_date": h.get_header("WARC-Date"),
                "warc_record_id": h.get_header("WARC-Record-ID"), "warc_offset": offset}
    where = f"{url}: " if url else ""
    if member_offset is not None:
        meta["warc_member_offset"] = member_offset
    http = record.http_headers
    if http is None:
        return Quarantined(file, line, offset, "read.not_html", f"{where}no HTTP headers")
    try:
        status = int(http.get_statuscode() or 0)
    except ValueError:
        status = 0
    ctype = http.get_header("Content-Type") or ""
    meta.update({"http_status": status, "content_type": ctype})
    if status not in OK_STATUSES:
        return Quarantined(file, line, offset, "read.http_status", f"{where}HTTP {status}")
    mime = ctype.split(";")[0].strip().lower()
    if mime not in HTML_TYPES:
        return Quarantined(file, line, offset, "read.not_html", f"{where}Content-Type {ctype or 'missing'!r}"[:200])
    try:
        stream = record.content_stream()
        decoder = getattr(stream, "decompressor", None)
        if isinstance(decoder, _Brotli):
            decoder.limit = max_bytes + 1
        body = stream.read(max_bytes + 1)
    except Exception as exc:  # noqa: BLE001 - bad chunking/encoding in one record
        return Quarantined(file, line, offset, "read.corrupt_record", f"{where}{type(exc).__name__}: {exc}"[:200])
    if len(body) > max_bytes or isinstance(decoder, _Brotli) and decoder.overflow:
        return Quarantined(file, line, offset, "read.record_too_large", f"{where}> {max_bytes} bytes")
    left = getattr(record.raw_stream, "limit", 0)
    if left:
        return Quarantined(file, line, offset, "read.truncated_record",
                           f"{where}{left} bytes short of Content-Length {record.length}")
    return page_from_bytes(body, meta, file, line, offset, extractor, http_charset(ctype), where)


def read_warc(path: str | Path, file: str, max_bytes: int, extractor: str,
              storage_options: dict | None = None) -> Iterator[Record | Quarantined]:
    """Pages of a WARC/ARC file (see the module doc): gzip per record
    (``.warc.gz``, ``.arc.gz``: each member read on its own, a bad one
    quarantined and skipped, :func:`_gzip_members`) or uncompressed
    (``.warc``: streamed; a record cut short is ``read.truncated_record``, and
    data that does not parse as a record is one ``read.corrupt_record``, after
    which reading resumes at the next ``WARC/1.x`` line past the last record
    read, :func:`_next_warc_header`; a stream that cannot seek ends there).
    Warcio's warnings on records whose length is off go to stderr."""
    with open_input(path, storage_options) as raw:
        stream = raw if hasattr(raw, "peek") else io.BufferedReader(raw, 1 << 20)
        line = 1
        if stream.peek(3)[:3] != _GZIP_MEMBER:
            base = 0
            while True:
                starts = [base]  # the records' starts (warcio's are from tell()): a resync looks past the last
                try:
                    for n, item in _warc_records(stream, file, line, 0, max_bytes, extractor, starts=starts):
                        line += n
                        if item is not None:
                            yield item
                    return
                except Exception as exc:  # noqa: BLE001 - what was read stays read
                    yield Quarantined(file, line, -1, "read.corrupt_record", f"{type(exc).__name__}: {exc}"[:200])
                    line += 1
                base = _next_warc_header(stream, starts[-1] + 1) if stream.seekable() else None
                if base is None:
                    return
                stream.seek(base)
        for offset, member, problem in _gzip_members(stream, max_bytes):
            if problem == "too_large":
                # More than one record may hold: a whole file gzipped as one
                # stream (not per record). Streamed through warcio from the
                # member's start, in bounded memory.
                line = yield from _stream_member(path, file, offset, line, max_bytes, extractor, storage_options)
                continue
            if problem is not None:
                reason = ("read.truncated_record" if problem.startswith("truncated") else
                          "read.record_too_large" if problem == "too_large" else "read.corrupt_record")
                yield Quarantined(file, line, offset, reason, f"gzip member at byte {offset}: {problem}"[:200])
                line += 1
                continue
            before = line
            try:
                for n, item in _warc_records(io.BytesIO(member), file, line, offset, max_bytes, extractor):
                    line += n
                    if item is not None:
                        yield item
            except Exception as exc:  # noqa: BLE001 - one member never stops a file
                yield Quarantined(file, line, offset, "read.corrupt_record",
                                  f"gzip member at byte {offset}: {type(exc).__name__}: {exc}"[:200])
                line += 1
            if line == before:  # an empty member still takes a place, so later ordinals do not move
                line += 1


_WARC_HEADER = re.compile(rb"\n(WARC/1\.[01]\r?\n)")


def _next_warc_header(raw, start: int, block: int = 1 << 20) -> int | None:
    """The offset of the first ``WARC/1.0`` or ``WARC/1.1`` line at or after
    ``start`` in the seekable binary stream ``raw`` (a line start), or None:
    where an uncompressed WARC is read again after a record that does not
    parse (a wrong ``Content-Length``, line ends rewritten by an editor).
    Reads blocks of ``block`` bytes: O(bytes skipped)."""
    at = start
    raw.seek(max(start - 1, 0))
    carry = b"\n" if start == 0 else raw.read(1)   # the byte before start: a header starts a line
    while True:
        data = raw.read(block)
        if not data:
            return None
        window = carry + data
        m = _WARC_HEADER.search(window)
        if m is not None:
            return at - len(carry) + m.start(1)
        carry = window[-10:]
        at += len(data)


class _OneMember(io.RawIOBase):
    """The decompressed bytes of the one gzip member that starts at the
    stream's position. A stream that ends inside the member ends the bytes
    too, and sets :attr:`truncated` (raising would lose the bytes a buffered
    reader holds)."""

    def __init__(self, raw):
        self._raw = raw
        self._d = zlib.decompressobj(31)
        self._pending = b""
        self.truncated = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._pending and not self._d.eof and not self.truncated:
            chunk = self._d.unconsumed_tail or self._raw.read(1 << 16)
            if not chunk:
                self.truncated = True
                break
            self._pending = self._d.decompress(chunk, 1 << 20)
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _stream_member(path, file: str, offset: int, line: int, max_bytes: int, extractor: str,
                   storage_options: dict | None) -> Generator[Record | Quarantined, None, int]:
    """The records of a gzip member too large to hold (a WARC gzipped whole,
    or one huge record), streamed: every record's ``warc_offset`` is its
    offset in the member's decompressed bytes, ``warc_member_offset`` the
    member's offset in the file. A huge record is ``read.record_too_large``
    as usual; a member cut short ends with ``read.truncated_record``."""
    n = line
    last = None
    with open_input(path, storage_options) as raw:
        raw.seek(offset)
        member = _OneMember(raw)
        stream = io.BufferedReader(member, 1 << 20)
        try:
            for step, item in _warc_records(stream, file, line, 0, max_bytes, extractor, offset):
                n += step
                if item is not None:
                    last = item
                    yield item
        except Exception as exc:  # noqa: BLE001 - what was read stays read
            last = Quarantined(file, n, offset, "read.corrupt_record",
                               f"gzip member at byte {offset}: {type(exc).__name__}: {exc}"[:200])
            yield last
            n += 1
        if member.truncated and getattr(last, "reason", None) not in ("read.truncated_record", "read.corrupt_record"):
            yield Quarantined(file, n, offset, "read.truncated_record",
                              f"gzip member at byte {offset}: the file ends inside it")
            n += 1
    return n
