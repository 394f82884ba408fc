"""The best-known peer's heuristic filters on the same documents, for the
speed comparison in docs/stages/heuristics.md (not part of ``make bench``).

datatrove's four heuristic filter families with their defaults, chained
(GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter,
FineWebQualityFilter; a document stops at the first filter that drops it), on
the 63,570 prose documents of ``../shared/corpus`` (no dev-code); CPU time of
this one process (``time.process_time``), best of N runs.

datatrove is not a dependency of mindcorpus: run this in a separate
virtual environment::

    python3.11 -m venv /tmp/peerenv
    /tmp/peerenv/bin/pip install datatrove regex nltk spacy zstandard
    /tmp/peerenv/bin/python bench/peer_datatrove.py [N]

Measured 2026-11-30 (datatrove 0.10.1, spacy English word tokenizer, load ~1
on 2 cores, N=1): 63,570 documents, 44.8 M chars, kept 1,179 (the number the
issue reports), 308.8 CPU s: 0.145 M chars/s, 206 documents/s per core.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
FILES = ("dev-kjv", "dev-debref", "dev-manpages", "dev-fortunes")


def main(repeats: int = 1) -> None:
    import zstandard
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter,
                                            GopherQualityFilter, GopherRepetitionFilter)

    texts = []
    for name in FILES:
        with open(CORPUS / f"{name}.jsonl.zst", "rb") as fh:
            stream = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
            texts.extend(json.loads(line)["text"] for line in stream)
    filters = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]
    chars = sum(map(len, texts))
    best, kept = float("inf"), 0
    for _ in range(repeats):
        kept = 0
        t0 = time.process_time()
        for i, text in enumerate(texts):
            doc = Document(text=text, id=str(i))
            for f in filters:
                result = f.filter(doc)
                if result is False or (isinstance(result, tuple) and result[0] is False):
                    break
            else:
                kept += 1
        best = min(best, time.process_time() - t0)
    print(f"datatrove: {len(texts)} documents, {chars / 1e6:.1f} M chars, kept {kept}; best of {repeats}: "
          f"{best:.1f} CPU s = {chars / best / 1e6:.3f} M chars/s, {len(texts) / best:.0f} documents/s per core")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
