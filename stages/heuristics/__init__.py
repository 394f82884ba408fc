"""Rule-based quality filters: Gopher, C4, FineWeb, CJK/Chinese-corpus and code rules.

Each document is measured once: its lines, paragraphs and words (``stages.text``
segmentation for the document's ``langid_lang``: rjieba for Chinese, one word
per CJK character for Japanese/Korean, letter runs otherwise) are computed a
single time (:class:`Document`, lazily) and shared by every rule; word n-grams
are counted once for n = 2..10 (:attr:`Document.ngram_stats`). A *value* is a
named measurement (column ``heuristics_<value>``); a *rule* compares one value
with one threshold and drops the document with reason ``heuristics.<rule>``.

Rule families (:data:`FAMILIES`, one module each; each can be switched off as
a whole with ``Config.disabled_families``, each rule with a null threshold):

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
* ``page_shape`` — rules that name what they drop, off by default: the share
  of letters outside the top language (langid's ``langid_mix``) and the share
  of list-item/table-row lines.
* ``code`` — StarCoder (Li et al. 2023) / The Stack: line lengths and
  alphanumeric share, for documents whose language is ``code``.

Thresholds come per language from :data:`PRESETS` (``zh``, ``en``, ``ja``,
``code``, and ``default`` for every other language), overridable per language
in the config. See docs/stages/heuristics.md for every default's source.

Modules: ``family`` (what a family module defines: ``Rule``, shared helpers),
one module per family (``gopher_quality``, ``gopher_repetition``, ``c4``,
``fineweb``, ``cjk``, ``code``, ``page_shape``), ``rules`` (the registry assembled from the
families, ``evaluate``), ``view`` (``Document``), ``ngrams`` (the n-gram
engine), ``presets`` (``Thresholds``, ``PRESETS``), ``stage`` (``Config``,
``HeuristicsStage``). This package exports the names other modules use.
"""

from __future__ import annotations

from stages.heuristics.c4 import (TERMINAL_PUNCTUATION, bad_word_count, curly_bracket_count,
                                  lorem_ipsum_count, sentence_count)
from stages.heuristics.cjk import (abnormal_char_share, code_line_fraction, mojibake_per_kchar,
                                   residue_per_kchar, unbroken_run)
from stages.heuristics.code import alnum_char_share, max_line_length, mean_line_length
from stages.heuristics.family import Rule
from stages.heuristics.fineweb import line_punct_ratio, newline_word_ratio, short_line_fraction
from stages.heuristics.gopher_quality import (BULLETS, ELLIPSES, STOP_WORDS, alpha_word_share,
                                              bullet_line_fraction, ellipsis_line_fraction,
                                              mean_word_length, stop_word_count, symbol_word_ratio)
from stages.heuristics.gopher_repetition import (duplicate_line_char_fraction, duplicate_line_fraction,
                                                 duplicate_ngram_char_share,
                                                 duplicate_paragraph_char_fraction,
                                                 duplicate_paragraph_fraction, top_ngram_char_share)
from stages.heuristics.ngrams import ngram_stats_batch
from stages.heuristics.presets import PRESETS, Thresholds
from stages.heuristics.rules import (BATCH_COUNTS, FAMILIES, INT_VALUES, RULES, VALUES, active_rules,
                                     batch_counts, evaluate)
from stages.heuristics.stage import Config, HeuristicsStage
from stages.heuristics.view import Document

__all__ = [
    "BATCH_COUNTS", "BULLETS", "Config", "Document", "ELLIPSES", "FAMILIES", "HeuristicsStage",
    "INT_VALUES", "PRESETS", "RULES", "Rule", "STOP_WORDS", "TERMINAL_PUNCTUATION", "Thresholds",
    "VALUES", "abnormal_char_share", "active_rules", "alnum_char_share", "alpha_word_share",
    "bad_word_count", "batch_counts", "bullet_line_fraction", "code_line_fraction",
    "curly_bracket_count", "duplicate_line_char_fraction", "duplicate_line_fraction",
    "duplicate_ngram_char_share", "duplicate_paragraph_char_fraction",
    "duplicate_paragraph_fraction", "ellipsis_line_fraction", "evaluate", "line_punct_ratio",
    "lorem_ipsum_count", "max_line_length", "mean_line_length", "mean_word_length",
    "mojibake_per_kchar", "newline_word_ratio", "ngram_stats_batch", "residue_per_kchar",
    "sentence_count", "short_line_fraction", "stop_word_count", "symbol_word_ratio",
    "top_ngram_char_share", "unbroken_run",
]
