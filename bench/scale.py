"""``make bench-scale``: does build memory stay flat as the corpus grows?

For each replication factor (``bench.scale_data.replicate``: ``factor``
near-copies of every record of the development corpus) and, with
``--large``, for a corpus of more than 2.5 GiB of kept text
(``bench.scale_data.large_kept_text``), this generates the input (cached
under ``<out>/data/<name>/``), writes a config and runs the build as a user
would, in a subprocess::

    .venv/bin/python -m pipeline build --version <name> --config <cfg> \\
        --corpora-root <out>/corpora --workers 2

While it runs, every 0.25 s, it samples the RSS of the driver and of every
descendant process (pool workers, Ray workers, KenLM's lmplz, ...), and the
phase the build is in (``heartbeat.json`` and ``run.log.jsonl`` of the work
directory), so each process's peak is attributed to a stage. After the
build: wall and CPU seconds, CPU seconds per million input characters, the
manifest's stage seconds, bytes on disk per stage under
``<corpora>/.work/<name>/`` (with and without model files) and per entry of
the version. Then the work directory and the version are deleted (unless
``--keep``). With ``--large`` the version must also pass ``pipeline
verify`` and give its last global step through the loader.

    .venv/bin/python -m bench.scale [--factors 1 4 16] [--large] [--out bench-results/scale]
                                    [--workers 2] [--keep] [--generate-only]

Results: ``<out>/scale.json`` and ``<out>/scale.md`` (rewritten after each
build). Units: seconds, bytes; ``MiB`` = 2**20 bytes; ``M chars`` = 10**6
characters (code points); RSS limits in the acceptance criteria are decimal
(2.5 GB = 2.5e9 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench import scale_data
from pipeline import layout
from pipeline.config import REPO_ROOT
from pipeline.runlog import HEARTBEAT
from stages.tokenize import TOKENIZER_FILE

GENERATOR_VERSION = 1          # bump when scale_data's output changes (invalidates the data cache)
SAMPLE_S = 0.25                # RSS / heartbeat sampling period
DISK_SAMPLE_S = 10.0           # .work size sampling period
MIB = 1 << 20
RSS_LIMIT_BYTES = 2.5e9        # acceptance: every process <= 2.5 GB at 16x
RSS_GROWTH_LIMIT = 1.3         # ... and within 1.3x of the 1x build
CPU_GROWTH_LIMIT = 1.2         # CPU s per M chars at 16x within 1.2x of 1x
WORK_RATIO_LIMIT = 2.0         # .work bytes (models excluded) <= 2x compressed input
LARGE_KEPT_BYTES = 2.5 * 2**30
MODEL_SUFFIXES = (".binary", ".arpa", ".model")
MODEL_NAMES = (TOKENIZER_FILE,)


# ----------------------------------------------------------------------------- inputs and config

def _python() -> str:
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def generate(kind: str, factor: int | None, data_root: Path, seed: int, workers: int,
             corpus: Path, heuristics: dict[str, Any]) -> dict[str, Any]:
    """Generate (or reuse) one input corpus under ``data_root/<name>/``.

    A ``_GENERATED.json`` marker holds the generator's parameters and its
    result; a directory whose marker matches and whose files are all there
    is reused. Returns the generator's result (``replicate`` or
    ``large_kept_text``) plus ``dir`` and ``reused``.
    """
    name = f"x{factor}" if kind == "replicate" else "large"
    out = data_root / name
    params = {"generator": GENERATOR_VERSION, "kind": kind, "factor": factor, "seed": seed,
              "corpus": str(corpus), "heuristics": heuristics}
    marker = out / "_GENERATED.json"
    if marker.exists():
        saved = json.loads(marker.read_text())
        files = saved["result"]["files"]
        if saved.get("params") == params and all((out / f).exists() for f in files):
            print(f"[{name}] reusing generated data in {out}")
            return {**saved["result"], "dir": str(out), "reused": True}
    if out.exists():
        shutil.rmtree(out)
    print(f"[{name}] generating into {out}")
    if kind == "replicate":
        result = scale_data.replicate(factor, out, seed, corpus, workers)
    else:
        result = scale_data.large_kept_text(out, seed=seed, corpus=corpus, workers=workers,
                                            heuristics=heuristics)
    marker.write_text(json.dumps({"params": params, "result": result}, indent=1))
    return {**result, "dir": str(out), "reused": False}


def base_config(seq_length: int, workers: int) -> dict[str, Any]:
    """``bench.__main__.bench_config`` for the development corpus, with
    ``workers`` executor workers, no ``ingest`` section (its defaults; the
    keys are changing) and ``mixture: {}`` (no token budget: every kept
    document once)."""
    from bench.__main__ import bench_config

    cfg = bench_config(scale_data.SHARED_CORPUS, seq_length)
    cfg.pop("ingest", None)
    cfg["executor"] = {"num_workers": workers}
    cfg["mixture"] = {}
    return cfg


def replicate_config(base: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """The base config with every source reading its generated file."""
    cfg = json.loads(json.dumps(base))
    for src in cfg["sources"].values():
        src["paths"] = [str(data_dir / Path(p).name) for p in src["paths"]]
    return cfg


def large_config(base: dict[str, Any], data_dir: Path, files: list[str]) -> dict[str, Any]:
    """Sources of the large case: the big documents by origin (``web``:
    fortunes, ``manuals``: man pages, ``books``: the Bible), plus the
    development corpus's ``reference`` (Debian Reference: the KenLM
    reference, as in the replicated builds) and ``code`` sources unchanged."""
    cfg = json.loads(json.dumps(base))
    groups = {"web": "large-fortunes-", "manuals": "large-manpages-", "books": "large-kjv-"}
    for src, prefix in groups.items():
        paths = sorted(str(data_dir / f) for f in files if f.startswith(prefix))
        if paths:
            cfg["sources"][src] = {**cfg["sources"][src], "paths": paths}
        else:
            cfg["sources"].pop(src)
    return cfg


# ----------------------------------------------------------------------------- sampling

class PhaseTracker:
    """Which phase a build is in, from its work directory.

    ``run.log.jsonl`` (read incrementally) gives ``stage_start`` (the stage's
    fit begins, in the driver), ``stage_done`` and other events;
    ``heartbeat.json`` names the stage whose partitions are being processed
    (rewritten when a stage's task map starts and as tasks finish). Labels:
    ``ingest``, ``<stage>:fit``, ``<stage>:process``, ``after:<stage>``
    (between stages; after the last stage: assembling and publishing, see
    :func:`_final_label`), ``<event>`` for other phases the log names (e.g.
    ``publish``), or the heartbeat's stage alone when there is no log.
    """

    def __init__(self, work_dir: Path):
        self.log = work_dir / layout.RUN_LOG
        self.heartbeat = work_dir / HEARTBEAT
        self.offset = 0
        self.label = "start"
        self.stage: str | None = None
        self.stages: list[str] = []
        self.fit = False

    def poll(self) -> str:
        for event in self._new_events():
            name, stage = event.get("event", ""), event.get("stage")
            if name == "build_start":
                self.label = "ingest"
            elif name == "stage_start" and stage:
                self.stage, self.fit, self.label = stage, True, f"{stage}:fit"
                self.stages.append(stage)
            elif name in ("stage_done", "stage_reused") and stage:
                self.stage, self.fit, self.label = None, False, f"after:{stage}"
                if stage not in self.stages:
                    self.stages.append(stage)
            elif name not in ("warning", "stage_disabled", "ingest_done", "build_failed") and name.endswith(
                    ("_start", "publish")):
                self.label = name.removesuffix("_start")
        beat = self._heartbeat()
        if beat is not None:
            stage = beat.get("stage")
            if self.fit and stage == self.stage:
                self.fit, self.label = False, f"{stage}:process"
            elif self.label == "start" and stage:
                self.label = stage
        return self.label

    def _new_events(self) -> list[dict[str, Any]]:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1          # a partly written last line waits for the next poll
        self.offset += end
        events = []
        for line in data[:end].splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events

    def _heartbeat(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.heartbeat.read_text())
        except (OSError, ValueError):
            return None


def _final_label(label: str, stages: list[str]) -> str:
    """``after:<last stage>`` is the assemble phase (ordering, packing,
    shards, lineage, manifest, publish)."""
    return "assemble" if stages and label == f"after:{stages[-1]}" else label


def _vm_hwm(pid: int) -> int | None:
    """``VmHWM`` (peak resident set, bytes) from ``/proc/<pid>/status``."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class TreeSampler:
    """Per-process peak RSS of a process and its descendants.

    For every process seen: ``peak_rss`` (bytes, the largest sampled RSS),
    the phase and time of that sample, ``vm_hwm`` (bytes, the kernel's peak
    RSS from the last ``/proc/<pid>/status`` read: also covers peaks between
    samples, but ends at that last read) and ``cpu_s`` (user + system
    seconds at the last sample). Processes are keyed by (pid, start time), so
    a reused pid is a new process.
    """

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.procs: dict[tuple[int, float], dict[str, Any]] = {}
        self.tree_peak = 0             # largest sum of RSS over the tree, bytes
        self.tree_peak_phase = None
        self.phase_peaks: dict[str, dict[str, int]] = {}   # phase -> {"driver", "worker"} peak RSS bytes
        self.samples = 0

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self, phase: str, t: float) -> int:
        """Sample every process of the tree now; returns the tree's total RSS (bytes)."""
        total = 0
        self.samples += 1
        for p in self._tree():
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    cpu = p.cpu_times()
                    key = (p.pid, p.create_time())
                    info = self.procs.get(key)
                    if info is None:
                        try:
                            cmd = " ".join(p.cmdline())[:160]
                        except psutil.Error:
                            cmd = ""
                        info = self.procs[key] = {
                            "pid": p.pid, "role": "driver" if p.pid == self.root_pid else "worker",
                            "name": p.name(), "cmdline": cmd, "first_seen_s": round(t, 2),
                            "peak_rss": 0, "peak_phase": None, "peak_at_s": None, "vm_hwm": None}
            except psutil.Error:
                continue
            hwm = _vm_hwm(p.pid)
            if hwm is not None:
                info["vm_hwm"] = hwm
            info["last_seen_s"] = round(t, 2)
            info["cpu_s"] = cpu.user + cpu.system
            total += rss
            if rss > info["peak_rss"]:
                info.update(peak_rss=rss, peak_phase=phase, peak_at_s=round(t, 2))
            slot = self.phase_peaks.setdefault(phase, {"driver": 0, "worker": 0})
            slot[info["role"]] = max(slot[info["role"]], rss)
        if total > self.tree_peak:
            self.tree_peak, self.tree_peak_phase = total, phase
        return total


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _is_model(rel: Path) -> bool:
    return rel.name in MODEL_NAMES or rel.suffix in MODEL_SUFFIXES


