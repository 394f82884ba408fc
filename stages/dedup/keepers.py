"""Which document of a duplicate group survives: the order-independent
keeper key ``(k1, k2, id)`` of every document, from the ``keep`` rule
(``longest``, ``smallest_id``, ``lowest_perplexity``), and the columns a
phase reads to compute it. The smallest key of a group is its keeper, so the
choice depends neither on input order nor on partitioning.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.base import view_columns


def keeper_keys(table: pa.Table, keep: str) -> tuple[np.ndarray, np.ndarray]:
    """The order-independent keeper key of each document: the keeper of a
    group is the member with the smallest ``(k1, k2, id)``.

    Args:
        table: n documents with ``text`` or ``chars`` (raw characters), and
            ``perplexity_value`` for ``lowest_perplexity``.
        keep: ``longest`` (k1 = -characters), ``smallest_id`` (k1 = k2 = 0),
            ``lowest_perplexity`` (k1 = perplexity, null last; k2 = -characters).

    Returns:
        ``(k1 float64[n], k2 int64[n])``.

    Raises:
        ValueError: ``lowest_perplexity`` without a ``perplexity_value`` column.
    """
    n = table.num_rows
    if "chars" in table.column_names:
        chars = table["chars"].to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        chars = pc.utf8_length(table["text"]).to_numpy(zero_copy_only=False).astype(np.int64)
    zeros_f, zeros_i = np.zeros(n, np.float64), np.zeros(n, np.int64)
    if keep == "longest":
        return -chars.astype(np.float64), zeros_i
    if keep == "smallest_id":
        return zeros_f, zeros_i
    if keep == "lowest_perplexity":
        if "perplexity_value" not in table.column_names:
            raise ValueError("dedup keep=lowest_perplexity needs the perplexity stage's "
                             "perplexity_value column (enable the perplexity stage)")
        ppl = pc.fill_null(table["perplexity_value"].cast(pa.float64()), np.inf)
        ppl = ppl.to_numpy(zero_copy_only=False).astype(np.float64)
        return np.where(np.isnan(ppl), np.inf, ppl), -chars
    raise ValueError(f"unknown keep rule {keep!r}")


def keeper_columns(path, keep: str) -> list[str]:
    """The columns a per-partition phase reads from ``path`` (a partition):
    ``id``, ``text``, those of ``chars``, ``langid_lang``, ``lang_hint``
    that exist, and ``perplexity_value`` for ``lowest_perplexity``."""
    names = view_columns(path)
    cols = ["id", "text"] + [c for c in ("chars", "langid_lang", "lang_hint") if c in names]
    if keep == "lowest_perplexity" and "perplexity_value" in names:
        cols.append("perplexity_value")
    return cols
