"""The bundled sample (data/sample, see its README): the code source is data.

The CPython files of the ``code`` source are one JSONL file with their
provenance, read by the normal JSONL reader; the tree's only ``.py`` files are
the project's own.
"""

import hashlib
import json
import sys
import sysconfig
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT, load_config
from pipeline.readers import Record, detect_format, read_file, resolve_paths

SAMPLE = REPO_ROOT / "data" / "sample"
CODE = SAMPLE / "code-cpython.jsonl.zst"


def _code_records() -> list[Record]:
    return list(read_file(CODE, "data/sample/code-cpython.jsonl.zst", "auto", "text", "file", 1 << 24))


def test_the_default_config_reads_the_code_sample_as_one_jsonl_file():
    cfg = load_config(REPO_ROOT / "configs" / "default.yaml")
    code = cfg.sources["code"]
    assert resolve_paths(code.paths, REPO_ROOT) == [str(CODE)]
    assert code.format == "auto" and detect_format(CODE) == "jsonl"
    assert code.lang == "code"


def test_the_data_directory_holds_no_python_source():
    assert sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "data").rglob("*.py")) == []


def test_code_sample_records_carry_their_provenance():
    records = _code_records()
    assert all(isinstance(r, Record) for r in records)
    # 50 files, 546,012 characters: the code source of the baseline build
    # (manifest stages.*.per_source.code), when it was read from data/sample/code/*.py.
    assert [r.line for r in records] == list(range(1, 51))
    assert sum(len(r.text) for r in records) == 546_012
    assert sum(r.nul_chars for r in records) == 0
    metas = [json.loads(r.meta)["meta"] for r in records]
    paths = [m["path"] for m in metas]
    assert paths[0] == "Lib/_compat_pickle.py" and paths[-1] == "Lib/xdrlib.py"
    assert paths == sorted(set(paths)) and all(p.startswith("Lib/") and p.endswith(".py") for p in paths)
    for record, meta in zip(records, metas):
        assert {k: meta[k] for k in ("package", "version", "licence", "language", "label_lang")} == {
            "package": "cpython", "version": "3.11.7", "licence": "PSF-2.0", "language": "python",
            "label_lang": "code"}, meta["path"]
        assert meta["orig_id"] == f"code:cpython-3.11.7:{meta['path']}"
        assert meta["sha256"] == hashlib.sha256(record.text.encode("utf-8")).hexdigest(), meta["path"]
    by_path = dict(zip(paths, metas))
    # sha256sum of the former data/sample/code/asyncio__queues.py (git show 8282195:...)
    assert by_path["Lib/asyncio/queues.py"]["sha256"] == (
        "8f020744ebd1f557dcb051a1530b504447660df906c2127a94bbcc8450ea7ef9")


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7) or sys.implementation.name != "cpython",
                    reason="needs CPython 3.11.7's own Lib/ to compare with")
def test_code_sample_texts_are_the_cpython_3_11_7_files_byte_for_byte():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for record in _code_records():
        meta = json.loads(record.meta)["meta"]
        original = (stdlib / meta["path"].removeprefix("Lib/")).read_bytes()
        assert record.text.encode("utf-8") == original, meta["path"]
        assert hashlib.sha256(original).hexdigest() == meta["sha256"]
