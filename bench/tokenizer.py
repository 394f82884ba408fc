"""Tokenizer benchmark: BPE training time and peak memory, encoding speed.

    .venv/bin/python -m bench.tokenizer [--train-mb 100] [--vocab-size 32768] [--out bench-results]

* training: ``--train-mb`` MB of UTF-8 text from ``../shared/corpus`` (its
  documents in a seeded shuffle, repeated when the corpus is smaller), trained with
  the pipeline's defaults except ``vocab_size``, in a child process: wall
  seconds, CPU seconds and the child's peak RSS;
* encoding: the whole corpus (one pass) encoded with ``tokenizers``
  (``RAYON_NUM_THREADS=1``) and with the tiktoken encoder the stage uses, 1 and
  2 threads: tokens/s per core (tokens / CPU seconds) and wall tokens/s.

Skips (returns a note) when ``../shared/corpus`` is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.config import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared" / "corpus"

_CHILD = r"""
import io, json, resource, sys, time, zstandard
from pathlib import Path
mode, corpus, arg, tok_path = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
texts = []
for f in sorted(corpus.glob("dev-*.jsonl.zst")):
    with open(f, "rb") as fh:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"):
            texts.append(json.loads(line)["text"])
from stages.tokenize import Config, HFEncoder, TiktokenEncoder, train_bpe
from tokenizers import Tokenizer
if mode == "train":
    import random
    random.Random(0).shuffle(texts)  # every source and language in any prefix
    budget, sample, used = arg * 1_000_000, [], 0
    while used < budget:
        for t in texts:
            n = len(t.encode("utf-8"))
            if used + n > budget:
                break
            sample.append(t); used += n
        else:
            continue
        break
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w, c = time.perf_counter(), time.process_time()
    tok = train_bpe(iter(sample), Config(vocab_size=int(sys.argv[5]), train_max_chars=10**12))
    out = {"bytes": used, "chars": sum(map(len, sample)), "wall_s": time.perf_counter() - w,
           "cpu_s": time.process_time() - c, "vocab_size": tok.get_vocab_size(),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rss_before_training_mb": rss0 / 1024}
    tok.save(tok_path)
else:
    tok = Tokenizer.from_file(tok_path)
    enc = HFEncoder(tok) if mode == "tokenizers" else TiktokenEncoder(tok, threads=arg)
    w, c = time.perf_counter(), time.process_time()
    ids = enc.encode_batch(texts)
    cpu, wall = time.process_time() - c, time.perf_counter() - w
    n = sum(map(len, ids))
    out = {"encoder": mode, "threads": arg, "tokens": n, "chars": sum(map(len, texts)),
           "cpu_s": cpu, "wall_s": wall, "tokens_per_cpu_s": n / cpu, "tokens_per_wall_s": n / wall}
print(json.dumps(out))
"""


def _child(*args: str, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, **(env or {})}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(out_dir: Path, train_mb: int = 100, vocab_size: int = 32768, corpus: Path = SHARED,
        tokenizer: Path | None = None) -> str:
    """Run the benchmark; write ``out_dir/tokenizer.json`` (results) and return
    a Markdown section. ``train_mb=0`` skips training and encodes with
    ``tokenizer`` (a ``tokenizer.json`` of this stage's shape)."""
    if not corpus.is_dir():
        return "## Tokenizer\n\nskipped: no development corpus at ../shared/corpus\n"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_path = str(tokenizer or out_dir / f"bench-tokenizer-{vocab_size}.json")
    train = _child("train", str(corpus), str(train_mb), tok_path, str(vocab_size)) if train_mb else None
    rows = [_child("tokenizers", str(corpus), "1", tok_path, env={"RAYON_NUM_THREADS": "1"}),
            _child("tiktoken", str(corpus), "1", tok_path),
            _child("tiktoken", str(corpus), "2", tok_path)]
    (out_dir / "tokenizer.json").write_text(json.dumps({"train": train, "encode": rows}, indent=1))
    lines = ["## Tokenizer", ""]
    if train:
        lines += [f"Training ({train['bytes'] / 1e6:.0f} MB, {train['chars']:,} characters, vocab "
             f"{train['vocab_size']:,}): {train['wall_s']:.0f} s wall, {train['cpu_s']:.0f} s CPU, "
             f"peak RSS {train['peak_rss_mb']:.0f} MB ({train['rss_before_training_mb']:.0f} MB "
             "before training: the text held in memory).", ""]
    lines += [f"Encoding the whole corpus once with `{Path(tok_path).name}`:", "",
             "| encoder | threads | tokens | tokens/s per core (CPU) | tokens/s (wall) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['encoder']} | {r['threads']} | {r['tokens']:,} | "
                     f"{r['tokens_per_cpu_s'] / 1e6:.2f} M | {r['tokens_per_wall_s'] / 1e6:.2f} M |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-mb", type=int, default=100)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="with --train-mb 0: encode with this tokenizer.json")
    a = parser.parse_args()
    print(run(a.out, a.train_mb, a.vocab_size, tokenizer=a.tokenizer))
