"""Scale-out paths give the same corpus: a Ray build on a cluster of two
nodes equals a local build byte for byte, with shards written on both nodes;
inputs read from an S3-compatible server (moto on 127.0.0.1) equal the same
files read from disk; batch, partition and bucket sizes change nothing.

`.ci/run` starts a Ray head on 127.0.0.1 with 2 CPUs and exports
MINDCORPUS_RAY_ADDRESS; the test adds a second node (a worker `ray start`
on 127.0.0.1) to it, or starts a head and a worker of its own without it.
"""

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from pipeline.build import build
from pipeline.config import REPO_ROOT
from pipeline.manifest import without_run_facts

SAMPLE = REPO_ROOT / "data" / "sample"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    data = root / "data"
    data.mkdir()
    with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "web.jsonl").write_text("".join(lines[::25]), encoding="utf-8")
    shutil.copy(SAMPLE / "reference-debref.parquet", data / "reference.parquet")
    # the first 3 files of the code sample as .py files: a glob of plain-text files, on disk and in S3
    (data / "code").mkdir()
    with open(SAMPLE / "code-cpython.jsonl.zst", "rb") as fh:
        code = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    for rec in map(json.loads, code[:3]):
        name = rec["meta"]["path"].removeprefix("Lib/").replace("/", "__")
        (data / "code" / name).write_text(rec["text"], encoding="utf-8")

    def config(name: str, root_dir: str, executor: dict | None = None, storage: dict | None = None) -> str:
        src = {"root": root_dir, **({"storage_options": storage} if storage else {})}
        cfg = {
            "seed": 11,
            "sources": {
                "web": {"paths": ["web.jsonl"], **src},
                "reference": {"paths": ["reference.parquet"], **src},
                "code": {"paths": ["code/*.py"], "format": "text", "lang": "code", **src},
            },
            "executor": executor or {"num_workers": 2},
            "ingest": {"partition_max_docs": 60},
            "perplexity": {"reference_source": "reference"},
            "tokenize": {"vocab_size": 1000},
            # ~32 samples per shard: several shards, so both Ray nodes write some
            "output": {"seq_length": 128, "max_shard_bytes": 32 * 129 * 4},
        }
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    local = build("local", config("local", str(data)), root / "corpora", log=lambda m: None)
    return {"root": root, "data": data, "config": config, "local": local}


def _corpus_files(result) -> dict:
    m = result.manifest
    files = {k: v for k, v in m["files"].items() if k not in ("config.yaml",)}
    return {"shards": [s["sha256"] for s in m["shards"]], "files": files, "inputs": m["inputs"]}


def test_batch_and_partition_sizes_do_not_change_the_corpus(small):
    """Stages called on 1 KiB batches, 4 KiB partitions and tiny assembly
    buckets give the same shards and files as the defaults."""
    path = small["config"]("batched", str(small["data"]), {"num_workers": 2, "batch_bytes": 1024})
    cfg = yaml.safe_load(path.read_text())
    cfg["ingest"] = {"partition_bytes": 4096}
    cfg["output"].update(order_bucket_tokens=3000, shuffle_bucket_samples=8)
    path.write_text(yaml.safe_dump(cfg))
    result = build("batched", path, small["root"] / "corpora", log=lambda m: None)
    assert result.manifest["ingest"]["partitions"] > small["local"].manifest["ingest"]["partitions"]
    assert result.manifest["layout"]["order_buckets"] > 1
    assert _corpus_files(result) == _corpus_files(small["local"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster of two nodes on 127.0.0.1: the CI head (or a head of our
    own) plus one worker node, each a `ray start --block` process that a
    SIGTERM stops with everything it started."""
    ray = pytest.importorskip("ray")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    procs = []
    address = os.environ.get("MINDCORPUS_RAY_ADDRESS")
    if not address:
        port = _free_port()
        address = f"127.0.0.1:{port}"
        procs.append(subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false",
                                       *common], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(5)
    procs.append(subprocess.Popen([ray_bin, "start", f"--address={address}", *common], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        deadline = time.monotonic() + 60
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.monotonic() < deadline, "the second Ray node did not join in 60 s"
            time.sleep(1)
        yield address
    finally:
        ray.shutdown()
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_ray_build_on_two_nodes_equals_local_build(small, ray_cluster):
    import ray

    executor = {"kind": "ray", "address": ray_cluster}
    result = build("ray", small["config"]("ray", str(small["data"]), executor), small["root"] / "corpora",
                   log=lambda m: None)
    run = result.manifest["run"]
    assert run["executor"] == "ray"
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) >= 2
    # tasks, shard writers included, ran on both nodes
    assert len(set(run["task_nodes"]) & alive) >= 2, run["task_nodes"]
    assert len(set(run["shard_nodes"]) & alive) >= 2 and sum(run["shard_nodes"].values()) >= 4, run["shard_nodes"]
    a, b = without_run_facts(small["local"].manifest), without_run_facts(result.manifest)
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    for m in (a, b):
        m.pop("version"), m.pop("config_hash"), m["files"].pop("config.yaml")
    assert a == b


def test_s3_inputs_equal_disk_inputs(small):
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="corpus")
        for path in sorted(small["data"].rglob("*")):
            if path.is_file():
                s3.upload_file(str(path), "corpus", f"dev/{path.relative_to(small['data']).as_posix()}")
        storage = {"key": "test", "secret": "test", "client_kwargs": {"endpoint_url": endpoint,
                                                                      "region_name": "us-east-1"}}
        result = build("s3", small["config"]("s3", "s3://corpus/dev", storage=storage),
                       small["root"] / "corpora", log=lambda m: None)
    finally:
        server.stop()
    assert _corpus_files(result) == _corpus_files(small["local"])
    ids = pq.read_table(result.version_dir / "documents", columns=["id"])["id"].to_pylist()
    assert any(i.startswith("reference:reference.parquet:") for i in ids)
