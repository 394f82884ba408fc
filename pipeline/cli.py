"""``python -m pipeline``: a thin face over functions that tests call directly.

Commands: ``build``, ``inspect VERSION``, ``mindformers VERSION``, ``lineage VERSION --step N
--global-batch B`` (or ``--doc ID``; ``--show-text [--full]``, ``--summary``),
``explain VERSION DOC_ID``, ``spike VERSION --log L --global-batch B``,
``diff V1 V2``, ``verify VERSION``.
Errors print one clear line and exit non-zero.

Every command finds versions by the rule of :mod:`pipeline.location`
(``--corpora-root``, ``$MINDCORPUS_CORPORA_DIR``, ``--config``'s
``corpora_dir``), as ``build`` does. Text that comes from a corpus (document
text, ids, names) is printed through :mod:`pipeline.terminal`: control
characters are shown as escapes, never sent to the terminal raw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeline.report import PLAN_DEFAULTS  # noqa: E402 - light: matplotlib is imported on use
from pipeline.terminal import markup, visible, visible_json

# Training-time plan options, shared by `inspect` and `report` (defaults: pipeline.report).
PlanParams = Annotated[float, typer.Option(help="training plan: model parameters N")]
PlanAccelerators = Annotated[int, typer.Option(help="training plan: accelerator count")]
PlanPeak = Annotated[float, typer.Option(help="training plan: peak FLOP/s per accelerator")]
PlanMfu = Annotated[float, typer.Option(help="training plan: model FLOPs utilization")]
PlanOverhead = Annotated[float, typer.Option(help="training plan: planned / ideal time")]
# Where versions live (pipeline.location), shared by every command that reads one.
CorporaRootOption = Annotated[Path | None, typer.Option(help="where versions live (default "
                                                             "$MINDCORPUS_CORPORA_DIR, else the config's corpora_dir)")]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="the config whose corpora_dir applies "
                                                                    "(default configs/<VERSION>.yaml, else "
                                                                    "configs/default.yaml)")]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="mindcorpus: build, inspect and trace versioned MindRecord corpora.")
# Wide enough for reason codes when output goes to a file or CI log.
console = Console(width=None if sys.stdout.isatty() else 110)
err = Console(stderr=True)


def _error(message: str) -> None:
    """Print ``error: message`` to stderr; the message is plain text (rich
    markup in it, e.g. ``[bold]`` in a path, is printed as written)."""
    from rich.text import Text

    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)


def _one_line(exc: BaseException) -> str | None:
    """``exc`` as one line (:func:`pipeline.failures.failure_line`) plus its
    notes (a build adds where its run log keeps the full traceback); None
    when it is not a failure of the environment."""
    from pipeline.failures import failure_line

    line = failure_line(exc)
    return None if line is None else "; ".join([line, *getattr(exc, "__notes__", [])])


def summary_table(manifest: dict[str, Any]) -> Table:
    """Per stage: documents in, kept, dropped, characters kept, seconds; then
    one row per drop reason with its count and share of the stage's input.
    Under ingest, one row per input file not read whole (its reason, the end
    of its name, the records read before the failure as kept) and the NUL
    characters removed; the caption names those files in full with the cause.
    Under a stage whose fit facts have ``coverage`` (docs/architecture.md),
    one row per language it kept unmeasured (``no model: de``: documents as
    kept, their characters)."""
    table = Table(title=f"corpus {markup(manifest['version'])}: per-stage summary")
    table.add_column("stage / drop reason", no_wrap=True)
    for col in ("docs in", "kept", "dropped", "chars kept", "seconds"):
        table.add_column(col, justify="right")
    ing = manifest["ingest"]["per_source"]
    n_ing = sum(s["documents_in"] for s in ing.values())
    quarantine = manifest["quarantine"]
    failed = manifest["ingest"].get("failed_files", [])
    secs = manifest.get("run", {}).get("stage_seconds", {})
    rows = [("ingest", n_ing + sum(quarantine.values()), n_ing, sum(s["chars_in"] for s in ing.values()),
             quarantine)]
    for name in manifest.get("stage_order", list(manifest["stages"])):
        tot = manifest["stages"][name]["totals"]
        rows.append((name, tot["documents_in"], tot["kept"], tot["kept_chars"], tot["dropped"]))
    for name, n_in, kept, chars, reasons in rows:
        table.add_row(markup(name), f"{n_in:,}", f"{kept:,}", f"{n_in - kept:,}", f"{chars:,}",
                      f"{secs.get(name, 0):.1f}", style="bold")
        for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            table.add_row(f"  {markup(reason)}", "", "", f"{count:,}", f"{count / max(n_in, 1):.1%} of in", "",
                          style="dim")
        coverage = ((manifest["stages"].get(name) or {}).get("fit") or {}).get("coverage") if name != "ingest" else None
        unscored = (coverage or {}).get("unscored") or {}
        for lang, u in sorted(unscored.items(), key=lambda kv: (-kv[1]["docs"], kv[0])):
            # kept without the stage's measurement: the stage's coverage facts (docs/architecture.md)
            table.add_row(f"  no {markup(coverage.get('unit') or 'model')}: {markup(lang)}", "", f"{u['docs']:,}",
                          "", f"{u['chars']:,}", "", style="yellow")
        if name == "ingest":
            for f in failed:
                # kept: the records read before the failure; what the file holds after it is not counted
                table.add_row(Text(f"  {f['reason']} {_tail(f['file'], 32)}"), "", f"{f['records_read']:,}",
                              "", "", "", style="bold red")
            nul = manifest["ingest"].get("nul_removed", {})
            if nul.get("documents"):
                table.add_row(f"  NUL removed: {nul['characters']:,} chars", "", f"{nul['documents']:,}",
                              "", "", "", style="dim")
    if failed:
        # Text, not markup: paths and error messages hold brackets ("[Errno 13]")
        table.caption = Text(f"{len(failed)} input file(s) not read whole (report.html, run.log.jsonl): "
                             + "; ".join(f"{f['file']}: {f['reason']} after {f['records_read']:,} record(s) "
                                         f"({f['detail']})" for f in failed), style="bold red")
    return table


def warning_lines(manifest: dict[str, Any]) -> list[str]:
    """``warning [stage] line`` for every stage warning of the manifest
    (``stages.<name>.warnings``), in stage order, then ``warning [output]
    line`` for each of the manifest's ``output_warnings`` (e.g. too many
    shards for a typical open-file limit): printed under the build summary,
    so a warning is not only a line of the build log."""
    lines = [f"warning [{name}] {line}" for name in manifest.get("stage_order", list(manifest["stages"]))
             for line in (manifest["stages"][name].get("warnings") or [])]
    return lines + [f"warning [output] {line}" for line in manifest.get("output_warnings") or []]


def _tail(text: str, width: int) -> str:
    """``text``, cut on the left to ``width`` characters (``…`` + its end)."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def output_table(manifest: dict[str, Any]) -> Table:
    """Per-source mixture and the output facts of a version."""
    table = Table(title="mixture and output")
    for col in ("source", "available tokens", "target share", "realized tokens", "realized share"):
        table.add_column(col, justify="right" if col != "source" else "left")
    for src, m in manifest["mixture"].get("per_source", {}).items():
        table.add_row(markup(src), f"{m.get('available_tokens', 0):,}", f"{m.get('target_share', 0):.3f}",
                      f"{m.get('realized_tokens', 0):,}", f"{m.get('realized_share', 0):.3f}")
    acc = manifest["accounting"]
    table.caption = (f"{manifest['num_samples']:,} samples x {manifest['seq_length'] + 1} tokens = "
                     f"{manifest['num_tokens']:,} tokens in {len(manifest['shards'])} shard(s); "
                     f"documents in {acc['documents_in']:,} = kept {acc['kept']:,} + dropped "
                     f"{acc['dropped']:,} + quarantined {acc['quarantined']:,}")
    for phase in manifest.get("phases") or ():
        worst = max((abs(v["share_error_pp"]) for v in phase["packed_per_source"].values()
                     if v["share_error_pp"] is not None), default=0.0)
        table.caption += (f"\nphase {phase['name']}: samples {phase['first_sample']:,}.."
                          f"{phase['first_sample'] + phase['num_samples'] - 1:,}, {phase['tokens_sampled']:,} tokens "
                          f"sampled of a {phase['token_budget']:,} budget, worst source share error {worst:.2f} pp")
    return table


