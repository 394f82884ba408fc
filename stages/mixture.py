"""Mixture stage: per-source sampling to a token budget, in whole documents.

``fit`` reads ``id``, ``source`` and ``tokenize_num_tokens`` of every kept
document and decides how many copies (``repeats``) of each document go to the
output:

* ``token_budget`` None: the natural mixture, every document once.
* otherwise each source gets ``target_tokens = share * token_budget`` where
  ``share`` is its normalised weight, and ``ratio = target / available``.
  Every document of the source gets ``floor(ratio)`` copies; the remaining
  ``target - floor(ratio) * available`` tokens are filled with one more copy of
  documents taken in a seeded order (xxh64 of the id with the build seed, ties
  by id), so the choice does not depend on partition order. Documents are taken
  while they fit; the first one that does not fit is taken only if that brings
  the total closer to the target; then selection stops. So each source's
  realised tokens are within half a document of the target, never further.

``fit`` writes ``ctx.work_dir / "repeats.parquet"`` (``id`` string, ``repeats``
int32, sorted by id); ``process`` adds ``mixture_repeats`` and drops documents
with 0 copies with reason ``mixture.not_sampled``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pydantic

from stages.base import Partitions, Stage, StageConfig, with_decision
from stages.packing import id_hash

REPEATS_FILE = "repeats.parquet"
REASON_NOT_SAMPLED = "mixture.not_sampled"


class Config(StageConfig):
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
    """

    token_budget: int | None = pydantic.Field(None, gt=0)
    weights: dict[str, float] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in weights.items() if not (w >= 0 and math.isfinite(w))}
        if bad:
            raise ValueError(f"weights must be finite and >= 0, got {bad}")
        if weights and sum(weights.values()) <= 0:
            raise ValueError("weights must not all be 0")
        return weights


def seeded_order(doc_ids: list[str], seed: int) -> np.ndarray:
    """Indices of ``doc_ids`` ordered by (xxh64(id, seed), id).

    The order of the ids themselves is what is returned, so the same set of ids
    gives the same sequence of ids whatever order they came in.

    Returns:
        int64[len(doc_ids)] permutation.
    """
    keys = [(id_hash(doc_id, seed), doc_id) for doc_id in doc_ids]
    return np.array(sorted(range(len(doc_ids)), key=keys.__getitem__), dtype=np.int64)


def sample_source(num_tokens: np.ndarray, order: np.ndarray, target: int) -> np.ndarray:
    """Copies per document so that the source yields about ``target`` tokens.

    Args:
        num_tokens: int64[n], tokens per document.
        order: int64[n], the seeded selection order (see :func:`seeded_order`).
        target: target tokens (>= 0).

    Returns:
        int32[n] repeats: ``floor(target / available)`` for every document,
        plus one for a prefix of ``order`` filling the remainder (see module
        docstring). All zeros when the source has no tokens.
    """
    n = len(num_tokens)
    available = int(num_tokens.sum())
    if available == 0 or target <= 0:
        return np.zeros(n, np.int32)
    full = target // available
    repeats = np.full(n, full, dtype=np.int32)
    remainder = target - full * available
    if remainder:
        cumulative = np.cumsum(num_tokens[order])
        taken = int(np.searchsorted(cumulative, remainder, side="right"))  # docs that fit
        if taken < n:
            before = int(cumulative[taken - 1]) if taken else 0
            if cumulative[taken] - remainder < remainder - before:
                taken += 1
        repeats[order[:taken]] += 1
    return repeats


