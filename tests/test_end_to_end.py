"""End to end: build a tiny corpus from real text, read it back through MindSpore.

The newcomer's first test. It builds one version from small slices of the
bundled sample (real zh/en/de/ru/es/ja text, a Parquet reference source and
Python files), then checks the loader, the lineage table and determinism.
"""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from tokenizers import Tokenizer

from common.io import sha256_file
from pipeline.build import VersionExistsError, build
from pipeline.config import REPO_ROOT
from pipeline.manifest import without_run_facts

SAMPLE = REPO_ROOT / "data" / "sample"
SEQ = 128
GLOBAL_BATCH = 4


def _head_jsonl_zst(src: Path, dst: Path, n: int, step: int = 1) -> None:
    with open(src, "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    dst.write_text("".join(lines[::step][:n]), encoding="utf-8")


def _code_files(dst: Path, n: int) -> None:
    """The first ``n`` CPython files of the code sample written back as the
    ``.py`` files they are (``meta.path`` without ``Lib/``, ``/`` as ``__``),
    so the plain-text reader gets one document per file."""
    dst.mkdir()
    with open(SAMPLE / "code-cpython.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    for rec in map(json.loads, lines[:n]):
        name = rec["meta"]["path"].removeprefix("Lib/").replace("/", "__")
        (dst / name).write_text(rec["text"], encoding="utf-8")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    data = root / "data"
    data.mkdir()
    # web: every 10th fortune of the sample (all five languages), with one exact duplicate added
    _head_jsonl_zst(SAMPLE / "web-fortunes.jsonl.zst", data / "web.jsonl", 300, step=12)
    lines = (data / "web.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (data / "web.jsonl").write_text("".join(lines + [lines[5], "not json\n"]), encoding="utf-8")
    _head_jsonl_zst(SAMPLE / "manuals-manpages.jsonl.zst", data / "manuals.jsonl", 12, step=28)
    ref = pq.read_table(SAMPLE / "reference-debref.parquet")
    pq.write_table(ref.slice(0, 45), data / "reference.parquet")
    _code_files(data / "code", 4)
    cfg = {
        "seed": 7,
        "sources": {
            "web": {"paths": [str(data / "web.jsonl")]},
            "manuals": {"paths": [str(data / "manuals.jsonl")]},
            "reference": {"paths": [str(data / "reference.parquet")]},
            "code": {"paths": [str(data / "code" / "*.py")], "format": "text", "lang": "code"},
        },
        "executor": {"num_workers": 2},
        "ingest": {"partition_max_docs": 100},
        "perplexity": {"reference_source": "reference"},
        "tokenize": {"vocab_size": 2000},
        # Small shards and buckets, so the streaming assembly's exchange is
        # exercised: several shards, order buckets (windows stitched across
        # them) and shuffle key ranges.
        # Every output format, so determinism and resume after a kill cover them all.
        "output": {"seq_length": SEQ, "max_shard_bytes": 64 * (SEQ + 1) * 4, "order_bucket_tokens": 8000,
                   "shuffle_bucket_samples": 32, "formats": ["mindrecord", "mindrecord_shifted", "megatron"]},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    corpora = root / "corpora"
    lines: list[str] = []
    first = build("t1", root / "tiny.yaml", corpora, log=lines.append)
    return {"root": root, "corpora": corpora, "result": first, "log": lines}


def test_languages_without_a_perplexity_model_are_warned_about(tiny):
    fit = tiny["result"].manifest["stages"]["perplexity"]["fit"]
    unscored = {lang: u for lang, u in fit["coverage"]["unscored"].items() if not u.get("declared")}
    assert unscored       # the 45 reference pages do not cover every language of the corpus
    warnings = [line for line in tiny["log"]
                if line.startswith("[perplexity] WARNING language ") and "are kept without a perplexity" in line]
    assert warnings == [f"[perplexity] WARNING language {lang}: no model ({u['why']}); its {u['docs']:,} documents "
                        f"({u['chars']:,} chars) are kept without a perplexity or bucket (give more reference text "
                        "or perplexity.models)"
                        for lang, u in sorted(unscored.items(), key=lambda kv: (-kv[1]["docs"], kv[0]))]


def test_version_layout_and_accounting(tiny):
    vdir = tiny["result"].version_dir
    m = tiny["result"].manifest
    assert vdir == tiny["corpora"] / "t1"
    for name in ("manifest.json", "tokenizer.json", "config.yaml", "lineage/part-00000.parquet",
                 "documents/part-00000.parquet", "excerpts/part-00000.parquet",
                 "lineage_by_doc/part-00000.parquet", "quarantine.jsonl"):
        assert (vdir / name).exists(), name
    assert len(m["shards"]) >= 3 and m["layout"]["order_buckets"] >= 3
    assert sorted(p.name for p in (vdir / "lineage").iterdir()) == [f"part-{i:05d}.parquet"
                                                                   for i in range(len(m["shards"]))]
    assert not (tiny["corpora"] / ".tmp-t1").exists()
    acc = m["accounting"]
    # 300 fortunes + 1 duplicate + 1 bad line, 12 man pages, 45 reference pages, 4 code files
    assert acc["documents_in"] == 302 + 12 + 45 + 4
    assert acc["quarantined"] == 1 and m["quarantine"] == {"read.invalid_json": 1}
    q = [json.loads(x) for x in (vdir / "quarantine.jsonl").read_text().splitlines()]
    assert q[0]["line"] == 302 and q[0]["reason"] == "read.invalid_json"
    # explain names the quarantine of a record that never reached a stage
    from pipeline.explain import UnknownDocumentError, explain_document

    with pytest.raises(UnknownDocumentError, match=r"quarantined at ingest: read\.invalid_json"):
        explain_document(vdir, f"web:{q[0]['file']}:302")
    # Every readable input record, by the id its file and line give, is in exactly one
    # place: documents/ (kept) or one stage's decisions/ (dropped).
    data = (tiny["root"] / "data").resolve()
    web = f"web:{data / 'web.jsonl'}"
    inputs = ({f"{web}:{line}" for line in range(1, 302)}
              | {f"manuals:{data / 'manuals.jsonl'}:{line}" for line in range(1, 13)}
              | {f"reference:{data / 'reference.parquet'}:{row}" for row in range(1, 46)}
              | {f"code:{path}:1" for path in (data / "code").glob("*.py")})
    assert len(inputs) == 301 + 12 + 45 + 4
    kept = pq.read_table(vdir / "documents", columns=["id"])["id"].to_pylist()
    dropped = {}
    for name in m["stage_order"]:
        dec = pq.read_table(vdir / "decisions" / name, columns=["id", "reason"]).to_pylist()
        assert not {d["id"] for d in dec} & (set(kept) | set(dropped)), name  # no document in two places
        dropped.update((d["id"], d["reason"]) for d in dec)
    assert len(set(kept)) == len(kept) and set(kept) | set(dropped) == inputs
    assert m["stages"]["langid"]["totals"]["documents_in"] == 301 + 12 + 45 + 4
    # the planted copy (line 301 repeats line 6): one of the two is an exact duplicate, the other kept
    assert sorted([dropped.get(f"{web}:6", "kept"), dropped.get(f"{web}:301", "kept")]) == [
        "dedup.exact_duplicate", "kept"]
    # each stage's input is the previous stage's kept documents
    names = m["stage_order"]
    assert names == ["langid", "heuristics", "perplexity", "dedup", "pii", "tokenize", "mixture"]
    for a, b in zip(names, names[1:]):
        assert m["stages"][b]["totals"]["documents_in"] == m["stages"][a]["totals"]["kept"]
    assert m["stages"]["dedup"]["totals"]["dropped"].get("dedup.exact_duplicate", 0) >= 1
    assert acc["kept"] == pq.read_table(vdir / "documents", columns=["id"]).num_rows
    for name in m["stage_order"]:
        dec = pq.read_table(vdir / "decisions" / name, columns=["reason"])
        by_reason = {}
        for r in dec["reason"].to_pylist():
            by_reason[r] = by_reason.get(r, 0) + 1
        assert by_reason == m["stages"][name]["totals"]["dropped"], name
    for shard in m["shards"]:
        assert sha256_file(vdir / shard["name"]) == shard["sha256"]
    assert sum(s["rows"] for s in m["shards"]) == m["num_samples"] > GLOBAL_BATCH * 3
    assert m["tokenizer"]["sha256"] == sha256_file(vdir / "tokenizer.json")


def test_existing_version_is_never_overwritten(tiny):
    before = sha256_file(tiny["result"].version_dir / "manifest.json")
    with pytest.raises(VersionExistsError, match="never overwritten"):
        build("t1", tiny["root"] / "tiny.yaml", tiny["corpora"], log=lambda m: None)
    assert sha256_file(tiny["result"].version_dir / "manifest.json") == before


def _samples(vdir: Path, manifest) -> np.ndarray:
    from pipeline.loader import create_dataset

    ds = create_dataset(vdir, global_batch=GLOBAL_BATCH, num_parallel_workers=1)
    batches = [b[0] for b in ds.create_tuple_iterator(output_numpy=True)]
    out = np.concatenate(batches)
    assert out.dtype == np.int32 and out.shape[1] == SEQ + 1
    return out


def test_loader_reads_back_every_sample_and_lineage_decodes_to_documents(tiny):
    vdir = tiny["result"].version_dir
    m = tiny["result"].manifest
    samples = _samples(vdir, m)
    steps = m["num_samples"] // GLOBAL_BATCH
    assert samples.shape[0] == steps * GLOBAL_BATCH
    tok = Tokenizer.from_file(str(vdir / "tokenizer.json"))
    eos = m["tokenizer"]["special_token_ids"]["eos"]
    assert eos == tok.token_to_id("<|endoftext|>")
    lineage = pq.read_table(vdir / "lineage").to_pylist()
    docs = {d["id"]: d for d in pq.read_table(vdir / "documents", columns=["id", "text"]).to_pylist()}
    # reassemble each (document, repeat) from its segments across samples
    pieces: dict[tuple, list] = {}
    for seg in lineage:
        if seg["sample_index"] >= samples.shape[0]:
            continue
        row = samples[seg["sample_index"]]
        ids = row[seg["sample_token_start"]:seg["sample_token_end"]]
        assert len(ids) == seg["doc_token_end"] - seg["doc_token_start"]
        pieces.setdefault((seg["doc_id"], seg["repeat"]), []).append((seg["doc_token_start"], ids))
    complete = 0
    for (doc_id, _), parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        contiguous = all(a[0] + len(a[1]) == b[0] for a, b in zip(parts, parts[1:]))
        if parts[0][0] != 0 or not contiguous:
            continue  # a piece lies in a sample past the last full step
        ids = np.concatenate([p[1] for p in parts])
        if ids[-1] != eos:
            continue  # the document's tail is in a sample past the last full step
        assert tok.decode(ids[:-1].tolist(), skip_special_tokens=False) == docs[doc_id]["text"]
        complete += 1
    assert complete >= 20


def test_lineage_for_step_equals_loader_batch(tiny):
    from pipeline.lineage import lineage_for_step
    from pipeline.loader import create_dataset

    vdir = tiny["result"].version_dir
    ds = create_dataset(vdir, global_batch=GLOBAL_BATCH, num_parallel_workers=1)
    batches = [b[0] for b in ds.create_tuple_iterator(output_numpy=True)]
    lineage = pq.read_table(vdir / "lineage")
    for step in (0, len(batches) - 1):
        records = lineage_for_step(vdir, step, GLOBAL_BATCH)
        assert [r["sample_index"] for r in records] == list(range(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH))
        for rec, row in zip(records, batches[step]):
            segs = lineage.filter(pa.compute.equal(lineage["sample_index"], rec["sample_index"])).to_pylist()
            assert [s["doc_id"] for s in rec["segments"]] == [s["doc_id"] for s in segs]
            assert sum(s["sample_token_end"] - s["sample_token_start"] for s in segs) == SEQ + 1 == len(row)


def test_every_output_format_holds_the_same_samples_and_verifies(tiny):
    from mindspore.mindrecord import FileReader

    from pipeline import layout
    from pipeline.megatron import read_idx, read_tokens
    from pipeline.versions import verify_version

    vdir, m = tiny["result"].version_dir, tiny["result"].manifest

    def rows(name, column):
        reader = FileReader(str(vdir / name))
        out = [r[column] for r in reader.get_next()]
        reader.close()
        return np.stack(out)

    samples = np.concatenate([rows(s["name"], "input_ids") for s in m["shards"]])
    assert samples.shape == (m["num_samples"], SEQ + 1) and len(m["shards"]) > 1
    shifted = m["formats"]["mindrecord_shifted"]["files"]
    np.testing.assert_array_equal(np.concatenate([rows(f["name"], "labels") for f in shifted]), samples[:, 1:])
    prefix = vdir / layout.megatron_prefix()
    dtype, lengths, _, _ = read_idx(f"{prefix}.idx")
    assert dtype == np.uint16 and m["formats"]["megatron"]["dtype"] == "uint16"  # vocab_size 2000
    np.testing.assert_array_equal(read_tokens(prefix, 0, samples.size).reshape(samples.shape), samples)
    assert int(lengths.sum()) == samples.size
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in (vdir / layout.LINEAGE).glob("*.parquet")) == len(lengths)
    result = verify_version(vdir)
    assert result["ok"] and result["checked_format_files"] == len(m["shards"]) + 2


def test_same_seed_gives_identical_shards_and_manifest(tiny):
    second = build("t2", tiny["root"] / "tiny.yaml", tiny["corpora"], num_workers=1, log=lambda m: None)
    a, b = without_run_facts(tiny["result"].manifest), without_run_facts(second.manifest)
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    a.pop("version"), b.pop("version")
    assert a == b


def test_cli_inspect_lineage_and_errors(tiny, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    corpora = str(tiny["corpora"])
    m = tiny["result"].manifest
    res = runner.invoke(app, ["inspect", "t1", "--corpora-root", corpora])
    assert res.exit_code == 0, res.output
    assert "langid" in res.output and f"{m['accounting']['kept']:,}" in res.output

    res = runner.invoke(app, ["lineage", "t1", "--step", "1", "--global-batch", str(GLOBAL_BATCH),
                              "--corpora-root", corpora, "--json"])
    assert res.exit_code == 0, res.output
    records = json.loads(res.output)
    assert [r["sample_index"] for r in records] == list(range(GLOBAL_BATCH, 2 * GLOBAL_BATCH))
    lineage = pq.read_table(tiny["result"].version_dir / "lineage")
    first = lineage.filter(pa.compute.equal(lineage["sample_index"], GLOBAL_BATCH)).to_pylist()
    assert [s["doc_id"] for s in records[0]["segments"]] == [s["doc_id"] for s in first]

    res = runner.invoke(app, ["build", "--version", "t1", "--config", str(tiny["root"] / "tiny.yaml"),
                              "--corpora-root", corpora])
    assert res.exit_code == 2 and "never overwritten" in res.output

    bad = tmp_path / "bad.yaml"
    bad.write_text((tiny["root"] / "tiny.yaml").read_text() + "dedup:\n  num_bandz: 3\n")
    res = runner.invoke(app, ["build", "--version", "b1", "--config", str(bad), "--corpora-root", str(tmp_path)])
    assert res.exit_code == 2
    assert "dedup.num_bandz: unknown key" in res.output
    assert not (tmp_path / ".work").exists()  # stopped before any work


def test_crashed_build_resumes_without_redoing_finished_stages(tiny, monkeypatch):
    """A build that dies in the tokenize stage leaves no version; the re-run
    reuses ingest..dedup, finishes, and equals an uninterrupted build."""
    import stages.tokenize

    calls = {"n": 0}
    real = stages.tokenize.TokenizeStage.process

    def crash_on_second_partition(self, table):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash")
        return real(self, table)

    monkeypatch.setattr(stages.tokenize.TokenizeStage, "process", crash_on_second_partition)
    with pytest.raises(RuntimeError, match="simulated crash"):
        build("r1", tiny["root"] / "tiny.yaml", tiny["corpora"], num_workers=1, log=lambda m: None)
    assert not (tiny["corpora"] / "r1").exists()
    work = tiny["corpora"] / ".work" / "r1"
    # the failing partition's siblings all finished (a failure loses no other work)
    assert len(list((work / "tokenize").glob("part-*.parquet"))) == len(list((work / "dedup").glob("part-*.parquet"))) - 1
    monkeypatch.setattr(stages.tokenize.TokenizeStage, "process", real)

    lines = []
    resumed = build("r1", tiny["root"] / "tiny.yaml", tiny["corpora"], num_workers=1, log=lines.append)
    for name in ("langid", "heuristics", "perplexity", "dedup"):
        assert any(line.startswith(f"[{name}] done in an earlier run") for line in lines), (name, lines)
    a, b = without_run_facts(tiny["result"].manifest), without_run_facts(resumed.manifest)
    a.pop("version"), b.pop("version")
    assert a == b


def test_killed_build_resumes_to_the_same_bytes(tiny):
    """SIGKILL the build at seven points in turn (after the first ingest file,
    after one heuristics partition, after two tokenize partitions, inside each
    phase of the streaming assembly, and just before publishing); each re-run
    resumes, the last one publishes a version equal to the uninterrupted build."""
    import os
    import signal
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pipeline", "build", "--version", "k1", "--config",
           str(tiny["root"] / "tiny.yaml"), "--corpora-root", str(tiny["corpora"])]
    log = tiny["root"] / "k1.log"
    heartbeat = tiny["corpora"] / ".work" / "k1" / "heartbeat.json"

    def run(env: dict) -> int:
        # Output to a file, not a pipe: a pipe stays open while any descendant
        # holds it, which would make this wait on more than the build itself.
        with open(log, "w") as fh:
            proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO_ROOT, timeout=480)
        return proc.returncode

    base_env = {k: v for k, v in os.environ.items() if k != "MINDCORPUS_CRASH_AFTER"}
    for point in ("ingest:1", "heuristics:1", "tokenize:2", "assemble-emit:2", "assemble-pack:3",
                  "assemble-shards:2", "assemble:0"):
        code = run({**base_env, "MINDCORPUS_CRASH_AFTER": point})
        beat = heartbeat.read_text() if heartbeat.exists() else "no heartbeat"
        assert code == -signal.SIGKILL, (point, code, beat, log.read_text()[-2000:])
        assert not (tiny["corpora"] / "k1").exists()
    assert run(base_env) == 0, log.read_text()[-2000:]
    assert "done in an earlier run" in log.read_text()
    resumed = json.loads((tiny["corpora"] / "k1" / "manifest.json").read_text())
    a, b = without_run_facts(tiny["result"].manifest), without_run_facts(resumed)
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    assert sorted(k for k in set(a["files"]) | set(b["files"]) if a["files"].get(k) != b["files"].get(k)) == []
    a.pop("version"), b.pop("version")
    assert a == b


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _render_dom(page: Path, tmp_path: Path) -> tuple[str, str]:
    import subprocess

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium)")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def test_report_page_loads_in_a_browser_and_shows_the_manifest_funnel(tiny, tmp_path):
    import re

    from pipeline.report import funnel

    vdir = tiny["result"].version_dir
    dom, log = _render_dom(vdir / "report.html", tmp_path)
    assert 'data-ready="1"' in dom  # the page's script ran to its end
    console = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert "http://" not in (vdir / "report.html").read_text() .replace("http://www.w3.org", "")
    shown = {(m[1], m[2]): m[3] for m in re.finditer(
        r'data-version="t1" data-stage="([^"]+)" data-field="(documents|chars|tokens)">([^<]*)<', dom)}
    manifest = tiny["result"].manifest
    expected = funnel(manifest)
    assert len(shown) == 3 * len(expected)
    for row in expected:
        for field in ("documents", "chars", "tokens"):
            value = row[field]
            assert shown[(row["stage"], field)] == ("–" if value is None else f"{value:,}"), (row["stage"], field)
    tot = manifest["stages"]["heuristics"]["totals"]
    assert shown[("heuristics", "documents")] == f"{tot['kept']:,}"
    assert shown[("ingest", "documents")] == f"{manifest['accounting']['documents_in'] - manifest['accounting']['quarantined']:,}"


def test_report_with_compare_shows_both_versions(tiny, tmp_path):
    from pipeline.report import write_report

    other = tiny["corpora"] / "t2"
    if not other.exists():
        build("t2", tiny["root"] / "tiny.yaml", tiny["corpora"], num_workers=1, log=lambda m: None)
    page = write_report(tiny["result"].version_dir, other, tmp_path / "cmp.html")
    dom, _ = _render_dom(page, tmp_path)
    for version in ("t1", "t2"):
        assert f'data-version="{version}" data-stage="mixture" data-field="documents"' in dom
    assert "corpus t1 vs t2" in dom


def test_autotokenizer_loads_the_version_directory(tiny):
    transformers = pytest.importorskip("transformers")
    vdir = tiny["result"].version_dir
    files = tiny["result"].manifest["files"]
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        assert files[name] == sha256_file(vdir / name), name
    assert json.loads((vdir / "special_tokens_map.json").read_text()) == {
        "bos_token": "<|bos|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}
    tok = transformers.AutoTokenizer.from_pretrained(str(vdir))
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert tok.model_max_length == tiny["result"].manifest["seq_length"]
    from tokenizers import Tokenizer

    text = "价格：１２３元 The café <|endoftext|> end"
    plain = Tokenizer.from_file(str(vdir / "tokenizer.json"))
    plain.encode_special_tokens = True                                   # as the corpus encodes
    assert tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] == \
        plain.encode(text, add_special_tokens=False).ids
    assert 1 in tok(text, add_special_tokens=False)["input_ids"]        # loaded as is: the literal is EOS
