"""Assemble a version without holding it: order, pack, shuffle and write the
shards, lineage, documents and decisions as independent executor tasks.

The output is what an in-memory assembly of the whole corpus would write
(``pipeline.packing``: ``document_order``, ``pack``/``pack_best_fit``,
``document_boundaries``, ``shuffle_samples``), cut into files that separate
tasks write. No process holds more than one partition, one bucket, one shard or
one table part. Every exchange goes through bucketed spill files
(:mod:`common.spill`: M map files, one row group per bucket).

Phases (each task writes its outputs atomically and a JSON marker with its
result under ``work/assemble/markers/``, so a killed build resumes inside the
assembly and a finished task is never redone):

1. **emit** (one task per partition): reads the partition's final view once
   and spills (a) every copy of every kept document (``mixture_repeats``
   copies) with its tokens and lineage facts, to the *order bucket* of its
   position key (``pipeline.packing.copy_keys``: key in ``[0, 1)``, bucket =
   ``floor(key * B)``, so buckets are consecutive ranges of the document
   order); (b) the kept documents, to their ``documents`` part (id hash);
   (c) each stage's dropped documents, to their ``decisions/<stage>`` part.
2. **pack** (one task per order bucket) + **table parts** (one task per part
   of ``documents``/``excerpts`` and of each ``decisions/<stage>``): a pack
   task sorts its bucket by ``(key, id, repeat)``, the document order, and
   cuts ``seq_length + 1`` windows. ``concat_split``: the bucket knows its
   global token offset (prefix sum of the buckets' token counts, from phase 1),
   so its windows are the global windows; the few windows that cross a
   bucket edge are *stitched* by the driver from the pieces the buckets leave
   (at most two per bucket, each shorter than a window). ``best_fit``: best-fit
   packing within each order bucket (one bucket when the corpus is below
   ``order_bucket_tokens``: then exactly the in-memory result). Each sample is
   spilled to the *shuffle bucket* of its shuffle key
   (``pipeline.packing.sample_shuffle_keys``, top bits), with its segments.
3. **shards** (one task per shard): the written order is the samples sorted
   by shuffle key; shuffle bucket ``j`` holds a key range, so its samples take
   positions ``start_j ..`` (prefix sum of the bucket counts). A shard task
   reads the buckets overlapping its row range, sorts each by key, writes its
   MindRecord file, its ``lineage/part-SSSSS.parquet`` and spills its lineage
   rows by document for phase 4.
4. **lineage by document** (one task per part).

Memory per task: phase 1 one partition (``ingest.partition_bytes`` of text
and its tokens); phase 2 one order bucket (``output.order_bucket_tokens``
tokens) or one table part (``output.table_part_bytes``); phase 3 one shard
(``output.max_shard_bytes``) plus one shuffle bucket
(``output.shuffle_bucket_samples``). The driver holds bucket counts (a few
integers per bucket) and one stitched window at a time. See
docs/architecture.md ("Scale") for the measured costs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import naming_path
from common.hashing import id_hashes, phase_seed
from common.io import commit, sha256_file, temp_path, write_bytes_atomic, write_json_atomic, write_table_atomic
from common.spill import forget, read_bucket, write_buckets
from pipeline import layout
from stages.base import KEEP, REASON, read_view

# Row groups of the lineage parts (sorted by sample) and of the by-document
# index: a lookup decodes one or two groups. 65,536 rows is ~1 MB compressed,
# decoded in ~10 ms; 16,384 keeps the by-document groups (string keys) as
# cheap. Our choice, measured with bench/loader.py on a 10M-sample table.
LINEAGE_ROW_GROUP = 1 << 16
LINEAGE_BY_DOC_ROW_GROUP = 1 << 14
DOCUMENTS_ROW_GROUP = 8192
EXCERPTS_ROW_GROUP = 1024
EXCERPT_CHARS = 200
# Sample ids of best-fit packing: bucket b's j-th sample is b << 40 | j
# (a bucket holds far fewer than 2**40 samples).
_BEST_FIT_SHIFT = 40
TABLE_OPTS = {"compression": "zstd"}
# Spill folder of the shard tasks' Megatron sequence lengths (one .npy per shard).
_LENGTHS_SPILL = "megatron_lengths"
SEGMENT_FIELDS = ("doc_id", "source", "file", "line", "repeat", "doc_token_start", "doc_token_end",
                  "sample_token_start", "sample_token_end")


class BuildError(RuntimeError):
    """The build cannot go on; the message says why."""


# --------------------------------------------------------------------------- small helpers


def _write_table(table: pa.Table, path: Path, row_group_size: int) -> str:
    """Write Parquet atomically (:func:`common.io.write_table_atomic`); return
    the file's sha256. An ``OSError`` (a full disk) names the file."""
    write_table_atomic(table, path, row_group_size=max(1, row_group_size), **TABLE_OPTS)
    return sha256_file(path)


class _RowGroupWriter:
    """A Parquet file written in appended tables, cut into row groups of
    exactly ``row_group_size`` rows (the rest last), so its bytes do not
    depend on how the rows were handed over; atomic (temporary name). An
    ``OSError`` (a full disk) names the file."""

    def __init__(self, path: Path, row_group_size: int):
        self.path, self.size = Path(path), row_group_size
        self.tmp = temp_path(self.path)
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.rows = 0
        self.writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_rows += table.num_rows
        self.rows += table.num_rows
        if self.pending_rows >= self.size:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self.pending:
            return
        merged = pa.concat_tables(self.pending, promote_options="permissive")
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.tmp, merged.schema, **TABLE_OPTS)
            self.schema = merged.schema
        full = merged.num_rows if final else merged.num_rows - merged.num_rows % self.size
        with naming_path(self.tmp):
            for lo in range(0, full, self.size):
                self.writer.write_table(_conform(merged.slice(lo, min(self.size, full - lo)), self.schema),
                                        row_group_size=self.size)
        rest = merged.slice(full)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows = rest.num_rows

    def close(self) -> bool:
        """Finish the file; False (and no file) when no row was written."""
        self._flush(final=True)
        if self.writer is None:
            return False
        with naming_path(self.tmp):
            self.writer.close()
        commit(self.tmp, self.path)
        return True


def _write_json(obj: Any, path: Path) -> None:
    """A task marker or state file: compact JSON, sorted keys, ASCII, no
    final newline (:func:`common.io.write_json_atomic`)."""
    write_json_atomic(obj, path, indent=None, sort_keys=True, ensure_ascii=True, final_newline=False)


def _marked(marker: Path):
    """The result a finished task left, or None."""
    return json.loads(marker.read_text(encoding="utf-8")) if marker.exists() else None


def _schema_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode("ascii")


def _schema_ref(schema: pa.Schema, folder: Path) -> str:
    """Store a schema once under ``folder`` (named by its hash) and return the
    name: partitions mostly share a schema, so markers stay small."""
    data = schema.remove_metadata().serialize().to_pybytes()
    name = hashlib.sha256(data).hexdigest()[:16]
    path = folder / f"{name}.arrows"
    if not path.exists():
        write_bytes_atomic(data, path)
    return name


def _schema_load(name: str, folder: Path) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer((folder / f"{name}.arrows").read_bytes()))


