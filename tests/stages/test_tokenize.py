"""Tests for stages/tokenize.py: byte-level BPE training, loading and encoding."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

from stages.base import Partitions, StageContext
from stages.tokenize import Config, TokenizeStage

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
    facts = stage.fit(_write_partitions(tmp, _corpus(), [25]))
    return stage, facts, tmp


def test_special_token_ids_and_facts(trained):
    stage, facts, _ = trained
    assert facts["special_token_ids"] == {"pad": 0, "eos": 1, "bos": 2}
    raw = (stage.ctx.work_dir / "tokenizer.json").read_bytes()
    assert facts["tokenizer_sha256"] == hashlib.sha256(raw).hexdigest()
    assert facts["training_chars"] == sum(len(t) for t in _corpus())
    assert facts["training_documents"] == 60
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
    tokenizer, eos_id = stage._tokenizer()
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
    tokenizer, _ = stage._tokenizer()
    assert tokenizer.decode(ids[:-1]) == "end <|endoftext|> pad <|pad|> bos <|bos|>"


def test_known_token_count(tmp_path):
    # Trained only on "hello" words: merges build "hello" and "Ġhello" and
    # nothing else; digits are always one per token.
    stage = _stage(tmp_path, "w", vocab_size=300)
    stage.fit(_write_partitions(tmp_path, ["hello hello hello"] * 20, []))
    out = stage.process(_table(["hello hello 123", "价"]))
    tokenizer, _ = stage._tokenizer()
    first = out["tokenize_input_ids"][0].as_py()
    assert [tokenizer.id_to_token(i) for i in first] == [
        "hello", "Ġhello", "Ġ", "1", "2", "3", "<|endoftext|>"]
    # "价" is 3 UTF-8 bytes never merged: 3 byte tokens + EOS.
    assert out["tokenize_num_tokens"].to_pylist() == [7, 4]


def test_columns_types_and_empty(trained):
    stage, _, _ = trained
    out = stage.process(_table(["我们今天去北京", "", None]))
    assert out.schema.field("tokenize_input_ids").type == pa.list_(pa.int32())
    assert out.schema.field("tokenize_num_tokens").type == pa.int32()
    n = out["tokenize_num_tokens"].to_pylist()
    assert n[0] == len(out["tokenize_input_ids"][0].as_py()) and n[0] >= 2
    assert n[1:] == [0, 0]
    assert out["keep"].to_pylist() == [True, False, False]
    assert out["reason"].to_pylist() == [None, "tokenize.empty", "tokenize.empty"]


def test_training_is_deterministic_and_partition_independent(trained, tmp_path):
    _, facts, _ = trained
    # Same documents, same order, cut into three partitions instead of two.
    other = _stage(tmp_path, "b").fit(_write_partitions(tmp_path, _corpus(), [10, 40]))
    assert other["tokenizer_sha256"] == facts["tokenizer_sha256"]


def test_train_max_chars_bounds_the_sample(tmp_path):
    texts = _corpus()
    stage = _stage(tmp_path, "m", train_max_chars=500)
    facts = stage.fit(_write_partitions(tmp_path, texts, [30]))
    assert 0 < facts["training_chars"] <= 500
    assert facts["training_documents"] < len(texts)


def test_load_given_tokenizer(trained, tmp_path):
    stage, facts, _ = trained
    path = stage.ctx.work_dir / "tokenizer.json"
    loaded = _stage(tmp_path, "l", tokenizer_path=str(path))
    got = loaded.fit(_write_partitions(tmp_path, ["unused"], []))
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
