"""Tests for stages/dedup/: exact + MinHash-LSH near-duplicate removal."""

from __future__ import annotations

import multiprocessing
import pickle
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest
from datasketch import MinHash

from stages import dedup
from stages.dedup import exchange, lsh
from stages.dedup.signatures import document_shingle_sets, exact_jaccard
from stages.base import Partitions, StageContext
from stages.dedup import Config, DedupStage

# Two unrelated Chinese paragraphs (own writing), each over 200 characters.
ZH_A = (
    "清晨的江边总是很安静，薄雾慢慢从水面升起，远处的渔船只露出模糊的轮廓。老人们沿着堤岸散步，"
    "偶尔停下来看一看涨落的潮水，谈论昨天集市上的菜价和孙子的功课。卖豆浆的小摊早早支起了棚子，"
    "热气和油条的香味混在一起，飘到很远的巷口。太阳升高以后，雾气散尽，江面变得明亮，货船的汽笛"
    "一声接着一声，城市就这样醒了过来。到了中午，码头上搬运工人来回穿梭，把一箱箱水果和布匹装上"
    "卡车，送往城里的各个市场。傍晚时分，晚霞映红了半边天空。"
)
ZH_B = (
    "训练语言模型之前，需要先把原始网页整理成干净的语料。第一步是识别每篇文档的语言，第二步用规则"
    "过滤掉过短、重复行过多或者符号比例异常的页面，第三步计算困惑度，把明显不通顺的文本放到尾部桶。"
    "随后做去重：完全相同的文档只保留一份，高度相似的文档用最小哈希签名和局部敏感哈希找出候选对，"
    "再用估计的杰卡德相似度确认。最后把文档切分为词元，按序列长度打包，写入分片文件，并记录清单。"
    "每一步的参数和随机种子都要写进清单，以便日后复现同样的结果。"
)


def _opencc(config: str):
    import opencc

    return opencc.OpenCC(config)


def _write(path: Path, rows: list[dict]) -> Path:
    """One partition: base columns, langid_lang and keep, as a stage gets them."""
    n = len(rows)
    table = pa.table({
        "id": pa.array([r["id"] for r in rows], pa.string()),
        "source": pa.array([r.get("source", "test") for r in rows], pa.string()),
        "file": pa.array([str(path)] * n, pa.string()),
        "line": pa.array(range(1, n + 1), pa.int64()),
        "text": pa.array([r["text"] for r in rows], pa.string()),
        "meta": pa.array(["{}"] * n, pa.string()),
        "lang_hint": pa.array([None] * n, pa.string()),
        "langid_lang": pa.array([r.get("lang") for r in rows], pa.string()),
        "perplexity_value": pa.array([r.get("ppl") for r in rows], pa.float64()),
        "chars": pa.array([len(r["text"]) for r in rows], pa.int64()),
        "keep": pa.array([r.get("keep", True) for r in rows], pa.bool_()),
    })
    pq.write_table(table, path)
    return path


