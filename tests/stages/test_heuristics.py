"""Tests for stages/heuristics/: per-language rule presets, CJK-aware measures, the
family modules and the registry assembled from them."""

from __future__ import annotations

import importlib
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pydantic
import pytest

from stages import heuristics as H
from stages.base import StageContext
from stages.heuristics import Config, Document, HeuristicsStage, Thresholds

# 1,507 characters of Chinese prose, no spaces, ending in "。".
CHINESE_PROSE = (
    "我出生在江南的一个小镇上，镇子不大，一条清澈的小河从中间穿过，把街道分成了南北两半。河上架着七座石桥，最老的一座据说建于明朝，桥面的青石板已"
    "经被行人的脚步磨得光滑发亮。小时候，每天清晨我都会被窗外的摇橹声唤醒，船家们载着新鲜的蔬菜和鱼虾，从乡下赶到镇上的早市。母亲总是挎着竹篮出门"
    "，回来时篮子里装满了带着露水的青菜、活蹦乱跳的河虾，还有刚出锅的油条和豆浆。祖父是镇上有名的木匠，他的作坊就在我们家后院，里面堆满了杉木、樟"
    "木和各式各样的工具。放学以后，我最喜欢坐在作坊的门槛上，看他用刨子把粗糙的木板刨得平平整整，木屑像花瓣一样卷曲着落在地上，散发出淡淡的清香。"
    "祖父话不多，却常常一边干活一边给我讲过去的故事：哪一年发了大水，哪一家的女儿嫁到了省城，又是谁在战乱年代把全镇的孩子藏进了山里的寺庙。那些故"
    "事里的人物，有的我见过，有的早已不在人世，可在他的讲述中，他们仿佛都还活着，就住在隔壁的巷子里。夏天的傍晚最是热闹，大人们搬出竹椅在河边乘凉"
    "，摇着蒲扇谈论庄稼的收成和城里的新闻；孩子们则光着脚在石阶上追逐打闹，或者趴在栏杆上数河里游来游去的小鱼。偶尔有货郎挑着担子经过，拨浪鼓咚咚"
    "作响，我们便一窝蜂地围上去，眼巴巴地望着那些五颜六色的糖果和小玩意儿。秋天到了，镇外的稻田一片金黄，家家户户都忙着收割、晾晒，空气里弥漫着稻"
    "草和泥土混合的气味。学校会放几天农忙假，我跟着父亲下地，虽然帮不上什么大忙，却也学会了怎样捆扎稻把，怎样在田埂上稳稳当当地挑起一担谷子。冬天"
    "的江南湿冷入骨，没有暖气，我们就围着炭盆取暖，把红薯和栗子埋进热灰里，等到香气飘出来，再小心翼翼地扒开，烫得两只手来回倒腾。除夕之夜，全家人"
    "团团围坐，桌上摆满了母亲忙碌好几天准备的菜肴，祖父会破例喝上两杯黄酒，脸膛红红的，笑着给每个孙辈发压岁钱。后来我考上了北方的大学，离开了那条"
    "小河，离开了祖父的作坊。起初每逢寒暑假还能回去住上一段日子，工作以后却越来越少，有时候两三年才能回去一趟。去年春天，我终于带着妻子和女儿回到"
    "了阔别多年的故乡。小镇变了许多，老街被修缮一新，开起了咖啡馆、民宿和卖纪念品的商店，游客熙熙攘攘，说着天南地北的口音。祖父早已过世，作坊改成"
    "了一间小小的展览馆，墙上挂着他当年用过的刨子、凿子和墨斗，旁边的说明牌上写着他的名字和生平。我站在那些熟悉的工具前面，久久说不出话来。女儿拉"
    "着我的手问，爸爸，你为什么哭了？我告诉她，这里有太爷爷留下的东西，也有爸爸小时候的记忆。那天傍晚，我们沿着河岸慢慢地走，夕阳把水面染成了橘红"
    "色，一只白鹭从芦苇丛中飞起，掠过石桥，消失在远处的炊烟里。我忽然明白，故乡并不只是一个地方，它是一种声音、一种气味、一段再也回不去的时光，它"
    "住在我们心里，陪伴我们走过漫长的一生。无论将来走到哪里，只要想起那条小河和河上的七座石桥，我的心就会变得安静而温暖。临走之前，我在老桥边买了"
    "一把新做的小木凳，请店主在凳面上刻下了祖父作坊的名字，准备带回北方的家里，放在女儿的书桌旁边。回到北京以后，我把这次旅行的照片整理成册，又翻"
    "出大学时写的几篇关于故乡的散文，一并寄给了远在南方的母亲。母亲在电话里说，她把相册放在枕头边，每天晚上睡觉以前都要看上几页，看着看着就想起了"
    "许多陈年旧事。她还说，镇上的老邻居们听说我回来过，都埋怨我没有去家里坐一坐，喝一杯他们自己炒的新茶。我答应她，明年清明一定早些请假，陪她去给"
    "祖父扫墓，再挨家挨户地拜访那些看着我长大的长辈。挂了电话，窗外正下着细细的春雨，我仿佛又听见了那熟悉的摇橹声，从很远很远的地方传来。如今，那"
    "把小木凳就放在女儿的书桌旁，她写作业累了，常常坐在上面听我讲太爷爷的故事。"
)
ENGLISH = (
    "The committee met on Tuesday morning to review the annual budget. After a long "
    "discussion, the members agreed to increase funding for the public library and "
    "to repair the old bridge near the river before the winter arrives."
)
RATIO_RULES = ["max_symbol_word_ratio", "min_mean_word_length", "max_mean_word_length",
               "min_alpha_word_share", "max_duplicate_line_fraction",
               "max_duplicate_line_char_fraction", "max_top_2gram_char_share",
               "max_top_3gram_char_share", "max_top_4gram_char_share",
               "max_mean_line_length", "min_alnum_char_share"]


