"""Why a document was kept or dropped: every stage's measurements with the
threshold that applied and the margin (``python -m pipeline explain VERSION
DOC_ID``).

A document is in exactly one place of a version: ``documents/`` (kept) or
``decisions/<stage>/`` of the stage that dropped it (with its reason code and
every column measured up to that stage). Both are id-keyed tables split by id
hash (:mod:`pipeline.layout`): the lookup opens one part per table and, in
it, only the row groups whose footer statistics can hold the id, so it never
scans the corpus (O(one row group) per table, whatever the version's size).

Thresholds are the ones that applied in this build, read from the version
itself, never from today's code defaults:

* ``langid``: ``min_score`` of the resolved ``config.yaml``, overridden per
  language by the manifest's ``stages.langid.settings.min_score_by_lang``;
  ``allowed_languages`` from the same settings.
* ``heuristics``: the manifest's ``stages.heuristics.settings.thresholds``
  (effective thresholds per language after presets, overrides and disabled
  families; a language without an entry takes ``default``). Each rule's value
  column and bound come from the manifest's ``stages.heuristics.settings.rules``
  (the stage publishes them; nothing here imports a stage module).
* ``perplexity``: the manifest's ``stages.perplexity.fit.languages.<lang>``
  (``threshold``, ``threshold_from``, ``bucket_cutoffs``), and the
  ``word_salad_max_ratio`` of ``config.yaml`` for the self-shuffle ratio (the
  full-length cut-off; documents under ``word_salad_full_tokens`` model tokens
  had a lower one, :func:`stages.perplexity.salad.salad_cutoff`).
* ``dedup``: ``jaccard_threshold`` from ``stages.dedup.fit``.

Margin: signed distance to the threshold in the rule's units, positive when
the value passes: ``value - limit`` for a lower bound (``min_*``),
``limit - value`` for an upper bound (``max_*``). A dropped document's failing
rule has a negative margin (or an undefined value).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from pipeline import layout
from pipeline.manifest import load_manifest


class UnknownDocumentError(LookupError):
    """The id is in no table of the version (neither kept nor dropped)."""


def find_documents(version_dir: Path, doc_ids, manifest: dict[str, Any], with_text: bool = True
                   ) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """``doc_id -> (stage, row)`` for each id found: its row of
    ``documents/`` (stage None: kept) or of ``decisions/<stage>/`` (dropped by
    ``stage``). Each table part is opened once for all the ids it may hold
    and only row groups whose id statistics can hold one are decoded. Ids in
    no table are absent from the result. ``with_text`` False leaves out the
    ``text`` and ``meta`` columns (the bulk of a row group to decode)."""
    from pipeline.lineage import row_groups_for

    pending = sorted(set(doc_ids))
    found: dict[str, tuple[str | None, dict[str, Any]]] = {}
    for table, stage in [(layout.DOCUMENTS, None), *((layout.DECISIONS, s) for s in manifest.get("stage_order", []))]:
        if not pending:
            break
        by_part: dict[Path, list[str]] = {}
        for doc_id in pending:
            path = layout.id_table_part(version_dir, manifest, table, doc_id, stage)
            if path is not None:
                by_part.setdefault(path, []).append(doc_id)
        for path, ids in by_part.items():
            parquet = pq.ParquetFile(path)
            groups = sorted({g for doc_id in ids for g in row_groups_for(parquet, "id", doc_id, doc_id)})
            if not groups:
                continue
            columns = None if with_text else [c for c in parquet.schema_arrow.names if c not in ("text", "meta")]
            rows = parquet.read_row_groups(groups, columns=columns)
            rows = rows.filter(pc.is_in(rows["id"], value_set=pa.array(ids, pa.string())))
            for row in rows.to_pylist():
                found.setdefault(row["id"], (stage, row))
        pending = [i for i in pending if i not in found]
    return found


def find_document(version_dir: Path, doc_id: str, manifest: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(stage, row)`` of one id (:func:`find_documents`).

    Raises:
        UnknownDocumentError: no table holds the id.
    """
    found = find_documents(version_dir, [doc_id], manifest)
    if doc_id not in found:
        entry = find_quarantined(version_dir, doc_id)
        if entry is not None:
            raise UnknownDocumentError(
                f"{doc_id!r} was quarantined at ingest: {entry.get('reason')}"
                + (f" ({entry['detail']})" if entry.get("detail") else "")
                + f"; it never reached a stage (quarantine.jsonl of {version_dir.name})")
        raise UnknownDocumentError(f"{doc_id!r} is in no table of {version_dir.name}: not kept (documents/) and not "
                                   f"dropped by any stage (decisions/<stage>/); ids are '<source>:<file>:<line>'")
    return found[doc_id]


