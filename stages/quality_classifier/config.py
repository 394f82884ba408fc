"""The quality classifier's config (``quality_classifier`` in the build config)."""

from __future__ import annotations

import math
from typing import Literal

import pydantic

from stages.base import StageConfig
from stages.lang_codes import canonical_list


class Config(StageConfig):
    """Quality classifier config (``quality_classifier`` in the build config).

    Off by default: it needs a positive reference the user names.

    Attributes:
        enabled: default False.
        reference_source: the ``source`` of this build whose documents (those
            that reach the stage) are the positive class, e.g. a curated
            documentation or encyclopedia source. Its documents are never
            negatives. Checked with the build config: it must name a
            configured source.
        reference_files: JSONL files (one object per line with a ``text``
            field; ``.gz``/``.zst`` compressed or plain) whose documents are the
            positive class, instead of a source. Exactly one of
            ``reference_source`` and ``reference_files`` is required while the
            stage is enabled; the files are checked in ``preflight``.
        per_language: train one model per ``langid_lang`` (then the stage reads
            ``langid_lang``; documents of a language without a model pass
            unscored, with a warning) instead of one multilingual model
            (default). Needs ``reference_source`` (files carry no language).
        languages: with ``per_language``, train only these languages.
        sample_docs: at most this many positive and this many negative
            documents (each) train a model, drawn by a seeded hash of the
            document id with probability ``min(1, sample_docs / available)``,
            so the draw does not depend on partitioning. Default 20,000, our
            choice: with ``max_chars`` 5,000 the driver holds at most ~200 M
            characters of sample while it trains, and fastText trains on it in
            about a minute on one thread; the held-out P/R of
            docs/stages/quality_classifier.md were measured with far fewer
            (hundreds to a few thousand per class).
        negatives_per_positive: at most this many corpus documents per
            reference document train a model (the corpus draw's rate is
            lowered to match; the held-out corpus documents, on which the
            threshold and buckets are measured, are still drawn at the
            ``sample_docs`` rate). Default None (no balancing: up to
            ``sample_docs`` of each class), our measurement
            (docs/stages/quality_classifier.md): held-out ROC AUC on the
            bundled sample (Debian Reference against the rest) 0.886 at 1.0,
            0.966 at 3.0, 0.978 unbalanced; man pages against fortunes
            0.9992 / 1.0 / 1.0; precision at 0.5 rises with the negatives
            too. Set it to cut training time on a large corpus.
        min_docs: a model is trained only with at least this many positive and
            this many negative documents in the sample (else the language is
            skipped with a warning, or with one model, the build stops).
            Default 20, our choice: below it the held-out split has one or two
            documents and its precision/recall say nothing.
        holdout_fraction: share of the sample (by seeded id hash, per class)
            held out of training; precision and recall are measured on it, and
            the score percentiles (``percentile``, buckets) are taken over its
            negatives, which the model did not see. Default 0.1.
        max_chars: each document's first ``max_chars`` characters are what the
            model sees, in training and scoring alike. Default 5,000, our
            choice: bounds the sample and a document's scoring cost; the
            opening of a page says most of what a classifier of style needs.
        chunk_words: each training document is cut into lines of this many
            words (:func:`stages.quality_classifier.train.training_lines`);
            scoring reads the whole document (its first ``max_chars``).
            Default 64, our measurement (docs/stages/quality_classifier.md):
            on the 93 debref documents of the sample against their word
            salad (25 epochs, lr 0.5), one line per document kept the
            training loss at 0.69 (chance) and held-out accuracy at 0.66;
            64-word chunks: loss 0.16, accuracy 0.76. With ~1,000 documents
            per class (bench.quality_classifier, KJV) both reach 0.99-1.0.
        threshold: drop documents whose score (probability of the reference
            label) is below this (0..1). Takes precedence over ``percentile``.
        percentile: drop documents whose score is below this percentile (0-100)
            of the scores of the held-out corpus sample (negatives). Default
            10: drop the 10% of the corpus least like the reference. DCLM
            (Li et al. 2024) kept the top 10% by its fastText score on Common
            Crawl; a build of curated sources is not Common Crawl, so the
            default drops only the tail. Documents exactly tied at the
            threshold drop at the share that realizes the percentile (seeded
            id hash; ``tie_fraction`` in the facts). Measured on held-out
            documents: documents the model trained on may score otherwise
            (docs/stages/quality_classifier.md, limits). None (and no
            ``threshold``): score only.
        buckets: number of score buckets: ``quality_classifier_bucket`` is 0
            (lowest) to ``buckets - 1``, split at equal-count quantiles of the
            held-out corpus sample's scores (10: deciles). Default 10.
        action: ``drop`` removes documents below the threshold with reason
            ``quality_classifier.low_score``; ``annotate`` only adds the columns.
        epoch, lr, word_ngrams, dim, bucket, min_count: fastText supervised
            training parameters (``-epoch -lr -wordNgrams -dim -bucket
            -minCount``). Defaults: epoch 25 and lr 0.5, our measurement
            (docs/stages/quality_classifier.md: fastText's own 5 and 0.1 left
            the scores at 0.50 +- 0.001 and held-out recall 0.13 on the
            sample's King James chapters against their word salad; 25 and 0.5
            give precision and recall 1.0; fastText's tutorial uses 25 epochs
            on small data); minCount 1 is fastText's supervised default; wordNgrams 2 as DCLM's fastText
            quality classifier (bigrams); dim 64 and bucket 200,000 (fastText:
            100 and 2,000,000) keep the model ~55-95 MB instead of ~770 MB
            (each worker loads it) and train 4x faster, with the same
            held-out precision and recall (1.0 / 1.0, KJV against its salad,
            bench.quality_classifier).
    """

    enabled: bool = False
    reference_source: str | None = None
    reference_files: list[str] = []
    per_language: bool = False
    languages: list[str] | None = None
    sample_docs: int = pydantic.Field(20_000, ge=1)
    negatives_per_positive: float | None = pydantic.Field(None, gt=0.0)
    min_docs: int = pydantic.Field(20, ge=2)
    holdout_fraction: float = pydantic.Field(0.1, gt=0.0, lt=0.5)
    max_chars: int = pydantic.Field(5_000, ge=100)
    chunk_words: int = pydantic.Field(64, ge=4, le=10_000)
    threshold: float | None = pydantic.Field(None, ge=0.0, le=1.0)
    percentile: float | None = pydantic.Field(10.0, gt=0.0, lt=100.0)
    buckets: int = pydantic.Field(10, ge=2, le=100)
    action: Literal["drop", "annotate"] = "drop"
    epoch: int = pydantic.Field(25, ge=1, le=1000)
    lr: float = pydantic.Field(0.5, gt=0.0, le=10.0)
    word_ngrams: int = pydantic.Field(2, ge=1, le=5)
    dim: int = pydantic.Field(64, ge=2, le=1000)
    bucket: int = pydantic.Field(200_000, ge=1000, le=10_000_000)
    min_count: int = pydantic.Field(1, ge=1)

    def requirements(self) -> dict[str, str]:
        """``langid_lang`` when ``per_language`` (one model per language)."""
        if self.per_language:
            return {"langid_lang": "one model per language (quality_classifier.per_language)"}
        return {}

    def language_codes(self) -> dict[str, list[str]]:
        """``languages`` (checked against what lid.176 gives)."""
        return {"languages": list(self.languages or [])}

    @pydantic.field_validator("languages", mode="before")
    @classmethod
    def _canonical_list(cls, value):
        return canonical_list(value)

    @pydantic.field_validator("lr")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"quality_classifier.lr must be finite (got {value})")
        return value

    @pydantic.model_validator(mode="after")
    def _one_reference(self):
        if not self.enabled:
            return self
        if self.reference_source is None and not self.reference_files:
            raise ValueError("reference_source: required key is missing (the source, or reference_files, whose "
                             "documents are the positive class; or set quality_classifier.enabled: false)")
        if self.reference_source is not None and self.reference_files:
            raise ValueError("reference_files: give reference_source or reference_files, not both")
        if self.per_language and self.reference_source is None:
            raise ValueError("per_language: needs reference_source (reference_files carry no language)")
        if self.languages is not None and not self.per_language:
            raise ValueError("languages: only with per_language: true")
        return self
