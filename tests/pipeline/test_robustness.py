"""Runs that do not lose data: bad input quarantined with the right reason,
good records of the same files kept, accounting exact, --strict, object storage."""

import gzip
import io
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from pipeline.assemble import BuildError
from pipeline.build import build
from pipeline.config import REPO_ROOT

SAMPLE = REPO_ROOT / "data" / "sample"
GOOD = "这是一段用于测试的中文文本，内容完整，标点齐全。我们希望它被保留下来，并且不会被任何规则误删。"
rng = random.Random(3)


def good(i: int) -> bytes:
    words = " ".join(rng.choice(["river", "stone", "light", "morning", "garden", "window", "letter"])
                     for _ in range(40))
    return json.dumps({"text": f"Record {i}. The {words}. It ends here.", "n": i}).encode()


def jl(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n"


def _big_jsonl() -> bytes:
    return jl(*[good(i) for i in range(4000)])


BAD_FILES = {
    # name: (bytes, expected quarantine [(line, reason)], good records in the file)
    "utf8.jsonl": (jl(good(1), b'{"text": "caf\xe9 au lait"}', good(2)), [(2, "read.invalid_utf8")], 2),
    "gbk.jsonl": (jl(good(1), '{"text": "中文编码"}'.encode("gbk"), good(2)), [(2, "read.legacy_encoding")], 2),
    "surrogate.jsonl": (jl(good(1), b'{"text": "bad \\udc80 half"}'), [(2, "read.lone_surrogate")], 1),
    "bom_crlf.jsonl": (b"\xef\xbb\xbf" + good(1) + b"\r\n" + good(2) + b"\r\n", [], 2),
    "separators.jsonl": (jl(json.dumps({"text": GOOD + "\u2028" + GOOD + "\u2029end"}).encode(), good(2)), [], 2),
    # a NUL is a property of the text: removed and counted (manifest ingest.nul_removed), not quarantined
    "nul.jsonl": (jl(good(1), b'{"text": "nul \\u0000 inside"}'), [], 2),
    "notjson.jsonl": (jl(b"this is not json", b"[1, 2, 3]", good(3)),
                      [(1, "read.invalid_json"), (2, "read.not_object")], 1),
    "fields.jsonl": (jl(b'{"body": "x"}', b'{"text": ""}', b'{"text": 42}', good(4)),
                     [(1, "read.missing_text"), (2, "read.empty_text"), (3, "read.text_not_string")], 1),
    "long.jsonl": (jl(good(1), json.dumps({"text": "long " * 3000}).encode(), good(3)),
                   [(2, "read.record_too_large")], 2),
    "empty.jsonl": (b"", [(0, "read.empty_file")], 0),
    "corrupt.parquet": (b"PAR1 this is not a parquet file PAR1", [(1, "read.unreadable_file")], 0),
}


@pytest.fixture(scope="module")
def bad_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    data = root / "data"
    data.mkdir()
    for name, (raw, _, _) in BAD_FILES.items():
        (data / name).write_bytes(raw)
    big = _big_jsonl()
    z = zstandard.ZstdCompressor().compress(big)
    (data / "cut.jsonl.zst").write_bytes(z[: len(z) * 2 // 3])
    g = gzip.compress(big)
    (data / "cut.jsonl.gz").write_bytes(g[: len(g) * 2 // 3])
    (data / "ids.jsonl").write_text("\n".join(json.dumps({"doc": d, "text": f"{GOOD} {i}"})
                                              for i, d in enumerate(["a", "b", "a", "c", "b"])) + "\n")
    with open(SAMPLE / "manuals-manpages.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "manuals.jsonl").write_text("".join(lines[::30]), encoding="utf-8")
    cfg = {
        "sources": {
            "bad": {"paths": [str(data / n) for n in BAD_FILES] + [str(data / "cut.jsonl.zst"),
                                                                    str(data / "cut.jsonl.gz")]},
            "ids": {"paths": [str(data / "ids.jsonl")], "id_field": "doc"},
            "manuals": {"paths": [str(data / "manuals.jsonl")]},
        },
        "executor": {"num_workers": 1},
        "ingest": {"max_record_bytes": 4096},
        "perplexity": {"enabled": False, "reference_source": "manuals"},
        "tokenize": {"vocab_size": 600},
        "output": {"seq_length": 64},
    }
    (root / "bad.yaml").write_text(yaml.safe_dump(cfg))
    result = build("b1", root / "bad.yaml", root / "corpora", log=lambda m: None)
    return root, data, result


def test_every_bad_record_is_quarantined_with_its_reason(bad_build):
    root, data, result = bad_build
    q = [json.loads(x) for x in (result.version_dir / "quarantine.jsonl").read_text().splitlines()]
    by_file: dict[str, list] = {}
    for entry in q:
        by_file.setdefault(Path(entry["file"]).name, []).append((entry["line"], entry["reason"]))
    for name, (_, expected, _) in BAD_FILES.items():
        assert sorted(by_file.get(name, [])) == sorted(expected), name
    for name in ("cut.jsonl.zst", "cut.jsonl.gz"):
        assert [r for _, r in by_file[name]] == ["read.truncated_file"], name
    assert sorted(by_file["ids.jsonl"]) == [(3, "read.duplicate_id"), (5, "read.duplicate_id")]
    assert result.manifest["accounting"]["quarantined"] == len(q)
    assert sum(result.manifest["quarantine"].values()) == len(q)
    # byte offsets point at the bad line
    entry = next(e for e in q if Path(e["file"]).name == "utf8.jsonl")
    raw = (data / "utf8.jsonl").read_bytes()
    assert raw[entry["byte_offset"]:].startswith(b'{"text": "caf\xe9')


def test_every_good_record_of_the_same_files_is_kept_and_accounting_holds(bad_build):
    root, data, result = bad_build
    ingest = pa.concat_tables([pq.read_table(p, columns=["id", "file", "line", "text"])
                               for p in sorted((root / "corpora" / ".work" / "b1" / "ingest").glob("part-*.parquet"))])
    per_file: dict[str, int] = {}
    for f in ingest["file"].to_pylist():
        per_file[Path(f).name] = per_file.get(Path(f).name, 0) + 1
    for name, (_, _, n_good) in BAD_FILES.items():
        assert per_file.get(name, 0) == n_good, name
    assert 0 < per_file["cut.jsonl.zst"] < 4000 and 0 < per_file["cut.jsonl.gz"] < 4000
    texts = dict(zip(ingest["id"].to_pylist(), ingest["text"].to_pylist()))
    sep = next(t for i, t in texts.items() if "separators.jsonl:1" in i)
    assert "\u2028" in sep and "\u2029" in sep  # not record separators
    assert {i for i in texts if i.startswith("ids:")} == {"ids:a", "ids:b", "ids:c"}
    assert texts["ids:a"].endswith(" 0") and texts["ids:b"].endswith(" 1")  # first occurrence kept
    acc = result.manifest["accounting"]
    assert acc["documents_in"] == acc["kept"] + acc["dropped"] + acc["quarantined"]
    assert acc["documents_in"] == ingest.num_rows + acc["quarantined"]


def test_strict_makes_quarantine_fatal(bad_build):
    root, _, _ = bad_build
    with pytest.raises(BuildError, match=r"--strict: \d+ input record\(s\) quarantined"):
        build("b2", root / "bad.yaml", root / "corpora", log=lambda m: None, strict=True)
    assert not (root / "corpora" / "b2").exists()


def test_run_log_and_heartbeat(bad_build):
    root, _, result = bad_build
    events = [json.loads(x) for x in (result.version_dir / "run.log.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "build_start" and kinds[-1] == "publish"
    assert "ingest_done" in kinds and kinds.count("stage_done") == 5  # perplexity disabled
    assert all(e["ts"].endswith("+00:00") for e in events)
    beat = json.loads((root / "corpora" / ".work" / "b1" / "heartbeat.json").read_text())
    assert beat["stage"] == "assemble-index" and beat["done"] == beat["total"]  # the last assembly phase
    assert "run.log.jsonl" not in result.manifest["files"]  # a run fact, not part of the corpus


def test_resume_after_an_input_is_read_again_redoes_the_duplicate_id_pass(bad_build, monkeypatch):
    """A build with an id_field source dies in langid; the ids file is touched
    (read again on resume, its repeated ids back in its partition): ingest
    starts over, so the resumed build quarantines the same repeats and equals
    the clean build."""
    import os

    import stages.langid

    from pipeline.manifest import without_run_facts

    root, data, result = bad_build
    real = stages.langid.LangIdStage.process

    def crash(self, table):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(stages.langid.LangIdStage, "process", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        build("b3", root / "bad.yaml", root / "corpora", log=lambda m: None)
    monkeypatch.setattr(stages.langid.LangIdStage, "process", real)
    st = (data / "ids.jsonl").stat()
    os.utime(data / "ids.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    resumed = build("b3", root / "bad.yaml", root / "corpora", log=lambda m: None)
    a, b = without_run_facts(result.manifest), without_run_facts(resumed.manifest)
    a.pop("version"), b.pop("version")
    assert a == b


def test_files_named_by_a_stage_config_are_in_its_fingerprint(tmp_path):
    from pipeline.build import referenced_files

    model = tmp_path / "tok.json"
    model.write_text("one")
    config = {"tokenizer_path": str(model), "models": {"en": str(tmp_path / "missing.bin")}, "x": "a.b"}
    first = referenced_files(config, tmp_path / "cache")
    assert [p for p, _ in first] == [str(model)]
    model.write_text("two, longer")
    assert referenced_files(config, tmp_path / "cache") != first
