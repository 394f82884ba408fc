"""Deduplication: exact duplicates, MinHash-LSH near-duplicates and
(optionally) CCNet-style duplicate lines, global across every partition and
source. Every step runs as executor tasks over spill files; the driver holds
counts, never documents or duplicates.

Phases (:meth:`DedupStage.fit` only wires them; how records meet across
workers is :mod:`stages.dedup.exchange`, the pure normalization and hashing
:mod:`stages.dedup.normalize` and :mod:`stages.dedup.minhash`):

1. :mod:`stages.dedup.exact`: ``document_keys`` (per partition): ids,
   blake2b-128 digests of the exact-normalized text and every document's
   keeper key (:mod:`stages.dedup.keepers`), spilled by hash;
   ``repeated_id`` checks id uniqueness per id group; ``exact_group`` forms
   the exact groups per digest group.
2. :mod:`stages.dedup.signatures`: ``partition_signatures`` (per partition):
   MinHash signatures of the exact survivors (stored per partition as
   ``.npy``) and the LSH band records ``(band, bucket key, document)``
   spilled by bucket key; :mod:`stages.dedup.lsh`: ``band_group_edges`` (per
   band group) pairs bucket members and verifies each pair (exact Jaccard
   where the signature estimate is within the margin of the threshold).
3. :mod:`stages.dedup.components`: ``connected_components`` (large-star /
   small-star steps per node group); :mod:`stages.dedup.cluster`:
   ``component_members`` and ``component_keepers``: one keeper per cluster by
   an order-independent rule; ``final_records`` folds the exact groups in;
   ``partition_removed`` writes each partition's cluster members.
4. :mod:`stages.dedup.lines`: ``partition_lines`` / ``duplicate_lines`` (when
   ``line_dedup``): hashes of normalized lines of the survivors, spilled by
   hash; each line's owner is the best-keyed document holding it, the other
   occurrences are removed.

``fit`` writes ``work_dir/removed/<partition>`` (``id, keeper, similarity,
reason`` of that partition's cluster members, sorted by id) and
``work_dir/lines/<partition>`` (``id, line``), and deletes its spill and
signature files. :meth:`DedupStage.process` joins a partition's own files
back onto it and, for line dedup, replaces ``text`` and ``chars``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from common.io import write_bytes_atomic
from common.spill import forget
from stages.base import Column, Figure, FitResult, Partitions, Stage, with_decision
from stages.dedup import cluster, components, exact, exchange, lines, lsh, signatures
from stages.dedup.config import Config
from stages.dedup.minhash import BAND_HASH_NAME, SHINGLE_HASH_NAME

REMOVED_DIR = "removed"
_REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("keeper", pa.string()), ("similarity", pa.float64()),
                             ("reason", pa.string())])
LINES_DIR = "lines"


def fit_figures(config: Config, sizes: dict[int, int]) -> tuple[Figure, ...]:
    """The report's dedup charts: the LSH S-curve of ``config`` (P(candidate
    pair) = 1 - (1 - J^r)^b against Jaccard similarity J, 101 points, the
    threshold dashed) and, when a cluster has more than one document, the
    cluster sizes (documents per cluster -> clusters)."""
    b, r = config.num_bands, config.rows_per_band
    js = [i / 100 for i in range(101)]
    figures = [Figure(kind="curve", title=f"LSH S-curve, {b} bands x {r} rows", x_label="Jaccard similarity J",
                      y_label="P(candidate pair)", x=tuple(js), y=tuple(1 - (1 - j ** r) ** b for j in js),
                      marks={"": [config.jaccard_threshold]})]
    multi = {k: v for k, v in sorted(sizes.items()) if int(k) > 1}
    if multi:
        figures.append(Figure(kind="bars", title="near-duplicate clusters", x_label="documents in cluster",
                              y_label="clusters", x=tuple(str(k) for k in multi), y=tuple(multi.values())))
    return tuple(figures)


def removed_by_source(keys: list[dict[str, Any]], written: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Documents and exact/near-duplicate removals per source, over every
    partition: ``{source: {"documents", "dedup.exact_duplicate",
    "dedup.near_duplicate"}}``, sorted by source (null source:
    :data:`stages.dedup.exact.NO_SOURCE`). ``keys`` are the
    :func:`~stages.dedup.exact.document_keys` results, ``written`` the
    :func:`~stages.dedup.cluster.partition_removed` ones. Line dedup's
    ``dedup.duplicate_lines`` is decided in :meth:`DedupStage.process` and
    not counted."""
    out: dict[str, dict[str, int]] = {}
    for k in keys:
        for source, n in k["sources"].items():
            row = out.setdefault(source, {"documents": 0, exact.REASON_EXACT: 0, cluster.REASON_NEAR: 0})
            row["documents"] += n
    for w in written:
        for source, reasons in w["removed"].items():
            for reason, n in reasons.items():
                out[source][reason] += n
    return dict(sorted(out.items()))


