"""Deduplication: exact duplicates, then MinHash-LSH near-duplicates, global
across every partition and source.

Phases (each a named function below; :meth:`DedupStage.fit` only wires them):

1. :func:`exact_keys` (per partition, in parallel): blake2b-128 digest of the
   exact-normalized text (:func:`exact_normalize`). Equal digests form a group;
   one keeper per group.
2. :func:`partition_signatures` (per partition, in parallel): the MinHash
   signature ``uint32[num_perm]`` of every exact-dedup survivor, from the
   shingle hashes of :func:`shingle_hashes`, computed for many documents at
   once by :func:`minhash_signatures` (numpy, no per-shingle Python loop in the
   permutation step).
3. :func:`near_duplicate_edges`: datasketch ``MinHashLSH`` with
   ``num_bands x rows_per_band`` proposes candidate pairs; a pair becomes an
   edge only when the estimated Jaccard similarity of the full signatures
   reaches ``jaccard_threshold``.
4. :func:`assign_keepers`: union-find clusters over the edges (exact groups
   folded in), one keeper per cluster by an order-independent rule.

The result, ``id -> keeper, similarity, reason`` for every member of a cluster
with more than one document, is written to ``work_dir/removed.parquet`` and
joined back onto each partition in :meth:`DedupStage.process`.

Hash functions (fixed; both named in the manifest facts):

* exact: ``blake2b`` with a 16-byte digest of the UTF-8 exact-normalized text.
* shingles: ``poly64-fmix64-32``: a polynomial rolling hash over the shingle's
  tokens, ``h = sum_k t_k * M^(n-1-k) mod 2^64`` with ``M = 0x100000001B3`` (the
  64-bit FNV prime), where a token ``t`` is a Unicode code point (character
  shingles) or ``xxh3_64`` of the word's UTF-8 bytes (word shingles); then the
  MurmurHash3 ``fmix64`` finalizer, low 32 bits. Permutations are datasketch
  2.x's ``affine32`` scheme (``fmix32``, then ``a * h + b mod 2^32`` with ``a``
  odd, drawn from ``numpy.random.RandomState(seed)``), so a signature equals
  ``datasketch.MinHash(num_perm, seed, scheme="affine32")`` fed the same 32-bit
  shingle hashes, in any process.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pydantic
import xxhash

from stages.base import Partitions, Stage, StageConfig, read_kept, with_decision
from stages.text import CJK_CHAR_CLASS, CJK_LANGS

REASON_EXACT = "dedup.exact_duplicate"
REASON_NEAR = "dedup.near_duplicate"
REMOVED_FILE = "removed.parquet"
EXACT_HASH_NAME = "blake2b-128(nfkc+casefold+collapse_whitespace)"
SHINGLE_HASH_NAME = "poly64-fmix64-32 (tokens: code point | xxh3_64(word)) + datasketch affine32"
UNKNOWN_LANGS = frozenset({"", "und", "unknown", "zxx"})

# CJK share of non-space characters (after near normalization) at which a
# document of unknown language is shingled by characters. Measured on
# /work/shared/corpus with the package language labels: every de/en/es/fr/ru/code
# document has share 0.000; zh median 1.00 (1st percentile 0.195), ja median
# 0.595 (1st percentile 0.095); 0.3 puts 96.3% of zh/ja documents in character
# mode, the rest being mostly untranslated English.
CJK_SHARE_FOR_CHARS = 0.3

_FNV_PRIME_64 = np.uint64(0x100000001B3)
_SHINGLES_PER_CHUNK = 16384  # columns of the (num_perm x chunk) permutation matrix
_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]")
_TOKEN_RE = re.compile(rf"[{CJK_CHAR_CLASS}]|[^\s{CJK_CHAR_CLASS}]+")
_CJK_RE = re.compile(f"[{CJK_CHAR_CLASS}]")


# ----------------------------------------------------------------------------- config


def candidate_probability(jaccard: float, num_bands: int, rows_per_band: int) -> float:
    """Probability that LSH makes two documents a candidate pair.

    ``P = 1 - (1 - J^r)^b`` for Jaccard similarity ``J``, ``b = num_bands``
    bands of ``r = rows_per_band`` rows (Leskovec, Rajaraman, Ullman, *Mining
    of Massive Datasets*, ch. 3.4).
    """
    return 1.0 - (1.0 - jaccard**rows_per_band) ** num_bands


def s_curve(num_bands: int, rows_per_band: int, points: int = 21) -> list[tuple[float, float]]:
    """The LSH S-curve as ``points`` pairs ``(jaccard, candidate_probability)``
    for ``jaccard`` evenly spaced over [0, 1], for reports and plots."""
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    return [(j, candidate_probability(j, num_bands, rows_per_band))
            for j in (i / (points - 1) for i in range(points))]


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
            characters of raw text) or ``smallest_id``; ties go to the
            smallest id (string order), so the keeper does not depend on input
            order. ``longest`` is our choice: it keeps the most content.

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
    keep: Literal["longest", "smallest_id"] = "longest"

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


# ----------------------------------------------------------------------------- normalization


def _char_class(codepoints: list[int]) -> str:
    """A regex character class body covering ``codepoints`` (sorted) as ranges."""
    ranges: list[list[int]] = []
    for cp in codepoints:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)


@lru_cache(maxsize=1)
def _punctuation_res() -> tuple[re.Pattern, re.Pattern]:
    """Regexes of Unicode punctuation (P*) and symbols (S*) plus ``_``, i.e.
    what ASCII ``string.punctuation`` covers, in all scripts: one for the
    Basic Multilingual Plane (a bitmap class, fast) and one for plane 1
    (emoji, musical and math symbols; planes 2+ hold no P/S characters).
    Categories come from the running Python's ``unicodedata``."""
    def ps(lo: int, hi: int) -> list[int]:
        return [cp for cp in range(lo, hi) if cp == 0x5F or unicodedata.category(chr(cp))[0] in "PS"]

    return (re.compile(f"[{_char_class(ps(0, 0x10000))}]+"),
            re.compile(f"[{_char_class(ps(0x10000, 0x20000))}]+"))


