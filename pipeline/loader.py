"""``create_dataset``: a ``mindspore.dataset`` pipeline over a published version.

Each rank reads exactly its rows of the steps it still has to train, in the
order of ``pipeline.order``: shards in manifest order, no shuffle at read time
(the samples were shuffled globally at build time), no wrap-around duplicates,
and a resume at ``start_step`` that does not read the skipped rows.

How: rank ``r`` of ``N`` is a ``DistributedSampler(N, r, shuffle=False)`` whose
child is a ``SequentialSampler(start_index=start_step * global_batch,
num_samples=(num_steps - start_step) * global_batch)``. The child yields the
remaining complete steps' rows in order; the parent keeps every N-th of them
starting at r, i.e. ``pipeline.order.rank_samples`` for each step. Because the
child's count is a multiple of N, the parent never pads by wrapping around.
Both samplers are O(1) in memory, unlike a ``SubsetSampler`` over an explicit
index list (~0.5 s and a Python list per million rows, measured).

Columns: ``input_ids`` (int32[seq_length + 1]) and, in versions built since
document boundaries were added, ``actual_seq_len`` (int32[width]: where
documents end in the model input, mindformers' compressed end-of-document
format; see ``pipeline.packing.document_boundaries``). The manifest's
``columns`` maps each stored column to its row shape; a version without it
holds ``input_ids`` only.

Before MindSpore opens a shard, every shard and ``.db`` must exist with the
manifest's byte size (a truncated or replaced shard is caught by default), the
manifest must match its digest ``manifest.sha256`` when present, and with
``check_sha256=True`` every shard's SHA-256 must equal the manifest's.

Imports nothing from ``stages/``. MindSpore is imported inside
:func:`create_dataset`, so finding a version
(:func:`pipeline.location.resolve_version`) and reading its manifest
(:func:`pipeline.manifest.load_manifest` with ``check_samples``) stay cheap
for the lineage lookup and the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from common.checks import check_int
from common.io import sha256_file
from pipeline import layout
from pipeline.location import resolve_version
from pipeline.manifest import load_manifest
from pipeline.order import check_dp, num_steps

COLUMN = "input_ids"


def _shard_path(version_dir: Path, name: str) -> Path:
    """``version_dir / name``, refusing names that leave the version
    directory (``../x``, absolute paths)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"{version_dir / layout.MANIFEST}: shard name {name!r} is outside the version directory")
    return Path(version_dir) / rel


def check_shards(version_dir: Path, manifest: dict[str, Any], check_sha256: bool = False) -> list[str]:
    """Paths of the manifest's shards, in manifest order, after checking that each
    data file and its ``.db`` index exist, that each data file has the
    manifest's ``bytes`` (when recorded) and holds the manifest's ``rows``
    (from its index; no row is read); with ``check_sha256`` also that the
    data file's and the ``.db``'s SHA-256 equal the manifest's ``sha256`` and
    ``db_sha256`` (reads every byte: ~3 s per GiB, measured warm on 2 CPUs).

    The row length is checked on the built dataset (see :func:`create_dataset`).
    ``mindspore.mindrecord.FileReader`` is not used here: it costs ~0.25 s per
    8k-row shard, ``MindDataset.get_dataset_size`` ~0.05 s (measured).

    Raises:
        FileNotFoundError: a data file or ``.db`` is missing.
        ValueError: a file's size, row count or digest differs from the
            manifest (the message names the file); the version was built
            without the ``mindrecord`` format (``output.formats``).
    """
    import mindspore.dataset as ds

    version_dir = Path(version_dir)
    if any("name" not in shard for shard in manifest["shards"]):
        raise ValueError(f"{version_dir} was built without the mindrecord format (output.formats: "
                         f"{sorted(manifest.get('formats') or {})}): this loader reads shards/; train on its other "
                         "formats with mindformers (docs/loader_and_lineage.md, \"Formats\")")
    shards = [(shard, _shard_path(version_dir, shard["name"])) for shard in manifest["shards"]]
    for shard, path in shards:  # every file before MindSpore opens any
        for needed in (path, layout.shard_index(path)):
            if not needed.is_file():
                raise FileNotFoundError(f"shard file {needed} is missing")
        size = path.stat().st_size
        if isinstance(shard.get("bytes"), int) and size != shard["bytes"]:
            raise ValueError(f"{path}: {size} bytes, the manifest says {shard['bytes']} (truncated or replaced)")
        if check_sha256:
            for file, key in ((path, "sha256"), (layout.shard_index(path), "db_sha256")):
                if key not in shard:
                    if key == "sha256":
                        raise ValueError(f"{version_dir / layout.MANIFEST}: shard {shard['name']} has no sha256")
                    continue
                if sha256_file(file) != shard[key]:
                    raise ValueError(f"{file}: SHA-256 differs from the manifest (corrupt or replaced)")
    paths = []
    for shard, path in shards:
        rows = ds.MindDataset([str(path)], columns_list=[COLUMN], shuffle=False).get_dataset_size()
        if rows != shard["rows"]:
            raise ValueError(f"{path}: holds {rows} rows, manifest says {shard['rows']}")
        paths.append(str(path))
    return paths