def _schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def unify(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema for every part of a table: a column that is all-null (type
    ``null``) in some partitions takes the type the others give it."""
    return pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order, cast to it
    (missing columns null)."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            col = table[field.name]
            columns.append(col if col.type == field.type else col.cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def order_bucket_of(keys: np.ndarray, num_buckets: int) -> np.ndarray:
    """Order bucket of each copy: ``floor(key * num_buckets)`` (keys in
    ``[0, 1)``), clipped to the last bucket: monotone in the key, so bucket
    ``b`` is the ``b``-th range of the document order."""
    return np.minimum((np.asarray(keys) * num_buckets).astype(np.int64), num_buckets - 1)


def shuffle_bucket_of(keys: np.ndarray, bits: int) -> np.ndarray:
    """Shuffle bucket of each sample: the top ``bits`` bits of its uint64
    shuffle key, so bucket ``j`` is the ``j``-th key range."""
    if bits == 0:
        return np.zeros(len(keys), np.int64)
    return (np.asarray(keys, np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def _bits_for(count: int, per_bucket: int) -> int:
    bits = 0
    while (1 << bits) * per_bucket < count and bits < 24:
        bits += 1
    return bits


def _ends_lists(sample: np.ndarray, sample_end: np.ndarray, num_samples: int,
                seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, the ascending distinct document ends within the model input
    (``actual_seq_len`` before padding; see
    ``pipeline.packing.document_boundaries``), the last always ``seq_length``.

    Returns:
        ``(offsets int32[num_samples + 1], values int32[...])``.
    """
    end = np.minimum(np.asarray(sample_end, np.int64), seq_length)
    sample = np.concatenate([np.asarray(sample, np.int64), np.arange(num_samples, dtype=np.int64)])
    end = np.concatenate([end, np.full(num_samples, seq_length, np.int64)])
    keys = np.unique(sample * (seq_length + 1) + end)
    counts = np.bincount(keys // (seq_length + 1), minlength=num_samples)
    offsets = np.zeros(num_samples + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return offsets, (keys % (seq_length + 1)).astype(np.int32)


def _pad_ends(ends: pa.ListArray | pa.ChunkedArray, width: int, seq_length: int) -> np.ndarray:
    """``actual_seq_len`` rows: each list padded to ``width`` by repeating
    ``seq_length`` (int32[n, width])."""
    if isinstance(ends, pa.ChunkedArray):
        ends = ends.combine_chunks()
    offsets = ends.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    values = ends.flatten().to_numpy(zero_copy_only=False).astype(np.int32)
    n = len(ends)
    out = np.full((n, width), seq_length, np.int32)
    counts = np.diff(offsets)
    if counts.max(initial=0) > width:
        raise BuildError(f"a sample holds {counts.max()} document ends, more than the width {width}")
    rows = np.repeat(np.arange(n), counts)
    cols = np.arange(len(values)) - np.repeat(offsets[:-1], counts)
    out[rows, cols] = values
    return out


def _segment_table(keys: np.ndarray, copies: pa.Table, entry: np.ndarray, doc_start, doc_end,
                   sample_start, sample_end, decision_columns: list[str]) -> pa.Table:
    take = pa.array(np.asarray(entry, np.int64))
    columns = {
        "key": pa.array(np.asarray(keys, np.uint64), pa.uint64()),
        "doc_id": copies["id"].take(take),
        "source": copies["source"].take(take),
        "file": copies["file"].take(take),
        "line": copies["line"].take(take),
        "repeat": copies["repeat"].take(take),
        "doc_token_start": pa.array(np.asarray(doc_start, np.int64), pa.int64()),
        "doc_token_end": pa.array(np.asarray(doc_end, np.int64), pa.int64()),
        "sample_token_start": pa.array(np.asarray(sample_start).astype(np.int32), pa.int32()),
        "sample_token_end": pa.array(np.asarray(sample_end).astype(np.int32), pa.int32()),
    }
    for name in decision_columns:
        columns[name] = copies[name].take(take)
    return pa.table(columns)


# --------------------------------------------------------------------------- phase 1: emit


def emit_partition(task: dict[str, Any]) -> dict[str, Any]:
    """Phase 1 for one partition (see the module docstring).

    Args:
        task: ``part`` (final :class:`stages.base.PartitionRef`), ``index``,
            ``stages`` ([(stage name, number of layers up to it)]), ``seed``,
            ``order_buckets``, ``doc_parts``, ``decision_parts`` ({stage: K}),
            ``decision_columns`` (lineage facts carried per segment),
            ``spill`` (directory), ``marker``.

    Returns:
        ``{"order": {bucket: [copies, tokens]}, "documents": rows,
        "decisions": {stage: rows}, "schemas": {table: base64 schema}}``.
    """
    from pipeline.packing import copy_keys

    marker = Path(task["marker"])
    if (done := _marked(marker)) is not None:
        return done
    ref, index, spill = task["part"], task["index"], Path(task["spill"])
    name = f"part-{index:05d}.parquet"
    cache: dict[str, pa.Table] = {}
    table, _ = read_view(ref, None, kept=True, cache=cache)
    result: dict[str, Any] = {"order": {}, "documents": table.num_rows, "decisions": {}, "schemas": {}}

    # (a) copies to order buckets, phase by phase (one phase without a schedule)
    ids = table["id"].to_pylist()
    phase_buckets = task.get("phase_buckets") or [[0, task["order_buckets"]]]
    if len(phase_buckets) > 1:
        listed = table["mixture_phase_repeats"]
        if len(ids) and not pc.all(pc.equal(pc.list_value_length(listed), len(phase_buckets))).as_py():
            raise BuildError(f"mixture_phase_repeats does not list {len(phase_buckets)} phases for every document")
        per_phase = np.asarray(listed.to_pylist(), np.int64).reshape(len(ids), len(phase_buckets))
    else:
        per_phase = table["mixture_repeats"].to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1, 1)
    before = np.cumsum(per_phase, axis=1) - per_phase  # copies of earlier phases: repeat numbers go on
    entries, repeats_, keys_, buckets_ = [], [], [], []
    for p, (first_bucket, num_buckets) in enumerate(phase_buckets):
        e, r, k = copy_keys(id_hashes(ids, phase_seed(task["seed"], p)), per_phase[:, p])
        entries.append(e)
        repeats_.append(r + before[e, p])
        keys_.append(k)
        buckets_.append(first_bucket + order_bucket_of(k, num_buckets))
    entry, repeat, keys = (np.concatenate(x) for x in (entries, repeats_, keys_))
    buckets = np.concatenate(buckets_)
    take = pa.array(entry)
    carried = [c for c in task["decision_columns"] if c in table.column_names]
    copies = pa.table({
        "key": pa.array(keys, pa.float64()),
        "id": table["id"].take(take),
        "repeat": pa.array(repeat.astype(np.int32), pa.int32()),
        "tokens": table["tokenize_input_ids"].take(take),
        "source": table["source"].take(take),
        "file": table["file"].take(take),
        "line": table["line"].take(take),
        **{c: table[c].take(take) for c in carried},
    })
    write_buckets(copies, buckets, spill / "order" / name)
    lengths = pc.list_value_length(copies["tokens"]).to_numpy(zero_copy_only=False).astype(np.int64) \
        if copies.num_rows else np.zeros(0, np.int64)
    for b in np.unique(buckets):
        mask = buckets == b
        result["order"][int(b)] = [int(mask.sum()), int(lengths[mask].sum())]

    # (b) kept documents to their parts
    docs = table.drop_columns([c for c in ("tokenize_input_ids", KEEP, REASON) if c in table.column_names])
    write_buckets(docs, layout.id_parts(ids, task["doc_parts"]), spill / layout.DOCUMENTS / name)
    schemas = Path(task["marker"]).parent / "schemas"
    result["schemas"][layout.DOCUMENTS] = _schema_ref(docs.schema, schemas)

    # (c) each stage's dropped documents
    for stage, depth in task["stages"]:
        stage_ref = type(ref)(ref.base, tuple(ref.layers[:depth]))
        view, _ = read_view(stage_ref, None, kept=False, cache=cache)
        dropped = view.filter(pc.invert(pc.fill_null(view[KEEP], False)))
        dropped = dropped.drop_columns([c for c in (KEEP, "tokenize_input_ids") if c in dropped.column_names])
        k = task["decision_parts"][stage]
        write_buckets(dropped, layout.id_parts(dropped["id"].to_pylist(), k),
                      spill / layout.DECISIONS / stage / name)
        result["decisions"][stage] = dropped.num_rows
        result["schemas"][f"{layout.DECISIONS}/{stage}"] = _schema_ref(dropped.schema, schemas)
    _write_json(result, marker)
    return result


# --------------------------------------------------------------------------- phase 2: pack


def pack_bucket(task: dict[str, Any]) -> dict[str, Any]:
    """Phase 2 for one order bucket: sort its copies into the document order
    and cut windows (see the module docstring).

    Args:
        task: ``bucket``, ``order_files`` (phase-1 spill files, partition
            order), ``offset`` (token offset of the bucket in its mixture
            phase's stream), ``num_samples`` (``concat_split``: windows of
            the phase), ``sample_base`` (windows of the earlier phases),
            ``method``, ``seq_length``, ``pad_id``, ``seed``, ``shuffle_bits``
            and ``shuffle_offset`` (the phase's shuffle buckets are
            ``shuffle_offset + [0, 2**shuffle_bits)``), ``phase`` (its
            index: shuffle keys use ``phase_seed(seed, phase)``) and
            ``phase_first_bucket``,
            ``decision_columns``, ``spill``, ``marker``.

    Returns:
        ``{"counts": {shuffle bucket: samples}, "samples", "tokens",
        "copies", "padding", "width", "fragments"}``.
    """
    from pipeline.packing import _segments_table, pack_best_fit, pack_pieces, sample_shuffle_keys

    marker = Path(task["marker"])
    if (done := _marked(marker)) is not None:
        return done
    b, spill, seq_length = task["bucket"], Path(task["spill"]), task["seq_length"]
    window = seq_length + 1
    copies = read_bucket([Path(p) for p in task["order_files"]], b)
    copies = copies.sort_by([("key", "ascending"), ("id", "ascending"), ("repeat", "ascending")])
    carried = [c for c in task["decision_columns"] if c in copies.column_names]
    tokens_col = copies["tokens"].combine_chunks() if copies.num_rows else pa.array([], pa.list_(pa.int32()))
    value_type = tokens_col.type.value_type
    lengths = pc.list_value_length(tokens_col).to_numpy(zero_copy_only=False).astype(np.int64) \
        if len(tokens_col) else np.zeros(0, np.int64)
    # The copies' tokens end to end, in the document order (a flattened list
    # array is already that when the list has no offset gaps).
    stream = pc.list_flatten(tokens_col).to_numpy(zero_copy_only=False) if len(tokens_col) else \
        np.zeros(0, np.int32)
    result = {"counts": {}, "samples": 0, "tokens": int(lengths.sum()), "copies": copies.num_rows,
              "padding": 0, "width": 1, "fragments": 0}
    name = f"pack-{b:05d}.parquet"

    if task["method"] == "concat_split":
        offset, total, base = task["offset"], task["num_samples"], task.get("sample_base", 0)
        sample, entry, doc_start, doc_end, s_start, s_end = pack_pieces(lengths, offset, window, total)
        first_full = -(-offset // window)
        last_full = min((offset + len(stream)) // window, total) - 1
        full = (sample >= first_full) & (sample <= last_full)
        # Fragments: pieces of the windows that cross an edge of the bucket.
        frag = ~full
        if frag.any():
            pos = sample[frag] * window + s_start[frag] - offset
            piece_tokens = [stream[p:p + (e - s)] for p, s, e in zip(pos, s_start[frag], s_end[frag])]
            fragments = _segment_table(np.zeros(int(frag.sum()), np.uint64), copies, entry[frag],
                                       doc_start[frag], doc_end[frag], s_start[frag], s_end[frag], carried)
            fragments = fragments.drop_columns(["key"]).add_column(
                0, "sample", pa.array(base + sample[frag], pa.int64())).append_column(
                "tokens", pa.array(piece_tokens, pa.list_(value_type)))
            _write_table(fragments, spill / "fragments" / name, 1 << 20)
            result["fragments"] = int(frag.sum())
        n_full = max(0, last_full - first_full + 1)
        ks = np.arange(first_full, first_full + n_full, dtype=np.int64)  # window numbers within the phase
        start = first_full * window - offset
        samples = stream[start:start + n_full * window].reshape(n_full, window) if n_full else \
            np.zeros((0, window), stream.dtype)
        seg_local = sample[full] - first_full
        seg = (entry[full], doc_start[full], doc_end[full], s_start[full], s_end[full])
    else:
        pieces = [stream[o:o + n] for o, n in zip(np.cumsum(lengths) - lengths, lengths)]
        order = np.stack([np.arange(len(pieces)), np.zeros(len(pieces), np.int64)], axis=1)
        if len(pieces):
            samples, segments = pack_best_fit(pieces, order, seq_length, pad_id=task["pad_id"])
        else:
            samples = np.zeros((0, window), np.int32)
            segments = _segments_table([], order, np.zeros(0, np.int64), [], [], [], [], {})
        n_full = samples.shape[0]
        result["padding"] = int(samples.size - lengths.sum())
        local_bucket = b - task.get("phase_first_bucket", 0)  # the bucket's number within its phase
        ks = (np.int64(local_bucket) << np.int64(_BEST_FIT_SHIFT)) + np.arange(n_full, dtype=np.int64)
        seg_local = segments["sample_index"].to_numpy()
        seg = tuple(segments[c].to_numpy() for c in ("doc_index", "doc_token_start", "doc_token_end",
                                                     "sample_token_start", "sample_token_end"))

    # Shuffle keys from the sample's number within its phase and the phase's
    # seed: a phase's order does not depend on the phases before it.
    keys = sample_shuffle_keys(ks.astype(np.uint64), phase_seed(task["seed"], task.get("phase", 0))) \
        if n_full else np.zeros(0, np.uint64)
    offsets, values = _ends_lists(seg_local, seg[4], n_full, seq_length)
    buckets = task.get("shuffle_offset", 0) + shuffle_bucket_of(keys, task["shuffle_bits"])
    sample_table = pa.table({
        "key": pa.array(keys, pa.uint64()),
        "tokens": pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(samples).reshape(-1),
                                                             value_type), window),
        "ends": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32())),
    })
    write_buckets(sample_table, buckets, spill / "samples" / name)
    segments = _segment_table(keys[seg_local] if n_full else np.zeros(0, np.uint64), copies, seg[0],
                              seg[1], seg[2], seg[3], seg[4], carried)
    write_buckets(segments, buckets[seg_local] if n_full else np.zeros(0, np.int64),
                  spill / "segments" / name)
    for j in np.unique(buckets):
        result["counts"][int(j)] = int((buckets == j).sum())
    result["samples"] = int(n_full)
    result["width"] = int(np.diff(offsets).max(initial=1))
    _write_json(result, marker)
    return result


