"""``manifest.json``: what a version is made of, and how it was made.

Everything except the ``run`` section is a function of (input files, config,
seed, code): two builds of the same inputs and config give manifests that
differ only in ``run`` (creation time, wall times, peak memory, host).

Top-level keys: ``version``, ``manifest_format``, ``code_commit``,
``config_hash``, ``code`` (per phase, ``ingest``, each stage, ``assemble``:
the code digest of its fingerprint, with the source files, data files and
library versions it covers, ``pipeline.code_digest``), ``seed``, ``inputs``
(path, source, bytes, sha256), ``quarantine`` (count by reason), ``ingest``
(per source documents and characters read, partitions, ``failed_files``:
every input not read whole, ``nul_removed``: NUL characters removed from
texts), ``stages`` (per stage: documents and characters in, kept, dropped
by reason, per source; what the stage learned, ``fit``; its effective
settings beyond the config, ``settings``, e.g.
``stages.heuristics.settings.thresholds``: the thresholds applied per
language after presets and overrides),
``accounting`` (documents in = kept + dropped + quarantined), ``tokenizer``
(sha256, vocabulary size, special ids), ``mixture``, ``packing``,
``seq_length``, ``num_samples``, ``num_tokens``, ``shards`` (name, sha256,
rows, bytes), ``layout`` (how the split tables are cut, ``pipeline.layout``),
``files`` (sha256 of the other files of the version), ``run``.

The manifest has its own digest: ``manifest.sha256`` next to it, in
``sha256sum`` format (``<hex>  manifest.json``), written with it
(:func:`write_manifest`) and checked by ``verify``
(:func:`check_manifest_digest`) and by the loader; ``sha256sum -c
manifest.sha256`` checks it too. It guards against corruption and edits, not
against someone who rewrites both files.

:func:`load_manifest` is the one reader of a published manifest (the CLI,
``report``, ``diff``, the loader and the lineage lookup); ``verify`` parses
the same bytes with :func:`parse_manifest` so that it can list every problem
instead of stopping at the first.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from common.checks import check_int
from common.io import json_text, sha256_file, write_bytes_atomic
from pipeline.layout import MANIFEST, MANIFEST_DIGEST, RUN_LOG, TOKENIZER

# 2: split tables (lineage/, documents/, ..., pipeline.layout), "layout" section.
# 3: "code" section (code digests per phase), "settings" per stage.
MANIFEST_FORMAT = 3


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


class ManifestError(ValueError):
    """``manifest.json`` (or its digest) cannot be trusted; the message is one
    line naming the file and what is wrong."""


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The bytes of ``manifest.json``: UTF-8 JSON, sorted keys, 2-space indent,
    final newline (the form the digest is taken of)."""
    return json_text(manifest, indent=2, sort_keys=True, ensure_ascii=False, final_newline=True).encode("utf-8")


def write_manifest(manifest: dict[str, Any], version_dir: Path) -> str:
    """Write ``manifest.json`` and its digest ``manifest.sha256`` into
    ``version_dir`` (each atomically and flushed to disk before its rename,
    :func:`common.io.write_bytes_atomic`; the digest last).

    Returns:
        The hex sha256 of the manifest's bytes.
    """
    data = manifest_bytes(manifest)
    digest = hashlib.sha256(data).hexdigest()
    write_bytes_atomic(data, Path(version_dir) / MANIFEST, fsync=True)
    write_bytes_atomic(f"{digest}  {MANIFEST}\n".encode("ascii"), Path(version_dir) / MANIFEST_DIGEST, fsync=True)
    return digest


def check_manifest_digest(version_dir: Path, required: bool = True) -> str | None:
    """Compare ``manifest.json`` with ``manifest.sha256``.

    Args:
        required: a missing ``manifest.sha256`` is a problem (``verify``);
            with False it is accepted (the loader, for versions written
            before manifests had a digest).

    Returns:
        None when they match (or the digest is absent and not required),
        else one line naming the file and the problem.
    """
    version_dir = Path(version_dir)
    digest_path = version_dir / MANIFEST_DIGEST
    try:
        recorded = digest_path.read_bytes()
    except FileNotFoundError:
        return f"{MANIFEST_DIGEST}: missing, so {MANIFEST} cannot be checked" if required else None
    except OSError as exc:
        return f"{MANIFEST_DIGEST}: cannot read: {exc.strerror}"
    fields = recorded.decode("ascii", "replace").split()
    if len(fields) != 2 or fields[1].lstrip("*") != MANIFEST or len(fields[0]) != 64 \
            or any(c not in "0123456789abcdef" for c in fields[0]):
        return f"{MANIFEST_DIGEST}: not a '<sha256>  {MANIFEST}' line"
    try:
        actual = sha256_file(version_dir / MANIFEST)
    except OSError as exc:
        return f"{MANIFEST}: cannot read: {exc.strerror}"
    if actual != fields[0]:
        return f"{MANIFEST}: SHA-256 differs from {MANIFEST_DIGEST} (edited or corrupt)"
    return None


def parse_manifest(data: bytes, where: str | Path = MANIFEST) -> dict[str, Any]:
    """Decode manifest bytes.

    Raises:
        ManifestError: not UTF-8, not JSON, or not a JSON object (one line,
            naming ``where``).
    """
    try:
        manifest = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 (byte {exc.start}): corrupt manifest") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
                            "corrupt manifest") from None
    except RecursionError:
        raise ManifestError(f"{where}: nested too deeply to be a manifest") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{where}: not a JSON object (a {type(manifest).__name__})")
    return manifest


