"""The quality classifier stage: ``fit`` trains one fastText model (or one per
language) on the reference against a sample of the corpus and measures it on
a held-out split; ``process`` scores and decides (:class:`QualityClassifierStage`)."""

from __future__ import annotations

import bisect
import functools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import StageFailure
from common.hashing import id_hash
from common.io import sha256_file, write_json_atomic
from stages.base import Column, Figure, FitResult, Partitions, Stage, with_decision
from stages.quality_classifier.config import Config
from stages.quality_classifier.model import line_scores, load_model, scores
from stages.quality_classifier.train import (ALL, LABEL_REFERENCE, _sampled, _take, check_reference_files,
                                             count_documents, is_held_out, precision_recall, quantile, roc_auc,
                                             reference_file_documents, sample_documents, train_model,
                                             training_flags, training_lines)

REASON_LOW_SCORE = "quality_classifier.low_score"
MODELS_JSON = "models.json"
#: Tally key of documents left unscored (their language has no model).
UNSCORED = "unscored"
#: The decision threshold of a two-class softmax, at which held-out precision
#: and recall are always reported (besides the applied threshold).
MODEL_BOUNDARY = 0.5
#: A ``percentile`` whose threshold drops a share of the held-out corpus
#: sample further than this from the percentile (ties at fastText's floor
#: score) gets a warning; our choice: 5 points.
TIE_TOLERANCE = 0.05
#: Salt of the id hash that picks which documents tied at the threshold drop.
TIE_SALT = 0x71E5


def bucket_key(bucket: int) -> str:
    """Tally key of a score bucket: ``bucket_00`` ... ``bucket_99`` (zero-padded
    so the keys sort in bucket order)."""
    return f"bucket_{bucket:02d}"


def _model_file(key: str) -> str:
    return "model-all.bin" if key == ALL else f"model-{key}.bin"