def stitch_fragments(fragment_files: list[Path], seq_length: int, seed: int, shuffle_bits: int | list[list[int]],
                     spill: Path, chunk: int = 4096) -> dict[str, Any]:
    """Driver: the windows that cross order-bucket edges, from the pieces the
    pack tasks left, in bucket order (one window in memory at a time).
    ``shuffle_bits``: the bits of the one phase, or per mixture phase
    ``[first window, shuffle bits, shuffle offset]`` in phase order.

    Returns:
        ``{"counts": {shuffle bucket: samples}, "samples", "width", "files"}``.
    """
    from pipeline.packing import sample_shuffle_keys

    window = seq_length + 1
    phases = [[0, shuffle_bits, 0]] if isinstance(shuffle_bits, int) else shuffle_bits
    out = {"counts": {}, "samples": 0, "width": 1, "files": []}
    done_samples: list[tuple[int, np.ndarray, pa.Table]] = []
    current: tuple[int, list[np.ndarray], list[pa.Table]] | None = None

    def flush():
        if not done_samples:
            return
        ks = np.array([d[0] for d in done_samples], np.int64)
        phase = np.searchsorted(np.array([p[0] for p in phases]), ks, side="right") - 1
        keys = np.zeros(len(ks), np.uint64)
        buckets = np.zeros(len(ks), np.int64)
        for p, (base, bits, shuffle_offset) in enumerate(phases):
            mine = phase == p
            keys[mine] = sample_shuffle_keys((ks[mine] - base).astype(np.uint64), phase_seed(seed, p))
            buckets[mine] = shuffle_offset + shuffle_bucket_of(keys[mine], bits)
        segs = [d[2] for d in done_samples]
        seg_local = np.concatenate([np.full(s.num_rows, i, np.int64) for i, s in enumerate(segs)])
        seg = pa.concat_tables(segs)
        offsets, values = _ends_lists(seg_local, seg["sample_token_end"].to_numpy(), len(ks), seq_length)
        tokens = np.concatenate([d[1] for d in done_samples])
        value_type = seg.schema.field("tokens").type.value_type
        sample_table = pa.table({
            "key": pa.array(keys, pa.uint64()),
            "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens, value_type), window),
            "ends": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32())),
        })
        name = f"stitch-{len(out['files']):05d}.parquet"
        write_buckets(sample_table, buckets, spill / "samples" / name)
        seg = seg.drop_columns(["sample", "tokens"]).add_column(0, "key", pa.array(keys[seg_local], pa.uint64()))
        write_buckets(seg, buckets[seg_local], spill / "segments" / name)
        out["files"].append(name)
        for j in np.unique(buckets):
            out["counts"][int(j)] = out["counts"].get(int(j), 0) + int((buckets == j).sum())
        out["samples"] += len(ks)
        out["width"] = max(out["width"], int(np.diff(offsets).max(initial=1)))
        done_samples.clear()

    for path in fragment_files:
        table = pq.read_table(path).sort_by([("sample", "ascending"), ("sample_token_start", "ascending")])
        for i in range(table.num_rows):
            row = table.slice(i, 1)
            k = int(row["sample"][0].as_py())
            if current is None or current[0] != k:
                if current is not None:
                    raise BuildError(f"window {current[0]} was not completed by the pieces of its buckets")
                current = (k, [], [])
            current[1].append(np.asarray(row["tokens"].combine_chunks().flatten().to_numpy(zero_copy_only=False)))
            current[2].append(row)
            if sum(len(t) for t in current[1]) == window:
                tokens = np.concatenate(current[1])
                done_samples.append((k, tokens, pa.concat_tables(current[2])))
                current = None
                if len(done_samples) >= chunk:
                    flush()
    if current is not None:
        raise BuildError(f"window {current[0]} was not completed by the pieces of its buckets")
    flush()
    return out


