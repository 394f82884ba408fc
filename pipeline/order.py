"""The one definition of which samples form global step N, and which rank gets which.

Samples are numbered by their global row index in the version's shards (shards
in manifest order, rows in file order). They were globally shuffled when the
version was built, so reading them in index order is a random order.

**One sample stream, epoch after epoch.** Stream position ``q`` (0, 1, 2, ...)
is in epoch ``e = q // num_samples`` at offset ``p = q % num_samples`` and
holds sample ``epoch_sample(p, e)``:

* epoch 0 reads the samples in index order (``p`` itself): the build-time
  shuffle, so a version's first pass and its lineage are what they always were;
* epoch ``e >= 1`` reads them in a seeded pseudo-random permutation of
  ``[0, num_samples)``: a keyed 8-round Feistel network on the smallest even
  number of bits covering ``num_samples``, with cycle-walking to stay inside
  the domain (Black and Rogaway, "Ciphers with Arbitrary Finite Domains",
  CT-RSA 2002; Luby and Rackoff 1988 for the Feistel construction; the same
  idea as format-preserving encryption, NIST SP 800-38G). Round keys come from
  BLAKE2b of ``(seed, epoch)``; the round function is the splitmix64 finaliser
  (Steele, Lea and Flood, OOPSLA 2014). Sample-at-position and its inverse are
  O(1) per index, vectorised in numpy, and no permutation is stored. The
  permutation is a bijection by construction, not a uniformly random one;
  it only has to break the co-occurrence of samples between epochs (their
  content order is already random from the build shuffle).

**Steps.** Global step ``g`` is stream positions ``[g * global_batch,
(g + 1) * global_batch)``. Nothing is dropped at an epoch's end: the last
incomplete batch of epoch ``e`` is completed with the first samples of epoch
``e + 1`` (as Megatron-LM's multi-epoch sample index does), so every sample is
read once per epoch and none is lost forever. For ``global_step <
num_samples // global_batch`` this is exactly the old order. A step that
straddles an epoch boundary may, rarely, hold one sample twice (once from each
epoch); the stream only ends after the run's last complete step.

A resume from ``consumed_samples`` (batch-size ramp-up: the sum of the global
batches trained so far) starts at stream position ``consumed_samples``; a
resume from ``start_step`` with one global batch is position
``start_step * global_batch``. Both continue the same stream.

**Ranks.** Within a step starting at position ``q0``, data-parallel rank ``r``
of ``dp_size`` gets positions ``q0 + r + k * dp_size`` for ``k = 0 ..
global_batch // dp_size - 1``: MindSpore's ``DistributedSampler(shuffle=False)``
layout (rank r reads rows r, r + N, ...).

**A staged mixture** (``manifest["phases"]``, ``mixture.phases``): :class:`Stream`
reads phase 0's rows, then phase 1's, ..., whole global steps per phase, so no
step mixes two phases (see its docstring); without phases it is exactly the
functions here.

Pure Python, numpy and :mod:`common.checks`; imported by the loader, the lineage
lookup and the CLI.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

from common.checks import check_int

FEISTEL_ROUNDS = 8  # 4 suffice for a pseudo-random permutation (Luby-Rackoff); 8 for margin
ORDER_VERSION = "mindcorpus-order-v1"  # part of every round key: a new order scheme gets a new name
_CHUNK = 1 << 16  # indices per vectorised piece (512 KiB of uint64: stays in cache)


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


def num_steps(num_samples: int, global_batch: int, num_epochs: int = 1) -> int:
    """Number of complete global steps in ``num_epochs`` passes over
    ``num_samples`` samples: ``num_epochs * num_samples // global_batch``
    (only the stream's very end is dropped, never wrapped).

    Raises:
        TypeError / ValueError: ``num_samples < 0``, ``global_batch < 1`` or
            ``num_epochs < 1``.
    """
    check_int("num_samples", num_samples, 0, type_error=True)
    check_int("global_batch", global_batch, 1, type_error=True)
    check_int("num_epochs", num_epochs, 1, type_error=True)
    return num_epochs * num_samples // global_batch


def _round_keys(seed: int, epoch: int, phase: int | None = None) -> np.ndarray:
    """uint64[FEISTEL_ROUNDS]: the round keys of epoch ``epoch`` under ``seed``
    (BLAKE2b of ``ORDER_VERSION:seed:epoch``, plus ``:phase<k>`` for mixture
    phase ``k`` of a schedule; the same on every platform)."""
    text = f"{ORDER_VERSION}:{seed}:{epoch}" + ("" if phase is None else f":phase{phase}")
    digest = hashlib.blake2b(text.encode(), digest_size=8 * FEISTEL_ROUNDS).digest()
    return np.frombuffer(digest, dtype="<u8").astype(np.uint64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _half_bits(num_samples: int) -> int:
    """Bits per Feistel half: the domain is ``[0, 4 ** h)``, ``4 ** h >= num_samples``,
    so fewer than 4 of 4 ** h points lie outside per point inside (cycle-walking
    needs < 4 rounds of the network per index on average)."""
    return max(1, ((max(num_samples - 1, 1)).bit_length() + 1) // 2)


def _feistel(x: np.ndarray, keys: np.ndarray, half: int, inverse: bool) -> np.ndarray:
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    left, right = x >> shift, x & mask
    if not inverse:
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
    else:
        for key in keys[::-1]:
            left, right = right ^ (_mix(left ^ key) & mask), left
    return (left << shift) | right


def _permute(offsets: np.ndarray, num_samples: int, seed: int, epoch: int, inverse: bool,
             phase: int | None = None) -> np.ndarray:
    """The epoch's permutation (or its inverse) of ``offsets`` in ``[0, num_samples)``."""
    keys = _round_keys(seed, epoch, phase)
    half = _half_bits(num_samples)
    out = np.empty(len(offsets), dtype=np.int64)
    with np.errstate(over="ignore"):
        for first in range(0, len(offsets), _CHUNK):  # cache-sized pieces: ~2x faster than whole arrays
            chunk = _feistel(offsets[first:first + _CHUNK].astype(np.uint64), keys, half, inverse)
            outside = np.flatnonzero(chunk >= np.uint64(num_samples))
            while outside.size:  # cycle-walking: apply again until inside the domain
                chunk[outside] = _feistel(chunk[outside], keys, half, inverse)
                outside = outside[chunk[outside] >= np.uint64(num_samples)]
            out[first:first + _CHUNK] = chunk
    return out


def stream_samples(positions: Iterable[int] | np.ndarray, num_samples: int, seed: int = 0) -> np.ndarray:
    """Sample index at each stream position: int64[n] for int64[n] positions.

    ``position // num_samples`` is the epoch, ``position % num_samples`` the
    offset in it; epoch 0 maps the offset to itself, epoch ``e >= 1`` through
    its keyed permutation. O(1) memory per index beyond the in/out arrays; 3.5 s
    for 12.5 M indices of a 100 M-sample epoch (numpy, 8 rounds, 2-CPU dev machine, measured).

    Raises:
        TypeError / ValueError: ``num_samples < 1``, ``seed < 0``, a negative position.
    """
    check_int("num_samples", num_samples, 1, type_error=True)
    check_int("seed", seed, 0, type_error=True)
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    if positions.size and int(positions.min()) < 0:
        raise ValueError(f"stream positions must be >= 0, got {int(positions.min())}")
    epochs, offsets = np.divmod(positions, num_samples)
    out = offsets.copy()
    for epoch in np.unique(epochs):
        if epoch == 0:
            continue
        where = epochs == epoch
        out[where] = _permute(offsets[where], num_samples, seed, int(epoch), inverse=False)
    return out


def epoch_positions(sample_index: int, num_samples: int, num_epochs: int, seed: int = 0) -> list[int]:
    """Stream positions of sample ``sample_index`` in epochs ``0 .. num_epochs - 1``
    (one per epoch, ascending): the inverse of :func:`stream_samples`.

    Raises:
        TypeError / ValueError: ``sample_index`` outside ``[0, num_samples)``,
            ``num_epochs < 1``, ``seed < 0``.
    """
    check_int("num_samples", num_samples, 1, type_error=True)
    check_int("num_epochs", num_epochs, 1, type_error=True)
    check_int("sample_index", sample_index, 0, type_error=True)
    check_int("seed", seed, 0, type_error=True)
    if sample_index >= num_samples:
        raise ValueError(f"sample_index must be < num_samples {num_samples}, got {sample_index}")
    out = [sample_index]
    for epoch in range(1, num_epochs):
        offset = int(_permute(np.array([sample_index]), num_samples, seed, epoch, inverse=True)[0])
        out.append(epoch * num_samples + offset)
    return out


def step_positions(step: int, global_batch: int, start_position: int | None = None) -> range:
    """Stream positions of global step ``step``: ``range(step * global_batch,
    (step + 1) * global_batch)``, or ``global_batch`` positions from
    ``start_position`` (the step's ``consumed_samples`` in a batch-size ramp-up).

    Raises:
        TypeError / ValueError: ``step < 0``, ``global_batch < 1``, ``start_position < 0``.
    """
    check_int("step", step, 0, type_error=True)
    check_int("global_batch", global_batch, 1, type_error=True)
    if start_position is None:
        start_position = step * global_batch
    check_int("start_position", start_position, 0, type_error=True)
    return range(start_position, start_position + global_batch)


def step_samples(step: int, global_batch: int, num_samples: int | None = None, seed: int = 0,
                 start_position: int | None = None) -> list[int]:
    """Global sample indices of step ``step``, in position order.

    With ``num_samples`` the step may lie in any epoch. Without it the
    positions themselves are returned, which are the sample indices only for
    a step inside epoch 0 (``step < num_steps(num_samples, global_batch)``).

    Raises:
        TypeError / ValueError: see :func:`step_positions` and :func:`stream_samples`.
    """
    positions = step_positions(step, global_batch, start_position)
    if num_samples is None:
        return list(positions)
    return stream_samples(np.arange(positions.start, positions.stop), num_samples, seed).tolist()


def rank_samples(step: int, global_batch: int, dp_rank: int, dp_size: int, num_samples: int | None = None,
                 seed: int = 0, start_position: int | None = None) -> list[int]:
    """Global sample indices that rank ``dp_rank`` of ``dp_size`` reads at step
    ``step``, in batch order: the samples at positions
    ``q0 + dp_rank + k * dp_size`` (``q0`` the step's first position).

    The lists of all ranks are disjoint as positions and their union is
    :func:`step_samples`; each has ``global_batch // dp_size`` entries.
    ``num_samples``: as in :func:`step_samples`.

    Raises:
        TypeError / ValueError: see :func:`check_dp`; ``step < 0``.
    """
    check_dp(global_batch, dp_rank, dp_size)
    samples = step_samples(step, global_batch, num_samples, seed, start_position)
    return samples[dp_rank::dp_size]


def sample_position(position: int, global_batch: int, dp_size: int = 1,
                    first_position: int = 0) -> dict[str, int]:
    """Where stream position ``position`` is read when steps of ``global_batch``
    start at ``first_position``: ``step`` (counted from that start), ``dp_rank``
    and ``row`` in that rank's batch. The inverse of :func:`rank_samples` on
    positions.

    Raises:
        ValueError: ``position < first_position``; see :func:`check_dp`.
    """
    check_dp(global_batch, 0, dp_size)
    if position < first_position:
        raise ValueError(f"position {position} is before the first position {first_position}")
    step, offset = divmod(position - first_position, global_batch)
    return {"step": step, "dp_rank": offset % dp_size, "row": offset // dp_size}


class Stream:
    """The sample stream of a version for one run: which sample each stream
    position reads, for versions with or without a mixture schedule.

    Without phases (``manifest["phases"]`` absent) it is exactly the
    functions above: position ``q`` reads :func:`stream_samples` ``(q)``,
    an epoch is ``num_samples`` positions.

    **With phases** (a staged mixture: ``phases`` = per phase ``name``,
    ``first_sample``, ``num_samples``, rows written phase after phase) the
    run reads phase 0, then phase 1, ..., and **no global step mixes two
    phases**: phase ``k`` gives ``steps_k = num_samples_k // global_batch``
    whole steps, and its last ``num_samples_k % global_batch`` samples are
    not read in epoch 0 (``unread_samples``; fewer than one global batch per
    phase, as Megatron-LM drops an incomplete last batch). So phase ``k``
    starts at global step ``sum(steps_j, j < k)`` (``first_step``), whatever
    the global batch. An epoch is the whole schedule once (``sum(steps_k) *
    global_batch`` positions); in epoch ``e >= 1`` phase ``k`` reads its
    samples in the keyed permutation of epoch ``e`` and phase ``k`` (round
    keys salted with the phase), the first ``steps_k * global_batch`` of it.

    **Resumes after a batch-size ramp-up.** Stream positions are consumed
    samples. When the steps of ``global_batch`` start at a position ``f`` off
    its grid (``first_position % global_batch``: ``consumed_samples`` after a
    ramp-up), phase 0 of epoch 0 ends at the last position ``f + m *
    global_batch`` within it, so every switch (and every epoch's end) falls
    between two steps of the resumed run; the rest is as above. A ramp-up
    must end before the first switch (positions read before ``first_position``
    were read with other batch sizes).

    Pure numpy; O(1) memory per position beyond the in/out arrays.
    """

    def __init__(self, num_samples: int, global_batch: int, seed: int = 0,
                 phases: list[dict] | None = None, first_position: int = 0):
        """Args:
            num_samples: rows of the version.
            global_batch: samples per global step.
            seed: keys the permutations of epochs >= 1 (the loader's seed).
            phases: the manifest's ``phases`` (None or empty: no schedule).
            first_position: where the run's steps of ``global_batch`` are
                counted from (``consumed_samples`` of a resume; 0 otherwise);
                only ``first_position % global_batch`` matters.

        Raises:
            TypeError / ValueError: bad numbers; phases that do not tile
                ``[0, num_samples)`` in order; a phase with fewer samples
                than one global batch (it would be skipped).
        """
        check_int("num_samples", num_samples, 1, type_error=True)
        check_int("global_batch", global_batch, 1, type_error=True)
        check_int("seed", seed, 0, type_error=True)
        check_int("first_position", first_position, 0, type_error=True)
        self.num_samples, self.global_batch, self.seed = num_samples, global_batch, seed
        self.offset = first_position % global_batch
        self.phases = list(phases or [])
        if not self.phases:
            self.first_epoch_positions = self.epoch_positions = num_samples
            return
        first = [int(p["first_sample"]) for p in self.phases]
        counts = [int(p["num_samples"]) for p in self.phases]
        if first != list(np.cumsum([0] + counts)[:-1]) or sum(counts) != num_samples:
            raise ValueError(f"phases {[(p.get('name'), f, n) for p, f, n in zip(self.phases, first, counts)]} "
                             f"do not tile the {num_samples} samples in order")
        short = [f"{p.get('name')} ({n} samples)" for p, n in zip(self.phases, counts) if n < global_batch]
        if short:
            raise ValueError(f"mixture phase(s) {', '.join(short)} hold no complete global batch of "
                             f"{global_batch}: the schedule would skip them (raise the phase's token_budget "
                             "or lower the global batch)")
        self._first_sample = np.array(first, np.int64)
        self._counts = np.array(counts, np.int64)
        # positions read per phase: [epoch 0, later epochs]
        later = self._counts // global_batch * global_batch
        first_epoch = later.copy()
        first_epoch[0] = self.offset + (self._counts[0] - self.offset) // global_batch * global_batch
        self._used = (first_epoch, later)
        self._first_position = tuple(np.cumsum(np.r_[0, u])[:-1].astype(np.int64) for u in self._used)
        self.first_epoch_positions = int(first_epoch.sum())
        self.epoch_positions = int(later.sum())

    @classmethod
    def of(cls, manifest: dict, global_batch: int, seed: int = 0, first_position: int = 0) -> "Stream":
        """The stream of a version's manifest (its ``num_samples`` and
        ``phases``)."""
        return cls(manifest["num_samples"], global_batch, seed, manifest.get("phases"), first_position)

    def total_positions(self, num_epochs: int = 1) -> int:
        """Positions of ``num_epochs`` epochs (the first may be shorter or
        longer by the resume's grid offset)."""
        check_int("num_epochs", num_epochs, 1, type_error=True)
        return self.first_epoch_positions + (num_epochs - 1) * self.epoch_positions

    def num_steps(self, num_epochs: int = 1) -> int:
        """Complete global steps in ``num_epochs`` epochs, counted from
        position ``first_position % global_batch`` (see :func:`num_steps`)."""
        return (self.total_positions(num_epochs) - self.offset) // self.global_batch

    def schedule(self) -> list[dict]:
        """Per phase ``name``, ``first_sample``, ``num_samples``,
        ``first_position`` and ``first_step`` (where it starts in epoch 0;
        steps counted from the grid offset), ``steps`` and ``unread_samples``
        (not read in epoch 0); empty without phases."""
        if not self.phases:
            return []
        used, first_position = self._used[0], self._first_position[0]
        return [{"name": p.get("name"), "first_sample": int(f), "num_samples": int(n),
                 "first_position": int(q), "first_step": (int(q) - self.offset) // self.global_batch if k else 0,
                 "steps": int(u) // self.global_batch, "unread_samples": int(n - u)}
                for k, (p, f, n, u, q) in enumerate(zip(self.phases, self._first_sample, self._counts, used,
                                                        first_position))]

    def phase_of_sample(self, sample_index: int) -> int | None:
        """The phase (index) of a row; None without phases."""
        if not self.phases:
            return None
        return int(np.searchsorted(self._first_sample, sample_index, side="right") - 1)

    def epoch_of(self, position: int) -> int:
        """The epoch of a stream position."""
        if int(position) < self.first_epoch_positions:
            return 0
        return 1 + (int(position) - self.first_epoch_positions) // self.epoch_positions

    def samples(self, positions: Iterable[int] | np.ndarray) -> np.ndarray:
        """Sample index at each stream position: int64[n] for int64[n].

        Raises:
            ValueError: a negative position.
        """
        if not self.phases:
            return stream_samples(positions, self.num_samples, self.seed)
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        if positions.size and int(positions.min()) < 0:
            raise ValueError(f"stream positions must be >= 0, got {int(positions.min())}")
        later = positions >= self.first_epoch_positions
        epochs = np.where(later, 1 + (positions - self.first_epoch_positions) // max(self.epoch_positions, 1), 0)
        rest = np.where(later, (positions - self.first_epoch_positions) % max(self.epoch_positions, 1), positions)
        out = np.empty(len(positions), np.int64)
        offsets = np.empty(len(positions), np.int64)
        phase = np.empty(len(positions), np.int64)
        for kind, where in ((0, ~later), (1, later)):
            phase[where] = np.searchsorted(self._first_position[kind], rest[where], side="right") - 1
            offsets[where] = rest[where] - self._first_position[kind][phase[where]]
        out[:] = self._first_sample[phase] + offsets
        for epoch, k in {(int(e), int(k)) for e, k in zip(epochs, phase)}:
            if epoch == 0:
                continue
            where = (epochs == epoch) & (phase == k)
            out[where] = self._first_sample[k] + _permute(offsets[where], int(self._counts[k]), self.seed, epoch,
                                                          inverse=False, phase=k)
        return out

    def positions_of(self, sample_index: int, num_epochs: int) -> list[int | None]:
        """Stream position of row ``sample_index`` in each epoch ``0 ..
        num_epochs - 1`` (None: not read in that epoch, one of its phase's
        unread samples): the inverse of :meth:`samples`.

        Raises:
            ValueError: ``sample_index`` outside ``[0, num_samples)``, ``num_epochs < 1``.
        """
        if not self.phases:
            return epoch_positions(sample_index, self.num_samples, num_epochs, self.seed)
        check_int("num_epochs", num_epochs, 1, type_error=True)
        check_int("sample_index", sample_index, 0, type_error=True)
        if sample_index >= self.num_samples:
            raise ValueError(f"sample_index must be < num_samples {self.num_samples}, got {sample_index}")
        k = self.phase_of_sample(sample_index)
        local = sample_index - int(self._first_sample[k])
        out: list[int | None] = []
        for epoch in range(num_epochs):
            kind = min(epoch, 1)
            start = 0 if epoch == 0 else self.first_epoch_positions + (epoch - 1) * self.epoch_positions
            offset = local if epoch == 0 else int(
                _permute(np.array([local]), int(self._counts[k]), self.seed, epoch, inverse=True, phase=k)[0])
            out.append(start + int(self._first_position[kind][k]) + offset
                       if offset < self._used[kind][k] else None)
        return out
