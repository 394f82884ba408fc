"""What a running build tells people and monitors.

* a **structured log**: one JSON object per line (``ts`` in UTC ISO-8601,
  ``event``, then fields), ``run.log.jsonl`` in the build's work directory,
  copied into the version directory when it is published. Every line is also
  echoed as a short human line;
* a **heartbeat** file, ``heartbeat.json`` in the work directory, rewritten
  atomically at most once per second while work progresses: ``ts``, ``pid``,
  ``host``, ``stage``, ``done``/``total`` partitions, ``documents`` done. A
  monitor that sees ``ts`` stop moving while the pid lives has found a hang;
* a **progress bar** per stage (tqdm: documents/s and ETA), on a terminal only;
* a **crash hook** for tests: ``MINDCORPUS_CRASH_AFTER=<stage>:<k>`` kills the
  process with SIGKILL once ``k`` partitions (files for ``ingest``) of that
  stage have finished (``assemble:0`` just before publishing), so resume can be
  tested at exact points.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from common.io import write_json_atomic
from pipeline.layout import RUN_LOG

CRASH_ENV = "MINDCORPUS_CRASH_AFTER"
# In the build's work directory, next to the run log (RUN_LOG).
HEARTBEAT = "heartbeat.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def proc_status_mb(field: str) -> float | None:
    """A memory figure of this process from ``/proc/self/status`` in MB
    (``field``: ``"VmRSS"``, the resident set now; ``"VmHWM"``, its peak since
    exec or the last reset); None off Linux or when the field is absent."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _rss_mb() -> float | None:
    """This process's resident set now (``VmRSS``, MB); None off Linux."""
    return proc_status_mb("VmRSS")


def crash_point(stage: str, done: int) -> None:
    """SIGKILL this process if ``MINDCORPUS_CRASH_AFTER`` names (stage, done)."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    name, _, k = spec.partition(":")
    if name == stage and k.isdigit() and int(k) == done:
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


class RunLog:
    """The log, heartbeat and progress of one build.

    Args:
        work_dir: the build's work directory (``corpora/.work/<VERSION>``).
        echo: a ``print``-like function for human-readable lines.
        secrets: credential values (``pipeline.redact.secret_values`` of the
            config) scrubbed from every record and line; secret-looking keys
            are redacted in any case (``pipeline.redact.redact``).
    """

    def __init__(self, work_dir: Path, echo: Callable[[str], None] = print, secrets: set[str] | None = None):
        from pipeline.redact import scrub_text

        self.path = work_dir / RUN_LOG
        self.heartbeat_path = work_dir / HEARTBEAT
        self.secrets = set(secrets or ())
        self.echo = lambda message: echo(scrub_text(message, self.secrets))
        self._fh = open(self.path, "a", encoding="utf-8")
        self._last_beat = 0.0
        self.host = socket.gethostname()

    def event(self, event: str, message: str | None = None, **fields: Any) -> None:
        """Append ``{"ts", "event", "rss_mb", **fields}`` to the log (``rss_mb``:
        the driver's resident memory then, MB), credentials redacted; echo
        ``message``."""
        from pipeline.redact import redact

        record = redact({"ts": _now(), "event": event, "rss_mb": _rss_mb(), **fields}, self.secrets)
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        if message:
            self.echo(message)

    def beat(self, stage: str, done: int, total: int, documents: int = 0, force: bool = False) -> None:
        """Rewrite the heartbeat file (at most once a second unless ``force``)."""
        now = time.monotonic()
        if not force and now - self._last_beat < 1.0:
            return
        self._last_beat = now
        # compact, in this key order; a full disk names the file (common.io)
        write_json_atomic({"ts": _now(), "pid": os.getpid(), "host": self.host, "stage": stage,
                           "done": done, "total": total, "documents": documents}, self.heartbeat_path,
                          indent=None, sort_keys=False, ensure_ascii=True, final_newline=False)

    def tracker(self, stage: str, total: int, documents: list[int] | None = None):
        """An ``on_done(index, result)`` callback for ``executor.map`` that
        advances a progress bar (documents/s, ETA), beats the heart and
        honours the crash hook. ``documents[i]`` is task i's document count
        (bar in documents); without it the bar counts tasks. Call
        ``.close()`` on the returned object when the map is over."""
        return _Tracker(self, stage, total, documents)

    def close(self) -> None:
        """Close the log. A line that could not be flushed (a full disk) is
        lost rather than raised here: when a build fails, its own error is
        the one that must reach the user."""
        try:
            self._fh.close()
        except OSError:
            pass


class _Tracker:
    def __init__(self, log: RunLog, stage: str, total: int, documents: list[int] | None):
        self.log, self.stage, self.total, self.documents = log, stage, total, documents
        self.done = 0
        self.docs_done = 0
        unit_total = sum(documents) if documents is not None else total
        self.bar = tqdm(total=unit_total, desc=stage, unit="doc" if documents is not None else "task",
                        disable=None, leave=False, dynamic_ncols=True, file=sys.stderr)
        log.beat(stage, 0, total, force=True)

    def __call__(self, index: int, result: Any) -> None:
        self.done += 1
        step = self.documents[index] if self.documents is not None else 1
        self.docs_done += step if self.documents is not None else 0
        self.bar.update(step)
        self.log.beat(self.stage, self.done, self.total, self.docs_done, force=self.done == self.total)
        crash_point(self.stage, self.done)

    def close(self) -> None:
        self.bar.close()
