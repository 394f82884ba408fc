"""output.formats: MindRecord, pre-shifted MindRecord and the Megatron indexed
dataset written from one packed stream (pipeline.formats, pipeline.megatron,
pipeline.assemble phase 3), their manifest entries and `verify`."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import layout
from pipeline.assemble import BuildError, assemble_documents
from pipeline.config import OutputConfig
from pipeline.executor import LocalExecutor
from pipeline.formats import shifted_columns
from pipeline.manifest import write_manifest
from pipeline.megatron import read_header, read_idx, read_sequence, read_tokens, token_dtype
from pipeline.versions import verify_version

SEQ = 15
WINDOW = SEQ + 1
SEED = 5
EOS = 1
PAD = 0
ALL = ["mindrecord", "mindrecord_shifted", "megatron"]


def _docs(n: int = 120, seed: int = 0, base: int = 10) -> pa.Table:
    """Documents whose ids are ``base + ...`` (never EOS or PAD) and end with EOS."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 3 * WINDOW, size=n)
    repeats = rng.integers(0, 3, size=n)
    tokens = [(base + (17 * i + np.arange(m)) % 5000).astype(np.int32).tolist() + [EOS]
              for i, m in enumerate(lengths)]
    return pa.table({
        "id": [f"web:w.jsonl:{i}" for i in range(n)], "source": ["web" if i % 3 else "code" for i in range(n)],
        "file": ["w.jsonl"] * n, "line": pa.array(np.arange(1, n + 1), pa.int64()),
        "text": [f"document {i}" for i in range(n)], "langid_lang": ["en"] * n,
        "tokenize_input_ids": pa.array(tokens, pa.list_(pa.int32())),
        "tokenize_num_tokens": pa.array([len(t) for t in tokens], pa.int32()),
        "mixture_repeats": pa.array(repeats.astype(np.int32)),
    })


def _build(tmp_path, name, docs, workers=1, partitions=1, **output):
    output.setdefault("formats", ALL)
    config = OutputConfig(seq_length=SEQ, max_shard_bytes=40 * WINDOW * 4, **output)
    executor = LocalExecutor(workers)
    try:
        out = assemble_documents(docs, tmp_path / name, config, SEED, partitions=partitions, executor=executor,
                                 pad_id=PAD)
    finally:
        executor.close()
    return tmp_path / name, out


def _read_mindrecord(path) -> dict[str, np.ndarray]:
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(path))
    rows = list(reader.get_next())
    reader.close()
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def _unshifted(vdir, out) -> np.ndarray:
    return np.concatenate([_read_mindrecord(vdir / s["name"])["input_ids"] for s in out["shards"]])


def _lineage(vdir) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((vdir / layout.LINEAGE).glob("part-*.parquet"))])


def _gpt_dataset_actual_seq_len(tokens: np.ndarray, eod: int, pad_length: int) -> np.ndarray:
    """mindformers 1.8 GPTDataset's _get_eod_attention_mask, restated (without
    its silent truncation): EOD positions + 1, the last dropped when the final
    input is EOD, then seq_length repeated."""
    seq = len(tokens)
    pos = np.flatnonzero(tokens == eod) + 1
    if tokens[-1] == eod:
        pos = pos[:-1]
    return np.concatenate([pos, np.full(pad_length - len(pos), seq)]).astype(np.int32)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    docs = _docs()
    vdir, out = _build(tmp_path_factory.mktemp("formats"), "v", docs, partitions=3, order_bucket_tokens=200)
    return docs, vdir, out