# --------------------------------------------------------------------------- phase 2: table parts


def write_table_part(task: dict[str, Any]) -> dict[str, Any]:
    """Phase 2: one part of ``documents`` (+ ``excerpts``) or of
    ``decisions/<stage>``: its rows from every partition's spill, sorted by
    id, cast to the table's schema.

    Returns:
        ``{"rows", "files": {relative path: sha256}}``.
    """
    marker = Path(task["marker"])
    if (done := _marked(marker)) is not None:
        return done
    schema = _schema_from_b64(task["schema"])
    files = [Path(p) for p in task["spill_files"]]
    parts = [read_bucket([f], task["part"]) for f in files]
    parts = [_conform(t, schema) for t in parts if t.num_rows]
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    table = table.sort_by("id")
    tmp, out = Path(task["tmp"]), {}
    rel = task["relative"]
    out[rel] = _write_table(table, tmp / rel, DOCUMENTS_ROW_GROUP)
    if task.get("excerpts"):
        excerpts = pa.table({"id": table["id"],
                             "text_excerpt": pc.utf8_slice_codeunits(table["text"], 0, EXCERPT_CHARS)})
        out[task["excerpts"]] = _write_table(excerpts, tmp / task["excerpts"], EXCERPTS_ROW_GROUP)
    result = {"rows": table.num_rows, "files": out}
    _write_json(result, marker)
    return result


# --------------------------------------------------------------------------- phase 3: shards


def write_shard(task: dict[str, Any]) -> dict[str, Any]:
    """Phase 3 for one shard: samples of positions ``[first, stop)``, in
    every format of ``task["formats"]`` (``output.formats``), and their
    lineage part.

    Args:
        task: ``shard``, ``first``, ``stop``, ``buckets`` ([(bucket, start
            position, count)] overlapping the range), ``sample_files``,
            ``segment_files``, ``seq_length``, ``width``, ``page``,
            ``header``, ``by_doc_parts``, ``tmp``, ``spill``, ``marker``,
            ``formats``; with ``mindrecord_shifted``: ``eod_pad_length``,
            ``eod_mask_loss``, ``shifted_page``, ``shifted_header``; with
            ``megatron``: ``megatron_dtype`` (numpy name) and
            ``megatron_lengths`` (the part file of this shard's sequence
            lengths); with mixture phases, ``phase_starts`` (the first
            sample index of each phase) and, when ``mixture.align_samples``
            cuts samples, ``remap`` (per phase ``[first packed position,
            end of its kept positions, shift]``: packed position ``q`` in
            that range is row ``q - shift``; other packed positions are cut).

    Returns:
        ``{"shard": {name, sha256, db_sha256, rows, bytes} (only ``rows``
        when ``mindrecord`` is not written), "files": {lineage part: sha256},
        "tokens_by_source": {source: tokens}, "segments": rows, "node": ...}``
        (with ``phase_starts`` also ``"tokens_by_phase_source": {phase: {source: tokens}}``)
        plus ``"shifted"`` (the shifted shard's entry) and ``"megatron"``
        (``{"first_byte", "bytes", "sha256", "sequences"}`` of its ``.bin``
        range) for those formats.
    """
    from pipeline.formats import BinRange, save_lengths, shifted_columns
    from pipeline.writer import COLUMN, ShardWriter, validate_samples

    marker = Path(task["marker"])
    if (done := _marked(marker)) is not None:
        return done
    s, first, stop = task["shard"], task["first"], task["stop"]
    seq_length, width = task["seq_length"], task["width"]
    formats = task.get("formats", ["mindrecord"])
    window = seq_length + 1
    sample_files = [Path(p) for p in task["sample_files"]]
    segment_files = [Path(p) for p in task["segment_files"]]
    tmp = Path(task["tmp"])
    name = layout.shard_name(s)
    path = tmp / name
    shifted_name = layout.shifted_shard_name(s)
    for stale in (path, layout.shard_index(path), tmp / shifted_name, layout.shard_index(tmp / shifted_name)):
        stale.unlink(missing_ok=True)  # a write cut short by a crash
    writer = shifted = bin_range = None
    if "mindrecord" in formats:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One shuffle range at a time: the shard is never in memory as a whole.
        writer = ShardWriter(path, {COLUMN: window, "actual_seq_len": width}, task["page"], task["header"])
    if "mindrecord_shifted" in formats:
        from pipeline.formats import SHIFTED_COLUMNS

        (tmp / shifted_name).parent.mkdir(parents=True, exist_ok=True)
        shifted = ShardWriter(tmp / shifted_name, {c: task["eod_pad_length"] if c == "actual_seq_len" else seq_length
                                                   for c in SHIFTED_COLUMNS},
                              task["shifted_page"], task["shifted_header"])
    if "megatron" in formats:
        bin_range = BinRange(tmp / layout.megatron_bin(), first * window, np.dtype(task["megatron_dtype"]))
    sequence_lengths: list[np.ndarray] = []
    rel = f"{layout.LINEAGE}/{layout.part_name(s)}"
    lineage = _RowGroupWriter(tmp / rel, LINEAGE_ROW_GROUP)
    by_source: dict[str, int] = {}
    # First sample of each mixture phase (None without a schedule).
    phase_starts = np.asarray(task["phase_starts"], np.int64) if task.get("phase_starts") else None
    by_phase: dict[str, dict[str, int]] = {}
    by_doc_dir = Path(task["spill"]) / "by_doc"
    rows_written = 0
    for bucket, start, count in task["buckets"]:
        samples = read_bucket(sample_files, bucket)
        if samples.num_rows != count:
            raise BuildError(f"shuffle bucket {bucket}: {samples.num_rows} samples, expected {count}")
        order = np.argsort(samples["key"].to_numpy(), kind="stable")
        keys = samples["key"].to_numpy()[order]
        positions = start + np.arange(count, dtype=np.int64)
        if task.get("remap"):  # mixture.align_samples: packed position -> row, -1 for a cut sample
            packed_at, positions = positions, np.full(count, -1, np.int64)
            for lo, hi, shift in task["remap"]:
                kept = (packed_at >= lo) & (packed_at < hi)
                positions[kept] = packed_at[kept] - shift
        inside = (positions >= first) & (positions < stop)
        picked = pa.array(order[inside])
        tokens = samples["tokens"].combine_chunks().take(picked)
        rows = tokens.flatten().to_numpy(zero_copy_only=False).reshape(-1, window).astype(np.int32)
        ends = _pad_ends(samples["ends"].combine_chunks().take(picked), width, seq_length) if writer else None
        del samples, tokens
        # This range's lineage rows, in sample order: positions are
        # consecutive across ranges, so appending keeps the part sorted.
        segs = read_bucket(segment_files, bucket)
        where = np.searchsorted(keys, segs["key"].to_numpy())
        seg_pos = positions[where]
        keep = (seg_pos >= first) & (seg_pos < stop)
        segs = segs.filter(pa.array(keep)).drop_columns(["key"])
        segs = segs.add_column(0, "sample_index", pa.array(seg_pos[keep], pa.int64()))
        segs = segs.sort_by([("sample_index", "ascending"), ("sample_token_start", "ascending")])
        si = segs["sample_index"].to_numpy()
        if writer is not None:
            writer.write({COLUMN: validate_samples(rows), "actual_seq_len": validate_samples(ends, 1)})
        if shifted is not None and len(rows):
            local = si - int(positions[inside][0])
            columns = shifted_columns(rows, local, segs["sample_token_end"].to_numpy(), task["eod_pad_length"],
                                      task["eod_mask_loss"])
            shifted.write({c: validate_samples(v, 1) for c, v in columns.items()})
            del columns
        if bin_range is not None:
            bin_range.write(rows)
        rows_written += len(rows)
        del rows, ends
        if not segs.num_rows:
            continue
        run_starts = np.r_[0, np.flatnonzero(np.diff(si)) + 1] if len(si) else np.zeros(0, np.int64)
        seg_no = (np.arange(len(si)) - np.repeat(run_starts, np.diff(np.r_[run_starts, len(si)]))).astype(np.int32)
        segs = segs.add_column(1, "segment", pa.array(seg_no))
        lineage.write(segs)
        write_buckets(segs, layout.id_parts(segs["doc_id"].to_pylist(), task["by_doc_parts"]),
                      by_doc_dir / f"shard-{s:05d}-{bucket:07d}.parquet")
        lengths = pc.cast(pc.subtract(segs["sample_token_end"], segs["sample_token_start"]), pa.int64())
        if bin_range is not None:
            sequence_lengths.append(lengths.to_numpy().astype(np.int32))
        grouped = pa.table({"source": segs["source"], "tokens": lengths}).group_by("source").aggregate(
            [("tokens", "sum")])
        for src, n in zip(grouped["source"].to_pylist(), grouped["tokens_sum"].to_pylist()):
            by_source[src] = by_source.get(src, 0) + int(n)
        if phase_starts is not None:
            phase = np.searchsorted(phase_starts, si, side="right") - 1
            grouped = pa.table({"phase": phase, "source": segs["source"], "tokens": lengths}).group_by(
                ["phase", "source"]).aggregate([("tokens", "sum")])
            for p, src, n in zip(grouped["phase"].to_pylist(), grouped["source"].to_pylist(),
                                 grouped["tokens_sum"].to_pylist()):
                entry_p = by_phase.setdefault(str(p), {})
                entry_p[src] = entry_p.get(src, 0) + int(n)
    if rows_written != stop - first:
        raise BuildError(f"shard {s}: {rows_written} samples for positions {first}..{stop - 1}")
    shard: dict[str, Any] = {"rows": int(stop - first)}
    if writer is not None:
        writer.close()
        shard = {"name": name, "sha256": sha256_file(path), "db_sha256": sha256_file(layout.shard_index(path)),
                 "rows": int(stop - first), "bytes": path.stat().st_size}

    from pipeline.executor import current_node

    result: dict[str, Any] = {"shard": shard, "files": {}, "tokens_by_source": by_source,
                              "segments": lineage.rows, "node": current_node()}
    if phase_starts is not None:
        result["tokens_by_phase_source"] = by_phase
    if shifted is not None:
        shifted.close()
        spath = tmp / shifted_name
        result["shifted"] = {"name": shifted_name, "sha256": sha256_file(spath),
                             "db_sha256": sha256_file(layout.shard_index(spath)), "rows": int(stop - first),
                             "bytes": spath.stat().st_size}
    if bin_range is not None:
        lengths = np.concatenate(sequence_lengths) if sequence_lengths else np.zeros(0, np.int32)
        if int(lengths.sum()) != (stop - first) * window:
            raise BuildError(f"shard {s}: its lineage rows cover {int(lengths.sum())} tokens of "
                             f"{(stop - first) * window}: a Megatron sequence per piece needs every token in one")
        save_lengths(lengths, Path(task["megatron_lengths"]))
        result["megatron"] = {**bin_range.close(), "sequences": int(len(lengths))}
    if lineage.close():
        result["files"][rel] = sha256_file(tmp / rel)
    _write_json(result, marker)
    return result


