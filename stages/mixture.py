"""Mixture stage: per-source sampling to a token budget, in whole documents.

``fit`` reads ``id``, ``source`` and ``tokenize_num_tokens`` of every kept
document and decides how many copies (``repeats``) of each document go to the
output:

1. **Targets.** Each source's configured share is its normalised weight (or its
   natural share of the available tokens when ``weights`` is empty). A source
   may also have ``max_epochs`` (at most that many passes over its tokens).
   Targets are set by water-filling: every source gets ``share * budget``; a
   source whose target exceeds ``max_epochs * available`` is capped there and
   the tokens it cannot give are shared among the uncapped sources in
   proportion to their weights, until no cap is exceeded (the usual way
   data-constrained mixtures are set, e.g. Muennighoff et al. 2023, "Scaling
   Data-Constrained Language Models", and Llama-style epoch caps per source).
   When every source is capped the budget cannot be met; the shortfall is
   reported (``budget_shortfall_tokens``), never hidden. Without a budget,
   every document is taken once (capped by ``max_epochs`` below 1).
2. **Copies.** With ``ratio = target / available``, every document of the
   source gets ``floor(ratio)`` copies; the remaining
   ``target - floor(ratio) * available`` tokens come from one more copy of
   documents taken in a seeded order (xxh64 of the id with the build seed, ties
   by id), so the choice does not depend on partition order. Documents are
   taken in that order while they fit (first fit: a document that would
   overshoot is skipped, the next ones are still tried, up to
   ``_MAX_FILL_PASSES`` skips); finally one skipped document is added if that
   brings the total closer to the target. So a source lands within half of its
   shortest skipped document of its target (measured: within 0.01 percentage
   points of its share at 1M tokens on the dev corpus).

With ``phases`` (a staged schedule, e.g. a main phase and an annealing
phase), each phase is planned by steps 1-2 on its own (its budget, weights
and caps; its seeded order from ``common.hashing.phase_seed(seed, k)``), and
``process`` adds the copies per phase (``mixture_phase_repeats``) besides
their sum; the assembly packs each phase on its own and writes them one after
the other (docs/stages/mixture_packing.md, "A staged mixture").

The plan is small whatever the corpus: per source, the number of full
copies, and the seeded-order position where the first-fit prefix ends (every
document before it takes one more copy), plus the few documents the first-fit
fill and the closest-overshoot step took after it (their tokens add up to less
than one document's). ``fit`` finds them without holding the corpus: workers
spill ``(id hash, id, tokens)`` by (source, hash range) and report each range's
document count, token sum and shortest document; the driver jumps to the range
where the prefix ends and reads only the ranges the fill can still take from
(:class:`_Fill`). It writes ``ctx.work_dir / "plan.json"`` and
``ctx.work_dir / "extra.parquet"`` (``id`` of the extra documents, sorted);
``process`` computes each document's copies from its own id hash (no lookup
against the corpus), adds ``mixture_repeats`` and drops documents with 0 copies
with reason ``mixture.not_sampled``. Spreading the copies of a document apart in
the output is the document order's job (``pipeline.packing.copy_keys``).
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pydantic

from common.hashing import id_hash, id_hashes, phase_seed
from common.io import write_json_atomic, write_table_atomic
from common.spill import forget, read_bucket, write_buckets
from stages.base import Column, FitResult, Partitions, RequiredStageConfig, Stage, with_decision

REASON_NOT_SAMPLED = "mixture.not_sampled"
# First-fit skips before the final closest-overshoot step: bounds the work per
# source (each pass is one vectorised scan); our choice, 64 was never reached
# on the dev corpus (a few passes close the gap).
_MAX_FILL_PASSES = 64


def _check_weights(weights: dict[str, float]) -> dict[str, float]:
    bad = {k: w for k, w in weights.items() if not (w >= 0 and math.isfinite(w))}
    if bad:
        raise ValueError(f"weights must be finite and >= 0, got {bad}")
    if weights and sum(weights.values()) <= 0:
        raise ValueError("weights must not all be 0")
    return weights


def _check_max_epochs(max_epochs: dict[str, float]) -> dict[str, float]:
    bad = {k: e for k, e in max_epochs.items() if not (e > 0 and math.isfinite(e))}
    if bad:
        raise ValueError(f"max_epochs must be finite and > 0, got {bad}")
    return max_epochs


class PhaseConfig(pydantic.BaseModel):
    """One phase of a staged mixture (``mixture.phases``; unknown keys are an
    error): the same keys as a one-phase mixture, with a required budget.

    Attributes:
        name: the phase's name in the manifest, the report and lineage
            (letters, digits, ``_.-``; unique within the schedule).
        token_budget: tokens of this phase (EOS included), > 0. A phase ends
            with its last packed sample: its tokens are packed on their own
            (no sample holds two phases), so with concat-split packing each
            phase drops its own tail of less than one sample.
        weights: as :attr:`Config.weights`, for this phase (empty: natural
            shares).
        max_epochs: as :attr:`Config.max_epochs`, counted within this phase
            only (a document used in an earlier phase may be used again).
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    token_budget: int = pydantic.Field(gt=0)
    weights: dict[str, float] = pydantic.Field(default_factory=dict)
    max_epochs: dict[str, float] = pydantic.Field(default_factory=dict)

    _weights = pydantic.field_validator("weights")(classmethod(lambda cls, v: _check_weights(v)))
    _epochs = pydantic.field_validator("max_epochs")(classmethod(lambda cls, v: _check_max_epochs(v)))


