"""pipeline.mindformers: the YAML it prints, its checks, and each format read by
mindformers 1.8's own classes (IndexedDataset, GPTDataset as BlendedMegatronDatasetDataLoader
builds it, CausalLanguageModelDataset over MindDataset) in mindformers' venv.

The version is tests/pipeline/mindformers_fixture.py's (the layout of the three formats,
written with numpy and pipeline.writer). mindformers runs as a subprocess
(tests/pipeline/mindformers_probe.py) under ``$MINDCORPUS_MINDFORMERS_PYTHON``, else
``.venv-mindformers/bin/python`` (``make setup`` makes it); without one those tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline import gpt_order
from pipeline import mindformers as mf
from pipeline.config import REPO_ROOT

sys.path.insert(0, str(Path(__file__).parent))
from mindformers_fixture import EOS, make_version  # noqa: E402

GLOBAL_BATCH, DP_SIZE, SEQ_LENGTH, EOD_PAD_LENGTH = 4, 2, 16, 8


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    root = tmp_path_factory.mktemp("mf") / "v1"
    made = make_version(root, seq_length=SEQ_LENGTH, eod_pad_length=EOD_PAD_LENGTH)
    return root, made


def _copy(version, tmp_path):
    root, made = version
    copy = tmp_path / "v1"
    shutil.copytree(root, copy)
    return copy, json.loads((copy / "manifest.json").read_text())


def test_fixture_shape(version):
    _, made = version
    m = made["manifest"]
    # 60 documents, 1,326 tokens: 78 samples of 17 tokens (the tail dropped), 133 pieces
    assert (m["num_samples"], len(made["sequence_lengths"]), int(made["sequence_lengths"].sum())) == (78, 133, 1326)


def test_yaml_for_each_format(version):
    root, made = version
    m = made["manifest"]
    assert mf.version_formats(m) == ["mindrecord", "mindrecord_shifted", "megatron"]
    for fmt, loader, columns in (("mindrecord", "MindDataset", ["input_ids"]),
                                 ("mindrecord_shifted", "MindDataset", list(mf.SHIFTED_COLUMNS)),
                                 ("megatron", "BlendedMegatronDatasetDataLoader", list(mf.SHIFTED_COLUMNS))):
        text = mf.format_yaml(root, m, fmt, GLOBAL_BATCH, DP_SIZE)
        assert "rank r reads" in text and f"s*{GLOBAL_BATCH} + r + k*{DP_SIZE}" in text
        cfg = yaml.safe_load(text)
        train = cfg["train_dataset"]
        assert cfg["train_dataset_task"]["dataset_config"] is train  # the anchor resolves
        assert train["data_loader"]["type"] == loader
        assert train["input_columns"] == columns == train["construct_args_key"]
        assert cfg["parallel"]["dataset_strategy"] == [[DP_SIZE, 1]] * len(columns)
        assert train["batch_size"] == GLOBAL_BATCH // DP_SIZE and train["seed"] == 1234
        assert cfg["runner_config"]["batch_size"] == GLOBAL_BATCH // DP_SIZE
        assert cfg["parallel_config"]["data_parallel"] == DP_SIZE
        assert cfg["model"]["model_config"]["input_sliced_sig"] is (fmt != "mindrecord")
        if loader == "MindDataset":
            assert train["data_loader"] == {"type": "MindDataset", "shuffle": False,
                                            "dataset_dir": str(root.resolve() / mf.FORMAT_DIRS[fmt])}
    gpt = yaml.safe_load(mf.format_yaml(root, m, "megatron", GLOBAL_BATCH, DP_SIZE))["train_dataset"]["data_loader"]
    assert gpt["datasets_type"] == "GPTDataset"
    # one epoch: (1326 - 1) // 16 = 82 GPTDataset samples, 20 whole global batches of 4
    assert gpt["sizes"] == [80, 0, 0]
    c = gpt["config"]
    assert (c["seq_length"], c["eod"], c["pad"], c["eod_pad_length"], c["seed"], c["split"]) == (
        SEQ_LENGTH, 1, 0, EOD_PAD_LENGTH, 1234, "1, 0, 0")
    assert c["create_compressed_eod_mask"] is True and c["add_extra_token_to_sequence"] is True
    assert c["data_path"] == [str(root.resolve() / "megatron" / "corpus_text_document")]
    with pytest.raises(ValueError, match="global_batch"):
        mf.train_dataset_config(root, m, "megatron", 5, 2)


def test_lineage_rows_are_the_idx_sequences(version):
    root, made = version
    pieces = [p for row in made["pieces"] for p in row]
    rows = mf.lineage_rows(root, made["manifest"], [0, 49, 50, 132])
    assert [(r["doc_id"], r["doc_token_start"], r["doc_token_end"]) for r in rows] == [
        (f"doc{pieces[k][0]}", pieces[k][1], pieces[k][1] + pieces[k][2]) for k in (0, 49, 50, 132)]
    assert [r["sample_token_end"] - r["sample_token_start"] for r in rows] == [
        int(made["sequence_lengths"][k]) for k in (0, 49, 50, 132)]
    with pytest.raises(IndexError, match="outside"):
        mf.lineage_rows(root, made["manifest"], [133])


def test_check_passes_on_a_good_version(version):
    root, made = version
    assert mf.check_version(root, made["manifest"]) == []


def test_check_names_each_broken_rule(version, tmp_path):
    root, m = _copy(version, tmp_path)
    (root / "megatron/corpus_text_document.bin").write_bytes(
        (root / "megatron/corpus_text_document.bin").read_bytes()[:-2])
    idx = bytearray((root / "megatron/corpus_text_document.idx").read_bytes())
    m["columns"]["input_ids"] = [18]
    m["packing"]["boundaries_width"] = 9
    problems = mf.check_version(root, m)
    assert problems == [
        "mindrecord: manifest columns.input_ids is [18], want [17]",
        "megatron: .bin has 2650 bytes, sum of lengths x itemsize is 2652",
        "mindrecord_shifted: a sample has 9 segments, more than eod_pad_length 8",
    ]
    idx[17] = 7  # dtype code: float32
    (root / "megatron/corpus_text_document.idx").write_bytes(bytes(idx))
    assert "megatron: .idx dtype code 7; want 4 (int32) or 8 (uint16)" in mf.check_version(root, m)


def test_check_finds_windows_with_too_many_document_ends(version, tmp_path):
    root, m = _copy(version, tmp_path)
    idx = mf.read_idx(root / "megatron/corpus_text_document.idx")
    stream = np.fromfile(root / "megatron/corpus_text_document.bin", dtype=np.uint16)
    counts = mf.megatron_window_ends(idx, stream, EOS, 1234, SEQ_LENGTH, None)
    order = gpt_order.build_order(idx["sequence_lengths"], 1234, SEQ_LENGTH, None)
    # independent count: EOS among each window's first seq_length tokens, except the last one
    starts = np.concatenate([[0], np.cumsum(idx["sequence_lengths"])[:-1]])
    want = []
    for row in range(len(order)):
        sample = int(np.flatnonzero(order.shuffle_index == row)[0])
        tokens = order.tokens(sample, stream, starts)[:-1]
        want.append(int((tokens[:-1] == EOS).sum()))
    assert counts.tolist() == want and max(want) == 3
    bound = mf.megatron_window_ends(idx, None, EOS, 1234, SEQ_LENGTH, None)
    assert (bound >= counts).all() and bound.max() == 4  # sequence ends, EOD or not
    m["formats"]["mindrecord_shifted"]["eod_pad_length"] = 3
    assert ("megatron: a GPTDataset window holds 3 document ends; eod_pad_length 3 keeps 2 and drops the "
            "rest silently") in mf.check_version(root, m)


def test_check_mindrecord_name_pattern(version, tmp_path):
    root, m = _copy(version, tmp_path)
    m["formats"]["mindrecord_shifted"]["files"] = ["shifted/corpus-00000.mindrecord.bak"]
    problems = mf.check_version(root, m)
    assert problems[0].startswith("mindrecord_shifted: shifted/corpus-00000.mindrecord.bak: name does not "
                                  "match mindformers' pattern")


def test_cli_prints_yaml_and_checks(version, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    root, _ = version
    res = CliRunner().invoke(app, ["mindformers", str(root), "--global-batch", "4", "--dp-size", "2",
                                   "--format", "megatron"])
    assert res.exit_code == 0, res.output
    assert "type: BlendedMegatronDatasetDataLoader" in res.output and "MindDataset" not in res.output
    assert res.output.rstrip().endswith("ok: mindrecord, mindrecord_shifted, megatron follow mindformers 1.8's rules")
    res = CliRunner().invoke(app, ["mindformers", str(root), "--global-batch", "4", "--dp-size", "2",
                                   "--step", "3"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [x for x in lines if x.startswith("rank")] == [
        "rank 0 GPTDataset sample 12", "rank 0 GPTDataset sample 14",
        "rank 1 GPTDataset sample 13", "rank 1 GPTDataset sample 15"]
    assert lines[1].startswith("  window [0, ") and " doc" in lines[1]
    bad, m = _copy(version, tmp_path)
    (bad / "megatron/corpus_text_document.bin").write_bytes(b"")
    res = CliRunner().invoke(app, ["mindformers", str(bad), "--global-batch", "4"])
    assert res.exit_code == 1
    assert "BAD megatron: .bin has 0 bytes, sum of lengths x itemsize is 2652" in res.output


# ---- mindformers' own classes, in its venv ----------------------------------------

def _mindformers_python() -> str | None:
    python = os.environ.get("MINDCORPUS_MINDFORMERS_PYTHON") or str(REPO_ROOT / ".venv-mindformers/bin/python")
    return python if Path(python).exists() else None


def _helpers_dir(python: str, work: Path) -> str | None:
    """The GPTDataset C++ helpers: None when mindformers' package already has them
    (``make setup`` compiles them there), else compiled into ``work`` with the flags of
    mindformers' blended_datasets/Makefile (g++, pybind11 from its venv; offline)."""
    package = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('mindformers')"
                              ".submodule_search_locations[0])"], capture_output=True, text=True, check=True)
    src = Path(package.stdout.strip()) / "dataset" / "blended_datasets"
    if list(src.glob("helpers*.so")):
        return None
    if not shutil.which("g++"):
        pytest.skip("g++ not found: cannot compile mindformers' GPTDataset helpers (helpers.cpp)")
    includes = subprocess.run([python, "-m", "pybind11", "--includes"], capture_output=True, text=True,
                              check=True).stdout.split()
    suffix = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["g++", "-O3", "-Wall", "-shared", "-std=c++11", "-fPIC", *includes, str(src / "helpers.cpp"),
                    "-o", str(work / f"helpers{suffix}")], check=True, capture_output=True)
    return str(work)


