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
# A layer's join key: the document's position (0-based) in the ingest partition.
ROW = "row"
# Base columns a stage may edit (a layer then holds them, null where unchanged).
EDITABLE_COLUMNS = ("text", "chars")
BASE_COLUMNS = ("id", "source", "file", "line", "text", "meta", "lang_hint", "chars")


class BaseStageConfig(pydantic.BaseModel):
    """What every stage config shares: unknown keys are an error, the model is
    frozen (it crosses to workers pickled, as it is: ``pipeline.executor``),
    and it declares what the stage reads from the rest of the build."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    #: What this stage reads that earlier stages make: a column or artifact
    #: name (see :attr:`Stage.columns`, :attr:`Stage.artifacts`) -> why, e.g.
    #: ``{"langid_lang": "the rule thresholds follow the language"}``. The
    #: build config is checked against every stage's declarations when it is
    #: loaded (``pipeline.contract``): a name that no earlier enabled stage
    #: provides is a one-line error naming both stages. A stage whose needs
    #: depend on its options overrides :meth:`requirements` instead.
    requires: ClassVar[dict[str, str]] = {}

    def requirements(self) -> dict[str, str]:
        """What this stage, so configured, reads: column or artifact name ->
        why (:attr:`requires` unless a stage overrides it)."""
        return dict(self.requires)

    def language_codes(self) -> dict[str, list[str]]:
        """The language codes this section names, by field (``{"allowed_languages":
        ["en", "nb"]}``), so that the build config can refuse a code no
        document can carry (``stages.lang_codes.unknown_codes``) before any
        work. Default: none."""
        return {}


class StageConfig(BaseStageConfig):
    """Base of a stage's typed config, for a stage a build may leave out
    (``enabled: false``)."""

    enabled: bool = True


class RequiredStageConfig(BaseStageConfig):
    """Base of the config of a stage no build can do without (its outputs are
    what the assembly packs: ``pipeline.contract.ASSEMBLY_REQUIRES``): it has
    no ``enabled`` key (writing one is a config error saying why), and
    :attr:`enabled` is always True."""

    #: Why no build can do without this stage (shown when a config tries).
    required_by_build: ClassVar[str] = "the assembly reads what it provides"

    @property
    def enabled(self) -> bool:
        """Always True: the stage always runs."""
        return True


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
        edits_text: whether :meth:`Stage.process` may edit ``text``: False for
            a stage that runs after the tokenizer (the token ids were made
            from the text before it).
    """

    work_dir: Path
    cache_dir: Path
    seed: int
    tools_dir: Path
    edits_text: bool = True


@dataclasses.dataclass(frozen=True)
class PartitionRef:
    """One partition as the stages see it: the text stored once, plus what
    each stage added (a *layer* per stage), joined on demand.

    A build stores a partition's documents once, in the ingest file ``base``
    (the :data:`BASE_COLUMNS`; ``keep``/``reason`` optional). Every stage that
    ran since writes one layer file: the column ``row`` (int32, position of the
    document in ``base``, ascending) for each document the stage saw (those the
    previous layer kept), the stage's measurement columns, ``keep`` and
    ``reason``, and any base column the stage edited (e.g. ``text`` and
    ``chars`` after line dedup), null where unchanged. :func:`read_kept` joins
    them, so a stage reads a partition as one document table and writes only
    what it adds (measured: docs/architecture.md, storage).

    A plain Parquet file of a whole document table (tests, benchmarks) is a
    ref with no layers.

    Attributes:
        base: path of the ingest partition (str, so the ref pickles cheaply).
        layers: layer paths in stage order.
    """

    base: str
    layers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The partition's file name (``part-FFFFF-NNNNN.parquet``), the same
        in every stage directory."""
        return Path(self.base).name

    def with_layer(self, path: str | Path) -> PartitionRef:
        """This partition with one more (later) layer."""
        return PartitionRef(self.base, (*self.layers, str(path)))

    def num_rows(self) -> int:
        """Rows the last layer holds (documents that entered its stage; the
        base's row count when there is no layer), from the Parquet footer."""
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.layers[-1] if self.layers else self.base).metadata.num_rows

    def __fspath__(self) -> str:  # lets pq/open take a layer-less ref as a path
        if self.layers:
            raise TypeError(f"{self.base} has {len(self.layers)} layer(s): read it with read_kept")
        return self.base


