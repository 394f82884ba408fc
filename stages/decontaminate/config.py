"""The decontaminate stage's typed config (``decontaminate:`` in the build config)."""

from __future__ import annotations

from typing import Literal

import pydantic

from stages.base import StageConfig


class EvalSet(pydantic.BaseModel):
    """One benchmark to decontaminate against.

    Attributes:
        path: relative to the repo root (the directory holding
            ``configs/``, as the sources' paths) unless absolute: a local file
            (``.jsonl``, ``.jsonl.gz``, ``.parquet``) or a
            directory written by ``datasets.Dataset.save_to_disk`` /
            ``DatasetDict.save_to_disk`` (``dataset_info.json`` / ``state.json``
            / ``dataset_dict.json``); read with pyarrow, never ``datasets``.
        fields: the record fields whose text is the item, in order (question,
            choices, answer, code). A list value (choices) counts as its
            elements, a dict as its values, a number as its text.
        id_field: the field holding the item id (any scalar, shown as text);
            None: the 0-based row number.
        format: ``jsonl``, ``parquet`` or ``hf_disk``; None: from the path.
        split: the split of a saved ``DatasetDict`` (required when it has
            more than one).
        label_fields: fields written after their label, as multiple-choice
            options are quoted (``A. 两者都正确``): a field named here gets its
            name as a unit before its text (``A``, ``B``); a list-valued one
            labels its elements ``A``, ``B``, ``C`` ... Without labels, grams
            across the options of a quoted item never match (measured:
            docs/stages/decontaminate.md).
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    path: str
    fields: tuple[str, ...] = pydantic.Field(min_length=1)
    id_field: str | None = None
    format: Literal["jsonl", "parquet", "hf_disk"] | None = None
    split: str | None = None
    label_fields: tuple[str, ...] = ()


class Config(StageConfig):
    """Decontamination settings (docs/stages/decontaminate.md has every
    measurement cited here).

    Attributes:
        enabled: default: whether ``eval_sets`` names any; ``enabled: true``
            with no eval sets is an error.
        eval_sets: name (the ``eval_set`` of a hit, ``gsm8k``) -> :class:`EvalSet`.
        mode: ``drop`` the document (reason ``decontaminate.benchmark_overlap``),
            ``cut`` the matched span(s) plus ``cut_margin`` units on each side
            (drop as ``decontaminate.empty_after_cut`` when less than
            ``min_chars_after_cut`` non-space characters are left), or
            ``annotate`` (columns only). Default ``drop``, as datatrove's
            decontamination filter does: a page that quotes a benchmark item
            is usually a solution page, whose worked answer around the quote a
            margin cannot bound; hits are rare (0 of the host documents of the
            benchmark, docs), so dropping costs almost nothing.
        ngram_words: gram length in units for items written with spaces
            (13: GPT-3, Brown et al. 2020, App. C; datatrove's decontamination
            uses 13-grams too).
        ngram_cjk: gram length for items whose units are mostly CJK
            characters. 8: measured on the dev part of the planted benchmark
            (docs/stages/decontaminate.md).
        min_item_units: an item with fewer units than its gram length is
            indexed as one gram of all its units when it has at least this
            many, else left out (counted in the fit facts). 8: our choice,
            the CJK gram length.
        min_coverage: an item is hit when the item units covered by matched
            grams are at least this share of the item (or of one of its fields
            with at least ``min_field_units`` units: a document quoting only
            the question). 0.6: measured (docs).
        min_matched_units: a cluster matching at least this many item units
            is a hit whatever its share (a long item whose question alone is
            quoted; GAOKAO stems are a third of their item). Measured (docs).
        min_field_units: a field counts on its own only with at least this
            many units (20: our choice; shorter fields, a choice or an answer
            letter, are common text).
        min_field_grams: and only when its matched units are at least this
            many grams' worth (``min_field_grams x`` the item's gram length:
            16 CJK characters, 26 words) or the whole field. 2: one shared
            8-character gram made a 20-unit option "60% covered" (a travel
            page sharing ``长江的主要支流嘉陵江`` with an option); measured
            on the dev part (docs).
        max_items_per_ngram: a gram in more than this many items of all eval
            sets is a template (``下列说法正确的是``, "which of the following")
            and ignored. 10: our choice, docs.
        max_corpus_share: a gram in more than this share of the sampled corpus
            documents (and in at least ``min_corpus_documents``) is ignored:
            boilerplate, not a leak. 0.001: our choice, docs.
        min_corpus_documents: see ``max_corpus_share`` (20: a small build's
            planted copies never make a gram common).
        sample_documents: corpus documents sampled in ``fit`` to count gram
            document frequency (seeded, spread over partitions).
        cut_margin: units removed on each side of a cut span (30: GPT-3 cut
            200 characters each side, about 30 English words).
        min_chars_after_cut: see ``mode`` (100: our choice).
    """

    enabled: bool | None = None  # type: ignore[assignment]
    eval_sets: dict[str, EvalSet] = {}
    mode: Literal["drop", "cut", "annotate"] = "drop"
    ngram_words: int = pydantic.Field(13, ge=1, le=64)
    ngram_cjk: int = pydantic.Field(8, ge=1, le=64)
    min_item_units: int = pydantic.Field(8, ge=1)
    min_coverage: float = pydantic.Field(0.5, gt=0.0, le=1.0)
    min_matched_units: int = pydantic.Field(40, ge=1)
    min_field_units: int = pydantic.Field(20, ge=1)
    min_field_grams: int = pydantic.Field(2, ge=1)
    max_items_per_ngram: int = pydantic.Field(10, ge=1)
    max_corpus_share: float = pydantic.Field(0.001, gt=0.0, le=1.0)
    min_corpus_documents: int = pydantic.Field(20, ge=1)
    sample_documents: int = pydantic.Field(100_000, ge=0)
    cut_margin: int = pydantic.Field(30, ge=0)
    min_chars_after_cut: int = pydantic.Field(100, ge=0)

    @pydantic.model_validator(mode="after")
    def _enabled_follows_eval_sets(self) -> Config:
        if self.enabled is None:
            object.__setattr__(self, "enabled", bool(self.eval_sets))
        elif self.enabled and not self.eval_sets:
            raise ValueError("decontaminate.enabled: true, but decontaminate.eval_sets names no eval set")
        for name, es in self.eval_sets.items():
            stray = [f for f in es.label_fields if f not in es.fields]
            if stray:
                raise ValueError(f"decontaminate.eval_sets.{name}.label_fields: {stray} not in fields")
            if not name or "/" in name or ":" in name or "," in name:
                raise ValueError(f"decontaminate.eval_sets.{name}: a name without '/', ':' or ','")
            if name == "documents_hit":  # a tally key of its own (DecontaminateStage.tally)
                raise ValueError(f"decontaminate.eval_sets.{name}: a reserved name (the tally's count of "
                                 "documents hit); rename the eval set")
        return self
