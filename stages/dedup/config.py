"""The dedup stage's typed config (``dedup:`` in the build config)."""

from __future__ import annotations

from typing import Literal

import pydantic

from stages.base import StageConfig
from stages.lang_codes import canonical, yaml_codes
from stages.dedup.lsh import candidate_probability


class Config(StageConfig):
    """Dedup settings.

    Attributes:
        exact: remove exact duplicates (equal exact-normalized text).
        near: remove MinHash-LSH near-duplicates.
        num_bands, rows_per_band: LSH banding; ``num_perm = num_bands *
            rows_per_band``. Default 14 x 8 = 112 permutations, FineWeb's choice
            (Penedo et al. 2024; 5-grams, threshold 0.75). At our threshold 0.8
            it gives P(candidate) = 0.924 at J = 0.8, 0.9997 at J = 0.9 and
            0.565 at J = 0.7; the verification step then cuts at 0.8.
        jaccard_threshold: an LSH candidate pair is an edge only if the
            signature-estimated Jaccard similarity is >= this. 0.8 is the usual
            near-duplicate cut (Lee et al. 2022, "Deduplicating Training Data
            Makes Language Models Better", MinHash on 5-grams at 0.8).
        ngram_words: words per shingle for space-separated text (5: FineWeb
            and Lee et al. 2022).
        ngram_chars: characters per shingle for CJK documents (5: our choice,
            the same n as for words; a one-character edit changes at most 5
            shingles, so one edit in a 200-character text keeps J ~ 0.95).
        seed: seed of the MinHash permutations (datasketch's default seed 1).
            Independent of the build seed so that changing the sampling seed
            does not change which documents are duplicates.
        keep: which document of a cluster survives: ``longest`` (most
            characters after the signatures' normalization: NFKC, casefold,
            punctuation and symbols to spaces, whitespace collapsed; then
            fewest raw characters, i.e. the unpadded copy),
            ``smallest_id``, or ``lowest_perplexity`` (the perplexity
            stage's ``perplexity_value``, null last; then longest as above);
            remaining ties go to the smallest id (string order), so the
            keeper does not depend on input order or partitioning.
            ``longest`` is our choice: it keeps the most content; by raw
            characters the whitespace-padded or re-punctuated copy won every
            one of the 93 such planted clusters of corpus-multi dev, by
            normalized length none (bench.dedup.quality_multi).
        verify: how a candidate pair is checked before it becomes an edge:
            ``exact`` (the default: exact Jaccard similarity of the two
            shingle sets, computed only where the signature estimate is
            within ``verify_margin_sd`` standard deviations of the threshold;
            outside that band the estimate decides) or ``signature`` (the
            estimate alone; no text is read again). Our measurement on
            planted pairs from corpus-multi dev (1,439 pairs, 33 languages,
            docs/stages/dedup.md): F1 0.884 with ``signature`` (28% of pairs
            at J 0.75-0.8 merged), 0.990 with ``exact``; the margin keeps
            ``exact``'s F1 at a fraction of its cost.
        verify_margin_sd: width of that band in standard deviations of the
            signature estimate at the threshold t, ``sqrt(t (1 - t) /
            num_perm)`` (0.038 at 0.8 and 112 permutations, so the band is
            0.8 +- 0.151: 73..106 agreeing values need the exact check). 4:
            our choice from the binomial tail: a pair at J = t is accepted
            without a check with probability 2.2e-6 and rejected with 8.0e-5
            (scipy.stats.binom, n = 112, p = 0.8); 3 gives 4.4e-4 / 1.7e-3.
            0 means the estimate alone; a large value checks every candidate.
        fold_chinese_script: fold Traditional to Simplified Chinese (OpenCC)
            before character shingling of non-ja/ko CJK documents
            (:func:`stages.dedup.normalize.fold_script`): ``none``, ``t2s``
            (character level: OpenCC's ``TSCharacters`` only) or ``tw2sp``
            (phrase level, Taiwan words to mainland ones). Either way only a
            document with more Traditional-only than Simplified-only
            characters is converted (whitespace between its ideographs
            removed first); a Simplified document is left exactly as it is
            and a mostly Simplified one loses only its Traditional-only
            characters, character by character. Default ``tw2sp``: measured
            on the 703 zh_CN/zh_TW man-page pairs of /work/shared/corpus
            (``bench/script_fold.py``) dedup finds 690 twins with it, 153
            with ``t2s`` (the zh_TW pages were made with OpenCC's phrase
            dictionaries: 文件 -> 檔案, 程序 -> 程式, which no character
            mapping undoes), 5 with ``none``. Exact dedup never folds.
        line_dedup: CCNet-style line-level exact dedup (Wenzek et al. 2020):
            a normalized line (:func:`stages.dedup.lines.line_normalize`)
            of at least ``line_min_chars`` characters that also occurs in a
            better-keyed document is removed; a document left with no
            non-blank line is dropped (``dedup.duplicate_lines``). Runs after document
            dedup, on its survivors. Off by default (see docs/stages/dedup.md
            for what it removes on /work/shared/corpus).
        line_min_chars: minimum normalized characters for a line to take part.
            30: our measurement on /work/shared/corpus (docs/stages/dedup.md):
            it catches the wrapped man-page licence footers (lines of 35-70
            characters); 20 also removes short fortune headers and signatures.
        line_skip_languages: languages (``langid_lang``, else ``lang_hint``)
            whose documents never lose lines: code repeats lines by nature.
            Each entry goes through :func:`stages.lang_codes.canonical`
            (``zh-Hant`` -> ``zh``, ``nb`` -> ``no``), duplicates dropped.
        warn_removed_share: a :class:`~stages.base.FitResult` warning (run
            log, manifest, report) names each source of which exact and near
            dedup removed more than this share of the kept documents, with
            its counts; None turns it off. 0.5: our measurement with the
            default config: the largest share on our development data is
            27.4% (corpus-multi dev, gnome-help: 2,237 of 8,178, its
            untranslated "translations" being copies of the English pages;
            /work/shared/corpus: manpages 16.8%, the zh_TW twins of zh_CN
            pages; every other source <= 7.7%), so a source losing more than
            half its documents is a copy of another source (a mirror, a reader
            given the same files twice) rather than ordinary overlap.

    Raises:
        pydantic.ValidationError: when ``P(candidate | jaccard_threshold) <
            0.5`` (e.g. bands and rows swapped), with the probability, bands
            and rows in the message.
    """

    exact: bool = True
    near: bool = True
    num_bands: int = pydantic.Field(14, ge=2)
    rows_per_band: int = pydantic.Field(8, ge=1)
    jaccard_threshold: float = pydantic.Field(0.8, gt=0.0, le=1.0)
    ngram_words: int = pydantic.Field(5, ge=1)
    ngram_chars: int = pydantic.Field(5, ge=1)
    seed: int = pydantic.Field(1, ge=0, lt=2**32)
    keep: Literal["longest", "smallest_id", "lowest_perplexity"] = "longest"
    fold_chinese_script: Literal["none", "t2s", "tw2sp"] = "tw2sp"
    verify: Literal["signature", "exact"] = "exact"
    verify_margin_sd: float = pydantic.Field(4.0, ge=0.0)
    line_dedup: bool = False
    line_min_chars: int = pydantic.Field(30, ge=1)
    line_skip_languages: tuple[str, ...] = ("code",)
    warn_removed_share: float | None = pydantic.Field(0.5, gt=0.0, lt=1.0)

    def requirements(self) -> dict[str, str]:
        """``keep: lowest_perplexity`` reads the perplexity stage's
        ``perplexity_value``; otherwise nothing (``langid_lang`` is used when
        present, else ``lang_hint``)."""
        if self.keep == "lowest_perplexity":
            return {"perplexity_value": "keep: lowest_perplexity picks each cluster's keeper by it"}
        return {}

    def language_codes(self) -> dict[str, list[str]]:
        """The codes of ``line_skip_languages`` when the config sets it (the
        default, ``code``, names the code sources' usual ``lang``)."""
        if "line_skip_languages" not in self.model_fields_set:
            return {}
        return {"line_skip_languages": list(self.line_skip_languages)}

    @pydantic.field_validator("line_skip_languages", mode="before")
    @classmethod
    def _norwegian_from_yaml(cls, value):
        return yaml_codes(value)

    @pydantic.field_validator("line_skip_languages")
    @classmethod
    def _canonical_languages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(canonical(code) for code in value))

    @property
    def num_perm(self) -> int:
        """Signature length, ``num_bands * rows_per_band``."""
        return self.num_bands * self.rows_per_band

    @pydantic.model_validator(mode="after")
    def _check_s_curve(self) -> Config:
        p = candidate_probability(self.jaccard_threshold, self.num_bands, self.rows_per_band)
        if p < 0.5:
            raise ValueError(
                f"LSH with num_bands={self.num_bands} x rows_per_band={self.rows_per_band} finds a "
                f"pair at the jaccard_threshold {self.jaccard_threshold} with probability only "
                f"{p:.3f} (< 0.5): most near-duplicates would be missed. Use more bands or fewer "
                f"rows per band (were bands and rows swapped?)")
        return self
