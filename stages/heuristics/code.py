"""Code rules: StarCoder (Li et al. 2023) / The Stack (Kocetkov et al. 2022).

For documents whose language is ``code`` (a source's declared ``lang``):
the longest line, the mean line length and the alphanumeric share, with the
StarCoder / The Stack filter values (max line length 1000, mean line length
100, alphanumeric characters >= 25% of the file) in
:data:`stages.heuristics.presets.PRESETS` (``code``). Prose rules do not
apply to code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.heuristics.family import Measure, Rule, ratio

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "code"


def max_line_length(doc: Document) -> int | None:
    """Characters in the longest line, indentation included (None for a
    blank document)."""
    return max(map(len, doc.raw_lines), default=None)


def mean_line_length(doc: Document) -> float | None:
    """Mean characters per non-blank line, indentation included."""
    return ratio(sum(map(len, doc.raw_lines)), len(doc.raw_lines))


def alnum_char_share(doc: Document) -> float | None:
    """Letters and digits (``str.isalnum``, full-width included) over all
    characters (StarCoder's "alphanumeric fraction")."""
    return ratio(sum(map(str.isalnum, doc.text)), len(doc.text))


VALUES: dict[str, Measure] = {
    "max_line_length": max_line_length,
    "mean_line_length": mean_line_length,
    "alnum_char_share": alnum_char_share,
}
INT_VALUES = frozenset({"max_line_length"})
BATCH_COUNTS: dict = {}

RULES: tuple[Rule, ...] = (
    Rule("max_line_length", "max_line_length", "max", FAMILY),
    Rule("max_mean_line_length", "mean_line_length", "max", FAMILY),
    Rule("min_alnum_char_share", "alnum_char_share", "min", FAMILY),
)
