"""Word salad, Traditional Chinese and unscored languages in the perplexity
stage (stages/perplexity/salad.py, text.py, stage.py), with real KenLM models
trained on the bundled sample's Debian Reference pages."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from common.errors import StageFailure
from stages.base import Partitions, StageContext
from stages.perplexity import Config, PerplexityStage
from stages.perplexity.salad import modern_zh_share, salad_cutoff, shuffled_lines
from stages.text import _rjieba

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "bin"
SAMPLE = REPO / "data" / "sample"
pytestmark = pytest.mark.skipif(not (TOOLS / "lmplz").exists(), reason="tools/bin/lmplz missing: run tools/build_kenlm.sh")


def _debref() -> dict[str, list[str]]:
    table = pq.read_table(SAMPLE / "reference-debref.parquet", columns=["text", "lang"])
    out: dict[str, list[str]] = {}
    for text, lang in zip(table["text"].to_pylist(), table["lang"].to_pylist()):
        out.setdefault(lang, []).append(text)
    return out


def _manpage_twins() -> tuple[str, str]:
    """The zh_CN and zh_TW pages of dd(1) in the bundled sample."""
    with open(SAMPLE / "manuals-manpages.jsonl.zst", "rb") as fh:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        pages = {json.loads(line)["meta"]["path"]: json.loads(line)["text"] for line in reader}
    return pages["usr/share/man/zh_CN/man1/dd.1.gz"], pages["usr/share/man/zh_TW/man1/dd.1.gz"]


def _salad(text: str, lang: str) -> str:
    """The words of each line shuffled (en: whitespace words; zh: rjieba words)."""
    rng = random.Random(7)
    out = []
    for line in text.splitlines():
        words = [w for w in _rjieba().cut(line) if w.strip()] if lang == "zh" else line.split()
        rng.shuffle(words)
        out.append(("" if lang == "zh" else " ").join(words))
    return "\n".join(out)


def _stage(tmp: Path, rows: list[tuple[str, str, str | None]], **overrides) -> tuple[PerplexityStage, dict]:
    path = tmp / "part-00000.parquet"
    pq.write_table(pa.table({
        "id": [f"{src}:f:{i + 1}" for i, (src, _, _) in enumerate(rows)],
        "source": [r[0] for r in rows], "text": [r[1] for r in rows],
        "chars": [len(r[1]) for r in rows],
        "langid_lang": pa.array([r[2] for r in rows], pa.string()), "keep": [True] * len(rows)}), path)
    cfg = Config(**{"reference_source": "ref", "min_reference_chars": 50_000, "lmplz_memory": "64M",
                    "max_percentile": None, **overrides})
    stage = PerplexityStage(cfg, StageContext(work_dir=tmp / "work", cache_dir=tmp / "cache", seed=0,
                                              tools_dir=TOOLS))
    fit = stage.fit(Partitions([path], mapper=lambda fn, items: [fn(i) for i in items]))
    return stage, {"facts": fit.facts, "warnings": fit.warnings}


def _table(rows: list[tuple[str, str]]) -> pa.Table:
    return pa.table({"id": [f"web:x:{i}" for i in range(len(rows))], "source": ["web"] * len(rows),
                     "text": [r[0] for r in rows], "langid_lang": [r[1] for r in rows],
                     "keep": [True] * len(rows), "reason": pa.nulls(len(rows), pa.string())})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """en and zh models on all debref pages but one per language (held out)."""
    debref = _debref()
    held = {"en": debref["en"][3], "zh": debref["zh"][3]}
    rows = [("ref", t, lang) for lang in ("en", "zh") for i, t in enumerate(debref[lang]) if i != 3]
    rows += [("web", "Bonjour tout le monde, ceci est une page.", "fr")] * 3   # a language without reference
    stage, fit = _stage(tmp_path_factory.mktemp("salad"), rows)
    return stage, fit, held


def test_shuffled_words_dropped_as_word_salad_and_originals_kept(trained):
    stage, _, held = trained
    docs = [(held["en"], "en"), (_salad(held["en"], "en"), "en"),
            (held["zh"], "zh"), (_salad(held["zh"], "zh"), "zh")]
    out = stage.process(_table(docs))
    assert out["reason"].to_pylist() == [None, "perplexity.word_salad", None, "perplexity.word_salad"]
    ratio = out["perplexity_shuffle_ratio"].to_pylist()
    assert ratio[0] > 1.3 and ratio[2] > 1.5              # natural text: well above its own shuffle
    assert ratio[1] < 1.15 and ratio[3] < 1.25            # salad: about the same as its shuffle
    assert out["keep"].to_pylist() == [True, False, True, False]


def test_ratio_is_deterministic_and_short_documents_are_not_checked(trained):
    stage, _, held = trained
    first = stage.process(_table([(held["en"], "en")]))["perplexity_shuffle_ratio"].to_pylist()
    again = stage.process(_table([(held["en"], "en"), ("A cat sat on the mat.", "en")]))
    assert again["perplexity_shuffle_ratio"].to_pylist() == [first[0], None]   # 8 tokens < 60
    assert again["reason"].to_pylist() == [None, None]
    lines = ["one two three four", "five six"]
    assert shuffled_lines(lines, "en", "seed") == shuffled_lines(lines, "en", "seed")
    assert sorted(shuffled_lines(lines, "en", "seed")[0].split()) == sorted(lines[0].split())


def _windows(text: str, words: int) -> list[str]:
    """``text``'s lines of at least 20 words, cut into consecutive pieces of
    about ``words`` words (whole lines)."""
    out, cur, n = [], [], 0
    for line in text.splitlines():
        if len(line.split()) >= 20:
            cur.append(line)
            n += len(line.split())
            if n >= words:
                out.append("\n".join(cur))
                cur, n = [], 0
    return out


def test_short_documents_get_a_lower_cutoff(trained):
    assert salad_cutoff(1.15, 60, 150) == pytest.approx(1.06)
    assert salad_cutoff(1.35, 75, 150) == pytest.approx(1.175)
    assert salad_cutoff(1.15, 150, 150) == 1.15 and salad_cutoff(1.15, 400, 150) == 1.15
    assert salad_cutoff(0.9, 60, 150) == 0.9                 # a cut-off at or below 1 is not scaled
    stage, _, held = trained
    pieces = _windows(held["en"], 60)
    out = stage.process(_table([(t, "en") for t in pieces] + [(_salad(t, "en"), "en") for t in pieces]))
    ratio = out["perplexity_shuffle_ratio"].to_pylist()
    reasons = out["reason"].to_pylist()
    assert len(pieces) == 20 and all(r is not None for r in ratio)    # 60-150 tokens: all checked
    assert reasons[:20] == [None] * 20 and min(ratio[:20]) > 1.5         # the originals: kept
    # their salad: 16 of 20 dropped (the 4 kept have ratios 1.17-1.34 against cut-offs of ~1.06-1.10:
    # a 60-word shuffle of in-domain text keeps a few known bigrams)
    assert reasons[20:].count("perplexity.word_salad") == 16
    assert all(r <= 1.35 for r in ratio[20:])


PRESIDENTS = ("George Washington\nJohn Adams\nThomas Jefferson\nJames Madison\nJames Monroe\nJohn Quincy Adams\n"
              "Andrew Jackson\nMartin Van Buren\nWilliam Henry Harrison\nJohn Tyler\nJames K. Polk\nZachary Taylor\n"
              "Millard Fillmore\nFranklin Pierce\nJames Buchanan\nAbraham Lincoln\nAndrew Johnson\nUlysses S. Grant\n"
              "Rutherford B. Hayes\nJames A. Garfield\nChester A. Arthur\nGrover Cleveland\nBenjamin Harrison\n"
              "William McKinley\nTheodore Roosevelt")


def test_text_the_model_does_not_know_is_not_judged_as_word_salad(trained, tmp_path):
    # a list of names: the Debian model knows few of its words, so their order
    # tells it nothing (ratio ~0.9, below any cut-off); the OOV bound leaves it unjudged
    stage, _, _ = trained
    out = stage.process(_table([(PRESIDENTS, "en")]))
    assert out["perplexity_shuffle_ratio"].to_pylist() == [None] and out["reason"].to_pylist() == [None]
    unbounded = PerplexityStage(stage.config.model_copy(update={"word_salad_max_oov_share": None}), stage.ctx)
    out = unbounded.process(_table([(PRESIDENTS, "en")]))
    assert out["perplexity_shuffle_ratio"].to_pylist()[0] < 1.0
    assert out["reason"].to_pylist() == ["perplexity.word_salad"]


def _sample_fortunes(lines: set[int]) -> list[str]:
    with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        return [json.loads(line)["text"] for i, line in enumerate(reader, 1) if i in lines]


def test_classical_chinese_is_not_judged_as_word_salad(trained):
    # two passages of the Analects in the bundled sample: a model of modern
    # Chinese does not know classical word order (ratios ~1.0-1.2), and they
    # hold no particle of modern Chinese, so they are not judged
    stage, _, held = trained
    analects = _sample_fortunes({2597, 2667})
    assert [modern_zh_share(t) for t in analects] == [0.0, 0.0] and modern_zh_share(held["zh"]) > 0.03
    out = stage.process(_table([(t, "zh") for t in analects]))
    assert out["perplexity_shuffle_ratio"].to_pylist() == [None, None] and out["reason"].to_pylist() == [None, None]
    always = PerplexityStage(stage.config.model_copy(update={"word_salad_zh_min_modern_share": None}), stage.ctx)
    out = always.process(_table([(t, "zh") for t in analects]))
    assert all(r < 1.35 for r in out["perplexity_shuffle_ratio"].to_pylist())
    assert out["reason"].to_pylist() == ["perplexity.word_salad"] * 2
    assert modern_zh_share("之乎者也") is None                  # fewer than 20 Han characters


def test_traditional_and_simplified_twins_score_within_a_factor_of_1_3(trained):
    stage, _, _ = trained
    hans, hant = _manpage_twins()
    values = stage.process(_table([(hans, "zh"), (hant, "zh")]))["perplexity_value"].to_pylist()
    assert 1 / 1.3 < values[1] / values[0] < 1.3          # tw2sp folding (measured 1.08 median on dev twins)


def test_unscored_language_reported_with_counts(trained):
    _, fit, _ = trained
    cov = fit["facts"]["coverage"]
    assert sorted(cov["scored"]) == ["en", "zh"]
    assert cov["unscored"] == {"fr": {"docs": 3, "chars": 123, "why": "no document of reference source 'ref' was detected as fr (langid labels the reference like any source)"}}
    assert cov["documents"] == 31
    assert fit["warnings"][0] == "1 of 3 languages have no model: 3 documents (9.7% of the input), 123 chars pass unscored"
    assert fit["warnings"][1].startswith("language fr: no model (no document of reference source 'ref' was detected as fr (langid labels "
                                    "the reference like any source)); its 3 documents "
                                         "(123 chars) are kept")


def test_required_language_without_enough_reference_stops_before_training(tmp_path, monkeypatch):
    import stages.perplexity.model as model

    monkeypatch.setattr(model, "_run", lambda cmd: pytest.fail("lmplz ran"))
    rows = [("ref", "The cat sat on the mat. " * 100, "en"), ("ref", "我们今天去北京。", "zh")]
    with pytest.raises(StageFailure) as exc:
        _stage(tmp_path, rows, require_models=["eng"], min_reference_chars=10_000)
    assert str(exc.value) == ("perplexity: language en has no model (2,400 reference chars in source 'ref' < "
                              "min_reference_chars 10,000), and perplexity.require_models lists it: give more "
                              "reference text in en, lower min_reference_chars, or give perplexity.models.en")
