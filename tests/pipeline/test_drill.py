"""The loss-spike drill (pipeline/drill.py, explain.py, spike.py) on a real
built version: the trained text of a piece is the shard's tokens decoded
with the version's tokenizer, ``explain`` names the rule, value and threshold
of a drop, the step summary and the spike finder give known values."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from tokenizers import Tokenizer
from typer.testing import CliRunner

from pipeline.build import build
from pipeline.cli import app
from pipeline.config import REPO_ROOT
from pipeline.drill import (FLAG_LONGEST_RUN, attach_text, longest_run, read_sample_rows, step_summaries)
from pipeline.explain import UnknownDocumentError, explain_document, why_line
from pipeline.lineage import lineage_for_document, lineage_for_step
from pipeline.loader import create_dataset
from pipeline.spike import find_spikes, read_log, spike_report

SAMPLE = REPO_ROOT / "data" / "sample"
SEQ = 128
# Four words, 53 characters, plain English: min_chars (20) passes, min_words (5) fails.
SHORT = "Absolutely unbelievable, extraordinary circumstances."


def _lines(path, n, step=1):
    with open(path, "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    return lines[::step][:n]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A version built by ``pipeline.build`` from slices of the sample (the
    end-to-end test's recipe, smaller), with one planted 4-word fortune."""
    root = tmp_path_factory.mktemp("drill")
    data = root / "data"
    data.mkdir()
    web = _lines(SAMPLE / "web-fortunes.jsonl.zst", 200, step=15)
    web.append(json.dumps({"text": SHORT}) + "\n")
    (data / "web.jsonl").write_text("".join(web), encoding="utf-8")
    (data / "manuals.jsonl").write_text("".join(_lines(SAMPLE / "manuals-manpages.jsonl.zst", 10, step=30)),
                                        encoding="utf-8")
    (data / "code.jsonl").write_text("".join(_lines(SAMPLE / "code-cpython.jsonl.zst", 4)), encoding="utf-8")
    pq.write_table(pq.read_table(SAMPLE / "reference-debref.parquet").slice(0, 45), data / "reference.parquet")
    cfg = {
        "seed": 5,
        "sources": {"web": {"paths": [str(data / "web.jsonl")]},
                    "manuals": {"paths": [str(data / "manuals.jsonl")]},
                    "reference": {"paths": [str(data / "reference.parquet")]},
                    "code": {"paths": [str(data / "code.jsonl")], "lang": "code"}},
        "executor": {"num_workers": 1},
        "perplexity": {"reference_source": "reference"},
        "tokenize": {"vocab_size": 2000},
        "output": {"seq_length": SEQ, "max_shard_bytes": 64 * (SEQ + 1) * 4},
    }
    (root / "drill.yaml").write_text(yaml.safe_dump(cfg))
    result = build("d1", root / "drill.yaml", root / "corpora", log=lambda _: None)
    planted = f"web:{data / 'web.jsonl'}:{len(web)}"
    return {"vdir": result.version_dir, "manifest": result.manifest, "planted": planted, "root": root}


def _documents(vdir):
    return {r["id"]: r for r in pq.read_table(vdir / "documents").to_pylist()}


# ---------------------------------------------------------------- --show-text, --full


def test_show_text_is_the_decoded_tokens_the_loader_yields(built):
    vdir, manifest = built["vdir"], built["manifest"]
    assert len(manifest["shards"]) >= 2          # a step past the first shard reads another file
    tokenizer = Tokenizer.from_file(str(vdir / "tokenizer.json"))
    eos = manifest["tokenizer"]["special_token_ids"]["eos"]
    docs = _documents(vdir)
    global_batch, step = 4, manifest["num_samples"] // 4 - 1   # the last step: in the last shard
    records = lineage_for_step(vdir, step, global_batch, text_chars=0)
    attach_text(vdir, records, full=True)
    # the rows the training loader yields for that step (independent read path)
    batch = next(create_dataset(vdir, global_batch, start_step=step).create_dict_iterator(output_numpy=True))
    checked = 0
    for row, record in enumerate(records):
        for seg in record["segments"]:
            trained = batch["input_ids"][row][seg["sample_token_start"]:seg["sample_token_end"]]
            assert seg["token_ids"] == trained.tolist()
            assert seg["text"] == tokenizer.decode(trained.tolist(), skip_special_tokens=False)
            text = docs[seg["doc_id"]]["text"]
            assert seg["document_text"] == text
            if "<|" not in text:        # literal special-token strings are text to the pipeline, not to encode()
                ids = tokenizer.encode(text, add_special_tokens=False).ids + [eos]
                assert ids[seg["doc_token_start"]:seg["doc_token_end"]] == seg["token_ids"]
                checked += 1
    assert checked >= 4


