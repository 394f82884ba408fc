"""An example stage, added without touching the pipeline: the share of digits.

Tables of numbers, phone lists, lottery results and log dumps pass most
word-based quality rules (their "words" are numbers) yet teach a language
model little. This stage measures the share of a document's non-space
characters that are decimal digits (``str.isdecimal``: ASCII and full-width
digits alike, so Chinese text with ``２０２４年`` counts them too) and drops a
document above ``max_digit_share``.

It is one module plus one config section::

    plugins: [digits_stage]          # this module, importable (PYTHONPATH)
    digits:
      max_digit_share: 0.3

and runs after heuristics (order 250), reading ``langid_lang`` (code is left
alone: a source that declares ``code`` keeps its numeric literals). See
docs/stages/adding_a_stage.md; tested in tests/pipeline/test_stage_plugin.py.

The default 0.3 is our own choice for the example, not a measured cut-off:
measure it on your corpus (the column is in every kept and dropped document).

It also keeps a *tally* (``Stage.tally``): how many documents that entered it
hold digits at all, split by digit-share band, per source, in the manifest's
``stages.digits.per_source.<source>.tally`` and in report.html. The bands
(under 10 %, 10-30 %, 30 % and more) are our choice for the example.
"""

from __future__ import annotations

import pyarrow as pa
import pydantic

from stages.base import Column, Stage, StageConfig, with_decision


class Config(StageConfig):
    """The ``digits`` section.

    Attributes:
        max_digit_share: drop a document whose digits are more than this
            share of its non-space characters (0..1).
        skip_languages: languages never dropped by this rule (``code``).
    """

    requires = {"langid_lang": "code (and other skipped languages) keep their digits"}

    max_digit_share: float = pydantic.Field(0.3, ge=0.0, le=1.0)
    skip_languages: tuple[str, ...] = ("code",)


def digit_share(text: str) -> float | None:
    """Decimal digits / non-space characters of ``text`` (None when it has
    no non-space character)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return None
    return sum(c.isdecimal() for c in chars) / len(chars)


class DigitsStage(Stage):
    """Adds ``digits_share`` (double, 0..1, null for an empty text) and drops
    documents above ``max_digit_share`` with reason ``digits.too_many``."""

    name = "digits"
    order = 250
    Config = Config
    row_independent = True
    columns = {"digits_share": Column("double", "decimal digits / non-space characters", lineage=True,
                                      digits=3)}
    tally_columns = ("digits_share",)

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Documents of ``table`` (one source's, kept and dropped) with at
        least one digit (``with_digits``) and, under it, by digit share:
        ``with_digits/under_10pct`` (< 0.1), ``with_digits/10_to_30pct``
        (0.1 to < 0.3), ``with_digits/30pct_and_more``; bands with no
        document are left out."""
        bands = {"with_digits/under_10pct": 0, "with_digits/10_to_30pct": 0, "with_digits/30pct_and_more": 0}
        for share in table["digits_share"].to_pylist():
            if not share:                # None (no non-space character) or 0.0 (no digit)
                continue
            band = "under_10pct" if share < 0.1 else "10_to_30pct" if share < 0.3 else "30pct_and_more"
            bands[f"with_digits/{band}"] += 1
        out = {k: n for k, n in bands.items() if n}
        if out:
            out["with_digits"] = sum(out.values())
        return out

    def process(self, table: pa.Table) -> pa.Table:
        """Measure and decide each document of ``table`` (n rows)."""
        config: Config = self.config
        shares, reasons = [], []
        for text, lang in zip(table["text"].to_pylist(), table["langid_lang"].to_pylist()):
            share = digit_share(text or "")
            shares.append(share)
            too_many = share is not None and share > config.max_digit_share and lang not in config.skip_languages
            reasons.append("digits.too_many" if too_many else None)
        return with_decision(table, {"digits_share": pa.array(shares, pa.float64())}, reasons)