def exact_normalize(text: str) -> str:
    """Normalization for exact dedup: NFKC, casefold, whitespace runs -> one
    space, stripped. ``"Ｈｅｌｌｏ  World\\n"`` -> ``"hello world"``."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def near_normalize(exact_normalized: str) -> str:
    """Normalization for MinHash, applied to :func:`exact_normalize`'s output:
    punctuation and symbols (Unicode P*, S*, and ``_``) become a space, then
    whitespace is collapsed. Equal exact-normalized texts therefore have equal
    signatures. ``"hello, world!"`` -> ``"hello world"``; ``"你好，世界。"`` ->
    ``"你好 世界"``."""
    bmp, astral = _punctuation_res()
    text = bmp.sub(" ", exact_normalized)
    if _ASTRAL_RE.search(text):
        text = astral.sub(" ", text)
    return " ".join(text.split())


def uses_char_shingles(near_normalized: str, lang: str | None) -> bool:
    """True when a document is shingled by characters: its language is in
    :data:`stages.text.CJK_LANGS`, or the language is unknown (None, ``und``,
    ...) and CJK characters are at least :data:`CJK_SHARE_FOR_CHARS` of its
    non-space characters."""
    if lang is not None and lang not in UNKNOWN_LANGS:
        return lang in CJK_LANGS
    chars = len(near_normalized) - near_normalized.count(" ")
    return chars > 0 and len(_CJK_RE.findall(near_normalized)) >= CJK_SHARE_FOR_CHARS * chars


def shingle_tokens(near_normalized: list[str], char_shingles: bool) -> tuple[np.ndarray, np.ndarray]:
    """The token sequences that shingles are made of, for many documents.

    Args:
        near_normalized: D outputs of :func:`near_normalize`.
        char_shingles: True: one token per character (its code point) of the
            text with spaces removed, so that line wrapping inside CJK text
            does not change shingles. False: one token per word, ``xxh3_64``
            of its UTF-8 bytes; a word is a run of non-space characters, and
            each CJK character inside such text is a word of its own.

    Returns:
        ``(tokens uint64[T], lengths int64[D])``, document d owning the next
        ``lengths[d]`` tokens (0 for an empty text).
    """
    if char_shingles:
        chars = [t.replace(" ", "") for t in near_normalized]
        lengths = np.fromiter((len(c) for c in chars), np.int64, len(chars))
        tokens = np.frombuffer("".join(chars).encode("utf-32-le"), dtype=np.uint32)
        return tokens.astype(np.uint64), lengths
    texts = [" ".join(_TOKEN_RE.findall(t)) if _CJK_RE.search(t) else t for t in near_normalized]
    words = pc.split_pattern(pa.array(texts, pa.string()), " ")
    lengths = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
    empty = np.array([t == "" for t in texts], bool)
    lengths[empty] = 0  # "".split(" ") is [""]
    flat = pc.list_flatten(pc.filter(words, pa.array(~empty)))
    encoded = pc.dictionary_encode(flat).combine_chunks() if isinstance(flat, pa.ChunkedArray) \
        else pc.dictionary_encode(flat)
    h = xxhash.xxh3_64_intdigest
    vocabulary = encoded.dictionary.to_pylist()
    word_hashes = np.fromiter((h(w.encode("utf-8")) for w in vocabulary), np.uint64, len(vocabulary))
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return word_hashes[indices], lengths


# ----------------------------------------------------------------------------- shingles


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3 64-bit finalizer on a uint64 array (wrapping arithmetic)."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3 32-bit finalizer on a uint32 array; datasketch's affine32
    pre-mix (``datasketch.minhash._fmix``)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def ngram_hashes(tokens: np.ndarray, lengths: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """32-bit hashes of every run of ``n`` consecutive tokens of each
    document, all documents in one vectorized pass.

    A sequence shorter than ``n`` gives one whole-sequence shingle: the same
    polynomial over its ``T < n`` tokens (the window over the sequence
    left-padded with zero tokens).

    Args:
        tokens: uint64[T], the documents' tokens concatenated.
        lengths: int64[D], tokens per document, each >= 1, summing to T.
        n: n-gram length (>= 1).

    Returns:
        ``(hashes uint32[S], offsets int64[D + 1])``: document d owns
        ``hashes[offsets[d]:offsets[d+1]]``, ``max(lengths[d] - n + 1, 1)``
        values.

    Raises:
        ValueError: on a zero length or lengths not summing to T.
    """
    lengths = np.asarray(lengths, np.int64)
    if np.any(lengths <= 0) or lengths.sum() != len(tokens):
        raise ValueError("ngram_hashes: every document needs >= 1 token and lengths must sum to T")
    pad = np.maximum(n - lengths, 0)
    padded_lengths = lengths + pad
    padded_ends = np.cumsum(padded_lengths)
    if pad.any():
        # token j of document d goes to (padded start of d) + pad[d] + (j - start of d)
        shift = padded_ends - padded_lengths + pad - (np.cumsum(lengths) - lengths)
        padded = np.zeros(int(padded_ends[-1]), np.uint64)
        padded[np.arange(len(tokens)) + np.repeat(shift, lengths)] = tokens
        tokens = padded
    windows = len(tokens) - n + 1
    h = np.zeros(max(windows, 0), np.uint64)
    for k in range(n):
        h *= _FNV_PRIME_64
        h += tokens[k:k + windows]
    # Keep the windows that start and end inside one document.
    valid = np.ones(len(h), bool)
    crossing = (padded_ends[:, None] - np.arange(1, n)[None, :]).ravel()
    valid[crossing[crossing < windows]] = False
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(padded_lengths - n + 1, out=offsets[1:])
    return (_fmix64(h[valid]) & np.uint64(0xFFFFFFFF)).astype(np.uint32), offsets


def shingle_hashes(near_normalized: str, char_shingles: bool, ngram_words: int,
                   ngram_chars: int) -> np.ndarray:
    """Hashes of one document's shingles (a bag; repeats allowed).

    Args:
        near_normalized: output of :func:`near_normalize`.
        char_shingles: character n-grams (``ngram_chars``) or word n-grams
            (``ngram_words``); tokens as in :func:`shingle_tokens`.

    Returns:
        uint32[S]; S = 0 only for an empty text, S = 1 for a text shorter
        than n (one whole-text shingle).
    """
    tokens, lengths = shingle_tokens([near_normalized], char_shingles)
    if len(tokens) == 0:
        return np.empty(0, np.uint32)
    return ngram_hashes(tokens, lengths, ngram_chars if char_shingles else ngram_words)[0]


# ----------------------------------------------------------------------------- MinHash


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters ``(a, b)``, each
    uint32[num_perm], exactly as ``datasketch.MinHash(num_perm, seed,
    scheme="affine32").permutations``."""
    from datasketch import MinHash

    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    return np.ascontiguousarray(a, np.uint32), np.ascontiguousarray(b, np.uint32)


