"""Text helpers shared by the stages: script detection and word segmentation.

Chinese is written without spaces, so "words" cannot come from ``str.split``:
a 1,500-character Chinese paragraph is one or two whitespace tokens. We segment
Chinese with jieba's Rust port ``rjieba`` (the same dictionary as jieba);
Japanese, for which we ship no segmenter, counts each Han or kana character
as one word; every other language (Korean included: it writes spaces between
words) splits into runs of letters, digits and combining marks.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Languages written (mostly) without spaces between words.
CJK_LANGS = frozenset({"zh", "ja", "ko", "yue", "wuu"})

# CJK ideographs (basic, Ext-A, Ext-B..Ext-H, compatibility), kana, hangul.
CJK_CHAR_CLASS = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U000323af"
)
# Full-width Latin letters and digits (U+FF10-FF19, U+FF21-FF3A, U+FF41-FF5A)
# -> ASCII, one character for one (lengths and offsets are unchanged). jieba
# splits "２０２４" into four words and stop-word lists are ASCII.
FULL_WIDTH_ALNUM = {cp: cp - 0xFEE0 for lo, hi in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))
                    for cp in range(lo, hi + 1)}
# Searched first: str.translate with a dict costs ~90 ns per non-ASCII
# character, the search ~1 ns, and most texts hold no full-width letter.
FULL_WIDTH_ALNUM_RE = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")


def half_width_alnum(text: str) -> str:
    """``text`` with full-width Latin letters and digits as ASCII (one
    character for one; everything else, full-width punctuation included,
    unchanged)."""
    if not text.isascii() and FULL_WIDTH_ALNUM_RE.search(text):
        return text.translate(FULL_WIDTH_ALNUM)
    return text
# Invisible format characters (Unicode Cf: ZWSP, ZWNJ, ZWJ, LRM/RLM, bidi
# embeddings and isolates, BOM, soft hyphen, tags). They live in planes 0, 1
# and 14 only. Categories come from the running Python's unicodedata.
FORMAT_CHARS: frozenset[int] = frozenset(
    cp for cp in (*range(0x20000), *range(0xE0000, 0xE0080)) if unicodedata.category(chr(cp)) == "Cf")


# A paragraph break: a line break, then one or more blank (whitespace-only)
# lines. Line breaks are those of str.splitlines (LF, CRLF, CR, VT, FF,
# FS/GS/RS, NEL, U+2028, U+2029). Written as one literal per branch: re then
# scans for the first character with a fast character-set test (~20% faster
# than a class); \r\n is one break, never a break and a blank line.
_BREAK = r"(?:\r\n|\r(?!\n)|\n|\x0b|\x0c|\x1c|\x1d|\x1e|\x85|\u2028|\u2029)"
PARAGRAPH_BREAK_RE = re.compile(
    rf"{_BREAK}(?:[^\S\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]*{_BREAK})+")
# Han ideographs and kana: one character is one word outside Chinese (we ship
# no Japanese segmenter). Hangul is not here: Korean puts spaces between its
# words (eojeol), so a run of hangul is one word like a run of Latin letters.
HAN_KANA_CLASS = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U000323af"
)


def _mark_class() -> str:
    """A regex class body of every combining mark (Unicode category M: Mn,
    Mc, Me) in the BMP, the SMP and the variation selectors supplement:
    ~300 ranges, built once at import (~0.1 s). ``re``'s ``\\w`` does not
    match them, so without them a Devanagari, Tamil or Thai word is cut at
    every vowel sign (``हिन्दी`` became ``ह``, ``न``, ``द``)."""
    ranges, start = [], None
    for cp in [*range(0x20000), *range(0xE0100, 0xE01F0), 0x10FFFF]:
        is_mark = unicodedata.category(chr(cp)).startswith("M")
        if is_mark and start is None:
            start = cp
        elif not is_mark and start is not None:
            ranges.append(f"\\U{start:08x}-\\U{cp - 1:08x}")
            start = None
    return "".join(ranges)


MARK_CLASS = _mark_class()
# A word for space-separated languages: a letter or digit, then letters,
# digits, combining marks (apostrophes and hyphens inside a word kept), or a
# single Han or kana character. Possessive runs (no backtracking into a run).
_WORD_RE = re.compile(
    rf"[{HAN_KANA_CLASS}]|[^\W_{HAN_KANA_CLASS}][^\W{HAN_KANA_CLASS}]*+(?:[{MARK_CLASS}]++[^\W{HAN_KANA_CLASS}]*+)*+"
    rf"(?:['’\-](?=\w)[^\W{HAN_KANA_CLASS}]*+(?:[{MARK_CLASS}]++[^\W{HAN_KANA_CLASS}]*+)*+)*+"
)
# A token of rjieba is a word when it holds a letter or digit: [^\W_] is
# exactly str.isalnum (re's \w is isalnum or "_").
_ALNUM_SEARCH = re.compile(r"[^\W_]").search


@lru_cache(maxsize=1)
def _rjieba():
    import rjieba

    return rjieba


def words(text: str, lang: str | None) -> list[str]:
    """Split ``text`` into words, skipping whitespace and punctuation.

    Args:
        text: any string.
        lang: the document language code (``zh``, ``en``, ...), or None.

    Returns:
        Words as strings; full-width letters and digits are given as their
        ASCII forms (``２０２４`` is one word ``2024``, as in half-width
        text). For ``zh``/``yue``/``wuu`` the words come from the
        rjieba segmenter (so ``"我们今天去北京"`` gives ``["我们", "今天", "去",
        "北京"]``); for every other language a Han or kana character is one
        word (Japanese: we ship no segmenter), and words are otherwise runs of
        letters, digits and combining marks (so ``"हिन्दी भाषा"`` is two
        words and Korean ``"한국어 텍스트"`` is two: hangul words are
        space-separated).

    Whitespace runs are collapsed to one space before rjieba (jieba treats
    whitespace as a block boundary, so the words do not change) and its
    tokens are kept when one regex search finds a letter or digit: ~1.5x
    faster for Chinese than cutting the raw text and testing each character.
    The same words as that slower splitter on every document of
    /work/shared/corpus and of the bundled sample (tests/stages/test_text.py
    keeps it as the reference).
    """
    text = half_width_alnum(text)
    if lang in ("zh", "yue", "wuu"):
        return [w for w in _rjieba().cut(" ".join(text.split())) if _ALNUM_SEARCH(w)]
    return _WORD_RE.findall(text)


def nfkc(text: str) -> str:
    """Unicode NFKC: folds full-width digits, letters and punctuation to ASCII."""
    return unicodedata.normalize("NFKC", text)


@lru_cache(maxsize=1)
def _quality_word_re() -> re.Pattern:
    """The word pattern of :func:`quality_words`: a run of Han/kana (group 1,
    cut by rjieba afterwards) or a :func:`words` word (letters, digits and
    combining marks)."""
    letter = rf"(?:[^\W{HAN_KANA_CLASS}]|[{MARK_CLASS}])"
    return re.compile(rf"([{HAN_KANA_CLASS}]+)|[^\W_{HAN_KANA_CLASS}]{letter}*+"
                      rf"(?:['’\-](?=\w){letter}*+)*+")


def quality_words(text: str, lang: str | None) -> list[str]:
    """Words for the quality rules (``stages.heuristics``): never assume
    spaces where a script has none, whatever the document's label.

    Args:
        text: any string.
        lang: the document language code, or None.

    Returns:
        For ``zh``/``yue``/``wuu``: :func:`words` (rjieba on the whole text).
        For every other label: runs of letters, digits and combining marks
        (so a Devanagari, Tamil or Thai word with its vowel signs is one word,
        not one per mark; Hangul syllables are letters of space-separated
        words), and every run of Han/kana characters cut by rjieba (kanji
        compounds as words; kana, which jieba's dictionary lacks, one word
        per character). A Japanese or Chinese paragraph inside an English
        page is thus measured with the segmenter, not as one word per
        character and not as one 300-character word. Full-width letters and
        digits are read as ASCII first (as :func:`words`).
    """
    if lang in ("zh", "yue", "wuu"):
        return words(text, lang)
    text = half_width_alnum(text)
    out: list[str] = []
    cut = None
    for match in _quality_word_re().finditer(text):
        run = match.group(1)
        if run is None:
            out.append(match.group())
        else:
            cut = cut or _rjieba().cut
            out.extend(w for w in cut(run) if _ALNUM_SEARCH(w))
    return out


_HAN_KANA_START = re.compile(f"[{HAN_KANA_CLASS}]").match


def is_han_kana_word(word: str) -> bool:
    """True when ``word`` (a :func:`quality_words` word) starts with a Han or
    kana character: a word of the unspaced part of a text."""
    return _HAN_KANA_START(word) is not None