def _process(texts: list[str], langs: list[str | None], **config) -> pa.Table:
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts,
                      "langid_lang": pa.array(langs, pa.string())})
    ctx = StageContext(work_dir=Path("."), cache_dir=Path("."), seed=0, tools_dir=Path("."))
    return HeuristicsStage(Config(**config), ctx).process(table)


def test_chinese_prose_passes_every_rule_with_hundreds_of_words():
    assert len(CHINESE_PROSE) >= 1500 and " " not in CHINESE_PROSE
    assert CHINESE_PROSE.endswith("。")
    doc = Document(CHINESE_PROSE, "zh")
    assert 300 <= len(doc.words) < 1000          # rjieba words, not whitespace tokens
    thresholds = Config().for_language("zh")
    values, reason = H.evaluate(doc, thresholds)
    assert reason is None
    for rule in H.RULES:                          # each active rule passes on its own
        limit = getattr(thresholds, rule.name)
        if limit is not None:
            value = values[rule.value]
            if value is None:                     # a part the page lacks: passes
                assert rule.undefined_passes, rule.name
                continue
            assert (value >= limit) if rule.bound == "min" else (value <= limit), rule.name
    assert values["navigation_line_fraction"] is None    # fewer than 5 lines
    assert values["num_words"] == len(doc.words)
    assert "mean_word_length" not in values       # not used for CJK


def test_process_columns_and_reasons():
    out = _process([CHINESE_PROSE, ENGLISH, "Hi there", ""], ["zh", "en", "en", "en"])
    rows = out.to_pylist()
    assert [r["reason"] for r in rows] == [None, None, "heuristics.min_chars",
                                           "heuristics.min_chars"]
    assert rows[1]["heuristics_num_words"] == 38
    assert rows[1]["heuristics_mean_word_length"] == pytest.approx(
        sum(map(len, ENGLISH.replace(",", "").replace(".", "").split())) / 38)
    assert out.schema.field("heuristics_num_words").type == pa.int64()
    assert out.schema.field("heuristics_alpha_word_share").type == pa.float64()
    assert rows[0]["heuristics_mean_word_length"] is None


@pytest.mark.parametrize("text", ["", " \n\t ", "。。。"])
@pytest.mark.parametrize("rule", RATIO_RULES)
def test_ratio_rules_on_empty_text_give_a_reason(text, rule):
    thresholds = Thresholds(**{rule: 0.5})
    values, reason = H.evaluate(Document(text, "zh"), thresholds)
    _, reason_en = H.evaluate(Document(text, "en"), thresholds)
    if text == "。。。" and "duplicate_line" in rule:
        # one line, nothing repeated: a defined 0.0, kept
        assert list(values.values()) == [0.0] and reason is reason_en is None
    elif "mean_word_length" in rule:
        # no space-separated part to measure: undefined, and the rule passes
        # (min_words drops such a text in every preset)
        assert list(values.values()) == [None] and reason is reason_en is None
    else:
        assert reason == reason_en == f"heuristics.{rule}"


