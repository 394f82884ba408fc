"""One build per version at a time: the version lock.

A build of ``<VERSION>`` holds ``<corpora root>/.lock-<VERSION>`` from before
it writes anything until it has published (or failed). The file is created
with ``O_CREAT | O_EXCL`` (atomic, also on NFS v3+) and holds JSON: ``pid``,
``host``, ``started_at`` (UTC ISO-8601), ``process_start`` (the process's
start time in clock ticks since boot, from ``/proc/<pid>/stat``; null off
Linux), ``version`` and a random ``token``.

Another build of the same version finds the file and stops with
:class:`VersionLockedError` (one line: who holds it, since when, how to clear
it), unless the lock is *stale*: written on this host by a process that is no
longer running (``kill(pid, 0)`` fails, or a process with that pid started at
another time: the pid was reused). A stale lock is taken over. A lock of
another host is never taken over: this host cannot tell whether that build
still runs; the message says which file to remove once it is known to be
gone.

Acquiring and taking over happen under ``<corpora root>/.lock.guard`` held
with ``flock`` for a few milliseconds (never during the build), so two builds
that find the same stale lock cannot both take it over. Where ``flock`` is not
supported the ``O_EXCL`` create still decides between racing builds.

Builds of *different* versions share only ``.work/cache/`` (input digests and
KenLM/SentencePiece models, content-addressed and renamed into place), which
is safe without a lock.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

GUARD = ".lock.guard"
GUARD_TIMEOUT_S = 30.0  # the guard is held for milliseconds; waiting longer means a hung filesystem


class VersionLockedError(RuntimeError):
    """Another build holds the version's lock; the message is one line."""


def lock_path(root: Path, version: str) -> Path:
    """``<root>/.lock-<version>``."""
    return Path(root) / f".lock-{version}"


def process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (field 22 of
    ``/proc/<pid>/stat``); None when unknown (no such process, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether process ``pid`` runs on this host (and, when ``started`` is
    given and ``/proc`` is readable, is the process that started then)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if started is not None:
        now = process_start(pid)
        if now is not None and now != started:
            return False  # the pid was reused
    return True


@contextmanager
def _guard(root: Path):
    """Hold ``<root>/.lock.guard`` exclusively (``flock``) for the block;
    no-op where ``flock`` is not supported."""
    import fcntl

    fd = os.open(Path(root) / GUARD, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + GUARD_TIMEOUT_S
        locked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VersionLockedError(f"{Path(root) / GUARD} stayed locked for {GUARD_TIMEOUT_S:.0f} s "
                                             "(a hung build or filesystem?)") from None
                time.sleep(0.01)
            except OSError as exc:
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    break  # no flock here: O_EXCL alone decides
                raise
        try:
            yield
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_holder(path: Path) -> dict[str, Any] | None:
    """The lock's JSON, or None when the file is gone; ``{}`` when it cannot
    be parsed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return holder if isinstance(holder, dict) else {}


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host h since 2024-...`` for a lock's content."""
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
            f"since {holder.get('started_at', '?')}")


def is_stale(holder: dict[str, Any], host: str | None = None) -> bool:
    """Whether a lock's holder is known to be gone: written on this host
    (``host``, default this machine's name) by a process that no longer
    runs. An unreadable lock or another host's is never stale."""
    host = host or socket.gethostname()
    if not holder or holder.get("host") != host:
        return False
    pid, started = holder.get("pid"), holder.get("process_start")
    return not process_alive(pid, started if isinstance(started, int) else None)


class VersionLock:
    """A held version lock (see the module docstring); create with
    :meth:`acquire`.

    Attributes:
        path: the lock file.
        content: what this build wrote into it.
        taken_over: the stale holder's content when this build took the lock
            over, else None.
    """

    def __init__(self, path: Path, content: dict[str, Any], taken_over: dict[str, Any] | None):
        self.path, self.content, self.taken_over = path, content, taken_over

    @classmethod
    def acquire(cls, root: Path, version: str) -> VersionLock:
        """Take the lock of ``version`` under the corpora root ``root``
        (created if missing).

        Raises:
            VersionLockedError: a live build holds it (this host), or another
                host's or an unreadable lock file is there; the message names
                the holder and the file to remove when it is known to be gone.
        """
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        path = lock_path(root, version)
        content = {"pid": os.getpid(), "host": socket.gethostname(),
                   "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   "process_start": process_start(os.getpid()), "version": version,
                   "token": secrets.token_hex(8)}
        taken_over = None
        with _guard(root):
            for _ in range(3):
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    holder = _read_holder(path)
                    if holder is None:
                        continue  # released meanwhile
                    if is_stale(holder, content["host"]):
                        os.unlink(path)
                        taken_over = holder
                        continue
                    raise VersionLockedError(_locked_message(path, version, holder, content["host"])) from None
                try:
                    os.write(fd, (json.dumps(content, sort_keys=True) + "\n").encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return cls(path, content, taken_over)
        raise VersionLockedError(f"{path}: could not take the lock of version {version!r} (it keeps changing)")

    def held(self) -> bool:
        """Whether the lock file still holds this build's content."""
        holder = _read_holder(self.path)
        return bool(holder) and holder.get("token") == self.content["token"]

    def release(self) -> None:
        """Remove the lock file if it is still this build's."""
        if self.held():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _locked_message(path: Path, version: str, holder: dict[str, Any], host: str) -> str:
    if not holder:
        return (f"version {version!r} is locked by {path}, which cannot be read (a build that died while "
                f"writing it?); if no build of {version!r} runs, remove it: rm {path}")
    if holder.get("host") == host:
        return (f"version {version!r} is being built by {describe(holder)} (lock {path}); wait for that "
                f"build, or stop it (kill {holder.get('pid')}) and run again")
    return (f"version {version!r} is locked by a build on another host: {describe(holder)} (lock {path}); "
            f"this host cannot tell whether it still runs: if it does not, remove the lock: rm {path}")
