"""Publishing a version: one build per version (the lock), nothing incomplete
published, no credentials in the published files, no raw control characters
on the terminal, and one rule for where versions live.

One real build, started as two real processes at once (the second must stop
with one line), under a non-default corpora directory, with credentials in a
source's ``storage_options`` and escape sequences in a document's text.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from typer.testing import CliRunner

from pipeline.assemble import BuildError
from pipeline.build import check_complete, publish_phase
from pipeline.cli import app
from pipeline.config import REPO_ROOT, config_dict, config_hash, parse_config
from pipeline.location import ENV, corpora_root, resolve_version
from pipeline.lock import VersionLock, VersionLockedError, lock_path, process_start
from pipeline.manifest import load_manifest
from pipeline.redact import REDACTED, looks_secret, redact
from pipeline.runlog import RunLog
from pipeline.versions import verify_version

SAMPLE = REPO_ROOT / "data" / "sample"
VERSION = "p1"
SECRETS = {"key": "AKIAIOSFODNN7EXAMPLE", "secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
           "session_token": "FwoGZXIvYXdzEXAMPLESESSIONTOKENvalue", "password": "hunter2-correct-horse"}
# ESC [2J (clear screen), ESC ] 52 (write the clipboard), C1 CSI, carriage return, RTL override
ESCAPES = "\x1b[2J\x1b[31mALERT\x1b[0m \x1b]52;c;aGVsbG8=\x07 \x9b6n \r overwritten \u202eevil"
ESC_TEXT = ("The river runs past the old mill and the morning light falls on the stone wall of the garden. "
            f"{ESCAPES} Children walk along the water to the school, and the letters they carry are read "
            "at the window by their grandmother, who keeps every one of them in a wooden box.")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MINDCORPUS_CRASH_AFTER", ENV)}
    return {**env, **extra}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Two `python -m pipeline build` processes of one version started
    together, over a stale lock of a dead process of this host; the config
    sits in <proj>/configs/ with a relative corpora_dir, so versions live in
    <proj>/built/, not in the repository's corpora/."""
    proj = tmp_path_factory.mktemp("proj")
    data = proj / "data"
    data.mkdir()
    with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    esc = json.dumps({"text": ESC_TEXT}, ensure_ascii=True) + "\n"
    (data / "web.jsonl").write_text("".join(lines[::25][:120]) + esc, encoding="utf-8")
    with open(SAMPLE / "manuals-manpages.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "manuals.jsonl").write_text("".join(lines[::28][:12]), encoding="utf-8")
    storage = {"key": SECRETS["key"], "secret": SECRETS["secret"],
               "client_kwargs": {"aws_session_token": SECRETS["session_token"], "region_name": "us-east-1",
                                 "endpoint_url": f"http://minio:{SECRETS['password']}@127.0.0.1:9000"}}
    cfg = {
        "seed": 5, "corpora_dir": "built",
        "sources": {"web": {"paths": [str(data / "web.jsonl")], "storage_options": storage},
                    "manuals": {"paths": [str(data / "manuals.jsonl")]}},
        "executor": {"num_workers": 1},
        "perplexity": {"enabled": False, "reference_source": "manuals"},
        "tokenize": {"vocab_size": 600},
        "output": {"seq_length": 64, "max_shard_bytes": 160 * 65 * 4},
    }
    (proj / "configs").mkdir()
    config = proj / "configs" / f"{VERSION}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    root = proj / "built"
    root.mkdir()
    stale = {"pid": _dead_pid(), "host": socket.gethostname(), "started_at": "2020-01-01T00:00:00+00:00",
             "process_start": None, "version": VERSION, "token": "0" * 16}
    lock_path(root, VERSION).write_text(json.dumps(stale))
    cmd = [sys.executable, "-m", "pipeline", "build", "--version", VERSION, "--config", str(config)]
    procs, logs = [], []
    for i in range(2):
        logs.append(proj / f"build-{i}.log")
        with open(logs[-1], "w") as fh:
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=_env()))
    codes = [p.wait(timeout=600) for p in procs]
    return {"proj": proj, "config": config, "root": root, "cfg": cfg, "codes": codes, "pids": [p.pid for p in procs],
            "outputs": [log.read_text() for log in logs], "stale": stale, "vdir": root / VERSION}


