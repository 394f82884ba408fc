"""Make the bundled sample corpus under data/sample/ from ../shared/corpus.

Deterministic: documents are chosen by the sha256 of their original id, so the
same shared corpus always gives the same sample. Run from the repo root:

    .venv/bin/python scripts/make_sample.py ../shared/corpus data/sample

See data/sample/README.md for what is chosen, provenance and licences.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard


def read(path: Path):
    with open(path, "rb") as fh:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        for line in io.TextIOWrapper(reader, encoding="utf-8"):
            yield json.loads(line)


def rank(rec) -> str:
    return hashlib.sha256(rec["id"].encode()).hexdigest()


def pick(records, quota: dict, max_chars: int, key=lambda r: r["lang"]):
    groups = defaultdict(list)
    for rec in records:
        if len(rec["text"]) <= max_chars:
            groups[key(rec)].append(rec)
    chosen = []
    for group, n in quota.items():
        chosen += sorted(groups[group], key=rank)[:n]
    return sorted(chosen, key=lambda r: r["id"])


def row(rec) -> dict:
    meta = dict(rec.get("meta", {}))
    meta["orig_id"] = rec["id"]
    meta["label_lang"] = rec["lang"]
    if rec.get("script"):
        meta["label_script"] = rec["script"]
    return {"text": rec["text"], "meta": meta}


def code_row(rec) -> dict:
    """A CPython file's row: :func:`row` plus ``licence`` (SPDX) and
    ``sha256``, the hex digest of the text's UTF-8 bytes. The shared corpus
    keeps these files' bytes unchanged, so it is also the digest of the file
    in CPython's ``Lib/`` (checked against a CPython 3.11.7 install: all 50
    equal)."""
    out = row(rec)
    out["meta"]["licence"] = "PSF-2.0"
    out["meta"]["sha256"] = hashlib.sha256(rec["text"].encode("utf-8")).hexdigest()
    return out


def write_jsonl_zst(path: Path, records, make_row=row) -> None:
    data = "".join(json.dumps(make_row(r), ensure_ascii=False) + "\n" for r in records).encode()
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(data))


def main(shared: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    fortunes = pick(read(shared / "dev-fortunes.jsonl.zst"),
                    {"zh": 1200, "de": 800, "ru": 800, "es": 600, "en": 300}, 4000)
    write_jsonl_zst(out / "web-fortunes.jsonl.zst", fortunes)

    manpages = list(read(shared / "dev-manpages.jsonl.zst"))
    man = pick(manpages, {"zh/Hans": 80, "ja": 60, "de": 60, "fr": 40, "es": 40, "ru": 25}, 40000,
               key=lambda r: r["lang"] + ("/" + r["script"] if r.get("script") else ""))
    # The zh_TW twin (OpenCC conversion of the zh_CN page) of half the chosen
    # Simplified pages: real near-duplicates in another script.
    hans = [r for r in man if r.get("script") == "Hans"][:40]
    twins = {r["id"].replace("/zh_CN/", "/zh_TW/") for r in hans}
    man += [r for r in manpages if r["id"] in twins]
    # Held-out pages for the perplexity reference (not in the manuals source).
    chosen_ids = {r["id"] for r in man}
    held_out = pick((r for r in manpages if r["id"] not in chosen_ids and r.get("script") != "Hant"),
                    {"de": 12, "fr": 12, "es": 12, "ru": 12}, 40000)
    write_jsonl_zst(out / "manuals-manpages.jsonl.zst", sorted(man, key=lambda r: r["id"]))

    kjv = pick(read(shared / "dev-kjv.jsonl.zst"), {"en": 150}, 10**9)
    data = "".join(json.dumps(row(r), ensure_ascii=False) + "\n" for r in kjv).encode()
    with gzip.GzipFile(out / "books-kjv.jsonl.gz", "wb", mtime=0) as gz:
        gz.write(data)

    debref = pick(read(shared / "dev-debref.jsonl.zst"), {"en": 15, "zh": 15, "ja": 15}, 10**9)
    ref = debref + held_out
    table = pa.table({
        "text": [r["text"] for r in ref],
        "lang": [r["lang"] for r in ref],
        "meta": [json.dumps(row(r)["meta"], ensure_ascii=False) for r in ref],
    })
    pq.write_table(table, out / "reference-debref.parquet", compression="zstd", compression_level=19)

    # One record per CPython file, in the order of their Lib/ paths (the id order).
    code = pick(read(shared / "dev-code.jsonl.zst"), {"code": 50}, 30000)
    write_jsonl_zst(out / "code-cpython.jsonl.zst", code, code_row)

    counts = {"web": len(fortunes), "manuals": len(man), "books": len(kjv),
              "reference": len(ref), "code": len(code)}
    print(json.dumps(counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
