"""FineWeb rules: Penedo et al. 2024 ("FineWeb"), its custom filters.

Share of lines ending with punctuation (``line_punct_thr`` 0.12), short lines
(``short_line_thr`` 0.67 of lines <= 30 characters), characters in duplicated
lines (``char_duplicates_ratio`` 0.01, the same measure as Gopher's
duplicate-line character share) and newlines per word (``new_line_ratio``
0.3). Only the last is on by default: the first three drop many fortunes,
poems and man pages of /work/shared/corpus (our measurement,
:data:`stages.heuristics.presets.PRESETS`). The short line is scaled per
language (``short_line_chars``: 16 for zh, 22 for ja).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.heuristics.c4 import TERMINAL_PUNCTUATION
from stages.heuristics.family import BatchCount, Measure, Rule, ratio

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "fineweb"


def line_punct_ratio(doc: Document) -> float | None:
    """Share of non-blank lines ending with terminal punctuation (FineWeb's
    ``line_punct_ratio``; full-width marks count)."""
    lines = doc.lines
    return ratio(sum(1 for line in lines if line.endswith(TERMINAL_PUNCTUATION)), len(lines))


def short_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines with at most ``short_line_chars`` characters
    (FineWeb: 30; per language in the presets)."""
    lines = doc.lines
    limit = doc.short_line_chars
    return ratio(sum(1 for line in lines if len(line) <= limit), len(lines))


def newline_word_ratio(doc: Document) -> float | None:
    """Line breaks between non-blank lines per word (FineWeb's
    ``new_line_ratio``: ``text.count("\\n") / words`` on trafilatura output,
    where paragraphs are separated by one line break; ours are separated by
    a blank line, which is layout, not content, so blank lines are not
    counted: non-blank lines - 1, any line break); None without words."""
    return ratio(max(len(doc.lines) - 1, 0), len(doc.words))


VALUES: dict[str, Measure] = {
    "line_punct_ratio": line_punct_ratio,
    "short_line_fraction": short_line_fraction,
    "newline_word_ratio": newline_word_ratio,
}
INT_VALUES: frozenset[str] = frozenset()
BATCH_COUNTS: dict[str, BatchCount] = {}

RULES: tuple[Rule, ...] = (
    Rule("min_line_punct_ratio", "line_punct_ratio", "min", FAMILY),
    Rule("max_short_line_fraction", "short_line_fraction", "max", FAMILY),
    # The measure is gopher_repetition's (a value is measured once per document).
    Rule("max_fineweb_duplicate_line_char_fraction", "duplicate_line_char_fraction", "max", FAMILY),
    Rule("max_newline_word_ratio", "newline_word_ratio", "max", FAMILY),
)
