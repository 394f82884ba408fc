"""Tests for stages/perplexity/: tiny KenLM models trained with tools/bin/lmplz."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

import stages.perplexity as ppl
from stages.base import Partitions, StageContext
from stages.perplexity import Config, PerplexityStage, document_sentences

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "bin"
pytestmark = pytest.mark.skipif(
    not (TOOLS / "lmplz").exists() or not (TOOLS / "build_binary").exists(),
    reason="tools/bin/lmplz missing: run tools/build_kenlm.sh first")

SUBJECTS = ["the cat", "a dog", "my friend", "the teacher", "our neighbour"]
VERBS = ["sat on", "looked at", "walked to", "cleaned", "painted"]
OBJECTS = ["the mat.", "a red door.", "the old house.", "the garden."]
ZH = ["我们今天去北京。", "他明天回上海。", "我们明天去上海。", "他今天回北京。"]


def _english_docs() -> list[str]:
    sentences = [f"{s.capitalize()} {v} {o}"
                 for s, v, o in itertools.product(SUBJECTS, VERBS, OBJECTS)]
    return ["\n".join(sentences[i:i + 10]) for i in range(0, len(sentences), 10)]  # 10 documents


def _write(path: Path, rows: list[tuple[str, str, str | None]]) -> Path:
    """rows: (source, text, langid_lang); every row kept."""
    pq.write_table(pa.table({
        "id": [f"{src}:f:{i + 1}" for i, (src, _, _) in enumerate(rows)],
        "source": [r[0] for r in rows],
        "text": [r[1] for r in rows],
        "langid_lang": pa.array([r[2] for r in rows], pa.string()),
        "keep": [True] * len(rows),
    }), path)
    return path


def _table(rows: list[tuple[str, str | None]]) -> pa.Table:
    return pa.table({"id": [f"web:x:{i}" for i in range(len(rows))],
                     "source": ["web"] * len(rows),
                     "text": [r[0] for r in rows],
                     "langid_lang": pa.array([r[1] for r in rows], pa.string()),
                     "keep": [True] * len(rows), "reason": pa.nulls(len(rows), pa.string())})


def _ctx(tmp: Path, cache: Path | None = None) -> StageContext:
    return StageContext(work_dir=tmp / "work", cache_dir=cache or tmp / "cache", seed=0,
                        tools_dir=TOOLS)


def _partitions(tmp: Path) -> Partitions:
    rows = [("ref", text, "en") for text in _english_docs()]
    rows += [("ref", text, "zh") for text in ZH]          # 32 chars: below min_reference_chars
    rows += [("web", "The cat sat on the mat.", "en")]    # not reference: never trained on
    return Partitions([_write(tmp / "part-00000.parquet", rows)],
                      mapper=lambda fn, items: [fn(i) for i in items])


def _fit(tmp: Path, cache: Path | None = None, **overrides) -> tuple[PerplexityStage, dict]:
    cfg = Config(**{"reference_source": "ref", "order": 3, "min_reference_chars": 1000,
                    "lmplz_memory": "64M", "tokenizer": "words", "sentencepiece_vocab_size": 100,
                    **overrides})
    stage = PerplexityStage(cfg, _ctx(tmp, cache))
    return stage, stage.fit(_partitions(tmp)).facts


def test_normalization_and_tokens():
    assert document_sentences("The Café sat, 2024!\n\n  \nA “dog” ran…", "en") == [
        "the cafe sat , 0000 !", 'a " dog " ran . . .']
    assert document_sentences("我们今天去北京，买了３本书。", "zh") == [
        "我们 今天 去 北京 , 买 了 0 本书 ."]
    assert document_sentences("がくせい", "ja") == ["が く せ い"]  # voicing mark kept
    assert document_sentences(" \n\t", "en") == []


def test_value_equals_hand_computation_with_full_scores(tmp_path):
    import kenlm

    stage, facts = _fit(tmp_path)
    assert set(facts["languages"]) == {"en"}
    assert facts["languages"]["en"]["reference_docs"] == 10
    assert facts["languages"]["en"]["distribution"] == "2-fold"
    doc = "The cat sat on a red door.\n\nMy dog cleaned the mat!"
    out = stage.process(_table([(doc, "en")]))

    model = kenlm.Model(str(tmp_path / "work" / "en.binary"))
    scores = [s[0] for line in ("the cat sat on a red door .", "my dog cleaned the mat !")
              for s in model.full_scores(line, bos=True, eos=True)]
    assert len(scores) == 9 + 7  # 8 and 6 tokens (punctuation included), plus </s> per line
    expected = 10 ** (-sum(scores) / len(scores))
    assert out["perplexity_value"][0].as_py() == pytest.approx(expected, rel=1e-9)
    assert 1.0 < expected < 100.0


def test_order_below_2_refused():
    with pytest.raises(pydantic.ValidationError, match="order must be >= 2"):
        Config(reference_source="ref", order=1)
    with pytest.raises(pydantic.ValidationError):
        Config(reference_source="ref", unknown_key=1)


def test_unreadable_model_file_names_the_file(tmp_path):
    stage, _ = _fit(tmp_path)
    model = tmp_path / "work" / "en.binary"
    model.unlink()                         # a hard link to the cache: replace, do not overwrite
    model.write_bytes(b"not a kenlm model\n")
    fresh = PerplexityStage(stage.config, stage.ctx)
    with pytest.raises(RuntimeError, match=r"cannot read KenLM model file .*en\.binary"):
        fresh.process(_table([("the cat sat on the mat.", "en")]))


def test_language_without_model_kept_unmeasured(tmp_path):
    stage, facts = _fit(tmp_path)
    assert "zh" in facts["skipped"]        # 32 reference chars < 1000
    out = stage.process(_table([("我们今天去北京。", "zh"), ("Bonjour tout le monde.", "fr"),
                                ("unknown language", None), (" \n ", "en"), (None, "en")]))
    assert out["keep"].to_pylist() == [True] * 5
    assert out["reason"].to_pylist() == [None] * 5
    assert out["perplexity_value"].to_pylist() == [None] * 5   # en rows: no tokens
    assert out["perplexity_bucket"].to_pylist() == [None] * 5
    assert out.schema.field("perplexity_value").type == pa.float64()


def test_threshold_drop_and_annotate(tmp_path):
    good, bad = "The cat sat on the mat.", "Mat the on door red painted garden cat."
    stage, _ = _fit(tmp_path)
    values = stage.process(_table([(good, "en"), (bad, "en")]))["perplexity_value"].to_pylist()
    assert values[0] < values[1]
    cut = math.sqrt(values[0] * values[1])

    stage, facts = _fit(tmp_path, max_perplexity={"en": cut})
    assert facts["languages"]["en"]["threshold"] == cut
    out = stage.process(_table([(good, "en"), (bad, "en"), ("我们", "zh")]))
    assert out["keep"].to_pylist() == [True, False, True]
    assert out["reason"].to_pylist() == [None, "perplexity.above_threshold", None]

    stage, _ = _fit(tmp_path, max_perplexity={"en": cut}, action="annotate")
    out = stage.process(_table([(good, "en"), (bad, "en")]))
    assert out["keep"].to_pylist() == [True, True]
    assert out["perplexity_value"].to_pylist() == pytest.approx(values)


def test_percentile_threshold_and_buckets(tmp_path):
    stage, facts = _fit(tmp_path, max_percentile=50, bucket_percentiles=(20, 80))
    en = facts["languages"]["en"]
    low, high = en["bucket_cutoffs"]
    assert low < en["threshold"] < high
    assert en["threshold_from"] == "p50 of reference"
    docs = [("The cat sat on the mat.", "en"), ("Mat the on door red painted garden cat.", "en"),
            ("A dog walked to the garden.", "en")]
    out = stage.process(_table(docs))
    for value, bucket, reason in zip(*(out[c].to_pylist() for c in
                                       ("perplexity_value", "perplexity_bucket", "reason"))):
        assert bucket == ("head" if value <= low else "middle" if value <= high else "tail")
        assert reason == ("perplexity.above_threshold" if value > en["threshold"] else None)
    assert "tail" in out["perplexity_bucket"].to_pylist()


def test_percentile_matches_numpy():
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0, 33, 50, 66, 95, 100):
        assert ppl.percentile(sorted(values), q) == pytest.approx(np.percentile(values, q))


def test_cache_hit_does_not_retrain(tmp_path, monkeypatch):
    calls = []
    real_run = ppl.model._run
    monkeypatch.setattr(ppl.model, "_run", lambda cmd: (calls.append(Path(cmd[0]).name), real_run(cmd)))
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    _, first = _fit(tmp_path / "a", cache=cache)
    # full model + one per fold, each lmplz then build_binary
    assert calls == ["lmplz", "build_binary"] * 3
    (tmp_path / "b").mkdir()
    _, second = _fit(tmp_path / "b", cache=cache)
    assert calls == ["lmplz", "build_binary"] * 3              # nothing new ran
    assert second["languages"] == first["languages"]


def test_retraining_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, first = _fit(tmp_path / "a")
    _, second = _fit(tmp_path / "b")                           # separate caches: retrained
    assert first["languages"]["en"]["model_sha256"] == second["languages"]["en"]["model_sha256"]


def test_missing_models_json_is_a_clear_error(tmp_path):
    stage = PerplexityStage(Config(reference_source="ref"), _ctx(tmp_path))
    with pytest.raises(RuntimeError, match="models.json missing"):
        stage.process(_table([("x", "en")]))


# ------------------------------------------------------------- SentencePiece tokenizer

def test_sentencepiece_value_equals_hand_computation(tmp_path):
    import kenlm
    import sentencepiece as spm

    stage, facts = _fit(tmp_path, tokenizer="sentencepiece")
    assert facts["tokenizer"] == "sentencepiece"
    en = facts["languages"]["en"]
    assert en["distribution"] == "2-fold" and len(en["tokenizer_sha256"]) == 64
    work = tmp_path / "work"
    sp = spm.SentencePieceProcessor(model_file=str(work / "en.sentencepiece.model"))
    assert sp.get_piece_size() <= 100
    doc = "The cat sat on a red door.\n\nMy dog cleaned the mat!"
    out = stage.process(_table([(doc, "en")]))

    model = kenlm.Model(str(work / "en.binary"))
    lines = ["the cat sat on a red door.", "my dog cleaned the mat!"]   # normalized by hand
    pieces = [sp.encode(line, out_type=str) for line in lines]
    assert "".join(pieces[0]) == "\u2581the\u2581cat\u2581sat\u2581on\u2581a\u2581red\u2581door."
    assert len(pieces[0]) < len(lines[0])                      # pieces, not characters
    scores = [s[0] for p in pieces for s in model.full_scores(" ".join(p), bos=True, eos=True)]
    assert len(scores) == len(pieces[0]) + len(pieces[1]) + 2        # pieces plus </s> per line
    expected = 10 ** (-sum(scores) / len(scores))
    assert out["perplexity_value"][0].as_py() == pytest.approx(expected, rel=1e-9)
    assert 1.0 < expected < 100.0
    values = stage.process(_table([("The cat sat on the mat.", "en"),
                                   ("Mat the on door red painted garden cat.", "en")]))
    good, bad = values["perplexity_value"].to_pylist()
    assert good * 3 < bad


def test_sentencepiece_training_deterministic_and_bounded(tmp_path):
    lines = [ppl.normalize(s) for doc in _english_docs() for s in doc.split("\n")] * 30  # 3,000
    first = ppl.train_sentencepiece(lines, 100, 0.9995, 1000, tmp_path / "a")
    again = ppl.train_sentencepiece(lines, 100, 0.9995, 1000, tmp_path / "b")   # fresh cache
    assert first == again
    # bounded: more lines than input_sentence_size -> the stride sample lines[::3] only
    assert ppl.train_sentencepiece(lines[::3], 100, 0.9995, 1000, tmp_path / "c") == first
    assert ppl.train_sentencepiece(lines, 100, 0.9995, 3000, tmp_path / "d") != first
    with pytest.raises(ValueError, match="no reference line"):
        ppl.train_sentencepiece([], 100, 0.9995, 1000, tmp_path / "e")
    many_chars = ["".join(chr(0x4E00 + i + j) for j in range(20)) for i in range(0, 400, 2)]
    with pytest.raises(ValueError, match="sentencepiece_vocab_size=100.*required_chars"):
        ppl.train_sentencepiece(many_chars, 100, 1.0, 1000, tmp_path / "f")


def test_model_and_tokenizer_cached_together(tmp_path, monkeypatch):
    import sentencepiece as spm

    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    _, first = _fit(tmp_path / "a", cache=cache, tokenizer="sentencepiece")
    model_dirs = sorted(p.parent for p in (cache / "kenlm").glob("*/model.binary"))
    assert len(model_dirs) == 3                                 # full model + one per fold
    assert all((d / "sentencepiece.model").is_file() for d in model_dirs)
    full = tmp_path / "a" / "work" / "en.sentencepiece.model"
    assert any((d / "sentencepiece.model").read_bytes() == full.read_bytes() for d in model_dirs)

    calls = []
    monkeypatch.setattr(ppl.model, "_run", lambda cmd: calls.append(cmd))
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", lambda **kw: calls.append(kw))
    (tmp_path / "b").mkdir()
    _, second = _fit(tmp_path / "b", cache=cache, tokenizer="sentencepiece")
    assert calls == []                                          # nothing retrained
    assert second["languages"] == first["languages"]


def test_unreadable_sentencepiece_file_names_the_file(tmp_path):
    stage, _ = _fit(tmp_path, tokenizer="sentencepiece")
    sp_file = tmp_path / "work" / "en.sentencepiece.model"
    sp_file.unlink()                                            # a hard link to the cache
    sp_file.write_bytes(b"not a sentencepiece model\n")
    fresh = PerplexityStage(stage.config, stage.ctx)
    with pytest.raises(RuntimeError,
                       match=r"cannot read SentencePiece model file .*en\.sentencepiece\.model"):
        fresh.process(_table([("the cat sat on the mat.", "en")]))
    sp_file.unlink()
    with pytest.raises(RuntimeError, match=r"SentencePiece model file .*en\.sentencepiece"):
        PerplexityStage(stage.config, stage.ctx).process(_table([("the cat.", "en")]))


def test_sentencepiece_chinese_pieces_cover_the_text(tmp_path):
    lines = [ppl.normalize(z) for z in ZH] * 50                # "我们今天去北京." ...
    model = ppl.train_sentencepiece(lines, 100, 0.9995, 10_000, tmp_path)
    tokenizer = ppl.LineTokenizer("zh", model)
    assert tokenizer.kind == "sentencepiece"
    line = ppl.normalize("我们明天去北京。")
    pieces = tokenizer([line])[0].split(" ")
    assert "".join(pieces).replace("\u2581", " ").strip() == line == "我们明天去北京."
    assert 1 < len(pieces) < len(line)                        # multi-character pieces
    assert ppl.LineTokenizer("zh")([line]) == ["我们 明天 去 北京 ."]   # words path unchanged


def test_given_model_file_is_checked_before_any_work(tmp_path):
    """The config's validators do no I/O; the stage's preflight loads each
    given model once, before any work (pipeline.config.preflight)."""
    bad = tmp_path / "zh.binary"
    bad.write_bytes(b"not a kenlm model\n")
    config = Config(reference_source="ref", models={"zh": str(bad), "en": str(tmp_path / "missing.arpa")})
    lines = PerplexityStage.preflight(config)
    assert len(lines) == 2
    assert lines[0].startswith("perplexity.models.zh: perplexity: cannot read KenLM model file ") and "zh.binary" in lines[0]
    assert lines[1].startswith("perplexity.models.en: perplexity: KenLM model file ") and "missing.arpa" in lines[1]


def test_given_model_is_used_instead_of_training(tmp_path):
    import kenlm

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _fit(tmp_path / "a")
    given = tmp_path / "given-en.binary"
    given.write_bytes((tmp_path / "a" / "work" / "en.binary").read_bytes())
    stage, facts = _fit(tmp_path / "b", models={"en": str(given)})
    assert facts["languages"]["en"]["given_model"] == str(given)
    assert facts["languages"]["en"]["distribution"] == "given model, in-sample"
    doc = "The cat sat on a red door."
    out = stage.process(_table([(doc, "en")]))
    model = kenlm.Model(str(given))
    scores = [s[0] for s in model.full_scores("the cat sat on a red door .", bos=True, eos=True)]
    assert out["perplexity_value"][0].as_py() == pytest.approx(10 ** (-sum(scores) / len(scores)), rel=1e-9)
    assert out["perplexity_bucket"][0].as_py() in {"head", "middle", "tail"}


def test_every_line_break_splits_lines():
    expected = ["hello", "world foo", "bar"]
    for sep in ("\n", "\r\n", "\r", "\u2028", "\u2029", "\x85"):
        assert ppl.normalized_lines(f"Hello{sep}World foo{sep}{sep}bar") == expected, repr(sep)


def test_max_reference_chars_draws_a_seeded_subset(tmp_path):
    """A cap below the available reference text trains on a hash-drawn subset
    of documents (about cap / available of them), the same one on a re-run."""
    for name in ("full", "capped", "again"):
        (tmp_path / name).mkdir()
    _, full = _fit(tmp_path / "full")
    available = full["languages"]["en"]["reference_chars"]
    _, capped = _fit(tmp_path / "capped", max_reference_chars=available // 2)
    _, again = _fit(tmp_path / "again", max_reference_chars=available // 2)
    en = capped["languages"]["en"]
    assert 0 < en["reference_docs"] < full["languages"]["en"]["reference_docs"] == 10
    assert en["reference_chars"] < available
    assert en["model_sha256"] == again["languages"]["en"]["model_sha256"]


def test_a_failing_lmplz_raises_one_line_with_command_status_and_stderr_tail(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    noise = "".join(f'echo "progress line {i}" >&2\n' for i in range(20))
    (tools / "lmplz").write_text(f"#!/bin/sh\n{noise}echo 'lmplz: Could not allocate 1000G' >&2\nexit 3\n")
    (tools / "build_binary").write_text("#!/bin/sh\nexit 0\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    with pytest.raises(ppl.ToolError) as exc:
        ppl.train_kenlm(["a b c", "b c d"], 3, tools, tmp_path / "cache", memory="16M")
    err = exc.value
    assert err.returncode == 3 and err.command[:6] == [str(tools / "lmplz"), "-o", "3", "--discount_fallback",
                                                       "-S", "16M"]
    assert err.stderr_tail == ["progress line 16", "progress line 17", "progress line 18", "progress line 19",
                               "lmplz: Could not allocate 1000G"]
    assert "\n" not in str(err) and str(err).startswith(f"perplexity: lmplz failed (exit 3): {tools / 'lmplz'} -o 3")
    assert str(err).endswith("; stderr: progress line 16 | progress line 17 | progress line 18 | "
                             "progress line 19 | lmplz: Could not allocate 1000G")
    assert not list((tmp_path / "cache" / "kenlm").iterdir())  # no half model left in the cache


def test_chinese_folding_leaves_simplified_text_as_it_is():
    """Training and scoring fold Traditional documents to Simplified (``tw2sp``)
    but never rewrite a Simplified one: phrase-level tw2sp on every document
    turned the mainland 文件 into 文档."""
    from stages.perplexity.text import fold_chinese, normalized_lines

    simplified = "请把这个文件保存到服务器上。\n打开文件夹。"
    assert fold_chinese(simplified, "zh", "tw2sp") == simplified
    assert fold_chinese("請把這個檔案儲存到伺服器上。", "zh", "tw2sp") == "请把这个文件保存到服务器上。"
    assert fold_chinese("請把這個檔案儲存到伺服器上。", "zh", "t2s") == "请把这个档案储存到伺服器上。"
    # a Simplified document with one Traditional character: only that character
    assert fold_chinese("请把这个文件保存到服務器上。", "zh", "tw2sp") == "请把这个文件保存到服务器上。"
    # lines are kept (no joining across the line break), other languages untouched
    assert normalized_lines("檔案\n說明", "zh", "tw2sp") == ["文件", "说明"]
    assert fold_chinese("請把這個檔案", "ja", "tw2sp") == "請把這個檔案"
