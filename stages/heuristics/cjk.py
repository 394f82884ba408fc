"""Chinese-corpus rules ("cjk"): what Chinese-corpus builders ask for.

Very long runs without a break (whitespace or punctuation, full-width
included), escape and markup residue (``\\u00e9``, ``&amp;``, literal
``\\n``, HTML tags), mojibake, abnormal symbol share, code lines mixed into
prose. They apply to every language's prose. No paper sets these
thresholds: they are ours, measured on /work/shared/corpus
(docs/stages/heuristics.md; :data:`stages.heuristics.presets.PRESETS`).
"""

from __future__ import annotations

from collections import Counter

import functools
import re
import unicodedata
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from stages.heuristics.family import BatchCount, Measure, Rule, count_matches, ratio
from stages.text import HAN_KANA_CLASS, words

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "cjk"

# Patterns run over a whole partition at once with Arrow's RE2 kernels
# (``pyarrow.compute``; ~10x faster than one Python ``re`` call per document).
# Characters that are neither letters, marks, digits, whitespace, punctuation,
# format characters nor printable ASCII: non-ASCII symbols (box drawing, emoji, math, dingbats),
# private-use, unassigned and control characters.
# Whitespace as str.isspace sees it: RE2's \s is ASCII only, so the Unicode
# separators (\p{Z}: U+3000 ideographic space, NBSP, U+2028/2029) and the
# other control-character line breaks are listed.
# Invisible format characters (\p{Cf}: ZWSP, ZWNJ, ZWJ, LRM/RLM, bidi marks)
# are orthography or layout, not noise (Persian ZWNJ, RLM in Arabic, ZWSP word
# breaks, the ZWJ of emoji sequences): not abnormal (hostile test).
_ABNORMAL_RE2 = r"[^\p{L}\p{M}\p{N}\p{Z}\p{P}\p{Cf}\t\n\x0b\x0c\r\x1c-\x1f\x85\x21-\x7e]"
# Escape and markup residue: JSON/C escapes left as text (\u00e9, \x41, a
# literal \n), HTML entities, HTML tags.
_RESIDUE_RE2 = (
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0e-\x1f\x7f]"
    r"|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\[nrt]"
    r"|&(?:amp|lt|gt|quot|apos|nbsp|#[0-9]{2,6}|#[xX][0-9a-fA-F]{2,5});"
    r"|</?(?:div|span|p|br|a|img|table|tr|td|th|li|ul|ol|script|style|font|b|i|h[1-6])\b[^<>]{0,200}>")
# A line that looks like program code (C-family, Python, shell, SQL): the
# pattern matches a whole line, so matches = code lines.
_CODE_LINE_RE2 = (
    r"(?m)^.*(?:[;{}][ \t\r]*$|^[ \t]*(?:#include\b|import\s+\w|from\s+\S+\s+import\b|def\s+\w+\s*\(|"
    r"class\s+\w+[:(]|function\b|var\s+\w|let\s+\w|const\s+\w|public\s|private\s|return\b|"
    r"if\s*\(|for\s*\(|while\s*\(|SELECT\s|\}\s*else\b)|=>|==|!=|&&|\|\||::|->|\)\s*\{).*$")
# Mojibake: the replacement character and the classic GBK/UTF-8 round-trip
# strings; and UTF-8 read as Latin-1/cp1252 (a lead byte shown as Â..ô
# followed by a continuation byte shown as U+0080..U+00BF or a cp1252 glyph),
# which ftfy confirms (Python ``re`` twin below for the line scan).
_MOJIBAKE_FIXED_RE2 = "\ufffd|锟斤拷|烫烫烫|屯屯屯"
_MOJIBAKE_SUSPECT_CLASS = (
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192"
    "\u02c6\u02dc\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]")
_MOJIBAKE_SUSPECT_RE = re.compile(_MOJIBAKE_SUSPECT_CLASS)


