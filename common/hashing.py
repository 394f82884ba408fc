"""Seeded hashing of document ids: every deterministic, order-independent
random choice the build makes about a document.

A choice keyed by a hash of (id, seed), never by a position, is the same
whatever the number of workers, the partitioning or the input order (see
docs/architecture.md, "Determinism"). Who uses which:

* :func:`id_hash` (xxh64 of the UTF-8 id, seeded): the tokenizer's training
  draw and held-out split (``stages.tokenize``), the perplexity reference
  draw (``stages.perplexity``), the mixture's seeded document order
  (``stages.mixture``), the document order of the output
  (``pipeline.packing``), the parts of id-keyed tables (``pipeline.layout``,
  fixed seed) and the ingest's duplicate-id groups (seed 0).
* :func:`sample_rank` (blake2b): the examples ``inspect --stage`` shows.

The values are part of what a build produces: changing a function here
changes which documents are sampled, held out and where they land, so each
is pinned by a test with literal values (tests/common/test_hashing.py).

Imports ``xxhash`` (and numpy inside :func:`id_hashes`) only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import xxhash


def id_hash(doc_id: str, seed: int) -> int:
    """xxh64 of the UTF-8 document id, seeded by ``seed`` (taken mod 2^64):
    the deterministic, order-independent key used for sampling and ordering
    documents (tokenizer training sample, mixture, document order).

    Returns:
        An int in ``[0, 2^64)``.
    """
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)


def phase_seed(seed: int, phase: int) -> int:
    """The seed of mixture phase ``phase`` (0, 1, ...): ``seed`` itself for
    phase 0 (so a version without phases orders and samples as before), and
    ``(seed + phase * 0x9E3779B97F4A7C15) mod 2^64`` (the golden-ratio
    increment of SplitMix64) for later phases, so each phase draws its
    documents and orders its copies independently of the others
    (``stages.mixture``, ``pipeline.assemble``).

    Raises:
        ValueError: ``phase < 0``.
    """
    if phase < 0:
        raise ValueError(f"phase must be >= 0, got {phase}")
    return (seed + phase * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF if phase else seed


def id_hashes(doc_ids: Sequence[str], seed: int):
    """:func:`id_hash` of each id, as a numpy ``uint64[len(doc_ids)]`` (numpy
    is imported here, not with the module: ``pipeline.layout`` and the
    version lookup import this module and stay light)."""
    import numpy as np

    return np.fromiter((id_hash(d, seed) for d in doc_ids), dtype=np.uint64, count=len(doc_ids))


def sample_rank(doc_id: str, seed: int) -> bytes:
    """The 8-byte ``blake2b(f"{seed}:{doc_id}")``: documents sorted by it are
    a seeded random sample that does not depend on the order they are read
    in, and a larger sample extends a smaller one (``pipeline.examples``)."""
    return hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest()
