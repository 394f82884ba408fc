"""``manifest.json``: what a version is made of, and how it was made.

Everything except the ``run`` section is a function of (input files, config,
seed, code): two builds of the same inputs and config give manifests that
differ only in ``run`` (creation time, wall times, peak memory, host).

Top-level keys: ``version``, ``manifest_format``, ``code_commit``,
``config_hash``, ``seed``, ``inputs`` (path, source, bytes, sha256),
``quarantine`` (count by reason), ``ingest`` (per source documents and
characters read, partitions, ``failed_files``: every input not read whole,
``nul_removed``: NUL characters removed from texts), ``stages`` (per stage: documents and
characters in, kept, dropped by reason, per source; what the stage learned),
``accounting`` (documents in = kept + dropped + quarantined), ``tokenizer``
(sha256, vocabulary size, special ids), ``mixture``, ``packing``,
``seq_length``, ``num_samples``, ``num_tokens``, ``shards`` (name, sha256,
rows, bytes), ``layout`` (how the split tables are cut, ``pipeline.layout``),
``files`` (sha256 of the other files of the version), ``run``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
# 2: split tables (lineage/, documents/, ..., pipeline.layout), "layout" section.
MANIFEST_FORMAT = 2


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def code_commit(repo: Path) -> str:
    """``git rev-parse HEAD`` of the code, with ``-dirty`` when tracked files
    differ from it; ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def load_manifest(version_dir: Path) -> dict[str, Any]:
    """Read ``<version_dir>/manifest.json``.

    Raises:
        FileNotFoundError: not a published version directory.
    """
    path = Path(version_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{version_dir} is not a corpus version (no {MANIFEST})")
    return json.loads(path.read_text(encoding="utf-8"))


def without_run_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest minus its ``run`` section (what determinism compares)."""
    return {k: v for k, v in manifest.items() if k != "run"}


def build_manifest(version: str, cfg, inputs: list[dict[str, Any]], quarantine: dict[str, int],
                   ingest_counts: dict[str, Any], partitions: int, stage_reports: dict[str, Any],
                   accounting: dict[str, Any], assembled: dict[str, Any], run: dict[str, Any],
                   failed_files: list[dict[str, Any]] | None = None,
                   nul_removed: dict[str, int] | None = None) -> dict[str, Any]:
    """The manifest of a version, from what each build phase produced.

    Args:
        inputs: per input ``source``, ``file``, ``bytes``, ``sha256``.
        quarantine: quarantined records by reason.
        ingest_counts: per source documents and characters read.
        partitions: number of ingest partitions.
        stage_reports: stage -> ``{"per_source", "totals", "fit"}``.
        accounting: the checked accounting.
        assembled: ``pipeline.build.assemble_phase``'s result.
        run: run facts (``wall_seconds``, ``stage_seconds``, ``peak_rss``,
            ``executor``, ``num_workers``, ``task_nodes``, ``config_file``).
        failed_files: input files not read whole (or empty): ``source``,
            ``file``, ``reason``, ``detail``, ``records_read``.
        nul_removed: ``{"documents": n, "characters": n}`` of NUL characters
            removed from texts at ingest.
    """
    import os
    import platform
    import socket
    from datetime import datetime, timezone

    from pipeline.config import REPO_ROOT, config_hash

    tok = stage_reports["tokenize"]["fit"]
    files = assembled["files"]
    manifest = {
        "manifest_format": MANIFEST_FORMAT,
        "version": version,
        "code_commit": code_commit(REPO_ROOT),
        "config_hash": config_hash(cfg),
        "seed": cfg.seed,
        "inputs": inputs,
        "quarantine": dict(sorted(quarantine.items())),
        "ingest": {"per_source": ingest_counts, "partitions": partitions, "failed_files": failed_files or [],
                   "nul_removed": nul_removed or {"documents": 0, "characters": 0}},
        "stage_order": list(stage_reports),
        "stages": stage_reports,
        "accounting": accounting,
        "tokenizer": {"file": "tokenizer.json", "sha256": files["tokenizer.json"],
                      **{k: v for k, v in tok.items() if k != "tokenizer_sha256"}},
        "tokenizer_report": assembled["tokenizer_report"],
        "mixture": stage_reports["mixture"]["fit"],
        **{k: assembled[k] for k in ("seq_length", "num_samples", "num_tokens", "columns", "packing", "shards",
                                     "layout")},
        "files": files,
    }
    manifest["run"] = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **run,
        "host": socket.gethostname(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "log": "run.log.jsonl",
    }
    return manifest