@app.command()
def build(
    version: Annotated[str, typer.Option("--version", "-v", help="version name, e.g. v1")],
    config: Annotated[Path | None, typer.Option(help="config file (default configs/<VERSION>.yaml, "
                                                      "else configs/default.yaml)")] = None,
    corpora_root: CorporaRootOption = None,
    workers: Annotated[int | None, typer.Option(help="override executor.num_workers")] = None,
    strict: Annotated[bool, typer.Option(help="stop after ingest if any input record was quarantined")] = False,
) -> None:
    """Build corpora/VERSION and print the per-stage summary table."""
    from pipeline.build import BuildError, VersionExistsError, VersionLockedError, build as run_build
    from pipeline.config import ConfigError
    from pipeline.executor import PartitionError
    from pipeline.readers import ListingError

    try:
        result = run_build(version, config, corpora_root, workers, strict=strict,
                           log=lambda m: err.print(visible(m), highlight=False, markup=False, soft_wrap=True))
    except (ConfigError, VersionExistsError, VersionLockedError, BuildError, FileNotFoundError,
            PartitionError, ListingError) as exc:
        _error(_one_line(exc) or f"{exc}")
        raise typer.Exit(2) from None
    console.print(summary_table(result.manifest))
    console.print(output_table(result.manifest))
    for line in warning_lines(result.manifest):
        console.print(Text(line, style="yellow"))
    run = result.manifest["run"]
    console.print(f"wall time {run['wall_seconds']:.1f} s, peak RSS driver "
                  f"{run['peak_rss']['driver_mb']:.0f} MB, largest worker {run['peak_rss']['largest_worker_mb']:.0f} MB")


