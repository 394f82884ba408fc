"""KenLM and SentencePiece models of the perplexity stage: loading (cached per
process), scoring, the reference draw, training (cached by content) and the
held-out reference distribution."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from common.errors import naming_path
from common.errors import ToolError
from stages.base import read_kept
from stages.perplexity.config import Config
from stages.perplexity.text import FoldScript, LineTokenizer, normalized_lines

# Bump when normalize()/tokenize() change: part of every model's cache key.
TEXT_VERSION = "ccnet-norm-3"   # 2: Chinese folded to Simplified (fold_chinese_script); 3: Simplified text left as is
KENLM_VERSION = "0.3.0"
TOKENIZER_FILE = "sentencepiece.model"   # next to model.binary in the model cache

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
    log10_sum, tokens, _oov = score_sentences_oov(model, sentences)
    return log10_sum, tokens


def score_sentences_oov(model, sentences: list[str]) -> tuple[float, int, int]:
    """:func:`score_sentences` (same scoring) plus the number of scored tokens the model
    does not know (KenLM's ``full_scores`` OOV flag; ``</s>`` is never
    OOV): ``(sum of log10 p, tokens, oov tokens)``."""
    log10_sum = 0.0
    tokens = oov = 0
    for sentence in sentences:
        for log10_prob, _ngram_length, is_oov in model.full_scores(sentence, bos=True, eos=True):
            log10_sum += log10_prob
            tokens += 1
            oov += is_oov
    return log10_sum, tokens, oov


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


#: The key of documents without a language in :func:`language_counts`
#: (BCP 47 "undetermined").
NO_LANGUAGE = "und"


def language_counts(path: Path) -> dict[str, list[int]]:
    """Documents and characters per ``langid_lang`` of one partition's kept
    documents (a column read, no text when ``chars`` is stored): ``{lang:
    [documents, characters, declared]}``, ``declared`` = how many of the
    documents got their language from their source (``lang_hint``, e.g.
    ``code``) rather than from language ID; null languages under
    :data:`NO_LANGUAGE`. Top-level so ``Partitions.map`` can pickle it."""
    from stages.base import view_columns

    names = view_columns(path)
    has_chars = "chars" in names
    columns = ["chars" if has_chars else "text", "langid_lang"] + (["lang_hint"] if "lang_hint" in names else [])
    table = read_kept(path, columns)
    lengths = table["chars"].to_pylist() if has_chars else [len(t or "") for t in table["text"].to_pylist()]
    hints = table["lang_hint"].to_pylist() if "lang_hint" in names else [None] * table.num_rows
    out: dict[str, list[int]] = {}
    for chars, lang, hint in zip(lengths, table["langid_lang"].to_pylist(), hints):
        entry = out.setdefault(NO_LANGUAGE if lang is None else lang, [0, 0, 0])
        entry[0] += 1
        entry[1] += chars or 0
        entry[2] += hint is not None
    return out


def reference_documents(path: Path, reference_source: str, languages: list[str] | None,
                        draw: dict[str, float] | None = None,
                        seed: int = 0, fold: FoldScript = "none") -> list[tuple[str, str, int, list[str]]]:
    """Read one partition's kept reference documents as normalized lines.

    Args:
        draw: language -> probability of taking a document (seeded id hash;
            see ``Config.max_reference_chars``); None takes every one.
        fold: Chinese script folding (:func:`stages.perplexity.text.fold_chinese`).

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
        out.append((doc_id, lang, len(text), normalized_lines(text, lang, fold)))
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

