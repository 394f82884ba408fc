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

A unit's value is ``NFKC(unit).casefold()``: full-width ``ＡＢＣ１２`` equals
``abc12``, half-width katakana equals full-width, case is ignored. Ignoring
punctuation and whitespace this way means ``，`` versus ``,`` and a line
break versus a space never change a unit.

An n-gram hash (uint64) is a polynomial over the units' 64-bit xxh3 hashes,
mixed with the gram length, so grams of different lengths never collide by
construction: :func:`gram_hashes`. Everything here is O(characters) per text.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import xxhash

from stages.text import CJK_CHAR_CLASS

#: Version of this normalisation and hashing: part of the index's cache key
#: (:mod:`stages.decontaminate.index`); change it whenever units or hashes change.
NORMALIZATION_VERSION = "units-v1"
UNIT_HASH_NAME = "xxh3_64(NFKC casefold unit, utf-8)"
_CJK = CJK_CHAR_CLASS + "\uff66-\uff9f"
UNIT_RE = re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])[^\W_])+")
_CJK_RE = re.compile(rf"[{_CJK}]")
# Odd 64-bit multipliers (splitmix64's constants): the polynomial base and the
# final mix. Arithmetic is mod 2**64 (numpy uint64 wraps).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def unit_value(unit: str) -> str:
    """The normalised value of one unit: NFKC, then casefold (ASCII: lower)."""
    if unit.isascii():
        return unit.lower()
    return unicodedata.normalize("NFKC", unit).casefold()


def units(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split ``text`` into units.

    Returns:
        ``(hashes, starts, ends, cjk)``: uint64[u] unit hashes (xxh3-64 of the
        UTF-8 normalised value), int64[u] start and end code-point offsets in
        ``text`` (end exclusive), bool[u] whether the unit is a CJK character.
        u = 0 for a text with no letter or digit. O(len(text)).
    """
    spans = [(m.start(), m.end(), m.group()) for m in UNIT_RE.finditer(text)]
    n = len(spans)
    hashes = np.empty(n, np.uint64)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    cjk = np.zeros(n, bool)
    h = xxhash.xxh3_64_intdigest
    for i, (s, e, u) in enumerate(spans):
        starts[i], ends[i] = s, e
        if u.isascii():
            hashes[i] = h(u.lower().encode())
        else:
            hashes[i] = h(unicodedata.normalize("NFKC", u).casefold().encode("utf-8"))
            if e - s == 1 and _CJK_RE.match(u):
                cjk[i] = True
    return hashes, starts, ends, cjk


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
