"""The perplexity stage's config (``stages.perplexity`` in the build config)."""

from __future__ import annotations

import math
from typing import Callable, Literal

import pydantic

from stages.base import StageConfig
from stages.lang_codes import canonical_keys, canonical_list, yaml_codes

class Config(StageConfig):
    """Perplexity stage config (``stages.perplexity`` in the build config).

    Attributes:
        reference_source: the ``source`` whose kept documents train the models
            (e.g. a Wikipedia-like, curated source; CCNet trained on Wikipedia).
            Required while the stage is enabled (checked with the build
            config: it must name a configured source).
        order: n-gram order for ``lmplz -o``; default 5 as CCNet. Must be >= 2
            (an order-1 model ignores context, so it measures word frequency,
            not fluency).
        max_reference_chars: at most this many characters of reference text
            per language train its model: documents are drawn by a seeded hash
            of their id with probability ``min(1, max / available)``, so the
            draw does not depend on partitioning. Default 20,000,000 (the
            tokenizer's ``train_max_chars``): the driver holds the drawn lines
            while it trains (~3 bytes per character, measured), and lmplz's
            time grows with them. CCNet trained on Wikipedia per language;
            raise it for a large curated reference.
        min_reference_chars: a language gets a model only with at least this
            many characters (``len(text)``) of reference text; default 100,000,
            our choice: the smallest reference of our dev corpus that we use,
            fortunes en, has 96k characters and is too small for stable
            5-gram estimates, debref en/zh (306k-556k) are enough
            (docs/stages/perplexity.md).
        max_percentile: drop documents whose perplexity is above this
            percentile (0-100) of the held-out reference distribution of their
            language. Default 95: by construction it drops about 5% of
            documents that are as good as held-out reference text, and keeps
            anything better than the worst 5% of the reference. None turns the
            percentile rule off.
        max_perplexity: explicit per-language cut-offs (language -> perplexity);
            they take precedence over ``max_percentile``.
        bucket_percentiles: the percentiles of the reference distribution that
            split ``head``/``middle``/``tail``; (33, 66) as CCNet.
        action: ``drop`` removes documents above threshold; ``annotate`` only
            adds the columns.
        models: pre-built KenLM models (ARPA or binary, trained on word
            tokens as :func:`tokenize` makes them, e.g. from another corpus),
            by language; these languages are not trained from the reference.
            Each file is loaded when the config is read, so an unreadable
            model stops the build before any work, naming the file. Their
            thresholds and buckets come from ``max_perplexity`` and from
            scoring the reference documents of that language, if any.
        languages: restrict models to these ``langid_lang`` codes; None = every
            language with enough reference text.
        lmplz_memory: ``lmplz -S`` (sort memory: a size such as ``1G`` or a
            share of RAM such as ``10%``); default ``1G``: lmplz's own default
            is 80% of RAM (notes/dependencies.md) and it allocates all of it up
            front (0.9 s of page faults at 10% of 24 GiB, measured), which on
            a shared build machine would be one process of 2.4 GiB whatever
            the reference size; with less than it needs, lmplz sorts on disk.
            Tests pass a small size. It does not change the model (identical
            ARPA output, measured), so it is not part of the model cache key.
        tokenizer: what the n-gram model counts. ``words`` (default):
            segmenter words plus one token per punctuation character
            (:func:`tokenize`); ``sentencepiece``: pieces of a unigram
            SentencePiece model trained per language on the normalized
            reference text, as CCNet (its models are SentencePiece + KenLM).
            Default chosen by our measurement on the shared corpus, reference
            debref (docs/stages/perplexity.md): both put same-quality zh and
            en sentences in the same range, but on references this small
            (0.3-0.6 M characters) words separate fluent text from shuffled
            words and keyword spam far more strongly (spam/fluent perplexity
            ratio 90-290x with words, 3-15x with 2k pieces).
        sentencepiece_vocab_size: target vocabulary (pieces) of the
            SentencePiece model; trained with ``hard_vocab_limit=false``, so a
            small reference gets fewer pieces instead of an error. Default
            2,000, our measurement on debref (0.3-0.6 M characters): of
            2k/4k/8k/16k it gives the lowest held-out bits per character for
            zh and zh/en perplexities in the same range. CCNet used 65,536
            on 400k documents per language: raise it for a large reference.
            It must exceed the number of distinct characters kept by
            ``sentencepiece_character_coverage`` (1,188 for debref zh), or
            ``fit`` raises ValueError.
        sentencepiece_character_coverage: share of characters covered by the
            pieces; the rest becomes ``<unk>``. 0.9995: SentencePiece's
            recommendation for languages with large character sets (zh, ja),
            harmless for alphabetic ones.
        sentencepiece_input_sentence_size: at most this many lines train the
            SentencePiece model (a deterministic stride sample of the
            reference lines when there are more), which bounds its memory and
            time; 1,000,000 is SentencePiece's documented order of magnitude
            for a full training (its README suggests 1e6-1e7 sentences).
        fold_chinese_script: Chinese text (``langid_lang`` zh/yue/wuu) is
            converted to Simplified with OpenCC before the model sees it, in
            training and scoring alike: ``tw2sp`` (default: Taiwan standard to
            mainland Simplified, with phrases), ``t2s`` (characters only) or
            ``none``; a document without Traditional-only characters is
            never rewritten (:func:`stages.zh_script.fold_to_simplified`).
            Our measurement on 400 zh_CN/zh_TW man-page twins of
            ../shared/corpus plus the 6 maint-guide zh-cn/zh-tw DEV pages of
            corpus-multi, model trained on debref zh: perplexity(Hant) /
            perplexity(Hans) per pair, median (p5-p95), is 2.46 (1.64-3.38)
            with ``none``, 1.22 (1.05-1.42) with ``t2s`` and 1.00
            (0.99-1.05) with ``tw2sp`` (docs/stages/perplexity.md).
        word_salad_max_ratio: language -> cut-off of the *self-shuffle
            ratio* (``perplexity_shuffle_ratio``: perplexity of the document
            with each line's words shuffled over its own perplexity; about 1
            for word salad, higher for natural text) for documents of at
            least ``word_salad_full_tokens`` tokens; shorter ones get a
            lower cut-off (:func:`stages.perplexity.salad.salad_cutoff`). A
            document at or below its cut-off is dropped with reason
            ``perplexity.word_salad`` (``action: drop``). Languages not listed
            are not checked (the column is null). Defaults ``en: 1.15, zh:
            1.35``: our measurement on ../shared/corpus and corpus-multi DEV
            (bench.word_salad, models trained on debref; 1,068 en and 1,246
            zh clean documents of every kind, aptitude screen dumps left
            out, and their word salad): clean documents of >= 150 tokens
            have ratios of at least 1.12 in en (p1 1.28) and 1.44 in zh (p1
            1.62, within ``word_salad_max_perplexity``); with
            ``word_salad_min_tokens`` 60 and ``word_salad_max_oov_share``
            0.35 (and ``word_salad_zh_min_modern_share`` 0.005), 96.0% of the
            en and 96.3% of the zh salad of >= 300
            characters are dropped, and 2 of the 1,068 clean en and none of
            the 1,246 clean zh documents lost.
            (zh was 1.25 before: the salad of man pages, whose short option
            lines change little when shuffled again, scored 1.26-1.46.)
        word_salad_min_tokens: the word-salad check applies only to documents
            of at least this many model tokens (words and punctuation plus
            one ``</s>`` per line). Default 60, same measurement: below it,
            clean fortunes reach ratios as low as salad (0.9-1.1).
        word_salad_full_tokens: from this many tokens the cut-off is
            ``word_salad_max_ratio`` itself; below, it shrinks linearly
            toward 1 (60 tokens: en 1.06, zh 1.14). Default 150, same
            measurement (the least length at which no clean en or zh
            document fell below its cut-off but one fortune).
        word_salad_max_perplexity: language -> the highest document
            perplexity at which the word-salad check applies; above it the
            model does not read the text (most of its bigrams are unseen),
            so its word order is not evidence and the ratio is not computed
            (null). Default ``zh: 3000``, our measurement (bench.word_salad,
            ../shared/corpus and corpus-multi DEV, debref model): word salad
            made from modern Chinese prose scores 700-2,066 (p5-p95 of man
            pages, debref and corpus-multi pages), the Shijing odes of
            fortunes zh 4,900-6,000 with self-shuffle ratios of 1.11-1.24,
            which a 1.25 cut-off would drop as salad. en has no bound:
            its salad (King James Bible shuffles up to 3,022) would escape.
        word_salad_max_oov_share: the word-salad check applies only to
            documents of which at most this share of the model tokens are
            out of the model's vocabulary (0..1; null: no bound). A model
            that knows few of a text's words cannot tell its word order
            from a shuffle, so the ratio of such text is ~1 however it is
            written: a list of names, a recipe's ingredients, a
            bibliography (hostile test, debref en model: OOV shares
            0.37-0.46, ratios 0.89-1.10, all below their cut-offs).
            Default 0.35, our measurement (bench.word_salad rows,
            ../shared/corpus and corpus-multi DEV): OOV share p50 0.21 /
            p99 0.39 for clean en, 0.12 / 0.63 for zh; at 0.35, 96.0% of
            en salad (96.5% unbounded) and 96.4% of zh salad are still
            dropped, and no more clean documents lost.
        word_salad_zh_min_modern_share: a zh document is checked for word
            salad only when at least this share of its Han characters are
            particles of modern Chinese
            (:func:`stages.perplexity.salad.modern_zh_share`: 的 了 们 这 吗 呢
            吧 啊 么 着); null: always. Classical Chinese (the Analects, Tang
            poems) has none, and a model of modern text does not know its
            word order: two Analects fortunes of the bundled sample scored
            ratios of 1.16 and 1.03 at perplexities 1,390 and 2,764, below
            the zh cut-off and the perplexity bound, and were dropped as
            salad (fresh-user test). Salad made from modern prose keeps its
            particles (shuffling moves them, it does not remove them).
            Default 0.005, our measurement (bench.word_salad sets, DEV): p1
            0.015 in zh man pages, 0.041 in corpus-multi pages; 0.0 in 187
            of 253 zh fortunes.
        require_models: languages that must get a model: when one does not
            (too little reference text, none at all, or outside
            ``languages``), ``fit`` stops the build with one line naming the
            language and its reference characters against
            ``min_reference_chars``. Every other language without a model is a
            warning (manifest ``stages.perplexity.warnings``, the build
            summary, report.html, ``diff``) and its documents pass unscored.
            Default none (a sample corpus may lack a language); list the
            languages a corpus is for.

    Every language key and list (``max_perplexity``, ``models``,
    ``languages``, ``word_salad_max_ratio``, ``require_models``) goes through
    :func:`stages.lang_codes.canonical` (``zh-Hant``/``cmn`` -> ``zh``, ``nb``
    -> ``no``, ``eng`` -> ``en``).
    """

    requires = {"langid_lang": "one KenLM model and one threshold per language"}

    reference_source: str | None = None
    order: int = 5
    min_reference_chars: int = pydantic.Field(100_000, ge=1)
    max_reference_chars: int = pydantic.Field(20_000_000, ge=1)
    max_percentile: float | None = pydantic.Field(95.0, gt=0, le=100)
    max_perplexity: dict[str, float] = {}
    bucket_percentiles: tuple[float, float] = (33.0, 66.0)
    action: Literal["drop", "annotate"] = "drop"
    languages: list[str] | None = None
    lmplz_memory: str = pydantic.Field("1G", pattern=r"^[0-9]+(\.[0-9]+)?[%bKMGTkmgt]?$")
    tokenizer: Literal["words", "sentencepiece"] = "words"
    sentencepiece_vocab_size: int = pydantic.Field(2000, ge=100)
    sentencepiece_character_coverage: float = pydantic.Field(0.9995, gt=0.9, le=1.0)
    sentencepiece_input_sentence_size: int = pydantic.Field(1_000_000, ge=1000)
    models: dict[str, str] = {}
    fold_chinese_script: Literal["none", "t2s", "tw2sp"] = "tw2sp"
    word_salad_max_ratio: dict[str, float] = {"en": 1.15, "zh": 1.35}
    word_salad_min_tokens: int = pydantic.Field(60, ge=2)
    word_salad_full_tokens: int = pydantic.Field(150, ge=1)
    word_salad_max_oov_share: float | None = pydantic.Field(0.35, ge=0.0, le=1.0)
    word_salad_zh_min_modern_share: float | None = pydantic.Field(0.005, ge=0.0, le=1.0)
    word_salad_max_perplexity: dict[str, float] = {"zh": 3000.0}
    require_models: list[str] = []

    @pydantic.field_validator("max_perplexity", "models", "word_salad_max_ratio", "word_salad_max_perplexity",
                              mode="before")
    @classmethod
    def _canonical_keys(cls, value, info):
        value = yaml_codes(value)
        if isinstance(value, dict):
            return canonical_keys({str(k): v for k, v in value.items()}, info.field_name)
        return value

    @pydantic.field_validator("languages", "require_models", mode="before")
    @classmethod
    def _canonical_list(cls, value):
        return canonical_list(value)

    def language_codes(self) -> dict[str, list[str]]:
        """The codes this section names, by field."""
        return {"languages": list(self.languages or []), "max_perplexity": list(self.max_perplexity),
                "models": list(self.models), "word_salad_max_ratio": list(self.word_salad_max_ratio),
                "word_salad_max_perplexity": list(self.word_salad_max_perplexity),
                "require_models": list(self.require_models)}

    def word_salad_checked(self, lang: str | None, tokens: int, value: float | None, oov: int,
                           modern_share: Callable[[], float | None]) -> bool:
        """Whether a document is checked for word salad (its self-shuffle
        ratio computed): its language is in ``word_salad_max_ratio``, it has
        at least ``word_salad_min_tokens`` tokens, a perplexity within
        ``word_salad_max_perplexity``, at most ``word_salad_max_oov_share``
        of its tokens out of the model's vocabulary, and, for zh,
        ``modern_share()`` (:func:`stages.perplexity.salad.modern_zh_share`
        of the text; None counts as 0) at least
        ``word_salad_zh_min_modern_share``; ``modern_share`` is called only
        when the other conditions hold (it reads the whole text). Used by
        the stage and by bench.word_salad, so both apply one rule."""
        readable = self.word_salad_max_perplexity.get(lang)
        known = self.word_salad_max_oov_share
        modern = self.word_salad_zh_min_modern_share
        return (lang in self.word_salad_max_ratio and tokens >= self.word_salad_min_tokens and value is not None
                and (readable is None or value <= readable)
                and (known is None or oov <= known * tokens)
                and (lang != "zh" or modern is None or (modern_share() or 0.0) >= modern))

    @pydantic.model_validator(mode="after")
    def _required_languages_allowed(self):
        if self.languages is not None:
            outside = [lang for lang in self.require_models if lang not in self.languages]
            if outside:
                raise ValueError(f"perplexity.require_models names {outside}, which perplexity.languages "
                                 f"{self.languages} leaves without a model")
        return self

    @pydantic.field_validator("order")
    @classmethod
    def _order_at_least_2(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"perplexity.order must be >= 2 (got {value}): an order-{value} model "
                "scores words without context; CCNet uses 5")
        return value

    @pydantic.field_validator("max_perplexity", "word_salad_max_ratio")
    @classmethod
    def _positive_cutoffs(cls, value: dict[str, float], info) -> dict[str, float]:
        bad = {lang: v for lang, v in value.items() if not (v > 0 and math.isfinite(v))}
        if bad:
            raise ValueError(f"perplexity.{info.field_name} values must be finite and > 0: {bad}")
        return value

    @pydantic.field_validator("bucket_percentiles")
    @classmethod
    def _ordered_buckets(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] < value[1] < 100:
            raise ValueError(f"perplexity.bucket_percentiles must satisfy 0 < a < b < 100: {value}")
        return value

