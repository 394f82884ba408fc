"""Orchestration: ingest -> stages -> assemble -> publish.

One build turns the configured sources into ``corpora/<VERSION>/``:

1. **ingest** (per input file, in parallel): read records, give each a stable
   id, quarantine what cannot be read, write partitions of at most
   ``ingest.partition_max_docs`` documents.
2. **stages** in ``stages.STAGES`` order: ``fit`` once in the driver, then
   ``process`` per partition on the executor. Each stage's outputs live in
   ``corpora/.work/<VERSION>/<stage>/`` under a fingerprint (stage config,
   upstream fingerprint, seed, code version); a re-run skips finished
   partitions and finished stages.
3. **assemble**: order the sampled documents, pack ``seq_length + 1`` windows,
   shuffle samples globally by seed, write MindRecord shards, the lineage
   table, the kept documents, the dropped-document decisions, the tokenizer,
   the resolved config and ``manifest.json`` into ``corpora/.tmp-<VERSION>/``.
4. **publish**: rename the temporary directory to ``corpora/<VERSION>/``.
   An existing version is never overwritten (:class:`VersionExistsError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import resource
import shutil
import socket
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

import pipeline
from pipeline.config import REPO_ROOT, ConfigError, config_dict, config_hash, config_path_for, load_config
from pipeline.assemble import BuildError, assemble, final_documents, write_decisions
from pipeline.executor import (make_executor, process_partition, write_json_atomic,
                               write_table_atomic)
from pipeline.manifest import MANIFEST, MANIFEST_FORMAT, code_commit, sha256_file
from pipeline.readers import (Quarantined, display_path, input_size_and_sha256, is_url, read_file,
                              resolve_paths)
from pipeline.runlog import RunLog, crash_point
from stages import STAGES, stage_class
from stages.base import KEEP, REASON, Partitions, StageContext

DOC_COLUMNS = ["id", "source", "file", "line", "text", "meta", "lang_hint", "chars"]
STATE = "_STATE.json"
TOOLS_DIR = REPO_ROOT / "tools" / "bin"


class VersionExistsError(FileExistsError):
    """The version directory already exists; versions are immutable."""


@dataclasses.dataclass
class BuildResult:
    version_dir: Path
    manifest: dict[str, Any]


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_state(out_dir: Path) -> dict[str, Any]:
    path = out_dir / STATE
    return json.loads(path.read_text()) if path.exists() else {}


def _peak_rss_mb() -> dict[str, float]:
    # ru_maxrss is in KiB on Linux.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"driver_mb": round(own, 1), "largest_worker_mb": round(kids, 1)}


# --------------------------------------------------------------------------- ingest

def ingest_file(task: dict[str, Any]) -> dict[str, Any]:
    """Read one input file into partitions (run on a worker).

    Args:
        task: ``source``, ``path``, ``file`` (display path), ``format``,
            ``text_field``, ``text_unit``, ``lang``, ``max_bytes``,
            ``partition_max_docs``, ``out_dir``, ``index`` (file number).

    Returns:
        ``{"parts": [...], "documents": n, "quarantine": [entries]}``; also
        written to ``file-<index>.json`` as the file's completion marker.
    """
    out_dir = Path(task["out_dir"])
    marker = out_dir / f"file-{task['index']:05d}.json"
    if marker.exists():
        return json.loads(marker.read_text())
    source, file = task["source"], task["file"]
    parts: list[str] = []
    quarantine: list[dict[str, Any]] = []
    rows: list = []
    n_docs = 0

    def flush():
        if not rows:
            return
        path = out_dir / f"part-{task['index']:05d}-{len(parts):05d}.parquet"
        lines = [r.line for r in rows]
        texts = [r.text for r in rows]
        ids = ([f"{source}:{r.doc_id}" for r in rows] if task["id_field"]
               else [f"{source}:{file}:{line}" for line in lines])
        table = pa.table({
            "id": ids,
            "source": [source] * len(rows),
            "file": [file] * len(rows),
            "line": pa.array(lines, pa.int64()),
            "text": texts,
            "meta": [r.meta for r in rows],
            "lang_hint": pa.array([task["lang"]] * len(rows), pa.string()),
            "chars": pa.array([len(t) for t in texts], pa.int64()),
            KEEP: pa.array([True] * len(rows)),
            REASON: pa.array([None] * len(rows), pa.string()),
        })
        write_table_atomic(table, path)
        parts.append(path.name)
        rows.clear()

    for item in read_file(task["path"], file, task["format"], task["text_field"],
                          task["text_unit"], task["max_bytes"], task["id_field"], task["storage_options"]):
        if isinstance(item, Quarantined):
            quarantine.append({"source": source, **dataclasses.asdict(item)})
            continue
        rows.append(item)
        n_docs += 1
        if len(rows) >= task["partition_max_docs"]:
            flush()
    flush()
    result = {"parts": parts, "documents": n_docs, "quarantine": quarantine}
    write_json_atomic(result, marker)
    return result


# --------------------------------------------------------------------------- stages

def _counts(parts: list[Path]) -> dict[str, Any]:
    """Per source: documents and characters in, kept, dropped by reason."""
    per_source: dict[str, dict[str, Any]] = {}
    for path in parts:
        t = pq.read_table(path, columns=["source", "chars", KEEP, REASON])
        for src, chars, keep, reason in zip(t["source"].to_pylist(), t["chars"].to_pylist(),
                                            t[KEEP].to_pylist(), t[REASON].to_pylist()):
            s = per_source.setdefault(src, {"documents_in": 0, "chars_in": 0, "kept": 0,
                                            "kept_chars": 0, "dropped": {}})
            s["documents_in"] += 1
            s["chars_in"] += chars
            if keep:
                s["kept"] += 1
                s["kept_chars"] += chars
            else:
                s["dropped"][reason] = s["dropped"].get(reason, 0) + 1
    return dict(sorted(per_source.items()))


def _totals(per_source: dict[str, Any]) -> dict[str, Any]:
    tot = {"documents_in": 0, "chars_in": 0, "kept": 0, "kept_chars": 0, "dropped": Counter()}
    for s in per_source.values():
        for k in ("documents_in", "chars_in", "kept", "kept_chars"):
            tot[k] += s[k]
        tot["dropped"].update(s["dropped"])
    tot["dropped"] = dict(sorted(tot["dropped"].items()))
    return tot


def run_stage(name: str, cfg, in_parts: list[Path], work: Path, upstream: str, seed: int,
              executor, runlog: RunLog) -> tuple[list[Path], str, dict[str, Any]]:
    """Fit and run one stage over all partitions, resuming where a previous
    run stopped. Returns (output partitions, fingerprint, stage report)."""
    stage_cfg = getattr(cfg, name)
    config_json = stage_cfg.model_dump_json()
    fp = _fingerprint(name, json.loads(config_json), upstream, seed, pipeline.__version__)
    out_dir = work / name
    state = _read_state(out_dir)
    if state.get("fingerprint") != fp and out_dir.exists():
        shutil.rmtree(out_dir)
        state = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = [out_dir / p.name for p in in_parts]
    if state.get("done"):
        runlog.event("stage_reused", f"[{name}] done in an earlier run (fingerprint {fp}), reused",
                     stage=name, fingerprint=fp)
        return outputs, fp, state["report"]
    runlog.event("stage_start", None, stage=name, fingerprint=fp, partitions=len(in_parts),
                 resumed_partitions=sum(o.exists() for o in outputs))
    ctx = StageContext(work_dir=out_dir / "fit", cache_dir=work.parent / "cache",
                       seed=seed, tools_dir=TOOLS_DIR)
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if "fit" not in state:
        stage = stage_class(name)(stage_cfg, ctx)
        state = {"fingerprint": fp, "fit": stage.fit(Partitions(in_parts, executor.map)),
                 "fit_seconds": round(time.perf_counter() - t0, 2)}
        write_json_atomic(state, out_dir / STATE)
    todo = [(name, config_json, ctx, str(i), str(o)) for i, o in zip(in_parts, outputs) if not o.exists()]
    t1 = time.perf_counter()
    docs = [pc.sum(pq.read_table(t[3], columns=[KEEP])[KEEP]).as_py() or 0 for t in todo]
    tracker = runlog.tracker(name, len(todo), docs)
    try:
        executor.map(process_partition, todo, on_done=tracker)
    finally:
        tracker.close()
    per_source = _counts(outputs)
    report = {"per_source": per_source, "totals": _totals(per_source), "fit": state["fit"]}
    state.update(done=True, report=report, process_seconds=round(time.perf_counter() - t1, 2))
    write_json_atomic(state, out_dir / STATE)
    tot = report["totals"]
    runlog.event("stage_done", f"[{name}] {tot['documents_in']} in, {tot['kept']} kept, "
                 f"{tot['documents_in'] - tot['kept']} dropped ({time.perf_counter() - t0:.1f} s)",
                 stage=name, documents_in=tot["documents_in"], kept=tot["kept"], dropped=tot["dropped"],
                 seconds=round(time.perf_counter() - t0, 2))
    return outputs, fp, report


# --------------------------------------------------------------------------- build

def _inputs(cfg, base: Path) -> list[dict[str, Any]]:
    seen: dict[str, str] = {}
    out = []
    for source, scfg in cfg.sources.items():
        root = base
        if scfg.root is not None:
            root = scfg.root if is_url(scfg.root) else base / scfg.root  # base / absolute = absolute
        for path in resolve_paths(scfg.paths, root, scfg.storage_options):
            if path in seen:
                raise ConfigError(f"sources.{source}.paths: {path} is also an input of source {seen[path]!r}")
            seen[path] = source
            size, digest = input_size_and_sha256(path, scfg.storage_options)
            out.append({"source": source, "path": path, "file": display_path(path, root),
                        "bytes": size, "sha256": digest})
    return out


def quarantine_duplicate_ids(parts: list[Path], ingest_dir: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """Quarantine every document whose id an earlier document (in partition
    order: file order, then line) already has (``read.duplicate_id``).

    Ids built from (source, file, line) are unique by construction; sources
    with an ``id_field`` take the input's own ids, which may repeat. Affected
    partitions are rewritten in place, atomically, once; the result is
    recorded in ``ingest/_IDS.json`` so a re-run does not redo it.

    Returns:
        (the partitions, the quarantine entries).
    """
    marker = ingest_dir / "_IDS.json"
    if marker.exists():
        return parts, json.loads(marker.read_text())["quarantine"]
    seen: set[str] = set()
    quarantine: list[dict[str, Any]] = []
    for path in parts:
        t = pq.read_table(path)
        ids = t["id"].to_pylist()
        keep = []
        for i, doc_id in enumerate(ids):
            keep.append(doc_id not in seen)
            seen.add(doc_id)
        if not all(keep):
            for i in (i for i, k in enumerate(keep) if not k):
                quarantine.append({"source": t["source"][i].as_py(), "file": t["file"][i].as_py(),
                                   "line": t["line"][i].as_py(), "byte_offset": -1,
                                   "reason": "read.duplicate_id", "detail": f"id {ids[i]!r} seen before"})
            write_table_atomic(t.filter(pa.array(keep)), path)
    write_json_atomic({"quarantine": quarantine}, marker)
    return parts, quarantine


def build(version: str, config_path: Path | None = None, corpora_root: Path | None = None,
          num_workers: int | None = None, log=print, strict: bool = False) -> BuildResult:
    """Build ``<corpora_root>/<version>`` from a config.

    Re-running after a crash (even SIGKILL) at any point resumes from the
    finished partitions and stages in ``corpora/.work/<version>`` and publishes
    a version whose shards and manifest (less its ``run`` section) are
    byte-identical to an uninterrupted build.

    Args:
        version: the version name, e.g. ``v1`` (letters, digits, ``.``, ``_``, ``-``).
        config_path: the config file; default ``configs/<version>.yaml`` if it
            exists, else ``configs/default.yaml``.
        corpora_root: where versions live; default the config's ``corpora_dir``
            relative to the repo root.
        num_workers: override ``executor.num_workers``.
        log: a ``print``-like function for progress lines.
        strict: any quarantined input record stops the build after ingest.

    Returns:
        The published version directory and its manifest.

    Raises:
        ConfigError: invalid config (nothing was done).
        VersionExistsError: the version already exists (nothing was done).
        BuildError: ``strict`` and some input was quarantined, or the inputs
            leave nothing to write.
        PartitionError: a stage failed on some partitions (the others finished).
    """
    if not version or not all(ch.isalnum() or ch in "._-" for ch in version) or version.startswith("."):
        raise ConfigError(f"version {version!r}: use letters, digits, '.', '_' or '-'")
    t_start = time.perf_counter()
    config_path = Path(config_path) if config_path else config_path_for(version)
    cfg = load_config(config_path)
    base = config_path.resolve().parent.parent if config_path.resolve().parent.name == "configs" else REPO_ROOT
    root = Path(corpora_root) if corpora_root else (base / cfg.corpora_dir)
    final = root / version
    if final.exists():
        raise VersionExistsError(f"{final} already exists: published versions are never overwritten "
                                 "(choose a new VERSION, or remove that directory yourself)")
    inputs = _inputs(cfg, base)
    work = root / ".work" / version
    tmp = root / f".tmp-{version}"
    work.mkdir(parents=True, exist_ok=True)
    runlog = RunLog(work, log)
    try:
        return _build(version, cfg, config_path, inputs, work, tmp, final, runlog, t_start,
                      num_workers or cfg.executor.num_workers, strict)
    except BaseException as exc:
        runlog.event("build_failed", None, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        runlog.close()


def _build(version, cfg, config_path, inputs, work, tmp, final, runlog: RunLog, t_start, workers,
           strict) -> BuildResult:
    runlog.event("build_start", f"building {version} from {config_path} ({len(inputs)} input files) in {work}",
                 version=version, config=str(config_path), config_hash=config_hash(cfg),
                 inputs=len(inputs), workers=workers, pid=os.getpid())
    timings: dict[str, float] = {}
    with make_executor(cfg.executor, workers) as executor:
        # ingest
        t0 = time.perf_counter()
        ingest_fp = _fingerprint("ingest", config_dict(cfg)["sources"], config_dict(cfg)["ingest"],
                                 [(i["source"], i["file"], i["sha256"]) for i in inputs], pipeline.__version__)
        ingest_dir = work / "ingest"
        if _read_state(ingest_dir).get("fingerprint") != ingest_fp and ingest_dir.exists():
            shutil.rmtree(ingest_dir)
        ingest_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic({"fingerprint": ingest_fp}, ingest_dir / STATE)
        tasks = []
        for index, inp in enumerate(inputs):
            scfg = cfg.sources[inp["source"]]
            tasks.append({"source": inp["source"], "path": inp["path"], "file": inp["file"],
                          "format": scfg.format, "text_field": scfg.text_field, "text_unit": scfg.text_unit,
                          "lang": scfg.lang, "id_field": scfg.id_field, "max_bytes": cfg.ingest.max_record_bytes,
                          "storage_options": scfg.storage_options,
                          "partition_max_docs": cfg.ingest.partition_max_docs,
                          "out_dir": str(ingest_dir), "index": index})
        tracker = runlog.tracker("ingest", len(tasks))
        try:
            results = executor.map(ingest_file, tasks, on_done=tracker)
        finally:
            tracker.close()
        parts = [ingest_dir / p for r in results for p in r["parts"]]
        quarantine = [q for r in results for q in r["quarantine"]]
        parts, dup_quarantine = quarantine_duplicate_ids(parts, ingest_dir)
        quarantine += dup_quarantine
        ingest_counts = _counts(parts)
        timings["ingest"] = round(time.perf_counter() - t0, 2)
        n_docs = sum(s["documents_in"] for s in ingest_counts.values())
        runlog.event("ingest_done", f"[ingest] {n_docs} documents in {len(parts)} partitions, "
                     f"{len(quarantine)} quarantined ({timings['ingest']:.1f} s)",
                     documents=n_docs, partitions=len(parts),
                     quarantined=dict(Counter(q["reason"] for q in quarantine)))
        if strict and quarantine:
            raise BuildError(f"--strict: {len(quarantine)} input record(s) quarantined "
                             f"({dict(sorted(Counter(q['reason'] for q in quarantine).items()))}); "
                             f"first: {quarantine[0]['file']} line {quarantine[0]['line']}: {quarantine[0]['reason']}")

        upstream = ingest_fp
        stage_reports: dict[str, Any] = {}
        stage_outputs: dict[str, list[Path]] = {}
        for name in STAGES:
            if not getattr(cfg, name).enabled:
                runlog.event("stage_disabled", f"[{name}] disabled in the config", stage=name)
                continue
            t0 = time.perf_counter()
            parts, upstream, report = run_stage(name, cfg, parts, work, upstream, cfg.seed, executor, runlog)
            stage_reports[name] = report
            stage_outputs[name] = parts
            timings[name] = round(time.perf_counter() - t0, 2)

    ppl_fit = (stage_reports.get("perplexity") or {}).get("fit") or {}
    for lang, why in sorted((ppl_fit.get("skipped") or {}).items()):
        runlog.event("warning", f"[perplexity] WARNING language {lang}: no model ({why}); its documents are "
                     "kept without a perplexity or bucket (give more reference text or perplexity.models)",
                     language=lang, reason=why)
    for src, facts in stage_reports["mixture"]["fit"].get("per_source", {}).items():
        if facts.get("capped"):
            runlog.event("warning", f"[mixture] WARNING source {src} is capped by mixture.max_epochs: target share "
                         f"{facts.get('target_share', 0):.3f} after rescaling (its weight asked for more than "
                         "max_epochs x its tokens)", source=src, facts=facts)

    # assemble
    t0 = time.perf_counter()
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    docs = final_documents(parts)
    out = assemble(cfg, docs, tmp, runlog.echo,
                   pad_id=stage_reports["tokenize"]["fit"]["special_token_ids"]["pad"],
                   mixture=stage_reports["mixture"]["fit"])
    n_decisions = write_decisions(stage_outputs, tmp)
    with open(tmp / "quarantine.jsonl", "w", encoding="utf-8") as fh:
        for q in quarantine:
            fh.write(json.dumps(q, ensure_ascii=False, sort_keys=True) + "\n")
    shutil.copyfile(work / "tokenize" / "fit" / "tokenizer.json", tmp / "tokenizer.json")
    (tmp / "config.yaml").write_text(yaml.safe_dump(config_dict(cfg), sort_keys=True, allow_unicode=True),
                                     encoding="utf-8")
    # Tokenizer coverage report on the held-out split, inside the version (hashed in "files").
    from pipeline.tokenizer_report import build_report
    tokenizer_report = build_report(cfg.tokenize, stage_outputs["tokenize"], tmp / "tokenizer.json",
                                    tmp, cfg.seed, runlog.echo)
    timings["assemble"] = round(time.perf_counter() - t0, 2)

    # accounting: documents in = kept + dropped (by reason) + quarantined
    n_in = sum(ingest_counts[s]["documents_in"] for s in ingest_counts) + len(quarantine)
    dropped = Counter()
    for rep in stage_reports.values():
        dropped.update(rep["totals"]["dropped"])
    n_kept = docs.num_rows
    accounting = {"documents_in": n_in, "kept": n_kept, "dropped": sum(dropped.values()),
                  "quarantined": len(quarantine), "dropped_by_reason": dict(sorted(dropped.items()))}
    if n_in != n_kept + accounting["dropped"] + accounting["quarantined"]:
        raise BuildError(f"accounting does not add up: {accounting}")
    if n_decisions != accounting["dropped"]:
        raise BuildError(f"{n_decisions} decision rows for {accounting['dropped']} dropped documents")

    files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*"))
             if p.is_file() and not p.relative_to(tmp).as_posix().startswith("shards/")}
    tok = stage_reports["tokenize"]["fit"]
    manifest = {
        "manifest_format": MANIFEST_FORMAT,
        "version": version,
        "code_commit": code_commit(REPO_ROOT),
        "config_hash": config_hash(cfg),
        "seed": cfg.seed,
        "inputs": [{k: i[k] for k in ("source", "file", "bytes", "sha256")} for i in inputs],
        "quarantine": dict(sorted(Counter(q["reason"] for q in quarantine).items())),
        "ingest": {"per_source": ingest_counts, "partitions": len(parts)},
        "stage_order": list(stage_reports),
        "stages": stage_reports,
        "accounting": accounting,
        "tokenizer": {"file": "tokenizer.json", "sha256": files["tokenizer.json"],
                      **{k: v for k, v in tok.items() if k != "tokenizer_sha256"}},
        "tokenizer_report": tokenizer_report,
        "mixture": stage_reports["mixture"]["fit"],
        **out,
        "files": files,
    }
    manifest["run"] = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_file": str(config_path),
        "wall_seconds": round(time.perf_counter() - t_start, 2),
        "stage_seconds": timings,
        "peak_rss": _peak_rss_mb(),
        "host": socket.gethostname(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "executor": cfg.executor.kind,
        "num_workers": workers,
        "log": "run.log.jsonl",
    }
    write_json_atomic(manifest, tmp / MANIFEST)
    # The page shows run facts (times, memory): derived from the manifest, not hashed in it.
    from pipeline.report import write_report

    write_report(tmp)
    crash_point("assemble", 0)
    if final.exists():
        raise VersionExistsError(f"{final} appeared during the build; the new build stays in {tmp}")
    runlog.event("publish", f"published {final}", version_dir=str(final),
                 wall_seconds=manifest["run"]["wall_seconds"])
    # The run log is a run fact: copied in, not hashed in the manifest.
    shutil.copyfile(runlog.path, tmp / "run.log.jsonl")
    os.replace(tmp, final)
    return BuildResult(final, manifest)