def minhash_signatures(hashes: np.ndarray, offsets: np.ndarray, num_perm: int,
                       seed: int) -> np.ndarray:
    """MinHash signatures of many documents at once.

    Args:
        hashes: uint32[S], the shingle hashes of all documents concatenated.
        offsets: int64[D + 1], document d owns ``hashes[offsets[d]:offsets[d+1]]``;
            every document must own at least one hash.
        num_perm, seed: see :func:`permutations`.

    Returns:
        uint32[D, num_perm], row d equal to ``datasketch.MinHash(num_perm,
        seed, scheme="affine32")`` updated with document d's hashes.

    Raises:
        ValueError: on an empty document or inconsistent offsets.
    """
    offsets = np.asarray(offsets, np.int64)
    num_docs = len(offsets) - 1
    if num_docs < 0 or offsets[0] != 0 or offsets[-1] != len(hashes) or np.any(np.diff(offsets) <= 0):
        raise ValueError("offsets must start at 0, end at len(hashes) and give each document >= 1 hash")
    a, b = permutations(num_perm, seed)
    a, b = a[:, None], b[:, None]
    mixed = _fmix32(np.asarray(hashes, np.uint32))
    signatures = np.full((num_docs, num_perm), np.iinfo(np.uint32).max, np.uint32)
    doc_index = np.arange(num_docs)
    buffer = np.empty((num_perm, _SHINGLES_PER_CHUNK), np.uint32)
    for start in range(0, len(mixed), _SHINGLES_PER_CHUNK):
        stop = min(start + _SHINGLES_PER_CHUNK, len(mixed))
        # Segments of this chunk: the document running into it, then every
        # document that starts inside it.
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, stop, side="left"))  # exclusive
        docs = doc_index[first:last]
        seg_starts = np.maximum(offsets[first:last], start) - start
        block = buffer[:, :stop - start]
        np.multiply(a, mixed[None, start:stop], out=block)
        block += b
        mins = np.minimum.reduceat(block, seg_starts, axis=1).T
        signatures[docs] = np.minimum(signatures[docs], mins)
    return signatures


