"""Synthetic-but-realistic scale corpora made from the development corpus.

Two generators, both streaming (records are produced in bounded batches and
written through one zstd stream per output file; nothing holds a whole
output in memory) and deterministic (every random choice is seeded from
``seed`` and the ids involved):

* :func:`replicate` writes ``factor`` copies of every record of
  ``/work/shared/corpus``: copy 0 is the original line, byte for byte; copy
  ``c > 0`` gets the id ``<id>#c<c>`` and ~5% random edits (:func:`edit_text`),
  so that exact and MinHash dedup keep the copies while they stay realistic
  near-copies. **Record order**: per file, copy 0 of every record (in input
  order), then copy 1 of every record, and so on -- blocked, not interleaved,
  so a record's copies are far apart (different partitions, outside zstd's
  window), as near-duplicates are in a real crawl.
* :func:`large_kept_text` writes big documents (at most 1 MiB of text and
  90% of the heuristics' word limit: 0.44-1.0 MiB), each a concatenation of
  distinct documents of one language and source (a *pool*, e.g. Japanese man
  pages), every piece edited with its own seed, until the generated text is
  ``target_bytes`` UTF-8 bytes; pools and pieces are chosen so that the
  build's quality filters keep (almost) all of it.

Run ``python -m bench.scale_data --factor 4 --out DIR`` or ``--large --out
DIR`` to generate without building (``bench.scale`` calls the functions).
Units: sizes are bytes (``MiB`` = 2**20 bytes), ``chars`` are Python
``len(text)`` (code points).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import multiprocessing
import random
import re
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import zstandard

from common.io import commit, temp_path
from pipeline.config import REPO_ROOT

SHARED_CORPUS = REPO_ROOT.parent / "shared" / "corpus"
# The development corpus files (``<name>.jsonl.zst``) in output order.
DEV_FILES = ("dev-fortunes", "dev-manpages", "dev-kjv", "dev-debref", "dev-code")
EDIT_RATE = 0.05          # share of words (or CJK characters) edited in a copy
ZSTD_LEVEL = 3            # the zstd CLI's default level
BATCH_BYTES = 4 << 20     # uncompressed JSONL bytes per worker task (replicate)
MIB = 1 << 20
# Languages whose text is edited (and compared) by characters, not words: the
# dedup stage shingles these by characters too (stages.text.CJK_LANGS).
CJK_LANGS = frozenset({"zh", "ja", "ko", "yue", "wuu"})
# Ideographs (with extension A and compatibility forms), kana, hangul.
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")
_WS_SPLIT_RE = re.compile(r"(\s+)")
_NONSPACE_RE = re.compile(r"\S")
# Upper bound of the heuristics stage's word count (stages.text.words): every
# CJK character one word (rjieba joins zh characters, so it finds fewer), else
# runs of letters and digits.
_WORDISH_RE = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]+")


# ----------------------------------------------------------------------------- edits

def edit_rng(seed: int, key: str, copy: int) -> random.Random:
    """A ``random.Random`` seeded by BLAKE2b of (seed, key, copy): the same
    edits on every run and machine, independent of processing order."""
    digest = hashlib.blake2b(f"{seed}\x00{key}\x00{copy}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def is_cjk_text(text: str, lang: str | None) -> bool:
    """True when ``text`` is edited by characters: its declared language is
    CJK, or (no CJK language declared) most of its non-space characters are in
    CJK ranges."""
    if lang in CJK_LANGS:
        return True
    nonspace = len(text) - sum(text.count(ws) for ws in (" ", "\n", "\t"))
    return nonspace > 0 and len(_CJK_RE.findall(text)) > 0.5 * nonspace


def _positions(n: int, rate: float, rng: random.Random) -> list[int]:
    """Each of ``range(n)`` independently with probability ``rate`` (geometric
    gaps, so the cost is per edit, not per item); at least one when n > 0."""
    out = []
    log_q = math.log1p(-rate)
    i = int(math.log(1.0 - rng.random()) / log_q)
    while i < n:
        out.append(i)
        i += 1 + int(math.log(1.0 - rng.random()) / log_q)
    if not out and n:
        out.append(rng.randrange(n))
    return out


def _other(pool: list[str], current: str, rng: random.Random) -> str:
    """A random item of ``pool`` different from ``current`` (a few tries)."""
    for _ in range(8):
        pick = pool[rng.randrange(len(pool))]
        if pick != current:
            return pick
    return pick


def edit_text(text: str, rng: random.Random, cjk: bool, rate: float = EDIT_RATE) -> str:
    """``text`` with ~``rate`` of its units edited, line structure kept.

    Space-separated text (``cjk`` False): each word (whitespace-separated
    token) is edited with probability ``rate``: replaced by another word of
    the same document (70%), deleted with the spaces after it (15%; a line
    break after it is kept), or duplicated (15%). CJK text (``cjk`` True):
    each non-space character is replaced, with probability ``rate``, by
    another non-space character of the same document. At least one unit is
    edited, so no copy equals its original by construction (a replacement
    may still, rarely, reproduce it). Whitespace and line breaks are never
    changed except by a word deletion's trailing spaces.
    """
    if cjk:
        chars = list(text)
        nonspace = [m.start() for m in _NONSPACE_RE.finditer(text)]
        if not nonspace:
            return text
        pool = [chars[i] for i in nonspace]
        for k in _positions(len(nonspace), rate, rng):
            i = nonspace[k]
            chars[i] = _other(pool, chars[i], rng)
        return "".join(chars)
    tokens = _WS_SPLIT_RE.split(text)      # words at even indices, separators at odd
    slots = [i for i in range(0, len(tokens), 2) if tokens[i]]
    if not slots:
        return text
    pool = [tokens[i] for i in slots]
    for k in _positions(len(slots), rate, rng):
        i = slots[k]
        op = rng.random()
        if op < 0.70:
            tokens[i] = _other(pool, tokens[i], rng)
        elif op < 0.85:
            tokens[i] = ""
            if i + 1 < len(tokens) and "\n" not in tokens[i + 1] and i > 0:
                tokens[i + 1] = ""          # drop the spaces after a deleted inner word
        else:
            tokens[i] = f"{tokens[i]} {tokens[i]}"
    return "".join(tokens)


def copy_record(record: dict[str, Any], copy: int, seed: int) -> dict[str, Any]:
    """Copy ``copy`` (> 0) of a development-corpus record: id ``<id>#c<copy>``,
    text edited by :func:`edit_text` with an rng from (seed, id, copy); the
    other fields unchanged."""
    text = record.get("text") or ""
    rng = edit_rng(seed, record["id"], copy)
    return {**record, "id": f"{record['id']}#c{copy}",
            "text": edit_text(text, rng, is_cjk_text(text, record.get("lang")))}


# ----------------------------------------------------------------------------- similarity

def shingles(text: str, cjk: bool, n: int = 5) -> set[tuple[str, ...] | str]:
    """The set of word ``n``-grams of casefolded, whitespace-split ``text``
    (``cjk``: character ``n``-grams of its non-space characters). A text with
    fewer than ``n`` units is one shingle."""
    if cjk:
        units = "".join(text.casefold().split())
        return {units[i:i + n] for i in range(max(1, len(units) - n + 1))}
    words = text.casefold().split()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity ``|a & b| / |a | b|`` (1.0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def _pipeline_jaccard() -> Callable[[str, str, str | None], float] | None:
    """The dedup stage's own exact shingle Jaccard (its normalization, word
    or character shingles by language, 5-grams), or None when
    ``stages.dedup`` cannot be imported."""
    try:
        from stages import dedup as dm
    except Exception:  # noqa: BLE001 - the pipeline is optional for this measurement
        return None

    def similarity(a: str, b: str, lang: str | None) -> float:
        na, nb = (dm.near_normalize(dm.exact_normalize(t)) for t in (a, b))
        char = dm.uses_char_shingles(na, lang)
        ha, hb = (set(dm.shingle_hashes(t, char, 5, 5).tolist()) for t in (na, nb))
        return jaccard(ha, hb)

    return similarity


def copy_similarity(corpus: Path = SHARED_CORPUS, pairs: int = 200, per_file: int = 40,
                    seed: int = 0) -> dict[str, Any]:
    """Exact 5-gram shingle Jaccard of (original, copy 1) pairs.

    ``pairs`` records drawn uniformly from all records (reservoir sample,
    seeded), plus ``per_file`` records of each file. Copy 1 is recomputed
    with :func:`copy_record` (deterministic, so it is the text
    :func:`replicate` writes). Reports the median over the uniform sample and
    per file, by :func:`shingles` (``brief``) and, when importable, by the
    dedup stage's own normalization and shingles (``pipeline``).
    """
    rng = random.Random(seed)
    uniform: list[dict] = []
    by_file: dict[str, list[dict]] = {}
    seen = 0
    for name in DEV_FILES:
        reservoir: list[dict] = []
        for k, (_, record) in enumerate(_read_records(corpus / f"{name}.jsonl.zst")):
            seen += 1
            if len(uniform) < pairs:
                uniform.append(record)
            elif (j := rng.randrange(seen)) < pairs:
                uniform[j] = record
            if len(reservoir) < per_file:
                reservoir.append(record)
            elif (j := rng.randrange(k + 1)) < per_file:
                reservoir[j] = record
        by_file[name] = reservoir
    pipe = _pipeline_jaccard()

    def measure(records: list[dict]) -> dict[str, float | None]:
        brief, piped = [], []
        for rec in records:
            text, lang = rec.get("text") or "", rec.get("lang")
            other = copy_record(rec, 1, seed)["text"]
            cjk = is_cjk_text(text, lang)
            brief.append(jaccard(shingles(text, cjk), shingles(other, cjk)))
            if pipe is not None:
                piped.append(pipe(text, other, lang))
        return {"pairs": len(records), "median_brief": round(statistics.median(brief), 4),
                "p10_brief": round(_quantile(brief, 0.1), 4), "p90_brief": round(_quantile(brief, 0.9), 4),
                "median_pipeline": round(statistics.median(piped), 4) if piped else None,
                "share_pipeline_ge_0.8": round(sum(j >= 0.8 for j in piped) / len(piped), 4) if piped else None}

    return {"uniform": measure(uniform), "per_file": {n: measure(r) for n, r in by_file.items() if r}}


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# ----------------------------------------------------------------------------- io

def _read_lines(path: Path) -> Iterator[bytes]:
    """The raw lines (with ``\\n``) of a zstd-compressed file, streamed."""
    with open(path, "rb") as fh:
        reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True),
                                   buffer_size=1 << 20)
        yield from reader


def _read_records(path: Path) -> Iterator[tuple[bytes, dict]]:
    for line in _read_lines(path):
        if line.strip():
            yield line, json.loads(line)


class ZstdJsonlWriter:
    """One zstd stream (level :data:`ZSTD_LEVEL`, one frame) to ``path``,
    written under a temporary name and renamed on :meth:`close`
    (:func:`common.io.temp_path`, :func:`common.io.commit`)."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp = temp_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.tmp, "wb")
        self._zw = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(self._fh, closefd=False)
        self.raw_bytes = 0          # uncompressed bytes written

    def write(self, data: bytes) -> None:
        self._zw.write(data)
        self.raw_bytes += len(data)

    def close(self) -> int:
        """Finish the frame, rename into place; returns the compressed size in bytes."""
        self._zw.close()
        self._fh.close()
        commit(self.tmp, self.path)
        return self.path.stat().st_size

    def abort(self) -> None:
        self._zw.close()
        self._fh.close()
        self.tmp.unlink(missing_ok=True)


