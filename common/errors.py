"""Operating-system errors that name their file, in one line.

Python's own ``open``/``os`` calls put the path into an ``OSError``
(``filename``), but many libraries do not: pyarrow's Parquet writer raises
``OSError(28, 'Error writing bytes to file. Detail: [errno 28] No space left
on device')`` and a buffered file's ``write`` raises ``[Errno 28] No space
left on device`` with no path either. :func:`naming_path` wraps a write (or
read) so the error names the file; :func:`os_error_line` says it in one line.
Standard library only, so stages and the pipeline can both use it.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import re
from collections.abc import Iterator

# errno values that can only come from writing (a full disk, a quota, a file
# size limit, a read-only file system).
WRITE_ERRNOS = frozenset({errno_codes.ENOSPC, errno_codes.EDQUOT, errno_codes.EFBIG, errno_codes.EROFS})
_DETAIL_ERRNO = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)


def _errno_of(exc: OSError) -> int | None:
    if exc.errno is not None:
        return exc.errno
    found = _DETAIL_ERRNO.search(str(exc))  # pyarrow: "... Detail: [errno 28] ..."
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def naming_path(path: str | os.PathLike, action: str = "write", discard: bool = False) -> Iterator[None]:
    """Re-raise an ``OSError`` that names no file as one that names ``path``.

    The new error has the same errno (so the same subclass: a
    ``PermissionError`` stays one), ``filename`` = ``path`` and an ``action``
    attribute (``"write"``, ``"read"``); it pickles, so it reaches a build's
    driver from a worker process intact. An error that already names a file
    passes unchanged.

    Args:
        path: the file being written or read.
        action: what was being done to it, for :func:`os_error_line`.
        discard: remove ``path`` on any ``OSError``: a temporary file that
            will never be renamed into place (frees a full disk's space).
    """
    try:
        yield
    except OSError as exc:
        if discard:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if exc.filename is not None:
            raise
        code = _errno_of(exc)
        reason = os.strerror(code) if code is not None else (exc.strerror or str(exc) or type(exc).__name__)
        named = OSError(code, reason, str(path))  # errno None stays None
        named.action = action
        raise named from exc


def os_error_line(exc: OSError) -> str:
    """One line for an ``OSError``: what was being done to which file, and
    why, e.g. ``cannot write /data/corpora/.work/v1/ingest/part-00000-00000.parquet:
    No space left on device (ENOSPC)``.

    The action is the error's ``action`` attribute (set by :func:`naming_path`),
    else ``write`` for errnos only a write can cause (:data:`WRITE_ERRNOS`),
    else ``access``. Without a file name, the line says so.
    """
    code = _errno_of(exc)
    if code is not None:
        cause = f"{os.strerror(code)} ({errno_codes.errorcode.get(code, code)})"
    else:
        cause = exc.strerror or str(exc) or type(exc).__name__
    action = getattr(exc, "action", None) or ("write" if code in WRITE_ERRNOS else "access")
    if exc.filename is None:
        return f"{cause} (the failing library did not name the file)"
    target = str(exc.filename)
    if exc.filename2 is not None:
        target += f" -> {exc.filename2}"
    return f"cannot {action} {target}: {cause}"


class ToolError(RuntimeError):
    """An external tool (``lmplz``, ``build_binary``) failed.

    ``str()`` is one line: who ran it, the command, its exit status (or the
    signal that killed it) and the last lines of its stderr, e.g.
    ``perplexity: lmplz failed (exit 1): /repo/tools/bin/lmplz -o 5 ... ;
    stderr: ... | ...``. Raised by a stage (the perplexity stage runs KenLM's
    tools) and reported in one line by ``pipeline.failures``.

    Attributes:
        command: the command line (list of str).
        returncode: the exit status (negative: killed by that signal).
        stderr_tail: its last non-empty stderr lines (the caller keeps a
            few, each cut to 300 characters).
        who: the stage (or part) that ran it, the message's prefix.
    """

    def __init__(self, command: list[str], returncode: int, stderr_tail: list[str], who: str = "perplexity"):
        super().__init__(list(command), returncode, list(stderr_tail), who)
        self.command, self.returncode, self.stderr_tail = list(command), returncode, list(stderr_tail)
        self.who = who

    def __str__(self) -> str:
        import shlex
        import signal

        if self.returncode < 0:
            try:
                status = f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                status = f"killed by signal {-self.returncode}"
        else:
            status = f"exit {self.returncode}"
        tail = " | ".join(self.stderr_tail) or "(no stderr)"
        return (f"{self.who}: {os.path.basename(self.command[0])} failed ({status}): {shlex.join(self.command)}; "
                f"stderr: {tail}")


class StageFailure(RuntimeError):
    """A stage stops the build on purpose: a condition its config makes fatal
    (e.g. ``perplexity.require_models`` names a language that got no model).
    ``str()`` is one line that names the stage, the condition and the config
    key; ``pipeline.failures`` reports it as the build's one-line error."""