def removed_share_warnings(by_source: dict[str, dict[str, int]], share: float | None) -> tuple[str, ...]:
    """One warning per source of which dedup removed more than ``share`` of
    the documents (none when ``share`` is None), sorted by source, e.g.
    ``"dedup removed 40 of 40 documents (100.0%) of source 'mirror' (> 50%
    warn_removed_share): 40 exact, 0 near duplicates of documents kept
    elsewhere; is the source a copy?"``."""
    if share is None:
        return ()
    lines = []
    for source, row in by_source.items():
        n_exact, n_near = row[exact.REASON_EXACT], row[cluster.REASON_NEAR]
        removed, total = n_exact + n_near, row["documents"]
        if total and removed / total > share:
            lines.append(f"dedup removed {removed:,} of {total:,} documents ({removed / total:.1%}) of source "
                         f"{source!r} (> {share:.0%} warn_removed_share): {n_exact:,} exact, {n_near:,} near "
                         f"duplicates of documents kept elsewhere; is the source a copy?")
    return tuple(lines)


class DedupStage(Stage):
    """Exact, MinHash-LSH near-duplicate and duplicate-line removal (see the
    module docstring and docs/stages/dedup.md).

    Columns added by :meth:`process`: ``dedup_cluster`` (string: the cluster's
    keeper id, the keeper included; null for a document in no cluster),
    ``dedup_similarity`` (float64: 1.0 for an exact duplicate of the keeper,
    else estimated Jaccard to the keeper; null for keepers and singletons),
    ``dedup_lines_removed`` and ``dedup_chars_removed`` (int64: lines and
    characters removed by line dedup; 0 when none; null when line dedup is
    off or the document was removed whole). Reasons:
    ``dedup.exact_duplicate``, ``dedup.near_duplicate``,
    ``dedup.duplicate_lines`` (every non-blank line was a removed duplicate).
    """

    row_independent = True
    name = "dedup"
    order = 400
    columns = {
        "dedup_cluster": Column("string", "the cluster's keeper id (keeper included); null in no cluster",
                                lineage=True),
        "dedup_similarity": Column("double", "1.0 for an exact duplicate of the keeper, else estimated Jaccard "
                                   "similarity to it; null for keepers and singletons", lineage=True, digits=3),
        "dedup_lines_removed": Column("int64", "lines removed by line dedup (null when off)"),
        "dedup_chars_removed": Column("int64", "characters removed by line dedup (null when off)"),
    }
    Config = Config

    def fit(self, partitions: Partitions) -> FitResult:
        """Find duplicate clusters and lines over all partitions; write
        ``work_dir/removed/`` and ``work_dir/lines/``.

        Returns:
            Manifest facts: hash names, seed, num_perm, bands, rows, threshold,
            n-gram sizes, keep rule, script folding, line settings, the
            S-curve (``s_curve``: 21 ``[J, P(candidate)]`` points), spill
            group counts, counts (documents, exact_duplicates,
            near_duplicates, clusters, candidate_pairs, verified_edges,
            exact_checks, empty_after_normalization, lines_considered,
            lines_removed) and ``removed_by_source``. Warnings: one per
            source of which more than ``warn_removed_share`` was removed.

        Raises:
            ValueError: when a document id occurs twice, or ``keep:
                lowest_perplexity`` without perplexity values.
        """
        config: Config = self.config
        work_dir = Path(self.ctx.work_dir)
        spill, signature_dir = work_dir / "spill", work_dir / "signatures"
        for stale in (spill, signature_dir, work_dir / LINES_DIR, work_dir / REMOVED_DIR):
            shutil.rmtree(stale, ignore_errors=True)
        paths = list(partitions.paths)
        names = [p.name for p in paths]
        run = partitions.map
        upper = sum(p.num_rows() for p in paths)  # rows incl. not kept
        groups = {"ids": exchange.spill_groups(upper, exchange.ID_RECORDS_PER_GROUP),
                  "exact": exchange.spill_groups(upper, exchange.EXACT_RECORDS_PER_GROUP),
                  "bands": exchange.spill_groups(upper * config.num_bands, exchange.BAND_RECORDS_PER_GROUP),
                  "nodes": exchange.spill_groups(upper, exchange.NODE_RECORDS_PER_GROUP)}
        base = {"config": config, "spill": str(spill)}  # the frozen model itself: one set of defaults
        keys = run(exact.document_keys, [
            {**base, "path": p, "partition": i, "id_groups": groups["ids"], "exact_groups": groups["exact"],
             "node_groups": groups["nodes"]} for i, p in enumerate(paths)])
        exact.check_unique_ids(spill, groups["ids"], run)

        # exact groups: members by keeper node group, duplicates to skip by partition
        exact_files = [str(f) for f in exchange.spill_files(spill / "exact")]
        exact_out = spill / "exact_groups"
        exact_groups = run(exact.exact_group, [
            {"files": exact_files, "group": k, "node_groups": groups["nodes"], "out": str(exact_out)}
            for k in range(groups["exact"] if config.exact else 0)])
        n_exact = sum(e["duplicates"] for e in exact_groups)
        kinds = {kind: [str(f) for f in exchange.spill_files(exact_out / kind)]
                 for kind in ("skip", "members", "counts")}

        candidates = n_edges = signed = empty = checks = 0
        near_files: list[str] = []
        n_components = members = 0
        sizes: dict[int, int] = {}
        if config.near:
            signs = run(signatures.partition_signatures, [
                {**base, "path": p, "partition": i, "band_groups": groups["bands"], "skip_files": kinds["skip"],
                 "signatures": str(signature_dir)} for i, p in enumerate(paths)])
            signed, empty = sum(s["signed"] for s in signs), sum(s["empty"] for s in signs)
            found = run(lsh.band_group_edges, [
                {**base, "group": k, "signatures": str(signature_dir), "paths": paths,
                 "node_groups": groups["nodes"], "candidate_groups": groups["bands"]}
                for k in range(groups["bands"])])
            if sum(f["candidates"] for f in found):
                distinct = run(lsh.distinct_candidates, [{"spill": str(spill), "group": k}
                                                         for k in range(groups["bands"])])
                candidates = sum(d["candidates"] for d in distinct)
                checks = sum(d["exact_checks"] for d in distinct)
            if sum(f["edges"] for f in found):
                labels, n_edges = components.connected_components(
                    exchange.spill_files(spill / "edges"), spill / "components", groups["nodes"], run)
                node_files = [str(f) for f in exchange.spill_files(spill / "nodes")]
                run(cluster.component_members, [
                    {"labels": [str(f) for f in labels], "nodes": node_files, "counts": kinds["counts"],
                     "group": j, "groups": groups["nodes"],
                     "out": str(spill / "members" / f"group-{j:05d}.parquet")} for j in range(groups["nodes"])])
                member_files = [str(f) for f in exchange.spill_files(spill / "members")]
                kept = run(cluster.component_keepers, [
                    {"files": member_files, "group": j, "groups": groups["nodes"], "signatures": str(signature_dir),
                     "num_perm": config.num_perm, "out": str(spill / "near" / f"group-{j:05d}.parquet")}
                    for j in range(groups["nodes"])])
                n_components = sum(k["components"] for k in kept)
                members = sum(k["members"] for k in kept)
                for k in kept:
                    for size, count in k["sizes"].items():
                        sizes[int(size)] = sizes.get(int(size), 0) + count
                near_files = [str(f) for f in exchange.spill_files(spill / "near")]

        # every cluster member's final row, by partition, then one file per partition
        final = run(cluster.final_records, [
            {"near": near_files, "exact": kinds["members"], "group": j,
             "out": str(spill / "final" / f"group-{j:05d}.parquet")} for j in range(groups["nodes"])])
        for f in final:
            for size, count in f["sizes"].items():
                sizes[int(size)] = sizes.get(int(size), 0) + count
        final_files = [str(f) for f in exchange.spill_files(spill / "final")]
        written = run(cluster.partition_removed, [{"files": final_files, "partition": i, "path": p,
                                                   "out": str(work_dir / REMOVED_DIR / name)}
                                                  for i, (p, name) in enumerate(zip(paths, names))])
        by_source = removed_by_source(keys, written)
        (work_dir / REMOVED_DIR).mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(str(len(names)).encode(), work_dir / REMOVED_DIR / "_DONE")

        line_counts = {"lines_considered": 0, "lines_removed": 0}
        if config.line_dedup:
            groups["lines"] = exchange.spill_groups(sum(k["lines"] for k in keys), exchange.LINE_RECORDS_PER_GROUP)
            spilled = run(lines.partition_lines, [
                {**base, "path": p, "partition": i, "line_groups": groups["lines"], "skip_files": final_files}
                for i, p in enumerate(paths)])
            line_counts["lines_considered"] = sum(s["lines"] for s in spilled)
            line_counts["lines_removed"] = sum(run(lines.duplicate_lines, [
                {"spill": str(spill), "group": k} for k in range(groups["lines"])]))
            run(lines.partition_line_removals, [{"spill": str(spill), "partition": i,
                                                 "out": str(work_dir / LINES_DIR / name)}
                                                for i, name in enumerate(names)])
        forget()
        shutil.rmtree(spill, ignore_errors=True)
        shutil.rmtree(signature_dir, ignore_errors=True)

        facts = {
            "exact_hash": exact.EXACT_HASH_NAME, "shingle_hash": SHINGLE_HASH_NAME, "band_hash": BAND_HASH_NAME,
            "line_hash": lines.LINE_HASH_NAME,
            "seed": config.seed, "num_perm": config.num_perm, "num_bands": config.num_bands,
            "rows_per_band": config.rows_per_band, "jaccard_threshold": config.jaccard_threshold,
            "ngram_words": config.ngram_words, "ngram_chars": config.ngram_chars,
            "keep": config.keep, "fold_chinese_script": config.fold_chinese_script, "verify": config.verify,
            "verify_margin_sd": config.verify_margin_sd,
            "verify_agreements": dict(zip(("low", "needed", "high"), lsh.agreement_cuts(config))),
            "line_dedup": config.line_dedup, "line_min_chars": config.line_min_chars,
            "s_curve": [[round(j, 3), round(p, 4)]
                        for j, p in lsh.s_curve(config.num_bands, config.rows_per_band)],
            "candidate_probability_at_threshold": round(lsh.candidate_probability(
                config.jaccard_threshold, config.num_bands, config.rows_per_band), 4),
            "spill_groups": groups,
            "documents": sum(k["documents"] for k in keys),
            "exact_duplicates": n_exact,
            "near_duplicates": members - n_components,
            "clusters": sum(sizes.values()),  # one keeper per cluster
            "cluster_sizes": {str(k): v for k, v in sorted(sizes.items())},  # documents per cluster -> clusters
            "candidate_pairs": candidates, "verified_edges": n_edges, "exact_checks": checks,
            "signed_documents": signed, "empty_after_normalization": empty,
            **line_counts,
            "warn_removed_share": config.warn_removed_share,
            "removed_by_source": by_source,
        }
        return FitResult(facts=facts, warnings=removed_share_warnings(by_source, config.warn_removed_share),
                         figures=fit_figures(config, sizes))

    def _read_by_id(self, path: Path, ids: pa.ChunkedArray | pa.Array) -> pa.Table:
        """Rows of a Parquet file or directory (sorted by id) whose id is in
        ``ids``: row groups outside ``[min(ids), max(ids)]`` are skipped by
        their statistics, the rest filtered exactly."""
        lo, hi = pc.min(ids).as_py(), pc.max(ids).as_py()
        dataset = ds.dataset(path, format="parquet")
        expr = (ds.field("id") >= lo) & (ds.field("id") <= hi)
        table = dataset.to_table(filter=expr)
        return table.filter(pc.is_in(table["id"], value_set=pa.array(ids.to_pylist() if isinstance(
            ids, pa.ChunkedArray) else ids, pa.string())))

    def process(self, table: pa.Table) -> pa.Table:
        """Apply ``fit``'s decisions to one partition.

        Args:
            table: document table (n rows) with ``id`` and ``text``.

        Returns:
            ``table`` with ``text``/``chars`` replaced where lines were
            removed (a document dropped as ``dedup.duplicate_lines`` keeps
            its original text), plus ``dedup_cluster``, ``dedup_similarity``,
            ``dedup_lines_removed``, ``dedup_chars_removed``, ``keep``,
            ``reason``; same rows and order.

        Raises:
            FileNotFoundError: when :meth:`fit` has not written its result.
        """
        config: Config = self.config
        work_dir = Path(self.ctx.work_dir)
        folder = work_dir / REMOVED_DIR
        if not (folder / "_DONE").exists():
            raise FileNotFoundError(f"dedup: {folder} missing; run fit() before process()")
        n = table.num_rows
        own = folder / self.partition if self.partition else None
        if own is not None:
            removed = pq.read_table(own) if own.exists() else _REMOVED_SCHEMA.empty_table()
        elif n and any(folder.glob("*.parquet")):  # called outside a build: look the ids up everywhere
            removed = self._read_by_id(folder, table["id"])
        else:
            removed = _REMOVED_SCHEMA.empty_table()
        index = pc.index_in(table["id"], value_set=removed["id"])
        cluster_keeper = removed["keeper"].take(index)
        similarity = removed["similarity"].take(index)
        reasons = removed["reason"].take(index).to_pylist()
        lines_removed = pa.nulls(n, pa.int64())
        chars_removed = pa.nulls(n, pa.int64())
        lines_dir = work_dir / LINES_DIR
        if config.line_dedup:
            n_lines, n_chars = [None if r else 0 for r in reasons], [None if r else 0 for r in reasons]
            if self.partition:
                own_lines = lines_dir / self.partition
                files = [own_lines] if own_lines.exists() else []
            else:
                files = sorted(lines_dir.glob("*.parquet")) if lines_dir.exists() else []
            if files and n:
                found = (pq.read_table(files[0]) if self.partition else self._read_by_id(lines_dir, table["id"]))
                found = found.sort_by([("id", "ascending"), ("line", "ascending")])
                by_id: dict[str, list[int]] = {}
                for doc_id, line in zip(found["id"].to_pylist(), found["line"].to_pylist()):
                    by_id.setdefault(doc_id, []).append(line)
                texts = table["text"].to_pylist()
                chars = table["chars"].to_pylist() if "chars" in table.column_names else [len(t) for t in texts]
                for i, doc_id in enumerate(table["id"].to_pylist()):
                    if reasons[i] is not None or doc_id not in by_id:
                        continue
                    edited = lines.remove_lines(texts[i], by_id[doc_id])
                    n_lines[i], n_chars[i] = len(by_id[doc_id]), len(texts[i]) - len(edited)
                    if not edited.strip():
                        reasons[i] = lines.REASON_LINES  # every line removed; the original text is kept
                    else:
                        texts[i], chars[i] = edited, len(edited)
                table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
                chars_arr = pa.array(chars, pa.int64())
                if "chars" in table.column_names:
                    table = table.set_column(table.column_names.index("chars"), "chars", chars_arr)
            lines_removed, chars_removed = pa.array(n_lines, pa.int64()), pa.array(n_chars, pa.int64())
        return with_decision(table, {"dedup_cluster": cluster_keeper, "dedup_similarity": similarity,
                                     "dedup_lines_removed": lines_removed,
                                     "dedup_chars_removed": chars_removed}, reasons)
