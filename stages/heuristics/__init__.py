"""Rule-based quality filters: the stage module, moved here whole (split by rule family next)."""

from stages.heuristics.stage import *  # noqa: F403
