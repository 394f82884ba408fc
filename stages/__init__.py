"""Pipeline stages, one module each, in build order.

``STAGES`` maps a stage name (also its config section and its reason-code
prefix) to ``"module:Class"``; classes are imported lazily so that loading the
config does not import fastText, KenLM or datasketch.
"""

from __future__ import annotations

import importlib

STAGES: dict[str, str] = {
    "langid": "stages.langid:LangIdStage",
    "heuristics": "stages.heuristics:HeuristicsStage",
    "perplexity": "stages.perplexity:PerplexityStage",
    "dedup": "stages.dedup:DedupStage",
    "tokenize": "stages.tokenize:TokenizeStage",
    "mixture": "stages.mixture:MixtureStage",
}


def stage_class(name: str):
    """Return the Stage subclass registered under ``name`` (KeyError if none)."""
    module, cls = STAGES[name].split(":")
    return getattr(importlib.import_module(module), cls)
