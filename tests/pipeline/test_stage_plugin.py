"""A stage added as one module plus a config section (docs/stages/adding_a_stage.md):
the example stage docs/examples/digits_stage.py runs inside a real build, in
worker processes, and the stage contract is checked at config load and at run time."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from pipeline.config import REPO_ROOT, ConfigError, parse_config

EXAMPLES = REPO_ROOT / "docs" / "examples"

# Documents whose fate is known: two English sentences (20 copies each), one
# table of numbers (48 digits of 66 non-space characters = 0.727: dropped),
# one Python snippet full of numbers (21 of 39 = 0.538, but the source
# declares lang code, which the stage skips: kept).
PROSE = ["The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
         "A small boat drifted down the quiet river as the evening light faded behind the distant hills."]
TABLE = "year north south east\n2024 1187 3342 9981\n2025 1203 3391 9902\n2026 1255 3402 9876"
CODE = "x = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"


@pytest.fixture()
def plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield EXAMPLES
    sys.modules.pop("digits_stage", None)


def _config(tmp_path: Path, **extra) -> dict:
    web = tmp_path / "web.jsonl"
    web.write_text("".join(json.dumps({"text": t}) + "\n" for t in [*PROSE * 20, TABLE]), encoding="utf-8")
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"text": CODE}) + "\n", encoding="utf-8")
    return {"seed": 5, "plugins": ["digits_stage"],
            "sources": {"web": {"paths": [str(web)]}, "code": {"paths": [str(code)], "lang": "code"}},
            "executor": {"num_workers": 2}, "heuristics": {"enabled": False}, "perplexity": {"enabled": False},
            "dedup": {"enabled": False}, "langid": {"allowed_languages": ["en", "code"]},
            "tokenize": {"vocab_size": 300}, "output": {"seq_length": 16}, **extra}


def test_digit_share_values(plugin_path):
    from digits_stage import digit_share

    assert digit_share(TABLE) == pytest.approx(48 / 66)
    assert digit_share(CODE) == pytest.approx(21 / 39)
    assert digit_share("２０２４年") == pytest.approx(4 / 5)  # full-width digits count
    assert digit_share("   ") is None


def test_a_plugin_stage_runs_in_a_build(plugin_path, tmp_path):
    from pipeline.build import build
    from pipeline.lineage import format_document_lineage, lineage_for_document

    data = _config(tmp_path)
    cfg = parse_config(data)
    assert cfg.digits.max_digit_share == 0.3 and cfg.digits.enabled
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    result = build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    assert m["stage_order"] == ["langid", "digits", "pii", "tokenize", "mixture"]
    assert m["stages"]["digits"]["totals"]["dropped"] == {"digits.too_many": 1}
    assert m["stages"]["digits"]["totals"]["kept"] == 41          # 40 prose + the skipped code document
    assert m["accounting"]["documents_in"] == 42
    assert {"name": "digits_share", "stage": "digits", "digits": 3} in m["lineage_columns"]
    # the published config names the plugin, so the version can be rebuilt from it
    assert yaml.safe_load((result.version_dir / "config.yaml").read_text())["plugins"] == ["digits_stage"]
    code_id = "code:" + str(tmp_path / "code.jsonl") + ":1"
    found = lineage_for_document(result.version_dir, code_id, global_batch=2)
    assert found["document"]["digits_share"] == pytest.approx(21 / 39)
    assert "digits share 0.538" in format_document_lineage(found)


def test_plugin_requirements_are_checked_at_load(plugin_path, tmp_path):
    data = _config(tmp_path, langid={"enabled": False})
    with pytest.raises(ConfigError) as exc:
        parse_config(data, origin="c.yaml")
    assert str(exc.value) == ("c.yaml: langid.enabled: false, but digits reads its langid_lang (code (and "
                              "other skipped languages) keep their digits): enable langid, or disable digits too")
    with pytest.raises(ConfigError, match=r"c.yaml: digits.max_digit_share: Input should be less than or equal to 1"):
        parse_config(_config(tmp_path, digits={"max_digit_share": 2}), origin="c.yaml")
    with pytest.raises(ConfigError, match=r"plugins: cannot import 'no_such_stage_module'"):
        parse_config({**_config(tmp_path), "plugins": ["no_such_stage_module"]}, origin="c.yaml")


def test_two_stages_with_one_order_are_refused(tmp_path, monkeypatch):
    (tmp_path / "dup_stage.py").write_text(textwrap.dedent('''
        from stages.base import Stage

        class Dup(Stage):
            name = "dup"
            order = 100   # langid's
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"c.yaml: stages 'langid' and 'dup' share order 100"):
        parse_config({**_config(tmp_path), "plugins": ["dup_stage"]}, origin="c.yaml")
    sys.modules.pop("dup_stage", None)


def test_a_plugin_code_change_reruns_it_and_diff_says_so(tmp_path, monkeypatch):
    """The plugin's code (not its comments) is in its stage's digest: a comment
    edit keeps the digest (the stage is reused), a code edit changes it, and
    ``diff`` names the phase whose code differs."""
    from pipeline.build import build, stage_code_digest
    from pipeline.versions import diff_versions, format_diff

    mods = tmp_path / "mods"
    mods.mkdir()
    source = (EXAMPLES / "digits_stage.py").read_text()
    (mods / "digits_stage.py").write_text(source)
    monkeypatch.syspath_prepend(str(mods))
    first = stage_code_digest("digits", ("digits_stage",)).digest
    (mods / "digits_stage.py").write_text(source.replace("class DigitsStage(Stage):",
                                                         "# a comment\nclass DigitsStage(Stage):"))
    assert stage_code_digest("digits", ("digits_stage",)).digest == first
    data = _config(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    a = build("a", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    (mods / "digits_stage.py").write_text(source.replace("share > config.max_digit_share",
                                                         "share >= config.max_digit_share"))
    assert stage_code_digest("digits", ("digits_stage",)).digest != first
    # the edited plugin is built in a new process (this one still holds the old code)
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(mods), str(REPO_ROOT)])}
    run = subprocess.run([sys.executable, "-m", "pipeline", "build", "--version", "b", "--config",
                          str(tmp_path / "c.yaml"), "--corpora-root", str(tmp_path / "corpora")],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    b_dir = tmp_path / "corpora" / "b"
    diff = diff_versions(a.version_dir, b_dir)
    assert list(diff["code"]) == ["digits"] and diff["same_shards"]
    assert "code (1 phases differ)\n  digits: " in format_diff(diff)
    sys.modules.pop("digits_stage", None)


# Plugins that break the contract in the ways peer tools' bug reports show
# (a stage overwriting the join key, dropping silently, editing another
# stage's column, editing text after tokenization): each stops the build at
# the stage, with the stage and what broke.
BROKEN_PROCESS = {
    "rowcol": ('return with_decision(table, {"row": pa.array(range(table.num_rows))}, [None] * table.num_rows)',
               r"added \['row'\] undeclared"),
    "silent": ('out = with_decision(table, {}, [None] * table.num_rows)\n'
               '        return out.set_column(out.schema.get_field_index("keep"), "keep", '
               'pa.array([False] * out.num_rows))', r"dropped without a reason"),
    "editother": ('t = table.set_column(table.schema.get_field_index("langid_lang"), "langid_lang", '
                  'pa.array(["xx"] * table.num_rows))\n        return with_decision(t, {}, [None] * t.num_rows)',
                  r"column langid_lang of an earlier stage was changed"),
    "nochars": ('t = table.set_column(table.schema.get_field_index("text"), "text", '
                'pa.array(["short"] * table.num_rows))\n        return with_decision(t, {}, [None] * t.num_rows)',
                r"edits text but chars is not len\(text\)"),
    "wrongtype": ('return with_decision(table, {"wrongtype_x": pa.array(["a"] * table.num_rows)}, '
                  '[None] * table.num_rows)', r"column wrongtype_x is string, declared double"),
    "liar": ('return with_decision(table, {"liar_other": pa.array([1.0] * table.num_rows)}, [None] * table.num_rows)',
             r"broke its declared columns.*\['liar_other'\] undeclared, missing \['liar_score'\]"),
    "sloppy": ('return with_decision(table, {}, ["too_short"] * table.num_rows)',
               r"reason 'too_short'.*start with 'sloppy\.'"),
}
# The columns each of them declares (none unless listed).
BROKEN_COLUMNS = {"wrongtype": '{"wrongtype_x": Column("double", "declared double")}',
                  "liar": '{"liar_score": Column("double", "declared, never written")}'}


def _plugin(tmp_path, monkeypatch, name: str, body: str, order: int = 250, columns: str = "{}") -> str:
    """Write a plugin module whose stage's ``process`` is ``body`` (lines
    after the first indented by 8 spaces); return its module name."""
    mods = tmp_path / "mods"
    mods.mkdir(exist_ok=True)
    module = f"{name}_stage"
    (mods / f"{module}.py").write_text(
        "import pyarrow as pa\n"
        "from stages.base import Column, FitResult, Stage, StageConfig, with_decision\n\n\n"
        "class Broken(Stage):\n"
        '    """A stage that breaks the contract."""\n'
        f"    name = {name!r}\n"
        f"    order = {order}\n"
        f"    columns = {columns}\n\n"
        "    def process(self, table):\n"
        f"        {body}\n")
    monkeypatch.syspath_prepend(str(mods))
    return module


@pytest.mark.parametrize("name", sorted(BROKEN_PROCESS))
def test_a_stage_that_breaks_the_contract_in_process_stops_the_build(tmp_path, monkeypatch, name):
    from pipeline.build import build
    from pipeline.executor import PartitionError

    body, message = BROKEN_PROCESS[name]
    module = _plugin(tmp_path, monkeypatch, name, body, columns=BROKEN_COLUMNS.get(name, "{}"))
    data = {**_config(tmp_path), "plugins": [module], "executor": {"num_workers": 1}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises((PartitionError, RuntimeError), match=rf"stage {name}.*{message}"):
        build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    sys.modules.pop(module, None)


def test_a_stage_after_the_tokenizer_may_not_edit_text(tmp_path, monkeypatch):
    from pipeline.build import build
    from pipeline.executor import PartitionError

    body = ('texts = [t.replace("fox", "cat") for t in table["text"].to_pylist()]\n'
            '        t = table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts))\n'
            '        t = t.set_column(t.schema.get_field_index("chars"), "chars", pa.array([len(x) for x in texts], pa.int64()))\n'
            '        return with_decision(t, {}, [None] * t.num_rows)')
    module = _plugin(tmp_path, monkeypatch, "aftertok", body, order=650)
    data = {**_config(tmp_path), "plugins": [module], "executor": {"num_workers": 1}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises((PartitionError, RuntimeError), match=r"stage aftertok.*edits text, but it runs after the "
                                                          r"tokenizer"):
        build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    sys.modules.pop(module, None)


def test_a_fit_with_numpy_facts_or_an_unknown_figure_is_refused(tmp_path):
    import numpy as np

    from pipeline.build import BuildError, _check_fit
    from stages.base import Figure, FitResult
    from stages.langid import LangIdStage

    with pytest.raises(BuildError, match=r"\[langid\] fit does not keep its contract: facts, exports or figures "
                                         r"are not plain JSON"):
        _check_fit(LangIdStage, FitResult(facts={"n": np.int64(3)}), tmp_path)
    with pytest.raises(BuildError, match=r"figure 't' has kind 'pie'"):
        _check_fit(LangIdStage, FitResult(figures=(Figure(kind="pie", title="t"),)), tmp_path)
    many = _check_fit(LangIdStage, FitResult(warnings=tuple(f"w{i}\nsecond line" for i in range(60))), tmp_path)
    assert len(many.warnings) == 51 and many.warnings[0] == "w0 second line"
    assert many.warnings[-1] == "... and 10 more warnings (see the facts)"


@pytest.mark.parametrize("name, source, message", [
    ("assemble", 'order = 250', r"stage name 'assemble' is not allowed"),
    ("late", 'order = 800', r"late: runs after mixture \(order 800 > 700\)"),
    ("needtok", 'order = 650\n\n            class Config(StageConfig):\n                requires = {"tokenizer": "x"}',
     r"needtok: reads tokenizer \(x\), an artifact of tokenize"),
    ("badcol", 'order = 250\n            columns = {"other_x": Column("double", "x")}',
     r"column\(s\) \['other_x'\] do not start with 'badcol_'"),
    ("boolorder", 'order = True', r"a stage needs an integer `order`"),
])
def test_plugins_that_break_the_contract_are_refused_at_load(tmp_path, monkeypatch, name, source, message):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / f"{name}_mod.py").write_text(textwrap.dedent(f'''
        from stages.base import Column, Stage, StageConfig

        class S(Stage):
            name = {name!r}
            {source}
    '''))
    monkeypatch.syspath_prepend(str(mods))
    with pytest.raises(ConfigError, match=message):
        parse_config({**_config(tmp_path), "plugins": [f"{name}_mod"]}, origin="c.yaml")
    sys.modules.pop(f"{name}_mod", None)


def test_plugin_lists_that_name_no_stage_are_refused(tmp_path, monkeypatch):
    (tmp_path / "empty_mod.py").write_text("X = 1\n")
    (tmp_path / "unpick_mod.py").write_text(textwrap.dedent('''
        import threading
        from stages.base import Stage, StageConfig

        class Config(StageConfig):
            lock: object = threading.Lock()

        class S(Stage):
            name = "unpick"
            order = 250
            Config = Config
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = [(["empty_mod"], r"plugins: 'empty_mod' defines no stage"),
             (["json"], r"plugins: 'json' defines no stage"),
             (["x/y.py"], r"plugins: 'x/y.py' is not a module name"),
             (["digits_stage", "digits_stage"], r"plugins: \['digits_stage'\] listed twice"),
             (["unpick_mod"], r"unpick: this section cannot be sent to worker processes \(pickle: TypeError")]
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for plugins, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_config({**_config(tmp_path), "plugins": plugins}, origin="c.yaml")
    for name in ("empty_mod", "unpick_mod", "digits_stage"):
        sys.modules.pop(name, None)


def test_a_plugin_edited_after_its_import_is_refused_in_the_same_process(tmp_path, monkeypatch):
    from pipeline.build import build

    mods = tmp_path / "mods"
    mods.mkdir()
    source = (EXAMPLES / "digits_stage.py").read_text()
    (mods / "digits_stage.py").write_text(source)
    monkeypatch.syspath_prepend(str(mods))
    data = _config(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    parse_config(data)                                   # imports it
    (mods / "digits_stage.py").write_text(source.replace("share > config.max_digit_share",
                                                         "share >= config.max_digit_share"))
    with pytest.raises(ConfigError, match=r"plugins: digits_stage changed on disk since this process imported it"):
        build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    sys.modules.pop("digits_stage", None)
