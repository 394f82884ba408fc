"""The chunks of a document that the language model reads, with their script counts.

Used by ``stages.langid``. A document of any shape is read whole (up to a
budget): its lines are grouped into *chunks* of at most ``chunk_chars``
characters, so a document without blank lines (a chat log, a poem, a table)
is read entirely, a paragraph longer than a chunk is read in several chunks,
and short lines (table rows, a man page's NAME line) are judged together with
their neighbours rather than alone. Each chunk carries its letter counts per
script (Han, kana, hangul, other), so the caller can tell CJK languages
apart by script, which lid.176 does poorly on short or name-heavy text.

All counts come from one vectorized pass over the document's code points
(a ``uint8`` class per code point, then cumulative sums), so only the
per-line grouping is Python.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import NamedTuple

import numpy as np

# Classes of a code point (``_char_classes``).
OTHER, LETTER, HAN, KANA, HANGUL, BREAK = range(6)
CLASSES = 6
# Ranges (inclusive) of each CJK script; only code points that are letters
# (``str.isalpha``) take the script's class. Han: CJK Unified Ideographs and
# Ext-A..Ext-H, compatibility ideographs, 々 〆 〇 (U+3005-3007). Kana:
# hiragana, katakana (with ー), phonetic extensions, half-width katakana,
# kana supplement/extended. Hangul: syllables, jamo and their extensions,
# half-width jamo.
_SCRIPT_RANGES = {
    HAN: ((0x3005, 0x3007), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
          (0x20000, 0x323AF)),
    KANA: ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F), (0x1B000, 0x1B16F)),
    HANGUL: ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7FF),
             (0xFFA0, 0xFFDC)),
}
# Characters measured per vectorized pass (chunks_many): ~30 MB of arrays.
BATCH_CHARS = 1 << 20
_SEPARATOR = "\x1c"
# Combining marks count as letters: the vowel signs of Devanagari, Bengali,
# Tamil... (Mn, Mc) are half the characters of their words; without them a
# Marathi paragraph weighs ~40% less than an English one of the same length.
_MARKS = frozenset({"Mn", "Mc", "Me"})
# Line breaks of str.splitlines (``\r\n`` is one break; see :func:`chunks`).
_BREAKS = (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)


class Chunk(NamedTuple):
    """``text[start:end]`` (code point offsets), and its letters
    (``str.isalpha``) in all and per CJK script."""

    start: int
    end: int
    letters: int
    han: int
    kana: int
    hangul: int

    @property
    def cjk(self) -> int:
        """Han + kana + hangul letters."""
        return self.han + self.kana + self.hangul


@lru_cache(maxsize=1)
def _char_classes() -> np.ndarray:
    """``uint8[0x110000]``: the class of each code point (OTHER, LETTER, HAN,
    KANA, HANGUL, BREAK); built once per process (~0.3 s)."""
    table = np.fromiter((chr(i).isalpha() or unicodedata.category(chr(i)) in _MARKS
                         for i in range(0x110000)), dtype=np.uint8, count=0x110000)
    letter = table.astype(bool)
    for cls, ranges in _SCRIPT_RANGES.items():
        for lo, hi in ranges:
            span = slice(lo, hi + 1)
            table[span] = np.where(letter[span], cls, table[span])
    table[list(_BREAKS)] = BREAK
    return table


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _line_counts(codes: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each line's start and end offset (``int64[lines]``, its break
    excluded) and its code points per class (``int64[lines, CLASSES]``). The
    ``\\n`` of ``\\r\\n`` ends no line: it is the first character of the
    next (a break, no letter, so no count changes)."""
    is_break = classes == BREAK
    breaks = np.flatnonzero(is_break)
    if breaks.size:
        after_cr = (codes[breaks] == 0x0A) & (breaks > 0) & (codes[breaks - 1] == 0x0D)
        if after_cr.any():
            is_break[breaks[after_cr]] = False
            breaks = breaks[~after_cr]
    line_of = np.cumsum(is_break) - is_break
    counts = np.bincount(line_of * CLASSES + classes,
                         minlength=(breaks.size + 1) * CLASSES).reshape(-1, CLASSES)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [codes.size]))
    return starts, ends, counts


