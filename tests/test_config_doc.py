"""docs/config.md is what scripts/config_doc.py makes from the config models."""

import difflib
import importlib.util

from pipeline.config import REPO_ROOT, ExecutorConfig, IngestConfig, OutputConfig, SourceConfig
from stages import stage_class, stage_names

REFRESH = "PYTHONPATH=$PWD .venv/bin/python scripts/config_doc.py > docs/config.md"


def _config_doc() -> str:
    spec = importlib.util.spec_from_file_location("config_doc", REPO_ROOT / "scripts" / "config_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.config_doc()


def test_committed_config_doc_equals_the_generated_one():
    committed = (REPO_ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    generated = _config_doc()
    diff = "".join(list(difflib.unified_diff(committed.splitlines(keepends=True), generated.splitlines(keepends=True),
                                             "docs/config.md (committed)", "scripts/config_doc.py (generated)"))[:40])
    assert committed == generated, f"docs/config.md is out of date with the config models; run\n    {REFRESH}\n{diff}"


def test_config_doc_has_a_row_for_every_key_of_every_config_model():
    rows = {line.split(" | ")[0].removeprefix("| ").strip("`") for line in _config_doc().splitlines()
            if line.startswith("| `")}
    models = [(SourceConfig, "sources.<name>."), (ExecutorConfig, "executor."), (IngestConfig, "ingest."),
              (OutputConfig, "output.")]
    models += [(stage_class(stage).Config, f"{stage}.") for stage in stage_names()]
    expected = {"plugins", "seed", "corpora_dir"} | {prefix + name for model, prefix in models for name in model.model_fields}
    assert expected - rows == set()
    assert "sources.<name>.paths" in rows and "dedup.num_bands" in rows and "output.seq_length" in rows