def _dump(record: dict) -> bytes:
    # The development corpus's own format: json.dumps defaults, ensure_ascii=False.
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _ordered(pool: ProcessPoolExecutor, tasks: Iterator[tuple[Callable, tuple]], window: int) -> Iterator[Any]:
    """Results of ``fn(*args)`` for each task, in task order, with at most
    ``window`` tasks in flight (bounded memory)."""
    pending: deque[Future] = deque()
    for fn, args in tasks:
        pending.append(pool.submit(fn, *args))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


# ----------------------------------------------------------------------------- replicate

def _replicate_batch(lines: list[bytes], copy: int, seed: int) -> tuple[bytes, int, int]:
    """Worker task: ``(JSONL bytes, documents, chars)`` of copy ``copy`` of
    the records in ``lines`` (copy 0: the lines themselves)."""
    out: list[bytes] = []
    chars = 0
    for line in lines:
        record = json.loads(line)
        if copy == 0:
            out.append(line if line.endswith(b"\n") else line + b"\n")
            chars += len(record.get("text") or "")
        else:
            rec = copy_record(record, copy, seed)
            chars += len(rec["text"])
            out.append(_dump(rec))
    return b"".join(out), len(lines), chars


def _batches(path: Path, copy: int, seed: int) -> Iterator[tuple[Callable, tuple]]:
    batch: list[bytes] = []
    size = 0
    for line in _read_lines(path):
        if not line.strip():
            continue
        batch.append(line)
        size += len(line)
        if size >= BATCH_BYTES:
            yield _replicate_batch, (batch, copy, seed)
            batch, size = [], 0
    if batch:
        yield _replicate_batch, (batch, copy, seed)


