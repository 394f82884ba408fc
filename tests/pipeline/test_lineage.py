"""pipeline/lineage.py: a step's samples, their document pieces and decisions,
checked against what the loader actually yields."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.lineage import format_lineage, lineage_for_step
from pipeline.loader import create_dataset
from pipeline.order import rank_samples
from pipeline.writer import write_shards

SEQ_LENGTH = 8
ROW = SEQ_LENGTH + 1
# (id, lang, score, perplexity, bucket, dedup_cluster, number of tokens, text)
DOCS = [
    ("web:a.jsonl:1", "en", 0.97, 310.5, "head", None, 13, "The quick brown fox."),
    ("web:a.jsonl:2", "zh", 0.99, 120.25, "middle", "web:a.jsonl:9", 22, "今天天气很好，我们去公园散步。"),
    ("books:b.jsonl:1", "de", 0.88, 901.0, "tail", None, 5, "Guten   Morgen\nWelt"),
    ("books:b.jsonl:7", "ja", 0.91, 450.0, "middle", None, 17, "吾輩は猫である。名前はまだ無い。"),
    ("code:c.txt:3", "code", None, None, None, None, 30, "def f(x): return [x]"),
]


def _doc_tokens() -> dict[str, np.ndarray]:
    """Document k's tokens are 1000*(k+1) + 0..n-1: every token names its document."""
    return {d[0]: 1000 * (k + 1) + np.arange(d[6], dtype=np.int32) for k, d in enumerate(DOCS)}


def _pack(order: list[str], tokens: dict[str, np.ndarray]):
    """Concatenate documents in ``order`` and cut ROW-token samples (tail dropped),
    recording each piece; repeats of a document count up."""
    stream, owner, offset, repeat = [], [], [], []
    copies: dict[str, int] = {}
    for doc_id in order:
        copies[doc_id] = copies.get(doc_id, -1) + 1
        stream.append(tokens[doc_id])
        owner += [doc_id] * len(tokens[doc_id])
        offset += range(len(tokens[doc_id]))
        repeat += [copies[doc_id]] * len(tokens[doc_id])
    stream = np.concatenate(stream)
    n = len(stream) // ROW
    samples = stream[: n * ROW].reshape(n, ROW)
    pieces = []  # (sample, doc_id, repeat, doc_start, doc_end, sample_start, sample_end)
    for s in range(n):
        start = 0
        for t in range(1, ROW + 1):
            i, j = s * ROW + start, s * ROW + t - 1
            if t == ROW or (owner[s * ROW + t], repeat[s * ROW + t]) != (owner[i], repeat[i]):
                pieces.append((s, owner[i], repeat[i], offset[i], offset[j] + 1, start, t))
                start = t
    return samples, pieces


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    vdir = tmp_path_factory.mktemp("corpora") / "v1"
    tokens = _doc_tokens()
    order = [d[0] for d in DOCS] + ["web:a.jsonl:2", "code:c.txt:3"]  # two documents repeated
    samples, pieces = _pack(order, tokens)
    perm = np.random.default_rng(0).permutation(len(samples))  # sample i of the version = packed perm[i]
    inverse = np.argsort(perm)
    shards = write_shards(samples[perm], vdir, max_shard_bytes=5 * ROW * 4)
    manifest = {"seq_length": SEQ_LENGTH, "num_samples": len(samples), "shards": shards}
    (vdir / "manifest.json").write_text(json.dumps(manifest))

    rows = sorted(((int(inverse[p[0]]), *p[1:]) for p in pieces), key=lambda r: (r[0], r[5]))
    index = [r[0] for r in rows]
    segment = [index[:i].count(index[i]) for i in range(len(index))]
    lineage = pa.table({
        "sample_index": pa.array(index, pa.int64()),
        "segment": pa.array(segment, pa.int32()),
        "doc_id": [r[1] for r in rows],
        "source": [r[1].split(":")[0] for r in rows],
        "file": [r[1].split(":")[1] for r in rows],
        "line": pa.array([int(r[1].split(":")[2]) for r in rows], pa.int64()),
        "repeat": pa.array([r[2] for r in rows], pa.int32()),
        "doc_token_start": pa.array([r[3] for r in rows], pa.int64()),
        "doc_token_end": pa.array([r[4] for r in rows], pa.int64()),
        "sample_token_start": pa.array([r[5] for r in rows], pa.int32()),
        "sample_token_end": pa.array([r[6] for r in rows], pa.int32()),
    })
    pq.write_table(lineage, vdir / "lineage.parquet", row_group_size=4)  # many row groups to skip
    docs = sorted(DOCS)
    documents = pa.table({
        "id": [d[0] for d in docs], "source": [d[0].split(":")[0] for d in docs],
        "file": [d[0].split(":")[1] for d in docs], "line": [int(d[0].split(":")[2]) for d in docs],
        "text": [d[7] for d in docs], "langid_lang": [d[1] for d in docs],
        "langid_score": [d[2] for d in docs], "perplexity_value": [d[3] for d in docs],
        "perplexity_bucket": [d[4] for d in docs], "dedup_cluster": pa.array([d[5] for d in docs], pa.string()),
        "tokenize_num_tokens": pa.array([d[6] for d in docs], pa.int32()),
        "mixture_repeats": pa.array([order.count(d[0]) for d in docs], pa.int32()),
    })  # no dedup_similarity column: the lookup must report it as None
    pq.write_table(documents, vdir / "documents.parquet", row_group_size=2)
    return vdir, tokens, len(samples)


