import pytest
import yaml

from pipeline.config import ConfigError, config_hash, config_path_for, load_config, parse_config

SOURCES = {"web": {"paths": ["data/sample/web-fortunes.jsonl.zst"]},
           "reference": {"paths": ["data/sample/reference-debref.parquet"]}}


def _cfg(**extra):
    data = {"sources": SOURCES, "perplexity": {"reference_source": "reference"}}
    data.update(extra)
    return data


def test_default_config_loads_and_hash_is_stable(tmp_path):
    cfg = load_config(config_path_for("no-such-version"))
    assert set(cfg.sources) == {"web", "manuals", "books", "reference", "code"}
    assert cfg.sources["code"].lang == "code"
    assert config_hash(cfg) == config_hash(load_config(config_path_for("no-such-version")))


def test_version_config_is_used_when_present(tmp_path):
    (tmp_path / "v9.yaml").write_text("x: 1")
    (tmp_path / "default.yaml").write_text("x: 1")
    assert config_path_for("v9", tmp_path).name == "v9.yaml"
    assert config_path_for("v8", tmp_path).name == "default.yaml"


@pytest.mark.parametrize("patch, key", [
    ({"sedd": 1}, "sedd: unknown key"),
    ({"seed": "abc"}, "seed: Input should be a valid integer"),
    ({"output": {"seq_length": "long"}}, "output.seq_length: Input should be a valid integer"),
    ({"output": {"seq_lenght": 128}}, "output.seq_lenght: unknown key"),
    ({"executor": {"num_workers": 0}}, "executor.num_workers: Input should be greater than or equal to 1"),
    ({"sources": {"web": {"path": ["x"]}}}, "sources.web.path: unknown key"),
])
def test_bad_key_or_type_is_one_line_naming_the_key(patch, key):
    with pytest.raises(ConfigError) as exc:
        parse_config(_cfg(**patch), origin="c.yaml")
    lines = str(exc.value).splitlines()
    assert any(line.startswith(f"c.yaml: {key}") for line in lines), lines


def test_cross_checks_name_the_key():
    with pytest.raises(ConfigError, match=r"perplexity.reference_source: 'wiki' is not a configured source"):
        parse_config({"sources": SOURCES, "perplexity": {"reference_source": "wiki"}})
    with pytest.raises(ConfigError, match=r"mixture.weights.blogs: not a configured source"):
        parse_config(_cfg(mixture={"weights": {"web": 1.0, "reference": 1.0, "blogs": 1.0}}))


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(_cfg()))
    assert load_config(ok).seed == 1234
