"""Word salad and Traditional Chinese under the perplexity stage's models (issue 15).

Trains the stage's ``words`` models (order 5) for en and zh on the Debian
Reference of ``../shared/corpus`` (the default build's reference kind), then
scores clean prose of every kind and its word salad (the words of each line
shuffled: whitespace words for en, rjieba words for zh; seeded by the
document id) and reports, per set: the absolute perplexity and the
self-shuffle ratio (:func:`stages.perplexity.salad.self_shuffle_ratio`) of
clean and salad documents, by document token count. Debref documents are
scored by the model trained on the other fold (2-fold, as the stage's
reference distribution), every other set by the full model.

Data: development only: ``../shared/corpus`` (kjv, fortunes en/zh, man pages
zh Hans/Hant, debref) and ``bench.multi_split.records("dev")`` en/zh gold
pages. Never the held-out part.

    PYTHONPATH=$PWD .venv/bin/python -m bench.word_salad [--out bench-results] [--per-set 400]

Writes ``out/word_salad.json`` (one row per document) and prints the tables.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

from bench.corpus import records
from bench.multi import shuffle_words
from bench.multi_split import gold, records as multi_records
from pipeline.config import REPO_ROOT
from stages.perplexity.config import Config
from stages.perplexity.model import load_model, perplexity, score_sentences_oov, train_language_model
from stages.perplexity.salad import modern_zh_share, salad_cutoff, self_shuffle_ratio
from stages.perplexity.text import LineTokenizer, normalized_lines

CORPUS = REPO_ROOT.parent / "shared" / "corpus"
TOOLS = REPO_ROOT / "tools" / "bin"


def salad(text: str, lang: str, seed: str) -> str:
    """``text`` with the words of each line shuffled, as bench.multi makes its
    word salad (:func:`bench.multi.shuffle_words`: whitespace words for en,
    rjieba words for zh), seeded by ``"salad:" + seed``."""
    return shuffle_words(text, lang, "salad:" + seed)


def _fold(doc_id: str) -> int:
    return hashlib.sha256(doc_id.encode()).digest()[0] & 1


def _sets(per_set: int) -> dict[str, list[tuple[str, str, str]]]:
    """set name -> [(id, lang, text)], each at most ``per_set`` documents
    (a fixed stride sample)."""
    sets: dict[str, list] = {}
    for name, _line, rec in records(CORPUS, ("dev-kjv", "dev-fortunes", "dev-manpages", "dev-debref")):
        lang = rec.get("lang")
        if lang not in ("en", "zh"):
            continue
        key = f"{rec['source']} {lang}" + (f" {rec.get('script')}" if lang == "zh" and rec["source"] == "manpages"
                                           else "")
        sets.setdefault(key, []).append((rec["id"], lang, rec["text"]))
    for rec in multi_records("dev"):
        lang = gold(rec)
        if lang in ("en", "zh"):
            script = f" {rec.get('script')}" if lang == "zh" else ""
            sets.setdefault(f"multi-dev {lang}{script}", []).append((rec["id"], lang, rec["text"]))
    return {k: v[::max(1, len(v) // per_set)][:per_set] for k, v in sorted(sets.items())}


def _train(docs: list[tuple[str, str, str]], lang: str, cfg: Config, cache: Path, fold: str):
    lines = [s for _, _, text in docs for s in normalized_lines(text, lang, fold)]
    model_path, _ = train_language_model(lines, lang, cfg, TOOLS, cache)
    return load_model(str(model_path))


def _measure(model, text: str, lang: str, fold: str) -> tuple[int, float | None, float | None, int]:
    lines = normalized_lines(text, lang, fold)
    tokenizer = LineTokenizer(lang)
    log10_sum, tokens, oov = score_sentences_oov(model, [t for t in tokenizer(lines) if t])
    return (tokens, perplexity(log10_sum, tokens),
            self_shuffle_ratio(model, tokenizer, lines, lang, log10_sum, tokens, text), oov)


def run(out_dir: Path, per_set: int, fold: str) -> list[dict]:
    cfg = Config(reference_source="debref", lmplz_memory="256M")
    sets = _sets(per_set)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        models = {}
        for lang in ("en", "zh"):
            ref = sets[f"debref {lang}"]
            models[lang] = {"full": _train(ref, lang, cfg, cache, fold)}
            for k in (0, 1):
                models[lang][k] = _train([d for d in ref if _fold(d[0]) != k], lang, cfg, cache, fold)
        t0 = time.process_time()
        for name, docs in sets.items():
            for doc_id, lang, text in docs:
                model = models[lang][_fold(doc_id)] if name.startswith("debref") else models[lang]["full"]
                for kind, body in (("clean", text), ("salad", salad(text, lang, doc_id))):
                    tokens, value, ratio, oov = _measure(model, body, lang, fold)
                    rows.append({"set": name, "id": doc_id, "lang": lang, "kind": kind, "tokens": tokens,
                                 "oov": oov, "modern_zh": modern_zh_share(body), "chars": len(body),
                                 "perplexity": value, "ratio": ratio})
        print(f"scored {len(rows)} documents in {time.process_time() - t0:.1f} CPU s")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"word_salad-{fold}.json").write_text(json.dumps(rows))
    return rows


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))] if values else float("nan")


def report(rows: list[dict], min_tokens: int) -> None:
    print(f"\n| set | n | clean ppl p5/p50/p95 | salad ppl p5/p50/p95 | clean ratio p1/p5/p50 "
          f"| salad ratio p50/p95/p99 (tokens >= {min_tokens}) |")
    print("|---|---:|---|---|---|---|")
    for name in sorted({r["set"] for r in rows}):
        sel = [r for r in rows if r["set"] == name and r["ratio"] is not None and r["tokens"] >= min_tokens]
        clean = [r for r in sel if r["kind"] == "clean"]
        bad = [r for r in sel if r["kind"] == "salad"]
        fmt = lambda vs, qs, d: "/".join(f"{_q(vs, q):.{d}f}" for q in qs)  # noqa: E731
        print(f"| {name} | {len(clean)} | {fmt([r['perplexity'] for r in clean], (5, 50, 95), 0)} | "
              f"{fmt([r['perplexity'] for r in bad], (5, 50, 95), 0)} | "
              f"{fmt([r['ratio'] for r in clean], (1, 5, 50), 2)} | {fmt([r['ratio'] for r in bad], (50, 95, 99), 2)} |")


def defaults_table(rows: list[dict]) -> None:
    """Per set, at the stage's defaults (``word_salad_max_ratio``,
    ``word_salad_min_tokens``, ``word_salad_full_tokens``,
    ``word_salad_max_perplexity``, ``word_salad_max_oov_share``,
    ``word_salad_zh_min_modern_share``,
    :func:`stages.perplexity.salad.salad_cutoff`):
    clean documents lost and word salad of >= 300 characters dropped; the
    aptitude screen dumps (``ld-idm`` pages: terminal screens, not prose)
    are left out, as bench.multi does."""
    cfg = Config(reference_source="debref")
    tot: dict[str, list[int]] = {}
    print("\n| set | clean lost | salad (>= 300 chars) dropped |\n|---|---:|---:|")
    for name in sorted({r["set"] for r in rows}):
        counts = [0, 0, 0, 0]
        for r in rows:
            if r["set"] != name or "ld-idm" in r["id"] or (r["kind"] == "salad" and r["chars"] < 300):
                continue
            lang = r["lang"]
            dropped = (r["ratio"] is not None
                       and cfg.word_salad_checked(lang, r["tokens"], r["perplexity"], r["oov"],
                                                              lambda: r["modern_zh"])
                       and r["ratio"] <= salad_cutoff(cfg.word_salad_max_ratio[lang], r["tokens"],
                                                      cfg.word_salad_full_tokens))
            i = 0 if r["kind"] == "clean" else 2
            counts[i] += 1
            counts[i + 1] += dropped
        for i, v in enumerate(counts):
            tot.setdefault(rows_lang(name), [0, 0, 0, 0])[i] += v
        print(f"| {name} | {counts[1]}/{counts[0]} | {counts[3]}/{counts[2]} |")
    for lang, (cn, cl, sn, sd) in sorted(tot.items()):
        print(f"| **all {lang}** | {cl}/{cn} ({100 * cl / max(cn, 1):.2f}%) | {sd}/{sn} ({100 * sd / max(sn, 1):.1f}%) |")


def rows_lang(set_name: str) -> str:
    """The language of a set name (``"multi-dev zh Hans"`` -> ``zh``)."""
    return "zh" if " zh" in set_name else "en"


def hant_pairs(per_set: int) -> None:
    """Traditional vs Simplified: the zh_TW man pages and maint-guide zh-tw
    DEV pages against their zh_CN twins (same path or page), scored by the
    zh model trained on debref with each folding; prints the median and the
    p5/p95 of perplexity(Hant) / perplexity(Hans) per pair."""
    pairs: dict[str, dict[str, str]] = {}
    for _name, _line, rec in records(CORPUS, ("dev-manpages",)):
        if rec.get("lang") == "zh":
            meta = rec["meta"]
            pairs.setdefault("man:" + meta["path"].split("/", 4)[-1], {})[rec["script"]] = rec["text"]
    for rec in multi_records("dev"):
        if rec["lang"] == "zh" and rec["source"] == "maint-guide":
            pairs.setdefault("maint-guide:" + rec["meta"]["page"], {})[rec["script"]] = rec["text"]
    both = sorted(k for k, v in pairs.items() if len(v) == 2)
    both = [k for k in both if k.startswith("maint")] + [k for k in both if k.startswith("man:")][:per_set]
    ref = [(i, l, t) for i, l, t in _sets(per_set)["debref zh"]]
    cfg = Config(reference_source="debref", lmplz_memory="256M")
    print("| fold | pairs | Hans ppl p50 | Hant ppl p50 | Hant/Hans p5 / p50 / p95 | maint-guide Hant/Hans |")
    print("|---|---:|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fold in ("none", "t2s", "tw2sp"):
            model = _train(ref, "zh", cfg, Path(tmp), fold)
            hans, hant, ratios, maint = [], [], [], []
            for key in both:
                a = _measure(model, pairs[key]["Hans"], "zh", fold)[1]
                b = _measure(model, pairs[key]["Hant"], "zh", fold)[1]
                if a and b:
                    hans.append(a)
                    hant.append(b)
                    ratios.append(b / a)
                    if key.startswith("maint"):
                        maint.append(f"{b / a:.2f}")
            print(f"| {fold} | {len(ratios)} | {_q(hans, 50):.0f} | {_q(hant, 50):.0f} | "
                  f"{_q(ratios, 5):.2f} / {_q(ratios, 50):.2f} / {_q(ratios, 95):.2f} | {' '.join(maint)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--per-set", type=int, default=400)
    parser.add_argument("--fold", default="t2s", choices=("none", "t2s", "tw2sp"))
    parser.add_argument("--min-tokens", type=int, default=0)
    parser.add_argument("--from-json", action="store_true", help="report the last run's rows")
    parser.add_argument("--hant", action="store_true", help="Traditional vs Simplified twins only")
    args = parser.parse_args()
    if args.hant:
        hant_pairs(args.per_set)
        return
    path = args.out / f"word_salad-{args.fold}.json"
    rows = json.loads(path.read_text()) if args.from_json else run(args.out, args.per_set, args.fold)
    report(rows, args.min_tokens)
    defaults_table(rows)


if __name__ == "__main__":
    main()