def estimated_jaccard(signature_a: np.ndarray, signature_b: np.ndarray) -> float:
    """Estimated Jaccard similarity: the share of equal MinHash values of two
    uint32[num_perm] signatures (as ``datasketch.MinHash.jaccard``)."""
    return float(np.count_nonzero(signature_a == signature_b)) / len(signature_a)


# ----------------------------------------------------------------------------- per-partition work


def exact_keys(item: tuple[str, dict]) -> dict[str, Any]:
    """Per-partition phase 1 (top-level, picklable, for ``partitions.map``).

    Args:
        item: ``(partition path, Config.model_dump())``.

    Returns:
        ``{"ids": list[str], "lengths": int64[n] (characters of raw text),
        "digests": bytes (n * 16, blake2b-128 of the exact-normalized text)}``
        for the partition's kept rows, in order.
    """
    path, _ = item
    table = read_kept(Path(path), ["id", "text"])
    texts = table["text"].to_pylist()
    digests = b"".join(hashlib.blake2b(exact_normalize(t or "").encode("utf-8"), digest_size=16).digest()
                       for t in texts)
    lengths = np.fromiter((len(t or "") for t in texts), np.int64, len(texts))
    return {"ids": table["id"].to_pylist(), "lengths": lengths,
            "digests": digests}


