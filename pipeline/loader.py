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
format; see ``stages.packing.document_boundaries``). The manifest's
``columns`` maps each stored column to its row shape; a version without it
holds ``input_ids`` only.

Imports nothing from ``stages/``. MindSpore is imported inside
:func:`create_dataset`, so :func:`resolve_version` and :func:`read_manifest`
are cheap for the lineage lookup and the CLI.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.order import check_dp, num_steps

MANIFEST = "manifest.json"
COLUMN = "input_ids"


def resolve_version(version: str | Path, corpora_root: str | Path = "corpora") -> Path:
    """The directory of a published version.

    ``version`` is a directory holding ``manifest.json``, or a version name
    under ``corpora_root``.

    Raises:
        FileNotFoundError: neither place holds a ``manifest.json``.
    """
    candidates = [Path(version), Path(corpora_root) / str(version)]
    for candidate in candidates:
        if (candidate / MANIFEST).is_file():
            return candidate
    looked = " or ".join(str(c / MANIFEST) for c in candidates)
    raise FileNotFoundError(f"no corpus version {str(version)!r}: looked for {looked}")


def read_manifest(version_dir: str | Path) -> dict[str, Any]:
    """Read and check the parts of ``manifest.json`` the loader relies on.

    Returns:
        The parsed manifest.
    Raises:
        FileNotFoundError: no ``manifest.json``.
        ValueError: ``seq_length`` not an int >= 1, ``num_samples`` not an
            int >= 0, ``shards`` empty or an entry without ``name``/``rows``, or
            the shards' ``rows`` do not add up to ``num_samples``.
    """
    path = Path(version_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{version_dir} is not a corpus version (no {MANIFEST})")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for key, minimum in (("seq_length", 1), ("num_samples", 0)):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{path}: {key} must be an int >= {minimum}, got {value!r}")
    shards = manifest.get("shards")
    if not shards or not all(isinstance(s, dict) and "name" in s and "rows" in s for s in shards):
        raise ValueError(f"{path}: shards must be a non-empty list of {{name, rows, ...}}")
    total = sum(int(s["rows"]) for s in shards)
    if total != manifest["num_samples"]:
        raise ValueError(f"{path}: shards hold {total} rows but num_samples is {manifest['num_samples']}")
    return manifest


def check_shards(version_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """Paths of the manifest's shards, in manifest order, after checking that each
    data file and its ``.db`` index exist and that each file holds the
    manifest's ``rows`` (from its index; no row is read).

    The row length is checked on the built dataset (see :func:`create_dataset`);
    content checksums are :func:`pipeline.writer.verify_shards`' job, since
    hashing every byte on every rank at every start would be slow.
    ``mindspore.mindrecord.FileReader`` is not used here: it costs ~0.25 s per
    8k-row shard, ``MindDataset.get_dataset_size`` ~0.05 s (measured).

    Raises:
        FileNotFoundError: a data file or ``.db`` is missing.
        ValueError: a file's row count differs from the manifest.
    """
    import mindspore.dataset as ds

    paths = []
    for shard in manifest["shards"]:
        path = Path(version_dir) / shard["name"]
        for needed in (path, Path(f"{path}.db")):
            if not needed.is_file():
                raise FileNotFoundError(f"shard file {needed} is missing")
        rows = ds.MindDataset([str(path)], columns_list=[COLUMN], shuffle=False).get_dataset_size()
        if rows != shard["rows"]:
            raise ValueError(f"{path}: holds {rows} rows, manifest says {shard['rows']}")
        paths.append(str(path))
    return paths


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def create_dataset(
    version: str | Path,
    global_batch: int,
    dp_rank: int = 0,
    dp_size: int = 1,
    num_parallel_workers: int = 1,
    prefetch_size: int = 16,
    seed: int = 0,
    start_step: int = 0,
    corpora_root: str | Path = "corpora",
    columns: list[str] | tuple[str, ...] | None = None,
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
        corpora_root: where version names are looked up.
        columns: the columns to read, default every column the version stores
            (``input_ids`` first). Reading only ``["input_ids"]`` skips the
            boundaries.

    Raises:
        FileNotFoundError: no such version, or a shard file or ``.db`` missing.
        ValueError: bad ``global_batch``/``dp_rank``/``dp_size`` (see
            ``pipeline.order.check_dp``), ``num_parallel_workers`` outside
            ``[1, os.cpu_count()]``, ``prefetch_size < 1``, ``seed < 0``,
            fewer samples than one global batch, ``start_step`` not in
            ``[0, num_steps)``, or a manifest/shard mismatch.
        TypeError: a non-int ``global_batch``/``dp_rank``/``dp_size``.
        KeyError: a requested column the version does not store.
    """
    per_rank_batch = check_dp(global_batch, dp_rank, dp_size)
    cpus = os.cpu_count() or 1
    _check_int("num_parallel_workers", num_parallel_workers, 1)
    if num_parallel_workers > cpus:
        raise ValueError(f"num_parallel_workers must be <= {cpus} (the CPU count), got {num_parallel_workers}")
    _check_int("prefetch_size", prefetch_size, 1)
    _check_int("seed", seed, 0)
    _check_int("start_step", start_step, 0)

    version_dir = resolve_version(version, corpora_root)
    manifest = read_manifest(version_dir)
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
    paths = check_shards(version_dir, manifest)

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