class Config(RequiredStageConfig):
    """Mixture stage config (unknown keys are an error).

    Attributes:
        token_budget: total output tokens (EOS included, as counted by
            ``tokenize_num_tokens``), before packing drops the last partial
            sample. None (default) keeps every document once: the natural
            mixture, with no up- or down-sampling.
        weights: source name -> relative weight (>= 0), normalised to shares
            that sum to 1. Empty (default) with a budget means natural shares
            (each source's share of the available tokens). A weight of 0 drops
            the source. With non-empty weights, every source that has kept
            documents must be listed (an error otherwise, so no source is lost
            silently).
        max_epochs: source name -> the most passes over that source's tokens
            (> 0; e.g. 4 following Muennighoff et al. 2023, who found up to ~4
            epochs of repeated data almost as good as fresh data; 0.5 takes at
            most half). Sources not listed are uncapped (default: none listed).
            Tokens a capped source cannot give go to the uncapped sources
            (see the module docstring).
        phases: a staged schedule (default: none, one mixture): a list of
            :class:`PhaseConfig`, each planned like a one-phase mixture with
            its own budget, weights and caps, and written one after the
            other into the same version (all samples of phase 0, then of
            phase 1, ...; each phase globally shuffled within itself). The
            loader reads them in order and no global step mixes two phases
            (``pipeline.order.Schedule``). Exclusive with the top-level
            ``token_budget``, ``weights`` and ``max_epochs``.
        align_samples: with ``phases``, cut every phase's samples down to a
            multiple of this many (its last samples are dropped, like the
            packing tail, and counted in ``tokens_dropped_tail``), so that a
            reader that takes the rows in order with any global batch that
            divides it (mindformers' own ``MindDataset`` with ``shuffle:
            False``) switches phase exactly at a step boundary. Needs
            ``output.packing: concat_split``. None (default): no cut; this
            project's loader then skips each phase's last incomplete global
            batch by itself.
    """

    requires = {"tokenize_num_tokens": "the budget and the weights count tokens"}
    required_by_build = "the assembly packs the copies it chooses (mixture_repeats)"

    token_budget: int | None = pydantic.Field(None, gt=0)
    weights: dict[str, float] = pydantic.Field(default_factory=dict)
    max_epochs: dict[str, float] = pydantic.Field(default_factory=dict)
    phases: list[PhaseConfig] = pydantic.Field(default_factory=list)
    align_samples: int | None = pydantic.Field(None, ge=1)

    _weights = pydantic.field_validator("weights")(classmethod(lambda cls, v: _check_weights(v)))
    _epochs = pydantic.field_validator("max_epochs")(classmethod(lambda cls, v: _check_max_epochs(v)))

    @pydantic.model_validator(mode="after")
    def _check_phases(self) -> "Config":
        if not self.phases:
            if self.align_samples is not None:
                raise ValueError("align_samples applies to mixture.phases only (without phases the loader reads "
                                 "whole global batches and drops only the run's last incomplete one)")
            return self
        mixed = [k for k in ("token_budget", "weights", "max_epochs") if getattr(self, k)]
        if mixed:
            raise ValueError(f"give {', '.join(mixed)} per phase in mixture.phases, not at the top level "
                             "(the top level is the one-phase form)")
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise ValueError(f"phase names must be unique, got {names}")
        return self

    def plans(self) -> list[Any]:
        """The phases to plan: ``phases``, or this config itself as the one
        phase of a version without a schedule."""
        return list(self.phases) or [self]


def seeded_order(doc_ids: list[str], seed: int) -> np.ndarray:
    """Indices of ``doc_ids`` ordered by (xxh64(id, seed), id).

    The order of the ids themselves is what is returned, so the same set of ids
    gives the same sequence of ids whatever order they came in.

    Returns:
        int64[len(doc_ids)] permutation.
    """
    keys = [(id_hash(doc_id, seed), doc_id) for doc_id in doc_ids]
    return np.array(sorted(range(len(doc_ids)), key=keys.__getitem__), dtype=np.int64)


