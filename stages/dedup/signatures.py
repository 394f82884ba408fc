"""Phase 2 of dedup: the MinHash signatures of the exact survivors.

:func:`partition_signatures` (per partition) signs every kept document that
is not an exact duplicate (:func:`document_signatures`: near normalization,
script folding of CJK text, word or character shingles, MinHash), stores the
signatures per partition as ``.npy`` (:func:`load_signatures` reads them
back through a memory map) and spills the LSH band records
``(band, bucket key, document)`` by bucket key for :mod:`stages.dedup.lsh`.
:func:`document_shingle_sets` gives the exact shingle sets the same way, for
``verify: exact``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from common.io import atomic_path
from stages.base import read_kept
from stages.dedup.exchange import HANDLE_SHIFT, document_handles, skip_rows, write_spill
from stages.dedup.keepers import keeper_columns
from stages.dedup.minhash import band_keys, minhash_signatures, ngram_hashes, shingle_tokens
from stages.dedup.normalize import NO_FOLD_LANGS, fold_script, near_normalize_batch, uses_char_shingles

if TYPE_CHECKING:
    from stages.dedup.config import Config


def _shingle_texts(texts: list[str], langs: list[str | None], config: Config
                   ) -> tuple[list[str], np.ndarray]:
    """Near-normalized (and, for CJK, script-folded) texts and whether each
    uses character shingles: exactly what signatures are computed from."""
    normalized = near_normalize_batch(texts)
    char_mode = np.array([uses_char_shingles(t, lang) for t, lang in zip(normalized, langs)], bool)
    fold = config.fold_chinese_script
    if fold != "none":
        foldable = [i for i in np.flatnonzero(char_mode) if langs[i] not in NO_FOLD_LANGS]
        for i, t in zip(foldable, fold_script([normalized[i] for i in foldable], fold)):
            normalized[i] = t
    return normalized, char_mode


def _document_hashes(texts: list[str], langs: list[str | None], config: Config
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The shingle hashes of documents, one vectorized pass per shingle kind:
    a list of ``(positions int64[m], hashes uint32[S], offsets int64[m + 1])``
    (document ``positions[i]`` owns ``hashes[offsets[i]:offsets[i + 1]]``),
    documents empty after normalization left out."""
    normalized, char_mode = _shingle_texts(texts, langs, config)
    out = []
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
        out.append((members[nonempty].astype(np.int64), hashes, offsets))
    return out


