"""Text as the n-gram model sees it: CCNet normalization, word or
SentencePiece tokens, one token line per text line (docs/stages/perplexity.md)."""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from stages.text import nfkc, words
from stages.zh_script import fold_to_simplified

# --------------------------------------------------------------------------- text

_UNICODE_PUNCT = {  # CCNet text_normalizer.UNICODE_PUNCT, plus CJK brackets; applied after NFKC
    "，": ",", "。": ".", "、": ",", "„": '"', "”": '"', "“": '"', "«": '"', "»": '"',
    "」": '"', "「": '"', "『": '"', "』": '"', "《": '"', "》": '"', "´": "'", "∶": ":",
    "：": ":", "？": "?", "！": "!", "（": "(", "）": ")", "；": ";", "–": "-", "—": "-",
    "．": ".", "～": "~", "’": "'", "‘": "'", "…": "...", "━": "-", "〈": "<", "〉": ">",
    "【": "[", "】": "]", "％": "%", "►": "-", "・": ".", "·": ".",
}
_PUNCT_TRANS = str.maketrans(_UNICODE_PUNCT)
_DIGIT_RE = re.compile(r"\d")
# One punctuation/symbol character; an apostrophe or hyphen between two word
# characters stays inside the word ("don't", "e-mail"), as in stages.text.words.
_PUNCT_RE = re.compile(r"[^\w\s'\-]|_|(?<!\w)['\-]|['\-](?!\w)")
# Kana voicing marks (U+3099/U+309A) are meaning-bearing, not accents.
_KANA_MARKS = frozenset("\u3099\u309a")


def normalize(line: str) -> str:
    """CCNet's normalization of one line (Wenzek et al. 2020, ``text_normalizer``).

    NFKC (folds full-width forms), lowercase, strip combining accents
    (``é`` -> ``e``; kana voicing marks and Hangul are preserved), every
    Unicode decimal digit -> ``0``, CJK/typographic punctuation mapped to ASCII
    (``，`` -> ``,``, ``。`` -> ``.``, ``“`` -> ``"``), control characters
    removed. Never raises; ``""`` gives ``""``.
    """
    text = nfkc(line).lower()
    decomposed = unicodedata.normalize("NFD", text)
    text = unicodedata.normalize("NFC", "".join(
        ch for ch in decomposed
        if unicodedata.category(ch) != "Mn" or ch in _KANA_MARKS))
    text = _DIGIT_RE.sub("0", text).translate(_PUNCT_TRANS)
    return "".join(ch for ch in text if ch in "\t" or unicodedata.category(ch)[0] != "C")


def tokenize(line: str, lang: str | None) -> list[str]:
    """Split one *normalized* line into the tokens the n-gram model sees.

    Words come from :func:`stages.text.words` (rjieba for ``zh``/``yue``/
    ``wuu``; one token per CJK character for ``ja``/``ko``; letter/digit runs
    otherwise); each punctuation or symbol character between them is one token.
    Token order follows the text. Returns ``[]`` for a line with neither.
    """
    tokens: list[str] = []
    pos = 0
    for match in _PUNCT_RE.finditer(line):
        if match.start() > pos:
            tokens.extend(words(line[pos:match.start()], lang))
        tokens.append(match.group())
        pos = match.end()
    if pos < len(line):
        tokens.extend(words(line[pos:], lang))
    return tokens


#: Chinese labels whose text is folded to Simplified before the model sees it.
CHINESE = frozenset({"zh", "yue", "wuu"})
FoldScript = Literal["none", "t2s", "tw2sp"]


def fold_chinese(text: str, lang: str | None, fold: FoldScript) -> str:
    """``text`` in Simplified Chinese when ``lang`` is Chinese (:data:`CHINESE`)
    and ``fold`` is an OpenCC conversion (``t2s``: character by character;
    ``tw2sp``: Taiwan standard to mainland Simplified, with phrases such as
    ``檔案`` -> ``文件``); otherwise ``text`` unchanged. The rule is dedup's
    (:func:`stages.zh_script.fold_to_simplified`, lines kept): a Simplified
    document is left exactly as it is (``tw2sp`` on every document rewrote
    Simplified phrases such as 文件 -> 文档), a Traditional one converted, a
    Simplified one with a few Traditional characters has only those
    converted; training and scoring see the same text. Never raises."""
    if fold == "none" or lang not in CHINESE:
        return text
    return fold_to_simplified(text, fold)


def normalized_lines(text: str, lang: str | None = None, fold: FoldScript = "none") -> list[str]:
    """The :func:`normalize`-d lines of a document, without lines that are
    empty or whitespace-only after normalization (blank lines are layout, not
    text). Any line break splits (``str.splitlines``: LF, CRLF, CR, U+2028...),
    as in the langid and heuristics stages. Chinese text is first folded to
    Simplified by ``fold`` (:func:`fold_chinese`)."""
    out = []
    for line in fold_chinese(text, lang, fold).splitlines():
        line = normalize(line)
        if line.strip():
            out.append(line)
    return out


class LineTokenizer:
    """Turns normalized lines into the space-joined token lines KenLM sees.

    ``LineTokenizer(lang)`` uses :func:`tokenize` (segmenter words and
    punctuation); ``LineTokenizer(lang, sentencepiece_model=BYTES)`` uses the
    pieces of that SentencePiece model (``▁`` marks a word start, as in CCNet).
    Pieces never contain whitespace, so joining them with spaces is lossless
    for KenLM's whitespace tokenization.

    Raises:
        RuntimeError: ``sentencepiece_model`` is not a SentencePiece model
            (``source`` names the file in the message).
    """

    def __init__(self, lang: str | None, sentencepiece_model: bytes | None = None,
                 source: str = "<bytes>"):
        self.lang = lang
        self.kind = "words" if sentencepiece_model is None else "sentencepiece"
        self._sp = None
        if sentencepiece_model is not None:
            import sentencepiece as spm

            try:
                self._sp = spm.SentencePieceProcessor(model_proto=sentencepiece_model)
            except Exception as exc:  # sentencepiece raises RuntimeError/OSError
                raise RuntimeError(f"perplexity: cannot read SentencePiece model file "
                                   f"{source}: {exc}") from exc

    def __call__(self, lines: list[str]) -> list[str]:
        """One token line per input line, in order (``""`` when a line has no
        token; callers skip those)."""
        if self._sp is None:
            return [" ".join(tokenize(line, self.lang)) for line in lines]
        return [" ".join(pieces) for pieces in self._sp.encode(lines, out_type=str)]


def document_sentences(text: str, lang: str | None,
                       tokenizer: LineTokenizer | None = None, fold: FoldScript = "none") -> list[str]:
    """A document as model input: one space-joined token line per text line
    that has at least one token (blank lines are layout and are skipped).
    ``tokenizer`` None means ``LineTokenizer(lang)`` (words); ``fold`` as in
    :func:`normalized_lines`."""
    tokenizer = tokenizer or LineTokenizer(lang)
    return [s for s in tokenizer(normalized_lines(text, lang, fold)) if s]