@pytest.mark.parametrize("text", ["", " \n\t ", "。。。"])
def test_default_presets_drop_empty_text(text):
    for lang in ("zh", "en", "de", "code", None):
        _, reason = H.evaluate(Document(text, lang), Config().for_language(lang))
        assert reason == "heuristics.min_chars"


def test_full_width_digits_and_letters():
    doc = Document("ＡＢＣ　１２３　ｄｅｆ", "en")
    assert doc.words == ["ABC", "123", "def"]         # words in their ASCII forms
    assert H.alpha_word_share(doc) == pytest.approx(2 / 3)
    assert H.alnum_char_share(doc) == pytest.approx(9 / 11)
    assert H.mean_word_length(doc) == 3.0
    assert H.abnormal_char_share(doc) == 0.0           # U+3000 is whitespace
    # jieba would split full-width digits into one word per character
    zh = Document("２０２４年１２月３１日，我们在北京召开了第１２３次会议。", "zh")
    assert zh.words[:6] == ["2024", "年", "12", "月", "31", "日"] and len(zh.words) == 15
    assert H.stop_word_count(Document("Ｔｈｅ ｃａｔ ａｎｄ ｔｈｅ ｄｏｇ ｗｅｎｔ ｔｏ ｔｈｅ ｐａｒｋ", "en")) == 5


def test_unicode_whitespace_is_not_abnormal_and_every_line_break_counts():
    indented = "　　他走进房间，看了看四周。\n　　房间里没有人。\n　　他坐下来，开始等待。"
    assert H.abnormal_char_share(Document(indented, "zh")) == 0.0
    assert H.abnormal_char_share(Document("a\u00a0b\u2028c\u2029d", "en")) == 0.0
    assert H.abnormal_char_share(Document("a ─│┼ b", "en")) == pytest.approx(3 / 7)
    code = ("Hier ist ein Beispiel für die Konfiguration der Anwendung:\nint main() {\n  int x = 0;\n"
            "  if (x == 1) {\n    return 1;\n  }\n  printf(\"%d\", x);\n  return 0;\n}\n")
    for sep in ("\n", "\r", "\r\n", "\u2028"):
        doc = Document(code.replace("\n", sep), "de")
        assert H.VALUES["code_line_fraction"](doc) == pytest.approx(8 / 9), repr(sep)
        assert H.newline_word_ratio(doc) == pytest.approx(8 / 24), repr(sep)   # 9 lines
    assert H.newline_word_ratio(Document("a b\nc", "en")) == pytest.approx(1 / 3)
    # a blank line between paragraphs is layout, not a line of content
    assert H.newline_word_ratio(Document("a b\n\n\nc\n", "en")) == pytest.approx(1 / 3)


def test_nan_threshold_is_rejected():
    with pytest.raises(pydantic.ValidationError, match="is negative or NaN"):
        Thresholds(max_symbol_word_ratio=float("nan"))


def test_top_ngram_char_share_known_values():
    doc = Document("the cat the cat sat", "en")        # 15 word characters
    assert H.top_ngram_char_share(doc, 2) == pytest.approx(2 * 6 / 15)
    assert H.top_ngram_char_share(doc, 3) == 0.0       # no 3-gram repeats
    assert H.top_ngram_char_share(Document("one two", "en"), 3) is None


def _brute_force_ngrams(words: list[str]) -> dict[str, float | None]:
    """Reference: the definitions of Document.ngram_stats, by brute force."""
    chars = sum(map(len, words))
    out = {}
    for n in range(2, 11):
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        counts = Counter(grams)
        name = f"top_{n}gram_char_share" if n <= 4 else f"duplicate_{n}gram_char_share"
        if len(words) < n or chars == 0:
            out[name] = None
        elif n <= 4:
            top = max(counts.values())
            out[name] = 0.0 if top < 2 else top * max(
                sum(map(len, g)) for g, c in counts.items() if c == top) / chars
        else:
            covered = set()
            for i, g in enumerate(grams):
                if counts[g] > 1:
                    covered.update(range(i, i + n))
            out[name] = sum(len(words[i]) for i in covered) / chars
    return out