# ---------------------------------------------------------------- the lock


def test_two_builds_of_one_version_started_together(published):
    codes, outputs, pids = published["codes"], published["outputs"], published["pids"]
    assert sorted(c == 0 for c in codes) == [False, True], (codes, outputs)
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert codes[loser] == 2
    lines = [line for line in outputs[loser].splitlines() if line.strip()]
    assert len(lines) == 1, outputs[loser]
    assert lines[0].startswith(f"error: version {VERSION!r} is being built by pid {pids[winner]} on host "
                               f"{socket.gethostname()} since "), lines[0]
    assert lines[0].endswith(f"(lock {lock_path(published['root'], VERSION)}); wait for that build, or stop it "
                             f"(kill {pids[winner]}) and run again"), lines[0]
    assert f"published {published['vdir']}" in outputs[winner]
    vdir = published["vdir"]
    result = verify_version(vdir)
    assert result["ok"] and result["problems"] == [], result
    manifest = load_manifest(vdir)
    assert result["checked_shards"] == len(manifest["shards"]) >= 2
    for shard in manifest["shards"]:
        assert (vdir / shard["name"]).stat().st_size == shard["bytes"]
        assert (vdir / f"{shard['name']}.db").is_file()
    acc = manifest["accounting"]
    # 120 fortunes + the escape-code one, 12 man pages: all read, none quarantined
    assert acc["documents_in"] == 121 + 12 and acc["quarantined"] == 0
    assert {s: c["documents_in"] for s, c in manifest["ingest"]["per_source"].items()} == {"web": 121, "manuals": 12}
    assert manifest["stages"]["dedup"]["totals"]["documents_in"] == manifest["stages"]["heuristics"]["totals"]["kept"]
    # nothing left behind: no lock, no temporary version
    assert sorted(p.name for p in published["root"].iterdir()) == [".lock.guard", ".work", VERSION]


