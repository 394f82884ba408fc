"""Word salad by the self-shuffle ratio: a document scored as written and
with the tokens of each of its lines shuffled (docs/stages/perplexity.md).

Natural text scores far lower than its own shuffle, because an n-gram model
rewards word order it has seen; text whose words are already in random order
("word salad") scores about the same either way. The ratio compares a
document with itself, so it does not depend on how close the document's
domain is to the reference (an absolute perplexity does: clean King James
Bible English scores higher than shuffled Debian documentation).
"""

from __future__ import annotations

import hashlib
import random

from stages.perplexity.model import score_sentences
from stages.perplexity.text import LineTokenizer, tokenize

REASON_WORD_SALAD = "perplexity.word_salad"


def _rng(seed_text: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(seed_text.encode("utf-8", "surrogatepass")).digest()[:8],
                                        "big"))


def shuffled_lines(lines: list[str], lang: str | None, seed_text: str) -> list[str]:
    """Each normalized line with its words in a seeded random order.

    A *word* here is what a writer puts in order: a whitespace-separated
    chunk (``"/etc/apt/sources.list,"`` stays whole, its inner tokens keep
    their order), or, for languages written without spaces (zh/yue/wuu,
    ja, ko, th...: :data:`UNSPACED_LANGUAGES`, or a chunk longer than
    :data:`UNSPACED_CHUNK` characters), each model token
    (:func:`stages.perplexity.text.tokenize`). Shuffling chunks, not
    tokens, is what makes a shuffled document score like word salad made
    the same way (measured: token shuffles raise the ratio of salad whose
    chunks hold paths and URLs; docs/stages/perplexity.md).

    Args:
        lines: normalized lines (:func:`stages.perplexity.text.normalized_lines`).
        lang: the document language.
        seed_text: what seeds the shuffle (the document text): the seed is the
            first 8 bytes of its UTF-8 sha256, so the same document always
            gets the same shuffle, whatever the worker, batch or run.
    Returns:
        The shuffled lines (words joined by one space), same count and
        order of lines. Never raises.
    """
    rng = _rng(seed_text)
    spaced = lang not in UNSPACED_LANGUAGES
    out = []
    for line in lines:
        units = line.split()
        if not spaced or any(len(u) > UNSPACED_CHUNK for u in units):
            units = [t for u in units for t in tokenize(u, lang)]
        rng.shuffle(units)
        out.append(" ".join(units))
    return out


#: Languages written without spaces between words: their words are model tokens.
UNSPACED_LANGUAGES = frozenset({"zh", "yue", "wuu", "ja", "ko", "th", "lo", "km", "my", "bo"})
#: A whitespace chunk longer than this (characters) is a run of unspaced text
#: (a Chinese sentence in a document labelled otherwise): split into tokens.
UNSPACED_CHUNK = 40


#: Particles of modern written Chinese that Classical Chinese does not use
#: (的 了 们 这 吗 呢 吧 啊 么 着, and 們 這 嗎 麼 in Traditional script; not 著,
#: which Classical Chinese uses as a verb).
MODERN_ZH_PARTICLES = frozenset("的了们們这這吗嗎呢吧啊么麼着")


def modern_zh_share(text: str) -> float | None:
    """Share of the Han characters (U+4E00-U+9FFF) of ``text`` that are
    :data:`MODERN_ZH_PARTICLES`; None below 20 Han characters.

    Our measurement (bench.word_salad sets, DEV): p1 0.015 for zh man
    pages, 0.041 for corpus-multi pages, 0.047 for debref; 0.0 for 187 of
    the 253 zh fortunes measured (classical prose and Tang poems)."""
    han = [ch for ch in text if "\u4e00" <= ch <= "\u9fff"]
    if len(han) < 20:
        return None
    return sum(ch in MODERN_ZH_PARTICLES for ch in han) / len(han)


def salad_cutoff(max_ratio: float, tokens: int, full_tokens: int) -> float:
    """The self-shuffle ratio at or below which a document of ``tokens``
    model tokens is word salad.

    ``max_ratio`` applies from ``full_tokens`` tokens up; below, the cut-off
    shrinks linearly toward 1 (``1 + (max_ratio - 1) * tokens /
    full_tokens``), because the ratio of short clean text scatters lower
    (fewer word pairs to put out of order). Our measurement (bench.word_salad
    rows, ../shared/corpus and corpus-multi DEV, screen dumps left out):
    clean en documents of 60-149 tokens have ratios from 1.02 (one fortune;
    next 1.14, p5 1.28), their salad a median of 0.98 and p90 1.15; with
    ``en: 1.15`` this cut-off drops 96.5% of en salad of >= 300 characters
    (86.3% with the check only from 150 tokens) for the same 2 of 1,068
    clean documents lost, and zh (``zh: 1.35``) 96.4% for 1 of 1,246
    (before ``word_salad_max_oov_share``).

    Args:
        max_ratio: the language's ``word_salad_max_ratio`` (> 0).
        tokens: the document's token count (>= 0).
        full_tokens: ``word_salad_full_tokens`` (>= 1).
    Returns:
        The cut-off (float); ``max_ratio`` itself when ``max_ratio <= 1`` or
        ``tokens >= full_tokens``.
    """
    if tokens >= full_tokens or max_ratio <= 1.0:
        return max_ratio
    return 1.0 + (max_ratio - 1.0) * tokens / full_tokens


def self_shuffle_ratio(model, tokenizer: LineTokenizer, lines: list[str], lang: str | None,
                       log10_sum: float, tokens: int, seed_text: str) -> float | None:
    """Perplexity of the document with each line's words shuffled
    (:func:`shuffled_lines`) over perplexity of the document as written.

    Args:
        model: the KenLM model of the document's language.
        tokenizer: its :class:`LineTokenizer`.
        lines: the document's normalized lines.
        log10_sum, tokens: the document's own score (:func:`score_sentences`
            of its token lines), so it is not computed twice.
        seed_text: see :func:`shuffled_lines`.
    Returns:
        ``10 ** ((log10_sum - log10_sum_shuffled) / tokens)`` (float, > 0;
        about 1 for word salad, well above 1 for natural text); None when
        ``tokens`` is 0.
    """
    if tokens <= 0:
        return None
    shuffled = [t for t in tokenizer(shuffled_lines(lines, lang, seed_text)) if t]
    shuffled_sum, _ = score_sentences(model, shuffled)
    return float(10.0 ** ((log10_sum - shuffled_sum) / tokens))