def _run(tmp_path: Path, partitions: list[list[dict]], config: Config | None = None, mapper=None,
         **fields) -> tuple[dict, pa.Table]:
    """fit over the partitions (``config``, else ``Config(**fields)``; ``mapper``
    default: serial), then process each; returns (facts, all output rows)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = [_write(tmp_path / f"part-{i:05d}.parquet", rows) for i, rows in enumerate(partitions)]
    ctx = StageContext(work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", seed=0,
                       tools_dir=tmp_path)
    config = config if config is not None else Config(**fields)
    stage = DedupStage(config, ctx)
    facts = stage.fit(Partitions(paths, mapper=mapper or (lambda fn, items: [fn(i) for i in items]))).facts
    worker = DedupStage(config, ctx)  # process() runs in a fresh instance
    outputs = []
    for p in paths:
        table = pq.read_table(p).filter(pa.compute.field("keep"))
        worker.partition = p.name  # as the executor does: only this partition's decisions are read
        outputs.append(worker.process(table))
    worker.partition = None  # outside a build: every partition's decisions are searched
    assert pa.concat_tables([worker.process(pq.read_table(p).filter(pa.compute.field("keep")))
                             for p in paths]).equals(pa.concat_tables(outputs))
    return facts, pa.concat_tables(outputs)


def _kept(out: pa.Table) -> set[str]:
    return {i for i, k in zip(out["id"].to_pylist(), out["keep"].to_pylist()) if k}


def _row(out: pa.Table, doc_id: str) -> dict:
    return {name: col[0] for name, col in out.filter(pa.compute.equal(out["id"], doc_id))
            .to_pydict().items()}


def _shingle_set(text: str, lang: str | None, n_words: int = 5, n_chars: int = 5) -> set[int]:
    normalized = dedup.near_normalize(dedup.exact_normalize(text))
    return set(dedup.shingle_hashes(normalized, dedup.uses_char_shingles(normalized, lang),
                                    n_words, n_chars).tolist())


# ----------------------------------------------------------------------------- exact


def test_cat_dog_cat_two_survive(tmp_path):
    facts, out = _run(tmp_path, [[{"id": "d:1", "text": "cat", "lang": "en"},
                                  {"id": "d:2", "text": "dog", "lang": "en"},
                                  {"id": "d:3", "text": "cat", "lang": "en"}]])
    assert _kept(out) == {"d:1", "d:2"}
    assert _row(out, "d:3") == {**_row(out, "d:3"), "reason": "dedup.exact_duplicate",
                                "dedup_cluster": "d:1", "dedup_similarity": 1.0}
    keeper = _row(out, "d:1")
    assert (keeper["dedup_cluster"], keeper["dedup_similarity"], keeper["reason"]) == ("d:1", None, None)
    single = _row(out, "d:2")
    assert (single["dedup_cluster"], single["dedup_similarity"]) == (None, None)
    assert out.schema.field("dedup_similarity").type == pa.float64()
    assert (facts["exact_duplicates"], facts["near_duplicates"], facts["clusters"]) == (1, 0, 1)
    # word 5-grams of a 1-word text: one whole-text shingle
    assert len(dedup.shingle_hashes("cat", False, 5, 5)) == 1


def test_exact_normalization_full_width_case_whitespace(tmp_path):
    _, out = _run(tmp_path, [[{"id": "a", "text": "Ｈｅｌｌｏ　World\n", "lang": "en"},
                              {"id": "b", "text": "hello world", "lang": "en"}]], near=False)
    # equal normalized text (11 characters); "Ｈｅｌｌｏ　World\n" has more raw characters (12), so the
    # unpadded "hello world" is kept by `longest`
    assert _kept(out) == {"b"}
    assert _row(out, "a")["reason"] == "dedup.exact_duplicate"


def test_same_document_in_two_partitions_one_survives(tmp_path):
    doc = "The same paragraph was crawled twice from two mirrors of one site."
    facts, out = _run(tmp_path, [[{"id": "web:x:1", "text": doc, "lang": "en"}],
                                 [{"id": "books:y:7", "text": doc, "lang": "en"},
                                  {"id": "books:y:8", "text": "Something else entirely.", "lang": "en"}]])
    assert _kept(out) == {"books:y:7", "books:y:8"}  # equal length: smallest id wins
    assert _row(out, "web:x:1")["dedup_cluster"] == "books:y:7"
    assert facts["documents"] == 3 and facts["exact_duplicates"] == 1


def test_exact_off_near_catches_identical_text(tmp_path):
    _, out = _run(tmp_path, [[{"id": "a", "text": "cat", "lang": "en"},
                              {"id": "b", "text": "cat", "lang": "en"}]], exact=False)
    assert _kept(out) == {"a"}
    row = _row(out, "b")
    assert (row["reason"], row["dedup_similarity"]) == ("dedup.near_duplicate", 1.0)


# ----------------------------------------------------------------------------- near, Chinese


def test_chinese_one_character_changed_one_survives(tmp_path):
    assert len(ZH_A) >= 200
    changed = ZH_A[:100] + "河" + ZH_A[101:]
    assert changed != ZH_A
    # 5-character shingles: one edit replaces 5 of the shingles around it
    a, b = _shingle_set(ZH_A, "zh"), _shingle_set(changed, "zh")
    true_jaccard = len(a & b) / len(a | b)
    assert true_jaccard == pytest.approx((len(a) - 5) / (len(a) + 5))
    _, out = _run(tmp_path, [[{"id": "zh:1", "text": ZH_A, "lang": "zh"},
                              {"id": "zh:2", "text": changed, "lang": "zh"}]])
    assert _kept(out) == {"zh:1"}  # equal length: smallest id
    row = _row(out, "zh:2")
    assert row["reason"] == "dedup.near_duplicate"
    assert row["dedup_cluster"] == "zh:1"
    assert abs(row["dedup_similarity"] - true_jaccard) < 0.1


def test_unrelated_chinese_documents_both_survive(tmp_path):
    assert len(_shingle_set(ZH_A, "zh") & _shingle_set(ZH_B, "zh")) == 0
    facts, out = _run(tmp_path, [[{"id": "zh:a", "text": ZH_A, "lang": "zh"},
                                  {"id": "zh:b", "text": ZH_B, "lang": None}]])
    assert _kept(out) == {"zh:a", "zh:b"}
    assert out["dedup_cluster"].null_count == 2
    assert facts["clusters"] == 0


def test_unknown_language_chinese_uses_character_shingles():
    assert dedup.uses_char_shingles("你好 世界", None)
    assert dedup.uses_char_shingles("你好 世界", "und")
    assert not dedup.uses_char_shingles("hello world", None)
    assert not dedup.uses_char_shingles("你好 世界", "en")  # a known language decides
    assert dedup.uses_char_shingles("hello", "ja")
    # spaces are ignored by character shingles: re-wrapped Chinese keeps its shingles
    assert _shingle_set(ZH_A.replace("，", "\n"), None) == _shingle_set(ZH_A.replace("，", ""), None)


def test_near_normalize_strips_punctuation_and_symbols():
    assert dedup.near_normalize(dedup.exact_normalize("Hello, World!  (a_b) ©2024 +x 😀")) == \
        "hello world a b 2024 x"
    assert dedup.near_normalize(dedup.exact_normalize("你好，世界。「测试」")) == "你好 世界 测试"


def test_empty_normalized_text_never_enters_lsh(tmp_path):
    facts, out = _run(tmp_path, [[{"id": "p:1", "text": "!!!", "lang": None},
                                  {"id": "p:2", "text": "???", "lang": None},
                                  {"id": "p:3", "text": "!!!", "lang": None},
                                  {"id": "p:4", "text": " \n\t", "lang": None}]])
    assert _kept(out) == {"p:1", "p:2", "p:4"}  # only the exact duplicate goes
    assert _row(out, "p:3")["reason"] == "dedup.exact_duplicate"
    assert facts["empty_after_normalization"] == 3
    assert facts["candidate_pairs"] == 0


# ----------------------------------------------------------------------------- clusters


def _chain_documents() -> dict[str, str]:
    """A ~ B and B ~ C (Jaccard 0.6 each), A !~ C (Jaccard 1/3) at threshold 0.5.

    Windows of 104 distinct words shifted by 25 words: 100 5-gram shingles each,
    A and B share 75 (75/125 = 0.6), A and C share 50 (50/150 = 1/3).
    """
    words = [f"w{i:03d}" for i in range(200)]
    return {"A": " ".join(words[0:104]), "B": " ".join(words[25:129]) + " extra",
            "C": " ".join(words[50:154])}


@pytest.mark.parametrize("keep, keeper", [("longest", "B"), ("smallest_id", "A")])
def test_chain_same_keeper_in_any_input_order(tmp_path, keep, keeper):
    docs = _chain_documents()
    sets = {k: _shingle_set(v, "en") for k, v in docs.items()}
    assert len(sets["A"] & sets["C"]) / len(sets["A"] | sets["C"]) == pytest.approx(1 / 3)
    config = {"num_bands": 64, "rows_per_band": 4, "jaccard_threshold": 0.5, "keep": keep}
    rows = [{"id": k, "text": v, "lang": "en"} for k, v in docs.items()]
    rows += [{"id": f"z{i}", "text": f"unrelated filler document number {i} about topic {i * 7}",
              "lang": "en"} for i in range(5)]
    outcomes = set()
    for attempt in range(4):
        shuffled = random.Random(attempt).sample(rows, len(rows))
        split = 1 + attempt  # different partitioning each time
        _, out = _run(tmp_path / f"order{attempt}", [shuffled[:split], shuffled[split:]], **config)
        outcomes.add((frozenset(_kept(out)),
                      tuple(_row(out, k)["dedup_cluster"] for k in "ABC")))
    assert outcomes == {(frozenset({keeper, "z0", "z1", "z2", "z3", "z4"}), (keeper,) * 3)}


def test_removed_records_keeper_similarity_reason_per_partition(tmp_path):
    _run(tmp_path, [[{"id": "a", "text": "cat", "lang": "en"},
                     {"id": "b", "text": "cat", "lang": "en"},
                     {"id": "c", "text": "dog", "lang": "en"}]])
    files = sorted((tmp_path / "work" / "removed").glob("*.parquet"))
    assert [f.name for f in files] == ["part-00000.parquet"]  # only partitions with cluster members
    removed = pq.read_table(files[0]).to_pylist()
    assert removed == [{"id": "a", "keeper": "a", "similarity": None, "reason": None},
                       {"id": "b", "keeper": "a", "similarity": 1.0, "reason": "dedup.exact_duplicate"}]


def test_duplicate_ids_are_an_error(tmp_path):
    with pytest.raises(ValueError, match="'x' occurs more than once"):
        _run(tmp_path, [[{"id": "x", "text": "one"}], [{"id": "x", "text": "two"}]])


def test_not_kept_rows_are_ignored(tmp_path):
    facts, _ = _run(tmp_path, [[{"id": "a", "text": "cat"}, {"id": "b", "text": "cat", "keep": False}]])
    assert facts["documents"] == 1 and facts["exact_duplicates"] == 0


# ----------------------------------------------------------------------------- config


def test_swapped_bands_and_rows_refused_with_probability():
    Config(num_bands=14, rows_per_band=8)  # the default is accepted
    expected = 1 - (1 - 0.8**14) ** 8
    with pytest.raises(pydantic.ValidationError) as err:
        Config(num_bands=8, rows_per_band=14)
    message = str(err.value)
    assert f"{expected:.3f}" in message and "0.302" in message
    assert "num_bands=8" in message and "rows_per_band=14" in message


def test_unknown_config_key_refused():
    with pytest.raises(pydantic.ValidationError):
        Config(num_perm=128)


def test_s_curve_points():
    points = dedup.s_curve(14, 8, points=11)
    assert points[0] == (0.0, 0.0) and points[-1] == (1.0, 1.0)
    assert points[8][1] == pytest.approx(1 - (1 - 0.8**8) ** 14)
    assert points[8][1] == pytest.approx(0.9235, abs=1e-4)
    assert all(p1 <= p2 for (_, p1), (_, p2) in zip(points, points[1:]))


# ----------------------------------------------------------------------------- MinHash


def test_signature_equals_datasketch_and_estimates_known_jaccard():
    set_a = np.arange(0, 1000, dtype=np.uint32)
    set_b = np.arange(250, 1250, dtype=np.uint32)  # Jaccard 750 / 1250 = 0.6
    offsets = np.array([0, 1000, 2000])
    signatures = dedup.minhash_signatures(np.concatenate([set_a, set_b]), offsets, 256, seed=1)
    for row, values in zip(signatures, (set_a, set_b)):
        reference = MinHash(num_perm=256, seed=1, scheme="affine32", hashfunc=int)
        reference.update_batch(values.tolist())
        np.testing.assert_array_equal(row, reference.hashvalues)
    assert abs(dedup.estimated_jaccard(signatures[0], signatures[1]) - 0.6) < 0.1


def test_batched_ngram_hashes_equal_single_document():
    texts = ["a b c d e f g", "x y", "one", "p q r s t"]
    tokens, lengths = dedup.shingle_tokens(texts, char_shingles=False)
    hashes, offsets = dedup.ngram_hashes(tokens, lengths, 5)
    assert np.diff(offsets).tolist() == [3, 1, 1, 1]
    for i, text in enumerate(texts):
        np.testing.assert_array_equal(hashes[offsets[i]:offsets[i + 1]],
                                      dedup.shingle_hashes(text, False, 5, 5))
    assert len(set(hashes.tolist())) == 6


def test_worker_process_signatures_equal_main_process():
    hant = _opencc("s2twp").convert(ZH_B)
    texts = [ZH_A, "cat", "The quick brown fox jumps over the lazy dog again.", "...", hant]
    langs = ["zh", "en", None, None, "zh"]
    config = Config()  # crosses to the worker as the frozen model (pickled)
    positions, signatures = dedup.document_signatures(texts, langs, config)
    assert positions.tolist() == [0, 1, 2, 4]  # "..." is empty after normalization
    assert signatures.shape == (4, 112) and signatures.dtype == np.uint32
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        worker_positions, worker_signatures = pool.submit(dedup.document_signatures, texts, langs, config).result()
    np.testing.assert_array_equal(worker_positions, positions)
    np.testing.assert_array_equal(worker_signatures, signatures)


# ----------------------------------------------------------------------------- script folding


def test_traditional_twin_caught_only_with_script_folding(tmp_path):
    hant = _opencc("s2twp").convert(ZH_A)
    assert hant != ZH_A and len(hant) == len(ZH_A)
    folded = dedup.fold_script([dedup.near_normalize(dedup.exact_normalize(hant))], "tw2sp")[0]
    assert folded == _ideographs(dedup.near_normalize(dedup.exact_normalize(ZH_A)))
    rows = [{"id": "zh_CN:1", "text": ZH_A, "lang": "zh"}, {"id": "zh_TW:1", "text": hant, "lang": "zh"},
            {"id": "zh:b", "text": ZH_B, "lang": "zh"}]
    _, out = _run(tmp_path / "none", [rows], fold_chinese_script="none")
    assert _kept(out) == {"zh_CN:1", "zh_TW:1", "zh:b"}
    _, out = _run(tmp_path / "tw2sp", [rows])  # the default
    assert _kept(out) == {"zh_CN:1", "zh:b"}  # equal length: smallest id
    assert (_row(out, "zh_TW:1")["reason"], _row(out, "zh_TW:1")["dedup_similarity"]) == \
        ("dedup.near_duplicate", 1.0)


def test_japanese_is_not_folded():
    text = "学習資料の検証"  # 習/資/検/証 are Japanese forms; tw2sp would change them
    assert dedup.fold_script([text], "tw2sp")[0] != text
    _, jp = dedup.document_signatures([text], ["ja"], Config())
    _, jp_none = dedup.document_signatures([text], ["ja"], Config(fold_chinese_script="none"))
    np.testing.assert_array_equal(jp, jp_none)


def _ideographs(text: str) -> str:
    """``text`` without spaces: what character shingles see (folding drops
    the spaces between ideographs of a text it converts)."""
    return text.replace(" ", "")


def _spaced(text: str) -> str:
    """``text`` with a space after every character (a re-wrapped or OCR'd page)."""
    return " ".join(text)


def test_folding_leaves_simplified_text_as_it_is():
    """Issue 18: ``tw2sp`` on every document rewrote Simplified text (文件 ->
    文档, the Taiwan meaning of 文件); folding now leaves a document without
    Traditional-only characters alone, and converts only the Traditional-only
    characters of a mostly Simplified one."""
    simplified = [dedup.near_normalize(dedup.exact_normalize(t)) for t in (ZH_A, ZH_B, "请打开这个文件并保存。")]
    for fold in ("t2s", "tw2sp"):
        assert dedup.fold_script(simplified, fold) == simplified
    import opencc

    assert opencc.OpenCC("tw2sp").convert("请打开这个文件") == "请打开这个文档"  # what the old folding did
    # mostly Simplified with two Traditional characters: those two only (文件 and 乾 stay)
    assert dedup.fold_script(["乾坤这个文件很著名，这种说法对。這個"], "tw2sp") == ["乾坤这个文件很著名，这种说法对。这个"]


def test_character_converted_traditional_twin_found_and_spaces_do_not_matter(tmp_path):
    from stages.zh_script import opencc_converter

    hant = opencc_converter("s2t", "char").convert(ZH_A)  # OpenCC STCharacters only
    assert hant != ZH_A and len(hant) == len(ZH_A)
    for fold in ("t2s", "tw2sp"):
        assert dedup.fold_script([dedup.near_normalize(dedup.exact_normalize(hant))], fold) == \
            [_ideographs(dedup.near_normalize(dedup.exact_normalize(ZH_A)))]
    rows = [{"id": "zh_CN:1", "text": ZH_A, "lang": "zh"}, {"id": "zh_TW:1", "text": _spaced(hant), "lang": "zh"},
            {"id": "zh:b", "text": ZH_B, "lang": "zh"}]
    _, out = _run(tmp_path / "t2s", [rows], fold_chinese_script="t2s")
    assert _kept(out) == {"zh_TW:1", "zh:b"}  # the keeper rule counts the spaces: the spaced copy is longer
    assert (_row(out, "zh_CN:1")["reason"], _row(out, "zh_CN:1")["dedup_similarity"]) == \
        ("dedup.near_duplicate", 1.0)
    _, out = _run(tmp_path / "none", [rows], fold_chinese_script="none")
    assert _kept(out) == {"zh_CN:1", "zh_TW:1", "zh:b"}
    # inserted spaces between ideographs: the same signatures, character and phrase level,
    # Traditional and Simplified (the phrase 檔案 split by a space still maps to 文件)
    phrase = _opencc("s2twp").convert(ZH_B)
    texts = [hant, phrase, ZH_A, "打開這個檔案並保存。"]
    for fold in ("t2s", "tw2sp"):
        _, plain = dedup.document_signatures(texts, ["zh"] * 4, Config(fold_chinese_script=fold))
        _, spaced = dedup.document_signatures([_spaced(t) for t in texts], ["zh"] * 4,
                                              Config(fold_chinese_script=fold))
        np.testing.assert_array_equal(plain, spaced)
    assert dedup.fold_script(["打開 這個 檔 案 並保存"], "tw2sp") == ["打开这个文件并保存"]
    assert dedup.fold_script(["打開 這個 檔 案 並保存"], "t2s") == ["打开这个档案并保存"]


# ----------------------------------------------------------------------------- lines


HEADER = "Header line 12 of this manual that is long enough to count"


def test_line_dedup_removes_repeated_lines_and_drops_empty_documents(tmp_path):
    a = HEADER + "\nThe unique body of document A, which is the longest one here by far.\nok"
    b = "header LINE 34 of this manual, that is long enough to count!\nThe body of B is different."
    c = HEADER + "\n\n  "
    code = HEADER + "\nimport os\nfor item in os.listdir('.'):\n    print(item, len(item), item.upper())"
    facts, out = _run(tmp_path, [[{"id": "a", "text": a, "lang": "en"}, {"id": "b", "text": b, "lang": "en"}],
                                 [{"id": "c", "text": c, "lang": "en"},
                                  {"id": "d", "text": code, "lang": "code"}]], line_dedup=True)
    assert dedup.line_normalize(b.split("\n")[0]) == dedup.line_normalize(HEADER)
    assert _kept(out) == {"a", "b", "d"}
    row_a, row_b, row_c, row_d = (_row(out, k) for k in "abcd")
    assert (row_a["text"], row_a["dedup_lines_removed"]) == (a, 0)  # the longest owns the line
    assert row_b["text"] == "The body of B is different."
    assert row_b["chars"] == len("The body of B is different.")
    assert (row_b["dedup_lines_removed"], row_b["dedup_chars_removed"]) == (1, len(b.split("\n")[0]) + 1)
    assert row_c["reason"] == "dedup.duplicate_lines" and row_c["text"] == c  # dropped whole, text kept
    assert (row_d["text"], row_d["dedup_lines_removed"]) == (code, 0)  # code never loses lines
    assert facts["lines_removed"] == 2 and facts["lines_considered"] == 4  # b's body is < 30


def test_line_dedup_off_leaves_text_and_null_columns(tmp_path):
    _, out = _run(tmp_path, [[{"id": "a", "text": HEADER + "\nx", "lang": "en"},
                              {"id": "b", "text": HEADER + "\ny", "lang": "en"}]], near=False)
    assert _kept(out) == {"a", "b"}
    assert out["dedup_lines_removed"].null_count == 2 and out["text"].to_pylist() == [HEADER + "\nx",
                                                                                   HEADER + "\ny"]


# ----------------------------------------------------------------------------- keeper rule, bounded memory


def test_keep_lowest_perplexity(tmp_path):
    rows = [{"id": "a", "text": "Same text here.  ", "lang": "en", "ppl": 900.0},
            {"id": "b", "text": "same text here.", "lang": "en", "ppl": 150.0},
            {"id": "c", "text": "Same text here.", "lang": "en", "ppl": None}]
    _, out = _run(tmp_path / "ppl", [rows], keep="lowest_perplexity")
    assert _kept(out) == {"b"}
    _, out = _run(tmp_path / "long", [rows])
    assert _kept(out) == {"b"}  # equal normalized length; b and c have the fewest raw characters, then id


@pytest.mark.parametrize("padded", ["  The  quick brown fox\tjumps over the lazy dog,\n\n  near the river bank. \n",
                                    "The quick brown fox -- jumps over the lazy dog, ... near the river bank!!",
                                    # invisible format characters: a bidi embedding, ZWSPs, a BOM
                                    "\u202bThe quick brown\u200b fox jumps over the lazy dog, near the river "
                                    "bank.\u202c" + "\u200b" * 20 + "\ufeff"])
def test_padded_copy_never_beats_its_clean_original(tmp_path, padded):
    clean = "The quick brown fox jumps over the lazy dog, near the river bank."
    rows = [{"id": "a:padded", "text": padded, "lang": "en"}, {"id": "b:clean", "text": clean, "lang": "en"},
            {"id": "c:longer", "text": clean + " It rained.", "lang": "en"},
            {"id": "d:other", "text": "An unrelated sentence about compilers and linkers.", "lang": "en"}]
    assert dedup.near_normalize(dedup.exact_normalize(padded)) == dedup.near_normalize(dedup.exact_normalize(clean))
    assert len(padded) > len(clean)  # the old rule (most raw characters) kept the padded copy
    lengths = dedup.near_lengths([dedup.exact_normalize(t) for t in (padded, clean, clean + " It rained.")])
    assert lengths.tolist() == [63, 63, 73]
    _, out = _run(tmp_path / "pair", [rows[:1], [rows[1], rows[3]]])
    assert _kept(out) == {"b:clean", "d:other"}
    assert _row(out, "a:padded")["dedup_cluster"] == "b:clean"
    # a copy with more content still wins: normalized length first
    _, out = _run(tmp_path / "three", [rows[:2], rows[2:]])  # J(clean, longer) = 9/11
    assert _kept(out) == {"c:longer", "d:other"}


def _mixed_rows() -> list[list[dict]]:
    docs = _chain_documents()
    rows = [{"id": k, "text": v, "lang": "en"} for k, v in docs.items()]
    rows += [{"id": "zh:1", "text": ZH_A, "lang": "zh"}, {"id": "zh:2", "text": ZH_A[:150] + "江" + ZH_A[151:],
                                                          "lang": "zh"},
             {"id": "zh:3", "text": ZH_A, "lang": "zh"}, {"id": "zh:b", "text": ZH_B, "lang": None}]
    rows += [{"id": f"f{i}", "text": HEADER + f"\nfiller document {i} " * (i + 1), "lang": "en"} for i in range(8)]
    return [rows[:6], rows[6:11], rows[11:]]


def test_many_spill_groups_give_the_same_result(tmp_path, monkeypatch):
    config = {"num_bands": 16, "rows_per_band": 2, "jaccard_threshold": 0.5, "line_dedup": True}
    facts_one, out_one = _run(tmp_path / "one", _mixed_rows(), **config)
    for name, per_group in (("ID_RECORDS_PER_GROUP", 4), ("EXACT_RECORDS_PER_GROUP", 3),
                            ("BAND_RECORDS_PER_GROUP", 40), ("LINE_RECORDS_PER_GROUP", 4),
                            ("NODE_RECORDS_PER_GROUP", 2)):
        monkeypatch.setattr(exchange, name, per_group)
    facts_many, out_many = _run(tmp_path / "many", _mixed_rows(), **config)
    assert facts_one["spill_groups"] == {"ids": 1, "exact": 1, "bands": 1, "lines": 1, "nodes": 1}
    assert facts_many["spill_groups"]["nodes"] == 8  # 15 documents, 2 per node group
    assert facts_many["spill_groups"]["bands"] == 15 * 16 // 40 and facts_many["spill_groups"]["exact"] == 5
    one, many = (sorted((tmp_path / f"{k}/work/removed").glob("*.parquet")) for k in ("one", "many"))
    assert [f.name for f in one] == [f.name for f in many] and one
    assert [f.read_bytes() for f in one] == [f.read_bytes() for f in many]
    assert out_one.drop_columns(["file"]).equals(out_many.drop_columns(["file"]))
    drop = {k: v for k, v in facts_one.items() if k != "spill_groups"}
    assert drop == {k: v for k, v in facts_many.items() if k != "spill_groups"}
    assert _row(out_one, "zh:3")["dedup_cluster"] == "zh:1" and _row(out_one, "zh:2")["dedup_cluster"] == "zh:1"
    assert not (tmp_path / "one/work/spill").exists()  # spill and signatures are deleted after fit


def test_bucket_pairs_all_pairs_small_star_and_chain_large():
    small = np.array([5, 7, 9])
    large = np.arange(100, 170)  # 70 members > ALL_PAIRS_MAX_BUCKET
    handles = np.concatenate([small, large, [1000]])
    starts = np.array([0, 3, 73, 74])
    pairs = lsh.bucket_pairs(handles, starts)
    as_set = {tuple(p) for p in pairs.tolist()}
    assert {(5, 7), (5, 9), (7, 9)} <= as_set
    assert len(pairs) == 3 + (69 + 68)  # star to the first + chain of successors
    assert (100, 169) in as_set and (150, 151) in as_set and (150, 160) not in as_set


def test_band_keys_equal_only_where_band_values_equal():
    a = np.arange(12, dtype=np.uint32)
    b = a.copy()
    b[5] += 1  # band 1 of 3 x 4 differs
    keys = dedup.band_keys(np.stack([a, b]), 3, 4)
    assert keys.dtype == np.uint64 and keys.shape == (2, 3)
    assert (keys[0] == keys[1]).tolist() == [True, False, True]
    assert len(set(keys[0].tolist())) == 3  # the band index is mixed in


def test_fit_facts_record_hashing_and_s_curve(tmp_path):
    facts, _ = _run(tmp_path, [[{"id": "a", "text": "cat", "lang": "en"}]])
    assert (facts["seed"], facts["num_perm"], facts["ngram_words"], facts["ngram_chars"]) == (1, 112, 5, 5)
    assert facts["shingle_hash"].startswith("poly64-fmix64-32") and facts["exact_hash"].startswith("blake2b-128")
    assert len(facts["s_curve"]) == 21 and facts["s_curve"][16] == [0.8, 0.9235]
    assert facts["candidate_probability_at_threshold"] == 0.9235


def test_batch_normalization_equals_single_document():
    texts = ["Hello, World!  (a_b) ©2024 +x 😀", "你好，世界。「测试」", "a\u2028b\x1cc\x85d\u00a0e\u3000f",
             "ＡＢＣ ß ﬁ", "", "...", " x\t\ny "]
    assert dedup.near_normalize_batch(texts) == [dedup.near_normalize(dedup.exact_normalize(t)) for t in texts]
    assert dedup.line_normalize("Page 12 of 40.") == "page 00 of 00"
    exact = [dedup.exact_normalize(t) for t in texts]
    assert dedup.near_lengths(exact).tolist() == [len(dedup.near_normalize(t)) for t in exact]


@pytest.mark.parametrize("margin, survivors", [(-0.02, 1), (0.02, 2)])
def test_exact_verification_uses_the_true_shingle_jaccard(tmp_path, margin, survivors):
    words = [f"word{i}" for i in range(40)]
    a = " ".join(words)
    b = " ".join(words[:38] + ["other", "words"])
    sets = document_shingle_sets([a, b], ["en", "en"], Config())
    j = exact_jaccard(sets[0], sets[1])
    assert j == pytest.approx(34 / 38)  # 36 word 5-grams each, 2 differ
    _, out = _run(tmp_path, [[{"id": "d:1", "text": a, "lang": "en"}, {"id": "d:2", "text": b, "lang": "en"}]],
                  verify="exact", jaccard_threshold=round(j + margin, 4))
    assert len(_kept(out)) == survivors


@pytest.mark.parametrize("stem, words, jaccard, agreements, merged_by_signature, merged_by_default", [
    ("bird", 21, 15 / 19, 90, True, False),   # just below 0.8; the estimate (90/112 = 0.804) says above
    ("stone", 23, 17 / 21, 87, False, True),  # just above 0.8; the estimate (87/112 = 0.777) says below
])
def test_default_verification_decides_pairs_at_the_threshold_by_exact_jaccard(
        tmp_path, stem, words, jaccard, agreements, merged_by_signature, merged_by_default):
    names = [f"{stem}{i}" for i in range(words)]
    a, b = " ".join(names), " ".join(names[:-2] + ["other", "words"])  # 2 of the words-4 5-grams differ
    sets = document_shingle_sets([a, b], ["en", "en"], Config())
    assert exact_jaccard(sets[0], sets[1]) == pytest.approx(jaccard)
    _, sig = dedup.document_signatures([a, b], ["en", "en"], Config())
    assert np.count_nonzero(sig[0] == sig[1]) == agreements
    assert lsh.agreement_cuts(Config()) == (73, 90, 107)  # 0.8 -+ 4 sd (0.151) of 112 permutations
    rows = [[{"id": "d:1", "text": a, "lang": "en"}, {"id": "d:2", "text": b, "lang": "en"}]]
    facts, out = _run(tmp_path / "default", rows)
    assert (facts["verify"], facts["candidate_pairs"], facts["exact_checks"]) == ("exact", 1, 1)
    assert (len(_kept(out)) == 1) is merged_by_default
    facts, out = _run(tmp_path / "signature", rows, verify="signature")
    assert (facts["candidate_pairs"], facts["exact_checks"]) == (1, 0)
    assert (len(_kept(out)) == 1) is merged_by_signature


def test_exact_verification_reads_no_text_outside_the_margin(tmp_path, monkeypatch):
    calls = []
    real = lsh.document_shingle_sets
    monkeypatch.setattr(lsh, "document_shingle_sets", lambda *a: calls.append(len(a[0])) or real(*a))
    names = [f"w{i}" for i in range(60)]
    rows = [[{"id": "d:1", "text": " ".join(names), "lang": "en"},
             {"id": "d:2", "text": " ".join(names[:-1] + ["x"]), "lang": "en"}]]  # J = 55/57 = 0.965
    facts, out = _run(tmp_path, rows)
    assert (facts["candidate_pairs"], facts["exact_checks"], calls, _kept(out)) == (1, 0, [], {"d:1"})


def _fit(tmp_path: Path, partitions: list[list[dict]], **fields):
    """Only fit (the stage's FitResult), over partitions written as in _run."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = [_write(tmp_path / f"part-{i:05d}.parquet", rows) for i, rows in enumerate(partitions)]
    ctx = StageContext(work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", seed=0, tools_dir=tmp_path)
    return DedupStage(Config(**fields), ctx).fit(Partitions(paths, mapper=lambda fn, items: [fn(i) for i in items]))


def test_source_that_is_a_copy_of_another_is_warned_with_its_counts(tmp_path):
    texts = [f"original article number {i} about the {i * 3} rivers of the northern valley and their old bridges"
             for i in range(6)]
    archive = [{"id": f"a:{i}", "source": "archive", "text": t, "lang": "en"} for i, t in enumerate(texts)]
    mirror = [{"id": f"m:{i}", "source": "mirror", "text": "  " + t.replace(" ", "  ") + "\n", "lang": "en"}
              for i, t in enumerate(texts[:5])]  # padded exact copies: the archive's clean originals are kept
    mirror.append({"id": "m:5", "source": "mirror", "text": texts[5].rsplit(" ", 1)[0], "lang": "en"})  # J 11/12
    blog = [{"id": f"b:{i}", "source": "blog", "text": f"blog post {i}: notes on {i * 11} tide tables", "lang": "en"}
            for i in range(3)] + [{"id": "b:3", "source": "blog", "text": texts[0], "lang": "en"}]
    nameless = [{"id": "n:0", "source": None, "text": "a note with no source", "lang": "en"}]
    partitions = [archive[:3] + mirror[3:], mirror[:3] + archive[3:] + blog, nameless]
    facts, out = _run(tmp_path / "run", partitions)
    assert facts["removed_by_source"] == {
        "(no source)": {"documents": 1, "dedup.exact_duplicate": 0, "dedup.near_duplicate": 0},
        "archive": {"documents": 6, "dedup.exact_duplicate": 0, "dedup.near_duplicate": 0},
        "blog": {"documents": 4, "dedup.exact_duplicate": 1, "dedup.near_duplicate": 0},  # 25%: no warning
        "mirror": {"documents": 6, "dedup.exact_duplicate": 5, "dedup.near_duplicate": 1}}
    assert _kept(out) == {f"a:{i}" for i in range(6)} | {"b:0", "b:1", "b:2", "n:0"}
    result = _fit(tmp_path / "fit", partitions)
    assert result.warnings == (
        "dedup removed 6 of 6 documents (100.0%) of source 'mirror' (> 50% warn_removed_share): 5 exact, "
        "1 near duplicates of documents kept elsewhere; is the source a copy?",)
    assert _fit(tmp_path / "quiet", partitions, warn_removed_share=None).warnings == ()
    assert len(_fit(tmp_path / "low", partitions, warn_removed_share=0.2).warnings) == 2  # blog and mirror
    with pytest.raises(pydantic.ValidationError):
        Config(warn_removed_share=1.0)  # a share above 1 cannot happen: the warning would never fire


# ----------------------------------------------------------------------------- config: one set of defaults


def _script_twins() -> list[dict]:
    """Two real Simplified/Traditional near-duplicate pairs (OpenCC s2twp of our
    own paragraphs: ZH_A's twin folds back exactly, ZH_B's, one character
    longer, nearly) and an unrelated English document."""
    to_traditional = _opencc("s2twp")
    return [{"id": "zh_CN:a", "text": ZH_A, "lang": "zh"},
            {"id": "zh_TW:a", "text": to_traditional.convert(ZH_A), "lang": "zh"},
            {"id": "zh_CN:b", "text": ZH_B, "lang": "zh"},
            {"id": "zh_TW:b", "text": to_traditional.convert(ZH_B), "lang": "zh"},
            {"id": "en:1", "text": "The quick brown fox jumps over the lazy dog near the river bank today.",
             "lang": "en"}]


def test_line_skip_languages_are_canonical_codes():
    assert Config(line_skip_languages=("code", "zh-Hant", "zh_CN", "nb")).line_skip_languages == ("code", "zh", "no")


def test_config_is_frozen_and_pickles_as_itself():
    config = Config(num_bands=20, rows_per_band=5, fold_chinese_script="t2s", line_skip_languages=("code", "ja"))
    copy = pickle.loads(pickle.dumps(config))
    assert type(copy) is Config and copy == config and copy.model_fields_set == config.model_fields_set
    assert (copy.num_perm, copy.fold_chinese_script, copy.line_skip_languages) == (100, "t2s", ("code", "ja"))
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.fold_chinese_script = "none"


def test_phases_given_config_equal_the_stage_of_the_default_build(tmp_path):
    """The default build sets no ``fold_chinese_script``: the model's default
    (tw2sp) is what its phases run, and a phase called with ``Config()`` finds
    what the stage built from the default build config found. Fails if a
    phase falls back on a default of its own (a dict ``.get``, a keyword
    default, a dump without unset fields): "none" misses both pairs."""
    from pipeline.config import load_config

    build_config = load_config(Path(__file__).resolve().parents[2] / "configs" / "default.yaml").dedup
    assert "fold_chinese_script" not in build_config.model_fields_set
    assert build_config == Config() and build_config.fold_chinese_script == "tw2sp"
    rows = _script_twins()
    items: list = []

    def spy(fn, tasks):
        items.extend(tasks)
        return [fn(t) for t in tasks]

    facts, out = _run(tmp_path / "build", [rows[:3], rows[3:]], config=build_config, mapper=spy)
    assert _kept(out) == {"zh_CN:a", "zh_TW:b", "en:1"}  # b: the Traditional twin is one character longer
    assert {k: (_row(out, k)["dedup_cluster"], _row(out, k)["dedup_similarity"], _row(out, k)["reason"])
            for k in ("zh_TW:a", "zh_CN:b")} == {"zh_TW:a": ("zh_CN:a", 1.0, "dedup.near_duplicate"),
                                                 "zh_CN:b": ("zh_TW:b", 101 / 112, "dedup.near_duplicate")}
    assert (facts["clusters"], facts["near_duplicates"], facts["fold_chinese_script"]) == (2, 2, "tw2sp")
    # every phase was handed the frozen model itself, never a dict of its values
    given = [t["config"] for t in items if isinstance(t, dict) and "config" in t]
    assert len(given) == 2 + 1 + 2 and all(c is build_config for c in given)  # keys, bands, signatures
    assert not any(isinstance(v, dict) or k == "cfg" for t in items if isinstance(t, dict) for k, v in t.items())

    # the phases called directly with Config(): the same pairs, only through the model's default
    texts, langs = [r["text"] for r in rows], [r["lang"] for r in rows]
    _, default = dedup.document_signatures(texts, langs, Config())
    _, explicit = dedup.document_signatures(texts, langs, Config(fold_chinese_script="tw2sp"))
    _, unfolded = dedup.document_signatures(texts, langs, Config(fold_chinese_script="none"))
    np.testing.assert_array_equal(default, explicit)
    assert [dedup.estimated_jaccard(default[i], default[j]) for i, j in ((0, 1), (2, 3))] == [1.0, 101 / 112]
    assert [dedup.estimated_jaccard(unfolded[i], unfolded[j]) for i, j in ((0, 1), (2, 3))] == [2 / 112, 7 / 112]
    sets = document_shingle_sets(texts, langs, Config())
    # 188/200: ZH_B itself is no longer folded (tw2sp used to turn its 序列 into 串行, as in the twin)
    assert (exact_jaccard(sets[0], sets[1]), exact_jaccard(sets[2], sets[3])) == (1.0, 188 / 200)
    # verify: exact reads the shingle sets through the same config: the same clusters
    _, out_exact = _run(tmp_path / "exact", [rows[:3], rows[3:]], config=build_config.model_copy(
        update={"verify": "exact"}))
    assert _kept(out_exact) == {"zh_CN:a", "zh_TW:b", "en:1"}
