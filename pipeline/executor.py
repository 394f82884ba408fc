"""Executors: run a picklable function over items, in order, on a pool.

The local executor is a ``concurrent.futures.ProcessPoolExecutor`` with the
``spawn`` start method (fork after pyarrow / tokenizers threads have started
can deadlock). Per-partition stage work goes through :func:`process_partition`,
which writes its output atomically (:mod:`common.io`: temporary name, then
``os.replace``), so a partition file that exists is complete and a crashed
build resumes by skipping it.

A task's error always reaches the driver as an ``Exception`` that pickles:
one that is not (a ``BaseException`` such as ``pyo3_runtime.PanicException``,
which a Rust panic in native code raises, or an exception that does not
survive pickling) becomes a :class:`TaskError` naming the task and the cause,
with the same result under 1 worker, a process pool and Ray (a process pool
would otherwise report a ``PicklingError``, and 1 worker would not catch it).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import pickle
import re
import reprlib
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pyarrow as pa

from common.io import write_table_atomic
from pipeline.runlog import proc_status_mb
from stages.base import EDITABLE_COLUMNS, KEEP, REASON, ROW, StageContext, read_view

PARQUET_OPTS = {"compression": "zstd", "compression_level": 3}
# Columns that hold most of a partition's bytes (each value unique, so a
# dictionary only costs). A file holding one is written at zstd 9 with 8 MiB
# pages: measured on ../shared/corpus (11.4 M tokens, 16-bit ids) 0.97 bytes
# per token against 1.29 with zstd 3 and 1 MiB dictionary pages, and 2% smaller
# text, at ~13 MB/s per core for the token column (docs/architecture.md).
# (pyarrow takes one compression level per file: a per-column dict is ignored.)
BULK_COLUMNS = ("text", "tokenize_input_ids")
BULK_LEVEL = 9
BULK_PAGE_BYTES = 8 << 20


def parquet_options(table: pa.Table) -> dict[str, Any]:
    """Write options for a partition or layer: zstd, dictionaries only for the
    small columns, zstd 9 and large pages when a bulk column is present, and
    the ``row`` join key delta-encoded (an ascending int32 costs ~0 bytes
    instead of ~5 per row)."""
    names = table.column_names
    bulk = [c for c in BULK_COLUMNS if c in names]
    opts: dict[str, Any] = {"compression": "zstd", "compression_level": BULK_LEVEL if bulk else 3,
                            "use_dictionary": [c for c in names if c not in bulk and c != ROW]}
    if bulk:
        opts["data_page_size"] = BULK_PAGE_BYTES
    if ROW in names:
        opts["column_encoding"] = {ROW: "DELTA_BINARY_PACKED"}
    return opts


def task_label(fn: Callable[[Any], Any], x: Any) -> str:
    """What a task is, for per-task memory figures: ``<stage>:process``,
    ``assemble:<kind>``, or the function's name (a fit step, ingest)."""
    base = getattr(fn, "func", fn)
    name = getattr(base, "__name__", type(base).__name__)
    if name == "process_partition" and isinstance(x, tuple):
        return f"{x[0]}:process"
    if name == "run_task" and isinstance(x, dict):
        return f"assemble:{x.get('kind')}"
    return name


def task_description(fn: Callable[[Any], Any], x: Any) -> str:
    """A task in words, for error messages: :func:`task_label` and which
    item (the partition of a stage's ``process``, else a short repr of the
    argument)."""
    label = task_label(fn, x)
    if label.endswith(":process") and isinstance(x, tuple) and len(x) > 3:
        return f"{label} {getattr(x[3], 'name', x[3])}"
    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    try:
        return f"{label} {short.repr(x)}"
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the task's own error
        return f"{label} <{type(x).__name__}>"


