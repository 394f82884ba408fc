"""Tests for pipeline/tokenizer_report.py: metrics on hand-made corpora, files, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.tokenizer_report import (
    _Tok,
    check_thresholds,
    read_corpus,
    run_report,
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
