"""Assemble a version: order the sampled documents, pack ``seq_length + 1``
windows, shuffle the samples globally by seed, and write the MindRecord shards,
``lineage.parquet``, ``documents.parquet`` and ``decisions/<stage>.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.base import KEEP, REASON


class BuildError(RuntimeError):
    """The build cannot go on; the message says why."""


def final_documents(parts: list[Path]) -> pa.Table:
    tables = [pq.read_table(p) for p in parts]
    table = pa.concat_tables(tables, promote_options="default") if tables else None
    if table is None or table.num_rows == 0:
        raise BuildError("no document survived the stages: nothing to pack (see the summary table)")
    table = table.filter(pc.equal(table[KEEP], True))
    if table.num_rows == 0:
        raise BuildError("no document survived the stages: nothing to pack (see the summary table)")
    return table.sort_by("id")


def write_decisions(stage_outputs: dict[str, list[Path]], out: Path) -> int:
    """Write ``decisions/<stage>.parquet``: every document a stage dropped, with
    its text, the stage's reason and every measurement made up to that stage
    (token ids excepted). Returns the number of rows written over all stages."""
    total = 0
    (out / "decisions").mkdir(parents=True, exist_ok=True)
    for name, parts in stage_outputs.items():
        tables = []
        for path in parts:
            t = pq.read_table(path)
            t = t.filter(pc.invert(t[KEEP]))
            tables.append(t.drop_columns([c for c in (KEEP, "tokenize_input_ids") if c in t.column_names]))
        table = pa.concat_tables(tables, promote_options="default").sort_by("id")
        pq.write_table(table, out / "decisions" / f"{name}.parquet", compression="zstd",
                       row_group_size=8192)
        total += table.num_rows
    return total


LINEAGE = "lineage.parquet"
LINEAGE_BY_DOC = "lineage_by_doc.parquet"
# Row groups of lineage.parquet (sorted by sample) and of the by-document index:
# a lookup decodes one or two groups. 65,536 rows is ~1 MB compressed, decoded
# in ~10 ms; 16,384 keeps the by-document groups (string keys) as cheap. Our
# choice, measured with bench/loader.py on a 10M-sample synthetic table.
LINEAGE_ROW_GROUP = 1 << 16
LINEAGE_BY_DOC_ROW_GROUP = 1 << 14


def write_lineage(segments: pa.Table, docs: pa.Table, inverse: np.ndarray, out: Path) -> pa.Table:
    """Write ``lineage.parquet`` (sorted by ``sample_index``, ``segment``; the
    segment columns plus each document's ``pipeline.lineage.DECISION_COLUMNS``
    that the documents table has) and its
    reverse index ``lineage_by_doc.parquet`` (same rows sorted by ``doc_id``,
    ``repeat``, ``doc_token_start``), both zstd with min/max statistics, so a
    step's rows or a document's rows are found by row-group statistics alone.

    Args:
        segments: the packing segments (packing sample numbers).
        docs: the final documents, indexed by ``segments["doc_index"]``.
        inverse: int64[num_samples], packing sample -> written (shuffled) index.
        out: the version directory being assembled.

    Returns:
        The lineage table as written (sample order).
    """
    from pipeline.lineage import DECISION_COLUMNS

    take = pa.array(segments["doc_index"].to_numpy())
    lineage = pa.table({
        "sample_index": pa.array(inverse[segments["sample_index"].to_numpy()], pa.int64()),
        "doc_id": docs["id"].take(take),
        "source": docs["source"].take(take),
        "file": docs["file"].take(take),
        "line": docs["line"].take(take),
        "repeat": segments["repeat"],
        "doc_token_start": segments["doc_token_start"],
        "doc_token_end": segments["doc_token_end"],
        "sample_token_start": segments["sample_token_start"],
        "sample_token_end": segments["sample_token_end"],
        # Each document's stage decisions, carried per piece so that a step
        # lookup never has to search documents.parquet (only for text).
        **{c: docs[c].take(take) for c in DECISION_COLUMNS if c in docs.column_names},
    }).sort_by([("sample_index", "ascending"), ("sample_token_start", "ascending")])
    seg_no = np.zeros(lineage.num_rows, dtype=np.int32)
    si = lineage["sample_index"].to_numpy()
    if len(si):
        starts = np.r_[0, np.flatnonzero(np.diff(si)) + 1]
        seg_no = (np.arange(len(si)) - np.repeat(starts, np.diff(np.r_[starts, len(si)]))).astype(np.int32)
    lineage = lineage.add_column(1, "segment", pa.array(seg_no))
    pq.write_table(lineage, out / LINEAGE, compression="zstd", row_group_size=LINEAGE_ROW_GROUP)
    by_doc = lineage.sort_by([("doc_id", "ascending"), ("repeat", "ascending"),
                              ("doc_token_start", "ascending")])
    pq.write_table(by_doc, out / LINEAGE_BY_DOC, compression="zstd", row_group_size=LINEAGE_BY_DOC_ROW_GROUP)
    return lineage


def packed_per_source(lineage: pa.Table, mixture: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Tokens of each source that made it into samples (after the dropped tail
    and best-fit padding), their share of the packed document tokens, and the
    difference to the mixture's ``target_share`` in percentage points."""
    lengths = pc.subtract(lineage["sample_token_end"], lineage["sample_token_start"])
    grouped = pa.table({"source": lineage["source"], "tokens": pc.cast(lengths, pa.int64())}) \
        .group_by("source").aggregate([("tokens", "sum")])
    tokens = dict(zip(grouped["source"].to_pylist(), grouped["tokens_sum"].to_pylist()))
    total = sum(tokens.values()) or 1
    targets = (mixture or {}).get("per_source", {})
    out = {}
    for source in sorted(set(tokens) | set(targets)):
        share = tokens.get(source, 0) / total
        target = targets.get(source, {}).get("target_share")
        out[source] = {"tokens": int(tokens.get(source, 0)), "share": share,
                       "share_error_pp": None if target is None else 100.0 * (share - target)}
    return out


