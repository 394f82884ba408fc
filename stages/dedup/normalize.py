"""Text normalization for dedup: exact normalization (exact dedup), near
normalization (MinHash shingles), which documents are shingled by
characters, and Traditional -> Simplified Chinese script folding.

Everything here is a pure function of its arguments (no files, no config
object), so a text normalized in one process equals the one normalized in
another. See docs/stages/dedup.md.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.text import CJK_CHAR_CLASS, CJK_LANGS, FORMAT_CHARS
from stages.zh_script import fold_to_simplified

UNKNOWN_LANGS = frozenset({"", "und", "unknown", "zxx"})
# Languages whose CJK text is never folded to Simplified Chinese (Japanese
# kanji and Korean hanja keep their forms).
NO_FOLD_LANGS = frozenset({"ja", "ko"})

# CJK share of non-space characters (after near normalization) at which a
# document of unknown language is shingled by characters. Measured on
# /work/shared/corpus with the package language labels: every de/en/es/fr/ru/code
# document has share 0.000; zh median 1.00 (1st percentile 0.195), ja median
# 0.595 (1st percentile 0.095); 0.3 puts 96.3% of zh/ja documents in character
# mode, the rest being mostly untranslated English.
CJK_SHARE_FOR_CHARS = 0.3

_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]")
_CJK_RE = re.compile(f"[{CJK_CHAR_CLASS}]")


# ----------------------------------------------------------------------------- normalization


def _char_class(codepoints: list[int]) -> str:
    """A regex character class body covering ``codepoints`` (sorted) as ranges."""
    ranges: list[list[int]] = []
    for cp in codepoints:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)


@lru_cache(maxsize=1)
def _punctuation_res() -> tuple[re.Pattern, re.Pattern]:
    """Regexes of Unicode punctuation (P*) and symbols (S*) plus ``_``, i.e.
    what ASCII ``string.punctuation`` covers, in all scripts: one for the
    Basic Multilingual Plane (a bitmap class, fast) and one for plane 1
    (emoji, musical and math symbols; planes 2+ hold no P/S characters).
    Categories come from the running Python's ``unicodedata``."""
    def ps(lo: int, hi: int) -> list[int]:
        return [cp for cp in range(lo, hi) if cp == 0x5F or unicodedata.category(chr(cp))[0] in "PS"]

    return (re.compile(f"[{_char_class(ps(0, 0x10000))}]+"),
            re.compile(f"[{_char_class(ps(0x10000, 0x20000))}]+"))


# Invisible format characters (Unicode Cf: ZWSP, ZWNJ, ZWJ, LRM/RLM, bidi
# embeddings and isolates, BOM, soft hyphen, tags): removed before
# comparing, so a copy padded or interleaved with them equals its original
# (hostile test: an Arabic text wrapped in U+202B...U+202C was kept over the
# clean one as "longer"). The set is stages.text.FORMAT_CHARS.
_FORMAT_CHARS = dict.fromkeys(FORMAT_CHARS)
_FORMAT_RE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in _FORMAT_CHARS) + "]")
_FORMAT_RE2 = r"\p{Cf}+"


def exact_normalize(text: str) -> str:
    """Normalization for exact dedup: format characters (Cf) removed, NFKC,
    casefold, whitespace runs -> one space, stripped.
    ``"Ｈｅｌｌｏ \\u200b World\\n"`` -> ``"hello world"``."""
    if not text.isascii() and _FORMAT_RE.search(text):
        text = text.translate(_FORMAT_CHARS)
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def near_normalize(exact_normalized: str) -> str:
    """Normalization for MinHash, applied to :func:`exact_normalize`'s output:
    punctuation and symbols (Unicode P*, S*, and ``_``) become a space, then
    whitespace is collapsed. Equal exact-normalized texts therefore have equal
    signatures. ``"hello, world!"`` -> ``"hello world"``; ``"你好，世界。"`` ->
    ``"你好 世界"``."""
    bmp, astral = _punctuation_res()
    text = bmp.sub(" ", exact_normalized)
    if _ASTRAL_RE.search(text):
        text = astral.sub(" ", text)
    return " ".join(text.split())


# Unicode punctuation, symbols, separators, "_" and the characters str.split()
# treats as whitespace, for RE2 (pyarrow.compute).
_NEAR_RE2 = r"[\p{P}\p{S}\p{Z}_\s\x{1c}-\x{1f}\x{85}]+"