def test_cli_show_text_prints_the_piece_and_full_the_document(built):
    vdir = built["vdir"]
    records = lineage_for_step(vdir, 1, 4, text_chars=0)
    attach_text(vdir, records)
    res = CliRunner().invoke(app, ["lineage", str(vdir), "--step", "1", "--global-batch", "4", "--show-text"])
    assert res.exit_code == 0, res.output
    middle = next(s for r in records for s in r["segments"] if len(s["text"].strip()) > 20)
    assert middle["text"].strip()[:200] in res.output
    assert "whole document" not in res.output
    # each piece says why its document was kept: the same checks explain gives
    assert middle["why"] == why_line(explain_document(vdir, middle["doc_id"])) and middle["why"] in res.output
    assert middle["why"].startswith("kept: langid_score ")
    res = CliRunner().invoke(app, ["lineage", str(vdir), "--step", "1", "--global-batch", "4", "--show-text",
                                   "--full"])
    assert res.exit_code == 0 and f"── whole document {middle['doc_id']}" in res.output
    res = CliRunner().invoke(app, ["lineage", str(vdir), "--step", "1", "--global-batch", "4", "--full"])
    assert res.exit_code == 2 and "--full goes with --show-text" in res.output


def test_doc_show_text_decodes_every_piece(built):
    vdir = built["vdir"]
    seg = lineage_for_step(vdir, 0, 4, text_chars=0)[0]["segments"][0]
    result = lineage_for_document(vdir, seg["doc_id"], 4, text_chars=0)
    rows = read_sample_rows(vdir, [p["sample_index"] for p in result["pieces"]])
    attach_text(vdir, result)
    for piece in result["pieces"]:
        assert piece["token_ids"] == rows[piece["sample_index"]][
            piece["sample_token_start"]:piece["sample_token_end"]].tolist()


# ---------------------------------------------------------------- explain


def test_explain_names_the_min_words_rule_value_and_threshold(built):
    vdir, planted = built["vdir"], built["planted"]
    result = explain_document(vdir, planted)
    assert not result["kept"] and result["dropped_by"] == "heuristics"
    assert result["reason"] == "heuristics.min_words" and result["lang"] == "en"
    limit = built["manifest"]["stages"]["heuristics"]["settings"]["thresholds"]["en"]["min_words"]
    assert result["failing"]["name"] == "min_words"
    assert (result["failing"]["value"], result["failing"]["limit"], result["failing"]["margin"]) == (4, limit,
                                                                                                    4 - limit)
    order = built["manifest"]["stage_order"]
    assert order[:2] == ["langid", "heuristics"] and "pii" in order      # pii runs by default
    assert [s["ran"] for s in result["stages"]] == [True, True] + [False] * (len(order) - 2)
    res = CliRunner().invoke(app, ["explain", str(vdir), planted])
    assert res.exit_code == 0, res.output
    assert f"DROPPED by heuristics: heuristics.min_words (value 4, threshold min {limit}, margin {4 - limit})" \
        in res.output


