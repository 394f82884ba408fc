"""The one shared document view of the heuristics stage.

Each document is measured once: its lines, paragraphs and words
(``stages.text.quality_words`` for the document's ``langid_lang``:
rjieba for Chinese and for every Han/kana run whatever the label, letter
runs otherwise) are computed a single time (:class:`Document`, lazily) and shared
by every rule of every family; word n-grams are counted once for n = 2..10
(:attr:`Document.ngram_stats`, :mod:`stages.heuristics.ngrams`) and the
partition-wide regex counts once per partition
(:attr:`Document.counts`, :func:`stages.heuristics.rules.batch_counts`).
"""

from __future__ import annotations

import re
from functools import cached_property

import pyarrow as pa

from stages.heuristics.family import ratio
from stages.heuristics.ngrams import ngram_stats_batch
from stages.heuristics.rules import batch_counts
from stages.text import CJK_LANGS, PARAGRAPH_BREAK_RE, is_han_kana_word, quality_words

# English characters per character of the same text in Japanese / Chinese:
# the same 15 Debian Reference pages of /work/shared/corpus are 556k chars in
# English, 401k in Japanese, 306k in Chinese (our measurement, as the ja/zh
# short_line_chars of stages.heuristics.presets).
EN_CHARS_PER_KANA_CHAR = 556 / 401
EN_CHARS_PER_HAN_CHAR = 556 / 306
_KANA_SEARCH = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]").search


