"""Gopher repetition rules: Rae et al. 2021 ("Gopher"), Table A1.

Duplicate lines and paragraphs (share of items and of characters), the top
2/3/4-gram character share and the duplicated 5..10-gram character share;
the thresholds are Gopher's Table A1 values
(:data:`stages.heuristics.presets.PRESETS`). The n-gram rules
(``long_only``) apply only to documents of at least
``long_document_min_words`` words (Gopher sets all its thresholds on
documents of >= 50 words; see the presets). Line and paragraph duplicates come from
:class:`~stages.heuristics.view.Document`, n-gram shares from
:mod:`stages.heuristics.ngrams`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.heuristics.family import Measure, Rule

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "gopher_repetition"


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


VALUES: dict[str, Measure] = {
    "duplicate_line_fraction": duplicate_line_fraction,
    "duplicate_line_char_fraction": duplicate_line_char_fraction,
    "duplicate_paragraph_fraction": duplicate_paragraph_fraction,
    "duplicate_paragraph_char_fraction": duplicate_paragraph_char_fraction,
    **{f"top_{n}gram_char_share": (lambda d, n=n: top_ngram_char_share(d, n))
       for n in (2, 3, 4)},
    **{f"duplicate_{n}gram_char_share": (lambda d, n=n: duplicate_ngram_char_share(d, n))
       for n in range(5, 11)},
}
INT_VALUES: frozenset[str] = frozenset()
BATCH_COUNTS: dict = {}

RULES: tuple[Rule, ...] = (
    Rule("max_duplicate_line_fraction", "duplicate_line_fraction", "max", FAMILY),
    Rule("max_duplicate_line_char_fraction", "duplicate_line_char_fraction", "max", FAMILY),
    Rule("max_duplicate_paragraph_fraction", "duplicate_paragraph_fraction", "max", FAMILY),
    Rule("max_duplicate_paragraph_char_fraction", "duplicate_paragraph_char_fraction", "max", FAMILY),
    *(Rule(f"max_top_{n}gram_char_share", f"top_{n}gram_char_share", "max", FAMILY,
           long_only=True) for n in (2, 3, 4)),
    *(Rule(f"max_duplicate_{n}gram_char_share", f"duplicate_{n}gram_char_share", "max",
           FAMILY, long_only=True) for n in range(5, 11)),
)
