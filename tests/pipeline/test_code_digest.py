"""Code digests: what a phase's fingerprint covers, on a small real project
tree (and on this repository's own stages)."""

import shutil
from pathlib import Path

import pytest

from pipeline.code_digest import REPO_ROOT, code_digest

A = '''"""Module a."""
import json

from pkg import b
from pkg.c import helper, LIMIT

TABLE = {"x": 1}


def run(x):
    """Doc of run."""
    # a comment
    return helper(x) + b.twice(x) + TABLE["x"]


def by_name(name):
    return globals()[name]


RULES = ("named",)


def named():
    return 2
'''

B = '''def twice(x):
    return 2 * x
'''

C = '''import re
import numpy as np
import scipy
from pathlib import Path

LIMIT = 3
WORD = re.compile(r"\\w+")


def helper(x: scipy.sparse.spmatrix) -> int:
    return int(np.int64(x)) + LIMIT + len(words())


def words():
    return (Path(__file__).parent / "data" / "words.txt").read_text().split()


def unrelated():
    return 1
'''


def _project(root: Path) -> Path:
    (root / "pkg" / "data").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "a.py").write_text(A)
    (root / "pkg" / "b.py").write_text(B)
    (root / "pkg" / "c.py").write_text(C)
    (root / "pkg" / "data" / "words.txt").write_text("one two\n")
    (root / "notapackage").mkdir()
    (root / "notapackage" / "x.py").write_text("import pkg.a\n")
    return root


def test_a_module_root_covers_what_it_reaches(tmp_path):
    root = _project(tmp_path / "p")
    d = code_digest(["pkg.a"], root=root)
    assert sorted(d.sources) == ["pkg/a.py", "pkg/b.py", "pkg/c.py"]
    # pkg.a takes c's helper and LIMIT and what they reach, not unrelated()
    assert d.definitions == {"pkg/c.py": ["LIMIT", "helper", "words"]}
    # words() names the data directory: its files are in the digest
    assert list(d.data) == ["pkg/data/words.txt"]
    # re, json, pathlib: standard library; scipy only in an annotation
    assert list(d.libraries) == ["numpy"]
    assert d.python.count(".") == 1
    assert len(d.digest) == 16


def test_code_changes_change_the_digest_and_nothing_else_does(tmp_path):
    root = _project(tmp_path / "p")
    first = code_digest(["pkg.a"], root=root).digest

    # comments, docstrings, blank lines: same digest
    (root / "pkg" / "a.py").write_text(A.replace("# a comment", "# another comment")
                                       .replace('"""Doc of run."""', '"""Other words."""') + "\n\n")
    assert code_digest(["pkg.a"], root=root).digest == first
    # a definition pkg.a does not reach: same digest
    (root / "pkg" / "c.py").write_text(C.replace("return 1\n", "return 100\n"))
    assert code_digest(["pkg.a"], root=root).digest == first
    # __pycache__ and another checkout path: same digest
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00junk")
    moved = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(root, moved)
    assert code_digest(["pkg.a"], root=moved).digest == first

    # a constant, a regex, a called function, a data file: each changes it
    for path, old, new in [("pkg/a.py", '{"x": 1}', '{"x": 2}'),
                           ("pkg/c.py", "LIMIT = 3", "LIMIT = 4"),
                           ("pkg/b.py", "2 * x", "3 * x"),
                           ("pkg/data/words.txt", "one two", "one two three")]:
        before = (moved / path).read_text()
        (moved / path).write_text(before.replace(old, new))
        assert code_digest(["pkg.a"], root=moved).digest != first, path
        (moved / path).write_text(before)
        assert code_digest(["pkg.a"], root=moved).digest == first, path


def test_a_definition_root_takes_only_what_it_reaches(tmp_path):
    root = _project(tmp_path / "p")
    d = code_digest(["pkg.c:helper"], root=root)
    assert sorted(d.sources) == ["pkg/c.py"]
    assert d.definitions == {"pkg/c.py": ["LIMIT", "helper", "words"]}
    # a function named by a string in its module (a lookup by name) is reached
    by_name = code_digest(["pkg.a:RULES"], root=root)
    assert by_name.definitions == {"pkg/a.py": ["RULES", "named"]}
    before = code_digest(["pkg.c:helper"], root=root).digest
    (root / "pkg" / "a.py").write_text(A.replace("return 2", "return 3"))
    assert code_digest(["pkg.c:helper"], root=root).digest == before


