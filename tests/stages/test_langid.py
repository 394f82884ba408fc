"""Tests for stages/langid.py: lid.176 language ID, zh merge, script, reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pydantic
import pytest

from stages import langid, langid_chunks
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
CHUNKING = {"min_chars": 10, "min_cjk_chars": 2, "chunk_chars": 1000, "paragraph_letters": 100,
            "cjk_line_share": langid.CJK_LINE_SHARE, "max_chunks": 32}
DATA = Path(__file__).parent / "data"


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
    return out.select(["langid_lang", "langid_score", "langid_script", "langid_top", "langid_mix",
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
    han = sum(map(len, CHINESE_LINES)) - sum(line.count(p) for line in CHINESE_LINES for p in "，。、")
    found, whole = langid_chunks.chunks(text, **CHUNKING)
    assert [(c.letters, c.han) for c in found] == [(han, han), (23, 0)]
    assert (whole.letters, whole.han, whole.kana, whole.hangul) == (han + 23, han, 0, 0)
    (row,) = _run(tmp_path, [text])
    assert row["langid_lang"] == "zh"
    top = dict(json.loads(row["langid_top"]))
    assert 0.0 < top.get("en", 0.0) < 0.05      # 23 letters against 201 Han x 2.9
    assert json.loads(row["langid_mix"]) == {"zh": round(han / (han + 23), 4), "en": round(23 / (han + 23), 4)}


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
    assert all(0.0 <= s <= 1.0 for found in langid.identify_many(texts, config) for _, s in found.top)
    assert langid.identify_many(["", "!!"], config) == [([], {}, None), ([], {}, None)]


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
    (chunk,), _ = langid_chunks.chunks("Ｈｅｌｌｏ　Ｗｏｒｌｄ", **CHUNKING)
    assert (chunk.start, chunk.end, chunk.letters) == (0, 11, 10)
    assert langid_chunks.chunks("Ｈｅｌｌｏ", **CHUNKING)[0] == []


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


def test_chunks_cut_long_lines_join_short_ones_and_are_capped():
    params = {**CHUNKING, "chunk_chars": 100, "max_chunks": 64}
    text = ("word " * 300 + "\r\n") * 3 + "\n\n" + "\u2028".join(["Zeile eins hier"] * 3)
    found, whole = langid_chunks.chunks(text, **params)
    spans = [text[c.start:c.end] for c in found]
    # 3 lines of 1,500 characters cut at spaces into pieces of at most 100,
    # then the three short lines (one paragraph) join the last 4-letter piece
    # (a paragraph break starts a chunk after 100 letters); the 4-letter tail
    # of the first line, too long to join the next line's first piece, is too
    # short (< min_chars) to be read alone
    assert len(found) == 46 and max(len(s) for s in spans) == 100 and min(len(s) for s in spans[:-1]) >= 95
    assert spans[-1] == "word \r\n\n\n" + "\u2028".join(["Zeile eins hier"] * 3)
    assert sum(c.letters for c in found) == whole.letters - 4 == 3 * 1200 + 39 - 4
    texts = [langid.model_text(" ".join(s.split())) for s in spans]
    assert all(t.count("\n") == 1 and t.endswith("\n") and "\r" not in t and "\u2028" not in t for t in texts)
    many = "\n\n".join(f"paragraph number {i} here" for i in range(100))
    capped, _ = langid_chunks.chunks(many, **{**params, "max_chunks": 8})
    assert len(capped) == 8
    # evenly spaced (chunk int(i * 33 / 8)) over the 33 chunks of 3-4 paragraphs (<= 100 chars)
    assert [many[c.start:c.end].split()[2] for c in capped] == ["0", "15", "27", "39", "51", "63", "75", "87"]


def test_short_table_rows_are_read_together_not_alone(tmp_path):
    # A German man page: an English NAME line, then option rows of 1-3 words.
    rows = ["-a  alle Einträge", "-d  nur Verzeichnisse", "-h  für Menschen lesbar",
            "-l  langes Format", "-r  umgekehrte Reihenfolge", "-s  Größe anzeigen",
            "-t  nach Zeit sortieren", "-1  eine Datei pro Zeile"]
    text = "NAME\n  ls - list directory contents\n\nOPTIONEN\n" + "\n".join(rows) + "\n"
    found, _ = langid_chunks.chunks(text, **CHUNKING)
    assert len(found) == 1                  # 200 characters, no paragraph of 100 letters
    (row,) = _run(tmp_path, [text])
    assert (row["langid_lang"], row["reason"]) == ("de", None)


def test_chunks_of_a_batch_equal_chunks_one_document_at_a_time(monkeypatch):
    texts = [ENGLISH, "", "a\r", "\r\nb c d e f g h i j k l\r", "\n".join(CHINESE_LINES), "x" * 3000,
             "erste Zeile\r\n\r\nnoch eine Zeile mit Wörtern"]
    alone = [langid_chunks.chunks(t, **CHUNKING) for t in texts]
    monkeypatch.setattr(langid_chunks, "BATCH_CHARS", 50)
    assert langid_chunks.chunks_many(texts, **CHUNKING) == alone
    monkeypatch.setattr(langid_chunks, "BATCH_CHARS", 1 << 20)
    assert langid_chunks.chunks_many(texts, **CHUNKING) == alone
    # \r\n\r\n is a blank line (a paragraph break), \r\n one break
    found, _ = alone[-1]
    assert [texts[-1][c.start:c.end].strip() for c in found] == ["erste Zeile\r\n\r\nnoch eine Zeile mit Wörtern"]
    found, _ = langid_chunks.chunks(texts[-1], **{**CHUNKING, "paragraph_letters": 5})
    assert [texts[-1][c.start:c.end].strip() for c in found] == ["erste Zeile", "noch eine Zeile mit Wörtern"]


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
    assert langid.identify_many([full_width], config)[0].top[0][0] == "en"
    # letters and digits become ASCII; full-width punctuation stays (a Chinese cue)
    assert langid.model_text("Ｅｎｇｌｉｓｈ１２，中文（注）") == "English12，中文（注）\n"
    assert langid.model_text("\ud800abc") == "\ufffdabc\n"
    [top] = langid.identify_many(["\ud800" * 20 + "This is an English sentence about the weather."], config)
    assert top.top[0][0] == "en"


# Issue 15: documents of any shape, mixed pages, short CJK, locale codes.

def test_paragraph_free_polish_chat_log_is_pl(tmp_path):
    # 3,000 characters, no blank line, opening with English IRC status lines:
    # the first 200 characters alone are "en" (0.81) for lid.176.
    text = (DATA / "chat_pl.txt").read_text("utf-8")
    assert len(text) > 3000 and "\n\n" not in text
    (head,) = langid.load_model().f.predict(" ".join(text[:200].split()) + "\n", 1, 0.0, "replace")
    assert head[1] == "__label__en"
    (row,) = _run(tmp_path, [text])
    assert (row["langid_lang"], row["reason"]) == ("pl", None)
    assert row["langid_score"] > 0.95
    assert json.loads(row["langid_mix"]) == {"pl": 1.0}


def test_traditional_chinese_with_three_latin_names_is_zh_hant(tmp_path):
    text = "本軟體由 Linus Torvalds、Richard Stallman 及 Guido van Rossum 共同維護"
    top = langid.load_model().f.predict(text + "\n", 2, 0.0, "replace")
    assert [label for _, label in top] == ["__label__ja", "__label__zh"]     # ja 0.72, zh 0.16
    (row,) = _run(tmp_path, [text])
    assert (row["langid_lang"], row["langid_script"], row["reason"]) == ("zh", "Hant", None)
    assert row["langid_score"] > 0.85           # the ja and zh probabilities go to zh
    assert json.loads(row["langid_mix"]) == {"zh": 1.0}


def test_short_cantonese_line_is_zh_not_unknown(tmp_path):
    rows = _run(tmp_path, ["佢哋喺度食緊飯呀", "中文", "概要", "中"])
    assert [(r["langid_lang"], r["reason"]) for r in rows] == [
        ("zh", None), ("zh", None), ("zh", None), (None, "langid.unknown")]
    # 概要: lid.176 knows neither character (en 0.12); two Han letters are zh by script
    assert rows[2]["langid_score"] == 1.0
    assert rows[0]["langid_script"] == "Hant" and rows[0]["langid_mix"] == '{"zh": 1.0}'


def test_kana_means_ja_hangul_means_ko_and_kanji_headings_follow_the_page(tmp_path):
    japanese = "設定\n\nこのコマンドはバイナリーパッケージとソースパッケージをビルドする作業をすべて行ってくれます。"
    rows = _run(tmp_path, [japanese, "한국어 문서입니다", "大韓民國"])
    assert [r["langid_lang"] for r in rows] == ["ja", "ko", "zh"]
    assert json.loads(rows[0]["langid_mix"]) == {"ja": 1.0}


NORWEGIAN = ("Norsk er et nordgermansk språk som snakkes av rundt fem millioner mennesker, "
             "først og fremst i Norge, hvor det er offisielt språk. Sammen med svensk og dansk "
             "danner norsk et dialektkontinuum av mer eller mindre gjensidig forståelige språk.")


def test_locale_codes_in_allow_list_and_thresholds(tmp_path):
    (plain,) = _run(tmp_path, [NORWEGIAN])
    assert plain["langid_lang"] == "no"          # lid.176 has no nb label
    rows = _run(tmp_path, [NORWEGIAN, ENGLISH], allowed_languages=["nb", "eng"])
    assert [(r["langid_lang"], r["reason"]) for r in rows] == [("no", None), ("en", None)]
    rows = _run(tmp_path, [NORWEGIAN, "".join(CHINESE_LINES)], allowed_languages=["nob", "zh-Hant", "cmn"])
    assert [r["reason"] for r in rows] == [None, None]
    (row,) = _run(tmp_path, [NORWEGIAN], min_score_by_lang={"nb": 0.999})
    assert row["reason"] == "langid.low_score"
    with pytest.raises(pydantic.ValidationError, match="'nb' and 'no' both mean language 'no'"):
        Config(min_score_by_lang={"nb": 0.5, "no": 0.6})
    # the published config keeps the user's codes; the effective settings the labels applied
    config = Config(allowed_languages=["nb", "zh-Hant", "en", "code"], min_score_by_lang={"nb": 0.7})
    assert config.allowed_languages == ["nb", "zh-Hant", "en", "code"]
    assert LangIdStage.effective_settings(config) == {
        "allowed_languages": ["code", "en", "no", "zh"], "min_score_by_lang": {"no": 0.7}}


def test_mixed_page_mix_column(tmp_path, monkeypatch):
    japanese = ("バックアップを取る頻度は、バックアップを取るデータの種類に依存します。たとえば、"
                "クリティカルなデータをサーバーに保存しているのであれば、毎晩のバックアップでさえ不十分でしょう。")
    english = ("How often you should back up depends on the type of data. If critical data is "
               "stored on your servers, even nightly backups may not be enough.")
    rows = _run(tmp_path, [japanese + "\n\n" + english, ENGLISH, "print(1)"], hints=[None, None, "code"])
    found, _ = langid_chunks.chunks(japanese + "\n\n" + english, **CHUNKING)
    ja_letters, en_letters = found[0].letters, found[1].letters
    assert (ja_letters, en_letters) == (83, 112)
    assert rows[0]["langid_mix"] == json.dumps({"en": round(112 / 195, 4), "ja": round(83 / 195, 4)})
    # the vote weighs a kana or kanji as the English letters it stands for: ja
    # wins (0.55 to 0.42; letters alone: en 0.54 to 0.43)
    assert rows[0]["langid_lang"] == "ja"
    monkeypatch.setattr(langid, "HAN_WEIGHT", 1.0)
    monkeypatch.setattr(langid, "KANA_WEIGHT", 1.0)
    assert _run(tmp_path, [japanese + "\n\n" + english])[0]["langid_lang"] == "en"
    assert [r["langid_mix"] for r in rows[1:]] == ['{"en": 1.0}', '{"code": 1.0}']
    assert langid.mix_shares({"a": 1, "b": 1, "c": 1}) == {"a": 0.3334, "b": 0.3333, "c": 0.3333}
    assert langid.mix_shares({}) == {}


def test_serbian_page_with_english_paragraphs_is_not_english(tmp_path, monkeypatch):
    # lid.176 splits Serbian (Latin) between sr, hr, bs and sh; the group is
    # chosen first (their summed score), then its best member.
    serbian = ("Možete da podesite računar da se automatski isključi posle određenog vremena "
               "neaktivnosti. Otvorite podešavanja napajanja i izaberite koliko dugo računar "
               "čeka pre nego što pređe u stanje mirovanja.")
    more = "Ako je baterija skoro prazna, računar će sam preći u stanje mirovanja da biste sačuvali podatke."
    english = ("Click Power in the sidebar to open the panel. The screen turns off after five "
               "minutes of inactivity, and the computer suspends after fifteen minutes.")
    text = "\n\n".join([serbian, english, more])
    (row,) = _run(tmp_path, [text])
    top = json.loads(row["langid_top"])
    assert [code for code, _ in top] == ["sr", "en", "hr"] and row["reason"] is None
    # sr scores the group: sr 0.26 + hr 0.17 + the rest
    assert top[0][1] == 0.5583
    # langid_score is how surely each chunk is identified (its own language,
    # group-summed): the English paragraph does not make the page unidentifiable
    assert round(row["langid_score"], 4) == 0.8473
    assert json.loads(row["langid_mix"]) == {"sr": 0.4553, "en": 0.3306, "hr": 0.2141}
    monkeypatch.setattr(langid, "_GROUP_OF", {})
    (row,) = _run(tmp_path, [text])
    # without the groups the page is labelled en (0.2891), wrongly
    assert json.loads(row["langid_top"])[0] == ["en", 0.2891] and row["langid_lang"] == "en"


# gnome-help power-autosuspend.page, Danish translation (GNOME Documentation
# Project, CC BY-SA 3.0; corpus-multi dev): a translated title above an
# untranslated English paragraph, then Danish and English steps.
PARTLY_DANISH = (
    "Opsæt automatisk hviletilstand\n\nYou can configure your computer to automatically suspend when idle. "
    "Different intervals can be specified for running on battery or plugged in.\n\nÅbn Aktivitetsoversigten og "
    "begynd at skrive Strøm.\n\nKlik på Strøm for at åbne panelet.\n\nIn the Power Saving Options section, click "
    "Automatic Suspend.\n\nChoose On Battery Power or Plugged In, set the switch to on, and select a Delay. Both "
    "options can be configured.\n\nOn a desktop computer, there is one option labeled When Idle.")


def test_partly_translated_page_is_read_line_by_line_where_a_chunk_is_unsure(tmp_path, monkeypatch):
    (row,) = _run(tmp_path, [PARTLY_DANISH])
    assert row["langid_lang"] == "en" and row["reason"] is None
    assert round(row["langid_score"], 4) == 0.5467
    assert json.loads(row["langid_mix"]) == {"da": 0.5369, "en": 0.4631}
    # without the second look the Danish steps between English paragraphs
    # are one chunk that lid.176 reads as da 0.47: the page fell below
    # min_score 0.5 (read line by line: 0.64)
    monkeypatch.setattr(langid, "SECOND_LOOK_BELOW", 0.0)
    (before,) = _run(tmp_path, [PARTLY_DANISH])
    assert before["langid_lang"] == "en" and before["reason"] == "langid.low_score"
    assert round(before["langid_score"], 4) == 0.4949


def test_second_look_needs_lines_that_cover_the_chunk(tmp_path):
    # a picture of symbols with one caption line: the caption alone would be
    # read surely, but it holds too few of the chunk's letters
    picture = ("  o O o O o ,\n  (u) (x) o o\n  | .' o O o O o\n  (u) (x) (o) \"\"---.\n"
               "Letzte Worte eines Fallschirmspringers\nam Abend vor dem Sprung")
    (row,) = _run(tmp_path, [picture])
    assert row["reason"] == "langid.low_score" and round(row["langid_score"], 4) == 0.4737   # de, as before
    texts = [picture, PARTLY_DANISH]
    per_doc = langid_chunks.chunks_many(texts, **CHUNKING)
    predict = langid.load_model().f.predict
    probs = [langid._chunk_probabilities(predict(langid.model_text(" ".join(t[c.start:c.end].split())), 3, 0.0,
                                                 "replace"), c, whole)
             for t, (cs, whole) in zip(texts, per_doc) for c in cs]
    second = langid._second_look(texts, per_doc, probs, Config())
    # the caption lines hold 54 of the picture chunk's 71 letters (< 80%): not
    # read again; of the page's 3 chunks, the first (title + English, da 0.19)
    # is read again but not surely enough (< 0.6), the second (da 0.47) is
    assert list(second) == [2]
    assert round(second[2][0], 4) == 0.644 and second[2][1] == {"da": 71 / 122, "en": 51 / 122}


SELECTOR = ("Read this page in English\nDiese Seite auf Deutsch lesen\nLire cette page en français\n"
            "Leer esta página en español\nLeggi questa pagina in italiano\nLeia esta página em português\n"
            "Lees deze pagina in het Nederlands\nLäs den här sidan på svenska\nPrzeczytaj tę stronę po polsku\n"
            "Прочитать эту страницу на русском")


def test_second_look_refuses_a_page_of_one_line_per_language(tmp_path, monkeypatch):
    # each line is surely identified, but ten languages are no text of one:
    # the line reading is refused (more than two languages), the page stays unsure
    (row,) = _run(tmp_path, [SELECTOR])
    assert row["reason"] == "langid.low_score" and round(row["langid_score"], 4) == 0.2242
    monkeypatch.setattr(langid, "SECOND_LOOK_BELOW", 0.0)
    assert round(_run(tmp_path, [SELECTOR])[0]["langid_score"], 4) == 0.2242


def test_format_characters_and_compatibility_letters_are_folded_for_the_model(tmp_path):
    zero_width = "\u200b".join(ENGLISH)                       # a zero-width space between all characters
    bold = "".join(chr(0x1D41A + ord(c) - ord("a")) if "a" <= c <= "z" else c for c in ENGLISH)   # 𝐚..𝐳
    rows = _run(tmp_path, [zero_width, bold])
    assert [r["langid_lang"] for r in rows] == ["en", "en"] and [r["reason"] for r in rows] == [None, None]
    assert langid.model_text("a\u200bb\u200cc\u200dd\u00ade") == "ab\u200cc\u200dde\n"   # ZWNJ, ZWJ kept
    assert langid.model_text("\ufeb3\ufefc") == "\u0633\u0644\u0627\n"                 # presentation forms