class _Fill:
    """First-fit selection of documents, fed one range of the seeded order at
    a time (ranges in order, documents in order within a range).

    Exactly the rule of :func:`sample_source`: documents are taken while they
    fit the remaining ``gap``; a document that does not fit ends a *pass*;
    the next fitting document starts the next one; after
    ``_MAX_FILL_PASSES`` passes, or when the gap is closed, selection stops.
    The first document that does not fit is ``prefix_end``: every document
    before it in the seeded order is taken; documents taken after it are
    ``extra`` (their tokens sum to less than ``prefix_end``'s).
    """

    def __init__(self, gap: int):
        self.gap = int(gap)
        self.passes = 0
        self.taking = True
        self.done = self.gap <= 0
        self.prefix_end: tuple[int, str] | None = None
        self.extra: list[tuple[int, str, int]] = []  # (hash, id, tokens)
        self.prefix_tokens = 0
        self.prefix_documents = 0
        # Shortest document not taken, first in order: (tokens, hash, id).
        self.shortest: tuple[int, int, str] | None = None

    def _not_taken(self, tokens: int, h: int, doc_id: str) -> None:
        if tokens > 0 and (self.shortest is None or tokens < self.shortest[0]):
            self.shortest = (tokens, h, doc_id)

    def skip_whole(self, documents: int, tokens: int, shortest: int, upper: tuple[int, str]) -> bool:
        """Account for a range without reading it, when possible: a range
        that fits entirely while the prefix is still being taken, or one whose
        shortest document is longer than the gap (nothing in it can be taken).
        ``upper`` is a key above every key of the range and below those of
        the next. Returns False when the range must be read (:meth:`feed`)."""
        if self.done:
            return True
        if self.prefix_end is None and tokens <= self.gap:
            self.gap -= tokens
            self.prefix_tokens += tokens
            self.prefix_documents += documents
            if self.gap <= 0:
                self.prefix_end, self.done = upper, True
            return True
        if self.prefix_end is not None and shortest > self.gap:
            if self.taking:  # its first document ends the current pass
                self.passes += 1
                self.taking = False
                self.done = self.passes >= _MAX_FILL_PASSES
            return True
        return False

    def feed(self, hashes: np.ndarray, ids: list[str], tokens: np.ndarray,
             upper: tuple[int, str] | None = None) -> None:
        """Process one range: ``hashes`` uint64[n], ``ids``, ``tokens`` int64[n]
        sorted by (hash, id); ``upper`` as in :meth:`skip_whole` (None: the
        last range)."""
        n = len(ids)
        position = 0
        if self.prefix_end is None and not self.done:
            cumulative = np.cumsum(tokens)
            fit = int(np.searchsorted(cumulative, self.gap, side="right"))
            self.prefix_documents += fit
            taken = int(cumulative[fit - 1]) if fit else 0
            self.prefix_tokens += taken
            self.gap -= taken
            position = fit
            if fit < n:
                self.prefix_end = (int(hashes[fit]), ids[fit])
                if self.gap > 0:
                    self._not_taken(int(tokens[fit]), int(hashes[fit]), ids[fit])
                    self.passes += 1
                    self.taking = False
                    position = fit + 1
                    self.done = self.passes >= _MAX_FILL_PASSES
                else:
                    self.done = True
            elif self.gap <= 0:
                self.prefix_end, self.done = upper, True
        while position < n and not self.done:
            length = int(tokens[position])
            if length <= self.gap:
                self.extra.append((int(hashes[position]), ids[position], length))
                self.gap -= length
                self.taking = True
                self.done = self.gap <= 0
                position += 1
                continue
            self._not_taken(length, int(hashes[position]), ids[position])
            if self.taking:
                self.passes += 1
                self.taking = False
                if self.passes >= _MAX_FILL_PASSES:
                    self.done = True
                    position += 1
                    break
            position += 1
            # Jump to the next document that fits (one vectorised scan).
            fits = np.flatnonzero(tokens[position:] <= self.gap)
            stop = position + int(fits[0]) if len(fits) else n
            for k in range(position, stop):
                self._not_taken(int(tokens[k]), int(hashes[k]), ids[k])
            position = stop
        for k in range(position, n):  # left unread by a stop: not taken
            self._not_taken(int(tokens[k]), int(hashes[k]), ids[k])

    def note_unread(self, shortest: int, first_key: tuple[int, str] | None) -> None:
        """A range after the selection stopped (or skipped): its shortest
        document (``first_key`` = its (hash, id) when known) is not taken."""
        if first_key is not None:
            self._not_taken(shortest, *first_key)

    def overshoot(self) -> tuple[int, str, int] | None:
        """The closest-overshoot step: the shortest document not taken, if
        adding it brings the total closer to the target (``tokens - gap <
        gap``)."""
        if self.gap > 0 and self.shortest is not None and self.shortest[0] - self.gap < self.gap:
            tokens, h, doc_id = self.shortest
            return h, doc_id, tokens
        return None


