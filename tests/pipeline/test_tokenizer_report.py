"""Tests for pipeline/tokenizer_report.py: metrics on hand-made corpora, files, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from pipeline.tokenizer_report import (
    _Tok,
    check_thresholds,
    comparison_lines,
    read_corpus,
    run_report,
    to_markdown,
    vocabulary_facts,
    write_report,
)
from stages.tokenize import Config, train_bpe


@pytest.fixture(scope="module")
def hello_tokenizer(tmp_path_factory) -> Path:
    # Trained only on "hello": its merges make "hello" and " hello", nothing else.
    path = tmp_path_factory.mktemp("rep") / "tokenizer.json"
    train_bpe(["hello hello hello"] * 20, Config(vocab_size=300)).save(str(path))
    return path


DOCS = [
    {"text": "hello hello 123", "lang": "en", "source": "web"},   # hello, Ġhello, Ġ, 1, 2, 3
    {"text": "价", "lang": "zh", "source": "web"},                # 3 byte pieces
]


def test_rates_equal_hand_computed_values(hello_tokenizer):
    report = run_report({"t": hello_tokenizer}, DOCS)
    m = report["tokenizers"]["t"]["metrics"]
    en, zh, everything = m["language"]["en"], m["language"]["zh"], m["all"]
    assert (en["chars"], en["tokens"], en["words"]) == (15, 6, 3)
    assert en["chars_per_token"] == pytest.approx(15 / 6)
    assert en["tokens_per_word"] == pytest.approx(6 / 3)
    assert (zh["chars"], zh["bytes"], zh["tokens"]) == (1, 3, 3)
    assert zh["byte_fallback_rate"] == 1.0 and en["byte_fallback_rate"] == 0.0
    assert everything["chars_per_token"] == pytest.approx(16 / 9)
    assert everything["bytes_per_token"] == pytest.approx(18 / 9)
    assert everything["byte_fallback_rate"] == pytest.approx(1 / 16)
    assert everything["round_trip"] == 1.0 and everything["unknown_rate"] == 0.0
    assert everything["char_classes"]["cjk_basic"] == {"occurrences": 1, "whole_share": 0.0}
    assert m["source"]["web"]["tokens"] == 9


def test_spans_and_fragmented_words(hello_tokenizer):
    docs = [{"text": "x = my_var\n    return fooBar\n\nhello", "lang": "code", "source": "code"}]
    report = run_report({"t": hello_tokenizer}, docs)
    spans = report["tokenizers"]["t"]["metrics"]["all"]["spans"]
    assert spans["snake_case"]["occurrences"] == 1
    assert spans["camelCase"]["occurrences"] == 1
    assert spans["indentation"]["occurrences"] == 1
    assert spans["newline_run"]["occurrences"] == 1
    assert spans["snake_case"]["tokens_per_span"] == 6.0  # m, y, _, v, a, r: no merges
    frag = report["tokenizers"]["t"]["fragmented_words"]["code"]
    assert frag[0]["tokens"] == 7 and frag[0]["word"] == "fooBar"  # Ġ + 6 letters
    assert {"word": "hello", "count": 1, "tokens": 1} in frag  # " hello" is one token


def test_vocabulary_facts(hello_tokenizer):
    facts = vocabulary_facts(_Tok("t", hello_tokenizer))
    assert facts["by_script"]["special"] == 3
    assert facts["longest"][0] == {"token": " hello", "bytes": 6}
    assert facts["cjk_block_coverage"]["cjk_basic"]["single_tokens"] == 0
    assert facts["cjk_block_coverage"]["cjk_basic"]["block_size"] == 20992


def test_thresholds(hello_tokenizer):
    report = run_report({"t": hello_tokenizer}, DOCS)
    assert check_thresholds(report) == []
    warnings = check_thresholds(report, max_byte_fallback_rate=0.5, min_chars_per_token={"en": 3.0})
    assert warnings == ["tokenizer t, language en: 2.500 chars/token < 3.0",
                        "tokenizer t, language zh: byte-fallback rate 1.0000 > 0.5"]


def test_files_are_deterministic_and_self_contained(hello_tokenizer, tmp_path):
    report = run_report({"a": hello_tokenizer, "b": hello_tokenizer}, DOCS)
    first = write_report(report, tmp_path / "1", ["w"])
    second = write_report(report, tmp_path / "2", ["w"])
    assert [p.name for p in first] == ["tokenizer_report.json", "tokenizer_report.md",
                                        "tokenizer_report.html"]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes()
    page = first[2].read_text()
    assert page.count("<svg") == 4 and "<script" not in page and "<link" not in page
    assert json.loads(first[0].read_text())["warnings"] == ["w"]
    assert "| en | 1 | 15 | 2.500 |" in first[1].read_text()


def test_read_corpus_and_cli(hello_tokenizer, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(d, ensure_ascii=False) for d in DOCS) + "\n", encoding="utf-8")
    assert read_corpus([corpus]) == DOCS
    assert read_corpus([corpus], max_chars=15) == DOCS[:1]
    result = CliRunner().invoke(app, ["tokenizer-report", "--tokenizer", f"small={hello_tokenizer}",
                                      "--corpus", str(corpus), "--out", str(tmp_path / "out"),
                                      "--max-byte-fallback-rate", "0.5"])
    assert result.exit_code == 0, result.output
    body = json.loads((tmp_path / "out" / "tokenizer_report.json").read_text())
    assert list(body["tokenizers"]) == ["small"]
    assert body["warnings"] == ["tokenizer small, language zh: byte-fallback rate 1.0000 > 0.5"]


def test_build_report_on_the_heldout_split(hello_tokenizer, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.tokenizer_report import build_report
    from stages.tokenize import is_heldout

    ids = [f"web:f:{i}" for i in range(40)]
    texts = ["hello 价" if i % 2 else "hello hello" for i in range(40)]
    part = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": ids, "source": ["web"] * 40, "text": texts,
                             "langid_lang": ["zh" if i % 2 else "en" for i in range(40)],
                             "keep": [i != 3 for i in range(40)]}), part)
    held = [i for i in range(40) if i != 3 and is_heldout(ids[i], 7, 0.5)]
    assert 5 < len(held) < 35
    lines = []
    entry = build_report(Config(heldout_fraction=0.5, report_max_byte_fallback_rate=0.1), [part],
                         hello_tokenizer, tmp_path / "v", 7, lines.append)
    assert entry["heldout_documents"] == len(held)
    assert entry["heldout_chars"] == sum(len(texts[i]) for i in held)
    # "价" is 3 byte pieces: 1 of 7 characters in every zh document.
    assert entry["headline"]["zh"]["byte_fallback_rate"] == pytest.approx(1 / 7)
    n_zh = sum(1 for i in held if i % 2)
    rate_all = n_zh / (7 * n_zh + 11 * (len(held) - n_zh))
    expected = ["tokenizer version, language zh: byte-fallback rate 0.1429 > 0.1"]
    if rate_all > 0.1:
        expected.insert(0, f"tokenizer version, language all: byte-fallback rate {rate_all:.4f} > 0.1")
    assert entry["warnings"] == expected
    assert lines == [f"[tokenizer-report] WARNING {w}" for w in entry["warnings"]]
    names = sorted(p.name for p in (tmp_path / "v" / "tokenizer_report").iterdir())
    assert names == ["tokenizer_report.html", "tokenizer_report.json", "tokenizer_report.md"]
    body = json.loads((tmp_path / "v" / "tokenizer_report" / "tokenizer_report.json").read_text())
    assert body["tokenizers"]["version"]["path"] == "tokenizer.json"


def test_html_does_not_depend_on_global_matplotlib_state(hello_tokenizer, tmp_path):
    import matplotlib

    report = run_report({"t": hello_tokenizer}, DOCS)
    first = write_report(report, tmp_path / "1")[2].read_bytes()
    with matplotlib.rc_context({"font.size": 9, "figure.dpi": 96}):  # as another page may set
        second = write_report(report, tmp_path / "2")[2].read_bytes()
    assert first == second
    assert b"<dc:date>" not in first
    assert b"http://" not in first.replace(b"http://www.w3.org", b"")


# --------------------------------------------------------------------------- reference tokenizers

REPO = Path(__file__).resolve().parents[2]
QWEN = REPO / ".reference-tokenizers" / "qwen.tiktoken"
# A tiny BPE in tiktoken's format: the 256 bytes (rank = byte value), then
# "he" 256, "ll" 257, "hell" 258, "hello" 259. With the Qwen pre-tokenizer,
# "hello hello 123" is "hello" | " hello" | " " | "1" | "2" | "3": "hello" is 1
# token, " hello" 2 (" " + "hello": no " h" merge), " " 1, each digit 1: 7.
_MERGES = [b"he", b"ll", b"hell", b"hello"]


def _tiny_ranks() -> list[tuple[bytes, int]]:
    return [(bytes([b]), b) for b in range(256)] + [(m, 256 + i) for i, m in enumerate(_MERGES)]


@pytest.fixture(scope="module")
def tiny_tiktoken(tmp_path_factory) -> Path:
    import base64

    path = tmp_path_factory.mktemp("tik") / "tiny.tiktoken"
    path.write_bytes(b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in _tiny_ranks()))
    return path


@pytest.fixture(scope="module")
def tiny_tekken(tmp_path_factory) -> Path:
    import base64

    from common.tokenizer_files import TIKTOKEN_PATTERNS

    path = tmp_path_factory.mktemp("tek") / "tekken.json"
    vocab = [{"rank": r, "token_bytes": base64.b64encode(t).decode(), "token_str": None} for t, r in _tiny_ranks()]
    # 10 more ranks beyond default_vocab_size - specials: mistral_common drops them, so do we.
    vocab += [{"rank": 260 + i, "token_bytes": base64.b64encode(b" 1" + bytes([48 + i])).decode(),
               "token_str": None} for i in range(10)]
    path.write_text(json.dumps({"config": {"pattern": TIKTOKEN_PATTERNS["qwen"], "num_vocab_tokens": 270,
                                           "default_vocab_size": 1260, "default_num_special_tokens": 1000},
                                "vocab": vocab}))
    return path


def test_tiktoken_and_tekken_files_give_hand_computed_counts(tiny_tiktoken, tiny_tekken, hello_tokenizer):
    from common.tokenizer_files import tokenizer_kind

    assert [tokenizer_kind(p) for p in (tiny_tiktoken, tiny_tekken, hello_tokenizer)] == ["tiktoken", "tekken", "hf"]
    report = run_report({"ours": hello_tokenizer, "tiny": tiny_tiktoken, "tek": tiny_tekken}, DOCS,
                        patterns={"tiny": "qwen"}, references=["tiny", "tek"])
    for name in ("tiny", "tek"):
        m = report["tokenizers"][name]["metrics"]
        en, zh = m["language"]["en"], m["language"]["zh"]
        assert (en["chars"], en["bytes"], en["tokens"]) == (15, 15, 7)
        assert en["chars_per_token"] == pytest.approx(15 / 7) and en["bytes_per_token"] == pytest.approx(15 / 7)
        assert en["byte_fallback_rate"] == 0.0 and en["round_trip"] == 1.0
        assert (zh["chars"], zh["bytes"], zh["tokens"]) == (1, 3, 3)  # "价": 3 byte tokens
        assert zh["byte_fallback_rate"] == 1.0 and zh["round_trip"] == 1.0 and zh["unknown_rate"] == 0.0
        assert report["tokenizers"][name]["vocabulary"]["size"] == 260
        assert report["tokenizers"][name]["vocabulary"]["longest"][0] == {"token": "hello", "bytes": 5}
    assert report["references"] == ["tiny", "tek"]
    assert comparison_lines(report) == ["en: 2.50 vs tiny 2.14, tek 2.14 chars/token",
                                        "zh: 0.33 vs tiny 0.33, tek 0.33 chars/token",
                                        "all: 1.78 vs tiny 1.60, tek 1.60 chars/token"]
    # A reference is measured, never warned about; ours is.
    warnings = check_thresholds(report, max_byte_fallback_rate=0.5)
    assert warnings == ["tokenizer ours, language zh: byte-fallback rate 1.0000 > 0.5"]
    md = to_markdown(report)
    assert "* zh: 0.33 vs tiny 0.33, tek 0.33 chars/token" in md and "## tiny (reference)" in md


def test_a_tiktoken_file_needs_its_pattern(tiny_tiktoken):
    with pytest.raises(ValueError, match="needs its pre-tokenizer pattern"):
        run_report({"tiny": tiny_tiktoken}, DOCS)


def test_qwen_reference_file_gives_qwen_ids():
    if not QWEN.is_file():
        pytest.skip("no .reference-tokenizers/qwen.tiktoken (make setup unpacks it from the dashscope wheel)")
    tok = _Tok("qwen", QWEN)  # the pattern: the "qwen" preset, from the file's stem
    # Qwen's ids (QwenLM/Qwen tokenizer: 你好 108386, ， 3837, 世界 99489, ！ 6313).
    assert tok.encode_ids(["你好，世界！"]) == [[108386, 3837, 99489, 6313]]
    report = run_report({"qwen": QWEN}, [{"text": "你好，世界！", "lang": "zh", "source": "s"}])
    zh = report["tokenizers"]["qwen"]["metrics"]["language"]["zh"]
    assert (zh["chars"], zh["tokens"], zh["bytes"]) == (6, 4, 18)
    assert zh["chars_per_token"] == 1.5 and zh["byte_fallback_rate"] == 0.0


def test_cli_reference_and_pattern(hello_tokenizer, tiny_tiktoken, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(d, ensure_ascii=False) for d in DOCS) + "\n", encoding="utf-8")
    base = ["tokenizer-report", "--tokenizer", f"ours={hello_tokenizer}", "--corpus", str(corpus),
            "--reference", f"tiny={tiny_tiktoken}", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 2 and "needs its pre-tokenizer pattern" in result.output
    result = CliRunner().invoke(app, base + ["--pattern", "tiny=qwen"])
    assert result.exit_code == 0, result.output
    assert "zh: 0.33 vs tiny 0.33 chars/token" in result.output
    body = json.loads((tmp_path / "out" / "tokenizer_report.json").read_text())
    assert body["references"] == ["tiny"] and body["tokenizers"]["tiny"]["metrics"]["all"]["tokens"] == 10


def test_build_report_measures_the_configured_references(hello_tokenizer, tiny_tiktoken, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.tokenizer_report import build_report

    part = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": ["w:f:0", "w:f:1"], "source": ["web"] * 2, "text": ["hello hello 123", "价"],
                             "langid_lang": ["en", "zh"], "keep": [True, True]}), part)
    config = Config(heldout_fraction=0.999, report_max_byte_fallback_rate=None,
                    report_reference_tokenizers={"tiny": {"path": str(tiny_tiktoken), "pattern": "qwen"}})
    lines = []
    entry = build_report(config, [part], hello_tokenizer, tmp_path / "v", 7, lines.append)
    assert entry["heldout_documents"] == 2
    assert entry["references"]["tiny"]["kind"] == "tiktoken"
    assert entry["references"]["tiny"]["headline"]["en"]["chars_per_token"] == pytest.approx(15 / 7)
    assert entry["comparison"] == ["en: 2.50 vs tiny 2.14 chars/token", "zh: 0.33 vs tiny 0.33 chars/token",
                                   "all: 1.78 vs tiny 1.60 chars/token"]
    assert lines == [f"[tokenizer-report] {x}" for x in entry["comparison"]]


def test_reference_tokenizer_config_is_checked_before_any_work(tiny_tiktoken, tmp_path):
    from stages.tokenize import TokenizeStage

    missing = Config(report_reference_tokenizers={"qwen": str(tmp_path / "nope.tiktoken")})
    assert TokenizeStage.preflight(missing) == [
        f"tokenize.report_reference_tokenizers.qwen: no such file: {tmp_path / 'nope.tiktoken'}"]
    no_pattern = Config(report_reference_tokenizers={"tiny": str(tiny_tiktoken)})
    [line] = TokenizeStage.preflight(no_pattern)
    assert line.startswith("tokenize.report_reference_tokenizers.tiny: ") and "needs its pre-tokenizer pattern" in line
    assert TokenizeStage.preflight(Config(report_reference_tokenizers={
        "tiny": {"path": str(tiny_tiktoken), "pattern": "qwen"}})) == []
    with pytest.raises(pydantic.ValidationError, match="names the version's own tokenizer"):
        Config(report_reference_tokenizers={"version": str(tiny_tiktoken)})