class TaskError(RuntimeError):
    """A task failed with an error that cannot travel between processes as
    it is: a ``BaseException`` that is not an ``Exception`` (a Rust panic
    inside native code raises ``pyo3_runtime.PanicException``) or an
    exception that does not survive pickling. A plain ``RuntimeError`` that
    pickles, naming the task and the cause.

    Attributes:
        task: :func:`task_description` of the failed task.
        cause_type: the original error's ``module.QualifiedName``.
        cause_message: ``str()`` of the original error.
        traceback_text: the original error's formatted traceback (where it
            was raised, in the worker).
    """

    def __init__(self, task: str, cause_type: str, cause_message: str, traceback_text: str = ""):
        super().__init__(f"task {task} failed: {cause_type}: {cause_message}")
        self.task, self.cause_type, self.cause_message = task, cause_type, cause_message
        self.traceback_text = traceback_text

    def __reduce__(self):
        return type(self), (self.task, self.cause_type, self.cause_message, self.traceback_text)

    @classmethod
    def of(cls, task: str, exc: BaseException) -> TaskError:
        """The :class:`TaskError` for ``exc`` raised by ``task``."""
        kind = type(exc)
        return cls(task, f"{kind.__module__}.{kind.__qualname__}", str(exc),
                   "".join(traceback.format_exception(exc)))


