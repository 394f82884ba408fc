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


def assemble(cfg, docs: pa.Table, tmp: Path, log) -> dict[str, Any]:
    """Pack, shuffle and write the version's samples, lineage and documents."""
    from pipeline.writer import write_shards
    from stages.packing import document_order, pack, shuffle_samples

    seq_length = cfg.output.seq_length
    ids = docs["id"].to_pylist()
    token_lists = docs["tokenize_input_ids"]
    token_arrays = [np.asarray(token_lists[i].values, dtype=np.int32) for i in range(len(ids))]
    repeats = np.asarray(docs["mixture_repeats"].to_pylist(), dtype=np.int64)
    order = document_order(ids, repeats, cfg.seed)
    samples, segments = pack(token_arrays, order, seq_length)
    if samples.shape[0] == 0:
        raise BuildError(f"the sampled documents hold fewer than seq_length + 1 = {seq_length + 1} "
                         "tokens: no sample can be packed (lower output.seq_length or add data)")
    perm = shuffle_samples(samples.shape[0], cfg.seed)
    samples = samples[perm]
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.shape[0])

    shards = write_shards(samples, tmp, prefix="corpus", max_shard_bytes=cfg.output.max_shard_bytes)

    doc_index = segments["doc_index"].to_numpy()
    take = pa.array(doc_index)
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
    }).sort_by([("sample_index", "ascending"), ("sample_token_start", "ascending")])
    seg_no = np.zeros(lineage.num_rows, dtype=np.int32)
    si = lineage["sample_index"].to_numpy()
    if len(si):
        starts = np.r_[0, np.flatnonzero(np.diff(si)) + 1]
        seg_no = (np.arange(len(si)) - np.repeat(starts, np.diff(np.r_[starts, len(si)]))).astype(np.int32)
    lineage = lineage.add_column(1, "segment", pa.array(seg_no))
    pq.write_table(lineage, tmp / "lineage.parquet", compression="zstd", row_group_size=1 << 16)

    keep_cols = [c for c in docs.column_names if c not in ("tokenize_input_ids", KEEP, REASON)]
    pq.write_table(docs.select(keep_cols), tmp / "documents.parquet", compression="zstd", row_group_size=8192)

    total_tokens = int(sum(len(a) * int(r) for a, r in zip(token_arrays, repeats)))
    packed = int(samples.shape[0]) * (seq_length + 1)
    log(f"[assemble] {samples.shape[0]} samples of {seq_length + 1} tokens in {len(shards)} shard(s)")
    return {
        "seq_length": seq_length,
        "num_samples": int(samples.shape[0]),
        "num_tokens": packed,
        "packing": {"method": "concat_split", "document_copies": int(order.shape[0]),
                    "tokens_sampled": total_tokens, "tokens_packed": packed,
                    "tokens_dropped_tail": total_tokens - packed},
        "shards": shards,
    }
