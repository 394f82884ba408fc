"""The one small interface every stage implements.

A *document table* is a ``pyarrow.Table`` with one row per document. The reader
(``pipeline.readers``) creates these columns, which every stage passes through
unchanged:

==========  ===========  ==========================================================
column      dtype        meaning
==========  ===========  ==========================================================
``id``      string       stable document id ``"<source>:<file>:<line>"``
``source``  string       source name from the config (``web``, ``books``, ``code``)
``file``    string       input file path as written in the config / glob result
``line``    int64        1-based line (JSONL, text) or 1-based row (Parquet)
``text``    string       the document text (never empty after ingest)
``meta``    string       JSON object with the record's other fields
``lang_hint`` string     language declared by the source config (e.g. ``code``),
                         or null
``chars``   int64        ``len(text)`` in code points
==========  ===========  ==========================================================

A stage's :meth:`Stage.process` returns the same rows in the same order with
its own measurement columns appended (prefixed by the stage name, e.g.
``langid_lang``) and the two decision columns ``keep`` (bool) and ``reason``
(string; null when kept, else a stable reason code such as
``langid.low_score``). A stage that edits documents (e.g. line-level dedup)
may replace ``text`` and must then replace ``chars`` (``len(text)``) too; it
never adds, removes or reorders rows. Earlier stages' ``keep``/``reason`` are replaced; their
measurement columns stay, so the last table of a build holds every decision
that let a document through.

Stages know nothing of executors, the CLI or the output format (see
docs/architecture.md). Anything a stage learns globally (a KenLM model, a
tokenizer, the set of near-duplicates) is computed in :meth:`Stage.fit` and
written under ``ctx.work_dir``, so that :meth:`Stage.process` can run in any
worker process, or on a Ray node, by reading it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pydantic

KEEP = "keep"
REASON = "reason"
BASE_COLUMNS = ("id", "source", "file", "line", "text", "meta", "lang_hint", "chars")


class StageConfig(pydantic.BaseModel):
    """Base of every stage's typed config: unknown keys are an error."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True


@dataclasses.dataclass(frozen=True)
class StageContext:
    """Where a stage may keep what it learned, and run-wide facts.

    Attributes:
        work_dir: stage-private directory for this build (models, tables).
            Created before :meth:`Stage.fit`; the same path is visible to
            :meth:`Stage.process` in every worker.
        cache_dir: cross-build cache (e.g. KenLM models keyed by a hash of
            their training text and parameters).
        seed: the build seed (``config.seed``).
        tools_dir: directory holding native tools (``lmplz``, ``build_binary``).
    """

    work_dir: Path
    cache_dir: Path
    seed: int
    tools_dir: Path


class Partitions:
    """The input of a stage's :meth:`Stage.fit`: the kept documents of the
    previous stage, one Parquet file per partition, plus a parallel ``map``.

    Attributes:
        paths: the partition files, in partition order.
        map: ``map(fn, items) -> list`` runs a *picklable top-level* function
            over items on the build's executor (local process pool or Ray), in
            order. Use it for per-partition work inside ``fit`` (e.g. MinHash
            signatures).
    """

    def __init__(self, paths: list[Path], mapper: Callable[[Callable, list], list]):
        self.paths = paths
        self.map = mapper

    def tables(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """Yield each partition's kept rows (``keep == True``), in order."""
        for path in self.paths:
            yield read_kept(path, columns)


def read_kept(path: Path, columns: list[str] | None = None) -> pa.Table:
    """Read one stage-output partition and return only its kept rows.

    Args:
        path: a Parquet file written by the executor for a stage (or ingest).
        columns: columns to return (all when None). ``keep`` is read anyway.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cols = None if columns is None else sorted(set(columns) | {KEEP})
    table = pq.read_table(path, columns=cols)
    table = table.filter(pc.equal(table[KEEP], True))
    if columns is not None:
        table = table.select(columns)
    return table


class Stage:
    """One pipeline stage. Subclasses set ``name`` and ``Config``.

    Life cycle in a build: the driver constructs the stage with its config and
    context, calls :meth:`fit` once (global learning; default does nothing),
    then each worker constructs its own instance and calls :meth:`process` on
    each partition's kept documents.
    """

    name: ClassVar[str]
    Config: ClassVar[type[StageConfig]] = StageConfig

    def __init__(self, config: StageConfig, ctx: StageContext):
        self.config = config
        self.ctx = ctx

    def fit(self, partitions: Partitions) -> dict[str, Any]:
        """Learn what the stage needs from all its input, write it under
        ``ctx.work_dir`` and return facts for the manifest (JSON-able)."""
        return {}

    def process(self, table: pa.Table) -> pa.Table:
        """Return ``table`` with this stage's columns, ``keep`` and ``reason``."""
        raise NotImplementedError


def with_decision(table: pa.Table, columns: dict[str, pa.Array | list],
                  reasons: Iterable[str | None]) -> pa.Table:
    """Append measurement ``columns`` and the ``keep``/``reason`` decision.

    Args:
        table: the input document table (n rows).
        columns: name -> n values; names must be prefixed by the stage name.
        reasons: n reason codes, None for a kept document.

    Returns:
        A table with n rows: input columns (old ``keep``/``reason`` removed),
        then ``columns``, then ``keep`` (bool) and ``reason`` (string).
    """
    reasons = list(reasons)
    if len(reasons) != table.num_rows:
        raise ValueError(f"{len(reasons)} reasons for {table.num_rows} rows")
    for drop in (KEEP, REASON, *columns):
        if drop in table.column_names:
            table = table.drop_columns([drop])
    for name, values in columns.items():
        arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
        if len(arr) != table.num_rows:
            raise ValueError(f"column {name}: {len(arr)} values for {table.num_rows} rows")
        table = table.append_column(name, arr)
    table = table.append_column(KEEP, pa.array([r is None for r in reasons], pa.bool_()))
    return table.append_column(REASON, pa.array(reasons, pa.string()))
