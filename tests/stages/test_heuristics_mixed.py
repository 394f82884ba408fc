"""Heuristics on mixed pages and list-like pages (issue 15, second round):
n-grams of a partly translated page, the mixed-language rule, list lines."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from stages.base import StageContext
from stages.heuristics import Config, Document, HeuristicsStage
from stages.heuristics.ngrams import ngram_stats_batch

STEPS = ("Open the Activities overview and start typing Printers.\n"
         "Click Printers to open the panel.\n"
         "Click the button next to the printer and select Printing Options.")
EN_PAGE = "\n\n".join([
    "Printers usually print the first page first and the last page last, so the pages end up "
    "in reverse order when you pick them up.", "To reverse the order:", STEPS,
    "To collate the copies:", STEPS])
# The same page partly translated: the unique prose is Japanese, the repeated
# steps are left in English (the shape of gnome-help ja pages on dev).
JA_PAGE = "\n\n".join([
    "プリンターは通常、最初のページから順に印刷し、最後のページを最後に印刷するので、"
    "取り出したときにページが逆の順序になっています。必要ならこの順序を逆にできます。",
    "順序を逆にするには:", STEPS, "部単位で印刷するには:", STEPS])


def test_no_ngram_spans_a_left_out_japanese_part():
    doc = Document("「Settings」を開き、「Displays」を選択します。「Settings」を開き、「Displays」を選択します。", "en")
    assert doc.ngram_words == ["Settings", "Displays", "Settings", "Displays"]
    assert doc.ngram_run_starts == [1, 2, 3]
    assert doc.ngram_stats["top_2gram_char_share"] == 0.0       # "Settings Displays" is no 2-gram
    assert ngram_stats_batch([["a", "b", "x", "a", "b"]])[0]["top_2gram_char_share"] == 0.8
    assert ngram_stats_batch([["a", "b", "x", "a", "b"]], [[1, 4]])[0]["top_2gram_char_share"] == 0.0


def test_partly_translated_page_is_judged_no_worse_than_its_english_original():
    en, ja = Document(EN_PAGE, "en"), Document(JA_PAGE, "en")
    assert en.ngram_other_chars == 0
    assert ja.ngram_other_chars == round(94 * 556 / 401)      # Japanese chars, English-equivalent
    en_share = en.ngram_stats["duplicate_5gram_char_share"]
    ja_share = ja.ngram_stats["duplicate_5gram_char_share"]
    remainder_only = ngram_stats_batch([ja.ngram_words])[0]["duplicate_5gram_char_share"]
    assert (round(en_share, 3), round(ja_share, 3), round(remainder_only, 3)) == (0.653, 0.663, 1.0)
