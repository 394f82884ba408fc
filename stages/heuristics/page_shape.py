"""Page-shape rules of issue 15: a page judged on its parts, with rules that
name what they drop, all off by default.

* ``max_second_language_share`` (value ``second_language_share``): the share
  of letters outside the document's top language, read from langid's
  ``langid_mix`` column (a JSON object ``{code: share of letters}``, shares
  summing to 1, by share descending, e.g. ``{"ja": 0.55, "en": 0.45}`` ->
  0.45). Dropping a mixed page is this rule's decision (reason
  ``heuristics.max_second_language_share``), never a side effect of another
  rule. The stage reads (and requires) ``langid_mix`` only when this rule is
  on in some language (:meth:`stages.heuristics.stage.Config.requirements`).
* ``max_list_line_fraction`` (value ``list_line_fraction``): the share of
  lines that are list items or table rows (:func:`list_line_fraction`), so a
  user can drop option lists and one-item-per-line pages on purpose, with
  reason ``heuristics.max_list_line_fraction``.

No threshold is shipped (no peer sets one for documentation; the dev
measurements are in docs/stages/heuristics.md).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from stages.heuristics.family import Measure, Rule
from stages.heuristics.gopher_quality import BULLETS

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "page_shape"

# A list item's start: a bullet, an enumerator ("1.", "2)", "a)"), or a
# command-line option ("-a", "--all", "+x").
_ITEM_START = re.compile(r"(?:\d{1,3}[.)]|[a-zA-Z][)])\s|--?[\w?]|\+\w")
# A column gap inside a line: a tab or two spaces between text (a table row,
# an option and its description, a key and its action).
_COLUMN_GAP = re.compile(r"\S(?:\t| {2,})\S")
_SENTENCE_PUNCT = frozenset("，。！？；：、…,.!?;:")


def second_language_share(doc: Document) -> float | None:
    """1 - the largest share of ``langid_mix`` (the letters outside the
    top language), in 0..1. None without a mix (no column value, or ``{}``:
    no letters); the rule then passes.

    Raises:
        ValueError: ``langid_mix`` is not a JSON object of numbers.
    """
    mix = doc.langid_mix
    if not mix:
        return None
    shares = json.loads(mix)
    if not isinstance(shares, dict):
        raise ValueError(f"heuristics: langid_mix is not a JSON object: {mix[:80]!r}")
    if not shares:
        return None
    return max(0.0, 1.0 - max(float(v) for v in shares.values()))


def is_list_line(line: str, short_line_chars: int) -> bool:
    """Whether a stripped non-blank ``line`` is a list item or table row: it
    starts with a bullet (:data:`~stages.heuristics.gopher_quality.BULLETS`),
    an enumerator (``1.``, ``2)``, ``a)``) or an option (``-a``, ``--all``,
    ``+x``); or it holds a column gap (a tab, or two spaces between text); or
    it is a menu item: at most ``short_line_chars`` characters and no
    sentence punctuation (``，。！？；：、…`` or ASCII ``,.!?;:``)."""
    if line.startswith(BULLETS) or _ITEM_START.match(line) or _COLUMN_GAP.search(line):
        return True
    return len(line) <= short_line_chars and _SENTENCE_PUNCT.isdisjoint(line)


def list_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines (as written, indentation stripped) that are
    list items or table rows (:func:`is_list_line`); None for fewer than 5
    non-blank lines (too few to tell; the rule then passes)."""
    lines = doc.raw_lines
    if len(lines) < 5:
        return None
    limit = doc.short_line_chars
    return sum(1 for line in lines if is_list_line(line.strip(), limit)) / len(lines)


VALUES: dict[str, Measure] = {
    "second_language_share": second_language_share,
    "list_line_fraction": list_line_fraction,
}
INT_VALUES: frozenset[str] = frozenset()
BATCH_COUNTS: dict = {}
RULES: tuple[Rule, ...] = (
    Rule("max_second_language_share", "second_language_share", "max", FAMILY,
         undefined_passes=True),
    Rule("max_list_line_fraction", "list_line_fraction", "max", FAMILY, undefined_passes=True),
)
