"""Tests for stages/mixture.py: per-source token budgets in whole documents."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest

from stages.base import Partitions, StageContext
from stages.mixture import Config, MixtureStage, plan_mixture, sample_source


def _docs() -> list[tuple[str, str, int]]:
    """(id, source, num_tokens): web 3300 tokens, books 1600, code 400."""
    docs = [(f"web:w.jsonl:{i}", "web", 10 + (i % 11)) for i in range(220)]  # 10..20
    docs += [(f"books:b.jsonl:{i}", "books", 30 + 5 * (i % 5)) for i in range(40)]  # 30..50
    docs += [(f"code:c.jsonl:{i}", "code", 8) for i in range(50)]
    return docs


def _partitions(tmp_path: Path, docs, splits: list[int], tag: str) -> Partitions:
    paths, bounds = [], [0, *splits, len(docs)]
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        part = docs[lo:hi]
        path = tmp_path / f"{tag}-{k}.parquet"
        pq.write_table(pa.table({
            "id": [d[0] for d in part],
            "source": [d[1] for d in part],
            "text": ["x"] * len(part),
            "tokenize_num_tokens": pa.array([d[2] for d in part], pa.int32()),
            "keep": [True] * len(part),
        }), path)
        paths.append(path)
    return Partitions(paths, mapper=lambda fn, items: [fn(i) for i in items])


def _repeats(stage: MixtureStage, partitions: Partitions) -> dict[str, int]:
    """Copies of every document, as the stage's ``process`` gives them."""
    out = {}
    for table in partitions.tables():
        done = stage.process(table)
        out.update(zip(done["id"].to_pylist(), done["mixture_repeats"].to_pylist()))
    return out


def _fit(tmp_path: Path, name: str, docs, splits, seed: int = 0, **config):
    ctx = StageContext(work_dir=tmp_path / name, cache_dir=tmp_path / "cache", seed=seed,
                       tools_dir=tmp_path)
    stage = MixtureStage(Config(**config), ctx)
    partitions = _partitions(tmp_path, docs, splits, name)
    facts = stage.fit(partitions).facts
    return stage, facts, _repeats(stage, partitions)


BUDGET = 3000
WEIGHTS = {"web": 0.5, "books": 0.3, "code": 0.2}  # web, books down; code up


def test_available_tokens_of_fixture():
    tokens = {}
    for _, source, n in _docs():
        tokens[source] = tokens.get(source, 0) + n
    assert tokens == {"web": 3300, "books": 1600, "code": 400}


def test_shares_up_and_down_sampling(tmp_path):
    docs = _docs()
    _, facts, repeats = _fit(tmp_path, "a", docs, [100], token_budget=BUDGET, weights=WEIGHTS)
    src = facts["per_source"]
    # web: 1500 of 3300 (ratio 0.45), books: 900 of 1600 (0.5625), code: 600 of 400 (1.5).
    assert {s: f["target_tokens"] for s, f in src.items()} == {
        "web": 1500, "books": 900, "code": 600}
    assert src["code"]["ratio"] == pytest.approx(1.5)
    assert src["web"]["ratio"] == pytest.approx(1500 / 3300)
    longest = {"web": 20, "books": 50, "code": 8}
    for source, f in src.items():
        # Whole documents: within half the longest document of the target.
        assert abs(f["realized_tokens"] - f["target_tokens"]) <= longest[source] / 2
        assert f["realized_share"] == pytest.approx(WEIGHTS[source], abs=0.01)
        realized = sum(n * repeats[i] for i, s, n in docs if s == source)
        assert realized == f["realized_tokens"]
    code = [repeats[i] for i, s, _ in docs if s == "code"]
    assert sorted(set(code)) == [1, 2] and code.count(2) == 25  # 200 extra tokens / 8
    assert src["code"]["epochs"] == pytest.approx(1.5)
    web = [repeats[i] for i, s, _ in docs if s == "web"]
    assert set(web) == {0, 1}
    assert src["web"]["sampled_documents"] == web.count(1)


