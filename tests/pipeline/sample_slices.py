"""Small slices of the bundled sample (data/sample) for tests that build a
tiny version in ~20 s: every 12th of the first fortunes (five languages) and
12 man pages, written as plain JSONL; optionally 45 Debian Reference pages
as Parquet. Imported by the test modules next to it."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import zstandard

from pipeline.config import REPO_ROOT

SAMPLE = REPO_ROOT / "data" / "sample"


def head_jsonl_zst(src: Path, dst: Path, n: int, step: int = 1) -> None:
    """The first ``n`` of every ``step``-th line of a ``.jsonl.zst`` file, to ``dst``."""
    with open(src, "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    dst.write_text("".join(lines[::step][:n]), encoding="utf-8")


def write_slices(data: Path, reference: bool = False) -> None:
    """``web.jsonl`` (300 fortunes), ``manuals.jsonl`` (12 man pages) and, with
    ``reference``, ``reference.parquet`` (45 pages) under ``data``."""
    data.mkdir(parents=True, exist_ok=True)
    head_jsonl_zst(SAMPLE / "web-fortunes.jsonl.zst", data / "web.jsonl", 300, step=12)
    head_jsonl_zst(SAMPLE / "manuals-manpages.jsonl.zst", data / "manuals.jsonl", 12, step=28)
    if reference:
        pq.write_table(pq.read_table(SAMPLE / "reference-debref.parquet").slice(0, 45), data / "reference.parquet")
