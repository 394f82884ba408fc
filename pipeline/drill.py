"""The loss-spike drill on a version: the exact trained text of a step's
document pieces, and a step's summary (mix against the target, odd samples).

* :func:`read_sample_rows`: global sample indices -> their ``input_ids`` rows,
  read from the MindRecord shards with one ``MindDataset`` +
  ``SequentialSampler(start_index, num_samples)`` per contiguous run of rows
  in a shard (which shard holds sample ``i`` follows from the manifest's shard
  rows). Measured on the sample version (975 rows of 2049 tokens, one 4.9 MB
  shard): 0.016 s for one row after MindSpore's import (1.6 s); a
  ``FileReader`` has no seek and reads every row before it (0.12 s to row 500).
  MindSpore is imported inside the function, so a lookup without text never
  pays for it.
* :func:`attach_text`: each piece's tokens ``input_ids[sample_token_start:
  sample_token_end]`` of its sample's row, decoded with the version's
  ``tokenizer.json`` (``tokenizers``), a one-line "why kept" per document
  (:func:`pipeline.explain.why_line`), and with ``full`` the whole document
  text from ``documents/``.
* :func:`step_summaries`: per step, token shares by source (against the
  mixture's target shares in the manifest), language and perplexity bucket,
  and flags for odd samples (:data:`FLAG_LONGEST_RUN`,
  :data:`FLAG_UNIQUE_SHARE`, :data:`FLAG_LANGID_SCORE`, :data:`FLAG_COPIES`,
  unscored documents).

Costs: O(pieces of the steps asked for) rows of lineage, O(samples of the
steps) shard rows, one read per table part for the why-kept lines; nothing
scans the corpus. Not part of the training-job wall of loader/lineage: it
imports MindSpore (shard rows) and ``tokenizers`` on use; the why-kept lines
read the heuristics rules from the manifest (:mod:`pipeline.explain`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline import layout
from pipeline.manifest import load_manifest

# Flags for odd samples. Distributions measured on the sample version
# (configs/default.yaml, 975 samples of 2049 tokens, 9,004 pieces; 2026-12-03):
# longest run of one id p50 2, p99 17.5, max 29; unique-id share p1 0.138,
# min 0.087; langid_score of pieces p1 0.603, p5 0.789; mixture_repeats
# 1-3 (the config caps copies at 4 epochs).
FLAG_LONGEST_RUN = 32
"""A sample whose longest run of one token id is at least this many tokens is
flagged (``longest_run``). Above every sample of the sample version (max 29,
p99 17.5); the issue's example of an odd sample is a 60-token run."""
FLAG_UNIQUE_SHARE = 0.10
"""A sample whose share of distinct ids among its ``seq_length + 1`` tokens
is below this is flagged (``unique_share``). Under the p1 of the sample
version (0.138; one sample of 975, a man page table, has 0.087); the issue's
example is a sample of 10% unique tokens."""
FLAG_LANGID_SCORE = 0.60
"""A piece whose document's ``langid_score`` is below this is flagged
(``low_langid_score``): about the p1 of pieces on the sample version (0.603),
above the stage's own floor (``langid.min_score`` 0.5, CCNet)."""
FLAG_COPIES = 4
"""A piece whose document the mixture repeated this many times or more
(``mixture_repeats``; with ``mixture.phases``, its copies in the sample's phase,
as ``max_epochs`` counts within a phase) is flagged (``copies``): 4 epochs is where repeating
stops helping (Muennighoff et al. 2023) and the default ``max_epochs``."""
FULL_TEXT_CHARS = 1 << 40  # "the whole document" for pipeline.lineage.read_documents


def _shard_starts(manifest: dict[str, Any]) -> list[int]:
    starts, total = [], 0
    for shard in manifest["shards"]:
        starts.append(total)
        total += int(shard["rows"])
    starts.append(total)
    return starts


