"""Deduplication (``stages.STAGES["dedup"] = "stages.dedup:DedupStage"``).

The stage and its config are in :mod:`stages.dedup.stage`; this package
re-exports them and the pure hashing helpers under their old names
(``from stages.dedup import Config, DedupStage, near_normalize``).
"""

from stages.dedup.minhash import (  # noqa: F401
    BAND_HASH_NAME,
    SHINGLE_HASH_NAME,
    band_keys,
    candidate_probability,
    estimated_jaccard,
    exact_normalize,
    fold_script,
    line_hashes,
    line_normalize,
    minhash_signatures,
    near_normalize,
    near_normalize_batch,
    ngram_hashes,
    permutations,
    remove_lines,
    s_curve,
    shingle_hashes,
    shingle_tokens,
    uses_char_shingles,
)
from stages.dedup.phases import REASON_EXACT, REASON_NEAR, document_signatures  # noqa: F401
from stages.dedup.stage import (  # noqa: F401
    EXACT_HASH_NAME,
    LINE_HASH_NAME,
    LINES_DIR,
    REASON_LINES,
    REMOVED_DIR,
    Config,
    DedupStage,
)
