"""Perplexity filter: score each document with a KenLM n-gram model of its
language, trained on a trusted reference source (CCNet, Wenzek et al. 2020).

``fit`` trains one model per language from the kept documents of
``config.reference_source``, measures the reference perplexity distribution on
held-out reference documents (2-fold cross-fitting, see
:func:`reference_perplexities`) and writes ``models.json``; ``process`` scores
every document whose language has a model and drops those above the
language's threshold with reason ``perplexity.above_threshold``.

Text seen by the model (training and scoring alike), per line of a document:
NFKC, lowercase, accents stripped, digits -> ``0``, punctuation unified
(:func:`normalize`), then split into tokens by the configured tokenizer
(:class:`LineTokenizer`): ``sentencepiece`` pieces of a unigram model trained
per language on the same reference text, as CCNet does, or ``words`` from
:func:`stages.text.words` (rjieba for Chinese, one token per CJK character for
Japanese/Korean, letter/digit runs elsewhere) with every punctuation or symbol
character as a token of its own (:func:`tokenize`). See
docs/stages/perplexity.md.

Modules: :mod:`stages.perplexity.config` (``Config``),
:mod:`stages.perplexity.text` (normalization and tokens),
:mod:`stages.perplexity.model` (KenLM/SentencePiece loading, scoring,
training, the reference distribution), :mod:`stages.perplexity.stage`
(``PerplexityStage``). This package re-exports them under the names
``stages.perplexity`` has always had.
"""

from stages.perplexity.config import Config  # noqa: F401
from stages.perplexity.model import (  # noqa: F401
    KENLM_VERSION,
    STDERR_TAIL_LINES,
    TEXT_VERSION,
    TOKENIZER_FILE,
    ToolError,
    load_model,
    load_tokenizer,
    percentile,
    perplexity,
    reference_chars,
    reference_documents,
    reference_perplexities,
    score_sentences,
    score_sentences_oov,
    train_kenlm,
    train_language_model,
    train_sentencepiece,
)
from stages.perplexity.stage import BUCKETS, REASON_ABOVE_THRESHOLD, PerplexityStage  # noqa: F401
from stages.perplexity.text import (  # noqa: F401
    LineTokenizer,
    document_sentences,
    normalize,
    normalized_lines,
    tokenize,
)