def find_quarantined(version_dir: Path, doc_id: str) -> dict[str, Any] | None:
    """The version's quarantine entry (``quarantine.jsonl``: ``source``,
    ``file``, ``line``, ``reason``, ``detail`` ...) of the input record whose
    id would be ``doc_id`` (``<source>:<file>:<line>``), or None.

    A streaming scan of the file: O(quarantined records), read only when an id
    is in no table (the quarantine is a small share of a corpus)."""
    import json

    path = Path(version_dir) / layout.QUARANTINE
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and f"{entry.get('source')}:{entry.get('file')}:{entry.get('line')}" == doc_id:
                return entry
    return None


def _margin(value: Any, limit: Any, bound: str) -> float | None:
    if value is None or limit is None:
        return None
    return float(value) - float(limit) if bound == "min" else float(limit) - float(value)


def _check(name: str, value: Any, limit: Any, bound: str, **extra: Any) -> dict[str, Any]:
    """One measurement against its threshold: ``{"name", "value", "bound",
    "limit", "margin", "passes", ...extra}``."""
    margin = _margin(value, limit, bound)
    return {"name": name, "value": value, "bound": bound, "limit": limit, "margin": margin,
            "passes": None if margin is None else margin >= 0, **extra}


def _langid(row: dict[str, Any], manifest: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    settings = manifest["stages"]["langid"].get("settings") or {}
    lang = row.get("langid_lang")
    by_lang = settings.get("min_score_by_lang") or {}
    min_score = by_lang.get(lang, (config.get("langid") or {}).get("min_score", 0.5))
    allowed = settings.get("allowed_languages")
    out = [_check("langid_score", row.get("langid_score"), min_score, "min",
                  source="min_score_by_lang" if lang in by_lang else "langid.min_score")]
    out.append({"name": "langid_lang", "value": lang, "bound": "in", "limit": allowed, "margin": None,
                "passes": None if allowed is None else lang in allowed, "source": "allowed_languages"})
    return out


def _heuristics(row: dict[str, Any], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    settings = manifest["stages"]["heuristics"].get("settings", {})
    table = settings.get("thresholds") or {}
    rules = settings.get("rules")
    if rules is None:  # a version built before the stage published its rules
        return [{"name": "heuristics", "value": None, "bound": None, "limit": None, "margin": None, "passes": None,
                 "note": "this version's manifest has no stages.heuristics.settings.rules: rebuild to see margins"}]
    lang = row.get("langid_lang")
    key = lang if lang in table else "default"
    thresholds = table.get(key, {})
    words = row.get("heuristics_num_words")
    long_min = thresholds.get("long_document_min_words")
    short = long_min is not None and words is not None and words < long_min
    out = []
    for rule in rules:
        if rule["name"] not in thresholds:
            continue
        value = row.get(rule["value_column"])
        check = _check(rule["name"], value, thresholds[rule["name"]], rule["bound"],
                       value_column=rule["value_column"], thresholds_of=key, family=rule["family"])
        if short and rule["long_only"]:
            check.update(passes=True, note=f"not applied: fewer than {long_min} words")
        elif value is None:
            check.update(passes=rule["undefined_passes"], note="value undefined"
                         + (" (passes)" if rule["undefined_passes"] else " (fails)"))
        out.append(check)
    return out


def _perplexity(row: dict[str, Any], manifest: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    fit = manifest["stages"]["perplexity"].get("fit") or {}
    lang = row.get("langid_lang")
    model = (fit.get("languages") or {}).get(lang)
    value = row.get("perplexity_value")
    if model is None:
        unscored = ((fit.get("coverage") or {}).get("unscored") or {}).get(lang) or {}
        why = f": {unscored['why']}" if unscored.get("why") else ""
        return [{"name": "perplexity_value", "value": value, "bound": "max", "limit": None, "margin": None,
                 "passes": None, "note": f"no model for {lang}{why}"}]
    out = [_check("perplexity_value", value, model.get("threshold"), "max", source=model.get("threshold_from"),
                  bucket=row.get("perplexity_bucket"), bucket_cutoffs=model.get("bucket_cutoffs"))]
    ratio = (config.get("perplexity") or {}).get("word_salad_max_ratio", {}).get(lang)
    if ratio is not None:
        check = _check("perplexity_shuffle_ratio", row.get("perplexity_shuffle_ratio"), ratio, "min",
                       source="word_salad_max_ratio (full-length cut-off)")
        if check["value"] is None:
            check.update(passes=True, note="not checked for word salad")
        else:
            # at or below the cut-off is salad: the ratio must exceed it
            check["passes"] = check["value"] > ratio
        out.append(check)
    return out


def _dedup(row: dict[str, Any], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    fit = manifest["stages"]["dedup"].get("fit") or {}
    similarity = row.get("dedup_similarity")
    out = [{"name": "dedup_cluster", "value": row.get("dedup_cluster"), "bound": None, "limit": None,
            "margin": None, "passes": None,
            "note": "in no duplicate cluster" if row.get("dedup_cluster") is None else
            f"cluster kept one document ({fit.get('keep', '?')})"}]
    if similarity is not None:
        out.append(_check("dedup_similarity", similarity, fit.get("jaccard_threshold"), "max",
                          note="estimated Jaccard to its cluster's kept document"))
    return out


def _mixture(row: dict[str, Any], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's source's sampling facts (manifest ``mixture.per_source``):
    ``ratio`` (tokens sampled / available: below 1 the source was
    down-sampled, whole documents chosen by seed) against its target share;
    with ``mixture.phases``, one per phase with the document's copies in it."""
    phases = (manifest.get("mixture") or {}).get("phases")
    if phases:  # a staged mixture: the source's ratio and the document's copies in each phase
        copies = row.get("mixture_phase_repeats") or [None] * len(phases)
        out = []
        for phase, n in zip(phases, copies):
            f = (phase.get("per_source") or {}).get(row.get("source")) or {}
            if "ratio" in f:
                out.append({"name": f"mixture_source_ratio[{phase['name']}]", "value": f["ratio"], "bound": None,
                            "limit": None, "margin": None, "passes": None,
                            "note": f"phase {phase['name']}: source {row.get('source')} sampled {f['ratio']:.3g} x "
                                    f"its available tokens toward target share {f.get('target_share', 0):.3g}; "
                                    f"this document: {n} cop{'y' if n == 1 else 'ies'}"})
        return out
    facts = ((manifest.get("mixture") or {}).get("per_source") or {}).get(row.get("source")) or {}
    if "ratio" not in facts:
        return []
    return [{"name": "mixture_source_ratio", "value": facts["ratio"], "bound": None, "limit": None, "margin": None,
             "passes": None, "note": f"source {row.get('source')}: sampled {facts['ratio']:.3g} x its available "
                                     f"tokens toward target share {facts.get('target_share', 0):.3g} "
                                     "(below 1: documents left out by seed)"}]


def _columns(row: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    """The stage's columns of ``row`` as checks without a threshold: a
    scalar as its value; a record column (a list of structs, e.g. the edits
    a stage made) as its element count with ``records``
    (:func:`pipeline.lineage.record_summary`: the first
    :data:`pipeline.lineage.RECORDS_SHOWN` elements and how many more; an
    empty list counts 0); lists of scalars, structs and nulls are left out."""
    from pipeline.lineage import record_summary

    prefix = f"{stage}_"
    out = []
    for k, v in row.items():
        if not k.startswith(prefix) or v is None or isinstance(v, dict):
            continue
        check = {"name": k, "value": v, "bound": None, "limit": None, "margin": None, "passes": None}
        if isinstance(v, list):
            if not all(isinstance(e, dict) for e in v):
                continue
            summary = record_summary(v)
            check.update(value=summary["count"], records=summary)
        out.append(check)
    return out


def explain_document(version_dir: str | Path, doc_id: str) -> dict[str, Any]:
    """Every stage's measurements of document ``doc_id`` of a version, with the
    threshold that applied and the margin.

    Returns:
        ``{"doc_id", "source", "file", "line", "lang", "chars", "kept": bool,
        "dropped_by": stage or None, "reason": reason code or None,
        "failing": the failing check of the dropping stage (or None),
        "stages": [{"stage", "ran": bool, "checks": [check, ...]}]}``, stages
        in build order; a stage after the dropping one has ``ran`` False. A
        check is ``{"name", "value", "bound" ("min"/"max"/"in"/None),
        "limit", "margin" (signed, rule units, >= 0 passes), "passes", and
        "note"/"source" where useful}``; a stage's record column (a list of
        structs, e.g. ``pii_edits``) is a check whose ``value`` is its
        element count and whose ``records`` is ``{"count", "elements" (the
        first 20, as stored), "more"}``.

    Raises:
        UnknownDocumentError: the id is in no table of the version.
        FileNotFoundError: no such version.
    """
    version_dir = Path(version_dir)
    manifest = load_manifest(version_dir)
    stage_dropped, row = find_document(version_dir, doc_id, manifest)
    return explain_row(doc_id, stage_dropped, row, manifest, _config(version_dir))


def explain_documents(version_dir: str | Path, doc_ids, manifest: dict[str, Any] | None = None,
                      with_text: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`explain_document` for many ids with one read per table part
    (:func:`find_documents`, without the text unless ``with_text``); ids in
    no table are absent."""
    version_dir = Path(version_dir)
    manifest = manifest or load_manifest(version_dir)
    config = _config(version_dir)
    return {doc_id: explain_row(doc_id, stage, row, manifest, config)
            for doc_id, (stage, row) in find_documents(version_dir, doc_ids, manifest, with_text).items()}


def _config(version_dir: Path) -> dict[str, Any]:
    """The version's resolved ``config.yaml`` ({} when absent)."""
    path = version_dir / layout.CONFIG
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def explain_row(doc_id: str, stage_dropped: str | None, row: dict[str, Any], manifest: dict[str, Any],
                config: dict[str, Any]) -> dict[str, Any]:
    """The explanation of one document's table row (see
    :func:`explain_document`)."""
    order = manifest.get("stage_order", list(manifest.get("stages") or {}))
    stages = []
    ran = True
    for stage in order:
        if not ran:
            stages.append({"stage": stage, "ran": False, "checks": []})
            continue
        if stage == "langid":
            checks = _langid(row, manifest, config)
        elif stage == "heuristics":
            checks = _heuristics(row, manifest)
        elif stage == "perplexity":
            checks = _perplexity(row, manifest, config)
        elif stage == "dedup":
            checks = _dedup(row, manifest)
        elif stage == "mixture":
            checks = _columns(row, stage) + _mixture(row, manifest)
        else:
            checks = _columns(row, stage)
        stages.append({"stage": stage, "ran": True, "checks": checks})
        if stage == stage_dropped:
            ran = False
    reason = row.get("reason") if stage_dropped else None
    failing = None
    if stage_dropped:
        rule = reason.split(".", 1)[1] if reason and "." in reason else None
        for check in next(s for s in stages if s["stage"] == stage_dropped)["checks"]:
            if check["name"] == rule or (check["passes"] is False and failing is None):
                failing = check
                if check["name"] == rule:
                    break
    return {"doc_id": doc_id, "source": row.get("source"), "file": row.get("file"), "line": row.get("line"),
            "lang": row.get("langid_lang"), "chars": row.get("chars"), "kept": stage_dropped is None,
            "dropped_by": stage_dropped, "reason": reason, "failing": failing, "stages": stages,
            "text_excerpt": (row.get("text") or "")[:200], "page": page_of(row.get("meta"))}


# The keys of a document's meta that name the web page it came from
# (``pipeline.html``: WARC and HTML inputs; a JSONL/Parquet ``url`` field too).
PAGE_KEYS = ("url", "warc_date", "warc_record_id", "warc_offset", "http_status")


def page_of(meta: str | None) -> dict[str, Any] | None:
    """The web page a document came from: :data:`PAGE_KEYS` found in its
    ``meta`` JSON (None when meta is absent, not JSON, or has no ``url``)."""
    try:
        parsed = json.loads(meta) if meta else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict) or not parsed.get("url"):
        return None
    return {k: parsed[k] for k in PAGE_KEYS if parsed.get(k) is not None}


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_num(v) for v in value) + "]"
    return str(value)


def format_explanation(result: dict[str, Any], all_checks: bool = True) -> str:
    """Plain text: the verdict line (kept, or dropped by stage with reason,
    value and threshold), then per stage one line per check: ``name value
    bound limit margin ok/FAIL note``; under a record column's line (value:
    its element count), one line per shown element
    (:func:`pipeline.lineage.format_record`) and ``... and N more``."""
    from pipeline.lineage import format_records

    head = f"{result['doc_id']}  source {result['source']}  {result['file']} line {result['line']}  " \
           f"lang {result['lang']}  {result['chars']} chars"
    out = [head]
    page = result.get("page")
    if page:
        out.append(f"page {page['url']}" + "".join(f"  {k} {page[k]}" for k in PAGE_KEYS[1:] if k in page))
    if result["kept"]:
        out.append("KEPT by every stage")
    else:
        f = result["failing"]
        out.append(f"DROPPED by {result['dropped_by']}: {result['reason']}" + (
            "" if f is None else f" (value {_num(f.get('value'))}, threshold {f.get('bound') or ''} "
                                 f"{_num(f.get('limit'))}, margin {_num(f.get('margin'))})"))
    for s in result["stages"]:
        if not s["ran"]:
            out.append(f"[{s['stage']}] not reached")
            continue
        of = next((c["thresholds_of"] for c in s["checks"] if c.get("thresholds_of")), None)
        out.append(f"[{s['stage']}]" + (f" thresholds of {of!r}" if of else ""))
        for c in s["checks"]:
            ok = {True: "ok", False: "FAIL", None: ""}[c["passes"]]
            bound = f"{c['bound']} {_num(c['limit'])}" if c["bound"] and c["limit"] is not None else ""
            margin = f"margin {c['margin']:+.4g}" if c["margin"] is not None else ""
            extra = "; ".join(str(x) for x in (c.get("note"), c.get("source") and f"from {c['source']}",
                                               c.get("bucket") and f"bucket {c['bucket']} (cut-offs "
                                               f"{_num(c.get('bucket_cutoffs'))})") if x)
            out.append("  " + "  ".join(x for x in (f"{c['name']:<38}", f"{_num(c['value']):>10}", f"{bound:<16}",
                                                     f"{margin:<16}", f"{ok:<4}", extra) if x is not None).rstrip())
            if c.get("records"):
                out += format_records(c["name"], c["records"], indent="    ")[1:]
    return "\n".join(out) + "\n"


def closest_calls(result: dict[str, Any], count: int = 2) -> list[dict[str, Any]]:
    """The checks a kept document passed most narrowly: the ``count``
    applied checks with the smallest margin relative to their threshold
    (``margin / |limit|``), besides langid's score and the perplexity value,
    which are always listed. For the one-line "why kept" of
    ``lineage --show-text``."""
    fixed, ranked = [], []
    for stage in result["stages"]:
        for c in stage["checks"]:
            if c["margin"] is None or c.get("note", "").startswith("not applied"):
                continue
            if c["name"] in ("langid_score", "perplexity_value"):
                fixed.append(c)
            elif c["limit"]:
                ranked.append((c["margin"] / abs(float(c["limit"])), c["name"], c))
    return fixed + [c for _, _, c in sorted(ranked, key=lambda t: (t[0], t[1]))[:count]]


def why_line(result: dict[str, Any]) -> str:
    """One line: ``kept: langid_score 0.97 (min 0.5, +0.47); ...`` (the
    :func:`closest_calls`), or ``dropped by ...`` for a dropped document."""
    if not result["kept"]:
        f = result["failing"] or {}
        return (f"dropped by {result['dropped_by']}: {result['reason']} (value {_num(f.get('value'))}, "
                f"threshold {_num(f.get('limit'))})")
    return "kept: " + "; ".join(f"{c['name']} {_num(c['value'])} ({c['bound']} {_num(c['limit'])}, "
                                f"{c['margin']:+.3g})" for c in closest_calls(result))
