"""One line for a failure the user can act on, instead of a traceback.

A build that stops because of its environment (a full disk, a read-only or
unreadable file, a failing ``lmplz``, a MindRecord shard that cannot be
written) says so in one line: what was being written or read (the path) and
the cause. The full traceback goes to the build's run log
(``corpora/.work/<VERSION>/run.log.jsonl``, event ``build_failed``), and the
CLI prints ``error: <line>; full traceback in <run log>``, exit status 2.
Any other exception is a bug, and keeps its traceback.
"""

from __future__ import annotations


def failure_line(exc: BaseException) -> str | None:
    """The one-line description of ``exc``, or None when it is not a
    failure of the environment (then its traceback is the report).

    * ``OSError`` (``ENOSPC``, ``EACCES``, ``EROFS``, ...):
      ``cannot write <path>: No space left on device (ENOSPC)``
      (:func:`common.errors.os_error_line`); one raised with its own message
      and no errno (e.g. a source pattern that matches no file) is that message.
    * ``common.errors.ToolError``: the command, its exit status and the
      last lines of its stderr.
    * ``pipeline.writer.ShardWriteError``: the shard file and MindSpore's reason.
    * ``common.errors.StageFailure``: the stage's own line (a condition its
      config makes fatal).
    * ``pipeline.executor.PartitionError`` whose first failed task failed in
      one of these ways: that line, then how many tasks failed.
    """
    from common.errors import StageFailure, ToolError, os_error_line
    from pipeline.executor import PartitionError
    from pipeline.writer import ShardWriteError

    if isinstance(exc, PartitionError):
        index, first = exc.errors[0]
        inner = failure_line(first)
        if inner is None:
            return None
        return f"{inner} ({len(exc.errors)} task(s) failed; the first was task {index})"
    if isinstance(exc, (ToolError, ShardWriteError, StageFailure)):
        return str(exc)
    if isinstance(exc, OSError):
        if exc.errno is None and exc.filename is None and str(exc):
            return " ".join(str(exc).split())
        return os_error_line(exc)
    return None
