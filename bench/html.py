"""Main-text extraction from HTML: quality against a hand-made reference, and speed.

Pages: 32 raw pages of ``../shared/corpus-multi/multi-html-raw.jsonl.zst``
(16 Chinese: every held-out zh page, Simplified and Traditional; 16 English
held-out pages of all five manuals), all from the held-out part of
:mod:`bench.multi_split` (nothing was tuned on them: both extractors run with
the options of :func:`pipeline.html.extract_text`, chosen before this
measurement). The reference (``bench/data/html_refs/refs.jsonl``, one JSON
object per page: ``id`` of the raw page, ``lang``, ``text``, ``edits``) is
the main text as we judge it: the page's text from ``multi-manuals`` (the
corpus's rule-based extraction, navigation bars, sidebars and footers removed)
with what is still navigation taken out: the in-page table of contents (cut
by a small script, its removed paragraphs and each page's opening checked by
eye), a generation timestamp, an in-page section list (the ``edits`` of each
page). Not a text typed from scratch: an extractor that reproduces the
corpus's own rules would score close to 1.

Score: bag-of-tokens precision, recall and F1 of the extracted text against
the reference, per page, averaged per language. Tokens: each CJK character
(Han, kana) is a token, other runs of word characters are words (lower case);
so Chinese is scored by characters and English by words.

Speed: pages/s and MB/s (UTF-8 bytes of HTML in) on one core, the same pages,
:func:`pipeline.html.extract_text` called in this process.

Result: ``html.json`` under the output directory; Markdown returned.
"""

from __future__ import annotations

import io
import json
import re
import statistics
import time
from collections import Counter
from pathlib import Path

REFS = Path(__file__).resolve().parent / "data" / "html_refs" / "refs.jsonl"
# ../shared next to the repository (a worktree under /work/wt/<name> looks two levels up)
RAW = next((p for p in (Path(__file__).resolve().parents[n] / "shared" / "corpus-multi" / "multi-html-raw.jsonl.zst"
                        for n in (2, 3)) if p.exists()),
           Path(__file__).resolve().parents[2] / "shared" / "corpus-multi" / "multi-html-raw.jsonl.zst")
EXTRACTORS = ("trafilatura", "resiliparse")
_CJK = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W{_CJK}]+")


def tokens(text: str) -> Counter:
    """Bag of tokens: one per CJK character, one per other word (lower case)."""
    return Counter(_TOKEN.findall(text.lower()))


