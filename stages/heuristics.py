"""Rule-based quality filters: Gopher, C4, FineWeb, CJK/Chinese-corpus and code rules.

Each document is measured once: its lines, paragraphs and words (``stages.text``
segmentation for the document's ``langid_lang``: rjieba for Chinese, one word
per CJK character for Japanese/Korean, letter runs otherwise) are computed a
single time (:class:`Document`, lazily) and shared by every rule; word n-grams
are counted once for n = 2..10 (:attr:`Document.ngram_stats`). A *value* is a
named measurement (column ``heuristics_<value>``); a *rule* compares one value
with one threshold and drops the document with reason ``heuristics.<rule>``.

Rule families (:data:`FAMILIES`; each can be switched off as a whole with
``Config.disabled_families``, each rule with a null threshold):

* ``gopher_quality`` — Rae et al. 2021 ("Gopher"), Appendix A.1.1: word counts,
  mean word length, symbol-to-word ratio, bullet and ellipsis lines, share of
  words with a letter, stop words.
* ``gopher_repetition`` — Gopher Table A1: duplicate lines and paragraphs,
  top 2/3/4-gram character share, duplicated 5..10-gram character share.
* ``c4`` — Raffel et al. 2020, Section 2.2: sentences in lines ending with
  terminal punctuation (full-width ``。！？…`` counted), ``lorem ipsum``,
  curly brackets, an optional bad-word list.
* ``fineweb`` — Penedo et al. 2024 ("FineWeb", its custom filters): share of
  lines ending with punctuation, short lines, characters in duplicated lines,
  newlines per word.
* ``cjk`` — rules Chinese-corpus builders ask for: very long runs without a
  break (whitespace or punctuation, full-width included), escape and markup
  residue (``\\u00e9``, ``&amp;``, literal ``\\n``, HTML tags), mojibake,
  abnormal symbol share, code lines mixed into prose.
* ``code`` — StarCoder (Li et al. 2023) / The Stack: line lengths and
  alphanumeric share, for documents whose language is ``code``.

Thresholds come per language from :data:`PRESETS` (``zh``, ``en``, ``ja``,
``code``, and ``default`` for every other language), overridable per language
in the config. See docs/stages/heuristics.md for every default's source.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from collections.abc import Callable
from functools import cached_property
from itertools import filterfalse
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from stages.base import Column, Stage, StageConfig, with_decision
from stages.text import CJK_LANGS, PARAGRAPH_BREAK_RE, words_fast

FAMILIES = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "cjk", "code")

# A line "ends with terminal punctuation" (C4; FineWeb's line_punct_ratio uses
# the same test) when, stripped, it ends with one of these: ASCII . ! ? and
# closing quotes as C4/datatrove, plus the full-width and CJK forms.
TERMINAL_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", "」", "』", "。", "！", "？",
                        "…", "｡", "．", "．")
# C4 sentences: one run of sentence-final marks (ASCII ones followed by a
# space, a closing quote/bracket or the line end; CJK ones anywhere).
_SENTENCE_END_RE = re.compile(r"[。！？｡]+|…+|[.!?]+(?=[\s\"'”’」』)\]]|$)", re.MULTILINE)
# Gopher bullet lines: lines starting with a bullet (Gopher names "bullet
# points"; datatrove tests "•" and "-"; we add the common bullet glyphs).
BULLETS = ("•", "●", "○", "◦", "▪", "▫", "■", "□", "◆", "◇", "‣", "⁃", "-", "*", "·", "・")
ELLIPSES = ("...", "…")
# Patterns run over a whole partition at once with Arrow's RE2 kernels
# (``pyarrow.compute``; ~10x faster than one Python ``re`` call per document).
# Breaks for the longest unbroken run: whitespace, punctuation and symbols
# (Unicode P* and S*: ASCII, general, CJK and full-width forms alike).
_BREAK_RE2 = r"[\s\p{P}\p{S}]+"
# Characters that are neither letters, marks, digits, whitespace, punctuation
# nor printable ASCII: non-ASCII symbols (box drawing, emoji, math, dingbats),
# private-use, unassigned and control characters.
# Whitespace as str.isspace sees it: RE2's \s is ASCII only, so the Unicode
# separators (\p{Z}: U+3000 ideographic space, NBSP, U+2028/2029) and the
# other control-character line breaks are listed.
_ABNORMAL_RE2 = r"[^\p{L}\p{M}\p{N}\p{Z}\p{P}\t\n\x0b\x0c\r\x1c-\x1f\x85\x21-\x7e]"
# Escape and markup residue: JSON/C escapes left as text (\u00e9, \x41, a
# literal \n), HTML entities, HTML tags.
_RESIDUE_RE2 = (
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0e-\x1f\x7f]"
    r"|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\[nrt]"
    r"|&(?:amp|lt|gt|quot|apos|nbsp|#[0-9]{2,6}|#[xX][0-9a-fA-F]{2,5});"
    r"|</?(?:div|span|p|br|a|img|table|tr|td|th|li|ul|ol|script|style|font|b|i|h[1-6])\b[^<>]{0,200}>")
# A line that looks like program code (C-family, Python, shell, SQL): the
# pattern matches a whole line, so matches = code lines.
_CODE_LINE_RE2 = (
    r"(?m)^.*(?:[;{}][ \t\r]*$|^[ \t]*(?:#include\b|import\s+\w|from\s+\S+\s+import\b|def\s+\w+\s*\(|"
    r"class\s+\w+[:(]|function\b|var\s+\w|let\s+\w|const\s+\w|public\s|private\s|return\b|"
    r"if\s*\(|for\s*\(|while\s*\(|SELECT\s|\}\s*else\b)|=>|==|!=|&&|\|\||::|->|\)\s*\{).*$")
_LOREM_RE2 = r"(?i)lorem ipsum"
# Mojibake: the replacement character and the classic GBK/UTF-8 round-trip
# strings; and UTF-8 read as Latin-1/cp1252 (a lead byte shown as Â..ô
# followed by a continuation byte shown as U+0080..U+00BF or a cp1252 glyph),
# which ftfy confirms (Python ``re`` twin below for the line scan).
_MOJIBAKE_FIXED_RE2 = "\ufffd|锟斤拷|烫烫烫|屯屯屯"
_MOJIBAKE_SUSPECT_CLASS = (
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192"
    "\u02c6\u02dc\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]")
_MOJIBAKE_SUSPECT_RE = re.compile(_MOJIBAKE_SUSPECT_CLASS)

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


class Thresholds(pydantic.BaseModel):
    """Thresholds of every rule for one language; None turns a rule off.

    Units: words are ``stages.text.words`` words; characters are Python
    ``len`` (code points); ratios and shares are in 0..1; ``*_per_kchar``
    values are occurrences per 1,000 characters. ``short_line_chars`` is a
    parameter (not a rule): the most characters of a FineWeb "short line".
    Field defaults are all None; the shipped values are :data:`PRESETS`.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    @pydantic.model_validator(mode="after")
    def _not_negative(self) -> "Thresholds":
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is not None and not value >= 0:      # also NaN
                raise ValueError(f"{name} = {value} is negative or NaN")
        return self

    # gopher_quality
    min_chars: int | None = None
    min_words: int | None = None
    max_words: int | None = None
    max_symbol_word_ratio: float | None = None
    min_mean_word_length: float | None = None
    max_mean_word_length: float | None = None
    min_alpha_word_share: float | None = None
    max_bullet_line_fraction: float | None = None
    max_ellipsis_line_fraction: float | None = None
    min_stop_words: int | None = None
    # gopher_repetition
    max_duplicate_line_fraction: float | None = None
    max_duplicate_line_char_fraction: float | None = None
    max_duplicate_paragraph_fraction: float | None = None
    max_duplicate_paragraph_char_fraction: float | None = None
    max_top_2gram_char_share: float | None = None
    max_top_3gram_char_share: float | None = None
    max_top_4gram_char_share: float | None = None
    max_duplicate_5gram_char_share: float | None = None
    max_duplicate_6gram_char_share: float | None = None
    max_duplicate_7gram_char_share: float | None = None
    max_duplicate_8gram_char_share: float | None = None
    max_duplicate_9gram_char_share: float | None = None
    max_duplicate_10gram_char_share: float | None = None
    # Parameter, not a rule: the stop-word and n-gram repetition rules (marked
    # ``long_only`` in RULES) apply only to documents with at least this many
    # words; None applies them to all.
    long_document_min_words: int | None = None
    # c4
    min_sentences: int | None = None
    max_lorem_ipsum: int | None = None
    max_curly_brackets: int | None = None
    max_bad_words: int | None = None
    # fineweb
    min_line_punct_ratio: float | None = None
    max_short_line_fraction: float | None = None
    short_line_chars: int = 30
    max_fineweb_duplicate_line_char_fraction: float | None = None
    max_newline_word_ratio: float | None = None
    # cjk
    max_unbroken_run: int | None = None
    max_residue_per_kchar: float | None = None
    max_mojibake_per_kchar: float | None = None
    max_abnormal_char_share: float | None = None
    max_code_line_fraction: float | None = None
    # code
    max_line_length: int | None = None
    max_mean_line_length: float | None = None
    min_alnum_char_share: float | None = None