# Breaks for the longest unbroken run: whitespace, punctuation and symbols
# (Unicode P* and S*: ASCII, general, CJK and full-width forms alike).
@functools.lru_cache(maxsize=1)
def _break_table() -> np.ndarray:
    """bool[0x30000]: code point is whitespace, punctuation (P*) or a symbol
    (S*). Code points above (Plane 3+: rare CJK extensions, tags) are not."""
    table = np.zeros(0x30000, bool)
    for cp in range(0x30000):
        ch = chr(cp)
        table[cp] = ch.isspace() or unicodedata.category(ch)[0] in "PS"
    return table


def _unbroken_runs(texts: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """int64[n]: the longest run of characters without whitespace,
    punctuation or symbols in each text, for all texts in one numpy pass
    (texts joined by a line break; a run never crosses two texts)."""
    values = texts.to_pylist()
    if not values:
        return np.zeros(0, np.int64)
    values = [v or "" for v in values]
    codes = np.frombuffer("\n".join(values).encode("utf-32-le"), np.uint32)
    table = _break_table()
    breaks = np.ones(len(codes) + 2, bool)              # a break before and after all
    np.take(table, codes, out=breaks[1:-1], mode="clip")
    breaks[1:-1] &= codes < len(table)
    where = np.flatnonzero(breaks)                      # positions in codes, + 1
    runs = np.diff(where) - 1                           # the run ending at each break
    doc_ends = np.cumsum([len(v) + 1 for v in values])  # separator position + 1, per text
    owner = np.searchsorted(doc_ends, where[1:], side="left")   # nondecreasing
    out = np.zeros(len(values), np.int64)
    first = np.flatnonzero(np.diff(owner, prepend=-1))  # each text's first run
    docs = owner[first]
    maxima = np.maximum.reduceat(runs, first)
    inside = docs < len(values)
    out[docs[inside]] = maxima[inside]
    return out


def unbroken_run(doc: Document) -> int:
    """Characters in the longest run without whitespace or punctuation
    (ASCII, general, CJK and full-width punctuation all break a run), so
    Chinese prose (no spaces, but ``，。``) is measured like English."""
    return doc.counts["unbroken_run"]


def residue_per_kchar(doc: Document) -> float | None:
    """Escape and markup residue per 1,000 characters: ``\\uXXXX``, ``\\xXX``,
    literal ``\\n``/``\\r``/``\\t``, HTML entities (``&amp;``, ``&#39;``),
    HTML tags (``<div>``, ``</p>``, ``<br/>``), terminal escape sequences
    (``ESC[31m``, one each) and other C0 control characters (not tab, line
    breaks or form feed; none occurs in /work/shared/corpus)."""
    return ratio(1000 * doc.counts["residue"], len(doc.text))


def mojibake_per_kchar(doc: Document) -> float | None:
    """Mojibake sequences per 1,000 characters: U+FFFD, ``锟斤拷``/``烫烫烫``/
    ``屯屯屯`` (GBK/UTF-8 round trips), and UTF-8 read as Latin-1/cp1252
    (``Ã©``, ``â€™``, ``Ð¿``), confirmed with ftfy's ``badness`` on the lines
    that hold such a pair (ftfy runs at ~1.3 M chars/s, so only there).

    A line's confirmed sequences count only when they outnumber its
    correctly encoded non-ASCII characters (those outside the suspect
    pairs): garbled text has none left (every ``é`` became ``Ã©``), while a
    page that *explains* mojibake quotes ``Ã©`` next to the ``é`` or the
    Chinese/Japanese prose it stands for, and is kept."""
    text = doc.text
    count = doc.counts["mojibake_fixed"]
    if doc.counts["mojibake_suspect"]:
        from ftfy.badness import badness

        for line in doc.lines:
            if not _MOJIBAKE_SUSPECT_RE.search(line):
                continue
            bad = badness(line)
            correct = sum(1 for ch in _MOJIBAKE_SUSPECT_RE.sub("", line) if not ch.isascii())
            if bad > correct:
                count += bad
    return ratio(1000 * count, len(text))


# Chinese function words: modern (particles, pronouns, prepositions,
# conjunctions, the copula, negation) and classical (之 乎 者 也 矣 焉 哉 兮
# 其 而 以 于 则 乃 亦 曰 无 莫), so that classical prose and poetry count too.
# Our list: the function words among the most frequent rjieba words of the zh
# prose of /work/shared/corpus, plus the classical particles.
ZH_FUNCTION_WORDS = frozenset((
    "的 了 是 在 和 也 就 都 着 过 把 被 从 对 向 给 但 与 及 或 而 这 那 这个 那个 个 们 吗 呢 "
    "吧 啊 我 你 他 她 它 我们 你们 他们 不 没 没有 很 还 又 要 会 能 可以 如果 因为 所以 "
    "一个 就是 还是 但是 然后 以及 或者 如何 什么 为 于 中 上 下 之 乎 者 矣 焉 哉 兮 其 以 "
    "则 乃 亦 曰 无 莫 所 若 此 彼 吾 汝 尔 非 未 已 将 自 皆 乎").split())
# Separators between the items of a keyword list on one line (not the
# commas ，、 and ",": prose and classical lists use them, 伯达、伯适、仲突).
_KEYWORD_SPLIT_RE = re.compile(r"[ \t|｜/_·•\-]+")
_CJK_RUN_RE = re.compile(f"^[{HAN_KANA_CLASS}]{{2,8}}$")
_HAN_KANA_RE = re.compile(f"[{HAN_KANA_CLASS}]")
# Sentence punctuation, full-width and ASCII.
_SENTENCE_PUNCT = frozenset("，。！？；：、…,.!?;:")


def zh_function_word_share(doc: Document) -> float | None:
    """Share of the words of the unpunctuated lines (no sentence punctuation
    ``，。！？；：、…`` or ASCII ``,.!?;:``) that are Chinese function words
    (:data:`ZH_FUNCTION_WORDS`, modern and classical). A run of words with
    neither punctuation nor function words is no sentence: keyword stuffing
    strings nouns and modifiers together. Poetry and prose are punctuated, so
    their lines are not measured (a classical ci has no function word at
    all). None when those lines hold fewer than 50 words (the rule then
    passes)."""
    unpunctuated = [line for line in doc.lines if _SENTENCE_PUNCT.isdisjoint(line)]
    if not unpunctuated:
        return None
    found = words("\n".join(unpunctuated), "zh")
    if len(found) < 50:
        return None
    return sum(map(ZH_FUNCTION_WORDS.__contains__, found)) / len(found)


def keyword_run_share(doc: Document) -> float | None:
    """Share of the Han/kana characters that stand in keyword runs: three or
    more consecutive items of 2..8 Han/kana characters each on one line,
    separated by spaces, ``|``, ``｜``, ``/``, ``_``, ``-``, ``·`` or ``•``
    (``北京搬家 搬家公司 便宜搬家 正规搬家``). A sentence with a Latin word
    between Chinese words (``使用 apt-get 安装 软件包``) has no such run.
    None without Han/kana characters (the rule then passes)."""
    total = len(_HAN_KANA_RE.findall(doc.text))
    if total == 0:
        return None
    inside = 0
    for line in doc.lines:
        if not _KEYWORD_SPLIT_RE.search(line):
            continue
        run: list[str] = []
        for piece in _KEYWORD_SPLIT_RE.split(line) + [""]:
            if _CJK_RUN_RE.match(piece):
                run.append(piece)
                continue
            if len(run) >= 3:
                inside += sum(map(len, run))
            run = []
    return inside / total


def navigation_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines that are menu items or headings: at most
    ``short_line_chars`` characters, no sentence punctuation
    (``，。！？；：、…`` or ASCII ``,.!?;:``) and no modern sentence particle
    (:data:`_PARTICLES`). A page of menus and section titles is near 1.0;
    poetry is short lines with punctuation, particles, or (verse printed
    without punctuation) of one length (:data:`VERSE_MIN_CHARS`, then 0.0). None for
    a document of fewer than 5 non-blank lines (too few to tell; the rule
    then passes)."""
    lines = doc.lines
    if len(lines) < 5:
        return None
    limit = doc.short_line_chars
    nav = [len(line) for line in lines
           if len(line) <= limit and _SENTENCE_PUNCT.isdisjoint(line) and _PARTICLES.isdisjoint(line)]
    if nav:
        length, count = Counter(nav).most_common(1)[0]
        if length >= VERSE_MIN_CHARS and count >= VERSE_SHARE * len(nav):
            return 0.0     # regular verse written without punctuation (五言/七言 lines)
    return len(nav) / len(lines)


#: Modern Chinese sentence particles: a short line holding one is a line of a
#: sentence (lyrics, modern poetry: 你问我爱你有多深), not a menu item.
_PARTICLES = frozenset("的了着过吗呢吧啊么")
#: Unpunctuated lines of one length >= 5 characters, most of the short lines:
#: regular verse (a Tang quatrain printed one line per verse: 床前明月光 /
#: 疑是地上霜 / ...), not a menu, whose items are 2-4 characters of
#: different lengths (首页 / 新闻中心 / 产品展示 / 联系我们). Our choice from
#: the hostile test's poems and the navigation test page; menus of 5-character
#: items in one length would pass.
VERSE_MIN_CHARS = 5
VERSE_SHARE = 0.6


def abnormal_char_share(doc: Document) -> float | None:
    """Share of characters that are not word characters, whitespace or common
    punctuation (ASCII, general, CJK, full-width): box drawing, emoji, math
    and other symbols, private-use characters."""
    return ratio(doc.counts["abnormal_chars"], len(doc.text))


def code_line_fraction(doc: Document) -> float | None:
    """Share of non-blank lines that look like program code (end in ``;``,
    ``{`` or ``}``; start with ``def``/``import``/``#include``/``return``...;
    hold ``==``, ``&&``, ``->``, ``=>``, ``::``). Full-width ``；`` is prose."""
    return ratio(doc.counts["code_lines"], len(doc.lines))


VALUES: dict[str, Measure] = {
    "unbroken_run": unbroken_run,
    "residue_per_kchar": residue_per_kchar,
    "mojibake_per_kchar": mojibake_per_kchar,
    "abnormal_char_share": abnormal_char_share,
    "code_line_fraction": code_line_fraction,
    "keyword_run_share": keyword_run_share,
    "navigation_line_fraction": navigation_line_fraction,
    "zh_function_word_share": zh_function_word_share,
}
INT_VALUES = frozenset({"unbroken_run"})
BATCH_COUNTS: dict[str, BatchCount] = {
    "unbroken_run": _unbroken_runs,
    "abnormal_chars": count_matches(_ABNORMAL_RE2),
    "residue": count_matches(_RESIDUE_RE2),
    "code_lines": count_matches(_CODE_LINE_RE2, by_line=True),
    "mojibake_fixed": count_matches(_MOJIBAKE_FIXED_RE2),
    "mojibake_suspect": count_matches(_MOJIBAKE_SUSPECT_CLASS),
}

RULES: tuple[Rule, ...] = (
    Rule("max_mojibake_per_kchar", "mojibake_per_kchar", "max", FAMILY),
    Rule("max_residue_per_kchar", "residue_per_kchar", "max", FAMILY),
    Rule("max_abnormal_char_share", "abnormal_char_share", "max", FAMILY),
    Rule("max_unbroken_run", "unbroken_run", "max", FAMILY),
    Rule("max_code_line_fraction", "code_line_fraction", "max", FAMILY),
    Rule("max_keyword_run_share", "keyword_run_share", "max", FAMILY, undefined_passes=True),
    Rule("max_navigation_line_fraction", "navigation_line_fraction", "max", FAMILY,
         undefined_passes=True),
    Rule("min_zh_function_word_share", "zh_function_word_share", "min", FAMILY,
         undefined_passes=True),
)
