"""pipeline/assemble.py: the streaming assembly writes what an in-memory
assembly of the whole corpus would (pipeline.packing's reference functions),
whatever the partitioning, the bucket sizes and the number of workers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.assemble import assemble_documents
from pipeline.config import OutputConfig
from pipeline.executor import LocalExecutor
from pipeline.packing import document_boundaries, document_order, pack, pack_best_fit, shuffle_samples

SEQ = 15
WINDOW = SEQ + 1
SEED = 5


def _docs(n: int = 150, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 3 * WINDOW, size=n)  # many shorter than a window, some spanning three
    repeats = rng.integers(0, 4, size=n)
    ids = [f"web:w.jsonl:{i}" for i in range(n)]
    tokens = [(1000 * (i + 1) + np.arange(m)).astype(np.int32).tolist() for i, m in enumerate(lengths)]
    return pa.table({
        "id": ids, "source": ["web" if i % 3 else "code" for i in range(n)], "file": ["w.jsonl"] * n,
        "line": pa.array(np.arange(1, n + 1), pa.int64()), "text": [f"document {i}" for i in range(n)],
        "langid_lang": ["en"] * n,
        "tokenize_input_ids": pa.array(tokens, pa.list_(pa.int32())),
        "tokenize_num_tokens": pa.array(lengths.astype(np.int32)),
        "mixture_repeats": pa.array(repeats.astype(np.int32)),
    })


def _rows(vdir, manifest) -> tuple[np.ndarray, np.ndarray]:
    from mindspore.mindrecord import FileReader

    ids, ends = [], []
    for shard in manifest["shards"]:
        reader = FileReader(str(vdir / shard["name"]))
        for row in reader.get_next():
            ids.append(row["input_ids"])
            ends.append(row["actual_seq_len"])
        reader.close()
    return np.stack(ids), np.stack(ends)


def _reference(docs: pa.Table, method: str):
    ids = docs["id"].to_pylist()
    arrays = [np.array(t, np.int32) for t in docs["tokenize_input_ids"].to_pylist()]
    order = document_order(ids, np.array(docs["mixture_repeats"].to_pylist()), SEED)
    samples, segments = (pack(arrays, order, SEQ) if method == "concat_split"
                         else pack_best_fit(arrays, order, SEQ, pad_id=0))
    boundaries = document_boundaries(segments, len(samples), SEQ)
    perm = shuffle_samples(len(samples), SEED)
    return samples[perm], boundaries[perm]


def _build(tmp_path, name, docs, method="concat_split", partitions=1, workers=1, **buckets):
    output = OutputConfig(seq_length=SEQ, max_shard_bytes=40 * WINDOW * 4, packing=method, **buckets)
    executor = LocalExecutor(workers)
    try:
        out = assemble_documents(docs, tmp_path / name, output, SEED, partitions=partitions, executor=executor)
    finally:
        executor.close()
    return tmp_path / name, out


@pytest.mark.parametrize("method", ["concat_split", "best_fit"])
def test_one_bucket_equals_the_in_memory_reference(tmp_path, method):
    docs = _docs()
    vdir, out = _build(tmp_path, "one", docs, method)
    expected, boundaries = _reference(docs, method)
    rows, ends = _rows(vdir, out)
    assert out["layout"]["order_buckets"] == 1 and len(out["shards"]) > 3
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(ends, boundaries)
    assert out["num_samples"] == len(expected)


def test_concat_split_is_the_same_for_any_partitioning_buckets_and_workers(tmp_path):
    """Order buckets of ~50 tokens (windows cross bucket edges: stitched),
    shuffle buckets of 3 samples, 7 partitions and 2 worker processes give
    the same shards, lineage and documents as one bucket in one process."""
    docs = _docs()
    _, base = _build(tmp_path, "base", docs)
    vdir, many = _build(tmp_path, "many", docs, partitions=7, workers=2, order_bucket_tokens=50,
                        shuffle_bucket_samples=3, table_part_bytes=1024)
    assert many["layout"]["order_buckets"] > 20 and many["layout"]["shuffle_buckets"] > 16
    assert many["layout"]["documents_parts"] == 2  # 1,700 characters in parts of ~1 KiB
    assert [s["sha256"] for s in many["shards"]] == [s["sha256"] for s in base["shards"]]
    split = pq.read_table(vdir / "documents").sort_by("id")
    assert split.equals(pq.read_table(tmp_path / "base" / "documents").sort_by("id"))
    assert split.num_rows == sum(1 for r in docs["mixture_repeats"].to_pylist())
    assert {k: v for k, v in many["files"].items() if k.startswith("lineage/")} == \
        {k: v for k, v in base["files"].items() if k.startswith("lineage/")}
    for key in ("num_samples", "columns", "packing"):
        assert many[key] == base[key], key


def test_lineage_rows_point_at_the_tokens_they_name(tmp_path):
    docs = _docs()
    vdir, out = _build(tmp_path, "lin", docs, partitions=3, order_bucket_tokens=64, shuffle_bucket_samples=4)
    rows, _ = _rows(vdir, out)
    tokens = dict(zip(docs["id"].to_pylist(), docs["tokenize_input_ids"].to_pylist()))
    lineage = pq.read_table(vdir / "lineage").to_pylist()
    assert len(lineage) > len(rows)
    for seg in lineage:
        piece = rows[seg["sample_index"], seg["sample_token_start"]:seg["sample_token_end"]].tolist()
        assert piece == tokens[seg["doc_id"]][seg["doc_token_start"]:seg["doc_token_end"]]
    # every window is tiled by its pieces, and the reverse index holds the same rows
    by_sample: dict[int, list] = {}
    for seg in lineage:
        by_sample.setdefault(seg["sample_index"], []).append(seg)
    assert sorted(by_sample) == list(range(len(rows)))
    for segs in by_sample.values():
        assert [s["segment"] for s in segs] == list(range(len(segs)))
        assert [s["sample_token_start"] for s in segs] == [0] + [s["sample_token_end"] for s in segs[:-1]]
        assert segs[-1]["sample_token_end"] == WINDOW
    by_doc = pq.read_table(vdir / "lineage_by_doc").to_pylist()
    key = lambda s: (s["sample_index"], s["segment"])  # noqa: E731
    assert sorted(by_doc, key=key) == sorted(lineage, key=key)
    copies = sum(docs["mixture_repeats"].to_pylist())
    assert out["packing"]["document_copies"] == copies
    assert out["packing"]["tokens_sampled"] == out["packing"]["tokens_packed"] + out["packing"]["tokens_dropped_tail"]


def test_best_fit_in_many_buckets_never_splits_a_short_copy(tmp_path):
    docs = _docs()
    vdir, out = _build(tmp_path, "bf", docs, "best_fit", partitions=4, order_bucket_tokens=80)
    assert out["layout"]["order_buckets"] > 10
    lineage = pq.read_table(vdir / "lineage").to_pylist()
    lengths = dict(zip(docs["id"].to_pylist(), docs["tokenize_num_tokens"].to_pylist()))
    pieces: dict[tuple, int] = {}
    for seg in lineage:
        pieces[(seg["doc_id"], seg["repeat"])] = pieces.get((seg["doc_id"], seg["repeat"]), 0) + 1
    for (doc_id, _), n in pieces.items():
        if lengths[doc_id] <= WINDOW:
            assert n == 1, doc_id
    assert out["packing"]["tokens_packed"] == out["packing"]["tokens_sampled"]  # best fit drops nothing
    assert out["packing"]["tokens_packed"] + out["packing"]["padding_tokens"] == out["num_tokens"]


def test_a_killed_assembly_resumes_without_redoing_finished_tasks(tmp_path, monkeypatch):
    """A shard task that fails leaves the other tasks' markers; the re-run
    redoes only what is missing and writes the same shards."""
    import pipeline.assemble as assemble

    docs = _docs()
    _, base = _build(tmp_path, "ref", docs, partitions=3, order_bucket_tokens=64)
    real = assemble.write_shard
    calls = {"n": 0}

    def failing(task):
        calls["n"] += 1
        if task["shard"] == 2:
            raise RuntimeError("disk full")
        return real(task)

    monkeypatch.setattr(assemble, "write_shard", failing)
    with pytest.raises(Exception, match="disk full"):
        _build(tmp_path, "again", docs, partitions=3, order_bucket_tokens=64)
    done = sorted(p.name for p in (tmp_path / ".work-again" / "assemble" / "markers").glob("shard-*.json"))
    assert "shard-00002.json" not in done and len(done) == len(base["shards"]) - 1
    monkeypatch.setattr(assemble, "write_shard", real)
    (tmp_path / "again").mkdir(exist_ok=True)
    _, resumed = _build(tmp_path, "again", docs, partitions=3, order_bucket_tokens=64)
    assert [s["sha256"] for s in resumed["shards"]] == [s["sha256"] for s in base["shards"]]
