"""Versions side by side: ``inspect``, ``diff`` and ``verify`` logic for the CLI.

* :func:`inspect_version` - the facts of one version in one small dict.
* :func:`diff_versions` - what changed between two versions: the resolved
  config (key by key), the counts (samples, tokens, accounting, per-stage kept,
  drops by reason, per-source mixture) and the documents added and removed per
  source (kept documents, by id, from each version's ``documents/``, one
  part pair at a time).
* :func:`verify_version` - re-hash every shard (``.mindrecord`` and ``.db``)
  and every other file the manifest lists; names each one that differs.

Reads only the version directories (JSON, YAML, Parquet): no MindSpore import,
nothing from ``stages/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from pipeline.manifest import load_manifest, sha256_file
from pipeline.writer import verify_shards

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
    path = version_dir / "config.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {} if path.is_file() else {}


def inspect_version(version_dir: str | Path) -> dict[str, Any]:
    """The headline facts of a version.

    Returns:
        ``version``, ``config_hash``, ``code_commit``, ``seed``,
        ``seq_length``, ``num_samples``, ``num_tokens``, ``columns``,
        ``shards`` (count), ``accounting``, ``packing`` (method and token
        counts, when recorded), ``mixture`` (per source: ``target_share``,
        ``realized_share``, ``epochs``).

    Raises:
        FileNotFoundError: not a version directory.
    """
    m = load_manifest(Path(version_dir))
    mixture = {s: {k: f.get(k) for k in ("target_share", "realized_share", "epochs")}
               for s, f in m.get("mixture", {}).get("per_source", {}).items()}
    return {
        "version": m.get("version"), "config_hash": m.get("config_hash"), "code_commit": m.get("code_commit"),
        "seed": m.get("seed"), "seq_length": m.get("seq_length"), "num_samples": m.get("num_samples"),
        "num_tokens": m.get("num_tokens"), "columns": m.get("columns", {"input_ids": [m.get("seq_length", 0) + 1]}),
        "shards": len(m.get("shards", [])), "accounting": m.get("accounting"),
        "packing": {k: v for k, v in m.get("packing", {}).items() if k != "packed_per_source"},
        "mixture": mixture,
    }


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
    from pipeline import layout

    parts = layout.table_parts(version_dir, layout.DOCUMENTS)
    return parts, (layout.num_id_parts(manifest, layout.DOCUMENTS) if len(parts) > 1 else 1)


def _ids_of(path: Path | None, part: int | None = None, num_parts: int = 1) -> pa.Table:
    """``id``, ``source`` of one part (only the ids of id part ``part`` of
    ``num_parts`` when given: the slice a finer-split version compares)."""
    from pipeline import layout

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
        ``counts``: ``{key: [a, b]}`` for every differing count (see
        :func:`inspect_version`; mixture facts per source, drops per reason);
        ``documents``: per source ``{"a", "b", "added", "removed",
        "added_examples", "removed_examples"}`` (kept documents by id; examples
        are the first :data:`DIFF_EXAMPLES` ids in id order); ``same_config``
        (config hashes equal), ``same_shards`` (shard hashes equal).

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
    return {
        "a": ma.get("version", dir_a.name), "b": mb.get("version", dir_b.name),
        "same_config": ma.get("config_hash") == mb.get("config_hash"),
        "same_shards": [s.get("sha256") for s in ma.get("shards", [])] == [s.get("sha256") for s in mb.get("shards", [])],
        "config": config, "counts": counts, "documents": documents,
    }


def _short(value: Any, width: int = 40) -> str:
    text = f"{value:.4f}" if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_diff(diff: dict[str, Any]) -> str:
    """Plain text of :func:`diff_versions`: config changes, count changes, then
    per source documents in A and B, added and removed (with examples)."""
    out = [(f"diff {diff['a']} -> {diff['b']}: config {'same' if diff['same_config'] else 'differs'}, "
            f"shards {'identical' if diff['same_shards'] else 'differ'}")]
    out.append(f"config ({len(diff['config'])} keys differ)")
    out += [f"  {k}: {_short(a)} -> {_short(b)}" for k, (a, b) in diff["config"].items()]
    out.append(f"counts ({len(diff['counts'])} differ)")
    out += [f"  {k}: {_short(a)} -> {_short(b)}" for k, (a, b) in diff["counts"].items()]
    out.append("documents per source (kept, by id)")
    for source, d in diff["documents"].items():
        out.append(f"  {source}: {d['a']:,} -> {d['b']:,} (+{d['added']:,} added, -{d['removed']:,} removed)")
        if d["added_examples"]:
            out.append(f"    added e.g. {', '.join(d['added_examples'])}")
        if d["removed_examples"]:
            out.append(f"    removed e.g. {', '.join(d['removed_examples'])}")
    return "\n".join(out) + "\n"


def verify_version(version_dir: str | Path) -> dict[str, Any]:
    """Re-hash every shard and every other listed file against the manifest.

    Returns:
        ``{"ok": bool, "bad_shards": [shard names], "bad_files": [paths],
        "checked_shards": n, "checked_files": n}``. A shard is bad when its
        data file or ``.db`` is missing or its SHA-256 differs
        (:func:`pipeline.writer.verify_shards`); a file of the manifest's
        ``files`` when it is missing or differs.

    Raises:
        FileNotFoundError: not a version directory.
        KeyError: the manifest has no ``shards``.
    """
    version_dir = Path(version_dir)
    manifest = load_manifest(version_dir)
    bad_shards = verify_shards(version_dir, manifest)
    bad_files = []
    for name, digest in sorted(manifest.get("files", {}).items()):
        path = version_dir / name
        if name == "manifest.json":
            continue
        if not path.is_file() or sha256_file(path) != digest:
            bad_files.append(name)
    return {"ok": not bad_shards and not bad_files, "bad_shards": bad_shards, "bad_files": bad_files,
            "checked_shards": len(manifest["shards"]), "checked_files": len(manifest.get("files", {}))}