def test_a_stale_lock_of_a_dead_process_is_taken_over(published, tmp_path):
    events = [json.loads(line) for line in (published["vdir"] / "run.log.jsonl").read_text().splitlines()]
    taken = [e for e in events if e["event"] == "lock_taken_over"]
    assert len(taken) == 1 and taken[0]["stale_lock"]["pid"] == published["stale"]["pid"]
    assert taken[0]["stale_lock"]["host"] == socket.gethostname()

    # the same in-process, and a live pid whose process started at another time (pid reused)
    dead = _dead_pid()
    lock_path(tmp_path, "v").write_text(json.dumps({"pid": dead, "host": socket.gethostname()}))
    lock = VersionLock.acquire(tmp_path, "v")
    assert lock.taken_over["pid"] == dead
    assert json.loads(lock_path(tmp_path, "v").read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock_path(tmp_path, "v").exists()
    reused = {"pid": os.getpid(), "host": socket.gethostname(), "process_start": process_start(os.getpid()) - 1}
    lock_path(tmp_path, "v").write_text(json.dumps(reused))
    lock = VersionLock.acquire(tmp_path, "v")
    assert lock.taken_over == reused
    lock.release()


def test_a_live_or_foreign_lock_stops_a_build_with_one_line(tmp_path):
    lock = VersionLock.acquire(tmp_path, "v")
    with pytest.raises(VersionLockedError) as exc:
        VersionLock.acquire(tmp_path, "v")
    assert f"is being built by pid {os.getpid()} on host {socket.gethostname()}" in str(exc.value)
    assert "\n" not in str(exc.value)
    lock.release()

    path = lock_path(tmp_path, "w")
    foreign = {"pid": 1, "host": "gpu-node-17", "started_at": "2024-05-01T10:00:00+00:00"}
    path.write_text(json.dumps(foreign))
    with pytest.raises(VersionLockedError) as exc:
        VersionLock.acquire(tmp_path, "w")
    assert str(exc.value) == (f"version 'w' is locked by a build on another host: pid 1 on host gpu-node-17 since "
                              f"2024-05-01T10:00:00+00:00 (lock {path}); this host cannot tell whether it still "
                              f"runs: if it does not, remove the lock: rm {path}")
    assert json.loads(path.read_text()) == foreign  # never taken over

    path.write_text("{not json")
    with pytest.raises(VersionLockedError, match=f"cannot be read .*rm {path}"):
        VersionLock.acquire(tmp_path, "w")


def test_the_cli_reports_a_held_lock_in_one_line(published, tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(published["proj"] / "configs", proj / "configs")
    root = proj / "built"
    root.mkdir()
    path = lock_path(root, "p2")
    path.write_text(json.dumps({"pid": 1, "host": "other-host"}))
    res = CliRunner().invoke(app, ["build", "--version", "p2", "--config", str(proj / "configs" / "p1.yaml")])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "locked by a build on another host" in res.output
    assert sorted(p.name for p in root.iterdir()) == [".lock-p2", ".lock.guard"]  # nothing was written


def test_an_incomplete_version_is_not_published(published, tmp_path):
    vdir = published["vdir"]
    manifest = load_manifest(vdir)
    check_complete(vdir, manifest)  # the published one is complete
    cases = [
        (lambda d: (d / manifest["shards"][1]["name"]).unlink(), f"{manifest['shards'][1]['name']} is missing"),
        (lambda d: Path(f"{d / manifest['shards'][0]['name']}.db").unlink(),
         f"{manifest['shards'][0]['name']}.db is missing or empty"),
        (lambda d: (d / "lineage" / "part-00001.parquet").unlink(), "lineage/part-00001.parquet is missing"),
        (lambda d: (d / "manifest.sha256").unlink(), "manifest.sha256: missing"),
        (lambda d: open(d / manifest["shards"][0]["name"], "ab").write(b"x"),
         f"{manifest['shards'][0]['name']} has {manifest['shards'][0]['bytes'] + 1} bytes, the manifest says "
         f"{manifest['shards'][0]['bytes']}"),
    ]
    for i, (damage, message) in enumerate(cases):
        tmp = tmp_path / f".tmp-{i}"
        shutil.copytree(vdir, tmp)
        damage(tmp)
        with pytest.raises(BuildError, match="not a complete version, not published: " + message.replace(".", r"\.")):
            check_complete(tmp, manifest)
    # publish_phase refuses a directory without its manifest, and publishes nothing
    tmp = tmp_path / ".tmp-x"
    shutil.copytree(vdir, tmp)
    (tmp / "manifest.json").unlink()
    runlog = RunLog(tmp_path, lambda m: None)
    with pytest.raises(BuildError, match="manifest.json"):
        publish_phase(tmp, tmp_path / "x", runlog, 1.0, manifest)
    runlog.close()
    assert not (tmp_path / "x").exists() and tmp.is_dir()


# ---------------------------------------------------------------- credentials


def test_credentials_are_absent_from_every_published_file(published):
    vdir, root = published["vdir"], published["root"]
    files = [p for p in vdir.rglob("*") if p.is_file()] + [root / ".work" / VERSION / "run.log.jsonl"]
    assert len(files) > 10
    for path in files:
        data = path.read_bytes()
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, (name, path)
    config = yaml.safe_load((vdir / "config.yaml").read_text())
    storage = config["sources"]["web"]["storage_options"]
    assert storage == {"key": REDACTED, "secret": REDACTED,
                       "client_kwargs": {"aws_session_token": REDACTED, "region_name": "us-east-1",
                                         "endpoint_url": f"http://minio:{REDACTED}@127.0.0.1:9000"}}
    # everything else of the config is published as it was resolved
    resolved = config_dict(parse_config(published["cfg"]))   # the published form (no empty plugins)
    resolved["sources"]["web"]["storage_options"] = storage
    assert config == resolved
    assert config["tokenize"]["eos_token"] == "<|endoftext|>" and config["tokenize"]["vocab_size"] == 600
    manifest = load_manifest(vdir)
    assert manifest["tokenizer"]["special_token_ids"] == {"pad": 0, "eos": 1, "bos": 2}
    # the published config hash does not depend on the credentials
    other = json.loads(json.dumps(published["cfg"]))
    other["sources"]["web"]["storage_options"].update(key="AKIAOTHERKEY0000", secret="another-secret-value")
    assert manifest["config_hash"] == config_hash(parse_config(other)) == config_hash(parse_config(published["cfg"]))


def test_redact_rules():
    assert [k for k in ("key", "secret", "token", "aws_access_key_id", "aws_secret_access_key", "sessionToken",
                        "hf_token", "password", "Authorization", "credentials", "AccountKey", "x-api-key")
            if not looks_secret(k)] == []
    assert [k for k in ("token_budget", "eos_token", "pad_token", "bytes_per_token", "max_token_length",
                        "special_token_ids", "document_keys", "endpoint_url", "region_name", "num_tokens")
            if looks_secret(k)] == []
    data = {"storage_options": {"headers": {"Authorization": "Bearer abcdefghijkl"}, "anon": False, "token": None,
                                "credentials": {"user": "me", "port": 9000}},
            "message": "403 for key AKIAIOSFODNN7EXAMPLE at s3://u:p4ssw0rd@h/b?X-Amz-Signature=abc123&part=2"}
    assert redact(data, {"AKIAIOSFODNN7EXAMPLE"}) == {
        "storage_options": {"headers": {"Authorization": REDACTED}, "anon": False, "token": None,
                            "credentials": {"user": REDACTED, "port": REDACTED}},
        "message": f"403 for key {REDACTED} at s3://u:{REDACTED}@h/b?X-Amz-Signature={REDACTED}&part=2"}
    # A stage's tally counts things by name: the pii stage's `secret` count is a count,
    # published as it is; a storage option named `secret` beside it is still redacted.
    stages = {"stages": {"pii": {"totals": {"tally": {"secret": 3, "email": 12}}}},
              "storage_options": {"secret": "abcdefghijkl"}}
    assert redact(stages) == {"stages": {"pii": {"totals": {"tally": {"secret": 3, "email": 12}}}},
                              "storage_options": {"secret": REDACTED}}


# ---------------------------------------------------------------- terminal


def test_inspect_and_lineage_print_no_raw_control_characters(published):
    vdir = published["vdir"]
    config = str(published["config"])
    kept = pq.read_table(vdir / "documents", columns=["id"])
    ids = kept["id"].to_pylist() + [i for s in ("langid", "heuristics", "dedup") if (vdir / "decisions" / s).is_dir()
                                    for i in pq.read_table(vdir / "decisions" / s, columns=["id"])["id"].to_pylist()]
    (doc_id,) = [i for i in ids if i.startswith("web:") and i.endswith("web.jsonl:121")]
    runner = CliRunner()
    if doc_id in kept["id"].to_pylist():
        args = ["--stage", "mixture", "--kept", "-n", "1000"]
    else:
        stage = next(s for s in ("langid", "heuristics", "dedup")
                     if (vdir / "decisions" / s).is_dir() and doc_id in pq.read_table(
                         vdir / "decisions" / s, columns=["id"])["id"].to_pylist())
        args = ["--stage", stage, "-n", "1000"]
    res = runner.invoke(app, ["inspect", VERSION, "--config", config, *args, "--chars", "2000"])
    assert res.exit_code == 0, res.output
    assert doc_id in res.output
    for raw in ("\x1b", "\x07", "\x9b", "\r", "\u202e"):
        assert raw not in res.output, repr(raw)
    assert "\\x1b[2J\\x1b[31mALERT\\x1b[0m \\x1b]52;c;aGVsbG8=\\a \\x9b6n \\r overwritten \\u202eevil" in res.output
    res = runner.invoke(app, ["inspect", VERSION, "--config", config, *args, "--json"])
    assert res.exit_code == 0 and "\x1b" not in res.output and "\x9b" not in res.output
    (text,) = [r["text"] for r in json.loads(res.output) if r["id"] == doc_id]
    assert "\x1b[2J\x1b[31mALERT" in text and "\x9b6n" in text  # the JSON still decodes to the raw text
    if doc_id in kept["id"].to_pylist():
        res = runner.invoke(app, ["lineage", VERSION, "--config", config, "--doc", doc_id, "--global-batch", "4",
                                  "--show-text"])
        assert res.exit_code == 0, res.output
        assert "\x1b" not in res.output and "\\x1b[2J" in res.output


# ---------------------------------------------------------------- where versions live


def test_every_command_finds_a_version_under_a_non_default_corpora_dir(published, monkeypatch, tmp_path):
    vdir, config = published["vdir"], str(published["config"])
    assert vdir == published["proj"] / "built" / VERSION  # relative corpora_dir, from the config's project
    assert not (REPO_ROOT / "corpora" / VERSION).exists()
    runner = CliRunner()
    commands = [["inspect", VERSION], ["lineage", VERSION, "--step", "0", "--global-batch", "4"],
                ["report", VERSION, "--out", str(tmp_path / "r.html")], ["diff", VERSION, VERSION],
                ["verify", VERSION]]
    for cmd in commands:
        res = runner.invoke(app, [*cmd, "--config", config])
        assert res.exit_code == 0, (cmd, res.output)
    assert (tmp_path / "r.html").stat().st_size > 1000
    # the same through the environment, and through --corpora-root
    monkeypatch.setenv(ENV, str(published["root"]))
    for cmd in commands:
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0, (cmd, res.output)
    monkeypatch.delenv(ENV)
    for cmd in commands:
        res = runner.invoke(app, [*cmd, "--corpora-root", str(published["root"])])
        assert res.exit_code == 0, (cmd, res.output)
    # without any of them the repository's corpora/ is looked at, and the message says so
    res = runner.invoke(app, ["verify", VERSION])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert f"no {REPO_ROOT / 'corpora' / VERSION / 'manifest.json'} (corpora root from corpora_dir of " in res.output

    from pipeline.loader import create_dataset

    rows = load_manifest(vdir)["num_samples"] // 4 * 4
    ds = create_dataset(VERSION, 4, config=config)
    assert ds.get_dataset_size() * 4 == rows
    monkeypatch.setenv(ENV, str(published["root"]))
    assert create_dataset(VERSION, 4, check_sha256=True).get_dataset_size() * 4 == rows
    assert resolve_version(VERSION) == vdir


def test_corpora_root_precedence(monkeypatch, tmp_path):
    project = tmp_path / "proj"
    (project / "configs").mkdir(parents=True)
    config = project / "configs" / "x.yaml"
    config.write_text("corpora_dir: data/corpora\n")
    monkeypatch.delenv(ENV, raising=False)
    assert corpora_root(config_path=config) == (project / "data" / "corpora", f"corpora_dir of {config}")
    monkeypatch.setenv(ENV, str(tmp_path / "env"))
    assert corpora_root(config_path=config).path == tmp_path / "env"
    assert corpora_root(tmp_path / "flag", config_path=config).path == tmp_path / "flag"
    elsewhere = tmp_path / "cfg.yaml"  # a config outside a configs/ folder: relative to the repository
    elsewhere.write_text("corpora_dir: somewhere\n")
    monkeypatch.delenv(ENV)
    assert corpora_root(config_path=elsewhere).path == REPO_ROOT / "somewhere"
    with pytest.raises(FileNotFoundError, match="no corpus version at"):
        resolve_version(tmp_path / "nothing")
