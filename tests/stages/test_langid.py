"""Tests for stages/langid.py: lid.176 language ID, zh merge, script, reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pydantic
import pytest

from stages import langid
from stages.base import StageContext
from stages.langid import Config, LangIdStage

ENGLISH = (
    "The committee met on Tuesday morning to review the annual budget. After a long "
    "discussion, the members agreed to increase funding for the public library and "
    "to repair the old bridge near the river before the winter arrives."
)
CHINESE_LINES = [
    "长江是中国最长的河流，发源于青藏高原，自西向东流经十一个省、自治区和直辖市，最后注入东海。",
    "千百年来，沿岸的人们依靠这条大河灌溉农田、运输货物，逐渐形成了许多繁华的城市和集镇。",
    "每到春天，两岸的油菜花一片金黄，游客们乘船顺流而下，欣赏三峡雄伟壮丽的自然风光。",
    "近年来，政府加强了对流域生态环境的保护，禁止过度捕捞，鼓励农民退耕还林、还湖。",
    "专家认为，只有坚持绿色发展的道路，才能让这条母亲河继续滋养一代又一代的中华儿女。",
]
TRADITIONAL = "長江是中國最長的河流，發源於青藏高原，自西向東流經十一個省，最後注入東海。"


def _ctx(tmp_path: Path) -> StageContext:
    return StageContext(work_dir=tmp_path, cache_dir=tmp_path, seed=0, tools_dir=tmp_path)


def _table(texts: list[str], hints: list[str | None] | None = None) -> pa.Table:
    n = len(texts)
    return pa.table({
        "id": [f"t:f:{i + 1}" for i in range(n)],
        "source": ["t"] * n,
        "file": ["f"] * n,
        "line": pa.array(range(1, n + 1), pa.int64()),
        "text": texts,
        "meta": ["{}"] * n,
        "lang_hint": pa.array(hints or [None] * n, pa.string()),
    })


def _run(tmp_path: Path, texts: list[str], hints=None, **config) -> list[dict]:
    out = LangIdStage(Config(**config), _ctx(tmp_path)).process(_table(texts, hints))
    return out.select(["langid_lang", "langid_score", "langid_script", "langid_top",
                       "keep", "reason"]).to_pylist()


def test_english_paragraph_is_en_with_high_score(tmp_path):
    (row,) = _run(tmp_path, [ENGLISH])
    assert row["langid_lang"] == "en"
    assert row["langid_score"] > 0.9
    assert row["keep"] is True and row["reason"] is None
    assert row["langid_script"] is None
    top = json.loads(row["langid_top"])
    assert top[0][0] == "en" and len(top) == 3


def test_chinese_with_english_menu_line_and_mixed_line_breaks_is_zh(tmp_path):
    text = "\n".join(CHINESE_LINES[:3]) + "\r\nHome | About | Contact\r\n" + "\r\n".join(
        CHINESE_LINES[3:])
    (row,) = _run(tmp_path, [text])
    assert row["langid_lang"] == "zh"
    assert row["langid_script"] == "Hans"
    assert row["langid_score"] > 0.8
    assert row["reason"] is None


def test_paragraphs_vote_by_length(tmp_path):
    # A long Chinese paragraph outweighs a short English one (blank line between).
    text = "".join(CHINESE_LINES) + "\n\n" + "Click here to read more news."
    segs = langid.segments(text, 10, 500, 32)
    assert [w for _, w in segs] == [sum(map(len, CHINESE_LINES)) - sum(
        line.count(p) for line in CHINESE_LINES for p in "，。、"), 23]
    (row,) = _run(tmp_path, [text])
    assert row["langid_lang"] == "zh"
    top = dict(json.loads(row["langid_top"]))
    assert 0.0 < top.get("en", 0.0) < 0.2


def test_traditional_chinese_script(tmp_path):
    (row,) = _run(tmp_path, [TRADITIONAL])
    assert (row["langid_lang"], row["langid_script"]) == ("zh", "Hant")
    assert langid.chinese_script("中文") is None          # no distinguishing character
    assert langid.chinese_script("abc") is None


def test_script_counts_characters_valid_in_both_scripts_only_to_break_ties():
    # A Traditional Shijing ode: 于 and 采 are also Simplified forms (of 於, 採),
    # but valid Traditional characters too; 詩經 and 國風 decide.
    shijing = "詩經 國風 周南 芣苢：采采芣苢，薄言采之。于以采蘩，于沼于沚。"
    assert langid.chinese_script(shijing) == "Hant"
    # A Tang couplet with only 云 and 里 (Simplified for 雲, 裏; also valid
    # Traditional characters): weak evidence, still Simplified.
    assert langid.chinese_script("漠漠秋云起，稍稍夜寒生。万里") == "Hans"
    assert langid.chinese_script("於是乾杯") == "Hant"       # weak Traditional only
    # Strong evidence outweighs weak: 1 Simplified-only (国) vs 3 weak Traditional (於).
    assert langid.chinese_script("国於於於") == "Hans"
    # A strong tie (国 vs 國) is broken by the weak characters (于 云: Simplified).
    assert langid.chinese_script("國于云国") == "Hans"
    assert langid.chinese_script("國国") is None


def test_script_handles_characters_outside_the_bmp():
    # 𠀾 (U+2003E) is Simplified-only, 𠁞 (U+2005E) its Traditional form.
    assert langid.chinese_script("𠀾𠀾𠁞") == "Hans"
    assert langid.chinese_script("𠁞𠁞𠀾😀") == "Hant"
    assert langid.chinese_script("𠀀😀") is None              # astral, but neither set


def test_script_tables_match_opencc_dictionaries(tmp_path, monkeypatch):
    """The committed stages/data/zh_script_chars.json is what the generator
    makes from the installed OpenCC dictionaries."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_zh_script_chars", Path(langid.__file__).parents[1] / "scripts" / "make_zh_script_chars.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    committed = json.loads(gen.OUT.read_text("utf-8"))
    monkeypatch.setattr(gen, "OUT", tmp_path / "chars.json")
    gen.main()
    fresh = json.loads((tmp_path / "chars.json").read_text("utf-8"))
    assert fresh == committed
    assert len(committed["hans_only"]) == 3801 and len(committed["hant_only"]) == 3198
    assert "发" in committed["hans_only"] and "發" in committed["hant_only"]
    assert "于" in committed["hans_weak"] and "于" not in committed["hans_only"]


