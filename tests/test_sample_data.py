"""The bundled sample (data/sample, see its README): the code source is data.

The CPython files of the ``code`` source are one JSONL file with their
provenance, read by the normal JSONL reader; the tree's only ``.py`` files are
the project's own.
"""

import hashlib
import json
import re
import sys
import sysconfig
import unicodedata
from pathlib import Path

import pytest
import yaml

from pipeline.config import REPO_ROOT, load_config
from pipeline.readers import Record, detect_format, read_file, resolve_paths

SAMPLE = REPO_ROOT / "data" / "sample"
CODE = SAMPLE / "code-cpython.jsonl.zst"


def _code_records() -> list[Record]:
    return list(read_file(CODE, "data/sample/code-cpython.jsonl.zst", "auto", "text", "file", 1 << 24))


def test_the_default_config_reads_the_code_sample_as_one_jsonl_file():
    cfg = load_config(REPO_ROOT / "configs" / "default.yaml")
    code = cfg.sources["code"]
    assert resolve_paths(code.paths, REPO_ROOT) == [str(CODE)]
    assert code.format == "auto" and detect_format(CODE) == "jsonl"
    assert code.lang == "code"


def test_the_data_directory_holds_no_python_source():
    assert sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "data").rglob("*.py")) == []


def test_code_sample_records_carry_their_provenance():
    records = _code_records()
    assert all(isinstance(r, Record) for r in records)
    # 50 files, 546,012 characters: the code source of the baseline build
    # (manifest stages.*.per_source.code), when it was read from data/sample/code/*.py.
    assert [r.line for r in records] == list(range(1, 51))
    assert sum(len(r.text) for r in records) == 546_012
    assert sum(r.nul_chars for r in records) == 0
    metas = [json.loads(r.meta)["meta"] for r in records]
    paths = [m["path"] for m in metas]
    assert paths[0] == "Lib/_compat_pickle.py" and paths[-1] == "Lib/xdrlib.py"
    assert paths == sorted(set(paths)) and all(p.startswith("Lib/") and p.endswith(".py") for p in paths)
    for record, meta in zip(records, metas):
        assert {k: meta[k] for k in ("package", "version", "licence", "language", "label_lang")} == {
            "package": "cpython", "version": "3.11.7", "licence": "PSF-2.0", "language": "python",
            "label_lang": "code"}, meta["path"]
        assert meta["orig_id"] == f"code:cpython-3.11.7:{meta['path']}"
        assert meta["sha256"] == hashlib.sha256(record.text.encode("utf-8")).hexdigest(), meta["path"]
    by_path = dict(zip(paths, metas))
    # sha256sum of the former data/sample/code/asyncio__queues.py (git show 8282195:...)
    assert by_path["Lib/asyncio/queues.py"]["sha256"] == (
        "8f020744ebd1f557dcb051a1530b504447660df906c2127a94bbcc8450ea7ef9")


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7) or sys.implementation.name != "cpython",
                    reason="needs CPython 3.11.7's own Lib/ to compare with")
def test_code_sample_texts_are_the_cpython_3_11_7_files_byte_for_byte():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for record in _code_records():
        meta = json.loads(record.meta)["meta"]
        original = (stdlib / meta["path"].removeprefix("Lib/")).read_bytes()
        assert record.text.encode("utf-8") == original, meta["path"]
        assert hashlib.sha256(original).hexdigest() == meta["sha256"]


# --- forum-posts.jsonl: posts written by the project that quote eval items (issue 17) ---

FORUM = SAMPLE / "forum-posts.jsonl"
EVALSETS = REPO_ROOT / "data" / "evalsets"


def _forum_records() -> list[Record]:
    return list(read_file(FORUM, "data/sample/forum-posts.jsonl", "auto", "text", "file", 1 << 24))


def _eval_items(name: str, directory: Path = EVALSETS, suffix: str = "") -> dict[str, dict]:
    with open(directory / f"{name}{suffix}.jsonl", encoding="utf-8") as fh:
        return {item["id"]: item for item in map(json.loads, fh)}


def _squash(text: str) -> str:
    return " ".join(text.split())


