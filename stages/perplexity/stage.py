"""The perplexity stage: ``fit`` trains the models and measures the reference
distribution, ``process`` scores and decides (see :class:`PerplexityStage`)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import StageFailure
from common.io import sha256_file, write_json_atomic
from stages.base import Column, Figure, FitResult, Partitions, Stage, StageContext, with_decision
from stages.perplexity.config import Config
from stages.perplexity.model import (NO_LANGUAGE, TOKENIZER_FILE, _load_model, _load_tokenizer, _publish,
                                     _words_tokenizer, language_counts, load_model, load_tokenizer, percentile,
                                     perplexity, reference_chars,
                                     reference_documents, reference_perplexities, score_sentences,
                                     score_sentences_oov,
                                     train_language_model)
from stages.perplexity.salad import REASON_WORD_SALAD, modern_zh_share, salad_cutoff, self_shuffle_ratio
from stages.perplexity.text import normalized_lines

REASON_ABOVE_THRESHOLD = "perplexity.above_threshold"
BUCKETS = ("head", "middle", "tail")

# ----------------------------------------------------------------- stage

def coverage_warnings(coverage: dict[str, Any], skipped: dict[str, str]) -> tuple[str, ...]:
    """The warnings of a fit: first one line with what passes unscored in
    all (languages, documents and their share of the input, characters), then
    one line per language of the input without a model, most documents first,
    then the skipped languages absent from the input (e.g. ``max_perplexity``
    given without a model)."""
    unscored = {lang: u for lang, u in coverage["unscored"].items() if not u.get("declared")}
    out = []
    if unscored:
        docs = sum(u["docs"] for u in unscored.values())
        chars = sum(u["chars"] for u in unscored.values())
        share = docs / max(coverage["documents"], 1)
        out.append(f"{len(unscored)} of {len(unscored) + len(coverage['scored'])} languages have no model: "
                   f"{docs:,} documents ({share:.1%} of the input), {chars:,} chars pass unscored")
    for lang, u in sorted(unscored.items(), key=lambda kv: (-kv[1]["docs"], kv[0])):
        if u.get("declared"):
            continue
        out.append(f"language {lang}: no model ({u['why']}); its {u['docs']:,} documents ({u['chars']:,} chars) "
                   "are kept without a perplexity or bucket (give more reference text or perplexity.models)")
    for lang, why in sorted(skipped.items()):
        if lang not in unscored:
            out.append(f"language {lang}: no model ({why}); no document of the input is in {lang}")
    return tuple(out)


class PerplexityStage(Stage):
    """CCNet-style perplexity filter (Wenzek et al. 2020).

    Adds ``perplexity_value`` (float64: ``10 ** (-sum log10 p / tokens)`` over
    the document's lines, tokens counting one ``</s>`` per line; null when the
    document's language has no model or the document has no tokens) and
    ``perplexity_bucket`` (string ``head``/``middle``/``tail``, split at
    ``bucket_percentiles`` of the held-out reference distribution; null when
    unmeasured) and ``perplexity_shuffle_ratio`` (float64: the self-shuffle
    ratio, :func:`stages.perplexity.salad.self_shuffle_ratio`; null unless the
    language is in ``word_salad_max_ratio``, the document has at least
    ``word_salad_min_tokens`` tokens, a perplexity within
    ``word_salad_max_perplexity`` and at most ``word_salad_max_oov_share`` of
    its tokens unknown to the model, and for zh, written in modern Chinese:
    ``word_salad_zh_min_modern_share``). With ``action="drop"``, a document whose
    ratio is at or below its language's cut-off
    (:func:`stages.perplexity.salad.salad_cutoff`: lower for documents
    shorter than ``word_salad_full_tokens``) gets reason
    ``perplexity.word_salad``, else one above its language's threshold gets
    ``perplexity.above_threshold``. Documents of languages without a model are
    kept unmeasured, and ``fit`` reports each such language with its document
    and character counts (facts ``coverage``, warnings), or stops the build
    when ``require_models`` lists it.
    """

    row_independent = True
    name = "perplexity"
    order = 300
    Config = Config
    columns = {
        "perplexity_value": Column("double", "KenLM perplexity of the document (per token, </s> per line); "
                                   "null when its language has no model", lineage=True, digits=1),
        "perplexity_bucket": Column("string", "head / middle / tail of the reference distribution; null when "
                                    "unmeasured", lineage=True),
        "perplexity_shuffle_ratio": Column("double", "perplexity of the document with each line's words shuffled / "
                                           "its perplexity (~1: word salad); null when not checked", digits=3),
    }

    def __init__(self, config: Config, ctx: StageContext):
        super().__init__(config, ctx)
        self._models_json: dict[str, Any] | None = None

    @classmethod
    def preflight(cls, config: Config) -> list[str]:
        """A model given in ``models`` that is missing or not a KenLM
        ARPA/binary file stops the build before any work (one line per
        language); the models are loaded once here and again in ``process``."""
        errors = []
        for lang, path in config.models.items():
            try:
                load_model(str(path))
            except RuntimeError as exc:
                errors.append(f"perplexity.models.{lang}: {exc}")
            finally:
                _load_model.cache_clear()
        return errors

    def fit(self, partitions: Partitions) -> FitResult:
        """Train one tokenizer and model per language on the reference source;
        write ``ctx.work_dir/models.json``, ``ctx.work_dir/<lang>.binary`` and
        (tokenizer ``sentencepiece``) ``ctx.work_dir/<lang>.sentencepiece.model``.

        Returns:
            Manifest facts: ``{"reference_source", "order", "tokenizer",
            "languages": {lang: {"model_sha256", "tokenizer_sha256" (null for
            words), "reference_docs", "reference_chars", "reference_tokens",
            "distribution", "threshold", "threshold_from", "bucket_cutoffs"}},
            "skipped": {lang: reason}, "coverage": {"unit": "model",
            "documents", "chars", "scored": {lang: {"docs", "chars"}},
            "unscored": {lang: {"docs", "chars", "why"}}}}`` (``coverage``
            counts this stage's input per ``langid_lang``, ``und`` for none;
            ``diff`` reads it to say which language lost its model), and one
            warning per language of the input without a model, largest first.
        Raises:
            StageFailure: a language of ``require_models`` gets no model (the
                line names it, its reference chars and ``min_reference_chars``).
            RuntimeError: lmplz/build_binary failed, or a written model or
                tokenizer file cannot be read back (the message names it).
        """
        cfg: Config = self.config
        available: dict[str, int] = {}
        for part in partitions.map(functools.partial(reference_chars, reference_source=cfg.reference_source,
                                                     languages=cfg.languages), list(partitions.paths)):
            for lang, chars in part.items():
                available[lang] = available.get(lang, 0) + chars
        self._check_required(available, {})
        draw = {lang: min(1.0, cfg.max_reference_chars / chars) for lang, chars in available.items() if chars}
        mapped = partitions.map(
            functools.partial(reference_documents, reference_source=cfg.reference_source,
                              languages=cfg.languages, draw=draw, seed=self.ctx.seed,
                              fold=cfg.fold_chinese_script),
            list(partitions.paths))
        by_lang: dict[str, list] = {}
        for part in mapped:
            for doc in part:
                by_lang.setdefault(doc[1], []).append(doc)

        work_dir = Path(self.ctx.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        models: dict[str, Any] = {}
        facts: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        for lang, given in sorted(cfg.models.items()):
            local = _publish(Path(given), work_dir / f"{lang}.binary")
            model = load_model(str(local))
            docs = by_lang.pop(lang, [])
            words = load_tokenizer(None, lang)
            values = sorted(v for v in (perplexity(*score_sentences(model, [t for t in words(d[3]) if t]))
                                        for d in docs) if v is not None)
            threshold = cfg.max_perplexity.get(lang)
            if threshold is None and cfg.max_percentile is not None and values:
                threshold = percentile(values, cfg.max_percentile)
            cutoffs = [percentile(values, q) for q in cfg.bucket_percentiles] if values else None
            models[lang] = {"model": local.name, "tokenizer_model": None, "threshold": threshold,
                            "bucket_cutoffs": cutoffs}
            facts[lang] = {"model_sha256": sha256_file(local), "tokenizer_sha256": None,
                           "given_model": str(given), "reference_docs": len(docs),
                           "reference_chars": sum(d[2] for d in docs), "distribution": "given model, in-sample",
                           "threshold": threshold, "bucket_cutoffs": cutoffs}
        for lang in sorted(by_lang):
            docs = by_lang[lang]
            chars = sum(d[2] for d in docs)
            if chars < cfg.min_reference_chars:
                skipped[lang] = f"{chars:,} reference chars < min_reference_chars {cfg.min_reference_chars:,}"
                continue
            lines = [s for d in docs for s in d[3]]
            model_path, sp_path = train_language_model(lines, lang, cfg, self.ctx.tools_dir,
                                                       self.ctx.cache_dir)
            local = _publish(model_path, work_dir / f"{lang}.binary")
            local_sp = (None if sp_path is None else
                        _publish(sp_path, work_dir / f"{lang}.{TOKENIZER_FILE}"))
            load_model(str(local))  # fail at fit time, naming the file, if unreadable
            tokenizer = load_tokenizer(None if local_sp is None else str(local_sp), lang)
            values, method = reference_perplexities(docs, lang, cfg, self.ctx.tools_dir,
                                                    self.ctx.cache_dir)
            if not values:
                skipped[lang] = "no reference document has tokens"
                local.unlink()
                if local_sp is not None:
                    local_sp.unlink()
                continue
            if lang in cfg.max_perplexity:
                threshold, source = cfg.max_perplexity[lang], "max_perplexity"
            elif cfg.max_percentile is not None:
                threshold = percentile(values, cfg.max_percentile)
                source = f"p{cfg.max_percentile:g} of reference"
            else:
                threshold, source = None, "none"
            cutoffs = [percentile(values, q) for q in cfg.bucket_percentiles]
            models[lang] = {"model": local.name,
                            "tokenizer_model": None if local_sp is None else local_sp.name,
                            "threshold": threshold, "bucket_cutoffs": cutoffs}
            facts[lang] = {
                "model_sha256": sha256_file(local),
                "tokenizer_sha256": None if local_sp is None else sha256_file(local_sp),
                "reference_docs": len(docs),
                "reference_chars": chars,
                "reference_tokens": sum(t.count(" ") + 2 for t in tokenizer(lines) if t),
                "distribution": method,
                "threshold": threshold,
                "threshold_from": source,
                "bucket_cutoffs": cutoffs,
            }
        for lang in sorted(set(cfg.max_perplexity) - set(models)):
            skipped.setdefault(lang, "max_perplexity given but no model")
        self._check_required(available, models, skipped)
        counts: dict[str, list[int]] = {}
        for part in partitions.map(language_counts, list(partitions.paths)):
            for lang, (docs, chars, declared) in part.items():
                entry = counts.setdefault(lang, [0, 0, 0])
                entry[0] += docs
                entry[1] += chars
                entry[2] += declared
        coverage = self._coverage(counts, models, skipped)
        write_json_atomic({"order": cfg.order, "action": cfg.action, "tokenizer": cfg.tokenizer, "languages": models},
                          work_dir / "models.json", indent=2, sort_keys=True, ensure_ascii=True, final_newline=False)
        self._models_json = None
        warnings = coverage_warnings(coverage, skipped)
        figure = Figure(
            kind="column_histogram", column="perplexity_value", group_by="langid_lang", log10=True,
            title="perplexity of kept documents; dashed: head/middle/tail cut-offs, solid: drop threshold",
            x_label="log10 perplexity",
            marks={lang: list(f.get("bucket_cutoffs") or []) for lang, f in sorted(facts.items())},
            strong_marks={lang: [f["threshold"]] for lang, f in sorted(facts.items()) if f.get("threshold")})
        return FitResult(facts={"reference_source": cfg.reference_source, "order": cfg.order,
                                "tokenizer": cfg.tokenizer, "languages": facts, "skipped": skipped,
                                "coverage": coverage},
                         warnings=warnings, figures=(figure,))

    def _why_no_model(self, lang: str, available: dict[str, int]) -> str:
        cfg: Config = self.config
        if cfg.languages is not None and lang not in cfg.languages:
            return f"not in perplexity.languages {cfg.languages}"
        chars = available.get(lang, 0)
        return (f"{chars:,} reference chars in source {cfg.reference_source!r} < min_reference_chars "
                f"{cfg.min_reference_chars:,}")

    def _check_required(self, available: dict[str, int], models: dict[str, Any],
                        skipped: dict[str, str] | None = None) -> None:
        """Raise :class:`StageFailure` for the first language of
        ``require_models`` without a model. Before training (``skipped``
        None) only what the reference characters decide is checked, so a
        build that must fail fails before any lmplz run."""
        cfg: Config = self.config
        for lang in cfg.require_models:
            if lang in cfg.models or lang in models:
                continue
            if skipped is None:
                if cfg.languages is None or lang in cfg.languages:
                    if available.get(lang, 0) >= cfg.min_reference_chars:
                        continue
                why = self._why_no_model(lang, available)
            else:
                why = skipped.get(lang) or self._why_no_model(lang, available)
            raise StageFailure(f"perplexity: language {lang} has no model ({why}), and perplexity.require_models "
                               f"lists it: give more reference text in {lang}, lower min_reference_chars, or give "
                               f"perplexity.models.{lang}")

    def _coverage(self, counts: dict[str, list[int]], models: dict[str, Any],
                  skipped: dict[str, str]) -> dict[str, Any]:
        cfg: Config = self.config
        scored, unscored = {}, {}
        for lang, (docs, chars, declared) in sorted(counts.items()):
            if lang in models:
                scored[lang] = {"docs": docs, "chars": chars}
            else:
                why = skipped.get(lang)
                if why is None and declared == docs:
                    # every document's language comes from its source (lang: code):
                    # not prose to score; listed, without a warning
                    unscored[lang] = {"docs": docs, "chars": chars, "declared": True,
                                      "why": "declared by its source (lang), not identified: no reference expected"}
                    continue
                if why is None:
                    if lang == NO_LANGUAGE:
                        why = "no language detected"
                    elif cfg.languages is not None and lang not in cfg.languages:
                        why = f"not in perplexity.languages {cfg.languages}"
                    else:
                        why = (f"no document of reference source {cfg.reference_source!r} was detected "
                               f"as {lang} (langid labels the reference like any source)")
                unscored[lang] = {"docs": docs, "chars": chars, "why": why}
        return {"unit": "model", "documents": sum(c[0] for c in counts.values()),
                "chars": sum(c[1] for c in counts.values()), "scored": scored, "unscored": unscored}

    def release(self) -> None:
        """Drop the KenLM models and tokenizers cached in this process (the
        models grow with the reference text)."""
        _load_model.cache_clear()
        _load_tokenizer.cache_clear()
        _words_tokenizer.cache_clear()

    def _models(self) -> dict[str, Any]:
        if self._models_json is None:
            path = Path(self.ctx.work_dir) / "models.json"
            if not path.is_file():
                raise RuntimeError(f"perplexity: {path} missing; run PerplexityStage.fit first")
            self._models_json = json.loads(path.read_text())
        return self._models_json

    def process(self, table: pa.Table) -> pa.Table:
        """Score each document; see the class docstring for columns and reasons.

        Args:
            table: document table with ``text`` and ``langid_lang``.
        Raises:
            ValueError: no ``langid_lang`` column.
            RuntimeError: ``models.json`` missing, or a model or tokenizer
                file unreadable (the message names the file).
        """
        if "langid_lang" not in table.column_names:
            raise ValueError("perplexity: input table has no langid_lang column "
                             "(run the langid stage first)")
        languages = self._models()["languages"]
        cfg: Config = self.config
        drop = cfg.action == "drop"
        values: list[float | None] = []
        ratios: list[float | None] = []
        buckets: list[str | None] = []
        reasons: list[str | None] = []
        for text, lang in zip(pc.fill_null(table["text"], "").to_pylist(), table["langid_lang"].to_pylist()):
            entry = languages.get(lang) if lang is not None else None
            value = ratio = None
            if entry is not None:
                work_dir = Path(self.ctx.work_dir)
                model = load_model(str(work_dir / entry["model"]))
                sp_name = entry.get("tokenizer_model")
                tokenizer = load_tokenizer(None if sp_name is None else str(work_dir / sp_name),
                                           lang)
                lines = normalized_lines(text, lang, cfg.fold_chinese_script)
                log10_sum, tokens, oov = score_sentences_oov(model, [t for t in tokenizer(lines) if t])
                value = perplexity(log10_sum, tokens)
                if cfg.word_salad_checked(lang, tokens, value, oov, lambda: modern_zh_share(text)):
                    ratio = self_shuffle_ratio(model, tokenizer, lines, lang, log10_sum, tokens, text)
            values.append(value)
            ratios.append(ratio)
            if value is None:
                buckets.append(None)
                reasons.append(None)
                continue
            if entry["bucket_cutoffs"] is None:  # a given model without reference text
                buckets.append(None)
            else:
                low, high = entry["bucket_cutoffs"]
                buckets.append(BUCKETS[(value > low) + (value > high)])
            threshold = entry["threshold"]
            if not drop:
                reasons.append(None)
            elif ratio is not None and ratio <= salad_cutoff(cfg.word_salad_max_ratio[lang], tokens,
                                                             cfg.word_salad_full_tokens):
                reasons.append(REASON_WORD_SALAD)
            elif threshold is not None and value > threshold:
                reasons.append(REASON_ABOVE_THRESHOLD)
            else:
                reasons.append(None)
        return with_decision(table, {
            "perplexity_value": pa.array(values, pa.float64()),
            "perplexity_bucket": pa.array(buckets, pa.string()),
            "perplexity_shuffle_ratio": pa.array(ratios, pa.float64()),
        }, reasons)
