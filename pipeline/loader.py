"""``create_dataset``: a ``mindspore.dataset`` pipeline over a published version.

Each rank reads exactly its rows of the run's sample stream
(``pipeline.order``: epoch 0 in the build-time shuffled order, each later
epoch in its own seeded permutation, global step ``g`` = stream positions
``[g * global_batch, (g + 1) * global_batch)``), no shuffle at read time, no
wrap-around duplicates.

One dataset is the whole planned run: ``num_epochs`` passes over the version,
``num_steps(num_samples, global_batch, num_epochs)`` batches when started at
step 0. Rank ``r`` of ``N`` reads with

* epoch 0 only (``num_epochs=1``): ``DistributedSampler(N, r, shuffle=False)``
  whose child is ``SequentialSampler(start_index=first, num_samples=batches *
  global_batch)``: O(1) memory (a ``SubsetSampler`` over explicit indices costs
  ~0.5 s and a Python list per million rows, measured);
* several epochs: a ``SubsetSampler`` holding this rank's sample index for
  each of its stream positions as one int64 numpy array
  (:class:`StreamSampler`, computed by ``pipeline.order.stream_samples`` in
  ~3.5 s per 12.5 M positions): 8 bytes per position of this rank in Python
  plus 8 in MindSpore's copy while iterating, i.e. O(num_epochs * num_samples
  / dp_size) per rank (MindDataset accepts only its built-in samplers, so an
  O(1) keyed permutation cannot be handed to it as a function). When a rank
  reads more positions than the version has samples, the shard list is given
  ``readers`` times (MindRecord caps a subset at the files' rows), each copy
  opened again (:func:`required_open_files`).

**Resume, one skip per dataset.** A resume at ``start_step`` (or at
``consumed_samples`` after a batch-size ramp-up) starts the sampler at that
stream position: the skipped rows are never read and the dataset holds the
remaining batches (batch ``i`` is step ``start + i``). The returned dataset's
``set_init_step`` is guarded: on a fresh dataset (created at step 0) it
validates the step and applies MindSpore's own ``set_init_step`` (what
mindformers' trainer calls on resume; MindSpore 2.10 moves the skip into the
sampler, and the iterator needs an explicit ``num_epochs``, as ``Model.train``
gives it); on a dataset that already skipped (``start_step``,
``consumed_samples`` or an earlier call), any further call is a no-op with a
:class:`ResumeWarning`, so no step is skipped twice.

**A staged mixture** (``manifest["phases"]``): the rows are read phase after
phase, whole global steps per phase (:class:`pipeline.order.Stream`): phase
``k`` starts at step ``sum(num_samples_j // global_batch, j < k)`` by itself,
each phase's last incomplete global batch is not read, and the subset sampler
above is used (its O(positions per rank) memory) whatever ``num_epochs``. A
phase smaller than one global batch is refused. With ``consumed_samples`` off
the grid of ``global_batch`` (after a ramp-up), the schedule is laid on the
resumed run's steps, so no step mixes phases either. The returned dataset's
``mindcorpus_phases`` lists each phase's first step, steps and unread rows
(logged at INFO); empty without phases.

Columns: ``input_ids`` (int32[seq_length + 1]) and, in versions built since
document boundaries were added, ``actual_seq_len`` (int32[width]: where
documents end in the model input, mindformers' compressed end-of-document
format; see ``pipeline.packing.document_boundaries``). The manifest's
``columns`` maps each stored column to its row shape; a version without it
holds ``input_ids`` only.

Before MindSpore opens a shard, every shard and ``.db`` must exist with the
manifest's byte size (a truncated or replaced shard is caught by default), the
manifest must match its digest ``manifest.sha256`` when present, with
``check_sha256=True`` every shard's SHA-256 must equal the manifest's, and
the process's open-file limit must cover the shards (:func:`check_open_files`).

Imports nothing from ``stages/``. MindSpore is imported inside
:func:`create_dataset`, so finding a version
(:func:`pipeline.location.resolve_version`) and reading its manifest
(:func:`pipeline.manifest.load_manifest` with ``check_samples``) stay cheap
for the lineage lookup and the CLI.
"""

from __future__ import annotations

import logging
import os
import resource
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from common.checks import check_int
from common.io import sha256_file
from pipeline import layout
from pipeline.location import resolve_version
from pipeline.manifest import load_manifest
from pipeline.order import Stream, check_dp

COLUMN = "input_ids"
log = logging.getLogger(__name__)