class Document:
    """One document's text, measured lazily; every value is computed at most once.

    Attributes:
        text: the document (str).
        lang: its ``langid_lang`` (str or None).
        short_line_chars: most characters of a FineWeb short line.
        bad_words: the C4 bad-word set for ``lang`` (empty: none).
        langid_mix: langid's ``langid_mix`` (JSON ``{code: share of
            letters}``), or None when the stage does not read it.
    """

    def __init__(self, text: str, lang: str | None, short_line_chars: int = 30,
                 bad_words: frozenset[str] = frozenset(),
                 counts: dict[str, int] | None = None, langid_mix: str | None = None):
        self.text = text
        self.langid_mix = langid_mix
        self.lang = lang
        self.short_line_chars = short_line_chars
        self.bad_words = bad_words
        if counts is not None:
            self.counts = counts

    @cached_property
    def counts(self) -> dict[str, int]:
        """:data:`~stages.heuristics.rules.BATCH_COUNTS` of this text (given
        by the stage for a whole partition; computed here for a lone
        document)."""
        return batch_counts(pa.array([self.text], pa.string()))[0]

    @cached_property
    def raw_lines(self) -> list[str]:
        """Non-blank lines as written (indentation kept), for line lengths
        (any line break: LF, CRLF, CR, U+2028)."""
        return [line for line in self.text.splitlines() if line and not line.isspace()]

    @cached_property
    def lines(self) -> list[str]:
        """Non-blank lines, stripped."""
        return list(map(str.strip, self.raw_lines))

    @cached_property
    def paragraphs(self) -> list[str]:
        """Paragraphs (runs of non-blank lines; any line break, see
        :data:`stages.text.PARAGRAPH_BREAK_RE`), stripped."""
        return [p.strip() for p in PARAGRAPH_BREAK_RE.split(self.text) if p.strip()]

    @cached_property
    def line_duplicates(self) -> tuple[float | None, float | None]:
        """(share of lines, share of line characters) repeating an earlier line."""
        return _duplicate_fractions(self.lines)

    @cached_property
    def paragraph_duplicates(self) -> tuple[float | None, float | None]:
        """(share of paragraphs, share of paragraph characters) repeating one."""
        return _duplicate_fractions(self.paragraphs)

    @cached_property
    def words(self) -> list[str]:
        """``stages.text.quality_words(text, lang)``: rjieba words for
        Chinese, rjieba for every Han/kana run whatever the label, letter runs
        (combining marks included) otherwise."""
        return quality_words(self.text, self.lang)

    @cached_property
    def spaced_words(self) -> list[str]:
        """The words of the space-separated part of the text: :attr:`words`
        that do not start with a Han or kana character (all of them for a
        page without CJK text)."""
        return [w for w in self.words if not is_han_kana_word(w)]

    @cached_property
    def ngram_words(self) -> list[str]:
        """The words the n-gram repetition rules count: :attr:`words` for a
        CJK label (``stages.text.CJK_LANGS``), :attr:`spaced_words` for every
        other label. A Japanese part of an English page is one word per kana,
        so its "5-grams" are 5 characters (why the ``ja`` preset has the
        duplicated n-gram rules off): it is left out, as the ``ja`` preset
        would leave it."""
        return self.words if self.lang in CJK_LANGS else self.spaced_words

    @cached_property
    def ngram_run_starts(self) -> list[int]:
        """Indices into :attr:`ngram_words` where a run of adjacent words
        begins after a left-out Han/kana part (empty for a CJK label or a page
        without such parts). No n-gram spans such a gap: in
        ``「Settings」を開き、「Displays」を選択`` the English words are
        separate runs, not the 2-gram "Settings Displays" (which repeated
        across a partly translated page, and the page's duplicated 5-gram
        share rose above its English original's)."""
        if self.lang in CJK_LANGS:
            return []
        starts, kept, gap = [], 0, False
        for word in self.words:
            if is_han_kana_word(word):
                gap = True
                continue
            if gap and kept:
                starts.append(kept)
            gap = False
            kept += 1
        return starts

    @cached_property
    def ngram_other_chars(self) -> int:
        """The words left out of :attr:`ngram_words` (the Han/kana words of a
        non-CJK label; 0 otherwise), in English-equivalent characters: their
        characters x :data:`EN_CHARS_PER_KANA_CHAR` (text with kana) or
        :data:`EN_CHARS_PER_HAN_CHAR` (Han only), rounded. They count in the
        denominator of the n-gram shares: a partly translated page whose
        translated paragraphs are Japanese and whose untranslated remainder
        is the repeated steps is judged as its English original would be,
        not on the remainder alone (on dev, gnome-help printing-order as
        zh/ja -> en scored 0.29 on the remainder, 0.20 as the English page)."""
        if self.lang in CJK_LANGS:
            return 0
        raw = self.word_chars - sum(map(len, self.spaced_words))
        if not raw:
            return 0
        scale = EN_CHARS_PER_KANA_CHAR if _KANA_SEARCH(self.text) else EN_CHARS_PER_HAN_CHAR
        return round(raw * scale)

    @cached_property
    def word_chars(self) -> int:
        """Characters in all words."""
        return sum(map(len, self.words))

    @cached_property
    def ngram_stats(self) -> dict[str, float | None]:
        """Gopher's word n-gram repetition values of :attr:`ngram_words`
        (no n-gram spans a gap of :attr:`ngram_run_starts`; shares are over
        the characters of all words, :attr:`ngram_other_chars` included),
        all from one pass over n.

        ``top_{n}gram_char_share`` (n = 2, 3, 4): characters covered by the
        most frequent n-gram, ``count(top) * chars(top) / word_chars``; among
        n-grams with the top count the longest is taken. An n-gram seen once
        is no repetition: 0.0 (datatrove counts it, which drops every short
        document).

        ``duplicate_{n}gram_char_share`` (n = 5..10): characters of the words
        covered by any occurrence of an n-gram that occurs more than once,
        each word counted once where such n-grams overlap (Gopher's wording,
        Rae et al. 2021 A.1.1), over ``word_chars``.

        Every value is None with fewer than ``n`` words (or no word
        characters). n-grams are numbered exactly, no hashing: an n-gram's id
        is the dense id of (id of its (n-1)-gram prefix, id of its last
        word). When no n-gram of size n repeats, none longer does, so the loop
        stops there. Short documents use Python dicts, long ones Arrow's hash
        dictionary encoding (same ids; measured crossover ~300 words).
        """
        return ngram_stats_batch([self.ngram_words], [self.ngram_run_starts],
                                 [self.ngram_other_chars])[0]


def _duplicate_fractions(items: list[str]) -> tuple[float | None, float | None]:
    """(share of ``items`` repeating an earlier one, share of their
    characters in such repeats); None for no items (no characters)."""
    total = sum(map(len, items))
    unique = set(items)
    return (ratio(len(items) - len(unique), len(items)),
            ratio(total - sum(map(len, unique)), total))
