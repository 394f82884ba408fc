"""Runs that do not lose data: bad input quarantined with the right reason,
good records of the same files kept, accounting exact, --strict, object storage."""

import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _zstd_long_31(data: bytes) -> bytes:
    """As ``zstd --long=31`` writes a stream: the frame declares a 2 GiB window."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(data)
    return buf.getvalue()


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
    # 1,500 levels: json.loads raised RecursionError, which stopped the build
    "nested.jsonl": (jl(good(1), b'{"text": "deep", "a": ' + b"[" * 1500 + b"]" * 1500 + b"}", good(3)),
                     [(2, "read.too_deeply_nested")], 2),
    "plain.jsonl.gz": (jl(good(1), good(2)), [(1, "read.wrong_compression")], 0),
    "long31.jsonl.zst": (_zstd_long_31(jl(*[good(i) for i in range(300)])), [], 300),
    "binary.parquet": (_parquet(pa.table({"text": pa.array([GOOD.encode(), b"caf\xe9", f"{GOOD}!".encode()],
                                                           pa.binary())})), [(2, "read.invalid_utf8")], 2),
    "meta.parquet": (_parquet(pa.table({"text": [f"{GOOD} {i}" for i in range(4)],
                                        "meta": ['{"url": "u"}', "not json", '"a string"', None]})), [], 4),
}
# Files that give one file-level entry (manifest ingest.failed_files), in input order.
FAILED_FILES = {"corrupt.parquet": "read.unreadable_file", "cut.jsonl.gz": "read.truncated_file",
                "cut.jsonl.zst": "read.truncated_file", "empty.jsonl": "read.empty_file",
                "plain.jsonl.gz": "read.wrong_compression"}


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
    assert next(t for i, t in texts.items() if "nul.jsonl:2" in i) == "nul  inside"
    assert result.manifest["ingest"]["nul_removed"] == {"documents": 1, "characters": 1}
    metas = pq.read_table(sorted((root / "corpora" / ".work" / "b1" / "ingest").glob("part-*.parquet")),
                          columns=["file", "line", "meta"]).to_pylist()
    assert [json.loads(r["meta"]) for r in sorted(metas, key=lambda r: r["line"])
            if r["file"].endswith("meta.parquet")] == [
        {"url": "u"}, {"meta": "not json"}, {"meta": '"a string"'}, {"meta": None}]
    sep = next(t for i, t in texts.items() if "separators.jsonl:1" in i)
    assert "\u2028" in sep and "\u2029" in sep  # not record separators
    assert {i for i in texts if i.startswith("ids:")} == {"ids:a", "ids:b", "ids:c"}
    assert texts["ids:a"].endswith(" 0") and texts["ids:b"].endswith(" 1")  # first occurrence kept
    acc = result.manifest["accounting"]
    # Counted from the inputs: the planted bad records, one truncation entry per cut
    # file, the two repeated ids and the man pages over max_record_bytes (4096) are
    # quarantined; every record and every file-level entry is counted in.
    planted = sum(len(expected) for _, expected, _ in BAD_FILES.values())
    manuals = (data / "manuals.jsonl").read_bytes().split(b"\n")[:-1]
    too_large = sum(len(line) > 4096 for line in manuals)
    assert (planted, too_large, len(manuals)) == (14, 6, 12)
    assert acc["quarantined"] == planted + 2 + 2 + too_large
    assert per_file["ids.jsonl"] == 3 and per_file["manuals.jsonl"] == len(manuals) - too_large
    assert acc["documents_in"] == (sum(n_good for _, _, n_good in BAD_FILES.values()) + planted
                                   + per_file["cut.jsonl.zst"] + 1 + per_file["cut.jsonl.gz"] + 1 + 5 + len(manuals))
    assert acc["documents_in"] == ingest.num_rows + acc["quarantined"]


def test_files_not_read_whole_are_in_the_manifest_the_summary_table_and_the_report(bad_build):
    from rich.console import Console

    from pipeline.cli import _tail, summary_table

    root, data, result = bad_build
    failed = result.manifest["ingest"]["failed_files"]
    assert [(Path(f["file"]).name, f["reason"]) for f in failed] == list(FAILED_FILES.items())
    ingest = pq.read_table(sorted((root / "corpora" / ".work" / "b1" / "ingest").glob("part-*.parquet")),
                           columns=["file"])["file"].to_pylist()
    for f in failed:  # the records read before the failure are kept and counted
        assert f["source"] == "bad" and f["records_read"] == ingest.count(f["file"]), f
    assert failed[0]["detail"].startswith("ArrowInvalid: ")
    assert failed[4]["detail"] == "WrongCompression: named .gz but not compressed (starts b'{\"te')"
    console = Console(record=True, width=110)
    console.print(summary_table(result.manifest))
    shown = console.export_text()
    words = " ".join(shown.split())
    for f in failed:  # a row under ingest, and the file in full with its cause in the caption
        assert f"{f['reason']} {_tail(f['file'], 32)} │ │ {f['records_read']:,} │" in words, f
        assert f"{f['file']}: {f['reason']} after {f['records_read']:,} record(s) ({f['detail']})" in words, f
    assert "5 input file(s) not read whole" in words
    page = (result.version_dir / "report.html").read_text(encoding="utf-8")
    assert "input files not read whole (5)" in page
    assert all(f["file"] in page for f in failed)
    events = [json.loads(x) for x in (result.version_dir / "run.log.jsonl").read_text().splitlines()]
    assert [(Path(e["file"]).name, e["reason"]) for e in events if e["event"] == "input_not_read"] == list(
        FAILED_FILES.items())


def test_strict_makes_quarantine_fatal(bad_build):
    root, _, _ = bad_build
    with pytest.raises(BuildError, match=r"--strict: \d+ input record\(s\) quarantined .*; 5 file\(s\) not "
                                         r"read whole: \S*corrupt.parquet \(read.unreadable_file: ArrowInvalid"):
        build("b2", root / "bad.yaml", root / "corpora", log=lambda m: None, strict=True)
    assert not (root / "corpora" / "b2").exists()


def test_misspelled_parquet_text_field_is_a_config_error_before_any_work(tmp_path):
    from pipeline.config import ConfigError

    pq.write_table(pa.table({"text": ["a"], "lang": ["en"], "meta": ["{}"]}), tmp_path / "ref.parquet")
    (tmp_path / "good.jsonl").write_bytes(jl(good(1)))
    cfg = {"sources": {"web": {"paths": [str(tmp_path / "good.jsonl")]},
                       "ref": {"paths": [str(tmp_path / "ref.parquet")], "text_field": "txt"}},
           "perplexity": {"enabled": False, "reference_source": "web"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as err:
        build("t1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    assert str(err.value) == (f"sources.ref: {tmp_path / 'ref.parquet'}: text_field 'txt' is not a column "
                              "(columns: text (string), lang (string), meta (string))")
    assert not (tmp_path / "corpora").exists()  # nothing was done


def test_run_log_and_heartbeat(bad_build):
    root, _, result = bad_build
    events = [json.loads(x) for x in (result.version_dir / "run.log.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "build_start" and kinds[-1] == "publish"
    assert "ingest_done" in kinds and kinds.count("stage_done") == 6  # perplexity disabled, pii on
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


# --------------------------------------------------------------------------- tokenizer: runs, encoder errors, id width

def _plain_build_config(data: Path, sources: dict, **tokenize) -> dict:
    """Only the stages a tokenizer test needs (no language ID, heuristics,
    perplexity or dedup, which would judge the hand-made documents)."""
    return {
        "sources": {name: {"paths": [str(data / f"{name}.jsonl")]} for name in sources},
        "executor": {"num_workers": 1},
        "langid": {"enabled": False},
        "heuristics": {"enabled": False},
        "perplexity": {"enabled": False, "reference_source": next(iter(sources))},
        "dedup": {"enabled": False},
        "tokenize": {"vocab_size": 600, **tokenize},
        "output": {"seq_length": 128},
    }


def _write_sources(root: Path, sources: dict[str, list[str]]) -> Path:
    data = root / "data"
    data.mkdir()
    for name, texts in sources.items():
        (data / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts),
                                            encoding="utf-8")
    return data


RUNS = ["Spaces follow." + " " * 1_000_000 + "The end.", "-" * 1_000_000, "7" * 1_000_000,
        "Lines:" + "\n" * 1_000_000 + "done"]


def test_million_character_runs_are_tokenized_with_capped_pretokens_and_the_build_publishes(tmp_path):
    from tokenizers import Tokenizer

    from stages.tokenize import is_heldout

    sources = {"good": [json.loads(good(i))["text"] for i in range(200)], "runs": RUNS}
    data = _write_sources(tmp_path, sources)
    runs = {f"runs:{data / 'runs.jsonl'}:{line}": text for line, text in enumerate(RUNS, 1)}
    (tmp_path / "runs.yaml").write_text(yaml.safe_dump(_plain_build_config(data, sources)))
    result = build("r1", tmp_path / "runs.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    assert (result.version_dir / "manifest.json").exists()
    acc = m["accounting"]
    # 200 + 4 documents in; no stage that judges text runs and tokenize drops nothing
    assert (acc["documents_in"], acc["kept"], acc["dropped"], acc["quarantined"]) == (204, 204, 0, 0)
    assert m["stages"]["tokenize"]["totals"]["dropped"] == {}
    # Training finished on the runs it drew (every one not held out).
    trained_runs = sum(len(t) for i, t in runs.items() if not is_heldout(i, m["seed"], 0.02))
    assert trained_runs >= 3_000_000
    assert m["tokenizer"]["training_chars_by_source"]["runs"] == trained_runs
    # Every run is cut into pre-tokens of at most 64 characters (65 with a leading space).
    tok = Tokenizer.from_file(str(result.version_dir / "tokenizer.json"))
    tok.encode_special_tokens = True
    spaces = tok.pre_tokenizer.pre_tokenize_str(RUNS[0])
    assert [len(p) for p, _ in spaces] == [6, 7, 1] + [64] * 15_624 + [63, 4, 4, 1]
    for text in RUNS:
        assert max(len(p) for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)) <= 65
    docs = pq.read_table(result.version_dir / "documents",
                         columns=["id", "text", "tokenize_num_tokens", "tokenize_encoder_error"]).to_pylist()
    by_id = {d["id"]: d for d in docs}
    for doc_id, text in runs.items():
        doc = by_id[doc_id]
        assert doc["text"] == text and doc["tokenize_encoder_error"] is None
        assert doc["tokenize_num_tokens"] == len(tok.encode(text, add_special_tokens=False).ids) + 1
    assert by_id[f"runs:{data / 'runs.jsonl'}:3"]["tokenize_num_tokens"] == 1_000_001  # one token per digit + EOS


def _wide_tokenizer(path: Path) -> Path:
    """A real byte-level BPE of fewer than 1,000 entries whose merged tokens
    have ids from 70,000 (the trained ids + 70,000: same merges, same order)."""
    from stages.tokenize import Config, train_bpe

    tokenizer = train_bpe([json.loads(good(i))["text"] for i in range(50)], Config(vocab_size=600))
    spec = json.loads(tokenizer.to_str())
    spec["model"]["vocab"] = {t: (i + 70_000 if i >= 259 else i) for t, i in spec["model"]["vocab"].items()}
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_ids_above_uint16_with_a_small_vocabulary_round_trip_through_the_shards(tmp_path):
    from tokenizers import Tokenizer

    from pipeline.loader import create_dataset

    texts = [json.loads(good(i))["text"] for i in range(60)]
    data = _write_sources(tmp_path, {"good": texts})
    path = _wide_tokenizer(tmp_path / "wide.json")
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(_plain_build_config(data, {"good": texts},
                                                                           tokenizer_path=str(path))))
    result = build("w1", tmp_path / "wide.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    tok = Tokenizer.from_file(str(result.version_dir / "tokenizer.json"))
    assert m["tokenizer"]["vocab_size"] == tok.get_vocab_size() < 1000
    assert m["tokenizer"]["max_token_id"] == max(tok.get_vocab().values()) >= 70_259
    assert m["tokenizer"]["token_id_dtype"] == "int32"
    ds = create_dataset(result.version_dir, global_batch=1, num_parallel_workers=1)
    samples = np.concatenate([b[0] for b in ds.create_tuple_iterator(output_numpy=True)])
    assert samples.shape == (m["num_samples"], 129) and samples.max() >= 70_259
    # Each document's tokens, put back together from the lineage, are its exact encoding.
    eos = m["tokenizer"]["special_token_ids"]["eos"]
    pieces: dict[tuple, list] = {}
    for seg in pq.read_table(result.version_dir / "lineage").to_pylist():
        ids = samples[seg["sample_index"]][seg["sample_token_start"]:seg["sample_token_end"]]
        pieces.setdefault((seg["doc_id"], seg["repeat"]), []).append((seg["doc_token_start"], ids))
    by_id = {f"good:{data / 'good.jsonl'}:{i + 1}": t for i, t in enumerate(texts)}
    complete = 0
    for (doc_id, _), parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        ids = np.concatenate([p[1] for p in parts]).tolist()
        if parts[0][0] != 0 or ids[-1] != eos:
            continue  # the document's start or end is in the packing's unwritten tail
        assert ids == tok.encode(by_id[doc_id], add_special_tokens=False).ids + [eos]
        complete += 1
    assert complete >= 40
def _cli(args: list[str], drop_root: bool) -> subprocess.CompletedProcess:
    """``python -m pipeline ...`` in a child; as root, without the capabilities
    that let root read any file (so mode 000 means unreadable, as for a user)."""
    cmd = [sys.executable, "-m", "pipeline", *args]
    if drop_root:
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *cmd]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)


def test_unreadable_input_file_is_quarantined_in_one_line_and_strict_fails_on_it(tmp_path):
    """A mode-000 input: the build publishes the other file's documents, says
    in one line which file and why, lists it in the summary table; --strict
    stops with one error line naming it. No traceback either way."""
    root = os.geteuid() == 0
    if root and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: mode 000 does not stop root from reading")
    data = tmp_path / "data"
    data.mkdir()
    with open(SAMPLE / "manuals-manpages.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "manuals.jsonl").write_text("".join(lines[::30]), encoding="utf-8")
    (data / "locked.jsonl").write_text("".join(lines[1::30]), encoding="utf-8")
    (data / "locked.jsonl").chmod(0)
    cfg = {"sources": {"manuals": {"paths": [str(data / "*.jsonl")]}}, "executor": {"num_workers": 1},
           "perplexity": {"enabled": False, "reference_source": "manuals"}, "tokenize": {"vocab_size": 600},
           "output": {"seq_length": 64}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    common = ["--config", str(tmp_path / "c.yaml"), "--corpora-root", str(tmp_path / "corpora")]
    try:
        done = _cli(["build", "--version", "m1", *common], root)
        strict = _cli(["build", "--version", "m2", "--strict", *common], root)
    finally:
        (data / "locked.jsonl").chmod(0o644)
    locked = str(data / "locked.jsonl")
    cause = f"PermissionError: [Errno 13] Permission denied: '{locked}'"
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert [x for x in done.stderr.splitlines() if "locked.jsonl" in x] == [
        f"[ingest] {locked}: read.unreadable_file after 0 record(s): {cause}"]
    assert f"{cause})" in " ".join(done.stdout.split())  # the summary table's caption
    manifest = json.loads((tmp_path / "corpora" / "m1" / "manifest.json").read_text())
    assert manifest["ingest"]["failed_files"] == [{"source": "manuals", "file": locked, "reason": "read.unreadable_file",
                                                   "detail": cause, "records_read": 0}]
    assert manifest["quarantine"] == {"read.unreadable_file": 1}
    acc = manifest["accounting"]
    records = (data / "manuals.jsonl").read_bytes().count(b"\n")  # the readable file's records
    assert manifest["ingest"]["per_source"]["manuals"]["documents_in"] == records == len(lines[::30])
    assert acc["documents_in"] == records + 1 and acc["quarantined"] == 1  # + the locked file's entry
    assert {i["file"]: i["sha256"] for i in manifest["inputs"]}[locked] is None
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert strict.stderr.splitlines()[-1] == (
        "error: --strict: 1 input record(s) quarantined ({'read.unreadable_file': 1}); "
        f"1 file(s) not read whole: {locked} (read.unreadable_file: {cause})")
    assert not (tmp_path / "corpora" / "m2").exists()


def test_a_file_that_could_not_be_read_is_read_again_on_a_re_run(tmp_path):
    """No completion marker after ``read.unreadable_file``: once the file can
    be read (same size and mtime: a permission fixed), the re-run reads it."""
    from pipeline.build import ingest_file
    from pipeline.readers import input_identity

    path = tmp_path / "in.jsonl"
    path.mkdir()  # cannot be opened as a file: IsADirectoryError, an OSError like PermissionError
    out = tmp_path / "ingest"
    out.mkdir()
    task = {"source": "s", "path": str(path), "file": "in.jsonl", "identity": {"size": 0, "mtime_ns": 1},
            "format": "jsonl", "text_field": "text", "text_unit": "file", "lang": None, "id_field": None,
            "max_bytes": 1 << 20, "partition_bytes": 1 << 20, "partition_max_docs": None,
            "storage_options": {}, "out_dir": str(out), "cache_dir": str(tmp_path / "cache"), "index": 0}
    first = ingest_file(task)
    assert (first["documents"], first["quarantine"], first["sha256"]) == (0, {"read.unreadable_file": 1}, None)
    assert first["file_failure"]["detail"].startswith("IsADirectoryError: [Errno 21] Is a directory")
    assert not (out / "file-00000.json").exists()
    path.rmdir()
    path.write_bytes(jl(good(1), good(2)))
    second = ingest_file({**task, "identity": input_identity(path)})
    assert (second["documents"], second["quarantine"], second["file_failure"]) == (2, {}, None)
    assert (out / "file-00000.json").exists()