def test_the_megatron_stream_is_the_mindrecord_rows_in_order(three):
    docs, vdir, out = three
    rows = _unshifted(vdir, out)
    assert rows.shape == (out["num_samples"], WINDOW) and len(out["shards"]) >= 3
    prefix = vdir / layout.megatron_prefix()
    dtype, lengths, pointers, doc_index = read_idx(f"{prefix}.idx")
    assert dtype == np.uint16  # ids below 5,010
    stream = read_tokens(prefix, 0, rows.size)
    np.testing.assert_array_equal(stream.reshape(-1, WINDOW), rows)
    assert (vdir / layout.megatron_bin()).stat().st_size == rows.size * 2
    # sample 7 alone, by token offset
    np.testing.assert_array_equal(read_tokens(prefix, 7 * WINDOW, WINDOW), rows[7])
    # contiguous pointers, one document per sequence
    np.testing.assert_array_equal(pointers, 2 * (np.cumsum(lengths) - lengths))
    np.testing.assert_array_equal(doc_index, np.arange(len(lengths) + 1))
    meg = out["formats"]["megatron"]
    assert meg["dtype"] == "uint16" and meg["sequences"] == len(lengths) and meg["tokens"] == rows.size
    assert [r["first_byte"] for r in meg["bin"]["ranges"]] == \
        [2 * WINDOW * sum(s["rows"] for s in out["shards"][:k]) for k in range(len(out["shards"]))]


def test_megatron_sequence_k_is_the_kth_lineage_row_and_documents_end_with_eod(three):
    docs, vdir, out = three
    rows = _unshifted(vdir, out)
    lineage = _lineage(vdir).to_pylist()
    prefix = vdir / layout.megatron_prefix()
    _, lengths, _, _ = read_idx(f"{prefix}.idx")
    assert len(lengths) == len(lineage)
    doc_tokens = dict(zip(docs["id"].to_pylist(), docs["tokenize_input_ids"].to_pylist()))
    last_pieces = 0
    for k in list(range(0, len(lineage), 7)) + [len(lineage) - 1]:
        row = lineage[k]
        seq = read_sequence(prefix, k)
        np.testing.assert_array_equal(seq, rows[row["sample_index"], row["sample_token_start"]:row["sample_token_end"]])
        np.testing.assert_array_equal(seq, doc_tokens[row["doc_id"]][row["doc_token_start"]:row["doc_token_end"]])
    for k, row in enumerate(lineage):
        is_last = row["doc_token_end"] == len(doc_tokens[row["doc_id"]])
        tail = rows[row["sample_index"], row["sample_token_end"] - 1]
        assert (tail == EOS) == is_last, k
        last_pieces += is_last
    assert last_pieces > 100


def test_shifted_rows_are_the_unshifted_samples_shifted_with_mindformers_columns(three):
    docs, vdir, out = three
    entry = out["formats"]["mindrecord_shifted"]
    assert [f["name"] for f in entry["files"]] == [layout.shifted_shard_name(k) for k in range(len(out["shards"]))]
    assert [f["rows"] for f in entry["files"]] == [s["rows"] for s in out["shards"]]
    assert entry["columns"] == {"input_ids": [SEQ], "labels": [SEQ], "loss_mask": [SEQ], "position_ids": [SEQ],
                                "actual_seq_len": [128]}
    for shard, shifted in zip(out["shards"], entry["files"]):
        w = _read_mindrecord(vdir / shard["name"])["input_ids"]
        r = _read_mindrecord(vdir / shifted["name"])
        np.testing.assert_array_equal(r["input_ids"], w[:, :SEQ])
        np.testing.assert_array_equal(r["labels"], w[:, 1:])
        np.testing.assert_array_equal(r["labels"][:, :-1], r["input_ids"][:, 1:])
        assert (r["loss_mask"] == 1).all()  # concat_split: no padding; eod_mask_loss off
        for i in range(len(w)):
            np.testing.assert_array_equal(r["actual_seq_len"][i], _gpt_dataset_actual_seq_len(w[i, :SEQ], EOS, 128))
            # positions restart after each EOS of the inputs
            expect, p = [], 0
            for tok in w[i, :SEQ]:
                expect.append(p)
                p = 0 if tok == EOS else p + 1
            np.testing.assert_array_equal(r["position_ids"][i], expect)


