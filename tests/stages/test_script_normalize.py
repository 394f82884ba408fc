"""Tests for stages/script_normalize.py: Traditional <-> Simplified Chinese with OpenCC."""

from __future__ import annotations

import pyarrow as pa
import pydantic
import pytest

from stages.script_normalize import Config, ScriptNormalizeStage, changed_chars
from stages.zh_script import document_script, join_ideographs, script_counts, traditional_only_table

HANT = "這個檔案說明頭髮的問題。"        # Traditional (Taiwan): "this file explains the hair problem"
HANS = "这个文件说明头发的问题。"        # its mainland Simplified form (文件 = file)


def _table(rows: list[tuple[str, str | None]]) -> pa.Table:
    """A stage input: base columns the stage touches, ``langid_lang`` and ``keep``."""
    return pa.table({"id": [f"d{i}" for i in range(len(rows))],
                     "text": pa.array([t for t, _ in rows], pa.string()),
                     "chars": pa.array([len(t) for t, _ in rows], pa.int64()),
                     "langid_lang": pa.array([lang for _, lang in rows], pa.string()),
                     "keep": pa.array([True] * len(rows))})


def _run(rows: list[tuple[str, str | None]], **config) -> pa.Table:
    return ScriptNormalizeStage(Config(enabled=True, **config), None).process(_table(rows))


def test_traditional_converted_character_level_and_simplified_unchanged():
    out = _run([(HANT, "zh"), (HANS, "zh")])
    # Character level: 檔案 becomes 档案 (the characters), not 文件 (the mainland word).
    assert out["text"].to_pylist() == ["这个档案说明头发的问题。", HANS]
    assert out["script_normalize_changed"].to_pylist() == [8, 0]
    assert out["script_normalize_from"].to_pylist() == ["Hant", "Hans"]
    assert out["chars"].to_pylist() == [12, 12]
    assert out["keep"].to_pylist() == [True, True] and out["reason"].to_pylist() == [None, None]


def test_phrase_level_on_request_maps_regional_words():
    out = _run([(HANT, "zh"), (HANS, "zh")], level="phrase", region="tw")  # OpenCC tw2sp
    assert out["text"].to_pylist() == [HANS, HANS]                      # 檔案 -> 文件
    assert out["script_normalize_changed"].to_pylist() == [9, 0]
    back = _run([(HANS, "zh"), (HANT, "zh")], direction="s2t", level="phrase", region="tw")  # s2twp
    assert back["text"].to_pylist() == [HANT, HANT]                     # 文件 -> 檔案
    assert back["script_normalize_changed"].to_pylist() == [9, 0]


def test_character_and_phrase_levels_differ_where_a_character_depends_on_the_word():
    rows = [("乾隆皇帝的頭髮", "zh")]
    assert _run(rows)["text"].to_pylist() == ["干隆皇帝的头发"]               # 乾 -> 干 on its own
    assert _run(rows, level="phrase")["text"].to_pylist() == ["乾隆皇帝的头发"]  # TSPhrases keeps 乾隆
    rows = [("乾隆皇帝的头发", "zh")]
    assert _run(rows, direction="s2t")["text"].to_pylist() == ["乾隆皇帝的頭發"]  # 发 -> 發 (first candidate)
    assert _run(rows, direction="s2t", level="phrase")["text"].to_pylist() == ["乾隆皇帝的頭髮"]
    # Phrase level may change the length: 使用者 (3) -> 用户 (2); 4 characters of the output are new.
    out = _run([("使用者的預設程式", "zh")], level="phrase", region="tw")
    assert out["text"].to_pylist() == ["用户的预设程序"] and out["chars"].to_pylist() == [7]
    assert out["script_normalize_changed"].to_pylist() == [4]


def test_non_chinese_and_undecidable_documents_untouched():
    rows = [("Hello 這個檔案", "en"), ("這個檔案", None), ("中文", "zh"), ("這是简体混合", "zh")]
    out = _run(rows)
    assert out["text"].to_pylist() == ["Hello 這個檔案", "這個檔案", "中文", "这是简体混合"]
    assert out["script_normalize_changed"].to_pylist() == [None, None, 0, 1]
    assert out["script_normalize_from"].to_pylist() == [None, None, None, "mixed"]


