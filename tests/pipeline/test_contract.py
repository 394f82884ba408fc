"""The stage contract: what the layers may know of each other (a lint over
the source), typed fit results, and the config as it crosses processes."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT, ConfigError, load_config, parse_config, preflight

# What the orchestration layer (pipeline/, scripts/) may import from stages/:
# the registry, the contract types and the shared text and language-code helpers. Anything else
# is a stage's own module; the few uses below are listed with why, and a new
# one fails this test until it is listed here (or, better, goes through the
# contract).
SHARED_STAGE_MODULES = {"stages", "stages.base", "stages.text", "stages.lang_codes"}
ALLOWED_STAGE_IMPORTS = {
    ("pipeline/tokenizer_report.py", "stages.tokenize"):
        "the coverage report measures a tokenizer with the tokenize stage's own byte mapping (token_bytes) "
        "and held-out split (is_heldout, language_column)",
}


def _stage_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "stages":
                found.add(name)
    return found


def _layer_files() -> list[Path]:
    return sorted([*(REPO_ROOT / "pipeline").rglob("*.py"), *(REPO_ROOT / "scripts").rglob("*.py")])


def _stage_module_names() -> set[str]:
    import pkgutil

    import stages

    return {info.name for info in pkgutil.walk_packages(stages.__path__, "stages.")}


def test_the_pipeline_imports_no_stage_module():
    stage_modules = _stage_module_names() - SHARED_STAGE_MODULES
    bad = []
    for path in _layer_files():
        rel = path.relative_to(REPO_ROOT).as_posix()
        for name in sorted(_stage_imports(path)):
            module = next((m for m in sorted(stage_modules, key=len, reverse=True)
                           if name == m or name.startswith(m + ".")), None)
            if module is None or (rel, module.split(".")[0] + "." + module.split(".")[1]) in ALLOWED_STAGE_IMPORTS:
                continue
            bad.append(f"{rel} imports {name}")
    assert bad == [], "the pipeline reaches into a stage module (use the contract: stages.base): " + "; ".join(bad)


def _private_names() -> dict[str, str]:
    """File names private to a stage (module-level ``*_FILE``/``*_DIR``
    string constants of stage modules that hold a dotted name, e.g.
    ``plan.json``; bare directory words such as ``spill`` are everyone's) ->
    module."""
    out = {}
    for path in (REPO_ROOT / "stages").rglob("*.py"):
        if path.name in ("base.py", "text.py", "__init__.py") and path.parent.name == "stages":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith(("_FILE", "_DIR")) \
                            and "." in node.value.value:
                        out[node.value.value] = path.relative_to(REPO_ROOT).as_posix()
    return out


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings}


def test_no_pipeline_module_names_a_stage_private_file():
    private = _private_names()
    assert "plan.json" in private and "tokenizer.json" in private  # the scan sees the stages' constants
    # The published version's file names are the layout's (pipeline/layout.py); a stage's
    # fit file may share a published name (tokenizer.json) without being read by it.
    from pipeline import layout

    published = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}
    bad = []
    for path in _layer_files():
        for value in _string_constants(path) & (set(private) - published):
            bad.append(f"{path.relative_to(REPO_ROOT).as_posix()} names {value!r} ({private[value]})")
    assert bad == [], "; ".join(sorted(bad))


def test_the_build_reads_only_declared_results():
    """No ``reports["<stage>"]`` or ``cfg.<stage>`` lookup of a named stage in
    the orchestrator: it goes through the contract (exports, artifacts,
    providers)."""
    from stages import stage_names

    names = set(stage_names())
    bad = []
    for rel in ("pipeline/build.py", "pipeline/assemble.py", "pipeline/manifest.py", "pipeline/report.py",
                "pipeline/lineage.py"):
        tree = ast.parse((REPO_ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            # a stage's report, parts or fit looked up by its name (the manifest's own
            # published sections, such as manifest["mixture"], are the manifest format)
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and node.slice.value in names and any(w in ast.unparse(node.value)
                                                           for w in ("reports", "parts", "stages", "exports")):
                bad.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name) \
                    and node.value.id in ("cfg", "config"):
                bad.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    assert bad == [], "; ".join(bad)


def _cfg(**extra) -> dict:
    return {"sources": {"web": {"paths": ["x.jsonl"]}}, "perplexity": {"reference_source": "web"}, **extra}


def test_the_config_crosses_processes_as_the_same_frozen_model():
    from stages import stage_names

    cfg = load_config(REPO_ROOT / "configs" / "default.yaml")
    for name in stage_names():     # what a task carries: the stage's section, pickled
        section = getattr(cfg, name)
        again = pickle.loads(pickle.dumps(section))
        assert again == section and type(again) is type(section)
    zh = pickle.loads(pickle.dumps(cfg.heuristics)).thresholds["zh"]
    assert zh.min_stop_words is None                    # an explicit null survives the trip
    again = pickle.loads(pickle.dumps(cfg.heuristics))
    assert again.for_language("zh").min_stop_words is None       # the config's null over the preset's 2
    assert again.for_language("zh").max_duplicate_5gram_char_share == 0.30    # the preset's value
    with pytest.raises(Exception):
        cfg.seed = 1  # frozen


def test_validators_do_no_io_and_preflight_reports_a_missing_model(tmp_path):
    missing = tmp_path / "en.binary"
    cfg = parse_config(_cfg(perplexity={"reference_source": "web", "models": {"en": str(missing)}}))
    assert cfg.perplexity.models == {"en": str(missing)}       # parsed without touching the file
    with pytest.raises(ConfigError) as exc:
        preflight(cfg, "c.yaml")
    assert str(exc.value).startswith(f"c.yaml: perplexity.models.en: perplexity: KenLM model file {missing} "
                                     "cannot be read")
    (tmp_path / "bad.binary").write_text("not a model")
    cfg = parse_config(_cfg(perplexity={"reference_source": "web", "models": {"en": str(tmp_path / "bad.binary")}}))
    with pytest.raises(ConfigError, match=r"perplexity.models.en: perplexity: cannot read KenLM model file"):
        preflight(cfg, "c.yaml")


def test_a_missing_model_stops_the_build_before_any_work(tmp_path):
    import yaml

    from pipeline.build import build

    (tmp_path / "web.jsonl").write_text('{"text": "hello"}\n')
    data = {"sources": {"web": {"paths": [str(tmp_path / "web.jsonl")]}},
            "perplexity": {"reference_source": "web", "models": {"en": str(tmp_path / "none.binary")}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="perplexity.models.en"):
        build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    assert not (tmp_path / "corpora").exists()


def test_a_required_stage_has_no_enabled_key():
    for name, why in (("tokenize", "the assembly packs its token ids (tokenize_input_ids)"),
                      ("mixture", "the assembly packs the copies it chooses (mixture_repeats)")):
        with pytest.raises(ConfigError) as exc:
            parse_config(_cfg(**{name: {"enabled": True}}), origin="c.yaml")
        assert str(exc.value) == f"c.yaml: {name}.enabled: this stage cannot be turned off: {why}"
        assert getattr(parse_config(_cfg()), name).enabled is True


def test_fit_result_round_trips_and_the_build_checks_it(tmp_path):
    from pipeline.build import BuildError, _check_fit
    from stages.base import Figure, FitResult
    from stages.tokenize import TokenizeStage

    result = FitResult(facts={"a": 1}, warnings=("w",), artifacts={"tokenizer": "tokenizer.json"},
                       exports={"pad_id": 1}, figures=(Figure(kind="curve", title="t", x=(0, 1), y=(0, 1)),))
    assert FitResult.from_json(result.to_json()) == result
    (tmp_path / "tokenizer.json").write_text("{}")
    assert _check_fit(TokenizeStage, result, tmp_path) == result
    with pytest.raises(BuildError, match=r"\[tokenize\] fit does not keep its contract: exports \[\], "
                                         r"declared \['pad_id'\]"):
        _check_fit(TokenizeStage, FitResult(artifacts={"tokenizer": "tokenizer.json"}), tmp_path)
    with pytest.raises(BuildError, match=r"artifact tokenizer = gone.json is not a file"):
        _check_fit(TokenizeStage, FitResult(artifacts={"tokenizer": "gone.json"}, exports={"pad_id": 1}), tmp_path)
    with pytest.raises(BuildError, match=r"fit returned dict, not a stages.base.FitResult"):
        _check_fit(TokenizeStage, {"a": 1}, tmp_path)


def test_stages_describe_themselves():
    from pipeline.contract import describe, format_stages

    found = {s["name"]: s for s in describe()}
    assert [s["order"] for s in describe()] == [100, 150, 200, 300, 350, 400, 450, 500, 600, 700]
    assert found["heuristics"]["reads"] == {"langid_lang": [
        "the word segmenter and the rule thresholds follow the language", "langid"]}
    assert found["tokenize"]["can_disable"] == "no: the assembly packs its token ids (tokenize_input_ids)"
    assert found["langid"]["columns"]["langid_score"] == {
        "dtype": "double", "doc": "how surely the text is identified: mean probability of each chunk's own language, 0..1", "lineage": True}
    assert found["heuristics"]["columns"]["heuristics_num_words"]["dtype"] == "int64"
    assert found["tokenize"]["artifacts"]["tokenizer"].startswith("file: ")
    text = format_stages(describe())
    assert "  400  dedup  (stages.dedup.stage:DedupStage; can be disabled: yes)" in text
    assert "       reads    tokenize_num_tokens from tokenize: the budget and the weights count tokens" in text


def test_a_stage_section_without_its_plugin_says_where_to_list_it():
    with pytest.raises(ConfigError) as exc:
        parse_config(_cfg(urls={"max_urls": 3}), origin="c.yaml")
    assert str(exc.value) == ("c.yaml: urls: unknown key (if it is the section of a stage of your own, list the "
                              "module that defines it under plugins: docs/stages/adding_a_stage.md)")
    with pytest.raises(ConfigError, match=r"^c.yaml: sed: unknown key$"):
        parse_config(_cfg(sed=3), origin="c.yaml")


def test_stages_import_nothing_from_the_pipeline():
    """The layers: a stage knows the contract (stages.base) and the shared
    helpers (common/), never the orchestrator, so it runs the same under any
    executor and a plugin needs nothing else."""
    bad = []
    for path in sorted([*(REPO_ROOT / "stages").rglob("*.py"), *(REPO_ROOT / "docs" / "examples").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.relative_to(REPO_ROOT)} imports {n}" for n in names if n.split(".")[0] == "pipeline"]
    assert bad == []