def read_sample_rows(version_dir: str | Path, sample_indices, manifest: dict[str, Any] | None = None
                     ) -> dict[int, np.ndarray]:
    """The ``input_ids`` rows (int32[seq_length + 1]) of global samples
    ``sample_indices``, keyed by sample index.

    One ``MindDataset`` per run of consecutive indices inside one shard
    (a step's samples are one run), reading only those rows; a version built
    without the mindrecord format is read from its Megatron ``.bin`` (the same
    rows end to end, :func:`pipeline.megatron.read_tokens`, no MindSpore). Cost: MindSpore's
    import (~1.6 s, once per process) plus ~0.02 s per run (measured on the
    sample version).

    Raises:
        ValueError: an index outside ``[0, num_samples)``.
    """
    import bisect

    version_dir = Path(version_dir)
    manifest = manifest or load_manifest(version_dir, check_samples=True)
    starts = _shard_starts(manifest)
    wanted = sorted({int(i) for i in sample_indices})
    if wanted and not (0 <= wanted[0] and wanted[-1] < starts[-1]):
        raise ValueError(f"sample indices must be in [0, {starts[-1]}), got {wanted[0]}..{wanted[-1]}")
    if any("name" not in shard for shard in manifest["shards"]):
        # built without the mindrecord format: sample i is tokens
        # [i * (S + 1), (i + 1) * (S + 1)) of the Megatron stream
        if "megatron" not in (manifest.get("formats") or {}):
            raise ValueError(f"{version_dir}: no mindrecord shards and no megatron files to read samples from")
        from pipeline.megatron import read_tokens

        window = int(manifest["seq_length"]) + 1
        prefix = version_dir / layout.megatron_prefix()
        return {i: read_tokens(prefix, i * window, window) for i in wanted}

    import mindspore.dataset as ds

    runs: list[tuple[int, int, int]] = []  # (shard, first global index, count)
    for index in wanted:
        shard = bisect.bisect_right(starts, index) - 1
        if runs and runs[-1][0] == shard and runs[-1][1] + runs[-1][2] == index:
            runs[-1] = (shard, runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((shard, index, 1))
    rows: dict[int, np.ndarray] = {}
    for shard, first, count in runs:
        path = version_dir / manifest["shards"][shard]["name"]
        sampler = ds.SequentialSampler(start_index=first - starts[shard], num_samples=count)
        dataset = ds.MindDataset(str(path), columns_list=["input_ids"], sampler=sampler)
        for offset, (ids,) in enumerate(dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)):
            rows[first + offset] = ids
        if first + count - 1 not in rows:
            raise ValueError(f"{path}: read fewer rows than asked ({count} from row {first - starts[shard]})")
    return rows


def load_tokenizer(version_dir: str | Path):
    """The version's ``tokenizer.json`` as a ``tokenizers.Tokenizer``; None
    when the version has none (a version written by ``assemble`` alone, as in
    tests: its pieces are shown as token ids)."""
    from tokenizers import Tokenizer

    path = Path(version_dir) / layout.TOKENIZER
    return Tokenizer.from_file(str(path)) if path.is_file() else None


def _pieces(records: list[dict[str, Any]]):
    """(sample_index, piece dict) of lineage_for_step records or of a
    lineage_for_document result."""
    if isinstance(records, dict):  # lineage_for_document
        for piece in records["pieces"]:
            yield piece["sample_index"], piece
        return
    for record in records:
        for seg in record["segments"]:
            yield record["sample_index"], seg


