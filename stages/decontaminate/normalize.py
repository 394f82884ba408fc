"""Units and n-gram hashes: the one normalisation the index and the
documents share.

A text becomes a sequence of *units*, each with its code-point span in the
ORIGINAL text (so hits are reported and cut where they are, never in a
normalised copy):

* a CJK ideograph, kana or hangul syllable (:data:`stages.text.CJK_CHAR_CLASS`,
  plus half-width katakana U+FF66-FF9F) is one unit;
* a run of other letters and digits (``str.isalnum``; ``_`` excluded) is one
  unit, a *word*;
* everything else (punctuation, symbols, whitespace, full-width punctuation
  included) separates units and is ignored.

A unit's value is its characters, each ``fold(NFKC(char)).casefold()``:
full-width ``ＡＢＣ１２`` equals ``abc12``, half-width katakana equals
full-width, case is ignored, and a Traditional Chinese character equals its
Simplified form (``fold``: :func:`traditional_fold_table`, OpenCC's
character dictionary ``TSCharacters``, one code point to one, so a
Traditional copy of an item (``s2t``) matches over its whole length). Ignoring punctuation and whitespace this way
means ``，`` versus ``,`` and a line break versus a space never change a unit.

Hashes: a character's *digit* is the xxh3-64 of its normalised form (UTF-8);
a unit's hash is the polynomial ``sum digit[k] * B^(end-1-k)`` mod 2^64 over
its characters; an n-gram hash (uint64) is a polynomial over its units'
hashes, mixed with the gram length, so grams of different lengths never
collide by construction (:func:`gram_hashes`). Everything is numpy over the
text's code points (tables for the BMP, built once per process in ~0.2 s;
characters beyond it looked up one by one): O(characters) per text.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import xxhash

from stages.text import CJK_CHAR_CLASS

#: Version of this normalisation and hashing: part of the index's cache key
#: (:mod:`stages.decontaminate.index`); change it whenever units or hashes change.
NORMALIZATION_VERSION = "units-v3-t2s"
UNIT_HASH_NAME = "polynomial mod 2^64 over xxh3_64(t2s_char(NFKC(char)).casefold(), utf-8)"
_CJK = CJK_CHAR_CLASS + "\uff66-\uff9f"
UNIT_RE = re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])[^\W_])+")
_CJK_RE = re.compile(rf"[{_CJK}]")
# Where a long text may be cut without splitting a word: before a character
# that is not a word character (or is CJK: one unit each).
_CUT_RE = re.compile(rf"[\W_]|[{_CJK}]")
#: Characters per piece of :func:`units` (1 Mi).
MAX_CHUNK = 1 << 20
# Odd 64-bit multipliers (splitmix64's constants): the polynomial base and the
# final mix. Arithmetic is mod 2**64 (numpy uint64 wraps).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_BASE_INV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 2**64))
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# Code-point ranges whose characters are converted to build the fold table:
# the CJK ideograph blocks (URO, Extension A, compatibility, astral B-H).
_FOLD_RANGES = ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00), (0x20000, 0x31350))
_FOLD: dict[int, str] | None = None


def traditional_fold_table() -> dict[int, str]:
    """The ``str.translate`` table folding Traditional Chinese to Simplified,
    one code point to one code point (so units and spans are unchanged).

    Built once per process (~0.4 s): every ideograph of :data:`_FOLD_RANGES`
    is converted alone with OpenCC's character-level ``t2s`` (the
    ``TSCharacters`` dictionary, the character step of OpenCC's shipped
    ``t2s`` config: :func:`stages.zh_script.opencc_converter`), then the
    characters it leaves alone with the Taiwan and Hong Kong chains
    (``TWVariantsRev`` / ``HKVariantsRev`` + ``TSCharacters``: ``s2tw``'s
    ``著``, ``s2hk``'s ``敍``); a character whose conversion is one different
    code point is mapped, chains resolved to their end (``薴`` -> ``苧`` ->
    ``苎``). Measured with OpenCC 1.1: 3,234 characters mapped (3,222 by
    ``TSCharacters``), none to more than one code point; no Simplified-only
    character (``hans_only`` of ``stages/data/zh_script_chars.json``) is
    mapped; a few characters valid in both scripts are (``乾`` -> ``干``,
    ``么`` -> ``幺``), folded alike in items and documents. On the 33,954
    characters of ``data/evalsets/gaokao_mcq.jsonl``, OpenCC ``s2t`` changes
    5,849 (s2tw 5,840, s2hk 5,819); after folding both, 9 still differ in
    each (the phrase dictionaries' ``坐`` -> ``座``, ``借`` -> ``藉``).

    Raises:
        RuntimeError: OpenCC returned a different number of lines.

    Returns:
        code point -> one-character string (3,234 entries).
    """
    global _FOLD
    if _FOLD is None:
        from stages.zh_script import opencc_converter

        chars = [chr(c) for lo, hi in _FOLD_RANGES for c in range(lo, hi)]
        table: dict[int, str] = {}
        for region in ("none", "tw", "hk"):
            out = opencc_converter("t2s", "char", region).convert("\n".join(chars)).split("\n")
            if len(out) != len(chars):  # checked, never assumed: one line in, one out
                raise RuntimeError("OpenCC t2s changed the number of lines of the fold table's input")
            for c, o in zip(chars, out):
                if o != c and len(o) == 1:
                    table.setdefault(ord(c), o)
        for _ in range(4):  # chains (a -> b -> c) resolved to their end
            table = {cp: table.get(ord(o), o) for cp, o in table.items()}
        _FOLD = table
    return _FOLD


_TABLES: tuple[np.ndarray, np.ndarray] | None = None
_ASTRAL: dict[int, tuple[int, int]] = {}
CLASS_OTHER, CLASS_WORD, CLASS_CJK = 0, 1, 2


def char_class_and_digit(cp: int) -> tuple[int, int]:
    """(class, digit) of one code point: class 2 for a CJK character, 1 for
    another letter or digit (``str.isalnum``; the regex ``[^\\W_]``), else 0;
    digit: xxh3-64 of ``NFKC(char)`` folded Traditional to Simplified
    (:func:`traditional_fold_table`) and casefolded (0 for class 0)."""
    if 0xD800 <= cp < 0xE000:
        return CLASS_OTHER, 0
    ch = chr(cp)
    if _CJK_RE.match(ch):
        cls = CLASS_CJK
    elif ch.isalnum():
        cls = CLASS_WORD
    else:
        return CLASS_OTHER, 0
    value = unicodedata.normalize("NFKC", ch).translate(traditional_fold_table()).casefold()
    return cls, xxhash.xxh3_64_intdigest(value.encode("utf-8"))


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """uint8[65536] classes and uint64[65536] digits of the BMP."""
    global _TABLES
    if _TABLES is None:
        cls = np.zeros(0x10000, np.uint8)
        digit = np.zeros(0x10000, np.uint64)
        for cp in range(0x10000):
            c, d = char_class_and_digit(cp)
            if c:
                cls[cp], digit[cp] = c, d
        _TABLES = (cls, digit)
    return _TABLES


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^k and B^-k mod 2^64 for k < n (uint64[n] each)."""
    with np.errstate(over="ignore"):
        up = np.full(n, _BASE, np.uint64)
        up[0] = 1
        down = np.full(n, _BASE_INV, np.uint64)
        down[0] = 1
        return np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64)


def units(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split ``text`` into units.

    Returns:
        ``(hashes, starts, ends, cjk)``: uint64[u] unit hashes, int64[u]
        start and end code-point offsets in ``text`` (end exclusive), bool[u]
        whether the unit is a CJK character. u = 0 for a text with no letter
        or digit. O(len(text)) numpy work; a text longer than
        :data:`MAX_CHUNK` characters is done in pieces cut where no word
        runs across, so working memory is ~30 bytes x MAX_CHUNK plus the
        result (~25 bytes per unit), whatever the document's length.
    """
    if len(text) <= MAX_CHUNK:
        return _units(text)
    pieces, at = [], 0
    while at < len(text):
        end = at + MAX_CHUNK
        if end < len(text):
            m = _CUT_RE.search(text, end)
            end = m.start() if m else len(text)
            end = max(end, at + 1)
        h, s, e, c = _units(text[at:end])
        pieces.append((h, s + at, e + at, c))
        at = end
    return tuple(np.concatenate([p[i] for p in pieces]) for i in range(4))  # type: ignore[return-value]


def _units(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`units` of one piece."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    n = len(cps)
    empty = (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool))
    if not n:
        return empty
    table_cls, table_digit = _tables()
    bmp = np.minimum(cps, 0xFFFF)
    cls = table_cls[bmp]
    digit = table_digit[bmp]
    astral = np.flatnonzero(cps > 0xFFFF)
    for i in astral:
        cp = int(cps[i])
        got = _ASTRAL.get(cp)
        if got is None:
            if len(_ASTRAL) > 100_000:
                _ASTRAL.clear()
            got = _ASTRAL[cp] = char_class_and_digit(cp)
        cls[i], digit[i] = got
    word = cls == CLASS_WORD
    cjk_char = cls == CLASS_CJK
    prev_word = np.concatenate([[False], word[:-1]])
    next_word = np.concatenate([word[1:], [False]])
    starts = np.flatnonzero((word & ~prev_word) | cjk_char)
    if not len(starts):
        return empty
    word_ends = np.flatnonzero(word & ~next_word) + 1
    is_cjk = cjk_char[starts]
    ends = starts + 1
    ends[~is_cjk] = word_ends
    up, down = _powers(n)
    with np.errstate(over="ignore"):
        prefix = np.cumsum(digit * down, dtype=np.uint64)  # Q[i] = sum_{k<=i} d[k] B^-k
        before = np.where(starts > 0, prefix[np.maximum(starts - 1, 0)], np.uint64(0))
        hashes = up[ends - 1] * (prefix[ends - 1] - before)
    return hashes, starts.astype(np.int64), ends.astype(np.int64), is_cjk


def units_reference(text: str) -> tuple[list[int], list[tuple[int, int]], list[bool]]:
    """The definition of :func:`units` in plain Python (regex units, each
    character's digit, the polynomial with Python integers): for tests."""
    out_h, out_span, out_cjk = [], [], []
    for m in UNIT_RE.finditer(text):
        h = 0
        for ch in m.group():
            h = (h * int(_BASE) + char_class_and_digit(ord(ch))[1]) % 2**64
        out_h.append(h)
        out_span.append(m.span())
        out_cjk.append(bool(_CJK_RE.match(m.group())) and m.end() - m.start() == 1)
    return out_h, out_span, out_cjk


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64[k] (a bijection: no new collisions)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


def gram_hashes(unit_hashes: np.ndarray, n: int) -> np.ndarray:
    """Hashes of every n-gram of consecutive units.

    Args:
        unit_hashes: uint64[u] from :func:`units`.
        n: gram length in units (>= 1).

    Returns:
        uint64[max(0, u - n + 1)]: entry i is the hash of units i..i+n-1.
        The length n is mixed in, so a 4-gram never equals a 5-gram hash by
        construction. O(u * n) numpy work.
    """
    m = len(unit_hashes) - n + 1
    if m <= 0:
        return np.empty(0, np.uint64)
    with np.errstate(over="ignore"):
        acc = np.full(m, np.uint64(n), np.uint64)
        for k in range(n):
            acc = acc * _BASE + unit_hashes[k:k + m]
        return _mix(acc)
