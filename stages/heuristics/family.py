"""What a rule family module defines, and the helpers the families share.

A family module (``gopher_quality``, ``gopher_repetition``, ``c4``,
``fineweb``, ``cjk``, ``code``: :data:`stages.heuristics.rules.FAMILIES`)
holds its measures and declares:

* ``FAMILY``: its name (``Config.disabled_families`` switches it off);
* ``VALUES``: value name -> function(:class:`~stages.heuristics.view.Document`)
  -> number or None (None: undefined, e.g. a ratio over zero words; a rule on
  an undefined value fails); the stage's column ``heuristics_<value>``;
* ``INT_VALUES``: the values stored as int64 (counts and lengths; the others
  are float64);
* ``RULES``: its :class:`Rule` rows, in the order they are checked;
* ``BATCH_COUNTS``: counts computed for a whole partition at once (name ->
  function(string array of n texts) -> int64[n]), read back per document as
  ``Document.counts[name]``; empty when the family needs none.

Each rule's threshold is the :class:`~stages.heuristics.presets.Thresholds`
field of the rule's name, set per language in
:data:`~stages.heuristics.presets.PRESETS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from stages.heuristics.view import Document

# A measure: one document -> a number, or None when undefined.
Measure = Callable[["Document"], "float | int | None"]
# A batch count: a string array of n texts -> int64[n].
BatchCount = Callable[[pa.ChunkedArray | pa.Array], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Rule:
    """Drop when ``value`` is below (``min``) or above (``max``) the threshold
    field ``name`` of :class:`Thresholds`; reason ``heuristics.<name>``."""

    name: str
    value: str
    bound: Literal["min", "max"]
    family: str
    long_only: bool = False     # skipped below Thresholds.long_document_min_words
    # An undefined value (None) passes instead of failing: the rule measures
    # a part of the text the document may not have (e.g. mean word length of
    # the space-separated part of an all-Japanese page).
    undefined_passes: bool = False


def ratio(num: float, den: float) -> float | None:
    """``num / den``; None when ``den`` is 0 (an undefined value)."""
    return None if den == 0 else num / den


# Every line break but LF, as RE2 sees it (str.splitlines' breaks: CRLF, CR,
# VT, FF, FS/GS/RS, NEL, U+2028, U+2029).
LINE_BREAK_RE2 = r"\r\n|[\r\x0b\x0c\x1c-\x1e\x{85}\x{2028}\x{2029}]"


def count_matches(pattern: str, by_line: bool = False) -> BatchCount:
    """Matches of an RE2 ``pattern`` per text. ``by_line``: every line break
    (CR, CRLF, U+2028...) is made ``\\n`` first, since RE2's ``(?m)`` knows
    only ``\\n``."""
    def count(texts):
        if by_line:
            texts = pc.replace_substring_regex(texts, LINE_BREAK_RE2, "\n")
        return pc.count_substring_regex(texts, pattern).to_numpy(zero_copy_only=False)
    return count
