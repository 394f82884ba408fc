"""Random kept or dropped examples of a built version, for reading decisions.

A version directory holds ``decisions/<stage>/`` (every document that stage
dropped, with its text, reason and every measurement column made so far) and
``documents/`` (the kept documents with all columns), each split into parts
(``pipeline.layout``). This module picks a seeded, order-independent sample
from either, one part at a time (memory: one part's ids and reasons, plus the
sample), and formats it;
``python -m pipeline inspect VERSION --stage S [--reason R] [-n 10] [--kept]``
is its face.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.hashing import sample_rank

BASE_SHOWN = ("id", "source", "reason", "chars")


def sample_examples(version_dir: Path, stage: str, reason: str | None = None, n: int = 10,
                    kept: bool = False, seed: int = 0, where: str | None = None) -> list[dict[str, Any]]:
    """Up to ``n`` random documents that ``stage`` dropped (or, with ``kept``,
    that the version kept), with their text and ``stage``'s measurements.

    Args:
        version_dir: a published version (``corpora/<VERSION>``).
        stage: a stage name with ``decisions/<stage>.parquet`` (``langid``,
            ``heuristics``, ``perplexity``, ``dedup`` ...).
        reason: only drops with this reason code (e.g.
            ``heuristics.max_unbroken_run``); None: any reason. Not allowed
            with ``kept``.
        n: how many examples (fewer when fewer match), n >= 1.
        kept: sample the kept documents (``documents.parquet``) instead.
        where: only documents whose column ``where`` (one of the table's
            columns, e.g. ``decontaminate_hits``, ``pii_count``,
            ``pii_edits``) is set: a number other than 0, a non-empty string
            or list; the documents a stage annotated or edited without
            dropping them.
        seed: the sample is the ``n`` documents with the smallest
            ``blake2b(f"{seed}:{id}")`` (:func:`common.hashing.sample_rank`),
            so the same seed gives the same examples whatever the file order,
            and growing ``n`` extends it.

    Returns:
        Dicts with ``id``, ``source``, ``reason`` (None when kept), ``chars``,
        ``text`` and every ``<stage>_*`` column, in sample order.

    Raises:
        ValueError: ``n`` < 1; ``reason`` with ``kept``; no decisions file
            for ``stage`` (the message lists the stages that have one); a
            ``reason`` that ``stage`` never gave (the message lists the reasons
            with their counts); a ``where`` column the table does not have.
    """
    import heapq

    from pipeline import layout

    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    version_dir = Path(version_dir)
    decisions = version_dir / layout.DECISIONS
    if kept:
        if reason is not None:
            raise ValueError("--reason selects dropped documents; it cannot be used with --kept")
        parts = layout.table_parts(version_dir, layout.DOCUMENTS)
    else:
        parts = layout.table_parts(version_dir, layout.DECISIONS, stage)
        if not parts:
            have = sorted({p.stem if p.is_file() else p.name for p in decisions.iterdir()}) \
                if decisions.is_dir() else []
            raise ValueError(f"no decisions for stage {stage!r} in {version_dir} "
                             f"(stages with decisions: {', '.join(have) or 'none'})")
    schema = pq.read_schema(parts[0])
    prefix = f"{stage}_"
    stage_columns = [c for c in schema.names if c.startswith(prefix)]
    if kept and not stage_columns:
        raise ValueError(f"documents have no {prefix}* columns: unknown stage {stage!r}")
    if where is not None and where not in schema.names:
        raise ValueError(f"--where {where}: no such column in {'documents' if kept else f'decisions of {stage}'} "
                         f"(columns of {stage}: {', '.join(stage_columns) or 'none'})")
    wanted = [c for c in (*BASE_SHOWN, "text") if c in schema.names] + stage_columns
    best: list[tuple[bytes, str, int]] = []  # max-heap of the n smallest ranks: (-rank, id, part)
    reasons: dict[str, int] = {}
    for number, path in enumerate(parts):
        cols = ["id"] + (["reason"] if "reason" in schema.names else []) + ([where] if where else [])
        table = pq.read_table(path, columns=cols)
        if where is not None:
            table = table.filter(_is_set(table[where]))
        if "reason" in cols:
            for c in table["reason"].value_counts().to_pylist():
                reasons[c["values"]] = reasons.get(c["values"], 0) + c["counts"]
        if reason is not None:
            table = table.filter(pc.equal(table["reason"], reason))
        for doc_id in table["id"].to_pylist():
            item = (bytes(255 - b for b in sample_rank(doc_id, seed)), doc_id, number)
            if len(best) < n:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
    if reason is not None and not best:
        listed = ", ".join(f"{r} ({c})" for r, c in sorted(reasons.items(), key=lambda rc: (-rc[1], str(rc[0]))))
        raise ValueError(f"stage {stage!r} dropped no document with reason {reason!r} "
                         f"(its reasons: {listed or 'none'})")
    chosen = sorted(best, key=lambda item: (sample_rank(item[1], seed), item[1]))
    by_part: dict[int, list[str]] = {}
    for _, doc_id, number in chosen:
        by_part.setdefault(number, []).append(doc_id)
    found: dict[str, dict[str, Any]] = {}
    for number, ids in by_part.items():
        table = pq.read_table(parts[number], columns=wanted, filters=[("id", "in", ids)])
        for row in table.to_pylist():
            found[row["id"]] = row
    rows = [found[doc_id] for _, doc_id, _ in chosen]
    for row in rows:
        row.setdefault("reason", None)
    return rows


def _is_set(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """True where a value is set: not null and not 0, "" or an empty list."""
    t = column.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        mask = pc.greater(pc.list_value_length(column), 0)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        mask = pc.greater(pc.utf8_length(column), 0)
    elif pa.types.is_boolean(t):
        mask = column
    else:
        mask = pc.not_equal(column, 0)
    return pc.fill_null(mask, False)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str) and value.startswith("["):
        try:
            return json.dumps(json.loads(value), ensure_ascii=False, separators=(",", ":"))
        except ValueError:
            return value
    return str(value)


def format_examples(rows: list[dict[str, Any]], stage: str, max_chars: int = 400) -> str:
    """Plain-text listing: per example a header (id, source, reason, chars),
    the non-null ``<stage>_*`` measurements as ``name=value``, and the first
    ``max_chars`` characters of the text (line breaks shown as ``⏎``)."""
    prefix = f"{stage}_"
    out = []
    for i, row in enumerate(rows, 1):
        out.append(f"── {i}. {row['id']}  source={row.get('source')}  "
                   f"reason={row.get('reason') or 'kept'}  chars={row.get('chars')}")
        values = [f"{k[len(prefix):]}={_short(v)}" for k, v in row.items()
                  if k.startswith(prefix) and v is not None]
        if values:
            out.append("   " + "  ".join(values))
        text = row.get("text") or ""
        snippet = text[:max_chars].replace("\r\n", "⏎").replace("\n", "⏎")
        out.append("   " + snippet + (" …" if len(text) > max_chars else ""))
    return "\n".join(out) if out else "(no example)"