def document_shingle_sets(texts: list[str], langs: list[str | None], config: Config) -> list[np.ndarray]:
    """Each document's set of shingle hashes (sorted unique uint32), from the
    same normalization, folding and shingles as its MinHash signature; empty
    for a text that is empty after normalization. All documents are hashed
    and sorted in one pass (``verify: exact`` calls it per band group)."""
    sets = [np.empty(0, np.uint32) for _ in texts]
    for positions, hashes, offsets in _document_hashes(texts, langs, config):
        owner = np.repeat(np.arange(len(positions), dtype=np.uint64), np.diff(offsets))
        keys = np.sort((owner << np.uint64(32)) | hashes.astype(np.uint64))  # by (owner, hash)
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]]  # (np.unique hashes: ~80x slower at 4 M here)
        bounds = np.searchsorted(keys >> np.uint64(32), np.arange(len(positions) + 1, dtype=np.uint64))
        values = (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        for i, p in enumerate(positions):
            sets[p] = values[bounds[i]:bounds[i + 1]]
    return sets


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A ∩ B| / |A ∪ B| of two sorted unique hash arrays (0.0 when both are empty)."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - inter
    return inter / union if union else 0.0


def document_signatures(texts: list[str], langs: list[str | None], config: Config
                        ) -> tuple[np.ndarray, np.ndarray]:
    """MinHash signatures of documents (pure; the same in any process).

    Args:
        texts: D raw texts; langs: D ``langid_lang`` values (None = unknown).
        config: the stage's :class:`~stages.dedup.config.Config` (its
            ``ngram_words``, ``ngram_chars``, ``num_bands``,
            ``rows_per_band``, ``seed``, ``fold_chinese_script``: the model's
            values, defaults included; a dict is not accepted).

    Returns:
        ``(positions int64[m], signatures uint32[m, num_perm])`` for the
        documents whose near-normalized text is not empty, in input order.
    """
    num_perm = config.num_perm
    positions, signatures = [], []
    for members, hashes, offsets in _document_hashes(texts, langs, config):
        positions.append(members)
        signatures.append(minhash_signatures(hashes, offsets, num_perm, config.seed))
    if not positions:
        return np.empty(0, np.int64), np.empty((0, num_perm), np.uint32)
    positions_all = np.concatenate(positions)
    order = np.argsort(positions_all, kind="stable")
    return positions_all[order].astype(np.int64), np.concatenate(signatures)[order]


def partition_signatures(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 2 over one partition: sign every kept row that is not an
    exact duplicate, store the signatures, spill the LSH band records.

    Args:
        item: ``path``, ``partition``, ``config`` (:class:`~stages.dedup.config.Config`),
            ``spill``, ``band_groups``,
            ``skip_files`` (the exact steps' ``skip`` spill: handles of the
            exact duplicates, by partition; they are not signed),
            ``signatures`` (directory).

    Writes:
        ``signatures/part-PPPPP.npy``: uint32[kept rows, num_perm], zero rows
        for documents not signed; ``spill/bands``: ``band`` uint16, ``key``
        uint64 (:func:`stages.dedup.minhash.band_keys`), ``g`` int64.

    Returns:
        ``{"signed": m, "empty": rows that were empty after normalization}``.
    """
    path, partition = item["path"], item["partition"]
    config: Config = item["config"]
    table = read_kept(path, keeper_columns(path, config.keep))
    n = table.num_rows
    rows = np.setdiff1d(np.arange(n), skip_rows(item["skip_files"], partition))
    texts = table["text"].take(pa.array(rows)).to_pylist()
    langs = (table["langid_lang"].take(pa.array(rows)).to_pylist() if "langid_lang" in table.column_names
             else [None] * len(rows))
    positions, signatures = document_signatures(texts, langs, config)
    signed = rows[positions]
    num_perm = config.num_perm
    dense = np.zeros((n, num_perm), np.uint32)
    dense[signed] = signatures
    out = Path(item["signatures"]) / f"part-{partition:05d}.npy"
    with atomic_path(out) as tmp, open(tmp, "wb") as fh:
        np.save(fh, dense)
    keys = band_keys(signatures, config.num_bands, config.rows_per_band)  # [m, bands]
    m = len(signed)
    records = pa.table({"band": np.tile(np.arange(config.num_bands, dtype=np.uint16), m),
                        "key": keys.ravel(), "g": np.repeat(document_handles(partition, signed), config.num_bands)})
    write_spill(records, keys.ravel(), item["band_groups"], Path(item["spill"]) / "bands", partition)
    return {"signed": m, "empty": len(rows) - m}


def load_signatures(directory: Path, handles: np.ndarray, num_perm: int) -> np.ndarray:
    """uint32[len(handles), num_perm]: the stored signatures of ``handles``,
    read partition by partition through a memory map (only touched pages)."""
    handles = np.asarray(handles, np.int64)
    out = np.empty((len(handles), num_perm), np.uint32)
    parts = handles >> np.int64(HANDLE_SHIFT)
    rows = handles & np.int64((1 << HANDLE_SHIFT) - 1)
    for p in np.unique(parts):
        sel = np.flatnonzero(parts == p)
        stored = np.load(directory / f"part-{int(p):05d}.npy", mmap_mode="r")
        out[sel] = stored[rows[sel]]
        del stored
    return out
