"""Deduplication (the stage ``dedup``, ``stages.dedup.stage:DedupStage``):
exact, MinHash-LSH near-duplicate and CCNet-style line dedup, global over
every partition (docs/stages/dedup.md).

Modules, in the order a build runs them:

* :mod:`stages.dedup.config`: ``Config``, the typed, frozen stage config;
  every phase takes it (or typed arguments), so each key has one default.
* :mod:`stages.dedup.stage`: ``DedupStage``: ``fit`` wires the phases,
  ``process`` joins each partition's decisions back.
* :mod:`stages.dedup.exchange`: spill groups and document handles (how
  records meet across workers).
* :mod:`stages.dedup.normalize`: exact and near normalization, character
  or word shingles, Chinese script folding.
* :mod:`stages.dedup.minhash`: shingle hashes, datasketch-equal MinHash
  signatures, LSH band keys (pure functions).
* :mod:`stages.dedup.keepers`: the keeper key of the ``keep`` rule.
* :mod:`stages.dedup.exact`: phase 1: ids, exact digests, exact groups.
* :mod:`stages.dedup.signatures`: phase 2: signatures of the exact survivors
  and their band records.
* :mod:`stages.dedup.lsh`: the S-curve; candidate pairs per band group and
  their verification.
* :mod:`stages.dedup.components`: connected components (large-star /
  small-star steps).
* :mod:`stages.dedup.cluster`: one keeper per cluster, the removed records.
* :mod:`stages.dedup.lines`: line-level dedup.

This package re-exports the stage, its config and the pure helpers under the
names ``stages.dedup`` has always had (``from stages.dedup import Config,
DedupStage, near_normalize``).
"""

from stages.dedup.cluster import REASON_NEAR  # noqa: F401
from stages.dedup.config import Config  # noqa: F401
from stages.dedup.exact import EXACT_HASH_NAME, REASON_EXACT  # noqa: F401
from stages.dedup.lines import (  # noqa: F401
    LINE_HASH_NAME,
    REASON_LINES,
    line_hashes,
    line_normalize,
    remove_lines,
)
from stages.dedup.lsh import candidate_probability, s_curve  # noqa: F401
from stages.dedup.minhash import (  # noqa: F401
    BAND_HASH_NAME,
    SHINGLE_HASH_NAME,
    band_keys,
    estimated_jaccard,
    minhash_signatures,
    ngram_hashes,
    permutations,
    shingle_hashes,
    shingle_tokens,
)
from stages.dedup.normalize import (  # noqa: F401
    exact_normalize,
    fold_script,
    near_lengths,
    near_normalize,
    near_normalize_batch,
    uses_char_shingles,
)
from stages.dedup.signatures import document_signatures  # noqa: F401
from stages.dedup.stage import LINES_DIR, REMOVED_DIR, DedupStage  # noqa: F401
