"""``manifest.json``: what a version is made of, and how it was made.

Everything except the ``run`` section is a function of (input files, config,
seed, code): two builds of the same inputs and config give manifests that
differ only in ``run`` (creation time, wall times, peak memory, host).

Top-level keys: ``version``, ``manifest_format``, ``code_commit``,
``config_hash``, ``seed``, ``inputs`` (path, source, bytes, sha256),
``quarantine`` (count by reason), ``stages`` (per stage: documents and
characters in, kept, dropped by reason, per source; what the stage learned),
``accounting`` (documents in = kept + dropped + quarantined), ``tokenizer``
(sha256, vocabulary size, special ids), ``mixture``, ``packing``,
``seq_length``, ``num_samples``, ``num_tokens``, ``shards`` (name, sha256,
rows, bytes), ``files`` (sha256 of the other files of the version), ``run``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


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