def attach_text(version_dir: str | Path, records, full: bool = False,
                manifest: dict[str, Any] | None = None, rows: dict[int, np.ndarray] | None = None,
                why: bool = True) -> dict[int, np.ndarray]:
    """Add to each piece of ``records`` (:func:`pipeline.lineage.lineage_for_step`
    records, or a :func:`~pipeline.lineage.lineage_for_document` result):
    ``token_ids`` (list of int: ``input_ids[sample_token_start:sample_token_end]``
    of its sample's shard row: the tokens that were trained) and ``text``
    (those ids decoded with the version's tokenizer, special tokens shown, so
    the document's closing EOS reads ``<|endoftext|>``; None when the version
    has no ``tokenizer.json``); with ``why``, ``why`` (the document's one-line
    explanation, :func:`pipeline.explain.why_line`: langid score, perplexity
    and the two heuristics rules it passed most narrowly, with thresholds and
    margins; one read of each table part for the whole step; skipped for a
    version whose manifest has no stage facts); with ``full``,
    ``document_text`` (the whole kept document from ``documents/``).

    Returns the rows read (sample index -> int32[seq_length + 1]), for
    :func:`step_summaries`. ``rows`` given: those are used instead of reading.
    """
    from pipeline.lineage import read_documents

    version_dir = Path(version_dir)
    manifest = manifest or load_manifest(version_dir, check_samples=True)
    pieces = list(_pieces(records))
    if rows is None:
        rows = read_sample_rows(version_dir, [i for i, _ in pieces], manifest)
    tokenizer = load_tokenizer(version_dir)
    for sample_index, piece in pieces:
        ids = rows[sample_index][piece["sample_token_start"]:piece["sample_token_end"]].tolist()
        piece["token_ids"] = ids
        piece["text"] = None if tokenizer is None else tokenizer.decode(ids, skip_special_tokens=False)
    if why and pieces and manifest.get("stages"):  # a version without stage facts has nothing to explain
        from pipeline.explain import explain_documents, why_line

        ids = [p.get("doc_id", records.get("doc_id") if isinstance(records, dict) else None) for _, p in pieces]
        explained = explain_documents(version_dir, ids)
        for (_, piece), doc_id in zip(pieces, ids):
            piece["why"] = why_line(explained[doc_id]) if doc_id in explained else None
    if full and pieces:
        doc_ids = [p.get("doc_id", records.get("doc_id") if isinstance(records, dict) else None)
                   for _, p in pieces]
        docs = read_documents(version_dir, doc_ids, FULL_TEXT_CHARS, columns=(), manifest=manifest)
        for (_, piece), doc_id in zip(pieces, doc_ids):
            piece["document_text"] = docs[doc_id]["text_excerpt"]
    return rows


def format_piece_texts(records, full: bool = False) -> str:
    """Per piece, a header line (step, rank, row, sample, segment, token
    ranges, document id, source file and line) and the decoded trained text
    (and with ``full`` the whole document after it)."""
    out = []
    for sample_index, piece in _pieces(records):
        doc_id = piece.get("doc_id") or (records.get("doc_id") if isinstance(records, dict) else "?")
        step = piece.get("step", None)
        out.append(f"── sample {sample_index} seg {piece['segment']} tokens {piece['sample_token_start']}-"
                   f"{piece['sample_token_end']} (document tokens {piece['doc_token_start']}-"
                   f"{piece['doc_token_end']}, copy {piece['repeat']}) {doc_id}  "
                   f"[{piece['file']} line {piece['line']}]" + (f" step {step}" if step is not None else ""))
        if piece.get("why"):
            out.append(piece["why"])
        text = piece.get("text")
        out.append(text if text is not None else f"(no {layout.TOKENIZER} in the version) token ids "
                   f"{piece.get('token_ids')}")
        if full:
            out.append(f"── whole document {doc_id} ({len(piece.get('document_text') or '')} characters)")
            out.append(piece.get("document_text") or "")
    return "\n".join(out) + "\n"


def longest_run(ids: np.ndarray) -> tuple[int, int]:
    """(length, token id) of the longest run of one id in ``ids`` (int[n],
    n >= 1); the first such run on ties."""
    ids = np.asarray(ids)
    edges = np.flatnonzero(np.diff(ids) != 0)
    starts = np.concatenate(([0], edges + 1))
    lengths = np.diff(np.concatenate((starts, [len(ids)])))
    k = int(np.argmax(lengths))
    return int(lengths[k]), int(ids[starts[k]])


def _shares(counts: dict[Any, int]) -> dict[Any, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))} if total else {}