def load_manifest(version_dir: str | Path, require_digest: bool = False,
                  check_samples: bool = False) -> dict[str, Any]:
    """Read ``<version_dir>/manifest.json``: the one reader of a published
    manifest.

    The bytes are checked against ``manifest.sha256`` when that file is there
    (versions written before the digest existed have none), and always with
    ``require_digest``.

    Args:
        version_dir: a version directory (see ``pipeline.location.resolve_version``).
        require_digest: a missing ``manifest.sha256`` is an error (the
            loader's ``check_sha256``).
        check_samples: also check the fields a reader of samples relies on
            (the loader, the lineage lookup): ``seq_length`` an int >= 1,
            ``num_samples`` an int >= 0, ``shards`` a non-empty list of
            ``{name, rows, ...}`` whose ``rows`` add up to ``num_samples``.

    Returns:
        The parsed manifest.

    Raises:
        FileNotFoundError: not a published version directory (no
            ``manifest.json``).
        ManifestError: the digest differs (an edited or corrupt manifest) or
            is missing with ``require_digest``; the file is not a JSON
            object. The message names the file.
        ValueError: with ``check_samples``, a field above is missing or
            wrong (the message names the file and the field).
    """
    version_dir = Path(version_dir)
    path = version_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{version_dir} is not a corpus version (no {MANIFEST})")
    problem = check_manifest_digest(version_dir, required=require_digest)
    if problem:
        raise ManifestError(f"{version_dir}/{problem}")
    manifest = parse_manifest(path.read_bytes(), path)
    if check_samples:
        _check_sample_fields(manifest, path)
    return manifest


def _check_sample_fields(manifest: dict[str, Any], path: Path) -> None:
    """The checks of :func:`load_manifest` ``check_samples`` (ValueError)."""
    for key, minimum in (("seq_length", 1), ("num_samples", 0)):
        check_int(key, manifest.get(key), minimum, where=f"{path}: ")
    shards = manifest.get("shards")
    # Without the mindrecord format a shard entry is the row cut alone ({rows}).
    named = "mindrecord" in (manifest.get("formats") or {"mindrecord": {}})
    if not isinstance(shards, list) or not shards or not all(
            isinstance(s, dict) and (isinstance(s.get("name"), str) or not named) and isinstance(s.get("rows"), int)
            and not isinstance(s.get("rows"), bool) for s in shards):
        raise ValueError(f"{path}: shards must be a non-empty list of {{name, rows, ...}}")
    total = sum(int(s["rows"]) for s in shards)
    if total != manifest["num_samples"]:
        raise ValueError(f"{path}: shards hold {total} rows but num_samples is {manifest['num_samples']}")


def without_run_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest minus its ``run`` section (what determinism compares)."""
    return {k: v for k, v in manifest.items() if k != "run"}


def build_manifest(version: str, cfg, inputs: list[dict[str, Any]], quarantine: dict[str, int],
                   ingest_counts: dict[str, Any], partitions: int, stage_reports: dict[str, Any],
                   accounting: dict[str, Any], assembled: dict[str, Any], run: dict[str, Any],
                   tokenizer_facts: dict[str, Any], mixture_facts: dict[str, Any],
                   code: dict[str, Any] | None = None,
                   failed_files: list[dict[str, Any]] | None = None,
                   nul_removed: dict[str, int] | None = None) -> dict[str, Any]:
    """The manifest of a version, from what each build phase produced.

    Args:
        inputs: per input ``source``, ``file``, ``bytes``, ``sha256``.
        quarantine: quarantined records by reason.
        ingest_counts: per source documents and characters read.
        partitions: number of ingest partitions.
        stage_reports: stage -> ``{"per_source", "totals", "fit", "settings",
            "warnings", "figures"}`` (and, for a stage with a tally,
            ``per_source.<source>.tally``, ``totals.tally``: key -> count,
            and ``tally_columns``: column -> meaning).
        tokenizer_facts: the fit facts of the stage that made the tokenizer
            (the manifest's ``tokenizer``).
        mixture_facts: the fit facts of the stage that planned the copies
            (the manifest's ``mixture``).
        accounting: the checked accounting.
        assembled: ``pipeline.build.assemble_phase``'s result.
        run: run facts (``wall_seconds``, ``stage_seconds``, ``peak_rss``,
            ``executor``, ``num_workers``, ``task_nodes``, ``config_file``).
        code: phase (``ingest``, each stage, ``assemble``) ->
            ``CodeDigest.facts()`` of the code that made it.
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

    tok = tokenizer_facts
    files = assembled["files"]
    manifest = {
        "manifest_format": MANIFEST_FORMAT,
        "version": version,
        "code_commit": code_commit(REPO_ROOT),
        "config_hash": config_hash(cfg),
        "code": code or {},
        "seed": cfg.seed,
        "inputs": inputs,
        "quarantine": dict(sorted(quarantine.items())),
        "ingest": {"per_source": ingest_counts, "partitions": partitions, "failed_files": failed_files or [],
                   "nul_removed": nul_removed or {"documents": 0, "characters": 0}},
        "stage_order": list(stage_reports),
        "stages": stage_reports,
        "accounting": accounting,
        "tokenizer": {"file": TOKENIZER, "sha256": files[TOKENIZER],
                      **{k: v for k, v in tok.items() if k != "tokenizer_sha256"}},
        "tokenizer_report": assembled["tokenizer_report"],
        "mixture": mixture_facts,
        **{k: assembled[k] for k in ("seq_length", "num_samples", "num_tokens", "columns", "packing", "shards",
                                     "formats", "layout", "lineage_columns")},
        # A staged mixture: each phase's rows (pipeline.order.Schedule reads them).
        **({"phases": assembled["phases"]} if assembled.get("phases") else {}),
        "files": files,
    }
    manifest["run"] = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **run,
        "host": socket.gethostname(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "log": RUN_LOG,
    }
    return manifest