# Never converted: the process is being stopped.
_NOT_CAUGHT = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _travels(exc: BaseException) -> bool:
    """True when ``exc`` survives a pickle round trip (what a process pool
    and Ray do to a task's error)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return True
    except Exception:  # noqa: BLE001 - any failure means it cannot travel
        return False


_LIFETIME_PEAK = [0.0]


def process_peak_mb() -> float:
    """This process's peak RSS over its whole life in MB, also across the
    per-task resets of :func:`_reset_peak` (the driver runs tasks itself with
    one worker)."""
    return max(_LIFETIME_PEAK[0], peak_rss_mb())


def _reset_peak() -> bool:
    """Start this process's peak-RSS count afresh (Linux: ``clear_refs`` 5
    resets ``VmHWM``), so the next reading is one task's own peak; the
    lifetime peak is kept for :func:`process_peak_mb`."""
    _LIFETIME_PEAK[0] = max(_LIFETIME_PEAK[0], peak_rss_mb())
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _measured(fn: Callable[[Any], Any], x: Any) -> tuple[Any, float, str, str]:
    """``(fn(x), peak RSS of this process during the call in MB, node,
    label)``: every task runs through this, so the executor knows the largest
    worker's memory per kind of task and, on Ray, which node ran what. After
    the call, Arrow's pool returns freed memory to the system, so the next
    task starts from what the process really holds.

    Raises:
        what ``fn`` raised when it is an ``Exception`` that pickles;
        ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` as they are;
        :class:`TaskError` for anything else.
    """
    _reset_peak()
    try:
        result = fn(x)
    except Exception as exc:
        if _travels(exc):
            raise
        raise TaskError.of(task_description(fn, x), exc) from exc
    except _NOT_CAUGHT:
        raise
    except BaseException as exc:  # noqa: BLE001 - e.g. pyo3_runtime.PanicException
        raise TaskError.of(task_description(fn, x), exc) from exc
    peak = peak_rss_mb()
    release_memory()
    return result, peak, current_node(), task_label(fn, x)


def release_memory() -> None:
    """Give freed memory back to the system: a collection, Arrow's pool and
    glibc's heap (``malloc_trim``). Without it a long-lived process keeps the
    high-water mark of everything it ran (measured: the driver kept the
    perplexity fit's reference lines under the tokenizer training)."""
    import gc

    gc.collect()
    try:
        import pyarrow as _pa

        _pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001 - best effort
        pass
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def current_node() -> str:
    """Where this task runs: the Ray node id on a Ray worker, ``local``
    otherwise (or ``$MINDCORPUS_NODE`` when set)."""
    return os.environ.get("MINDCORPUS_NODE") or _ray_node() or "local"


def _ray_node() -> str | None:
    import sys

    if "ray" not in sys.modules:
        return None
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside a Ray worker
        return None


def _gather(completions, total: int, on_done: Callable[[int, Any], None] | None, owner=None) -> list[Any]:
    """Collect ``(index, get_result)`` pairs in completion order: call
    ``on_done`` for each success, let every task finish, then raise one
    :class:`PartitionError` for all failures (a Ray task's error is unwrapped
    to the exception the task raised). Results are ``_measured`` tuples:
    ``owner`` (the executor) records the peak worker RSS and the nodes."""
    results: list[Any] = [None] * total
    errors: list[tuple[int, BaseException]] = []
    for i, get in completions:
        try:
            results[i], peak, node, label = get()
        except Exception as exc:  # noqa: BLE001 - re-raised below with the others
            cause = getattr(exc, "cause", None)
            errors.append((i, cause if isinstance(cause, BaseException) else exc))
            continue
        if owner is not None:
            owner.peak_worker_rss_mb = max(owner.peak_worker_rss_mb, peak)
            owner.peaks_by_task[label] = max(owner.peaks_by_task.get(label, 0.0), peak)
            owner.nodes[node] = owner.nodes.get(node, 0) + 1
        if on_done:
            on_done(i, results[i])
    if errors:
        errors.sort(key=lambda e: e[0])
        raise PartitionError(errors, total) from errors[0][1]
    return results


class PartitionError(RuntimeError):
    """Some calls of an executor ``map`` failed; the others finished.

    Attributes:
        errors: (item index, exception) for each failed call, by index.
    """

    def __init__(self, errors: list[tuple[int, BaseException]], total: int):
        from pipeline.failures import failure_line  # one line for a full disk, a failing tool, ...

        self.errors = errors
        first = errors[0][1]
        described = failure_line(first) or f"{type(first).__name__}: {first}"
        super().__init__(f"{len(errors)} of {total} tasks failed; first (task {errors[0][0]}): {described}")


def _die_with_parent() -> None:
    """Worker initializer: on Linux, ask the kernel to SIGKILL this worker when
    the driver dies, so a killed build leaves no orphan workers behind
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); elsewhere a no-op."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
        except OSError:
            pass


class LocalExecutor:
    """Run work on this machine.

    Args:
        num_workers: processes; 1 runs in the calling process (no pickling),
            which is what tests and debugging want.
    """

    def __init__(self, num_workers: int = 1):
        self.num_workers = num_workers
        self._pool: ProcessPoolExecutor | None = None
        self.peak_worker_rss_mb = 0.0
        self.peaks_by_task: dict[str, float] = {}  # task label -> largest peak RSS (MB) of one such task
        self.nodes: dict[str, int] = {}

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """``[fn(x) for x in items]``, in parallel when there are workers.

        Args:
            fn: a picklable module-level function.
            items: its arguments, one call each.
            on_done: called in this process as ``on_done(index, result)`` when
                each call finishes, in completion order (progress, heartbeat).

        Returns:
            The results in the order of ``items``.

        Raises:
            PartitionError: one or more calls failed. Every other call still
                ran to its end first, so their outputs are on disk for a re-run.
        """
        items = list(items)
        # With workers, even a single task runs in one: the driver's memory
        # stays that of orchestration (no shard writer, no MindSpore import).
        if self.num_workers <= 1:
            return _gather(((i, functools.partial(_measured, fn, x)) for i, x in enumerate(items)),
                           len(items), on_done, self)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.num_workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_die_with_parent)
        futures = {self._pool.submit(_measured, fn, x): i for i, x in enumerate(items)}
        return _gather(((futures[f], f.result) for f in as_completed(futures)), len(items), on_done, self)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_STAGE_CACHE: dict[tuple, Any] = {}


def fit_digest(facts: Any, work_dir: Path) -> str:
    """What a stage's ``fit`` produced, as 16 hex characters: sha256 of its
    returned facts (JSON) and of the name, size and modification time (ns)
    of every file under ``work_dir`` (its models and plans; a refit rewrites
    them). Cheap: the files are listed, not read. A missing ``work_dir``
    counts as empty."""
    import hashlib

    files = []
    root = Path(work_dir)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fname in sorted(filenames):
            path = Path(dirpath) / fname
            try:
                st = path.stat()
            except OSError:          # removed while listed: not part of the fit
                continue
            files.append([path.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns])
    blob = json.dumps([facts, files], sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def _stage(name: str, plugins: tuple[str, ...], config, ctx: StageContext, fingerprint: str = "", fit: str = ""):
    """The stage object of this worker process for (stage, config, context,
    fingerprint, fit digest): built once per process, so a model loaded by
    ``process`` is reused across partitions. ``config`` is the stage's typed,
    frozen config as the driver validated it (it crosses processes pickled:
    never re-validated, so a worker runs exactly what the driver checked).
    The fingerprint and the digest of what the fit produced
    (:func:`fit_digest`) are part of the key, so a second build in one
    process (or on a long-lived Ray worker) never reuses an object that read
    another fit, even under an equal fingerprint."""
    key = (name, plugins, config.model_dump_json(), ctx, fingerprint, fit)
    if key not in _STAGE_CACHE:
        from stages import stage_class

        # One stage at a time: the previous stage's models (KenLM, fastText,
        # the tokenizer) are not kept for the rest of the build.
        for old in _STAGE_CACHE.values():
            old.release()
        _STAGE_CACHE.clear()
        _STAGE_CACHE[key] = stage_class(name, plugins)(config, ctx)
    return _STAGE_CACHE[key]


# A list type's field name, as Arrow prints it: list<item: int32> -> list<int32>.
_FIELD_NAME_RE = re.compile(r"<[^:<>]+: ")


def _type_ok(declared: str, actual: pa.DataType) -> bool:
    """Whether Arrow type ``actual`` is one of ``declared`` (``"double"``,
    ``"list<uint16> or list<int32>"``; list field names ignored); an
    all-null column (type ``null``) fits any declaration."""
    def norm(text: str) -> str:
        return _FIELD_NAME_RE.sub("<", text.strip())

    return pa.types.is_null(actual) or norm(str(actual)) in [norm(t) for t in declared.split(" or ")]


def check_output(name: str, cls, table_in: pa.Table, out: pa.Table, ctx: StageContext, part: str) -> None:
    """Check what ``Stage.process`` returned against the stage contract.

    Raises:
        RuntimeError: naming the stage, the partition and what broke: rows
            added, removed or reordered; ``keep`` missing or null; a dropped
            document without a reason, or a reason that does not start with
            ``<stage>.``; a column added that ``cls.columns`` does not
            declare (or a declared one missing, or of another Arrow type); a
            column of an earlier stage changed; ``text`` edited by a stage that
            may not (``ctx.edits_text``: after the tokenizer) or without
            ``chars`` following it.
    """
    import pyarrow.compute as pc

    where = f"stage {name} on {part}"
    if out.num_rows != table_in.num_rows or "id" not in out.column_names or out.column("id") != table_in.column("id"):
        raise RuntimeError(f"{where}: rows added, removed or reordered")
    for col in (KEEP, REASON):
        if col not in out.column_names:
            raise RuntimeError(f"{where}: no {col!r} column")
    keep = out[KEEP]
    if keep.null_count:
        raise RuntimeError(f"{where}: keep is null for {keep.null_count} document(s): decide every document")
    silent = pc.and_(pc.invert(keep), pc.is_null(out[REASON]))
    if pc.any(silent).as_py():
        raise RuntimeError(f"{where}: {pc.sum(silent).as_py()} document(s) dropped without a reason")
    foreign = pc.invert(pc.fill_null(pc.starts_with(out[REASON], f"{name}."), True))
    if pc.any(foreign).as_py():
        raise RuntimeError(f"{where}: reason {out[REASON].filter(foreign)[0].as_py()!r}: a stage's reason codes "
                           f"start with {name + '.'!r} (<stage>.<rule>)")
    added = set(out.column_names) - set(table_in.column_names) - {KEEP, REASON}
    declared = set(cls.columns)
    if added != declared:
        raise RuntimeError(f"stage {name} broke its declared columns on {part}: added "
                           f"{sorted(added - declared)} undeclared, missing {sorted(declared - added)}")
    for col in sorted(declared):
        if not _type_ok(cls.columns[col].dtype, out[col].type):
            raise RuntimeError(f"{where}: column {col} is {out[col].type}, declared {cls.columns[col].dtype}")
    for col in table_in.column_names:
        if col in (KEEP, REASON, *EDITABLE_COLUMNS):
            continue
        if col not in out.column_names or not out[col].equals(table_in[col]):
            raise RuntimeError(f"{where}: column {col} of an earlier stage was changed or removed "
                               "(a stage adds its own columns; only text and chars may be edited)")
    if "text" in out.column_names and not out["text"].equals(table_in["text"]):
        if not ctx.edits_text:
            raise RuntimeError(f"{where}: edits text, but it runs after the tokenizer: the token ids were made "
                               "from the text before it (give the stage an order before the tokenizer's)")
        lengths = pc.cast(pc.utf8_length(pc.fill_null(out["text"], "")), pa.int64())
        if not pc.all(pc.equal(lengths, pc.cast(out["chars"], pa.int64()))).as_py():
            raise RuntimeError(f"{where}: edits text but chars is not len(text) (replace both)")


def layer_table(table_in: pa.Table, out: pa.Table, rows) -> pa.Table:
    """What a stage adds to a partition, as stored (its *layer*).

    Args:
        table_in: the document table the stage was given (n rows).
        out: what ``Stage.process`` returned (same n rows and order).
        rows: int64[n], the documents' positions in the ingest partition.

    Returns:
        ``row`` (int32), every column of ``out`` that ``table_in`` lacks (in
        ``out``'s order), each :data:`stages.base.EDITABLE_COLUMNS` column the
        stage changed (null where unchanged), ``keep`` and ``reason``.
    """
    import numpy as np
    import pyarrow.compute as pc

    columns: dict[str, Any] = {ROW: pa.array(np.asarray(rows, np.int32), pa.int32())}
    for name in out.column_names:
        if name in (KEEP, REASON):
            continue
        if name not in table_in.column_names:
            columns[name] = out[name]
        elif name in EDITABLE_COLUMNS:
            same = pc.fill_null(pc.equal(out[name], table_in[name]), False)
            if not pc.all(same).as_py():
                columns[name] = pc.if_else(same, pa.nulls(len(out), out[name].type), out[name])
    columns[KEEP] = out[KEEP]
    columns[REASON] = out[REASON]
    return pa.table(columns)


def partition_counts(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per source: ``documents_in``, ``chars_in``, ``kept``, ``kept_chars``
    and ``dropped`` (reason -> documents) of one stage's layer view
    (``source``, ``chars``, ``keep``, ``reason``; characters in code points
    after the stage's edits). Summed over partitions by the driver."""
    import pyarrow.compute as pc

    out: dict[str, dict[str, Any]] = {}
    if table.num_rows == 0:
        return out
    keep = pc.fill_null(table[KEEP], False)
    t = pa.table({"source": table["source"], "chars": pc.cast(table["chars"], pa.int64()), "keep": keep,
                  "kept_chars": pc.if_else(keep, pc.cast(table["chars"], pa.int64()), 0),
                  "reason": table[REASON]})
    grouped = t.group_by("source").aggregate([("chars", "count"), ("chars", "sum"),
                                                ("keep", "sum"), ("kept_chars", "sum")])
    for row in grouped.to_pylist():
        out[row["source"]] = {"documents_in": row["chars_count"], "chars_in": row["chars_sum"] or 0,
                              "kept": int(row["keep_sum"] or 0), "kept_chars": int(row["kept_chars_sum"] or 0),
                              "dropped": {}}
    dropped = t.filter(pc.invert(keep)).group_by(["source", "reason"]).aggregate([("chars", "count")])
    for row in dropped.to_pylist():
        out[row["source"]]["dropped"][row["reason"]] = row["chars_count"]
    return out


def row_batches(table: pa.Table, batch_bytes: int) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[lo, hi)`` of about ``batch_bytes`` of text
    (UTF-8 bytes of ``text``; at least one row each). A table without a
    ``text`` column is one batch."""
    import numpy as np
    import pyarrow.compute as pc

    if "text" not in table.column_names or table.num_rows == 0:
        return [(0, table.num_rows)]
    sizes = pc.fill_null(pc.binary_length(table["text"]), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    ends = np.cumsum(sizes)
    cuts = [0]
    target = batch_bytes
    while cuts[-1] < len(sizes):
        nxt = int(np.searchsorted(ends, target, side="left")) + 1
        nxt = max(cuts[-1] + 1, min(nxt, len(sizes)))
        cuts.append(nxt)
        target = ends[nxt - 1] + batch_bytes
    return list(zip(cuts[:-1], cuts[1:]))


def process_partition(task: tuple) -> dict[str, Any]:
    """Run one stage on one partition: read the kept documents of ``ref``
    (base + earlier layers), call ``Stage.process``, check its contract,
    write the stage's layer (:func:`layer_table`) to ``out_path`` atomically.
    A partition whose layer already exists (a resumed build) is only counted.

    Args:
        task: (stage name, plugin modules, the stage's typed config (the
            frozen model, pickled), context, input
            :class:`stages.base.PartitionRef`, output path, stage fingerprint,
            batch bytes: a row-independent stage is called on consecutive
            batches of about this much text, see :func:`row_batches`; fit
            digest, :func:`fit_digest`, which keys the worker's stage object
            with the fingerprint).

    Returns:
        ``{"counts": partition_counts(...), "kept": n}``; for a stage with
        ``tally_columns``, each source's counts also hold ``"tally"``
        (:func:`partition_tally`, computed from the written layer, so a
        resumed partition gives the same numbers).

    Raises:
        RuntimeError: the stage broke its contract (rows added, removed or
            reordered; ``keep``/``reason`` missing; a reason that does not
            start with ``<stage>.``; a column added that its
            ``Stage.columns`` does not declare, or a declared one missing);
            its ``tally`` returned something else than str -> int.
    """
    name, plugins, config, ctx, ref, out_path, fingerprint, batch_bytes, fit = task
    out_path = Path(out_path)
    if not out_path.exists():
        stage = _stage(name, plugins, config, ctx, fingerprint, fit)
        table, rows = read_view(ref)
        stage.partition = ref.name
        try:
            batches = row_batches(table, batch_bytes) if stage.row_independent else [(0, table.num_rows)]
            outs = [stage.process(table.slice(lo, hi - lo)) for lo, hi in batches]
            out = outs[0] if len(outs) == 1 else pa.concat_tables(outs, promote_options="permissive")
        finally:
            stage.partition = None
        check_output(name, type(stage), table, out, ctx, ref.name)
        layer = layer_table(table, out, rows)
        write_table_atomic(layer, out_path, **parquet_options(layer))
    from stages import stage_class

    cls = stage_class(name, plugins)
    tallied = [c for c in cls.tally_columns if c not in ("source", "chars", KEEP, REASON)]
    view, _ = read_view(ref.with_layer(out_path), ["source", "chars", *tallied, KEEP, REASON], kept=False)
    counts = partition_counts(view)
    if cls.tally_columns:
        for source, tally in partition_tally(name, cls, view, ref.name).items():
            counts[source]["tally"] = tally
    return {"counts": counts, "kept": sum(c["kept"] for c in counts.values())}


def partition_tally(name: str, cls, view: pa.Table, part: str) -> dict[str, dict[str, int]]:
    """Per source, ``cls.tally`` of the documents of that source in one
    stage's layer view (every document that entered the stage: ``source``,
    the stage's ``tally_columns``, ``keep``, ``reason``), keys sorted.

    Sources are tallied in sorted order, each on its own rows in partition
    order, so the result depends only on the layer (the same under any
    worker count and after a resume). O(rows of the partition).

    Raises:
        RuntimeError: ``tally`` returned something other than a dict of
            str -> int (naming the stage, the partition and the bad entry).
    """
    import pyarrow.compute as pc

    out: dict[str, dict[str, int]] = {}
    if view.num_rows == 0:
        return out
    columns = [*cls.tally_columns, KEEP, REASON]
    for source in sorted(set(view["source"].to_pylist())):
        rows = view.filter(pc.equal(view["source"], source)).select(columns)
        result = cls.tally(rows)
        if not isinstance(result, dict):
            raise RuntimeError(f"stage {name} on {part}: tally returned {type(result).__name__}, not a dict of "
                               "str -> int (the stage contract: Stage.tally)")
        bad = next(((k, v) for k, v in result.items() if not isinstance(k, str) or isinstance(v, bool)
                    or not isinstance(v, int)), None)
        if bad is not None:
            raise RuntimeError(f"stage {name} on {part}: tally entry {bad[0]!r}: {bad[1]!r} "
                               f"({type(bad[1]).__name__}) is not str -> int (convert numpy numbers with int())")
        out[source] = {k: int(v) for k, v in sorted(result.items())}
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux ``VmHWM``, which
    starts again at exec, unlike ``ru_maxrss`` of a spawned worker, which
    inherits the parent's figure); ``ru_maxrss`` elsewhere."""
    peak = proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class RayExecutor:
    """Run work as Ray tasks on an existing cluster (``executor: {kind: ray}``).

    The same picklable functions as the local pool, so a stage behaves the
    same: outputs are the same files under the same names, written atomically
    to a filesystem every node sees (a shared mount, or object storage for
    the inputs). Results come back in the order of ``items``.

    Args:
        address: the cluster (``ray://host:10001``, ``host:6379`` or
            ``auto``); None starts a local Ray instance.
        num_cpus_per_task: CPUs Ray reserves for each task.
    """

    def __init__(self, address: str | None, num_cpus_per_task: float = 1.0):
        import ray

        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        self._ray = ray
        self.num_cpus_per_task = num_cpus_per_task
        self._task = None
        self.peak_worker_rss_mb = 0.0
        self.peaks_by_task: dict[str, float] = {}  # task label -> largest peak RSS (MB) of one such task
        self.nodes: dict[str, int] = {}

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Same contract as :meth:`LocalExecutor.map`."""
        ray = self._ray
        if self._task is None:
            # SPREAD: tasks go round the nodes instead of filling the first
            # one, so every node reads, writes and holds its share.
            self._task = ray.remote(num_cpus=self.num_cpus_per_task, max_retries=2,
                                    scheduling_strategy="SPREAD")(_apply)
        fn_ref = ray.put(fn)  # functions, partials and bound methods alike
        refs = [self._task.remote(fn_ref, x) for x in items]
        index = {ref: i for i, ref in enumerate(refs)}

        def completions():
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield index[ready[0]], functools.partial(ray.get, ready[0])

        return _gather(completions(), len(refs), on_done, self)

    def close(self) -> None:
        pass  # the cluster outlives the build

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _apply(fn: Callable[[Any], Any], x: Any) -> tuple[Any, float, str]:
    return _measured(fn, x)


def make_executor(cfg, num_workers: int):
    """The executor a config asks for: ``local`` (process pool of
    ``num_workers``) or ``ray`` (tasks on ``cfg.address``)."""
    if cfg.kind == "ray":
        return RayExecutor(cfg.address, cfg.num_cpus_per_task)
    return LocalExecutor(num_workers)