def assemble(cfg, docs: pa.Table, tmp: Path, log, pad_id: int = 0,
             mixture: dict[str, Any] | None = None) -> dict[str, Any]:
    """Order, pack, shuffle and write the version's samples, lineage and documents.

    Args:
        cfg: the build config (``seed``, ``output.seq_length``,
            ``output.max_shard_bytes``, and ``output.packing`` when the config
            has it: ``concat_split`` (default) or ``best_fit``).
        docs: the final kept documents (``final_documents``), sorted by id,
            with ``tokenize_input_ids`` and ``mixture_repeats``.
        tmp: the version directory being assembled.
        log: a ``print``-like function.
        pad_id: token written into best-fit padding (the tokenizer's pad id, 0).
        mixture: the mixture stage's facts, to report packed vs target shares.

    Returns:
        Manifest entries: ``seq_length``, ``num_samples``, ``num_tokens``
        (``num_samples * (seq_length + 1)``, padding included), ``columns``
        (stored column -> row shape), ``packing`` (method, copies, tokens
        sampled / packed / dropped / padding, ``boundaries_width``,
        ``packed_per_source``), ``shards``.

    Raises:
        BuildError: no sample can be packed.
        ValueError: an unknown packing method.
    """
    from pipeline.writer import COLUMN, write_shards
    from stages.packing import (
        PACKING_METHODS,
        document_boundaries,
        document_order,
        pack,
        pack_best_fit,
        shuffle_samples,
    )

    seq_length = cfg.output.seq_length
    method = getattr(cfg.output, "packing", "concat_split")
    if method not in PACKING_METHODS:
        raise ValueError(f"output.packing: {method!r} is not one of {PACKING_METHODS}")
    ids = docs["id"].to_pylist()
    token_lists = docs["tokenize_input_ids"]
    token_arrays = [np.asarray(token_lists[i].values, dtype=np.int32) for i in range(len(ids))]
    repeats = np.asarray(docs["mixture_repeats"].to_pylist(), dtype=np.int64)
    order = document_order(ids, repeats, cfg.seed)
    if method == "best_fit":
        samples, segments = pack_best_fit(token_arrays, order, seq_length, pad_id=pad_id)
    else:
        samples, segments = pack(token_arrays, order, seq_length)
    if samples.shape[0] == 0:
        raise BuildError(f"the sampled documents hold fewer than seq_length + 1 = {seq_length + 1} "
                         "tokens: no sample can be packed (lower output.seq_length or add data)")
    boundaries = document_boundaries(segments, samples.shape[0], seq_length)
    perm = shuffle_samples(samples.shape[0], cfg.seed)
    samples, boundaries = samples[perm], boundaries[perm]
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.shape[0])

    shards = write_shards(samples, tmp, prefix="corpus", max_shard_bytes=cfg.output.max_shard_bytes,
                          columns={"actual_seq_len": boundaries})
    lineage = write_lineage(segments, docs, inverse, tmp)

    keep_cols = [c for c in docs.column_names if c not in ("tokenize_input_ids", KEEP, REASON)]
    pq.write_table(docs.select(keep_cols), tmp / "documents.parquet", compression="zstd", row_group_size=8192)
    # The lineage lookup's text index: id -> first 200 characters, small row groups.
    excerpts = pa.table({"id": docs["id"], "text_excerpt": pc.utf8_slice_codeunits(docs["text"], 0, 200)})
    pq.write_table(excerpts, tmp / "excerpts.parquet", compression="zstd", row_group_size=1024)

    meta = segments.schema.metadata
    total_tokens = int(sum(len(a) * int(r) for a, r in zip(token_arrays, repeats)))
    packed = int(samples.shape[0]) * (seq_length + 1)
    padding = int(meta[b"padding_tokens"])
    log(f"[assemble] {samples.shape[0]} samples of {seq_length + 1} tokens ({method}) in {len(shards)} shard(s)")
    return {
        "seq_length": seq_length,
        "num_samples": int(samples.shape[0]),
        "num_tokens": packed,
        "columns": {COLUMN: [seq_length + 1], "actual_seq_len": [int(boundaries.shape[1])]},
        "packing": {"method": method, "document_copies": int(order.shape[0]),
                    "tokens_sampled": total_tokens, "tokens_packed": packed - padding,
                    "tokens_dropped_tail": int(meta[b"dropped_tail_tokens"]),
                    "padding_tokens": padding, "pad_id": pad_id if method == "best_fit" else None,
                    "boundaries_width": int(boundaries.shape[1]),
                    "packed_per_source": packed_per_source(lineage, mixture)},
        "shards": shards,
    }