def prf(extracted: str, reference: str) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``extracted``'s tokens against ``reference``'s."""
    got, want = tokens(extracted), tokens(reference)
    common = sum((got & want).values())
    p = common / max(sum(got.values()), 1)
    r = common / max(sum(want.values()), 1)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def load_pages(raw_path: Path = RAW, refs_path: Path = REFS) -> list[dict]:
    """The reference pages with their raw HTML: ``[{id, lang, html, ref}]``,
    in the order of the reference file."""
    import zstandard

    refs = [json.loads(line) for line in refs_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    want = {r["id"] for r in refs}
    html = {}
    with open(raw_path, "rb") as fh:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
            rec = json.loads(line)
            if rec["id"] in want:
                html[rec["id"]] = rec["text"]
    return [{"id": r["id"], "lang": r["lang"], "html": html[r["id"]], "ref": r["text"]} for r in refs]


def measure(pages: list[dict], extractors=EXTRACTORS) -> dict:
    """Per extractor: per-language mean precision/recall/F1, per-page F1, and
    one-core speed over ``pages``."""
    from pipeline.html import extract_text

    out = {}
    html_bytes = sum(len(p["html"].encode("utf-8")) for p in pages)
    for name in extractors:
        extract_text(pages[0]["html"], name)  # imports and warm-up outside the clock
        texts = []
        t0 = time.process_time()
        for p in pages:
            texts.append(extract_text(p["html"], name))
        cpu = time.process_time() - t0
        per_page = {}
        by_lang: dict[str, list[tuple[float, float, float]]] = {}
        for p, text in zip(pages, texts):
            score = prf(text, p["ref"])
            per_page[p["id"]] = round(score[2], 4)
            by_lang.setdefault(p["lang"], []).append(score)
        langs = {lang: {k: round(sum(s[i] for s in scores) / len(scores), 4)
                        for i, k in enumerate(("precision", "recall", "f1"))}
                 | {"median_f1": round(statistics.median(s[2] for s in scores), 4),
                    "min_f1": round(min(s[2] for s in scores), 4), "pages": len(scores)}
                 for lang, scores in sorted(by_lang.items())}
        out[name] = {"by_lang": langs, "per_page_f1": per_page, "cpu_s": round(cpu, 3),
                     "pages_per_s": round(len(pages) / cpu, 1), "mb_per_s": round(html_bytes / 1e6 / cpu, 2),
                     "empty": sum(not t.strip() for t in texts)}
    return {"pages": len(pages), "html_mb": round(html_bytes / 1e6, 2), "extractors": out,
            "warc_reader": measure_warc(pages, extractors)}


def measure_warc(pages: list[dict], extractors=EXTRACTORS) -> dict:
    """The whole WARC path on one core: the pages written as a ``.warc.gz``
    (gzip per record, their charset in the HTTP header), then read back by
    :func:`pipeline.html.read_warc` (gzip, warcio, charset, extraction).
    ``{extractor: {"pages_per_s", "mb_per_s" (HTML bytes), "documents"}}``."""
    import tempfile

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from pipeline.html import read_warc
    from pipeline.readers import Record

    html_bytes = sum(len(p["html"].encode("utf-8")) for p in pages)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pages.warc.gz"
        with open(path, "wb") as fh:
            writer = WARCWriter(fh, gzip=True)
            for p in pages:
                http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")],
                                        protocol="HTTP/1.1")
                writer.write_record(writer.create_warc_record(
                    "https://debian.example/" + p["id"], "response",
                    payload=io.BytesIO(p["html"].encode("utf-8")), http_headers=http))
        for name in extractors:
            t0 = time.process_time()
            docs = sum(isinstance(item, Record) for item in read_warc(path, path.name, 1 << 26, name))
            cpu = time.process_time() - t0
            out[name] = {"pages_per_s": round(len(pages) / cpu, 1), "mb_per_s": round(html_bytes / 1e6 / cpu, 2),
                         "documents": docs}
    return out


def run(out: Path) -> str:
    """The ``make bench`` topic: writes ``html.json``, returns Markdown."""
    if not RAW.exists():
        return f"## HTML extraction\n\nskipped: {RAW} not found"
    result = measure(load_pages())
    out.mkdir(parents=True, exist_ok=True)
    (out / "html.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    lines = ["## HTML extraction (32 held-out pages of corpus-multi vs a hand-made reference; one core)", "",
             "| extractor | zh P | zh R | zh F1 | zh F1 median / min | en P | en R | en F1 | en F1 median / min "
             "| pages/s | MB/s | empty |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["extractors"].items():
        zh, en = r["by_lang"].get("zh", {}), r["by_lang"].get("en", {})
        lines.append(f"| {name} | {zh.get('precision')} | {zh.get('recall')} | {zh.get('f1')} | "
                     f"{zh.get('median_f1')} / {zh.get('min_f1')} | {en.get('precision')} | {en.get('recall')} | "
                     f"{en.get('f1')} | {en.get('median_f1')} / {en.get('min_f1')} | {r['pages_per_s']} | "
                     f"{r['mb_per_s']} | {r['empty']} |")
    lines.append(f"\n{result['pages']} pages, {result['html_mb']} MB of HTML. The whole WARC path (gzip per record, "
                 "warcio, charset, extraction), same pages as one .warc.gz: " + "; ".join(
                     f"{name} {r['pages_per_s']} pages/s, {r['mb_per_s']} MB/s ({r['documents']} documents)"
                     for name, r in result["warc_reader"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench-results")))
