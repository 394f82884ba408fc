"""The ``heuristics`` stage: its config and the stage that measures and decides.

Per partition (:meth:`HeuristicsStage.process`): the partition-wide counts
once (:func:`~stages.heuristics.rules.batch_counts`), one
:class:`~stages.heuristics.view.Document` per row, the word n-grams of every
document that needs them in one batch
(:func:`~stages.heuristics.ngrams.ngram_stats_batch`), then
:func:`~stages.heuristics.rules.evaluate` per document with the thresholds of
its language (:meth:`Config.for_language`).
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from stages.base import Column, Stage, StageConfig, with_decision
from stages.heuristics.ngrams import ngram_stats_batch
from stages.heuristics.presets import PRESETS, Thresholds
from stages.heuristics.rules import INT_VALUES, RULES, VALUES, batch_counts, evaluate
from stages.heuristics.view import Document
from stages.lang_codes import canonical_keys, yaml_codes
from stages.text import CJK_LANGS


class Config(StageConfig):
    """Config of the ``heuristics`` stage.

    Attributes:
        thresholds: language code (``zh``, ``en``, ``ja``, ``code``,
            ``default``, any ``langid_lang``) -> thresholds to override. Only
            the fields given are changed; they apply on top of
            ``PRESETS[lang]`` (or ``PRESETS["default"]`` for a language
            without a preset). An explicit null turns a rule off for that
            language. Example: ``{"zh": {"max_top_2gram_char_share": null}}``.
        disabled_families: rule families (:data:`FAMILIES`) switched off for
            every language.
        bad_words: language -> words (compared with the document's words;
            ASCII words case-insensitively) for C4's bad-word rule
            (``max_bad_words``). Empty by default: the project ships no list.
    """

    requires = {"langid_lang": "the word segmenter and the rule thresholds follow the language"}

    thresholds: dict[str, Thresholds] = {}
    disabled_families: list[Literal["gopher_quality", "gopher_repetition", "c4", "fineweb",
                                    "cjk", "code", "page_shape"]] = []
    bad_words: dict[str, list[str]] = {}

    @pydantic.field_validator("thresholds", "bad_words", mode="before")
    @classmethod
    def _canonical_keys(cls, value, info):
        """Language keys as document labels (``nb`` -> ``no``, ``zh-Hant`` ->
        ``zh``; ``default`` kept); two keys of one label are an error."""
        value = yaml_codes(value)
        if isinstance(value, dict):
            return canonical_keys({str(k): v for k, v in value.items()}, info.field_name)
        return value

    def language_codes(self) -> dict[str, list[str]]:
        """The language keys of ``thresholds`` and ``bad_words``."""
        return {"thresholds": list(self.thresholds), "bad_words": list(self.bad_words)}

    @pydantic.field_serializer("thresholds")
    def _only_given(self, thresholds: dict[str, Thresholds]) -> dict[str, dict[str, Any]]:
        """Serialize only the fields each override gives. An override is a
        partial layer over the presets (a field it does not name is
        inherited, a field it sets to null turns that rule off), so its JSON
        form (the published ``config.yaml``, the config hash) lists only what
        it sets: read back with every field present it would turn off every
        rule it does not name. Workers get the model itself, pickled."""
        return {lang: t.model_dump(exclude_unset=True) for lang, t in thresholds.items()}

    def requirements(self) -> dict[str, str]:
        """``langid_lang``; and langid's ``langid_mix`` only when
        ``max_second_language_share`` is on in some language (of
        :meth:`effective_thresholds`; ``default`` stands for every other)."""
        needs = dict(self.requires)
        if self.reads_langid_mix():
            needs["langid_mix"] = ("max_second_language_share drops pages by the share of "
                                   "letters outside their top language")
        return needs

    def reads_langid_mix(self) -> bool:
        """Whether ``max_second_language_share`` is on in some language."""
        return any("max_second_language_share" in t for t in self.effective_thresholds().values())

    def for_language(self, lang: str | None) -> Thresholds:
        """The effective thresholds for documents of language ``lang``.

        Mean word length is never used for CJK languages (``zh``, ``ja``,
        ``ko``, ``yue``, ``wuu``): their words are one or two characters.
        Rules of ``disabled_families`` are set to None.
        """
        preset = PRESETS.get(lang)
        merged = preset if preset is not None else PRESETS["default"]
        # A language without a preset takes the user's "default" layer first.
        for layer in [lang] if preset is not None else ["default", lang]:
            if layer in self.thresholds:
                update = self.thresholds[layer].model_dump(exclude_unset=True)
                merged = merged.model_copy(update=update)
        off = {rule.name: None for rule in RULES if rule.family in self.disabled_families}
        if lang in CJK_LANGS:
            off.update(min_mean_word_length=None, max_mean_word_length=None)
        if lang not in self.bad_words:
            off["max_bad_words"] = None
        return merged.model_copy(update=off) if off else merged

    def effective_thresholds(self) -> dict[str, dict[str, int | float]]:
        """The thresholds applied per language, after presets, overrides,
        ``disabled_families``, the CJK rule and ``bad_words``
        (:meth:`for_language`): language -> the rules that are on (and the
        parameters ``short_line_chars``, ``long_document_min_words``) with
        their values; a rule that is off is absent.

        Languages: every preset (``code``, ``default``, ``en``, ``ja``,
        ``zh``), every language of ``thresholds`` and ``bad_words``, and the
        CJK languages (``stages.text.CJK_LANGS``); any other language gets the
        ``default`` entry. Sorted by language, so equal configs give equal
        JSON.
        """
        langs = set(PRESETS) | set(self.thresholds) | set(self.bad_words) | (set(CJK_LANGS) - {"yue", "wuu"})
        return {lang: self.for_language(lang).model_dump(exclude_none=True) for lang in sorted(langs)}


_NGRAM_RULES = tuple(rule.name for rule in RULES if rule.value in (
    *(f"top_{n}gram_char_share" for n in (2, 3, 4)),
    *(f"duplicate_{n}gram_char_share" for n in range(5, 11))))


def _needs_ngrams(thresholds: Thresholds) -> bool:
    return any(getattr(thresholds, name) is not None for name in _NGRAM_RULES)


class HeuristicsStage(Stage):
    """Adds ``heuristics_<value>`` columns (int64 for counts and lengths, see
    :data:`~stages.heuristics.rules.INT_VALUES`; float64 otherwise; null
    when no active rule of the document's language needs it, or the value is
    undefined) and drops documents with ``heuristics.<rule>`` reasons.

    Needs the ``langid_lang`` column (raises KeyError without it), and
    ``langid_mix`` when ``max_second_language_share`` is on in some language.
    """

    row_independent = True
    name = "heuristics"
    order = 200
    columns = {
        f"heuristics_{value}": Column("int64" if value in INT_VALUES else "double",
                                      " ".join((fn.__doc__ or value.replace("_", " ")).split("\n\n")[0].split())
                                      + " (null when no active rule of the language needs it)")
        for value, fn in VALUES.items()}
    Config = Config

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """``{"thresholds": config.effective_thresholds(), "rules": [...]}``:
        the thresholds per language the stage applies, and every rule as
        ``{name, value_column, bound, family, long_only, undefined_passes}``
        (in its fingerprint and the manifest,
        ``stages.heuristics.settings``), so that ``explain`` can pair each
        threshold with its measurement column without importing the stage."""
        rules = [{"name": r.name, "value_column": f"heuristics_{r.value}", "bound": r.bound, "family": r.family,
                  "long_only": r.long_only, "undefined_passes": r.undefined_passes} for r in RULES]
        return {"thresholds": config.effective_thresholds(), "rules": rules}

    def process(self, table: pa.Table) -> pa.Table:
        """Measure and decide every document of ``table`` (n rows)."""
        config: Config = self.config
        text_column = pc.fill_null(table.column("text"), "")
        texts = text_column.to_pylist()
        langs = table.column("langid_lang").to_pylist()
        # langid_mix is read only when a language's rule needs it (the
        # column exists then: Config.requirements declares it).
        mixes = (table.column("langid_mix").to_pylist() if config.reads_langid_mix()
                 else [None] * len(texts))
        counts = batch_counts(text_column)
        by_lang: dict[str | None, tuple[Thresholds, frozenset[str]]] = {}
        columns: dict[str, list] = {name: [None] * len(texts) for name in VALUES}
        reasons: list[str | None] = []
        docs = []
        for row, (text, lang, mix) in enumerate(zip(texts, langs, mixes)):
            if lang not in by_lang:
                bad = frozenset(w.lower() if w.isascii() else w
                                for w in config.bad_words.get(lang, ()))
                by_lang[lang] = (config.for_language(lang), bad)
            thresholds, bad = by_lang[lang]
            docs.append(Document(text or "", lang, thresholds.short_line_chars, bad, counts[row],
                                 mix))
        # Word n-grams of every document that needs them, in one batch.
        need = [doc for doc in docs if _needs_ngrams(by_lang[doc.lang][0])]
        for doc, stats in zip(need, ngram_stats_batch([doc.ngram_words for doc in need],
                                                       [doc.ngram_run_starts for doc in need],
                                                       [doc.ngram_other_chars for doc in need])):
            doc.__dict__["ngram_stats"] = stats      # fills the cached_property
        for row, doc in enumerate(docs):
            values, reason = evaluate(doc, by_lang[doc.lang][0])
            for name, value in values.items():
                columns[name][row] = value
            reasons.append(reason)
        arrays = {f"heuristics_{name}": pa.array(vals, pa.int64() if name in INT_VALUES
                                                  else pa.float64())
                  for name, vals in columns.items()}
        return with_decision(table, arrays, reasons)
