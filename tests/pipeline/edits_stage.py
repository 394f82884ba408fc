"""A test plugin stage that edits text and records every edit, the way the
``pii`` stage does (tests/pipeline/test_stage_tally.py builds with it).

It replaces e-mail-like strings (``name@host.tld``) by ``<EMAIL>`` and
four-digit years (1900-2099) by ``<YEAR>``, never drops a document, and adds:

* ``masker_count`` int32: replacements in the document (lineage);
* ``masker_types`` string: ``"email:1,year:2"`` (sorted by type), null when
  none (lineage);
* ``masker_edits`` list<struct<type, start, end, replacement>>: one element
  per replacement, ``start``/``end`` code-point offsets in the text the stage
  received (end exclusive), in text order.

Its tally: per type the replacements (``email``, ``year``) and
``documents_edited``.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from stages.base import Column, Stage, StageConfig, with_decision

PATTERNS = (("email", re.compile(r"[A-Za-z0-9._]+@[A-Za-z0-9-]+\.[A-Za-z]{2,}"), "<EMAIL>"),
            ("year", re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)"), "<YEAR>"))
EDIT_TYPE = pa.list_(pa.struct([("type", pa.string()), ("start", pa.int32()), ("end", pa.int32()),
                                ("replacement", pa.string())]))


def find_edits(text: str) -> list[dict]:
    """Non-overlapping matches of :data:`PATTERNS` in ``text``, in text
    order (an e-mail wins over a year inside it)."""
    found = []
    taken: list[tuple[int, int]] = []
    for kind, pattern, replacement in PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            taken.append((m.start(), m.end()))
            found.append({"type": kind, "start": m.start(), "end": m.end(), "replacement": replacement})
    return sorted(found, key=lambda e: e["start"])


def apply_edits(text: str, edits: list[dict]) -> str:
    """``text`` with each edit's span replaced."""
    out, at = [], 0
    for e in edits:
        out += [text[at:e["start"]], e["replacement"]]
        at = e["end"]
    return "".join(out) + text[at:]


class Config(StageConfig):
    """The ``masker`` section (no options)."""


class MaskerStage(Stage):
    """Replaces e-mails and years (see the module doc)."""

    name = "masker"
    order = 240
    Config = Config
    row_independent = True
    columns = {
        "masker_count": Column("int32", "replacements in the document", lineage=True),
        "masker_types": Column("string", "replacements by type, 'email:1,year:2', null when none", lineage=True),
        "masker_edits": Column("list<struct<type: string, start: int32, end: int32, replacement: string>>",
                               "each replacement: type, code-point span in the text received, placeholder"),
    }
    tally_columns = ("masker_edits",)

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Replacements per type and ``documents_edited``."""
        out: dict[str, int] = {}
        edited = 0
        for edits in table["masker_edits"].to_pylist():
            if edits:
                edited += 1
            for e in edits or ():
                out[e["type"]] = out.get(e["type"], 0) + 1
        return {**out, "documents_edited": edited}

    def process(self, table: pa.Table) -> pa.Table:
        """Edit and record each document of ``table`` (n rows)."""
        texts, counts, types, edits_all = [], [], [], []
        for text in table["text"].to_pylist():
            edits = find_edits(text)
            texts.append(apply_edits(text, edits))
            counts.append(len(edits))
            by_type: dict[str, int] = {}
            for e in edits:
                by_type[e["type"]] = by_type.get(e["type"], 0) + 1
            types.append(",".join(f"{k}:{v}" for k, v in sorted(by_type.items())) or None)
            edits_all.append(edits)
        text = pa.array(texts, pa.string())
        table = table.set_column(table.schema.get_field_index("text"), "text", text)
        table = table.set_column(table.schema.get_field_index("chars"), "chars",
                                 pc.cast(pc.utf8_length(text), pa.int64()))
        return with_decision(table, {"masker_count": pa.array(counts, pa.int32()),
                                     "masker_types": pa.array(types, pa.string()),
                                     "masker_edits": pa.array(edits_all, EDIT_TYPE)}, [None] * table.num_rows)
