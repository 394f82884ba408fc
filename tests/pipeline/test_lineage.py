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
from pipeline.order import rank_samples, stream_samples
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


@pytest.mark.parametrize("step, global_batch, dp_size", [(-1, 4, 1), (0, 4, 3), (0, 16, 1)])
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


# ------------------------------------------------ a version built by pipeline.assemble
# Byte tokenizer: token = UTF-8 byte + 3, EOS 1, pad 0, so any row slice decodes
# back to the bytes of the document's text.
EOS, OFFSET = 1, 3
TEXTS = [
    ("web", "今天天气很好，我们去公园散步。"),
    ("web", "The quick brown fox jumps over the lazy dog."),
    ("web", "Ein kurzer Satz."),
    ("books", "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"),
    ("books", "In the beginning God created the heaven and the earth."),
    ("code", "def f(x):\n    return [x, x * 2]\n"),
    ("code", "print('你好，世界')"),
]
REPEATS = [2, 1, 3, 1, 1, 2, 1]


def _encode(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode("utf-8")] + [EOS]


def _decode_bytes(ids) -> bytes:
    return bytes(int(t) - OFFSET for t in ids if t >= OFFSET)


def build_tiny_version(root, name: str, packing: str = "concat_split", seq_length: int = 16,
                       texts=TEXTS, repeats=REPEATS, seed: int = 3, lines=None, partitions: int = 1,
                       **output):
    """A version written by pipeline.assemble from a hand-made document table;
    document k is ``<source>:<source>.jsonl:<lines[k]>`` (default k + 1)."""
    from pipeline.assemble import assemble_documents
    from pipeline.config import OutputConfig

    lines = lines or list(range(1, len(texts) + 1))
    ids = [f"{src}:{src}.jsonl:{line}" for (src, _), line in zip(texts, lines)]
    tokens = [_encode(t) for _, t in texts]
    docs = pa.table({
        "id": ids, "source": [s for s, _ in texts], "file": [f"{s}.jsonl" for s, _ in texts],
        "line": pa.array(lines, pa.int64()), "text": [t for _, t in texts],
        "langid_lang": ["zh", "en", "de", "ja", "en", "code", "code"][: len(texts)],
        "langid_score": [0.9] * len(texts),
        "tokenize_input_ids": pa.array(tokens, pa.list_(pa.int32())),
        "tokenize_num_tokens": pa.array([len(t) for t in tokens], pa.int32()),
        "mixture_repeats": pa.array(repeats, pa.int32()),
    }).sort_by("id")
    config = OutputConfig(seq_length=seq_length, max_shard_bytes=max(1024, 8 * (seq_length + 1) * 4),
                          packing=packing, **output)
    vdir = root / name
    vdir.mkdir(parents=True)
    out = assemble_documents(docs, vdir, config, seed, partitions=partitions)
    (vdir / "manifest.json").write_text(json.dumps({"version": name, **out}))
    return vdir, dict(zip(ids, (t for _, t in texts))), out


@pytest.fixture(scope="module", params=["concat_split", "best_fit"])
def built(request, tmp_path_factory):
    return build_tiny_version(tmp_path_factory.mktemp("built"), "b1", packing=request.param)


