"""C4 rules: Raffel et al. 2020 ("C4"), Section 2.2.

Sentences in lines ending with terminal punctuation (full-width ``。！？…``
counted), ``lorem ipsum``, curly brackets, an optional bad-word list. C4's
own thresholds (>= 5 sentences, no ``{``) drop most fortunes and many man
pages of /work/shared/corpus, so those two rules are off in the presets (our
measurement, :data:`stages.heuristics.presets.PRESETS`); ``lorem ipsum`` and
bad words (C4's "List of Dirty, Naughty, ... Words"; the project ships no
list, see ``Config.bad_words``) drop a document at one occurrence.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stages.heuristics.family import BatchCount, Measure, Rule, count_matches

if TYPE_CHECKING:
    from stages.heuristics.view import Document

FAMILY = "c4"

# A line "ends with terminal punctuation" (C4; FineWeb's line_punct_ratio uses
# the same test) when, stripped, it ends with one of these: ASCII . ! ? and
# closing quotes as C4/datatrove, plus the full-width and CJK forms.
TERMINAL_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", "」", "』", "。", "！", "？",
                        "…", "｡", "．", "．")
# C4 sentences: one run of sentence-final marks (ASCII ones followed by a
# space, a closing quote/bracket or the line end; CJK ones anywhere).
_SENTENCE_END_RE = re.compile(r"[。！？｡]+|…+|[.!?]+(?=[\s\"'”’」』)\]]|$)", re.MULTILINE)
_LOREM_RE2 = r"(?i)lorem ipsum"


def sentence_count(doc: Document) -> int:
    """C4 sentences: sentence-final marks (``. ! ?`` before a space, quote or
    line end; ``。！？…`` anywhere, a run counting once) in the lines that end
    with terminal punctuation (:data:`TERMINAL_PUNCTUATION`)."""
    kept = [line for line in doc.lines if line.endswith(TERMINAL_PUNCTUATION)]
    return len(_SENTENCE_END_RE.findall("\n".join(kept))) if kept else 0


def lorem_ipsum_count(doc: Document) -> int:
    """Occurrences of "lorem ipsum" (any case) (C4)."""
    return doc.counts["lorem_ipsum"]


def curly_bracket_count(doc: Document) -> int:
    """Occurrences of ``{`` (C4 drops a page containing one)."""
    return doc.text.count("{")


def bad_word_count(doc: Document) -> int:
    """Words in the configured bad-word list (ASCII words lowercased)."""
    bad = doc.bad_words
    return sum(1 for w in doc.words if (w.lower() if w.isascii() else w) in bad)


VALUES: dict[str, Measure] = {
    "sentence_count": sentence_count,
    "lorem_ipsum_count": lorem_ipsum_count,
    "curly_bracket_count": curly_bracket_count,
    "bad_word_count": bad_word_count,
}
INT_VALUES = frozenset({"sentence_count", "lorem_ipsum_count", "curly_bracket_count", "bad_word_count"})
# Run over a whole partition at once with Arrow's RE2 kernels.
BATCH_COUNTS: dict[str, BatchCount] = {
    "lorem_ipsum": count_matches(_LOREM_RE2),
}

RULES: tuple[Rule, ...] = (
    Rule("min_sentences", "sentence_count", "min", FAMILY),
    Rule("max_lorem_ipsum", "lorem_ipsum_count", "max", FAMILY),
    Rule("max_curly_brackets", "curly_bracket_count", "max", FAMILY),
    Rule("max_bad_words", "bad_word_count", "max", FAMILY),
)
