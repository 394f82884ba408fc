"""Rule-based quality filters (first rule set: Gopher-style, CJK-aware, code).

Each document is measured once: its lines and its words (``stages.text``
segmentation for the document's ``langid_lang``: rjieba for Chinese, one word
per CJK character for Japanese/Korean, letter runs otherwise) are computed a
single time and shared by every rule. A *value* is a named measurement
(column ``heuristics_<value>``); a *rule* compares one value with one
threshold and drops the document with reason ``heuristics.<rule>``.

Thresholds come per language from :data:`PRESETS` (``zh``, ``en``, ``code``,
and ``default`` for every other language), overridable per language in the
config; a threshold set to null turns its rule off. Adding a rule family
(C4, FineWeb, more Gopher repetition, Chinese-specific rules) means: add
value functions to :data:`VALUES`, rows to :data:`RULES` and fields to
:class:`Thresholds`; nothing else changes. See docs/stages/heuristics.md.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from functools import cached_property
from itertools import filterfalse
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from stages.base import Stage, StageConfig, with_decision
from stages.text import CJK_LANGS, words_fast

# Documents with at least this many words count n-grams with numpy instead of
# collections.Counter (same result; measured crossover on /work/shared/corpus).
_NUMPY_NGRAM_MIN_WORDS = 300


class Thresholds(pydantic.BaseModel):
    """Thresholds of every rule for one language; None turns a rule off.

    Units: words are ``stages.text.words`` words; characters are Python
    ``len`` (code points); ratios and shares are in 0..1. Defaults are the
    ``default`` preset; the source of each is in :data:`PRESETS` and
    docs/stages/heuristics.md.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    min_chars: int | None = None
    min_words: int | None = None
    max_words: int | None = None
    max_symbol_word_ratio: float | None = None
    min_mean_word_length: float | None = None
    max_mean_word_length: float | None = None
    min_alpha_word_share: float | None = None
    max_duplicate_line_fraction: float | None = None
    max_duplicate_line_char_fraction: float | None = None
    max_top_2gram_char_share: float | None = None
    max_top_3gram_char_share: float | None = None
    max_top_4gram_char_share: float | None = None
    max_line_length: int | None = None
    max_mean_line_length: float | None = None
    min_alnum_char_share: float | None = None


_GOPHER_REPETITION = dict(
    # Gopher (Rae et al. 2021), Table A1: duplicate lines <= 30% of lines and
    # <= 20% of characters; top 2/3/4-gram <= 20/18/16% of characters.
    max_duplicate_line_fraction=0.30,
    max_duplicate_line_char_fraction=0.20,
    max_top_2gram_char_share=0.20,
    max_top_3gram_char_share=0.18,
    max_top_4gram_char_share=0.16,
)

PRESETS: dict[str, Thresholds] = {
    "default": Thresholds(
        # Gopher keeps 50..100,000 words; 50 would drop ~90% of the fortunes
        # (median 84 chars) of /work/shared/corpus, so we take 5 words and 20
        # characters (our measurement: drops <3% of any language there).
        min_chars=20,
        min_words=5,
        max_words=100_000,                 # Gopher
        max_symbol_word_ratio=0.10,        # Gopher: '#' and '...'/'…' per word
        min_mean_word_length=3.0,          # Gopher
        max_mean_word_length=10.0,         # Gopher
        # Gopher: 80% of words contain a letter. Man pages (options,
        # numbers, paths) fall below it often; 0.7 is our measurement.
        min_alpha_word_share=0.70,
        **_GOPHER_REPETITION,
    ),
    "en": Thresholds(
        min_chars=20, min_words=5, max_words=100_000,
        max_symbol_word_ratio=0.10, min_mean_word_length=3.0, max_mean_word_length=10.0,
        min_alpha_word_share=0.80,         # Gopher
        **_GOPHER_REPETITION,
    ),
    "zh": Thresholds(
        # Words are rjieba words (mean ~1.6 characters), so word counts are
        # ~0.6 x characters; mean word length is not used for CJK.
        min_chars=10,                      # our measurement (short zh fortunes)
        min_words=5,
        max_words=200_000,                 # Gopher's 100k words ~ 160k zh chars; doubled
        max_symbol_word_ratio=0.10,        # Gopher ('……' counts once)
        min_alpha_word_share=0.70,         # our measurement, as default
        **_GOPHER_REPETITION,
    ),
    "code": Thresholds(
        # StarCoder (Li et al. 2023) / The Stack (Kocetkov et al. 2022)
        # filters: max line length 1000, mean line length 100, alphanumeric
        # characters >= 25% of the file. Prose rules do not apply to code.
        min_chars=20,
        max_line_length=1000,
        max_mean_line_length=100.0,
        min_alnum_char_share=0.25,
    ),
}


