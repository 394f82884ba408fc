"""Orchestration: ingest -> stages -> assemble -> manifest -> publish.

One build turns the configured sources into ``corpora/<VERSION>/`` in five
phases, each a function that owns its outputs:

1. :func:`ingest_phase` (one task per input file): read records, give each a
   stable id, quarantine what cannot be read, write partitions of about
   ``ingest.partition_bytes`` of text; digest every input (cached by path,
   size and mtime or ETag, so a resume reads no input again). Only when some
   source takes ids from a record field, a spilled pass quarantines repeated
   ids (:func:`quarantine_duplicate_ids`), without reading text.
2. :func:`stages_phase`: each stage in ``stages.registry()`` order: ``fit`` once
   in the driver, then ``process`` per partition on the executor. A stage
   writes only what it adds (a *layer* per partition: its measurements and
   decisions; ``stages.base.PartitionRef``), the text is stored once. Each
   stage's outputs live in ``corpora/.work/<VERSION>/<stage>/`` under a
   fingerprint (stage config, the files it names, its effective settings,
   upstream fingerprint, seed, and the digest of the code and data files the
   stage runs: :data:`STAGE_CODE`, ``pipeline.code_digest``); a re-run skips
   finished partitions and finished stages, and redoes a stage (and all after
   it) whose code, settings or input changed.
3. :func:`assemble_phase`: ``pipeline.assemble`` orders, packs, shuffles and
   writes shards, lineage, documents and decisions as executor tasks into
   ``corpora/.tmp-<VERSION>/``, then the tokenizer, its coverage report, the
   resolved config and the quarantine list.
4. :func:`manifest_phase`: the accounting check and ``manifest.json``
   (``pipeline.manifest``), then ``report.html``.
5. :func:`publish_phase`: check that the temporary directory is a whole
   version (:func:`check_complete`), then rename it to ``corpora/<VERSION>/``.
   An existing version is never overwritten (:class:`VersionExistsError`).

A build holds its version's lock (``corpora/.lock-<VERSION>``,
:mod:`pipeline.lock`) from before it writes anything until it ends: a second
build of the same version stops at once with :class:`VersionLockedError`; a
lock left by a dead process of this host is taken over. Where ``corpora/``
is comes from :func:`pipeline.location.corpora_root` (``--corpora-root``,
``$MINDCORPUS_CORPORA_DIR``, the config's ``corpora_dir``), the rule every
command and the loader use. Credentials in the config never reach the
published files or the run log (:mod:`pipeline.redact`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from common.hashing import id_hash
from common.io import atomic_path, sha256_file, write_json_atomic, write_table_atomic
from pipeline import layout
from pipeline.assemble import BuildError, assemble
from pipeline.code_digest import CodeDigest, code_digest, source_digest
from pipeline.config import (REPO_ROOT, ConfigError, check_version, config_dict, config_hash, config_path_for,
                             load_config, preflight)
from pipeline.executor import (fit_digest, make_executor, parquet_options, partition_counts, process_partition,
                               process_peak_mb, release_memory)
from pipeline.location import config_base
from pipeline.location import corpora_root as corpora_root_for
from pipeline.lock import VersionLock, VersionLockedError
from pipeline.lock import describe as describe_lock
from pipeline.manifest import build_manifest, write_manifest
from pipeline.redact import redact, secret_values
from pipeline.readers import (FILE_REASONS, RETRY_REASONS, Quarantined, detect_format, display_path,
                              input_identity, is_url, parquet_column_problem, read_file, resolve_paths)
from pipeline.runlog import RunLog, crash_point
from stages import RegistryError, check_plugins_current, stage_class, stage_module, stage_names
from stages.base import KEEP, REASON, FitResult, PartitionRef, Partitions, StageContext, read_view

__all__ = ["BuildError", "BuildResult", "VersionExistsError", "VersionLockedError", "build"]

DOC_COLUMNS = ["id", "source", "file", "line", "text", "meta", "lang_hint", "chars"]
STATE = "_STATE.json"
# KenLM's lmplz and build_binary: tools/bin (make setup), or $MINDCORPUS_TOOLS_DIR when set.
TOOLS_DIR = Path(os.environ.get("MINDCORPUS_TOOLS_DIR") or REPO_ROOT / "tools" / "bin")

# The code each phase runs (roots of ``pipeline.code_digest.code_digest``: a
# module, or ``module:name`` for one definition and what it reaches). Its
# digest is part of the phase's fingerprint, so changed code re-runs it.
INGEST_CODE = ("pipeline.readers", "pipeline.html", "pipeline.build:list_inputs", "pipeline.build:ingest_phase")
# Every stage also runs its own module (``stages.stage_module``).
STAGE_CODE = ("pipeline.executor:process_partition",)
ASSEMBLE_CODE = ("pipeline.assemble", "pipeline.writer", "pipeline.formats", "pipeline.megatron", "pipeline.layout",
                 "pipeline.build:assemble_phase")


def stage_code_digest(name: str, plugins: tuple[str, ...] = ()) -> CodeDigest:
    """The :class:`~pipeline.code_digest.CodeDigest` of stage ``name``: its
    module (``stages.stage_module``), what that module reaches, and the
    executor's per-partition runner (:data:`STAGE_CODE`).

    A plugin stage whose module is not in a project package (``plugins``)
    counts as its module's code (``sources["plugin:<module>"]``,
    :func:`common.source.source_digest`: comments and docstrings do
    not count); what that file imports from elsewhere is not followed, so a
    plugin kept as a package should be one module, or name its version in
    its code."""
    import importlib.util

    module = stage_module(name, plugins)
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if origin is None or (REPO_ROOT / module.split(".")[0] / "__init__.py").is_file():  # a project package
        return code_digest((module, *STAGE_CODE))
    base = code_digest(STAGE_CODE)
    own = source_digest(origin.read_text(encoding="utf-8"))
    return dataclasses.replace(base, digest=hashlib.sha256(f"{base.digest}:{module}:{own}".encode()).hexdigest()[:16],
                               sources={**base.sources, f"plugin:{module}": own})


class VersionExistsError(FileExistsError):
    """The version directory already exists; versions are immutable."""


class IngestError(BuildError):
    """Ingest of one input file failed outside its reading (writing its
    partitions, for instance); the message names the file."""


@dataclasses.dataclass
class BuildResult:
    version_dir: Path
    manifest: dict[str, Any]


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_state(out_dir: Path) -> dict[str, Any]:
    path = out_dir / STATE
    return json.loads(path.read_text()) if path.exists() else {}


def _merge_counts(into: dict[str, dict[str, Any]], add: dict[str, dict[str, Any]]) -> None:
    """Add one partition's per-source counts (``partition_counts``, with a
    stage's ``tally`` when it has one) to ``into``: every number summed, the
    dropped reasons and the tally keys summed per key."""
    for src, c in add.items():
        s = into.setdefault(src, {"documents_in": 0, "chars_in": 0, "kept": 0, "kept_chars": 0, "dropped": {}})
        for k in ("documents_in", "chars_in", "kept", "kept_chars"):
            s[k] += c[k]
        for reason, n in c["dropped"].items():
            s["dropped"][reason] = s["dropped"].get(reason, 0) + n
        if "tally" in c:
            tally = s.setdefault("tally", {})
            for key, n in c["tally"].items():
                tally[key] = tally.get(key, 0) + n


def _sorted_counts(per_source: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sources, dropped reasons and tally keys in sorted order (the manifest
    is the same whatever order the partitions finished in)."""
    out = {}
    for src, c in sorted(per_source.items()):
        out[src] = {**c, "dropped": dict(sorted(c["dropped"].items()))}
        if "tally" in c:
            out[src]["tally"] = dict(sorted(c["tally"].items()))
    return out


