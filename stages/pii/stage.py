"""The ``pii`` stage: replace personal data and secrets, record every edit."""

from __future__ import annotations

import hashlib
import re
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from stages.base import Column, FitResult, Partitions, Stage, with_decision
from stages.pii import bank_card, email, ip, phone, redact, resident_id, secrets
from stages.pii.config import ALL_TYPES, NUMBER_TYPES, Config

#: Full-width forms (U+FF08-FF19, U+FF38, U+FF58) of the characters the number
#: detectors read, each mapped to its ASCII form: one code point for one, so
#: the spans found in the mapped copy are the spans of the text. Chinese text
#: typed with a full-width IME writes ``身份证号：１１０１０５…``, ``（０１０）６５５２ １２３４``.
FULLWIDTH = {**{0xFF10 + d: 0x30 + d for d in range(10)}, 0xFF08: ord("("), 0xFF09: ord(")"), 0xFF0B: ord("+"),
             0xFF0D: ord("-"), 0xFF38: ord("X"), 0xFF58: ord("x")}
_FULLWIDTH_RE = re.compile("[\uff10-\uff19]")

EDIT_TYPE = pa.struct([("type", pa.string()), ("start", pa.int32()), ("end", pa.int32()),
                       ("replacement", pa.string())])


def hash_key_bytes(config: Config, seed: int) -> bytes:
    """The blake2b key of ``hash`` mode: 32 bytes derived from
    ``config.hash_key``, or from the build seed when it is None."""
    material = config.hash_key if config.hash_key is not None else f"mindcorpus-pii-seed:{seed}"
    return hashlib.blake2b(material.encode(), digest_size=32, person=b"mindcorpus-pii").digest()


class PiiStage(Stage):
    """Replaces e-mail addresses, phone numbers, resident ID numbers, bank
    card numbers, public IP addresses and secrets in ``text`` (``chars``
    follows) and records each edit. Never drops a document.

    Columns: ``pii_count`` (int32), ``pii_types`` (string, ``"email:1,phone:2"``,
    types sorted, null when none), ``pii_edits`` (list of ``{type, start,
    end, replacement}``, start/end int32 code-point offsets in the text the
    stage received; empty when none). Full-width digits are searched as
    their ASCII forms (:data:`FULLWIDTH`; values and hash tokens are those of
    the ASCII number). Cost: O(len(text)) per document, no
    state across documents (row-independent).
    """

    name = "pii"
    order = 500
    Config = Config
    row_independent = True
    columns = {
        "pii_count": Column("int32", "personal data and secrets replaced in the document", lineage=True),
        "pii_types": Column("string", "replacements per type, 'type:count' sorted by type, "
                                      "comma-separated; null when none", lineage=True),
        "pii_edits": Column("list<item: struct<type: string, start: int32, end: int32, replacement: string>>",
                            "each replacement: type, start and end (code points in the text the stage "
                            "received) and the placeholder written; the original value is not kept"),
    }
    #: Columns :meth:`tally` reads.
    tally_columns: ClassVar[tuple[str, ...]] = ("pii_count", "pii_types")

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """The detectors in priority order (``stages.pii.redact.PRIORITY``)
        and, in the same order, the placeholder of each (a list, not a
        mapping: a manifest key named ``secret`` would be redacted on
        publishing, ``pipeline.redact``)."""
        types = [t for t in redact.PRIORITY if t in config.types]
        return {"priority": types, "placeholders": [f"<{redact.PLACEHOLDERS[t]}>" for t in types]}

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Replacements per type (keys ``email``, ``phone``, ``cn_resident_id``,
        ``bank_card``, ``ip``, ``secret``; only those seen) and
        ``documents_edited``, over ``table`` (``pii_count``, ``pii_types``)."""
        out: dict[str, int] = {}
        for types in table["pii_types"].to_pylist():
            if not types:
                continue
            for part in types.split(","):
                kind, count = part.rsplit(":", 1)
                out[kind] = out.get(kind, 0) + int(count)
        edited = pc.sum(pc.greater(pc.fill_null(table["pii_count"], 0), 0)).as_py() or 0
        out["documents_edited"] = int(edited)
        return out

    def fit(self, partitions: Partitions) -> FitResult:
        """Reads no data; returns a warning (run log, manifest
        ``stages.pii.warnings``, report) when ``replacement: hash`` has no
        ``hash_key``: the key is then derived from the build seed, which the
        manifest publishes, so anyone with the manifest can test guessed
        values against the tokens. The config has no ``${ENV}`` expansion
        (``pipeline.config``), so the private key lives in the build config,
        which the published ``config.yaml`` copy redacts. O(1)."""
        config: Config = self.config
        if config.replacement != "hash" or config.hash_key is not None:
            return FitResult()
        return FitResult(warnings=(
            "replacement: hash without hash_key: the hash tokens are keyed by the build seed, which "
            "the manifest publishes, so anyone with the manifest can recover a value by hashing guesses "
            "(a phone number: ~10^10); set pii.hash_key to a private string in the build config (the "
            "published config.yaml redacts it; keep the build config itself private)",))

    def _detectors(self) -> list[tuple[str, Any]]:
        config: Config = self.config
        regions = config.phone_regions
        table = {"secret": secrets.find, "email": email.find, "cn_resident_id": resident_id.find,
                 "bank_card": bank_card.find, "phone": lambda text: phone.find(text, regions), "ip": ip.find}
        return [(kind, table[kind]) for kind in ALL_TYPES if kind in config.types]

    def process(self, table: pa.Table) -> pa.Table:
        """Edit every document of ``table`` (n rows); see the class docstring."""
        config: Config = self.config
        token = (redact.hasher(hash_key_bytes(config, self.ctx.seed)) if config.replacement == "hash"
                 else redact.placeholder)
        detectors = self._detectors()
        skip = frozenset(config.skip_number_languages)
        texts = pc.fill_null(table["text"], "").to_pylist()
        hints = table["lang_hint"].to_pylist() if "lang_hint" in table.column_names else [None] * len(texts)
        chars = table["chars"].to_pylist() if "chars" in table.column_names else [len(t) for t in texts]
        counts: list[int] = []
        kinds: list[str | None] = []
        all_edits: list[list[dict]] = []
        changed = False
        for row, (text, hint) in enumerate(zip(texts, hints)):
            numbers = hint not in skip
            probe = text.translate(FULLWIDTH) if _FULLWIDTH_RE.search(text) else text
            found = {kind: hits for kind, find in detectors
                     if (numbers or kind not in NUMBER_TYPES) and (hits := find(probe))}
            if not found:
                counts.append(0)
                kinds.append(None)
                all_edits.append([])
                continue
            new_text, edits = redact.apply(text, redact.resolve(found), token)
            per: dict[str, int] = {}
            for edit in edits:
                per[edit["type"]] = per.get(edit["type"], 0) + 1
            counts.append(len(edits))
            kinds.append(",".join(f"{k}:{per[k]}" for k in sorted(per)))
            all_edits.append(edits)
            texts[row], chars[row] = new_text, len(new_text)
            changed = True
        if changed:
            table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
            table = table.set_column(table.column_names.index("chars"), "chars", pa.array(chars, pa.int64()))
        return with_decision(table, {
            "pii_count": pa.array(counts, pa.int32()),
            "pii_types": pa.array(kinds, pa.string()),
            "pii_edits": pa.array(all_edits, pa.list_(EDIT_TYPE)),
        }, [None] * table.num_rows)