def test_best_fit_shifted_loss_mask_hides_padding_and_with_eod_mask_loss_the_eos_input(tmp_path):
    docs = _docs(60, seed=3)
    vdir, out = _build(tmp_path, "bf", docs, packing="best_fit", eod_mask_loss=True, eod_pad_length=12,
                       formats=["mindrecord", "mindrecord_shifted"])
    assert "megatron" not in out["formats"]
    w = _unshifted(vdir, out)
    r = {k: np.concatenate([_read_mindrecord(vdir / f["name"])[k] for f in out["formats"]["mindrecord_shifted"]["files"]])
         for k in ("input_ids", "labels", "loss_mask", "actual_seq_len")}
    padded = (w == PAD)  # PAD is never a document token here
    assert padded.sum() == out["packing"]["padding_tokens"] > 0
    expected = ~padded[:, 1:] & (w[:, :SEQ] != EOS)
    np.testing.assert_array_equal(r["loss_mask"], expected.astype(np.int32))
    np.testing.assert_array_equal(r["labels"], w[:, 1:])
    for i in range(len(w)):  # padding is one more range ending at seq_length
        np.testing.assert_array_equal(r["actual_seq_len"][i], _gpt_dataset_actual_seq_len(w[i, :SEQ], EOS, 12))


def test_shifted_columns_on_known_samples():
    """seq_length 8: sample 0 = pieces [0, 3) [3, 9); sample 1 (best fit) =
    [0, 4) [4, 6) then padding."""
    rows = np.arange(18, dtype=np.int32).reshape(2, 9)
    c = shifted_columns(rows, np.array([0, 0, 1, 1]), np.array([3, 9, 4, 6]), 4, eod_mask_loss=True)
    np.testing.assert_array_equal(c["actual_seq_len"], [[3, 8, 8, 8], [4, 6, 8, 8]])
    np.testing.assert_array_equal(c["position_ids"], [[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 2, 3, 0, 1, 0, 1]])
    np.testing.assert_array_equal(c["loss_mask"], [[1, 1, 0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 0, 0, 0]])
    assert shifted_columns(rows, np.array([0, 0, 1, 1]), np.array([3, 9, 4, 6]), 4)["loss_mask"][0].tolist() == [1] * 8
    with pytest.raises(ValueError, match="holds 3 document ends, more than output.eod_pad_length = 2"):
        shifted_columns(rows, np.array([0, 0, 1, 1]), np.array([3, 9, 4, 6]), 2)


def test_more_document_ends_than_eod_pad_length_stops_before_any_shard(tmp_path):
    """Documents of 2 tokens (one id, EOS): a 16-token window holds 8 of them,
    whose ends inside the 15 inputs are 2, 4, ..., 14 and then 15: 8 entries."""
    n = 64
    tokens = [[10 + i, EOS] for i in range(n)]
    docs = pa.table({"id": [f"web:w.jsonl:{i}" for i in range(n)], "source": ["web"] * n, "file": ["w.jsonl"] * n,
                     "line": pa.array(np.arange(1, n + 1), pa.int64()), "text": ["x"] * n, "langid_lang": ["en"] * n,
                     "tokenize_input_ids": pa.array(tokens, pa.list_(pa.int32())),
                     "tokenize_num_tokens": pa.array([2] * n, pa.int32()),
                     "mixture_repeats": pa.array([1] * n, pa.int32())})
    with pytest.raises(BuildError, match=r"a sample holds 8 document ends .* more than output.eod_pad_length = 7: "
                                         r"raise output.eod_pad_length to at least 8"):
        _build(tmp_path, "tight", docs, eod_pad_length=7)
    assert not (tmp_path / "tight" / layout.SHARDS).exists() and not (tmp_path / "tight" / layout.SHIFTED).exists()
    _, out = _build(tmp_path, "fits", docs, eod_pad_length=8)
    assert out["formats"]["mindrecord_shifted"]["max_document_ends"] == 8


