"""``python -m pipeline``: a thin face over functions that tests call directly.

Commands: ``build``, ``inspect VERSION``, ``lineage VERSION --step N
--global-batch B``. Errors print one clear line and exit non-zero.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="mindcorpus: build, inspect and trace versioned MindRecord corpora.")
# Wide enough for reason codes when output goes to a file or CI log.
console = Console(width=None if sys.stdout.isatty() else 110)
err = Console(stderr=True)


def _corpora_root(root: Path | None) -> Path:
    from pipeline.config import REPO_ROOT

    return root if root is not None else REPO_ROOT / "corpora"


def summary_table(manifest: dict[str, Any]) -> Table:
    """Per stage: documents in, kept, dropped, characters kept, seconds; then
    one row per drop reason with its count and share of the stage's input."""
    table = Table(title=f"corpus {manifest['version']}: per-stage summary")
    table.add_column("stage / drop reason", no_wrap=True)
    for col in ("docs in", "kept", "dropped", "chars kept", "seconds"):
        table.add_column(col, justify="right")
    ing = manifest["ingest"]["per_source"]
    n_ing = sum(s["documents_in"] for s in ing.values())
    quarantine = manifest["quarantine"]
    secs = manifest.get("run", {}).get("stage_seconds", {})
    rows = [("ingest", n_ing + sum(quarantine.values()), n_ing, sum(s["chars_in"] for s in ing.values()),
             quarantine)]
    for name in manifest.get("stage_order", list(manifest["stages"])):
        tot = manifest["stages"][name]["totals"]
        rows.append((name, tot["documents_in"], tot["kept"], tot["kept_chars"], tot["dropped"]))
    for name, n_in, kept, chars, reasons in rows:
        table.add_row(name, f"{n_in:,}", f"{kept:,}", f"{n_in - kept:,}", f"{chars:,}",
                      f"{secs.get(name, 0):.1f}", style="bold")
        for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            table.add_row(f"  {reason}", "", "", f"{count:,}", f"{count / max(n_in, 1):.1%} of in", "",
                          style="dim")
    return table


def output_table(manifest: dict[str, Any]) -> Table:
    """Per-source mixture and the output facts of a version."""
    table = Table(title="mixture and output")
    for col in ("source", "available tokens", "target share", "realized tokens", "realized share"):
        table.add_column(col, justify="right" if col != "source" else "left")
    for src, m in manifest["mixture"].get("per_source", {}).items():
        table.add_row(src, f"{m.get('available_tokens', 0):,}", f"{m.get('target_share', 0):.3f}",
                      f"{m.get('realized_tokens', 0):,}", f"{m.get('realized_share', 0):.3f}")
    acc = manifest["accounting"]
    table.caption = (f"{manifest['num_samples']:,} samples x {manifest['seq_length'] + 1} tokens = "
                     f"{manifest['num_tokens']:,} tokens in {len(manifest['shards'])} shard(s); "
                     f"documents in {acc['documents_in']:,} = kept {acc['kept']:,} + dropped "
                     f"{acc['dropped']:,} + quarantined {acc['quarantined']:,}")
    return table


@app.command()
def build(
    version: Annotated[str, typer.Option("--version", "-v", help="version name, e.g. v1")],
    config: Annotated[Path | None, typer.Option(help="config file (default configs/<VERSION>.yaml, "
                                                      "else configs/default.yaml)")] = None,
    corpora_root: Annotated[Path | None, typer.Option(help="where versions live")] = None,
    workers: Annotated[int | None, typer.Option(help="override executor.num_workers")] = None,
) -> None:
    """Build corpora/VERSION and print the per-stage summary table."""
    from pipeline.build import BuildError, VersionExistsError, build as run_build
    from pipeline.config import ConfigError

    try:
        result = run_build(version, config, corpora_root, workers, log=lambda m: err.print(m, highlight=False, markup=False, soft_wrap=True))
    except (ConfigError, VersionExistsError, BuildError, FileNotFoundError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    console.print(summary_table(result.manifest))
    console.print(output_table(result.manifest))
    run = result.manifest["run"]
    console.print(f"wall time {run['wall_seconds']:.1f} s, peak RSS driver "
                  f"{run['peak_rss']['driver_mb']:.0f} MB, largest worker {run['peak_rss']['largest_worker_mb']:.0f} MB")


def _version_dir(version: str, corpora_root: Path | None) -> Path:
    path = Path(version)
    if not (path / "manifest.json").exists():
        path = _corpora_root(corpora_root) / version
    if not (path / "manifest.json").exists():
        err.print(f"[bold red]error:[/] no corpus version {version!r} (looked for {path}/manifest.json)")
        raise typer.Exit(2)
    return path


@app.command()
def inspect(
    version: str,
    corpora_root: Annotated[Path | None, typer.Option(help="where versions live")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the manifest")] = False,
) -> None:
    """Print a version's summary table (or its manifest with --json)."""
    from pipeline.manifest import load_manifest

    manifest = load_manifest(_version_dir(version, corpora_root))
    if as_json:
        print(json.dumps(manifest, indent=2, ensure_ascii=False))
        return
    console.print(summary_table(manifest))
    console.print(output_table(manifest))


@app.command()
def lineage(
    version: str,
    step: Annotated[int, typer.Option(help="training step (0-based)")],
    global_batch: Annotated[int, typer.Option(help="global batch size in samples")],
    dp_size: Annotated[int, typer.Option(help="data-parallel size")] = 1,
    show_text: Annotated[bool, typer.Option(help="print the first 200 characters of each document "
                                                  "(its start, not the piece in the sample)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    corpora_root: Annotated[Path | None, typer.Option(help="where versions live")] = None,
) -> None:
    """The documents in a training step's global batch, in loader order."""
    from pipeline.lineage import format_lineage, lineage_for_step

    vdir = _version_dir(version, corpora_root)
    try:
        records = lineage_for_step(vdir, step, global_batch, dp_size)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(records, indent=2, ensure_ascii=False, default=str))
    else:
        print(format_lineage(records, show_text=show_text))


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
