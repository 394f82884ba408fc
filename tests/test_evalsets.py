"""The bundled eval sets (data/evalsets, see its README) and the decontamination
benchmark's negatives (bench/data/decontam): counts, ids, fields, disjointness."""

import json
import re
import unicodedata

import pytest
import yaml

from pipeline.config import REPO_ROOT

EVALSETS = REPO_ROOT / "data" / "evalsets"
NEGATIVES = REPO_ROOT / "bench" / "data" / "decontam"
#: name -> (bundled, negatives, text fields): the counts data/evalsets/README.md states.
SETS = {
    "gsm8k": (150, 150, ["question", "answer"]),
    "humaneval": (124, 36, ["prompt", "canonical_solution"]),
    "gaokao_mcq": (150, 150, ["question", "answer"]),
}


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _grams(text, n=13):
    t = "".join(c for c in unicodedata.normalize("NFKC", text).lower() if c.isalnum())
    return {t[i:i + n] for i in range(max(1, len(t) - n + 1))}


@pytest.mark.parametrize("name", sorted(SETS))
def test_eval_set_files_hold_the_stated_items_with_stable_ids(name):
    bundled, negatives, fields = SETS[name]
    items = _read(EVALSETS / f"{name}.jsonl")
    others = _read(NEGATIVES / f"{name}_negatives.jsonl")
    assert (len(items), len(others)) == (bundled, negatives)
    for item in items + others:
        assert isinstance(item["id"], str) and not re.search(r"[:,/\s]", item["id"]), item["id"]
        assert all(isinstance(item[f], str) and item[f].strip() for f in fields), item["id"]
    ids = [item["id"] for item in items]
    assert len(set(ids)) == len(ids)
    # Disjoint: no negative is a bundled item, nor shares more than 30% of its 13-grams with them.
    bundle_grams = set().union(*(_grams(" ".join(item[f] for f in fields)) for item in items))
    for item in others:
        assert item["id"] not in set(ids)
        g = _grams(" ".join(item[f] for f in fields))
        assert len(g & bundle_grams) <= 0.3 * len(g), item["id"]


def test_eval_set_items_are_the_source_items():
    gsm8k = {item["id"]: item for item in _read(EVALSETS / "gsm8k.jsonl")}
    # grade_school_math/data/test.jsonl line 830 (0-based 829), verbatim.
    assert gsm8k["829"]["question"].startswith("Boris owns a chocolate factory. He produces 50,000 bars")
    assert gsm8k["829"]["answer"].endswith("\n#### 14,000")
    humaneval = {item["id"]: item for item in _read(EVALSETS / "humaneval.jsonl")}
    assert humaneval["HumanEval_0"]["task_id"] == "HumanEval/0"
    assert humaneval["HumanEval_0"]["entry_point"] == "has_close_elements"
    assert "HumanEval_61" not in humaneval  # a near-duplicate of HumanEval/56, skipped
    gaokao = {item["id"]: item for item in _read(EVALSETS / "gaokao_mcq.jsonl")}
    assert gaokao["History-5"]["answer"] == "C" and gaokao["History-5"]["year"] == "2010"
    assert "决定性因素" in gaokao["History-5"]["question"]


def test_gaokao_items_are_chinese_text_questions_without_figures():
    items = _read(EVALSETS / "gaokao_mcq.jsonl") + _read(NEGATIVES / "gaokao_mcq_negatives.jsonl")
    subjects = {}
    for item in items:
        question = item["question"]
        assert 20 <= len("".join(question.split())) and len(question) <= 800, item["id"]
        assert not re.search(r"如图|下图|图中|图示|!\[", question), item["id"]
        assert re.fullmatch(r"[A-D]+(,[A-D]+)*", item["answer"]), item["id"]
        assert "A．" in question or "A." in question, item["id"]
        subjects[item["subject"]] = subjects.get(item["subject"], 0) + 1
    assert subjects["History"] == 50 and subjects["Math_I"] + subjects["Math_II"] == 50


def test_the_default_config_names_the_bundled_eval_sets():
    # Read as YAML: the decontaminate section is validated by the stage's own Config.
    with open(REPO_ROOT / "configs" / "default.yaml", encoding="utf-8") as fh:
        section = yaml.safe_load(fh)["decontaminate"]["eval_sets"]
    assert sorted(section) == sorted(SETS)
    for name, spec in section.items():
        assert spec["path"] == f"data/evalsets/{name}.jsonl" and spec["id_field"] == "id"
        assert spec["fields"] == SETS[name][2]


def test_licences_and_readme_cover_every_file():
    readme = (EVALSETS / "README.md").read_text(encoding="utf-8")
    for name in SETS:
        assert f"`{name}.jsonl`" in readme
    licences = sorted(p.name for p in (EVALSETS / "LICENSES").iterdir())
    assert licences == ["GAOKAO-Bench.Apache-2.0.txt", "grade-school-math.MIT.txt", "human-eval.MIT.txt"]
    assert "Apache License" in (EVALSETS / "LICENSES" / "GAOKAO-Bench.Apache-2.0.txt").read_text()
