"""Benchmark decontamination: find eval-set items quoted in documents.

Phases (the stage, :mod:`stages.decontaminate.stage`, only wires them):

1. :mod:`~stages.decontaminate.evalsets`: read each configured eval set
   (JSONL, Parquet, or a ``save_to_disk`` Hugging Face dataset read with
   pyarrow) into items: an id and the texts of the configured fields.
2. :mod:`~stages.decontaminate.normalize`: units (a CJK character, or a run
   of letters/digits) with their code-point spans in the original text,
   NFKC + casefold values, and uint64 n-gram hashes.
3. :mod:`~stages.decontaminate.index`: the sorted gram keys with CSR postings
   (item, position), templates left out, cached by a hash of the eval files
   and parameters under ``ctx.cache_dir``.
4. :mod:`~stages.decontaminate.frequency` (``fit``): gram document frequency
   over a seeded, bounded corpus sample; corpus-common grams left out.
5. :mod:`~stages.decontaminate.match` (``process``): hits per document by
   unit coverage, spans in code points, cut ranges.

See docs/stages/decontaminate.md.
"""

from stages.decontaminate.config import Config, EvalSet
from stages.decontaminate.stage import REASON_EMPTY, REASON_OVERLAP, DecontaminateStage

__all__ = ["Config", "EvalSet", "DecontaminateStage", "REASON_OVERLAP", "REASON_EMPTY"]
