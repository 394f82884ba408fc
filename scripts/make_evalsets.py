"""Make the bundled eval sets (data/evalsets/) and the decontamination benchmark's
negatives (bench/data/decontam/) from public benchmark repositories.

Deterministic: items are ranked by the sha256 of ``"<eval set>:<item id>"`` and
taken greedily in that order; an item whose normalised character 13-grams are
more than half covered by the items already taken (GAOKAO's Math I and Math II
papers share most questions) is skipped, so no two items of the bundle, and no
negative and bundled item, are near-duplicates; a negative must moreover have at
most 30% of its 13-grams in the items taken before. The bundle takes the first
items, the negatives the next ones: the two are disjoint by construction.

Inputs are git directories (no work tree needed), read at their HEAD commit:

    .venv/bin/python scripts/make_evalsets.py \\
        --gsm8k /work/.mirror/openai+grade-school-math/repo \\
        --humaneval /work/.mirror/openai+human-eval/repo \\
        --gaokao /work/.mirror/OpenLMLab+GAOKAO-Bench/repo

See data/evalsets/README.md for the origin, licences, choice and fields.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import unicodedata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Items per eval set: (bundled, benchmark negatives).
GSM8K_COUNTS = (150, 150)
HUMANEVAL_COUNTS = (124, 36)
#: GAOKAO subjects (file name part) -> (bundled, negatives). Math I and Math II are one
#: pool (their papers share most questions; the near-duplicate check keeps one of a pair).
GAOKAO_QUOTAS = {
    "Biology": (20, 20),
    "Chemistry": (15, 15),
    "Chinese_Lang_and_Usage": (15, 15),
    "Geography": (10, 10),
    "History": (25, 25),
    "Math": (25, 25),
    "Physics": (15, 15),
    "Political_Science": (25, 25),
}
GAOKAO_FILES = {
    "Biology": ["2010-2022_Biology_MCQs.json"],
    "Chemistry": ["2010-2022_Chemistry_MCQs.json"],
    "Chinese_Lang_and_Usage": ["2010-2022_Chinese_Lang_and_Usage_MCQs.json"],
    "Geography": ["2010-2022_Geography_MCQs.json"],
    "History": ["2010-2022_History_MCQs.json"],
    "Math": ["2010-2022_Math_I_MCQs.json", "2010-2022_Math_II_MCQs.json"],
    "Physics": ["2010-2022_Physics_MCQs.json"],
    "Political_Science": ["2010-2022_Political_Science_MCQs.json"],
}
#: GAOKAO items are dropped when shorter than this (characters, whitespace stripped) ...
GAOKAO_MIN_CHARS = 20
#: ... longer than this (keeps data/ small: reading passages run to 2,000+ characters) ...
GAOKAO_MAX_CHARS = 800
#: ... or when they refer to a figure the text does not carry (the source dropped images).
FIGURE_REFERENCE = re.compile(r"如图|下图|图中|图示|右图|左图|上图|!\[|<img|\.png|\.jpg")
#: Near-duplicate check: normalised character n-gram length and the share of an item's
#: n-grams already present that makes it a near-duplicate.
NGRAM = 13
NEAR_DUPLICATE_SHARE = 0.5
#: A negative must be further from the bundle: at most this share of its n-grams in it
#: (shared boilerplate such as ``from typing import List`` or option layouts stays possible).
NEGATIVE_MAX_SHARE = 0.3


def git_show(git_dir: Path, path: str) -> bytes:
    """The bytes of ``path`` at HEAD of the git directory ``git_dir``; CalledProcessError if absent."""
    return subprocess.run(["git", "-C", str(git_dir), "show", f"HEAD:{path}"],
                          check=True, capture_output=True).stdout


def git_head(git_dir: Path) -> str:
    """The 40-hex commit of HEAD, for the README's provenance."""
    return subprocess.run(["git", "-C", str(git_dir), "rev-parse", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()


def rank(eval_set: str, item_id: str) -> str:
    """The order of the choice: hex sha256 of ``"<eval set>:<item id>"``."""
    return hashlib.sha256(f"{eval_set}:{item_id}".encode()).hexdigest()


def normalise(text: str) -> str:
    """NFKC, lower case, letters and digits only (CJK kept, whitespace and punctuation gone)."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).lower() if c.isalnum())


def grams(text: str) -> set[str]:
    """The normalised character ``NGRAM``-grams of ``text`` (the whole text when shorter)."""
    t = normalise(text)
    return {t[i:i + NGRAM] for i in range(max(1, len(t) - NGRAM + 1))}


def take(items: list[dict], eval_set: str, counts: tuple[int, int], text_of, seen: set[str]):
    """Greedy choice in sha256 order: (bundled, negatives), skipping near-duplicates of
    anything taken before (``seen`` is updated with the n-grams of every item taken)."""
    chosen: list[list[dict]] = [[], []]
    for item in sorted(items, key=lambda it: rank(eval_set, it["id"])):
        part = 0 if len(chosen[0]) < counts[0] else 1
        if len(chosen[1]) >= counts[1]:
            break
        g = grams(text_of(item))
        if len(g & seen) > (NEAR_DUPLICATE_SHARE if part == 0 else NEGATIVE_MAX_SHARE) * len(g):
            print(f"{eval_set}: {item['id']} skipped: too close to the items taken before")
            continue
        seen |= g
        chosen[part].append(item)
    if [len(c) for c in chosen] != list(counts):
        raise SystemExit(f"{eval_set}: wanted {counts}, found {[len(c) for c in chosen]}")
    return chosen


def gsm8k(git_dir: Path):
    """(bundled, negatives) of the GSM8K test split; ``id`` the 0-based line number."""
    lines = git_show(git_dir, "grade_school_math/data/test.jsonl").decode("utf-8").splitlines()
    items = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        items.append({"id": str(i), "question": rec["question"], "answer": rec["answer"]})
    return take(items, "gsm8k", GSM8K_COUNTS, lambda it: it["question"], set())


def humaneval(git_dir: Path):
    """(bundled, negatives) of HumanEval; ``id`` the task_id with ``/`` as ``_``."""
    lines = gzip.decompress(git_show(git_dir, "data/HumanEval.jsonl.gz")).decode("utf-8").splitlines()
    items = []
    for line in lines:
        rec = json.loads(line)
        items.append({"id": rec["task_id"].replace("/", "_"), "task_id": rec["task_id"],
                      "entry_point": rec["entry_point"], "prompt": rec["prompt"],
                      "canonical_solution": rec["canonical_solution"]})
    return take(items, "humaneval", HUMANEVAL_COUNTS,
                lambda it: it["prompt"] + it["canonical_solution"], set())


def gaokao(git_dir: Path):
    """(bundled, negatives) of the GAOKAO-Bench Chinese MCQs, per subject quota, after the
    length and figure filters; ``id`` ``<subject>-<position in the file>``."""
    chosen: list[list[dict]] = [[], []]
    dropped = {"short": 0, "long": 0, "figure": 0}
    seen: set[str] = set()
    for subject, counts in GAOKAO_QUOTAS.items():
        items = []
        for name in GAOKAO_FILES[subject]:
            data = json.loads(git_show(git_dir, f"Data/Objective_Questions/{name}"))["example"]
            file_subject = name.split("_", 1)[1].removesuffix("_MCQs.json")
            for position, rec in enumerate(data):
                question = rec["question"]
                stripped = "".join(question.split())
                if len(stripped) < GAOKAO_MIN_CHARS:
                    dropped["short"] += 1
                    continue
                if len(question) > GAOKAO_MAX_CHARS:
                    dropped["long"] += 1
                    continue
                if FIGURE_REFERENCE.search(question):
                    dropped["figure"] += 1
                    continue
                items.append({"id": f"{file_subject}-{position}", "question": question,
                              "answer": ",".join(rec["answer"]), "subject": file_subject,
                              "year": rec["year"], "category": rec["category"]})
        part = take(items, "gaokao_mcq", counts, lambda it: it["question"], seen)
        chosen[0] += part[0]
        chosen[1] += part[1]
    print("gaokao dropped before the choice:", dropped)
    return chosen


def write(path: Path, items: list[dict]) -> None:
    """One JSON object a line, UTF-8, ``\n`` line ends (byte-identical on every run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False, sort_keys=False) + "\n")
    print(f"{path.relative_to(REPO_ROOT)}: {len(items)} items, {path.stat().st_size:,} bytes")


def order(items: list[dict]) -> list[dict]:
    """Items in source order (numeric ids sort as numbers)."""
    def key(it):
        head, _, tail = it["id"].rpartition("-") if "-" in it["id"] else it["id"].rpartition("_")
        return (head, int(tail)) if tail.isdigit() else (it["id"], 0)
    return sorted(items, key=key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gsm8k", type=Path, required=True, help="git dir of openai/grade-school-math")
    ap.add_argument("--humaneval", type=Path, required=True, help="git dir of openai/human-eval")
    ap.add_argument("--gaokao", type=Path, required=True, help="git dir of OpenLMLab/GAOKAO-Bench")
    args = ap.parse_args()
    for name, git_dir in (("gsm8k", args.gsm8k), ("humaneval", args.humaneval), ("gaokao", args.gaokao)):
        print(f"{name}: {git_dir} @ {git_head(git_dir)}", flush=True)
    out, neg = REPO_ROOT / "data" / "evalsets", REPO_ROOT / "bench" / "data" / "decontam"
    for name, (bundled, negatives) in (("gsm8k", gsm8k(args.gsm8k)),
                                       ("humaneval", humaneval(args.humaneval)),
                                       ("gaokao_mcq", gaokao(args.gaokao))):
        write(out / f"{name}.jsonl", order(bundled))
        write(neg / f"{name}_negatives.jsonl", order(negatives))


if __name__ == "__main__":
    main()