def plan_mixture(ids: list[str], sources: list[str], num_tokens: np.ndarray,
                 config: Config, seed: int) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """Repeats per document and the per-source facts.

    Args:
        ids, sources: n document ids (unique) and their sources.
        num_tokens: int64[n] tokens per document (EOS included).

    Returns:
        (int32[n] repeats aligned with ``ids``, ``{source: facts}`` with
        ``documents``, ``available_tokens``, ``weight`` (the relative weight
        used: the configured one, or the available tokens for natural shares),
        ``target_share``,
        ``target_tokens``, ``ratio``, ``realized_tokens``, ``realized_share``,
        ``epochs`` (realised / available tokens), ``sampled_documents``
        (documents with >= 1 copy)).

    Raises:
        ValueError: duplicate ids; negative token counts; a source with
            kept documents missing from non-empty ``weights``; a source with a
            positive weight but no kept tokens (its share could not be met).
    """
    if len(set(ids)) != len(ids):
        raise ValueError("mixture: duplicate document ids in the input")
    if (num_tokens < 0).any():
        raise ValueError("mixture: negative tokenize_num_tokens")
    source_arr = np.array(sources, dtype=object)
    names = sorted(set(sources))
    available = {s: int(num_tokens[source_arr == s].sum()) for s in names}

    if config.token_budget is None:
        weights = {s: float(available[s]) for s in names}
    elif config.weights:
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

    repeats = np.zeros(len(ids), np.int32)
    facts: dict[str, dict[str, Any]] = {}
    for name in sorted(weights):
        rows = np.flatnonzero(source_arr == name)
        share = weights[name] / weight_sum
        if config.token_budget is None:
            target = available.get(name, 0)
            repeats[rows] = 1
        else:
            target = int(round(share * config.token_budget))
            order = seeded_order([ids[i] for i in rows], seed)
            repeats[rows] = sample_source(num_tokens[rows], order, target)
        realized = int((num_tokens[rows] * repeats[rows]).sum())
        avail = available.get(name, 0)
        facts[name] = {
            "documents": int(len(rows)),
            "available_tokens": avail,
            "weight": weights[name],
            "target_share": share,
            "target_tokens": target,
            "ratio": target / avail if avail else None,
            "realized_tokens": realized,
            "epochs": realized / avail if avail else None,
            "sampled_documents": int((repeats[rows] > 0).sum()),
        }
    total_realized = sum(f["realized_tokens"] for f in facts.values())
    for f in facts.values():
        f["realized_share"] = f["realized_tokens"] / total_realized if total_realized else 0.0
    return repeats, facts


class MixtureStage(Stage):
    """Set the number of output copies of each document (``mixture_repeats``,
    int32) and drop documents with none (``mixture.not_sampled``)."""

    name = "mixture"
    Config = Config

    def fit(self, partitions: Partitions) -> dict[str, Any]:
        """Plan the mixture over all kept documents; write ``repeats.parquet``.

        Returns:
            ``{"token_budget", "realized_tokens", "per_source": {source: facts}}``
            (facts as in :func:`plan_mixture`).
        """
        columns = ["id", "source", "tokenize_num_tokens"]
        tables = list(partitions.tables(columns))
        table = pa.concat_tables(tables) if tables else pa.table(
            {"id": pa.array([], pa.string()), "source": pa.array([], pa.string()),
             "tokenize_num_tokens": pa.array([], pa.int32())})
        ids = table["id"].to_pylist()
        num_tokens = table["tokenize_num_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
        repeats, facts = plan_mixture(ids, table["source"].to_pylist(), num_tokens,
                                      self.config, self.ctx.seed)
        out = pa.table({"id": pa.array(ids, pa.string()), "repeats": pa.array(repeats, pa.int32())})
        out = out.sort_by("id")
        path = Path(self.ctx.work_dir) / REPEATS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(out, tmp)
        tmp.replace(path)
        return {
            "token_budget": self.config.token_budget,
            "realized_tokens": int(sum(f["realized_tokens"] for f in facts.values())),
            "per_source": facts,
        }

    def _repeats(self) -> pa.Table:
        if getattr(self, "_plan", None) is None:
            self._plan = pq.read_table(Path(self.ctx.work_dir) / REPEATS_FILE)
        return self._plan

    def process(self, table: pa.Table) -> pa.Table:
        """Look up each document's repeats in ``repeats.parquet``.

        Raises:
            KeyError: a document id that ``fit`` did not see.
        """
        plan = self._repeats()
        index = pc.index_in(table["id"], value_set=plan["id"])
        if index.null_count:
            missing = table["id"].filter(pc.is_null(index))[0].as_py()
            raise KeyError(f"mixture: document {missing!r} not in {REPEATS_FILE} "
                           f"({index.null_count} unknown ids); was fit run on this input?")
        repeats = plan["repeats"].take(index).combine_chunks()
        reasons = [None if r > 0 else REASON_NOT_SAMPLED
                   for r in repeats.to_numpy(zero_copy_only=False)]
        return with_decision(table, {"mixture_repeats": repeats}, reasons)
