"""A tiny version with all three output formats, written with numpy and
pipeline.writer, in the layout the ``formats`` part of issue 16 agreed on (so the
mindformers tests run before that writer lands):

* ``shards/corpus-NNNNN.mindrecord``: ``input_ids`` int32[S+1], ``actual_seq_len``;
* ``shifted/corpus-NNNNN.mindrecord``: ``input_ids``, ``labels``, ``loss_mask``,
  ``position_ids`` int32[S], ``actual_seq_len`` int32[eod_pad_length] (cumulative
  document ends, no leading 0, padded with S);
* ``megatron/corpus_text_document.bin/.idx``: the samples' S+1 tokens in sample order,
  one sequence per (sample, piece), EOD (eos 1) ending each document's last piece,
  document indices 0..n, uint16.

Documents are synthetic: ids 3..499 and eos 1 at each end, packed concat-split into
S+1 windows (no overlap), samples then permuted with a seeded generator.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from pipeline.writer import write_shards

EOS, PAD, BOS = 1, 0, 2


def _documents(num_docs: int, rng: np.random.Generator, max_len: int) -> list[np.ndarray]:
    docs = []
    for _ in range(num_docs):
        n = int(rng.integers(1, max_len))
        docs.append(np.concatenate([rng.integers(3, 500, n), [EOS]]).astype(np.int32))
    return docs


def make_version(root: Path, seq_length: int = 16, num_docs: int = 60, seed: int = 1234,
                 eod_pad_length: int = 8, max_doc_len: int = 40) -> dict:
    """Write the version under ``root`` (created); returns ``samples`` int32[n, S+1],
    ``pieces`` (list per sample of ``(doc, doc_start, length)``), ``manifest``."""
    rng = np.random.default_rng(seed)
    docs = _documents(num_docs, rng, max_doc_len)
    stream = np.concatenate(docs)
    width = seq_length + 1
    n = len(stream) // width
    doc_of = np.repeat(np.arange(num_docs), [len(d) for d in docs])
    pos_in = np.concatenate([np.arange(len(d)) for d in docs])
    order = rng.permutation(n)
    samples = np.stack([stream[i * width:(i + 1) * width] for i in order]).astype(np.int32)
    pieces = []
    for i in order:
        span = np.arange(i * width, (i + 1) * width)
        d = doc_of[span]
        cut = np.flatnonzero(np.diff(d)) + 1
        starts = np.concatenate([[0], cut])
        lengths = np.diff(np.concatenate([starts, [width]]))
        pieces.append([(int(d[s]), int(pos_in[span[s]]), int(k)) for s, k in zip(starts, lengths)])
    # document ends inside input_ids[:S] (pipeline.packing.document_boundaries' rule)
    ends = []
    for row in pieces:
        e = np.minimum(np.cumsum([k for _, _, k in row]), seq_length)
        ends.append(sorted(set(int(x) for x in e)))
    most = max(len(e) for e in ends)

    def padded(w):
        return np.array([e + [seq_length] * (w - len(e)) for e in ends], dtype=np.int32)

    root.mkdir(parents=True, exist_ok=True)
    shards = write_shards(samples, root, columns={"actual_seq_len": padded(most)})
    tmp = root / "tmp-shifted"
    inputs, labels = samples[:, :-1], samples[:, 1:]
    position = np.zeros_like(inputs)
    for r, e in enumerate(ends):
        start = 0
        for end in e:
            position[r, start:end] = np.arange(end - start)
            start = end
    shifted = write_shards(np.ascontiguousarray(inputs), tmp, columns={
        "labels": np.ascontiguousarray(labels), "loss_mask": (labels != PAD).astype(np.int32),
        "position_ids": position, "actual_seq_len": padded(eod_pad_length)})
    (tmp / "shards").rename(root / "shifted")
    tmp.rmdir()
    # megatron
    (root / "megatron").mkdir()
    lengths = np.array([k for row in pieces for _, _, k in row], dtype=np.int32)
    samples.astype(np.uint16).tofile(root / "megatron" / "corpus_text_document.bin")
    with open(root / "megatron" / "corpus_text_document.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1))
        f.write(lengths.tobytes())
        f.write(np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * 2)[:-1]]).astype(np.int64).tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    (root / "lineage").mkdir()
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(i, seg, f"doc{d}", int(start), int(start + k), int(at - k), int(at))
            for i, row in enumerate(pieces)
            for seg, (d, start, k, at) in enumerate((d, s, k, a) for (d, s, k), a in
                                                   zip(row, np.cumsum([k for _, _, k in row])))]
    names = ("sample_index", "segment", "doc_id", "doc_token_start", "doc_token_end", "sample_token_start",
             "sample_token_end")
    pq.write_table(pa.table({n: [r[j] for r in rows] for j, n in enumerate(names)}),
                   root / "lineage" / "part-00000.parquet", row_group_size=50)
    manifest = {
        "version": root.name, "seed": seed, "seq_length": seq_length, "num_samples": int(n),
        "columns": {"input_ids": [width], "actual_seq_len": [most]},
        "tokenizer": {"special_token_ids": {"pad": PAD, "eos": EOS, "bos": BOS}, "vocab_size": 512},
        "packing": {"boundaries_width": most, "method": "concat_split"},
        "shards": shards,
        "formats": {"mindrecord": {"files": [s["name"] for s in shards]},
                    "mindrecord_shifted": {"files": [s["name"].replace("shards/", "shifted/") for s in shifted],
                                           "eod_pad_length": eod_pad_length},
                    "megatron": {"files": ["megatron/corpus_text_document.bin",
                                           "megatron/corpus_text_document.idx"]}},
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return {"samples": samples, "pieces": pieces, "manifest": manifest, "documents": docs,
            "sequence_lengths": lengths}