def test_formats_are_byte_identical_with_one_and_two_workers(tmp_path):
    docs = _docs(80, seed=1)
    a, out_a = _build(tmp_path, "w1", docs, workers=1, partitions=1)
    b, out_b = _build(tmp_path, "w2", docs, workers=2, partitions=3, order_bucket_tokens=150)
    assert out_a["formats"] == out_b["formats"] and out_a["shards"] == out_b["shards"]
    for name in [layout.megatron_bin(), layout.megatron_idx(),
                 *[f["name"] for f in out_a["formats"]["mindrecord_shifted"]["files"]]]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_killed_shard_task_resumes_to_the_same_megatron_bytes(tmp_path, monkeypatch):
    """A shard task that dies after writing part of its .bin range is run
    again on resume; the positional writes give the same bytes."""
    import pipeline.assemble as assemble
    import pipeline.formats as formats

    docs = _docs(80, seed=2)
    ref, base = _build(tmp_path, "ref", docs)
    real_close = formats.BinRange.close

    def dying_close(self):
        if self.start > 0:
            raise RuntimeError("killed")
        return real_close(self)

    monkeypatch.setattr(formats.BinRange, "close", dying_close)
    with pytest.raises(Exception, match="killed"):
        _build(tmp_path, "again", docs)
    monkeypatch.setattr(formats.BinRange, "close", real_close)
    _, resumed = _build(tmp_path, "again", docs)
    assert resumed["formats"] == base["formats"]
    for name in (layout.megatron_bin(), layout.megatron_idx()):
        assert (tmp_path / "again" / name).read_bytes() == (ref / name).read_bytes()
    assert assemble  # the module whose tasks were re-run


def _publish(vdir, out) -> None:
    write_manifest({"version": vdir.name, **out}, vdir)