_GOPHER_REPETITION = dict(
    # Gopher (Rae et al. 2021), Table A1: duplicate lines <= 30% of lines and
    # <= 20% of characters, the same for paragraphs; top 2/3/4-gram <= 20/18/16%
    # of characters; duplicated 5..10-grams <= 15/14/13/12/11/10%.
    max_duplicate_line_fraction=0.30,
    max_duplicate_line_char_fraction=0.20,
    max_duplicate_paragraph_fraction=0.30,
    max_duplicate_paragraph_char_fraction=0.20,
    max_top_2gram_char_share=0.20,
    max_top_3gram_char_share=0.18,
    max_top_4gram_char_share=0.16,
    max_duplicate_5gram_char_share=0.15,
    max_duplicate_6gram_char_share=0.14,
    max_duplicate_7gram_char_share=0.13,
    max_duplicate_8gram_char_share=0.12,
    max_duplicate_9gram_char_share=0.11,
    max_duplicate_10gram_char_share=0.10,
    # Gopher sets all its thresholds on documents of >= 50 words (its
    # min_words). On shorter ones, one refrain of a song or poem is "20% of
    # the characters": applied to all documents the n-gram rules drop 36% of
    # the ru and es fortunes and the stop-word rule 48-56% of the en and zh
    # fortunes of /work/shared/corpus (our measurement).
    long_document_min_words=50,
)
_GOPHER_LINES = dict(
    max_bullet_line_fraction=0.90,     # Gopher
    max_ellipsis_line_fraction=0.30,   # Gopher
)
_C4 = dict(
    # C4 keeps pages with >= 5 sentences (in lines ending with terminal
    # punctuation). Most fortunes and poems have fewer: 5 drops 98-100% of the
    # ru/de/es/en fortunes and 81% of the zh ones of /work/shared/corpus. Even
    # 1 drops 3-5% of the de/es/ru fortunes, mostly good quotes whose last line
    # is an attribution ("-- Golem Newsticker") (our measurement), so the rule
    # is off by default (set it per language to measure and apply it).
    min_sentences=None,
    max_lorem_ipsum=0,                 # C4: a page with "lorem ipsum" is dropped
    # C4 drops any page with "{"; off: technical prose quotes shell and C code
    # (our measurement: 11-25% of the man pages per language).
    max_curly_brackets=None,
    max_bad_words=0,                   # C4 (List of Dirty, Naughty, ... Words); needs Config.bad_words
)
_FINEWEB = dict(
    # FineWeb custom filters (Penedo et al. 2024): line_punct_thr 0.12,
    # short_line_thr 0.67 (lines <= 30 chars), char_duplicates_ratio 0.01,
    # new_line_ratio 0.3. On /work/shared/corpus the first three drop 6-24%,
    # 46% (zh fortunes: poems) and 15-28% (man pages) (our measurement), so
    # they are off by default; the values are still documented and settable.
    min_line_punct_ratio=None,
    max_short_line_fraction=None,
    max_fineweb_duplicate_line_char_fraction=None,
    max_newline_word_ratio=0.30,
)
_CJK_RULES = dict(
    # Our measurements on /work/shared/corpus (docs/stages/heuristics.md):
    # p99.9 of the longest unbroken run is 44-99 characters in every language
    # (max 232, a zh page of concatenated identifiers): 100 keeps them all but 1.
    max_unbroken_run=100,
    max_residue_per_kchar=5.0,         # ours: 5 escapes/entities/tags per 1,000 chars
    max_mojibake_per_kchar=1.0,        # ours: one mojibake sequence per 1,000 chars
    max_abnormal_char_share=0.10,      # ours: 10% of characters symbols/emoji/private use
    max_code_line_fraction=0.50,       # ours: half of the lines look like code
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
        # Stop words: no list for this language (Gopher's list is English).
        **_GOPHER_LINES, **_GOPHER_REPETITION, **_C4, **_FINEWEB, **_CJK_RULES,
    ),
    "en": Thresholds(
        min_chars=20, min_words=5, max_words=100_000,
        max_symbol_word_ratio=0.10, min_mean_word_length=3.0, max_mean_word_length=10.0,
        min_alpha_word_share=0.80,         # Gopher
        min_stop_words=2,                  # Gopher: >= 2 of the, be, to, of, and, that, have, with
        **_GOPHER_LINES, **_GOPHER_REPETITION, **_C4, **_FINEWEB, **_CJK_RULES,
    ),
    "zh": Thresholds(
        # Words are rjieba words (mean ~1.6 characters), so word counts are
        # ~0.6 x characters; mean word length is not used for CJK.
        min_chars=10,                      # our measurement (short zh fortunes)
        min_words=5,
        max_words=200_000,                 # Gopher's 100k words ~ 160k zh chars; doubled
        max_symbol_word_ratio=0.10,        # Gopher ('……' counts once)
        min_alpha_word_share=0.70,         # our measurement, as default
        min_stop_words=2,                  # Gopher's count, with the zh list of STOP_WORDS
        # FineWeb's 30-character short line scaled by the en:zh character
        # ratio of the same 15 Debian Reference pages (556k / 306k = 1.8).
        short_line_chars=16,
        **_GOPHER_LINES, **_GOPHER_REPETITION, **_C4, **_FINEWEB, **_CJK_RULES,
    ),
    "ja": Thresholds(
        min_chars=10, min_words=5, max_words=200_000, max_symbol_word_ratio=0.10,
        min_alpha_word_share=0.70,
        short_line_chars=22,               # 30 x en:ja ratio of debref (401k / 556k)
        **_GOPHER_LINES, **_C4, **_FINEWEB, **_CJK_RULES,
        **{**_GOPHER_REPETITION,
           # Japanese words are single characters here (no segmenter), so a
           # "5-gram" is 5 characters: the duplicated 5..10-gram rules drop
           # 87% of the ja man pages (ours). Off until a ja segmenter is used.
           **{f"max_duplicate_{n}gram_char_share": None for n in range(5, 11)}},
    ),
    "code": Thresholds(
        # StarCoder (Li et al. 2023) / The Stack (Kocetkov et al. 2022)
        # filters: max line length 1000, mean line length 100, alphanumeric
        # characters >= 25% of the file. Prose rules do not apply to code.
        min_chars=20,
        max_line_length=1000,
        max_mean_line_length=100.0,
        min_alnum_char_share=0.25,
        max_mojibake_per_kchar=1.0,        # ours, as prose
    ),
}