def work_usage(work: Path) -> dict[str, dict[str, int]]:
    """Bytes under the work directory per top-level entry (a stage; loose
    files under ``(files)``): ``total``; ``models`` (``*.binary``, ``*.arpa``,
    ``*.model``, ``tokenizer.json``); ``fit_other`` (other files under a
    ``fit/`` directory: what a stage's fit learned, e.g. dedup clusters);
    ``data`` = total - models - fit_other (the "models excluded" bytes of the
    acceptance criterion, which excludes everything under ``fit/``)."""
    usage: dict[str, dict[str, int]] = {}
    if not work.exists():
        return usage
    for root, _, files in os.walk(work):
        for f in files:
            path = Path(root) / f
            rel = path.relative_to(work)
            try:
                size = path.lstat().st_size
            except OSError:
                continue
            top = rel.parts[0] if len(rel.parts) > 1 else "(files)"
            u = usage.setdefault(top, {"total": 0, "models": 0, "fit_other": 0, "data": 0})
            u["total"] += size
            if _is_model(rel):
                u["models"] += size
            elif "fit" in rel.parts[:-1]:
                u["fit_other"] += size
            else:
                u["data"] += size
    return dict(sorted(usage.items()))


def version_usage(vdir: Path) -> dict[str, int]:
    """Bytes per top-level entry of a version directory."""
    if not vdir.exists():
        return {}
    return {p.name: (_dir_bytes(p) if p.is_dir() else p.stat().st_size) for p in sorted(vdir.iterdir())}


