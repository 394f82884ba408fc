"""The decontaminate stage: wires the phases (see the package docstring)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from stages.base import Column, FitResult, Partitions, Stage, with_decision
from stages.decontaminate import evalsets
from stages.decontaminate.config import Config
from stages.decontaminate.frequency import partition_frequency
from stages.decontaminate.index import INDEX_FORMAT_VERSION, Index, cache_key, digests, load_or_build
from stages.decontaminate.match import Hit, cut, cut_ranges, find_hits
from stages.decontaminate.normalize import NORMALIZATION_VERSION, UNIT_HASH_NAME, units

REASON_OVERLAP = "decontaminate.benchmark_overlap"
REASON_EMPTY = "decontaminate.empty_after_cut"
INDEX_DIR = "index"
BASE_DIR = "base"
SPAN_TYPE = pa.list_(pa.struct([("eval_set", pa.string()), ("item", pa.string()), ("start", pa.int32()),
                                ("end", pa.int32()), ("coverage", pa.float32()), ("rule", pa.string())]))

_LOADED: dict[str, tuple[int, Index, list[int]]] = {}


def _load(folder: Path) -> tuple[Index, list[int]]:
    """The index in ``folder``, read once per process (re-read when its file changes)."""
    key = str(folder)
    mtime = (folder / "index.npz").stat().st_mtime_ns
    got = _LOADED.get(key)
    if got is None or got[0] != mtime:
        _LOADED.clear()
        index = Index.load(folder)
        _LOADED[key] = (mtime, index, index.gram_lengths)
        got = _LOADED[key]
    return got[1], got[2]


def sample_plan(names: list[str], rows: list[int], budget: int, seed: int) -> tuple[list[int], float]:
    """Which partitions ``fit`` reads to count corpus gram frequency, and the
    share of their documents it samples.

    Partitions are taken in the order of ``xxh64(name, seed)`` until they hold
    at least twice ``budget`` documents (all of them when the corpus is
    smaller), so the reading is bounded by the budget, not the corpus; within
    them a document is sampled at rate ``budget / rows read`` (by id hash).

    Returns:
        (partition positions, ascending; rate in (0, 1]). ``budget`` 0: none.
    """
    if budget <= 0 or not names:
        return [], 0.0
    order = sorted(range(len(names)), key=lambda i: (xxhash.xxh64_intdigest(names[i].encode(), seed=seed & (2**64 - 1)), i))
    chosen, total = [], 0
    for i in order:
        if total >= 2 * budget:
            break
        chosen.append(i)
        total += rows[i]
    return sorted(chosen), (min(1.0, budget / total) if total else 0.0)


class DecontaminateStage(Stage):
    """Finds benchmark items quoted in documents and drops, cuts or annotates
    them (docs/stages/decontaminate.md).

    Columns: ``decontaminate_hits`` (int32: distinct eval items matched),
    ``decontaminate_items`` (string ``"gsm8k:17,ceval:3"``: the matched
    ``<eval_set>:<item id>``, distinct, sorted; null when none),
    ``decontaminate_spans`` (list of struct ``eval_set, item, start, end,
    coverage, rule``: each hit, code points of the text the stage received,
    end exclusive, and the rule that made it a hit: ``item_coverage``,
    ``field_coverage`` or ``matched_units``, :mod:`stages.decontaminate.match`),
    ``decontaminate_cut_chars`` (int32: characters removed in ``cut`` mode,
    else 0). Reasons: ``decontaminate.benchmark_overlap``
    (``drop``), ``decontaminate.empty_after_cut`` (``cut`` left fewer than
    ``min_chars_after_cut`` non-space characters; the text is kept as it was).
    """

    name = "decontaminate"
    order = 450
    row_independent = True
    Config = Config
    columns = {
        "decontaminate_hits": Column("int32", "eval items matched (distinct)", lineage=True),
        "decontaminate_items": Column("string", "matched eval items, '<eval_set>:<item id>' sorted and "
                                      "comma-joined; null when none", lineage=True),
        "decontaminate_spans": Column(
            "list<item: struct<eval_set: string, item: string, start: int32, end: int32, coverage: float, "
            "rule: string>>",
            "each hit: eval set, item id, start/end code points (end exclusive) in the text the stage "
            "received, coverage (share of the item or field matched), rule (item_coverage, field_coverage "
            "or matched_units: which rule made it a hit)"),
        "decontaminate_cut_chars": Column("int32", "characters removed in cut mode (0 otherwise)"),
    }
    tally_columns = ("decontaminate_spans",)

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Documents hitting each eval set (``<eval_set>``) and item
        (``<eval_set>/<item id>``), and ``documents_hit``, over ``table``
        (its ``decontaminate_spans`` column)."""
        out: dict[str, int] = {}
        hit_docs = 0
        for spans in table["decontaminate_spans"].to_pylist():
            if not spans:
                continue
            hit_docs += 1
            sets = sorted({s["eval_set"] for s in spans})
            items = sorted({f"{s['eval_set']}/{s['item']}" for s in spans})
            for key in (*sets, *items):
                out[key] = out.get(key, 0) + 1
        out["documents_hit"] = hit_docs
        return dict(sorted(out.items()))

    @classmethod
    def preflight(cls, config: Config) -> list[str]:
        """One line per eval set that cannot be used: missing path, unknown
        format, unreadable file, a field or id field absent from the records,
        a repeated id, no items, or an item whose fields hold no letter or
        digit (``decontaminate.eval_sets.<name>: ...``)."""
        problems = []
        for name, es in sorted(config.eval_sets.items()):
            key = f"decontaminate.eval_sets.{name}"
            try:
                items = evalsets.read_items(es)
            except evalsets.EvalSetError as exc:
                problems.append(f"{key}: {exc}")
                continue
            if not items:
                problems.append(f"{key}: {es.path} holds no items")
                continue
            empty = [it.id for it in items if not any(len(units(t)[0]) for t in it.fields)]
            if empty:
                problems.append(f"{key}: {len(empty)} item(s) with no letter or digit in fields "
                                f"{list(es.fields)} (first: id {empty[0]!r})")
        return problems

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """The index's cache key as ``index_digest`` (a sha256 hex; not named
        ``*_key``, which ``pipeline.redact`` publishes as a credential) and
        the format/normalisation versions (the digest covers every eval
        file's sha256, so an edited eval set, even a saved HF directory,
        re-runs the stage)."""
        if not config.enabled:
            return {}
        try:
            key = cache_key(config, digests(config))
        except (OSError, evalsets.EvalSetError) as exc:
            key = f"unreadable: {exc}"
        return {"index_digest": key, "index_format": INDEX_FORMAT_VERSION,
                "normalization": NORMALIZATION_VERSION}

    def fit(self, partitions: Partitions) -> FitResult:
        """Load (or build and cache) the index, count its grams' document
        frequency over a sample of the corpus, and write the index without
        the corpus-common grams to ``work_dir/index``.

        Returns:
            Facts: the cache key (``index_digest``) and whether it was
            reused (``index_reused``), unit hash, gram
            lengths, per eval set items / CJK items / too-short items, grams,
            template grams, the corpus sample (partitions, documents, rate)
            and the corpus-common grams left out.

        Raises:
            evalsets.EvalSetError: an eval set cannot be read (preflight
                reports it before a build).
            ValueError: ``mode: cut`` in a stage that may not edit text.
        """
        config: Config = self.config
        if config.mode == "cut" and not self.ctx.edits_text:
            raise ValueError("decontaminate.mode: cut edits text, but the stage runs after the tokenizer")
        work_dir = Path(self.ctx.work_dir)
        base, key, reused = load_or_build(config, Path(self.ctx.cache_dir))
        for stale in (work_dir / BASE_DIR, work_dir / INDEX_DIR):
            shutil.rmtree(stale, ignore_errors=True)
        base.save(work_dir / BASE_DIR)
        paths = list(partitions.paths)
        rows = [p.num_rows() for p in paths]
        chosen, rate = sample_plan([p.name for p in paths], rows, config.sample_documents, self.ctx.seed)
        results = partitions.map(partition_frequency, [
            {"path": paths[i], "index": str(work_dir / BASE_DIR), "rate": rate, "seed": self.ctx.seed}
            for i in chosen])
        sampled = sum(r["documents"] for r in results)
        counts = np.zeros(len(base.keys), np.int64)
        for r in results:
            np.add.at(counts, r["keys"], r["counts"])
        common = np.flatnonzero((counts >= config.min_corpus_documents)
                                & (counts > config.max_corpus_share * max(sampled, 1)))
        index = base.without(common)
        index.save(work_dir / INDEX_DIR)
        shutil.rmtree(work_dir / BASE_DIR, ignore_errors=True)
        unmatchable = {name: int(((index.coverable < config.min_item_units)
                                  & (index.coverable < index.item_units)
                                  | (index.coverable == 0))[index.item_set == s].sum())
                       for s, name in enumerate(index.set_names)}
        facts = {
            "index_digest": key, "index_reused": reused, "index_format": INDEX_FORMAT_VERSION,
            "normalization": NORMALIZATION_VERSION, "unit_hash": UNIT_HASH_NAME,
            "mode": config.mode, "ngram_words": config.ngram_words, "ngram_cjk": config.ngram_cjk,
            "gram_lengths": index.gram_lengths, "min_coverage": config.min_coverage,
            **{k: v for k, v in base.facts.items()},
            "unmatchable_items": unmatchable,
            "corpus_sample": {"partitions": len(chosen), "of_partitions": len(paths), "documents": sampled,
                              "rate": round(rate, 6)},
            "corpus_common_grams": int(len(common)),
            "max_corpus_share": config.max_corpus_share, "min_corpus_documents": config.min_corpus_documents,
        }
        warnings = tuple(f"decontaminate: {n} item(s) of eval set {name!r} cannot be matched (too short, or "
                         f"made of template/common grams)" for name, n in unmatchable.items() if n)
        return FitResult(facts=facts, warnings=warnings)

    def process(self, table: pa.Table) -> pa.Table:
        """Match every document; drop, cut or annotate per ``mode``.

        Args:
            table: document table (n rows) with ``text`` (and ``chars``).

        Returns:
            ``table`` (``text``/``chars`` replaced where ``cut`` removed
            spans) with the four columns, ``keep`` and ``reason``; same rows.

        Raises:
            FileNotFoundError: :meth:`fit` has not written the index.
        """
        config: Config = self.config
        folder = Path(self.ctx.work_dir) / INDEX_DIR
        if not (folder / "index.npz").exists():
            raise FileNotFoundError(f"decontaminate: {folder} missing; run fit() before process()")
        index, lengths = _load(folder)
        texts = table["text"].to_pylist()
        n = len(texts)
        hits_col, items_col, spans_col, cut_col, reasons = [], [], [], [], []
        edited = False
        for i, text in enumerate(texts):
            doc_units = units(text)
            hits: list[Hit] = find_hits(text, index, config, lengths, doc_units)
            reason = None
            removed = 0
            if hits:
                names = sorted({f"{h.eval_set}:{h.item}" for h in hits})
                hits_col.append(len(names))
                items_col.append(",".join(names))
                spans_col.append([{"eval_set": h.eval_set, "item": h.item, "start": h.start, "end": h.end,
                                   "coverage": h.coverage, "rule": h.rule} for h in hits])
                if config.mode == "drop":
                    reason = REASON_OVERLAP
                elif config.mode == "cut":
                    ranges = cut_ranges(hits, doc_units[1], doc_units[2], len(text), config.cut_margin)
                    rest = cut(text, ranges)
                    if len("".join(rest.split())) < config.min_chars_after_cut:
                        reason = REASON_EMPTY
                    else:
                        removed = len(text) - len(rest)
                        texts[i] = rest
                        edited = True
            else:
                hits_col.append(0)
                items_col.append(None)
                spans_col.append([])
            cut_col.append(removed)
            reasons.append(reason)
        if edited:
            table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
            if "chars" in table.column_names:
                table = table.set_column(table.column_names.index("chars"), "chars",
                                         pa.array([len(t) for t in texts], pa.int64()))
        columns = {"decontaminate_hits": pa.array(hits_col, pa.int32()),
                   "decontaminate_items": pa.array(items_col, pa.string()),
                   "decontaminate_spans": pa.array(spans_col, SPAN_TYPE),
                   "decontaminate_cut_chars": pa.array(cut_col, pa.int32())}
        assert len(hits_col) == n
        return with_decision(table, columns, reasons)