@pytest.mark.parametrize("dp_size, global_batch", [(1, 4), (2, 4), (4, 8)])
def test_lineage_decodes_to_the_text_of_the_loader_batch(built, dp_size, global_batch):
    vdir, texts, out = built
    steps = out["num_samples"] // global_batch
    assert steps >= 2
    for step in (0, steps - 1):
        records = lineage_for_step(vdir, step, global_batch, dp_size)
        for rank in range(dp_size):
            ids, bounds = next(create_dataset(vdir, global_batch, rank, dp_size, start_step=step)
                               .create_tuple_iterator(output_numpy=True, num_epochs=1))
            mine = [r for r in records if r["dp_rank"] == rank]
            assert [r["row"] for r in mine] == list(range(global_batch // dp_size))
            for rec in mine:
                row = ids[rec["row"]]
                for seg in rec["segments"]:
                    piece = row[seg["sample_token_start"]:seg["sample_token_end"]]
                    doc = _encode(texts[seg["doc_id"]])[seg["doc_token_start"]:seg["doc_token_end"]]
                    assert piece.tolist() == doc
                    assert _decode_bytes(piece) in texts[seg["doc_id"]].encode("utf-8")
                # document-boundary column: piece ends in the model input (clipped), then seq_length
                ends = sorted({min(s["sample_token_end"], 16) for s in rec["segments"]} | {16})
                assert sorted(set(bounds[rec["row"]].tolist())) == ends


def test_every_copy_reassembles_to_its_document_text(built):
    vdir, texts, out = built
    lineage = pq.read_table(vdir / "lineage").to_pylist()
    rows = np.concatenate([b[0] for b in create_dataset(vdir, 1).create_tuple_iterator(output_numpy=True)])
    copies: dict[tuple, list] = {}
    for seg in lineage:
        piece = rows[seg["sample_index"]][seg["sample_token_start"]:seg["sample_token_end"]]
        copies.setdefault((seg["doc_id"], seg["repeat"]), []).append((seg["doc_token_start"], piece.tolist()))
    whole = 0
    for (doc_id, _), parts in copies.items():
        ids = [t for _, p in sorted(parts) for t in p]
        if ids and ids[-1] == EOS and min(parts)[0] == 0:
            assert _decode_bytes(ids).decode("utf-8") == texts[doc_id]
            whole += 1
    assert whole >= sum(REPEATS) - 1  # concat-split may cut the last copy at the dropped tail
    if out["packing"]["method"] == "best_fit":
        assert whole == sum(REPEATS) and out["packing"]["padding_tokens"] > 0


def test_reverse_lookup_agrees_with_the_step_lookup(built):
    from pipeline.lineage import format_document_lineage, lineage_for_document

    vdir, texts, out = built
    global_batch, dp_size = 4, 2
    steps = out["num_samples"] // global_batch
    forward = {}
    for step in range(steps + 1):  # step `steps` completes epoch 0's tail with epoch 1's first samples
        for rec in lineage_for_step(vdir, step, global_batch, dp_size):
            if rec["epoch"] > 0:
                continue
            for seg in rec["segments"]:
                forward.setdefault(seg["doc_id"], []).append(
                    (step, rec["dp_rank"], rec["row"], rec["sample_index"], seg["repeat"], seg["doc_token_start"]))
    for doc_id in texts:
        result = lineage_for_document(vdir, doc_id, global_batch, dp_size)
        got = [(p["step"], p["dp_rank"], p["row"], p["sample_index"], p["repeat"], p["doc_token_start"])
               for p in result["pieces"]]
        assert sorted(got) == sorted(forward.get(doc_id, []))
        assert result["document"]["text_excerpt"] == texts[doc_id]
        assert doc_id in format_document_lineage(result)
    nowhere = lineage_for_document(vdir, "web:nope.jsonl:1", global_batch, dp_size)
    assert nowhere["pieces"] == [] and nowhere["document"] is None


def test_around_lists_neighbouring_steps(built):
    vdir, _, out = built
    records = lineage_for_step(vdir, 1, 2, 1, around=1)
    assert [(r["step"], r["sample_index"]) for r in records] == [(s, i) for s in (0, 1, 2) for i in (2 * s, 2 * s + 1)]
    assert [r["step"] for r in lineage_for_step(vdir, 0, 2, 1, around=5)][-1] == 5  # steps of any epoch
    assert "step 0:" in format_lineage(records) and "step 2:" in format_lineage(records)
    with pytest.raises(ValueError, match="around"):
        lineage_for_step(vdir, 0, 2, 1, around=-1)


def test_cli_lineage_around_doc_and_json(built):
    from typer.testing import CliRunner

    from pipeline.cli import app

    vdir, texts, _ = built
    runner = CliRunner()
    res = runner.invoke(app, ["lineage", str(vdir), "--step", "1", "--global-batch", "2", "--around", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["step"] for r in json.loads(res.output)] == [0, 0, 1, 1, 2, 2]
    doc_id = next(iter(texts))
    res = runner.invoke(app, ["lineage", str(vdir), "--doc", doc_id, "--global-batch", "2", "--show-text"])
    assert res.exit_code == 0, res.output
    assert doc_id in res.output and texts[doc_id] in res.output
    res = runner.invoke(app, ["lineage", str(vdir), "--doc", "web:none:1", "--global-batch", "2"])
    assert res.exit_code == 1 and "in no sample" in res.output
    res = runner.invoke(app, ["lineage", str(vdir), "--global-batch", "2"])
    assert res.exit_code == 2 and "exactly one of" in res.output


@pytest.mark.parametrize("dp_size, global_batch", [(1, 4), (2, 4)])
def test_lineage_of_a_step_in_epoch_2_is_what_the_loader_yields(built, dp_size, global_batch):
    vdir, texts, out = built
    n = out["num_samples"]
    epochs, seed = 3, 11
    total = epochs * n // global_batch
    in_epoch_2 = [s for s in range(total) if s * global_batch >= 2 * n][:2]
    straddling = (n // global_batch) if n % global_batch else None  # epoch 0's tail + epoch 1's head
    for step in [*in_epoch_2, *([straddling] if straddling is not None else [])]:
        records = lineage_for_step(vdir, step, global_batch, dp_size, seed=seed)
        assert [r["position"] for r in records] == [step * global_batch + r + k * dp_size
                                                    for r in range(dp_size) for k in range(global_batch // dp_size)]
        assert all(r["epoch"] == r["position"] // n for r in records)
        for rank in range(dp_size):
            ids, _ = next(create_dataset(vdir, global_batch, rank, dp_size, num_epochs=epochs, seed=seed,
                                         start_step=step).create_tuple_iterator(output_numpy=True, num_epochs=1))
            mine = [r for r in records if r["dp_rank"] == rank]
            assert [r["sample_index"] for r in mine] == rank_samples(step, global_batch, rank, dp_size,
                                                                     num_samples=n, seed=seed)
            for rec in mine:
                for seg in rec["segments"]:
                    piece = ids[rec["row"]][seg["sample_token_start"]:seg["sample_token_end"]]
                    assert piece.tolist() == _encode(texts[seg["doc_id"]])[seg["doc_token_start"]:seg["doc_token_end"]]
    # the other seed reads other samples in epoch 2
    other = lineage_for_step(vdir, in_epoch_2[0], global_batch, dp_size, seed=seed + 1)
    assert [r["sample_index"] for r in other] != [r["sample_index"] for r in lineage_for_step(
        vdir, in_epoch_2[0], global_batch, dp_size, seed=seed)] or n <= 2


def test_reverse_lookup_lists_later_epochs(built):
    from pipeline.lineage import format_document_lineage, lineage_for_document

    vdir, texts, out = built
    doc_id = next(iter(texts))
    result = lineage_for_document(vdir, doc_id, 4, 2, num_epochs=3, seed=11)
    for piece in result["pieces"]:
        assert [e["epoch"] for e in piece["epochs"]] == [0, 1, 2]
        for e in piece["epochs"]:
            rec = [r for r in lineage_for_step(vdir, e["step"], 4, 2, text_chars=0, seed=11)
                   if r["position"] == e["position"]]
            assert len(rec) == 1 and (rec[0]["sample_index"], rec[0]["dp_rank"], rec[0]["row"]) == (
                piece["sample_index"], e["dp_rank"], e["row"])
    assert "later epochs" in format_document_lineage(result)
    with pytest.raises(ValueError, match="num_epochs"):
        lineage_for_document(vdir, doc_id, 4, 2, num_epochs=65)


def test_lineage_with_consumed_samples_after_a_batch_size_change(built):
    vdir, _, out = built
    n = out["num_samples"]
    records = lineage_for_step(vdir, 3, 4, 1, consumed_samples=6, seed=2)  # e.g. 3 steps of 2, then batch 4
    assert [r["position"] for r in records] == [6, 7, 8, 9]
    assert [r["sample_index"] for r in records] == stream_samples(np.arange(6, 10), n, seed=2).tolist()
    around = lineage_for_step(vdir, 3, 4, 1, consumed_samples=6, around=2, text_chars=0, seed=2)
    assert sorted({r["step"] for r in around}) == [2, 3, 4, 5]  # step 1 would start before position 0
    assert [r["position"] for r in around if r["step"] == 2] == [2, 3, 4, 5]


def test_cli_lineage_step_past_the_first_epoch(built):
    from typer.testing import CliRunner

    from pipeline.cli import app

    vdir, _, out = built
    step = 2 * out["num_samples"] // 2 + 1  # global batch 2: a step of epoch 1 or 2
    res = CliRunner().invoke(app, ["lineage", str(vdir), "--step", str(step), "--global-batch", "2",
                                   "--seed", "7", "--json"])
    assert res.exit_code == 0, res.output
    got = [r["sample_index"] for r in json.loads(res.output)]
    assert got == stream_samples(np.arange(2 * step, 2 * step + 2), out["num_samples"], seed=7).tolist()
