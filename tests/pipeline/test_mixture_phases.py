"""A staged mixture (``mixture.phases``) built into one version and read back.

A main phase and an annealing phase with other weights, from small slices of
the bundled sample; the version is built twice (2 workers and 1) to check
that the schedule is deterministic. The loader (MindSpore) must switch phase
at the step the schedule names, by itself; lineage must be exact on both
sides of the switch.
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from sample_slices import write_slices
from tokenizers import Tokenizer

from pipeline.build import build
from pipeline.config import REPO_ROOT, ConfigError, load_config
from pipeline.order import Stream

SEQ = 128
WINDOW = SEQ + 1
GLOBAL_BATCH = 8
MAIN = {"web": 0.6, "manuals": 0.2, "reference": 0.2}
ANNEAL = {"web": 0.1, "manuals": 0.3, "reference": 0.6}


def _config(data, **output):
    return {
        "seed": 11,
        # ids relative to the data folder: the same seeded choices in every run, whatever the tmp path
        "sources": {"web": {"paths": ["web.jsonl"], "root": str(data)},
                    "manuals": {"paths": ["manuals.jsonl"], "root": str(data)},
                    "reference": {"paths": ["reference.parquet"], "root": str(data)}},
        "executor": {"num_workers": 2},
        "ingest": {"partition_max_docs": 60},
        "perplexity": {"enabled": False},
        "decontaminate": {"enabled": False},
        "tokenize": {"vocab_size": 2000},
        "mixture": {"phases": [
            {"name": "main", "token_budget": 40_000, "weights": MAIN},
            {"name": "anneal", "token_budget": 12_000, "weights": ANNEAL, "max_epochs": {"reference": 4}}]},
        # small order and shuffle buckets: several per phase, windows stitched across them
        "output": {"seq_length": SEQ, "max_shard_bytes": 64 * WINDOW * 4, "order_bucket_tokens": 6000,
                   "shuffle_bucket_samples": 32, **output},
    }


@pytest.fixture(scope="module")
def phased(tmp_path_factory):
    root = tmp_path_factory.mktemp("phased")
    data = root / "data"
    write_slices(data, reference=True)
    (root / "phased.yaml").write_text(yaml.safe_dump(_config(data)))
    corpora = root / "corpora"
    first = build("p1", root / "phased.yaml", corpora, log=lambda _: None)
    again = build("p2", root / "phased.yaml", corpora, num_workers=1, log=lambda _: None)
    return {"root": root, "data": data, "corpora": corpora, "result": first, "again": again}


def _all_rows(vdir, manifest):
    import mindspore.dataset as ds

    paths = [str(vdir / s["name"]) for s in manifest["shards"]]
    rows = [r["input_ids"] for r in ds.MindDataset(paths, columns_list=["input_ids"], shuffle=False)
            .create_dict_iterator(output_numpy=True, num_epochs=1)]
    return np.stack(rows)


def test_each_phase_is_packed_on_its_own_and_meets_its_targets(phased):
    m = phased["result"].manifest
    phases = m["phases"]
    assert [p["name"] for p in phases] == ["main", "anneal"]
    assert phases[0]["first_sample"] == 0 and phases[1]["first_sample"] == phases[0]["num_samples"]
    assert sum(p["num_samples"] for p in phases) == m["num_samples"]
    facts = {p["name"]: p for p in m["mixture"]["phases"]}
    for p in phases:
        # concat-split per phase: its own tail of less than one window is dropped
        assert p["num_samples"] == p["tokens_sampled"] // WINDOW
        assert p["tokens_dropped_tail"] == p["tokens_sampled"] % WINDOW
        assert p["tokens_sampled"] == facts[p["name"]]["realized_tokens"]
        # whole documents: a source lands within half of its shortest untaken document of its
        # target (man pages ~1-2k tokens, Debian Reference pages ~1-6k here)
        assert abs(p["tokens_sampled"] - p["token_budget"]) < 1_000
        weights = MAIN if p["name"] == "main" else ANNEAL
        for src, w in weights.items():
            assert facts[p["name"]]["per_source"][src]["target_share"] == pytest.approx(w)
            packed = p["packed_per_source"][src]
            assert abs(packed["share"] - w) < 0.03, (p["name"], src, packed)  # whole documents of <= ~2k tokens
            assert packed["share_error_pp"] == pytest.approx(100 * (packed["share"] - w))
    # the top level sums the phases
    assert m["mixture"]["realized_tokens"] == sum(p["tokens_sampled"] for p in phases)
    assert m["packing"]["tokens_sampled"] == m["mixture"]["realized_tokens"]


def test_same_schedule_with_one_worker_or_two(phased):
    a, b = phased["result"].manifest, phased["again"].manifest
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    assert a["phases"] == b["phases"]
    assert {k: v for k, v in a["files"].items() if k != "tokenizer_report.json"} == \
        {k: v for k, v in b["files"].items() if k != "tokenizer_report.json"}


def test_no_sample_holds_a_copy_of_another_phase(phased):
    vdir, m = phased["result"].version_dir, phased["result"].manifest
    docs = pq.read_table(vdir / "documents", columns=["id", "mixture_repeats", "mixture_phase_repeats"]).to_pylist()
    per_phase = {d["id"]: d["mixture_phase_repeats"] for d in docs}
    assert all(sum(d["mixture_phase_repeats"]) == d["mixture_repeats"] for d in docs)
    # some documents have copies in both phases (the phases draw independently)
    assert sum(1 for r in per_phase.values() if r[0] and r[1]) > 10
    boundary = m["phases"][1]["first_sample"]
    lineage = pq.read_table(vdir / "lineage", columns=["sample_index", "doc_id", "repeat"]).to_pylist()
    assert lineage
    for row in lineage:
        main_copies = per_phase[row["doc_id"]][0]
        # copies are numbered across phases: 0 .. main-1 in main, then anneal's
        assert (row["repeat"] < main_copies) == (row["sample_index"] < boundary), row


def test_loader_switches_phase_at_the_schedule_step(phased):
    from pipeline.loader import create_dataset

    vdir, m = phased["result"].version_dir, phased["result"].manifest
    rows = _all_rows(vdir, m)
    stream = Stream.of(m, GLOBAL_BATCH)
    main, anneal = stream.schedule()
    switch = m["phases"][0]["num_samples"] // GLOBAL_BATCH
    assert anneal["first_step"] == switch == main["steps"]
    assert main["unread_samples"] == m["phases"][0]["num_samples"] % GLOBAL_BATCH
    for dp_size in (1, 2):
        per_rank = []
        for rank in range(dp_size):
            ds = create_dataset(vdir, GLOBAL_BATCH, dp_rank=rank, dp_size=dp_size)
            per_rank.append([b["input_ids"] for b in ds.create_dict_iterator(output_numpy=True, num_epochs=1)])
        assert len(per_rank[0]) == stream.num_steps() == main["steps"] + anneal["steps"]
        for step in range(stream.num_steps()):
            want = stream.samples(np.arange(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH))
            in_anneal = want >= m["phases"][1]["first_sample"]
            assert in_anneal.all() if step >= switch else not in_anneal.any(), step
            for rank in range(dp_size):
                assert np.array_equal(per_rank[rank][step], rows[want[rank::dp_size]]), (dp_size, step, rank)


def test_tokens_read_before_and_after_the_switch_follow_each_phase_mixture(phased):
    vdir, m = phased["result"].version_dir, phased["result"].manifest
    stream = Stream.of(m, GLOBAL_BATCH)
    seg = pq.read_table(vdir / "lineage", columns=["sample_index", "source", "sample_token_start",
                                                   "sample_token_end"]).to_pandas()
    seg["tokens"] = seg["sample_token_end"] - seg["sample_token_start"]
    read = set(stream.samples(np.arange(stream.num_steps() * GLOBAL_BATCH)).tolist())
    for k, (phase, weights) in enumerate(zip(m["phases"], (MAIN, ANNEAL))):
        lo, hi = phase["first_sample"], phase["first_sample"] + phase["num_samples"]
        of_phase = seg[(seg.sample_index >= lo) & (seg.sample_index < hi)]
        by_source = of_phase.groupby("source")["tokens"].sum().to_dict()
        assert by_source == {s: v["tokens"] for s, v in phase["packed_per_source"].items() if v["tokens"]}
        trained = of_phase[of_phase.sample_index.isin(read)].groupby("source")["tokens"].sum()
        shares = (trained / trained.sum()).to_dict()
        for src, w in weights.items():
            assert abs(shares[src] - w) < 0.04, (phase["name"], src, shares)


@pytest.mark.parametrize("dp_size", [1, 2])
def test_lineage_step_is_exact_on_both_sides_of_the_switch(phased, dp_size):
    from pipeline.lineage import format_lineage, lineage_for_step
    from pipeline.loader import create_dataset

    vdir, m = phased["result"].version_dir, phased["result"].manifest
    tok = Tokenizer.from_file(str(vdir / "tokenizer.json"))
    eos = m["tokenizer"]["special_token_ids"]["eos"]
    texts = {d["id"]: d["text"] for d in pq.read_table(vdir / "documents", columns=["id", "text"]).to_pylist()}
    switch = Stream.of(m, GLOBAL_BATCH).schedule()[1]["first_step"]
    batches = [[b["input_ids"] for b in create_dataset(vdir, GLOBAL_BATCH, dp_rank=r, dp_size=dp_size)
                .create_dict_iterator(output_numpy=True, num_epochs=1)] for r in range(dp_size)]
    for step, phase in ((switch - 1, "main"), (switch, "anneal")):
        records = lineage_for_step(vdir, step, GLOBAL_BATCH, dp_size=dp_size, text_chars=0)
        assert len(records) == GLOBAL_BATCH and {r["phase"] for r in records} == {phase}
        for rec in records:
            row = batches[rec["dp_rank"]][step][rec["row"]]
            covered = 0
            for s in rec["segments"]:
                ids = tok.encode(texts[s["doc_id"]], add_special_tokens=False).ids + [eos]
                assert row[s["sample_token_start"]:s["sample_token_end"]].tolist() == \
                    ids[s["doc_token_start"]:s["doc_token_end"]]
                covered += s["sample_token_end"] - s["sample_token_start"]
            assert covered == WINDOW
        assert f"step {step} (mixture phase {phase}): {GLOBAL_BATCH} samples" in format_lineage(records)
        # the step summary measures the step against its own phase's targets
        from pipeline.drill import step_summaries

        summary = step_summaries(vdir, records)[0]
        assert summary["phase"] == phase
        assert summary["target"] == pytest.approx(MAIN if phase == "main" else ANNEAL)


def test_cli_lineage_step_and_doc_name_the_phase(phased):
    from typer.testing import CliRunner

    from pipeline.cli import app

    vdir, m = phased["result"].version_dir, phased["result"].manifest
    switch = Stream.of(m, GLOBAL_BATCH).schedule()[1]["first_step"]
    runner = CliRunner()
    out = runner.invoke(app, ["lineage", "p1", "--step", str(switch), "--global-batch", str(GLOBAL_BATCH),
                              "--corpora-root", str(phased["corpora"])])
    assert out.exit_code == 0, out.output
    assert f"step {switch} (mixture phase anneal)" in out.output
    seg = pq.read_table(vdir / "lineage", columns=["sample_index", "doc_id"]).to_pylist()
    doc = next(s["doc_id"] for s in seg if s["sample_index"] >= m["phases"][1]["first_sample"])
    out = runner.invoke(app, ["lineage", "p1", "--doc", doc, "--global-batch", str(GLOBAL_BATCH),
                              "--corpora-root", str(phased["corpora"]), "--json"])
    assert out.exit_code == 0, out.output
    pieces = json.loads(out.output)["pieces"]
    assert {p["phase"] for p in pieces if p["sample_index"] >= m["phases"][1]["first_sample"]} == {"anneal"}


def test_resume_inside_the_anneal_phase_equals_the_uninterrupted_run(phased):
    from pipeline.loader import create_dataset

    vdir, m = phased["result"].version_dir, phased["result"].manifest
    switch = Stream.of(m, GLOBAL_BATCH).schedule()[1]["first_step"]
    full = [b["input_ids"] for b in create_dataset(vdir, GLOBAL_BATCH, dp_rank=1, dp_size=2)
            .create_dict_iterator(output_numpy=True, num_epochs=1)]
    for start in (switch - 1, switch + 1):
        resumed = [b["input_ids"] for b in create_dataset(vdir, GLOBAL_BATCH, dp_rank=1, dp_size=2, start_step=start)
                   .create_dict_iterator(output_numpy=True, num_epochs=1)]
        assert len(resumed) == len(full) - start
        assert all(np.array_equal(a, b) for a, b in zip(resumed, full[start:]))


def test_a_phase_smaller_than_the_global_batch_is_refused(phased):
    from pipeline.lineage import lineage_for_step
    from pipeline.loader import create_dataset

    vdir, m = phased["result"].version_dir, phased["result"].manifest
    big = m["phases"][1]["num_samples"] + 1
    with pytest.raises(ValueError, match="mixture phase\\(s\\) anneal .* hold no complete global batch"):
        create_dataset(vdir, big)
    with pytest.raises(ValueError, match="anneal"):
        lineage_for_step(vdir, 0, big)


@pytest.mark.parametrize("mixture, output, message", [
    ({"token_budget": 1000, "phases": [{"name": "a", "token_budget": 5000}]}, {},
     "mixture: give token_budget per phase in mixture.phases"),
    ({"phases": [{"name": "a", "token_budget": 5000}, {"name": "a", "token_budget": 5000}]}, {},
     "phase names must be unique"),
    ({"phases": [{"name": "a", "token_budget": 100}]}, {},
     "mixture.phases.0.token_budget: 100 tokens, fewer than a sample"),
    ({"phases": [{"name": "a", "token_budget": 5000, "weights": {"web": 1, "books": 1}}]}, {},
     "mixture.phases.0.weights.books: not a configured source"),
    ({"phases": [{"name": "a", "token_budget": 5000, "weights": {"web": 1}}]}, {},
     "mixture.phases.0.weights: no weight for source(s) manuals, reference"),
    ({"phases": [{"name": "a", "token_budget": 5000}]}, {"formats": ["mindrecord", "megatron"]},
     "output.formats: megatron cannot carry mixture.phases"),
    ({"phases": [{"name": "a b", "token_budget": 5000}]}, {}, "mixture.phases.0.name"),
    ({"token_budget": 5000, "weights": {"web": 1, "manuals": 1, "reference": 1}, "align_samples": 8}, {},
     "align_samples applies to mixture.phases only"),
    ({"phases": [{"name": "a", "token_budget": 5000}], "align_samples": 8}, {"packing": "best_fit"},
     "mixture.align_samples: needs output.packing: concat_split"),
])
def test_schedule_mistakes_are_config_errors(phased, tmp_path, mixture, output, message):
    cfg = _config(phased["data"], **output)
    cfg["mixture"] = mixture
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=message.replace("(", "\\(").replace(")", "\\)")):
        load_config(path)


def test_report_shows_realized_against_target_per_phase(phased):
    html = (phased["result"].version_dir / "report.html").read_text(encoding="utf-8")
    assert "Mixture phases" in html
    for phase in phased["result"].manifest["phases"]:
        assert f'<td class="l">{phase["name"]}</td>' in html


@pytest.fixture(scope="module")
def aligned(phased):
    """The same schedule with mixture.align_samples 16 and the pre-shifted format."""
    cfg = _config(phased["data"], formats=["mindrecord", "mindrecord_shifted"])
    cfg["mixture"]["align_samples"] = 16
    path = phased["root"] / "aligned.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return build("a1", path, phased["corpora"], log=lambda _: None)


def test_align_samples_cuts_each_phase_to_whole_steps(phased, aligned):
    m, plain = aligned.manifest, phased["result"].manifest
    for p, q in zip(m["phases"], plain["phases"]):
        assert p["num_samples"] == q["num_samples"] // 16 * 16 and p["num_samples"] % 16 == 0
        assert p["samples_cut"] == q["num_samples"] - p["num_samples"] > 0
        # the cut samples are counted with the phase's packing tail, never silently lost
        assert p["tokens_dropped_tail"] == p["tokens_sampled"] - p["num_samples"] * WINDOW
        # and they are a random sample of the phase's samples (shuffle order), not the end of
        # its document order (which holds no late copy of an up-sampled document): the mix holds
        weights = MAIN if p["name"] == "main" else ANNEAL
        for src, w in weights.items():
            assert abs(p["packed_per_source"][src]["share"] - w) < 0.06, (p["name"], src, p["packed_per_source"])
    assert m["packing"]["tokens_dropped_tail"] == sum(p["tokens_dropped_tail"] for p in m["phases"])
    assert all(s["unread_samples"] == 0 for s in Stream.of(m, 16).schedule())


def test_mindformers_yaml_warns_about_a_step_that_mixes_phases(phased, aligned):
    from pipeline import mindformers as mf

    plain = phased["result"].manifest
    first = plain["phases"][1]["first_sample"]
    text = mf.format_yaml(phased["result"].version_dir, plain, "mindrecord", 16)
    if first % 16:
        assert f"# WARNING: mixture phase anneal starts at row {first}, inside step {first // 16} at global batch " \
               f"16: read in order, step {first // 16} mixes {first % 16} rows of the previous phase" in text
        assert len(mf.phase_problems(plain, 16)) == 1
    text = mf.format_yaml(aligned.version_dir, aligned.manifest, "mindrecord_shifted", 16)
    start = aligned.manifest["phases"][1]["first_sample"]
    assert f"# Mixture phase anneal: rows {start}..{aligned.manifest['num_samples'] - 1} (inclusive), from step " \
           f"{start // 16} at global batch 16." in text and "WARNING" not in text
    assert mf.phase_problems(aligned.manifest, 16) == []
    big = aligned.manifest["phases"][1]["num_samples"] + 16
    assert "fewer than one global batch" in mf.phase_problems(aligned.manifest, big)[0]


def test_mindformers_reads_the_aligned_phases_step_by_step(aligned, tmp_path):
    """mindformers 1.8's CausalLanguageModelDataset over the printed block reads
    the rows in order: the step at the switch is wholly the anneal phase."""
    import os
    import shutil
    import subprocess

    from pipeline import mindformers as mf

    python = os.environ.get("MINDCORPUS_MINDFORMERS_PYTHON") or str(REPO_ROOT / ".venv-mindformers" / "bin" / "python")
    if not shutil.which(python):
        pytest.skip("no mindformers venv: set MINDCORPUS_MINDFORMERS_PYTHON or run `make setup`")
    vdir, m = aligned.version_dir, aligned.manifest
    steps = m["num_samples"] // 16
    block = yaml.safe_load(mf.format_yaml(vdir, m, "mindrecord_shifted", 16))["train_dataset"]
    (tmp_path / "probe.json").write_text(json.dumps({"version_dir": str(vdir), "helpers_dir": None,
                                                     "batches": steps,
                                                     "train_dataset": {"mindrecord_shifted": block}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    probe = REPO_ROOT / "tests" / "pipeline" / "mindformers_probe.py"
    res = subprocess.run([python, str(probe), str(tmp_path / "probe.json"), str(tmp_path / "out")], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(tmp_path / "out" / "mindrecord_shifted_input_ids.npy")
    rows = _all_rows(vdir, m)
    assert got.shape == (steps, 16, SEQ)
    np.testing.assert_array_equal(got, rows[:steps * 16, :-1].reshape(steps, 16, SEQ))
    switch = m["phases"][1]["first_sample"] // 16
    from pipeline.lineage import lineage_for_step

    for step, phase in ((switch - 1, "main"), (switch, "anneal")):
        assert {r["phase"] for r in lineage_for_step(vdir, step, 16, text_chars=0)} == {phase}


def test_best_fit_packs_each_phase_on_its_own(phased):
    cfg = _config(phased["data"], packing="best_fit")
    path = phased["root"] / "best_fit.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = build("b1", path, phased["corpora"], log=lambda _: None)
    m, vdir = result.manifest, result.version_dir
    phases = m["phases"]
    assert phases[1]["first_sample"] == phases[0]["num_samples"] and sum(p["num_samples"] for p in phases) == \
        m["num_samples"]
    for p in phases:
        # best fit drops nothing: every sampled token is packed, the rest of the rows is padding
        assert p["tokens_dropped_tail"] == 0 and p["tokens_packed"] == p["tokens_sampled"]
        assert p["padding_tokens"] == p["num_samples"] * WINDOW - p["tokens_sampled"]
    per_phase = {d["id"]: d["mixture_phase_repeats"]
                 for d in pq.read_table(vdir / "documents", columns=["id", "mixture_phase_repeats"]).to_pylist()}
    for row in pq.read_table(vdir / "lineage", columns=["sample_index", "doc_id", "repeat"]).to_pylist():
        assert (row["repeat"] < per_phase[row["doc_id"]][0]) == (row["sample_index"] < phases[1]["first_sample"])


def test_a_one_phase_config_resolves_as_before_phases_existed(phased, tmp_path):
    from pipeline.config import config_dict

    cfg = _config(phased["data"])
    phased_cfg = config_dict(load_config(phased["root"] / "phased.yaml"))
    assert [p["name"] for p in phased_cfg["mixture"]["phases"]] == ["main", "anneal"]
    cfg["mixture"] = {"token_budget": 40_000, "weights": MAIN}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(cfg))
    one = config_dict(load_config(tmp_path / "one.yaml"))["mixture"]
    assert one == {"token_budget": 40_000, "weights": MAIN, "max_epochs": {}}


def test_explain_gives_the_copies_per_phase(phased):
    from pipeline.explain import explain_document

    vdir = phased["result"].version_dir
    docs = pq.read_table(vdir / "documents", columns=["id", "mixture_phase_repeats"]).to_pylist()
    doc = next(d for d in docs if d["mixture_phase_repeats"][0] and d["mixture_phase_repeats"][1])
    checks = next(s for s in explain_document(vdir, doc["id"])["stages"] if s["stage"] == "mixture")["checks"]
    notes = {c["name"]: c["note"] for c in checks if c["name"].startswith("mixture_source_ratio")}
    assert list(notes) == ["mixture_source_ratio[main]", "mixture_source_ratio[anneal]"]
    for name, n in zip(notes, doc["mixture_phase_repeats"]):
        assert notes[name].endswith(f"this document: {n} cop{'y' if n == 1 else 'ies'}")