# ----------------------------------------------------------------------------- one build

def _error_line(log_path: Path) -> str | None:
    """The last error-looking line of a build's output (the CLI prints
    ``error: ...``; a crash ends with the exception line)."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    for ln in reversed(lines):
        if ln.startswith("error:") or "Error" in ln.split(":", 1)[0] or "Killed" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else None


def run_build(name: str, cfg_path: Path, corpora: Path, workers: int, log_dir: Path,
              timeout_s: float | None, max_tree_bytes: float) -> dict[str, Any]:
    """Run one build in a subprocess (its own session) and sample it.

    The build is killed (its whole process group) when it runs past
    ``timeout_s`` or when its process tree's RSS exceeds ``max_tree_bytes``
    (to keep this machine alive); the reason is recorded.

    Returns:
        ``rc``, ``wall_s``, ``cpu_s`` (user + system of the driver and all
        descendants it waited for: RUSAGE_CHILDREN delta), ``cpu_s_sampled``
        (sum over sampled processes of their last sampled user + system),
        ``processes`` (per process, see :class:`TreeSampler`),
        ``driver``/``largest_worker`` (peak RSS bytes, phase, VmHWM),
        ``phase_peaks``, ``tree_peak_bytes``, ``work_peak_bytes``,
        ``killed`` (None or why), ``error`` (last error line), ``log``.
    """
    work = corpora / ".work" / name
    for stale in (work, corpora / name, corpora / f".tmp-{name}", corpora / ".work" / "cache"):
        if stale.exists():
            shutil.rmtree(stale)          # a cold build each time: no resume, no cached models
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    cmd = [_python(), "-m", "pipeline", "build", "--version", name, "--config", str(cfg_path),
           "--corpora-root", str(corpora), "--workers", str(workers)]
    print(f"[{name}] {' '.join(cmd)}")
    tracker = PhaseTracker(work)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    killed = None
    work_peak = 0
    next_disk = t0 + DISK_SAMPLE_S
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        sampler = TreeSampler(proc.pid)
        last_report = t0
        while True:
            now = time.perf_counter()
            phase = tracker.poll()
            tree = sampler.sample(phase, now - t0)
            if proc.poll() is not None:
                break
            if now >= next_disk:
                work_peak = max(work_peak, _dir_bytes(work) if work.exists() else 0)
                next_disk = now + DISK_SAMPLE_S
            if killed is None and tree > max_tree_bytes:
                killed = f"process tree RSS {tree / MIB:,.0f} MiB > limit {max_tree_bytes / MIB:,.0f} MiB"
            if killed is None and timeout_s is not None and now - t0 > timeout_s:
                killed = f"timeout after {timeout_s:.0f} s"
            if killed is not None:
                print(f"[{name}] killing the build: {killed}")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                break
            if now - last_report >= 30:
                print(f"[{name}] {now - t0:,.0f} s, phase {_final_label(phase, tracker.stages)}, "
                      f"tree RSS {tree / MIB:,.0f} MiB")
                last_report = now
            time.sleep(SAMPLE_S)
        rc = proc.wait()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    work_peak = max(work_peak, _dir_bytes(work) if work.exists() else 0)
    procs = list(sampler.procs.values())
    for p in procs:
        p["peak_phase"] = _final_label(p["peak_phase"], tracker.stages) if p["peak_phase"] else None
    phase_peaks = {_final_label(k, tracker.stages): v for k, v in sampler.phase_peaks.items()}

    def summary(p: dict[str, Any] | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {"pid": p["pid"], "name": p["name"], "peak_rss": p["peak_rss"], "phase": p["peak_phase"],
                "vm_hwm": p["vm_hwm"], "peak": max(p["peak_rss"], p["vm_hwm"] or 0)}

    driver = next((p for p in procs if p["role"] == "driver"), None)
    workers_ = [p for p in procs if p["role"] == "worker"]
    largest = max(workers_, key=lambda p: max(p["peak_rss"], p["vm_hwm"] or 0), default=None)
    result = {
        "rc": rc, "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "cpu_s_sampled": round(sum(p.get("cpu_s", 0.0) for p in procs), 2),
        "samples": sampler.samples, "driver": summary(driver), "largest_worker": summary(largest),
        "tree_peak_bytes": sampler.tree_peak,
        "tree_peak_phase": _final_label(sampler.tree_peak_phase or "", tracker.stages) or None,
        "phase_peaks": phase_peaks, "work_peak_bytes": work_peak, "killed": killed,
        "error": None if rc == 0 else _error_line(log_path), "log": str(log_path),
        "processes": sorted(procs, key=lambda p: -max(p["peak_rss"], p["vm_hwm"] or 0)),
    }
    status = "ok" if rc == 0 else f"FAILED rc={rc}: {killed or result['error']}"
    print(f"[{name}] build {status}; wall {wall:,.1f} s, CPU {result['cpu_s']:,.1f} s, "
          f"driver peak {(driver or {}).get('peak_rss', 0) / MIB:,.0f} MiB, "
          f"largest worker {(largest or {}).get('peak_rss', 0) / MIB:,.0f} MiB")
    return result


def read_manifest(vdir: Path) -> dict[str, Any] | None:
    """The version's manifest (:func:`pipeline.manifest.load_manifest`), None
    when the build published none."""
    from pipeline.manifest import load_manifest

    try:
        return load_manifest(vdir)
    except FileNotFoundError:
        return None


def manifest_facts(m: dict[str, Any]) -> dict[str, Any]:
    """Documents, characters in and kept, stage seconds, samples and tokens
    from a manifest (keys that a manifest lacks are None)."""
    ing = m.get("ingest", {}).get("per_source", {})
    order = m.get("stage_order") or list(m.get("stages", {}))
    last = m.get("stages", {}).get(order[-1], {}).get("totals", {}) if order else {}
    acc = m.get("accounting", {})
    return {
        "documents": acc.get("documents_in", sum(s.get("documents_in", 0) for s in ing.values())),
        "chars_in": sum(s.get("chars_in", 0) for s in ing.values()) or None,
        "kept": acc.get("kept"), "kept_chars": last.get("kept_chars"),
        "dropped_by_reason": acc.get("dropped_by_reason"),
        "stage_order": order,
        "stage_seconds": m.get("run", {}).get("stage_seconds", {}),
        "manifest_peak_rss": m.get("run", {}).get("peak_rss"),
        "num_samples": m.get("num_samples"), "num_tokens": m.get("num_tokens"),
        "seq_length": m.get("seq_length"),
    }


def kept_text_bytes(vdir: Path) -> int | None:
    """UTF-8 bytes of the kept documents' text, from the version's documents
    table (``documents.parquet`` or ``documents/part-*.parquet``) when it
    stores text; None otherwise. Streams record batches."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = layout.table_parts(vdir, layout.DOCUMENTS)
    if not files or "text" not in pq.ParquetFile(files[0]).schema_arrow.names:
        return None
    total = 0
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(columns=["text"], batch_size=256):
            total += pc.sum(pc.binary_length(batch.column(0))).as_py() or 0
    return total


