"""MinHash signatures for dedup: normalization, Chinese script folding,
shingles, the fixed shingle hash, datasketch-equal permutations, LSH band keys.

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
import unicodedata
from functools import lru_cache
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from stages.text import CJK_CHAR_CLASS, CJK_LANGS

SHINGLE_HASH_NAME = "poly64-fmix64-32 (tokens: code point | xxh3_64(word)) + datasketch affine32"
BAND_HASH_NAME = "band-poly64-fmix64"
UNKNOWN_LANGS = frozenset({"", "und", "unknown", "zxx"})
# Languages whose CJK text is never folded to Simplified Chinese (Japanese
# kanji and Korean hanja keep their forms).
NO_FOLD_LANGS = frozenset({"ja", "ko"})

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
_DIGIT_RE = re.compile(r"\d")
_CJK_RE2_GROUP = "([" + "".join(
    f"\\x{{{ord(a):x}}}-\\x{{{ord(b):x}}}" for a, b in re.findall("(.)-(.)", CJK_CHAR_CLASS)) + "])"


# ----------------------------------------------------------------------------- LSH


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


# Unicode punctuation, symbols, separators, "_" and the characters str.split()
# treats as whitespace, for RE2 (pyarrow.compute).
_NEAR_RE2 = r"[\p{P}\p{S}\p{Z}_\s\x{1c}-\x{1f}\x{85}]+"


def near_normalize_batch(texts: list[str]) -> list[str]:
    """``near_normalize(exact_normalize(t))`` for many raw texts at once, with
    NFKC and the punctuation/whitespace pass in Arrow (RE2, Unicode classes)
    and only ``casefold`` in Python; ~1.5x faster than the per-document path
    and equal to it on every document of /work/shared/corpus (tested on
    mixed samples). RE2's Unicode tables may be a different Unicode version
    than Python's ``unicodedata``.

    Args:
        texts: D raw texts (None is read as "").

    Returns:
        D normalized strings.
    """
    if not texts:
        return []
    arr = pc.utf8_normalize(pa.array([t or "" for t in texts], pa.string()), "NFKC")
    folded = pa.array([t.casefold() for t in arr.to_pylist()], pa.string())
    return pc.utf8_trim(pc.replace_substring_regex(folded, _NEAR_RE2, " "), " ").to_pylist()


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


# ----------------------------------------------------------------------------- Chinese script


FoldScript = Literal["none", "t2s", "tw2sp"]


@lru_cache(maxsize=4)
def _opencc(config: str):
    import opencc

    return opencc.OpenCC(config)


def fold_script(texts: list[str], fold: FoldScript) -> list[str]:
    """Fold Traditional Chinese to Simplified before character shingling.

    Args:
        texts: near-normalized texts.
        fold: ``none`` (unchanged), ``t2s`` (OpenCC character-level
            Traditional -> Simplified) or ``tw2sp`` (OpenCC Taiwan standard ->
            Simplified with mainland phrases, e.g. ``檔案`` -> ``文件``).
            Measured on the 703 zh_CN/zh_TW man-page pairs of
            /work/shared/corpus (character 5-gram Jaccard of the pair, median
            / share >= 0.8): none 0.32 / 0.7%, t2s 0.70 / 22.9%, tw2sp
            0.92 / 93.2% (docs/stages/dedup.md).

    Returns:
        The folded texts, same length and order. Simplified text passes
        through unchanged (OpenCC 1.1; ~5.5 M characters/s per core here).
    """
    if fold == "none":
        return list(texts)
    converter = _opencc(fold)
    return [converter.convert(t) for t in texts]


# ----------------------------------------------------------------------------- lines (CCNet)


def line_normalize(line: str) -> str:
    """Normalization of one line for line-level exact dedup, after CCNet's
    ``normalize_for_dedup`` (Wenzek et al. 2020): :func:`exact_normalize`
    (NFKC, casefold, whitespace), then :func:`near_normalize` (punctuation
    and symbols removed), then every decimal digit -> ``0``.
    ``"Page 12 of 40."`` -> ``"page 00 of 00"``."""
    return _DIGIT_RE.sub("0", near_normalize(exact_normalize(line)))


def line_hashes(text: str, min_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """The lines of a document that take part in line-level dedup.

    A line is a piece of ``text.split("\n")``; it takes part when its
    :func:`line_normalize` form has at least ``min_chars`` characters.

    Returns:
        ``(hashes uint64[k], line_numbers int32[k])``: ``xxh3_64`` of the
        normalized line's UTF-8 bytes, and the 0-based index of the line in
        ``text.split("\n")``, for the k taking part, in line order.
    """
    hashes, numbers = [], []
    h = xxhash.xxh3_64_intdigest
    for number, line in enumerate(text.split("\n")):
        if not line or line.isspace():
            continue
        normalized = line_normalize(line)
        if len(normalized) < min_chars:
            continue
        hashes.append(h(normalized.encode("utf-8")))
        numbers.append(number)
    return np.array(hashes, np.uint64), np.array(numbers, np.int32)


def remove_lines(text: str, line_numbers: list[int]) -> str:
    """``text`` without the lines (0-based indices into ``text.split("\n")``)
    in ``line_numbers``, the others joined by ``"\n"``."""
    drop = set(line_numbers)
    return "\n".join(line for i, line in enumerate(text.split("\n")) if i not in drop)
