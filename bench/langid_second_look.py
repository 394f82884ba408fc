"""What the langid stage's second look (line-by-line reading of unsure chunks) changes.

Runs the langid stage (default config, every language allowed) twice over
the prose of ``../shared/corpus`` and the ``dev`` part of
``../shared/corpus-multi`` (never the held-out part): with the second look
off (``SECOND_LOOK_BELOW = 0``) and on (the default). Checks that no
document's language changes, counts ``langid.low_score`` both ways and the
documents whose ``langid_mix`` changed, then runs the heuristics and
perplexity stages (default config; perplexity models trained on the
corpus's Debian Reference) on the documents the second look lifted over
``min_score``, and prints what became of them, by source and reason, with
the kept fortunes and screen dumps in full (the kinds that may be junk).

    PYTHONPATH=$PWD .venv/bin/python -m bench.langid_second_look [--accept 0.6]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench.multi_split import records as multi_records
from bench.quality import CORPUS, _run_stage, load_corpus
from pipeline.config import REPO_ROOT
from stages import heuristics, langid, perplexity
from stages.base import Partitions, StageContext


def _run(stage, table: pa.Table) -> pa.Table:
    """The stage's output, run partition by partition as bench.quality does."""
    return _run_stage(stage, table)[0]


def _table() -> pa.Table:
    table = load_corpus(CORPUS)
    table = table.filter(pc.is_null(table["lang_hint"]))
    rows = [{"id": r["id"], "source": "multi-" + r["source"], "file": "multi", "line": i, "text": r["text"],
             "meta": "{}", "lang_hint": None, "chars": len(r["text"]), "label": r["lang"]}
            for i, r in enumerate(multi_records("dev"))]
    return pa.concat_tables([table, pa.Table.from_pylist(rows).cast(table.schema)])


def run(accept: float) -> None:
    default = yaml.safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    table = _table()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ctx = StageContext(work_dir=work, cache_dir=work / "cache", seed=0, tools_dir=REPO_ROOT / "tools" / "bin")
        stage = langid.LangIdStage(langid.Config(**dict(default["langid"], allowed_languages=None)), ctx)
        below = langid.SECOND_LOOK_BELOW
        langid.SECOND_LOOK_BELOW = 0.0
        off = _run(stage, table)
        langid.SECOND_LOOK_BELOW, langid.SECOND_LOOK_ACCEPT = below, accept
        on = _run(stage, table)
        same = off["langid_lang"].to_pylist() == on["langid_lang"].to_pylist()
        before, after = off["reason"].to_pylist(), on["reason"].to_pylist()
        lifted = [i for i, (a, b) in enumerate(zip(before, after)) if a == "langid.low_score" and b is None]
        mixes = sum(a != b for a, b in zip(off["langid_mix"].to_pylist(), on["langid_mix"].to_pylist()))
        print(f"{table.num_rows:,} documents; languages unchanged: {same}; langid.low_score "
              f"{before.count('langid.low_score'):,} -> {after.count('langid.low_score'):,}; lifted {len(lifted)}; "
              f"newly dropped {sum(a is None and b is not None for a, b in zip(before, after))}; "
              f"langid_mix changed for {mixes:,}")
        heur = heuristics.HeuristicsStage(heuristics.Config(**default.get("heuristics", {})), ctx)
        h = _run(heur, on.filter(on["keep"]))
        path = work / "heuristics.parquet"
        pq.write_table(h.select([c for c in h.column_names if c != "label"]), path)
        ppl = perplexity.PerplexityStage(perplexity.Config(**{**default["perplexity"], "reference_source": "debref",
                                                              "require_models": []}), ctx)
        ppl.fit(Partitions([path], lambda fn, items: [fn(i) for i in items]))
        ids = set(on["id"].take(pa.array(lifted, pa.int64())).to_pylist())
        h = h.filter(pa.array([i in ids for i in h["id"].to_pylist()]))
        p = _run(ppl, h.filter(h["keep"]))
        reason = dict(zip(h["id"].to_pylist(), h["reason"].to_pylist()))
        reason.update((i, r) for i, r in zip(p["id"].to_pylist(), p["reason"].to_pylist()) if r is not None)
        outcome: Counter = Counter()
        for row in on.take(pa.array(lifted, pa.int64())).to_pylist():
            r = reason.get(row["id"])
            outcome[(row["source"], r or "kept")] += 1
            if r is None and (row["source"] == "fortunes" or "ld-idm" in row["id"]):
                print(f"  kept: {row['source']} {row['langid_lang']} {row['langid_score']:.2f} {row['text'][:110]!r}")
        print("\n| source | outcome | documents |\n|---|---|---:|")
        for (src, r), n in sorted(outcome.items()):
            print(f"| {src} | {r} | {n} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accept", type=float, default=langid.SECOND_LOOK_ACCEPT)
    run(ap.parse_args().accept)


if __name__ == "__main__":
    main()
