"""Inference side of the quality classifier: load a trained model with the
project's fastText inference library (``fasttext-predict``, module
``fasttext``; the lid.176 model uses it too) and score texts."""

from __future__ import annotations

import functools

from stages.quality_classifier.train import LABEL_REFERENCE, model_text


@functools.lru_cache(maxsize=8)
def load_model(path: str):
    """The fastText model at ``path``, loaded once per process (a model is
    ~(vocabulary + bucket) x dim x 4 bytes: ~60 MB at the defaults).

    Raises:
        RuntimeError: the file is missing or not a fastText model (names it).
    """
    import fasttext

    try:
        return fasttext.load_model(path)
    except (ValueError, OSError, RuntimeError) as exc:
        raise RuntimeError(f"quality_classifier: cannot load fastText model {path}: {exc}") from None


def scores(model, texts: list[str], max_chars: int) -> list[float]:
    """Probability of :data:`LABEL_REFERENCE` for each document text (float
    in [0, 1]; fastText's softmax output, so p(corpus) = 1 - p(reference) up
    to rounding), after :func:`stages.quality_classifier.train.model_text`.
    O(len(texts) x max_chars)."""
    return line_scores(model, [model_text(t, max_chars) for t in texts])


def line_scores(model, lines: list[str]) -> list[float]:
    """:func:`scores` of texts already made into model lines
    (:func:`stages.quality_classifier.train.model_text`; no ``\n``)."""
    out = []
    for line in lines:
        # One line at a time: fasttext-predict's list form (multilinePredict)
        # returns the labels without their probabilities (measured, 0.9.2.4).
        labels, probs = model.predict(line, k=2, threshold=0.0)
        p = 0.0
        for label, prob in zip(labels, probs):
            if label == LABEL_REFERENCE:
                p = float(prob)
        out.append(min(1.0, max(0.0, p)))
    return out