def sample_source(num_tokens: np.ndarray, order: np.ndarray, target: int) -> np.ndarray:
    """Copies per document so that the source yields about ``target`` tokens.

    Args:
        num_tokens: int64[n], tokens per document.
        order: int64[n], the seeded selection order (see :func:`seeded_order`).
        target: target tokens (>= 0).

    Returns:
        int32[n] repeats: ``floor(target / available)`` for every document,
        plus one for the documents chosen by first fit in ``order`` for the
        remainder, plus possibly one closest-overshoot document (see module
        docstring). All zeros when the source has no tokens.
    """
    n = len(num_tokens)
    available = int(np.asarray(num_tokens).sum())
    if available == 0 or target <= 0:
        return np.zeros(n, np.int32)
    full = target // available
    repeats = np.full(n, full, dtype=np.int32)
    lengths = np.asarray(num_tokens, dtype=np.int64)[order]
    # Positions in ``order`` stand in for (hash, id): the order is what matters.
    fill = _Fill(target - full * available)
    fill.feed(np.arange(n, dtype=np.uint64), [str(i) for i in range(n)], lengths)
    taken = np.zeros(n, dtype=bool)
    if fill.prefix_end is not None:
        taken[:fill.prefix_end[0]] = True
    else:
        taken[:fill.prefix_documents] = True
    extra = fill.overshoot()
    for h, _, _ in fill.extra + ([extra] if extra else []):
        taken[h] = True
    repeats[order[taken]] += 1
    return repeats


def _water_fill(shares: dict[str, float], caps: dict[str, float], budget: int) -> dict[str, float]:
    """Token targets: ``share * budget`` with per-source caps, the excess of a
    capped source shared among the others by share. Returns float targets."""
    targets: dict[str, float] = {}
    open_ = {s for s, w in shares.items() if w > 0}
    left = float(budget)
    while open_:
        weight = sum(shares[s] for s in open_)
        trial = {s: left * shares[s] / weight for s in open_}
        over = {s for s in open_ if trial[s] > caps[s]}
        if not over:
            targets.update(trial)
            break
        for s in sorted(over):
            targets[s] = caps[s]
            left -= caps[s]
        open_ -= over
    for s in shares:
        targets.setdefault(s, 0.0)
    return targets


def source_targets(available: dict[str, int], config: Config) -> dict[str, dict[str, Any]]:
    """Per source: the weight, configured share, cap and integer target tokens.

    Args:
        available: source -> available (kept) tokens, every source with kept
            documents.

    Returns:
        ``{source: {"weight", "configured_share", "max_epochs", "capped",
        "target_tokens"}}`` for every weighted or available source.

    Raises:
        ValueError: a source with kept documents missing from non-empty
            ``weights``; a source with a positive weight but no kept tokens;
            ``max_epochs`` for a source with no documents.
    """
    names = sorted(available)
    unknown = sorted(set(config.max_epochs) - set(names))
    if unknown:
        raise ValueError(f"mixture: max_epochs for sources {unknown} that have no kept documents")
    if config.token_budget is not None and config.weights:
        missing = [s for s in names if s not in config.weights]
        if missing:
            raise ValueError(f"mixture: sources {missing} have documents but no weight")
        empty = [s for s, w in config.weights.items() if w > 0 and available.get(s, 0) == 0]
        if empty:
            raise ValueError(f"mixture: sources {empty} have a weight but no kept tokens")
        weights = dict(config.weights)
    else:
        weights = {s: float(available[s]) for s in names}
    weight_sum = sum(weights.values()) or 1.0
    shares = {s: weights[s] / weight_sum for s in weights}
    caps = {s: config.max_epochs.get(s, math.inf) * available.get(s, 0) for s in weights}
    if config.token_budget is None:
        float_targets = {s: min(float(available.get(s, 0)), caps[s]) for s in weights}
    else:
        float_targets = _water_fill(shares, caps, config.token_budget)
    # What each source would get without caps, to report which caps bit.
    uncapped = {s: float(available.get(s, 0)) if config.token_budget is None
                else shares[s] * config.token_budget for s in weights}
    return {s: {"weight": weights[s], "configured_share": shares[s], "max_epochs": config.max_epochs.get(s),
                "capped": bool(caps[s] < uncapped[s]),
                "target_tokens": math.floor(t) if t == caps[s] else round(t)}
            for s, t in float_targets.items()}


def _facts(plan: dict[str, dict[str, Any]], documents: dict[str, int], available: dict[str, int],
           realized: dict[str, int], sampled: dict[str, int], max_copies: dict[str, int]) -> dict[str, Any]:
    target_sum = sum(p["target_tokens"] for p in plan.values()) or 1
    facts: dict[str, dict[str, Any]] = {}
    for name in sorted(plan):
        p, avail = plan[name], available.get(name, 0)
        facts[name] = {
            "documents": documents.get(name, 0),
            "available_tokens": avail,
            "weight": p["weight"],
            "configured_share": p["configured_share"],
            "max_epochs": p["max_epochs"],
            "capped": p["capped"],
            "target_share": p["target_tokens"] / target_sum,
            "target_tokens": p["target_tokens"],
            "ratio": p["target_tokens"] / avail if avail else None,
            "realized_tokens": realized.get(name, 0),
            "epochs": realized.get(name, 0) / avail if avail else None,
            "sampled_documents": sampled.get(name, 0),
            "max_copies": max_copies.get(name, 0),
        }
    total_realized = sum(f["realized_tokens"] for f in facts.values())
    for f in facts.values():
        f["realized_share"] = f["realized_tokens"] / total_realized if total_realized else 0.0
        f["share_error_pp"] = 100.0 * (f["realized_share"] - f["target_share"])
    return facts