class Config(StageConfig):
    """Config of the ``heuristics`` stage.

    Attributes:
        thresholds: language code (``zh``, ``en``, ``code``, ``default``, any
            ``langid_lang``) -> thresholds to override. Only the fields given
            are changed; they apply on top of ``PRESETS[lang]`` (or
            ``PRESETS["default"]`` for a language without a preset). An
            explicit null turns a rule off for that language.
            Example: ``{"zh": {"max_top_2gram_char_share": null}}``.
    """

    thresholds: dict[str, Thresholds] = {}

    def for_language(self, lang: str | None) -> Thresholds:
        """The effective thresholds for documents of language ``lang``.

        Mean word length is never used for CJK languages (``zh``, ``ja``,
        ``ko``, ``yue``, ``wuu``): their words are one or two characters.
        """
        preset = PRESETS.get(lang)
        merged = preset if preset is not None else PRESETS["default"]
        # A language without a preset takes the user's "default" layer first.
        for layer in [lang] if preset is not None else ["default", lang]:
            if layer in self.thresholds:
                update = self.thresholds[layer].model_dump(exclude_unset=True)
                merged = merged.model_copy(update=update)
        if lang in CJK_LANGS:
            merged = merged.model_copy(update={"min_mean_word_length": None,
                                               "max_mean_word_length": None})
        return merged


class Document:
    """One document's text, measured lazily; every value is computed at most once.

    Attributes:
        text: the document (str).
        lang: its ``langid_lang`` (str or None).
    """

    def __init__(self, text: str, lang: str | None):
        self.text = text
        self.lang = lang

    @cached_property
    def lines(self) -> list[str]:
        """Non-blank lines, stripped (any line break: LF, CRLF, CR, U+2028)."""
        return [s for s in map(str.strip, self.text.splitlines()) if s]

    @cached_property
    def raw_lines(self) -> list[str]:
        """Non-blank lines as written (indentation kept), for line lengths."""
        return [line for line in self.text.splitlines() if line and not line.isspace()]

    @cached_property
    def words(self) -> list[str]:
        """``stages.text.words(text, lang)``."""
        return words_fast(self.text, self.lang)

    @cached_property
    def word_chars(self) -> int:
        """Characters in all words."""
        return sum(map(len, self.words))

    @cached_property
    def word_ids(self) -> tuple[np.ndarray, int, np.ndarray]:
        """``(ids, num_ids, csum)``: int64[num_words] word ids numbered by first
        occurrence (Arrow dictionary encoding), the number of distinct words,
        and int64[num_words + 1] cumulative word lengths in characters."""
        arr = pa.array(self.words, pa.string())
        encoded = arr.dictionary_encode()
        csum = np.zeros(len(arr) + 1, np.int64)
        np.cumsum(pc.utf8_length(arr).to_numpy(zero_copy_only=False), out=csum[1:])
        return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                len(encoded.dictionary), csum)


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else num / den


def symbol_word_ratio(doc: Document) -> float | None:
    """('#' + '...' + '…') per word (Gopher). A run '……' (the Chinese
    ellipsis) counts once. None for a document without words."""
    t = doc.text
    symbols = t.count("#") + t.count("...") + t.count("…") - t.count("……")
    return _ratio(symbols, len(doc.words))


