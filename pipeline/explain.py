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
  column and bound come from ``stages.heuristics.rules.RULES`` (imported on
  use: this module is not part of the training-job wall of loader/lineage).
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

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from pipeline import layout
from pipeline.manifest import load_manifest


class UnknownDocumentError(LookupError):
    """The id is in no table of the version (neither kept nor dropped)."""


def find_document(version_dir: Path, doc_id: str, manifest: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(stage, row)``: the row of ``doc_id`` in ``documents/`` (stage None:
    kept) or in ``decisions/<stage>/`` (dropped by ``stage``), without the
    ``text`` column's bulk beyond this one document.

    Raises:
        UnknownDocumentError: no table holds the id.
    """
    from pipeline.lineage import row_groups_for

    def lookup(table: str, stage: str | None = None) -> dict[str, Any] | None:
        path = layout.id_table_part(version_dir, manifest, table, doc_id, stage)
        if path is None:
            return None
        parquet = pq.ParquetFile(path)
        groups = row_groups_for(parquet, "id", doc_id, doc_id)
        if not groups:
            return None
        rows = parquet.read_row_groups(groups)
        rows = rows.filter(pc.equal(rows["id"], doc_id))
        return rows.to_pylist()[0] if rows.num_rows else None

    row = lookup(layout.DOCUMENTS)
    if row is not None:
        return None, row
    for stage in manifest.get("stage_order", []):
        row = lookup(layout.DECISIONS, stage)
        if row is not None:
            return stage, row
    raise UnknownDocumentError(f"{doc_id!r} is in no table of {version_dir.name}: not kept (documents/) and not "
                               f"dropped by any stage (decisions/<stage>/); ids are '<source>:<file>:<line>'")


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
    from stages.heuristics.rules import RULES

    table = manifest["stages"]["heuristics"].get("settings", {}).get("thresholds") or {}
    lang = row.get("langid_lang")
    key = lang if lang in table else "default"
    thresholds = table.get(key, {})
    words = row.get("heuristics_num_words")
    long_min = thresholds.get("long_document_min_words")
    short = long_min is not None and words is not None and words < long_min
    out = []
    for rule in RULES:
        if rule.name not in thresholds:
            continue
        value = row.get(f"heuristics_{rule.value}")
        check = _check(rule.name, value, thresholds[rule.name], rule.bound, value_column=f"heuristics_{rule.value}",
                       thresholds_of=key, family=rule.family)
        if short and rule.long_only:
            check.update(passes=True, note=f"not applied: fewer than {long_min} words")
        elif value is None:
            check.update(passes=rule.undefined_passes, note="value undefined"
                         + (" (passes)" if rule.undefined_passes else " (fails)"))
        out.append(check)
    return out


def _perplexity(row: dict[str, Any], manifest: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    fit = manifest["stages"]["perplexity"].get("fit") or {}
    lang = row.get("langid_lang")
    model = (fit.get("languages") or {}).get(lang)
    value = row.get("perplexity_value")
    if model is None:
        unscored = ((fit.get("coverage") or {}).get("unscored") or {}).get(lang) or {}
        return [{"name": "perplexity_value", "value": value, "bound": "max", "limit": None, "margin": None,
                 "passes": None, "note": f"no model for {lang}" + (f": {unscored['why']}" if unscored.get("why") else "")}]
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


def _columns(row: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    prefix = f"{stage}_"
    return [{"name": k, "value": v, "bound": None, "limit": None, "margin": None, "passes": None}
            for k, v in row.items() if k.startswith(prefix) and v is not None and not isinstance(v, (list, dict))]


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
        "note"/"source" where useful}``.

    Raises:
        UnknownDocumentError: the id is in no table of the version.
        FileNotFoundError: no such version.
    """
    version_dir = Path(version_dir)
    manifest = load_manifest(version_dir)
    config_path = version_dir / layout.CONFIG
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    stage_dropped, row = find_document(version_dir, doc_id, manifest)
    order = manifest.get("stage_order", list(manifest["stages"]))
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
            "text_excerpt": (row.get("text") or "")[:200]}


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
    bound limit margin ok/FAIL note``."""
    head = f"{result['doc_id']}  source {result['source']}  {result['file']} line {result['line']}  " \
           f"lang {result['lang']}  {result['chars']} chars"
    out = [head]
    if result["kept"]:
        out.append("KEPT by every stage")
    else:
        f = result["failing"] or {}
        out.append(f"DROPPED by {result['dropped_by']}: {result['reason']} (value {_num(f.get('value'))}, "
                   f"threshold {f.get('bound') or ''} {_num(f.get('limit'))}, margin {_num(f.get('margin'))})")
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
    return "\n".join(out) + "\n"