def _totals(per_source: dict[str, Any], tallied: bool = False) -> dict[str, Any]:
    """The sums over sources of :func:`_sorted_counts`'s numbers; with
    ``tallied`` (a stage with ``Stage.tally_columns``) also ``tally``: each
    key summed over sources, keys sorted (``{}`` when no document entered)."""
    tot = {"documents_in": 0, "chars_in": 0, "kept": 0, "kept_chars": 0, "dropped": Counter()}
    tally: Counter = Counter()
    for s in per_source.values():
        for k in ("documents_in", "chars_in", "kept", "kept_chars"):
            tot[k] += s[k]
        tot["dropped"].update(s["dropped"])
        tally.update(s.get("tally") or {})
    tot["dropped"] = dict(sorted(tot["dropped"].items()))
    if tallied:
        tot["tally"] = {k: int(v) for k, v in sorted(tally.items())}
    return tot


# --------------------------------------------------------------------------- ingest

DIGEST_CACHE = "digests"


def input_digest(path: str, identity: dict[str, Any], cache_dir: Path, storage_options: dict) -> tuple[int, str]:
    """(bytes, sha256) of an input, from the cache when its identity (path,
    size, mtime or ETag) was digested before; else read once and cached."""
    from pipeline.readers import input_size_and_sha256

    key = hashlib.sha256(json.dumps([path, identity], sort_keys=True).encode()).hexdigest()
    entry = cache_dir / DIGEST_CACHE / f"{key}.json"
    if entry.exists():
        hit = json.loads(entry.read_text())
        return hit["bytes"], hit["sha256"]
    size, digest = input_size_and_sha256(path, storage_options)
    write_json_atomic({"path": path, "identity": identity, "bytes": size, "sha256": digest}, entry)
    return size, digest


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def ingest_file(task: dict[str, Any]) -> dict[str, Any]:
    """Read one input file into partitions (run on a worker).

    Args:
        task: ``source``, ``path``, ``file`` (display path), ``identity``
            (size, mtime/ETag), ``format``, ``text_field``, ``text_unit``,
            ``lang``, ``id_field``, ``max_bytes``, ``partition_bytes``,
            ``partition_max_docs``, ``storage_options``, ``out_dir``,
            ``cache_dir``, ``index`` (file number).

    Returns:
        ``{"parts": [...], "documents": n, "chars": n, "text_bytes": n,
        "nul_documents": n, "nul_chars": n (NUL characters removed),
        "quarantine": {reason: n}, "first_quarantine": entry or None,
        "file_failure": the file-level quarantine entry or None, "bytes",
        "sha256" (None when the file cannot be read), "identity"}``; also
        written to ``file-<index>.json``, the file's completion marker (reused
        while the identity is the same), except after a failure that may not
        recur (:data:`pipeline.readers.RETRY_REASONS`: a re-run reads the file
        again). The quarantined records go to ``quarantine-<index>.jsonl``.

    Raises:
        OSError: writing a partition failed (a full disk...): the error
            names the file written.
        IngestError: anything else outside reading the file failed, with the
            input file named. A file that cannot be read is quarantined,
            never raised.
    """
    try:
        return _ingest_file(task)
    except OSError:
        raise  # names the path it failed on (common.errors.naming_path): one line at the CLI
    except Exception as exc:
        raise IngestError(f"ingest of {task['file']} (source {task['source']}) failed: "
                          f"{type(exc).__name__}: {exc}") from exc


def _ingest_file(task: dict[str, Any]) -> dict[str, Any]:
    out_dir = Path(task["out_dir"])
    marker = out_dir / f"file-{task['index']:05d}.json"
    if marker.exists():
        done = json.loads(marker.read_text())
        if done.get("identity") == task["identity"]:
            return done
    source, file = task["source"], task["file"]
    try:
        size, digest = input_digest(task["path"], task["identity"], Path(task["cache_dir"]),
                                    task["storage_options"])
        unreadable = None
    except OSError as exc:  # permissions, a vanished file, storage errors: the file is quarantined
        size, digest = int(task["identity"].get("size") or 0), None
        unreadable = Quarantined(file, 1, -1, "read.unreadable_file", f"{type(exc).__name__}: {exc}"[:200])
    parts: list[str] = []
    rows: list = []
    pending_bytes = 0
    totals = {"documents": 0, "chars": 0, "text_bytes": 0, "nul_documents": 0, "nul_chars": 0}
    quarantine: Counter = Counter()
    first_quarantine = None
    qpath = out_dir / f"quarantine-{task['index']:05d}.jsonl"

    def flush():
        nonlocal pending_bytes
        if not rows:
            return
        path = out_dir / f"part-{task['index']:05d}-{len(parts):05d}.parquet"
        lines = [r.line for r in rows]
        texts = [r.text for r in rows]
        ids = ([f"{source}:{r.doc_id}" for r in rows] if task["id_field"]
               else [f"{source}:{file}:{line}" for line in lines])
        table = pa.table({
            "id": ids,
            "source": pa.array([source] * len(rows), pa.string()),
            "file": pa.array([file] * len(rows), pa.string()),
            "line": pa.array(lines, pa.int64()),
            "text": pa.array(texts, pa.string()),
            "meta": pa.array([r.meta for r in rows], pa.string()),
            "lang_hint": pa.array([task["lang"]] * len(rows), pa.string()),
            "chars": pa.array([len(t) for t in texts], pa.int64()),
        })
        write_table_atomic(table, path, **parquet_options(table))
        parts.append(path.name)
        rows.clear()
        pending_bytes = 0

    failure = None
    items = ([unreadable] if unreadable else
             read_file(task["path"], file, task["format"], task["text_field"], task["text_unit"],
                       task["max_bytes"], task["id_field"], task["storage_options"], task.get("extractor")))
    # name_errors=False: an input read error must not be blamed on the quarantine file
    with atomic_path(qpath, name_errors=False) as qtmp, open(qtmp, "w", encoding="utf-8") as qfh:
        for item in items:
            if isinstance(item, Quarantined):
                entry = {"source": source, **dataclasses.asdict(item)}
                qfh.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
                quarantine[item.reason] += 1
                first_quarantine = first_quarantine or entry
                if item.reason in FILE_REASONS:
                    failure = {**entry, "records_read": totals["documents"]}
                continue
            rows.append(item)
            n = _utf8_len(item.text)
            pending_bytes += n
            totals["documents"] += 1
            totals["chars"] += len(item.text)
            totals["text_bytes"] += n
            if item.nul_chars:
                totals["nul_documents"] += 1
                totals["nul_chars"] += item.nul_chars
            if pending_bytes >= task["partition_bytes"] or (
                    task["partition_max_docs"] and len(rows) >= task["partition_max_docs"]):
                flush()
        flush()
    result = {"parts": parts, **totals, "quarantine": dict(sorted(quarantine.items())),
              "first_quarantine": first_quarantine, "file_failure": failure, "bytes": size, "sha256": digest,
              "identity": task["identity"]}
    if failure is None or failure["reason"] not in RETRY_REASONS:
        write_json_atomic(result, marker)
    else:
        marker.unlink(missing_ok=True)
    return result


