"""Perplexity filter: score each document with a KenLM n-gram model of its
language, trained on a trusted reference source (CCNet, Wenzek et al. 2020).

``fit`` trains one model per language from the kept documents of
``config.reference_source``, measures the reference perplexity distribution on
held-out reference documents (2-fold cross-fitting, see
:func:`reference_perplexities`) and writes ``models.json``; ``process`` scores
every document whose language has a model and drops those above the
language's threshold with reason ``perplexity.above_threshold``.

Text seen by the model (training and scoring alike), per line of a document:
NFKC, lowercase, accents stripped, digits -> ``0``, punctuation unified
(:func:`normalize`), then split into tokens by the configured tokenizer
(:class:`LineTokenizer`): ``sentencepiece`` pieces of a unigram model trained
per language on the same reference text, as CCNet does, or ``words`` from
:func:`stages.text.words` (rjieba for Chinese, one token per CJK character for
Japanese/Korean, letter/digit runs elsewhere) with every punctuation or symbol
character as a token of its own (:func:`tokenize`). See
docs/stages/perplexity.md.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from common.errors import naming_path
from common.errors import ToolError
from common.io import sha256_file, write_json_atomic
from stages.base import Column, Figure, FitResult, Partitions, Stage, StageConfig, StageContext, read_kept, with_decision
from stages.text import nfkc, words

REASON_ABOVE_THRESHOLD = "perplexity.above_threshold"
BUCKETS = ("head", "middle", "tail")
# Bump when normalize()/tokenize() change: part of every model's cache key.
TEXT_VERSION = "ccnet-norm-1"
KENLM_VERSION = "0.3.0"
TOKENIZER_FILE = "sentencepiece.model"   # next to model.binary in the model cache


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

    @pydantic.field_validator("order")
    @classmethod
    def _order_at_least_2(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"perplexity.order must be >= 2 (got {value}): an order-{value} model "
                "scores words without context; CCNet uses 5")
        return value

    @pydantic.field_validator("max_perplexity")
    @classmethod
    def _positive_cutoffs(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {lang: v for lang, v in value.items() if not (v > 0 and math.isfinite(v))}
        if bad:
            raise ValueError(f"perplexity.max_perplexity values must be finite and > 0: {bad}")
        return value

    @pydantic.field_validator("bucket_percentiles")
    @classmethod
    def _ordered_buckets(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] < value[1] < 100:
            raise ValueError(f"perplexity.bucket_percentiles must satisfy 0 < a < b < 100: {value}")
        return value


# --------------------------------------------------------------------------- text

_UNICODE_PUNCT = {  # CCNet text_normalizer.UNICODE_PUNCT, plus CJK brackets; applied after NFKC
    "，": ",", "。": ".", "、": ",", "„": '"', "”": '"', "“": '"', "«": '"', "»": '"',
    "」": '"', "「": '"', "『": '"', "』": '"', "《": '"', "》": '"', "´": "'", "∶": ":",
    "：": ":", "？": "?", "！": "!", "（": "(", "）": ")", "；": ";", "–": "-", "—": "-",
    "．": ".", "～": "~", "’": "'", "‘": "'", "…": "...", "━": "-", "〈": "<", "〉": ">",
    "【": "[", "】": "]", "％": "%", "►": "-", "・": ".", "·": ".",
}
_PUNCT_TRANS = str.maketrans(_UNICODE_PUNCT)
_DIGIT_RE = re.compile(r"\d")
# One punctuation/symbol character; an apostrophe or hyphen between two word
# characters stays inside the word ("don't", "e-mail"), as in stages.text.words.
_PUNCT_RE = re.compile(r"[^\w\s'\-]|_|(?<!\w)['\-]|['\-](?!\w)")
# Kana voicing marks (U+3099/U+309A) are meaning-bearing, not accents.
_KANA_MARKS = frozenset("\u3099\u309a")


def normalize(line: str) -> str:
    """CCNet's normalization of one line (Wenzek et al. 2020, ``text_normalizer``).

    NFKC (folds full-width forms), lowercase, strip combining accents
    (``é`` -> ``e``; kana voicing marks and Hangul are preserved), every
    Unicode decimal digit -> ``0``, CJK/typographic punctuation mapped to ASCII
    (``，`` -> ``,``, ``。`` -> ``.``, ``“`` -> ``"``), control characters
    removed. Never raises; ``""`` gives ``""``.
    """
    text = nfkc(line).lower()
    decomposed = unicodedata.normalize("NFD", text)
    text = unicodedata.normalize("NFC", "".join(
        ch for ch in decomposed
        if unicodedata.category(ch) != "Mn" or ch in _KANA_MARKS))
    text = _DIGIT_RE.sub("0", text).translate(_PUNCT_TRANS)
    return "".join(ch for ch in text if ch in "\t" or unicodedata.category(ch)[0] != "C")


def tokenize(line: str, lang: str | None) -> list[str]:
    """Split one *normalized* line into the tokens the n-gram model sees.

    Words come from :func:`stages.text.words` (rjieba for ``zh``/``yue``/
    ``wuu``; one token per CJK character for ``ja``/``ko``; letter/digit runs
    otherwise); each punctuation or symbol character between them is one token.
    Token order follows the text. Returns ``[]`` for a line with neither.
    """
    tokens: list[str] = []
    pos = 0
    for match in _PUNCT_RE.finditer(line):
        if match.start() > pos:
            tokens.extend(words(line[pos:match.start()], lang))
        tokens.append(match.group())
        pos = match.end()
    if pos < len(line):
        tokens.extend(words(line[pos:], lang))
    return tokens


def normalized_lines(text: str) -> list[str]:
    """The :func:`normalize`-d lines of a document, without lines that are
    empty or whitespace-only after normalization (blank lines are layout, not
    text). Any line break splits (``str.splitlines``: LF, CRLF, CR, U+2028...),
    as in the langid and heuristics stages."""
    out = []
    for line in text.splitlines():
        line = normalize(line)
        if line.strip():
            out.append(line)
    return out


class LineTokenizer:
    """Turns normalized lines into the space-joined token lines KenLM sees.

    ``LineTokenizer(lang)`` uses :func:`tokenize` (segmenter words and
    punctuation); ``LineTokenizer(lang, sentencepiece_model=BYTES)`` uses the
    pieces of that SentencePiece model (``▁`` marks a word start, as in CCNet).
    Pieces never contain whitespace, so joining them with spaces is lossless
    for KenLM's whitespace tokenization.

    Raises:
        RuntimeError: ``sentencepiece_model`` is not a SentencePiece model
            (``source`` names the file in the message).
    """

    def __init__(self, lang: str | None, sentencepiece_model: bytes | None = None,
                 source: str = "<bytes>"):
        self.lang = lang
        self.kind = "words" if sentencepiece_model is None else "sentencepiece"
        self._sp = None
        if sentencepiece_model is not None:
            import sentencepiece as spm

            try:
                self._sp = spm.SentencePieceProcessor(model_proto=sentencepiece_model)
            except Exception as exc:  # sentencepiece raises RuntimeError/OSError
                raise RuntimeError(f"perplexity: cannot read SentencePiece model file "
                                   f"{source}: {exc}") from exc

    def __call__(self, lines: list[str]) -> list[str]:
        """One token line per input line, in order (``""`` when a line has no
        token; callers skip those)."""
        if self._sp is None:
            return [" ".join(tokenize(line, self.lang)) for line in lines]
        return [" ".join(pieces) for pieces in self._sp.encode(lines, out_type=str)]


def document_sentences(text: str, lang: str | None,
                       tokenizer: LineTokenizer | None = None) -> list[str]:
    """A document as model input: one space-joined token line per text line
    that has at least one token (blank lines are layout and are skipped).
    ``tokenizer`` None means ``LineTokenizer(lang)`` (words)."""
    tokenizer = tokenizer or LineTokenizer(lang)
    return [s for s in tokenizer(normalized_lines(text)) if s]


# ----------------------------------------------------------------- scoring

def load_model(path: str):
    """Load a KenLM model once per process (cached by path, inode, size and
    mtime, so a model rewritten by a new ``fit`` is reloaded).

    Raises:
        RuntimeError: the file is missing or not a KenLM ARPA/binary model;
            the message names the file.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise RuntimeError(f"perplexity: KenLM model file {path} cannot be read: {exc}") from exc
    return _load_model(path, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _load_model(path: str, *_stat_key):
    import kenlm

    try:
        return kenlm.Model(path)
    except Exception as exc:  # kenlm raises OSError with a C++ message
        raise RuntimeError(f"perplexity: cannot read KenLM model file {path}: {exc}") from exc


def load_tokenizer(path: str | None, lang: str | None) -> LineTokenizer:
    """The :class:`LineTokenizer` of a model: SentencePiece from ``path``, or
    words when ``path`` is None. Cached per process like :func:`load_model`.

    Raises:
        RuntimeError: the file is missing or not a SentencePiece model; the
            message names the file.
    """
    if path is None:
        return _words_tokenizer(lang)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise RuntimeError(f"perplexity: SentencePiece model file {path} cannot be read: "
                           f"{exc}") from exc
    return _load_tokenizer(path, lang, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _words_tokenizer(lang: str | None) -> LineTokenizer:
    return LineTokenizer(lang)


@functools.lru_cache(maxsize=64)
def _load_tokenizer(path: str, lang: str | None, *_stat_key) -> LineTokenizer:
    return LineTokenizer(lang, Path(path).read_bytes(), source=path)


def score_sentences(model, sentences: list[str]) -> tuple[float, int]:
    """Return ``(sum of log10 p, number of tokens)`` over ``sentences``.

    Each sentence is scored with ``<s>`` context and a final ``</s>``; the
    token count is the tokens of the sentence plus one for ``</s>`` (as CCNet's
    ``DocLM`` and KenLM's own ``perplexity`` do). ``<s>`` is context, not a
    scored token. The per-token log10 probabilities of ``full_scores`` are
    summed in float64 (``Model.score`` sums in float32: 4e-8 relative error).
    """
    log10_sum = 0.0
    tokens = 0
    for sentence in sentences:
        for log10_prob, _ngram_length, _oov in model.full_scores(sentence, bos=True, eos=True):
            log10_sum += log10_prob
            tokens += 1
    return log10_sum, tokens


def perplexity(log10_sum: float, tokens: int) -> float | None:
    """``10 ** (-log10_sum / tokens)``; None when there are no tokens."""
    if tokens <= 0:
        return None
    return float(10.0 ** (-log10_sum / tokens))


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of an empty list")
    rank = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


# ----------------------------------------------------------------- training

_REFERENCE_SALT = 0x726566  # "ref": the reference draw is independent of other draws


def reference_chars(path: Path, reference_source: str, languages: list[str] | None) -> dict[str, int]:
    """Characters of one partition's kept reference documents per language
    (``chars``, no text read). Top-level so ``Partitions.map`` can pickle it."""
    from stages.base import view_columns

    has_chars = "chars" in view_columns(path)
    table = read_kept(path, ["source", "chars" if has_chars else "text", "langid_lang"])
    lengths = table["chars"].to_pylist() if has_chars else [len(t or "") for t in table["text"].to_pylist()]
    out: dict[str, int] = {}
    for source, chars, lang in zip(table["source"].to_pylist(), lengths, table["langid_lang"].to_pylist()):
        if source == reference_source and lang is not None and (languages is None or lang in languages):
            out[lang] = out.get(lang, 0) + (chars or 0)
    return out


def reference_documents(path: Path, reference_source: str, languages: list[str] | None,
                        draw: dict[str, float] | None = None,
                        seed: int = 0) -> list[tuple[str, str, int, list[str]]]:
    """Read one partition's kept reference documents as normalized lines.

    Args:
        draw: language -> probability of taking a document (seeded id hash;
            see ``Config.max_reference_chars``); None takes every one.

    Returns:
        ``(id, lang, characters, lines)`` (lines: :func:`normalized_lines`,
        not yet tokenized: the tokenizer is trained on them) per kept document of
        ``reference_source`` with a non-null ``langid_lang`` (in ``languages``
        when given), in row order. Top-level so ``Partitions.map`` can pickle it.
    """
    from common.hashing import id_hash

    table = read_kept(path, ["id", "source", "text", "langid_lang"])
    out = []
    for doc_id, source, text, lang in zip(*(table[c].to_pylist() for c in
                                            ("id", "source", "text", "langid_lang"))):
        if source != reference_source or lang is None:
            continue
        if languages is not None and lang not in languages:
            continue
        if draw is not None and id_hash(doc_id, seed ^ _REFERENCE_SALT) >= draw.get(lang, 0.0) * 2.0 ** 64:
            continue
        out.append((doc_id, lang, len(text), normalized_lines(text)))
    return out


def train_sentencepiece(lines: list[str], vocab_size: int, character_coverage: float,
                        input_sentence_size: int, cache_dir: Path) -> bytes:
    """Train (or fetch from cache) a unigram SentencePiece model on normalized lines.

    Deterministic: one thread, no input shuffling, and when there are more
    than ``input_sentence_size`` lines a fixed stride sample of them (every
    k-th line, k = ceil(n / input_sentence_size)); the model is written through
    ``model_writer``, so no temporary path ends up in its bytes. Same lines and
    parameters give the same model bytes (tested). Text is already normalized
    by :func:`normalize`, so SentencePiece's own normalization is off
    (``identity``); ``max_sentence_length`` is raised to 1 MiB so long lines
    are not silently skipped; ``hard_vocab_limit=false`` gives a smaller
    vocabulary, not an error, on a small reference.

    The cache key is the sha256 of the sampled lines, the parameters and the
    sentencepiece version; the model is stored at
    ``cache_dir/sentencepiece/<key>/sentencepiece.model``.

    Returns:
        The serialized model (``ModelProto`` bytes).
    Raises:
        ValueError: no line to train on, or ``vocab_size`` below the number of
            characters the coverage requires (SentencePiece's message kept).
    """
    import sentencepiece as spm

    if not lines:
        raise ValueError("perplexity: no reference line to train SentencePiece on")
    step = -(-len(lines) // input_sentence_size)
    sample = lines[::step]
    params = {"model_type": "unigram", "vocab_size": vocab_size,
              "character_coverage": character_coverage, "normalization_rule_name": "identity",
              "num_threads": 1, "input_sentence_size": input_sentence_size,
              "shuffle_input_sentence": False, "hard_vocab_limit": False,
              "max_sentence_length": 1 << 20}
    digest = hashlib.sha256(json.dumps([TEXT_VERSION, spm.__version__, params],
                                       sort_keys=True).encode())
    for line in sample:
        digest.update(line.encode() + b"\n")
    final = Path(cache_dir) / "sentencepiece" / digest.hexdigest()
    if (final / TOKENIZER_FILE).is_file():
        return (final / TOKENIZER_FILE).read_bytes()
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sample), model_writer=buffer,
                                       minloglevel=2, **params)
    except RuntimeError as exc:
        raise ValueError(f"perplexity: SentencePiece training failed (sentencepiece_vocab_size="
                         f"{vocab_size}, sentencepiece_character_coverage={character_coverage}): "
                         f"{exc}") from exc
    data = buffer.getvalue()
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".train-") as tmp:
        staged = Path(tmp) / "out"
        staged.mkdir()
        (staged / TOKENIZER_FILE).write_bytes(data)
        try:
            os.replace(staged, final)
        except OSError:
            if not (final / TOKENIZER_FILE).is_file():
                raise
    return data


def train_language_model(lines: list[str], lang: str, config: Config, tools_dir: Path,
                         cache_dir: Path) -> tuple[Path, Path | None]:
    """Train (or fetch) the tokenizer and the KenLM model of one language.

    Args:
        lines: normalized reference lines (:func:`normalized_lines`).
    Returns:
        ``(model.binary, sentencepiece.model or None)``, both in the same
        cache directory (:func:`train_kenlm`).
    """
    sp_model = None
    if config.tokenizer == "sentencepiece":
        sp_model = train_sentencepiece(lines, config.sentencepiece_vocab_size,
                                       config.sentencepiece_character_coverage,
                                       config.sentencepiece_input_sentence_size, cache_dir)
    tokenizer = LineTokenizer(lang, sp_model)
    model = train_kenlm((t for t in tokenizer(lines) if t), config.order, tools_dir, cache_dir,
                        config.lmplz_memory, tokenizer_model=sp_model)
    return model, (model.parent / TOKENIZER_FILE if sp_model is not None else None)


def train_kenlm(sentences: Iterable[str], order: int, tools_dir: Path, cache_dir: Path,
                memory: str = "1G", tokenizer_model: bytes | None = None) -> Path:
    """Train (or fetch from cache) a KenLM binary model on token lines.

    Runs ``lmplz -o ORDER -S MEMORY --discount_fallback`` (``-S``: lmplz's
    default is 80% of RAM; ``--discount_fallback``: Kneser-Ney discounts cannot
    be estimated on small corpora; both from notes/dependencies.md), then
    ``build_binary`` (probing hash table).

    The cache key is the sha256 of the token lines, the order, the lmplz flags,
    the KenLM version, :data:`TEXT_VERSION` and the tokenizer model bytes; a
    model under ``cache_dir/kenlm/<key>/model.binary`` is reused, not
    retrained. The tokenizer model, when given, is stored in the same
    directory as ``sentencepiece.model``, so model and tokenizer are cached
    (and found) together.

    Returns:
        Path to ``model.binary``.
    Raises:
        FileNotFoundError: ``lmplz``/``build_binary`` missing from ``tools_dir``
            (build them with ``tools/build_kenlm.sh``).
        ToolError: lmplz or build_binary failed (command, exit status and
            the last lines of its stderr in one line).
        OSError: the training text cannot be written (names the file).
    """
    lmplz, build_binary = Path(tools_dir) / "lmplz", Path(tools_dir) / "build_binary"
    for tool in (lmplz, build_binary):
        if not os.access(tool, os.X_OK):
            raise FileNotFoundError(f"perplexity: {tool} not found or not executable; "
                                    "run tools/build_kenlm.sh")
    root = Path(cache_dir) / "kenlm"
    root.mkdir(parents=True, exist_ok=True)
    flags = ["-o", str(order), "--discount_fallback"]
    digest = hashlib.sha256(json.dumps([TEXT_VERSION, KENLM_VERSION, flags]).encode())
    if tokenizer_model is not None:
        digest.update(hashlib.sha256(tokenizer_model).digest())
    with tempfile.TemporaryDirectory(dir=root, prefix=".train-") as tmp:
        text_path = Path(tmp) / "train.txt"
        with naming_path(text_path), open(text_path, "w", encoding="utf-8") as fh:
            for sentence in sentences:
                line = sentence + "\n"
                fh.write(line)
                digest.update(line.encode())
        final = root / digest.hexdigest()
        model = final / "model.binary"
        if model.is_file() and (tokenizer_model is None or (final / TOKENIZER_FILE).is_file()):
            return model
        arpa, binary = Path(tmp) / "model.arpa", Path(tmp) / "model.binary"
        _run([str(lmplz), *flags, "-S", memory, "-T", tmp,
              "--text", str(text_path), "--arpa", str(arpa)])
        _run([str(build_binary), str(arpa), str(binary)])
        staged = Path(tmp) / "out"
        staged.mkdir()
        os.replace(binary, staged / "model.binary")
        if tokenizer_model is not None:
            (staged / TOKENIZER_FILE).write_bytes(tokenizer_model)
        try:
            os.replace(staged, final)  # atomic; a concurrent builder may win the race
        except OSError:
            if not model.is_file():
                raise
    return model


#: stderr lines a :class:`ToolError` keeps (lmplz ends with its reason).
STDERR_TAIL_LINES = 5


def _run(cmd: list[str]) -> None:
    """Run a tool; raise :class:`ToolError` when it exits non-zero.
    ``OSError`` (a tool that cannot be started) names the tool's path."""
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        lines = [line.strip()[:300] for line in proc.stderr.splitlines() if line.strip()]
        raise ToolError(cmd, proc.returncode, lines[-STDERR_TAIL_LINES:])


def reference_perplexities(docs: list[tuple[str, str, int, list[str]]], lang: str,
                           config: Config, tools_dir: Path,
                           cache_dir: Path) -> tuple[list[float], str]:
    """Held-out perplexities of reference documents by 2-fold cross-fitting.

    Documents go to fold ``sha256(id)[0] & 1``; each fold is scored by a
    tokenizer and model both trained on the other fold only
    (:func:`train_language_model`). A model scoring its own training text gives
    far lower perplexities (in-sample 5-grams memorise), so thresholds from
    in-sample scores would drop almost all new text. Half-size models are a
    little worse than the full model, so the cut-offs err towards keeping.
    When a fold is empty (a single document) the full model's in-sample
    scores are the fallback.

    Args:
        docs: ``(id, lang, chars, normalized lines)`` from :func:`reference_documents`.
    Returns:
        (perplexities of documents with tokens, sorted ascending; ``"2-fold"``
        or ``"in-sample"``).
    """
    folds: list[list] = [[], []]
    for doc in docs:
        folds[hashlib.sha256(doc[0].encode()).digest()[0] & 1].append(doc)
    if not folds[0] or not folds[1]:
        pairs, method = [(docs, docs)], "in-sample"
    else:
        pairs, method = [(folds[1], folds[0]), (folds[0], folds[1])], "2-fold"
    values = []
    for train_docs, held_docs in pairs:
        model_path, sp_path = train_language_model([s for d in train_docs for s in d[3]], lang,
                                                   config, tools_dir, cache_dir)
        model = load_model(str(model_path))
        tokenizer = load_tokenizer(None if sp_path is None else str(sp_path), lang)
        for doc in held_docs:
            value = perplexity(*score_sentences(model, [t for t in tokenizer(doc[3]) if t]))
            if value is not None:
                values.append(value)
    return sorted(values), method


def _publish(cached: Path, local: Path) -> Path:
    """Hard-link (or copy, across filesystems) a cached file to ``local``."""
    local.unlink(missing_ok=True)
    try:
        os.link(cached, local)
    except OSError:
        shutil.copyfile(cached, local)
    return local


# ----------------------------------------------------------------- stage

class PerplexityStage(Stage):
    """CCNet-style perplexity filter (Wenzek et al. 2020).

    Adds ``perplexity_value`` (float64: ``10 ** (-sum log10 p / tokens)`` over
    the document's lines, tokens counting one ``</s>`` per line; null when the
    document's language has no model or the document has no tokens) and
    ``perplexity_bucket`` (string ``head``/``middle``/``tail``, split at
    ``bucket_percentiles`` of the held-out reference distribution; null when
    unmeasured). Documents above their language's threshold get reason
    ``perplexity.above_threshold`` (``action="drop"``). Documents of languages
    without a model are kept unmeasured.
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
            "skipped": {lang: reason}}``.
        Raises:
            RuntimeError: lmplz/build_binary failed, or a written model or
                tokenizer file cannot be read back (the message names it).
        """
        cfg: Config = self.config
        available: dict[str, int] = {}
        for part in partitions.map(functools.partial(reference_chars, reference_source=cfg.reference_source,
                                                     languages=cfg.languages), list(partitions.paths)):
            for lang, chars in part.items():
                available[lang] = available.get(lang, 0) + chars
        draw = {lang: min(1.0, cfg.max_reference_chars / chars) for lang, chars in available.items() if chars}
        mapped = partitions.map(
            functools.partial(reference_documents, reference_source=cfg.reference_source,
                              languages=cfg.languages, draw=draw, seed=self.ctx.seed),
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
        write_json_atomic({"order": cfg.order, "action": cfg.action, "tokenizer": cfg.tokenizer, "languages": models},
                          work_dir / "models.json", indent=2, sort_keys=True, ensure_ascii=True, final_newline=False)
        self._models_json = None
        warnings = tuple(f"language {lang}: no model ({why}); its documents are kept without a perplexity or "
                         "bucket (give more reference text or perplexity.models)"
                         for lang, why in sorted(skipped.items()))
        figure = Figure(
            kind="column_histogram", column="perplexity_value", group_by="langid_lang", log10=True,
            title="perplexity of kept documents; dashed: head/middle/tail cut-offs, solid: drop threshold",
            x_label="log10 perplexity",
            marks={lang: list(f.get("bucket_cutoffs") or []) for lang, f in sorted(facts.items())},
            strong_marks={lang: [f["threshold"]] for lang, f in sorted(facts.items()) if f.get("threshold")})
        return FitResult(facts={"reference_source": cfg.reference_source, "order": cfg.order,
                                "tokenizer": cfg.tokenizer, "languages": facts, "skipped": skipped},
                         warnings=warnings, figures=(figure,))

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
        drop = self.config.action == "drop"
        values: list[float | None] = []
        buckets: list[str | None] = []
        reasons: list[str | None] = []
        for text, lang in zip(pc.fill_null(table["text"], "").to_pylist(), table["langid_lang"].to_pylist()):
            entry = languages.get(lang) if lang is not None else None
            value = None
            if entry is not None:
                work_dir = Path(self.ctx.work_dir)
                model = load_model(str(work_dir / entry["model"]))
                sp_name = entry.get("tokenizer_model")
                tokenizer = load_tokenizer(None if sp_name is None else str(work_dir / sp_name),
                                           lang)
                value = perplexity(*score_sentences(model,
                                                    document_sentences(text, lang, tokenizer)))
            values.append(value)
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
            above = threshold is not None and value > threshold
            reasons.append(REASON_ABOVE_THRESHOLD if drop and above else None)
        return with_decision(table, {
            "perplexity_value": pa.array(values, pa.float64()),
            "perplexity_bucket": pa.array(buckets, pa.string()),
        }, reasons)