def plan_mixture(ids: list[str], sources: list[str], num_tokens: np.ndarray,
                 config: Config, seed: int) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """Repeats per document and the per-source facts, in memory (the stage
    plans the same way one hash range at a time; this is its reference). The
    build never calls it: ``tests/stages/test_mixture.py``
    (``test_range_by_range_fit_equals_the_in_memory_plan``) checks that the
    stage's ``fit`` gives the same copies and facts.

    Args:
        ids, sources: n document ids (unique) and their sources.
        num_tokens: int64[n] tokens per document (EOS included).

    Returns:
        (int32[n] repeats aligned with ``ids``, ``{source: facts}`` with
        ``documents``, ``available_tokens``, ``weight`` (the relative weight
        used: the configured one, or the available tokens for natural shares),
        ``configured_share`` (normalised weight), ``max_epochs`` (or None),
        ``capped`` (its target was cut by ``max_epochs``), ``target_share``
        (share of the resolved targets, after caps), ``target_tokens``,
        ``ratio``, ``realized_tokens``, ``realized_share``, ``share_error_pp``
        (realized minus target share, in percentage points), ``epochs``
        (realised / available tokens), ``sampled_documents`` (documents with
        >= 1 copy), ``max_copies``).

    Raises:
        ValueError: duplicate ids; negative token counts; see
            :func:`source_targets`.
    """
    if len(set(ids)) != len(ids):
        raise ValueError("mixture: duplicate document ids in the input")
    if (num_tokens < 0).any():
        raise ValueError("mixture: negative tokenize_num_tokens")
    source_arr = np.array(sources, dtype=object)
    names = sorted(set(sources))
    available = {s: int(num_tokens[source_arr == s].sum()) for s in names}
    plan = source_targets(available, config)
    repeats = np.zeros(len(ids), np.int32)
    realized, sampled, copies, documents = {}, {}, {}, {}
    for name in sorted(plan):
        rows = np.flatnonzero(source_arr == name)
        target = plan[name]["target_tokens"]
        if config.token_budget is None and target == available.get(name, 0):
            repeats[rows] = 1
        else:
            order = seeded_order([ids[i] for i in rows], seed)
            repeats[rows] = sample_source(num_tokens[rows], order, target)
        documents[name] = len(rows)
        realized[name] = int((num_tokens[rows] * repeats[rows]).sum())
        sampled[name] = int((repeats[rows] > 0).sum())
        copies[name] = int(repeats[rows].max()) if len(rows) else 0
    return repeats, _facts(plan, documents, available, realized, sampled, copies)


# ----------------------------------------------------------------------------- distributed fit

PLAN_FILE = "plan.json"
EXTRA_FILE = "extra.parquet"
SPILL_DIR = "spill"
# Spill records per hash range: ~60 bytes each, so one range read by the
# driver is ~60 MB at most (our choice, the same budget as dedup's groups).
RECORDS_PER_RANGE = 1_000_000


def _range_bits(upper_documents: int) -> int:
    bits = 0
    while (1 << bits) * RECORDS_PER_RANGE < upper_documents and bits < 16:
        bits += 1
    return bits


