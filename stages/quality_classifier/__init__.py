"""The quality classifier stage: a fastText supervised model trained in ``fit``
on a reference the user names against a sample of the corpus itself, applied
per document (docs/stages/quality_classifier.md)."""

from stages.quality_classifier.stage import QualityClassifierStage

__all__ = ["QualityClassifierStage"]
