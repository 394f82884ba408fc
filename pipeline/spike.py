"""Loss spikes in a training log, joined to what those steps trained on
(``python -m pipeline spike VERSION --log train.log --window K
--global-batch B``).

Logs read (:func:`read_log`):

* mindformers' text log (``MFLossMonitor.print_output_info``, mindformers
  1.8 ``core/callback/callback.py``)::

    { Epoch:[  1/  2], step:[   38/  100], loss: 6.123456, per_step_time: 912ms,
      lr: 1e-04, overflow cond: False, loss_scale: 1.0, global_norm: [1.234], ...

  (``loss:[6.123456/6.200000]``, the step's loss and the running mean, when
  not in sink mode; ``global_norm`` may be printed as ``[x]``, ``x`` or
  ``None``). ``step`` is **1-based within the epoch** (``cur_step_num =
  (cur_step_num + initial_step - 1) % steps_per_epoch + 1``), so the line's
  global 0-based step, the one ``lineage --step`` takes, is
  ``(epoch - 1) * steps_per_epoch + step - 1``; a resumed run's ``initial_step``
  is already in the printed step.
* JSONL, one object per line with ``step``, ``loss`` and optionally
  ``grad_norm``: ``step`` is taken as the 0-based global step (the loader's
  and lineage's numbering) unless ``step_base=1`` is given.

Spike rule (:func:`find_spikes`): a Hampel filter (Hampel 1974, "The
influence curve and its role in robust estimation"; as an outlier rule,
Pearson 2002, "Outliers in process modeling and identification") applied to
the trailing window only: step ``t`` is a spike when ``x_t > median(W) + k *
1.4826 * MAD(W)`` with ``W`` the (up to) ``window`` logged steps before it (at
least ``min_history`` of them), ``MAD`` the median absolute deviation
(``1.4826 * MAD`` estimates the standard deviation of normal data) and the
default ``k = 3``, Hampel's usual cut. Trailing rather than centred, so a step
is judged only by what came before it, as a monitor would. ``MAD`` is floored
at ``mad_floor * median`` (default 0.1 %): a loss that is flat to the printed
digits would otherwise flag any rounding change (our choice). Only upward
jumps count.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

# MAD -> standard deviation for normal data (1 / Phi^-1(3/4)).
MAD_SCALE = 1.4826
# Hampel's usual cut-off: 3 scaled MADs.
DEFAULT_K = 3.0
DEFAULT_MIN_HISTORY = 5
# MAD floor as a fraction of the window median (our choice, see module docstring).
DEFAULT_MAD_FLOOR = 1e-3

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
MINDFORMERS_LINE = re.compile(
    r"\{ Epoch:\[\s*(?P<epoch>\d+)/\s*(?P<epochs>\d+)\], step:\[\s*(?P<step>\d+)/\s*(?P<steps>\d+)\], "
    r"loss:\s*\[?(?P<loss>" + _NUMBER + r")"
    r"(?:.*?global_norm: \[?(?P<norm>" + _NUMBER + r"|None))?")


def read_log(path: str | Path, step_base: int | None = None) -> list[dict[str, Any]]:
    """``[{"step": 0-based global step, "loss": float, "grad_norm": float or
    None, "line": line number}]`` from a mindformers text log or a JSONL log
    (chosen per line: a line starting with ``{"`` is JSON), sorted by step; a
    step logged twice keeps its last entry (a resumed run logs again from the
    resume step).

    Args:
        step_base: the first step's number in the file: mindformers' lines
            are 1-based (default 1), JSONL 0-based (default 0).

    Raises:
        ValueError: no line of the file is a loss line (the message says
            which formats are read).
    """
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            stripped = line.strip()
            if stripped.startswith('{"'):
                rec = json.loads(stripped)
                if "step" not in rec or "loss" not in rec:
                    continue
                step = int(rec["step"]) - (0 if step_base is None else step_base)
                norm = rec.get("grad_norm", rec.get("global_norm"))
                by_step[step] = {"step": step, "loss": float(rec["loss"]),
                                 "grad_norm": None if norm is None else float(norm), "line": number}
                continue
            match = MINDFORMERS_LINE.search(line)
            if match is None:
                continue
            base = 1 if step_base is None else step_base
            step = (int(match["epoch"]) - 1) * int(match["steps"]) + int(match["step"]) - base
            norm = match["norm"]
            by_step[step] = {"step": step, "loss": float(match["loss"]),
                             "grad_norm": None if norm in (None, "None") else float(norm), "line": number}
    if not by_step:
        raise ValueError(f"{path}: no loss line (read: mindformers' '{{ Epoch:[e/E], step:[s/S], loss: ...' lines "
                         "and JSONL objects with step and loss)")
    return [by_step[s] for s in sorted(by_step)]


def find_spikes(entries: list[dict[str, Any]], window: int, metric: str = "loss", k: float = DEFAULT_K,
                min_history: int = DEFAULT_MIN_HISTORY, mad_floor: float = DEFAULT_MAD_FLOOR
                ) -> list[dict[str, Any]]:
    """The spike steps of ``entries`` (:func:`read_log`) by the trailing
    Hampel rule of the module docstring, in step order.

    Each: ``step``, ``value`` (the metric), ``median``, ``mad`` (scaled,
    floored), ``limit`` (median + k * mad) and ``score`` ((value - median) /
    mad). Entries whose metric is None or not finite are skipped (a NaN loss
    is its own alarm, not a spike of this rule).

    Raises:
        ValueError: ``window`` < ``min_history`` or ``min_history`` < 2,
            ``k`` <= 0, ``metric`` not ``loss``/``grad_norm``.
    """
    if metric not in ("loss", "grad_norm"):
        raise ValueError(f"metric must be loss or grad_norm, got {metric!r}")
    if min_history < 2 or window < min_history:
        raise ValueError(f"window ({window}) must be >= min_history ({min_history}) >= 2")
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k}")
    points = [(e["step"], e[metric]) for e in entries if e.get(metric) is not None and np.isfinite(e[metric])]
    # A NaN or infinite value is the worst spike there is: always reported,
    # with score inf and no statistics (the rule above needs finite values).
    spikes = [{"step": e["step"], "value": float(e[metric]), "median": None, "mad": None, "limit": None,
               "score": float("inf"), "non_finite": True}
              for e in entries if e.get(metric) is not None and not np.isfinite(e[metric])]
    for i, (step, value) in enumerate(points):
        history = np.array([v for _, v in points[max(0, i - window):i]])
        if len(history) < min_history:
            continue
        median = float(np.median(history))
        mad = max(MAD_SCALE * float(np.median(np.abs(history - median))), mad_floor * abs(median), 1e-12)
        limit = median + k * mad
        if value > limit:
            spikes.append({"step": step, "value": value, "median": median, "mad": mad, "limit": limit,
                           "score": (value - median) / mad})
    return sorted(spikes, key=lambda sp: sp["step"])


def baseline_steps(entries: list[dict[str, Any]], spike_steps: set[int], step: int, window: int,
                   count: int) -> list[int]:
    """Up to ``count`` logged steps before ``step`` within ``window`` steps
    that are not spikes, nearest first then sorted: the normal steps shown
    beside a spike."""
    before = [e["step"] for e in entries if step - window <= e["step"] < step and e["step"] not in spike_steps]
    return sorted(before[-count:])


def spike_report(version_dir: str | Path, log: str | Path, window: int, global_batch: int, dp_size: int = 1,
                 metric: str = "loss", k: float = DEFAULT_K, baseline: int = 4, max_spikes: int = 5,
                 step_base: int | None = None, show_text: bool = False, seed: int = 0) -> dict[str, Any]:
    """Read ``log``, find the spikes and summarise each spike step and its
    baseline (the normal steps before it, :func:`baseline_steps`) with
    :func:`pipeline.drill.step_summaries`.

    Returns ``{"entries": n logged steps, "spikes": [spike + {"summary",
    "baseline_steps", "baseline": merged summary of the baseline steps}]}``;
    the ``max_spikes`` highest-scoring spikes get summaries (all are listed).
    A spike step outside the version's steps has ``summary`` None and
    ``error`` set. With ``show_text``, each summarised spike also has
    ``records``: its lineage with each piece's trained text and one-line
    "why kept" (:func:`pipeline.drill.attach_text`), so one command goes
    from the log to the text, its source line and its margins.
    """
    from pipeline.drill import attach_text, read_sample_rows, step_summaries
    from pipeline.lineage import lineage_for_step
    from pipeline.manifest import load_manifest

    # ``seed``: the loader's seed, which orders epochs 1, 2, ... (pipeline.order);
    # steps of epoch 0 do not depend on it.
    version_dir = Path(version_dir)
    manifest = load_manifest(version_dir, check_samples=True)
    entries = read_log(log, step_base)
    spikes = find_spikes(entries, window, metric, k)
    spike_steps = {s["step"] for s in spikes}
    chosen = {s["step"] for s in sorted(spikes, key=lambda s: -s["score"])[:max_spikes]}

    def summarise(steps: list[int], spike: dict[str, Any] | None = None) -> dict[str, Any] | None:
        records = []
        for step in steps:
            records.extend(lineage_for_step(version_dir, step, global_batch, dp_size, text_chars=0, seed=seed))
        rows = read_sample_rows(version_dir, [r["sample_index"] for r in records], manifest)
        if spike is not None and show_text:
            attach_text(version_dir, records, manifest=manifest, rows=rows)
            spike["records"] = records
        return merge_summaries(step_summaries(version_dir, records, rows, manifest)) if records else None

    for spike in spikes:
        spike["summary"] = spike["baseline"] = None
        if spike["step"] not in chosen:
            continue
        spike["baseline_steps"] = baseline_steps(entries, spike_steps, spike["step"], window, baseline)
        try:
            spike["summary"] = summarise([spike["step"]], spike)
            spike["baseline"] = summarise(spike["baseline_steps"])
        except ValueError as exc:
            spike["error"] = str(exc)
    return {"entries": len(entries), "metric": metric, "window": window, "k": k, "spikes": spikes}


def merge_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Several step summaries as one (token-weighted shares, flags and
    sample details concatenated), ``step`` the list of steps."""
    if len(summaries) == 1:
        return summaries[0]
    tokens = sum(s["tokens"] for s in summaries)
    merged: dict[str, Any] = {"step": [s["step"] for s in summaries], "samples": sum(s["samples"] for s in summaries),
                              "tokens": tokens, "target": summaries[0]["target"], "flags": [], "samples_detail": []}
    for key in ("source", "language", "bucket"):
        counts: dict[Any, float] = {}
        for s in summaries:
            for value, share in s[key].items():
                counts[value] = counts.get(value, 0.0) + share * s["tokens"]
        merged[key] = {v: c / tokens for v, c in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))}
    for s in summaries:
        merged["flags"].extend(s["flags"])
        merged["samples_detail"].extend(s["samples_detail"])
    merged["source_error_pp"] = {src: 100 * (merged["source"].get(src, 0.0) - (t or 0.0))
                                 for src, t in merged["target"].items()}
    return merged