@pytest.fixture(scope="module")
def probe(version, tmp_path_factory):
    python = _mindformers_python()
    if python is None:
        pytest.skip("no mindformers venv: set MINDCORPUS_MINDFORMERS_PYTHON or run `make setup` "
                    "(.venv-mindformers, mindformers 1.8.0)")
    root, made = version
    work = tmp_path_factory.mktemp("probe")
    cfg = {"version_dir": str(root), "helpers_dir": _helpers_dir(python, work / "helpers"), "batches": 3,
           # the blocks exactly as `python -m pipeline mindformers` prints them
           "train_dataset": {f: yaml.safe_load(mf.format_yaml(root, made["manifest"], f, GLOBAL_BATCH, DP_SIZE))[
               "train_dataset"] for f in mf.FORMATS}}
    (work / "probe.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    res = subprocess.run([python, str(Path(__file__).parent / "mindformers_probe.py"), str(work / "probe.json"),
                          str(work / "out")], cwd=work, capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = work / "out"
    found = {p.stem: (json.loads(p.read_text()) if p.suffix == ".json" else np.load(p)) for p in out.iterdir()}
    found["cache"] = work / cfg["train_dataset"]["megatron"]["data_loader"]["config"]["path_to_cache"]
    return found


def test_indexed_dataset_reads_the_mindrecord_windows_in_order(version, probe):
    root, made = version
    from mindspore.mindrecord import FileReader

    rows = []
    for shard in made["manifest"]["shards"]:
        reader = FileReader(str(root / shard["name"]), num_consumer=1)
        rows += [r["input_ids"] for r in reader.get_next()]
        reader.close()
    shards = np.stack(rows)
    np.testing.assert_array_equal(shards, made["samples"])
    assert str(probe["indexed_dtype"]) == "uint16"
    np.testing.assert_array_equal(probe["indexed_lengths"], made["sequence_lengths"])
    # the sequences, concatenated in order, are the MindRecord rows in order
    np.testing.assert_array_equal(probe["indexed_tokens"].reshape(shards.shape), shards)


