"""MinHash signatures for dedup: shingles, the fixed shingle hash,
datasketch-equal permutations, LSH band keys (the normalization and script
folding before shingling: :mod:`stages.dedup.normalize`).

Everything here is a pure function of its arguments (no files, no config
object), so a signature made in one process equals the one made in another
(tested with a spawned worker). See docs/stages/dedup.md.

Hash functions (fixed; named in the manifest facts):

* shingles: ``poly64-fmix64-32``: a polynomial rolling hash over the shingle's
  tokens, ``h = sum_k t_k * M^(n-1-k) mod 2^64`` with ``M = 0x100000001B3`` (the
  64-bit FNV prime), where a token ``t`` is a Unicode code point (character
  shingles) or ``xxh3_64`` of the word's UTF-8 bytes (word shingles); then the
  MurmurHash3 ``fmix64`` finalizer, low 32 bits. Permutations are datasketch
  2.x's ``affine32`` scheme (``fmix32``, then ``a * h + b mod 2^32`` with ``a``
  odd, drawn from ``numpy.random.RandomState(seed)``), so a signature equals
  ``datasketch.MinHash(num_perm, seed, scheme="affine32")`` fed the same 32-bit
  shingle hashes, in any process.
* LSH band keys: ``band-poly64-fmix64``: per band ``b`` (0-based) the
  polynomial ``h = (b + 1) * M^r + sum_j v_j * M^(r-1-j) mod 2^64`` over the
  band's ``r`` signature values ``v_j``, then ``fmix64``.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from stages.text import CJK_CHAR_CLASS

SHINGLE_HASH_NAME = "poly64-fmix64-32 (tokens: code point | xxh3_64(word)) + datasketch affine32"
BAND_HASH_NAME = "band-poly64-fmix64"

_FNV_PRIME_64 = np.uint64(0x100000001B3)
_SHINGLES_PER_CHUNK = 16384  # columns of the (num_perm x chunk) permutation matrix
_TOKEN_RE = re.compile(rf"[{CJK_CHAR_CLASS}]|[^\s{CJK_CHAR_CLASS}]+")
_CJK_RE2_GROUP = "([" + "".join(
    f"\\x{{{ord(a):x}}}-\\x{{{ord(b):x}}}" for a, b in re.findall("(.)-(.)", CJK_CHAR_CLASS)) + "])"


# ----------------------------------------------------------------------------- shingles


def shingle_tokens(near_normalized: list[str], char_shingles: bool) -> tuple[np.ndarray, np.ndarray]:
    """The token sequences that shingles are made of, for many documents.

    Args:
        near_normalized: D outputs of :func:`stages.dedup.normalize.near_normalize`.
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
    # Every CJK character becomes a word of its own, then split on spaces
    # (RE2 in Arrow; equal to _TOKEN_RE.findall on space-separated text).
    spaced = pc.replace_substring_regex(pa.array(near_normalized, pa.string()), _CJK_RE2_GROUP, " \\1 ")
    words = pc.utf8_split_whitespace(pc.utf8_trim_whitespace(spaced))
    lengths = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
    empty = np.array([t == "" for t in near_normalized], bool)
    lengths[empty] = 0  # "" splits into [""]
    flat = pc.list_flatten(pc.filter(words, pa.array(~empty)))
    encoded = pc.dictionary_encode(flat).combine_chunks() if isinstance(flat, pa.ChunkedArray) \
        else pc.dictionary_encode(flat)
    h = xxhash.xxh3_64_intdigest
    vocabulary = encoded.dictionary.to_pylist()
    word_hashes = np.fromiter((h(w.encode("utf-8")) for w in vocabulary), np.uint64, len(vocabulary))
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return word_hashes[indices], lengths


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
        near_normalized: output of :func:`stages.dedup.normalize.near_normalize`.
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


# ----------------------------------------------------------------------------- LSH band keys


def band_keys(signatures: np.ndarray, num_bands: int, rows_per_band: int) -> np.ndarray:
    """LSH bucket keys: uint64[D, num_bands], column b the :data:`BAND_HASH_NAME`
    hash of ``signatures[:, b*r:(b+1)*r]`` (the band index is mixed in, so equal
    values in different bands give different keys). Two documents share a
    bucket in band b exactly when their r values in that band are equal (up to
    64-bit collisions, ~D^2/2^65 per band).

    Args:
        signatures: uint32[D, num_bands * rows_per_band].

    Raises:
        ValueError: when the signature width is not ``num_bands * rows_per_band``.
    """
    signatures = np.asarray(signatures, np.uint32)
    if signatures.ndim != 2 or signatures.shape[1] != num_bands * rows_per_band:
        raise ValueError(f"signatures of shape {signatures.shape} for {num_bands} x {rows_per_band} bands")
    keys = np.empty((signatures.shape[0], num_bands), np.uint64)
    with np.errstate(over="ignore"):
        for band in range(num_bands):
            h = np.full(signatures.shape[0], band + 1, np.uint64)
            for j in range(band * rows_per_band, (band + 1) * rows_per_band):
                h *= _FNV_PRIME_64
                h += signatures[:, j].astype(np.uint64)
            keys[:, band] = _fmix64(h)
    return keys