def test_ngram_batch_equals_brute_force_and_single_documents():
    rng = random.Random(7)
    lists = [[], ["a"], ["a", "a"], ["ab", "c"] * 6, [f"w{i}" for i in range(40)]]
    for _ in range(60):
        size = rng.choice([3, 9, 30, 120, 400])
        lists.append([rng.choice(["a", "bb", "c", "dd", "e"]) for _ in range(size)])
    batch = H.ngram_stats_batch(lists)
    for words, got in zip(lists, batch):
        want = _brute_force_ngrams(words)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key]) if want[key] is not None \
                else got[key] is None, (words, key)
        assert H.ngram_stats_batch([words])[0] == got      # batch-independent


def test_duplicate_ngram_char_share_known_value():
    # "a b c d e" twice, then "x": the two 5-gram occurrences cover 10 of 11 chars.
    doc = Document("a b c d e a b c d e x", "en")
    assert H.duplicate_ngram_char_share(doc, 5) == pytest.approx(10 / 11)
    assert H.duplicate_ngram_char_share(doc, 6) == 0.0
    assert H.duplicate_ngram_char_share(doc, 10) == 0.0
    assert H.duplicate_ngram_char_share(Document("a b c", "en"), 5) is None


def test_duplicate_lines_and_symbols():
    doc = Document("alpha beta\r\ngamma\n\nalpha beta\n", "en")
    assert H.duplicate_line_fraction(doc) == pytest.approx(1 / 3)
    assert H.duplicate_line_char_fraction(doc) == pytest.approx(10 / 25)
    doc = Document("wait... what # is this…… really…", "en")
    assert H.symbol_word_ratio(doc) == pytest.approx(4 / 5)   # '……' counts once


def test_repetitive_chinese_is_dropped():
    text = "这是点击这里下载最新版本的链接。" * 30
    out = _process([text], ["zh"]).to_pylist()[0]
    assert out["reason"] == "heuristics.max_duplicate_line_char_fraction" or \
        out["reason"].startswith("heuristics.max_top_")
    assert out["heuristics_top_2gram_char_share"] > 0.2


def test_code_preset_uses_code_rules_only():
    code = "def f(x):\n    return x + 1\n\n" * 20
    long_line = "x = [" + "1, " * 400 + "]\n"
    out = _process([code, long_line], ["code", "code"]).to_pylist()
    assert out[0]["reason"] is None
    assert out[0]["heuristics_num_words"] is None          # prose rules are off
    assert out[0]["heuristics_max_line_length"] == len("    return x + 1")
    assert out[1]["reason"] == "heuristics.max_line_length"


def test_overrides_per_language_and_null_turns_a_rule_off():
    config = Config(thresholds={"zh": {"max_top_2gram_char_share": None, "min_words": 2},
                                "default": {"min_words": 1}})
    zh = config.for_language("zh")
    assert zh.max_top_2gram_char_share is None and zh.min_words == 2
    assert zh.max_top_3gram_char_share == H.PRESETS["zh"].max_top_3gram_char_share
    assert config.for_language("de").min_words == 1        # no preset: user default
    assert config.for_language("en").min_words == H.PRESETS["en"].min_words
    assert config.for_language("ja").min_mean_word_length is None
    with pytest.raises(pydantic.ValidationError):
        Config(thresholds={"zh": {"max_top_5gram_char_share": 0.1}})
    with pytest.raises(pydantic.ValidationError):
        Config(threshold={})


def test_deterministic():
    texts = [CHINESE_PROSE, ENGLISH, "Kurzer Satz mit Wiederholung Wiederholung Wiederholung."]
    langs = ["zh", "en", "de"]
    assert _process(texts, langs).equals(_process(texts, langs))


# --- rule families added for issue 3 ------------------------------------------------

def test_every_rule_has_a_family_a_threshold_field_and_a_value():
    fields = set(Thresholds.model_fields)
    for rule in H.RULES:
        assert rule.family in H.FAMILIES
        assert rule.name in fields and rule.value in H.VALUES
    assert len({rule.name for rule in H.RULES}) == len(H.RULES)


