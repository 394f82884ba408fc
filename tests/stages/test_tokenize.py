"""Tests for stages/tokenize.py: byte-level BPE training, loading and encoding."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

from stages.base import Partitions, StageContext
from stages.tokenize import (
    Config,
    TiktokenEncoder,
    TokenizeStage,
    build_trainable_tokenizer,
    choose_encoder,
    encode_documents,
    portable_json,
    is_heldout,
    token_bytes,
    token_id_dtype,
    train_bpe,
)

# A small multilingual training corpus (Chinese without spaces, full-width
# punctuation, German, English, Python); numbered so documents differ.
_SENTENCES = [
    "我们今天去北京，天气很好。价格是一百元！",
    "数据清洗之后，文档被切分为词元，然后打包成样本。",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "The quick brown fox jumps over the lazy dog, again and again.",
    "def tokenize(text):\n    return [t for t in text.split()]\n",
    "In the beginning God created the heaven and the earth.",
]


def _corpus(n: int = 60) -> list[str]:
    return [f"{_SENTENCES[i % len(_SENTENCES)]} {i}" for i in range(n)]


def _write_partitions(tmp_path: Path, texts: list[str], splits: list[int]) -> Partitions:
    """Write ``texts`` as Parquet partitions cut at ``splits`` (all kept)."""
    paths, bounds = [], [0, *splits, len(texts)]
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        path = tmp_path / f"in-{len(splits)}-{k}.parquet"
        pq.write_table(pa.table({
            "id": [f"src:f:{i}" for i in range(lo, hi)],
            "source": ["src"] * (hi - lo),
            "text": texts[lo:hi],
            "keep": [True] * (hi - lo),
        }), path)
        paths.append(path)
    return Partitions(paths, mapper=lambda fn, items: [fn(i) for i in items])


def _stage(tmp_path: Path, name: str, **config) -> TokenizeStage:
    ctx = StageContext(work_dir=tmp_path / name, cache_dir=tmp_path / "cache", seed=0,
                       tools_dir=tmp_path)
    return TokenizeStage(Config(**config), ctx)


def _table(texts: list[str | None]) -> pa.Table:
    return pa.table({"id": [f"t:{i}" for i in range(len(texts))],
                     "text": pa.array(texts, pa.string())})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    stage = _stage(tmp, "a")
    facts = stage.fit(_write_partitions(tmp, _corpus(), [25])).facts
    return stage, facts, tmp


def test_special_token_ids_and_facts(trained):
    stage, facts, _ = trained
    assert facts["special_token_ids"] == {"pad": 0, "eos": 1, "bos": 2}
    raw = (stage.ctx.work_dir / "tokenizer.json").read_bytes()
    assert facts["tokenizer_sha256"] == hashlib.sha256(raw).hexdigest()
    # Every document not in the held-out split (2%, by seeded id hash) trains.
    train = [t for i, t in enumerate(_corpus()) if not is_heldout(f"src:f:{i}", 0, 0.02)]
    assert len(train) < 60 and facts["heldout_documents"] == 60 - len(train)
    assert facts["training_chars"] == sum(len(t) for t in train)
    assert facts["training_documents"] == len(train)
    assert facts["token_id_dtype"] == "uint16"
    assert facts["encoder"]["encoder"] == "tiktoken"
    assert facts["trained"] is True
    # 3 special tokens + 256 byte symbols + at least one merge.
    assert facts["vocab_size"] > 259


@pytest.mark.parametrize("text", [
    "价格：１２３元",            # full-width colon and digits
    "a   b\n\tc",               # runs of spaces, newline, tab
    "😀👍🏽 ok",                 # emoji with a skin-tone modifier
    "\U00020000\U0002A6D6字",   # CJK Ext-B, never seen in training
])
def test_round_trip_without_unknown_tokens(trained, text):
    stage, facts, _ = trained
    tokenizer, eos_id, _, _ = stage._tokenizer()
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.model.unk_token is None
    assert all(tokenizer.id_to_token(i) is not None for i in ids)
    assert not {0, 1, 2} & set(ids)  # no special id from ordinary text


def test_literal_special_token_strings_are_plain_text(trained):
    stage, _, _ = trained
    out = stage.process(_table(["end <|endoftext|> pad <|pad|> bos <|bos|>"]))
    ids = out["tokenize_input_ids"][0].as_py()
    assert ids[-1] == 1
    assert ids[:-1].count(1) == 0 and 0 not in ids and 2 not in ids
    tokenizer, _, _, _ = stage._tokenizer()
    assert tokenizer.decode(ids[:-1]) == "end <|endoftext|> pad <|pad|> bos <|bos|>"


def test_known_token_count(tmp_path):
    # Trained only on "hello" words: merges build "hello" and "Ġhello" and
    # nothing else; digits are always one per token.
    stage = _stage(tmp_path, "w", vocab_size=300)
    stage.fit(_write_partitions(tmp_path, ["hello hello hello"] * 20, []))
    out = stage.process(_table(["hello hello 123", "价"]))
    tokenizer, _, _, _ = stage._tokenizer()
    first = out["tokenize_input_ids"][0].as_py()
    assert [tokenizer.id_to_token(i) for i in first] == [
        "hello", "Ġhello", "Ġ", "1", "2", "3", "<|endoftext|>"]
    # "价" is 3 UTF-8 bytes never merged: 3 byte tokens + EOS.
    assert out["tokenize_num_tokens"].to_pylist() == [7, 4]


def test_columns_types_and_empty(trained):
    stage, _, _ = trained
    out = stage.process(_table(["我们今天去北京", "", None]))
    assert out.schema.field("tokenize_input_ids").type == pa.list_(pa.uint16())
    assert out.schema.field("tokenize_num_tokens").type == pa.int32()
    n = out["tokenize_num_tokens"].to_pylist()
    assert n[0] == len(out["tokenize_input_ids"][0].as_py()) and n[0] >= 2
    assert n[1:] == [0, 0]
    assert out["keep"].to_pylist() == [True, False, False]
    assert out["reason"].to_pylist() == [None, "tokenize.empty", "tokenize.empty"]


def test_training_is_deterministic_and_partition_independent(trained, tmp_path):
    _, facts, _ = trained
    # Same documents, same order, cut into three partitions instead of two.
    other = _stage(tmp_path, "b").fit(_write_partitions(tmp_path, _corpus(), [10, 40])).facts
    assert other["tokenizer_sha256"] == facts["tokenizer_sha256"]


def test_train_max_chars_bounds_the_sample(tmp_path):
    texts = _corpus()
    stage = _stage(tmp_path, "m", train_max_chars=500)
    facts = stage.fit(_write_partitions(tmp_path, texts, [30])).facts
    assert 0 < facts["training_chars"] <= 500
    assert facts["training_documents"] < len(texts)


def test_load_given_tokenizer(trained, tmp_path):
    stage, facts, _ = trained
    path = stage.ctx.work_dir / "tokenizer.json"
    loaded = _stage(tmp_path, "l", tokenizer_path=str(path))
    got = loaded.fit(_write_partitions(tmp_path, ["unused"], [])).facts
    assert got["tokenizer_sha256"] == facts["tokenizer_sha256"]
    assert got["trained"] is False and got["training_chars"] == 0
    text = "数据清洗 data 42"
    assert (loaded.process(_table([text]))["tokenize_input_ids"].to_pylist()
            == stage.process(_table([text]))["tokenize_input_ids"].to_pylist())


def test_load_errors(trained, tmp_path):
    stage, _, _ = trained
    parts = _write_partitions(tmp_path, ["x"], [])
    with pytest.raises(FileNotFoundError, match="not found"):
        _stage(tmp_path, "e1", tokenizer_path=str(tmp_path / "nope.json")).fit(parts)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(ValueError, match="not a valid tokenizer"):
        _stage(tmp_path, "e2", tokenizer_path=str(bad)).fit(parts)
    good = str(stage.ctx.work_dir / "tokenizer.json")
    with pytest.raises(ValueError, match="no EOS token"):
        _stage(tmp_path, "e3", tokenizer_path=good, eos_token="</s>").fit(parts)


def test_config_rejects_unknown_keys_and_clashing_specials():
    with pytest.raises(pydantic.ValidationError):
        Config(vocab=100)
    with pytest.raises(pydantic.ValidationError):
        Config(eos_token="<|pad|>")


def test_long_unpunctuated_chinese_line_respects_max_token_length(tmp_path):
    # 2,000 Chinese characters without punctuation, as one training line.
    line = ("我们今天去北京看天安门然后吃烤鸭" * 125)[:2000]
    assert len(line) == 2000
    config = Config(vocab_size=400, max_token_length=9, min_frequency=2)
    tokenizer = train_bpe([line] * 3, config)
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    lengths = [len(token_bytes(t)) for t in tokenizer.get_vocab() if t not in specials]
    assert 6 <= max(lengths) <= 9  # 2-3 CJK characters: never past the cap
    assert len(lengths) > 256 + 20  # merges happened
    ids = tokenizer.encode(line).ids
    assert tokenizer.decode(ids) == line
    # CJK runs are cut into pre-tokens of at most cjk_max_run (16) characters.
    pieces = tokenizer.pre_tokenizer.pre_tokenize_str("中" * 40 + "abc数据123")
    assert [len(p) for p, _ in pieces] == [48, 48, 24, 3, 6, 1, 1, 1]  # byte-level strings


def test_tiktoken_encoder_matches_tokenizers(trained):
    stage, _, _ = trained
    tokenizer, _, encoder, _ = stage._tokenizer()
    assert isinstance(encoder, TiktokenEncoder)
    texts = ["价格：１２３元", "a   b\n\tc", "  def f(x):\n        return x_1  \n\n", "😀👍🏽 ok",
             "\U00020000\U0002A6D6字", "end <|endoftext|>x", " <|pad|> ", "Ünïcödé naïve café's",
             "我们今天去北京，天气很好。" * 5, "\r\n\r\n\t \u3000全角　空格", ""]
    assert encoder.encode_batch(texts) == [e.ids for e in tokenizer.encode_batch(texts)]


@pytest.mark.parametrize("largest_id,dtype", [(16383, "uint16"), (65535, "uint16"),
                                              (65536, "int32"), (2**31 - 1, "int32")])
def test_token_id_dtype_follows_the_largest_id(largest_id, dtype):
    assert token_id_dtype(largest_id).name == dtype


@pytest.mark.parametrize("largest_id", [-1, 2**31])
def test_token_id_dtype_rejects_ids_mindrecord_cannot_hold(largest_id):
    with pytest.raises(ValueError, match="out of range"):
        token_id_dtype(largest_id)


def _wide_tokenizer(path: Path) -> Path:
    """A real byte-level BPE with 299 entries whose merged tokens have ids
    70,259..70,298 (the trained ids + 70,000: same merges, same order)."""
    tokenizer = train_bpe(["hello world, the quick brown fox jumps over the lazy dog"] * 30,
                          Config(vocab_size=320))
    spec = json.loads(tokenizer.to_str())
    spec["model"]["vocab"] = {t: (i + 70_000 if i >= 259 else i) for t, i in spec["model"]["vocab"].items()}
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_largest_id_not_entry_count_sets_the_dtype_and_ids_round_trip(tmp_path):
    path = _wide_tokenizer(tmp_path / "wide.json")
    stage = _stage(tmp_path, "wide", tokenizer_path=str(path))
    facts = stage.fit(_write_partitions(tmp_path, ["the quick brown fox", "hello world"], [])).facts
    assert facts["vocab_size"] == 299 and facts["max_token_id"] == 70_298
    assert facts["token_id_dtype"] == "int32"
    assert facts["encoder"]["encoder"] == "tiktoken"
    texts = ["hello world, the lazy fox", "the quick brown dog jumps"]
    out = stage.process(_table(texts))
    assert out.schema.field("tokenize_input_ids").type == pa.list_(pa.int32())
    tokenizer, eos_id, _, _ = stage._tokenizer()
    for text, ids in zip(texts, out["tokenize_input_ids"].to_pylist()):
        assert ids == tokenizer.encode(text).ids + [eos_id]
        assert tokenizer.decode(ids[:-1]) == text
    # "hello world, the lazy fox": hello, Ġworld, ",", Ġthe, Ġlazy, Ġfox
    assert out["tokenize_input_ids"][0].as_py() == [70298, 70297, 14, 70261, 70294, 70292, 1]


def test_pretokens_of_million_character_runs_are_capped(trained):
    stage, _, _ = trained
    tokenizer, _, _, _ = stage._tokenizer()
    pre = tokenizer.pre_tokenizer
    # 1,000,000 spaces = 15,625 x 64; the last piece before a word gives one
    # space to it (" y"), as GPT-2's whitespace rule does.
    pieces = [len(p) for p, _ in pre.pre_tokenize_str("x" + " " * 1_000_000 + "y")]
    assert pieces == [1] + [64] * 15_624 + [63, 2]
    assert [len(p) for p, _ in pre.pre_tokenize_str("-" * 1_000_000)] == [64] * 15_625
    assert [len(p) for p, _ in pre.pre_tokenize_str("\n" * 100_000)] == [64] * 1_562 + [32]
    assert [len(p) for p, _ in pre.pre_tokenize_str("a" * 100_000)] == [64] * 1_562 + [32]
    assert {len(p) for p, _ in pre.pre_tokenize_str("7" * 100_000)} == {1}
    # A leading space rides on a run of letters or symbols: at most max_run + 1.
    assert [len(p) for p, _ in pre.pre_tokenize_str(" " + "é" * 70)] == [1 + 2 * 64, 2 * 6]


def test_training_on_million_character_runs_keeps_pretokens_capped():
    runs = [" " * 1_000_000 + "end", "-" * 1_000_000, "7" * 1_000_000, "a" * 1_000_000]
    tokenizer = train_bpe(["hello world, again and again"] * 20 + runs, Config(vocab_size=300))
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    lengths = [len(token_bytes(t)) for t in tokenizer.get_vocab() if t not in specials]
    assert max(lengths) <= 24  # max_token_length
    assert "Ġ" * 16 in tokenizer.get_vocab() and "-" * 16 in tokenizer.get_vocab()
    pieces = tokenizer.pre_tokenizer.pre_tokenize_str(runs[0])
    assert max(len(p) for p, _ in pieces) == 64 and len(pieces) == 15_626
    for text in runs:
        assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_config_bounds_the_runs():
    assert Config().max_run == 64
    for key in ("max_run", "cjk_max_run"):
        with pytest.raises(pydantic.ValidationError):
            Config(**{key: 129})
        with pytest.raises(pydantic.ValidationError):
            Config(**{key: 0})


# GPT-2's pre-tokenizer regex: whitespace runs uncapped. tiktoken's regex engine
# gives up on a run of 1,000,000 spaces (a Rust panic: pyo3_runtime.PanicException).
_GPT2_PATTERN = r"'(?:s|t|re|ve|m|ll|d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _uncapped_tokenizer(trained, path: Path) -> Path:
    """The trained tokenizer with GPT-2's uncapped regex, as a loaded
    foreign ``tokenizer.json`` would have."""
    stage, _, _ = trained
    spec = json.loads((stage.ctx.work_dir / "tokenizer.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": _GPT2_PATTERN}
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_encoder_panic_falls_back_to_tokenizers_for_that_document_only(trained, tmp_path):
    path = _uncapped_tokenizer(trained, tmp_path / "gpt2-regex.json")
    stage = _stage(tmp_path, "fb", tokenizer_path=str(path))
    facts = stage.fit(_write_partitions(tmp_path, _corpus(10), [])).facts
    assert facts["encoder"]["encoder"] == "tiktoken"
    spaces = "x" + " " * 1_000_000 + "y"
    texts = ["hello world", spaces, "数据清洗"]
    out = stage.process(_table(texts))
    tokenizer, eos_id, _, _ = stage._tokenizer()
    assert out["keep"].to_pylist() == [True, True, True]
    assert out["tokenize_encoder_error"].to_pylist() == [None, "tiktoken: PanicException", None]
    ids = out["tokenize_input_ids"].to_pylist()
    for text, got in zip(texts, ids):
        assert got == tokenizer.encode(text).ids + [eos_id]
    assert tokenizer.decode(ids[1][:-1]) == spaces
    # The same documents one by one: the same ids (nothing depends on batching).
    assert [stage.process(_table([t]))["tokenize_input_ids"][0].as_py() for t in texts] == ids


def test_a_document_no_encoder_can_encode_is_dropped_with_its_reason(trained, tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_uncapped_tokenizer(trained, tmp_path / "gpt2-regex.json")))
    fast = TiktokenEncoder(tokenizer)
    texts = ["hello world", "\n" * 1_000_000, ""]
    ids, reasons, errors = encode_documents(fast, texts, 1, np.uint16, fallback=None)
    assert reasons == [None, "tokenize.encode_error", "tokenize.empty"]
    assert errors == [None, "tiktoken: PanicException", None]
    assert ids[0].tolist() == tokenizer.encode("hello world").ids + [1]
    assert ids[1].dtype == np.uint16 and len(ids[1]) == 0 and len(ids[2]) == 0


def test_fit_check_survives_an_encoder_panic(trained, tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_uncapped_tokenizer(trained, tmp_path / "gpt2-regex.json")))
    encoder, facts = choose_encoder(tokenizer, ["hello world", " " * 1_000_000 + "y", "数据 123"])
    assert isinstance(encoder, TiktokenEncoder)
    assert facts["encoder"] == "tiktoken" and facts["failed_documents"] == 1


def test_process_stores_uint16_ids(trained):
    stage, _, _ = trained
    out = stage.process(_table(["数据 data"]))
    assert out.schema.field("tokenize_input_ids").type == pa.list_(pa.uint16())


def test_language_weights_balance_the_sample(tmp_path):
    # 40 zh documents and 40 en documents of 100 characters each; ask for 3:1.
    texts = ["中" * 100] * 40 + ["e" * 100] * 40
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({
        "id": [f"s:f:{i}" for i in range(80)], "source": ["s"] * 80, "text": texts,
        "chars": pa.array([100] * 80, pa.int64()),
        "langid_lang": ["zh"] * 40 + ["en"] * 40, "keep": [True] * 80}), path)
    parts = Partitions([path], mapper=lambda fn, items: [fn(i) for i in items])
    stage = _stage(tmp_path, "bal", vocab_size=300, train_max_chars=2000, heldout_fraction=0.0,
                   train_language_weights={"zh": 3, "en": 1})
    facts = stage.fit(parts).facts
    by_lang = facts["training_chars_by_language"]
    # Targets: zh 1500, en 500 characters; whole 100-character documents only.
    assert 1000 <= by_lang["zh"] <= 1500 and 200 <= by_lang["en"] <= 500
    assert by_lang["zh"] > 2 * by_lang["en"]
    # A language left out of the weights does not train at all.
    only_zh = _stage(tmp_path, "bal2", vocab_size=300, train_max_chars=2000, heldout_fraction=0.0,
                     train_language_weights={"zh": 1}).fit(parts).facts
    assert set(only_zh["training_chars_by_language"]) == {"zh"}


def test_nfkc_policy_applies_at_training_and_encoding():
    tokenizer = build_trainable_tokenizer(Config(normalization="nfkc"))
    assert tokenizer.normalizer is not None
    trained = train_bpe(["价格：123元 " * 50], Config(vocab_size=300, normalization="nfkc"))
    assert trained.encode("价格：１２３元").ids == trained.encode("价格:123元").ids
    # The default policy keeps full-width forms: exact round trip.
    assert build_trainable_tokenizer(Config()).normalizer is None


def test_reserved_special_tokens(tmp_path):
    tokenizer = train_bpe(["hello world"] * 10, Config(vocab_size=300, num_reserved_tokens=2))
    assert [tokenizer.token_to_id(t) for t in
            ("<|pad|>", "<|endoftext|>", "<|bos|>", "<|reserved_0|>", "<|reserved_1|>")] == [0, 1, 2, 3, 4]


def test_transformers_loads_the_tokenizer(trained):
    transformers = pytest.importorskip("transformers")
    stage, _, _ = trained
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(stage.ctx.work_dir / "tokenizer.json"),
        eos_token="<|endoftext|>", pad_token="<|pad|>", bos_token="<|bos|>")
    assert (fast.pad_token_id, fast.eos_token_id, fast.bos_token_id) == (0, 1, 2)
    tokenizer, _, _, _ = stage._tokenizer()
    text = "价格：１２３元 data"
    ids = fast(text, add_special_tokens=False)["input_ids"]
    assert ids == tokenizer.encode(text).ids
    assert fast.decode(ids) == text


def test_tokenizer_json_uses_merges_every_tokenizers_release_reads(trained):
    # tokenizers >= 0.20 writes merges as pairs, which 0.15 (mindformers 1.8's pin) refuses;
    # the published file has the string form that both read
    stage, facts, _ = trained
    path = stage.ctx.work_dir / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    merges = spec["model"]["merges"]
    assert merges and all(isinstance(m, str) and m.count(" ") == 1 for m in merges)
    tokenizer, _, _, _ = stage._tokenizer()
    assert [tuple(m.split(" ")) for m in merges] == [tuple(m) for m in json.loads(tokenizer.to_str())["model"]["merges"]]
    assert path.read_text(encoding="utf-8") == portable_json(tokenizer)     # written once, deterministic
    assert facts["tokenizer_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


TEXT_015 = "价格：１２３元 The café costs 5 € — 你好，世界！ <|endoftext|> end"


@pytest.mark.skipif(not os.environ.get("MINDCORPUS_TOKENIZERS_015_PYTHON"),
                    reason="MINDCORPUS_TOKENIZERS_015_PYTHON (a python with tokenizers 0.15) not set; .ci/run sets it")
def test_tokenizers_0_15_loads_the_file_with_the_same_ids(trained):
    stage, _, _ = trained
    path = stage.ctx.work_dir / "tokenizer.json"
    code = ("import json, sys, tokenizers; t = tokenizers.Tokenizer.from_file(sys.argv[1]); "
            "print(json.dumps([tokenizers.__version__, t.encode(sys.argv[2]).ids]))")
    out = subprocess.run([os.environ["MINDCORPUS_TOKENIZERS_015_PYTHON"], "-c", code, str(path), TEXT_015],
                         capture_output=True, text=True, check=True)
    version, ids = json.loads(out.stdout)
    assert version.startswith("0.15.")
    from tokenizers import Tokenizer

    assert ids == Tokenizer.from_file(str(path)).encode(TEXT_015).ids


def _two_source_partitions(tmp_path: Path, n: int = 300) -> Partitions:
    """``n`` documents of 100 characters in each of sources ``a`` (en) and
    ``b`` (zh), interleaved, over three partitions."""
    rows = []
    for i in range(n):
        rows.append((f"a:f:{i}", "a", "en", (f"alpha beta gamma {i} " * 20)[:100]))
        rows.append((f"b:f:{i}", "b", "zh", (f"数据清洗之后文档被切分{i}" * 20)[:100]))
    paths = []
    for k in range(3):
        chunk = rows[k::3]
        path = tmp_path / f"two-{k}.parquet"
        pq.write_table(pa.table({"id": [r[0] for r in chunk], "source": [r[1] for r in chunk],
                                 "lang_hint": [r[2] for r in chunk], "text": [r[3] for r in chunk],
                                 "chars": pa.array([len(r[3]) for r in chunk], pa.int64()),
                                 "keep": [True] * len(chunk)}), path)
        paths.append(path)
    return Partitions(paths, mapper=lambda fn, items: [fn(i) for i in items])


def test_source_shares_08_02_are_realised(tmp_path):
    # 30,000 characters per source, budget 10,000: targets a 8,000, b 2,000
    # (80 and 20 whole documents). Tolerance: 0.02 of the sample (2 documents).
    parts = _two_source_partitions(tmp_path)
    facts = _stage(tmp_path, "s82", vocab_size=300, train_max_chars=10_000, heldout_fraction=0.0,
                   train_source_weights={"a": 0.8, "b": 0.2}).fit(parts).facts
    sample = facts["training_sample"]
    assert sample["source_weights"] == {"a": 0.8, "b": 0.2} and sample["language_weights"] is None
    a, b = sample["by_source"]["a"], sample["by_source"]["b"]
    assert (a["target_chars"], b["target_chars"]) == (8000, 2000)
    assert (a["target_share"], b["target_share"]) == (0.8, 0.2)
    assert (a["available_chars"], b["available_chars"]) == (30_000, 30_000)
    assert abs(a["realised_share"] - 0.8) <= 0.02 and abs(b["realised_share"] - 0.2) <= 0.02
    assert a["chars"] <= 8000 and b["chars"] <= 2000 and a["chars"] + b["chars"] >= 9600
    assert facts["training_chars_by_source"] == {"a": a["chars"], "b": b["chars"]}
    # Sources a and b are en and zh here, so the language rows say the same.
    assert sample["by_language"]["zh"]["realised_share"] == b["realised_share"]
    # The corpus's own mix of the same corpus is half and half.
    raw = _stage(tmp_path, "raw", vocab_size=300, train_max_chars=10_000, heldout_fraction=0.0,
                 train_source_weights="corpus").fit(parts).facts["training_sample"]
    assert raw["source_weights"] == "corpus"
    assert raw["by_source"]["a"]["target_share"] == 0.5
    assert abs(raw["by_source"]["b"]["realised_share"] - 0.5) <= 0.02
    # Deterministic, and independent of partitioning.
    again = _stage(tmp_path, "s82b", vocab_size=300, train_max_chars=10_000, heldout_fraction=0.0,
                   train_source_weights={"a": 0.8, "b": 0.2}).fit(parts).facts
    assert again["tokenizer_sha256"] == facts["tokenizer_sha256"]


def test_unset_source_shares_follow_the_mixture_weights(tmp_path):
    from pipeline.config import parse_config

    parts = _two_source_partitions(tmp_path)
    cfg = parse_config({"sources": {"a": {"paths": ["x"]}, "b": {"paths": ["y"]}}, "perplexity": {"enabled": False},
                        "tokenize": {"vocab_size": 300, "train_max_chars": 10_000, "heldout_fraction": 0.0},
                        "mixture": {"weights": {"a": 0.2, "b": 0.8}}})
    ctx = StageContext(work_dir=tmp_path / "mix", cache_dir=tmp_path / "cache", seed=0, tools_dir=tmp_path)
    sample = TokenizeStage(cfg.tokenize, ctx).fit(parts).facts["training_sample"]
    assert sample["source_weights"] == {"a": 0.2, "b": 0.8}
    assert sample["by_source"]["b"]["target_share"] == 0.8
    assert abs(sample["by_source"]["b"]["realised_share"] - 0.8) <= 0.02