def _side(summary: dict[str, Any] | None) -> dict[str, str]:
    if summary is None:
        return {}
    detail = summary["samples_detail"]
    cells = {f"source {src}": f"{summary['source'].get(src, 0.0):.0%}" for src in summary["target"]}
    cells.update({f"lang {lang}": f"{share:.0%}" for lang, share in summary["language"].items()})
    cells.update({f"bucket {'-' if b is None else b}": f"{share:.0%}" for b, share in summary["bucket"].items()})
    cells["longest run (max)"] = str(max(d["longest_run"] for d in detail))
    cells["unique share (min)"] = f"{min(d['unique_share'] for d in detail):.2f}"
    cells["copies (max)"] = str(max(d["max_copies"] for d in detail))
    cells["flags"] = str(len(summary["flags"]))
    return cells


def format_spike_report(report: dict[str, Any]) -> str:
    """Plain text: per spike its value against the rule's limit, then a
    table of the spike step's summary beside its baseline's (source shares
    with the target, language and bucket shares, longest run, unique share,
    copies, flag count), then the spike step's flags."""
    out = [f"{report['entries']} logged steps; {len(report['spikes'])} spike(s) of {report['metric']} "
           f"(> median + {report['k']:g} x 1.4826 MAD of the previous {report['window']} steps)"]
    for spike in report["spikes"]:
        if spike.get("non_finite"):
            out.append(f"step {spike['step']}: {report['metric']} {spike['value']} (not finite)")
        else:
            out.append(f"step {spike['step']}: {report['metric']} {spike['value']:.4f} > limit {spike['limit']:.4f} "
                       f"(median {spike['median']:.4f}, scaled MAD {spike['mad']:.4f}, score {spike['score']:.1f})")
        if spike.get("error"):
            out.append(f"  no lineage: {spike['error']}")
            continue
        if spike["summary"] is None:
            continue
        base = spike["baseline"]
        left, right = _side(spike["summary"]), _side(base)
        target = spike["summary"]["target"]
        keys = sorted(dict.fromkeys([*left, *right]), key=lambda key: (_ROW_ORDER.get(key.split(" ")[0], 9),
                                                                      -_pct(left.get(key)), key))
        name = f"baseline {spike['baseline_steps']}" if base else "baseline (none)"
        header = ["", f"step {spike['step']}", name, "target"]
        rows = [header] + [[k, left.get(k, "0%" if k.split(" ")[0] in ("lang", "bucket", "source") else "-"),
                            right.get(k, "-"),
                            f"{target[k[7:]]:.0%}" if k.startswith("source ") and k[7:] in target else ""]
                           for k in keys]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        out.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
        for f in spike["summary"]["flags"]:
            value = f"{f['value']:.3f}" if isinstance(f["value"], float) else str(f["value"])
            out.append(f"  FLAG {f['flag']}: sample {f['sample_index']} (rank {f['dp_rank']} row {f['row']}) {value}"
                       + (f" {f['doc_id']}" if f.get("doc_id") else ""))
        if spike.get("records"):
            from pipeline.drill import format_piece_texts

            out.append(format_piece_texts(spike["records"]).rstrip("\n"))
    return "\n".join(out) + "\n"


_ROW_ORDER = {"source": 0, "lang": 1, "bucket": 2}


def _pct(cell: str | None) -> float:
    """A "44%" cell as 44.0 (0 for anything else), for ordering rows."""
    return float(cell[:-1]) if cell and cell.endswith("%") else 0.0
