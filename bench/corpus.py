"""Reading the development corpus (``../shared/corpus``, JSONL + zstd) for the benchmarks."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path


def records(corpus: Path, files: tuple[str, ...]) -> Iterator[tuple[str, int, dict]]:
    """``(file name, line number from 1, record)`` of ``corpus/<name>.jsonl.zst``
    for each name of ``files`` in order; a missing file is skipped."""
    import zstandard

    for name in files:
        path = Path(corpus) / f"{name}.jsonl.zst"
        if not path.exists():
            continue
        with open(path, "rb") as fh:
            stream = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
            for line_no, line in enumerate(stream, 1):
                yield name, line_no, json.loads(line)
