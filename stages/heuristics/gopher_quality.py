"""Gopher quality rules: Rae et al. 2021 ("Gopher"), Appendix A.1.1.

Word counts, mean word length, symbol-to-word ratio, bullet and ellipsis
lines, share of words with a letter, stop words. The thresholds are Gopher's
(its 50..100,000 words, mean word length 3..10, symbol-to-word ratio 0.1,
80% of words with a letter, 90% bullet lines, 30% ellipsis lines, 2 stop
words), except where :data:`stages.heuristics.presets.PRESETS` says "ours"
(measured on /work/shared/corpus, docs/stages/heuristics.md). Words are
``stages.text.words`` words (rjieba words for Chinese).
"""

from __future__ import annotations

from itertools import filterfalse
from typing import TYPE_CHECKING

from stages.heuristics.family import Measure, Rule, ratio

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "gopher_quality"

# Gopher bullet lines: lines starting with a bullet (Gopher names "bullet
# points"; datatrove tests "•" and "-"; we add the common bullet glyphs).
BULLETS = ("•", "●", "○", "◦", "▪", "▫", "■", "□", "◆", "◇", "‣", "⁃", "-", "*", "·", "・")
ELLIPSES = ("...", "…")

# Gopher stop words (Rae et al. 2021, A.1.1), with Title/UPPER case forms.
_EN_STOP = ("the", "be", "to", "of", "and", "that", "have", "with")
# Chinese function words, our choice: the most frequent rjieba words of the
# zh prose of /work/shared/corpus that are function words, plus the classical
# particles 之 其 以 于 而 (the Shijing/classical fortunes use those).
_ZH_STOP = ("的", "了", "是", "在", "和", "有", "不", "这", "也", "就", "都", "而", "及",
            "与", "着", "或", "一个", "没有", "我们", "你们", "他们", "之", "其", "以",
            "为", "于", "所", "把", "被", "从", "对", "但", "很", "还", "又", "我", "你",
            "他", "她", "它", "个", "中", "上", "可以", "如果", "因为", "所以")
STOP_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(w for s in _EN_STOP for w in (s, s.title(), s.upper())),
    "zh": frozenset(_ZH_STOP),
}


def symbol_word_ratio(doc: Document) -> float | None:
    """('#' + '...' + '…') per word (Gopher). A run '……' (the Chinese
    ellipsis) counts once. None for a document without words."""
    t = doc.text
    symbols = t.count("#") + t.count("...") + t.count("…") - t.count("……")
    return ratio(symbols, len(doc.words))


def mean_word_length(doc: Document) -> float | None:
    """Mean characters per word of the space-separated part of the text
    (:attr:`Document.spaced_words`: Han/kana words are left out, so a
    Japanese paragraph in an English page does not count as one-letter
    words); None without such words (the rule then passes: the text has no
    part it measures)."""
    spaced = doc.spaced_words
    return ratio(sum(map(len, spaced)), len(spaced))


def alpha_word_share(doc: Document) -> float | None:
    """Share of words that contain a letter (``str.isalpha``; full-width
    letters and CJK characters are letters). None without words."""
    words = doc.words
    without_letter = sum(1 for w in filterfalse(str.isalpha, words)
                         if not any(map(str.isalpha, w)))
    return ratio(len(words) - without_letter, len(words))


def bullet_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines starting with a bullet (:data:`BULLETS`)."""
    lines = doc.lines
    return ratio(sum(1 for line in lines if line.startswith(BULLETS)), len(lines))


def ellipsis_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines ending with ``...`` or ``…`` (Gopher)."""
    lines = doc.lines
    return ratio(sum(1 for line in lines if line.endswith(ELLIPSES)), len(lines))


def stop_word_count(doc: Document) -> int | None:
    """Words of the document in ``STOP_WORDS[lang]``; None for a language
    without a list."""
    stop = STOP_WORDS.get(doc.lang)
    if stop is None:
        return None
    return sum(map(stop.__contains__, doc.words))



VALUES: dict[str, Measure] = {
    "num_chars": lambda d: len(d.text),
    "num_words": lambda d: len(d.words),
    "symbol_word_ratio": symbol_word_ratio,
    "mean_word_length": mean_word_length,
    "alpha_word_share": alpha_word_share,
    "bullet_line_fraction": bullet_line_fraction,
    "ellipsis_line_fraction": ellipsis_line_fraction,
    "stop_word_count": stop_word_count,
}
INT_VALUES = frozenset({"num_chars", "num_words", "stop_word_count"})
BATCH_COUNTS: dict = {}

# The document-size rules, checked before every other family's
# (:data:`stages.heuristics.rules.RULES`).
SIZE_RULES: tuple[Rule, ...] = (
    Rule("min_chars", "num_chars", "min", FAMILY),
    Rule("min_words", "num_words", "min", FAMILY),
    Rule("max_words", "num_words", "max", FAMILY),
)
RULES: tuple[Rule, ...] = (
    *SIZE_RULES,
    Rule("max_symbol_word_ratio", "symbol_word_ratio", "max", FAMILY),
    Rule("min_mean_word_length", "mean_word_length", "min", FAMILY, undefined_passes=True),
    Rule("max_mean_word_length", "mean_word_length", "max", FAMILY, undefined_passes=True),
    Rule("min_alpha_word_share", "alpha_word_share", "min", FAMILY),
    Rule("max_bullet_line_fraction", "bullet_line_fraction", "max", FAMILY),
    Rule("max_ellipsis_line_fraction", "ellipsis_line_fraction", "max", FAMILY),
    Rule("min_stop_words", "stop_word_count", "min", FAMILY, long_only=True),
)