def test_chinese_prose_has_stop_words_sentences_and_no_residue():
    doc = Document(CHINESE_PROSE, "zh")
    assert H.stop_word_count(doc) >= 50
    assert H.sentence_count(doc) == CHINESE_PROSE.count("。") + CHINESE_PROSE.count("？")
    assert H.line_punct_ratio(doc) == 1.0
    assert H.unbroken_run(doc) < 40               # clauses between ，。 are short
    assert H.residue_per_kchar(doc) == 0.0 and H.mojibake_per_kchar(doc) == 0.0
    assert H.abnormal_char_share(doc) == 0.0 and H.code_line_fraction(doc) == 0.0


def test_long_run_without_break_is_cjk_aware():
    assert H.unbroken_run(Document("中文，没有空格。", "zh")) == 4
    spam = "便宜药品在线购买" * 20                       # 160 characters, no punctuation
    out = _process([spam + "。"], ["zh"]).to_pylist()[0]
    assert out["heuristics_unbroken_run"] == 160
    assert out["reason"] == "heuristics.max_unbroken_run"


def test_escape_residue_mojibake_and_symbols():
    text = "Caf\\u00e9 &amp; bar\\nnext <div class=x> done. " * 3
    doc = Document(text, "en")
    assert doc.counts["residue"] == 12               # \u00e9, &amp;, \n, <div ...> x 3
    assert H.residue_per_kchar(doc) == pytest.approx(12000 / len(text))
    assert H.mojibake_per_kchar(Document("déjà vu", "fr")) == 0.0
    assert H.mojibake_per_kchar(Document("dÃ©jÃ  vu", "fr")) > 0
    assert H.mojibake_per_kchar(Document("锟斤拷锟斤拷", "zh")) == pytest.approx(2000 / 6)
    assert H.abnormal_char_share(Document("█▓▒░ ok", "en")) == pytest.approx(4 / 7)
    assert H.abnormal_char_share(Document("，。！？「」ＡＢ１", "zh")) == 0.0


def test_code_lines_in_prose():
    text = "The function is shown below.\nint main() {\n  return 0;\n}\n"
    assert H.code_line_fraction(Document(text, "en")) == pytest.approx(3 / 4)
    assert H.code_line_fraction(Document("他说：好；我们走。\n", "zh")) == 0.0


def test_c4_and_fineweb_values():
    text = "First line ends here.\nsecond line\nThird one? Yes!\nok\n"
    doc = Document(text, "en")
    assert H.sentence_count(doc) == 3                # lines 1 and 3 end in punctuation
    assert H.line_punct_ratio(doc) == 0.5
    assert H.short_line_fraction(doc) == 1.0         # every line <= 30 characters
    assert H.newline_word_ratio(doc) == pytest.approx(3 / 10)           # 4 lines
    assert H.lorem_ipsum_count(Document("Lorem Ipsum dolor", "en")) == 1
    zh = Document("第一句。第二句！\n第三句", "zh", short_line_chars=16)
    assert H.sentence_count(zh) == 2 and H.line_punct_ratio(zh) == 0.5
    assert H.sentence_count(Document("第三句\n第一句。第二句", "zh")) == 0


def test_bullets_ellipses_and_duplicate_paragraphs():
    doc = Document("• one\n• two\n- three\nfour...\n", "en")
    assert H.bullet_line_fraction(doc) == 0.75
    assert H.ellipsis_line_fraction(doc) == 0.25
    doc = Document("para one\nline\n\npara two\n\npara one\nline\n", "en")
    assert H.duplicate_paragraph_fraction(doc) == pytest.approx(1 / 3)
    assert H.duplicate_paragraph_char_fraction(doc) == pytest.approx(13 / 34)


def test_short_documents_are_not_judged_by_long_document_rules():
    poem = "关关雎鸠，在河之洲。\n窈窕淑女，君子好逑。\n关关雎鸠，在河之洲。"
    values, reason = H.evaluate(Document(poem, "zh"), Config().for_language("zh"))
    assert values["top_4gram_char_share"] > 0.5             # measured ...
    assert reason == "heuristics.max_duplicate_line_fraction"  # ... but only line rules apply
    config = Config(thresholds={"zh": {"long_document_min_words": None,
                                       "max_duplicate_line_fraction": None,
                                       "max_duplicate_line_char_fraction": None,
                                       "max_duplicate_paragraph_char_fraction": None}})
    _, reason = H.evaluate(Document(poem, "zh"), config.for_language("zh"))
    assert reason == "heuristics.max_top_2gram_char_share"


