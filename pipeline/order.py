"""The one definition of which samples form global step N, and which rank gets which.

Samples are numbered by their global row index in the version's shards (shards
in manifest order, rows in file order). They were globally shuffled when the
version was built, so reading them in index order is a random order.

* Global step ``s`` is the ``global_batch`` consecutive samples
  ``[s * global_batch, (s + 1) * global_batch)``.
* The incomplete tail (``num_samples % global_batch`` samples) is never used:
  no step wraps around to the start, so no sample is seen twice in one pass.
* Within a step, data-parallel rank ``r`` of ``dp_size`` gets every
  ``dp_size``-th sample starting at ``r``:
  ``s * global_batch + r + k * dp_size`` for ``k = 0 .. global_batch // dp_size - 1``.
  This is the layout of MindSpore's ``DistributedSampler(shuffle=False)``
  (rank r reads rows r, r + N, ...), which lets ``pipeline.loader`` express a
  rank's rows with two O(1) samplers instead of a list of indices.

Epochs: there is no epoch parameter. One pass is ``num_steps`` steps; a job that
trains past it re-reads the same pre-shuffled order (acceptable for now:
pretraining usually runs under one epoch, and repeats chosen by the mixture are
already materialised as separate samples at build time).

Pure Python (and :mod:`common.checks`); imported by the loader, the lineage lookup
and the CLI.
"""

from __future__ import annotations

from common.checks import check_int


def check_dp(global_batch: int, dp_rank: int, dp_size: int) -> int:
    """Validate a data-parallel split; return the per-rank batch
    ``global_batch // dp_size``.

    Raises:
        TypeError: a non-int argument.
        ValueError: ``global_batch < 1``, ``dp_size < 1``, ``dp_rank`` outside
            ``[0, dp_size)``, or ``global_batch % dp_size != 0``.
    """
    check_int("global_batch", global_batch, 1, type_error=True)
    check_int("dp_size", dp_size, 1, type_error=True)
    check_int("dp_rank", dp_rank, 0, type_error=True)
    if dp_rank >= dp_size:
        raise ValueError(f"dp_rank must be in [0, {dp_size}), got {dp_rank}")
    if global_batch % dp_size:
        raise ValueError(f"global_batch {global_batch} is not divisible by dp_size {dp_size}")
    return global_batch // dp_size


def num_steps(num_samples: int, global_batch: int) -> int:
    """Number of complete global steps in ``num_samples`` samples:
    ``num_samples // global_batch`` (the incomplete tail is dropped, never wrapped).

    Raises:
        TypeError / ValueError: ``num_samples < 0`` or ``global_batch < 1``.
    """
    check_int("num_samples", num_samples, 0, type_error=True)
    check_int("global_batch", global_batch, 1, type_error=True)
    return num_samples // global_batch


def step_samples(step: int, global_batch: int) -> range:
    """Global sample indices of step ``step``:
    ``range(step * global_batch, (step + 1) * global_batch)``.

    Does not know ``num_samples``; check ``step < num_steps(...)`` first.

    Raises:
        TypeError / ValueError: ``step < 0`` or ``global_batch < 1``.
    """
    check_int("step", step, 0, type_error=True)
    check_int("global_batch", global_batch, 1, type_error=True)
    return range(step * global_batch, (step + 1) * global_batch)


def rank_samples(step: int, global_batch: int, dp_rank: int, dp_size: int) -> list[int]:
    """Global sample indices that rank ``dp_rank`` of ``dp_size`` reads at step
    ``step``, in batch order: ``step * global_batch + dp_rank + k * dp_size``.

    The lists of all ranks are disjoint and their union is
    :func:`step_samples` ``(step, global_batch)``; each has
    ``global_batch // dp_size`` entries.

    Raises:
        TypeError / ValueError: see :func:`check_dp`; ``step < 0``.
    """
    check_dp(global_batch, dp_rank, dp_size)
    samples = step_samples(step, global_batch)
    return list(samples[dp_rank::dp_size])