def replicate(factor: int, out_dir: Path, seed: int = 0, corpus: Path = SHARED_CORPUS,
              workers: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``out_dir/<name>.jsonl.zst`` for each development-corpus file
    with ``factor`` copies of every record (see the module docstring for the
    copies and their order).

    Args:
        factor: copies per record (>= 1; 1 writes the corpus unchanged).
        out_dir: output directory (created).
        seed: edit seed.
        corpus: the development corpus directory.
        workers: processes that make the copies.
        log: a ``print``-like function.

    Returns:
        ``{"factor", "files": {name: {"documents", "chars", "raw_bytes",
        "compressed_bytes"}}, "documents", "chars", "raw_bytes",
        "compressed_bytes", "seconds"}`` (bytes of the JSONL, uncompressed
        and zstd-compressed).
    """
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    files: dict[str, dict[str, int]] = {}
    with _pool(workers) as pool:
        for name in DEV_FILES:
            src = corpus / f"{name}.jsonl.zst"
            if not src.exists():
                continue
            writer = ZstdJsonlWriter(out_dir / src.name)
            docs = chars = 0
            try:
                tasks = (t for c in range(factor) for t in _batches(src, c, seed))
                for data, n, ch in _ordered(pool, tasks, window=2 * workers + 1):
                    writer.write(data)
                    docs += n
                    chars += ch
            except BaseException:
                writer.abort()
                raise
            raw = writer.raw_bytes
            files[src.name] = {"documents": docs, "chars": chars, "raw_bytes": raw,
                               "compressed_bytes": writer.close()}
            log(f"  {src.name}: {docs:,} documents, {chars:,} chars, {raw / MIB:,.1f} MiB JSONL, "
                f"{files[src.name]['compressed_bytes'] / MIB:,.1f} MiB zstd")
    totals = {k: sum(f[k] for f in files.values()) for k in ("documents", "chars", "raw_bytes",
                                                             "compressed_bytes")}
    result = {"factor": factor, "seed": seed, "files": files, **totals,
              "seconds": round(time.perf_counter() - t0, 1)}
    log(f"replicate x{factor}: {totals['documents']:,} documents, {totals['chars']:,} chars, "
        f"{totals['compressed_bytes'] / MIB:,.1f} MiB compressed ({result['seconds']} s)")
    return result


# ----------------------------------------------------------------------------- large

# Pools of the large corpus: (pool name, development file, language, script or
# None). Chosen by running the heuristics stage (its default thresholds and
# those of configs/default.yaml) on generated big documents of every (file,
# language): big documents of ja and zh man pages, the King James Bible (en)
# and the de, ru, es and zh fortunes pass, from pieces that pass alone
# (passing_pieces; without that filter the zh fortunes' ASCII art fails
# max_abnormal_char_share, and one long unbroken run fails a whole document).
# Big documents of de, fr, es and ru man pages do not: every manpages-l10n
# page ends with the same translator, licence and bug-report paragraphs and
# shares section headings, so 60-130 pages in one document have duplicated
# 5/6-gram shares of 0.19-0.34 (limits 0.15-0.25 and 0.14) and up to 34%
# duplicated lines (limit 30%). English fortunes are too few (96k chars) for
# distinct pieces. Simplified and Traditional Chinese man pages are separate
# pools (each page exists in both).
LARGE_POOLS: tuple[tuple[str, str, str, str | None], ...] = (
    ("manpages-ja", "dev-manpages", "ja", None),
    ("manpages-zh-Hans", "dev-manpages", "zh", "Hans"),
    ("manpages-zh-Hant", "dev-manpages", "zh", "Hant"),
    ("kjv-en", "dev-kjv", "en", None),
    ("fortunes-de", "dev-fortunes", "de", None),
    ("fortunes-ru", "dev-fortunes", "ru", None),
    ("fortunes-es", "dev-fortunes", "es", None),
    ("fortunes-zh", "dev-fortunes", "zh", "Hans"),
)
BIG_DOC_BYTES = MIB                       # UTF-8 bytes of text per big document, at most
# Words (stages.text.words, bounded above by _WORDISH_RE) per big document, at
# most: 90% of the heuristics stage's max_words (100,000; 200,000 for zh, ja).
BIG_DOC_MAX_WORDS = {"zh": 180_000, "ja": 180_000}
BIG_DOC_MAX_WORDS_DEFAULT = 90_000
LARGE_FILE_BYTES = 256 * MIB              # uncompressed JSONL bytes per output file, about

_POOLS: dict[str, list[tuple[str, str, int]]] = {}   # worker state: pool -> [(id, text, UTF-8 bytes)]


def _pool_records(corpus: Path) -> Iterator[tuple[str, dict]]:
    """``(pool name, record)`` of every development-corpus record in a pool."""
    wanted = {(f, lang, script): name for name, f, lang, script in LARGE_POOLS}
    for f in dict.fromkeys(f for _, f, _, _ in LARGE_POOLS):
        for _, rec in _read_records(corpus / f"{f}.jsonl.zst"):
            key = (f, rec.get("lang"))
            name = wanted.get((*key, rec.get("script"))) or wanted.get((*key, None))
            if name and (rec.get("text") or "").strip():
                yield name, rec


def passing_pieces(corpus: Path = SHARED_CORPUS, heuristics: dict[str, Any] | None = None,
                   log: Callable[[str], None] = print) -> dict[str, list[str]] | None:
    """Ids of the pool documents that pass the heuristics stage alone (with
    the pool's language and ``heuristics``, the build config's
    ``heuristics`` section; None or empty: the stage's defaults), per pool;
    None when ``stages.heuristics`` cannot be imported (then every document
    is a piece).

    Rules over a document's maximum (longest unbroken run, longest line) or
    over shares fail a big document when one piece fails them, so only
    passing pieces are used.
    """
    try:
        import pyarrow as pa

        from stages.heuristics import Config, Document, batch_counts, evaluate, ngram_stats_batch
        cfg = Config(**(heuristics or {}))
    except Exception as exc:  # noqa: BLE001 - the filter is an optimisation of the yield
        log(f"large: heuristics pre-filter unavailable ({type(exc).__name__}: {exc}); using every document")
        return None
    lang_of = {name: lang for name, _, lang, _ in LARGE_POOLS}
    kept: dict[str, list[str]] = {name: [] for name, *_ in LARGE_POOLS}
    seen = dict.fromkeys(kept, 0)

    def judge(batch: list[tuple[str, dict]]) -> None:
        # The heuristics stage's batched path: character counts and n-gram
        # statistics for many documents at once.
        counts = batch_counts(pa.array([rec["text"] for _, rec in batch], pa.string()))
        docs = []
        for (name, rec), c in zip(batch, counts):
            th = cfg.for_language(lang_of[name])
            docs.append((name, rec["id"], th, Document(rec["text"], lang_of[name], th.short_line_chars,
                                                       counts=c)))
        for (*_, doc), stats in zip(docs, ngram_stats_batch([d.words for *_, d in docs])):
            doc.__dict__["ngram_stats"] = stats
        for name, doc_id, th, doc in docs:
            seen[name] += 1
            if evaluate(doc, th)[1] is None:
                kept[name].append(doc_id)

    batch: list[tuple[str, dict]] = []
    for item in _pool_records(corpus):
        batch.append(item)
        if len(batch) == 2000:
            judge(batch)
            batch = []
    if batch:
        judge(batch)
    log("large: pieces passing the heuristics alone: "
        + ", ".join(f"{n} {len(kept[n]):,}/{seen[n]:,}" for n in kept))
    return kept


def _load_pools(corpus: str, piece_ids: dict[str, list[str]] | None) -> None:
    """Worker initializer: every pool's pieces (id, text, UTF-8 bytes), in
    input order (~35 MB of text); only ``piece_ids`` when given."""
    allowed = {n: set(ids) for n, ids in piece_ids.items()} if piece_ids is not None else None
    _POOLS.clear()
    for name, *_ in LARGE_POOLS:
        _POOLS[name] = []
    for name, rec in _pool_records(Path(corpus)):
        if allowed is None or rec["id"] in allowed[name]:
            _POOLS[name].append((rec["id"], rec["text"], len(rec["text"].encode("utf-8"))))


def _big_document(pool: str, index: int, seed: int) -> tuple[str, bytes, int, int, int]:
    """Worker task: big document ``index`` of ``pool`` as a JSONL line.

    Pieces are the pool's documents in a random order (seeded by (seed,
    pool, index)), each used at most once, each edited with its own rng
    (seeded by (seed, big document id, piece id)); pieces are added while the
    document stays within :data:`BIG_DOC_BYTES` and the word bound (a piece
    that does not fit is skipped). Pieces are joined with a blank line.

    Returns:
        ``(pool, line, chars, text bytes, pieces)``.
    """
    lang = next(lang for name, _, lang, _ in LARGE_POOLS if name == pool)
    max_words = BIG_DOC_MAX_WORDS.get(lang, BIG_DOC_MAX_WORDS_DEFAULT)
    doc_id = f"big:{pool}:{index:06d}"
    docs = _POOLS[pool]
    order = list(range(len(docs)))
    edit_rng(seed, doc_id, 0).shuffle(order)
    pieces: list[str] = []
    size = words = misses = 0
    for k in order:
        piece_id, text, nbytes = docs[k]
        if size + nbytes + 2 <= BIG_DOC_BYTES:
            edited = edit_text(text, edit_rng(seed, f"{doc_id}/{piece_id}", 1),
                               is_cjk_text(text, lang)).strip("\n")
            nbytes, nwords = len(edited.encode("utf-8")), len(_WORDISH_RE.findall(edited))
            if size + nbytes + 2 <= BIG_DOC_BYTES and words + nwords <= max_words:
                pieces.append(edited)
                size += nbytes + 2
                words += nwords
                continue
        misses += 1
        if misses > 50:            # nearly full: stop looking for a piece that fits
            break
    text = "\n\n".join(pieces)
    line = _dump({"id": doc_id, "text": text, "lang": lang})
    return pool, line, len(text), len(text.encode("utf-8")), len(pieces)


def _pool_schedule(weights: dict[str, float]) -> Iterator[tuple[str, int]]:
    """An endless deterministic sequence of (pool, index): smooth weighted
    round robin, so each pool gets its share at every prefix."""
    credit = dict.fromkeys(weights, 0.0)
    count = dict.fromkeys(weights, 0)
    total = sum(weights.values())
    while True:
        for name, w in weights.items():
            credit[name] += w
        name = max(credit, key=lambda n: credit[n])
        credit[name] -= total
        yield name, count[name]
        count[name] += 1


def large_kept_text(out_dir: Path, target_bytes: int = int(2.6 * 2**30), seed: int = 0,
                    corpus: Path = SHARED_CORPUS, workers: int = 2,
                    heuristics: dict[str, Any] | None = None,
                    log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write big one-language documents until their text is ``target_bytes``
    UTF-8 bytes (see :func:`_big_document`).

    Pools (:data:`LARGE_POOLS`) take shares of the target proportional to
    their size, so each piece is reused about equally often (in different
    big documents, each time edited differently). Output:
    ``out_dir/large-<pool>-NNNNN.jsonl.zst`` (a new file every
    :data:`LARGE_FILE_BYTES` of JSONL), records ``{"id", "text", "lang"}``.
    Deterministic: big documents are taken in schedule order and the first
    ones whose text reaches ``target_bytes`` are written. ``heuristics``:
    the build config's ``heuristics`` section, for :func:`passing_pieces`.

    Returns:
        ``{"documents", "chars", "text_bytes", "raw_bytes",
        "compressed_bytes", "pools": {pool: {"documents", "chars",
        "text_bytes", "pieces"}}, "files": {name: {"raw_bytes",
        "compressed_bytes"}}, "seconds"}`` (``text_bytes``: UTF-8 bytes of
        the texts; ``raw_bytes``: of the JSONL).
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    piece_ids = passing_pieces(corpus, heuristics, log)
    _load_pools(str(corpus), piece_ids)           # pool sizes, for the weights
    weights = {name: float(sum(d[2] for d in docs)) for name, docs in _POOLS.items() if docs}
    _POOLS.clear()
    writers: dict[str, ZstdJsonlWriter] = {}
    file_index: dict[str, int] = dict.fromkeys(weights, 0)
    files: dict[str, dict[str, int]] = {}
    pools = {name: {"documents": 0, "chars": 0, "text_bytes": 0, "pieces": 0} for name in weights}
    done = 0

    def close(name: str) -> None:
        w = writers.pop(name)
        raw = w.raw_bytes
        files[w.path.name] = {"raw_bytes": raw, "compressed_bytes": w.close()}

    tasks = ((_big_document, (name, index, seed)) for name, index in _pool_schedule(weights))
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_load_pools, initargs=(str(corpus), piece_ids)) as pool:
            for name, line, chars, nbytes, pieces in _ordered(pool, tasks, window=2 * workers + 1):
                if name not in writers:
                    writers[name] = ZstdJsonlWriter(out_dir / f"large-{name}-{file_index[name]:05d}.jsonl.zst")
                    file_index[name] += 1
                writers[name].write(line)
                p = pools[name]
                p["documents"] += 1
                p["chars"] += chars
                p["text_bytes"] += nbytes
                p["pieces"] += pieces
                done += nbytes
                if writers[name].raw_bytes >= LARGE_FILE_BYTES:
                    close(name)
                if done >= target_bytes:
                    break
            pool.shutdown(cancel_futures=True)    # the few documents still in flight are not written
        for name in list(writers):
            close(name)
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    totals = {k: sum(p[k] for p in pools.values()) for k in ("documents", "chars", "text_bytes", "pieces")}
    result = {"target_bytes": target_bytes, "seed": seed, **totals,
              "raw_bytes": sum(f["raw_bytes"] for f in files.values()),
              "compressed_bytes": sum(f["compressed_bytes"] for f in files.values()),
              "pools": pools, "files": files, "seconds": round(time.perf_counter() - t0, 1)}
    for name, p in pools.items():
        log(f"  {name}: {p['documents']:,} documents, {p['pieces']:,} pieces, {p['chars']:,} chars, "
            f"{p['text_bytes'] / MIB:,.1f} MiB text")
    log(f"large: {totals['documents']:,} documents, {totals['chars']:,} chars, "
        f"{totals['text_bytes'] / 2**30:.3f} GiB text, {result['compressed_bytes'] / MIB:,.1f} MiB compressed "
        f"in {len(files)} files ({result['seconds']} s)")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description="Generate scale-benchmark corpora (no build).")
    ap.add_argument("--factor", type=int, action="append", default=[], help="replication factor (repeatable)")
    ap.add_argument("--large", action="store_true", help="the large kept-text corpus")
    ap.add_argument("--target-bytes", type=int, default=int(2.6 * 2**30))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--similarity", action="store_true", help="measure original/copy-1 Jaccard")
    args = ap.parse_args()
    for f in args.factor:
        replicate(f, args.out / f"x{f}", args.seed, args.corpus, args.workers)
    if args.large:
        large_kept_text(args.out / "large", args.target_bytes, args.seed, args.corpus, args.workers)
    if args.similarity:
        print(json.dumps(copy_similarity(args.corpus, seed=args.seed), indent=2))


if __name__ == "__main__":
    main()