def test_deterministic_and_order_independent(tmp_path):
    docs = _docs()
    _, facts_a, rep_a = _fit(tmp_path, "a", docs, [100], token_budget=BUDGET, weights=WEIGHTS)
    _, facts_b, rep_b = _fit(tmp_path, "b", docs, [100], token_budget=BUDGET, weights=WEIGHTS)
    shuffled = docs[:]
    random.Random(7).shuffle(shuffled)
    _, facts_c, rep_c = _fit(tmp_path, "c", shuffled, [13, 50, 200], token_budget=BUDGET,
                             weights=WEIGHTS)
    assert rep_a == rep_b == rep_c
    assert facts_a == facts_b == facts_c
    for name in ("plan.json", "extra.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()


def test_seed_changes_the_down_sampled_subset(tmp_path):
    docs = _docs()
    _, _, rep0 = _fit(tmp_path, "s0", docs, [], token_budget=BUDGET, weights=WEIGHTS)
    _, _, rep1 = _fit(tmp_path, "s1", docs, [], seed=1, token_budget=BUDGET, weights=WEIGHTS)
    assert rep0 != rep1


def test_process_drops_not_sampled(tmp_path):
    docs = _docs()
    stage, _, repeats = _fit(tmp_path, "p", docs, [], token_budget=BUDGET, weights=WEIGHTS)
    table = pq.read_table(tmp_path / "p-0.parquet").slice(0, 30)
    out = stage.process(table)
    ids = table["id"].to_pylist()
    assert out.schema.field("mixture_repeats").type == pa.int32()
    assert out["mixture_repeats"].to_pylist() == [repeats[i] for i in ids]
    assert out["reason"].to_pylist() == [
        None if repeats[i] else "mixture.not_sampled" for i in ids]
    assert 0 < out["keep"].to_pylist().count(False) < 30
    with pytest.raises(KeyError, match="not in plan.json"):
        stage.process(pa.table({"id": ["news:new:1"], "source": ["news"], "keep": [True]}))


def test_natural_mixture_keeps_everything_once(tmp_path):
    docs = _docs()
    _, facts, repeats = _fit(tmp_path, "n", docs, [7])
    assert set(repeats.values()) == {1}
    assert facts["realized_tokens"] == 5300
    assert facts["per_source"]["books"]["realized_share"] == pytest.approx(1600 / 5300)


def test_budget_without_weights_uses_natural_shares(tmp_path):
    _, facts, _ = _fit(tmp_path, "nb", _docs(), [], token_budget=10600)
    assert {s: f["target_tokens"] for s, f in facts["per_source"].items()} == {
        "web": 6600, "books": 3200, "code": 800}
    assert all(f["epochs"] == pytest.approx(2.0) for f in facts["per_source"].values())


def test_sample_source_hand_case():
    tokens = np.array([4, 4, 4, 4])
    order = np.array([3, 2, 1, 0])
    # 10 tokens: 2 docs fit (8); a 3rd gives 12, no closer (|12-10| == |8-10|).
    assert sample_source(tokens, order, 10).tolist() == [0, 0, 1, 1]
    assert sample_source(tokens, order, 11).tolist() == [0, 1, 1, 1]
    # 21 tokens: one full pass (16), remainder 5 -> one more doc (20).
    assert sample_source(tokens, order, 21).tolist() == [1, 1, 1, 2]
    assert sample_source(tokens, order, 0).tolist() == [0, 0, 0, 0]
    assert sample_source(np.zeros(0, np.int64), np.zeros(0, np.int64), 5).tolist() == []


def test_errors(tmp_path):
    docs = _docs()
    with pytest.raises(ValueError, match=r"\['code'\] have documents but no weight"):
        _fit(tmp_path, "e1", docs, [], token_budget=100, weights={"web": 1, "books": 1})
    with pytest.raises(ValueError, match=r"\['news'\] have a weight but no kept tokens"):
        _fit(tmp_path, "e2", docs, [], token_budget=100,
             weights={**WEIGHTS, "news": 1.0})
    with pytest.raises(ValueError, match="duplicate"):
        plan_mixture([d[0] for d in docs + docs[:1]], [d[1] for d in docs + docs[:1]],
                     np.array([d[2] for d in docs + docs[:1]]), Config(token_budget=100), seed=0)
    with pytest.raises(pydantic.ValidationError):
        Config(weights={"web": -1.0})
    with pytest.raises(pydantic.ValidationError):
        Config(token_budget=0)
    with pytest.raises(pydantic.ValidationError):
        Config(budget=10)


def test_first_fit_fills_the_remainder_past_a_long_document():
    # The long first document would overshoot 6 by 4; skipping it, 3 + 3 hits 6 exactly.
    assert sample_source(np.array([10, 3, 3]), np.array([0, 1, 2]), 6).tolist() == [0, 1, 1]
    # Nothing fits: the shortest document is added when that is closer (|7 - 5| < 5).
    assert sample_source(np.array([9, 7]), np.array([0, 1]), 5).tolist() == [0, 1]
    assert sample_source(np.array([9, 12]), np.array([0, 1]), 4).tolist() == [0, 0]


def test_max_epochs_caps_a_source_and_shares_its_excess(tmp_path):
    # code would need 1.5 epochs (600 of 400); capped at 1 epoch, its missing 200
    # tokens go to web and books in the ratio of their weights 0.5 : 0.3.
    _, facts, repeats = _fit(tmp_path, "cap", _docs(), [], token_budget=BUDGET, weights=WEIGHTS,
                             max_epochs={"code": 1.0})
    src = facts["per_source"]
    assert {s: f["target_tokens"] for s, f in src.items()} == {"web": 1625, "books": 975, "code": 400}
    assert {s: f["capped"] for s, f in src.items()} == {"web": False, "books": False, "code": True}
    assert set(repeats[i] for i, s, _ in _docs() if s == "code") == {1}
    assert src["code"]["configured_share"] == pytest.approx(0.2)
    assert src["code"]["target_share"] == pytest.approx(400 / 3000)
    assert facts["budget_shortfall_tokens"] == 0


def test_budget_shortfall_is_reported_when_every_source_is_capped(tmp_path):
    _, facts, _ = _fit(tmp_path, "short", _docs(), [], token_budget=20000, weights=WEIGHTS,
                       max_epochs={"web": 1, "books": 1, "code": 2})
    assert facts["realized_tokens"] == 3300 + 1600 + 800
    assert facts["budget_shortfall_tokens"] == 20000 - 5700
    with pytest.raises(ValueError, match="max_epochs for sources"):
        _fit(tmp_path, "bad", _docs(), [], token_budget=100, weights=WEIGHTS, max_epochs={"news": 1})
    with pytest.raises(pydantic.ValidationError):
        Config(max_epochs={"web": 0})


def test_three_sources_one_up_sampled_within_half_a_point_at_1m_tokens():
    """Realistic length spreads: many short web documents, long books (2k-30k
    tokens), code that must be repeated ~2.4 times. Each source's realized share
    is within 0.5 percentage points of its target at a 1M-token budget."""
    rng = np.random.default_rng(0)
    lengths = {
        "web": rng.lognormal(5.0, 1.0, 6000).astype(np.int64) + 2,     # ~250 tokens, long tail
        "books": rng.integers(2000, 30000, 120).astype(np.int64),     # ~1.9M tokens
        "code": rng.lognormal(5.5, 1.2, 300).astype(np.int64) + 2,    # ~0.15M tokens
    }
    ids, sources, tokens = [], [], []
    for source, values in lengths.items():
        ids += [f"{source}:f.jsonl:{i}" for i in range(len(values))]
        sources += [source] * len(values)
        tokens += values.tolist()
    weights = {"web": 0.3, "books": 0.2, "code": 0.5}
    config = Config(token_budget=1_000_000, weights=weights)
    repeats, facts = plan_mixture(ids, sources, np.array(tokens, np.int64), config, seed=11)
    available = {s: int(v.sum()) for s, v in lengths.items()}
    assert facts["code"]["ratio"] > 2 and facts["web"]["ratio"] < 1 and facts["books"]["ratio"] < 1
    for source, f in facts.items():
        assert f["target_share"] == pytest.approx(weights[source], abs=1e-6)
        assert abs(f["share_error_pp"]) < 0.5, (source, f)
        assert f["available_tokens"] == available[source]
    code = repeats[np.array(sources) == "code"]
    full = int(facts["code"]["ratio"])
    assert set(code.tolist()) == {full, full + 1}  # whole copies, plus one for a seeded subset
    assert sum(f["realized_tokens"] for f in facts.values()) == pytest.approx(1_000_000, rel=0.001)


@pytest.mark.parametrize("config", [
    dict(token_budget=BUDGET, weights=WEIGHTS),
    dict(token_budget=10600),
    dict(token_budget=BUDGET, weights=WEIGHTS, max_epochs={"code": 1.0}),
    dict(token_budget=777, weights={"web": 1, "books": 1, "code": 1}),
    dict(max_epochs={"web": 0.3}),
])
def test_range_by_range_fit_equals_the_in_memory_plan(tmp_path, monkeypatch, config):
    """The stage plans one hash range at a time (here ranges of ~7 documents,
    so the prefix ends mid-corpus and the fill crosses ranges) and gives the
    copies and facts of the in-memory reference ``plan_mixture``."""
    import stages.mixture as mixture

    rng = np.random.default_rng(5)
    docs = [(f"web:w:{i}", "web", int(rng.integers(2, 40))) for i in range(300)]
    docs += [(f"books:b:{i}", "books", int(rng.integers(50, 400))) for i in range(30)]
    docs += [(f"code:c:{i}", "code", int(rng.integers(2, 9))) for i in range(60)]
    expected, facts = plan_mixture([d[0] for d in docs], [d[1] for d in docs],
                                   np.array([d[2] for d in docs], np.int64), Config(**config), seed=3)
    monkeypatch.setattr(mixture, "RECORDS_PER_RANGE", 7)
    _, got_facts, repeats = _fit(tmp_path, "r", docs, [90, 200, 333], seed=3, **config)
    assert [repeats[d[0]] for d in docs] == expected.tolist()
    assert got_facts["per_source"] == facts
