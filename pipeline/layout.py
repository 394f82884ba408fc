"""The layout of a version directory: every file and folder name, defined once.

A version of any size is a set of files no one of which has to hold the
corpus: the shards, and tables split into *parts* that separate tasks write.

* ``lineage/part-SSSSS.parquet``: one part per shard ``SSSSS``, the lineage
  rows of that shard's samples (sorted by ``sample_index``, ``segment``).
  Which part holds sample ``i`` follows from the manifest's shard rows.
* id-keyed tables, split by a hash of the document id into ``K`` parts
  (``K`` a power of two, recorded in the manifest's ``layout``), each part
  sorted by id: ``documents/``, ``excerpts/``, ``lineage_by_doc/`` and
  ``decisions/<stage>/``. Document ``d`` is in part :func:`id_part` ``(d, K)``;
  two versions with different ``K`` still line up (part ``j`` of the larger
  one maps to part ``j mod K_small`` of the smaller), which ``diff`` uses.

Versions of manifest format 1 (one file per table: ``lineage.parquet``,
``documents.parquet``, ...) are read through the same functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xxhash

MANIFEST = "manifest.json"
CONFIG = "config.yaml"
TOKENIZER = "tokenizer.json"
QUARANTINE = "quarantine.jsonl"
REPORT = "report.html"
RUN_LOG = "run.log.jsonl"
TOKENIZER_REPORT_DIR = "tokenizer_report"
SHARDS = "shards"
LINEAGE = "lineage"
LINEAGE_BY_DOC = "lineage_by_doc"
DOCUMENTS = "documents"
EXCERPTS = "excerpts"
DECISIONS = "decisions"
ID_TABLES = (DOCUMENTS, EXCERPTS, LINEAGE_BY_DOC)

# Seed of the id hash that assigns documents to parts; fixed so that every
# version splits the same id the same way.
_PART_SEED = 0x70617274  # "part"


def part_name(index: int) -> str:
    """``part-NNNNN.parquet``."""
    return f"part-{index:05d}.parquet"


def id_part(doc_id: str, num_parts: int) -> int:
    """The part of an id-keyed table that holds ``doc_id``: the low bits of
    xxh64(UTF-8 id, seed "part"). ``num_parts`` must be a power of two."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=_PART_SEED) & (num_parts - 1)


def id_parts(doc_ids, num_parts: int):
    """:func:`id_part` of each id (int64 numpy array)."""
    import numpy as np

    mask = num_parts - 1
    return np.fromiter((xxhash.xxh64_intdigest(d.encode("utf-8"), seed=_PART_SEED) & mask for d in doc_ids),
                       dtype=np.int64, count=len(doc_ids))


def parts_for(num_bytes: int, part_bytes: int) -> int:
    """Parts for a table of ``num_bytes``: the smallest power of two that
    keeps a part at about ``part_bytes`` or less (at least 1)."""
    parts = 1
    while parts * part_bytes < num_bytes:
        parts *= 2
    return parts


def table_dir(version_dir: Path, table: str, stage: str | None = None) -> Path:
    """Folder of a split table (``decisions`` needs ``stage``)."""
    return Path(version_dir) / table / stage if table == DECISIONS else Path(version_dir) / table


def _legacy_file(version_dir: Path, table: str, stage: str | None) -> Path:
    if table == DECISIONS:
        return Path(version_dir) / DECISIONS / f"{stage}.parquet"
    return Path(version_dir) / f"{table}.parquet"


def table_parts(version_dir: Path, table: str, stage: str | None = None) -> list[Path]:
    """Every part of a table, in part order ([] when the version has none);
    a format-1 version's single file counts as one part."""
    folder = table_dir(version_dir, table, stage)
    if folder.is_dir():
        return sorted(folder.glob("part-*.parquet"))
    legacy = _legacy_file(version_dir, table, stage)
    return [legacy] if legacy.is_file() else []


def num_id_parts(manifest: dict[str, Any], table: str, stage: str | None = None) -> int:
    """``K`` of an id-keyed table from the manifest's ``layout`` (1 for a
    format-1 version, whose table is one file)."""
    layout = manifest.get("layout") or {}
    if table == DECISIONS:
        return int((layout.get("decisions_parts") or {}).get(stage, 1))
    return int(layout.get(f"{table}_parts", 1))


def id_table_part(version_dir: Path, manifest: dict[str, Any], table: str, doc_id: str,
                  stage: str | None = None) -> Path | None:
    """The part file of an id-keyed table that holds ``doc_id`` (None when the
    table is absent)."""
    parts = table_parts(version_dir, table, stage)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    k = num_id_parts(manifest, table, stage)
    if k != len(parts):
        raise ValueError(f"{table_dir(version_dir, table, stage)}: {len(parts)} parts, manifest layout says {k}")
    return parts[id_part(doc_id, k)]


def lineage_part_for(version_dir: Path, manifest: dict[str, Any], sample_index: int) -> tuple[int, Path]:
    """(shard number, lineage file) holding sample ``sample_index``, from the
    shard row counts of the manifest."""
    start = 0
    for number, shard in enumerate(manifest["shards"]):
        if sample_index < start + int(shard["rows"]):
            folder = Path(version_dir) / LINEAGE
            return number, (folder / part_name(number) if folder.is_dir() else Path(version_dir) / "lineage.parquet")
        start += int(shard["rows"])
    raise ValueError(f"sample {sample_index} is past the version's {start} samples")


def lineage_parts_for(version_dir: Path, manifest: dict[str, Any], first: int, stop: int) -> list[Path]:
    """The lineage files holding samples ``first .. stop - 1`` (in order)."""
    folder = Path(version_dir) / LINEAGE
    if not folder.is_dir():
        return [Path(version_dir) / "lineage.parquet"]
    out, start = [], 0
    for number, shard in enumerate(manifest["shards"]):
        end = start + int(shard["rows"])
        if end > first and start < stop:
            out.append(folder / part_name(number))
        start = end
    return out