class Config(StageConfig):
    """Config of the ``heuristics`` stage.

    Attributes:
        thresholds: language code (``zh``, ``en``, ``ja``, ``code``,
            ``default``, any ``langid_lang``) -> thresholds to override. Only
            the fields given are changed; they apply on top of
            ``PRESETS[lang]`` (or ``PRESETS["default"]`` for a language
            without a preset). An explicit null turns a rule off for that
            language. Example: ``{"zh": {"max_top_2gram_char_share": null}}``.
        disabled_families: rule families (:data:`FAMILIES`) switched off for
            every language.
        bad_words: language -> words (compared with the document's words;
            ASCII words case-insensitively) for C4's bad-word rule
            (``max_bad_words``). Empty by default: the project ships no list.
    """

    requires = {"langid_lang": "the word segmenter and the rule thresholds follow the language"}

    thresholds: dict[str, Thresholds] = {}
    disabled_families: list[Literal["gopher_quality", "gopher_repetition", "c4", "fineweb",
                                    "cjk", "code"]] = []
    bad_words: dict[str, list[str]] = {}

    @pydantic.field_serializer("thresholds")
    def _only_given(self, thresholds: dict[str, Thresholds]) -> dict[str, dict[str, Any]]:
        """Serialize only the fields each override gives: the stage config
        travels to workers as JSON, and an override read back with every
        field present would turn off every rule it does not name."""
        return {lang: t.model_dump(exclude_unset=True) for lang, t in thresholds.items()}

    def for_language(self, lang: str | None) -> Thresholds:
        """The effective thresholds for documents of language ``lang``.

        Mean word length is never used for CJK languages (``zh``, ``ja``,
        ``ko``, ``yue``, ``wuu``): their words are one or two characters.
        Rules of ``disabled_families`` are set to None.
        """
        preset = PRESETS.get(lang)
        merged = preset if preset is not None else PRESETS["default"]
        # A language without a preset takes the user's "default" layer first.
        for layer in [lang] if preset is not None else ["default", lang]:
            if layer in self.thresholds:
                update = self.thresholds[layer].model_dump(exclude_unset=True)
                merged = merged.model_copy(update=update)
        off = {rule.name: None for rule in RULES if rule.family in self.disabled_families}
        if lang in CJK_LANGS:
            off.update(min_mean_word_length=None, max_mean_word_length=None)
        if lang not in self.bad_words:
            off["max_bad_words"] = None
        return merged.model_copy(update=off) if off else merged

    def effective_thresholds(self) -> dict[str, dict[str, int | float]]:
        """The thresholds applied per language, after presets, overrides,
        ``disabled_families``, the CJK rule and ``bad_words``
        (:meth:`for_language`): language -> the rules that are on (and the
        parameters ``short_line_chars``, ``long_document_min_words``) with
        their values; a rule that is off is absent.

        Languages: every preset (``code``, ``default``, ``en``, ``ja``,
        ``zh``), every language of ``thresholds`` and ``bad_words``, and the
        CJK languages (``stages.text.CJK_LANGS``); any other language gets the
        ``default`` entry. Sorted by language, so equal configs give equal
        JSON.
        """
        langs = set(PRESETS) | set(self.thresholds) | set(self.bad_words) | set(CJK_LANGS)
        return {lang: self.for_language(lang).model_dump(exclude_none=True) for lang in sorted(langs)}


