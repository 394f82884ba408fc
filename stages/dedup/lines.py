"""Line-level exact dedup (CCNet, Wenzek et al. 2020), after document
dedup, on its survivors (``line_dedup: true``).

1. :func:`partition_lines` (per partition): the hashes of the normalized
   lines (:func:`line_normalize`, :func:`line_hashes`) of every surviving
   document, spilled by hash.
2. :func:`duplicate_lines` (per line group): each line's owner is the
   best-keyed document holding it; the other occurrences are removed.
3. :func:`partition_line_removals` (per partition): ``lines/<partition>``
   (``id, line``), which :meth:`stages.dedup.stage.DedupStage.process`
   applies with :func:`remove_lines`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import xxhash

from common.spill import read_bucket, write_buckets
from stages.base import read_kept
from stages.dedup.exchange import (document_handles, partition_of, read_spill, skip_rows, spill_files, write_atomic,
                                   write_spill)
from stages.dedup.keepers import keeper_columns, keeper_keys
from stages.dedup.normalize import exact_normalize, near_normalize

if TYPE_CHECKING:
    from stages.dedup.config import Config

REASON_LINES = "dedup.duplicate_lines"
LINE_HASH_NAME = "xxh3_64(nfkc+casefold+no_punctuation+digits_to_0)"
_DIGIT_RE = re.compile(r"\d")


# ----------------------------------------------------------------------------- normalized lines


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


# ----------------------------------------------------------------------------- phases


def _sorted_group_starts(table: pa.Table, group_columns: list[str],
                         order_columns: list[str]) -> tuple[pa.Table, np.ndarray]:
    """Sort ``table`` by group then order columns; return it and the row
    indices where a new group starts (plus the row count at the end)."""
    table = table.sort_by([(c, "ascending") for c in group_columns + order_columns])
    change = np.zeros(max(table.num_rows - 1, 0), bool)
    for c in group_columns:
        v = table[c].to_numpy()
        change |= v[1:] != v[:-1]
    return table, np.flatnonzero(np.r_[True, change, True]) if table.num_rows else np.zeros(1, np.int64)


def partition_lines(item: dict[str, Any]) -> dict[str, int]:
    """Worker phase 3 over one partition: spill the hashes of the lines that
    take part in line-level dedup (:func:`line_hashes`)
    of every document that survived document-level dedup and whose language
    (``langid_lang``, else ``lang_hint``) is not in ``line_skip_languages``.

    Args:
        item: ``path``, ``partition``, ``config`` (:class:`~stages.dedup.config.Config`:
            ``keep``, ``line_skip_languages``, ``line_min_chars``), ``spill``, ``line_groups``,
            ``skip_files`` (the final cluster records, by partition: members
            with a reason were removed as duplicates and take no part).

    Returns:
        ``{"lines": lines spilled, "documents": documents that took part}``.
    """
    path, partition = item["path"], item["partition"]
    config: Config = item["config"]
    table = read_kept(path, keeper_columns(path, config.keep))
    n = table.num_rows
    rows = np.setdiff1d(np.arange(n), skip_rows(item["skip_files"], partition, removed_only=True))
    k1, k2 = keeper_keys(table, config.keep)
    skip_langs = set(config.line_skip_languages)
    langs = table["langid_lang"].to_pylist() if "langid_lang" in table.column_names else [None] * n
    hints = table["lang_hint"].to_pylist() if "lang_hint" in table.column_names else [None] * n
    texts, ids = table["text"].to_pylist(), table["id"]
    hashes, numbers, owners = [], [], []
    documents = 0
    for r in rows.tolist():
        if (langs[r] or hints[r]) in skip_langs or hints[r] in skip_langs:
            continue
        h, lines = line_hashes(texts[r] or "", config.line_min_chars)
        if len(h):
            documents += 1
            hashes.append(h)
            numbers.append(lines)
            owners.append(np.full(len(h), r, np.int64))
    if not hashes:
        return {"lines": 0, "documents": 0}
    h, lines, owner = np.concatenate(hashes), np.concatenate(numbers), np.concatenate(owners)
    records = pa.table({"h": h, "k1": k1[owner], "k2": k2[owner], "id": ids.take(pa.array(owner)),
                        "g": document_handles(partition, owner), "line": lines})
    write_spill(records, h, item["line_groups"], Path(item["spill"]) / "lines", partition)
    return {"lines": len(h), "documents": documents}


def duplicate_lines(task: dict[str, Any]) -> int:
    """Worker: for each normalized line hash of one line spill group, the
    *owner* is the occurrence with the smallest ``(k1, k2, id, line)``; every
    occurrence of that line in another document is removed (repeats inside
    the owner document stay: the heuristics stage judges in-document
    repetition).

    Writes ``spill/line_removals/group-KKKKK.parquet`` (``id``, ``line``
    int32, ``g``) bucketed by partition. Returns the lines removed.
    """
    spill = Path(task["spill"])
    out = spill / "line_removals" / f"group-{task['group']:05d}.parquet"
    table = read_spill(spill / "lines", task["group"])
    if table is None:
        write_buckets(pa.table({"id": pa.array([], pa.string()), "line": pa.array([], pa.int32()),
                                "g": pa.array([], pa.int64())}), np.zeros(0, np.int64), out)
        return 0
    table, starts = _sorted_group_starts(table, ["h"], ["k1", "k2", "id", "line"])
    first = np.repeat(starts[:-1], np.diff(starts))
    g = table["g"].to_numpy()
    drop = np.flatnonzero(g != g[first])
    removals = pa.table({"id": table["id"].take(pa.array(drop)), "line": table["line"].take(pa.array(drop)),
                         "g": pa.array(g[drop], pa.int64())})
    write_buckets(removals, partition_of(g[drop]), out)
    return len(drop)


def partition_line_removals(task: dict[str, Any]) -> int:
    """Worker: ``lines/<name>`` for one partition (``id``, ``line``, sorted),
    when lines of it are removed. Returns the rows written."""
    files = spill_files(Path(task["spill"]) / "line_removals")
    table = read_bucket(files, task["partition"]) if files else None
    if table is None or table.num_rows == 0:
        return 0
    table = table.drop_columns(["g"]).sort_by([("id", "ascending"), ("line", "ascending")])
    write_atomic(table, Path(task["out"]))
    return table.num_rows
