"""Versions side by side: ``diff`` and ``verify`` logic for the CLI.

* :func:`diff_versions` - what changed between two versions: the resolved
  config (key by key), the counts (samples, tokens, accounting, per-stage kept,
  drops by reason, per-source mixture) and the documents added and removed per
  source (kept documents, by id, from each version's ``documents/``, one
  part pair at a time).
* :func:`verify_version` - check ``manifest.json`` against its digest
  ``manifest.sha256``, then re-hash every shard (``.mindrecord`` and ``.db``)
  and every other file the manifest lists; names each one that differs, and
  never raises on a corrupt file.

Reads only the version directories (JSON, YAML, Parquet): no MindSpore import,
nothing from ``stages/``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from common.io import sha256_file
from pipeline import layout
from pipeline.manifest import load_manifest

# Document ids listed per source and direction in a diff (the counts are always
# complete); enough to look at a few in `lineage --doc`; our choice.
DIFF_EXAMPLES = 5


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{"a.b.c": leaf}``; lists are leaves."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key in sorted(data, key=str):
            out.update(_flatten(data[key], f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _config(version_dir: Path) -> dict[str, Any]:
    path = version_dir / layout.CONFIG
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {} if path.is_file() else {}


def _counts(m: dict[str, Any]) -> dict[str, Any]:
    """The comparable counts of a manifest, flattened."""
    counts: dict[str, Any] = {
        "num_samples": m.get("num_samples"), "num_tokens": m.get("num_tokens"),
        "shards": len(m.get("shards", [])),
    }
    for key in ("documents_in", "kept", "dropped", "quarantined"):
        counts[f"accounting.{key}"] = m.get("accounting", {}).get(key)
    for reason, n in m.get("accounting", {}).get("dropped_by_reason", {}).items():
        counts[f"dropped.{reason}"] = n
    for name, stage in m.get("stages", {}).items():
        counts[f"stages.{name}.kept"] = stage.get("totals", {}).get("kept")
    for source, f in m.get("mixture", {}).get("per_source", {}).items():
        for key in ("documents", "available_tokens", "realized_tokens", "realized_share", "epochs"):
            counts[f"mixture.{source}.{key}"] = f.get(key)
    return counts


def _document_parts(version_dir: Path, manifest: dict[str, Any]) -> tuple[list[Path], int]:
    parts = layout.table_parts(version_dir, layout.DOCUMENTS)
    return parts, (layout.num_id_parts(manifest, layout.DOCUMENTS) if len(parts) > 1 else 1)


def _ids_of(path: Path | None, part: int | None = None, num_parts: int = 1) -> pa.Table:
    """``id``, ``source`` of one part (only the ids of id part ``part`` of
    ``num_parts`` when given: the slice a finer-split version compares)."""
    if path is None:
        return pa.table({"id": pa.array([], pa.string()), "source": pa.array([], pa.string())})
    table = pq.read_table(path, columns=["id", "source"])
    if part is not None and num_parts > 1:
        mask = layout.id_parts(table["id"].to_pylist(), num_parts) == part
        table = table.filter(pa.array(mask))
    return table


def _document_diff(dir_a: Path, ma: dict[str, Any], dir_b: Path, mb: dict[str, Any]) -> dict[str, Any]:
    """Per source: kept documents in A and B, added, removed, examples. Both
    versions split documents by the same id hash into power-of-two parts, so
    part ``j`` of the finer split lines up with part ``j mod K`` of the other:
    one pair of parts in memory at a time."""
    parts_a, ka = _document_parts(dir_a, ma)
    parts_b, kb = _document_parts(dir_b, mb)
    k = max(ka, kb)
    stats: dict[str, dict[str, Any]] = {}
    for j in range(k):
        pa_ = parts_a[j % ka] if parts_a else None
        pb_ = parts_b[j % kb] if parts_b else None
        # The coarser version's part also holds other slices: keep slice j only.
        da = _ids_of(pa_, j, k) if ka < k else _ids_of(pa_)
        db = _ids_of(pb_, j, k) if kb < k else _ids_of(pb_)
        added = db.filter(pc.invert(pc.is_in(db["id"], value_set=da["id"].combine_chunks())))
        removed = da.filter(pc.invert(pc.is_in(da["id"], value_set=db["id"].combine_chunks())))
        for name, table in (("a", da), ("b", db)):
            for row in table.group_by("source").aggregate([("id", "count")]).to_pylist():
                s = stats.setdefault(row["source"], {"a": 0, "b": 0, "added": 0, "removed": 0,
                                                     "added_examples": [], "removed_examples": []})
                s[name] += row["id_count"]
        for name, table in (("added", added), ("removed", removed)):
            for source in set(table["source"].to_pylist()):
                ids = table.filter(pc.equal(table["source"], source))["id"].to_pylist()
                s = stats[source]
                s[name] += len(ids)
                s[f"{name}_examples"] = sorted(s[f"{name}_examples"] + ids)[:DIFF_EXAMPLES]
    return dict(sorted(stats.items()))


def diff_versions(dir_a: str | Path, dir_b: str | Path) -> dict[str, Any]:
    """What changed from version A to version B.

    Returns:
        ``a``, ``b`` (version names); ``config``: ``{key: [a, b]}`` for every
        resolved-config key (dotted) whose value differs (None = absent);
        ``counts``: ``{key: [a, b]}`` for every differing count (samples,
        tokens, shards, accounting, drops per reason, kept per stage, mixture
        facts per source: :func:`_counts`);
        ``documents``: per source ``{"a", "b", "added", "removed",
        "added_examples", "removed_examples"}`` (kept documents by id; examples
        are the first :data:`DIFF_EXAMPLES` ids in id order); ``same_config``
        (config hashes equal), ``same_shards`` (shard hashes equal);
        ``code``: ``{phase: [digest a, digest b]}`` for every phase (ingest,
        each stage, assemble) whose code digest differs; ``fit``:
        ``{"<stage>.<fact>": [a, b]}`` for every differing scalar fit fact
        (lists left out); ``warnings``: ``{stage: [lines a, lines b]}`` where
        a stage's warnings differ; ``headlines``: lines that lead the text
        (:func:`coverage_headlines`: a language that lost or gained a stage's
        model).

    Raises:
        FileNotFoundError: either directory is not a version.
    """
    dir_a, dir_b = Path(dir_a), Path(dir_b)
    ma, mb = load_manifest(dir_a), load_manifest(dir_b)
    ca, cb = _flatten(_config(dir_a)), _flatten(_config(dir_b))
    config = {k: [ca.get(k), cb.get(k)] for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}
    na, nb = _counts(ma), _counts(mb)
    counts = {k: [na.get(k), nb.get(k)] for k in sorted(set(na) | set(nb)) if na.get(k) != nb.get(k)}

    documents = _document_diff(dir_a, ma, dir_b, mb)
    code_a, code_b = ({p: (c or {}).get("digest") for p, c in (m.get("code") or {}).items()} for m in (ma, mb))
    code = {p: [code_a.get(p), code_b.get(p)] for p in sorted(set(code_a) | set(code_b))
            if code_a.get(p) != code_b.get(p)}

    def stage_part(m: dict[str, Any], key: str) -> dict[str, Any]:
        return {name: (report or {}).get(key) for name, report in (m.get("stages") or {}).items()}

    fa, fb = (_flatten(stage_part(m, "fit")) for m in (ma, mb))
    fit = {k: [fa.get(k), fb.get(k)] for k in sorted(set(fa) | set(fb))
           if fa.get(k) != fb.get(k) and not isinstance(fa.get(k), list) and not isinstance(fb.get(k), list)}
    wa, wb = stage_part(ma, "warnings"), stage_part(mb, "warnings")
    warnings = {s: [wa.get(s) or [], wb.get(s) or []] for s in sorted(set(wa) | set(wb))
                if (wa.get(s) or []) != (wb.get(s) or [])}
    return {
        "a": ma.get("version", dir_a.name), "b": mb.get("version", dir_b.name),
        "same_config": ma.get("config_hash") == mb.get("config_hash"),
        "same_shards": [s.get("sha256") for s in ma.get("shards", [])] == [s.get("sha256") for s in mb.get("shards", [])],
        "config": config, "counts": counts, "documents": documents,
        "code": code, "fit": fit, "warnings": warnings,
        "headlines": coverage_headlines(ma, mb),
    }


def coverage_headlines(ma: dict[str, Any], mb: dict[str, Any]) -> list[str]:
    """What changed in the stages' *coverage* from manifest A to B.

    A stage that measures per language reports, in its fit facts,
    ``coverage: {"unit": "model", "scored": {lang: {"docs", "chars"}},
    "unscored": {lang: {"docs", "chars", "why"}}}`` (the contract in
    docs/architecture.md; the perplexity stage does). Returns one line per
    language scored in A and not in B (``"perplexity: language en lost its
    model (v1 scored 1,234 docs; v2: 1,230 docs unscored: <why>)"``), then one
    per language scored in B and not in A (``gained``); empty when nothing
    changed or a manifest has no coverage.
    """
    va, vb = ma.get("version", "A"), mb.get("version", "B")
    out: list[str] = []
    for name in sorted(set(ma.get("stages") or {}) & set(mb.get("stages") or {})):
        ca = ((ma["stages"][name] or {}).get("fit") or {}).get("coverage")
        cb = ((mb["stages"][name] or {}).get("fit") or {}).get("coverage")
        if not isinstance(ca, dict) or not isinstance(cb, dict):
            continue
        unit = cb.get("unit") or ca.get("unit") or "model"
        sa, sb = ca.get("scored") or {}, cb.get("scored") or {}
        for lang in sorted(set(sa) - set(sb)):
            now = (cb.get("unscored") or {}).get(lang)
            tail = (f"; {vb}: {now['docs']:,} docs unscored: {now['why']}" if now else f"; {vb} has no {lang} document")
            out.append(f"{name}: language {lang} lost its {unit} ({va} scored {sa[lang]['docs']:,} docs{tail})")
        for lang in sorted(set(sb) - set(sa)):
            out.append(f"{name}: language {lang} gained a {unit} ({vb} scores {sb[lang]['docs']:,} docs)")
    return out


def _short(value: Any, width: int = 40) -> str:
    text = (f"{value:.4f}" if not value.is_integer() else f"{value:.1f}") if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _change(a: Any, b: Any, width: int = 40) -> str:
    """``a -> b`` for one changed setting, readable when long: two lists
    give the items added and removed (in full); two long strings are cut
    from the first character where they differ, so the change is what shows
    (a truncated ``['zh', 'en', 'ja', …`` on both sides hid an added ``nb``)."""
    if isinstance(a, list) and isinstance(b, list) and (len(str(a)) > width or len(str(b)) > width):
        added = [x for x in b if x not in a]
        removed = [x for x in a if x not in b]
        parts = ([f"+{added}"] if added else []) + ([f"-{removed}"] if removed else [])
        return " ".join(parts) if parts else f"{_short(a)} -> {_short(b)} (same items, reordered)"
    if isinstance(a, str) and isinstance(b, str) and (len(a) > width or len(b) > width):
        start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        cut = max(0, start - 10)
        pre = "…" if cut else ""
        return f"{_short(pre + a[cut:], width)} -> {_short(pre + b[cut:], width)}"
    return f"{_short(a, width)} -> {_short(b, width)}"


def format_diff(diff: dict[str, Any]) -> str:
    """Plain text of :func:`diff_versions`: config changes, count changes, then
    per source documents in A and B, added and removed (with examples)."""
    out = [(f"diff {diff['a']} -> {diff['b']}: config {'same' if diff['same_config'] else 'differs'}, "
            f"shards {'identical' if diff['same_shards'] else 'differ'}")]
    out += list(diff.get("headlines") or [])
    out.append(f"config ({len(diff['config'])} keys differ)")
    out += [f"  {k}: {_change(a, b)}" for k, (a, b) in diff["config"].items()]
    out.append(f"counts ({len(diff['counts'])} differ)")
    out += [f"  {k}: {_short(a)} -> {_short(b)}" for k, (a, b) in diff["counts"].items()]
    out.append(f"code ({len(diff.get('code', {}))} phases differ)")
    out += [f"  {phase}: {a} -> {b}" for phase, (a, b) in diff.get("code", {}).items()]
    out.append(f"fit facts ({len(diff.get('fit', {}))} differ)")
    out += [f"  {k}: {_change(a, b)}" for k, (a, b) in diff.get("fit", {}).items()]
    for stage, (a, b) in diff.get("warnings", {}).items():
        out.append(f"warnings of {stage}: {len(a)} -> {len(b)}")
        out += [f"  - {line}" for line in a if line not in b] + [f"  + {line}" for line in b if line not in a]
    out.append("documents per source (kept, by id)")
    for source, d in diff["documents"].items():
        out.append(f"  {source}: {d['a']:,} -> {d['b']:,} (+{d['added']:,} added, -{d['removed']:,} removed)")
        if d["added_examples"]:
            out.append(f"    added e.g. {', '.join(d['added_examples'])}")
        if d["removed_examples"]:
            out.append(f"    removed e.g. {', '.join(d['removed_examples'])}")
    return "\n".join(out) + "\n"


def _inside(version_dir: Path, name: Any) -> Path | None:
    """``version_dir / name`` when ``name`` is a relative path inside the
    version directory, else None."""
    if not isinstance(name, str) or not name:
        return None
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    return version_dir / rel


def _digest_problem(path: Path, expected: Any) -> str | None:
    """None when ``path`` is a file whose SHA-256 is ``expected``; else why not."""
    if not path.is_file():
        return "missing"
    try:
        actual = sha256_file(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None if actual == expected else "SHA-256 differs from the manifest"


def verify_version(version_dir: str | Path) -> dict[str, Any]:
    """Check a version against its manifest, and the manifest against its digest.

    In order: ``manifest.json`` against ``manifest.sha256`` (an edited field
    or a flipped byte fails); the manifest must parse and have the expected
    shape; then every shard (data file and ``.db``, SHA-256 and, when
    recorded, ``db_sha256``), every file of ``files`` and every file of each
    output format in ``formats`` (``shifted/`` shards and their ``.db``, the
    Megatron ``.idx``, and the ``.bin`` range by range). Never raises on a
    corrupt file: each problem is one entry naming the file.

    Returns:
        ``{"ok": bool, "problems": [{"file", "kind", "reason"}], "bad_shards":
        [shard names], "bad_files": [paths], "checked_shards": n,
        "checked_files": n (format files included), "checked_format_files": n}``; ``kind`` is ``manifest``, ``shard`` or
        ``file``. ``ok`` is True only when there is no problem.

    Raises:
        FileNotFoundError: not a version directory (no ``manifest.json``).
    """
    from pipeline.layout import MANIFEST
    from pipeline.manifest import ManifestError, check_manifest_digest, parse_manifest

    version_dir = Path(version_dir)
    path = version_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{version_dir} is not a corpus version (no {MANIFEST})")
    problems: list[dict[str, str]] = []
    bad_shards: list[str] = []
    bad_files: list[str] = []

    def problem(kind: str, file: str, reason: str) -> None:
        problems.append({"kind": kind, "file": file, "reason": reason})

    def result(checked_shards: int = 0, checked_files: int = 0) -> dict[str, Any]:
        return {"ok": not problems, "problems": problems, "bad_shards": bad_shards, "bad_files": bad_files,
                "checked_shards": checked_shards, "checked_files": checked_files}

    digest = check_manifest_digest(version_dir, required=True)
    if digest:
        name, _, reason = digest.partition(": ")
        problem("manifest", name, reason)
    try:
        manifest = parse_manifest(path.read_bytes(), MANIFEST)
    except OSError as exc:
        problem("manifest", MANIFEST, f"cannot be read ({exc.strerror})")
        return result()
    except ManifestError as exc:
        # One line for the file: why it does not parse, and the digest too.
        also = [p["reason"] for p in problems if p["file"] == MANIFEST]
        problems[:] = [p for p in problems if p["file"] != MANIFEST]
        problem("manifest", MANIFEST, "; ".join([str(exc).partition(": ")[2], *also]))
        return result()
    shards, files = manifest.get("shards"), manifest.get("files", {})
    if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
        problem("manifest", MANIFEST, "'shards' is not a list of objects")
        shards = []
    if not isinstance(files, dict):
        problem("manifest", MANIFEST, "'files' is not an object")
        files = {}
    formats = manifest.get("formats") or {}
    if not isinstance(formats, dict):
        problem("manifest", MANIFEST, "'formats' is not an object")
        formats = {}
    for shard in shards:
        name = shard.get("name")
        if name is None and "mindrecord" not in (formats or {"mindrecord": {}}):
            continue  # the row cut only: the version was written without the mindrecord format
        data = _inside(version_dir, name)
        if data is None or not isinstance(shard.get("sha256"), str):
            problem("manifest", MANIFEST, f"shard entry {str(name)[:80]!r}: no usable name or sha256")
            continue
        why = _digest_problem(data, shard["sha256"])
        if why is None and "db_sha256" in shard:
            why = _digest_problem(layout.shard_index(data), shard["db_sha256"])
            why = why and f".db index {why}"
        elif why is None and not layout.shard_index(data).is_file():
            why = ".db index missing"
        if why:
            bad_shards.append(name)
            problem("shard", name, why)
    for name, expected in sorted(files.items()):
        if name == MANIFEST:
            continue
        target = _inside(version_dir, name)
        if target is None:
            problem("manifest", MANIFEST, f"file entry {str(name)[:80]!r} is outside the version directory")
            continue
        why = _digest_problem(target, expected)
        if why:
            bad_files.append(name)
            problem("file", name, why)
    checked = _verify_formats(version_dir, formats, problem, bad_files)
    out = result(len(shards), len(files) + checked)
    out["checked_format_files"] = checked
    return out


def _verify_formats(version_dir: Path, formats: dict[str, Any], problem, bad_files: list[str]) -> int:
    """Re-hash the files of the manifest's ``formats`` that are not the
    top-level shards: each ``shifted/`` shard and its ``.db``; the Megatron
    ``.idx`` and each shard's byte range of the ``.bin`` (the ``.bin`` is
    hashed by range, as the shard tasks wrote it, plus its total size).
    Returns the number of files checked; each problem names its file."""
    checked = 0
    for entry in (formats.get("mindrecord_shifted") or {}).get("files", []):
        name = entry.get("name")
        data = _inside(version_dir, name)
        if data is None or not isinstance(entry.get("sha256"), str):
            problem("manifest", layout.MANIFEST, f"shifted entry {str(name)[:80]!r}: no usable name or sha256")
            continue
        checked += 1
        why = _digest_problem(data, entry["sha256"])
        if why is None:
            why = _digest_problem(layout.shard_index(data), entry.get("db_sha256"))
            why = why and f".db index {why}"
        if why:
            bad_files.append(name)
            problem("file", name, why)
    megatron = formats.get("megatron")
    if not megatron:
        return checked
    idx, binary = megatron.get("idx") or {}, megatron.get("bin") or {}
    target = _inside(version_dir, idx.get("name"))
    if target is not None:
        checked += 1
        why = _digest_problem(target, idx.get("sha256"))
        if why:
            bad_files.append(idx["name"])
            problem("file", idx["name"], why)
    target = _inside(version_dir, binary.get("name"))
    if target is None:
        problem("manifest", layout.MANIFEST, "megatron entry has no usable .bin name")
        return checked
    checked += 1
    name = binary["name"]
    if not target.is_file():
        bad_files.append(name)
        problem("file", name, "missing")
        return checked
    why = None
    if target.stat().st_size != binary.get("bytes"):
        why = f"{target.stat().st_size} bytes, the manifest says {binary.get('bytes')}"
    else:
        with open(target, "rb") as fh:
            for r in binary.get("ranges", []):
                fh.seek(r["first_byte"])
                digest, left = hashlib.sha256(), r["bytes"]
                while left > 0:
                    block = fh.read(min(left, 1 << 22))
                    if not block:
                        break
                    digest.update(block)
                    left -= len(block)
                if digest.hexdigest() != r["sha256"]:
                    why = f"SHA-256 of bytes {r['first_byte']}..{r['first_byte'] + r['bytes'] - 1} differs from the manifest"
                    break
    if why:
        bad_files.append(name)
        problem("file", name, why)
    return checked