def test_disabled_families_and_bad_words():
    config = Config(disabled_families=["gopher_repetition", "cjk"])
    zh = config.for_language("zh")
    assert zh.max_top_2gram_char_share is None and zh.max_unbroken_run is None
    assert zh.min_words == H.PRESETS["zh"].min_words
    config = Config(bad_words={"en": ["Spam"]})
    out = _process(["Spam, " + ENGLISH, ENGLISH], ["en", "en"], bad_words={"en": ["Spam"]})
    assert [r["reason"] for r in out.to_pylist()] == ["heuristics.max_bad_words", None]
    assert out.to_pylist()[1]["heuristics_bad_word_count"] == 0
    assert Config().for_language("en").max_bad_words is None     # no list: off
    with pytest.raises(pydantic.ValidationError):
        Config(disabled_families=["gopher"])


def test_stage_columns_hold_every_value():
    out = _process([CHINESE_PROSE, ENGLISH], ["zh", "en"])
    names = {f"heuristics_{v}" for v in H.VALUES}
    assert names <= set(out.column_names)
    zh = out.to_pylist()[0]
    assert zh["heuristics_stop_word_count"] >= 50 and zh["heuristics_unbroken_run"] < 40
    assert out.schema.field("heuristics_unbroken_run").type == pa.int64()


@pytest.mark.parametrize("trip", ["pickle", "json"])
def test_overrides_survive_the_trip_to_the_workers_and_the_published_config(tmp_path, trip):
    """A build sends each stage config to its workers pickled
    (pipeline.executor._stage); the published config.yaml is its JSON form,
    read back when a version is rebuilt. After either trip an override must
    still change only the fields it names: the shipped config overrides two
    zh fields and must keep the other 25 zh rules on."""
    import pickle

    import yaml

    from pipeline.config import REPO_ROOT
    from pipeline.executor import _stage

    section = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())["heuristics"]
    config = Config(**section)
    ctx = StageContext(work_dir=tmp_path, cache_dir=tmp_path, seed=0, tools_dir=tmp_path)
    sent = pickle.loads(pickle.dumps(config)) if trip == "pickle" else Config.model_validate_json(config.model_dump_json())
    rebuilt = _stage("heuristics", (), sent, ctx).config
    for lang in ("zh", "en", "ja", "de", "code", "xx", None):
        assert rebuilt.for_language(lang) == config.for_language(lang), lang
    zh = rebuilt.for_language("zh")
    assert len(H.active_rules(zh)) == 27          # max_newline_word_ratio is off for zh (verse)
    assert (zh.max_duplicate_5gram_char_share, zh.min_stop_words, zh.min_words,
            zh.long_document_min_words, zh.max_keyword_run_share) == (0.30, None, None, 50, 0.60)
    assert config.model_dump()["thresholds"]["zh"] == {"min_stop_words": None}


def test_negative_thresholds_are_rejected():
    with pytest.raises(pydantic.ValidationError, match="min_words = -5 is negative"):
        Config(thresholds={"zh": {"min_words": -5}})


def test_paragraphs_split_on_every_line_break_and_null_text_is_empty(tmp_path):
    for sep in ("\n\n", "\r\n\r\n", "\r\r", "\u2028\u2028", "\u2029\u2029", "\n \t\n"):
        doc = Document(sep.join(["a b c", "a b c", "d e f"]), "en")
        assert doc.paragraphs == ["a b c", "a b c", "d e f"], repr(sep)
        assert doc.paragraph_duplicates[0] == pytest.approx(1 / 3)
    assert Document("a b c\r\na b c", "en").paragraphs == ["a b c\r\na b c"]   # one line break
    ctx = StageContext(work_dir=tmp_path, cache_dir=tmp_path, seed=0, tools_dir=tmp_path)
    out = HeuristicsStage(Config(), ctx).process(pa.table({
        "id": ["0", "1"], "text": pa.array([None, "hello world"], pa.string()), "langid_lang": ["zh", "en"]}))
    assert out.column("reason").to_pylist() == ["heuristics.min_chars", "heuristics.min_chars"]


def test_terminal_escapes_and_control_characters_are_residue():
    doc = Document("\x1b[31mred\x1b[0m text \x01\x07 and \\u00e9 here", "en")
    assert doc.counts["residue"] == 5      # 2 escape sequences, 2 controls, 1 \u00e9
    assert Document("plain\ttext\x0cpage\r\nnext\x0bline\n", "en").counts["residue"] == 0


