"""Tokenize stage: train (or load) a byte-level BPE and encode every document.

``fit`` either loads a given ``tokenizer.json`` or trains a byte-level BPE
(GPT-2 style: ByteLevel pre-tokenizer and decoder, the 256 byte symbols as the
initial alphabet, so every string is encodable and no unknown token exists) on a
deterministic sample of the kept documents, and writes
``ctx.work_dir / "tokenizer.json"``. ``process`` encodes each document, appends
EOS and stores the ids.

Special-token ids of a trained tokenizer (``special_tokens`` are given to the
trainer in this order, so they take the first ids):

* ``<|pad|>`` = 0: mindformers' loss mask ignores ``pad_token_id`` (default 0),
  so PAD must be the id the model never has to predict.
* ``<|endoftext|>`` (EOS) = 1: appended to every document; it must NOT be 0,
  or the model would never be trained to end a document.
* ``<|bos|>`` = 2: reserved in the vocabulary for models that want it; this
  stage does not insert it.

Reason codes: ``tokenize.empty`` (the document yields no token: empty or null
text). Every other document is kept.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic

from stages.base import Partitions, Stage, StageConfig, with_decision
from stages.packing import id_hash

TOKENIZER_FILE = "tokenizer.json"
REASON_EMPTY = "tokenize.empty"
_HASH_SPACE = float(2**64)


class Config(StageConfig):
    """Tokenize stage config (unknown keys are an error).

    Attributes:
        tokenizer_path: an existing HF ``tokenizer.json`` to use as is; None
            trains a byte-level BPE on the kept documents.
        vocab_size: target vocabulary size (bytes + merges + 3 special
            tokens) of a trained tokenizer; the result is smaller if the sample
            supports fewer merges. Default 16384, our measurement on the
            bundled 51.5M-character dev corpus (7 languages + Python; see
            docs/stages/tokenize.md): 8k -> 16k -> 32k gives 2.82 -> 3.19 ->
            3.51 characters per token on held-out documents (+13%, +10%)
            while training time triples from 16k to 32k, and a 20M-character
            sample gives the rare merges of a larger vocabulary few counts;
            it also keeps the embedding table small for the small models
            trained on this sample. Production corpora use 32k-150k
            (Llama 2: 32k, Qwen: 151k).
        min_frequency: a pair must occur at least this many times in the
            training sample to be merged. Default 2, as in the HF
            ``tokenizers`` BPE training examples (the library default, 0,
            merges pairs seen once, i.e. memorises the sample).
        train_max_chars: upper bound on characters (code points) of training
            text. Default 20,000,000: about 40% of the dev corpus, training in
            ~100 s on 2 cores (our measurement, docs/stages/tokenize.md).
        eos_token, pad_token, bos_token: special-token strings (GPT-2's
            ``<|endoftext|>``; ``<|pad|>`` and ``<|bos|>`` in the same style).
    """

    tokenizer_path: str | None = None
    vocab_size: int = pydantic.Field(16384, ge=260)
    min_frequency: int = pydantic.Field(2, ge=0)
    train_max_chars: int = pydantic.Field(20_000_000, gt=0)
    eos_token: str = pydantic.Field("<|endoftext|>", min_length=1)
    pad_token: str = pydantic.Field("<|pad|>", min_length=1)
    bos_token: str = pydantic.Field("<|bos|>", min_length=1)

    @pydantic.model_validator(mode="after")
    def _distinct_special_tokens(self) -> "Config":
        specials = [self.pad_token, self.eos_token, self.bos_token]
        if len(set(specials)) != 3:
            raise ValueError(f"pad/eos/bos tokens must differ, got {specials}")
        return self


def build_trainable_tokenizer():
    """An untrained byte-level BPE: digits split one per token, then the GPT-2
    ByteLevel regex split; no normalizer (text is not NFKC-folded, so
    ``decode(encode(x)) == x`` for every string ``x``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_bpe(texts, config: Config):
    """Train a byte-level BPE on ``texts`` (an iterable of str).

    Special tokens get ids 0 (pad), 1 (eos), 2 (bos); then the 256 byte
    symbols; then merges. Deterministic for the same texts in the same order
    (checked with 1 and 2 Rayon threads, see docs/stages/tokenize.md).

    Returns:
        a ``tokenizers.Tokenizer``.
    """
    from tokenizers import pre_tokenizers, trainers

    tokenizer = build_trainable_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=[config.pad_token, config.eos_token, config.bos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


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


def training_sample(partitions: Partitions, max_chars: int, seed: int):
    """Yield a deterministic sample of kept texts, at most ``max_chars``
    characters in all, in partition order.

    Each document is drawn with probability ``p = min(1, max_chars / total
    characters)`` by a seeded xxh64 of its id (so the draw does not depend on
    the partitioning), then the stream stops before the document that would pass
    ``max_chars``. Reads the ``text`` column twice (once to count characters).
    """
    total = sum(pc.sum(pc.utf8_length(t["text"])).as_py() or 0
                for t in partitions.tables(["text"]))
    threshold = min(1.0, max_chars / total) * _HASH_SPACE if total else 0.0
    used = 0
    for table in partitions.tables(["id", "text"]):
        for doc_id, text in zip(table["id"].to_pylist(), table["text"].to_pylist()):
            if not text or id_hash(doc_id, seed) >= threshold:
                continue
            if used + len(text) > max_chars:
                return
            used += len(text)
            yield text


def _special_ids(tokenizer, config: Config) -> dict[str, int | None]:
    return {name: tokenizer.token_to_id(tok) for name, tok in
            (("pad", config.pad_token), ("eos", config.eos_token), ("bos", config.bos_token))}


class TokenizeStage(Stage):
    """Encode each kept document to BPE ids followed by EOS.

    Columns added: ``tokenize_input_ids`` (list<int32>: document tokens then
    EOS), ``tokenize_num_tokens`` (int32, including EOS).
    """

    name = "tokenize"
    Config = Config

    def fit(self, partitions: Partitions) -> dict[str, Any]:
        """Train or load the tokenizer; write ``work_dir/tokenizer.json``.

        Returns:
            ``{"tokenizer_sha256", "vocab_size", "special_token_ids": {pad,
            eos, bos}, "trained": bool, "training_chars", "training_documents"}``
            (the last two 0 when loaded).

        Raises:
            FileNotFoundError / ValueError: see :func:`load_tokenizer`.
        """
        config: Config = self.config
        out = Path(self.ctx.work_dir) / TOKENIZER_FILE
        out.parent.mkdir(parents=True, exist_ok=True)
        chars = docs = 0
        if config.tokenizer_path is not None:
            tokenizer = load_tokenizer(Path(config.tokenizer_path), config.eos_token)
            shutil.copyfile(config.tokenizer_path, out)
        else:
            counted = []

            def sample():
                for text in training_sample(partitions, config.train_max_chars, self.ctx.seed):
                    counted.append(len(text))
                    yield text

            tokenizer = train_bpe(sample(), config)
            chars, docs = sum(counted), len(counted)
            tmp = out.with_suffix(".json.tmp")
            tokenizer.save(str(tmp))
            tmp.replace(out)
        return {
            "tokenizer_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
            "vocab_size": tokenizer.get_vocab_size(),
            "special_token_ids": _special_ids(tokenizer, config),
            "trained": config.tokenizer_path is None,
            "training_chars": chars,
            "training_documents": docs,
        }

    def _tokenizer(self):
        if getattr(self, "_loaded", None) is None:
            tokenizer = load_tokenizer(Path(self.ctx.work_dir) / TOKENIZER_FILE,
                                       self.config.eos_token)
            # Literal "<|endoftext|>" in raw text is encoded as ordinary text,
            # never as the EOS id (tokenizers >= 0.19).
            tokenizer.encode_special_tokens = True
            self._loaded = (tokenizer, tokenizer.token_to_id(self.config.eos_token))
        return self._loaded

    def process(self, table: pa.Table) -> pa.Table:
        """Encode ``table["text"]``; see the class docstring for the columns.

        A null or empty text gets ``tokenize_num_tokens`` 0, an empty id list,
        and reason ``tokenize.empty``.
        """
        tokenizer, eos_id = self._tokenizer()
        texts = [t or "" for t in table["text"].to_pylist()]
        ids, reasons = encode_documents(tokenizer, texts, eos_id)
        lengths = np.fromiter((len(a) for a in ids), dtype=np.int32, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        input_ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
        return with_decision(table, {
            "tokenize_input_ids": input_ids,
            "tokenize_num_tokens": pa.array(lengths, pa.int32()),
        }, reasons)


def encode_documents(tokenizer, texts: list[str], eos_id: int):
    """Encode ``texts`` with ``encode_batch`` (no post-processor specials) and
    append ``eos_id`` to each non-empty result.

    Returns:
        (``ids``: list of int32 arrays, one per text, EOS last;
        ``reasons``: None, or ``tokenize.empty`` with an empty array.)
    """
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    ids, reasons = [], []
    for enc in encodings:
        if enc.ids:
            arr = np.empty(len(enc.ids) + 1, dtype=np.int32)
            arr[:-1] = enc.ids
            arr[-1] = eos_id
            ids.append(arr)
            reasons.append(None)
        else:
            ids.append(np.zeros(0, np.int32))
            reasons.append(REASON_EMPTY)
    return ids, reasons
