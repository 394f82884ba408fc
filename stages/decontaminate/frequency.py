"""Corpus document frequency of the index's grams, counted in ``fit`` over a
seeded, bounded sample of the corpus: a gram of a benchmark item that is in
many corpus documents is boilerplate (a licence line, a common formula), not a
leak, and would otherwise make every such document look partly contaminated.

:func:`partition_frequency` runs per partition on the build's executor
(``partitions.map``); it keeps a document when ``id_hash(id, seed) / 2**64 <
rate`` (the same documents whatever the partitioning or worker count), reads
only ``id`` and ``text``, and returns sparse counts over the index's keys:
O(index + one partition's sample) memory per task, the corpus never held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from common.hashing import id_hashes
from stages.base import read_kept
from stages.decontaminate.index import Index
from stages.decontaminate.normalize import gram_hashes, units

_INDEXES: dict[tuple[str, int], Index] = {}


def _index(folder: str) -> Index:
    """The index in ``folder``, read once per process (again when rewritten)."""
    key = (folder, (Path(folder) / "index.npz").stat().st_mtime_ns)
    if key not in _INDEXES:
        _INDEXES.clear()
        _INDEXES[key] = Index.load(Path(folder))
    return _INDEXES[key]


def partition_frequency(task: dict[str, Any]) -> dict[str, Any]:
    """Sampled documents of one partition and, for each index key found in
    them, in how many.

    Args:
        task: ``{"path": PartitionRef, "index": folder of the index,
            "rate": share of documents sampled (0..1], "seed": int}``.

    Returns:
        ``{"documents": sampled documents, "keys": int64[k] positions in
        index.keys, "counts": int64[k] documents holding each}``.
    """
    index = _index(task["index"])
    table = read_kept(task["path"], ["id", "text"])
    if not table.num_rows:
        return {"documents": 0, "keys": np.empty(0, np.int64), "counts": np.empty(0, np.int64)}
    ids = table["id"].to_pylist()
    rate = float(task["rate"])
    if rate < 1.0:
        chosen = np.flatnonzero(id_hashes(ids, task["seed"]) < np.uint64(min(rate, 1.0) * 2.0 ** 64 - 1))
    else:
        chosen = np.arange(len(ids))
    texts = table["text"]
    lengths = index.gram_lengths
    found: list[np.ndarray] = []
    for i in chosen:
        h = units(texts[int(i)].as_py())[0]
        per_doc = []
        for n in lengths:
            per_doc.append(index.lookup(gram_hashes(h, n))[1])
        if per_doc:
            found.append(np.unique(np.concatenate(per_doc)))
    if found:
        k, c = np.unique(np.concatenate(found), return_counts=True)
    else:
        k, c = np.empty(0, np.int64), np.empty(0, np.int64)
    return {"documents": int(len(chosen)), "keys": k.astype(np.int64), "counts": c.astype(np.int64)}