def _alnum(text: str) -> str:
    """NFKC, lower case, letters and digits only: what the variants keep."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).lower() if c.isalnum())


def _resident_id_valid(number: str) -> bool:
    """ISO 7064 MOD 11-2 check character of an 18-character resident ID (GB 11643-1999)."""
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return "10X98765432"[sum(int(d) * w for d, w in zip(number, weights)) % 11] == number[17]


def _luhn_valid(number: str) -> bool:
    digits = [int(d) for d in number if d.isdigit()][::-1]
    return sum(d if i % 2 == 0 else (2 * d - 9 if d > 4 else 2 * d) for i, d in enumerate(digits)) % 10 == 0


def test_the_default_config_reads_the_forum_posts_in_the_web_source():
    # Read as YAML: the config's decontaminate section needs the decontaminate stage.
    with open(REPO_ROOT / "configs" / "default.yaml", encoding="utf-8") as fh:
        web = yaml.safe_load(fh)["sources"]["web"]
    assert sorted(resolve_paths(web["paths"], REPO_ROOT)) == [str(FORUM), str(SAMPLE / "web-fortunes.jsonl.zst")]
    assert detect_format(FORUM) == "jsonl"


def test_forum_posts_answer_key_matches_the_eval_sets():
    records = _forum_records()
    metas = [json.loads(r.meta)["meta"] for r in records]
    assert len(records) == 20
    assert [m["orig_id"] for m in metas] == [f"forum:{n:02d}" for n in range(1, 21)]
    assert sum(m["label_lang"] == "zh" for m in metas) == 12
    assert all(m["licence"] == "CC0-1.0" for m in metas)
    evalsets = {name: _eval_items(name) for name in ("gsm8k", "humaneval", "gaokao_mcq")}
    variants = {}
    for record, meta in zip(records, metas):
        for entry in meta["planted"]:
            item = evalsets[entry["eval_set"]][entry["item"]]  # the planted id exists
            variants[entry["variant"]] = variants.get(entry["variant"], 0) + 1
            for field, quote in zip(entry["fields"], entry["quotes"], strict=True):
                assert quote in record.text, entry["item"]
                if entry["variant"] == "verbatim":
                    assert _squash(item[field]) in _squash(record.text)
                elif entry["variant"] == "one_word_changed":
                    edit = entry["edit"]
                    assert quote == item[field].replace(edit["from"], edit["to"], 1).strip()
                    assert _squash(item[field]) not in _squash(record.text)
                else:  # reformatted, partial, punctuation: the same letters and digits
                    assert _alnum(quote) in _alnum(item[field]), entry["item"]
                    if entry["variant"] != "partial":
                        assert _squash(item[field]) not in _squash(record.text), entry["item"]
    assert variants == {"verbatim": 7, "one_word_changed": 2, "reformatted": 2, "partial": 2,
                        "fullwidth_punctuation": 1, "halfwidth_punctuation": 1}


def test_forum_posts_without_planted_items_quote_nothing_of_the_eval_sets():
    """The 6 posts with an empty ``planted`` share no window with any bundled item:
    no 13 characters for zh (NFKC, lower case, letters and digits only), no 8 words
    for en (lower case, letters and digits); 13 characters of English are two or
    three words ("how much money d"), which these posts share on purpose.
    forum:19 quotes an item that is only in the benchmark's negatives."""

    def grams(text, lang):
        text = unicodedata.normalize("NFKC", text).lower()
        if lang == "zh":
            t = "".join(c for c in text if c.isalnum())
            return {t[i:i + 13] for i in range(len(t) - 12)}
        words = re.findall(r"[a-z0-9]+", text)
        return {" ".join(words[i:i + 8]) for i in range(len(words) - 7)}

    bundle = {"zh": set(), "en": set()}
    for name, fields in (("gsm8k", ("question", "answer")), ("humaneval", ("prompt", "canonical_solution")),
                         ("gaokao_mcq", ("question",))):
        for item in _eval_items(name).values():
            for lang in bundle:
                bundle[lang] |= grams(" ".join(item[f] for f in fields), lang)
    clean = [(r, json.loads(r.meta)["meta"]) for r in _forum_records()]
    clean = [(r, m) for r, m in clean if not m["planted"]]
    assert [m["orig_id"] for _, m in clean] == ["forum:15", "forum:16", "forum:17", "forum:18", "forum:19", "forum:20"]
    for record, meta in clean:
        lang = meta["label_lang"]
        assert not grams(record.text, lang) & bundle[lang], meta["orig_id"]
    unindexed = clean[4][1]["unindexed"]
    assert [(u["eval_set"], u["item"]) for u in unindexed] == [("gaokao_mcq", "Biology-16")]
    negative = _eval_items("gaokao_mcq", REPO_ROOT / "bench" / "data" / "decontam", "_negatives")["Biology-16"]
    assert _squash(negative["question"]) in _squash(clean[4][0].text)
    # Common phrases of the style are there on purpose.
    assert "下列说法正确的是" in clean[0][0].text and "Janet has" in clean[1][0].text


def test_forum_posts_personal_data_key():
    pii = [(r.text, p) for r in _forum_records() for p in json.loads(r.meta)["meta"]["pii"]]
    assert sorted((p["type"], p["expect"]) for _, p in pii) == [
        ("bank_card", "replaced"), ("bank_card", "replaced"), ("cn_resident_id", "kept"),
        ("cn_resident_id", "replaced"), ("cn_resident_id", "replaced"),
        ("email", "kept"), ("email", "kept"), ("email", "kept"), ("email", "replaced"),
        ("ip", "kept"), ("ip", "kept"), ("ip", "replaced"), ("ip", "replaced"),
        ("phone", "replaced"), ("phone", "replaced"), ("phone", "replaced"), ("phone", "replaced"),
        ("phone", "replaced")]
    for text, p in pii:
        assert p["value"] in text
        if p["type"] == "cn_resident_id":
            assert _resident_id_valid(p["value"]) == (p["expect"] == "replaced"), p["value"]
        if p["type"] == "bank_card":
            assert _luhn_valid(p["value"]) and p["value"].startswith("62")