class QualityClassifierStage(Stage):
    """A trained quality classifier, as DCLM (Li et al. 2024) and
    FineWeb-Edu use: a fastText supervised model of "reads like the
    reference" against "reads like this corpus".

    Adds ``quality_classifier_score`` (float32: the model's probability that
    the document is reference-like, 0..1; null when its language has no
    model) and ``quality_classifier_bucket`` (int32: 0 lowest to
    ``buckets - 1``, split at equal-count quantiles of the held-out corpus
    sample's scores; null when unscored). With ``action: drop`` a document
    scoring below the threshold (``threshold``, or the ``percentile`` of the
    held-out corpus sample's scores; of documents exactly at a percentile
    threshold, the fit's ``tie_fraction`` by a seeded id hash) is dropped
    with reason ``quality_classifier.low_score``. Tally: documents per bucket
    (``bucket_00`` ...) and ``unscored``.
    """

    row_independent = True
    name = "quality_classifier"
    order = 350
    Config = Config
    columns = {
        "quality_classifier_score": Column("float", "probability the classifier gives the reference label "
                                           "(0..1); null when unscored", lineage=True, digits=3),
        "quality_classifier_bucket": Column("int32", "score bucket, 0 (lowest) .. buckets-1, equal-count "
                                            "quantiles of the held-out corpus sample; null when unscored",
                                            lineage=True),
    }
    tally_columns = ("quality_classifier_bucket",)

    def __init__(self, config: Config, ctx):
        super().__init__(config, ctx)
        self._models_json: dict[str, Any] | None = None

    @classmethod
    def preflight(cls, config: Config) -> list[str]:
        """``reference_files`` exist and hold JSON lines with ``text``."""
        return check_reference_files(config.reference_files) if config.enabled else []

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """The sha256 of each reference file (a changed file re-runs the
        stage; null for one that cannot be read). Reads the files:
        O(their size) time, O(1) memory."""
        files = {}
        for name in config.reference_files if config.enabled else ():
            try:
                files[name] = sha256_file(Path(name))
            except OSError:
                files[name] = None
        return {"reference_files": files} if files else {}

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Documents per score bucket (``bucket_00`` ...) and ``unscored``.
        O(n)."""
        out: dict[str, int] = {}
        for bucket in table["quality_classifier_bucket"].to_pylist():
            key = UNSCORED if bucket is None else bucket_key(bucket)
            out[key] = out.get(key, 0) + 1
        return out

    # ------------------------------------------------------------- fit

    def _sample(self, partitions: Partitions) -> tuple[dict[str, list[int]], list[tuple]]:
        """Count the candidates, then draw the sample (two passes through
        ``partitions.map``; the driver holds only the sample)."""
        cfg: Config = self.config
        seed = self.ctx.seed
        ref = cfg.reference_source
        available: dict[str, list[int]] = {}
        for part in partitions.map(functools.partial(count_documents, reference_source=ref,
                                                     per_language=cfg.per_language, languages=cfg.languages),
                                   list(partitions.paths)):
            for key, (pos, neg) in part.items():
                entry = available.setdefault(key, [0, 0])
                entry[0] += pos
                entry[1] += neg
        file_docs = 0
        if cfg.reference_files:
            file_docs = sum(1 for _ in reference_file_documents(cfg.reference_files))
            available.setdefault(ALL, [0, 0])[0] = file_docs

        def share(want: float, n: int) -> float:
            return min(1.0, want / n) if n else 0.0

        draw = {}
        for key, (pos, neg) in available.items():
            want = float(cfg.sample_docs)
            if cfg.negatives_per_positive is not None:
                want = min(want, cfg.negatives_per_positive * min(pos, cfg.sample_docs))
            draw[key] = (share(cfg.sample_docs, pos), share(want, neg), share(cfg.sample_docs, neg))
        sample = [doc for part in partitions.map(
            functools.partial(sample_documents, reference_source=ref, per_language=cfg.per_language,
                              languages=cfg.languages, draw=draw, seed=seed,
                              holdout_fraction=cfg.holdout_fraction, max_chars=cfg.max_chars),
            list(partitions.paths)) for doc in part]
        if cfg.reference_files:
            p = draw[ALL][0]
            sample += [_sampled(doc_id, ALL, LABEL_REFERENCE, text, seed,
                                is_held_out(doc_id, seed, cfg.holdout_fraction), cfg.max_chars)
                       for doc_id, text in reference_file_documents(cfg.reference_files) if _take(doc_id, p, seed)]
        return available, sample

    def fit(self, partitions: Partitions) -> FitResult:
        """Train and measure the model(s); write ``ctx.work_dir/models.json``
        and ``ctx.work_dir/model-<lang|all>.bin``.

        Per model key (language, or ``*``): the sample's documents not held
        out, in seeded-hash order, train ``fasttext supervised``
        (:func:`stages.quality_classifier.train.train_model`, cached by the
        training lines and flags); the held-out ones are scored with the
        inference library: precision and recall of the reference label at
        0.5 and at the applied threshold, the threshold (``threshold``, or
        ``percentile`` of the held-out negatives' scores) and the bucket
        cut-offs (quantiles of the same scores).

        Memory: O(sample_docs x max_chars) characters per model key in the
        driver; never the corpus.

        Returns:
            Facts ``{"reference", "per_language", "flags", "sample_docs",
            "models": {key: {"model_sha256", "available": {"positives",
            "negatives"}, "train": {"positives", "negatives"}, "held_out_pr":
            [{"threshold", "precision", "recall", "positives", "negatives"},
            ...], "threshold", "threshold_from", "held_out_corpus_dropped" (share
            of the held-out corpus sample below the threshold),
            "bucket_cutoffs"}}, "skipped": {key: why}}``; a warning per
            skipped language, and one per model whose percentile fell on tied
            scores (dropped share more than :data:`TIE_TOLERANCE` away).
        Raises:
            StageFailure: one multilingual model and too few positives or
                negatives (``min_docs``), naming the counts.
            FileNotFoundError, ToolError: the fastText tool is missing or fails.
        """
        cfg: Config = self.config
        available, sample = self._sample(partitions)
        flags = training_flags(cfg, self.ctx.seed)
        work_dir = Path(self.ctx.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        by_key: dict[str, list[tuple]] = {}
        for doc in sample:
            by_key.setdefault(doc[0], []).append(doc)
        models: dict[str, Any] = {}
        facts: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        tied: list[str] = []
        reference = cfg.reference_source if cfg.reference_source is not None else list(cfg.reference_files)
        keys = sorted(set(available) | set(by_key) | ({ALL} if not cfg.per_language else set()))
        for key in keys:
            docs = sorted(by_key.get(key, []), key=lambda d: (d[3], d[4]))
            train = [d for d in docs if not d[2]]
            held = [d for d in docs if d[2]]
            n_pos = sum(1 for d in train if d[1] == LABEL_REFERENCE)
            n_neg = len(train) - n_pos
            if min(n_pos, n_neg) < cfg.min_docs:
                why = (f"{n_pos} reference and {n_neg} corpus documents to train on (available: "
                       f"{available.get(key, [0, 0])[0]} / {available.get(key, [0, 0])[1]}), fewer than "
                       f"min_docs {cfg.min_docs}")
                if key == ALL:
                    raise StageFailure(f"quality_classifier: {why}: name a larger reference, or lower "
                                       "quality_classifier.min_docs")
                skipped[key] = why
                continue
            lines = [line for d in train for line in training_lines(d[1], d[4], cfg.chunk_words)]
            cached, _ = train_model(lines, flags, self.ctx.tools_dir, self.ctx.cache_dir)
            local = work_dir / _model_file(key)
            local.write_bytes(cached.read_bytes())
            model = load_model(str(local))
            held_scores = line_scores(model, [d[4] for d in held])
            labels = [d[1] == LABEL_REFERENCE for d in held]
            corpus_scores = sorted(s for s, y in zip(held_scores, labels) if not y)
            threshold, source, tie_fraction = self._threshold(corpus_scores)
            cutoffs = ([quantile(corpus_scores, i / cfg.buckets) for i in range(1, cfg.buckets)]
                       if corpus_scores else None)
            pr = [precision_recall(held_scores, labels, MODEL_BOUNDARY)]
            if threshold is not None and threshold != MODEL_BOUNDARY:
                pr.append(precision_recall(held_scores, labels, threshold))
            # the share of the held-out corpus sample the rule drops (ties at
            # the threshold counted at tie_fraction)
            drop_share = None
            if threshold is not None and corpus_scores:
                below = sum(1 for v in corpus_scores if v < threshold)
                at = sum(1 for v in corpus_scores if v == threshold)
                drop_share = round((below + tie_fraction * at) / len(corpus_scores), 4)
            if cfg.threshold is None and drop_share is not None and \
                    abs(drop_share - cfg.percentile / 100) > TIE_TOLERANCE:
                tied.append(f"model {key}: percentile {cfg.percentile:g} gives threshold {threshold:g}, which "
                            f"drops {drop_share:.1%} of the held-out corpus sample")
            models[key] = {"model": local.name, "threshold": threshold, "tie_fraction": tie_fraction,
                           "bucket_cutoffs": cutoffs}
            facts[key] = {"model_sha256": sha256_file(local),
                          "available": {"positives": available.get(key, [0, 0])[0],
                                        "negatives": available.get(key, [0, 0])[1]},
                          "train": {"positives": n_pos, "negatives": n_neg},
                          "held_out_pr": pr, "threshold": threshold, "threshold_from": source,
                          "held_out_auc": roc_auc(held_scores, labels),
                          "tie_fraction": tie_fraction, "held_out_corpus_dropped": drop_share,
                          "bucket_cutoffs": cutoffs}
        load_model.cache_clear()
        write_json_atomic({"models": models}, work_dir / MODELS_JSON, indent=2, sort_keys=True,
                          ensure_ascii=True, final_newline=False)
        self._models_json = None
        warnings = tuple(f"language {key}: no quality model ({why}); its documents pass unscored"
                         for key, why in sorted(skipped.items())) + tuple(tied)
        group = "langid_lang" if cfg.per_language else None
        name = (lambda k: k) if cfg.per_language else (lambda k: "")
        figure = Figure(kind="column_histogram", column="quality_classifier_score", group_by=group,
                        title="quality classifier score of kept documents; dashed: bucket cut-offs, "
                              "solid: drop threshold", x_label="p(reference)",
                        marks={name(k): list(m["bucket_cutoffs"] or []) for k, m in sorted(models.items())},
                        strong_marks={name(k): [m["threshold"]] for k, m in sorted(models.items())
                                      if m["threshold"] is not None})
        return FitResult(facts={"reference": reference, "per_language": cfg.per_language, "flags": flags,
                                "sample_docs": cfg.sample_docs, "chunk_words": cfg.chunk_words,
                                "holdout_fraction": cfg.holdout_fraction,
                                "models": facts, "skipped": skipped},
                         warnings=warnings, figures=(figure,))

    def _threshold(self, corpus_scores: list[float]) -> tuple[float | None, str, float]:
        """``(threshold, where it came from, tie_fraction)`` from the sorted
        held-out corpus scores. fastText floors its probabilities (~1e-5),
        so many documents can share the lowest score and a percentile can
        fall on that tie; ``tie_fraction`` is then the share of the tied
        documents to drop (chosen by a seeded id hash in :meth:`process`) so
        that the rule drops the percentile's share of the sample, not none
        or all of the tie. 0.0 for a fixed ``threshold``."""
        cfg: Config = self.config
        if cfg.threshold is not None:
            return cfg.threshold, "threshold", 0.0
        if cfg.percentile is None or not corpus_scores:
            return None, "none", 0.0
        threshold = quantile(corpus_scores, cfg.percentile / 100)
        below = sum(1 for v in corpus_scores if v < threshold)
        at = sum(1 for v in corpus_scores if v == threshold)
        want = cfg.percentile / 100 * len(corpus_scores)
        tie_fraction = round(min(1.0, (want - below) / at), 6) if at and want > below else 0.0
        return threshold, f"p{cfg.percentile:g} of held-out corpus sample", tie_fraction

    # --------------------------------------------------------- process

    def _models(self) -> dict[str, Any]:
        if self._models_json is None:
            path = Path(self.ctx.work_dir) / MODELS_JSON
            if not path.is_file():
                raise RuntimeError(f"quality_classifier: {path} missing; run QualityClassifierStage.fit first")
            self._models_json = json.loads(path.read_text())["models"]
        return self._models_json

    def release(self) -> None:
        """Drop the fastText models cached in this process."""
        load_model.cache_clear()

    def process(self, table: pa.Table) -> pa.Table:
        """Score each document; see the class docstring for columns and
        reasons. O(rows x max_chars).

        Raises:
            ValueError: ``per_language`` and no ``langid_lang`` column.
            RuntimeError: ``models.json`` missing or a model unreadable.
        """
        cfg: Config = self.config
        models = self._models()
        if cfg.per_language and "langid_lang" not in table.column_names:
            raise ValueError("quality_classifier: per_language needs the langid_lang column (run langid first)")
        keys = table["langid_lang"].to_pylist() if cfg.per_language else [ALL] * table.num_rows
        texts = pc.fill_null(table["text"], "").to_pylist()
        values: list[float | None] = [None] * table.num_rows
        for key in sorted({k for k in keys if k in models}):
            rows = [i for i, k in enumerate(keys) if k == key]
            model = load_model(str(Path(self.ctx.work_dir) / models[key]["model"]))
            for i, s in zip(rows, scores(model, [texts[i] for i in rows], cfg.max_chars)):
                values[i] = s
        buckets: list[int | None] = []
        reasons: list[str | None] = []
        ids = table["id"].to_pylist()
        for doc_id, key, value in zip(ids, keys, values):
            if value is None:
                buckets.append(None)
                reasons.append(None)
                continue
            entry = models[key]
            cutoffs = entry["bucket_cutoffs"]
            # bisect_left: documents tied at the floor score go to the lowest bucket
            buckets.append(None if cutoffs is None else bisect.bisect_left(cutoffs, value))
            threshold = entry["threshold"]
            low = threshold is not None and (value < threshold or (
                value == threshold and id_hash(doc_id, self.ctx.seed ^ TIE_SALT) < entry["tie_fraction"] * 2.0 ** 64))
            low = low and cfg.action == "drop"
            reasons.append(REASON_LOW_SCORE if low else None)
        return with_decision(table, {
            "quality_classifier_score": pa.array(values, pa.float32()),
            "quality_classifier_bucket": pa.array(buckets, pa.int32()),
        }, reasons)
