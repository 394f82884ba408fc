"""pipeline/versions.py and the `diff` / `verify` commands: versions side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from test_lineage import REPEATS, TEXTS, build_tiny_version
from typer.testing import CliRunner

from common.io import sha256_file
from pipeline.cli import app
from pipeline.manifest import write_manifest
from pipeline.versions import (
    diff_versions,
    format_diff,
    verify_version,
)


def _publish(root: Path, name: str, texts, repeats, config: dict, lines=None) -> Path:
    """A tiny version with config.yaml and the manifest's `files` hashes, as a build writes them."""
    vdir, _, _ = build_tiny_version(root, name, texts=texts, repeats=repeats, lines=lines)
    (vdir / "config.yaml").write_text(yaml.safe_dump(config))
    manifest = json.loads((vdir / "manifest.json").read_text())
    manifest["files"] = {p.relative_to(vdir).as_posix(): sha256_file(p) for p in sorted(vdir.rglob("*"))
                         if p.is_file() and p.name != "manifest.json" and not p.relative_to(vdir).as_posix().startswith("shards/")}
    manifest["config_hash"] = name
    write_manifest(manifest, vdir)  # and manifest.sha256
    return vdir


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    a = _publish(root, "v1", TEXTS, REPEATS, {"seed": 3, "output": {"seq_length": 16}, "mixture": {"token_budget": None}})
    # v2: drops the German web document, adds a Chinese book, repeats code once more
    texts = [t for t in TEXTS if t[1] != "Ein kurzer Satz."] + [("books", "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")]
    repeats = [r for t, r in zip(TEXTS, REPEATS) if t[1] != "Ein kurzer Satz."] + [1]
    repeats[4] += 1
    lines = [1, 2, 4, 5, 6, 7, 8]  # the same ids as v1 for the documents it keeps
    b = _publish(root, "v2", texts, repeats, {"seed": 3, "output": {"seq_length": 16}, "mixture": {"token_budget": 5000}},
                 lines=lines)
    return root, a, b