def create_dataset(
    version: str | Path,
    global_batch: int,
    dp_rank: int = 0,
    dp_size: int = 1,
    num_parallel_workers: int = 1,
    prefetch_size: int = 16,
    seed: int = 0,
    start_step: int = 0,
    corpora_root: str | Path | None = None,
    columns: list[str] | tuple[str, ...] | None = None,
    check_sha256: bool = False,
    config: str | Path | None = None,
):
    """A ``mindspore.dataset`` pipeline yielding rank ``dp_rank``'s batches.

    Each item is ``{"input_ids": int32[global_batch // dp_size, seq_length + 1],
    "actual_seq_len": int32[global_batch // dp_size, width]}`` (the columns the
    version stores, in that order, or ``columns``; mindformers' pretraining
    row: the model takes ``input_ids[:, :-1]`` as inputs and ``[:, 1:]`` as
    labels; ``actual_seq_len`` row ``i`` lists the ends of the documents in
    row ``i``'s inputs, last = seq_length, padded by repeating it). With the
    tuple iterator, ``batch[0]`` is always ``input_ids``. Batch ``i`` of the dataset is global step
    ``start_step + i``, holding ``pipeline.order.rank_samples(start_step + i,
    global_batch, dp_rank, dp_size)`` in that order. The dataset has
    ``num_steps(num_samples, global_batch) - start_step`` batches, the same on
    every rank; iterating it again (a further epoch) repeats those steps.
    Do not also call ``set_init_step`` on it: the resume is already applied.

    Args:
        version: a version name under ``corpora_root`` or a version directory.
        global_batch: samples per global step, over all ranks.
        dp_rank, dp_size: this rank and the data-parallel size.
        num_parallel_workers: MindDataset and batch workers, 1..CPU count
            (MindSpore rejects more). Measured ~equal speed with 1 and 2 workers
            on 2 CPUs at seq_length 2048 (docs/loader_and_lineage.md).
        prefetch_size: MindSpore's per-operation buffer queue, in batches/rows;
            16 is MindSpore's own default. Set through
            ``mindspore.dataset.config.set_prefetch_size``, which is
            process-global in MindSpore 2.10.
        seed: reserved. The read order does not depend on it (the samples were
            shuffled with the build seed); accepted so callers can pass their
            run seed without a signature change when a read-time option needs one.
        start_step: first global step to yield (resume); its rows and those of
            later steps are the only rows read.
        corpora_root: where version names are looked up; default
            ``$MINDCORPUS_CORPORA_DIR``, else the config's ``corpora_dir``
            (see :func:`pipeline.location.resolve_version`; the rule ``build`` uses).
        columns: the columns to read, default every column the version stores
            (``input_ids`` first). Reading only ``["input_ids"]`` skips the
            boundaries.
        check_sha256: before anything is read, hash every shard and ``.db``
            and compare with the manifest, and require ``manifest.sha256`` to
            match (~3 s per GiB on every rank that sets it, measured; e.g. set it on
            one rank per node). Without it, the manifest's digest (when
            present), every file's presence, each shard's byte size and row
            count are checked.
        config: the config whose ``corpora_dir`` applies (as ``--config``).

    Raises:
        FileNotFoundError: no such version, or a shard file or ``.db`` missing.
        ValueError: a corrupt or edited manifest (its digest differs), a
            shard whose size (or, with ``check_sha256``, digest) differs from
            the manifest, bad ``global_batch``/``dp_rank``/``dp_size`` (see
            ``pipeline.order.check_dp``), ``num_parallel_workers`` outside
            ``[1, os.cpu_count()]``, ``prefetch_size < 1``, ``seed < 0``,
            fewer samples than one global batch, ``start_step`` not in
            ``[0, num_steps)``, or a manifest/shard mismatch.
        TypeError: a non-int ``global_batch``/``dp_rank``/``dp_size``.
        KeyError: a requested column the version does not store.
    """
    per_rank_batch = check_dp(global_batch, dp_rank, dp_size)
    cpus = os.cpu_count() or 1
    check_int("num_parallel_workers", num_parallel_workers, 1)
    if num_parallel_workers > cpus:
        raise ValueError(f"num_parallel_workers must be <= {cpus} (the CPU count), got {num_parallel_workers}")
    check_int("prefetch_size", prefetch_size, 1)
    check_int("seed", seed, 0)
    check_int("start_step", start_step, 0)

    version_dir = resolve_version(version, corpora_root, config)
    manifest = load_manifest(version_dir, require_digest=check_sha256, check_samples=True)
    steps = num_steps(manifest["num_samples"], global_batch)
    if steps == 0:
        raise ValueError(
            f"{version_dir}: {manifest['num_samples']} samples hold no complete global batch of {global_batch}"
        )
    if start_step >= steps:
        raise ValueError(f"start_step {start_step} is past the last step ({steps - 1}) of {version_dir}")
    stored = stored_columns(manifest)
    if columns is None:
        columns = list(stored)
    columns = [COLUMN, *(c for c in columns if c != COLUMN)] if COLUMN in columns else list(columns)
    unknown = [c for c in columns if c not in stored]
    if unknown or not columns:
        raise KeyError(f"{version_dir}: no column(s) {unknown or columns}; stored: {list(stored)}")
    paths = check_shards(version_dir, manifest, check_sha256=check_sha256)

    import mindspore.dataset as ds

    ds.config.set_prefetch_size(prefetch_size)
    sampler = ds.DistributedSampler(num_shards=dp_size, shard_id=dp_rank, shuffle=False)
    sampler.add_child(
        ds.SequentialSampler(start_index=start_step * global_batch, num_samples=(steps - start_step) * global_batch)
    )
    dataset = ds.MindDataset(paths, columns_list=columns, sampler=sampler, num_parallel_workers=num_parallel_workers)
    dataset = dataset.batch(per_rank_batch, drop_remainder=True, num_parallel_workers=num_parallel_workers)
    # MindDataset requires identical metadata (schema included) in all files, so
    # one look at the first batch checks every shard's row length (~0.2 s).
    shapes, types = dataset.output_shapes(), dataset.output_types()
    expected = [[per_rank_batch, *stored[c]] for c in columns]
    if shapes != expected or types != [np.int32] * len(columns):
        want = ", ".join(f"{c} int32{e}" for c, e in zip(columns, expected))
        raise ValueError(f"{version_dir}: batches are {types}{shapes}, expected int32{expected[0]} "
                         f"({want}) from the manifest")
    return dataset


def stored_columns(manifest: dict[str, Any]) -> dict[str, list[int]]:
    """Column name -> row shape of a version's shards, from the manifest's
    ``columns`` (``{"input_ids": [seq_length + 1]}`` for versions without it).

    Raises:
        ValueError: ``columns`` present but without ``input_ids`` of shape
            ``[seq_length + 1]``.
    """
    columns = manifest.get("columns") or {COLUMN: [manifest["seq_length"] + 1]}
    if list(columns.get(COLUMN, [])) != [manifest["seq_length"] + 1]:
        raise ValueError(f"manifest columns {columns} lack input_ids [{manifest['seq_length'] + 1}]")
    return {name: list(shape) for name, shape in columns.items()}