def as_ref(part: str | Path | PartitionRef) -> PartitionRef:
    """A :class:`PartitionRef` for a ref or a plain Parquet path."""
    return part if isinstance(part, PartitionRef) else PartitionRef(str(part))


class Partitions:
    """The input of a stage's :meth:`Stage.fit`: the kept documents of the
    previous stage, one :class:`PartitionRef` per partition, plus a parallel ``map``.

    Attributes:
        paths: the partitions (:class:`PartitionRef`), in partition order;
            plain Parquet paths are accepted and wrapped.
        map: ``map(fn, items) -> list`` runs a *picklable top-level* function
            over items on the build's executor (local process pool or Ray), in
            order. Use it for per-partition work inside ``fit`` (e.g. MinHash
            signatures); pass the refs to it and read them with :func:`read_kept`.
    """

    def __init__(self, paths: list[PartitionRef | Path | str], mapper: Callable[[Callable, list], list]):
        self.paths = [as_ref(p) for p in paths]
        self.map = mapper

    def tables(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """Yield each partition's kept rows (``keep == True``), in order."""
        for path in self.paths:
            yield read_kept(path, columns)


def _layer_columns(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


def view_columns(part: PartitionRef | Path | str) -> list[str]:
    """The columns :func:`read_kept` returns for ``part`` (all of them), in
    order: base columns, then each layer's new columns in stage order, then
    ``keep`` and ``reason``."""
    ref = as_ref(part)
    names = [c for c in _layer_columns(ref.base) if c not in (KEEP, REASON, ROW)]
    for layer in ref.layers:
        names += [c for c in _layer_columns(layer) if c not in (KEEP, REASON, ROW) and c not in names]
    return [*names, KEEP, REASON]


def read_view(part: PartitionRef | Path | str, columns: list[str] | None = None,
              kept: bool = True, cache: dict[str, pa.Table] | None = None) -> tuple[pa.Table, "np.ndarray"]:
    """Join a partition's base and layers into one document table.

    Args:
        part: the partition (a plain Parquet path is a ref without layers).
        columns: the columns wanted (all when None, in :func:`view_columns`
            order); a name no file holds raises ``KeyError``.
        kept: only the documents the last layer kept (``keep == True``);
            False returns every document the last layer holds, with its
            ``keep``/``reason`` (the rows its stage saw).
        cache: a dict to reuse across calls on the same partition (e.g. one
            view per stage): each file's columns are read once.

    Returns:
        ``(table, rows)``: the table (``keep``/``reason`` included only when
        asked for or when ``columns`` is None) and ``rows`` (int64[n], each
        document's position in the base file).
    """
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ref = as_ref(part)
    cache = {} if cache is None else cache
    wanted = view_columns(ref) if columns is None else list(columns)
    sources: list[tuple[str, list[str]]] = [(ref.base, _layer_columns(ref.base))]
    sources += [(layer, _layer_columns(layer)) for layer in ref.layers]

    def load(path: str, need: list[str]) -> pa.Table:
        have = cache.get(path)
        missing = [c for c in need if have is None or c not in have.column_names]
        if missing:
            more = pq.read_table(path, columns=missing)
            if have is None:
                have = more
            else:
                for name in missing:
                    have = have.append_column(name, more[name])
            cache[path] = have
        return have

    # Which documents: the last file's keep decides.
    last, last_names = sources[-1]
    if ref.layers:
        decision = load(last, [ROW, KEEP, REASON]).select([ROW, KEEP, REASON])
        rows_all = decision[ROW].to_numpy().astype(np.int64)
    else:
        cols = [c for c in (KEEP, REASON) if c in last_names]
        decision = load(last, cols).select(cols) if cols else None
        n = pq.ParquetFile(last).metadata.num_rows
        rows_all = np.arange(n, dtype=np.int64)
        if decision is None or KEEP not in decision.column_names:
            decision = pa.table({KEEP: pa.array(np.ones(n, bool)),
                                 REASON: pa.nulls(n, pa.string())})
        elif REASON not in decision.column_names:
            decision = decision.append_column(REASON, pa.nulls(n, pa.string()))
    if kept:
        mask = decision[KEEP].combine_chunks()
        mask = pc.fill_null(mask, False)
        rows = rows_all[np.asarray(mask.to_numpy(zero_copy_only=False), bool)]
        decision = decision.filter(mask)
    else:
        rows = rows_all

    out: dict[str, pa.ChunkedArray | pa.Array] = {}
    for name in wanted:
        if name in (KEEP, REASON):
            out[name] = decision[name]
            continue
        holders = [i for i, (_, names) in enumerate(sources) if name in names]
        if not holders:
            raise KeyError(f"{ref.base}: no column {name!r} in the partition or its layers")
        value = None
        for i in reversed(holders):  # latest first; null in a layer = unchanged
            path, _ = sources[i]
            need = [c for c in wanted if c in sources[i][1] and c not in (KEEP, REASON)]
            table = load(path, sorted(set(need) | {ROW}) if i > 0 else need)
            if i == 0:
                take = rows
            else:
                layer_rows = table[ROW].to_numpy().astype(np.int64)
                take = np.searchsorted(layer_rows, rows)
                if len(take) and (take.max() >= len(layer_rows) or (layer_rows[take] != rows).any()):
                    raise ValueError(f"{path}: layer does not hold every document of the later layers")
            column = table[name].take(pa.array(take, pa.int64()))
            value = column if value is None else pc.coalesce(value, column)
            if value.null_count == 0 or i == 0 or name not in EDITABLE_COLUMNS:
                break
        out[name] = value
    return pa.table(out) if out else pa.table({}).slice(0, 0), rows


def read_kept(path: PartitionRef | Path | str, columns: list[str] | None = None) -> pa.Table:
    """Read one partition and return only its kept rows.

    Args:
        path: a :class:`PartitionRef` (base + stage layers) or a plain
            Parquet file of a document table.
        columns: columns to return (all when None, ``keep``/``reason``
            included).
    """
    return read_view(path, columns, kept=True)[0]


@dataclasses.dataclass(frozen=True)
class Column:
    """A measurement column a stage adds to the document table.

    Attributes:
        dtype: the Arrow type, as Arrow prints it (``string``, ``float32``,
            ``int64``, ``list<item: int32>``).
        doc: what the value means, with its unit.
        lineage: carried into every lineage segment of the version (and so
            into ``lineage`` output: "why this document survived"); only small
            scalar columns.
        digits: decimals shown for a float column in lineage output (None:
            as stored).
    """

    dtype: str
    doc: str
    lineage: bool = False
    digits: int | None = None


@dataclasses.dataclass(frozen=True)
class Figure:
    """A chart a stage asks the version's report to draw, as data: the report
    (``pipeline.report``) draws every stage's figures without knowing the
    stage.

    Attributes:
        kind: ``curve`` (``x`` against ``y``), ``bars`` (``x`` labels, ``y``
            heights) or ``column_histogram`` (a histogram of ``column`` over
            the version's kept documents, one panel per value of
            ``group_by``; log10 of the value when ``log10``).
        title: the chart's title.
        x_label, y_label: axis labels.
        x, y: the points (``curve``, ``bars``).
        column, group_by, log10: for ``column_histogram``.
        bins: histogram bin edges (of log10 of the value when ``log10``);
            empty: 0 to 6 in steps of 0.2 with ``log10``, else 0 to 1 in 40 bins.
        marks: vertical dashed lines; for ``column_histogram`` per group:
            ``{group: [values]}``, else ``{"": [values]}``.
        strong_marks: solid vertical lines, same shape as ``marks``.
    """

    kind: str
    title: str
    x_label: str = ""
    y_label: str = ""
    x: tuple = ()
    y: tuple = ()
    column: str | None = None
    group_by: str | None = None
    log10: bool = False
    bins: tuple = ()
    marks: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    strong_marks: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (the manifest's ``stages.<name>.figures``)."""
        out = dataclasses.asdict(self)
        out["x"], out["y"], out["bins"] = list(self.x), list(self.y), list(self.bins)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        """Inverse of :meth:`to_json` (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        for key in ("x", "y", "bins"):
            kw[key] = tuple(kw.get(key, ()))
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What :meth:`Stage.fit` returns: all the rest of the build may know of
    what a stage learned.

    Attributes:
        facts: JSON-able facts for the manifest (``stages.<name>.fit``);
            nothing outside the stage reads them but people (and ``diff``).
        warnings: one line each, for the run log (``[stage] WARNING ...``),
            the manifest (``stages.<name>.warnings``) and the report: what a
            user should know about this build (a language with no model, a
            capped source).
        artifacts: name -> file, relative to ``ctx.work_dir``, of each file
            the stage declared in :attr:`Stage.artifacts` as a file (e.g.
            ``tokenizer`` -> ``tokenizer.json``): the build publishes or
            hands on these, never a path it guessed.
        exports: name -> JSON-able value of each value the stage declared in
            :attr:`Stage.artifacts` (e.g. ``pad_id``): what later phases may
            read, by name.
        figures: charts for the report (:class:`Figure`).
    """

    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    artifacts: dict[str, str] = dataclasses.field(default_factory=dict)
    exports: dict[str, Any] = dataclasses.field(default_factory=dict)
    figures: tuple[Figure, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (stored in the stage's state file)."""
        return {"facts": self.facts, "warnings": list(self.warnings), "artifacts": dict(self.artifacts),
                "exports": dict(self.exports), "figures": [f.to_json() for f in self.figures]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FitResult:
        """Inverse of :meth:`to_json`."""
        return cls(facts=data.get("facts") or {}, warnings=tuple(data.get("warnings") or ()),
                   artifacts=dict(data.get("artifacts") or {}), exports=dict(data.get("exports") or {}),
                   figures=tuple(Figure.from_json(f) for f in data.get("figures") or ()))


class Stage:
    """One pipeline stage. Subclasses set ``name`` and ``Config``.

    Life cycle in a build: the driver constructs the stage with its config and
    context, calls :meth:`fit` once (global learning; default does nothing),
    then each worker constructs its own instance and calls :meth:`process` on
    each partition's kept documents.
    """

    name: ClassVar[str]
    Config: ClassVar[type[BaseStageConfig]] = StageConfig
    #: Where the stage runs in a build: stages run in ascending ``order``
    #: (built-in: langid 100, heuristics 200, perplexity 300, dedup 400,
    #: pii 500, tokenize 600, mixture 700; a new stage picks a free number between the
    #: stages it runs between). Unique among the registered stages.
    order: ClassVar[int]
    #: The measurement columns :meth:`process` adds: name (prefixed by the
    #: stage name) -> :class:`Column`. Another stage (or the assembly) may
    #: read only columns some earlier stage declares here.
    columns: ClassVar[dict[str, Column]] = {}
    #: What :meth:`fit` hands on besides its facts: name -> ``"file: ..."``
    #: (a file in :attr:`FitResult.artifacts`) or ``"value: ..."`` (a value in
    #: :attr:`FitResult.exports`), with what it is.
    artifacts: ClassVar[dict[str, str]] = {}
    #: The name of the partition :meth:`process` is called on
    #: (``part-FFFFF-NNNNN.parquet``, the same as ``PartitionRef.name`` of the
    #: refs ``fit`` saw), set by the executor before each call; None when
    #: ``process`` is called outside a build. A stage whose ``fit`` wrote
    #: per-partition results (dedup) reads only its partition's by it.
    partition: str | None = None
    #: True when :meth:`process` decides each document on its own (no
    #: statistic over the partition): the executor then calls it on
    #: consecutive row batches of about ``executor.batch_bytes`` of text, so a
    #: worker's memory follows the batch, not the partition (measured:
    #: docs/architecture.md, "Scale"). Every built-in stage is; a stage that
    #: needs the whole partition at once leaves it False.
    row_independent: ClassVar[bool] = False
    #: Columns :meth:`tally` reads (each declared in :attr:`columns`); empty:
    #: the stage has no tally (no ``tally`` key in its manifest entry). Checked
    #: when the stages are registered (``stages.registry``).
    tally_columns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: BaseStageConfig, ctx: StageContext):
        self.config = config
        self.ctx = ctx

    @classmethod
    def effective_settings(cls, config: BaseStageConfig) -> dict[str, Any]:
        """What shapes :meth:`process`'s output beyond ``config`` itself, as
        JSON-able data: the values the stage derives from its config and its
        built-in defaults (e.g. heuristics' thresholds per language after
        presets and overrides). The build puts it in the stage's fingerprint
        (a changed preset re-runs the stage) and in the manifest
        (``stages.<name>.settings``). Default: nothing (``{}``)."""
        return {}

    @classmethod
    def preflight(cls, config: BaseStageConfig) -> list[str]:
        """Checks of ``config`` that need I/O (a file it names exists and
        loads), run once in the driver after the config is parsed and before
        any work (``pipeline.config.preflight``); config validators do no
        I/O. Returns one line per problem, starting with the key
        (``perplexity.models.en: ...``). Default: none."""
        return []

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """Counts over ``table``: the documents of ONE source that entered the
        stage in one partition (kept and dropped), with the columns
        :attr:`tally_columns` + ``keep`` + ``reason`` (n rows, any n >= 1).

        Returns key -> count (a Python ``int``, >= 0 by convention; keys:
        short strings, ``"/"`` nests a child under a parent, e.g. ``"gsm8k"``
        and ``"gsm8k/123"``; a key with no count may be left out). The build
        (``pipeline.executor.process_partition``) calls it once per source
        per partition after the stage's layer is written and sums the
        results per key over partitions into the manifest's
        ``stages.<name>.per_source.<source>.tally`` and
        ``stages.<name>.totals.tally`` (keys sorted); ``report.html`` shows
        them as a table key x source. A resumed partition is tallied from
        its layer, so the counts must depend only on these columns (no
        state of the stage object: it is a classmethod, and the same numbers
        come whatever the worker count or batch split). Anything but a dict
        of str -> int stops the build with the stage named.

        O(n) time and memory in the partition's documents of that source.
        Default: no counts (``{}``).
        """
        return {}

    def fit(self, partitions: Partitions) -> FitResult:
        """Learn what the stage needs from all its input, write it under
        ``ctx.work_dir`` and return what the build may know of it
        (:class:`FitResult`: manifest facts, warnings, declared artifacts and
        exports, figures). Load models here, not in the config's validators:
        a config is checked (and crosses processes) without I/O."""
        return FitResult()

    def process(self, table: pa.Table) -> pa.Table:
        """Return ``table`` with this stage's columns, ``keep`` and ``reason``."""
        raise NotImplementedError

    def release(self) -> None:
        """Free what this stage keeps in the process beyond the object itself
        (module-level caches of models): called by the build when a process
        is done with the stage (after ``fit`` in the driver, when a worker
        moves on to another stage). Default: nothing."""


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