# Open files MindDataset keeps per shard while iterating: 2 with 1 worker, 3
# with 2 (counted in /proc/self/fd over a 40-shard version, MindSpore 2.10,
# sequential and subset samplers alike; docs/loader_and_lineage.md). Taken as
# 1 + num_parallel_workers, an extrapolation beyond 2 workers.
FILES_PER_SHARD_BASE = 1
# Head room on top: 25 % and 64 descriptors for the rest of the training
# process (logs, checkpoints, sockets, a second dataset); our choice.
OPEN_FILES_MARGIN = 1.25
OPEN_FILES_RESERVE = 64
# The soft limit most Linux distributions start a shell with (systemd,
# /etc/security/limits.conf defaults); what the builder warns against.
TYPICAL_OPEN_FILES_LIMIT = 1024


class ResumeWarning(UserWarning):
    """A resume request that was ignored because the dataset already resumed."""


def required_open_files(num_shards: int, num_parallel_workers: int = 1, readers: int = 1) -> int:
    """Open files one rank needs to read ``num_shards`` shards through
    ``readers`` MindDatasets (each opens every shard; see
    :func:`create_dataset`): ``ceil(readers * num_shards * (1 +
    num_parallel_workers) * 1.25) + 64`` (per-shard count measured, margin and
    reserve our choice: see the constants).

    Raises:
        ValueError: ``num_shards < 0``, ``num_parallel_workers < 1`` or ``readers < 1``.
    """
    check_int("num_shards", num_shards, 0)
    check_int("num_parallel_workers", num_parallel_workers, 1)
    check_int("readers", readers, 1)
    per_shard = FILES_PER_SHARD_BASE + num_parallel_workers
    return -(-readers * num_shards * per_shard * int(OPEN_FILES_MARGIN * 100) // 100) + OPEN_FILES_RESERVE


def open_files_warning(num_shards: int, limit: int = TYPICAL_OPEN_FILES_LIMIT) -> str | None:
    """The builder's warning when reading ``num_shards`` shards with one worker
    needs more than ``limit`` open files (None when it fits)."""
    need = required_open_files(num_shards, 1)
    if need <= limit:
        return None
    return (f"{num_shards} shards need ~{need} open files per rank to read (MindDataset keeps 2-3 per shard), "
            f"over the common limit of {limit}: raise it on the training hosts (ulimit -n {need}) or build "
            f"fewer, bigger shards (output.max_shard_bytes)")


def check_open_files(num_shards: int, num_parallel_workers: int = 1, readers: int = 1) -> int:
    """Make sure this process may open the files reading ``num_shards`` shards
    (through ``readers`` MindDatasets) needs (:func:`required_open_files`).
    When the soft ``RLIMIT_NOFILE`` is
    lower, raise it (up to the hard limit; logged at INFO); return the soft
    limit in force.

    Raises:
        OSError: the hard limit (or, if raising fails, the soft limit) is below
            the need; the message names the shards, the need, both limits and
            the fixes (``ulimit -n``, fewer bigger shards via
            ``output.max_shard_bytes``).
    """
    need = required_open_files(num_shards, num_parallel_workers, readers)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    fix = (f"reading {num_shards} shards{f' x {readers} readers' if readers > 1 else ''} with "
           f"{num_parallel_workers} worker(s) needs ~{need} open files "
           f"(MindDataset keeps {FILES_PER_SHARD_BASE + num_parallel_workers} per shard, plus margin), "
           f"the soft limit is {soft} and the hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard}: "
           f"run 'ulimit -n {need}' (or raise the hard limit in /etc/security/limits.conf) before training, "
           f"or rebuild with fewer, bigger shards (output.max_shard_bytes)")
    if hard != resource.RLIM_INFINITY and hard < need:
        raise OSError(fix)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError) as exc:
        raise OSError(f"{fix} (raising the soft limit failed: {exc})") from None
    log.info("raised the open-file soft limit from %d to %d for %d shards", soft, need, num_shards)
    return need