def test_explain_a_kept_document_lists_every_stage_with_margins(built):
    vdir, manifest = built["vdir"], built["manifest"]
    docs = _documents(vdir)
    languages = manifest["stages"]["perplexity"]["fit"]["languages"]
    doc_id = next(i for i, d in sorted(docs.items()) if d["langid_lang"] == "en" and "en" in languages
                  and d["perplexity_value"] is not None)
    row = docs[doc_id]
    result = explain_document(vdir, doc_id)
    assert result["kept"] and result["reason"] is None
    by_stage = {s["stage"]: {c["name"]: c for c in s["checks"]} for s in result["stages"]}
    assert {"langid", "heuristics", "perplexity", "dedup"} <= set(by_stage)
    score = by_stage["langid"]["langid_score"]
    assert score["margin"] == pytest.approx(row["langid_score"] - 0.5) and score["passes"]
    words = by_stage["heuristics"]["min_words"]
    assert words["value"] == row["heuristics_num_words"] and words["margin"] == row["heuristics_num_words"] - 5
    ppl = by_stage["perplexity"]["perplexity_value"]
    assert ppl["limit"] == languages["en"]["threshold"]
    assert ppl["margin"] == pytest.approx(languages["en"]["threshold"] - row["perplexity_value"])
    assert "dedup_cluster" in by_stage["dedup"]
    # every heuristics check that applied passes
    assert all(c["passes"] for c in by_stage["heuristics"].values())


def test_explain_unknown_id(built):
    with pytest.raises(UnknownDocumentError):
        explain_document(built["vdir"], "web:nowhere.jsonl:1")
    res = CliRunner().invoke(app, ["explain", str(built["vdir"]), "web:nowhere.jsonl:1"])
    assert res.exit_code == 1 and "is in no table" in res.output


# ---------------------------------------------------------------- --summary


def test_step_summary_matches_the_lineage_rows(built):
    vdir, manifest = built["vdir"], built["manifest"]
    records = lineage_for_step(vdir, 2, 4, text_chars=0)
    (summary,) = step_summaries(vdir, records)
    table = pq.read_table(vdir / "lineage")
    table = table.filter(pc.and_(pc.greater_equal(table["sample_index"], 8), pc.less(table["sample_index"], 12)))
    tokens: dict[str, int] = {}
    for r in table.to_pylist():
        tokens[r["source"]] = tokens.get(r["source"], 0) + r["sample_token_end"] - r["sample_token_start"]
    assert summary["tokens"] == sum(tokens.values()) == 4 * (SEQ + 1)
    assert summary["source"] == pytest.approx({s: n / sum(tokens.values()) for s, n in tokens.items()})
    assert summary["target"] == {s: m["target_share"] for s, m in manifest["mixture"]["per_source"].items()}
    assert math.isclose(sum(summary["language"].values()), 1.0)
    rows = read_sample_rows(vdir, range(8, 12))
    assert [d["longest_run"] for d in summary["samples_detail"]] == [longest_run(rows[i])[0] for i in range(8, 12)]
    res = CliRunner().invoke(app, ["lineage", str(vdir), "--step", "2", "--global-batch", "4", "--summary"])
    assert res.exit_code == 0 and "step 2: 4 samples, 516 trained tokens" in res.output


def test_longest_run_and_flags_on_planted_rows(built):
    vdir = built["vdir"]
    assert longest_run(np.array([5, 5, 1, 7, 7, 7, 2])) == (3, 7)
    records = lineage_for_step(vdir, 0, 4, text_chars=0)
    rows = read_sample_rows(vdir, range(4))
    row = rows[1].copy()
    row[10:10 + 60] = 77                     # the odd sample: a 60-token run of one id
    rows[1] = row
    rows[2] = np.resize(np.array([3, 4, 5], np.int32), SEQ + 1)   # 3 distinct ids of 129
    flags = step_summaries(vdir, records, rows)[0]["flags"]
    run = [f for f in flags if f["flag"] == "longest_run"]
    assert [(f["sample_index"], f["value"], f["token_id"]) for f in run] == [(1, 60, 77)]
    assert run[0]["limit"] == FLAG_LONGEST_RUN and run[0]["doc_id"] is not None
    unique = [f for f in flags if f["flag"] == "unique_share"]
    assert [(f["sample_index"], f["value"]) for f in unique] == [(2, pytest.approx(3 / (SEQ + 1)))]


# ---------------------------------------------------------------- spike