def write_by_doc_part(task: dict[str, Any]) -> dict[str, Any]:
    """Phase 4: one part of ``lineage_by_doc`` (the lineage rows of its
    documents, sorted by ``doc_id``, ``repeat``, ``doc_token_start``)."""
    marker = Path(task["marker"])
    if (done := _marked(marker)) is not None:
        return done
    files = [Path(p) for p in task["spill_files"]]
    schema = _schema_from_b64(task["schema"])
    parts = [_conform(t, schema) for t in (read_bucket([f], task["part"]) for f in files) if t.num_rows]
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    table = table.sort_by([("doc_id", "ascending"), ("repeat", "ascending"), ("doc_token_start", "ascending")])
    rel = task["relative"]
    result = {"rows": table.num_rows, "files": {rel: _write_table(table, Path(task["tmp"]) / rel,
                                                                  LINEAGE_BY_DOC_ROW_GROUP)}}
    _write_json(result, marker)
    return result


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Dispatch one assembly task by ``task["kind"]`` (one executor map can
    then run pack and table-part tasks together)."""
    return {"pack": pack_bucket, "table": write_table_part, "shard": write_shard,
            "by_doc": write_by_doc_part, "emit": emit_partition}[task["kind"]](task)


# --------------------------------------------------------------------------- driver


def _sum_counts(dicts) -> dict[int, int]:
    out: dict[int, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[int(k)] = out.get(int(k), 0) + int(v)
    return out


def assemble(cfg, final_parts: list, stage_depths: list[tuple[str, int]], stage_reports: dict[str, Any],
             bytes_per_char: float, pad_id: int, planned_tokens: int, target_shares: dict[str, float] | None,
             decision_columns: list[str], work: Path, tmp: Path,
             executor, runlog, fingerprint: str, max_token_id: int | None = None,
             phases: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write the samples, lineage, documents and decisions of a version into
    ``tmp`` (see the module docstring), resuming a killed assembly.

    Args:
        cfg: the build config (``seed``, ``output``).
        final_parts: the partitions after the last stage (refs).
        stage_depths: (stage, layers up to it) in stage order, for decisions.
        stage_reports: each stage's report (totals, for part counts).
        bytes_per_char: UTF-8 bytes per character of the input (part sizes).
        pad_id: the best-fit padding token.
        planned_tokens: tokens of every copy the mixture chose (its
            ``planned_tokens`` export): what the partitions must hold.
        target_shares: source -> target share (the ``target_shares`` export;
            None: ``packed_per_source`` has no target).
        decision_columns: the stage columns carried into every lineage
            segment (``pipeline.lineage.lineage_columns``), in order.
        work: ``corpora/.work/<version>/assemble`` (spill, markers).
        tmp: the version directory being assembled.
        executor: runs the tasks (local pool or Ray).
        runlog: the build's log.
        fingerprint: everything the output depends on; a different one
            restarts the assembly from scratch.
        max_token_id: the tokenizer's largest id (the Megatron token
            dtype, :func:`pipeline.megatron.token_dtype`); needed only with
            the ``megatron`` format.
        phases: the mixture's ``phases`` export (None: one mixture): per
            phase ``name``, ``token_budget``, ``planned_tokens``,
            ``align_samples`` (its sample count is cut down to a multiple;
            concat-split only) and ``target_shares``. Each phase is ordered, packed and shuffled on
            its own, and written after the previous one: phase ``k``'s
            samples are the rows ``[first_sample, first_sample +
            num_samples)``, and no sample holds tokens of two phases.

    Returns:
        Manifest entries: ``seq_length``, ``num_samples``, ``num_tokens``,
        ``columns``, ``packing``, ``shards`` (the MindRecord shards; only
        ``rows`` per shard when ``mindrecord`` is not among the formats: the
        row cut of the lineage parts and of ``shifted/``), ``formats``
        (:func:`_format_entries`), ``layout``, ``files`` (sha256 of each
        written table part), ``decision_rows``; with ``phases`` also
        ``phases``: per phase ``name``, ``token_budget``, ``first_sample``,
        ``num_samples``, ``tokens_sampled``, ``tokens_packed``,
        ``tokens_dropped_tail``, ``padding_tokens`` and ``packed_per_source``
        (realized against the phase's target shares).

    Raises:
        BuildError: no sample can be packed; an internal count disagrees;
            with ``mindrecord_shifted``, a sample holds more document ends
            than ``output.eod_pad_length`` (raised after packing, before any
            shard is written).
    """
    from pipeline.writer import page_and_header_size

    out_cfg = cfg.output
    seq_length = out_cfg.seq_length
    window = seq_length + 1
    method = out_cfg.packing
    state_path = work / "_STATE.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    # Markers vouch for files in ``tmp``: without ``tmp`` (published, or removed
    # by hand) there is nothing to resume.
    if state.get("fingerprint") != fingerprint or not tmp.exists():
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    _write_json({"fingerprint": fingerprint}, state_path)
    spill, markers = work / "spill", work / "markers"
    forget()

    total_tokens = int(planned_tokens or 0)
    schedule = phases or [{"name": None, "planned_tokens": total_tokens, "target_shares": target_shares}]
    # best fit pads a short corpus into one sample; concat-split needs a window
    for phase in schedule:
        if int(phase["planned_tokens"] or 0) < (window if method == "concat_split" else 1):
            what, fix = (f"mixture phase {phase['name']}'s", ", raise the phase's token_budget") \
                if phase["name"] is not None else ("the", "")
            raise BuildError(f"{what} sampled documents hold {int(phase['planned_tokens'] or 0)} tokens, fewer "
                             f"than seq_length + 1 = {window}: no sample can be packed (lower "
                             f"output.seq_length{fix} or add data)")
    if sum(int(p["planned_tokens"]) for p in schedule) != total_tokens:
        raise BuildError(f"the mixture phases plan {sum(int(p['planned_tokens']) for p in schedule)} tokens, "
                         f"in all {total_tokens}")
    # Per phase: [first order bucket, order buckets]; bucket ranges follow
    # each other, so phase k's copies come after phase k - 1's.
    phase_buckets, running = [], 0
    for phase in schedule:
        count = max(1, math.ceil(int(phase["planned_tokens"]) / out_cfg.order_bucket_tokens))
        phase_buckets.append([running, count])
        running += count
    order_buckets = running
    phase_of_bucket = np.repeat(np.arange(len(schedule)), [c for _, c in phase_buckets])
    kept_chars = stage_reports[list(stage_reports)[-1]]["totals"]["kept_chars"]
    doc_parts = layout.parts_for(int(kept_chars * bytes_per_char), out_cfg.table_part_bytes)
    decision_parts = {}
    for stage, _ in stage_depths:
        tot = stage_reports[stage]["totals"]
        decision_parts[stage] = layout.parts_for(int((tot["chars_in"] - tot["kept_chars"]) * bytes_per_char),
                                                 out_cfg.table_part_bytes)

    # phase 1: emit
    emit_tasks = [{"kind": "emit", "part": part, "index": i, "stages": stage_depths, "seed": cfg.seed,
                   "order_buckets": order_buckets, **({"phase_buckets": phase_buckets} if phases else {}),
                   "doc_parts": doc_parts, "decision_parts": decision_parts,
                   "decision_columns": list(decision_columns), "spill": str(spill),
                   "marker": str(markers / f"emit-{i:05d}.json")} for i, part in enumerate(final_parts)]
    tracker = runlog.tracker("assemble-emit", len(emit_tasks))
    try:
        emitted = executor.map(run_task, emit_tasks, on_done=tracker)
    finally:
        tracker.close()
    order_sums = {}
    for e in emitted:
        for b, (n, t) in e["order"].items():
            have = order_sums.get(int(b), [0, 0])
            order_sums[int(b)] = [have[0] + n, have[1] + t]
    tokens = sum(v[1] for v in order_sums.values())
    copies = sum(v[0] for v in order_sums.values())
    if tokens != total_tokens:
        raise BuildError(f"the partitions hold {tokens} sampled tokens, the mixture planned {total_tokens}")
    phase_tokens = [sum(order_sums.get(b, [0, 0])[1] for b in range(first, first + count))
                    for first, count in phase_buckets]
    for phase, have in zip(schedule, phase_tokens):
        if have != int(phase["planned_tokens"]):
            raise BuildError(f"the partitions hold {have} tokens of mixture phase {phase['name']}, the mixture "
                             f"planned {phase['planned_tokens']}")
    part_files = [spill / "order" / f"part-{i:05d}.parquet" for i in range(len(final_parts))]
    phase_samples = [t // window for t in phase_tokens] if method == "concat_split" else None
    num_samples = sum(phase_samples) if phase_samples is not None else None
    # Per phase: shuffle bits and the first of its shuffle buckets (the
    # phase's samples are written after all samples of earlier phases).
    phase_shuffle, running = [], 0
    for t in phase_tokens:
        bits = _bits_for(t // window + 1, out_cfg.shuffle_bucket_samples)
        phase_shuffle.append([bits, running])
        running += 1 << bits
    shuffle_buckets = running
    shuffle_bits = phase_shuffle[0][0]
    sample_base = np.cumsum([0] + (phase_samples or [0] * len(schedule)))[:-1].tolist()

    # phase 2: pack + table parts
    offsets, running = {}, 0
    for b in range(order_buckets):
        if b == phase_buckets[int(phase_of_bucket[b])][0]:
            running = 0  # each phase is its own token stream
        offsets[b] = running
        running += order_sums.get(b, [0, 0])[1]
    tasks = []
    for b in range(order_buckets):
        if not order_sums.get(b, [0, 0])[0]:
            continue
        p = int(phase_of_bucket[b])
        tasks.append({"kind": "pack", "bucket": b, "order_files": [str(f) for f in part_files], "offset": offsets[b],
                      "num_samples": None if phase_samples is None else phase_samples[p],
                      **({"sample_base": sample_base[p], "shuffle_offset": phase_shuffle[p][1], "phase": p,
                          "phase_first_bucket": phase_buckets[p][0]} if phases else {}),
                      "method": method, "seq_length": seq_length, "pad_id": pad_id,
                      "seed": cfg.seed, "shuffle_bits": phase_shuffle[p][0],
                      "decision_columns": list(decision_columns),
                      "spill": str(spill), "marker": str(markers / f"pack-{b:05d}.json")})
    schema_dir = markers / "schemas"

    def unified(key: str) -> pa.Schema:
        return unify([_schema_load(name, schema_dir) for name in sorted({e["schemas"][key] for e in emitted})])

    doc_schema = unified(layout.DOCUMENTS)
    doc_files = [str(spill / layout.DOCUMENTS / f"part-{i:05d}.parquet") for i in range(len(final_parts))]
    for j in range(doc_parts):
        tasks.append({"kind": "table", "part": j, "spill_files": doc_files, "schema": _schema_b64(doc_schema),
                      "relative": f"{layout.DOCUMENTS}/{layout.part_name(j)}",
                      "excerpts": f"{layout.EXCERPTS}/{layout.part_name(j)}", "tmp": str(tmp),
                      "marker": str(markers / f"documents-{j:05d}.json")})
    for stage, _ in stage_depths:
        schema = unified(f"{layout.DECISIONS}/{stage}")
        files = [str(spill / layout.DECISIONS / stage / f"part-{i:05d}.parquet") for i in range(len(final_parts))]
        for j in range(decision_parts[stage]):
            tasks.append({"kind": "table", "part": j, "spill_files": files, "schema": _schema_b64(schema),
                          "relative": f"{layout.DECISIONS}/{stage}/{layout.part_name(j)}", "tmp": str(tmp),
                          "marker": str(markers / f"decisions-{stage}-{j:05d}.json")})
    tracker = runlog.tracker("assemble-pack", len(tasks))
    try:
        results = executor.map(run_task, tasks, on_done=tracker)
    finally:
        tracker.close()
    packed = [r for t, r in zip(tasks, results) if t["kind"] == "pack"]
    files: dict[str, str] = {}
    decision_rows = 0
    kept_rows = 0
    for t, r in zip(tasks, results):
        if t["kind"] == "table":
            files.update(r["files"])
            if t["relative"].startswith(layout.DECISIONS):
                decision_rows += r["rows"]
            else:
                kept_rows += r["rows"]
    counts = _sum_counts(r["counts"] for r in packed)
    width = max([r["width"] for r in packed] + [1])
    sample_names = [f"pack-{t['bucket']:05d}.parquet" for t in tasks if t["kind"] == "pack"]
    if method == "concat_split":
        stitch_state = work / "stitch.json"
        if stitch_state.exists():
            stitched = json.loads(stitch_state.read_text())
        else:
            for stale in ("samples", "segments"):
                for f in (spill / stale).glob("stitch-*.parquet"):
                    f.unlink()
            fragment_files = [spill / "fragments" / n for n in sample_names
                              if (spill / "fragments" / n).exists()]
            stitched = stitch_fragments(fragment_files, seq_length, cfg.seed, [
                [sample_base[p], bits, offset] for p, (bits, offset) in enumerate(phase_shuffle)]
                if phases else shuffle_bits, spill)
            _write_json(stitched, stitch_state)
        counts = _sum_counts([counts, stitched["counts"]])
        width = max(width, stitched["width"])
        sample_names += stitched["files"]
    packed_total = total = sum(counts.values())
    if total == 0:
        raise BuildError(f"the sampled documents hold fewer than seq_length + 1 = {window} "
                         "tokens: no sample can be packed (lower output.seq_length or add data)")
    if num_samples is not None and total != num_samples:
        raise BuildError(f"packed {total} samples, expected {num_samples}")
    # Samples of each phase (its shuffle buckets are a contiguous key range
    # after the earlier phases'), and what align_samples keeps of them: the
    # first kept_p in shuffle order. The shuffle order is random, so the cut
    # is a uniform sample of the phase's samples (the end of the document
    # order would not be: it holds no late copies of up-sampled documents).
    phase_rows = [sum(counts.get(j, 0) for j in range(offset, offset + (1 << bits))) for bits, offset in phase_shuffle]
    if phase_samples is not None and phase_rows != phase_samples:
        raise BuildError(f"packed {phase_rows} samples per mixture phase, expected {phase_samples}")
    phase_kept = []
    for phase, rows_p in zip(schedule, phase_rows):
        align = int(phase.get("align_samples") or 1)
        phase_kept.append(rows_p // align * align)
        if not phase_kept[-1]:
            raise BuildError(f"mixture phase {phase['name']} packs {rows_p} samples, fewer than "
                             f"mixture.align_samples = {align}: raise its token_budget or lower align_samples")
    packed_first = np.cumsum([0] + phase_rows)[:-1].tolist()
    phase_first = np.cumsum([0] + phase_kept)[:-1].tolist()
    # [first packed position, end of the kept ones, shift to the row index]
    remap = [[int(a), int(a + k), int(a - f)] for a, k, f in zip(packed_first, phase_kept, phase_first)]
    cut = phase_kept != phase_rows
    total = sum(phase_kept)
    shutil.rmtree(spill / "order", ignore_errors=True)
    shutil.rmtree(spill / layout.DOCUMENTS, ignore_errors=True)
    shutil.rmtree(spill / layout.DECISIONS, ignore_errors=True)
    shutil.rmtree(spill / "fragments", ignore_errors=True)

    # phase 3: shards, in every output format
    formats = list(getattr(out_cfg, "formats", None) or ["mindrecord"])
    eod_pad_length = int(getattr(out_cfg, "eod_pad_length", 128))
    if "mindrecord_shifted" in formats and width > eod_pad_length:
        raise BuildError(f"a sample holds {width} document ends (actual_seq_len entries, seq_length included), "
                         f"more than output.eod_pad_length = {eod_pad_length}: raise output.eod_pad_length to at "
                         f"least {width} (and eod_pad_length in the training config), or drop mindrecord_shifted")
    rows_per_shard = max(1, out_cfg.max_shard_bytes // (4 * window))
    page, header = page_and_header_size(min(rows_per_shard, total), window + width)
    extra: dict[str, Any] = {"formats": formats}
    if "mindrecord_shifted" in formats:
        shifted_page, shifted_header = page_and_header_size(min(rows_per_shard, total),
                                                            4 * seq_length + eod_pad_length)
        extra.update(eod_pad_length=eod_pad_length, eod_mask_loss=bool(getattr(out_cfg, "eod_mask_loss", False)),
                     shifted_page=shifted_page, shifted_header=shifted_header)
    if "megatron" in formats:
        from pipeline.formats import prepare_bin
        from pipeline.megatron import token_dtype

        if max_token_id is None:
            raise BuildError("the megatron format needs the tokenizer's largest id (max_token_id)")
        megatron_dtype = token_dtype(int(max_token_id))
        prepare_bin(tmp / layout.megatron_bin(), total * window, megatron_dtype)
        extra["megatron_dtype"] = megatron_dtype.name
    starts, running = {}, 0
    for j in sorted(counts):
        starts[j] = running
        running += counts[j]
    segments_estimate = copies + total
    # ~300 bytes per lineage row in memory (ids, source, file and the decisions)
    by_doc_parts = layout.parts_for(segments_estimate * 300, out_cfg.table_part_bytes)
    shard_tasks = []
    for s, first in enumerate(range(0, total, rows_per_shard)):
        stop = min(total, first + rows_per_shard)
        # the packed positions of rows [first, stop): one range per phase
        spans = [(max(lo, first + shift), min(hi, stop + shift)) for lo, hi, shift in remap] if cut else \
            [(first, stop)]
        overlap = [(j, starts[j], counts[j]) for j in sorted(counts)
                   if any(starts[j] < b and starts[j] + counts[j] > a for a, b in spans if a < b)]
        shard_tasks.append({"kind": "shard", "shard": s, "first": first, "stop": stop, "buckets": overlap,
                            "sample_files": [str(spill / "samples" / n) for n in sample_names],
                            "segment_files": [str(spill / "segments" / n) for n in sample_names],
                            "seq_length": seq_length, "width": width, "page": page, "header": header,
                            "by_doc_parts": by_doc_parts, "tmp": str(tmp), "spill": str(spill),
                            "megatron_lengths": str(spill / _LENGTHS_SPILL / f"lengths-{s:05d}.npy"), **extra,
                            **({"phase_starts": phase_first} if phases else {}),
                            **({"remap": remap} if cut else {}),
                            "marker": str(markers / f"shard-{s:05d}.json")})
    tracker = runlog.tracker("assemble-shards", len(shard_tasks))
    try:
        written = executor.map(run_task, shard_tasks, on_done=tracker)
    finally:
        tracker.close()
    shards = [w["shard"] for w in written]
    shard_nodes: dict[str, int] = {}
    for w in written:
        shard_nodes[w.get("node", "local")] = shard_nodes.get(w.get("node", "local"), 0) + 1
    by_source: dict[str, int] = {}
    for w in written:
        files.update(w["files"])
        for src, n in w["tokens_by_source"].items():
            by_source[src] = by_source.get(src, 0) + int(n)
    shutil.rmtree(spill / "samples", ignore_errors=True)
    shutil.rmtree(spill / "segments", ignore_errors=True)
    format_entries = _format_entries(formats, written, total, seq_length, width, extra, tmp, spill, markers)
    shutil.rmtree(spill / _LENGTHS_SPILL, ignore_errors=True)

    # phase 4: lineage by document
    by_doc_files = [str(f) for f in sorted((spill / "by_doc").glob("shard-*.parquet"))]
    lineage_files = sorted(k for k in files if k.startswith(layout.LINEAGE + "/"))
    schema = unify([pq.read_schema(tmp / k) for k in lineage_files])
    by_doc_tasks = [{"kind": "by_doc", "part": j, "spill_files": by_doc_files, "schema": _schema_b64(schema),
                     "relative": f"{layout.LINEAGE_BY_DOC}/{layout.part_name(j)}", "tmp": str(tmp),
                     "marker": str(markers / f"by-doc-{j:05d}.json")} for j in range(by_doc_parts)]
    tracker = runlog.tracker("assemble-index", len(by_doc_tasks))
    try:
        for r in executor.map(run_task, by_doc_tasks, on_done=tracker):
            files.update(r["files"])
    finally:
        tracker.close()
    shutil.rmtree(spill, ignore_errors=True)
    forget()

    packed_tokens = total * window - sum(r["padding"] for r in packed)
    padding = sum(r["padding"] for r in packed)
    phase_entries = None
    if phases:
        phase_entries = []
        for p, phase in enumerate(schedule):
            by_src: dict[str, int] = {}
            for w in written:
                for src, n in w.get("tokens_by_phase_source", {}).get(str(p), {}).items():
                    by_src[src] = by_src.get(src, 0) + int(n)
            pad = sum(r["padding"] for t, r in zip([t for t in tasks if t["kind"] == "pack"], packed)
                      if int(phase_of_bucket[t["bucket"]]) == p)
            packed_p = phase_kept[p] * window - pad
            phase_entries.append({
                "name": phase["name"], "token_budget": phase.get("token_budget"),
                "first_sample": int(phase_first[p]), "num_samples": int(phase_kept[p]),
                "samples_cut": int(phase_rows[p] - phase_kept[p]),
                "tokens_sampled": int(phase_tokens[p]), "tokens_packed": int(packed_p),
                "tokens_dropped_tail": int(phase_tokens[p] - packed_p) if method == "concat_split" else 0,
                "padding_tokens": int(pad),
                "packed_per_source": packed_per_source(by_src, phase.get("target_shares"))})
    runlog.echo(f"[assemble] {total} samples of {window} tokens ({method}) in {len(shards)} shard(s)")
    return {
        "seq_length": seq_length,
        "num_samples": int(total),
        "num_tokens": int(total * window),
        "columns": {"input_ids": [window], "actual_seq_len": [int(width)]},
        "packing": {"method": method, "document_copies": int(copies),
                    "tokens_sampled": int(tokens), "tokens_packed": int(packed_tokens),
                    "tokens_dropped_tail": int(tokens - packed_tokens) if method == "concat_split" else 0,
                    "padding_tokens": int(padding), "pad_id": pad_id if method == "best_fit" else None,
                    "boundaries_width": int(width),
                    "packed_per_source": packed_per_source(by_source, target_shares)},
        "shards": shards,
        "formats": format_entries,
        **({"phases": phase_entries} if phases else {}),
        "layout": {"format": 2, "order_buckets": order_buckets, "shuffle_buckets": shuffle_buckets,
                   "documents_parts": doc_parts, "excerpts_parts": doc_parts,
                   "lineage_by_doc_parts": by_doc_parts, "decisions_parts": decision_parts},
        "files": files,
        "shard_nodes": dict(sorted(shard_nodes.items())),
        "decision_rows": decision_rows,
        "kept_rows": kept_rows,
    }


def _format_entries(formats: list[str], written: list[dict[str, Any]], total: int, seq_length: int, width: int,
                    extra: dict[str, Any], tmp: Path, spill: Path, markers: Path) -> dict[str, Any]:
    """The manifest's ``formats``: per format its files, digests, counts and
    dtype (docs/loader_and_lineage.md, "Formats"). For ``megatron`` the
    driver streams the ``.idx`` from the shard tasks' length parts here (once:
    a marker keeps its result for a resumed build).

    * ``mindrecord``: ``directory``, ``columns``, ``dtype``, ``rows``,
      ``tokens``; its files and digests are the top-level ``shards``.
    * ``mindrecord_shifted``: the same plus ``eod_pad_length``,
      ``eod_mask_loss``, ``max_document_ends`` and ``files`` (one entry per
      shard: ``name``, ``sha256``, ``db_sha256``, ``rows``, ``bytes``; shard
      ``k`` holds the rows of ``shards/`` shard ``k``).
    * ``megatron``: ``prefix``, ``dtype``, ``sequences``, ``documents``
      (entries of ``document_indices``), ``tokens``, ``bin`` (``name``,
      ``bytes``, ``ranges``: per shard ``first_byte``, ``bytes``,
      ``sha256``, ``sequences``) and ``idx`` (``name``, ``bytes``, ``sha256``).
    """
    window = seq_length + 1
    out: dict[str, Any] = {}
    if "mindrecord" in formats:
        out["mindrecord"] = {"directory": layout.SHARDS, "dtype": "int32", "rows": int(total),
                             "tokens": int(total * window),
                             "columns": {"input_ids": [window], "actual_seq_len": [int(width)]}}
    if "mindrecord_shifted" in formats:
        p = extra["eod_pad_length"]
        out["mindrecord_shifted"] = {
            "directory": layout.SHIFTED, "dtype": "int32", "rows": int(total), "tokens": int(total * seq_length),
            "columns": {"input_ids": [seq_length], "labels": [seq_length], "loss_mask": [seq_length],
                        "position_ids": [seq_length], "actual_seq_len": [p]},
            "eod_pad_length": p, "eod_mask_loss": extra["eod_mask_loss"], "max_document_ends": int(width),
            "files": [w["shifted"] for w in written]}
    if "megatron" in formats:
        from pipeline.formats import write_idx

        marker = markers / "megatron-idx.json"
        idx = _marked(marker)
        if idx is None:
            idx = write_idx(tmp / layout.megatron_idx(), np.dtype(extra["megatron_dtype"]),
                            [spill / _LENGTHS_SPILL / f"lengths-{s:05d}.npy" for s in range(len(written))])
            _write_json(idx, marker)
        ranges = [w["megatron"] for w in written]
        if idx["tokens"] != total * window:
            raise BuildError(f"the Megatron sequences hold {idx['tokens']} tokens, the samples {total * window}")
        out["megatron"] = {
            "prefix": layout.megatron_prefix(), "dtype": extra["megatron_dtype"], "sequences": idx["sequences"],
            "documents": idx["sequences"] + 1, "tokens": int(total * window),
            "bin": {"name": layout.megatron_bin(), "bytes": int(sum(r["bytes"] for r in ranges)), "ranges": ranges},
            "idx": {"name": layout.megatron_idx(), "bytes": idx["bytes"], "sha256": idx["sha256"]}}
    return out


def packed_per_source(tokens: dict[str, int], targets: dict[str, float | None] | None
                      ) -> dict[str, dict[str, Any]]:
    """Tokens of each source that made it into samples (after the dropped tail
    and best-fit padding), their share of the packed document tokens, and the
    difference to the source's target share (``targets``: source -> share,
    the mixture's ``target_shares`` export) in percentage points."""
    total = sum(tokens.values()) or 1
    targets = targets or {}
    out = {}
    for source in sorted(set(tokens) | set(targets)):
        share = tokens.get(source, 0) / total
        target = targets.get(source)
        out[source] = {"tokens": int(tokens.get(source, 0)), "share": share,
                       "share_error_pp": None if target is None else 100.0 * (share - target)}
    return out


class _QuietLog:
    """The part of ``pipeline.runlog.RunLog`` the assembly uses, silent."""

    def __init__(self, echo=None):
        self.echo = echo or (lambda message: None)

    def tracker(self, stage: str, total: int, documents=None):
        return _NoTracker()


class _NoTracker:
    def __call__(self, index, result):
        pass

    def close(self):
        pass


def assemble_documents(docs: pa.Table, version_dir: Path, output, seed: int, work_dir: Path | None = None,
                       partitions: int = 1, executor=None, pad_id: int = 0,
                       max_token_id: int | None = None) -> dict[str, Any]:
    """Assemble a version from an in-memory table of final documents, as a
    build does after its stages. The build never calls it (it runs
    :func:`assemble` from ``pipeline.build.assemble_phase``): it is how tests
    drive that same :func:`assemble` on a hand-made table
    (``tests/pipeline/test_assemble.py`` compares the result with the
    in-memory reference of ``pipeline.packing``; ``tests/pipeline/test_lineage.py``
    builds small versions with it).

    Args:
        docs: the final documents: the base columns (``id``, ``source``,
            ``file``, ``line``, ``text``, ``chars`` optional), any measurement
            columns, ``tokenize_input_ids`` (list of ints, EOS last) and
            ``mixture_repeats`` (int32).
        version_dir: the (new) version directory to write into.
        output: a ``pipeline.config.OutputConfig``.
        seed: the build seed.
        work_dir: spill and marker directory (default ``version_dir/../.work-<name>``).
        partitions: split ``docs`` into this many partitions (row ranges),
            to exercise the exchange as a build with many partitions would.
        executor: default a one-process ``LocalExecutor``.
        max_token_id: the vocabulary's largest id (the Megatron dtype);
            default the largest id in ``docs``.

    Returns:
        :func:`assemble`'s manifest entries (no decisions: nothing is dropped).
    """
    from types import SimpleNamespace

    from pipeline.executor import LocalExecutor
    from stages.base import PartitionRef

    version_dir = Path(version_dir)
    work_dir = Path(work_dir) if work_dir else version_dir.parent / f".work-{version_dir.name}"
    if "chars" not in docs.column_names:
        docs = docs.append_column("chars", pc.cast(pc.utf8_length(docs["text"]), pa.int64()))
    refs = []
    bounds = np.linspace(0, docs.num_rows, partitions + 1).astype(int)
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = work_dir / "input" / f"part-{k:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(docs.slice(lo, hi - lo), path)
        refs.append(PartitionRef(str(path)))
    tokens = pc.list_value_length(docs["tokenize_input_ids"]).to_numpy(zero_copy_only=False).astype(np.int64)
    repeats = docs["mixture_repeats"].to_numpy(zero_copy_only=False).astype(np.int64)
    reports = {"mixture": {"totals": {"kept_chars": int(pc.sum(docs["chars"]).as_py() or 0)}}}
    planned = int((tokens * repeats).sum())
    if max_token_id is None:
        max_token_id = int(pc.max(pc.list_flatten(docs["tokenize_input_ids"])).as_py() or 0)
    cfg = SimpleNamespace(seed=seed, output=output)
    own = executor is None
    executor = executor or LocalExecutor(1)
    try:
        from pipeline.lineage import LEGACY_DECISION_COLUMNS

        return assemble(cfg, refs, [], reports, 1.0, pad_id, planned, None, list(LEGACY_DECISION_COLUMNS),
                        work_dir / "assemble", version_dir,
                        executor, _QuietLog(), fingerprint="documents", max_token_id=max_token_id)
    finally:
        if own:
            executor.close()