def test_verify_names_a_flipped_byte_in_the_bin_and_in_a_shifted_shard(three, tmp_path):
    _, vdir, out = three
    copy = tmp_path / "copy"
    shutil.copytree(vdir, copy)
    _publish(copy, out)
    result = verify_version(copy)
    assert result["ok"], result["problems"]
    assert result["checked_format_files"] == len(out["shards"]) + 2
    with open(copy / layout.megatron_bin(), "r+b") as fh:  # a byte in the second shard's range
        fh.seek(out["formats"]["megatron"]["bin"]["ranges"][1]["first_byte"] + 3)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 1]))
    shifted = copy / out["formats"]["mindrecord_shifted"]["files"][0]["name"]
    data = bytearray(shifted.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shifted.write_bytes(bytes(data))
    result = verify_version(copy)
    assert result["bad_files"] == [layout.shifted_shard_name(0), layout.megatron_bin()]
    first = out["formats"]["megatron"]["bin"]["ranges"][1]
    assert result["problems"][1]["reason"] == (f"SHA-256 of bytes {first['first_byte']}.."
                                               f"{first['first_byte'] + first['bytes'] - 1} differs from the manifest")


def test_without_mindrecord_the_manifest_keeps_the_row_cut(tmp_path):
    docs = _docs(60, seed=4)
    vdir, out = _build(tmp_path, "nomr", docs, formats=["megatron", "mindrecord_shifted"])
    assert not (vdir / layout.SHARDS).exists()
    assert all(set(s) == {"rows"} for s in out["shards"]) and "mindrecord" not in out["formats"]
    assert [f["rows"] for f in out["formats"]["mindrecord_shifted"]["files"]] == [s["rows"] for s in out["shards"]]
    assert len(list((vdir / layout.LINEAGE).glob("part-*.parquet"))) == len(out["shards"])
    _publish(vdir, out)
    assert verify_version(vdir)["ok"]
    # lineage still finds a step's samples (the row cut) and they name the Megatron tokens
    from pipeline.lineage import lineage_for_step

    doc_tokens = dict(zip(docs["id"].to_pylist(), docs["tokenize_input_ids"].to_pylist()))
    records = lineage_for_step(vdir, 3, 4)
    assert [r["sample_index"] for r in records] == [12, 13, 14, 15]
    for rec in records:
        sample = read_tokens(vdir / layout.megatron_prefix(), rec["sample_index"] * WINDOW, WINDOW)
        for seg in rec["segments"]:
            np.testing.assert_array_equal(sample[seg["sample_token_start"]:seg["sample_token_end"]],
                                          doc_tokens[seg["doc_id"]][seg["doc_token_start"]:seg["doc_token_end"]])


def test_int32_tokens_when_the_vocabulary_does_not_fit_uint16(tmp_path):
    assert token_dtype(65498) == np.uint16 and token_dtype(65499) == np.int32  # Megatron: cardinality < 65,500
    docs = _docs(40, seed=5, base=70000)
    vdir, out = _build(tmp_path, "wide", docs, formats=["mindrecord", "megatron"])
    prefix = vdir / layout.megatron_prefix()
    assert read_header(f"{prefix}.idx")[0] == np.int32 and out["formats"]["megatron"]["dtype"] == "int32"
    rows = _unshifted(vdir, out)
    np.testing.assert_array_equal(read_tokens(prefix, 0, rows.size).reshape(-1, WINDOW), rows)
    # header bytes as mindformers' _IndexWriter writes them
    head = (vdir / layout.megatron_idx()).read_bytes()[:34]
    assert head[:9] == b"MMIDIDX\x00\x00" and head[9:17] == (1).to_bytes(8, "little") and head[17] == 4
    assert json.dumps(out["formats"])  # JSON-serialisable for the manifest


def test_the_loader_refuses_a_version_without_mindrecord_in_one_line(tmp_path):
    from pipeline.loader import create_dataset

    vdir, out = _build(tmp_path, "nomr", _docs(30, seed=6), formats=["megatron"])
    (vdir / layout.MANIFEST).write_text(json.dumps({"version": "nomr", **out}))
    with pytest.raises(ValueError, match=r"built without the mindrecord format \(output.formats: \['megatron'\]\)"):
        create_dataset(vdir, global_batch=2)


def test_check_complete_names_a_missing_or_cut_format_file(three, tmp_path):
    from pipeline.build import _format_file_problems

    _, vdir, out = three
    assert _format_file_problems(vdir, out) == []
    copy = tmp_path / "cut"
    shutil.copytree(vdir, copy)
    (copy / layout.megatron_idx()).unlink()
    (copy / f"{layout.shifted_shard_name(1)}.db").unlink()
    with open(copy / layout.megatron_bin(), "r+b") as fh:
        fh.truncate(100)
    assert _format_file_problems(copy, out) == [
        f"{layout.shifted_shard_name(1)}.db is missing",
        f"{layout.megatron_bin()} has 100 bytes, the manifest says {out['formats']['megatron']['bin']['bytes']}",
        f"{layout.megatron_idx()} is missing"]


def test_the_drill_reads_the_rows_of_a_version_without_mindrecord_from_the_megatron_stream(tmp_path):
    """A version built with formats [megatron] only: the drill's sample rows
    (lineage --show-text, --summary, spike) come from the .bin and equal the
    rows a build with mindrecord shards holds (found by a fresh-user test:
    they failed with KeyError 'name')."""
    from pipeline.drill import read_sample_rows

    docs = _docs(60, seed=4)
    full, out_full = _build(tmp_path, "full", docs)
    meg, out_meg = _build(tmp_path, "meg", docs, formats=["megatron"])
    rows = _unshifted(full, out_full)
    wanted = [0, 5, 6, len(rows) - 1]
    got = read_sample_rows(meg, wanted, manifest=out_meg)
    assert sorted(got) == wanted
    for i in wanted:
        np.testing.assert_array_equal(got[i], rows[i])