def step_summaries(version_dir: str | Path, records: list[dict[str, Any]], rows: dict[int, np.ndarray] | None = None,
                   manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One summary per step of :func:`pipeline.lineage.lineage_for_step`
    ``records``, in step order.

    Each: ``step``, ``samples``, ``tokens`` (trained tokens: the pieces'
    sample token ranges), ``source`` / ``language`` / ``bucket`` (value ->
    share of the step's tokens; None: no value, e.g. code has no perplexity
    bucket), ``phase`` (the mixture phase's name, None without phases),
    ``target`` (source -> the mixture's ``target_share`` from the
    manifest: the step's phase's with ``mixture.phases``), ``source_error_pp`` (source -> share - target, in percentage
    points), ``flags`` (list of ``{"sample_index", "dp_rank", "row", "flag",
    "value", "limit", "doc_id"}``) and ``samples_detail`` (per sample:
    ``longest_run``, ``longest_run_id``, ``unique_share``, ``max_copies``).

    Flags: ``longest_run`` >= :data:`FLAG_LONGEST_RUN`, ``unique_share`` <
    :data:`FLAG_UNIQUE_SHARE`, ``low_langid_score`` <
    :data:`FLAG_LANGID_SCORE`, ``copies`` >= :data:`FLAG_COPIES`, and
    ``unscored``: a piece without ``perplexity_value`` whose language is not
    one the perplexity stage left unscored by declaration (e.g. ``code``:
    manifest ``stages.perplexity.fit.coverage.unscored.<lang>.declared``).

    Reads the shard rows of the steps' samples unless ``rows`` is given.
    """
    version_dir = Path(version_dir)
    manifest = manifest or load_manifest(version_dir, check_samples=True)
    if rows is None:
        rows = read_sample_rows(version_dir, [r["sample_index"] for r in records], manifest)
    target = {src: m.get("target_share") for src, m in (manifest.get("mixture", {}).get("per_source") or {}).items()}
    # A staged mixture: a step's target is its phase's (records name the phase).
    phase_targets = {p.get("name"): {src: f.get("target_share") for src, f in (p.get("per_source") or {}).items()}
                     for p in manifest.get("mixture", {}).get("phases") or ()}
    # A staged mixture: max_epochs (and so the copies flag) counts within a
    # phase, so a document's copies are those of the phase of the sample.
    phase_index = {p.get("name"): k for k, p in enumerate(manifest.get("phases") or ())}
    phase_copies: dict[str, list[int]] = {}
    if phase_index:
        many = sorted({seg["doc_id"] for r in records for seg in r["segments"]
                       if (seg.get("mixture_repeats") or 0) >= FLAG_COPIES})
        if many:
            from pipeline.lineage import read_documents

            found = read_documents(version_dir, many, 0, columns=("mixture_phase_repeats",), manifest=manifest)
            phase_copies = {d: v.get("mixture_phase_repeats") or [] for d, v in found.items()}

    def copies_of(seg: dict[str, Any], phase: str | None) -> int:
        total = seg.get("mixture_repeats") or 0
        listed = phase_copies.get(seg["doc_id"])
        if phase is None or not listed or phase_index.get(phase) is None:
            return total
        return int(listed[phase_index[phase]])

    coverage = (((manifest.get("stages") or {}).get("perplexity") or {}).get("fit") or {}).get("coverage") or {}
    declared = {lang for lang, u in (coverage.get("unscored") or {}).items() if u.get("declared")}
    out: dict[int, dict[str, Any]] = {}
    for record in records:
        s = out.setdefault(record["step"], {"step": record["step"], "samples": 0, "tokens": 0, "source": {},
                                            "language": {}, "bucket": {}, "flags": [], "samples_detail": [],
                                            "phase": record.get("phase")})
        s["samples"] += 1
        ids = rows[record["sample_index"]]
        run, run_id = longest_run(ids)
        unique = len(np.unique(ids)) / len(ids)
        where = {"sample_index": record["sample_index"], "dp_rank": record["dp_rank"], "row": record["row"]}
        copies = max(copies_of(seg, record.get("phase")) for seg in record["segments"])
        s["samples_detail"].append({**where, "longest_run": run, "longest_run_id": run_id,
                                    "unique_share": unique, "max_copies": copies})
        if run >= FLAG_LONGEST_RUN:
            s["flags"].append({**where, "flag": "longest_run", "value": run, "limit": FLAG_LONGEST_RUN,
                               "doc_id": _doc_at(record, _run_position(ids, run, run_id)), "token_id": run_id})
        if unique < FLAG_UNIQUE_SHARE:
            s["flags"].append({**where, "flag": "unique_share", "value": unique, "limit": FLAG_UNIQUE_SHARE,
                               "doc_id": None})
        for seg in record["segments"]:
            n = seg["sample_token_end"] - seg["sample_token_start"]
            s["tokens"] += n
            for key, value in (("source", seg["source"]), ("language", seg.get("langid_lang")),
                               ("bucket", seg.get("perplexity_bucket"))):
                s[key][value] = s[key].get(value, 0) + n
            score = seg.get("langid_score")
            if score is not None and score < FLAG_LANGID_SCORE:
                s["flags"].append({**where, "flag": "low_langid_score", "value": score, "limit": FLAG_LANGID_SCORE,
                                   "doc_id": seg["doc_id"]})
            if copies_of(seg, record.get("phase")) >= FLAG_COPIES:
                s["flags"].append({**where, "flag": "copies", "value": copies_of(seg, record.get("phase")),
                                   "limit": FLAG_COPIES, "doc_id": seg["doc_id"]})
            if ("perplexity_value" in seg and seg.get("perplexity_value") is None
                    and seg.get("langid_lang") not in declared):
                s["flags"].append({**where, "flag": "unscored", "value": seg.get("langid_lang"), "limit": None,
                                   "doc_id": seg["doc_id"]})
    summaries = []
    for step in sorted(out):
        s = out[step]
        for key in ("source", "language", "bucket"):
            s[key] = _shares(s[key])
        s["target"] = phase_targets.get(s["phase"], target) if s["phase"] is not None else target
        s["source_error_pp"] = {src: 100 * (s["source"].get(src, 0.0) - (t or 0.0)) for src, t in s["target"].items()}
        s["source_error_pp"] = {src: 100 * (s["source"].get(src, 0.0) - (t or 0.0)) for src, t in target.items()}
        summaries.append(s)
    return summaries


def _run_position(ids: np.ndarray, length: int, token_id: int) -> int:
    """Start of the first run of ``length`` x ``token_id`` in ``ids``."""
    window = np.lib.stride_tricks.sliding_window_view(np.asarray(ids), length)
    return int(np.flatnonzero((window == token_id).all(axis=1))[0])


def _doc_at(record: dict[str, Any], position: int) -> str | None:
    """The document id of the piece holding token ``position`` of a sample."""
    for seg in record["segments"]:
        if seg["sample_token_start"] <= position < seg["sample_token_end"]:
            return seg["doc_id"]
    return None


def _mix(shares: dict[Any, float], limit: int = 6) -> str:
    items = list(shares.items())
    text = " ".join(f"{'-' if k is None else k} {v:.0%}" for k, v in items[:limit])
    return text + (f" +{len(items) - limit} more" if len(items) > limit else "")


def format_summaries(summaries: list[dict[str, Any]]) -> str:
    """Plain text: per step, the source mix against the target (share,
    target, difference in percentage points), the language and bucket mix,
    the samples' longest run and unique share ranges, and one line per
    flag."""
    out = []
    for s in summaries:
        phase = f" (mixture phase {s['phase']})" if s.get("phase") is not None else ""
        out.append(f"step {s['step']}{phase}: {s['samples']} samples, {s['tokens']:,} trained tokens")
        sources = sorted(set(s["source"]) | set(s["target"]), key=lambda k: -s["source"].get(k, 0.0))
        out.append("  source    " + "  ".join(
            f"{src} {s['source'].get(src, 0.0):.0%} (target {s['target'].get(src, 0.0) or 0:.0%}, "
            f"{100 * (s['source'].get(src, 0.0) - (s['target'].get(src) or 0.0)):+.0f} pp)" for src in sources))
        out.append(f"  language  {_mix(s['language'])}")
        out.append(f"  bucket    {_mix(s['bucket'])}")
        detail = s["samples_detail"]
        runs = [d["longest_run"] for d in detail]
        uniq = [d["unique_share"] for d in detail]
        out.append(f"  samples   longest run {min(runs)}-{max(runs)} (flag >= {FLAG_LONGEST_RUN}), unique share "
                   f"{min(uniq):.2f}-{max(uniq):.2f} (flag < {FLAG_UNIQUE_SHARE}), copies up to "
                   f"{max(d['max_copies'] for d in detail)} (flag >= {FLAG_COPIES})")
        for f in s["flags"]:
            value = f"{f['value']:.3f}" if isinstance(f["value"], float) else str(f["value"])
            limit = "" if f["limit"] is None else f" (limit {f['limit']})"
            out.append(f"  FLAG {f['flag']}: sample {f['sample_index']} (rank {f['dp_rank']} row {f['row']}) "
                       f"{value}{limit}" + (f" {f['doc_id']}" if f.get("doc_id") else "")
                       + (f" token id {f['token_id']}" if "token_id" in f else ""))
        if not s["flags"]:
            out.append("  no flags")
    return "\n".join(out) + "\n"