def test_gpt_dataset_windows_equal_gpt_order(version, probe):
    _, made = version
    lengths = made["sequence_lengths"]
    order = gpt_order.build_order(lengths, seed=1234, seq_length=SEQ_LENGTH, num_samples=80)
    assert (order.num_epochs, len(order), probe["gpt_len"]) == (1, 82, 82)
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert probe[name].dtype == getattr(order, name).dtype
        np.testing.assert_array_equal(probe[name], getattr(order, name))
    stream = made["samples"].reshape(-1)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    windows = np.stack([order.tokens(i, stream, starts) for i in range(len(order))])
    np.testing.assert_array_equal(probe["gpt_text"], windows)
    np.testing.assert_array_equal(probe["gpt_input_ids"], windows[:, :-1])
    np.testing.assert_array_equal(probe["gpt_labels"], windows[:, 1:])
    np.testing.assert_array_equal(probe["loader_first_input_ids"], windows[0, :-1])
    # sequence k = lineage row k: each GPTDataset window is its documents' own tokens
    root = version[0]
    docs = made["documents"]
    for i in range(len(order)):
        spans = mf.gpt_sample_lineage(root, made["manifest"], order, i)
        assert [(r["window_token_start"], r["window_token_end"]) for r in spans][-1][1] == SEQ_LENGTH + 1
        text = np.concatenate([docs[int(r["doc_id"][3:])][r["doc_token_start"]:r["doc_token_end"]] for r in spans])
        np.testing.assert_array_equal(text, probe["gpt_text"][i])
    pieces = [p for row in made["pieces"] for p in row]
    # actual_seq_len: ends of documents whose last piece ends inside the model input
    for i in range(len(order)):
        ends, at = [], 0
        for s, o, n in order.pieces(i):
            at += n
            doc, doc_start, piece_len = pieces[s]
            if o + n == piece_len and doc_start + piece_len == len(docs[doc]) and at < SEQ_LENGTH:
                ends.append(at)
        want = (ends + [SEQ_LENGTH] * EOD_PAD_LENGTH)[:EOD_PAD_LENGTH]
        assert probe["gpt_actual_seq_len"][i].tolist() == want, i


