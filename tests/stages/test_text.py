"""Tests for stages/text.py: the one word splitter, ``words``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import rjieba

from pipeline.readers import Record, read_file
from stages.text import HAN_KANA_CLASS, MARK_CLASS, half_width_alnum, words

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"

# The reference splitter: the whole text to rjieba, a Python test per character
# of each token; a per-character alternation instead of possessive runs.
_REFERENCE_WORD_RE = re.compile(
    rf"[{HAN_KANA_CLASS}]|[^\W_{HAN_KANA_CLASS}](?:[^\W{HAN_KANA_CLASS}]|[{MARK_CLASS}]|['’\-](?=\w))*")


def reference_words(text: str, lang: str | None) -> list[str]:
    text = half_width_alnum(text)
    if lang in ("zh", "yue", "wuu"):
        return [w for w in rjieba.cut(text) if any(ch.isalnum() for ch in w)]
    return _REFERENCE_WORD_RE.findall(text)


@pytest.mark.parametrize("text, lang, expected", [
    # English: apostrophes and hyphens inside a word stay, punctuation splits
    ("Don't stop-believing, e-mail me at 9:30!", "en",
     ["Don't", "stop-believing", "e-mail", "me", "at", "9", "30"]),
    # French: straight and curly apostrophes; "_" never starts a word
    ("l'homme d’état — _x_ -y", "fr", ["l'homme", "d’état", "x_", "y"]),
    # German with umlauts and ß; the en dash is no word
    ("Größere Übungen für Mädchen – schön, oder?", "de",
     ["Größere", "Übungen", "für", "Mädchen", "schön", "oder"]),
    # Russian (Cyrillic, ё)
    ("Съешь же ещё этих мягких французских булок!", "ru",
     ["Съешь", "же", "ещё", "этих", "мягких", "французских", "булок"]),
    # Chinese: rjieba words, punctuation dropped
    ("我们今天去北京，看了故宫。", "zh", ["我们", "今天", "去", "北京", "看", "了", "故宫"]),
    # Chinese with a whitespace run (collapsed before rjieba: same words)
    ("北京  \n\t 大学", "zh", ["北京", "大学"]),
    # Chinese characters in a language without a segmenter: one word each
    ("中文abc测试", "en", ["中", "文", "abc", "测", "试"]),
    # Japanese: every kanji and kana (the long-vowel mark too) is one word
    ("東京は日本の首都です。コーヒーを飲む", "ja",
     ["東", "京", "は", "日", "本", "の", "首", "都", "で", "す", "コ", "ー", "ヒ", "ー", "を", "飲", "む"]),
    # Indic scripts: vowel signs and viramas (combining marks) stay inside the word
    ("हिन्दी भाषा और தமிழ் மொழி", "hi", ["हिन्दी", "भाषा", "और", "தமிழ்", "மொழி"]),
    # Korean: hangul words are space-separated (eojeol), not one per syllable
    ("한국어 텍스트입니다, 감사합니다.", "ko", ["한국어", "텍스트입니다", "감사합니다"]),
    # code: identifiers keep "_", operators and comments' "#" split
    ("def f(x_1):\n    return x_1 + 2**10  # done", "code",
     ["def", "f", "x_1", "return", "x_1", "2", "10", "done"]),
    # mixed CJK + Latin; full-width letters and digits read as ASCII first
    ("我用Python写了3个API接口，ｄｅｆ２０２４年", "zh",
     ["我用", "Python", "写", "了", "3", "个", "API", "接口", "def2024", "年"]),
    ("我用Python写了3个API接口，ｄｅｆ２０２４年", "en",
     ["我", "用", "Python", "写", "了", "3", "个", "API", "接", "口", "def2024", "年"]),
    ("ＡＢＣ\u3000１２３\u3000ｄｅｆ", None, ["ABC", "123", "def"]),
    # punctuation only, empty
    ("...!!! ——，。？ ", "en", []),
    ("...!!! ——，。？ ", "zh", []),
    ("", "en", []),
    ("", "zh", []),
])
def test_words_of_real_cases(text, lang, expected):
    assert words(text, lang) == expected
    assert reference_words(text, lang) == expected


def _sample_texts() -> list[str]:
    """Every document text of the bundled sample (data/sample/*, every format
    the readers take)."""
    texts = []
    for path in sorted(SAMPLE.rglob("*")):
        if path.is_file() and path.name != "README.md":
            texts += [r.text for r in read_file(path, path.name, "auto", "text", "file", 1 << 30)
                      if isinstance(r, Record)]
    return texts


def test_words_equal_the_reference_on_every_sample_document():
    """Both branches (rjieba for zh, the regex for every other language) on
    every document of the bundled sample, whatever its language."""
    texts = _sample_texts()
    assert len(texts) >= 4000 and sum(map(len, texts)) > 4_000_000
    for lang in ("zh", "en"):
        differ = [i for i, text in enumerate(texts) if words(text, lang) != reference_words(text, lang)]
        assert differ == [], (lang, differ[:5])