def test_effective_thresholds_per_language_after_presets_and_overrides():
    """What the build fingerprints and writes to the manifest
    (stages.heuristics.settings.thresholds): the thresholds applied, per
    language, after presets, overrides, disabled families and bad words."""
    config = Config(thresholds={"zh": {"min_stop_words": None, "max_duplicate_5gram_char_share": 0.25},
                                "default": {"min_words": 7}, "fr": {"min_chars": 40}},
                    disabled_families=["c4"], bad_words={"de": ["schimpf"]})
    settings = HeuristicsStage.effective_settings(config)
    assert list(settings) == ["thresholds", "rules"]
    # every rule, with the column explain pairs with its threshold
    rules = {r["name"]: r for r in settings["rules"]}
    assert rules["min_words"] == {"name": "min_words", "value_column": "heuristics_num_words", "bound": "min",
                                  "family": "gopher_quality", "long_only": False, "undefined_passes": False}
    assert rules["max_duplicate_5gram_char_share"]["long_only"] is True
    t = settings["thresholds"]
    assert list(t) == ["bo", "code", "de", "default", "dz", "en", "fr", "ja", "km", "kn", "ko", "lo", "ml", "my",
                       "ta", "te", "th", "zh"]
    assert (t["zh"]["min_chars"], t["zh"]["max_duplicate_5gram_char_share"], t["zh"]["short_line_chars"]) \
        == (10, 0.25, 16)
    assert "min_stop_words" not in t["zh"] and "min_mean_word_length" not in t["zh"]    # off: absent
    assert t["en"]["min_stop_words"] == 2 and t["en"]["min_alpha_word_share"] == 0.80
    # a language without a preset: the preset default, the user's default layer, its own layer
    assert (t["fr"]["min_chars"], t["fr"]["min_words"], t["fr"]["min_mean_word_length"]) == (40, 7, 3.0)
    assert t["default"]["min_words"] == 7 and t["default"]["min_chars"] == 20
    assert "min_mean_word_length" not in t["ko"]                # CJK: no mean word length
    assert "max_lorem_ipsum" not in t["en"]                     # family c4 disabled
    assert "max_bad_words" not in t["de"] and "max_bad_words" not in t["en"]   # c4 off for all
    assert t["code"] == {"min_chars": 20, "short_line_chars": 30, "max_mojibake_per_kchar": 1.0,
                         "max_line_length": 1000, "max_mean_line_length": 100.0, "min_alnum_char_share": 0.25}
    # equal to what process applies for every language, listed or not
    for lang in ("zh", "en", "fr", "ko", "code"):
        assert Thresholds(**t[lang]).model_dump(exclude_none=True) == \
            config.for_language(lang).model_dump(exclude_none=True)
    assert config.for_language("sw").model_dump(exclude_none=True) == t["default"]


# --- the package: one module per rule family, one registry ---------------------------

def test_each_family_module_holds_its_values_and_rules():
    """stages.heuristics.<family> for every family; its rules carry its name."""
    values = {
        "gopher_quality": ["num_chars", "num_words", "symbol_word_ratio", "mean_word_length",
                           "alpha_word_share", "bullet_line_fraction", "ellipsis_line_fraction",
                           "stop_word_count"],
        "gopher_repetition": ["duplicate_line_fraction", "duplicate_line_char_fraction",
                              "duplicate_paragraph_fraction", "duplicate_paragraph_char_fraction",
                              "top_2gram_char_share", "top_3gram_char_share", "top_4gram_char_share",
                              *(f"duplicate_{n}gram_char_share" for n in range(5, 11))],
        "c4": ["sentence_count", "lorem_ipsum_count", "curly_bracket_count", "bad_word_count"],
        "fineweb": ["line_punct_ratio", "short_line_fraction", "newline_word_ratio"],
        "cjk": ["unbroken_run", "residue_per_kchar", "mojibake_per_kchar", "abnormal_char_share",
                "code_line_fraction", "keyword_run_share", "navigation_line_fraction",
                "zh_function_word_share"],
        "code": ["max_line_length", "mean_line_length", "alnum_char_share"],
        "page_shape": ["second_language_share", "list_line_fraction"],
    }
    batch_counts = {"c4": ["lorem_ipsum"],
                    "cjk": ["unbroken_run", "abnormal_chars", "residue", "code_lines", "mojibake_fixed",
                            "mojibake_suspect"]}
    assert H.FAMILIES == ("gopher_quality", "gopher_repetition", "c4", "fineweb", "cjk", "code",
                          "page_shape")
    assert H.Config.model_fields["disabled_families"].annotation.__args__[0].__args__ == H.FAMILIES
    for family in H.FAMILIES:
        module = importlib.import_module(f"stages.heuristics.{family}")
        assert module.FAMILY == family
        assert list(module.VALUES) == values[family], family
        assert list(module.BATCH_COUNTS) == batch_counts.get(family, []), family
        assert module.INT_VALUES <= set(module.VALUES)
        assert {rule.family for rule in module.RULES} == {family}
    # FineWeb's duplicated-line rule reads Gopher's measure (measured once)
    from stages.heuristics import fineweb
    assert [r.value for r in fineweb.RULES if r.value not in fineweb.VALUES] == ["duplicate_line_char_fraction"]