def chunks(text: str, **params) -> tuple[list[Chunk], Chunk]:
    """:func:`chunks_many` of one document."""
    return chunks_many([text], **params)[0]


def chunks_many(texts: list[str], *, min_chars: int, min_cjk_chars: int, chunk_chars: int,
                paragraph_letters: int, cjk_line_share: float, max_chunks: int
                ) -> list[tuple[list[Chunk], Chunk]]:
    """Cut each document into the chunks that are sent to the language model.

    Lines (any break of ``str.splitlines``) are added in order to the
    current chunk; a new chunk starts before a line when

    * the chunk would exceed ``chunk_chars`` characters, or
    * the line follows a line without letters (a blank line: a paragraph
      break) and the chunk holds at least ``paragraph_letters`` letters, or
    * the line's script class (CJK when Han + kana + hangul letters are at
      least ``cjk_line_share`` of its letters, else other) differs from the
      chunk's and both hold at least ``min_cjk_chars`` (CJK) or
      ``min_chars`` (other) letters,

    so short lines join their neighbours and a ja + en page gives ja chunks
    and en chunks. A line longer than ``chunk_chars`` is cut, at the last
    space of the second half of the limit when there is one. Lines without
    letters are never a chunk of their own. Letters are ``str.isalpha``
    code points and combining marks (see :data:`_MARKS`).

    The documents are measured together, :data:`BATCH_CHARS` characters at
    a time (one vectorized pass per batch, not per document: the fortunes of
    /work/shared/corpus average ~300 characters, where numpy's per-call
    cost would dominate); the result does not depend on the batching.

    Args:
        texts: the documents.
        min_chars: a chunk needs this many letters, or ``min_cjk_chars``
            CJK letters, to be returned.
        min_cjk_chars: see ``min_chars``.
        chunk_chars: the most characters of a chunk (before the caller
            folds its whitespace).
        paragraph_letters: see above.
        cjk_line_share: see above (0..1).
        max_chunks: at most this many chunks are returned, evenly spaced
            (deterministic: chunk ``int(i * n / max_chunks)``).

    Returns:
        per document ``(chunks, whole)``: the chunks in document order
        (offsets into the document; empty when none qualifies), and the
        counts of the whole document as one :class:`Chunk` (``start`` 0,
        ``end`` ``len(text)``).
    """
    params = (min_chars, min_cjk_chars, chunk_chars, paragraph_letters, cjk_line_share, max_chunks)
    out: list[tuple[list[Chunk], Chunk]] = []
    batch: list[str] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text) + 1
        if size >= BATCH_CHARS:
            out += _chunk_batch(batch, *params)
            batch, size = [], 0
    if batch:
        out += _chunk_batch(batch, *params)
    return out