def test_fixture_packs_what_we_expect(version):
    vdir, tokens, num_samples = version
    assert num_samples == (13 + 22 + 5 + 17 + 30 + 22 + 30) // ROW == 15


@pytest.mark.parametrize("global_batch, dp_size", [(4, 1), (4, 2), (6, 3)])
def test_lineage_matches_the_loader_batch(version, global_batch, dp_size):
    vdir, tokens, num_samples = version
    for step in range(num_samples // global_batch):
        records = lineage_for_step(vdir, step, global_batch, dp_size)
        expected = [(r, i) for r in range(dp_size) for i in rank_samples(step, global_batch, r, dp_size)]
        assert [(rec["dp_rank"], rec["sample_index"]) for rec in records] == expected
        for rank in range(dp_size):
            dataset = create_dataset(vdir, global_batch, rank, dp_size, start_step=step)
            batch = next(dataset.create_dict_iterator(output_numpy=True, num_epochs=1))["input_ids"]
            for rec in (r for r in records if r["dp_rank"] == rank):
                row = batch[rec["row"]]
                segs = rec["segments"]
                # pieces tile the row, and each piece is its document's tokens
                assert [s["sample_token_start"] for s in segs] == [0] + [s["sample_token_end"] for s in segs[:-1]]
                assert segs[-1]["sample_token_end"] == ROW
                for s in segs:
                    np.testing.assert_array_equal(
                        row[s["sample_token_start"] : s["sample_token_end"]],
                        tokens[s["doc_id"]][s["doc_token_start"] : s["doc_token_end"]],
                    )


def test_segments_carry_the_document_decisions(version):
    vdir, _, num_samples = version
    segments = [s for step in range(num_samples // 5) for r in lineage_for_step(vdir, step, 5) for s in r["segments"]]
    by_doc = {s["doc_id"]: s for s in segments}
    assert set(by_doc) == {d[0] for d in DOCS}
    zh = by_doc["web:a.jsonl:2"]
    assert (zh["langid_lang"], zh["langid_score"], zh["perplexity_bucket"], zh["dedup_cluster"]) == (
        "zh", 0.99, "middle", "web:a.jsonl:9")
    assert zh["mixture_repeats"] == 2 and zh["dedup_similarity"] is None
    assert zh["text_excerpt"] == "今天天气很好，我们去公园散步。"
    assert (zh["source"], zh["file"], zh["line"]) == ("web", "a.jsonl", 2)
    assert {s["repeat"] for s in segments if s["doc_id"] == "code:c.txt:3"} == {0, 1}
    assert by_doc["code:c.txt:3"]["langid_score"] is None


def test_format_lineage_table(version):
    vdir, _, _ = version
    records = lineage_for_step(vdir, 1, 4, 2)
    plain = format_lineage(records)
    pieces = sum(len(r["segments"]) for r in records)
    assert f"step 1: 4 samples, {pieces} document pieces" in plain
    assert all(s["doc_id"] in plain for r in records for s in r["segments"])
    texted = format_lineage(records, show_text=True)
    excerpts = {" ".join(s["text_excerpt"].split()) for r in records for s in r["segments"]}
    assert any(e[:10] in texted for e in excerpts) and not any(e[:10] in plain for e in excerpts)


@pytest.mark.parametrize("step, global_batch, dp_size", [(3, 4, 1), (-1, 4, 1), (0, 4, 3), (0, 16, 1)])
def test_bad_step_or_split_raises(version, step, global_batch, dp_size):
    with pytest.raises(ValueError):
        lineage_for_step(version[0], step, global_batch, dp_size)


def test_document_missing_from_documents_parquet_raises(version, tmp_path):
    vdir = version[0]
    for name in ("manifest.json", "lineage.parquet"):
        (tmp_path / name).write_bytes((vdir / name).read_bytes())
    docs = pq.read_table(vdir / "documents.parquet")
    pq.write_table(docs.filter(pc.not_equal(docs["id"], "books:b.jsonl:1")), tmp_path / "documents.parquet")
    needs_it = [s for s in range(3) if any(seg["doc_id"] == "books:b.jsonl:1"
                                           for r in lineage_for_step(vdir, s, 4) for seg in r["segments"])]
    with pytest.raises(ValueError, match="missing"):
        lineage_for_step(tmp_path, needs_it[0], 4)