def test_registry_keeps_the_column_and_check_order():
    """The stage's columns follow VALUES (families in FAMILIES order); the
    first failing rule in RULES order is the reason: size rules first, then
    code, cjk, the rest of gopher_quality, gopher_repetition, c4, fineweb."""
    assert list(H.VALUES)[:9] == ["num_chars", "num_words", "symbol_word_ratio", "mean_word_length",
                                  "alpha_word_share", "bullet_line_fraction", "ellipsis_line_fraction",
                                  "stop_word_count", "duplicate_line_fraction"]
    assert list(H.VALUES)[-13:] == ["unbroken_run", "residue_per_kchar", "mojibake_per_kchar",
                                   "abnormal_char_share", "code_line_fraction", "keyword_run_share",
                                   "navigation_line_fraction", "zh_function_word_share", "max_line_length",
                                   "mean_line_length", "alnum_char_share",
                                   "second_language_share", "list_line_fraction"]
    assert len(H.VALUES) == 41
    assert [r.name for r in H.RULES] == [
        "min_chars", "min_words", "max_words",
        "max_line_length", "max_mean_line_length", "min_alnum_char_share",
        "max_mojibake_per_kchar", "max_residue_per_kchar", "max_abnormal_char_share", "max_unbroken_run",
        "max_code_line_fraction", "max_keyword_run_share", "max_navigation_line_fraction",
        "min_zh_function_word_share",
        "max_second_language_share", "max_list_line_fraction",
        "max_symbol_word_ratio", "min_mean_word_length", "max_mean_word_length", "min_alpha_word_share",
        "max_bullet_line_fraction", "max_ellipsis_line_fraction", "min_stop_words",
        "max_duplicate_line_fraction", "max_duplicate_line_char_fraction", "max_duplicate_paragraph_fraction",
        "max_duplicate_paragraph_char_fraction", "max_top_2gram_char_share", "max_top_3gram_char_share",
        "max_top_4gram_char_share", *(f"max_duplicate_{n}gram_char_share" for n in range(5, 11)),
        "min_sentences", "max_lorem_ipsum", "max_curly_brackets", "max_bad_words",
        "min_line_punct_ratio", "max_short_line_fraction", "max_fineweb_duplicate_line_char_fraction",
        "max_newline_word_ratio"]
    assert [r.name for r in H.RULES if r.long_only] == [
        "min_stop_words", "max_top_2gram_char_share", "max_top_3gram_char_share", "max_top_4gram_char_share",
        *(f"max_duplicate_{n}gram_char_share" for n in range(5, 11))]
    assert sorted(H.INT_VALUES) == ["bad_word_count", "curly_bracket_count", "lorem_ipsum_count",
                                    "max_line_length", "num_chars", "num_words", "sentence_count",
                                    "stop_word_count", "unbroken_run"]


def test_a_value_defined_by_two_families_is_refused():
    from stages.heuristics.rules import _merged

    assert _merged([{"a": 1}, {"b": 2}], "value") == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="value 'a' is defined by two families"):
        _merged([{"a": 1}, {"a": 2}], "value")


def test_no_module_of_the_package_is_over_400_lines():
    package = Path(H.__file__).parent
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in package.glob("*.py")}
    assert {"stage.py", "rules.py", "view.py", "presets.py"} <= set(sizes) and max(sizes.values()) <= 400, sizes
