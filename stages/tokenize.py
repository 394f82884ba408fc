"""Tokenize stage: train (or load) a byte-level BPE and encode every document.

``fit`` either loads a given ``tokenizer.json`` or trains a byte-level BPE on a
deterministic, bounded, optionally language/source-balanced sample of the kept
documents (never the held-out split), and writes ``ctx.work_dir /
"tokenizer.json"``. ``process`` encodes each document, appends EOS and stores
the ids.

The trained tokenizer (docs/stages/tokenize.md has the reasons):

* **normalizer**: the policy ``Config.normalization`` (default ``none``: no
  folding, so ``decode(encode(x)) == x`` for every string). It is stored in
  ``tokenizer.json``, so training and encoding apply the same one.
* **pre-tokenizer**: one regex split (:func:`pretokenize_pattern`) then the
  byte mapping: CJK runs (Han, kana, hangul) are isolated from Latin text and
  cut into pieces of at most ``cjk_max_run`` characters, so a 2,000-character
  unpunctuated Chinese line is not one giant pre-token; digits are one per
  pre-token (hence one per token); letters, punctuation and whitespace runs
  follow GPT-2's regex, cut into pieces of at most ``max_run`` characters (a
  million spaces is 15,625 pre-tokens, not one: tiktoken's regex engine
  overflows its stack on such a run and BPE training is superlinear in a
  pre-token's length). No pre-token is longer than ``max(cjk_max_run,
  max_run) + 1`` characters, in training and in encoding alike.
* **model**: BPE over the 256 byte symbols (no unknown token can arise), merges
  no longer than ``max_token_length`` bytes.
* **special tokens** (given to the trainer first, so they take the first ids):
  ``<|pad|>`` = 0 (mindformers' loss mask ignores ``pad_token_id``, default 0),
  ``<|endoftext|>`` (EOS) = 1 (appended to every document; must not be 0 or the
  model never learns to end a document), ``<|bos|>`` = 2 (reserved), then
  ``num_reserved_tokens`` slots ``<|reserved_N|>``. In raw text their strings
  are ordinary text: they never produce a special id.

Encoding runs through ``tiktoken`` (same ids, about 3x faster per core than
``tokenizers``, which spends ~3 µs per pre-token on offset bookkeeping the
pipeline does not need) when ``fit`` has checked on a sample that both give
identical ids; otherwise through ``tokenizers``. See
docs/stages/tokenize.md, "Speed".

A document on which the chosen encoder fails (any error, including a native
panic, which Python raises as a ``BaseException``) is encoded again by
``tokenizers`` alone (the same ids: ``fit`` checked that both agree) and
``tokenize_fallback`` records why; only a document that neither encoder can
encode is dropped.

Reason codes: ``tokenize.empty`` (the document yields no token: empty or null
text), ``tokenize.encode_error`` (no encoder could encode it; the error is in
``tokenize_fallback``). Every other document is kept.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic

from common.hashing import id_hash
from common.io import atomic_path, sha256_file, write_table_atomic
from stages.base import Column, FitResult, Partitions, RequiredStageConfig, Stage, read_kept, view_columns, with_decision

TOKENIZER_FILE = "tokenizer.json"
ENCODER_FILE = "encoder.json"
REASON_EMPTY = "tokenize.empty"
REASON_ENCODE_ERROR = "tokenize.encode_error"
# Longest allowed ``max_run``: tiktoken's regex engine (Rust ``regex``) fails
# to build the pattern from a repeat of about 256 (letter class x 256 exceeds
# its NFA size limit), and compile time grows with it (0.08 s at 64, 0.2 s at
# 128, per process; measured with tiktoken 0.14).
MAX_RUN_LIMIT = 128
_HASH_SPACE = float(2**64)
_HELDOUT_SALT = 0x68656C646F7574  # "heldout": the held-out draw is independent of other draws
#: The training draw takes each document of a group with probability
#: ``min(1, DRAW_MARGIN * target / available)``: 10% more than the target on
#: average, so that the in-order pass that stops each group at its target
#: reaches it (drawing exactly ``target / available`` left groups of a few dozen
#: documents 10-20% short). Our choice; the extra spill is 10% of the budget.
DRAW_MARGIN = 1.1

# Scripts written without spaces (plus hangul, kept with them): Unicode script
# properties, understood alike by Oniguruma (tokenizers) and fancy-regex (tiktoken).
CJK_SCRIPTS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"


def pretokenize_pattern(cjk_max_run: int, max_run: int = 64) -> str:
    """The pre-tokenizer regex (``Split`` with ``Isolated`` behaviour).

    Alternatives, first match wins at each position:

    1. English contractions ``'s 't 're 've 'm 'll 'd`` (GPT-2);
    2. an optional space and 1..``cjk_max_run`` CJK characters (a longer run
       becomes several pieces);
    3. an optional space and 1..``max_run`` other letters and combining marks;
    4. one digit (``\\p{N}``: ASCII, full-width, other scripts' digits);
    5. an optional space and 1..``max_run`` punctuation/symbols;
    6. whitespace: 1..``max_run`` characters not followed by a non-space (so
       ``"\\n    x"`` gives ``"\\n   "`` and ``" x"``), else 1..``max_run``
       (GPT-2, with the cap).

    Every character falls in one class (whitespace, letter/mark, digit, the
    rest), so no pre-token is longer than ``max(cjk_max_run, max_run) + 1``
    characters (code points). A longer run is cut into consecutive pieces at
    fixed offsets: the cut depends only on the text, never on batching.
    """
    cap = int(max_run)
    return (rf"'(?:s|t|re|ve|m|ll|d)| ?[{CJK_SCRIPTS}]{{1,{int(cjk_max_run)}}}"
            rf"| ?[\p{{L}}\p{{M}}&&[^{CJK_SCRIPTS}]]{{1,{cap}}}|\p{{N}}| ?[^\s\p{{L}}\p{{M}}\p{{N}}]{{1,{cap}}}"
            rf"|\s{{1,{cap}}}(?!\S)|\s{{1,{cap}}}")


class ReferenceTokenizer(pydantic.BaseModel):
    """A reference tokenizer file for the coverage report (see
    :class:`Config` ``report_reference_tokenizers``).

    Attributes:
        path: the file (relative to the working directory of the build, or absolute).
        pattern: a tiktoken file's pre-tokenizer regex, or a preset name
            (``qwen``, ``cl100k_base``); None: the preset named by the file's
            stem, or, for ``tekken.json``, its own. Ignored for ``tokenizer.json``.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    path: str = pydantic.Field(min_length=1)
    pattern: str | None = None


class Config(RequiredStageConfig):
    """Tokenize stage config (unknown keys are an error).

    Attributes:
        tokenizer_path: an existing HF ``tokenizer.json`` to use as is; None
            trains a byte-level BPE on the kept documents.
        vocab_size: target vocabulary size (special + reserved tokens + 256
            bytes + merges) of a trained tokenizer; smaller if the sample
            supports fewer merges. Default 16384: our measurement on the dev
            corpus (docs/stages/tokenize.md): 8k -> 16k -> 32k gives 2.82 ->
            3.19 -> 3.51 characters per token on held-out documents, and the
            bundled sample is small. Production corpora use 32k-150k (Llama 2:
            32k, Qwen: 151k). Ids are stored as uint16 when the largest id
            is below 65,536 (see :func:`token_id_dtype`).
        min_frequency: a pair must occur at least this many times in the
            training sample to be merged. Default 2, as in the HF ``tokenizers``
            BPE training examples (0 merges pairs seen once).
        max_token_length: longest merged token, in UTF-8 bytes (the byte-level
            alphabet has one symbol per byte; HF ``BpeTrainer.max_token_length``).
            Default 24: 8 CJK characters, a 24-column indentation, any common
            English word; our choice (unbounded, the 16K vocabulary of the
            bundled sample spent slots on 192-byte box-drawing rules and 42-byte
            katakana phrases, docs/stages/tokenize.md).
        cjk_max_run: at most this many CJK characters per pre-token (longer
            runs are cut into consecutive pieces). Default 16: longer than
            ``max_token_length`` allows a CJK token to be (8 characters), so a
            cut only matters for a word straddling it; most clauses between
            Chinese punctuation marks are shorter and stay whole. At most 128
            (:data:`MAX_RUN_LIMIT`).
        max_run: at most this many characters of one other class (letters
            and combining marks, punctuation and symbols, whitespace) per
            pre-token, plus an optional leading space; longer runs are cut
            into consecutive pieces (:func:`pretokenize_pattern`). Default
            64: on ../shared/corpus 2,964 of 11.1 M pre-tokens (0.03%, 223k
            characters: rules of dashes, indentation) are longer, and any
            piece that long is at least 3 tokens under ``max_token_length``
            24 anyway. At most 128 (:data:`MAX_RUN_LIMIT`). Bounds encoding
            and training on adversarial runs (a million spaces, dashes or
            letters: docs/stages/tokenize.md, "Long runs").
        normalization: the normalization policy, applied by the tokenizer
            itself at training and at encoding time (it is saved in
            ``tokenizer.json``): ``none`` (default; full-width forms, compatibility
            characters and unnormalised sequences are kept, so the round trip is
            exact and a model can still write "１２３元"), ``nfc`` or ``nfkc``
            (folds full-width forms to ASCII; the round trip is then exact only
            for text already in that form).
        num_reserved_tokens: extra special tokens ``<|reserved_0|>``... after
            BOS (ids 3..), for alignment-time roles (chat turns, tools). Default
            0 (the sample models need none). A trained vocabulary needs room
            for them: ``vocab_size`` must be at least 3 + ``num_reserved_tokens``
            + 256 (the byte alphabet) + 1 merge (:meth:`min_vocab_size`).
        train_max_chars: upper bound on characters (code points) of training
            text. Default 20,000,000: about 40% of the dev corpus, ~100 s on
            2 cores at vocab 16384 (docs/stages/tokenize.md).
        train_language_weights: target share of the training sample per
            language (``langid_lang``, else ``lang_hint``, else ``und``), as
            shares of its characters; shares are renormalised over languages
            present, and a language not listed is left out of training. None
            (default): languages as the source shares give them.
        train_source_weights: target share of the training sample per source
            (its characters); with language weights they split each
            language's share among sources (in proportion to available
            characters x weight). A source weighted 0 (or not listed) is left
            out. ``"corpus"``: each source in proportion to its available
            characters (the corpus's own mix). None (default) means "the mix
            the model trains on": a build fills it in from ``mixture.weights``
            (the mixture's target token shares, ``pipeline.config``) before
            any work, or with ``"corpus"`` when ``mixture.weights`` is empty
            (the mixture then keeps natural shares); a ``Config`` used outside
            a build treats None as ``"corpus"``. Weights are applied to
            characters: a token count does not exist before the tokenizer.
        heldout_fraction: share of documents (drawn by a seeded hash of the id)
            kept out of tokenizer training and used for the coverage report of
            every build. Default 0.02 (our choice: ~1M characters of the dev
            corpus, enough for per-language rates to 0.1%).
        heldout_max_chars: at most this many characters of held-out text go
            into the build's report (bounds its time; default 2,000,000).
        report_min_round_trip: build warning when the share of held-out
            documents with ``decode(encode(x)) == x`` is below this (default 1.0).
        report_max_byte_fallback_rate: build warning when the share of held-out
            characters split into raw byte pieces is above this in any language
            (default 0.02: twice the worst language measured on the dev
            corpus's held-out split, zh 0.92% at 32K and 0.50% at 64K, every
            other language <= 0.2%; docs/tokenizer_report.md); None turns it off.
        report_min_chars_per_token: build warning when a language's characters
            per token on the held-out split is below its value here (default
            none).
        report_reference_tokenizers: name -> a reference tokenizer file (a
            path, or ``{path, pattern}``) that every build's coverage report
            measures on the same held-out text beside the version's
            tokenizer (docs/tokenizer_report.md): an HF ``tokenizer.json``, a
            tiktoken BPE file (``base64 rank`` lines, e.g. Qwen's
            ``qwen.tiktoken``; ``pattern`` is its pre-tokenizer regex or a
            preset of ``common.tokenizer_files.TIKTOKEN_PATTERNS``, by default
            the preset named by the file's stem), or Mistral's ``tekken.json``
            (its own pattern). Default: none. ``preflight`` checks each file
            exists and a tiktoken file has a pattern, before any work.
        encode_threads: threads per process for encoding (tiktoken's batch
            API); the build's worker processes already use the cores, so 1.
        eos_token, pad_token, bos_token: special-token strings (GPT-2's
            ``<|endoftext|>``; ``<|pad|>`` and ``<|bos|>`` in the same style).
    """

    required_by_build = "the assembly packs its token ids (tokenize_input_ids)"

    tokenizer_path: str | None = None
    vocab_size: int = pydantic.Field(16384, ge=260)
    min_frequency: int = pydantic.Field(2, ge=0)
    max_token_length: int = pydantic.Field(24, ge=2)
    cjk_max_run: int = pydantic.Field(16, ge=1, le=MAX_RUN_LIMIT)
    max_run: int = pydantic.Field(64, ge=1, le=MAX_RUN_LIMIT)
    normalization: Literal["none", "nfc", "nfkc"] = "none"
    num_reserved_tokens: int = pydantic.Field(0, ge=0)
    train_max_chars: int = pydantic.Field(20_000_000, gt=0)
    train_language_weights: dict[str, float] | None = None
    train_source_weights: dict[str, float] | Literal["corpus"] | None = None
    heldout_fraction: float = pydantic.Field(0.02, ge=0.0, lt=1.0)
    heldout_max_chars: int = pydantic.Field(2_000_000, gt=0)
    report_min_round_trip: float = pydantic.Field(1.0, ge=0.0, le=1.0)
    report_max_byte_fallback_rate: float | None = pydantic.Field(0.02, ge=0.0, le=1.0)
    report_min_chars_per_token: dict[str, float] = pydantic.Field(default_factory=dict)
    report_reference_tokenizers: dict[str, str | ReferenceTokenizer] = pydantic.Field(default_factory=dict)
    encode_threads: int = pydantic.Field(1, ge=1)
    eos_token: str = pydantic.Field("<|endoftext|>", min_length=1)
    pad_token: str = pydantic.Field("<|pad|>", min_length=1)
    bos_token: str = pydantic.Field("<|bos|>", min_length=1)

    @pydantic.model_validator(mode="after")
    def _check(self) -> Config:
        specials = [self.pad_token, self.eos_token, self.bos_token]
        if len(set(specials)) != 3:
            raise ValueError(f"pad/eos/bos tokens must differ, got {specials}")
        for key in ("train_language_weights", "train_source_weights"):
            weights = getattr(self, key)
            if isinstance(weights, dict):
                bad = {k: w for k, w in weights.items() if not (w >= 0 and math.isfinite(w))}
                if bad:
                    raise ValueError(f"{key}: weights must be finite and >= 0, got {bad}")
                if not any(w > 0 for w in weights.values()):
                    raise ValueError(f"{key}: at least one weight must be > 0 (got {weights})")
        if self.tokenizer_path is None and self.vocab_size < self.min_vocab_size():
            # The trainer never drops a special token or a byte symbol: a
            # smaller vocab_size would silently give a larger vocabulary.
            raise ValueError(
                f"vocab_size: {self.vocab_size} is too small for a trained tokenizer: "
                f"{len(self.special_tokens())} special tokens (pad, eos, bos and {self.num_reserved_tokens} "
                f"reserved) + 256 byte symbols take {len(self.special_tokens()) + 256} ids before any merge; "
                f"use at least {self.min_vocab_size()}")
        return self

    @pydantic.field_validator("train_source_weights", mode="before")
    @classmethod
    def _source_weights_form(cls, value):
        if isinstance(value, str) and value != "corpus":
            raise ValueError("a mapping source -> weight, 'corpus' (the corpus's own mix) or null "
                             "(mixture.weights)")
        return value

    @pydantic.field_validator("report_reference_tokenizers")
    @classmethod
    def _reference_names(cls, refs: dict) -> dict:
        if "version" in refs:
            raise ValueError("'version' names the version's own tokenizer in the report; pick another name")
        return refs

    def reference_tokenizers(self) -> dict[str, ReferenceTokenizer]:
        """``report_reference_tokenizers`` with every value a
        :class:`ReferenceTokenizer`, in the config's order."""
        return {name: ref if isinstance(ref, ReferenceTokenizer) else ReferenceTokenizer(path=ref)
                for name, ref in self.report_reference_tokenizers.items()}

    def min_vocab_size(self) -> int:
        """The smallest ``vocab_size`` a trained tokenizer accepts: the special
        tokens (pad, eos, bos, reserved), the 256 byte symbols and one merge."""
        return len(self.special_tokens()) + 256 + 1

    def requirements(self) -> dict[str, str]:
        """``train_language_weights`` draws the training sample by
        ``langid_lang``; otherwise nothing (``lang_hint`` or ``und`` serve)."""
        if self.train_language_weights is not None:
            return {"langid_lang": "train_language_weights draws the training sample by language"}
        return {}

    def language_codes(self) -> dict[str, list[str]]:
        """The languages ``train_language_weights`` names (``und``, the
        group of documents without a language, is always accepted)."""
        codes = [c for c in (self.train_language_weights or {}) if c != "und"]
        return {"train_language_weights": codes} if codes else {}

    def source_weights(self) -> dict[str, float] | None:
        """``train_source_weights`` as the sample uses it: a dict, or None for
        the corpus's own mix (``"corpus"``, or None outside a build)."""
        return self.train_source_weights if isinstance(self.train_source_weights, dict) else None

    def special_tokens(self) -> list[str]:
        """pad, eos, bos, then the reserved slots: ids 0, 1, 2, 3, ..."""
        return [self.pad_token, self.eos_token, self.bos_token,
                *(f"<|reserved_{i}|>" for i in range(self.num_reserved_tokens))]


def token_id_dtype(max_token_id: int) -> np.dtype:
    """The smallest dtype holding every id from 0 to ``max_token_id`` (the
    largest id of the vocabulary, added and special tokens included: see
    :func:`max_token_id`; not the number of entries, which is smaller when the
    ids have gaps): ``uint16`` up to 65,535, else ``int32`` (MindRecord stores
    only int32/int64, so ids from 2^31 are not supported).

    Raises:
        ValueError: ``max_token_id`` < 0 or >= 2^31.
    """
    if not 0 <= max_token_id < 2**31:
        raise ValueError(f"largest token id {max_token_id} out of range 0..2^31-1")
    return np.dtype(np.uint16) if max_token_id < 2**16 else np.dtype(np.int32)


def max_token_id(tokenizer) -> int:
    """The largest id of a ``tokenizers.Tokenizer``: model vocabulary and
    added (special) tokens alike.

    Raises:
        ValueError: the tokenizer has no token.
    """
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    if not ids:
        raise ValueError("tokenize: the tokenizer has an empty vocabulary")
    return max(ids)


def build_trainable_tokenizer(config: Config | None = None):
    """An untrained byte-level BPE with the normalizer, pre-tokenizer and
    decoder described in the module docstring (``config`` defaults apply when
    None)."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    config = config or Config()
    tokenizer = Tokenizer(models.BPE())
    if config.normalization == "nfc":
        tokenizer.normalizer = normalizers.NFC()
    elif config.normalization == "nfkc":
        tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pretokenize_pattern(config.cjk_max_run, config.max_run)),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_bpe(texts, config: Config):
    """Train a byte-level BPE on ``texts`` (an iterable of str).

    Special tokens get ids 0 (pad), 1 (eos), 2 (bos), 3.. (reserved); then the
    256 byte symbols; then merges, none longer than ``config.max_token_length``
    bytes. Deterministic for the same texts in the same order (checked with 1
    and 2 Rayon threads, docs/stages/tokenize.md).

    Returns:
        a ``tokenizers.Tokenizer``.
    """
    from tokenizers import pre_tokenizers, trainers

    tokenizer = build_trainable_tokenizer(config)
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=config.special_tokens(),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=config.max_token_length,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def portable_json(tokenizer) -> str:
    """The ``tokenizer.json`` text of ``tokenizer`` in a form every
    ``tokenizers`` release from 0.15 on reads, with the same ids.

    ``tokenizers`` 0.20 and later write BPE merges as pairs
    (``[["Ġ", "t"], ...]``); 0.15 (the release mindformers 1.8 pins) reads
    only the older ``"Ġ t"`` strings and refuses the file ("data did not
    match any variant of untagged enum ModelWrapper"). Newer releases read
    both. So merges are written as strings when no merge piece holds a
    space (true of every byte-level BPE: a space is ``Ġ``); otherwise the
    pairs are kept (the string form cannot express them). Our measurement:
    the default build's tokenizer.json written this way loads in 0.15.2 and
    0.23.3 and gives the same ids on mixed zh/en text
    (tests/stages/test_tokenize.py).

    Returns:
        JSON text (UTF-8 characters unescaped, indent 2: deterministic for
        one tokenizer).
    """
    spec = json.loads(tokenizer.to_str())
    model = spec.get("model") or {}
    merges = model.get("merges")
    if (model.get("type") == "BPE" and isinstance(merges, list) and merges
            and all(isinstance(m, list) and len(m) == 2 and " " not in m[0] and " " not in m[1] for m in merges)):
        model["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(spec, ensure_ascii=False, indent=2) + "\n"


def load_tokenizer(path: Path, eos_token: str):
    """Load a ``tokenizer.json`` and check it has ``eos_token``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a valid tokenizer, or lacks ``eos_token``.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenize: tokenizer file not found: {path}")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises a bare Exception
        raise ValueError(f"tokenize: {path} is not a valid tokenizer.json: {err}") from err
    if tokenizer.token_to_id(eos_token) is None:
        raise ValueError(f"tokenize: {path} has no EOS token {eos_token!r}")
    return tokenizer


# --------------------------------------------------------------------------- encoders

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the ByteLevel alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def token_bytes(token: str) -> bytes | None:
    """The bytes a byte-level token stands for (None if ``token`` is not made
    of ByteLevel alphabet symbols, e.g. a special token)."""
    try:
        return bytes(BYTE_DECODER[c] for c in token)
    except KeyError:
        return None


class HFEncoder:
    """Encode with ``tokenizers`` (any tokenizer.json). Literal special-token
    strings in the text are ordinary text (``encode_special_tokens``)."""

    kind = "tokenizers"

    def __init__(self, tokenizer):
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


class TiktokenEncoder:
    """Encode a byte-level BPE of :func:`build_trainable_tokenizer`'s shape
    with ``tiktoken`` (ranks = token ids; special tokens never matched).

    Raises:
        ValueError: the tokenizer is not of that shape (normalizer set, other
            pre-tokenizer, BPE options tiktoken lacks).
    """

    kind = "tiktoken"

    def __init__(self, tokenizer, threads: int = 1):
        import tiktoken

        spec = json.loads(tokenizer.to_str())
        model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
        if (spec.get("normalizer") is not None or model.get("type") != "BPE"
                or model.get("dropout") or model.get("ignore_merges") or model.get("byte_fallback")
                or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
                or len(steps) != 2 or steps[0].get("type") != "Split"
                or steps[0].get("behavior") != "Isolated" or steps[0].get("invert")
                or "Regex" not in steps[0].get("pattern", {})
                or steps[1].get("type") != "ByteLevel" or steps[1].get("use_regex")
                or steps[1].get("add_prefix_space")):
            raise ValueError("tokenize: not a Split + ByteLevel byte-level BPE; tiktoken cannot encode it")
        specials = {t["content"] for t in spec.get("added_tokens", [])}
        ranks = {}
        for token, idx in tokenizer.get_vocab(with_added_tokens=False).items():
            if token in specials:
                continue  # never produced from text (encode_special_tokens)
            raw = token_bytes(token)
            if raw is None:
                raise ValueError(f"tokenize: token {token!r} is not byte-level")
            ranks[raw] = idx
        if len(ranks) < 256:
            raise ValueError("tokenize: vocabulary lacks some of the 256 byte symbols")
        self.encoding = tiktoken.Encoding("mindcorpus", pat_str=steps[0]["pattern"]["Regex"],
                                          mergeable_ranks=ranks, special_tokens={})
        self.threads = threads

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.threads > 1:
            return self.encoding.encode_ordinary_batch(texts, num_threads=self.threads)
        return [self.encoding.encode_ordinary(t) for t in texts]


# What a per-document guard never catches: the process is being stopped.
_NOT_CAUGHT = (KeyboardInterrupt, SystemExit, GeneratorExit)


def guarded_encode(encoder, texts: list[str], fallback=None) -> tuple[list[list[int] | None], list[str | None]]:
    """``encoder.encode_batch(texts)``, one document's failure never failing
    the others.

    Any error of the batch call (an ``Exception``, or a ``BaseException``
    such as ``pyo3_runtime.PanicException``, which a Rust panic inside
    tiktoken or ``tokenizers`` raises; ``KeyboardInterrupt``, ``SystemExit``
    and ``GeneratorExit`` propagate) makes it encode text by text; a text that
    fails is given to ``fallback`` (another encoder, or None). Which texts
    fail depends only on the texts, so the ids do not depend on batching.

    Returns:
        (``seqs``: per text its ids, None when no encoder could encode it;
        ``errors``: per text None, or what failed, by encoder kind and error
        type only so that it is deterministic: ``"tiktoken: PanicException"``
        (then ``fallback`` gave the ids), ``"tiktoken: PanicException;
        tokenizers: Exception"`` (no ids)).
    """
    try:
        return list(encoder.encode_batch(texts)), [None] * len(texts)
    except _NOT_CAUGHT:
        raise
    except BaseException:  # noqa: BLE001 - narrowed to the failing documents below
        pass
    seqs: list[list[int] | None] = []
    errors: list[str | None] = []
    for text in texts:
        failed = []
        for enc in (encoder, fallback):
            if enc is None:
                continue
            try:
                seqs.append(list(enc.encode_batch([text])[0]))
                break
            except _NOT_CAUGHT:
                raise
            except BaseException as err:  # noqa: BLE001 - recorded per document
                failed.append(f"{enc.kind}: {type(err).__name__}")
        else:
            seqs.append(None)
        errors.append("; ".join(failed) or None)
    return seqs, errors


def choose_encoder(tokenizer, check_texts: list[str], threads: int = 1):
    """The fastest encoder that gives exactly ``tokenizers``' ids on
    ``check_texts`` (a sample of real documents): tiktoken when it can encode
    this tokenizer and agrees on every text both can encode, else
    ``tokenizers`` itself. A text only ``tokenizers`` can encode does not
    disqualify tiktoken: ``process`` gives such a document to ``tokenizers``
    (:func:`guarded_encode`).

    Returns:
        (encoder, facts): facts = {"encoder", "checked_documents",
        "checked_chars", "failed_documents" (texts an encoder failed on),
        "why"}.
    """
    reference = HFEncoder(tokenizer)
    facts = {"checked_documents": len(check_texts), "checked_chars": sum(map(len, check_texts)),
             "failed_documents": 0}
    try:
        fast = TiktokenEncoder(tokenizer, threads)
    except (ImportError, ValueError) as err:
        return reference, {"encoder": "tokenizers", **facts, "why": str(err)}
    fast_ids, fast_errors = guarded_encode(fast, check_texts)
    ref_ids, ref_errors = guarded_encode(reference, check_texts)
    facts["failed_documents"] = sum(a is not None or b is not None for a, b in zip(fast_errors, ref_errors))
    if any(a is not None and b is not None and a != b for a, b in zip(fast_ids, ref_ids)):
        return reference, {"encoder": "tokenizers", **facts, "why": "tiktoken ids differ"}
    if fast_ids and all(a is None for a in fast_ids):
        return reference, {"encoder": "tokenizers", **facts, "why": "tiktoken failed on every check text"}
    return fast, {"encoder": "tiktoken", **facts, "why": "same ids on the check sample"}


def make_encoder(kind: str, tokenizer, threads: int = 1):
    """Rebuild the encoder ``fit`` chose (``"tiktoken"`` or ``"tokenizers"``)."""
    return TiktokenEncoder(tokenizer, threads) if kind == "tiktoken" else HFEncoder(tokenizer)


# --------------------------------------------------------------------------- sample

def is_heldout(doc_id: str, seed: int, fraction: float) -> bool:
    """True when the document belongs to the held-out split: a seeded xxh64 of
    its id (salted, so independent of the training draw) below ``fraction``."""
    return fraction > 0 and id_hash(doc_id, seed ^ _HELDOUT_SALT) < fraction * _HASH_SPACE


def language_column(path) -> str | None:
    """The column that holds a document's language in a partition (a
    :class:`stages.base.PartitionRef` or a Parquet path): ``langid_lang`` when
    language ID ran, else ``lang_hint``, else None."""
    names = set(view_columns(path))
    return next((c for c in ("langid_lang", "lang_hint") if c in names), None)


def _document_rows(partitions: Partitions, with_text: bool):
    """Yield (id, source, language, chars[, text]) of each kept document."""
    for path in partitions.paths:
        names = set(view_columns(path))
        lang_col = language_column(path)
        cols = ["id"] + [c for c in ("source", "chars") if c in names] + ([lang_col] if lang_col else [])
        if with_text or "chars" not in names:
            cols.append("text")
        table = read_kept(path, cols)
        ids = table["id"].to_pylist()
        n = len(ids)
        sources = table["source"].to_pylist() if "source" in names else [""] * n
        langs = table[lang_col].to_pylist() if lang_col else [None] * n
        texts = table["text"].to_pylist() if "text" in cols else [None] * n
        chars = (table["chars"].to_pylist() if "chars" in names
                 else [len(t or "") for t in texts])
        for i in range(n):
            row = (ids[i], sources[i] or "", langs[i] or "und", chars[i] or 0)
            yield (*row, texts[i]) if with_text else row


def _group_targets(available: dict[tuple[str, str], int], config: Config) -> dict[tuple[str, str], float]:
    """Target training characters per (source, language) group; see
    :func:`training_sample`."""
    budget = float(config.train_max_chars)
    lw, sw = config.train_language_weights, config.source_weights()
    if lw is None and sw is None:
        total = sum(available.values())
        scale = min(1.0, budget / total) if total else 0.0
        return {g: c * scale for g, c in available.items()}
    targets: dict[tuple[str, str], float] = {}
    if lw is not None:
        langs = {l for _, l in available if lw.get(l, 0) > 0}
        norm = sum(lw[l] for l in langs)
        for lang in langs:
            groups = {g: c * (1.0 if sw is None else sw.get(g[0], 0.0))
                      for g, c in available.items() if g[1] == lang}
            mass = sum(groups.values())
            for g, m in groups.items():
                targets[g] = budget * lw[lang] / norm * (m / mass if mass else 0.0)
    else:
        srcs = {s for s, _ in available if sw.get(s, 0) > 0}
        norm = sum(sw[s] for s in srcs)
        for src in srcs:
            groups = {g: c for g, c in available.items() if g[0] == src}
            mass = sum(groups.values())
            for g, c in groups.items():
                targets[g] = budget * sw[src] / norm * (c / mass if mass else 0.0)
    return targets


def _group_chars(part, seed: int, fraction: float) -> dict[str, int]:
    """Worker: characters of the non-held-out kept documents of one partition
    per ``"source\0language"`` group (no text read when ``chars`` exists)."""
    out: dict[str, int] = defaultdict(int)
    for doc_id, source, lang, chars in _document_rows(Partitions([part], None), with_text=False):
        if chars and not is_heldout(doc_id, seed, fraction):
            out[f"{source}\0{lang}"] += chars
    return dict(out)


def _draw(task: dict[str, Any]) -> dict[str, int]:
    """Worker: write the drawn texts of one partition (row order) to
    ``task["out"]`` (``group``, ``text``); return the held-out count."""
    seed, fraction = task["seed"], task["fraction"]
    groups, texts, heldout = [], [], 0
    for doc_id, source, lang, _, text in _document_rows(Partitions([task["part"]], None), with_text=True):
        if not text:
            continue
        if is_heldout(doc_id, seed, fraction):
            heldout += 1
            continue
        group = f"{source}\0{lang}"
        p = task["draw"].get(group, 0.0)
        if p <= 0 or id_hash(doc_id, seed) >= p * _HASH_SPACE:
            continue
        groups.append(group)
        texts.append(text)
    write_table_atomic(pa.table({"group": pa.array(groups, pa.string()), "text": pa.array(texts, pa.large_string())}),
                       Path(task["out"]), compression="zstd")
    return {"heldout": heldout}


def training_sample(partitions: Partitions, config: Config, seed: int, counts: dict | None = None,
                    spill_dir: Path | None = None):
    """Yield a deterministic, bounded, balanced sample of kept texts (str), in
    partition order, never a held-out document.

    1. Workers count the available characters of each (source, language)
       group of their partitions (``id``, ``source``, language, ``chars``; no
       text).
    2. Each group gets a target in characters (:func:`_group_targets`: the
       :class:`Config` ``train_language_weights`` and ``train_source_weights``
       as resolved by the build; without weights, every group ``p *
       available`` with ``p = min(1, train_max_chars / total)``), and each
       document of a group is drawn when its seeded xxh64 id hash is below
       ``min(1, DRAW_MARGIN * target / available)`` (so the draw does not
       depend on partitioning). Workers write their drawn texts to
       ``spill_dir`` (about ``DRAW_MARGIN * train_max_chars`` in all).
    3. The driver streams the drawn texts in partition order, skipping a
       document that would take its group past its target (or the sample past
       ``train_max_chars``). It reads about ``DRAW_MARGIN *
       train_max_chars`` characters, whatever the corpus size; its memory is
       one partition's drawn texts plus one counter per group.

    A group with less text than its target gives all it has (the shortfall is
    not given to other groups): the realised shares then differ from the
    targets, and ``counts`` shows by how much.

    Args:
        counts: if given, filled with ``{"documents", "chars", "by_language",
            "by_source", "heldout_documents", "targets", "available"}`` as
            the sample is consumed (``targets`` / ``available``: characters
            per ``"source\0language"`` group).
        spill_dir: where the drawn texts go (a temporary directory when None;
            removed when the sample is consumed).
    """
    import tempfile

    counts = counts if counts is not None else {}
    counts.update(documents=0, chars=0, by_language={}, by_source={}, heldout_documents=0,
                  targets={}, available={})
    mapper = partitions.map or (lambda fn, items: [fn(x) for x in items])
    fraction = config.heldout_fraction
    available: dict[tuple[str, str], int] = defaultdict(int)
    for part_counts in mapper(functools.partial(_group_chars, seed=seed, fraction=fraction),
                              list(partitions.paths)):
        for key, chars in part_counts.items():
            source, lang = key.split("\0")
            available[(source, lang)] += chars
    targets = _group_targets(available, config)
    draw = {f"{s}\0{l}": min(1.0, DRAW_MARGIN * t / available[(s, l)]) for (s, l), t in targets.items()
            if t > 0 and available[(s, l)]}
    counts["targets"] = {"\0".join(g): t for g, t in sorted(targets.items())}
    counts["available"] = {"\0".join(g): c for g, c in sorted(available.items())}
    own = spill_dir is None
    spill = Path(tempfile.mkdtemp(prefix="bpe-sample-")) if own else Path(spill_dir)
    files = [spill / f"part-{i:05d}.parquet" for i in range(len(partitions.paths))]
    try:
        drawn = mapper(_draw, [{"part": p, "seed": seed, "fraction": fraction, "draw": draw, "out": str(f)}
                               for p, f in zip(partitions.paths, files)])
        counts["heldout_documents"] = sum(d["heldout"] for d in drawn)
        used: dict[tuple[str, str], int] = defaultdict(int)
        total = 0
        for path in files:
            table = pq.read_table(path)
            for key, text in zip(table["group"].to_pylist(), table["text"].to_pylist()):
                source, lang = group = tuple(key.split("\0"))
                n = len(text)
                if used[group] + n > targets.get(group, 0.0) or total + n > config.train_max_chars:
                    continue
                used[group] += n
                total += n
                counts["documents"] += 1
                counts["chars"] += n
                counts["by_language"][lang] = counts["by_language"].get(lang, 0) + n
                counts["by_source"][source] = counts["by_source"].get(source, 0) + n
                yield text
    finally:
        shutil.rmtree(spill, ignore_errors=True) if own else [f.unlink(missing_ok=True) for f in files]


def sample_shares(counts: dict[str, Any], config: Config) -> dict[str, Any]:
    """The training sample's target and realised shares, per language and
    per source (the manifest's ``tokenizer.training_sample``).

    Args:
        counts: filled by :func:`training_sample`.

    Returns:
        ``{"language_weights": dict | None, "source_weights": dict |
        "corpus", "by_language": {lang: row}, "by_source": {source: row}}``,
        each row ``{"target_share", "realised_share", "target_chars",
        "chars", "available_chars"}`` (shares of the sample's characters;
        ``target_share`` from the groups' targets, so it is the weight's
        share among groups that have text). A group with less text than its
        target shows it as ``available_chars`` < ``target_chars``.
    """
    out: dict[str, Any] = {"language_weights": config.train_language_weights,
                           "source_weights": config.source_weights() or "corpus"}
    targets, available = counts.get("targets", {}), counts.get("available", {})
    total_target = sum(targets.values()) or 1.0
    total = counts.get("chars", 0) or 1
    for kind, pos, realised in (("by_language", 1, counts.get("by_language", {})),
                                ("by_source", 0, counts.get("by_source", {}))):
        rows: dict[str, dict[str, Any]] = {}
        for key in sorted(set(targets) | set(available)):
            name = key.split("\0")[pos]
            row = rows.setdefault(name, {"target_chars": 0.0, "available_chars": 0})
            row["target_chars"] += targets.get(key, 0.0)
            row["available_chars"] += available.get(key, 0)
        for name, row in rows.items():
            row["target_chars"] = round(row["target_chars"])
            row["target_share"] = round(row["target_chars"] / total_target, 6)
            row["chars"] = realised.get(name, 0)
            row["realised_share"] = round(row["chars"] / total, 6)
        out[kind] = {k: dict(sorted(v.items())) for k, v in sorted(rows.items())}
    return out


def _special_ids(tokenizer, config: Config) -> dict[str, int | None]:
    return {name: tokenizer.token_to_id(tok) for name, tok in
            (("pad", config.pad_token), ("eos", config.eos_token), ("bos", config.bos_token))}


def _check_sample(partitions: Partitions, max_chars: int = 300_000, max_docs: int = 400) -> list[str]:
    """The first documents of the stage input (up to ``max_docs`` and
    ``max_chars`` characters, each document cut to 20,000 characters): the
    texts on which fit checks that the fast encoder gives the same ids."""
    out, used = [], 0
    for table in partitions.tables(["text"]):
        for text in table["text"].to_pylist():
            if not text:
                continue
            text = text[:20_000]
            if used + len(text) > max_chars or len(out) >= max_docs:
                return out
            out.append(text)
            used += len(text)
    return out


class TokenizeStage(Stage):
    """Encode each kept document to BPE ids followed by EOS.

    Columns added: ``tokenize_input_ids`` (list<uint16> when the largest id
    of the tokenizer, special tokens included, is below 65,536, else
    list<int32>: document tokens then EOS; see :func:`token_id_dtype`),
    ``tokenize_num_tokens`` (int32, including EOS), ``tokenize_encoder_error``
    (string: null, or which encoder failed on the document and how, see
    :func:`guarded_encode`).
    """

    row_independent = True
    name = "tokenize"
    order = 600
    Config = Config
    columns = {
        "tokenize_input_ids": Column("list<uint16> or list<int32>", "BPE ids of the document, then EOS "
                                     "(uint16 when every id is below 65,536)"),
        "tokenize_num_tokens": Column("int32", "tokens of the document, EOS included", lineage=True),
        "tokenize_encoder_error": Column("string", "which encoder failed on the document and how; null"),
    }
    artifacts = {
        "tokenizer": "file: the trained (or given) HF tokenizers file, published as tokenizer.json",
        "pad_id": "value: the id of the pad token (best-fit packing fills gaps with it)",
    }

    @classmethod
    def preflight(cls, config: Config) -> list[str]:
        """Each ``report_reference_tokenizers`` file exists, and a tiktoken
        file has a pre-tokenizer pattern (``common.tokenizer_files``)."""
        from common.tokenizer_files import resolve_pattern, tokenizer_kind

        errors = []
        for name, ref in config.reference_tokenizers().items():
            key = f"tokenize.report_reference_tokenizers.{name}"
            if not Path(ref.path).is_file():
                errors.append(f"{key}: no such file: {ref.path}")
                continue
            try:
                if tokenizer_kind(Path(ref.path)) == "tiktoken":
                    resolve_pattern(Path(ref.path), ref.pattern)
            except (OSError, ValueError) as err:
                errors.append(f"{key}: {err}")
        return errors

    def fit(self, partitions: Partitions) -> FitResult:
        """Train or load the tokenizer; write ``work_dir/tokenizer.json`` and
        ``work_dir/encoder.json`` (which encoder ``process`` uses).

        Returns:
            A :class:`FitResult`: artifact ``tokenizer`` (the file), export
            ``pad_id``, and the facts ``{"tokenizer_sha256", "vocab_size" (entries, added tokens
            included), "max_token_id", "token_id_dtype" (from the largest
            id), "special_token_ids": {pad, eos, bos}, "trained": bool,
            "training_chars", "training_documents", "training_chars_by_language",
            "training_chars_by_source", "heldout_documents", "training_sample"
            (:func:`sample_shares`: target and realised share per language
            and per source; None when loaded), "encoder": {...}}``
            (training counts 0 / empty when loaded).

        Raises:
            FileNotFoundError / ValueError: see :func:`load_tokenizer`; also
                ValueError when the largest id is 2^31 or more.
        """
        config: Config = self.config
        out = Path(self.ctx.work_dir) / TOKENIZER_FILE
        out.parent.mkdir(parents=True, exist_ok=True)
        counts: dict[str, Any] = {"documents": 0, "chars": 0, "by_language": {}, "by_source": {},
                                  "heldout_documents": 0}
        if config.tokenizer_path is not None:
            tokenizer = load_tokenizer(Path(config.tokenizer_path), config.eos_token)
            shutil.copyfile(config.tokenizer_path, out)
        else:
            tokenizer = train_bpe(training_sample(partitions, config, self.ctx.seed, counts,
                                                  Path(self.ctx.work_dir) / "sample"), config)
            with atomic_path(out) as tmp:
                Path(tmp).write_text(portable_json(tokenizer), encoding="utf-8")
        _, encoder_facts = choose_encoder(tokenizer, _check_sample(partitions), config.encode_threads)
        (out.parent / ENCODER_FILE).write_text(json.dumps(encoder_facts, sort_keys=True))
        largest = max_token_id(tokenizer)
        special = _special_ids(tokenizer, config)
        return FitResult(facts={
            "tokenizer_sha256": sha256_file(out),
            "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
            "max_token_id": largest,
            "token_id_dtype": token_id_dtype(largest).name,
            "special_token_ids": special,
            "trained": config.tokenizer_path is None,
            "training_chars": counts["chars"],
            "training_documents": counts["documents"],
            "training_chars_by_language": dict(sorted(counts["by_language"].items())),
            "training_chars_by_source": dict(sorted(counts["by_source"].items())),
            "heldout_documents": counts["heldout_documents"],
            "training_sample": sample_shares(counts, config) if config.tokenizer_path is None else None,
            "encoder": encoder_facts,
        }, artifacts={"tokenizer": TOKENIZER_FILE}, exports={"pad_id": special["pad"]})

    def _tokenizer(self):
        """(tokenizer, eos id, encoder, id dtype), loaded once per process;
        also sets ``self._fallback`` (the ``tokenizers`` encoder when the
        chosen one is tiktoken, else None)."""
        if getattr(self, "_loaded", None) is None:
            work = Path(self.ctx.work_dir)
            tokenizer = load_tokenizer(work / TOKENIZER_FILE, self.config.eos_token)
            # Literal "<|endoftext|>" in raw text is ordinary text, never the EOS id.
            tokenizer.encode_special_tokens = True
            kind = "tokenizers"
            if (work / ENCODER_FILE).exists():
                kind = json.loads((work / ENCODER_FILE).read_text())["encoder"]
            encoder = make_encoder(kind, tokenizer, self.config.encode_threads)
            self._fallback = HFEncoder(tokenizer) if encoder.kind != "tokenizers" else None
            self._loaded = (tokenizer, tokenizer.token_to_id(self.config.eos_token), encoder,
                            token_id_dtype(max_token_id(tokenizer)))
        return self._loaded

    def process(self, table: pa.Table) -> pa.Table:
        """Encode ``table["text"]``; see the class docstring for the columns.

        A null or empty text gets ``tokenize_num_tokens`` 0, an empty id list,
        and reason ``tokenize.empty``; a text no encoder can encode the same,
        with reason ``tokenize.encode_error``.
        """
        _, eos_id, encoder, dtype = self._tokenizer()
        texts = [t or "" for t in table["text"].to_pylist()]
        ids, reasons, errors = encode_documents(encoder, texts, eos_id, dtype, self._fallback)
        lengths = np.fromiter((len(a) for a in ids), dtype=np.int32, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(ids) if ids else np.zeros(0, dtype)
        arrow_type = pa.uint16() if dtype == np.uint16 else pa.int32()
        input_ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, arrow_type))
        return with_decision(table, {
            "tokenize_input_ids": input_ids,
            "tokenize_num_tokens": pa.array(lengths, pa.int32()),
            "tokenize_encoder_error": pa.array(errors, pa.string()),
        }, reasons)


def encode_documents(encoder, texts: list[str], eos_id: int, dtype=np.int32, fallback=None):
    """Encode ``texts`` (no special tokens from the text) and append ``eos_id``
    to each non-empty result; a document the encoder fails on goes to
    ``fallback`` (:func:`guarded_encode`).

    Args:
        encoder: an :class:`HFEncoder` / :class:`TiktokenEncoder`, or a bare
            ``tokenizers.Tokenizer`` (wrapped in :class:`HFEncoder`).
        dtype: numpy dtype of the returned arrays (:func:`token_id_dtype`).
        fallback: the encoder for a document ``encoder`` fails on (None:
            such a document is dropped).

    Returns:
        (``ids``: list of ``dtype`` arrays, one per text, EOS last;
        ``reasons``: None, or ``tokenize.empty`` / ``tokenize.encode_error``
        with an empty array; ``errors``: None, or what failed on the text.)

    Raises:
        OverflowError: an id does not fit ``dtype`` (a ``dtype`` not from
            :func:`token_id_dtype` of the tokenizer's largest id).
    """
    if not hasattr(encoder, "kind"):
        encoder = HFEncoder(encoder)
    ids, reasons = [], []
    seqs, errors = guarded_encode(encoder, texts, fallback)
    for seq in seqs:
        if seq:
            arr = np.empty(len(seq) + 1, dtype=dtype)
            arr[:-1] = seq
            arr[-1] = eos_id
            ids.append(arr)
            reasons.append(None)
        else:
            ids.append(np.zeros(0, dtype))
            reasons.append(REASON_EMPTY if seq is not None else REASON_ENCODE_ERROR)
    return ids, reasons, errors