def _stream_sampler(indices: np.ndarray):
    """A ``SubsetSampler`` over ``indices`` (int64[n]) that keeps the numpy
    array (MindSpore's own constructor turns it into a Python list, checking
    every element: ~2 s and ~36 bytes per index). MindDataset accepts only its
    built-in sampler classes, hence a subclass."""
    from mindspore.dataset.engine import samplers

    class StreamSampler(samplers.SubsetSampler):
        def __init__(self, ids: np.ndarray):  # pylint: disable=super-init-not-called
            self.indices = ids
            samplers.BuiltinSampler.__init__(self, None)

    return StreamSampler(np.ascontiguousarray(indices, dtype=np.int64))


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
    num_epochs: int = 1,
    consumed_samples: int | None = None,
):
    """A ``mindspore.dataset`` pipeline yielding rank ``dp_rank``'s batches of
    the whole planned run.

    Each item is ``{"input_ids": int32[global_batch // dp_size, seq_length + 1],
    "actual_seq_len": int32[global_batch // dp_size, width]}`` (the columns the
    version stores, in that order, or ``columns``; mindformers' pretraining
    row: the model takes ``input_ids[:, :-1]`` as inputs and ``[:, 1:]`` as
    labels; ``actual_seq_len`` row ``i`` lists the ends of the documents in
    row ``i``'s inputs, last = seq_length, padded by repeating it). With the
    tuple iterator, ``batch[0]`` is always ``input_ids``.

    Batch ``i`` of the dataset (counting from 0 at the stream's start, as
    MindSpore's ``set_init_step`` does) holds the stream positions ``first +
    i * global_batch + dp_rank + k * dp_size``, ``first = consumed_samples %
    global_batch`` (0 without ``consumed_samples``): with ``start_step``,
    batch ``i`` is global step ``i``, i.e.
    ``pipeline.order.rank_samples(i, global_batch, dp_rank, dp_size,
    num_samples, seed)``. The dataset has ``(num_epochs * num_samples -
    first) // global_batch`` batches, the same on every rank, and a resume
    starts the iterator at batch ``start_step`` (or ``consumed_samples //
    global_batch``) through MindSpore's ``set_init_step``: iteration yields
    only the remaining batches, ``get_dataset_size()`` stays the full count,
    ``get_init_step()`` is the resume step. Iterating the dataset a second
    time (``num_epochs=2`` on the iterator, or a trainer's epoch loop) repeats
    the run from the start: let ``num_epochs`` here cover the whole run.

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
        seed: keys the permutations of epochs 1, 2, ... (``pipeline.order``);
            epoch 0 is the build's order whatever the seed. ``lineage`` must
            be given the same seed for steps past epoch 0.
        start_step: resume at this global step (all steps of ``global_batch``
            so far). Must be < the run's step count.
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
        num_epochs: passes over the version the run may take (1 = the
            version once, as before); the stream ends after the last complete
            global batch of ``num_epochs * num_samples`` samples.
        consumed_samples: resume after this many samples (the sum of the
            global batches trained so far, e.g. after a batch-size ramp-up);
            exclusive with ``start_step``.

    Raises:
        FileNotFoundError: no such version, or a shard file or ``.db`` missing.
        OSError: the open-file limit cannot cover the shards
            (:func:`check_open_files`).
        ValueError: a corrupt or edited manifest (its digest differs), a
            shard whose size (or, with ``check_sha256``, digest) differs from
            the manifest, bad ``global_batch``/``dp_rank``/``dp_size`` (see
            ``pipeline.order.check_dp``), ``num_parallel_workers`` outside
            ``[1, os.cpu_count()]``, ``prefetch_size < 1``, ``seed < 0``,
            ``num_epochs < 1``, both ``start_step`` and ``consumed_samples``,
            fewer samples than one global batch, a resume at or past the
            run's last step, or a manifest/shard mismatch.
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
    check_int("num_epochs", num_epochs, 1)
    if consumed_samples is not None:
        check_int("consumed_samples", consumed_samples, 0)
        if start_step:
            raise ValueError("give start_step or consumed_samples, not both")
    position = start_step * global_batch if consumed_samples is None else consumed_samples

    version_dir = resolve_version(version, corpora_root, config)
    manifest = load_manifest(version_dir, require_digest=check_sha256, check_samples=True)
    num_samples = manifest["num_samples"]
    if num_samples < global_batch:
        raise ValueError(f"{version_dir}: {num_samples} samples hold no complete global batch of {global_batch}")
    try:
        stream = Stream.of(manifest, global_batch, seed, first_position=position)
    except ValueError as exc:
        raise ValueError(f"{version_dir}: {exc}") from None
    first, init_step = position % global_batch, position // global_batch
    batches = (stream.total_positions(num_epochs) - first) // global_batch
    if init_step >= batches:
        what = f"start_step {start_step}" if consumed_samples is None else f"consumed_samples {consumed_samples}"
        raise ValueError(f"{what} is past the last step ({batches - 1}) of {num_epochs} epoch(s) of {version_dir} "
                         f"at global_batch {global_batch}")
    stored = stored_columns(manifest)
    if columns is None:
        columns = list(stored)
    columns = [COLUMN, *(c for c in columns if c != COLUMN)] if COLUMN in columns else list(columns)
    unknown = [c for c in columns if c not in stored]
    if unknown or not columns:
        raise KeyError(f"{version_dir}: no column(s) {unknown or columns}; stored: {list(stored)}")
    # A schedule of mixture phases skips each phase's last incomplete batch:
    # its positions are not the row numbers, so it always takes the subset sampler.
    one_epoch = not stream.phases and first + batches * global_batch <= num_samples
    rank_positions = batches * per_rank_batch
    # MindRecord refuses a SubsetSampler with more indices than the files it
    # reads hold rows (measured), so the shard list is given `readers` times
    # (the indices stay < num_samples: rows of the first copy); each copy is
    # opened again. One MindDataset, not a concatenation of several: MindSpore
    # moves set_init_step's skip into the sampler of a single MindDataset, but
    # reads the skipped rows through a ConcatDataset (219 s instead of 0.2 s to
    # step 5000 at batch 512; measured, docs/loader_and_lineage.md).
    readers = 1 if one_epoch else -(-rank_positions // num_samples)
    check_open_files(len(manifest["shards"]), num_parallel_workers, readers)
    paths = check_shards(version_dir, manifest, check_sha256=check_sha256)

    import mindspore.dataset as ds

    ds.config.set_prefetch_size(prefetch_size)
    # A resume starts the sampler at the resume position: the skipped rows are
    # never read, and the dataset holds the remaining batches (MindSpore's
    # set_init_step would need an explicit num_epochs on every iterator:
    # with the default -1 it fails with "reset step must be less than
    # dataset_size * num_epochs", measured on 2.10).
    start = first + init_step * global_batch
    if one_epoch:  # O(1) built-in samplers
        sampler = ds.DistributedSampler(num_shards=dp_size, shard_id=dp_rank, shuffle=False)
        sampler.add_child(ds.SequentialSampler(start_index=start, num_samples=(batches - init_step) * global_batch))
    else:
        positions = np.arange(start + dp_rank, first + batches * global_batch, dp_size, dtype=np.int64)
        sampler = _stream_sampler(stream.samples(positions))
        del positions
    dataset = ds.MindDataset(paths * readers, columns_list=columns, sampler=sampler,
                             num_parallel_workers=num_parallel_workers)
    dataset = dataset.batch(per_rank_batch, drop_remainder=True, num_parallel_workers=num_parallel_workers)
    # MindDataset requires identical metadata (schema included) in all files, so
    # one look at the first batch checks every shard's row length (~0.2 s).
    shapes, types_ = dataset.output_shapes(), dataset.output_types()
    expected = [[per_rank_batch, *stored[c]] for c in columns]
    if shapes != expected or types_ != [np.int32] * len(columns):
        want = ", ".join(f"{c} int32{e}" for c, e in zip(columns, expected))
        raise ValueError(f"{version_dir}: batches are {types_}{shapes}, expected int32{expected[0]} "
                         f"({want}) from the manifest")
    _guard_resume(dataset, batches, f"{version_dir.name} rank {dp_rank}/{dp_size}")
    # The schedule of a staged mixture at this global batch (pipeline.order.Stream.schedule).
    dataset.mindcorpus_phases = stream.schedule()
    if stream.phases:
        log.info("%s: mixture phases %s", version_dir.name, ", ".join(
            f"{p['name']} from step {p['first_step']} ({p['steps']} steps, {p['unread_samples']} samples unread)"
            for p in stream.schedule()))
    if init_step:
        dataset._mindcorpus_init_step = init_step
        log.info("%s rank %d/%d: resuming at step %d of %d", version_dir.name, dp_rank, dp_size, init_step, batches)
    return dataset


def _guard_resume(dataset, batches: int, name: str) -> None:
    """Replace ``dataset.set_init_step`` by a guard: the first call with a
    step > 0 validates it (``0 <= step < batches``) and applies it with
    MindSpore's own method; any later call is a no-op with a ResumeWarning
    (logged too), so a trainer that also resumes cannot skip twice."""
    native = type(dataset).set_init_step

    def set_init_step(self, init_step):
        applied = getattr(self, "_mindcorpus_init_step", 0)
        if applied:
            message = (f"{name}: set_init_step({init_step}) ignored: this dataset already resumed at step "
                       f"{applied} (create_dataset start_step/consumed_samples or an earlier set_init_step); "
                       f"applying it again would skip {init_step} more steps")
            warnings.warn(message, ResumeWarning, stacklevel=2)
            log.warning(message)
            return
        if isinstance(init_step, bool) or not isinstance(init_step, (int, np.integer)) \
                or not 0 <= int(init_step) < batches:
            raise ValueError(f"{name}: set_init_step needs an int in [0, {batches}), got {init_step!r}")
        if int(init_step):
            native(self, int(init_step))
            self._mindcorpus_init_step = int(init_step)
            log.info("%s: resuming at step %d of %d", name, int(init_step), batches)

    dataset.set_init_step = types.MethodType(set_init_step, dataset)


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