def _mindformers_line(epoch, epochs, step, steps, loss, norm):
    return (f"2026-12-03 10:00:00,000 - mindformers[mindformers/core/callback/callback.py:616] - INFO - "
            f"{{ Epoch:[{epoch:3d}/{epochs:3d}], step:[{step:5d}/{steps:5d}], loss: {loss:5.6f}, "
            f"per_step_time: 912ms, lr: 0.0001, overflow cond: False, loss_scale: 1.0, global_norm: [{norm}], "
            f"train_throughput_per_npu: 1.000T\n"
            f"2026-12-03 10:00:00,000 - mindformers[mindformers/core/callback/callback.py:636] - INFO -   "
            f"{100 * step / steps:4.1f}% |██        | 3.12345 samples/s/p  0:01:00 }}\n")


def _losses(n, spikes):
    """Loss 3.0 with a small deterministic wobble; the 0-based ``spikes`` +1.5."""
    return [3.0 + 0.01 * math.sin(i) + (1.5 if i in spikes else 0.0) for i in range(n)]


def test_mindformers_steps_are_one_based(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(_mindformers_line(1, 2, 1, 30, 3.5, 1.2) + _mindformers_line(1, 2, 30, 30, 3.1, 0.9)
                   + _mindformers_line(2, 2, 1, 30, 3.0, 0.8)
                   + "... loss:[2.900000/3.000000], not a mindformers line\n")
    entries = read_log(log)
    assert [(e["step"], e["loss"], e["grad_norm"]) for e in entries] == [(0, 3.5, 1.2), (29, 3.1, 0.9),
                                                                        (30, 3.0, 0.8)]
    # not sink mode: "loss:[step loss/running mean]"
    log.write_text(_mindformers_line(1, 1, 7, 30, 0, 1).replace("loss: 0.000000", "loss:[4.250000/3.900000]"))
    assert [(e["step"], e["loss"]) for e in read_log(log)] == [(6, 4.25)]
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text('{"step": 6, "loss": 4.25, "grad_norm": 2.0}\n')
    assert [(e["step"], e["grad_norm"]) for e in read_log(jsonl)] == [(6, 2.0)]
    assert [e["step"] for e in read_log(jsonl, step_base=1)] == [5]


def test_find_spikes_finds_the_planted_steps(tmp_path):
    spikes = {20, 33}
    entries = [{"step": i, "loss": v, "grad_norm": 1.0} for i, v in enumerate(_losses(60, spikes))]
    assert [s["step"] for s in find_spikes(entries, window=10)] == [20, 33]
    assert find_spikes(entries, window=10, metric="grad_norm") == []      # flat: the MAD floor holds
    with pytest.raises(ValueError):
        find_spikes(entries, window=3)
    # a NaN or infinite loss is always a spike, whatever the window holds
    entries[40]["loss"], entries[45]["loss"] = float("nan"), float("inf")
    found = find_spikes(entries, window=10)
    assert [s["step"] for s in found] == [20, 33, 40, 45]
    assert [s.get("non_finite", False) for s in found] == [False, False, True, True]


def test_spike_report_on_a_built_version(built, tmp_path):
    vdir, manifest = built["vdir"], built["manifest"]
    steps = manifest["num_samples"] // 2
    assert steps > 40
    spikes = {20, 33}
    log = tmp_path / "train.log"
    log.write_text("".join(_mindformers_line(1, 1, i + 1, 40, v, 1.0) for i, v in enumerate(_losses(40, spikes))))
    report = spike_report(vdir, log, window=10, global_batch=2)
    assert [s["step"] for s in report["spikes"]] == [20, 33]
    first = report["spikes"][0]
    assert first["baseline_steps"] == [16, 17, 18, 19]
    direct = step_summaries(vdir, lineage_for_step(vdir, 20, 2, text_chars=0))[0]
    assert first["summary"]["source"] == direct["source"] and first["summary"]["step"] == 20
    assert first["baseline"]["step"] == [16, 17, 18, 19] and first["baseline"]["samples"] == 8
    res = CliRunner().invoke(app, ["spike", str(vdir), "--log", str(log), "--window", "10", "--global-batch", "2"])
    assert res.exit_code == 0, res.output
    assert "2 spike(s) of loss" in res.output and "step 20: loss 4.5091 > limit" in res.output
    assert "baseline [16, 17, 18, 19]" in res.output
