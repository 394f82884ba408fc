"""Which document of a duplicate group survives: the order-independent
keeper key ``(k1, k2, id)`` of every document, from the ``keep`` rule
(``longest`` by normalized length, ``smallest_id``, ``lowest_perplexity``),
and the columns a phase reads to compute it. The smallest key of a group is its keeper, so the
choice depends neither on input order nor on partitioning.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.base import view_columns
from stages.dedup.normalize import exact_normalize, near_lengths


def keeper_keys(table: pa.Table, keep: str, exact_normalized: list[str] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The order-independent keeper key of each document: the keeper of a
    group is the member with the smallest ``(k1, k2, id)``.

    "Length" is the normalized length L: characters of the text after the
    signatures' normalization (:func:`stages.dedup.normalize.near_lengths`:
    NFKC, casefold, punctuation and symbols to spaces, whitespace
    collapsed), so whitespace or punctuation padding adds nothing; among
    equal L the document with fewer raw characters R (``chars``, else the
    text's length) wins, i.e. the unpadded one, then the smallest id.

    Args:
        table: n documents with ``text`` (and ``chars`` when present), and
            ``perplexity_value`` for ``lowest_perplexity``.
        keep: ``longest`` (k1 = -L, k2 = R), ``smallest_id`` (k1 = k2 = 0),
            ``lowest_perplexity`` (k1 = perplexity, null last; k2 = -L * 2^32
            + R, i.e. longest then least padded; R < 2^32).
        exact_normalized: the n texts' :func:`~stages.dedup.normalize.exact_normalize`
            outputs when the caller has them (phase 1 does), else computed.

    Returns:
        ``(k1 float64[n], k2 int64[n])``.

    Raises:
        ValueError: ``lowest_perplexity`` without a ``perplexity_value`` column.
    """
    n = table.num_rows
    zeros_f, zeros_i = np.zeros(n, np.float64), np.zeros(n, np.int64)
    if keep == "smallest_id":
        return zeros_f, zeros_i
    if keep not in ("longest", "lowest_perplexity"):
        raise ValueError(f"unknown keep rule {keep!r}")
    if keep == "lowest_perplexity" and "perplexity_value" not in table.column_names:
        raise ValueError("dedup keep=lowest_perplexity needs the perplexity stage's "
                         "perplexity_value column (enable the perplexity stage)")
    if "chars" in table.column_names:
        raw = table["chars"].to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        raw = pc.utf8_length(table["text"]).to_numpy(zero_copy_only=False).astype(np.int64)
    if exact_normalized is None:
        exact_normalized = [exact_normalize(t or "") for t in table["text"].to_pylist()]
    length = near_lengths(exact_normalized)
    if keep == "longest":
        return -length.astype(np.float64), raw
    ppl = pc.fill_null(table["perplexity_value"].cast(pa.float64()), np.inf)
    ppl = ppl.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.where(np.isnan(ppl), np.inf, ppl), -(length << np.int64(32)) + raw


def keeper_columns(path, keep: str) -> list[str]:
    """The columns a per-partition phase reads from ``path`` (a partition):
    ``id``, ``text``, those of ``chars``, ``langid_lang``, ``lang_hint``
    that exist, and ``perplexity_value`` for ``lowest_perplexity``."""
    names = view_columns(path)
    cols = ["id", "text"] + [c for c in ("chars", "langid_lang", "lang_hint") if c in names]
    if keep == "lowest_perplexity" and "perplexity_value" in names:
        cols.append("perplexity_value")
    return cols