def test_a_package_root_follows_what_its_init_exports(tmp_path):
    """A root that is a package (``stages.heuristics``) resolves to its
    ``__init__.py``; the names it re-exports from its submodules are followed
    into them, as far as they reach."""
    root = tmp_path / "p"
    (root / "pkg" / "rules").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "rules" / "__init__.py").write_text(
        '"""Rules."""\nfrom pkg.rules.stage import Stage\nfrom .table import LIMITS\n\n'
        '__all__ = ["LIMITS", "Stage"]\n')
    (root / "pkg" / "rules" / "stage.py").write_text(
        "from pkg.rules.table import LIMITS\n\n\nclass Stage:\n    def run(self, x):\n"
        "        return x < LIMITS['a']\n\n\ndef unused():\n    return 0\n")
    (root / "pkg" / "rules" / "table.py").write_text("LIMITS = {'a': 1}\nOTHER = 2\n")
    d = code_digest(["pkg.rules"], root=root)
    assert sorted(d.sources) == ["pkg/rules/__init__.py", "pkg/rules/stage.py", "pkg/rules/table.py"]
    assert d.definitions == {"pkg/rules/stage.py": ["Stage"], "pkg/rules/table.py": ["LIMITS"]}
    table = root / "pkg" / "rules" / "table.py"
    table.write_text("LIMITS = {'a': 2}\nOTHER = 2\n")
    assert code_digest(["pkg.rules"], root=root).digest != d.digest     # a threshold moved
    table.write_text("LIMITS = {'a': 1}\nOTHER = 3\n")
    assert code_digest(["pkg.rules"], root=root).digest == d.digest     # not reached


SUB_INIT = '''"""A subpackage whose __init__ only re-exports."""
from pkg.sub.impl import LIMIT, run  # noqa: F401
from pkg.sub import other  # noqa: F401

__all__ = ["LIMIT", "run", "other"]
'''

SUB_IMPL = '''from pkg.c import helper

LIMIT = 5


def run(x):
    return helper(x) + LIMIT


def unused():
    return 0
'''


def test_a_package_root_follows_what_its_init_imports(tmp_path):
    root = _project(tmp_path / "p")
    (root / "pkg" / "sub").mkdir()
    (root / "pkg" / "sub" / "__init__.py").write_text(SUB_INIT)
    (root / "pkg" / "sub" / "impl.py").write_text(SUB_IMPL)
    (root / "pkg" / "sub" / "other.py").write_text("def f():\n    return 1\n")
    d = code_digest(["pkg.sub"], root=root)
    assert sorted(d.sources) == ["pkg/c.py", "pkg/sub/__init__.py", "pkg/sub/impl.py", "pkg/sub/other.py"]
    # a re-exported name takes its definition and what it reaches; a submodule is taken whole
    assert d.definitions == {"pkg/c.py": ["LIMIT", "helper", "words"], "pkg/sub/impl.py": ["LIMIT", "run"]}
    before = d.digest
    impl = root / "pkg" / "sub" / "impl.py"
    impl.write_text(SUB_IMPL.replace("return 0", "return 7"))          # unreached: same digest
    assert code_digest(["pkg.sub"], root=root).digest == before
    impl.write_text(SUB_IMPL.replace("+ LIMIT", "- LIMIT"))             # reached through the export
    assert code_digest(["pkg.sub"], root=root).digest != before
    # a plain module root still follows only the imported names it uses
    (root / "pkg" / "d.py").write_text("from pkg.c import unrelated  # noqa: F401\n\nX = 1\n")
    assert sorted(code_digest(["pkg.d"], root=root).sources) == ["pkg/d.py"]


def test_bad_roots_are_named(tmp_path):
    root = _project(tmp_path / "p")
    with pytest.raises(ValueError, match="no project module 'pkg.nope'"):
        code_digest(["pkg.nope"], root=root)
    with pytest.raises(ValueError, match="pkg.c defines no 'missing'"):
        code_digest(["pkg.c:missing"], root=root)
    with pytest.raises(ValueError, match="no project module 'notapackage.x'"):
        code_digest(["notapackage.x"], root=root)


