"""``report.html``: a version at a glance, self-contained (opens from disk, no
server, no network), plots drawn with matplotlib and inlined as SVG.

Sections: the funnel (documents, characters and tokens after each stage, per
source and per language), drop reasons with expandable examples, what the
stages counted (``Stage.tally``: a table key x source per stage),
distributions (document length, language score, perplexity per language with
bucket cut-offs, dedup cluster sizes, the LSH S-curve), the mixture (target vs
realized), the output, the tokenizer coverage headline, run facts, and the
training-time plan. ``python -m pipeline report VERSION [--compare OTHER]``
rebuilds it, optionally with a second version side by side.

Every number shown comes from ``manifest.json`` or the version's Parquet files;
the funnel table cells carry ``data-*`` attributes so a browser test can check
them against the manifest.
"""

from __future__ import annotations

import html
import io
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.layout import REPORT, TOKENIZER, TOKENIZER_REPORT_DIR, TOKENIZER_REPORT_STEM
from pipeline.manifest import load_manifest
from stages.base import Figure

# Training-time plan defaults (override on the command line):
# - peak: 400e12 FLOP/s dense BF16 per accelerator, a round figure in the range
#   of current training accelerators (vendor specs: A100 312e12, H100 SXM
#   989e12); set your own.
# - MFU 0.40: model FLOPs utilization reported for large dense-transformer
#   training (PaLM 46.2%, Chowdhery et al. 2022, Table 3; MT-NLG ~30%);
# - overhead 1.3: our allowance for restarts after failures, evaluation and
#   checkpointing, on top of the ideal time.
# FLOPs = 6 * N * D: Kaplan et al. 2020, "Scaling Laws for Neural Language
# Models", section 2.1 (forward + backward per parameter per token).
PLAN_DEFAULTS = {"peak_flops": 400e12, "mfu": 0.40, "overhead": 1.3}
PLAN_MODEL_SIZES = (1e9, 7e9, 13e9, 70e9)
PLAN_ACCELERATORS = (8, 64, 128, 512)