def near_normalize_batch(texts: list[str]) -> list[str]:
    """``near_normalize(exact_normalize(t))`` for many raw texts at once, with
    NFKC and the punctuation/whitespace pass in Arrow (RE2, Unicode classes)
    and only ``casefold`` in Python; ~1.5x faster than the per-document path
    and equal to it on every document of /work/shared/corpus (tested on
    mixed samples). RE2's Unicode tables may be a different Unicode version
    than Python's ``unicodedata``.

    Args:
        texts: D raw texts (None is read as "").

    Returns:
        D normalized strings.
    """
    if not texts:
        return []
    arr = pc.utf8_normalize(pc.replace_substring_regex(pa.array([t or "" for t in texts], pa.string()),
                                                      _FORMAT_RE2, ""), "NFKC")
    folded = pa.array([t.casefold() for t in arr.to_pylist()], pa.string())
    return pc.utf8_trim(pc.replace_substring_regex(folded, _NEAR_RE2, " "), " ").to_pylist()


def near_lengths(exact_normalized: list[str]) -> np.ndarray:
    """Characters (code points) of :func:`near_normalize` of each
    :func:`exact_normalize` output, in one Arrow (RE2) pass: the length the
    keeper rule ``longest`` compares, so that a copy padded with whitespace
    or punctuation is no longer than its original. Equal to
    ``len(near_normalize(t))`` (tested).

    Args:
        exact_normalized: D exact-normalized texts.

    Returns:
        int64[D].
    """
    if not exact_normalized:
        return np.zeros(0, np.int64)
    near = pc.utf8_trim(pc.replace_substring_regex(pa.array(exact_normalized, pa.string()), _NEAR_RE2, " "), " ")
    return pc.utf8_length(near).to_numpy(zero_copy_only=False).astype(np.int64)


def uses_char_shingles(near_normalized: str, lang: str | None) -> bool:
    """True when a document is shingled by characters: its language is in
    :data:`stages.text.CJK_LANGS`, or the language is unknown (None, ``und``,
    ...) and CJK characters are at least :data:`CJK_SHARE_FOR_CHARS` of its
    non-space characters."""
    if lang is not None and lang not in UNKNOWN_LANGS:
        return lang in CJK_LANGS
    chars = len(near_normalized) - near_normalized.count(" ")
    return chars > 0 and len(_CJK_RE.findall(near_normalized)) >= CJK_SHARE_FOR_CHARS * chars


# ----------------------------------------------------------------------------- Chinese script


FoldScript = Literal["none", "t2s", "tw2sp"]


def fold_script(texts: list[str], fold: FoldScript) -> list[str]:
    """Fold Traditional Chinese to Simplified before character shingling.

    Each text is classified by :func:`stages.zh_script.script_counts` over
    its whole length (characters that exist only in Simplified, S, and only
    in Traditional Chinese, T; from OpenCC's character dictionaries):

    * T = 0 (Simplified, or no telling character): unchanged. Simplified
      text is never rewritten (the former folding ran ``tw2sp`` on every
      document and changed the shingles of 559 of the 703 zh_CN man pages
      of /work/shared/corpus, e.g. 文件 -> 文档).
    * T > S (Traditional): whitespace between ideographs removed
      (:func:`stages.zh_script.join_ideographs`), then converted by OpenCC:
      ``t2s`` character-level (``TSCharacters`` only, each character on its
      own), ``tw2sp`` phrase-level (Taiwan phrases to mainland ones, e.g.
      檔案 -> 文件, then ``TSPhrases``/``TSCharacters``).
    * 0 < T <= S (Simplified with some Traditional characters): only the
      Traditional-only characters converted, character by character
      (:func:`stages.zh_script.traditional_only_table`), whatever ``fold``.

    So the result does not depend on whitespace between ideographs (a
    phrase split by a line wrap still matches, and character shingles drop
    spaces anyway), and a Simplified document's shingles are those it
    had unfolded. Measured on the 703 zh_CN/zh_TW man-page pairs of
    /work/shared/corpus (character 5-gram Jaccard, median / pairs >= 0.8;
    ``bench/script_fold.py``, docs/stages/dedup.md): none 0.319 / 5;
    ``t2s`` 0.702 / 158; ``tw2sp`` 0.958 / 690 (the former ``tw2sp`` on
    every document: 0.920 / 655).

    Args:
        texts: near-normalized texts (:func:`near_normalize`).
        fold: ``none`` (unchanged), ``t2s`` or ``tw2sp``.

    Returns:
        The folded texts, same length and order. O(total characters): one
        regex pass per text, OpenCC (~5 M characters/s per core) on
        Traditional ones.
    """
    if fold == "none":
        return list(texts)
    return [fold_to_simplified(text, fold, join_wrapped=True) for text in texts]
