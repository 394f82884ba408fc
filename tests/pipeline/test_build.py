"""Tests for pipeline/build.py: stage fingerprints follow the code and the
effective settings, so a resume never publishes stale stage outputs."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import layout
from pipeline.build import build
from stages.text import words

# Sixteen distinct English sentences of 7..27 words (stages.text.words):
# every one passes langid (en) and the shipped heuristics.
DOCS = [
    "Rivers carry melted snow toward distant oceans.",
    "Careful gardeners water their tomatoes before sunrise.",
    "Modern libraries lend laptops, cameras and musical instruments.",
    "The orchestra rehearsed the final movement three times yesterday.",
    "Volunteers repaired the wooden bridge after the spring flood damaged it.",
    "Our neighbours planted apple trees along the fence behind their house last autumn.",
    "The museum opened a new gallery where visitors can touch replicas of ancient tools and pottery.",
    "Engineers tested the prototype engine in cold weather to see whether it would start reliably every morning.",
    "During the long winter evenings the family gathered around the kitchen table to play cards and tell "
    "stories about travels.",
    "Students who practise speaking a foreign language with native speakers usually improve their "
    "pronunciation much faster than those who only read textbooks.",
    "The baker explained that good bread needs patience, because the dough must rest for several hours "
    "before it is shaped and placed in the oven.",
    "After the storm passed, fishermen inspected their boats in the harbour, counted the broken nets, and "
    "decided to wait another day before sailing again.",
    "Scientists studying migrating birds attach tiny lightweight trackers to their legs, which record the "
    "routes they follow across mountains, deserts and open water.",
    "The city council approved a plan to convert an abandoned railway line into a park with cycling paths, "
    "benches, flower beds and a small outdoor theatre.",
    "Hikers climbing the northern trail should carry enough water, a warm jacket and a map, since the "
    "weather near the summit can change suddenly even in summer.",
    "When the old lighthouse keeper retired, the villagers organised a celebration on the beach, with "
    "music, grilled fish and speeches thanking him for decades of careful service.",
]


def _events_of_last_run(version_dir) -> list[dict]:
    events = [json.loads(line) for line in (version_dir / layout.RUN_LOG).read_text().splitlines()]
    last = max(i for i, e in enumerate(events) if e["event"] == "build_start")
    return events[last:]


def test_a_preset_change_between_a_crash_and_its_resume_reruns_heuristics_and_after(tmp_path, monkeypatch):
    """A build dies in dedup (after heuristics finished); the en preset's
    min_words goes from 5 to 12; the resumed build reuses langid, re-runs
    heuristics and every stage after it, drops exactly the five en documents
    of fewer than 12 words, and records the thresholds it applied."""
    import stages.dedup
    from stages import heuristics

    data = tmp_path / "web.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS), encoding="utf-8")
    cfg = {"sources": {"web": {"paths": [str(data)]}}, "executor": {"num_workers": 1},
           "perplexity": {"enabled": False, "reference_source": "web"}, "tokenize": {"vocab_size": 300}, "output": {"seq_length": 32}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    corpora = tmp_path / "corpora"

    real = stages.dedup.DedupStage.process

    def crash(self, table):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(stages.dedup.DedupStage, "process", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        build("p1", tmp_path / "p.yaml", corpora, log=lambda m: None)
    monkeypatch.setattr(stages.dedup.DedupStage, "process", real)
    work = corpora / ".work" / "p1"
    heur_state = json.loads((work / "heuristics" / "_STATE.json").read_text())
    assert heur_state["done"] and heur_state["report"]["totals"]["dropped"] == {}
    assert heur_state["report"]["settings"]["thresholds"]["en"]["min_words"] == 5
    langid_layers = {p.name: p.stat().st_mtime_ns for p in (work / "langid").glob("part-*.parquet")}
    assert langid_layers

    stricter = heuristics.PRESETS["en"].model_copy(update={"min_words": 12})
    monkeypatch.setitem(heuristics.PRESETS, "en", stricter)
    resumed = build("p1", tmp_path / "p.yaml", corpora, log=lambda m: None)

    events = _events_of_last_run(resumed.version_dir)
    assert [e["stage"] for e in events if e["event"] == "stage_reused"] == ["langid"]
    assert [e["stage"] for e in events if e["event"] == "stage_start"] == ["heuristics", "dedup", "pii",
                                                                             "tokenize", "mixture"]
    assert {p.name: p.stat().st_mtime_ns for p in (work / "langid").glob("part-*.parquet")} == langid_layers

    m = resumed.manifest
    short = [i for i, t in enumerate(DOCS) if len(words(t, "en")) < 12]
    assert short == [0, 1, 2, 3, 4]
    assert m["stages"]["heuristics"]["totals"]["dropped"] == {"heuristics.min_words": 5}
    assert m["accounting"]["kept"] == 11 and m["accounting"]["dropped_by_reason"] == {"heuristics.min_words": 5}
    kept = sorted(pq.read_table(resumed.version_dir / layout.DOCUMENTS, columns=["id"])["id"].to_pylist())
    data_name = m["inputs"][0]["file"]
    assert kept == sorted(f"web:{data_name}:{i + 1}" for i in range(len(DOCS)) if i not in short)
    dropped = pq.read_table(resumed.version_dir / layout.DECISIONS / "heuristics", columns=["id", "reason"])
    assert sorted(dropped["id"].to_pylist()) == sorted(f"web:{data_name}:{i + 1}" for i in short)
    assert set(dropped["reason"].to_pylist()) == {"heuristics.min_words"}

    # the manifest records the thresholds applied, per language
    thresholds = m["stages"]["heuristics"]["settings"]["thresholds"]
    assert thresholds["en"]["min_words"] == 12
    # zh is sized by characters (rjieba keeps classical lines whole): no min_words
    assert (thresholds["zh"]["min_chars"], thresholds["zh"].get("min_words")) == (10, None)
    assert thresholds["default"]["min_words"] == 5
    # the codes langid applied (none given: every language, no per-language score)
    assert m["stages"]["langid"]["settings"] == {"allowed_languages": None, "min_score_by_lang": {}}
    # and the code that made each phase
    assert list(m["code"]) == ["ingest", "langid", "heuristics", "dedup", "pii", "tokenize", "mixture",
                               "assemble"]
    assert {"stages/heuristics/stage.py", "stages/heuristics/presets.py"} <= set(m["code"]["heuristics"]["sources"])
    assert not any(p.startswith("stages/heuristics/") for p in m["code"]["langid"]["sources"])
    assert "pipeline/readers.py" in m["code"]["ingest"]["sources"]
    assert all(len(c["digest"]) == 16 for c in m["code"].values())