def training_days(params: float, tokens: float, accelerators: int, peak_flops: float = PLAN_DEFAULTS["peak_flops"],
                  mfu: float = PLAN_DEFAULTS["mfu"], overhead: float = PLAN_DEFAULTS["overhead"]) -> dict[str, float]:
    """Days to train a dense model of ``params`` parameters on ``tokens`` tokens.

    total FLOPs = 6 * N * D (Kaplan et al. 2020); sustained FLOP/s =
    accelerators * peak_flops * mfu; ideal days = FLOPs / sustained / 86,400;
    planned days = ideal * overhead.

    Returns:
        ``flops``, ``sustained_flops``, ``ideal_days``, ``planned_days``.

    Raises:
        ValueError: a non-positive input, or mfu outside (0, 1].
    """
    for name, value in (("params", params), ("tokens", tokens), ("accelerators", accelerators),
                        ("peak_flops", peak_flops), ("overhead", overhead)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    flops = 6.0 * params * tokens
    sustained = accelerators * peak_flops * mfu
    ideal = flops / sustained / 86400.0
    return {"flops": flops, "sustained_flops": sustained, "ideal_days": ideal, "planned_days": ideal * overhead}


def run_plan(tokens: float, params: float, accelerators: int, peak_flops: float = PLAN_DEFAULTS["peak_flops"],
             mfu: float = PLAN_DEFAULTS["mfu"], overhead: float = PLAN_DEFAULTS["overhead"],
             version_tokens: int | None = None, seq_length: int | None = None,
             global_batch: int | None = None) -> dict[str, Any]:
    """The plan of one training run of ``tokens`` tokens (the run's ``D``, which
    need not be a version's own size: ``inspect --plan --tokens 1e12``).

    Args:
        tokens: tokens the run trains on (D), > 0.
        params, accelerators, peak_flops, mfu, overhead: as :func:`training_days`.
        version_tokens: the version's ``num_tokens`` (tokens of its samples,
            ``num_samples * (seq_length + 1)``); gives ``epochs`` = how many
            passes over the version the run makes.
        seq_length, global_batch: give ``steps`` = ``ceil(tokens /
            (global_batch * seq_length))``: a step trains ``global_batch``
            samples of ``seq_length`` model inputs each (the extra token of a
            ``seq_length + 1`` row is a label only).

    Returns:
        ``tokens``, ``params``, ``accelerators``, ``flops``,
        ``sustained_flops``, ``ideal_days``, ``planned_days``, and when given
        their inputs ``epochs`` (float) and ``steps`` (int).

    Raises:
        ValueError: as :func:`training_days`; a non-positive
            ``version_tokens``, ``seq_length`` or ``global_batch``.
    """
    out: dict[str, Any] = {"tokens": float(tokens), "params": float(params), "accelerators": int(accelerators),
                           **training_days(params, tokens, accelerators, peak_flops, mfu, overhead)}
    if version_tokens is not None:
        if not version_tokens > 0:
            raise ValueError(f"version_tokens must be > 0, got {version_tokens}")
        out["epochs"] = tokens / version_tokens
    if global_batch is not None and seq_length is not None:
        if not (global_batch > 0 and seq_length > 0):
            raise ValueError(f"global_batch and seq_length must be > 0, got {global_batch}, {seq_length}")
        out["steps"] = math.ceil(tokens / (global_batch * seq_length))
    return out


def coverage_sections(m: dict[str, Any]) -> list[str]:
    """Per stage whose fit facts have ``coverage`` (docs/architecture.md): a
    table of the languages it measured and of those it kept unmeasured, with
    documents, characters and why; nothing for other stages."""
    parts = []
    for name in m["stage_order"]:
        cov = (m["stages"][name].get("fit") or {}).get("coverage")
        if not isinstance(cov, dict):
            continue
        unit = cov.get("unit") or "model"
        total = max(cov.get("documents") or 0, 1)
        rows = [[_e(lang), "yes", _num(c["docs"]), f"{c['docs'] / total:.1%}", _num(c["chars"]), ""]
                for lang, c in sorted((cov.get("scored") or {}).items(), key=lambda kv: -kv[1]["docs"])]
        rows += [[_e(lang), "<b>no</b>", _num(c["docs"]), f"{c['docs'] / total:.1%}", _num(c["chars"]), _e(c["why"])]
                 for lang, c in sorted((cov.get("unscored") or {}).items(), key=lambda kv: -kv[1]["docs"])]
        parts.append(f"<h3 id='coverage-{_e(name)}'>{_e(name)}: languages with and without a {_e(unit)}</h3>")
        parts.append(_table(["language", f"has a {_e(unit)}", "documents", "share", "chars", "why not"], rows))
    return parts


#: Children of one tally key (``parent/child``) shown, by total; the rest are
#: counted in one row. Our choice: a decontamination report names at most this
#: many benchmark items per benchmark before it stops being read.
TALLY_CHILDREN_SHOWN = 30


def tally_rows(per_source: dict[str, dict[str, int]], children_shown: int = TALLY_CHILDREN_SHOWN
               ) -> list[tuple[str, dict[str, int], int, str]]:
    """The rows of a stage's tally table, from ``{source: {key: count}}``.

    Returns:
        ``(key, {source: count}, total, kind)`` per row, by parent (a key
        without ``/``, or the part of a key before its first ``/``), parents
        sorted: the parent's own row (``kind`` ``"key"``) when it is a key,
        then its children (``"child"``): the ``children_shown`` with the
        largest total (ties by key), then one ``"more"`` row, key
        ``"<parent>/… N more"``, summing the others.
    """
    totals: dict[str, int] = {}
    for counts in per_source.values():
        for key, n in counts.items():
            totals[key] = totals.get(key, 0) + n
    rows = []

    def row(key: str, kind: str, keys: list[str] | None = None) -> tuple[str, dict[str, int], int, str]:
        keys = keys or [key]
        by_source = {src: sum(counts.get(k, 0) for k in keys) for src, counts in per_source.items()}
        return key, by_source, sum(totals[k] for k in keys), kind

    children: dict[str, list[str]] = {}
    for key in totals:
        if "/" in key:
            children.setdefault(key.split("/", 1)[0], []).append(key)
    for parent in sorted({k for k in totals if "/" not in k} | set(children)):
        if parent in totals:
            rows.append(row(parent, "key"))
        ranked = sorted(children.get(parent, ()), key=lambda k: (-totals[k], k))
        rows += [row(k, "child") for k in ranked[:children_shown]]
        rest = ranked[children_shown:]
        if rest:
            rows.append(row(f"{parent}/… {len(rest):,} more", "more", rest))
    return rows


def tally_sections(m: dict[str, Any]) -> list[str]:
    """Per stage whose manifest entry has ``totals.tally`` (a stage with
    ``Stage.tally_columns``): a heading, what the tallied columns mean
    (``stages.<name>.tally_columns``), and a table key x source with a total
    column (:func:`tally_rows`); each count cell carries ``data-tally-stage``,
    ``data-key`` and ``data-source`` (``total`` for the total) so a browser
    test can check it against the manifest. Nothing when no stage tallies."""
    parts = []
    for name in m["stage_order"]:
        entry = m["stages"][name]
        if "tally" not in (entry.get("totals") or {}):
            continue
        per_source = {src: c.get("tally") or {} for src, c in sorted(entry["per_source"].items())}
        sources = list(per_source)
        parts.append(f"<h3 id='tally-{_e(name)}'>{_e(name)}</h3>")
        meaning = entry.get("tally_columns") or {}
        if meaning:
            parts.append("<p>counted over " + "; ".join(f"<code>{_e(c)}</code>: {_e(doc)}" for c, doc in meaning.items())
                         + " (every document that entered the stage, kept and dropped)</p>")
        rows = []
        for key, by_source, total, kind in tally_rows(per_source):
            attr = f' data-tally-stage="{_e(name)}" data-key="{_e(key)}"' if kind != "more" else ""
            label = f"<span class='est'>{_e(key)}</span>" if kind == "more" else (
                f"&nbsp;&nbsp;{_e(key)}" if kind == "child" else f"<b>{_e(key)}</b>")
            rows.append([label] + [f'<span{attr} data-source="{_e(src)}">{_num(by_source[src])}</span>'
                                   if attr else _num(by_source[src]) for src in sources]
                        + [f'<span{attr} data-source="total">{_num(total)}</span>' if attr else _num(total)])
        if not rows:
            parts.append("<p>nothing counted</p>")
            continue
        parts.append(_table(["key"] + sources + ["total"], rows))
    if parts:
        parts.insert(0, "<h2 id='tallies'>Stage tallies</h2>")
    return parts


def plan_table(tokens: float, peak_flops: float = PLAN_DEFAULTS["peak_flops"], mfu: float = PLAN_DEFAULTS["mfu"],
               overhead: float = PLAN_DEFAULTS["overhead"],
               model_sizes: Sequence[float] = PLAN_MODEL_SIZES) -> list[list[dict[str, Any]]]:
    """The training-time plan table: one row per model size (``model_sizes``,
    default :data:`PLAN_MODEL_SIZES`, in that order), one cell per accelerator
    count of :data:`PLAN_ACCELERATORS`; each cell ``{"params",
    "accelerators", **training_days(...)}``. The one table the report page
    and ``inspect`` print."""
    return [[{"params": n, "accelerators": a, **training_days(n, tokens, a, peak_flops, mfu, overhead)}
             for a in PLAN_ACCELERATORS] for n in model_sizes]


# --------------------------------------------------------------------------- data

def funnel(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Documents and characters after ingest and after each stage, with tokens
    where measured (tokenize onwards) or estimated from the kept documents'
    characters per token (marked ``tokens_estimated``)."""
    rows = []
    ing = manifest["ingest"]["per_source"]
    rows.append({"stage": "ingest", "documents": sum(s["documents_in"] for s in ing.values()),
                 "chars": sum(s["chars_in"] for s in ing.values())})
    for name in manifest["stage_order"]:
        tot = manifest["stages"][name]["totals"]
        rows.append({"stage": name, "documents": tot["kept"], "chars": tot["kept_chars"]})
    final_chars = rows[-1]["chars"] or 1
    sampled = manifest.get("packing", {}).get("tokens_sampled") or manifest["num_tokens"]
    mix = manifest.get("mixture", {}).get("per_source", {})
    natural_tokens = sum(m.get("available_tokens", 0) for m in mix.values()) or sampled
    chars_per_token = final_chars / max(natural_tokens, 1)
    seen_tokenize = False
    for row in rows:
        seen_tokenize |= row["stage"] == "tokenize"
        if row["stage"] == "mixture":
            row["tokens"], row["tokens_estimated"] = sampled, False
        elif seen_tokenize:
            row["tokens"], row["tokens_estimated"] = natural_tokens, False
        else:
            row["tokens"], row["tokens_estimated"] = round(row["chars"] / chars_per_token), True
    rows.append({"stage": "packed (document copies)", "documents": manifest["packing"]["document_copies"]
                 if "packing" in manifest else None, "chars": None, "tokens": manifest["num_tokens"],
                 "tokens_estimated": False})
    return rows


# Fixed histogram bins, so a version of any size is summarised one part at a
# time: log10 characters 0..8, language score 0..1, and the default bins of a stage's
# column histogram (log10 of the value 0..6, e.g. perplexity; else 0..1).
LENGTH_BINS = np.linspace(0.0, 8.0, 41)
SCORE_BINS = np.linspace(0.0, 1.0, 41)
LOG10_BINS = np.linspace(0.0, 6.0, 31)


def version_stats(version_dir: Path, manifest: dict[str, Any], example_limit: int = 3,
                  example_chars: int = 300) -> dict[str, Any]:
    """Everything the page shows from the version's tables, read one part at
    a time (memory: one part's columns, the histograms, a few examples).

    Returns:
        ``{"final_langs": Counter, "dropped_langs": {stage: Counter},
        "length_hist", "score_hist" (int64 counts over LENGTH_BINS /
        SCORE_BINS), "column_hists": {(column, group_by, log10, bins): {group:
        counts}} for every ``column_histogram`` figure the stages declared,
        "examples": {stage: {reason: [{"id", "text"}]}} (the ``example_limit``
        smallest ids per reason)}``.
    """
    from pipeline import layout

    stats: dict[str, Any] = {"final_langs": Counter(), "dropped_langs": {},
                             "length_hist": np.zeros(len(LENGTH_BINS) - 1, np.int64),
                             "score_hist": np.zeros(len(SCORE_BINS) - 1, np.int64),
                             "column_hists": {}, "examples": {}}
    wanted = {_hist_key(f): f for f in stage_figures(manifest) if f.kind == "column_histogram" and f.column}
    for path in layout.table_parts(version_dir, layout.DOCUMENTS):
        names = pq.read_schema(path).names
        extra = {c for f in wanted.values() for c in (f.column, f.group_by) if c}
        cols = [c for c in dict.fromkeys(("chars", "langid_lang", "langid_score", *sorted(extra))) if c in names]
        t = pq.read_table(path, columns=cols)
        stats["final_langs"].update(_langs(t))
        if "chars" in cols:
            chars = np.maximum(t["chars"].to_numpy(zero_copy_only=False).astype(np.float64), 1.0)
            stats["length_hist"] += np.histogram(np.log10(chars), LENGTH_BINS)[0]
        if "langid_score" in cols:
            score = t["langid_score"].drop_null().to_numpy(zero_copy_only=False)
            stats["score_hist"] += np.histogram(score, SCORE_BINS)[0]
        for key, fig in wanted.items():
            if fig.column in cols and (fig.group_by is None or fig.group_by in cols):
                _add_column_hist(stats["column_hists"].setdefault(key, {}), t, fig)
    for stage in manifest["stage_order"]:
        langs: Counter = Counter()
        best: dict[str, list[tuple[str, str]]] = {}
        for path in layout.table_parts(version_dir, layout.DECISIONS, stage):
            names = pq.read_schema(path).names
            t = pq.read_table(path, columns=[c for c in ("id", "reason", "langid_lang") if c in names])
            langs.update(_langs(t))
            for reason in set(t["reason"].to_pylist()):
                sub = t.filter(pc.equal(t["reason"], reason))
                ids = sorted(sub["id"].to_pylist())[:example_limit]
                best[reason] = sorted(best.get(reason, []) + [(i, path) for i in ids])[:example_limit]
        stats["dropped_langs"][stage] = langs
        chosen: dict[str, list[dict[str, str]]] = {}
        for reason in sorted(best):
            rows = []
            for doc_id, path in best[reason]:
                row = pq.read_table(path, columns=["id", "text"], filters=[("id", "=", doc_id)]).to_pylist()[0]
                rows.append({"id": row["id"], "text": (row["text"] or "")[:example_chars]})
            chosen[reason] = rows
        stats["examples"][stage] = chosen
    return stats


def stage_figures(manifest: dict[str, Any]) -> list[Figure]:
    """Every figure the stages of ``manifest`` declared
    (``stages.<name>.figures``, :class:`stages.base.Figure`), in stage order."""
    return [Figure.from_json(f) for name in manifest.get("stage_order", [])
            for f in (manifest["stages"][name].get("figures") or [])]


def _bins(fig: Figure) -> np.ndarray:
    if fig.bins:
        return np.asarray(fig.bins, np.float64)
    return LOG10_BINS if fig.log10 else SCORE_BINS


def _hist_key(fig: Figure) -> tuple:
    return (fig.column, fig.group_by, fig.log10, tuple(_bins(fig)))


def _add_column_hist(hists: dict[Any, np.ndarray], t, fig: Figure) -> None:
    """Add the values of ``fig.column`` in table ``t`` (one documents part) to
    ``hists`` (group -> counts over the figure's bins); nulls are skipped, and
    with ``log10`` values <= 0 too; values outside the bins are clipped in."""
    edges = _bins(fig)
    col = t[fig.column]
    valid = pc.is_valid(col)
    if fig.log10:
        valid = pc.and_(valid, pc.greater(col, 0))
    sub_t = t.filter(valid)
    groups = sub_t[fig.group_by].to_pylist() if fig.group_by else [""] * sub_t.num_rows
    values = sub_t[fig.column].to_numpy(zero_copy_only=False).astype(np.float64)
    if fig.log10:
        values = np.log10(values)
    values = np.clip(values, edges[0], edges[-1])
    for group in set(groups):
        mask = np.fromiter((g == group for g in groups), bool, count=len(groups))
        hist = hists.setdefault(group, np.zeros(len(edges) - 1, np.int64))
        hist += np.histogram(values[mask], edges)[0]


def per_language_funnel(stats: dict[str, Any], manifest: dict[str, Any]) -> dict[str, list[int]]:
    """Documents per language remaining after each stage (from the kept
    documents and each later stage's dropped documents; :func:`version_stats`)."""
    stages = manifest["stage_order"]
    final = stats["final_langs"]
    dropped = stats["dropped_langs"]
    langs = sorted(set(final) | {lang for c in dropped.values() for lang in c})
    out: dict[str, list[int]] = {}
    for lang in langs:
        counts = []
        for i in range(len(stages)):
            counts.append(final[lang] + sum(dropped[s][lang] for s in stages[i + 1:]))
        out[lang] = [final[lang] + sum(dropped[s][lang] for s in stages)] + counts
    return out


def _langs(table) -> list[str]:
    if "langid_lang" not in table.column_names:
        return ["(before langid)"] * table.num_rows
    return [v or "unknown" for v in table["langid_lang"].to_pylist()]


# --------------------------------------------------------------------------- plots

def _svg(fig) -> str:
    buf = io.StringIO()
    # No date (byte-identical pages) and no metadata links (nothing points off the page).
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Date": None, "Format": None, "Type": None, "Creator": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# Applied with matplotlib.rc_context around rendering only, never globally.
RC = {"svg.fonttype": "none", "font.size": 9, "figure.dpi": 96, "svg.hashsalt": "mindcorpus"}


def plot_funnel(versions: list[tuple[str, list[dict[str, Any]]]]) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for name, rows in versions:
        stages = [r["stage"] for r in rows if r["documents"] is not None and r["stage"] != "packed"]
        docs = [r["documents"] for r in rows if r["documents"] is not None and r["stage"] != "packed"]
        chars = [r["chars"] for r in rows if r["chars"] is not None]
        axes[0].plot(stages, docs, marker="o", label=name)
        axes[1].plot(stages[:len(chars)], [c / 1e6 for c in chars], marker="o", label=name)
    axes[0].set_title("documents after each stage")
    axes[1].set_title("characters after each stage (millions)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _svg(fig)


def plot_histograms(versions: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    """Length and language score histograms of each (name, stats, manifest)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for name, stats, manifest in versions:
        for ax, counts, edges in ((axes[0], stats["length_hist"], LENGTH_BINS),
                                  (axes[1], stats["score_hist"], SCORE_BINS)):
            if counts.sum():
                ax.hist(edges[:-1], bins=edges, weights=counts, alpha=0.5, label=name)
    axes[0].set_title("document length (log10 characters)")
    axes[1].set_title("language score (kept documents)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        ax.grid(alpha=0.3)
    return _svg(fig)


def plot_figure(fig_spec: Figure, stats: dict[str, Any]) -> str | None:
    """Draw one stage-declared :class:`~stages.base.Figure` as SVG (None when
    it has nothing to show: an empty histogram, no points)."""
    plt = _plt()
    if fig_spec.kind == "column_histogram":
        by_group = {g: h for g, h in stats["column_hists"].get(_hist_key(fig_spec), {}).items() if h.sum()}
        if not by_group:
            return None
        edges = _bins(fig_spec)
        groups = sorted(by_group, key=str)
        fig, axes = plt.subplots(1, len(groups), figsize=(2.6 * len(groups), 2.6), squeeze=False)
        for ax, group in zip(axes[0], groups):
            ax.hist(edges[:-1], bins=edges, weights=by_group[group], color="#4878a8")
            key = "" if group is None else group
            for style, marks in (("--", fig_spec.marks), ("-", fig_spec.strong_marks)):
                for value in marks.get(key, []):
                    if fig_spec.log10 and value <= 0:
                        continue
                    ax.axvline(math.log10(value) if fig_spec.log10 else value,
                               color="#c44" if style == "--" else "black", linestyle=style)
            ax.set_title(f"{group} (n={int(by_group[group].sum())})")
            ax.set_xlabel(fig_spec.x_label)
        fig.suptitle(fig_spec.title, y=1.08)
        fig.tight_layout()
        return _svg(fig)
    if not fig_spec.x:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 3))
    if fig_spec.kind == "bars":
        ax.bar([str(v) for v in fig_spec.x], list(fig_spec.y), color="#4878a8")
    else:
        ax.plot(list(fig_spec.x), list(fig_spec.y))
    for style, marks in (("--", fig_spec.marks), ("-", fig_spec.strong_marks)):
        for value in marks.get("", []):
            ax.axvline(value, color="#c44" if style == "--" else "black", linestyle=style)
    ax.set_xlabel(fig_spec.x_label)
    ax.set_ylabel(fig_spec.y_label)
    ax.set_title(fig_spec.title)
    ax.grid(alpha=0.3)
    return _svg(fig)


def phase_table(manifest: dict[str, Any]) -> str:
    """The "Mixture phases" table of a staged mixture (``manifest["phases"]``):
    per phase and source, the target share (the phase's weights after
    ``max_epochs`` caps), the realized share of the phase's packed tokens and
    the difference in percentage points; per phase its rows and budget."""
    facts = {p["name"]: p for p in manifest.get("mixture", {}).get("phases", [])}
    rows = []
    for phase in manifest["phases"]:
        fact = facts.get(phase["name"], {})
        for src, packed in sorted(phase["packed_per_source"].items()):
            target = fact.get("per_source", {}).get(src, {}).get("target_share")
            rows.append([_e(phase["name"]), _e(src), _num(phase["first_sample"]), _num(phase["num_samples"]),
                         _num(phase.get("token_budget")), _num(target), _num(packed["tokens"]),
                         _num(packed["share"]), _num(packed["share_error_pp"])])
    return ("<h3>Mixture phases</h3><p>Each phase is packed and shuffled on its own and written after the "
            "previous one; the loader reads them in order and starts phase <i>k</i> at step "
            "<code>sum(num_samples_j // global_batch, j &lt; k)</code> (docs/stages/mixture_packing.md).</p>"
            + _table(["phase", "source", "first sample", "samples", "token budget", "target share",
                      "realized tokens", "realized share", "error (pp)"], rows, left=2))


def plot_mixture(versions: list[tuple[str, dict[str, Any]]]) -> str | None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    width = 0.8 / (len(versions) + 1)
    sources = sorted({s for _, m in versions for s in m.get("mixture", {}).get("per_source", {})})
    if not sources:
        return None
    first = versions[0][1]["mixture"]["per_source"]
    ax.bar([i for i in range(len(sources))], [first.get(s, {}).get("target_share", 0) for s in sources],
           width, label="target", color="#bbb")
    for k, (name, m) in enumerate(versions, start=1):
        per = m["mixture"]["per_source"]
        ax.bar([i + k * width for i in range(len(sources))], [per.get(s, {}).get("realized_share", 0)
                                                              for s in sources], width, label=f"{name} realized")
    ax.set_xticks([i + width * len(versions) / 2 for i in range(len(sources))], sources)
    ax.set_ylabel("share of tokens")
    ax.legend()
    return _svg(fig)


# --------------------------------------------------------------------------- page

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC",sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;max-width:100%}td{overflow-wrap:anywhere}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}details{margin:.2em 0 .2em 1em}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.4em;font-size:.85em;max-height:12em;overflow:auto}
.est{color:#888}.warn{color:#a40}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return f"{value:,}"


def _table(headers: list[str], rows: list[list[Any]], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(version_dir: Path, compare_dir: Path | None = None, model_params: float = 7e9,
           accelerators: int = 128, peak_flops: float = PLAN_DEFAULTS["peak_flops"],
           mfu: float = PLAN_DEFAULTS["mfu"], overhead: float = PLAN_DEFAULTS["overhead"]) -> str:
    """The report page as one HTML string (see module doc).

    Raises:
        FileNotFoundError: a directory is not a published version.
    """
    vdirs = [Path(version_dir)] + ([Path(compare_dir)] if compare_dir else [])
    manifests = [load_manifest(v) for v in vdirs]
    names = [m["version"] for m in manifests]
    m = manifests[0]
    funnels = [funnel(x) for x in manifests]
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>corpus {_e(' vs '.join(names))}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>corpus {_e(' vs '.join(names))}</h1>"]

    # funnel
    parts.append("<h2 id='funnel'>Funnel</h2>")
    headers = ["stage"]
    for name in names:
        headers += [f"{name} documents", f"{name} characters", f"{name} tokens"]
    rows = []
    # rows by stage name: a version compared with one that ran other stages
    # shows "-" for a stage it did not run, never a neighbour's numbers
    by_stage = [{r["stage"]: r for r in fun} for fun in funnels]
    for row in funnels[0] + [r for fun in funnels[1:] for r in fun
                             if r["stage"] not in by_stage[0]]:
        cells = [_e(row["stage"])]
        for k, fun in enumerate(funnels):
            r = by_stage[k].get(row["stage"], {"documents": None, "chars": None, "tokens": None})
            attr = f' data-version="{_e(names[k])}" data-stage="{_e(row["stage"])}"'
            est = ' class="est" title="estimated from characters per token"' if r.get("tokens_estimated") else ""
            cells += [f'<span{attr} data-field="documents">{_num(r["documents"])}</span>',
                      f'<span{attr} data-field="chars">{_num(r["chars"])}</span>',
                      f'<span{est}{attr} data-field="tokens">{_num(r["tokens"])}</span>']
        rows.append(cells)
    parts.append(_table(headers, rows))
    parts.append(plot_funnel(list(zip(names, funnels))))
    parts.append("<h3>per source (documents after each stage)</h3>")
    stages = ["ingest"] + m["stage_order"]
    src_rows = []
    for src, ing in sorted(m["ingest"]["per_source"].items()):
        counts = [ing["documents_in"]] + [m["stages"][s]["per_source"].get(src, {}).get("kept", 0) for s in m["stage_order"]]
        src_rows.append([_e(src)] + [_num(c) for c in counts])
    parts.append(_table(["source"] + stages, src_rows))
    parts.append("<h3>per language (documents after each stage)</h3>")
    stats = [version_stats(vdir, man) for vdir, man in zip(vdirs, manifests)]
    lang_rows = [[_e(lang)] + [_num(c) for c in counts]
                 for lang, counts in per_language_funnel(stats[0], m).items()]
    parts.append(_table(["language"] + stages, lang_rows))

    # what the stages said (FitResult.warnings)
    warned = [(name, line) for name in m["stage_order"] for line in m["stages"][name].get("warnings") or []]
    warned += [("tokenizer report", line) for line in (m.get("tokenizer_report") or {}).get("warnings") or []]
    warned += [("output", line) for line in m.get("output_warnings") or []]
    if warned:
        parts.append(f"<h2 id='warnings'>Warnings ({len(warned)})</h2>")
        parts.append("<ul>" + "".join(f"<li><b>{_e(name)}</b>: {_e(line)}</li>" for name, line in warned) + "</ul>")
    parts += coverage_sections(m)

    # drop reasons
    parts.append("<h2 id='drops'>Drop reasons</h2>")
    q = m.get("quarantine", {})
    if q:
        parts.append("<p>quarantined at ingest: " + ", ".join(f"{_e(k)} {v:,}" for k, v in q.items()) + "</p>")
    failed = m["ingest"].get("failed_files", [])
    if failed:
        parts.append(f"<h3 id='failed-files'>input files not read whole ({len(failed):,})</h3>")
        parts.append("<p>Each is one quarantine entry; what the file holds after the failure is not "
                     "counted in documents in.</p>")
        parts.append(_table(["source", "file", "reason", "records read", "detail"],
                            [[_e(f["source"]), _e(f["file"]), _e(f["reason"]), _num(f["records_read"]),
                              _e(f["detail"])] for f in failed], left=3))
    nul = m["ingest"].get("nul_removed", {})
    if nul.get("documents"):
        parts.append(f"<p>NUL characters removed at ingest: {nul['characters']:,} in {nul['documents']:,} "
                     "document(s) (kept).</p>")
    for stage in m["stage_order"]:
        dropped = m["stages"][stage]["totals"]["dropped"]
        if not dropped:
            continue
        n_in = m["stages"][stage]["totals"]["documents_in"]
        ex = stats[0]["examples"].get(stage, {})
        parts.append(f"<h3>{_e(stage)}</h3>")
        for reason, count in sorted(dropped.items(), key=lambda kv: -kv[1]):
            items = "".join(f"<p><b>{_e(e['id'])}</b></p><pre>{_e(e['text'])}</pre>" for e in ex.get(reason, []))
            parts.append(f"<details><summary>{_e(reason)}: {count:,} ({count / max(n_in, 1):.1%} of "
                         f"{n_in:,})</summary>{items}</details>")

    # what the stages counted (Stage.tally), e.g. edits per type, benchmark hits per item
    parts += tally_sections(m)

    # distributions
    parts.append("<h2 id='distributions'>Distributions</h2>")
    parts.append(plot_histograms(list(zip(names, stats, manifests))))
    for fig_spec in stage_figures(m):
        svg = plot_figure(fig_spec, stats[0])
        if svg:
            parts.append(svg)

    # mixture
    parts.append("<h2 id='mixture'>Mixture</h2>")
    mix_rows = []
    for src, x in sorted(m["mixture"].get("per_source", {}).items()):
        mix_rows.append([_e(src), _num(x.get("available_tokens")), _num(x.get("target_share")),
                         _num(x.get("realized_tokens")), _num(x.get("realized_share")), _num(x.get("epochs"))])
    parts.append(_table(["source", "available tokens", "target share", "realized tokens", "realized share",
                         "epochs"], mix_rows))
    mix = plot_mixture(list(zip(names, manifests)))
    if mix:
        parts.append(mix)
    if m.get("phases"):
        parts.append(phase_table(m))

    # output
    parts.append("<h2 id='output'>Output</h2>")
    out_rows = []
    for x in manifests:
        shard_bytes = sum(s.get("bytes", 0) for s in x["shards"])
        pk = x.get("packing", {})
        out_rows.append([_e(x["version"]), _num(x["num_samples"]), _num(x["seq_length"] + 1), _num(x["num_tokens"]),
                         _num(len(x["shards"])), _num(shard_bytes), _num(pk.get("tokens_packed")),
                         _num(pk.get("padding_tokens", 0)), _num(pk.get("tokens_dropped_tail"))])
    parts.append(_table(["version", "samples", "tokens per sample", "tokens", "shards", "bytes on disk",
                         "tokens from documents", "padding tokens", "tail tokens dropped"], out_rows))

    # tokenizer headline
    parts.append("<h2 id='tokenizer'>Tokenizer</h2>")
    tok = m.get("tokenizer", {})
    parts.append(f"<p>vocabulary {_num(tok.get('vocab_size'))}, {TOKENIZER} sha256 <code>{_e(tok.get('sha256'))}"
                 "</code></p>")
    rep = m.get("tokenizer_report")
    if isinstance(rep, dict):
        headline = rep.get("headline", {})
        metrics = sorted({k for v in headline.values() for k in v})
        parts.append(f"<p>coverage on the held-out split ({_num(rep.get('heldout_documents'))} documents, "
                     "never used for training):</p>")
        parts.append(_table(["language"] + metrics,
                            [[_e(lang)] + [_num(v.get(k)) for k in metrics] for lang, v in sorted(headline.items())]))
        compare = rep.get("comparison") or []
        if compare:
            parts.append("<p>against the reference tokenizers (characters per token): "
                         + "; ".join(_e(line) for line in compare) + "</p>")
        for w in rep.get("warnings", []) or []:
            parts.append(f"<p class='warn'>warning: {_e(w)}</p>")
        stem = rep.get("dir", TOKENIZER_REPORT_DIR)
        parts.append(f"<p><a href='{_e(stem)}/{TOKENIZER_REPORT_STEM}.html'>full tokenizer coverage report</a></p>")

    # training-time plan
    parts.append("<h2 id='plan'>Training-time plan</h2>")
    d = m["num_tokens"]
    one = training_days(model_params, d, accelerators, peak_flops, mfu, overhead)
    parts.append(f"<p>D = {d:,} tokens; N = {model_params:.3g} parameters; {accelerators} accelerators at "
                 f"{peak_flops:.3g} FLOP/s peak, MFU {mfu}: total 6·N·D = {one['flops']:.3g} FLOPs, ideal "
                 f"<span id='plan-ideal'>{one['ideal_days']:.4g}</span> days, planned (x{overhead}) "
                 f"<span id='plan-planned'>{one['planned_days']:.4g}</span> days.</p>")
    plan_rows = [[f"{row[0]['params'] / 1e9:g}B"] + [f"{cell['planned_days']:.3g}" for cell in row]
                 for row in plan_table(d, peak_flops, mfu, overhead)]
    parts.append(_table(["planned days"] + [f"{a} accelerators" for a in PLAN_ACCELERATORS], plan_rows))
    parts.append("<p>Defaults and their sources are in <code>pipeline/report.py</code> (PLAN_DEFAULTS).</p>")

    # run facts
    parts.append("<h2 id='run'>Run facts</h2>")
    run_rows = []
    for x in manifests:
        run = x.get("run", {})
        run_rows.append([_e(x["version"]), f"<code>{_e(x.get('code_commit'))}</code>",
                         f"<code>{_e(x.get('config_hash', '')[:16])}</code>", _num(x.get("seed")),
                         _e(run.get("created_at")), _num(run.get("wall_seconds")),
                         "<br>".join(f"{_e(k)}: {v:,.1f}" for k, v in run.get("stage_seconds", {}).items()),
                         "<br>".join([f"{_e(k)}: {v:,.0f}" for k, v in run.get("peak_rss", {}).items()
                                      if isinstance(v, (int, float))]
                                     + [f"task {_e(k)}: {v:,.0f}" for k, v in
                                        (run.get("peak_rss", {}).get("largest_task_mb") or {}).items()]),
                         _e(run.get("machine"))])
    parts.append(_table(["version", "code commit", "config hash", "seed", "created", "wall s", "seconds per stage",
                         "peak RSS (MB)", "machine"], run_rows))
    parts.append("<script>document.body.setAttribute('data-ready','1');</script></body></html>")
    return "\n".join(parts)


def write_report(version_dir: Path, compare_dir: Path | None = None, out: Path | None = None, **plan) -> Path:
    """Render :func:`render` to ``out`` (default ``<version_dir>/report.html``)."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out) if out else Path(version_dir) / REPORT
    with matplotlib.rc_context(RC):
        page = render(version_dir, compare_dir, **plan)
    out.write_text(page, encoding="utf-8")
    return out