def verify_and_load(name: str, corpora: Path) -> dict[str, Any]:
    """``pipeline verify`` of the version, then its last global step
    (global batch 8) read through ``pipeline.loader.create_dataset`` in a
    subprocess: one batch of shape [8, seq_length + 1] must come back."""
    vdir = corpora / name
    help_text = subprocess.run([_python(), "-m", "pipeline", "verify", "--help"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout
    cmd = [_python(), "-m", "pipeline", "verify"]
    cmd += [name, "--corpora-root", str(corpora)] if "--corpora-root" in help_text else [str(vdir)]
    t0 = time.perf_counter()
    v = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    out: dict[str, Any] = {"verify_cmd": " ".join(cmd), "verify_rc": v.returncode,
                           "verify_output": (v.stdout + v.stderr).strip()[-500:],
                           "verify_s": round(time.perf_counter() - t0, 1)}
    script = (
        "import json, sys\n"
        "from pipeline.loader import create_dataset\n"
        "from pipeline.manifest import load_manifest\n"
        "vdir = sys.argv[1]\n"
        "m = load_manifest(vdir)\n"
        "last = m['num_samples'] // 8 - 1\n"
        "ds = create_dataset(vdir, global_batch=8, start_step=last)\n"
        "shapes = [list(b[0].shape) for b in ds.create_tuple_iterator(output_numpy=True)]\n"
        "print('RESULT ' + json.dumps({'last_step': last, 'shapes': shapes, 'seq_length': m['seq_length']}))\n")
    t0 = time.perf_counter()
    r = subprocess.run([_python(), "-c", script, str(vdir)], cwd=REPO_ROOT, capture_output=True, text=True)
    res = next((json.loads(ln[7:]) for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    out["loader_s"] = round(time.perf_counter() - t0, 1)
    if res is None:
        out.update(loader_ok=False, loader_error=(r.stderr.strip().splitlines() or ["no output"])[-1][:300])
    else:
        want = [8, res["seq_length"] + 1]
        out.update(last_step=res["last_step"], last_batch_shapes=res["shapes"],
                   loader_ok=res["shapes"] == [want])
    print(f"[{name}] verify rc={out['verify_rc']}; last step {out.get('last_step')}: "
          f"{out.get('last_batch_shapes') or out.get('loader_error')}")
    return out


def measure(name: str, kind: str, data: dict[str, Any], cfg: dict[str, Any], args) -> dict[str, Any]:
    """Build one generated corpus and collect every measurement."""
    out: Path = args.out
    corpora = out / "corpora"
    cfg_path = out / "configs" / f"{name}.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    compressed = sum(Path(p).stat().st_size for src in cfg["sources"].values() for p in src["paths"])
    row: dict[str, Any] = {"name": name, "kind": kind, "factor": data.get("factor"), "config": str(cfg_path),
                           "input_compressed_bytes": compressed,
                           "generated": {k: data[k] for k in ("documents", "chars", "compressed_bytes",
                                                              "text_bytes", "raw_bytes") if k in data}}
    build = run_build(name, cfg_path, corpora, args.workers, out / "logs", args.timeout,
                      args.max_tree_fraction * psutil.virtual_memory().total)
    row["build"] = build
    work = corpora / ".work" / name
    vdir = corpora / name
    row["work_usage"] = work_usage(work)
    row["cache_bytes"] = _dir_bytes(corpora / ".work" / "cache") if (corpora / ".work" / "cache").exists() else 0
    row["work_bytes"] = sum(u["total"] for u in row["work_usage"].values())
    row["work_bytes_excl_models"] = sum(u["data"] for u in row["work_usage"].values())
    row["work_ratio"] = round(row["work_bytes_excl_models"] / compressed, 3) if compressed else None
    row["version_usage"] = version_usage(vdir)
    row["version_bytes"] = sum(row["version_usage"].values())
    manifest = read_manifest(vdir)
    row["manifest"] = manifest_facts(manifest) if manifest else None
    chars_in = (row["manifest"] or {}).get("chars_in") or data.get("chars")
    row["chars_in"] = chars_in
    row["chars_in_source"] = "manifest" if (row["manifest"] or {}).get("chars_in") else "generator"
    row["cpu_s_per_mchar"] = round(build["cpu_s"] / (chars_in / 1e6), 3) if chars_in else None
    if kind == "large" and build["rc"] == 0 and manifest:
        row["kept_text_bytes"] = kept_text_bytes(vdir)
        row.update(verify_and_load(name, corpora))
    if not args.keep:
        for path in (work, vdir, corpora / f".tmp-{name}", corpora / ".work" / "cache"):
            if path.exists():
                shutil.rmtree(path)
    return row


# ----------------------------------------------------------------------------- report

def _fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares line y = slope * x + intercept (None with < 2 points)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return {"slope": round(slope, 4), "intercept": round(my - slope * mx, 2)}


def _peak(p: dict[str, Any] | None) -> int:
    return (p or {}).get("peak") or 0


def _mib(b: float | None) -> str:
    return "-" if b is None else f"{b / MIB:,.0f}"


def criteria(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The acceptance criteria, each ``{"name", "value", "pass"}`` (pass None
    when it cannot be decided from the builds run)."""
    by_factor = {r["factor"]: r for r in rows if r["kind"] == "replicate"}
    one, sixteen = by_factor.get(1), by_factor.get(16)
    out = []

    def ok(r):
        return r is not None and r["build"]["rc"] == 0

    if sixteen is not None:
        worst = max((max(p["peak_rss"], p["vm_hwm"] or 0) for p in sixteen["build"]["processes"]), default=0)
        out.append({"name": "every process <= 2.5 GB peak RSS at 16x",
                    "value": f"{worst / 1e9:.2f} GB" + ("" if ok(sixteen) else " (build failed)"),
                    "pass": ok(sixteen) and worst <= RSS_LIMIT_BYTES})
    if one is not None and sixteen is not None:
        for role in ("driver", "largest_worker"):
            a, b = _peak(one["build"][role]), _peak(sixteen["build"][role])
            ratio = b / a if a else None
            out.append({"name": f"{role.replace('_', ' ')} peak RSS 16x / 1x <= {RSS_GROWTH_LIMIT}",
                        "value": "-" if ratio is None else f"{ratio:.2f}",
                        "pass": ok(one) and ok(sixteen) and ratio is not None and ratio <= RSS_GROWTH_LIMIT})
        a, b = one.get("cpu_s_per_mchar"), sixteen.get("cpu_s_per_mchar")
        ratio = b / a if a and b else None
        out.append({"name": f"CPU s per M chars 16x / 1x <= {CPU_GROWTH_LIMIT}",
                    "value": "-" if ratio is None else f"{ratio:.2f}",
                    "pass": ok(one) and ok(sixteen) and ratio is not None and ratio <= CPU_GROWTH_LIMIT})
    reps = [r for r in rows if r["kind"] == "replicate"]
    if reps:
        worst = max(reps, key=lambda r: r["work_ratio"] or 0)
        out.append({"name": f".work bytes (models excluded) <= {WORK_RATIO_LIMIT:g}x compressed input, every factor",
                    "value": f"{worst['work_ratio']}x at {worst['factor']}x",
                    "pass": all(ok(r) for r in reps) and all((r["work_ratio"] or 0) <= WORK_RATIO_LIMIT
                                                             for r in reps)})
    for r in rows:
        if r["kind"] != "large":
            continue
        kept = r.get("kept_text_bytes")
        kept_chars = (r.get("manifest") or {}).get("kept_chars")
        # UTF-8 bytes >= characters, so kept characters above the limit also decide it.
        value = kept if kept is not None else kept_chars
        if not ok(r) or value is None:
            verdict = False if not ok(r) else None
        elif kept is not None:
            verdict = kept > LARGE_KEPT_BYTES
        else:
            verdict = True if kept_chars > LARGE_KEPT_BYTES else None
        out.append({"name": "large: kept text > 2.5 GiB",
                    "value": "-" if value is None else f"{value / 2**30:.2f} GiB"
                             + ("" if kept is not None else " (chars, a lower bound of bytes)"),
                    "pass": verdict})
        out.append({"name": "large: build, verify and last global step",
                    "value": f"rc {r['build']['rc']}, verify rc {r.get('verify_rc')}, "
                             f"last step {r.get('last_step')}: {r.get('last_batch_shapes')}",
                    "pass": ok(r) and r.get("verify_rc") == 0 and bool(r.get("loader_ok"))})
    return out


def write_report(out: Path, rows: list[dict[str, Any]], extra: dict[str, Any]) -> str:
    """Write ``scale.json`` and ``scale.md``; returns the Markdown."""
    crit = criteria(rows)
    ok_rows = [r for r in rows if r["kind"] == "replicate" and r["build"]["rc"] == 0 and r["chars_in"]]
    xs = [r["chars_in"] / 1e6 for r in ok_rows]
    fits = {"cpu_s_vs_mchars": _fit(xs, [r["build"]["cpu_s"] for r in ok_rows]),
            "peak_rss_mib_vs_mchars": _fit(xs, [max(_peak(r["build"]["driver"]), _peak(r["build"]["largest_worker"]))
                                               / MIB for r in ok_rows]),
            "driver_peak_rss_mib_vs_mchars": _fit(xs, [_peak(r["build"]["driver"]) / MIB for r in ok_rows]),
            "worker_peak_rss_mib_vs_mchars": _fit(xs, [_peak(r["build"]["largest_worker"]) / MIB for r in ok_rows])}
    (out / "scale.json").write_text(json.dumps({**extra, "rows": rows, "fits": fits, "criteria": crit},
                                               indent=1, default=str))
    lines = [f"# Scale benchmark ({extra.get('machine')})", "",
             "| case | documents | M chars in | wall s | CPU s | CPU s / M chars | driver peak MiB (stage) "
             "| largest worker peak MiB (stage) | .work MiB excl. models (x compressed input) | version MiB "
             "| status |",
             "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for r in rows:
        b = r["build"]
        d, w = b["driver"] or {}, b["largest_worker"] or {}
        docs = (r["manifest"] or {}).get("documents") or r["generated"].get("documents")
        status = "ok" if b["rc"] == 0 else f"FAILED rc {b['rc']}: {b['killed'] or b['error']}"
        if r["kind"] == "large" and b["rc"] == 0:
            kept = r.get("kept_text_bytes")
            status += (f"; kept {kept / 2**30:.2f} GiB text" if kept is not None else
                       f"; kept {((r['manifest'] or {}).get('kept_chars') or 0) / 1e6:,.0f} M chars")
            status += (f"; verify {'ok' if r.get('verify_rc') == 0 else 'FAILED'}; last step "
                       f"{r.get('last_step')} -> {r.get('last_batch_shapes') or r.get('loader_error')}")
        lines.append(
            f"| {r['name']} | {docs or 0:,} | {(r['chars_in'] or 0) / 1e6:,.1f} | {b['wall_s']:,.1f} | "
            f"{b['cpu_s']:,.1f} | {r['cpu_s_per_mchar'] if r['cpu_s_per_mchar'] is not None else '-'} | "
            f"{_mib(d.get('peak_rss'))} ({d.get('phase')}; HWM {_mib(d.get('vm_hwm'))}) | "
            f"{_mib(w.get('peak_rss'))} ({w.get('phase')}; HWM {_mib(w.get('vm_hwm'))}"
            f"{'' if w.get('name') in (None, 'python') else '; ' + w['name']}) | "
            f"{_mib(r['work_bytes_excl_models'])} ({r['work_ratio']}x) | {_mib(r['version_bytes'])} | {status} |")
    lines += [""]
    for r in rows:
        b = r["build"]
        lines.append(f"* {r['name']}: process tree peak {_mib(b['tree_peak_bytes'])} MiB ({b['tree_peak_phase']}); "
                     f"{len(b['processes'])} processes seen in {b['samples']} samples; CPU s sampled per process "
                     f"{b['cpu_s_sampled']:,.1f} (vs {b['cpu_s']:,.1f} from rusage); .work peak "
                     f"{_mib(b['work_peak_bytes'])} MiB (all files, sampled every {DISK_SAMPLE_S:g} s), "
                     f"{_mib(r['work_bytes'])} MiB at the end with models; shared model cache "
                     f"{_mib(r['cache_bytes'])} MiB; compressed input {_mib(r['input_compressed_bytes'])} MiB; "
                     "version: " + ", ".join(f"{k} {v / MIB:,.1f}" for k, v in r["version_usage"].items()
                                             if v >= MIB / 10) + " MiB")
    lines += ["", "Peak RSS is the largest 0.25 s sample (the stage running then); HWM is the kernel's "
              "VmHWM at the last read. CPU s: user + system of the build and all its processes "
              "(RUSAGE_CHILDREN). .work excl. models: everything under corpora/.work/<name>/ except "
              "*.binary, *.arpa, *.model, tokenizer.json and fit/ directories.", ""]
    stages: list[str] = ["ingest"]
    for r in rows:
        stages += [s for s in (r["manifest"] or {}).get("stage_order", []) if s not in stages]
    stages.append("assemble")
    for r in rows:
        stages += [s for s in [*(r["manifest"] or {}).get("stage_seconds", {}), *r["work_usage"]]
                   if s not in stages]
    lines += ["| stage | " + " | ".join(f"{r['name']} s | {r['name']} .work MiB (models, fit)" for r in rows) + " |",
              "|---|" + "---:|---:|" * len(rows)]
    for s in stages:
        cells = []
        for r in rows:
            sec = (r["manifest"] or {}).get("stage_seconds", {}).get(s)
            u = r["work_usage"].get(s)
            cells.append("-" if sec is None else f"{sec:,.1f}")
            cells.append("-" if u is None else f"{u['data'] / MIB:,.1f} ({u['models'] / MIB:,.1f}, "
                                               f"{u['fit_other'] / MIB:,.1f})")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "Peak RSS (MiB) by phase, driver / largest worker:", ""]
    for r in rows:
        pp = r["build"]["phase_peaks"]
        lines.append(f"* {r['name']}: " + ", ".join(f"{k} {v['driver'] / MIB:,.0f}/{v['worker'] / MIB:,.0f}"
                                                   for k, v in pp.items()))
    lines += ["", "Growth (least squares over the successful replicated builds, x = M chars in):", ""]
    for key, f in fits.items():
        lines.append(f"* {key}: " + ("n/a (fewer than 2 builds)" if f is None else
                                      f"slope {f['slope']}, intercept {f['intercept']}"))
    by_factor = {r["factor"]: r for r in rows if r["kind"] == "replicate"}
    if 1 in by_factor and 16 in by_factor:
        a, b = by_factor[1], by_factor[16]
        if a.get("cpu_s_per_mchar") and b.get("cpu_s_per_mchar"):
            lines.append(f"* CPU s per M chars 16x / 1x: {b['cpu_s_per_mchar'] / a['cpu_s_per_mchar']:.2f}")
        pa_, pb = (max(_peak(r["build"]["driver"]), _peak(r["build"]["largest_worker"])) for r in (a, b))
        if pa_:
            lines.append(f"* peak RSS 16x / 1x: {pb / pa_:.2f}")
    lines += ["", "Acceptance criteria:", ""]
    for c in crit:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[c["pass"]]
        lines.append(f"* {verdict}: {c['name']} ({c['value']})")
    sim = extra.get("copy_similarity")
    if sim:
        u = sim["uniform"]
        lines += ["", f"Copies: median exact Jaccard of 5-gram shingles (original, copy 1) over {u['pairs']} "
                      f"random documents {u['median_brief']} (the dedup stage's normalization and shingles: "
                      f"{u['median_pipeline']}; share >= 0.8: {u['share_pipeline_ge_0.8']}); per file: "
                  + ", ".join(f"{n} {v['median_brief']}" for n, v in sim["per_file"].items())]
    md = "\n".join(lines) + "\n"
    (out / "scale.md").write_text(md)
    return md


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="*", default=[1, 4, 16],
                    help="replication factors (none: only --large)")
    ap.add_argument("--large", action="store_true", help="also the > 2.5 GiB kept-text case")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "scale")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="edit seed of the generated corpora")
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--corpus", type=Path, default=scale_data.SHARED_CORPUS)
    ap.add_argument("--keep", action="store_true", help="keep each build's work directory and version")
    ap.add_argument("--generate-only", action="store_true", help="generate (or reuse) the inputs, no builds")
    ap.add_argument("--timeout", type=float, default=None, help="kill a build after this many seconds")
    ap.add_argument("--max-tree-fraction", type=float, default=0.9,
                    help="kill a build whose processes together hold more than this share of RAM")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    args.out = out
    out.mkdir(parents=True, exist_ok=True)
    base = base_config(args.seq_length, args.workers)
    heuristics = base.get("heuristics", {})
    cases = [("replicate", f) for f in args.factors] + ([("large", None)] if args.large else [])
    machine = (f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
               f"{args.workers} build workers")
    extra: dict[str, Any] = {"machine": machine, "generated": {}}
    if any(k == "replicate" for k, _ in cases):
        extra["copy_similarity"] = scale_data.copy_similarity(args.corpus, seed=args.seed)
        u = extra["copy_similarity"]["uniform"]
        print(f"copy similarity: median Jaccard (original, copy 1) {u['median_brief']} "
              f"(dedup's shingles {u['median_pipeline']}) over {u['pairs']} documents")
    data = {}
    for kind, factor in cases:
        name = f"scale-x{factor}" if kind == "replicate" else "scale-large"
        data[name] = generate(kind, factor, out / "data", args.seed, args.workers, args.corpus, heuristics)
        extra["generated"][name] = {k: v for k, v in data[name].items() if k not in ("pools",)}
    if args.generate_only:
        (out / "generated.json").write_text(json.dumps(extra, indent=1, default=str))
        for name, d in data.items():
            print(f"{name}: {d['documents']:,} documents, {d['chars']:,} chars, "
                  f"{d['compressed_bytes']:,} bytes compressed" +
                  (f", {d['text_bytes']:,} bytes of text" if "text_bytes" in d else ""))
        return
    rows: list[dict[str, Any]] = []
    for kind, factor in cases:
        name = f"scale-x{factor}" if kind == "replicate" else "scale-large"
        d = data[name]
        cfg = (replicate_config(base, Path(d["dir"])) if kind == "replicate"
               else large_config(base, Path(d["dir"]), list(d["files"])))
        rows.append(measure(name, kind, d, cfg, args))
        md = write_report(out, rows, extra)
    print(md)


if __name__ == "__main__":
    main()