def test_identify_many_equals_one_document_at_a_time():
    config = Config()
    texts = [ENGLISH, "", "\n\n".join(CHINESE_LINES) + "\n\nClick here.", TRADITIONAL, "12345",
             "Das ist ein kurzer deutscher Satz über das Wetter."]
    assert langid.identify_many(texts, config) == [langid.identify_many([t], config)[0] for t in texts]
    assert langid.identify_many([], config) == []
    with pytest.raises(TypeError, match="list of str"):
        langid.identify_many(["ok", None], config)
    # zh + yue + wuu probabilities summed never give a score above 1
    assert all(0.0 <= s <= 1.0 for top in langid.identify_many(texts, config) for _, s in top)
    assert langid.identify_many(["", "!!"], config) == [[], []]


@pytest.mark.parametrize("text", ["", " \n\t \r\n ", "1234567890", "中", "!!! ... ???", "１２３４５６７８９０",
                                  "🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂"])
def test_unknown_without_calling_the_model(tmp_path, monkeypatch, text):
    def boom():
        raise AssertionError("model called")

    monkeypatch.setattr(langid, "load_model", boom)
    (row,) = _run(tmp_path, [text])
    assert row["reason"] == "langid.unknown"
    assert row["langid_lang"] is None and row["langid_score"] is None
    assert row["langid_top"] == "[]"


def test_lang_hint_skips_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr(langid, "load_model", lambda: (_ for _ in ()).throw(AssertionError))
    rows = _run(tmp_path, ["def f():\n    return 1\n", "x"], hints=["code", "code"])
    assert [(r["langid_lang"], r["langid_score"], r["reason"]) for r in rows] == [
        ("code", 1.0, None), ("code", 1.0, None)]


def test_full_width_letters_count_as_letters():
    assert langid.segments("Ｈｅｌｌｏ　Ｗｏｒｌｄ", 10, 500, 32) == [("Ｈｅｌｌｏ Ｗｏｒｌｄ", 10)]
    assert langid.segments("Ｈｅｌｌｏ", 10, 500, 32) == []


def test_allow_list_and_min_score_reasons(tmp_path):
    texts = [ENGLISH, "".join(CHINESE_LINES)]
    rows = _run(tmp_path, texts, allowed_languages=["zh"])
    assert [r["reason"] for r in rows] == ["langid.not_allowed", None]
    rows = _run(tmp_path, texts, min_score_by_lang={"en": 0.999})
    assert [r["reason"] for r in rows] == ["langid.low_score", None]
    rows = _run(tmp_path, texts, min_score=0.999, min_score_by_lang={"zh": 0.5})
    assert [r["reason"] for r in rows] == ["langid.low_score", None]
    # code from lang_hint must be listed when an allow-list is set
    rows = _run(tmp_path, ["print(1)"], hints=["code"], allowed_languages=["en"])
    assert rows[0]["reason"] == "langid.not_allowed"


def test_segments_have_no_line_breaks_and_are_capped():
    text = ("word " * 300 + "\r\n") * 3 + "\n\n" + "\u2028".join(["Zeile eins hier"] * 3)
    segs = langid.segments(text, 10, 100, 32)
    assert len(segs) == 2
    assert all("\n" not in s and "\r" not in s and "\u2028" not in s for s, _ in segs)
    assert [len(s) for s, _ in segs] == [100, len("Zeile eins hier") * 3 + 2]
    assert segs[0][1] == 4 * 900
    many = "\n\n".join(f"paragraph number {i} here" for i in range(100))
    assert len(langid.segments(many, 10, 100, 8)) == 8


def test_config_rejects_unknown_keys_and_bad_scores():
    with pytest.raises(pydantic.ValidationError):
        Config(min_scor=0.5)
    with pytest.raises(pydantic.ValidationError):
        Config(min_score_by_lang={"en": 1.5})


def test_deterministic(tmp_path):
    texts = [ENGLISH, "\n".join(CHINESE_LINES), TRADITIONAL, "Das ist ein kurzer deutscher Satz."]
    assert _run(tmp_path, texts) == _run(tmp_path, texts)


def test_full_width_english_is_english_and_surrogates_do_not_break_the_model():
    config = Config()
    full_width = "Ｔｈｉｓ ｉｓ ａ ｆｕｌｌ－ｗｉｄｔｈ Ｅｎｇｌｉｓｈ ｓｅｎｔｅｎｃｅ ａｂｏｕｔ ｔｈｅ ｗｅａｔｈｅｒ ｔｏｄａｙ．"
    # lid.176 on the raw full-width text says Kannada (kn 0.74).
    assert langid.identify_many([full_width], config)[0][0][0] == "en"
    # letters and digits become ASCII; full-width punctuation stays (a Chinese cue)
    assert langid.model_text("Ｅｎｇｌｉｓｈ１２，中文（注）") == "English12，中文（注）\n"
    assert langid.model_text("\ud800abc") == "\ufffdabc\n"
    [top] = langid.identify_many(["\ud800" * 20 + "This is an English sentence about the weather."], config)
    assert top[0][0] == "en"