def id_keys(task: dict[str, Any]) -> int:
    """Worker: spill ``(id, partition, row)`` of one ingest partition by id
    hash (no text read). Returns the rows spilled."""
    import numpy as np
    import pyarrow.parquet as pq

    from common.spill import write_buckets

    ids = pq.read_table(task["path"], columns=["id"])["id"].to_pylist()
    groups = np.fromiter((id_hash(i, 0) % task["groups"] for i in ids),
                         dtype=np.int64, count=len(ids))
    write_buckets(pa.table({"id": pa.array(ids, pa.string()),
                            "partition": pa.array(np.full(len(ids), task["partition"], np.int32)),
                            "row": pa.array(np.arange(len(ids), dtype=np.int32))}),
                  groups, Path(task["out"]))
    return len(ids)


def repeated_ids(task: dict[str, Any]) -> list[list]:
    """Worker: the repeats in one id spill group: ``[partition, row]`` of every
    occurrence after the first (in partition, then row order)."""
    from common.spill import read_bucket

    table = read_bucket([Path(p) for p in task["files"]], task["group"])
    if table.num_rows == 0:
        return []
    table = table.sort_by([("id", "ascending"), ("partition", "ascending"), ("row", "ascending")])
    ids = table["id"].to_pylist()
    parts, rows = table["partition"].to_pylist(), table["row"].to_pylist()
    return [[parts[i], rows[i]] for i in range(1, len(ids)) if ids[i] == ids[i - 1]]


