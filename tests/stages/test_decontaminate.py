"""Tests for stages/decontaminate/: eval-set index, matching, modes, cache."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

from stages.base import Partitions, StageContext
from stages.decontaminate import Config, DecontaminateStage, REASON_EMPTY, REASON_OVERLAP
from stages.decontaminate.index import Index, load_or_build
from stages.decontaminate.match import find_hits
from stages.decontaminate.normalize import traditional_fold_table, units

# Eval items in the style of GSM8K and C-Eval (own writing).
GSM = [
    {"id": "gsm-1", "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                                "clips in May. How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = 24 clips in May. Natalia sold 48+24 = 72 clips altogether in April and May. "
               "#### 72"},
    {"id": "gsm-2", "question": "A baker fills 12 trays with 18 muffins each every morning. After selling 150 "
                                "muffins by noon, he packs the rest into boxes of 6. How many boxes does he fill?",
     "answer": "He bakes 12*18 = 216 muffins. After selling 150, 216-150 = 66 are left. 66/6 = 11 boxes. #### 11"},
    {"id": "gsm-3", "question": "Which of the following is the total cost if Tom buys 3 notebooks at 4 dollars "
                                "each and 2 pens at 1 dollar each for his sister on Monday?",
     "answer": "3*4 + 2*1 = 14 dollars. #### 14"},
]
CEVAL = [
    {"id": "ceval-7", "question": "下列说法正确的是：在标准大气压下，纯水的沸点为一百摄氏度，冰的熔点为零摄氏度",
     "A": "两者都正确", "B": "只有前者正确", "C": "只有后者正确", "D": "两者都不正确", "answer": "A"},
    {"id": "ceval-8", "question": "下列说法正确的是：光合作用把光能转化为化学能并储存在有机物中",
     "A": "正确", "B": "错误", "C": "无法判断", "D": "以上都不对", "answer": "A"},
    {"id": "ceval-9", "question": "下列说法正确的是：唐代诗人李白被后人称为诗圣，杜甫被称为诗仙",
     "A": "正确", "B": "错误", "C": "前半句正确", "D": "后半句正确", "answer": "B"},
]
# Host paragraphs (own writing).
EN_HOST_A = ("The river town wakes slowly. Fishing boats drift out of the mist while the old ferryman checks "
             "his ropes and the bakery on the corner opens its shutters to the smell of bread. ")
EN_HOST_B = (" By noon the market square is loud with traders arguing over the price of apples, and children "
             "run between the stalls until the church bell calls them home for lunch.")
ZH_HOST_A = ("清晨的江边总是很安静，薄雾慢慢从水面升起，远处的渔船只露出模糊的轮廓。老人们沿着堤岸散步，"
             "偶尔停下来看一看涨落的潮水，谈论昨天集市上的菜价和孙子的功课。")
ZH_HOST_B = ("太阳升高以后，雾气散尽，江面变得明亮，货船的汽笛一声接着一声，城市就这样醒了过来。到了中午，"
             "码头上搬运工人来回穿梭，把一箱箱水果和布匹装上卡车，送往城里的各个市场。")


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _eval_sets(tmp_path: Path) -> dict:
    return {"gsm8k": {"path": str(_write_jsonl(tmp_path / "gsm8k.jsonl", GSM)), "fields": ["question", "answer"],
                      "id_field": "id"},
            "ceval": {"path": str(_write_jsonl(tmp_path / "ceval.jsonl", CEVAL)),
                      "fields": ["question", "A", "B", "C", "D"], "id_field": "id",
                      "label_fields": ["A", "B", "C", "D"]}}


def _partition(path: Path, texts: list[str], source: str = "web") -> Path:
    n = len(texts)
    pq.write_table(pa.table({
        "id": pa.array([f"{source}:f:{i + 1}" for i in range(n)], pa.string()),
        "source": pa.array([source] * n, pa.string()), "file": pa.array(["f"] * n, pa.string()),
        "line": pa.array(range(1, n + 1), pa.int64()), "text": pa.array(texts, pa.string()),
        "meta": pa.array(["{}"] * n, pa.string()), "lang_hint": pa.array([None] * n, pa.string()),
        "chars": pa.array([len(t) for t in texts], pa.int64()), "keep": pa.array([True] * n, pa.bool_())}), path)
    return path


def _run(tmp_path: Path, texts: list[str], **fields) -> tuple[dict, pa.Table]:
    """fit on one partition of ``texts`` then process it (fresh instance);
    ``eval_sets`` defaults to :func:`_eval_sets`."""
    part = _partition(tmp_path / "part-00000-00000.parquet", texts)
    config = Config(**{"eval_sets": _eval_sets(tmp_path), **fields})
    ctx = StageContext(work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", seed=0, tools_dir=tmp_path)
    facts = DecontaminateStage(config, ctx).fit(Partitions([part], lambda fn, items: [fn(i) for i in items])).facts
    out = DecontaminateStage(config, ctx).process(pq.read_table(part))
    return facts, out


def _full_width_punct(text: str) -> str:
    return text.translate(str.maketrans({",": "，", ".": "。", "?": "？", "!": "！", ":": "：", "/": "／",
                                         "=": "＝", "+": "＋", "#": "＃", "*": "＊", "-": "－"}))


def _half_width_punct(text: str) -> str:
    return text.translate(str.maketrans({"，": ",", "。": ".", "：": ":", "？": "?", "、": ","}))


GSM_Q = GSM[0]["question"]
GSM_FULL = GSM[0]["question"] + "\n" + GSM[0]["answer"]
CEVAL_Q = CEVAL[0]["question"] + "\nA. 两者都正确\nB. 只有前者正确\nC. 只有后者正确\nD. 两者都不正确"


def test_units_ignore_case_width_punctuation_and_keep_original_offsets():
    h1, s1, e1, cjk1 = units("Ｎａｔａｌｉａ ＳＯＬＤ，４８ clips！下列")
    h2, _, _, _ = units("natalia sold 48 clips 下列")
    assert h1.tolist() == h2.tolist()
    assert list(zip(s1.tolist(), e1.tolist())) == [(0, 7), (8, 12), (13, 15), (16, 21), (22, 23), (23, 24)]
    assert cjk1.tolist() == [False, False, False, False, True, True]


def test_vectorised_units_equal_the_plain_python_definition():
    import io as _io

    import zstandard

    from stages.decontaminate.normalize import units_reference

    sample = Path(__file__).resolve().parents[2] / "data" / "sample"
    with open(sample / "web-fortunes.jsonl.zst", "rb") as fh:
        lines = _io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    texts = [json.loads(line)["text"] for line in lines[::30]]  # zh, de, ru, es, en
    texts += ["Straße 𠀀𠀁 emoji😀x ｱｲｳ é e\u0301 ①② _a_b_ ", "", "!!", "\ud800 lone surrogate"]
    assert len(texts) > 100
    for text in texts:
        h, s, e, cjk = units(text)
        ref_h, ref_spans, ref_cjk = units_reference(text)
        assert h.tolist() == ref_h and list(zip(s.tolist(), e.tolist())) == ref_spans and cjk.tolist() == ref_cjk


def test_long_texts_are_split_into_pieces_with_the_same_units(monkeypatch):
    from stages.decontaminate import normalize

    text = (EN_HOST_A + ZH_HOST_A + "Ｗｉｄｅ ｗｏｒｄｓ＿ａｎｄ_under_scores ") * 7
    whole = units(text)
    monkeypatch.setattr(normalize, "MAX_CHUNK", 37)
    pieces = normalize.units(text)
    for a, b in zip(whole, pieces):
        assert a.tolist() == b.tolist()


def test_planted_items_are_found_with_their_id_and_span(tmp_path):
    variants = {
        "gsm verbatim": (EN_HOST_A + GSM_FULL + EN_HOST_B, "gsm8k:gsm-1", GSM_FULL),
        "gsm full-width punctuation": (EN_HOST_A + _full_width_punct(GSM_FULL) + EN_HOST_B, "gsm8k:gsm-1",
                                       _full_width_punct(GSM_FULL)),
        "gsm one word changed": (EN_HOST_A + GSM_FULL.replace("half", "twice") + EN_HOST_B, "gsm8k:gsm-1",
                                 GSM_FULL.replace("half", "twice")),
        "gsm question only": (EN_HOST_A + GSM_Q + EN_HOST_B, "gsm8k:gsm-1", GSM_Q),
        "ceval verbatim": (ZH_HOST_A + CEVAL_Q + ZH_HOST_B, "ceval:ceval-7", CEVAL_Q),
        "ceval half-width punctuation": (ZH_HOST_A + _half_width_punct(CEVAL_Q) + ZH_HOST_B, "ceval:ceval-7",
                                         _half_width_punct(CEVAL_Q)),
        "ceval one word changed": (ZH_HOST_A + CEVAL_Q.replace("纯水", "淡水") + ZH_HOST_B, "ceval:ceval-7",
                                   CEVAL_Q.replace("纯水", "淡水")),
    }
    texts = [v[0] for v in variants.values()]
    _, out = _run(tmp_path, texts, mode="annotate")
    assert out["keep"].to_pylist() == [True] * len(texts)
    assert out["decontaminate_items"].to_pylist() == [v[1] for v in variants.values()]
    assert out["decontaminate_hits"].to_pylist() == [1] * len(texts)
    for (name, (text, _, planted)), spans in zip(variants.items(), out["decontaminate_spans"].to_pylist()):
        assert len(spans) == 1, name
        start = text.index(planted)
        # the span runs from the first to the last letter/digit of the quote
        stripped_end = start + len(planted.rstrip("！。？.!?＃#）) \n"))
        assert (spans[0]["start"], spans[0]["end"]) == (start, stripped_end), name
        assert spans[0]["coverage"] >= 0.6, name
        assert spans[0]["rule"] == "item_coverage", name  # the GSM question is over half its item


def test_a_traditional_copy_is_hit_over_its_whole_span_and_simplified_text_is_unchanged(tmp_path):
    opencc = pytest.importorskip("opencc")
    traditional = opencc.OpenCC("s2t").convert(CEVAL_Q)
    assert traditional.startswith("下列說法正確的是：在標準大氣壓下，純水的沸點爲一百攝氏度")
    assert len(traditional) == len(CEVAL_Q) and sum(a != b for a, b in zip(traditional, CEVAL_Q)) == 20
    host_b = opencc.OpenCC("s2t").convert(ZH_HOST_B)  # a Traditional document around it
    text = ZH_HOST_A + traditional + host_b
    # one code point in, one out: the units of the Traditional copy hash as the Simplified item's
    assert units(traditional)[0].tolist() == units(CEVAL_Q)[0].tolist()
    assert units(traditional)[1].tolist() == units(CEVAL_Q)[1].tolist()
    table = traditional_fold_table()
    assert traditional.translate(table) == CEVAL_Q
    for simplified in (ZH_HOST_A, ZH_HOST_B, CEVAL_Q, CEVAL[1]["question"]):
        assert simplified.translate(table) == simplified
    _, out = _run(tmp_path, [text, ZH_HOST_A + host_b], mode="cut", cut_margin=0, min_chars_after_cut=20)
    start = text.index(traditional)
    assert out["decontaminate_spans"][0].as_py()[0]["item"] == "ceval-7"
    assert out["decontaminate_spans"][0].as_py()[0]["coverage"] == 1.0
    assert (out["decontaminate_spans"][0].as_py()[0]["start"], out["decontaminate_spans"][0].as_py()[0]["end"]) == (
        start, start + len(traditional))
    assert out["text"].to_pylist() == [ZH_HOST_A + host_b, ZH_HOST_A + host_b]  # the whole copy cut
    assert out["decontaminate_hits"].to_pylist() == [1, 0]


# A user's item (own writing): option A is 19 characters, 20 units with its label.
TRAVEL_ITEM = {"id": "c1", "question": "重庆是一座依山傍水的城市，下列关于重庆地理位置的描述中，哪一项是正确的",
               "A": "长江主要支流嘉陵江位于城区北侧，两江环抱", "B": "重庆位于四川盆地的西北部，地势平坦开阔",
               "C": "重庆的主城区坐落在黄河与渭河交汇的地方", "D": "重庆地处青藏高原东缘，海拔普遍在三千米以上"}
# A travel page (own writing) sharing 12 characters with option A, and one quoting option A whole.
TRAVEL_SHARED = ("我们从解放碑出发，沿着江边步道走到朝天门。长江主要支流嘉陵江位于城市北边，从酒店的窗口就能看见，"
                 "傍晚的江面上游船来来往往，灯光倒映在水里，整座城市像是浮在江上。")
TRAVEL_WHOLE = ("导游说，长江主要支流嘉陵江位于城区北侧，两江环抱，所以这里自古就是水运码头。"
                "我们在洪崖洞吃了火锅，又坐索道过江，看见两岸的高楼沿着山坡一层层叠上去。")
# A long single-field item (own writing, 123 characters) for the absolute rule.
LONG_ITEM = {"id": "long-1", "text": (
    "阅读下面的材料：明朝永乐年间，郑和率领船队七次远航西洋，到达东南亚、南亚、西亚和东非的三十多个国家和地区，"
    "加强了中国与亚非各国的经济文化交流。船队规模庞大，航海技术先进，比欧洲航海家的远航早了半个多世纪。"
    "根据材料，概括郑和下西洋的历史意义，并说明其与新航路开辟的不同之处。")}


def _travel_sets(tmp_path: Path) -> dict:
    return {"geo": {"path": str(_write_jsonl(tmp_path / "geo.jsonl", [TRAVEL_ITEM])),
                    "fields": ["question", "A", "B", "C", "D"], "id_field": "id", "label_fields": ["A", "B", "C", "D"]},
            "essay": {"path": str(_write_jsonl(tmp_path / "essay.jsonl", [LONG_ITEM])), "fields": ["text"],
                      "id_field": "id"}}


def test_a_short_field_needs_two_grams_or_all_of_it_and_each_hit_names_its_rule(tmp_path):
    assert len(units(TRAVEL_ITEM["A"])[0]) == 19
    assert "长江主要支流嘉陵江位于城" in TRAVEL_SHARED and "长江主要支流嘉陵江位于城区" not in TRAVEL_SHARED
    assert len(units(LONG_ITEM["text"])[0]) == 123
    quoted = LONG_ITEM["text"][:LONG_ITEM["text"].index("加强了")]  # 47 of its 123 units
    item_q = TRAVEL_ITEM["question"] + "\nA．" + TRAVEL_ITEM["A"] + "\nB．" + TRAVEL_ITEM["B"]
    texts = [TRAVEL_SHARED, TRAVEL_WHOLE, ZH_HOST_A + quoted + ZH_HOST_B, ZH_HOST_A + item_q + ZH_HOST_B]
    _, out = _run(tmp_path, texts, eval_sets=_travel_sets(tmp_path), mode="annotate")
    spans = out["decontaminate_spans"].to_pylist()
    # 12 characters shared with a 20-unit option: one gram's worth, common text, no hit
    assert spans[0] == []
    # the whole option quoted (without its label): 19 of 20 units, a field hit over the quote
    start = TRAVEL_WHOLE.index("长江")
    assert [(s["item"], s["start"], s["end"], s["rule"]) for s in spans[1]] == [
        ("c1", start, start + len(TRAVEL_ITEM["A"]), "field_coverage")]
    assert spans[1][0]["coverage"] == pytest.approx(19 / 20)
    # 47 of 123 units: under min_coverage (0.5), a hit by the absolute rule (>= 40 units)
    assert [(s["item"], s["rule"]) for s in spans[2]] == [("long-1", "matched_units")]
    assert spans[2][0]["coverage"] == pytest.approx(47 / 123)
    # the question and two options: most of the item
    assert [(s["item"], s["rule"]) for s in spans[3]] == [("c1", "item_coverage")]
    # what the user saw before the rule: one gram's worth made a field hit
    (tmp_path / "old").mkdir()
    _, old = _run(tmp_path / "old", [TRAVEL_SHARED], eval_sets=_travel_sets(tmp_path), mode="annotate",
                  min_field_grams=1)
    shared = TRAVEL_SHARED.index("长江")
    assert [(s["item"], s["start"], s["end"], s["rule"], round(s["coverage"], 2))
            for s in old["decontaminate_spans"][0].as_py()] == [("c1", shared, shared + 12, "field_coverage", 0.6)]


def test_common_phrases_and_other_items_are_not_hits(tmp_path):
    texts = [
        ZH_HOST_A + "下列说法正确的是：" + ZH_HOST_B,  # only the template
        ZH_HOST_A + "下列说法正确的是：两者都正确，只有前者正确。" + ZH_HOST_B,  # template + choices
        EN_HOST_A + "Which of the following is the total cost of the trip?" + EN_HOST_B,
        EN_HOST_A + EN_HOST_B,
    ]
    _, out = _run(tmp_path, texts)
    assert out["decontaminate_hits"].to_pylist() == [0, 0, 0, 0]
    assert out["keep"].to_pylist() == [True] * 4


def test_drop_mode_drops_with_the_reason_and_tallies(tmp_path):
    texts = [EN_HOST_A + GSM_FULL + EN_HOST_B, ZH_HOST_A + ZH_HOST_B, ZH_HOST_A + CEVAL_Q]
    _, out = _run(tmp_path, texts)
    assert out["keep"].to_pylist() == [False, True, False]
    assert out["reason"].to_pylist() == [REASON_OVERLAP, None, REASON_OVERLAP]
    assert out["text"].to_pylist() == texts
    assert DecontaminateStage.tally(out) == {"ceval": 1, "ceval/ceval-7": 1, "documents_hit": 2, "gsm8k": 1,
                                             "gsm8k/gsm-1": 1}


def test_cut_mode_removes_exactly_the_matched_span(tmp_path):
    text = EN_HOST_A + GSM_FULL + "." + EN_HOST_B
    short = "Read this first. " + CEVAL_Q
    _, out = _run(tmp_path, [text, short], mode="cut", cut_margin=0, min_chars_after_cut=20)
    # from "Natalia" to the final "72": the host's own punctuation around it stays
    assert out["text"][0].as_py() == EN_HOST_A + "." + EN_HOST_B
    assert out["chars"][0].as_py() == len(EN_HOST_A + "." + EN_HOST_B)
    assert out["decontaminate_cut_chars"][0].as_py() == len(GSM_FULL)
    assert out["keep"].to_pylist() == [True, False]
    assert out["reason"][1].as_py() == REASON_EMPTY
    assert out["text"][1].as_py() == short  # dropped documents keep their text


def test_cut_margin_widens_by_units(tmp_path):
    text = "one two three " + GSM_FULL + " four five six seven eight nine ten eleven twelve thirteen"
    _, out = _run(tmp_path, [text], mode="cut", cut_margin=2, min_chars_after_cut=5)
    assert out["text"][0].as_py() == "one  six seven eight nine ten eleven twelve thirteen"


def _hf_save(rows: list[dict], path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(path))


def test_jsonl_parquet_and_hf_disk_give_the_same_index(tmp_path):
    jsonl = _write_jsonl(tmp_path / "c.jsonl", CEVAL)
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(jsonl.read_bytes()))
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(CEVAL), parquet)
    _hf_save(CEVAL, tmp_path / "c_hf")
    indexes = []
    for i, path in enumerate([jsonl, gz, parquet, tmp_path / "c_hf"]):
        config = Config(eval_sets={"ceval": {"path": str(path), "fields": ["question", "A", "B", "C", "D"],
                                             "id_field": "id"}})
        index, _, reused = load_or_build(config, tmp_path / f"cache{i}")
        assert not reused
        indexes.append(index)
    for other in indexes[1:]:
        assert np.array_equal(other.keys, indexes[0].keys)
        assert np.array_equal(other.post_item, indexes[0].post_item)
        assert np.array_equal(other.coverable, indexes[0].coverable)
        assert other.item_ids == ["ceval-7", "ceval-8", "ceval-9"]
    # template grams ("下列说法正确的是") are in all 3 items: with max_items_per_ngram 2 they go
    config = Config(eval_sets={"ceval": {"path": str(jsonl), "fields": ["question"], "id_field": "id"}},
                    max_items_per_ngram=2)
    index, _, _ = load_or_build(config, tmp_path / "cache9")
    # the 8-gram 下列说法正确的是 is in all three; the items part after it, so unit 0 (下) is
    # the only unit no other gram covers
    assert index.facts["template_grams"] == 1
    assert index.coverable.tolist() == [u - 1 for u in index.item_units.tolist()]


def test_hf_dataset_dict_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"test": datasets.Dataset.from_list(CEVAL),
                          "val": datasets.Dataset.from_list(CEVAL[:1])}).save_to_disk(str(tmp_path / "dd"))
    es = {"path": str(tmp_path / "dd"), "fields": ["question"], "id_field": "id"}
    assert DecontaminateStage.preflight(Config(eval_sets={"c": es})) == [
        f"decontaminate.eval_sets.c: {tmp_path / 'dd'}: a DatasetDict with splits ['test', 'val']; set split"]
    index, _, _ = load_or_build(Config(eval_sets={"c": {**es, "split": "val"}}), tmp_path / "cache")
    assert index.item_ids == ["ceval-7"]


def test_cache_is_reused_and_rebuilt_when_an_eval_file_changes(tmp_path):
    config = Config(eval_sets=_eval_sets(tmp_path))
    first, key1, reused1 = load_or_build(config, tmp_path / "cache")
    second, key2, reused2 = load_or_build(config, tmp_path / "cache")
    assert (reused1, reused2) == (False, True) and key1 == key2
    assert np.array_equal(first.keys, second.keys)
    settings1 = DecontaminateStage.effective_settings(config)
    _write_jsonl(tmp_path / "gsm8k.jsonl", GSM[:2])
    third, key3, reused3 = load_or_build(config, tmp_path / "cache")
    assert key3 != key1 and not reused3
    assert third.item_ids == ["ceval-7", "ceval-8", "ceval-9", "gsm-1", "gsm-2"]
    assert DecontaminateStage.effective_settings(config)["index_digest"] == key3 != settings1["index_digest"]
    assert sorted(p.name for p in (tmp_path / "cache" / "decontaminate").iterdir()) == sorted([key1, key3])


def test_config_errors_before_work(tmp_path):
    assert Config().enabled is False
    assert Config(eval_sets=_eval_sets(tmp_path)).enabled is True
    with pytest.raises(pydantic.ValidationError, match="names no eval set"):
        Config(enabled=True)
    with pytest.raises(pydantic.ValidationError, match="extra"):
        Config(eval_sets={"g": {"path": "x.jsonl", "fields": ["q"], "idfield": "id"}})
    with pytest.raises(pydantic.ValidationError, match="mode"):
        Config(mode="remove")
    with pytest.raises(pydantic.ValidationError, match=r"eval_sets\.c\.label_fields: \['E'\] not in fields"):
        Config(eval_sets={"c": {"path": "c.jsonl", "fields": ["question", "A"], "label_fields": ["E"]}})
    from pipeline.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"^<config>: decontaminate: decontaminate\.enabled: true, but "
                                          r"decontaminate\.eval_sets names no eval set$"):
        parse_config({"sources": {"web": {"paths": ["x.jsonl"]}}, "decontaminate": {"enabled": True}})
    _write_jsonl(tmp_path / "empty_item.jsonl", [{"q": "2 + 2 = ?"}, {"q": "？！"}])
    config = Config(eval_sets={
        "missing": {"path": str(tmp_path / "nope.jsonl"), "fields": ["q"]},
        "nofield": {"path": str(tmp_path / "empty_item.jsonl"), "fields": ["question"]},
        "empty": {"path": str(tmp_path / "empty_item.jsonl"), "fields": ["q"]},
        "odd": {"path": str(tmp_path), "fields": ["q"]},
    })
    assert DecontaminateStage.preflight(config) == [
        "decontaminate.eval_sets.empty: 1 item(s) with no letter or digit in fields ['q'] (first: id '1')",
        "decontaminate.eval_sets.missing: " + str(tmp_path / "nope.jsonl") + ": no such file or directory",
        "decontaminate.eval_sets.nofield: " + str(tmp_path / "empty_item.jsonl")
        + ": no field 'question' in the records (fields: q)",
        f"decontaminate.eval_sets.odd: {tmp_path}: a directory without dataset_info.json, state.json, "
        "dataset_dict.json (not a saved HF dataset)",
    ]


def test_corpus_common_grams_are_ignored(tmp_path):
    # 30 documents quoting the first sentence of gsm-2; with max_corpus_share 0.5 and
    # min_corpus_documents 20 those grams are corpus-common and the question no longer matches
    quote = GSM[1]["question"]
    texts = [EN_HOST_A + quote + EN_HOST_B] * 30 + [EN_HOST_A] * 10
    facts, out = _run(tmp_path, texts, max_corpus_share=0.5, mode="annotate")
    assert facts["corpus_common_grams"] > 0 and facts["corpus_sample"]["documents"] == 40
    assert out["decontaminate_hits"].to_pylist() == [0] * 40
    (tmp_path / "again").mkdir()
    facts, out = _run(tmp_path / "again", texts, mode="annotate")  # default share 0.001 but min 20 documents
    assert facts["corpus_common_grams"] > 0
    (tmp_path / "few").mkdir()
    facts, out = _run(tmp_path / "few", texts[:10] + [EN_HOST_A] * 10, mode="annotate")
    assert facts["corpus_common_grams"] == 0
    assert out["decontaminate_hits"].to_pylist() == [1] * 10 + [0] * 10


PROSE = ["The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
         "A small boat drifted down the quiet river as the evening light faded behind the distant hills."]


def _build_config(tmp_path: Path, **decontaminate) -> dict:
    web = tmp_path / "web.jsonl"
    texts = [*PROSE * 10, EN_HOST_A + GSM_FULL + EN_HOST_B, EN_HOST_A + GSM[1]["question"] + EN_HOST_B]
    web.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return {"seed": 5, "sources": {"web": {"paths": [str(web)]}},
            "executor": {"num_workers": 2}, "heuristics": {"enabled": False}, "perplexity": {"enabled": False},
            "dedup": {"enabled": False}, "langid": {"allowed_languages": ["en"]},
            "decontaminate": {"eval_sets": _eval_sets(tmp_path), **decontaminate},
            "tokenize": {"vocab_size": 300}, "output": {"seq_length": 16}}


def test_the_stage_runs_in_a_build_and_counts_its_reason(tmp_path):
    import yaml

    from pipeline.build import build
    from pipeline.config import ConfigError, parse_config, preflight

    data = _build_config(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    result = build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    assert m["stage_order"] == ["langid", "decontaminate", "pii", "tokenize", "mixture"]
    assert m["stages"]["decontaminate"]["totals"]["dropped"] == {REASON_OVERLAP: 2}
    assert m["stages"]["decontaminate"]["totals"]["kept"] == 20
    fit = m["stages"]["decontaminate"]["fit"]
    assert fit["items"] == {"ceval": 3, "gsm8k": 3} and fit["corpus_sample"]["documents"] == 22
    # the index digest is published (a name with "key" in it was redacted as a credential)
    digest = m["stages"]["decontaminate"]["settings"]["index_digest"]
    assert fit["index_digest"] == digest and len(digest) == 64 and int(digest, 16) >= 0
    assert "<redacted>" not in json.dumps(m["stages"]["decontaminate"])
    # cut mode in a build: the layer's edited text passes the executor's checks, and the
    # characters fall by exactly the two quotes (from the first to the last letter/digit;
    # the stage's counts are after its edits, so compare with the drop build's input)
    cut = _build_config(tmp_path, mode="cut", cut_margin=0)
    (tmp_path / "cut.yaml").write_text(yaml.safe_dump(cut))
    m2 = build("v2", tmp_path / "cut.yaml", tmp_path / "corpora", log=lambda m: None).manifest
    totals = m2["stages"]["decontaminate"]["totals"]
    assert totals["dropped"] == {} and totals["kept"] == 22
    chars_before = m["stages"]["decontaminate"]["totals"]["chars_in"]
    assert chars_before - totals["kept_chars"] == len(GSM_FULL) + len(GSM[1]["question"]) - 1
    # a config naming a missing eval file stops before any work, naming the key
    bad = _build_config(tmp_path)
    bad["decontaminate"]["eval_sets"]["gsm8k"]["path"] = str(tmp_path / "gone.jsonl")
    with pytest.raises(ConfigError, match=r"decontaminate\.eval_sets\.gsm8k: .*gone\.jsonl: no such file"):
        preflight(parse_config(bad))


def test_the_sample_forum_posts_hit_exactly_their_planted_items(tmp_path):
    """data/sample/forum-posts.jsonl (bundled with the eval sets): each post's
    ``meta.planted`` lists the eval items it quotes (verbatim, one word
    changed, re-formatted, partial, full-/half-width punctuation); posts
    with none are negatives. Against the bundled eval sets, with the
    defaults, the hits are exactly those items."""
    root = Path(__file__).resolve().parents[2]
    posts = root / "data" / "sample" / "forum-posts.jsonl"
    config = Config(eval_sets={
        "gsm8k": {"path": "data/evalsets/gsm8k.jsonl", "fields": ["question", "answer"], "id_field": "id"},
        "humaneval": {"path": "data/evalsets/humaneval.jsonl", "fields": ["prompt", "canonical_solution"],
                      "id_field": "id"},
        "gaokao_mcq": {"path": "data/evalsets/gaokao_mcq.jsonl", "fields": ["question", "answer"],
                       "id_field": "id"}})
    index, _, _ = load_or_build(config, tmp_path)
    records = [json.loads(line) for line in posts.read_text(encoding="utf-8").splitlines()]
    found, planted = [], []
    for rec in records:
        planted.append(sorted((p["eval_set"], str(p["item"])) for p in rec["meta"]["planted"]))
        found.append(sorted({(h.eval_set, h.item) for h in find_hits(rec["text"], index, config)}))
    assert found == planted
    assert sum(map(len, planted)) == 15 and sum(not p for p in planted) == 6