@functools.lru_cache(maxsize=1)
def _break_table() -> np.ndarray:
    """bool[0x30000]: code point is whitespace, punctuation (P*) or a symbol
    (S*). Code points above (Plane 3+: rare CJK extensions, tags) are not."""
    table = np.zeros(0x30000, bool)
    for cp in range(0x30000):
        ch = chr(cp)
        table[cp] = ch.isspace() or unicodedata.category(ch)[0] in "PS"
    return table


def _unbroken_runs(texts: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """int64[n]: the longest run of characters without whitespace,
    punctuation or symbols in each text, for all texts in one numpy pass
    (texts joined by a line break; a run never crosses two texts)."""
    values = texts.to_pylist()
    if not values:
        return np.zeros(0, np.int64)
    values = [v or "" for v in values]
    codes = np.frombuffer("\n".join(values).encode("utf-32-le"), np.uint32)
    table = _break_table()
    breaks = np.ones(len(codes) + 2, bool)              # a break before and after all
    np.take(table, codes, out=breaks[1:-1], mode="clip")
    breaks[1:-1] &= codes < len(table)
    where = np.flatnonzero(breaks)                      # positions in codes, + 1
    runs = np.diff(where) - 1                           # the run ending at each break
    doc_ends = np.cumsum([len(v) + 1 for v in values])  # separator position + 1, per text
    owner = np.searchsorted(doc_ends, where[1:], side="left")   # nondecreasing
    out = np.zeros(len(values), np.int64)
    first = np.flatnonzero(np.diff(owner, prepend=-1))  # each text's first run
    docs = owner[first]
    maxima = np.maximum.reduceat(runs, first)
    inside = docs < len(values)
    out[docs[inside]] = maxima[inside]
    return out


def _count(pattern: str, by_line: bool = False) -> Callable[[pa.ChunkedArray | pa.Array], np.ndarray]:
    """Matches of an RE2 ``pattern`` per text. ``by_line``: every line break
    (CR, CRLF, U+2028...) is made ``\\n`` first, since RE2's ``(?m)`` knows
    only ``\\n``."""
    def count(texts):
        if by_line:
            texts = pc.replace_substring_regex(texts, _LINE_BREAK_RE2, "\n")
        return pc.count_substring_regex(texts, pattern).to_numpy(zero_copy_only=False)
    return count


_LINE_BREAK_RE2 = r"\r\n|[\r\x0b\x0c\x1c-\x1e\x{85}\x{2028}\x{2029}]"


# Measurements computed for a whole partition at once (Arrow RE2 kernels):
# name -> function(string array of n texts) -> int64[n].
BATCH_COUNTS: dict[str, Callable[[pa.ChunkedArray | pa.Array], np.ndarray]] = {
    "unbroken_run": _unbroken_runs,
    "abnormal_chars": _count(_ABNORMAL_RE2),
    "residue": _count(_RESIDUE_RE2),
    "code_lines": _count(_CODE_LINE_RE2, by_line=True),
    "line_breaks": _count(r"\n|" + _LINE_BREAK_RE2),
    "lorem_ipsum": _count(_LOREM_RE2),
    "mojibake_fixed": _count(_MOJIBAKE_FIXED_RE2),
    "mojibake_suspect": _count(_MOJIBAKE_SUSPECT_CLASS),
}


def batch_counts(texts: pa.ChunkedArray | pa.Array) -> list[dict[str, int]]:
    """:data:`BATCH_COUNTS` of every text: n dicts of name -> count."""
    columns = {name: fn(texts).tolist() for name, fn in BATCH_COUNTS.items()}
    return [dict(zip(columns, row)) for row in zip(*columns.values())]


class Document:
    """One document's text, measured lazily; every value is computed at most once.

    Attributes:
        text: the document (str).
        lang: its ``langid_lang`` (str or None).
        short_line_chars: most characters of a FineWeb short line.
        bad_words: the C4 bad-word set for ``lang`` (empty: none).
    """

    def __init__(self, text: str, lang: str | None, short_line_chars: int = 30,
                 bad_words: frozenset[str] = frozenset(),
                 counts: dict[str, int] | None = None):
        self.text = text
        self.lang = lang
        self.short_line_chars = short_line_chars
        self.bad_words = bad_words
        if counts is not None:
            self.counts = counts

    @cached_property
    def counts(self) -> dict[str, int]:
        """:data:`BATCH_COUNTS` of this text (given by the stage for a whole
        partition; computed here for a lone document)."""
        return batch_counts(pa.array([self.text], pa.string()))[0]

    @cached_property
    def raw_lines(self) -> list[str]:
        """Non-blank lines as written (indentation kept), for line lengths
        (any line break: LF, CRLF, CR, U+2028)."""
        return [line for line in self.text.splitlines() if line and not line.isspace()]

    @cached_property
    def lines(self) -> list[str]:
        """Non-blank lines, stripped."""
        return list(map(str.strip, self.raw_lines))

    @cached_property
    def paragraphs(self) -> list[str]:
        """Paragraphs (runs of non-blank lines; any line break, see
        :data:`stages.text.PARAGRAPH_BREAK_RE`), stripped."""
        return [p.strip() for p in PARAGRAPH_BREAK_RE.split(self.text) if p.strip()]

    @cached_property
    def line_duplicates(self) -> tuple[float | None, float | None]:
        """(share of lines, share of line characters) repeating an earlier line."""
        return _duplicate_fractions(self.lines)

    @cached_property
    def paragraph_duplicates(self) -> tuple[float | None, float | None]:
        """(share of paragraphs, share of paragraph characters) repeating one."""
        return _duplicate_fractions(self.paragraphs)

    @cached_property
    def words(self) -> list[str]:
        """``stages.text.words(text, lang)``."""
        return words_fast(self.text, self.lang)

    @cached_property
    def word_chars(self) -> int:
        """Characters in all words."""
        return sum(map(len, self.words))

    @cached_property
    def ngram_stats(self) -> dict[str, float | None]:
        """Gopher's word n-gram repetition values, all from one pass over n.

        ``top_{n}gram_char_share`` (n = 2, 3, 4): characters covered by the
        most frequent n-gram, ``count(top) * chars(top) / word_chars``; among
        n-grams with the top count the longest is taken. An n-gram seen once
        is no repetition: 0.0 (datatrove counts it, which drops every short
        document).

        ``duplicate_{n}gram_char_share`` (n = 5..10): characters of the words
        covered by any occurrence of an n-gram that occurs more than once,
        each word counted once where such n-grams overlap (Gopher's wording,
        Rae et al. 2021 A.1.1), over ``word_chars``.

        Every value is None with fewer than ``n`` words (or no word
        characters). n-grams are numbered exactly, no hashing: an n-gram's id
        is the dense id of (id of its (n-1)-gram prefix, id of its last
        word). When no n-gram of size n repeats, none longer does, so the loop
        stops there. Short documents use Python dicts, long ones Arrow's hash
        dictionary encoding (same ids; measured crossover ~300 words).
        """
        return ngram_stats_batch([self.words])[0]


def ngram_stats_batch(word_lists: list[list[str]]) -> list[dict[str, float | None]]:
    """Gopher's word n-gram repetition values of many documents at once.

    Args:
        word_lists: each document's words (:func:`stages.text.words`).

    Returns:
        One dict per document with ``top_{n}gram_char_share`` (n = 2, 3, 4)
        and ``duplicate_{n}gram_char_share`` (n = 5..10), see
        :attr:`Document.ngram_stats` for the definitions.

    Method: the words of all documents are concatenated and numbered once
    (Arrow hash dictionary encoding); an n-gram's id is the dense id of (id
    of its (n-1)-gram prefix, id of its last word), starting from (document,
    word), so ids are exact (no hashing) and never shared across documents;
    counts, per-document maxima and covered characters are numpy reductions
    over the whole batch, and only n-grams whose two (n-1)-grams both repeat
    are numbered at level n. The loop over n stops when no n-gram repeats in
    any document (no longer one can then).
    """
    out: list[dict[str, float | None]] = []
    for words in word_lists:
        size = len(words) if any(words) else 0
        out.append({name: (None if size < n else 0.0) for n, name in _NGRAM_NAMES})
    sel = [i for i, words in enumerate(word_lists) if len(words) >= 2]
    if not sel:
        return out
    doc_words = np.array([len(word_lists[i]) for i in sel], np.int64)
    flat = pa.array([w for i in sel for w in word_lists[i]], pa.string())
    encoded = flat.dictionary_encode()
    ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    num_ids = len(encoded.dictionary)
    lengths = pc.utf8_length(flat).to_numpy(zero_copy_only=False).astype(np.int64)
    total = len(ids)
    starts = np.zeros(len(sel), np.int64)
    np.cumsum(doc_words[:-1], out=starts[1:])
    doc_of = np.repeat(np.arange(len(sel)), doc_words)
    csum = np.zeros(total + 1, np.int64)
    np.cumsum(lengths, out=csum[1:])
    word_chars = np.add.reduceat(lengths, starts)
    left = doc_words[doc_of] - (np.arange(total) - starts[doc_of])   # words from s to doc end
    keys = _dense(doc_of * num_ids + ids)
    repeated = np.bincount(keys)[keys] > 1       # the (n-1)-gram at s occurs twice or more
    for n in range(2, 11):
        # An n-gram at s can repeat only if the (n-1)-grams at s and s+1 do.
        candidate = repeated & (left >= n)
        candidate[:-1] &= repeated[1:]
        index = np.flatnonzero(candidate)
        if len(index) == 0:
            break
        grams = _dense(keys[index] * num_ids + ids[index + n - 1])
        gram_counts = np.bincount(grams)
        if gram_counts.max() < 2:
            break
        counts = np.zeros(total, np.int64)
        counts[index] = gram_counts[grams]
        repeated = counts > 1
        keys = np.zeros(total, np.int64)
        keys[index] = grams
        if n <= 4:
            top = np.maximum.reduceat(counts, starts)
            gram_chars = np.zeros(total, np.int64)
            gram_chars[index] = csum[index + n] - csum[index]
            best_chars = np.maximum.reduceat(
                np.where(counts == top[doc_of], gram_chars, 0), starts)
            share = np.where(top >= 2, top * best_chars / np.maximum(word_chars, 1), 0.0)
            name = f"top_{n}gram_char_share"
        else:
            dup_starts = np.flatnonzero(repeated)
            cover = (np.bincount(dup_starts, minlength=total + 1)
                     - np.bincount(dup_starts + n, minlength=total + 1))
            covered = np.cumsum(cover[:total]) > 0
            share = np.add.reduceat(np.where(covered, lengths, 0), starts) / np.maximum(word_chars, 1)
            name = f"duplicate_{n}gram_char_share"
        for i, value in zip(sel, share.tolist()):
            doc = out[i]
            if doc[name] is not None:
                doc[name] = value
    return out


_NGRAM_NAMES = [(n, f"top_{n}gram_char_share" if n <= 4 else f"duplicate_{n}gram_char_share")
                for n in range(2, 11)]


def _dense(values: np.ndarray) -> np.ndarray:
    """Dense ids (0..k-1, by first occurrence) of int64 ``values``."""
    return pc.dictionary_encode(pa.array(values)).indices.to_numpy(
        zero_copy_only=False).astype(np.int64)


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else num / den


# --------------------------------------------------------------- gopher_quality

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


def bullet_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines starting with a bullet (:data:`BULLETS`)."""
    lines = doc.lines
    return _ratio(sum(1 for line in lines if line.startswith(BULLETS)), len(lines))


def ellipsis_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines ending with ``...`` or ``…`` (Gopher)."""
    lines = doc.lines
    return _ratio(sum(1 for line in lines if line.endswith(ELLIPSES)), len(lines))


def stop_word_count(doc: Document) -> int | None:
    """Words of the document in ``STOP_WORDS[lang]``; None for a language
    without a list."""
    stop = STOP_WORDS.get(doc.lang)
    if stop is None:
        return None
    return sum(map(stop.__contains__, doc.words))


# ------------------------------------------------------------ gopher_repetition

def _duplicate_fractions(items: list[str]) -> tuple[float | None, float | None]:
    total = sum(map(len, items))
    unique = set(items)
    return (_ratio(len(items) - len(unique), len(items)),
            _ratio(total - sum(map(len, unique)), total))


def duplicate_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines that repeat an earlier line (Gopher)."""
    return doc.line_duplicates[0]


def duplicate_line_char_fraction(doc: Document) -> float | None:
    """Share of non-blank-line characters in lines repeating an earlier line
    (Gopher; FineWeb's ``char_duplicates_ratio`` is the same measure)."""
    return doc.line_duplicates[1]


def duplicate_paragraph_fraction(doc: Document) -> float | None:
    """Share of paragraphs that repeat an earlier paragraph (Gopher)."""
    return doc.paragraph_duplicates[0]


def duplicate_paragraph_char_fraction(doc: Document) -> float | None:
    """Share of paragraph characters in repeated paragraphs (Gopher)."""
    return doc.paragraph_duplicates[1]


def top_ngram_char_share(doc: Document, n: int) -> float | None:
    """Gopher's top n-gram character share, n in 2..4 (see
    :attr:`Document.ngram_stats`)."""
    return doc.ngram_stats[f"top_{n}gram_char_share"]


def duplicate_ngram_char_share(doc: Document, n: int) -> float | None:
    """Gopher's duplicated n-gram character share, n in 5..10 (see
    :attr:`Document.ngram_stats`)."""
    return doc.ngram_stats[f"duplicate_{n}gram_char_share"]


# ------------------------------------------------------------------------- c4

def sentence_count(doc: Document) -> int:
    """C4 sentences: sentence-final marks (``. ! ?`` before a space, quote or
    line end; ``。！？…`` anywhere, a run counting once) in the lines that end
    with terminal punctuation (:data:`TERMINAL_PUNCTUATION`)."""
    kept = [line for line in doc.lines if line.endswith(TERMINAL_PUNCTUATION)]
    return len(_SENTENCE_END_RE.findall("\n".join(kept))) if kept else 0


def lorem_ipsum_count(doc: Document) -> int:
    """Occurrences of "lorem ipsum" (any case) (C4)."""
    return doc.counts["lorem_ipsum"]


def curly_bracket_count(doc: Document) -> int:
    """Occurrences of ``{`` (C4 drops a page containing one)."""
    return doc.text.count("{")


def bad_word_count(doc: Document) -> int:
    """Words in the configured bad-word list (ASCII words lowercased)."""
    bad = doc.bad_words
    return sum(1 for w in doc.words if (w.lower() if w.isascii() else w) in bad)


# -------------------------------------------------------------------- fineweb

def line_punct_ratio(doc: Document) -> float | None:
    """Share of non-blank lines ending with terminal punctuation (FineWeb's
    ``line_punct_ratio``; full-width marks count)."""
    lines = doc.lines
    return _ratio(sum(1 for line in lines if line.endswith(TERMINAL_PUNCTUATION)), len(lines))


def short_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines with at most ``short_line_chars`` characters
    (FineWeb: 30; per language in the presets)."""
    lines = doc.lines
    limit = doc.short_line_chars
    return _ratio(sum(1 for line in lines if len(line) <= limit), len(lines))


def newline_word_ratio(doc: Document) -> float | None:
    """Line breaks per word (FineWeb's ``new_line_ratio``; any line break:
    LF, CRLF, CR, U+2028...); None without words."""
    return _ratio(doc.counts["line_breaks"], len(doc.words))


# ------------------------------------------------------------------------ cjk

def unbroken_run(doc: Document) -> int:
    """Characters in the longest run without whitespace or punctuation
    (ASCII, general, CJK and full-width punctuation all break a run), so
    Chinese prose (no spaces, but ``，。``) is measured like English."""
    return doc.counts["unbroken_run"]


def residue_per_kchar(doc: Document) -> float | None:
    """Escape and markup residue per 1,000 characters: ``\\uXXXX``, ``\\xXX``,
    literal ``\\n``/``\\r``/``\\t``, HTML entities (``&amp;``, ``&#39;``),
    HTML tags (``<div>``, ``</p>``, ``<br/>``), terminal escape sequences
    (``ESC[31m``, one each) and other C0 control characters (not tab, line
    breaks or form feed; none occurs in /work/shared/corpus)."""
    return _ratio(1000 * doc.counts["residue"], len(doc.text))


def mojibake_per_kchar(doc: Document) -> float | None:
    """Mojibake sequences per 1,000 characters: U+FFFD, ``锟斤拷``/``烫烫烫``/
    ``屯屯屯`` (GBK/UTF-8 round trips), and UTF-8 read as Latin-1/cp1252
    (``Ã©``, ``â€™``, ``Ð¿``), confirmed with ftfy's ``badness`` on the lines
    that hold such a pair (ftfy runs at ~1.3 M chars/s, so only there)."""
    text = doc.text
    count = doc.counts["mojibake_fixed"]
    if doc.counts["mojibake_suspect"]:
        from ftfy.badness import badness

        count += sum(badness(line) for line in doc.lines if _MOJIBAKE_SUSPECT_RE.search(line))
    return _ratio(1000 * count, len(text))


def abnormal_char_share(doc: Document) -> float | None:
    """Share of characters that are not word characters, whitespace or common
    punctuation (ASCII, general, CJK, full-width): box drawing, emoji, math
    and other symbols, private-use characters."""
    return _ratio(doc.counts["abnormal_chars"], len(doc.text))


def code_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines that look like program code (end in ``;``,
    ``{`` or ``}``; start with ``def``/``import``/``#include``/``return``...;
    hold ``==``, ``&&``, ``->``, ``=>``, ``::``). Full-width ``；`` is prose."""
    return _ratio(doc.counts["code_lines"], len(doc.lines))


# ----------------------------------------------------------------------- code

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
    "bullet_line_fraction": bullet_line_fraction,
    "ellipsis_line_fraction": ellipsis_line_fraction,
    "stop_word_count": stop_word_count,
    "duplicate_line_fraction": duplicate_line_fraction,
    "duplicate_line_char_fraction": duplicate_line_char_fraction,
    "duplicate_paragraph_fraction": duplicate_paragraph_fraction,
    "duplicate_paragraph_char_fraction": duplicate_paragraph_char_fraction,
    **{f"top_{n}gram_char_share": (lambda d, n=n: top_ngram_char_share(d, n))
       for n in (2, 3, 4)},
    **{f"duplicate_{n}gram_char_share": (lambda d, n=n: duplicate_ngram_char_share(d, n))
       for n in range(5, 11)},
    "sentence_count": sentence_count,
    "lorem_ipsum_count": lorem_ipsum_count,
    "curly_bracket_count": curly_bracket_count,
    "bad_word_count": bad_word_count,
    "line_punct_ratio": line_punct_ratio,
    "short_line_fraction": short_line_fraction,
    "newline_word_ratio": newline_word_ratio,
    "unbroken_run": unbroken_run,
    "residue_per_kchar": residue_per_kchar,
    "mojibake_per_kchar": mojibake_per_kchar,
    "abnormal_char_share": abnormal_char_share,
    "code_line_fraction": code_line_fraction,
    "max_line_length": max_line_length,
    "mean_line_length": mean_line_length,
    "alnum_char_share": alnum_char_share,
}
_INT_VALUES = frozenset({"num_chars", "num_words", "max_line_length", "stop_word_count",
                         "sentence_count", "lorem_ipsum_count", "curly_bracket_count",
                         "bad_word_count", "unbroken_run"})


@dataclasses.dataclass(frozen=True)
class Rule:
    """Drop when ``value`` is below (``min``) or above (``max``) the threshold
    field ``name`` of :class:`Thresholds`; reason ``heuristics.<name>``."""

    name: str
    value: str
    bound: Literal["min", "max"]
    family: str
    long_only: bool = False     # skipped below Thresholds.long_document_min_words


# Checked in this order; the first failing rule is the document's reason.
RULES: tuple[Rule, ...] = (
    Rule("min_chars", "num_chars", "min", "gopher_quality"),
    Rule("min_words", "num_words", "min", "gopher_quality"),
    Rule("max_words", "num_words", "max", "gopher_quality"),
    Rule("max_line_length", "max_line_length", "max", "code"),
    Rule("max_mean_line_length", "mean_line_length", "max", "code"),
    Rule("min_alnum_char_share", "alnum_char_share", "min", "code"),
    Rule("max_mojibake_per_kchar", "mojibake_per_kchar", "max", "cjk"),
    Rule("max_residue_per_kchar", "residue_per_kchar", "max", "cjk"),
    Rule("max_abnormal_char_share", "abnormal_char_share", "max", "cjk"),
    Rule("max_unbroken_run", "unbroken_run", "max", "cjk"),
    Rule("max_code_line_fraction", "code_line_fraction", "max", "cjk"),
    Rule("max_symbol_word_ratio", "symbol_word_ratio", "max", "gopher_quality"),
    Rule("min_mean_word_length", "mean_word_length", "min", "gopher_quality"),
    Rule("max_mean_word_length", "mean_word_length", "max", "gopher_quality"),
    Rule("min_alpha_word_share", "alpha_word_share", "min", "gopher_quality"),
    Rule("max_bullet_line_fraction", "bullet_line_fraction", "max", "gopher_quality"),
    Rule("max_ellipsis_line_fraction", "ellipsis_line_fraction", "max", "gopher_quality"),
    Rule("min_stop_words", "stop_word_count", "min", "gopher_quality", long_only=True),
    Rule("max_duplicate_line_fraction", "duplicate_line_fraction", "max", "gopher_repetition"),
    Rule("max_duplicate_line_char_fraction", "duplicate_line_char_fraction", "max",
         "gopher_repetition"),
    Rule("max_duplicate_paragraph_fraction", "duplicate_paragraph_fraction", "max",
         "gopher_repetition"),
    Rule("max_duplicate_paragraph_char_fraction", "duplicate_paragraph_char_fraction", "max",
         "gopher_repetition"),
    *(Rule(f"max_top_{n}gram_char_share", f"top_{n}gram_char_share", "max", "gopher_repetition",
           long_only=True) for n in (2, 3, 4)),
    *(Rule(f"max_duplicate_{n}gram_char_share", f"duplicate_{n}gram_char_share", "max",
           "gopher_repetition", long_only=True) for n in range(5, 11)),
    Rule("min_sentences", "sentence_count", "min", "c4"),
    Rule("max_lorem_ipsum", "lorem_ipsum_count", "max", "c4"),
    Rule("max_curly_brackets", "curly_bracket_count", "max", "c4"),
    Rule("max_bad_words", "bad_word_count", "max", "c4"),
    Rule("min_line_punct_ratio", "line_punct_ratio", "min", "fineweb"),
    Rule("max_short_line_fraction", "short_line_fraction", "max", "fineweb"),
    Rule("max_fineweb_duplicate_line_char_fraction", "duplicate_line_char_fraction", "max",
         "fineweb"),
    Rule("max_newline_word_ratio", "newline_word_ratio", "max", "fineweb"),
)


@functools.lru_cache(maxsize=256)
def active_rules(thresholds: Thresholds) -> tuple[tuple[Rule, float], ...]:
    """``(rule, limit)`` of every rule that ``thresholds`` switches on, in
    :data:`RULES` order."""
    return tuple((rule, getattr(thresholds, rule.name)) for rule in RULES
                 if getattr(thresholds, rule.name) is not None)


def evaluate(doc: Document, thresholds: Thresholds) -> tuple[dict[str, Any], str | None]:
    """Measure the values that ``thresholds``' active rules need and decide.

    Returns:
        ``(values, reason)``: value name -> number (None when undefined), and
        the first failing rule's reason code (None when kept). A rule whose
        value is undefined (e.g. a ratio over zero words) fails. Every active
        rule's value is measured even after a rule failed, so each document
        shows all its values. ``long_only`` rules are measured but not
        applied to documents with fewer than ``long_document_min_words`` words.
    """
    values: dict[str, Any] = {}
    reason = None
    short = (thresholds.long_document_min_words is not None
             and len(doc.words) < thresholds.long_document_min_words)
    for rule, limit in active_rules(thresholds):
        value = values.get(rule.value, values)
        if value is values:
            value = values[rule.value] = VALUES[rule.value](doc)
        if reason is not None or (short and rule.long_only):
            continue
        if value is None or (value < limit if rule.bound == "min" else value > limit):
            reason = f"heuristics.{rule.name}"
    return values, reason


_NGRAM_RULES = tuple(rule.name for rule in RULES if rule.value in (
    *(f"top_{n}gram_char_share" for n in (2, 3, 4)),
    *(f"duplicate_{n}gram_char_share" for n in range(5, 11))))


def _needs_ngrams(thresholds: Thresholds) -> bool:
    return any(getattr(thresholds, name) is not None for name in _NGRAM_RULES)


class HeuristicsStage(Stage):
    """Adds ``heuristics_<value>`` columns (int64 for counts and lengths, see
    ``_INT_VALUES``; float64 otherwise; null when no active rule of the
    document's language needs it, or the value is undefined) and drops
    documents with ``heuristics.<rule>`` reasons.

    Needs the ``langid_lang`` column (raises KeyError without it).
    """

    row_independent = True
    name = "heuristics"
    order = 200
    Config = Config

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """``{"thresholds": config.effective_thresholds()}``: the thresholds
        per language the stage applies (in its fingerprint and the manifest,
        ``stages.heuristics.settings.thresholds``)."""
        return {"thresholds": config.effective_thresholds()}

    def process(self, table: pa.Table) -> pa.Table:
        """Measure and decide every document of ``table`` (n rows)."""
        config: Config = self.config
        text_column = pc.fill_null(table.column("text"), "")
        texts = text_column.to_pylist()
        langs = table.column("langid_lang").to_pylist()
        counts = batch_counts(text_column)
        by_lang: dict[str | None, tuple[Thresholds, frozenset[str]]] = {}
        columns: dict[str, list] = {name: [None] * len(texts) for name in VALUES}
        reasons: list[str | None] = []
        docs = []
        for row, (text, lang) in enumerate(zip(texts, langs)):
            if lang not in by_lang:
                bad = frozenset(w.lower() if w.isascii() else w
                                for w in config.bad_words.get(lang, ()))
                by_lang[lang] = (config.for_language(lang), bad)
            thresholds, bad = by_lang[lang]
            docs.append(Document(text or "", lang, thresholds.short_line_chars, bad, counts[row]))
        # Word n-grams of every document that needs them, in one batch.
        need = [doc for doc in docs if _needs_ngrams(by_lang[doc.lang][0])]
        for doc, stats in zip(need, ngram_stats_batch([doc.words for doc in need])):
            doc.__dict__["ngram_stats"] = stats      # fills the cached_property
        for row, doc in enumerate(docs):
            values, reason = evaluate(doc, by_lang[doc.lang][0])
            for name, value in values.items():
                columns[name][row] = value
            reasons.append(reason)
        arrays = {f"heuristics_{name}": pa.array(vals, pa.int64() if name in _INT_VALUES
                                                  else pa.float64())
                  for name, vals in columns.items()}
        return with_decision(table, arrays, reasons)


HeuristicsStage.columns = {
    f"heuristics_{name}": Column("int64" if name in _INT_VALUES else "double",
                                 f"the {name.replace('_', ' ')} measure (null when no active rule of the "
                                 "document's language needs it, or undefined)")
    for name in VALUES}