def _chunk_batch(texts: list[str], min_chars: int, min_cjk_chars: int, chunk_chars: int,
                 paragraph_letters: int, cjk_line_share: float, max_chunks: int
                 ) -> list[tuple[list[Chunk], Chunk]]:
    # One string, documents separated by U+001C (a line break that never
    # pairs with a \r), so no line spans two documents.
    joined = _SEPARATOR.join(texts)
    codes = _code_points(joined)
    classes = _char_classes()[codes]
    starts, ends, counts = _line_counts(codes, classes)
    letters = counts[:, LETTER:HANGUL + 1].sum(axis=1)
    doc_starts = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]])
    # the line that starts each document (lines start after each break)
    first_line = np.searchsorted(starts, doc_starts)
    per_doc = np.add.reduceat(counts, first_line, axis=0)
    kept = np.flatnonzero(letters)
    kept_at = np.searchsorted(kept, np.append(first_line, starts.size)).tolist()
    after_blank = (np.diff(kept, prepend=-1) > 1).tolist()
    rows = list(zip(starts[kept].tolist(), ends[kept].tolist(), letters[kept].tolist(),
                    counts[kept, HAN].tolist(), counts[kept, KANA].tolist(),
                    counts[kept, HANGUL].tolist(), after_blank))
    out = []
    for i, (text, offset, total) in enumerate(zip(texts, doc_starts.tolist(), per_doc.tolist())):
        whole = Chunk(0, len(text), sum(total[LETTER:HANGUL + 1]), total[HAN], total[KANA],
                      total[HANGUL])
        if whole.letters < min(min_chars, min_cjk_chars):
            out.append(([], whole))
            continue
        found: list[Chunk] = []
        cur: list[int] = []                     # start, end, letters, han, kana, hangul
        cur_cjk = False
        for line in rows[kept_at[i]:kept_at[i + 1]]:
            pieces = [line] if line[1] - line[0] <= chunk_chars else _cut(joined, classes, line, chunk_chars)
            for start, end, n, han, kana, hangul, new_paragraph in pieces:
                is_cjk = han + kana + hangul >= cjk_line_share * n
                if cur and (end - cur[0] > chunk_chars
                            or (new_paragraph and cur[2] >= paragraph_letters)
                            or (is_cjk != cur_cjk and cur[2] >= (min_cjk_chars if cur_cjk else min_chars)
                                and n >= (min_cjk_chars if is_cjk else min_chars))):
                    found.append(Chunk(cur[0] - offset, cur[1] - offset, *cur[2:]))
                    cur = []
                if not cur:
                    cur, cur_cjk = [start, end, n, han, kana, hangul], is_cjk
                else:
                    cur[1] = end
                    cur[2] += n
                    cur[3] += han
                    cur[4] += kana
                    cur[5] += hangul
        if cur:
            found.append(Chunk(cur[0] - offset, cur[1] - offset, *cur[2:]))
        found = [c for c in found if c.letters >= min_chars or c.cjk >= min_cjk_chars]
        if len(found) > max_chunks:
            step = len(found) / max_chunks
            found = [found[int(j * step)] for j in range(max_chunks)]
        out.append((found, whole))
    return out


def _cut(text: str, classes: np.ndarray, line: tuple, limit: int) -> list[tuple]:
    """A line (``(start, end, letters, han, kana, hangul, new_paragraph)``)
    longer than ``limit`` as pieces of at most ``limit`` characters, each cut
    at its last space when it has one in its second half; pieces without
    letters are left out."""
    start, end, new_paragraph = line[0], line[1], line[6]
    pieces = []
    while start < end:
        stop = end
        if end - start > limit:
            stop = text.rfind(" ", start + limit // 2, start + limit)
            stop = start + limit if stop < 0 else stop
        count = np.bincount(classes[start:stop], minlength=CLASSES).tolist()
        n = sum(count[LETTER:HANGUL + 1])
        if n:
            pieces.append((start, stop, n, count[HAN], count[KANA], count[HANGUL], new_paragraph))
            new_paragraph = False
        start = stop + 1 if text[stop:stop + 1] == " " else stop
    return pieces


def script_language(chunk: Chunk, whole: Chunk, kana_share: float) -> str | None:
    """The CJK language that ``chunk``'s CJK letters are written in, or None
    when it has none.

    Hangul means ``ko`` (when it outnumbers kana); kana means ``ja`` when
    kana are at least ``kana_share`` of the chunk's Han + kana; Han alone is
    ``ja`` in a document whose kana make that share of its Han + kana
    (a kanji-only heading of a Japanese page), ``ko`` in a document mostly
    hangul (Hanja), else ``zh`` (lid.176 calls Traditional Chinese with Latin
    names ``ja``; Han without kana is not Japanese).
    """
    if chunk.cjk == 0:
        return None
    if chunk.hangul and chunk.hangul >= chunk.kana:
        return "ko"
    if chunk.kana and chunk.kana >= kana_share * (chunk.han + chunk.kana):
        return "ja"
    if whole.kana and whole.kana >= kana_share * (whole.han + whole.kana) and whole.kana >= whole.hangul:
        return "ja"
    if whole.hangul > whole.han + whole.kana:
        return "ko"
    return "zh"
