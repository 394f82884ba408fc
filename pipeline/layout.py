"""The layout of a version directory: every file and folder name, defined once.

Every module that writes or reads a version names its files through the
constants and functions here (tests/pipeline/test_layout.py fails on a file
name literal anywhere else in ``pipeline/``, ``stages/``, ``bench/`` or
``scripts/``)::

    manifest.json  manifest.sha256  config.yaml  tokenizer.json
    shards/corpus-SSSSS.mindrecord (+ .db)   lineage/part-SSSSS.parquet
    shifted/corpus-SSSSS.mindrecord (+ .db)  megatron/corpus_text_document.{bin,idx}
    lineage_by_doc/  documents/  excerpts/  decisions/<stage>/   (part-NNNNN.parquet)
    quarantine.jsonl  tokenizer_report/tokenizer_report.{md,json,html}
    report.html  run.log.jsonl

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
``documents.parquet``, ...) are read through the same functions
(:func:`table_file_v1`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.hashing import id_hash

MANIFEST = "manifest.json"
# The manifest's own digest, in sha256sum format (pipeline.manifest).
MANIFEST_DIGEST = "manifest.sha256"
CONFIG = "config.yaml"
TOKENIZER = "tokenizer.json"
QUARANTINE = "quarantine.jsonl"
REPORT = "report.html"
# The structured log of the build: the same name in the work directory
# (pipeline.runlog) and in the version (copied at publish).
RUN_LOG = "run.log.jsonl"
TOKENIZER_REPORT_DIR = "tokenizer_report"
# tokenizer_report.{md,json,html} inside TOKENIZER_REPORT_DIR (and in the
# --out folder of `python -m pipeline tokenizer-report`).
TOKENIZER_REPORT_STEM = "tokenizer_report"
SHARDS = "shards"
SHARD_PREFIX = "corpus"
SHARD_SUFFIX = ".mindrecord"
# MindRecord's index of a shard: MindSpore's FileWriter writes <shard>.db.
SHARD_INDEX_SUFFIX = ".db"
# output.formats (docs/loader_and_lineage.md, "Formats"): mindformers' packed
# columns in shifted/ (same file names as shards/: its directory scan takes
# names ending in mindrecord\d*), and one Megatron indexed dataset.
SHIFTED = "shifted"
MEGATRON = "megatron"
MEGATRON_PREFIX = "corpus_text_document"
MEGATRON_BIN_SUFFIX = ".bin"
MEGATRON_IDX_SUFFIX = ".idx"
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


def shard_name(index: int, prefix: str = SHARD_PREFIX) -> str:
    """Name of shard ``index`` relative to the version directory,
    e.g. ``shards/corpus-00000.mindrecord``."""
    return f"{SHARDS}/{prefix}-{index:05d}{SHARD_SUFFIX}"


def shifted_shard_name(index: int, prefix: str = SHARD_PREFIX) -> str:
    """Name of ``mindrecord_shifted`` shard ``index`` (the same rows as
    :func:`shard_name` ``(index)``), e.g. ``shifted/corpus-00000.mindrecord``."""
    return f"{SHIFTED}/{prefix}-{index:05d}{SHARD_SUFFIX}"


def megatron_prefix() -> str:
    """The Megatron dataset's path prefix relative to the version directory
    (mindformers' ``data_path`` entry): ``megatron/corpus_text_document``."""
    return f"{MEGATRON}/{MEGATRON_PREFIX}"


def megatron_bin() -> str:
    """``megatron/corpus_text_document.bin`` (the token stream)."""
    return megatron_prefix() + MEGATRON_BIN_SUFFIX


def megatron_idx() -> str:
    """``megatron/corpus_text_document.idx`` (the sequence index)."""
    return megatron_prefix() + MEGATRON_IDX_SUFFIX


def shard_index(shard_path: str | Path) -> Path:
    """The MindRecord index file of a shard: ``<shard path>.db``."""
    return Path(f"{shard_path}{SHARD_INDEX_SUFFIX}")


def id_part(doc_id: str, num_parts: int) -> int:
    """The part of an id-keyed table that holds ``doc_id``: the low bits of
    xxh64(UTF-8 id, seed "part") (:func:`common.hashing.id_hash`).
    ``num_parts`` must be a power of two."""
    return id_hash(doc_id, _PART_SEED) & (num_parts - 1)


def id_parts(doc_ids, num_parts: int):
    """:func:`id_part` of each id (int64 numpy array)."""
    import numpy as np

    mask = num_parts - 1
    return np.fromiter((id_hash(d, _PART_SEED) & mask for d in doc_ids), dtype=np.int64, count=len(doc_ids))


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


def table_file_v1(version_dir: Path, table: str, stage: str | None = None) -> Path:
    """The single file of a table in a version of manifest format 1:
    ``<table>.parquet`` (``lineage.parquet``, ``documents.parquet``, ...), or
    ``decisions/<stage>.parquet``."""
    if table == DECISIONS:
        return Path(version_dir) / DECISIONS / f"{stage}.parquet"
    return Path(version_dir) / f"{table}.parquet"


def table_parts(version_dir: Path, table: str, stage: str | None = None) -> list[Path]:
    """Every part of a table, in part order ([] when the version has none);
    a format-1 version's single file counts as one part."""
    folder = table_dir(version_dir, table, stage)
    if folder.is_dir():
        return sorted(folder.glob("part-*.parquet"))
    legacy = table_file_v1(version_dir, table, stage)
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


def lineage_parts_for(version_dir: Path, manifest: dict[str, Any], first: int, stop: int) -> list[Path]:
    """The lineage files holding samples ``first .. stop - 1`` (in order)."""
    folder = Path(version_dir) / LINEAGE
    if not folder.is_dir():
        return [table_file_v1(version_dir, LINEAGE)]
    out, start = [], 0
    for number, shard in enumerate(manifest["shards"]):
        end = start + int(shard["rows"])
        if end > first and start < stop:
            out.append(folder / part_name(number))
        start = end
    return out