def test_gpt_lineage_for_step_names_the_trained_windows(version, probe):
    root, made = version
    docs = made["documents"]
    # sizes [80, 0, 0], global batch 4 over 2 ranks: step 3 is GPTDataset samples 12..15,
    # rank 0 reads 12 and 14, rank 1 reads 13 and 15
    found = mf.gpt_lineage_for_step(root, made["manifest"], 3, GLOBAL_BATCH, DP_SIZE, path_to_cache=probe["cache"])
    assert [(r["dp_rank"], r["sample"]) for r in found] == [(0, 12), (0, 14), (1, 13), (1, 15)]
    for r in found:
        text = np.concatenate([docs[int(p["doc_id"][3:])][p["doc_token_start"]:p["doc_token_end"]]
                               for p in r["pieces"]])
        np.testing.assert_array_equal(text, probe["gpt_text"][r["sample"]])
    with pytest.raises(ValueError, match=r"step 20 outside \[0, 20\)"):
        mf.gpt_lineage_for_step(root, made["manifest"], 20, GLOBAL_BATCH, DP_SIZE)


def test_gpt_lineage_for_step_refuses_a_truncated_bin(version, tmp_path):
    root, made = version
    copy = tmp_path / "cut"
    shutil.copytree(root, copy)
    bin_path = copy / f"{mf.MEGATRON_PREFIX}.bin"
    size = bin_path.stat().st_size
    with open(bin_path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(ValueError, match=rf"megatron: .bin has {size // 2} bytes"):
        mf.gpt_lineage_for_step(copy, made["manifest"], 3, GLOBAL_BATCH, DP_SIZE)


def test_load_cached_order_reads_gpt_datasets_own_cache(version, probe):
    root, made = version
    data_path = str(root.resolve() / "megatron" / "corpus_text_document")
    lengths = made["sequence_lengths"]
    cached = gpt_order.load_cached_order(probe["cache"], data_path, lengths, 1234, SEQ_LENGTH, 80)
    built = gpt_order.build_order(lengths, 1234, SEQ_LENGTH, 80)
    assert cached is not None and cached.num_epochs == 1
    for name in ("document_index", "sample_index", "shuffle_index"):
        np.testing.assert_array_equal(getattr(cached, name), getattr(built, name))
    assert cached.pieces(5) == built.pieces(5)
    # another seed or size is another cache entry: none here
    assert gpt_order.load_cached_order(probe["cache"], data_path, lengths, 1, SEQ_LENGTH, 80) is None
    assert gpt_order.load_cached_order(probe["cache"], data_path, lengths, 1234, SEQ_LENGTH, 40) is None


def test_causal_language_model_dataset_reads_both_mindrecord_formats(version, probe):
    _, made = version
    samples = made["samples"]
    per_rank = GLOBAL_BATCH // DP_SIZE
    assert probe["mindrecord_columns"] == ["input_ids"]
    np.testing.assert_array_equal(probe["mindrecord_input_ids"], samples[:3 * per_rank].reshape(3, per_rank, -1))
    assert probe["mindrecord_shifted_columns"] == list(mf.SHIFTED_COLUMNS)
    first = samples[:3 * per_rank].reshape(3, per_rank, -1)
    np.testing.assert_array_equal(probe["mindrecord_shifted_input_ids"], first[..., :-1])
    np.testing.assert_array_equal(probe["mindrecord_shifted_labels"], first[..., 1:])
    assert probe["mindrecord_shifted_actual_seq_len"].shape == (3, per_rank, EOD_PAD_LENGTH)
    assert probe["mindrecord_shifted_position_ids"].shape == (3, per_rank, SEQ_LENGTH)
    for name in mf.SHIFTED_COLUMNS:
        assert probe[f"mindrecord_shifted_{name}"].dtype == np.int32