def test_verify_passes_then_names_the_shard_with_a_flipped_byte(versions, tmp_path):
    _, a, _ = versions
    result = verify_version(a)
    assert result["ok"] and result["checked_shards"] >= 2 and result["checked_files"] >= 3
    import shutil

    copy = tmp_path / "v1"
    shutil.copytree(a, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    bad = manifest["shards"][1]["name"]
    data = bytearray((copy / bad).read_bytes())
    data[len(data) // 2] ^= 0x40
    (copy / bad).write_bytes(bytes(data))
    result = verify_version(copy)
    assert not result["ok"] and result["bad_shards"] == [bad] and result["bad_files"] == []

    res = CliRunner().invoke(app, ["verify", str(copy)])
    assert res.exit_code == 1 and f"BAD shard {bad}" in res.output
    res = CliRunner().invoke(app, ["verify", str(a)])
    assert res.exit_code == 0 and res.output.startswith("ok:")

    (copy / "lineage" / "part-00000.parquet").write_bytes(b"not parquet")
    assert verify_version(copy)["bad_files"] == ["lineage/part-00000.parquet"]


def test_diff_config_counts_and_documents_per_source(versions):
    _, a, b = versions
    diff = diff_versions(a, b)
    assert diff["config"] == {"mixture.token_budget": [None, 5000]}
    assert not diff["same_config"] and not diff["same_shards"]
    assert diff["counts"]["num_samples"][0] != diff["counts"]["num_samples"][1]
    docs = diff["documents"]
    assert docs["web"] == {"a": 3, "b": 2, "added": 0, "removed": 1, "added_examples": [],
                           "removed_examples": ["web:web.jsonl:3"]}
    assert (docs["books"]["a"], docs["books"]["b"], docs["books"]["added"], docs["books"]["removed"]) == (2, 3, 1, 0)
    assert docs["books"]["added_examples"] == ["books:books.jsonl:8"]
    assert docs["code"]["added"] == docs["code"]["removed"] == 0
    text = format_diff(diff)
    assert "mixture.token_budget: None -> 5000" in text and "web: 3 -> 2 (+0 added, -1 removed)" in text

    same = diff_versions(a, a)
    assert same["config"] == {} and same["counts"] == {} and same["same_shards"]

    res = CliRunner().invoke(app, ["diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["documents"]["web"]["removed"] == 1


def test_diff_lines_up_versions_split_into_different_numbers_of_parts(versions, tmp_path):
    """v2 with documents/ split into 4 parts by the layout's id hash, against
    v1's single part: the same added/removed documents as the one-part diff."""
    _, a, b = versions
    texts = [t for t in TEXTS if t[1] != "Ein kurzer Satz."] + [("books", "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")]
    repeats = [r for t, r in zip(TEXTS, REPEATS) if t[1] != "Ein kurzer Satz."] + [1]
    repeats[4] += 1
    many, _, _ = build_tiny_version(tmp_path, "v2many", texts=texts, repeats=repeats,
                                    lines=[1, 2, 4, 5, 6, 7, 8], partitions=3)
    import pyarrow.parquet as pq

    from pipeline import layout

    # force a split: rewrite documents/ into 4 parts by the layout's id hash
    table = pq.read_table(many / "documents")
    parts = layout.id_parts(table["id"].to_pylist(), 4)
    for old in (many / "documents").glob("*.parquet"):
        old.unlink()
    for j in range(4):
        pq.write_table(table.filter(pa.array(parts == j)).sort_by("id"), many / "documents" / layout.part_name(j))
    manifest = json.loads((many / "manifest.json").read_text())
    manifest["layout"]["documents_parts"] = 4
    (many / "manifest.json").write_text(json.dumps(manifest))
    assert diff_versions(a, many)["documents"] == diff_versions(a, b)["documents"]
    assert diff_versions(many, a)["documents"] == diff_versions(b, a)["documents"]


def test_verify_fails_on_an_edited_manifest_and_names_a_corrupt_one_in_one_line(versions, tmp_path):
    import shutil

    _, a, _ = versions
    copy = tmp_path / "v1"
    shutil.copytree(a, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    # an edited field, the rest of the manifest (and every shard) untouched
    (copy / "manifest.json").write_text(json.dumps({**manifest, "num_samples": manifest["num_samples"] + 1}))
    result = verify_version(copy)
    assert not result["ok"] and result["bad_shards"] == [] and result["bad_files"] == []
    assert result["problems"] == [{"kind": "manifest", "file": "manifest.json",
                                   "reason": "SHA-256 differs from manifest.sha256 (edited or corrupt)"}]
    res = CliRunner().invoke(app, ["verify", str(copy)])
    assert res.exit_code == 1
    assert res.output == "BAD manifest manifest.json: SHA-256 differs from manifest.sha256 (edited or corrupt)\n"
    for cmd in (["inspect", str(copy)], ["diff", str(copy), str(a)], ["report", str(copy), "--out",
                                                                        str(tmp_path / "r.html")]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2, (cmd, res.output)
        assert res.output == f"error: {copy}/manifest.json: SHA-256 differs from manifest.sha256 (edited or corrupt)\n"

    # a flipped byte that breaks the JSON: one line naming the file, no traceback
    write_manifest(manifest, copy)
    data = bytearray((copy / "manifest.json").read_bytes())
    assert verify_version(copy)["ok"]
    data[data.index(b'"shards"') + 1] ^= 0x80
    (copy / "manifest.json").write_bytes(bytes(data))
    res = CliRunner().invoke(app, ["verify", str(copy)])
    assert res.exit_code == 1 and (res.exception is None or isinstance(res.exception, SystemExit))
    assert res.output.count("\n") == 1 and "Traceback" not in res.output
    assert res.output.startswith("BAD manifest manifest.json: not UTF-8 (byte ")
    assert res.output.endswith("SHA-256 differs from manifest.sha256 (edited or corrupt)\n")
    # the other commands say the same in one line
    for cmd in (["inspect", str(copy)], ["diff", str(copy), str(a)], ["lineage", str(copy), "--step", "0",
                                                                        "--global-batch", "2"]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and res.output.count("\n") == 1, (cmd, res.output)
        assert "manifest.json: not UTF-8" in res.output or "manifest.json: SHA-256 differs" in res.output, res.output

    # no digest at all: verify cannot vouch for the manifest
    write_manifest(manifest, copy)
    (copy / "manifest.sha256").unlink()
    assert verify_version(copy)["problems"] == [{"kind": "manifest", "file": "manifest.sha256",
                                                 "reason": "missing, so manifest.json cannot be checked"}]
    # a manifest that parses but names a shard outside the version: reported, not followed
    write_manifest({**manifest, "shards": [{**manifest["shards"][0], "name": "../../etc/passwd"}]}, copy)
    assert verify_version(copy)["problems"] == [{"kind": "manifest", "file": "manifest.json", "reason":
                                                 "shard entry '../../etc/passwd': no usable name or sha256"}]


def test_long_config_changes_show_what_changed():
    from pipeline.versions import _change

    allow = ["zh", "en", "ja", "de", "fr", "es", "ru", "code"]
    assert _change(allow, allow + ["nb"]) == "+['nb']"                     # not two identical prefixes
    assert _change(allow, allow[1:] + ["nb"]) == "+['nb'] -['zh']"
    assert _change(allow, allow[::-1]).endswith("(same items, reordered)")
    why = "no document of reference source 'reference' was detected as no (langid labels the reference)"
    assert _change(why, why.replace("as no", "as nb")) == "…ected as no (langid labels the referen… -> …ected as nb (langid labels the referen…"
    assert _change(None, 5000) == "None -> 5000" and _change(0.5, 0.25) == "0.5000 -> 0.2500"