def _version_dir(version: str, corpora_root: Path | None, config: Path | None = None) -> Path:
    """The version's directory (:func:`pipeline.location.resolve_version`);
    exit 2 with one line when there is none."""
    from pipeline.location import resolve_version

    try:
        return resolve_version(version, corpora_root, config)
    except (FileNotFoundError, ValueError) as exc:
        _error(visible(exc))
        raise typer.Exit(2) from None


def _manifest(arg, read):
    """``read(arg)``; a corrupt manifest (``ManifestError``, a ValueError)
    exits 2 with its one line instead of a traceback."""
    try:
        return read(arg)
    except ValueError as exc:
        _error(visible(exc))
        raise typer.Exit(2) from None


def _print(text: str, end: str = "\n") -> None:
    """Plain text from a corpus to stdout, control characters visible."""
    print(visible(text), end=end)


def _print_json(data: Any) -> None:
    """JSON to stdout; no raw control character reaches the terminal."""
    print(visible_json(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


@app.command()
def inspect(
    version: Annotated[str | None, typer.Argument(help="the version (optional with --plan --tokens)")] = None,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the manifest (or the examples)")] = False,
    stage: Annotated[str | None, typer.Option(help="print random examples this stage dropped "
                                                     "(or kept, with --kept)")] = None,
    reason: Annotated[str | None, typer.Option(help="only drops with this reason code")] = None,
    n: Annotated[int, typer.Option("-n", help="number of examples")] = 10,
    kept: Annotated[bool, typer.Option("--kept", help="examples of kept documents")] = False,
    where: Annotated[str | None, typer.Option(help="only documents whose column WHERE is set (non-zero, "
                                                   "non-empty), e.g. --kept --where decontaminate_hits or "
                                                   "pii_count: what a stage annotated or edited")] = None,
    seed: Annotated[int, typer.Option(help="sample seed")] = 0,
    chars: Annotated[int, typer.Option(help="characters of text shown per example")] = 400,
    model_params: PlanParams = 7e9,
    accelerators: PlanAccelerators = 128,
    peak_flops: PlanPeak = PLAN_DEFAULTS["peak_flops"],
    mfu: PlanMfu = PLAN_DEFAULTS["mfu"],
    overhead: PlanOverhead = PLAN_DEFAULTS["overhead"],
    plan: Annotated[bool, typer.Option("--plan", help="print only the plan of one training run")] = False,
    tokens: Annotated[float | None, typer.Option(help="--plan: tokens the run trains on (default: the "
                                                      "version's own tokens)")] = None,
    global_batch: Annotated[int | None, typer.Option(help="--plan: samples per step, for the step "
                                                          "count")] = None,
) -> None:
    """Print a version's summary table and training-time plan (or its manifest
    with --json); with --stage, random dropped (or --kept) examples and their
    measurements; with --plan, the plan of one run of --tokens tokens (a
    planned run need not equal the version: e.g. --tokens 1e12)."""
    from pipeline.manifest import load_manifest

    if plan:
        _print_plan(version, corpora_root, config, tokens, model_params, accelerators, peak_flops, mfu,
                    overhead, global_batch, as_json)
        return
    if version is None:
        _error("inspect needs a VERSION (only --plan --tokens N works without one)")
        raise typer.Exit(2)
    vdir = _version_dir(version, corpora_root, config)
    if stage is not None:
        from pipeline.examples import format_examples, sample_examples

        try:
            rows = sample_examples(vdir, stage, reason, n, kept, seed, where)
        except ValueError as exc:
            _error(visible(exc))
            raise typer.Exit(2) from None
        if as_json:
            _print_json(rows)
        else:
            _print(format_examples(rows, stage, chars))
        return
    manifest = _manifest(vdir, load_manifest)
    if as_json:
        _print_json(manifest)
        return
    console.print(summary_table(manifest))
    console.print(output_table(manifest))
    console.print(plan_table(manifest, model_params, accelerators, peak_flops, mfu, overhead))


def _print_plan(version: str | None, corpora_root: Path | None, config: Path | None, tokens: float | None,
                model_params: float, accelerators: int, peak_flops: float, mfu: float, overhead: float,
                global_batch: int | None, as_json: bool) -> None:
    """``inspect --plan``: the plan of one run (:func:`pipeline.report.run_plan`),
    with the version's epochs and steps when a version is named."""
    from pipeline.manifest import load_manifest
    from pipeline.report import run_plan

    manifest = None
    if version is not None:
        manifest = _manifest(_version_dir(version, corpora_root, config), load_manifest)
    if tokens is None and manifest is None:
        _error("--plan needs --tokens N or a VERSION")
        raise typer.Exit(2)
    try:
        result = run_plan(tokens if tokens is not None else manifest["num_tokens"], model_params, accelerators,
                          peak_flops, mfu, overhead,
                          version_tokens=manifest["num_tokens"] if manifest else None,
                          seq_length=manifest["seq_length"] if manifest else None, global_batch=global_batch)
    except ValueError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    if as_json:
        _print_json(result)
        return
    lines = [f"run: D = {result['tokens']:.4g} tokens, N = {model_params:.4g} parameters, "
             f"{accelerators} accelerators x {peak_flops:.3g} FLOP/s peak, MFU {mfu}",
             f"compute: 6·N·D = {result['flops']:.4g} FLOPs at {result['sustained_flops']:.4g} FLOP/s sustained",
             f"ideal: {result['ideal_days']:.3g} days; planned (x{overhead} for restarts, evaluation, "
             f"checkpoints): {result['planned_days']:.3g} days"]
    if "epochs" in result:
        lines.append(f"data: {result['epochs']:.4g} epochs of {markup(version)} ({manifest['num_tokens']:,} tokens"
                     f" per epoch)")
    if "steps" in result:
        lines.append(f"steps: {result['steps']:,} of global batch {global_batch} x seq_length "
                     f"{manifest['seq_length']}")
    for line in lines:
        console.print(line, highlight=False)


def plan_table(manifest: dict[str, Any], model_params: float, accelerators: int, peak_flops: float,
               mfu: float, overhead: float) -> Table:
    """Training-time plan for this version's tokens (:func:`pipeline.report.plan_table`,
    with ``model_params`` among the model sizes)."""
    from pipeline.report import PLAN_ACCELERATORS, PLAN_MODEL_SIZES, plan_table, training_days

    d = manifest["num_tokens"]
    one = training_days(model_params, d, accelerators, peak_flops, mfu, overhead)
    table = Table(title=f"training-time plan: D = {d:,} tokens, 6·N·D FLOPs, peak {peak_flops:.3g} FLOP/s, "
                        f"MFU {mfu}, overhead x{overhead}")
    table.add_column("planned days (ideal)", justify="left")
    for a in PLAN_ACCELERATORS:
        table.add_column(f"{a} accelerators", justify="right")
    for row in plan_table(d, peak_flops, mfu, overhead, model_sizes=sorted(set(PLAN_MODEL_SIZES) | {model_params})):
        table.add_row(f"{row[0]['params'] / 1e9:g}B params",
                      *(f"{t['planned_days']:.3g} ({t['ideal_days']:.3g})" for t in row))
    table.caption = (f"N = {model_params:.3g} on {accelerators} accelerators: {one['flops']:.3g} FLOPs, "
                     f"ideal {one['ideal_days']:.3g} days, planned {one['planned_days']:.3g} days")
    return table


@app.command()
def report(
    version: str,
    compare: Annotated[str | None, typer.Option(help="a second version shown side by side")] = None,
    out: Annotated[Path | None, typer.Option(help="output file (default: <version>/report.html, or "
                                                  "reports/<V>-vs-<OTHER>.html with --compare)")] = None,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
    model_params: PlanParams = 7e9,
    accelerators: PlanAccelerators = 128,
    peak_flops: PlanPeak = PLAN_DEFAULTS["peak_flops"],
    mfu: PlanMfu = PLAN_DEFAULTS["mfu"],
    overhead: PlanOverhead = PLAN_DEFAULTS["overhead"],
) -> None:
    """(Re)build a version's self-contained report.html, optionally against another version."""
    from pipeline.config import REPO_ROOT
    from pipeline.report import write_report

    vdir = _version_dir(version, corpora_root, config)
    other = _version_dir(compare, corpora_root, config) if compare else None
    if out is None and other is not None:
        out = REPO_ROOT / "reports" / f"{vdir.name}-vs-{other.name}.html"
        out.parent.mkdir(parents=True, exist_ok=True)
    try:
        path = write_report(vdir, other, out, model_params=model_params, accelerators=accelerators,
                            peak_flops=peak_flops, mfu=mfu, overhead=overhead)
    except ValueError as exc:  # a corrupt manifest (pipeline.manifest.ManifestError)
        _error(visible(exc))
        raise typer.Exit(2) from None
    console.print(f"wrote {markup(path)}", highlight=False)


@app.command()
def lineage(
    version: str,
    global_batch: Annotated[int, typer.Option(help="global batch size in samples")],
    step: Annotated[int | None, typer.Option(help="training step (0-based)")] = None,
    dp_size: Annotated[int, typer.Option(help="data-parallel size")] = 1,
    around: Annotated[int, typer.Option(help="also list steps STEP-K .. STEP+K")] = 0,
    doc: Annotated[str | None, typer.Option(help="reverse lookup: the samples and steps holding "
                                                 "this document id")] = None,
    show_text: Annotated[bool, typer.Option(help="print each piece's trained text: its token span of the "
                                                  "shard row, decoded with the version's tokenizer")] = False,
    full: Annotated[bool, typer.Option(help="with --show-text, also the whole document text")] = False,
    summary: Annotated[bool, typer.Option(help="per step: source/language/bucket mix against the target, "
                                               "and flags for odd samples")] = False,
    seed: Annotated[int, typer.Option(help="the loader's seed (orders epochs 1, 2, ...)")] = 0,
    consumed_samples: Annotated[int | None, typer.Option(help="samples trained before STEP (a run whose "
                                                              "global batch changed)")] = None,
    epochs: Annotated[int, typer.Option(help="with --doc: list where epochs 0..K-1 read each piece")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """The documents in a training step's global batch (or steps STEP-K..STEP+K),
    in loader order, for a step of any epoch; with --doc ID, the samples and
    steps that hold a document. --show-text and --summary read the shard rows
    (pipeline.drill)."""
    from pipeline.lineage import (DEFAULT_TEXT_CHARS, format_document_lineage, format_lineage,
                                  lineage_for_document, lineage_for_step)

    vdir = _version_dir(version, corpora_root, config)
    if (step is None) == (doc is None):
        _error("give exactly one of --step N or --doc ID")
        raise typer.Exit(2)
    if summary and doc is not None:
        _error("--summary needs --step (a step's mix); use explain VERSION DOC_ID for a document")
        raise typer.Exit(2)
    if full and not show_text:
        _error("--full goes with --show-text")
        raise typer.Exit(2)
    summaries = None
    try:
        if doc is not None:
            result = lineage_for_document(vdir, doc, global_batch, dp_size, num_epochs=epochs, seed=seed,
                                          text_chars=DEFAULT_TEXT_CHARS if show_text else 0)
        else:
            result = lineage_for_step(vdir, step, global_batch, dp_size, around=around, text_chars=0,
                                      seed=seed, consumed_samples=consumed_samples)
        if show_text or summary:
            from pipeline.drill import attach_text, read_sample_rows, step_summaries

            rows = None
            if show_text:
                rows = attach_text(vdir, result, full=full)
            if summary:
                rows = rows or read_sample_rows(vdir, [r["sample_index"] for r in result])
                summaries = step_summaries(vdir, result, rows)
    except ValueError as exc:
        _error(visible(exc))
        raise typer.Exit(2) from None
    if as_json:
        _print_json(result if summaries is None else {"records": result, "summaries": summaries})
        return
    from pipeline.drill import format_piece_texts, format_summaries

    if doc is not None:
        _print(format_document_lineage(result, show_text=show_text), end="")
        if show_text:
            _print(format_piece_texts(result, full=full), end="")
        if not result["pieces"]:
            raise typer.Exit(1)
    else:
        _print(format_lineage(result), end="")
        if show_text:
            _print(format_piece_texts(result, full=full), end="")
        if summaries is not None:
            _print(format_summaries(summaries), end="")


@app.command()
def explain(
    version: str,
    doc_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """Why DOC_ID was kept or dropped: every stage's measurements with the
    threshold that applied and the margin (pipeline.explain); exit 1 for an
    id in no table of the version."""
    from pipeline.explain import UnknownDocumentError, explain_document, format_explanation

    vdir = _version_dir(version, corpora_root, config)
    try:
        result = explain_document(vdir, doc_id)
    except UnknownDocumentError as exc:
        _error(visible(exc.args[0]))
        raise typer.Exit(1) from None
    if as_json:
        _print_json(result)
    else:
        _print(format_explanation(result), end="")


@app.command()
def spike(
    version: str,
    log: Annotated[Path, typer.Option(help="training log: mindformers' text log or JSONL of step, loss, grad_norm")],
    global_batch: Annotated[int, typer.Option(help="global batch size in samples")],
    window: Annotated[int, typer.Option(help="steps before a step that its spike test looks at")] = 50,
    dp_size: Annotated[int, typer.Option(help="data-parallel size")] = 1,
    metric: Annotated[str, typer.Option(help="loss or grad_norm")] = "loss",
    k: Annotated[float, typer.Option(help="spike above median + k x 1.4826 MAD")] = 3.0,
    baseline: Annotated[int, typer.Option(help="normal steps shown beside each spike")] = 4,
    max_spikes: Annotated[int, typer.Option(help="spikes summarised (highest scores)")] = 5,
    step_base: Annotated[int | None, typer.Option(help="number of the log's first step (default: 1 for "
                                                       "mindformers' text log, 0 for JSONL)")] = None,
    show_text: Annotated[bool, typer.Option(help="also print each spike step's pieces: trained text, source "
                                                  "line and why each document was kept")] = False,
    seed: Annotated[int, typer.Option(help="the loader's seed (orders epochs 1, 2, ...)")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """Find loss spikes in a training log and print what each spike step
    trained on beside normal steps (pipeline.spike)."""
    from pipeline.spike import format_spike_report, spike_report

    vdir = _version_dir(version, corpora_root, config)
    try:
        result = spike_report(vdir, log, window, global_batch, dp_size, metric, k, baseline, max_spikes, step_base,
                              show_text, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        _error(visible(exc))
        raise typer.Exit(2) from None
    if as_json:
        _print_json(result)
    else:
        _print(format_spike_report(result), end="")


@app.command()
def diff(
    version_a: str,
    version_b: str,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """What changed from VERSION_A to VERSION_B: config keys, counts, and the
    documents added and removed per source."""
    from pipeline.versions import diff_versions, format_diff

    dirs = _version_dir(version_a, corpora_root, config), _version_dir(version_b, corpora_root, config)
    result = _manifest(dirs, lambda d: diff_versions(*d))
    if as_json:
        _print_json(result)
    else:
        _print(format_diff(result), end="")


@app.command()
def stages(
    config: Annotated[Path | None, typer.Option("--config", help="a config whose plugins are listed too")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
) -> None:
    """Every stage in build order, as it declares itself: what it reads (and
    from which stage), the columns it adds (type, meaning, carried into
    lineage), what its fit provides (docs/stages/adding_a_stage.md)."""
    import yaml

    from pipeline.contract import describe, format_stages
    from stages import RegistryError

    plugins: tuple[str, ...] = ()
    if config is not None:
        try:
            data = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            _error(f"{config}: cannot read the config: {exc}")
            raise typer.Exit(2) from None
        plugins = tuple(data.get("plugins") or ()) if isinstance(data, dict) else ()
    try:
        found = describe(plugins)
    except RegistryError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    if as_json:
        _print_json(found)
    else:
        _print(format_stages(found), end="")


@app.command()
def verify(
    version: str,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """Check VERSION's manifest against manifest.sha256, then re-hash every
    shard and file against the manifest; exit 1 with one line per problem,
    naming the file."""
    from pipeline.versions import verify_version

    result = verify_version(_version_dir(version, corpora_root, config))
    for p in result["problems"]:
        _print(f"BAD {p['kind']} {p['file']}: {p['reason']}")
    if not result["ok"]:
        raise typer.Exit(1)
    formats = result.get("checked_format_files", 0)
    print(f"ok: manifest.json matches manifest.sha256; {result['checked_shards']} shards and "
          f"{result['checked_files'] - formats} files match the manifest"
          + (f", and {formats} files of the other output formats" if formats else ""))


@app.command()
def mindformers(
    version: str,
    fmt: Annotated[str | None, typer.Option("--format", help="only this format (mindrecord, "
                                                            "mindrecord_shifted, megatron)")] = None,
    global_batch: Annotated[int, typer.Option(help="global batch size in samples")] = 8,
    dp_size: Annotated[int, typer.Option(help="data-parallel size")] = 1,
    num_samples: Annotated[int | None, typer.Option(help="megatron: sizes[0], the GPTDataset samples "
                                                         "to request (default one epoch)")] = None,
    check: Annotated[bool, typer.Option(help="check the version against mindformers' rules")] = True,
    step: Annotated[int | None, typer.Option(help="megatron: the documents of this training step under "
                                                  "GPTDataset's order, instead of the YAML")] = None,
    path_to_cache: Annotated[Path | None, typer.Option(help="megatron --step: the run's path_to_cache "
                                                            "(GPTDataset's index is read there)")] = None,
    corpora_root: CorporaRootOption = None,
    config: ConfigOption = None,
) -> None:
    """The mindformers 1.8 train_dataset YAML for each format of VERSION, then a check
    against mindformers' own rules; exit 1 with one line per problem. With --step N,
    the documents GPTDataset put in step N of a run on the megatron format. A staged
    mixture (mixture.phases) whose phases do not start on a step boundary at
    --global-batch is a problem too (mindformers reads rows in order)."""
    from pipeline.manifest import load_manifest
    from pipeline.mindformers import check_version, format_yaml, gpt_lineage_for_step, phase_problems, version_formats

    vdir = _version_dir(version, corpora_root, config)
    try:
        manifest = load_manifest(vdir, check_samples=True)
        if step is not None:
            for entry in gpt_lineage_for_step(vdir, manifest, step, global_batch, dp_size, num_samples,
                                              path_to_cache):
                _print(f"rank {entry['dp_rank']} GPTDataset sample {entry['sample']}")
                for p in entry["pieces"]:
                    where = (f" {visible(str(p['source']))} {visible(str(p['file']))}:{p['line']}"
                             if p.get("file") is not None else "")
                    _print(f"  window [{p['window_token_start']}, {p['window_token_end']}) "
                           f"{visible(str(p['doc_id']))} tokens [{p['doc_token_start']}, {p['doc_token_end']}){where}")
            return
        formats = version_formats(manifest)
        if fmt is not None and fmt not in formats:
            raise ValueError(f"{vdir.name} has no {fmt} format (it has {', '.join(formats)})")
        for name in [fmt] if fmt else formats:
            _print(format_yaml(vdir, manifest, name, global_batch, dp_size, num_samples))
    except ValueError as exc:
        _error(visible(exc))
        raise typer.Exit(2) from None
    if check:
        problems = check_version(vdir, manifest) + phase_problems(manifest, global_batch)
        for line in problems:
            _print(f"BAD {line}")
        if problems:
            raise typer.Exit(1)
        print(f"ok: {', '.join(formats)} follow mindformers 1.8's rules")


@app.command("tokenizer-report")
def tokenizer_report(
    tokenizer: Annotated[list[str], typer.Option(help="NAME=PATH or PATH of a tokenizer file (tokenizer.json, "
                                                      "a tiktoken BPE file, tekken.json); repeat to compare "
                                                      "tokenizers side by side")],
    corpus: Annotated[list[Path], typer.Option(help="JSONL(.gz/.zst)/Parquet files or directories")],
    reference: Annotated[list[str] | None, typer.Option(help="NAME=PATH of a reference tokenizer file "
                                                             "(e.g. qwen=qwen.tiktoken): measured beside the "
                                                             "others, compared against the first --tokenizer, "
                                                             "never warned about; repeatable")] = None,
    pattern: Annotated[list[str] | None, typer.Option(help="NAME=REGEX or NAME=PRESET (qwen, cl100k_base): the "
                                                           "pre-tokenizer of tiktoken file NAME (default: the "
                                                           "preset named by its file stem)")] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("tokenizer-report"),
    max_chars: Annotated[int | None, typer.Option(help="read at most this many characters")] = None,
    max_byte_fallback_rate: Annotated[float | None, typer.Option(help="warn above this rate")] = None,
) -> None:
    """Coverage report (Markdown, JSON, HTML) of one or more tokenizers on a corpus."""
    from common.tokenizer_files import resolve_pattern, tokenizer_kind
    from pipeline.layout import TOKENIZER
    from pipeline.tokenizer_report import (
        check_thresholds,
        comparison_lines,
        read_corpus,
        run_report,
        write_report,
    )

    named: dict[str, Path] = {}
    refs: list[str] = []
    for spec, is_ref in [(t, False) for t in tokenizer] + [(r, True) for r in reference or []]:
        name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
        path = Path(path)
        name = name or (path.parent.name if path.name == TOKENIZER else path.stem)
        if not path.is_file() or name in named:
            _error(f"tokenizer {spec!r}: no such file, or a repeated name")
            raise typer.Exit(2)
        named[name] = path
        refs += [name] if is_ref else []
    patterns = {}
    for spec in pattern or []:
        name, sep, regex = spec.partition("=")
        if not sep or name not in named:
            _error(f"--pattern {spec!r}: NAME=REGEX for a NAME given by --tokenizer or --reference")
            raise typer.Exit(2)
        patterns[name] = regex
    for name, path in named.items():
        try:
            if tokenizer_kind(path) == "tiktoken":
                resolve_pattern(path, patterns.get(name))
        except ValueError as exc:
            _error(f"{exc} (--pattern {name}=...)")
            raise typer.Exit(2) from None
    try:
        docs = read_corpus(corpus, max_chars)
    except FileNotFoundError as exc:
        _error(f"{exc}")
        raise typer.Exit(2) from None
    report = run_report(named, docs, patterns=patterns, references=refs)
    warnings = check_thresholds(report, max_byte_fallback_rate=max_byte_fallback_rate)
    for path in write_report(report, out, warnings):
        console.print(f"wrote {path}")
    for line in comparison_lines(report):
        console.print(line, highlight=False)
    for w in warnings:
        err.print(f"warning: {w}", highlight=False)


def main() -> None:
    """Run the CLI. A failure of the environment (a full disk, a read-only
    or unreadable file, a failing ``lmplz``, a MindRecord shard that cannot
    be written: :func:`pipeline.failures.failure_line`) prints one line,
    with where the full traceback is (a build's run log), and exits 2;
    anything else is a bug and keeps its traceback."""
    try:
        app()
    except Exception as exc:  # noqa: BLE001 - re-raised unless it has a one-line description
        line = _one_line(exc)
        if line is None:
            raise
        _error(line)
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(main())