def drop_rows(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Worker: remove ``rows`` from one ingest partition (rewritten
    atomically, once: a ``.ids-done`` marker makes a re-run skip it) and
    return their quarantine entries (``read.duplicate_id``)."""
    import numpy as np
    import pyarrow.parquet as pq

    path = Path(task["path"])
    done = path.with_name(path.name + ".ids-done.json")
    if done.exists():
        return json.loads(done.read_text())
    table = pq.read_table(path)
    drop = np.zeros(table.num_rows, bool)
    drop[task["rows"]] = True
    entries = [{"source": table["source"][i].as_py(), "file": table["file"][i].as_py(),
                "line": table["line"][i].as_py(), "byte_offset": -1, "reason": "read.duplicate_id",
                "detail": f"id {table['id'][i].as_py()!r} seen before"} for i in np.flatnonzero(drop)]
    kept = table.filter(pa.array(~drop))
    write_table_atomic(kept, path, **parquet_options(kept))
    write_json_atomic(entries, done)
    return entries


def quarantine_duplicate_ids(parts: list[Path], ingest_dir: Path, executor) -> dict[str, Any]:
    """Quarantine every document whose id an earlier document (in partition
    order: file order, then line) already has (``read.duplicate_id``).

    Ids built from (source, file, line) are unique by construction: call this
    only when a source takes ids from a record field. Ids are spilled by hash
    (``(id, partition, row)``, no text) and each spill group is checked by
    one task; the driver holds only the repeats. Affected partitions are
    rewritten in place, atomically, once; the entries go to
    ``ingest/quarantine-ids.jsonl`` and the result to ``ingest/_IDS.json``, so
    a re-run does not redo it.

    Returns:
        ``{"quarantine": {reason: n}, "first_quarantine": entry or None}``.
    """
    from common.spill import forget

    marker = ingest_dir / "_IDS.json"
    if marker.exists():
        return json.loads(marker.read_text())
    plan_path = ingest_dir / "_IDS_PLAN.json"
    if plan_path.exists():
        plan = json.loads(plan_path.read_text())
    else:
        import pyarrow.parquet as pq

        upper = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        groups = max(1, min(4096, -(-upper // 500_000)))
        spill = ingest_dir / "ids-spill"
        files = [spill / f"part-{i:05d}.parquet" for i in range(len(parts))]
        executor.map(id_keys, [{"path": str(p), "partition": i, "groups": groups, "out": str(f)}
                               for i, (p, f) in enumerate(zip(parts, files))])
        found = executor.map(repeated_ids, [{"files": [str(f) for f in files], "group": g} for g in range(groups)])
        forget(files)
        by_part: dict[int, list[int]] = {}
        for group in found:
            for part, row in group:
                by_part.setdefault(part, []).append(row)
        plan = {str(p): sorted(rows) for p, rows in sorted(by_part.items())}
        write_json_atomic(plan, plan_path)
        shutil.rmtree(spill, ignore_errors=True)
    entries = executor.map(drop_rows, [{"path": str(parts[int(p)]), "rows": rows} for p, rows in plan.items()])
    qpath = ingest_dir / "quarantine-ids.jsonl"
    counts: Counter = Counter()
    first = None
    with open(qpath, "w", encoding="utf-8") as fh:
        for part_entries in entries:
            for e in part_entries:
                fh.write(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n")
                counts[e["reason"]] += 1
                first = first or e
    result = {"quarantine": dict(counts), "first_quarantine": first}
    write_json_atomic(result, marker)
    return result


def base_counts(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: per-source documents and characters of one ingest partition."""
    view, _ = read_view(PartitionRef(task["path"]), ["source", "chars", KEEP, REASON], kept=False)
    return partition_counts(view)


@dataclasses.dataclass
class Ingested:
    """What ingest leaves for the later phases.

    Attributes:
        parts: the ingest partitions (no layers yet), in file order.
        inputs: per input file ``source``, ``file``, ``bytes``, ``sha256``.
        counts: per source documents and characters read.
        quarantine: quarantined records by reason.
        quarantine_files: the quarantine lists, in order (concatenated into
            the version's ``quarantine.jsonl``).
        fingerprint: content fingerprint (digests, what was read of each
            file, ingest config, code digest): the upstream of the first stage.
        bytes_per_char: UTF-8 bytes per character of the text read.
        code: the ingest code digest (``CodeDigest.facts()``, for the manifest).
        failed_files: per input file not read whole (or empty), in file
            order: ``source``, ``file``, ``reason``, ``detail``,
            ``records_read`` (the documents read before the failure).
        nul_removed: ``{"documents": n, "characters": n}``: NUL characters
            removed from the texts read.
    """

    parts: list[PartitionRef]
    inputs: list[dict[str, Any]]
    counts: dict[str, dict[str, Any]]
    quarantine: dict[str, int]
    quarantine_files: list[Path]
    fingerprint: str
    bytes_per_char: float
    code: dict[str, Any] = dataclasses.field(default_factory=dict)
    failed_files: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    nul_removed: dict[str, int] = dataclasses.field(default_factory=lambda: {"documents": 0, "characters": 0})


def list_inputs(cfg, base: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Every input file of every source, with its identity (size and mtime or
    ETag, from a stat: nothing is read). Hidden and partial-upload names
    matched by a wildcard are left out (``pipeline.readers.resolve_paths``)
    and appended to ``skipped``.

    Raises:
        ConfigError: a file is an input of two sources.
        FileNotFoundError: a pattern matches no file.
        ListingError: a directory under a pattern cannot be listed.
    """
    seen: dict[str, str] = {}
    out = []
    for source, scfg in cfg.sources.items():
        root = base
        if scfg.root is not None:
            root = scfg.root if is_url(scfg.root) else base / scfg.root  # base / absolute = absolute
        for path in resolve_paths(scfg.paths, root, scfg.storage_options, skipped):
            if path in seen:
                raise ConfigError(f"sources.{source}.paths: {path} is also an input of source {seen[path]!r}")
            seen[path] = source
            out.append({"source": source, "path": path, "file": display_path(path, root),
                        "identity": input_identity(path, scfg.storage_options)})
    return out


def _column_problem(task: tuple[str, str, str | None, dict]) -> str | None:
    path, text_field, id_field, storage_options = task
    try:
        return parquet_column_problem(path, text_field, id_field, storage_options)
    except Exception:  # noqa: BLE001 - an unreadable file is quarantined by ingest
        return None


def check_input_schemas(cfg, inputs: list[dict[str, Any]], threads: int = 16) -> None:
    """Check, before any work, that every Parquet input has the configured
    ``text_field`` (a text column) and ``id_field``: a misspelled field is a
    config mistake, not bad data. Reads only the footers, ``threads`` at a
    time; a file whose footer cannot be read is left to ingest (quarantined).

    Raises:
        ConfigError: naming the source, the file, the field and the columns
            that exist.
    """
    from concurrent.futures import ThreadPoolExecutor

    checks, names = [], []
    for inp in inputs:
        scfg = cfg.sources[inp["source"]]
        fmt = detect_format(inp["path"]) if scfg.format == "auto" else scfg.format
        if fmt == "parquet" or (fmt == "html" and detect_format(inp["path"]) == "parquet"):
            checks.append((inp["path"], scfg.text_field, scfg.id_field, scfg.storage_options))
            names.append(inp)
    if not checks:
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(checks))) as pool:
        problems = list(pool.map(_column_problem, checks))
    for inp, problem in zip(names, problems):
        if problem:
            raise ConfigError(f"sources.{inp['source']}: {inp['file']}: {problem}")


def ingest_phase(cfg, inputs: list[dict[str, Any]], work: Path, executor, runlog: RunLog,
                 strict: bool) -> Ingested:
    """Phase 1 (see the module docstring). Every file that is not read whole
    is named in the run log (one line each) and in ``Ingested.failed_files``.

    Raises:
        BuildError: ``strict`` and some input record or file was quarantined
            (the message names the files not read whole).
    """
    ingest_dir = work / "ingest"
    code = code_digest(INGEST_CODE)
    layout_fp = _fingerprint("ingest", config_dict(cfg)["sources"], config_dict(cfg)["ingest"],
                             [(i["source"], i["file"]) for i in inputs], code.digest)
    identities = [i["identity"] for i in inputs]
    ids_state = ingest_dir / "_IDS_INPUTS.json"
    stale_ids = ids_state.exists() and json.loads(ids_state.read_text()) != identities
    if (_read_state(ingest_dir).get("fingerprint") != layout_fp or stale_ids) and ingest_dir.exists():
        # The duplicate-id pass rewrote partitions of the inputs it saw; when
        # any input is read again, every partition must be: start ingest over.
        shutil.rmtree(ingest_dir)
    ingest_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic({"fingerprint": layout_fp}, ingest_dir / STATE)
    tasks = []
    for index, inp in enumerate(inputs):
        scfg = cfg.sources[inp["source"]]
        tasks.append({"source": inp["source"], "path": inp["path"], "file": inp["file"],
                      "identity": inp["identity"], "format": scfg.format, "text_field": scfg.text_field,
                      "text_unit": scfg.text_unit, "lang": scfg.lang, "id_field": scfg.id_field,
                      "extractor": scfg.extractor, "max_bytes": cfg.ingest.max_record_bytes, "storage_options": scfg.storage_options,
                      "partition_bytes": cfg.ingest.partition_bytes,
                      "partition_max_docs": cfg.ingest.partition_max_docs,
                      "out_dir": str(ingest_dir), "cache_dir": str(work.parent / "cache"), "index": index})
    tracker = runlog.tracker("ingest", len(tasks))
    try:
        results = executor.map(ingest_file, tasks, on_done=tracker)
    finally:
        tracker.close()
    paths = [ingest_dir / p for r in results for p in r["parts"]]
    quarantine: Counter = Counter()
    firsts = []
    for r in results:
        quarantine.update(r["quarantine"])
        if r["first_quarantine"]:
            firsts.append(r["first_quarantine"])
    qfiles = [ingest_dir / f"quarantine-{i:05d}.jsonl" for i in range(len(tasks))]
    if any(cfg.sources[s].id_field for s in cfg.sources):
        write_json_atomic(identities, ids_state)
        dup = quarantine_duplicate_ids(paths, ingest_dir, executor)
        quarantine.update(dup["quarantine"])
        if dup["first_quarantine"]:
            firsts.append(dup["first_quarantine"])
        qfiles.append(ingest_dir / "quarantine-ids.jsonl")
    counts: dict[str, dict[str, Any]] = {}
    for c in executor.map(base_counts, [{"path": str(p)} for p in paths]):
        _merge_counts(counts, c)
    n_docs = sum(s["documents_in"] for s in counts.values())
    failed = [{k: r["file_failure"][k] for k in ("source", "file", "reason", "detail", "records_read")}
              for r in results if r.get("file_failure")]
    for f in failed:
        runlog.event("input_not_read", f"[ingest] {f['file']}: {f['reason']} after {f['records_read']} "
                     f"record(s): {f['detail']}", **f)
    nul = {"documents": sum(r.get("nul_documents", 0) for r in results),
           "characters": sum(r.get("nul_chars", 0) for r in results)}
    runlog.event("ingest_done", f"[ingest] {n_docs} documents in {len(paths)} partitions, "
                 f"{sum(quarantine.values())} quarantined, {len(failed)} file(s) not read whole",
                 documents=n_docs, partitions=len(paths), quarantined=dict(quarantine), failed_files=len(failed),
                 nul_removed=nul)
    if strict and quarantine:
        first = firsts[0]
        files = "; ".join(f"{f['file']} ({f['reason']}: {f['detail']})" for f in failed[:5])
        raise BuildError(f"--strict: {sum(quarantine.values())} input record(s) quarantined "
                         f"({dict(sorted(quarantine.items()))}); "
                         + (f"{len(failed)} file(s) not read whole: {files}" if failed else
                            f"first: {first['file']} line {first['line']}: {first['reason']}"))
    inputs_out = [{"source": i["source"], "file": i["file"], "bytes": r["bytes"], "sha256": r["sha256"]}
                  for i, r in zip(inputs, results)]
    chars = sum(r["chars"] for r in results)
    text_bytes = sum(r["text_bytes"] for r in results)
    # What was read of each file, not only its digest: a file that failed
    # (unreadable now, readable on a re-run) changes what every stage sees.
    fingerprint = _fingerprint("ingest", config_dict(cfg)["sources"], config_dict(cfg)["ingest"],
                               [(i["source"], i["file"], i["sha256"], r["documents"], r["quarantine"])
                                for i, r in zip(inputs_out, results)], code.digest)
    return Ingested(parts=[PartitionRef(str(p)) for p in paths], inputs=inputs_out,
                    counts=_sorted_counts(counts), quarantine=dict(sorted(quarantine.items())),
                    quarantine_files=qfiles, fingerprint=fingerprint,
                    bytes_per_char=(text_bytes / chars) if chars else 1.0, code=code.facts(),
                    failed_files=failed, nul_removed=nul)


# --------------------------------------------------------------------------- stages

def referenced_files(config: Any, cache_dir: Path) -> list[tuple[str, str]]:
    """(path, sha256) of every file a stage config names (a given tokenizer,
    KenLM models...), so that a changed file changes the stage's fingerprint
    and a resume never reuses outputs made from the old one. Digests come
    from the input-digest cache (by path, size and mtime)."""
    from pipeline.readers import input_identity

    found: list[tuple[str, str]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, str) and len(value) < 4096 and ("/" in value or "." in value):
            try:
                if os.path.isfile(value):
                    _, digest = input_digest(value, input_identity(value), cache_dir, {})
                    found.append((value, digest))
            except (OSError, ValueError):
                pass

    walk(config)
    return sorted(found)


def run_stage(name: str, cfg, in_parts: list[PartitionRef], work: Path, upstream: str, seed: int,
              executor, runlog: RunLog, in_docs: list[int] | None = None,
              code: CodeDigest | None = None
              ) -> tuple[list[PartitionRef], str, dict[str, Any], list[int], FitResult]:
    """Fit and run one stage over all partitions, resuming where a previous
    run stopped.

    The stage's fingerprint covers its config, the files the config names
    (:func:`referenced_files`), its effective settings
    (``Stage.effective_settings``: heuristics' thresholds per language), the
    upstream fingerprint, the seed and its code digest (``code``, default
    :func:`stage_code_digest`): a change to any of them discards the stage's
    outputs, and (through ``upstream``) those of every later stage.

    Returns:
        (the partitions with this stage's layer, fingerprint, stage report
        ``{"per_source", "totals", "fit", "settings", "warnings",
        "figures"}``, kept documents per partition, the stage's checked
        :class:`FitResult`). A stage with ``Stage.tally_columns`` also has
        ``per_source.<source>.tally`` and ``totals.tally`` (key -> count,
        summed over partitions, keys sorted) and ``tally_columns`` (column
        -> its declared meaning, for the report).
    """
    stage_cfg = getattr(cfg, name)
    plugins = tuple(cfg.plugins)
    config_json = stage_cfg.model_dump_json()
    cls = stage_class(name, plugins)
    settings = cls.effective_settings(stage_cfg)
    try:
        json.dumps(settings, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BuildError(f"[{name}] effective_settings is not plain JSON ({exc}): a stage bug") from None
    code = code if code is not None else stage_code_digest(name, plugins)
    fp = _fingerprint(name, json.loads(config_json), upstream, seed, code.digest, settings,
                      referenced_files(json.loads(config_json), work.parent / "cache"))
    out_dir = work / name
    state = _read_state(out_dir)
    if state.get("fingerprint") != fp and out_dir.exists():
        shutil.rmtree(out_dir)
        state = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = [ref.with_layer(out_dir / ref.name) for ref in in_parts]
    if state.get("done"):
        runlog.event("stage_reused", f"[{name}] done in an earlier run (fingerprint {fp}), reused",
                     stage=name, fingerprint=fp)
        return outputs, fp, state["report"], state["kept_per_partition"], FitResult.from_json(state["fit"])
    runlog.event("stage_start", None, stage=name, fingerprint=fp, partitions=len(in_parts),
                 resumed_partitions=sum(Path(o.layers[-1]).exists() for o in outputs))
    from pipeline.contract import providers

    tokenizer_stage = providers(plugins).get("tokenize_input_ids")
    ctx = StageContext(work_dir=out_dir / "fit", cache_dir=work.parent / "cache", seed=seed, tools_dir=TOOLS_DIR,
                       edits_text=tokenizer_stage is None or cls.order < stage_class(tokenizer_stage, plugins).order)
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if "fit" not in state:
        stage = cls(stage_cfg, ctx)
        result = stage.fit(Partitions(in_parts, executor.map))
        state = {"fingerprint": fp, "fit": _check_fit(cls, result, ctx.work_dir).to_json(),
                 "fit_seconds": round(time.perf_counter() - t0, 2)}
        stage.release()
        del stage
        release_memory()  # what the fit held is not kept under the next stage's
        write_json_atomic(state, out_dir / STATE)
    # What the fit left (its facts and files): with the fingerprint, the key of
    # a worker's cached stage object, so no worker applies another fit.
    fit_key = fit_digest(state["fit"], ctx.work_dir)
    tasks = [(name, plugins, stage_cfg, ctx, ref, out.layers[-1], fp, cfg.executor.batch_bytes, fit_key)
             for ref, out in zip(in_parts, outputs)]
    t1 = time.perf_counter()
    tracker = runlog.tracker(name, len(tasks), in_docs)
    try:
        results = executor.map(process_partition, tasks, on_done=tracker)
    finally:
        tracker.close()
    per_source: dict[str, dict[str, Any]] = {}
    for r in results:
        _merge_counts(per_source, r["counts"])
    per_source = _sorted_counts(per_source)
    fit = FitResult.from_json(state["fit"])
    if cls.tally_columns:       # every source that entered has a tally, empty when it counted nothing
        for counts in per_source.values():
            counts.setdefault("tally", {})
    report = {"per_source": per_source, "totals": _totals(per_source, bool(cls.tally_columns)), "fit": fit.facts,
              "settings": settings, "warnings": list(fit.warnings),
              "figures": [f.to_json() for f in fit.figures]}
    if cls.tally_columns:
        report["tally_columns"] = {c: cls.columns[c].doc for c in cls.tally_columns}
    kept = [r["kept"] for r in results]
    state.update(done=True, report=report, kept_per_partition=kept,
                 process_seconds=round(time.perf_counter() - t1, 2))
    write_json_atomic(state, out_dir / STATE)
    for line in fit.warnings:
        runlog.event("warning", f"[{name}] WARNING {line}", stage=name)
    tot = report["totals"]
    runlog.event("stage_done", f"[{name}] {tot['documents_in']} in, {tot['kept']} kept, "
                 f"{tot['documents_in'] - tot['kept']} dropped ({time.perf_counter() - t0:.1f} s)",
                 stage=name, documents_in=tot["documents_in"], kept=tot["kept"], dropped=tot["dropped"],
                 seconds=round(time.perf_counter() - t0, 2))
    return outputs, fp, report, kept, fit


#: Warnings of one stage kept (run log, manifest, report); more are counted in one last line.
MAX_WARNINGS = 50


def _check_fit(cls, result: Any, work_dir: Path) -> FitResult:
    """``result`` as returned by ``cls.fit``, checked against what the stage
    declares (:attr:`Stage.artifacts`): every declared file and value is
    there, files exist under ``work_dir``, nothing undeclared; figures of a
    known kind; facts, exports and figures plain JSON. Returns it with each
    warning on one line and at most :data:`MAX_WARNINGS` of them.

    Raises:
        BuildError: the fit broke its stage's contract (a bug in the stage).
    """
    if not isinstance(result, FitResult):
        raise BuildError(f"[{cls.name}] fit returned {type(result).__name__}, not a stages.base.FitResult")
    files = {k for k, v in cls.artifacts.items() if v.startswith("file:")}
    values = set(cls.artifacts) - files
    problems = []
    if set(result.artifacts) != files:
        problems.append(f"artifacts {sorted(result.artifacts)}, declared {sorted(files)}")
    if set(result.exports) != values:
        problems.append(f"exports {sorted(result.exports)}, declared {sorted(values)}")
    for key, rel in result.artifacts.items():
        if not (Path(work_dir) / rel).is_file():
            problems.append(f"artifact {key} = {rel} is not a file under {work_dir}")
    kinds = {"curve", "bars", "column_histogram"}
    problems += [f"figure {f.title!r} has kind {f.kind!r}, not one of {sorted(kinds)}"
                 for f in result.figures if f.kind not in kinds]
    if not all(isinstance(w, str) for w in result.warnings):
        problems.append("warnings must be strings")
    try:
        json.dumps(result.to_json(), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append(f"facts, exports or figures are not plain JSON ({exc}; convert numpy numbers with "
                        "int()/float(), use str keys)")
    if problems:
        raise BuildError(f"[{cls.name}] fit does not keep its contract: {'; '.join(problems)}")
    lines = [" ".join(w.split()) for w in result.warnings]      # one line each
    if len(lines) > MAX_WARNINGS:
        lines = [*lines[:MAX_WARNINGS], f"... and {len(lines) - MAX_WARNINGS:,} more warnings (see the facts)"]
    return dataclasses.replace(result, warnings=tuple(lines))


@dataclasses.dataclass
class Staged:
    """What the stages leave: per stage its report, partitions (with the
    layers up to it) and code digest (``CodeDigest.facts()``), and the last
    fingerprint."""

    reports: dict[str, Any]
    parts: dict[str, list[PartitionRef]]
    final: list[PartitionRef]
    fingerprint: str
    seconds: dict[str, float]
    code: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: declared values of every stage's fit (``FitResult.exports``): name -> value
    exports: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: declared files of every stage's fit: name -> absolute path
    artifacts: dict[str, Path] = dataclasses.field(default_factory=dict)
    #: artifact or export name -> the stage that provided it
    provided_by: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def last(self) -> str:
        """The last stage that ran (its totals are the kept documents)."""
        return list(self.reports)[-1]


def stages_phase(cfg, ingested: Ingested, work: Path, executor, runlog: RunLog) -> Staged:
    """Phase 2 (see the module docstring)."""
    parts, upstream = ingested.parts, ingested.fingerprint
    docs = None
    reports: dict[str, Any] = {}
    outputs: dict[str, list[PartitionRef]] = {}
    seconds: dict[str, float] = {}
    code: dict[str, Any] = {}
    exports: dict[str, Any] = {}
    artifacts: dict[str, Path] = {}
    provided_by: dict[str, str] = {}
    plugins = tuple(cfg.plugins)
    for name in stage_names(plugins):
        if not getattr(cfg, name).enabled:
            runlog.event("stage_disabled", f"[{name}] disabled in the config", stage=name)
            continue
        t0 = time.perf_counter()
        digest = stage_code_digest(name, plugins)
        parts, upstream, report, docs, fit = run_stage(name, cfg, parts, work, upstream, cfg.seed, executor,
                                                  runlog, docs, code=digest)
        exports.update(fit.exports)
        artifacts.update({k: work / name / "fit" / rel for k, rel in fit.artifacts.items()})
        provided_by.update({k: name for k in (*fit.exports, *fit.artifacts)})
        reports[name] = report
        outputs[name] = parts
        code[name] = digest.facts()
        seconds[name] = round(time.perf_counter() - t0, 2)
    return Staged(reports=reports, parts=outputs, final=parts, fingerprint=upstream, seconds=seconds, code=code,
                  exports=exports, artifacts=artifacts, provided_by=provided_by)


# --------------------------------------------------------------------------- assemble

def assemble_phase(cfg, ingested: Ingested, staged: Staged, work: Path, tmp: Path, executor,
                   runlog: RunLog) -> dict[str, Any]:
    """Phase 3: the version's files in ``tmp`` (see the module docstring).

    Returns:
        The assembly's manifest entries plus ``tokenizer_report`` and
        ``files`` (sha256 of every file but the shards).

    Raises:
        BuildError: nothing survived the stages, or no sample can be packed.
    """
    if staged.reports[staged.last]["totals"]["kept"] == 0:
        raise BuildError("no document survived the stages: nothing to pack (see the summary table)")
    depths = [(name, i + 1) for i, name in enumerate(staged.reports)]
    code = code_digest(ASSEMBLE_CODE)
    fingerprint = _fingerprint("assemble", staged.fingerprint, config_dict(cfg)["output"], cfg.seed,
                               code.digest)
    from pipeline.lineage import lineage_columns

    carried = lineage_columns(list(staged.reports), tuple(cfg.plugins))
    out = assemble(cfg, staged.final, depths, staged.reports, ingested.bytes_per_char,
                   pad_id=staged.exports["pad_id"], planned_tokens=staged.exports["planned_tokens"],
                   target_shares=staged.exports.get("target_shares"), phases=staged.exports.get("phases"),
                   decision_columns=[c["name"] for c in carried],
                   work=work / "assemble", tmp=tmp, executor=executor, runlog=runlog, fingerprint=fingerprint,
                   max_token_id=staged.reports[staged.provided_by["tokenizer"]]["fit"].get("max_token_id"))
    out["code"] = code.facts()
    out["lineage_columns"] = carried
    runlog.event("assembled", None, samples=out["num_samples"], shards=len(out["shards"]))
    with open(tmp / layout.QUARANTINE, "wb") as out_fh:
        for path in ingested.quarantine_files:
            if path.exists():
                with open(path, "rb") as in_fh:
                    shutil.copyfileobj(in_fh, out_fh)
    shutil.copyfile(staged.artifacts["tokenizer"], tmp / layout.TOKENIZER)
    # tokenizer_config.json and special_tokens_map.json: AutoTokenizer.from_pretrained(version)
    from pipeline.hf_tokenizer import hf_tokenizer_files

    for name, text in hf_tokenizer_files(tmp / layout.TOKENIZER, getattr(cfg, staged.provided_by["tokenizer"]),
                                         cfg.output.seq_length).items():
        (tmp / name).write_text(text, encoding="utf-8")
    # Credentials (storage_options keys, tokens, ...) are not published (pipeline.redact).
    (tmp / layout.CONFIG).write_text(yaml.safe_dump(redact(config_dict(cfg)), sort_keys=True, allow_unicode=True),
                                     encoding="utf-8")
    # Tokenizer coverage report on the held-out split, inside the version (hashed in "files").
    from pipeline.tokenizer_report import build_report

    tokenizer_stage = staged.provided_by["tokenizer"]
    out["tokenizer_report"] = build_report(getattr(cfg, tokenizer_stage), staged.parts[tokenizer_stage],
                                           tmp / layout.TOKENIZER,
                                           tmp, cfg.seed, runlog.echo)
    runlog.event("tokenizer_report_done", None)
    written = set(out["files"])
    # Written after the manifest (or a run fact): never in its "files", also
    # when an earlier attempt left them here before it was killed.
    later = {layout.MANIFEST, layout.MANIFEST_DIGEST, layout.REPORT, layout.RUN_LOG}
    for p in sorted(tmp.rglob("*")):
        rel = p.relative_to(tmp).as_posix()
        if p.is_file() and rel not in written and rel not in later and not rel.startswith(layout.SHARDS + "/"):
            out["files"][rel] = sha256_file(p)
    out["files"] = dict(sorted(out["files"].items()))
    return out


# --------------------------------------------------------------------------- manifest, publish

def accounting(ingested: Ingested, staged: Staged, assembled: dict[str, Any]) -> dict[str, Any]:
    """documents in = kept + dropped (by reason) + quarantined, checked.

    Raises:
        BuildError: the counts do not add up, or the decision and document
            tables do not hold what the stages report.
    """
    n_quarantined = sum(ingested.quarantine.values())
    n_in = sum(s["documents_in"] for s in ingested.counts.values()) + n_quarantined
    dropped: Counter = Counter()
    for rep in staged.reports.values():
        dropped.update(rep["totals"]["dropped"])
    n_kept = staged.reports[staged.last]["totals"]["kept"]
    acc = {"documents_in": n_in, "kept": n_kept, "dropped": sum(dropped.values()),
           "quarantined": n_quarantined, "dropped_by_reason": dict(sorted(dropped.items()))}
    if n_in != n_kept + acc["dropped"] + acc["quarantined"]:
        raise BuildError(f"accounting does not add up: {acc}")
    if assembled["decision_rows"] != acc["dropped"]:
        raise BuildError(f"{assembled['decision_rows']} decision rows for {acc['dropped']} dropped documents")
    if assembled["kept_rows"] != n_kept:
        raise BuildError(f"{assembled['kept_rows']} rows in documents/ for {n_kept} kept documents")
    return acc


def manifest_phase(version: str, cfg, config_path: Path, ingested: Ingested, staged: Staged,
                   assembled: dict[str, Any], tmp: Path, run: dict[str, Any], runlog: RunLog) -> dict[str, Any]:
    """Phase 4: check the accounting, write ``manifest.json`` (credentials
    redacted, :mod:`pipeline.redact`), its digest ``manifest.sha256`` and
    ``report.html`` into ``tmp``. Returns the manifest."""
    manifest = build_manifest(version=version, cfg=cfg, inputs=ingested.inputs, quarantine=ingested.quarantine,
                              ingest_counts=ingested.counts, partitions=len(ingested.parts),
                              failed_files=ingested.failed_files, nul_removed=ingested.nul_removed,
                              stage_reports=staged.reports,
                              tokenizer_facts=staged.reports[staged.provided_by["tokenizer"]]["fit"],
                              mixture_facts=staged.reports[staged.provided_by["planned_tokens"]]["fit"],
                              accounting=accounting(ingested, staged, assembled), assembled=assembled,
                              code={"ingest": ingested.code, **staged.code, "assemble": assembled["code"]},
                              run={**run, "config_file": str(config_path)})
    from pipeline.loader import open_files_warning

    # Version-level warnings (not a stage's): a training host must be able to open the shards.
    manifest["output_warnings"] = [w for w in [open_files_warning(len(manifest["shards"]))] if w]
    manifest = redact(manifest, runlog.secrets)
    write_manifest(manifest, tmp)  # and its digest, manifest.sha256
    runlog.event("manifest_written", None)
    # The page shows run facts (times, memory): derived from the manifest, not hashed in it.
    from pipeline.report import write_report

    write_report(tmp)
    runlog.event("report_written", None)
    return manifest


def check_complete(tmp: Path, manifest: dict[str, Any]) -> None:
    """Check that ``tmp`` holds a whole version before it is published: the
    manifest and its digest (matching), every shard with its byte size and its
    ``.db`` index, one lineage part per shard, every file the manifest's
    ``files`` lists, the tokenizer, config, quarantine list, report and run log.
    Sizes and presence only: the digests were taken as each file was written
    (``verify`` re-hashes).

    Raises:
        BuildError: something is missing or has the wrong size; the message
            names the first few and the total.
    """
    from pipeline.manifest import check_manifest_digest

    problems = []
    bad_digest = check_manifest_digest(tmp, required=True)
    if bad_digest:
        problems.append(bad_digest)
    for shard in manifest.get("shards") or []:
        if "name" not in shard and "mindrecord" not in (manifest.get("formats") or {"mindrecord": {}}):
            continue  # the row cut only: output.formats has no mindrecord
        path = tmp / shard["name"]
        if not path.is_file():
            problems.append(f"{shard['name']} is missing")
        elif "bytes" in shard and path.stat().st_size != shard["bytes"]:
            problems.append(f"{shard['name']} has {path.stat().st_size} bytes, the manifest says {shard['bytes']}")
        db = layout.shard_index(path)
        if not db.is_file() or db.stat().st_size == 0:
            problems.append(f"{shard['name']}.db is missing or empty")
    if not manifest.get("shards"):
        problems.append("the manifest lists no shard")
    lineage = [f"{layout.LINEAGE}/{layout.part_name(i)}" for i in range(len(manifest.get("shards") or []))]
    needed = [*lineage, *(manifest.get("files") or {}), layout.TOKENIZER, layout.CONFIG, layout.QUARANTINE,
              layout.REPORT, layout.RUN_LOG]
    problems += _format_file_problems(tmp, manifest)
    problems += [f"{rel} is missing" for rel in dict.fromkeys(needed) if not (tmp / rel).is_file()]
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise BuildError(f"{tmp} is not a complete version, not published: {shown}")


def _format_file_problems(tmp: Path, manifest: dict[str, Any]) -> list[str]:
    """Presence and sizes of the files of ``manifest["formats"]`` other than
    the top-level shards (``shifted/`` shards with their ``.db``, the Megatron
    ``.bin`` and ``.idx``), one line per problem."""
    problems = []
    formats = manifest.get("formats") or {}
    expected = [(f["name"], f.get("bytes"), True) for f in (formats.get("mindrecord_shifted") or {}).get("files", [])]
    megatron = formats.get("megatron")
    if megatron:
        expected += [(megatron["bin"]["name"], megatron["bin"]["bytes"], False),
                     (megatron["idx"]["name"], megatron["idx"]["bytes"], False)]
    for name, size, has_index in expected:
        path = tmp / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif size is not None and path.stat().st_size != size:
            problems.append(f"{name} has {path.stat().st_size} bytes, the manifest says {size}")
        if has_index and not layout.shard_index(path).is_file():
            problems.append(f"{name}.db is missing")
    return problems


def _copy_run_log(src: Path, dst: Path, secrets: set[str]) -> None:
    """Copy the run log line by line, each record redacted (lines written by
    earlier attempts too)."""
    from pipeline.redact import redact, scrub_text

    with open(src, encoding="utf-8", errors="replace") as fin, open(dst, "w", encoding="utf-8") as fout:
        for line in fin:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                fout.write(scrub_text(line.rstrip("\n"), secrets) + "\n")
                continue
            fout.write(json.dumps(redact(record, secrets), ensure_ascii=False, default=str) + "\n")


def publish_phase(tmp: Path, final: Path, runlog: RunLog, wall_seconds: float,
                  manifest: dict[str, Any] | None = None, lock=None) -> None:
    """Phase 5: rename ``tmp`` to ``final``, never over an existing version,
    only while this build holds the version's lock and only when ``tmp`` is
    complete (:func:`check_complete`). "published" is printed after the
    rename.

    Raises:
        VersionExistsError: ``final`` appeared meanwhile (``tmp`` stays).
        BuildError: the lock is no longer this build's, or ``tmp`` is not
            complete.
    """
    crash_point("assemble", 0)
    if lock is not None and not lock.held():
        raise BuildError(f"{lock.path} no longer holds this build's lock (removed by hand?): not publishing "
                         f"{final}; the build stays in {tmp}")
    if final.exists():
        raise VersionExistsError(f"{final} appeared during the build; the new build stays in {tmp}")
    runlog.event("publish", None, version_dir=str(final), wall_seconds=wall_seconds)
    # The run log is a run fact: copied in, not hashed in the manifest.
    _copy_run_log(runlog.path, tmp / layout.RUN_LOG, runlog.secrets)
    if manifest is not None:
        check_complete(tmp, manifest)
    try:
        os.rename(tmp, final)  # a non-empty `final` makes this fail: never replaced
    except OSError as exc:
        if final.exists():
            raise VersionExistsError(f"{final} appeared during the build; the new build stays in {tmp}") from None
        raise
    runlog.echo(f"published {final}")


# --------------------------------------------------------------------------- build

def _log_failure(runlog: RunLog, exc: BaseException) -> None:
    """Log ``build_failed`` with the error's one-line summary
    (:func:`pipeline.failures.failure_line`) and its full traceback (for a
    :class:`PartitionError`, each failed task's, from the worker); then note
    on ``exc`` where that traceback is, for the CLI's one line. A log that
    cannot be written (a full disk) is noted too, and the build's own error
    is what propagates."""
    import traceback

    from pipeline.executor import PartitionError
    from pipeline.failures import failure_line

    failed = exc.errors[:10] if isinstance(exc, PartitionError) else []
    tasks = [{"task": i, "error": failure_line(e) or f"{type(e).__name__}: {e}",
              "traceback": "".join(traceback.format_exception(e))} for i, e in failed]
    try:
        runlog.event("build_failed", None, error=f"{type(exc).__name__}: {exc}", summary=failure_line(exc),
                     traceback="".join(traceback.format_exception(exc)), failed_tasks=tasks)
    except OSError:
        exc.add_note(f"the run log {runlog.path} could not be written either")
        return
    exc.add_note(f"full traceback in {runlog.path}")


def build(version: str, config_path: Path | None = None, corpora_root: Path | None = None,
          num_workers: int | None = None, log=print, strict: bool = False) -> BuildResult:
    """Build ``<corpora_root>/<version>`` from a config.

    Re-running after a crash (even SIGKILL) at any point resumes from the
    finished partitions, stages and assembly tasks in
    ``corpora/.work/<version>`` and publishes a version whose shards and
    manifest (less its ``run`` section) are byte-identical to an
    uninterrupted build.

    Args:
        version: the version name, e.g. ``v1`` (:func:`pipeline.config.check_version`:
            ASCII letters, digits, ``.``, ``_``, ``-``, at most 100 characters).
        config_path: the config file; default ``configs/<version>.yaml`` if it
            exists, else ``configs/default.yaml``.
        corpora_root: where versions live; default ``$MINDCORPUS_CORPORA_DIR``,
            else the config's ``corpora_dir`` relative to the repo root
            (:func:`pipeline.location.corpora_root`).
        num_workers: override ``executor.num_workers``.
        log: a ``print``-like function for progress lines.
        strict: any quarantined input record stops the build after ingest.

    Returns:
        The published version directory and its manifest.

    Raises:
        ConfigError: invalid config, or a Parquet input lacks the configured
            ``text_field``/``id_field`` (nothing was done).
        ListingError: an input directory cannot be listed (nothing was done).
        VersionExistsError: the version already exists (nothing was done).
        VersionLockedError: another build of this version runs (or another
            host's lock is there; nothing was done).
        BuildError: ``strict`` and some input was quarantined, or the inputs
            leave nothing to write.
        PartitionError: a stage failed on some partitions (the others finished).
    """
    check_version(version)
    t_start = time.perf_counter()
    config_path = Path(config_path) if config_path else config_path_for(version)
    cfg = load_config(config_path)
    try:
        check_plugins_current(cfg.plugins)
    except RegistryError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    preflight(cfg, str(config_path))
    base = config_base(config_path)
    root = corpora_root_for(corpora_root, config_path, version, corpora_dir=cfg.corpora_dir).path
    final = root / version
    if final.exists():
        raise VersionExistsError(f"{final} already exists: published versions are never overwritten "
                                 "(choose a new VERSION, or remove that directory yourself)")
    skipped: list[str] = []
    inputs = list_inputs(cfg, base, skipped)
    check_input_schemas(cfg, inputs)
    secrets = secret_values(config_dict(cfg))
    lock = VersionLock.acquire(root, version)  # before anything is written for this version
    try:
        if final.exists():  # published by the build that held the lock before this one
            raise VersionExistsError(f"{final} was published by another build meanwhile: published versions "
                                     "are never overwritten (choose a new VERSION)")
        work = root / ".work" / version
        tmp = root / f".tmp-{version}"
        work.mkdir(parents=True, exist_ok=True)
        runlog = RunLog(work, log, secrets=secrets)
    except BaseException:
        lock.release()
        raise
    workers = num_workers or cfg.executor.num_workers
    try:
        runlog.event("build_start", f"building {version} from {config_path} ({len(inputs)} input files) in {work}",
                     version=version, config=str(config_path), config_hash=config_hash(cfg),
                     inputs=len(inputs), workers=workers, pid=os.getpid(), lock=str(lock.path))
        if lock.taken_over is not None:
            runlog.event("lock_taken_over", f"took over the stale lock {lock.path} of "
                         f"{describe_lock(lock.taken_over)} (that process no longer runs)",
                         stale_lock=lock.taken_over)
        if skipped:
            runlog.event("inputs_skipped", f"skipped {len(skipped)} hidden or partial-upload file(s) matched by "
                         f"source patterns: {', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}",
                         files=skipped[:1000], count=len(skipped))
        timings: dict[str, float] = {}
        with make_executor(cfg.executor, workers) as executor:
            t0 = time.perf_counter()
            ingested = ingest_phase(cfg, inputs, work, executor, runlog, strict)
            timings["ingest"] = round(time.perf_counter() - t0, 2)
            staged = stages_phase(cfg, ingested, work, executor, runlog)
            timings.update(staged.seconds)
            t0 = time.perf_counter()
            assembled = assemble_phase(cfg, ingested, staged, work, tmp, executor, runlog)
            timings["assemble"] = round(time.perf_counter() - t0, 2)
            worker_peak = executor.peak_worker_rss_mb
            by_task = {k: round(v, 1) for k, v in sorted(executor.peaks_by_task.items())}
            nodes = dict(sorted(executor.nodes.items()))
        run = {"wall_seconds": round(time.perf_counter() - t_start, 2), "stage_seconds": timings,
               "peak_rss": {"driver_mb": process_peak_mb(), "largest_worker_mb": worker_peak,
                            "largest_task_mb": by_task},
               "executor": cfg.executor.kind, "num_workers": workers, "task_nodes": nodes,
               "shard_nodes": assembled["shard_nodes"]}
        manifest = manifest_phase(version, cfg, config_path, ingested, staged, assembled, tmp, run, runlog)
        publish_phase(tmp, final, runlog, manifest["run"]["wall_seconds"], manifest, lock)
        return BuildResult(final, manifest)
    except BaseException as exc:
        _log_failure(runlog, exc)
        raise
    finally:
        runlog.close()
        lock.release()