def mean_word_length(doc: Document) -> float | None:
    """Mean characters per word; None without words."""
    return _ratio(doc.word_chars, len(doc.words))


def alpha_word_share(doc: Document) -> float | None:
    """Share of words that contain a letter (``str.isalpha``; full-width
    letters and CJK characters are letters). None without words."""
    words = doc.words
    without_letter = sum(1 for w in filterfalse(str.isalpha, words)
                         if not any(map(str.isalpha, w)))
    return _ratio(len(words) - without_letter, len(words))


def duplicate_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines that repeat an earlier line (Gopher)."""
    lines = doc.lines
    return _ratio(len(lines) - len(set(lines)), len(lines))


def duplicate_line_char_fraction(doc: Document) -> float | None:
    """Share of non-blank-line characters in lines repeating an earlier line."""
    lines = doc.lines
    total = sum(map(len, lines))
    return _ratio(total - sum(map(len, set(lines))), total)


def top_ngram_char_share(doc: Document, n: int) -> float | None:
    """Characters covered by the most frequent word n-gram, over all word
    characters (Gopher's "top n-gram" repetition measure).

    ``count(top) * chars(top) / word_chars``, where chars(g) is the sum of the
    lengths of g's words. Among n-grams with the top count the longest is
    taken (deterministic). An n-gram that occurs once is no repetition: 0.0
    (datatrove's Gopher filter counts it; we do not, so that short documents
    are not dropped for having few n-grams). None with fewer than ``n`` words.
    """
    words = doc.words
    if len(words) < n or doc.word_chars == 0:
        return None
    if len(words) < _NUMPY_NGRAM_MIN_WORDS:
        counts = Counter(zip(*[words[i:] for i in range(n)]))
        top = max(counts.values())
        if top < 2:
            return 0.0
        return top * max(sum(map(len, g)) for g, c in counts.items() if c == top) / doc.word_chars
    ids, num_ids, csum = doc.word_ids
    m = len(words) - n + 1
    if num_ids ** n < 2**62:             # exact key: the n ids as digits in base num_ids
        keys = ids[:m].copy()
        for i in range(1, n):
            keys = keys * num_ids + ids[i:i + m]
    else:                                # exact too: rows of n ids compared as bytes
        rows = np.ascontiguousarray(np.stack([ids[i:i + m] for i in range(n)], axis=1))
        keys = rows.view(np.dtype((np.void, 8 * n))).ravel()
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    top = int(counts.max())
    if top < 2:
        return 0.0
    starts = first[counts == top]
    return top * int((csum[starts + n] - csum[starts]).max()) / doc.word_chars


def max_line_length(doc: Document) -> int | None:
    """Characters in the longest line, indentation included (None for a
    blank document)."""
    return max(map(len, doc.raw_lines), default=None)


def mean_line_length(doc: Document) -> float | None:
    """Mean characters per non-blank line, indentation included."""
    return _ratio(sum(map(len, doc.raw_lines)), len(doc.raw_lines))


def alnum_char_share(doc: Document) -> float | None:
    """Letters and digits (``str.isalnum``, full-width included) over all
    characters (StarCoder's "alphanumeric fraction")."""
    return _ratio(sum(map(str.isalnum, doc.text)), len(doc.text))


# value name -> function(Document) -> number or None (None: undefined, e.g. a ratio
# over zero words; a rule on an undefined value fails).
VALUES: dict[str, Callable[[Document], float | int | None]] = {
    "num_chars": lambda d: len(d.text),
    "num_words": lambda d: len(d.words),
    "symbol_word_ratio": symbol_word_ratio,
    "mean_word_length": mean_word_length,
    "alpha_word_share": alpha_word_share,
    "duplicate_line_fraction": duplicate_line_fraction,
    "duplicate_line_char_fraction": duplicate_line_char_fraction,
    "top_2gram_char_share": lambda d: top_ngram_char_share(d, 2),
    "top_3gram_char_share": lambda d: top_ngram_char_share(d, 3),
    "top_4gram_char_share": lambda d: top_ngram_char_share(d, 4),
    "max_line_length": max_line_length,
    "mean_line_length": mean_line_length,
    "alnum_char_share": alnum_char_share,
}
_INT_VALUES = frozenset({"num_chars", "num_words", "max_line_length"})


@dataclasses.dataclass(frozen=True)
class Rule:
    """Drop when ``value`` is below (``min``) or above (``max``) the threshold
    field ``name`` of :class:`Thresholds`; reason ``heuristics.<name>``."""

    name: str
    value: str
    bound: Literal["min", "max"]


# Checked in this order; the first failing rule is the document's reason.
RULES: tuple[Rule, ...] = (
    Rule("min_chars", "num_chars", "min"),
    Rule("min_words", "num_words", "min"),
    Rule("max_words", "num_words", "max"),
    Rule("max_line_length", "max_line_length", "max"),
    Rule("max_mean_line_length", "mean_line_length", "max"),
    Rule("min_alnum_char_share", "alnum_char_share", "min"),
    Rule("max_symbol_word_ratio", "symbol_word_ratio", "max"),
    Rule("min_mean_word_length", "mean_word_length", "min"),
    Rule("max_mean_word_length", "mean_word_length", "max"),
    Rule("min_alpha_word_share", "alpha_word_share", "min"),
    Rule("max_duplicate_line_fraction", "duplicate_line_fraction", "max"),
    Rule("max_duplicate_line_char_fraction", "duplicate_line_char_fraction", "max"),
    Rule("max_top_2gram_char_share", "top_2gram_char_share", "max"),
    Rule("max_top_3gram_char_share", "top_3gram_char_share", "max"),
    Rule("max_top_4gram_char_share", "top_4gram_char_share", "max"),
)


def evaluate(doc: Document, thresholds: Thresholds) -> tuple[dict[str, Any], str | None]:
    """Measure the values that ``thresholds``' active rules need and decide.

    Returns:
        ``(values, reason)``: value name -> number (None when undefined), and
        the first failing rule's reason code (None when kept). A rule whose
        value is undefined (e.g. a ratio over zero words) fails.
    """
    values: dict[str, Any] = {}
    reason = None
    for rule in RULES:
        limit = getattr(thresholds, rule.name)
        if limit is None:
            continue
        if rule.value not in values:
            values[rule.value] = VALUES[rule.value](doc)
        value = values[rule.value]
        failed = value is None or (value < limit if rule.bound == "min" else value > limit)
        if failed and reason is None:
            reason = f"heuristics.{rule.name}"
    return values, reason


class HeuristicsStage(Stage):
    """Adds ``heuristics_<value>`` columns (int64 for ``num_chars``,
    ``num_words``, ``max_line_length``; float64 otherwise; null when the rule
    needing it is off for the document's language or the value is undefined)
    and drops documents with ``heuristics.<rule>`` reasons.

    Needs the ``langid_lang`` column (raises KeyError without it).
    """

    name = "heuristics"
    Config = Config

    def process(self, table: pa.Table) -> pa.Table:
        """Measure and decide every document of ``table`` (n rows)."""
        config: Config = self.config
        texts = table.column("text").to_pylist()
        langs = table.column("langid_lang").to_pylist()
        by_lang: dict[str | None, Thresholds] = {}
        columns: dict[str, list] = {name: [None] * len(texts) for name in VALUES}
        reasons: list[str | None] = []
        for row, (text, lang) in enumerate(zip(texts, langs)):
            if lang not in by_lang:
                by_lang[lang] = config.for_language(lang)
            values, reason = evaluate(Document(text or "", lang), by_lang[lang])
            for name, value in values.items():
                columns[name][row] = value
            reasons.append(reason)
        arrays = {f"heuristics_{name}": pa.array(vals, pa.int64() if name in _INT_VALUES
                                                  else pa.float64())
                  for name, vals in columns.items()}
        return with_decision(table, arrays, reasons)