def test_s2t_converts_simplified_and_leaves_traditional():
    out = _run([(HANS, "zh"), (HANT, "zh")], direction="s2t")
    assert out["text"].to_pylist() == ["這個文件說明頭發的問題。", HANT]
    assert out["script_normalize_changed"].to_pylist() == [7, 0]


def test_tally_counts_converted_documents_and_characters():
    out = _run([(HANT, "zh"), (HANS, "zh"), ("Hello", "en"), ("中文", "zh"), ("這是简体混合", "zh")])
    assert ScriptNormalizeStage.tally(out) == {"documents_converted": 2, "characters_changed": 9,
                                               "from/Hant": 1, "from/Hans": 1, "from/none": 1, "from/mixed": 1}
    assert set(ScriptNormalizeStage.tally_columns) <= set(ScriptNormalizeStage.columns)


def test_config_defaults_and_errors():
    assert (Config().enabled, Config().direction, Config().level, Config().region) == (False, "t2s", "char", "none")
    with pytest.raises(pydantic.ValidationError):
        Config(level="word")
    with pytest.raises(pydantic.ValidationError):
        Config(direction="t2s", typo=1)
    assert ScriptNormalizeStage.effective_settings(Config()) == {
        "opencc": {"characters_only": ["TSCharacters.ocd2"]}, "opencc_version": __import__("opencc").__version__}
    assert ScriptNormalizeStage.effective_settings(Config(level="phrase", region="tw"))["opencc"] == "tw2sp"
    assert ScriptNormalizeStage.effective_settings(Config(direction="s2t", region="hk"))["opencc"] == {
        "characters_only": ["STCharacters.ocd2", "HKVariants.ocd2"]}


def test_script_helpers():
    # 這個檔說頭髮問題 / 这个说头发问题; 案 明 的 文 件 are both scripts' characters.
    assert script_counts(HANT) == (0, 8) and script_counts(HANS) == (7, 0)
    assert [document_script(t) for t in (HANT, HANS, "這是简体", "中文", "abc")] == ["Hant", "Hans", "mixed", None, None]
    assert join_ideographs("檔 案\n說明 abc 中 1") == "檔案說明 abc 中 1"
    table = traditional_only_table()
    assert table[ord("檔")] == "档" and ord("乾") not in table and ord("文") not in table


def test_changed_chars():
    assert changed_chars("abc", "abc") == 0
    assert changed_chars("這個檔案", "这个档案") == 3                 # 案 is both scripts'
    assert changed_chars("使用者\n檔案", "用户\n文件") == 1 + 2      # 户 new (用 matched); 文件


@pytest.mark.parametrize("text, config, char, phrase", [
    (HANT, {}, "这个档案说明头发的问题。", "这个档案说明头发的问题。"),
    (HANT, {"region": "tw"}, "这个档案说明头发的问题。", HANS),
    ("乾隆皇帝的頭髮", {}, "干隆皇帝的头发", "乾隆皇帝的头发"),
    ("乾隆皇帝的头发", {"direction": "s2t"}, "乾隆皇帝的頭發", "乾隆皇帝的頭髮"),
    (HANS, {"direction": "s2t", "region": "tw"}, "這個文件說明頭發的問題。", HANT),
    ("使用者的預設程式", {"region": "tw"}, "使用者的预设程式", "用户的预设程序"),
])
def test_documented_examples(text, config, char, phrase):
    """The table "Character level vs phrase level" of docs/stages/script_normalize.md."""
    assert _run([(text, "zh")], **config)["text"].to_pylist() == [char]
    assert _run([(text, "zh")], level="phrase", **config)["text"].to_pylist() == [phrase]


def test_tally_of_a_partition_without_chinese():
    out = _run([("Hello", "en")])
    assert ScriptNormalizeStage.tally(out) == {"documents_converted": 0, "characters_changed": 0}
    assert ScriptNormalizeStage.tally(out.slice(0, 0)) == {"documents_converted": 0, "characters_changed": 0}
