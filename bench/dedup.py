"""Dedup benchmarks: quality (pairs at known Jaccard levels), share removed per
source on the development corpus, and speed / peak memory at 100k and 1M
documents.

    .venv/bin/python -m bench.dedup [--out DIR] [--sizes 100000 1000000] [--quick] [--multi-part dev|heldout]

``run(out_dir)`` returns a Markdown section and writes ``dedup.json`` under
``out_dir``. Every timing is CPU time (``time.process_time``) of one process
that runs the worker phases in-process (serial map), i.e. one core's seconds.
Each scale size runs in its own subprocess so that its peak RSS
(``ru_maxrss``) is its own. The quality and per-source parts need
``../shared/corpus`` and are skipped (with a note) when it is absent.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.corpus import records

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared" / "corpus"
MULTI_DIR = REPO_ROOT.parent / "shared" / "corpus-multi"
CORPUS_FILES = ("dev-fortunes", "dev-manpages", "dev-kjv", "dev-code", "dev-debref")
PARTITION_DOCS = 8000
# Jaccard bands of the quality benchmark, [lo, hi); the last one is J == 1.
BANDS = [(0.3, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.75), (0.75, 0.8), (0.8, 0.85), (0.85, 0.9), (0.9, 1.0),
         (1.0, 1.0001)]
TARGETS = [0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.83, 0.86, 0.9, 0.93, 0.96, 1.0]
# corpus-multi planted pairs: denser around the 0.8 threshold, where the
# verification step decides.
MULTI_TARGETS = [0.4, 0.6, 0.7, 0.73, 0.76, 0.78, 0.8, 0.82, 0.84, 0.87, 0.9, 0.95, 1.0]
# The verification modes compared by quality_multi (config fields over the defaults).
VERIFY_CONFIGS = {"signature": {"verify": "signature"},
                  "exact, every candidate": {"verify": "exact", "verify_margin_sd": 1000.0},
                  "default (exact within 4 sd)": {}}


# ----------------------------------------------------------------------------- helpers


def _serial(fn, items):
    return [fn(i) for i in items]


def write_partitions(rows: list[dict], out_dir: Path, per_partition: int = PARTITION_DOCS) -> list[Path]:
    """Write documents (``id``, ``source``, ``text``, ``lang``) as stage-input
    partitions (base columns + ``langid_lang`` + ``keep``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for start in range(0, len(rows), per_partition):
        chunk = rows[start:start + per_partition]
        n = len(chunk)
        texts = [r["text"] for r in chunk]
        table = pa.table({
            "id": pa.array([r["id"] for r in chunk], pa.string()),
            "source": pa.array([r["source"] for r in chunk], pa.string()),
            "file": pa.array([r["source"] for r in chunk], pa.string()),
            "line": pa.array(range(start + 1, start + n + 1), pa.int64()),
            "text": pa.array(texts, pa.string()),
            "meta": pa.array(["{}"] * n, pa.string()),
            "lang_hint": pa.array([r.get("lang_hint") for r in chunk], pa.string()),
            "chars": pa.array([len(t) for t in texts], pa.int64()),
            "langid_lang": pa.array([r.get("lang") for r in chunk], pa.string()),
            "keep": pa.array([True] * n, pa.bool_()),
        })
        path = out_dir / f"part-{len(paths):05d}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def read_corpus(corpus: Path) -> list[dict]:
    """All records of the development corpus, with the package language label."""
    rows = []
    for _, _, rec in records(corpus, CORPUS_FILES):
        lang = rec.get("lang") or ("code" if rec["source"] == "code" else None)
        rows.append({"id": rec["id"], "source": rec["source"], "text": rec["text"], "lang": lang,
                     "lang_hint": "code" if rec["source"] == "code" else None,
                     "script": rec.get("script")})
    return rows


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``, MB). Unlike ``ru_maxrss``
    it belongs to the process's own address space, so a child started from a
    large parent does not inherit the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PhaseTimer:
    """Wraps the phase functions of the stages.dedup modules with CPU timers."""

    NAMES = {"dedup.exact": ("document_keys", "check_unique_ids", "exact_group"),
             "dedup.signatures": ("partition_signatures",),
             "dedup.lsh": ("band_group_edges", "distinct_candidates"),
             "dedup.components": ("connected_components",),
             "dedup.cluster": ("component_members", "component_keepers", "final_records", "partition_removed"),
             "dedup.lines": ("partition_lines", "duplicate_lines")}

    def __init__(self):
        import importlib

        self.seconds: Counter = Counter()
        self.peak_after: dict[str, float] = {}  # VmHWM (MB) when the phase last returned
        self.saved = []
        for module_name, names in self.NAMES.items():
            module = importlib.import_module(f"stages.{module_name}")
            for name in names:
                fn = getattr(module, name)
                self.saved.append((module, name, fn))
                setattr(module, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def timed(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.process_time() - t0
                self.peak_after[name] = round(peak_rss_mb(), 1)
        return timed

    def restore(self):
        for module, name, fn in self.saved:
            setattr(module, name, fn)


def run_dedup(paths: list[Path], work: Path, keep_outputs: bool = True, **config) -> tuple[dict, pa.Table, dict]:
    """fit + process over partitions in this process. Returns (facts, output
    rows: id, source, keep, reason, dedup_cluster, dedup_similarity,
    dedup_chars_removed, chars -- or only ``keep`` when not ``keep_outputs``;
    CPU seconds per phase, and ``peak_rss_after_fit_mb``)."""
    from stages.base import Partitions, StageContext
    from stages.dedup import Config, DedupStage

    ctx = StageContext(work_dir=work, cache_dir=work / "cache", seed=0, tools_dir=work)
    timer = PhaseTimer()
    try:
        t0 = time.process_time()
        facts = DedupStage(Config(**config), ctx).fit(Partitions(paths, _serial)).facts
        fit_s = time.process_time() - t0
        rss_fit = peak_rss_mb()
        worker = DedupStage(Config(**config), ctx)
        t0 = time.process_time()
        outs = []
        for p in paths:
            worker.partition = Path(p).name  # as the executor does
            out = worker.process(pq.read_table(p).filter(pc.field("keep")))
            outs.append(out.select(["id", "source", "chars", "keep", "reason", "dedup_cluster",
                                    "dedup_similarity", "dedup_chars_removed"]) if keep_outputs
                        else out.select(["keep"]))
        process_s = time.process_time() - t0
    finally:
        timer.restore()
    seconds = dict(timer.seconds, fit=fit_s, process=process_s)
    seconds = {k: round(v, 3) for k, v in seconds.items()}
    seconds["peak_rss_after_fit_mb"] = round(rss_fit, 1)
    seconds["peak_rss_after_phase_mb"] = dict(timer.peak_after)
    return facts, pa.concat_tables(outs), seconds


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- quality


def _true_jaccard(a: str, b: str, lang: str, config) -> float:
    """Exact shingle Jaccard of two texts, through the stage's own shingling
    (:func:`stages.dedup.signatures.document_shingle_sets`)."""
    from stages.dedup.signatures import document_shingle_sets, exact_jaccard

    sa, sb = document_shingle_sets([a, b], [lang, lang], config)
    return exact_jaccard(sa, sb) if len(sa) or len(sb) else 1.0


_CJK_TOKEN = None


def _is_char_token(ch: str) -> bool:
    global _CJK_TOKEN
    if _CJK_TOKEN is None:
        import re

        from stages.text import CJK_CHAR_CLASS
        _CJK_TOKEN = re.compile(f"[{CJK_CHAR_CLASS}]")
    return bool(_CJK_TOKEN.fullmatch(ch))


def _edit(text: str, target: float, lang: str, n: int, pool: list[str], rng: random.Random) -> str:
    """A copy of ``text`` whose shingle Jaccard to it is about ``target``:
    a random share f of the tokens (words; CJK characters for character-shingled
    languages: zh, ja, ko) is replaced by tokens of other documents, with f from
    J = s / (2 - s), s = (1 - f)^n. ``target == 1`` changes only case, spacing
    and punctuation."""
    from stages.text import CJK_LANGS

    if target >= 1.0:
        if rng.random() < 0.5:
            return "  " + text.upper().replace(" ", "  ") + "\n"  # equal after exact normalization
        return text.replace("\n", " ;\n", 3) + " !"  # equal after near normalization only
    s = 2 * target / (1 + target)
    f = 1 - s ** (1 / n)
    if lang in CJK_LANGS:
        tokens = list(text)
        positions = [i for i, ch in enumerate(tokens) if _is_char_token(ch)]
    else:
        tokens = text.split(" ")
        positions = list(range(len(tokens)))
    for i in rng.sample(positions, min(len(positions), max(1, round(f * len(positions))))):
        tokens[i] = rng.choice(pool)
    return ("" if lang in CJK_LANGS else " ").join(tokens)


def _pool(lang: str, cands: list[dict], rng: random.Random) -> list[str]:
    from stages.text import CJK_LANGS

    sample = rng.sample(cands, min(50, len(cands)))
    if lang in CJK_LANGS:
        return [c for r in sample for c in r["text"] if _is_char_token(c)]
    return [w for r in sample for w in r["text"].split(" ") if w.isalpha()]


def planted_pairs(bases: dict[str, list[dict]], per_language: int, targets: list[float], seed: int,
                  config) -> tuple[list[dict], list[dict]]:
    """Documents and pairs for the quality benchmark: per language up to
    ``per_language`` base documents (``id``, ``text``), each with one copy
    edited towards the next target Jaccard (cycling ``targets``).

    Returns:
        ``(documents, pairs)``: documents as :func:`write_partitions` rows
        (``source`` = the language); pairs ``{"lang", "a", "b", "target",
        "jaccard"}`` with the true shingle Jaccard of the pair.
    """
    from stages.text import CJK_LANGS

    rng = random.Random(seed)
    docs, pairs = [], []
    for lang, cands in sorted(bases.items()):
        if len(cands) < 2:
            continue
        chosen = rng.sample(cands, min(per_language, len(cands)))
        pool = _pool(lang, cands, rng)
        if not pool:
            continue
        n = config.ngram_chars if lang in CJK_LANGS else config.ngram_words
        for i, r in enumerate(chosen):
            target = targets[i % len(targets)]
            copy = _edit(r["text"], target, lang, n, pool, rng)
            a, b = f"q:{lang}:{i:04d}:a", f"q:{lang}:{i:04d}:b"
            docs += [{"id": a, "source": lang, "text": r["text"], "lang": lang},
                     {"id": b, "source": lang, "text": copy, "lang": lang}]
            pairs.append({"lang": lang, "a": a, "b": b, "target": target,
                          "jaccard": _true_jaccard(r["text"], copy, lang, config)})
    return docs, pairs


def _prf(sel: list[dict], threshold: float) -> dict:
    tp = sum(p["merged"] and p["jaccard"] >= threshold for p in sel)
    fp = sum(p["merged"] and p["jaccard"] < threshold for p in sel)
    fn = sum((not p["merged"]) and p["jaccard"] >= threshold for p in sel)
    prec = tp / (tp + fp) if tp + fp else None
    rec = tp / (tp + fn) if tp + fn else None
    f1 = 2 * prec * rec / (prec + rec) if prec and rec else (0.0 if prec == 0 or rec == 0 else None)
    return {"pairs": len(sel), "merged": tp + fp, "merged_share": (tp + fp) / len(sel) if sel else None,
            "precision": prec, "recall": rec, "f1": f1}


def score_pairs(docs: list[dict], pairs: list[dict], work: Path, langs: tuple[str, ...] = ("all",),
                **config) -> dict:
    """Run dedup (``config`` over the defaults) on the planted pairs; a pair is
    merged when both documents end in one cluster. Returns per band (and per
    language of ``langs``; ``all`` = every pair) pairs, merged, merged share,
    precision, recall, F1; ``overall`` P/R/F1, ``near`` P/R/F1 on pairs with
    true J in [0.7, 0.9), ``fit_cpu_s`` (fit's CPU seconds) and the dedup
    facts ``candidate_pairs``, ``verified_edges``, ``exact_checks``."""
    import shutil

    from stages.dedup import Config

    threshold = Config(**config).jaccard_threshold
    shutil.rmtree(work, ignore_errors=True)
    paths = write_partitions(docs, work / "parts", per_partition=500)
    facts, out, seconds = run_dedup(paths, work / "fit", **config)
    cluster = dict(zip(out["id"].to_pylist(), out["dedup_cluster"].to_pylist()))
    members = Counter(c for c in cluster.values() if c is not None)
    scored = [dict(p) for p in pairs]
    cross = 0
    for p in scored:
        ca, cb = cluster[p["a"]], cluster[p["b"]]
        p["merged"] = ca is not None and ca == cb
        own = 2 if p["merged"] else 0
        cross += sum(1 for c in (ca, cb) if c is not None) and max(0, members[ca or cb] - own)
    # clusters of a planted copy that differs from its base only in case, spacing or punctuation (J = 1):
    # how many keep the copy (it has more raw characters) rather than the base
    copies = [p for p in scored if p["target"] >= 1.0 and p["merged"]]
    result = {"copies_kept": sum(cluster[p["a"]] == p["b"] for p in copies), "copy_clusters": len(copies),
              "threshold": threshold, "pairs": len(scored), "bands": [], "cross_merged_documents": cross,
              "config": config, "fit_cpu_s": seconds["fit"],
              **{k: facts.get(k) for k in ("candidate_pairs", "verified_edges", "exact_checks")}}
    for lang in langs:
        for lo, hi in BANDS:
            sel = [p for p in scored if (lang == "all" or p["lang"] == lang) and lo <= p["jaccard"] < hi]
            band = f"[{lo:.2f}, {min(hi, 1.0):.2f}{']' if hi > 1 else ')'}"
            result["bands"].append({"lang": lang, "band": band, **_prf(sel, threshold)})
    below = [p for p in scored if p["jaccard"] < 0.7]
    result["merged_share_below_0.7"] = sum(p["merged"] for p in below) / max(len(below), 1)
    result["overall"] = _prf(scored, threshold)
    result["near"] = _prf([p for p in scored if 0.7 <= p["jaccard"] < 0.9], threshold)
    return result


def quality(corpus: Path, work: Path, per_language: int = 600, seed: int = 7, **config) -> dict:
    """Pairs at known Jaccard levels from ``../shared/corpus`` text (en: KJV,
    fortunes, debref; zh: Simplified man pages, fortunes); precision, recall,
    F1 per band (:func:`score_pairs`)."""
    from stages.dedup import Config

    rows = read_corpus(corpus)
    bases = {
        "en": [r for r in rows if r["lang"] == "en" and len(r["text"].split()) >= 40],
        "zh": [r for r in rows if r["lang"] == "zh" and r.get("script") != "Hant"
               and sum("\u4e00" <= c <= "\u9fff" for c in r["text"]) >= 80],
    }
    docs, pairs = planted_pairs(bases, per_language, TARGETS, seed, Config(**config))
    return score_pairs(docs, pairs, work, langs=("en", "zh", "all"), **config)


def multi_bases(part: str, work: Path, min_words: int = 40, min_chars: int = 80) -> dict[str, list[dict]]:
    """Base documents for planted pairs from ``../shared/corpus-multi``
    (:func:`bench.multi_split.records` of ``part``, ``dev`` or ``heldout``):
    records whose language is usable (:func:`bench.multi_split.gold`: not
    mostly untranslated English), of at least ``min_words`` words (character-
    shingled languages: ``min_chars`` CJK characters), and in no dedup
    cluster with another such record under the default config (so that a
    planted pair meets no third document), by language."""
    from bench.multi_split import gold, records
    from stages.text import CJK_LANGS

    rows = []
    for rec in records(part):
        lang = gold(rec)
        text = rec["text"]
        if lang is None:
            continue
        size = sum(_is_char_token(c) for c in text) if lang in CJK_LANGS else len(text.split())
        if size >= (min_chars if lang in CJK_LANGS else min_words):
            rows.append({"id": rec["id"], "source": rec["source"], "text": text, "lang": lang})
    paths = write_partitions(rows, work / "bases")
    _, out, _ = run_dedup(paths, work / "bases-fit")
    clustered = {i for i, c in zip(out["id"].to_pylist(), out["dedup_cluster"].to_pylist()) if c is not None}
    bases: dict[str, list[dict]] = {}
    for r in rows:
        if r["id"] not in clustered:
            bases.setdefault(r["lang"], []).append(r)
    return bases


def quality_multi(part: str, work: Path, per_language: int = 60, seed: int = 7,
                  configs: dict[str, dict] | None = None) -> dict:
    """The planted-pair benchmark on ``../shared/corpus-multi`` ``part``
    (:func:`multi_bases`; up to ``per_language`` pairs per language, targets
    :data:`MULTI_TARGETS`), once per named config of ``configs`` (default:
    :data:`VERIFY_CONFIGS`). Returns ``{"part", "languages", "pairs", "runs":
    {name: score_pairs(...)}}``."""
    from stages.dedup import Config

    bases = multi_bases(part, work)  # part "heldout": the final measurement only, never for tuning
    docs, pairs = planted_pairs(bases, per_language, MULTI_TARGETS, seed, Config())
    runs = {name: score_pairs(docs, pairs, work / "run", **cfg)
            for name, cfg in (configs or VERIFY_CONFIGS).items()}
    return {"part": part, "languages": len({p["lang"] for p in pairs}), "pairs": len(pairs), "runs": runs}


# ----------------------------------------------------------------------------- per source


def per_source(corpus: Path, work: Path) -> dict:
    """Share of documents (and characters) removed per source on the corpus,
    for the default config, without script folding, and with line dedup."""
    rows = read_corpus(corpus)
    paths = write_partitions(rows, work / "parts")
    runs = {}
    for name, config in (("default", {}), ("fold none", {"fold_chinese_script": "none"}),
                         ("default + line_dedup", {"line_dedup": True})):
        facts, out, seconds = run_dedup(paths, work / name.replace(" ", "_").replace("+", ""), **config)
        table = {}
        for src, chars, reason, removed in zip(out["source"].to_pylist(), out["chars"].to_pylist(),
                                               out["reason"].to_pylist(), out["dedup_chars_removed"].to_pylist()):
            s = table.setdefault(src, {"documents": 0, "chars": 0, "dedup.exact_duplicate": 0,
                                       "dedup.near_duplicate": 0, "dedup.duplicate_lines": 0,
                                       "chars_removed": 0})
            s["documents"] += 1
            s["chars"] += chars
            if reason:
                s[reason] += 1
                s["chars_removed"] += chars
            elif removed:
                s["chars_removed"] += removed
        runs[name] = {"facts": {k: v for k, v in facts.items() if k != "s_curve"}, "per_source": table,
                      "cpu_seconds": seconds}
    return runs


# ----------------------------------------------------------------------------- scale


def synthetic_rows(start: int, count: int, seed: int) -> list[dict]:
    """Synthetic English-like documents: 20-80 words from a Zipf-distributed
    vocabulary of 30,000 letter strings; 3% exact copies and 10% one-word
    edits of an earlier document of the same chunk (seeded by ``seed`` and ``start``)."""
    vocab_rng = np.random.default_rng(12345)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(vocab_rng.choice(letters, size=int(k))) for k in vocab_rng.integers(2, 10, 30000)]
    rng = np.random.default_rng([seed, start])
    lengths = rng.integers(20, 81, count)
    words = np.minimum(rng.zipf(1.2, int(lengths.sum())) - 1, len(vocab) - 1)
    vocab_arr = np.array(vocab, dtype=object)
    rows, offset = [], 0
    texts: list[str] = []
    kinds = rng.random(count)
    for i in range(count):
        if i > 10 and kinds[i] < 0.03:
            text = texts[int(rng.integers(0, i))]
        elif i > 10 and kinds[i] < 0.13:
            toks = texts[int(rng.integers(0, i))].split(" ")
            toks[int(rng.integers(0, len(toks)))] = vocab[int(rng.integers(0, len(vocab)))]
            text = " ".join(toks)
        else:
            text = " ".join(vocab_arr[words[offset:offset + lengths[i]]])
        offset += lengths[i]
        texts.append(text)
        rows.append({"id": f"syn:{start + i:09d}", "source": "synthetic", "text": text, "lang": "en"})
    return rows


def scale_run(n: int, work: Path) -> dict:
    """One size, run in its own process: generate, dedup, measure."""
    work.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    chars = 0
    for start in range(0, n, PARTITION_DOCS):
        rows = synthetic_rows(start, min(PARTITION_DOCS, n - start), seed=1)
        chars += sum(len(r["text"]) for r in rows)
        path = write_partitions(rows, work / "tmp")[0]
        final = work / "parts" / f"part-{len(paths):05d}.parquet"
        final.parent.mkdir(parents=True, exist_ok=True)
        path.rename(final)
        paths.append(final)
    rss_after_generation = peak_rss_mb()
    facts, out, seconds = run_dedup(paths, work / "fit", keep_outputs=False)
    sig_s = seconds["partition_signatures"]
    return {
        "documents": n, "chars": chars, "facts": {k: v for k, v in facts.items() if k != "s_curve"},
        "cpu_seconds": seconds,
        "signatures_per_s": round(facts["signed_documents"] / sig_s),
        "mchars_per_s_signatures": round(chars / sig_s / 1e6, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_rss_after_fit_mb": seconds.pop("peak_rss_after_fit_mb"),
        "peak_rss_after_phase_mb": seconds.pop("peak_rss_after_phase_mb"),
        "rss_after_generation_mb": round(rss_after_generation, 1),
        "removed": int(pc.sum(pc.invert(out["keep"])).as_py()),
    }


# ----------------------------------------------------------------------------- report


def _fmt(v, digits=3):
    return "–" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def run(out_dir: Path, sizes: tuple[int, ...] = (100_000, 1_000_000), corpus: Path | None = None,
        quick: bool = False, multi_part: str = "dev") -> str:
    """Run every part; write ``out_dir/dedup.json``; return a Markdown section.
    ``multi_part``: the corpus-multi part of the planted-pair comparison
    (``dev`` while tuning; the held-out part is for the final measurement)."""
    import shutil
    import tempfile

    corpus = corpus if corpus is not None else (SHARED if SHARED.exists() else None)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"load_average": list(__import__("os").getloadavg())}
    md = ["## Dedup", "",
          f"CPU seconds of one process (serial map, i.e. one core); load average at start "
          f"{result['load_average'][0]:.2f} on {__import__('os').cpu_count()} CPUs.", ""]
    tmp = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    try:
        if corpus is None:
            md += ["Quality and per-source parts skipped: no ../shared/corpus.", ""]
        else:
            q = quality(corpus, tmp / "quality", per_language=150 if quick else 600)
            result["quality"] = q
            md += [f"### Quality: pairs at known Jaccard (threshold {q['threshold']}, default config)", "",
                   "Base documents from the corpus (en: KJV, fortunes, debref; zh: Simplified man pages, "
                   "fortunes, debref), each with one copy edited by replacing a share of its words (zh: "
                   "characters) with those of other documents; J is the true shingle Jaccard of the pair. "
                   "precision/recall: a pair with J >= threshold that ends in one cluster is a true "
                   "positive, one below the threshold that ends in one cluster a false positive.", "",
                   _md_table(["lang", "band", "pairs", "merged", "precision", "recall", "F1"],
                             [[b["lang"], b["band"], b["pairs"], b["merged"], _fmt(b["precision"]),
                               _fmt(b["recall"]), _fmt(b["f1"])] for b in q["bands"]]), "",
                   f"Overall precision {q['overall']['precision']:.3f}, recall {q['overall']['recall']:.3f}, "
                   f"F1 {q['overall']['f1']:.3f}; pairs with J < 0.7 merged: "
                   f"{q['merged_share_below_0.7']:.2%}; documents merged with another pair's document: "
                   f"{q['cross_merged_documents']}.", ""]
            s = per_source(corpus, tmp / "sources")
            result["per_source"] = s
            md += ["### Share removed per source on ../shared/corpus", ""]
            for name, run_ in s.items():
                rows = []
                for src, v in sorted(run_["per_source"].items()):
                    rows.append([src, v["documents"], f"{v['dedup.exact_duplicate']} ({v['dedup.exact_duplicate'] / v['documents']:.2%})",
                                 f"{v['dedup.near_duplicate']} ({v['dedup.near_duplicate'] / v['documents']:.2%})",
                                 v["dedup.duplicate_lines"], f"{v['chars_removed'] / max(v['chars'], 1):.2%}"])
                md += [f"**{name}** (fit {run_['cpu_seconds']['fit']:.1f} CPU s)", "",
                       _md_table(["source", "documents", "exact", "near", "all lines dup", "chars removed"], rows), ""]
            d = s["default"]
            sig = d["cpu_seconds"]["partition_signatures"]
            chars = sum(v["chars"] for v in d["per_source"].values())
            result["corpus_speed"] = {"signatures_per_s": d["facts"]["signed_documents"] / sig,
                                      "mchars_per_s": chars / sig / 1e6}
            md += [f"Signature step on the corpus: {d['facts']['signed_documents'] / sig:,.0f} signatures/s, "
                   f"{chars / sig / 1e6:.2f} M characters/s per core (peer reference 0.73 M).", ""]
        if MULTI_DIR.exists():
            qm = quality_multi(multi_part, tmp / "multi")
            result["quality_multi"] = qm
            runs = qm["runs"]
            md += [f"### Planted pairs on corpus-multi {qm['part']} ({qm['pairs']:,} pairs, {qm['languages']} "
                   "languages): verification modes", "",
                   "Base documents: records usable for their language (bench.multi_split.gold), in no cluster "
                   "with each other; merged share per band of true J (below 0.8 a merge is a false positive, "
                   "above it a true one).", "",
                   _md_table(["band"] + list(runs),
                             [[b["band"]] + [_fmt(r["bands"][i]["merged_share"]) for r in runs.values()]
                              for i, b in enumerate(next(iter(runs.values()))["bands"])]
                             + [["F1 (all pairs)"] + [_fmt(r["overall"]["f1"]) for r in runs.values()],
                                ["F1 (J in [0.7, 0.9))"] + [_fmt(r["near"]["f1"]) for r in runs.values()],
                                ["exact checks"] + [str(r["exact_checks"]) for r in runs.values()],
                                ["padded copies kept"] + [f"{r['copies_kept']}/{r['copy_clusters']}"
                                                          for r in runs.values()],
                                ["fit CPU s"] + [f"{r['fit_cpu_s']:.2f}" for r in runs.values()]]), ""]
        else:
            md += ["Planted pairs on corpus-multi skipped: no ../shared/corpus-multi.", ""]
        scale = []
        for n in sizes:
            out_json = tmp / f"scale-{n}.json"
            subprocess.run([sys.executable, "-m", "bench.dedup", "--scale", str(n), "--scale-out", str(out_json),
                            "--work", str(tmp / f"scale-{n}")], check=True, cwd=REPO_ROOT)
            scale.append(json.loads(out_json.read_text()))
            shutil.rmtree(tmp / f"scale-{n}", ignore_errors=True)
        result["scale"] = scale
        if scale:
            md += ["### Speed and peak memory (synthetic documents, one process per size)", "",
                   _md_table(["documents", "M chars", "signatures/s", "M chars/s (signatures)", "exact s",
                              "LSH (bucket + verify) s", "clustering s", "fit s", "spill groups (ids/exact/bands)",
                              "peak RSS after generation MB", "peak RSS after fit MB", "peak RSS MB"],
                             [[f"{r['documents']:,}", f"{r['chars'] / 1e6:.0f}", f"{r['signatures_per_s']:,}",
                               r["mchars_per_s_signatures"],
                               f"{sum(r['cpu_seconds'].get(k, 0) for k in ('document_keys', 'check_unique_ids', 'exact_group')):.1f}",
                               f"{sum(r['cpu_seconds'].get(k, 0) for k in ('band_group_edges', 'distinct_candidates')):.1f}",
                               f"{sum(r['cpu_seconds'].get(k, 0) for k in ('connected_components', 'component_keepers', 'final_records', 'partition_removed')):.1f}",
                               f"{r['cpu_seconds']['fit']:.1f}",
                               "/".join(str(r["facts"]["spill_groups"][k]) for k in ("ids", "exact", "bands")),
                               r["rss_after_generation_mb"], r["peak_rss_after_fit_mb"], r["peak_rss_mb"]]
                              for r in scale]), "",
                   "Peak RSS is the process's `VmHWM` (generation, then fit with the worker phases run "
                   "in-process, then process()); the driver-only growth is bounded by one spill group plus "
                   "state proportional to duplicates.", ""]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out_dir / "dedup.json").write_text(json.dumps(result, indent=2, default=str))
    return "\n".join(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--quick", action="store_true", help="fewer quality pairs")
    ap.add_argument("--multi-part", choices=("dev", "heldout"), default="dev",
                    help="corpus-multi part of the planted-pair comparison (default dev)")
    ap.add_argument("--scale", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scale-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scale:
        args.scale_out.write_text(json.dumps(scale_run(args.scale, args.work)))
        return
    md = run(args.out, tuple(args.sizes), quick=args.quick, multi_part=args.multi_part)
    (args.out / "dedup.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