def partition_signatures(item: tuple[str, dict, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-partition phase 2 (top-level, picklable, for ``partitions.map``).

    Args:
        item: ``(partition path, Config.model_dump(), int64[k] kept-row
            indices to sign)``; rows are positions among the kept rows.

    Returns:
        ``(rows int64[m], signatures uint32[m, num_perm])`` for the requested
        rows whose near-normalized text is not empty (those never enter LSH),
        in the order of ``rows``.
    """
    path, cfg, rows = item
    config = Config(**cfg)
    columns = ["text"] + (["langid_lang"] if "langid_lang" in pq.read_schema(path).names else [])
    table = read_kept(Path(path), columns)
    rows = np.asarray(rows, np.int64)
    texts = table["text"].take(pa.array(rows)).to_pylist()
    langs = (table["langid_lang"].take(pa.array(rows)).to_pylist() if len(columns) == 2
             else [None] * len(texts))
    normalized = [near_normalize(exact_normalize(t or "")) for t in texts]
    char_mode = np.array([uses_char_shingles(t, lang) for t, lang in zip(normalized, langs)], bool)
    positions, signatures = [], []
    for char_shingles in (True, False):
        members = np.flatnonzero(char_mode == char_shingles)
        if not len(members):
            continue
        tokens, lengths = shingle_tokens([normalized[i] for i in members], char_shingles)
        nonempty = lengths > 0
        if not nonempty.any():
            continue
        hashes, offsets = ngram_hashes(tokens, lengths[nonempty],
                                       config.ngram_chars if char_shingles else config.ngram_words)
        positions.append(members[nonempty])
        signatures.append(minhash_signatures(hashes, offsets, config.num_perm, config.seed))
    if not positions:
        return np.empty(0, np.int64), np.empty((0, config.num_perm), np.uint32)
    positions_all = np.concatenate(positions)
    order = np.argsort(positions_all, kind="stable")
    return rows[positions_all[order]], np.concatenate(signatures)[order]


# ----------------------------------------------------------------------------- global phases


def preference_rank(ids: list[str], lengths: np.ndarray, keep: str) -> np.ndarray:
    """int64[n]: position of each document in keeper preference order (0 =
    best): ``longest`` sorts by (-length, id), ``smallest_id`` by id."""
    if keep == "longest":
        order = sorted(range(len(ids)), key=lambda i: (-int(lengths[i]), ids[i]))
    else:
        order = sorted(range(len(ids)), key=ids.__getitem__)
    rank = np.empty(len(ids), np.int64)
    rank[np.asarray(order, np.int64)] = np.arange(len(ids))
    return rank


def exact_groups(digests: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """int64[n]: the index of each document's exact-group keeper (itself for
    a keeper or a unique text), the best-ranked document with the same digest.

    Args:
        digests: ``S16``[n] blake2b-128 digests.
        rank: :func:`preference_rank` output.
    """
    _, group = np.unique(digests, return_inverse=True)
    best = np.full(group.max() + 1 if len(group) else 0, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(best, group, rank)
    by_rank = np.argsort(rank)
    return by_rank[best[group]]


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, x: int, y: int) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[max(rx, ry)] = min(rx, ry)


def near_duplicate_edges(signatures: np.ndarray, config: Config) -> tuple[_UnionFind, int, int]:
    """LSH candidates verified by estimated Jaccard, merged by union-find.

    Every distinct pair of rows sharing at least one LSH bucket (a candidate
    pair) is verified once on the full signatures; it is an edge when at least
    ``ceil(jaccard_threshold * num_perm)`` MinHash values agree. Cost is
    linear in documents plus candidate pairs (a bucket of k rows gives
    k(k-1)/2 pairs).

    Args:
        signatures: uint32[m, num_perm], one row per document entering LSH.
        config: banding, threshold, seed.

    Returns:
        ``(union-find over the m rows, candidate_pairs, edges)``; both counts
        are independent of row order.
    """
    from datasketch import LeanMinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=config.num_perm, params=(config.num_bands, config.rows_per_band))
    with lsh.insertion_session() as session:
        for i, signature in enumerate(signatures):
            session.insert(i, LeanMinHash(seed=config.seed, hashvalues=signature, scheme="affine32"),
                           check_duplication=False)
    firsts, seconds = [], []
    for band, counts in enumerate(lsh.get_counts()):
        for key, count in counts.items():
            if count > 1:
                members = sorted(lsh.hashtables[band].get(key))
                for x, first in enumerate(members[:-1]):
                    firsts.extend([first] * (len(members) - x - 1))
                    seconds.extend(members[x + 1:])
    pairs = np.unique(np.asarray(firsts, np.int64) * len(signatures) + np.asarray(seconds, np.int64))
    first, second = np.divmod(pairs, max(len(signatures), 1))
    needed = int(np.ceil(config.jaccard_threshold * config.num_perm - 1e-9))
    agree = np.concatenate([np.count_nonzero(signatures[first[s:s + 65536]] == signatures[second[s:s + 65536]],
                                             axis=1) for s in range(0, len(pairs), 65536)]
                           or [np.empty(0, np.int64)])
    clusters = _UnionFind(len(signatures))
    for i, j in zip(first[agree >= needed].tolist(), second[agree >= needed].tolist()):
        clusters.union(i, j)
    return clusters, len(pairs), int(np.count_nonzero(agree >= needed))


def assign_keepers(ids: list[str], rank: np.ndarray, exact_keeper: np.ndarray,
                   lsh_rows: np.ndarray, signatures: np.ndarray,
                   clusters: _UnionFind | None) -> pa.Table:
    """Final clusters and their keepers.

    Args:
        ids: n document ids; rank: :func:`preference_rank`; exact_keeper:
            :func:`exact_groups` (``arange(n)`` when exact dedup is off).
        lsh_rows: int64[m] document index of each signature row;
            signatures: uint32[m, num_perm]; clusters: union-find over the m
            rows (None when near dedup is off).

    Returns:
        Table ``id, keeper (string), similarity (float64), reason (string)``,
        one row per member of each cluster with more than one document,
        sorted by id. The keeper has ``keeper == id`` and null similarity and
        reason; exact duplicates point at their cluster's final keeper, with
        similarity 1.0 when that is their exact-group keeper, else the
        estimated Jaccard of their text to the keeper (equal normalized text,
        equal signature).
    """
    n = len(ids)
    root = np.arange(n)
    if clusters is not None and len(lsh_rows):
        roots = np.fromiter((clusters.find(i) for i in range(len(lsh_rows))), np.int64, len(lsh_rows))
        root[lsh_rows] = lsh_rows[roots]
    root = root[exact_keeper]  # exact duplicates join their keeper's cluster
    # Keeper of a cluster = its best-ranked member.
    best = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(best, root, rank)
    keeper = np.argsort(rank)[best[root]]
    size = np.bincount(root, minlength=n)[root]
    sig_row = np.full(n, -1, np.int64)
    sig_row[lsh_rows] = np.arange(len(lsh_rows))

    out_ids, out_keepers, out_sims, out_reasons = [], [], [], []
    for d in np.flatnonzero(size > 1):
        k = int(keeper[d])
        out_ids.append(ids[d])
        out_keepers.append(ids[k])
        if d == k:
            out_sims.append(None)
            out_reasons.append(None)
            continue
        e = int(exact_keeper[d])
        exact = e != d
        if exact and e == k:
            sim = 1.0
        else:
            sim = estimated_jaccard(signatures[sig_row[e]], signatures[sig_row[k]])
        out_sims.append(sim)
        out_reasons.append(REASON_EXACT if exact else REASON_NEAR)
    table = pa.table({"id": pa.array(out_ids, pa.string()),
                      "keeper": pa.array(out_keepers, pa.string()),
                      "similarity": pa.array(out_sims, pa.float64()),
                      "reason": pa.array(out_reasons, pa.string())})
    return table.sort_by("id")


# ----------------------------------------------------------------------------- stage


class DedupStage(Stage):
    """Exact then MinHash-LSH near-duplicate removal (see module docstring).

    Columns added by :meth:`process`: ``dedup_cluster`` (string: the cluster's
    keeper id, the keeper included; null for a document in no cluster) and
    ``dedup_similarity`` (float64: 1.0 for an exact duplicate of the keeper,
    else estimated Jaccard to the keeper; null for keepers and singletons).
    Reasons: ``dedup.exact_duplicate``, ``dedup.near_duplicate``.
    """

    name = "dedup"
    Config = Config

    def fit(self, partitions: Partitions) -> dict[str, Any]:
        """Find duplicate clusters over all partitions; write
        ``work_dir/removed.parquet``.

        Returns:
            Manifest facts: hash names, seed, num_perm, bands, rows, threshold,
            n-gram sizes, keep rule, and counts (documents, exact_duplicates,
            near_duplicates, clusters, candidate_pairs, verified_edges,
            empty_after_normalization).

        Raises:
            ValueError: when a document id occurs twice.
        """
        config: Config = self.config
        cfg = config.model_dump()
        paths = [str(p) for p in partitions.paths]
        keys = partitions.map(exact_keys, [(p, cfg) for p in paths])
        ids = [i for k in keys for i in k["ids"]]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise ValueError(f"dedup: document id {dup!r} occurs more than once")
        lengths = np.concatenate([k["lengths"] for k in keys]) if keys else np.empty(0, np.int64)
        rank = preference_rank(ids, lengths, config.keep)
        if config.exact and ids:
            digests = np.frombuffer(b"".join(k["digests"] for k in keys), dtype="S16")
            exact_keeper = exact_groups(digests, rank)
        else:
            exact_keeper = np.arange(len(ids))

        lsh_rows = np.empty(0, np.int64)
        signatures = np.empty((0, config.num_perm), np.uint32)
        clusters, candidates, edges = None, 0, 0
        survivors = exact_keeper == np.arange(len(ids))
        if config.near:
            starts = np.cumsum([0] + [len(k["ids"]) for k in keys])
            items = [(p, cfg, np.flatnonzero(survivors[starts[i]:starts[i + 1]]))
                     for i, p in enumerate(paths)]
            results = partitions.map(partition_signatures, items)
            lsh_rows = np.concatenate([starts[i] + r for i, (r, _) in enumerate(results)]
                                      or [np.empty(0, np.int64)]).astype(np.int64)
            signatures = np.concatenate([s for _, s in results] or [signatures])
            clusters, candidates, edges = near_duplicate_edges(signatures, config)

        removed = assign_keepers(ids, rank, exact_keeper, lsh_rows, signatures, clusters)
        work_dir = Path(self.ctx.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        tmp = work_dir / f".{REMOVED_FILE}.{os.getpid()}.tmp"
        pq.write_table(removed, tmp)
        os.replace(tmp, work_dir / REMOVED_FILE)

        reasons = removed["reason"]
        return {
            "exact_hash": EXACT_HASH_NAME, "shingle_hash": SHINGLE_HASH_NAME,
            "seed": config.seed, "num_perm": config.num_perm, "num_bands": config.num_bands,
            "rows_per_band": config.rows_per_band, "jaccard_threshold": config.jaccard_threshold,
            "ngram_words": config.ngram_words, "ngram_chars": config.ngram_chars,
            "keep": config.keep, "documents": len(ids),
            "exact_duplicates": pc.sum(pc.equal(reasons, REASON_EXACT)).as_py() or 0,
            "near_duplicates": pc.sum(pc.equal(reasons, REASON_NEAR)).as_py() or 0,
            "clusters": reasons.null_count,  # one keeper row per cluster
            "candidate_pairs": candidates, "verified_edges": edges,
            "empty_after_normalization": int(survivors.sum()) - len(lsh_rows) if config.near else 0,
        }

    def _removed(self) -> pa.Table:
        """``removed.parquet``, read once per stage instance."""
        if getattr(self, "_removed_table", None) is None:
            path = Path(self.ctx.work_dir) / REMOVED_FILE
            if not path.exists():
                raise FileNotFoundError(f"dedup: {path} missing; run fit() before process()")
            self._removed_table = pq.read_table(path)
        return self._removed_table

    def process(self, table: pa.Table) -> pa.Table:
        """Join the partition's ids against ``removed.parquet``.

        Args:
            table: document table (n rows) with an ``id`` column.

        Returns:
            ``table`` plus ``dedup_cluster``, ``dedup_similarity``, ``keep``,
            ``reason`` (see class docstring), same rows and order.

        Raises:
            FileNotFoundError: when :meth:`fit` has not written its result.
        """
        removed = self._removed()
        index = pc.index_in(table["id"], value_set=removed["id"])
        cluster = removed["keeper"].take(index)
        similarity = removed["similarity"].take(index)
        reasons = removed["reason"].take(index)
        return with_decision(table, {"dedup_cluster": cluster, "dedup_similarity": similarity},
                             reasons.to_pylist())