def mixture_keys(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: spill ``(hash, id, tokens)`` of one partition's kept documents
    by (source, hash range) and summarise each range.

    Args:
        task: ``part`` (a partition), ``seed``, ``bits`` (2**bits hash
            ranges), ``out`` (spill file path).

    Returns:
        ``{"ranges": [[source, range, documents, tokens, shortest], ...]}``,
        range = ``hash >> (64 - bits)``.

    Raises:
        ValueError: a negative ``tokenize_num_tokens``.
    """
    from stages.base import read_kept

    table = read_kept(task["part"], ["id", "source", "tokenize_num_tokens"])
    ids = table["id"].to_pylist()
    seed, bits = task["seed"], task["bits"]
    hashes = id_hashes(ids, seed)
    tokens = table["tokenize_num_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
    if (tokens < 0).any():
        raise ValueError("mixture: negative tokenize_num_tokens")
    ranges = (hashes >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(ids), np.int64)
    write_buckets(pa.table({"source": table["source"], "hash": pa.array(hashes, pa.uint64()),
                            "id": pa.array(ids, pa.string()), "tokens": pa.array(tokens, pa.int64())}),
                  ranges, Path(task["out"]))
    summary = pa.table({"source": table["source"], "range": ranges, "tokens": tokens}).group_by(
        ["source", "range"]).aggregate([("tokens", "count"), ("tokens", "sum"), ("tokens", "min")])
    return {"ranges": [[r["source"], r["range"], r["tokens_count"], r["tokens_sum"], r["tokens_min"]]
                       for r in summary.to_pylist()]}


def _read_range(files: list[Path], source: str, bucket: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    table = read_bucket(files, bucket)
    table = table.filter(pc.equal(table["source"], source)).sort_by([("hash", "ascending"), ("id", "ascending")])
    return (table["hash"].to_numpy().astype(np.uint64), table["id"].to_pylist(),
            table["tokens"].to_numpy().astype(np.int64))


def plan_source_fill(ranges: list[tuple[int, list[int]]], gap: int, read: Any, bits: int) -> _Fill:
    """Run :class:`_Fill` over one source's hash ranges, reading only the
    ranges it cannot settle from their summaries.

    Args:
        ranges: ``(range, [documents, tokens, shortest])`` in hash order
            (non-empty ranges only).
        gap: the tokens to select (the remainder after full copies).
        read: ``read(range) -> (hashes, ids, tokens)`` sorted by (hash, id).
        bits: 2**bits ranges split the 64-bit hash space.

    Returns:
        The finished fill (``prefix_end``, ``extra`` with the overshoot step
        applied, ``prefix_tokens``/``prefix_documents``).
    """
    fill = _Fill(gap)
    for bucket, (documents, tokens, shortest) in ranges:
        upper = ((bucket + 1) << (64 - bits), "")  # 2**64 for the last range: above every hash
        if fill.done:
            # Not taken; only its shortest document matters (overshoot step).
            if fill.gap > 0 and (fill.shortest is None or shortest < fill.shortest[0]):
                h, ids, lengths = read(bucket)
                k = int(np.flatnonzero(lengths == shortest)[0])
                fill.note_unread(shortest, (int(h[k]), ids[k]))
            continue
        if fill.skip_whole(documents, tokens, shortest, upper):
            if fill.prefix_end is not None and fill.gap > 0 and (
                    fill.shortest is None or shortest < fill.shortest[0]):
                h, ids, lengths = read(bucket)
                k = int(np.flatnonzero(lengths == shortest)[0])
                fill.note_unread(shortest, (int(h[k]), ids[k]))
            continue
        fill.feed(*read(bucket), upper=upper)
    extra = fill.overshoot()
    if extra is not None:
        fill.extra.append(extra)
    return fill


class MixtureStage(Stage):
    """Set the number of output copies of each document (``mixture_repeats``,
    int32) and drop documents with none (``mixture.not_sampled``)."""

    row_independent = True
    name = "mixture"
    order = 700
    Config = Config
    columns = {
        "mixture_repeats": Column("int32", "copies of the document in the output (0: dropped)", lineage=True),
        "mixture_phase_repeats": Column("list<int32>", "copies per phase of mixture.phases, in phase order ([mixture_repeats] without phases)"),
    }
    artifacts = {
        "planned_tokens": "value: tokens of every copy the mixture chose (what the assembly must pack)",
        "target_shares": "value: source -> target share of tokens (the report's realized-against-target)",
        "phases": "value: None, or per phase of mixture.phases its name, budget, planned tokens and target shares",
    }

    def fit(self, partitions: Partitions) -> FitResult:
        """Plan the mixture over all kept documents, once per phase; write
        ``plan.json`` and ``extra.parquet`` (module docstring). Driver memory:
        one hash range (at most :data:`RECORDS_PER_RANGE` documents) and the
        summaries (3 integers per non-empty range).

        Returns:
            ``{"token_budget", "realized_tokens", "target_tokens",
            "budget_shortfall_tokens" (budget the caps leave unassigned),
            "max_share_error_pp", "per_source": {source: facts}}`` (facts as
            in :func:`plan_mixture`). With ``phases`` also ``"phases"``: one
            such dict per phase plus its ``name``, and the top-level numbers
            are sums over the phases (``per_source``: tokens and shares of
            the whole schedule; ``sampled_documents`` and ``max_copies`` are
            per phase only, None at the top level).
            Exports ``planned_tokens`` (int), ``target_shares`` ({source:
            share of the whole schedule}) and ``phases`` (None, or per phase
            ``{"name", "token_budget", "planned_tokens", "align_samples",
            "target_shares"}``).

        Raises:
            ValueError: see :func:`source_targets`; a document id seen twice.
        """
        work = Path(self.ctx.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        phased = bool(self.config.phases)
        results = [self._fit_phase(partitions, cfg, phase_seed(self.ctx.seed, k), work)
                   for k, cfg in enumerate(self.config.plans())]
        extra_ids = [(k, i) for k, r in enumerate(results) for i in r["extra"]]
        extra = pa.table({"id": pa.array([i for _, i in sorted(extra_ids, key=lambda e: (e[1], e[0]))],
                                         pa.string())}) if not phased else pa.table({
            "phase": pa.array([k for k, _ in sorted(extra_ids)], pa.int32()),
            "id": pa.array([i for _, i in sorted(extra_ids)], pa.string())})
        write_table_atomic(extra, work / EXTRA_FILE)
        if phased:
            plan = {"phases": [{"name": cfg.name, "seed": phase_seed(self.ctx.seed, k), "sources": r["plan"]}
                               for k, (cfg, r) in enumerate(zip(self.config.phases, results))]}
        else:
            plan = {"seed": self.ctx.seed, "sources": results[0]["plan"]}
        write_json_atomic(plan, work / PLAN_FILE, indent=1, sort_keys=True, ensure_ascii=True, final_newline=False)
        warnings = tuple(w for r in results for w in r["warnings"])
        if not phased:
            facts = results[0]["facts"]
            return FitResult(facts=facts, warnings=warnings, exports={
                "planned_tokens": facts["realized_tokens"], "phases": None,
                "target_shares": {src: f.get("target_share") for src, f in facts["per_source"].items()}})
        phases = [{"name": cfg.name, **r["facts"]} for cfg, r in zip(self.config.phases, results)]
        facts = _schedule_facts(phases)
        return FitResult(facts=facts, warnings=warnings, exports={
            "planned_tokens": facts["realized_tokens"],
            "target_shares": {src: f["target_share"] for src, f in facts["per_source"].items()},
            "phases": [{"name": p["name"], "token_budget": p["token_budget"], "planned_tokens": p["realized_tokens"],
                        "align_samples": self.config.align_samples,
                        "target_shares": {src: f["target_share"] for src, f in p["per_source"].items()}}
                       for p in phases]})

    def _fit_phase(self, partitions: Partitions, config: Any, seed: int, work: Path) -> dict[str, Any]:
        """Plan one phase (``config``: this stage's config or a
        :class:`PhaseConfig`) with the seeded order of ``seed``.

        Returns:
            ``{"plan": {source: {"full", "prefix_end", "all_taken", "extra"}},
            "extra": [ids], "facts": {...}, "warnings": (...)}``.
        """
        spill = work / SPILL_DIR
        shutil.rmtree(spill, ignore_errors=True)
        upper = sum(p.num_rows() for p in partitions.paths)
        bits = _range_bits(upper)
        files = [spill / f"part-{i:05d}.parquet" for i in range(len(partitions.paths))]
        results = partitions.map(mixture_keys, [
            {"part": p, "seed": seed, "bits": bits, "out": str(f)}
            for p, f in zip(partitions.paths, files)])
        ranges: dict[tuple[str, int], list[int]] = {}
        for result in results:
            for source, bucket, documents, tokens, shortest in result["ranges"]:
                have = ranges.get((source, bucket))
                ranges[(source, bucket)] = [documents, tokens, shortest] if have is None else [
                    have[0] + documents, have[1] + tokens, min(have[2], shortest)]
        per_source: dict[str, list[tuple[int, list[int]]]] = {}
        for source, bucket in sorted(ranges):
            per_source.setdefault(source, []).append((bucket, ranges[(source, bucket)]))
        documents = {s: sum(r[1][0] for r in rs) for s, rs in per_source.items()}
        available = {s: sum(r[1][1] for r in rs) for s, rs in per_source.items()}
        try:
            targets = source_targets(available, config)
        except ValueError as exc:
            if not isinstance(config, PhaseConfig):
                raise
            # with several phases, say which one asked for it
            raise ValueError(f"{exc} (in mixture phase {config.name})") from None

        plan: dict[str, Any] = {}
        extra_ids: list[str] = []
        realized, sampled, copies = {}, {}, {}
        for name in sorted(targets):
            avail, target = available.get(name, 0), targets[name]["target_tokens"]
            full = target // avail if avail else 0
            gap = target - full * avail if avail else 0
            fill = plan_source_fill(per_source.get(name, []), gap,
                                    functools.partial(_read_range, files, name), bits)
            taken_ids = [e[1] for e in fill.extra]
            taken_tokens = fill.prefix_tokens + sum(e[2] for e in fill.extra)
            taken_documents = fill.prefix_documents + len(fill.extra)
            plan[name] = {"full": int(full),
                          "prefix_end": None if fill.prefix_end is None else list(fill.prefix_end),
                          # a prefix that never ended took every document
                          "all_taken": fill.prefix_end is None and gap > 0 and not fill.done,
                          "extra": len(taken_ids)}
            extra_ids += taken_ids
            realized[name] = int(full * avail + taken_tokens)
            sampled[name] = documents.get(name, 0) if full > 0 else taken_documents
            copies[name] = int(full + (1 if taken_documents else 0)) if documents.get(name) else 0
        if len(set(extra_ids)) != len(extra_ids):
            raise ValueError("mixture: duplicate document ids in the input")
        forget(files)
        shutil.rmtree(spill, ignore_errors=True)
        facts = _facts(targets, documents, available, realized, sampled, copies)
        total = int(sum(f["realized_tokens"] for f in facts.values()))
        target_total = int(sum(f["target_tokens"] for f in facts.values()))
        budget = config.token_budget
        where = f" in phase {config.name}" if isinstance(config, PhaseConfig) else ""
        warnings = tuple(
            f"source {src} is capped by mixture.max_epochs{where}: target share {f.get('target_share', 0):.3f} "
            "after rescaling (its weight asked for more than max_epochs x its tokens)"
            for src, f in facts.items() if f.get("capped"))
        return {"plan": plan, "extra": extra_ids, "warnings": warnings, "facts": {
            "token_budget": budget,
            "realized_tokens": total,
            "target_tokens": target_total,
            # Tokens the caps (max_epochs) leave unassigned; whole-document
            # rounding shows in realized_tokens, not here.
            "budget_shortfall_tokens": max(0, budget - target_total) if budget else 0,
            "max_share_error_pp": max((abs(f["share_error_pp"]) for f in facts.values()), default=0.0),
            "per_source": facts,
        }}

    def _plan(self) -> tuple[list[dict[str, Any]], set[tuple[int, str]]]:
        """Per phase ``{"seed", "sources"}`` and the extra (phase, id) pairs."""
        if getattr(self, "_loaded", None) is None:
            work = Path(self.ctx.work_dir)
            plan = json.loads((work / PLAN_FILE).read_text())
            table = pq.read_table(work / EXTRA_FILE)
            ids = table["id"].to_pylist()
            phases = table["phase"].to_pylist() if "phase" in table.column_names else [0] * len(ids)
            self._loaded = (plan.get("phases") or [plan], set(zip(phases, ids)))
        return self._loaded

    def process(self, table: pa.Table) -> pa.Table:
        """Each document's copies per phase: its source's full copies, plus
        one when its (id hash, id) under the phase's seed is before the
        source's ``prefix_end`` or it is one of the phase's extra documents;
        ``mixture_repeats`` is their sum.

        Raises:
            KeyError: a document of a source the plan does not have (was fit
                run on this input?).
        """
        phases, extra = self._plan()
        ids = table["id"].to_pylist()
        sources = table["source"].to_pylist() if "source" in table.column_names else [None] * len(ids)
        per_phase = np.zeros((len(phases), len(ids)), np.int32)
        for k, plan in enumerate(phases):
            seed = plan["seed"]
            for i, (doc_id, source) in enumerate(zip(ids, sources)):
                entry = plan["sources"].get(source)
                if entry is None:
                    raise KeyError(f"mixture: document {doc_id!r} of source {source!r} is not in {PLAN_FILE}; "
                                   "was fit run on this input?")
                taken = entry["all_taken"] or (k, doc_id) in extra
                end = entry["prefix_end"]
                if not taken and end is not None:
                    h = id_hash(doc_id, seed)
                    taken = h < end[0] or (h == end[0] and doc_id < end[1])
                per_phase[k, i] = entry["full"] + int(taken)
        repeats = per_phase.sum(axis=0, dtype=np.int32)
        reasons = [None if r > 0 else REASON_NOT_SAMPLED for r in repeats]
        columns = {"mixture_repeats": pa.array(repeats, pa.int32()),
                   "mixture_phase_repeats": pa.array(per_phase.T.tolist(), pa.list_(pa.int32()))}
        return with_decision(table, columns, reasons)


def _schedule_facts(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """The top-level mixture facts of a schedule: sums over ``phases`` (each
    a one-phase fit's facts plus ``name``), per-source tokens and shares of
    the whole schedule, and the phases themselves."""
    per_source: dict[str, dict[str, Any]] = {}
    for phase in phases:
        for src, f in phase["per_source"].items():
            agg = per_source.setdefault(src, {"documents": f["documents"], "available_tokens": f["available_tokens"],
                                              "target_tokens": 0, "realized_tokens": 0, "capped": False})
            agg["target_tokens"] += f["target_tokens"]
            agg["realized_tokens"] += f["realized_tokens"]
            agg["capped"] |= bool(f["capped"])
    target_sum = sum(f["target_tokens"] for f in per_source.values()) or 1
    realized_sum = sum(f["realized_tokens"] for f in per_source.values()) or 1
    for f in per_source.values():
        avail = f["available_tokens"]
        f.update(weight=None, configured_share=None, max_epochs=None, sampled_documents=None, max_copies=None,
                 target_share=f["target_tokens"] / target_sum, realized_share=f["realized_tokens"] / realized_sum,
                 ratio=f["target_tokens"] / avail if avail else None,
                 epochs=f["realized_tokens"] / avail if avail else None)
        f["share_error_pp"] = 100.0 * (f["realized_share"] - f["target_share"])
    return {
        "token_budget": sum(p["token_budget"] for p in phases),
        "realized_tokens": sum(p["realized_tokens"] for p in phases),
        "target_tokens": sum(p["target_tokens"] for p in phases),
        "budget_shortfall_tokens": sum(p["budget_shortfall_tokens"] for p in phases),
        "max_share_error_pp": max(p["max_share_error_pp"] for p in phases),
        "per_source": {src: per_source[src] for src in sorted(per_source)},
        "phases": phases,
    }
