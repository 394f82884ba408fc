"""The rule registry, assembled from the family modules, and the decision.

:data:`FAMILIES` lists the rule families (one module each:
``stages.heuristics.<family>``, see :mod:`stages.heuristics.family` for what
each defines); :data:`VALUES`, :data:`INT_VALUES` and :data:`BATCH_COUNTS`
are theirs merged, in :data:`FAMILIES` order (the order of the stage's
columns); :data:`RULES` is every family's rules in the order they are checked
(:data:`CHECK_ORDER`); :func:`evaluate` measures one document and decides.

Adding a family: a module with ``FAMILY``, ``VALUES``, ``INT_VALUES``,
``RULES`` and ``BATCH_COUNTS``, listed in :data:`FAMILY_MODULES` and
:data:`CHECK_ORDER`; a ``Thresholds`` field per rule and preset values
(:mod:`stages.heuristics.presets`); the family name in
``Config.disabled_families``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stages.heuristics import (c4, cjk, code, fineweb, gopher_quality, gopher_repetition,
                               page_shape)
from stages.heuristics.family import BatchCount, Measure, Rule

if TYPE_CHECKING:
    from stages.heuristics.presets import Thresholds
    from stages.heuristics.view import Document

FAMILY_MODULES = (gopher_quality, gopher_repetition, c4, fineweb, cjk, code, page_shape)
FAMILIES: tuple[str, ...] = tuple(module.FAMILY for module in FAMILY_MODULES)


def _merged(tables: list[Mapping[str, Any]], what: str) -> dict[str, Any]:
    """One dict of the families' ``tables``, in order; a name given twice
    raises ValueError (a family would silently replace another's)."""
    out: dict[str, Any] = {}
    for table in tables:
        for name, item in table.items():
            if name in out:
                raise ValueError(f"heuristics: {what} {name!r} is defined by two families")
            out[name] = item
    return out


# value name -> function(Document) -> number or None (None: undefined, e.g. a ratio
# over zero words; a rule on an undefined value fails).
VALUES: dict[str, Measure] = _merged([m.VALUES for m in FAMILY_MODULES], "value")
# Values stored as int64 (counts and lengths); the others are float64.
INT_VALUES: frozenset[str] = frozenset().union(*(m.INT_VALUES for m in FAMILY_MODULES))
# Measurements computed for a whole partition at once (Arrow RE2 kernels, a
# numpy code-point pass): name -> function(string array of n texts) -> int64[n].
BATCH_COUNTS: dict[str, BatchCount] = _merged([m.BATCH_COUNTS for m in FAMILY_MODULES],
                                              "batch count")


def batch_counts(texts: pa.ChunkedArray | pa.Array) -> list[dict[str, int]]:
    """:data:`BATCH_COUNTS` of every text: n dicts of name -> count."""
    columns = {name: fn(texts).tolist() for name, fn in BATCH_COUNTS.items()}
    return [dict(zip(columns, row)) for row in zip(*columns.values())]


# Checked in this order; the first failing rule is the document's reason. The
# document-size rules come first (gopher_quality.SIZE_RULES), then the
# families in this order (each family's rules in the order its module lists).
CHECK_ORDER = (code, cjk, page_shape, gopher_quality, gopher_repetition, c4, fineweb)
RULES: tuple[Rule, ...] = (
    *gopher_quality.SIZE_RULES,
    *(rule for module in CHECK_ORDER for rule in module.RULES
      if rule not in gopher_quality.SIZE_RULES),
)
if sorted(m.FAMILY for m in CHECK_ORDER) != sorted(FAMILIES):
    raise ValueError("heuristics: CHECK_ORDER must list every family of FAMILY_MODULES once")
if len({rule.name for rule in RULES}) != len(RULES):
    raise ValueError("heuristics: two rules share a name (the name is the threshold field)")


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
        value is undefined (e.g. a ratio over zero words) fails, unless it is
        ``undefined_passes`` (it measures a part the document lacks). Every active
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
        if value is None:
            if not rule.undefined_passes:
                reason = f"heuristics.{rule.name}"
        elif (value < limit if rule.bound == "min" else value > limit):
            reason = f"heuristics.{rule.name}"
    return values, reason