def test_this_repository_s_stage_and_ingest_digests():
    from pipeline.build import ASSEMBLE_CODE, INGEST_CODE, stage_code_digest

    heuristics = stage_code_digest("heuristics")
    package = ["stages/heuristics/__init__.py", "stages/heuristics/c4.py", "stages/heuristics/cjk.py",
               "stages/heuristics/code.py", "stages/heuristics/family.py", "stages/heuristics/fineweb.py",
               "stages/heuristics/gopher_quality.py", "stages/heuristics/gopher_repetition.py",
               "stages/heuristics/ngrams.py", "stages/heuristics/page_shape.py",
               "stages/heuristics/presets.py", "stages/heuristics/rules.py",
               "stages/heuristics/stage.py", "stages/heuristics/view.py"]
    assert sorted(heuristics.sources) == ["common/errors.py", "common/io.py", "common/source.py", "pipeline/executor.py",
                                          "stages/__init__.py", "stages/base.py", *package, "stages/lang_codes.py",
                                          "stages/text.py"]
    # the executor writes the stage's layer with the shared atomic writer: it is in every stage's digest
    assert "write_table_atomic" in heuristics.definitions["common/io.py"]
    # the stage package whole: every module of it, every statement of each
    assert sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "stages" / "heuristics").glob("*.py")) \
        == package
    assert not set(package) & set(heuristics.definitions)
    assert {"rjieba", "ftfy", "pyarrow"} <= set(heuristics.libraries)
    langid = stage_code_digest("langid")
    assert langid.data == {"stages/data/zh_script_chars.json": langid.data["stages/data/zh_script_chars.json"]}
    assert "fasttext-predict" in langid.libraries
    # a reader change re-runs ingest; a stage or packer change does not
    ingest = code_digest(INGEST_CODE)
    assert "pipeline/readers.py" in ingest.sources and "pipeline/readers.py" not in ingest.definitions
    assert not any(p.startswith("stages/") and p != "stages/base.py" for p in ingest.sources)
    assert "ingest_file" in ingest.definitions["pipeline/build.py"]
    # the shared helpers ingest writes and hashes with (common.io, common.hashing.id_hash of id_keys)
    assert {"write_table_atomic", "write_json_atomic", "sha256_stream"} <= set(ingest.definitions["common/io.py"])
    assert ingest.definitions["common/hashing.py"] == ["id_hash"]
    assemble = code_digest(ASSEMBLE_CODE)
    assert {"pipeline/assemble.py", "pipeline/writer.py", "pipeline/packing.py", "common/hashing.py",
            "pipeline/formats.py", "pipeline/megatron.py"} \
        <= set(assemble.sources)
    assert "mindspore" in assemble.libraries
    # the tokenizer stage reaches only the id hash of the shared helpers, not the packer
    tokenize = stage_code_digest("tokenize")
    assert tokenize.definitions["common/hashing.py"] == ["id_hash"]
    assert not any(p.startswith("pipeline/") and p != "pipeline/executor.py" for p in tokenize.sources)


DEDUP_MODULES = ["stages/dedup/__init__.py", "stages/dedup/cluster.py", "stages/dedup/components.py",
                 "stages/dedup/config.py", "stages/dedup/exact.py", "stages/dedup/exchange.py",
                 "stages/dedup/keepers.py", "stages/dedup/lines.py", "stages/dedup/lsh.py",
                 "stages/dedup/minhash.py", "stages/dedup/normalize.py", "stages/dedup/signatures.py",
                 "stages/dedup/stage.py"]


def test_the_dedup_stage_digest_covers_every_module_of_its_package(tmp_path):
    from pipeline.build import STAGE_CODE, stage_code_digest
    from stages import stage_module

    assert stage_module("dedup") == "stages.dedup"                  # the root is the package
    dedup = stage_code_digest("dedup")
    assert sorted(dedup.sources) == sorted(["common/errors.py", "common/io.py", "common/source.py", "common/spill.py", "pipeline/executor.py",
                                            "stages/__init__.py", "stages/base.py", "stages/lang_codes.py", "stages/text.py",
                                            "stages/zh_script.py", *DEDUP_MODULES])  # script folding
    # what the package's __init__ re-exports reaches only what it needs of the pure helpers
    assert sorted(p for p in dedup.definitions if p.startswith("stages/dedup/")) == [
        "stages/dedup/minhash.py", "stages/dedup/normalize.py"]
    assert {"datasketch", "OpenCC", "xxhash", "pyarrow", "pydantic"} <= set(dedup.libraries)
    # a change in a submodule (the LSH bucket cut-off) re-runs dedup
    root = tmp_path / "repo"
    for package in ("common", "pipeline", "stages"):
        shutil.copytree(Path(__file__).resolve().parents[2] / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    roots = ("stages.dedup", *STAGE_CODE)
    assert code_digest(roots, root=root).digest == dedup.digest
    lsh = root / "stages" / "dedup" / "lsh.py"
    lsh.write_text(lsh.read_text().replace("ALL_PAIRS_MAX_BUCKET = 64", "ALL_PAIRS_MAX_BUCKET = 65"))
    assert code_digest(roots, root=root).digest != dedup.digest
