"""Scale-out paths give the same corpus: a Ray build equals a local build byte
for byte, and inputs read from an S3-compatible server (moto on 127.0.0.1)
equal the same files read from disk.

`.ci/run` starts a Ray head on 127.0.0.1 with 2 CPUs and exports
MINDCORPUS_RAY_ADDRESS; without it the test starts a private local Ray.
"""

import io
import os
import shutil

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
    (data / "code").mkdir()
    for path in sorted((SAMPLE / "code").glob("*.py"))[:3]:
        shutil.copy(path, data / "code" / path.name)

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
            "output": {"seq_length": 128},
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


def test_ray_build_equals_local_build(small):
    ray = pytest.importorskip("ray")
    address = os.environ.get("MINDCORPUS_RAY_ADDRESS")
    executor = {"kind": "ray", "address": address}
    try:
        result = build("ray", small["config"]("ray", str(small["data"]), executor), small["root"] / "corpora",
                       log=lambda m: None)
    finally:
        ray.shutdown()
    assert result.manifest["run"]["executor"] == "ray"
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
