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


def _process(table: pa.Table, **config) -> pa.Table:
    ctx = StageContext(work_dir=".", cache_dir=".", seed=0, tools_dir=".")
    return HeuristicsStage(Config(**config), ctx).process(table)


PROSE = ("The workspace selector shows every workspace you have open, and you can drag a "
         "window onto another one to move it there. ") * 2
MIXES = ['{"en": 1.0}', '{"ja": 0.55, "en": 0.45}', '{"en": 0.8, "ja": 0.2}', "{}"]


def test_mixed_language_rule_is_off_by_default_and_never_reads_the_column():
    assert "langid_mix" not in Config().requirements()
    table = pa.table({"text": [PROSE], "langid_lang": ["en"]})     # no langid_mix column
    out = _process(table)
    assert out.column("keep").to_pylist() == [True]
    assert out.column("heuristics_second_language_share").to_pylist() == [None]


def test_mixed_language_rule_drops_by_its_own_reason_when_on():
    config = {"thresholds": {"en": {"max_second_language_share": 0.3}}}
    assert set(Config(**config).requirements()) == {"langid_lang", "langid_mix"}
    table = pa.table({"text": [PROSE] * 4, "langid_lang": ["en"] * 4, "langid_mix": MIXES})
    out = _process(table, **config)
    assert out.column("heuristics_second_language_share").to_pylist() == pytest.approx([0.0, 0.45, 0.2, None])
    assert out.column("reason").to_pylist() == [
        None, "heuristics.max_second_language_share", None, None]
    # On in one language only: other languages' pages are not judged by it.
    de = table.set_column(1, "langid_lang", pa.array(["de"] * 4))
    assert _process(de, **config).column("keep").to_pylist() == [True] * 4


SHORTCUTS = "\n".join(["Useful keyboard shortcuts", "",
                       "Alt+F2\tPop up command window.", "Super+Tab\tSwitch between windows.",
                       "Alt+Esc\tSwitch between windows in the current workspace.",
                       "Ctrl+Alt+Tab\tGive keyboard focus to the top bar.",
                       "Super+A\tShow the list of applications."])
OPTIONS = "\n".join(["OPTIONS", "       -a, --all", "              do not ignore entries starting with .",
                     "       -l     use a long listing format", "       --color[=WHEN]",
                     "              colorize the output; WHEN can be always or never."])
PROSE_LINES = "\n".join(["This page explains how to move a window to another workspace.",
                         "Press Super and drag the window to the workspace selector.",
                         "The window is moved as soon as you release the mouse button.",
                         "You can also use the keyboard to move it, as described below.",
                         "Windows on all workspaces are shown in the overview."])


def test_list_line_fraction_names_option_lists_and_shortcut_tables():
    from stages.heuristics.page_shape import list_line_fraction
    assert list_line_fraction(Document(SHORTCUTS, "en")) == 1.0          # title + 5 table rows
    assert list_line_fraction(Document(OPTIONS, "en")) == 4 / 6          # descriptions are prose
    assert list_line_fraction(Document(PROSE_LINES, "en")) == 0.0
    assert list_line_fraction(Document("one\ntwo\nthree", "en")) is None  # < 5 lines
    table = pa.table({"text": [SHORTCUTS, PROSE_LINES], "langid_lang": ["en", "en"]})
    assert _process(table).column("keep").to_pylist() == [True, True]   # off by default
    out = _process(table, thresholds={"en": {"max_list_line_fraction": 0.9}})
    assert out.column("reason").to_pylist() == ["heuristics.max_list_line_fraction", None]
