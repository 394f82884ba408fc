"""Multilingual quality benchmark on the held-out part of ``../shared/corpus-multi``.

Measures, on text no default was tuned on (:mod:`bench.multi_split`):

* **language ID**: the stage's ``langid_lang`` against the record's gold
  language, next to the bare lid.176 model (``predict``, k=1, on the whole
  document with its whitespace folded to single spaces), per source, per
  language and for documents of at least 200 characters; on partly
  translated pages (10-40% untranslated English, judged against their
  locale's language) and on other shapes of the gold documents
  (:func:`shape_variants`);
* **drop shares**: the share of well-formed documentation each quality stage
  drops, per detected language (the preset that judged it) and per reason;
  *well-formed* = every held-out page except the aptitude ``ld-idm*`` pages,
  which are terminal-screen dumps (``<pre>`` only), and *navigation pages*,
  which hold no sentence (:func:`is_navigation_page`: a gnome-help index
  page such as ``Mouse, Touchpad & Touchscreen / Common problems / Tips``;
  the issue counts such pages as garbage, so dropping them is no loss);
  their drop share is reported on its own line; dedup drops are counted
  apart (untranslated copies of the English page are duplicates by design);
* **mixed pages**: ja and zh pages with 10-90% untranslated English
  paragraphs (``meta.en_identical_frac``), the share any quality rule drops;
* **word salad**: every held-out en and zh page of at least 300 characters,
  with the words of each line shuffled (seeded by id; rjieba words for zh),
  added as sources ``salad-en``/``salad-zh``: the share dropped, by reason,
  next to the share of their originals lost;
* **perplexity coverage**: the languages the build scored and the ones it
  left unscored (from the manifest's ``perplexity`` facts and warnings).

It runs one real build (``pipeline.build``) of those documents with the
default config (``configs/default.yaml``) except: every language allowed,
the sources above (plus the default's KenLM reference source), and every
kept document used (no mixture budget or weights). Results:
``out/multi.json`` and the returned Markdown.

    .venv/bin/python -m bench.multi [--out bench-results] [--part heldout] [--workers 2] [--multi DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from bench.multi_split import MULTI, correct, gold, records
from pipeline import layout
from pipeline.config import REPO_ROOT

SALAD_LANGS = ("en", "zh")
SALAD_MIN_CHARS = 300
QUALITY_STAGES = ("langid", "heuristics", "perplexity")


def _is_screen_dump(rec: dict) -> bool:
    return rec["source"] == "aptitude-doc" and "ld-idm" in str((rec.get("meta") or {}).get("page"))


_SENTENCE_END = re.compile(r"[.!?:;。！？：；…]['\")\]」』”’]*$")


def is_navigation_page(text: str) -> bool:
    """Whether a page holds no sentence: no non-blank line of at least 20
    characters that ends with sentence punctuation (``. ! ? : ;`` or their
    full-width forms, closing quotes and brackets allowed after them)."""
    return not any(len(line.strip()) >= 20 and _SENTENCE_END.search(line.strip())
                   for line in text.splitlines())


def shuffle_words(text: str, lang: str, seed: str) -> str:
    """``text`` with the words of each line in a random order (seeded);
    whitespace-separated words, rjieba words for ``zh``; line breaks kept."""
    rng = random.Random(seed)
    out = []
    for line in text.split("\n"):
        if lang == "zh":
            import rjieba

            tokens = [t for t in rjieba.cut(line) if not t.isspace()]
            rng.shuffle(tokens)
            out.append("".join(tokens))
        else:
            tokens = line.split()
            rng.shuffle(tokens)
            out.append(" ".join(tokens))
    return "\n".join(out)


def _write_jsonl_zst(path: Path, rows: list[dict]) -> None:
    import zstandard

    buf = io.StringIO()
    for row in rows:
        buf.write(json.dumps(row, ensure_ascii=False) + "\n")
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(buf.getvalue().encode("utf-8")))


def prepare(part: str, work: Path, multi: Path = MULTI) -> tuple[dict, dict[str, dict]]:
    """Write the benchmark's sources under ``work``; return the config and
    ``{id: record}`` of every document written (with ``bench_kind``)."""
    recs = list(records(part, multi))
    by_source: dict[str, list[dict]] = defaultdict(list)
    index: dict[str, dict] = {}
    for rec in recs:
        name = "gnome-help" if rec["source"] == "gnome-help" else "manuals"
        rec["bench_kind"] = ("screen_dump" if _is_screen_dump(rec) else
                             "navigation" if is_navigation_page(rec["text"]) else "doc")
        by_source[name].append({"id": rec["id"], "text": rec["text"]})
        index[rec["id"]] = rec
    for rec in recs:
        lang = gold(rec)
        if lang in SALAD_LANGS and len(rec["text"]) >= SALAD_MIN_CHARS and rec["bench_kind"] == "doc":
            sid = rec["id"] + "#salad"
            by_source[f"salad-{lang}"].append({"id": sid, "text": shuffle_words(rec["text"], lang, sid)})
            index[sid] = {"id": sid, "source": f"salad-{lang}", "lang": lang, "bench_kind": "salad",
                          "original": rec["id"]}
    work.mkdir(parents=True, exist_ok=True)
    default = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    sources = {}
    for name, rows in sorted(by_source.items()):
        path = work / f"{name}.jsonl.zst"
        _write_jsonl_zst(path, rows)
        sources[name] = {"paths": [str(path)], "id_field": "id"}
    ref = default["perplexity"]["reference_source"]
    sources[ref] = {"paths": [str(REPO_ROOT / p) for p in default["sources"][ref]["paths"]]}
    cfg = {k: v for k, v in default.items() if k not in ("sources", "mixture", "corpora_dir")}
    cfg["sources"] = sources
    cfg["langid"] = dict(default.get("langid") or {}, allowed_languages=None)
    # every kept document goes on (no budget, no weights): a source the quality stages empty
    # (all of its word salad dropped) is then no error of the mixture
    cfg["mixture"] = {}
    return cfg, index


def _decisions(vdir: Path) -> dict[str, tuple[str | None, str | None]]:
    """``{id: (langid_lang, reason or None)}`` of every document of a built
    version: dropped ones from ``decisions/<stage>/``, kept ones from
    ``documents/``."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for part in sorted((vdir / layout.DECISIONS).glob("*/*.parquet")):
        table = pq.read_table(part, columns=["id", "source", "langid_lang", "reason"])
        for i, src, lang, reason in zip(*(table.column(c).to_pylist()
                                          for c in ("id", "source", "langid_lang", "reason"))):
            out[_record_id(i, src)] = (lang, reason)
    for part in sorted((vdir / layout.DOCUMENTS).glob("*.parquet")):
        table = pq.read_table(part, columns=["id", "source", "langid_lang"])
        for i, src, lang in zip(*(table.column(c).to_pylist() for c in ("id", "source", "langid_lang"))):
            out.setdefault(_record_id(i, src), (lang, None))
    return out


def _record_id(doc_id: str, source: str) -> str:
    """The record's own id: a document id is ``<source>:<record id>``."""
    return doc_id[len(source) + 1:] if doc_id.startswith(source + ":") else doc_id


def bare_labels(texts: list[str]) -> list[str]:
    """The bare lid.176 label of each whole document (whitespace folded,
    k=1; zh/yue/wuu as ``zh``)."""
    from stages.langid import load_model

    predict = load_model().f.predict
    out = []
    for text in texts:
        folded = " ".join(text.split())
        pred = predict(folded + "\n", 1, 0.0, "replace") if folded else []
        label = pred[0][1].replace("__label__", "") if pred else None
        out.append("zh" if label in ("zh", "yue", "wuu") else label)
    return out


_KANA = re.compile("[\u3040-\u30ff]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_HAN = re.compile("[\u4e00-\u9fff]")


def shape_variants(golds: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """Other page shapes of the gold documents, ``{shape: [(text, gold)]}``:
    ``no blank lines`` (paragraph breaks removed, as in chat logs, poems and
    tables), and ``short CJK lines`` (each line of 5-20 characters of a zh,
    ja or ko page that holds the script of its language: Han without kana for
    zh, kana for ja, hangul for ko)."""
    out: dict[str, list[tuple[str, str]]] = {"no blank lines": [], "short CJK lines": []}
    for r in golds:
        g = gold(r)
        out["no blank lines"].append(("\n".join(line for line in r["text"].splitlines() if line.strip()), g))
        if g in ("zh", "ja", "ko"):
            for line in r["text"].splitlines():
                line = line.strip()
                ok = {"zh": lambda t: _HAN.search(t) and not _KANA.search(t),
                      "ja": lambda t: _KANA.search(t), "ko": lambda t: _HANGUL.search(t)}[g](line)
                if 5 <= len(line) <= 20 and ok:
                    out["short CJK lines"].append((line, g))
    return out


def stage_labels(texts: list[str], work: Path) -> list[str | None]:
    """``langid_lang`` of each text from the langid stage with the default
    config (every language allowed), run in this process."""
    from stages import stage_class
    from stages.base import StageContext

    default = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    cls = stage_class("langid")
    stage = cls(cls.Config(**dict(default.get("langid") or {}, allowed_languages=None)),
                StageContext(work_dir=work, cache_dir=work, seed=0, tools_dir=REPO_ROOT / "tools" / "bin"))
    n = len(texts)
    table = pa.table({"id": [str(i) for i in range(n)], "source": ["s"] * n, "file": ["f"] * n,
                      "line": list(range(n)), "text": texts, "meta": ["{}"] * n,
                      "lang_hint": pa.nulls(n, pa.string()), "chars": [len(t) for t in texts]})
    out: list[str | None] = []
    for start in range(0, n, 2000):
        out += stage.process(table.slice(start, 2000)).column("langid_lang").to_pylist()
    return out


def shapes_table(golds: list[dict], work: Path) -> dict[str, Counter]:
    """Stage and bare-model accuracy on :func:`shape_variants`."""
    res: dict[str, Counter] = {}
    work.mkdir(parents=True, exist_ok=True)
    for shape, pairs in shape_variants(golds).items():
        texts = [t for t, _ in pairs]
        c = Counter()
        for (_, g), st, bare in zip(pairs, stage_labels(texts, work), bare_labels(texts)):
            c["n"] += 1
            c["stage"] += correct(st, g)
            c["bare"] += correct(bare, g)
        res[shape] = c
    return res


def _pct(num: int, den: int) -> str:
    return f"{100 * num / den:.1f}%" if den else "-"


def evaluate(index: dict[str, dict], decided: dict[str, tuple], manifest: dict, work: Path) -> dict:
    """Every table of the benchmark as plain data (see the module docstring)."""
    docs = [r for r in index.values() if r["bench_kind"] != "salad"]
    golds = [r for r in docs if gold(r)]
    bare = dict(zip((r["id"] for r in golds), bare_labels([r["text"] for r in golds])))
    lid: dict[str, Counter] = defaultdict(Counter)
    lid_lang: dict[str, Counter] = defaultdict(Counter)
    confusions: Counter = Counter()
    for r in golds:
        g, stage = gold(r), decided[r["id"]][0]
        for key in ("all", r["source"]) + (("all >= 200 chars",) if len(r["text"]) >= 200 else ()):
            c = lid[key]
            c["n"] += 1
            c["stage"] += correct(stage, g)
            c["bare"] += correct(bare[r["id"]], g)
        c = lid_lang[g]
        c["n"] += 1
        c["stage"] += correct(stage, g)
        c["bare"] += correct(bare[r["id"]], g)
        if not correct(stage, g):
            confusions[f"{g}->{stage}"] += 1

    # partly translated pages: 10-40% of the prose is untranslated English, so
    # the page's language is still its locale's (the bare model and the stage
    # are both judged against it)
    partly = [r for r in docs if r["bench_kind"] == "doc" and r["lang"] not in ("en", "he")
              and 0.1 < ((r.get("meta") or {}).get("en_identical_frac") or 0) <= 0.4]
    c = lid["partly English pages (10-40%)"]
    for r, bare_label in zip(partly, bare_labels([r["text"] for r in partly])):
        c["n"] += 1
        c["stage"] += correct(decided[r["id"]][0], r["lang"])
        c["bare"] += correct(bare_label, r["lang"])

    drops: dict[str, Counter] = defaultdict(Counter)
    navigation = Counter()
    for r in docs:
        if r["bench_kind"] == "navigation":
            reason = decided[r["id"]][1]
            navigation["n"] += 1
            navigation["dropped"] += reason is not None and reason.split(".")[0] in QUALITY_STAGES
        if r["bench_kind"] != "doc":
            continue
        lang, reason = decided[r["id"]]
        c = drops[lang or "unknown"]
        c["n"] += 1
        if reason is None:
            continue
        stage = reason.split(".")[0]
        if stage == "dedup":
            c["dedup"] += 1
        elif stage in QUALITY_STAGES:
            c["reason:" + reason] += 1
        else:
            c["other"] += 1

    mixed = Counter()
    for r in docs:
        frac = (r.get("meta") or {}).get("en_identical_frac")
        if r["lang"] in ("ja", "zh") and frac is not None and 0.1 < frac < 0.9 and r["bench_kind"] == "doc":
            reason = decided[r["id"]][1]
            mixed[f"{r['lang']}:n"] += 1
            if reason and reason.split(".")[0] in QUALITY_STAGES:
                mixed[f"{r['lang']}:dropped"] += 1
                mixed[f"{r['lang']}:{reason}"] += 1

    salad = Counter()
    for r in index.values():
        if r["bench_kind"] != "salad":
            continue
        lang = r["lang"]
        reason = decided[r["id"]][1]
        orig = decided[r["original"]][1]
        salad[f"{lang}:n"] += 1
        salad[f"{lang}:dropped"] += reason is not None and reason.split(".")[0] != "dedup"
        salad[f"{lang}:by:{reason}"] += 1
        salad[f"{lang}:orig_lost"] += orig is not None and orig.split(".")[0] in QUALITY_STAGES
        salad[f"{lang}:orig_by:{orig}"] += orig is not None
        salad[f"{lang}:orig_salad"] += orig == "perplexity.word_salad"
    ppl = manifest.get("stages", {}).get("perplexity", {})
    return {"shapes": shapes_table(golds, work), "lid": lid, "lid_lang": lid_lang, "confusions": dict(confusions.most_common(15)),
            "drops": drops, "navigation": navigation, "mixed": mixed, "salad": salad,
            "perplexity": {"coverage": (ppl.get("fit") or {}).get("coverage", {}),
                           "warnings": ppl.get("warnings", [])},
            "accounting": manifest.get("accounting")}


def markdown(res: dict) -> str:
    """The benchmark's tables as Markdown."""
    lines = [f"## Multilingual quality, {res.get('part', 'heldout')} part of corpus-multi (bench.multi)", "",
             "| language ID | documents | stage | bare lid.176 |", "|---|---:|---:|---:|"]
    for key in sorted(res["lid"], key=lambda k: (k != "all", k != "all >= 200 chars", k)):
        c = res["lid"][key]
        lines.append(f"| {key} | {c['n']:,} | {_pct(c['stage'], c['n'])} | {_pct(c['bare'], c['n'])} |")
    for shape, c in res["shapes"].items():
        lines.append(f"| shape: {shape} | {c['n']:,} | {_pct(c['stage'], c['n'])} | {_pct(c['bare'], c['n'])} |")
    lines += ["", "| gold language | documents | stage | bare |", "|---|---:|---:|---:|"]
    for lang, c in sorted(res["lid_lang"].items()):
        lines.append(f"| {lang} | {c['n']} | {_pct(c['stage'], c['n'])} | {_pct(c['bare'], c['n'])} |")
    if res["confusions"]:
        lines += ["", "stage errors (gold->label): " + ", ".join(f"{k} {v}" for k, v in res["confusions"].items())]
    lines += ["", "| detected language | documents | dropped by quality | top reasons | dedup |",
              "|---|---:|---:|---|---:|"]
    for lang, c in sorted(res["drops"].items(), key=lambda kv: -kv[1]["n"]):
        reasons = sorted(((k[7:], v) for k, v in c.items() if k.startswith("reason:")), key=lambda kv: -kv[1])
        quality = sum(v for _, v in reasons)
        top = ", ".join(f"{k} {v}" for k, v in reasons[:3])
        lines.append(f"| {lang} | {c['n']} | {_pct(quality, c['n'])} | {top} | {c['dedup']} |")
    per_rule: Counter = Counter()
    total = 0
    for c in res["drops"].values():
        total += c["n"]
        for k, v in c.items():
            if k.startswith("reason:"):
                per_rule[k[7:]] += v
    lines += ["", f"| reason (all {total:,} well-formed pages) | dropped | share |", "|---|---:|---:|"]
    for reason, v in per_rule.most_common():
        lines.append(f"| {reason} | {v} | {_pct(v, total)} |")
    nav = res.get("navigation") or {}
    lines += ["", f"navigation pages (no sentence; not in the tables above): {nav.get('n', 0)}, "
                  f"{_pct(nav.get('dropped', 0), nav.get('n', 0))} dropped by quality"]
    m = res["mixed"]
    lines += ["", "| mixed pages (10-90% English paragraphs) | documents | dropped by quality | reasons |",
              "|---|---:|---:|---|"]
    for lang in ("ja", "zh"):
        reasons = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in m.items()
                            if k.startswith(lang + ":") and "." in k)
        lines.append(f"| {lang} | {m[lang + ':n']} | {_pct(m[lang + ':dropped'], m[lang + ':n'])} | {reasons} |")
    s = res["salad"]
    lines += ["", "| word salad | shuffled documents | dropped | by reason | originals lost as salad "
                  "| originals lost (any quality rule) |", "|---|---:|---:|---|---:|---:|"]
    for lang in SALAD_LANGS:
        by = ", ".join(f"{k.split(':', 2)[2]} {v}" for k, v in s.items() if k.startswith(f"{lang}:by:"))
        lines.append(f"| {lang} | {s[lang + ':n']} | {_pct(s[lang + ':dropped'], s[lang + ':n'])} | {by} | "
                     f"{_pct(s[lang + ':orig_salad'], s[lang + ':n'])} | "
                     f"{_pct(s[lang + ':orig_lost'], s[lang + ':n'])} |")
    cov = res["perplexity"].get("coverage") or {}
    scored, unscored = cov.get("scored") or {}, cov.get("unscored") or {}
    lines += ["", f"perplexity: {len(scored)} languages scored, {len(unscored)} reported unscored "
                  f"(each with a warning in the manifest, summary and report)", "",
              "| language | scored | documents | chars |", "|---|---|---:|---:|"]
    for lang, c in sorted({**scored, **unscored}.items(), key=lambda kv: -kv[1].get("docs", 0)):
        lines.append(f"| {lang} | {'yes' if lang in scored else 'no'} | {c.get('docs', 0):,} | "
                     f"{c.get('chars', 0):,} |")
    return "\n".join(lines)


def run(out_dir: Path, part: str = "heldout", workers: int = 2, reuse: bool = False,
        multi: Path = MULTI) -> str:
    """Build, evaluate and write ``out_dir/multi.json`` and ``out_dir/multi.md``;
    returns the Markdown (a one-line note when ``multi``, by default
    ``../shared/corpus-multi``, is absent)."""
    multi = Path(multi)
    if not multi.exists():
        return f"(bench.multi skipped: {multi} not found)"
    from pipeline.build import build

    from pipeline.manifest import load_manifest

    work = Path(out_dir) / "multi"
    if work.exists() and not reuse:
        shutil.rmtree(work)
    cfg, index = prepare(part, work / "inputs", multi)
    cfg_path = work / "multi.yaml"
    vdir = work / "corpora" / "multi"
    if reuse and vdir.exists():
        manifest = load_manifest(vdir)
    else:
        cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
        print(f"bench.multi: building {len(index):,} documents of the {part} part (a few minutes)", flush=True)
        result = build("multi", cfg_path, work / "corpora", num_workers=workers, log=lambda *_: None)
        vdir, manifest = result.version_dir, result.manifest
    decided = _decisions(vdir)
    missing = [i for i in index if i not in decided]
    res = evaluate(index, decided, manifest, work / "shapes")
    res["missing"] = len(missing)
    res["part"] = part
    (Path(out_dir) / "multi.json").write_text(json.dumps(res, indent=1, ensure_ascii=False, default=dict))
    (Path(out_dir) / "multi.md").write_text(markdown(res) + "\n")
    return markdown(res) + (f"\n\n{len(missing)} documents have no decision (quarantined?)" if missing else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    ap.add_argument("--part", choices=("heldout", "dev"), default="heldout")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="evaluate the last build again (no new build)")
    ap.add_argument("--multi", type=Path, default=MULTI, help="the corpus-multi directory")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(run(args.out, args.part, args.workers, args.reuse, args.multi))


if __name__ == "__main__":
    main()
