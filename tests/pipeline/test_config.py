from pathlib import Path

import pytest
import yaml

from pipeline.config import REPO_ROOT, ConfigError, config_hash, config_path_for, load_config, parse_config

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


# --------------------------------------------------------------------------- checks before any work (issue 13)

def _errors(**sections) -> list[str]:
    data = _cfg()
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    with pytest.raises(ConfigError) as exc:
        parse_config(data, origin="c.yaml")
    return str(exc.value).splitlines()


OFF = {"enabled": False}


def test_disabling_langid_names_the_stages_that_read_it():
    assert _errors(langid=OFF) == [
        "c.yaml: langid.enabled: false, but heuristics reads its langid_lang (the word segmenter and the rule "
        "thresholds follow the language); perplexity reads its langid_lang (one KenLM model and one threshold "
        "per language): enable langid, or disable heuristics and perplexity too"]
    assert _errors(langid=OFF, heuristics=OFF) == [
        "c.yaml: langid.enabled: false, but perplexity reads its langid_lang (one KenLM model and one threshold "
        "per language): enable langid, or disable perplexity too"]
    # tokenize cannot be disabled: the only way out is langid itself
    assert _errors(langid=OFF, heuristics=OFF, perplexity=OFF, tokenize={"train_language_weights": {"en": 1.0}}) == [
        "c.yaml: langid.enabled: false, but tokenize reads its langid_lang (train_language_weights draws the "
        "training sample by language): enable langid"]


def test_stages_the_build_needs_cannot_be_disabled():
    assert _errors(tokenize=OFF) == [
        "c.yaml: tokenize.enabled: this stage cannot be turned off: the assembly packs its token ids "
        "(tokenize_input_ids)"]
    assert _errors(mixture=OFF) == [
        "c.yaml: mixture.enabled: this stage cannot be turned off: the assembly packs the copies it chooses "
        "(mixture_repeats)"]


def test_a_dependency_that_follows_an_option():
    assert _errors(perplexity=OFF, dedup={"keep": "lowest_perplexity"}) == [
        "c.yaml: perplexity.enabled: false, but dedup reads its perplexity_value (keep: lowest_perplexity picks "
        "each cluster's keeper by it): enable perplexity, or disable dedup too"]
    # the same stage disabled with dedup's default keeper is fine
    assert parse_config(_cfg(perplexity=OFF)).dedup.keep == "longest"


def test_disabled_perplexity_needs_no_reference_source_but_an_enabled_one_does():
    cfg = parse_config({"sources": SOURCES, "perplexity": OFF})
    assert cfg.perplexity.reference_source is None and not cfg.perplexity.enabled
    with pytest.raises(ConfigError) as exc:
        parse_config({"sources": SOURCES}, origin="c.yaml")
    assert str(exc.value) == ("c.yaml: perplexity.reference_source: required key is missing (the source whose "
                              "documents train the KenLM models; or set perplexity.enabled: false)")


def test_every_declared_requirement_is_an_earlier_stage():
    from pipeline.contract import ASSEMBLY_REQUIRES, providers
    from stages import stage_class, stage_names

    order = stage_names()
    who = providers()
    cfg = parse_config(_cfg(dedup={"keep": "lowest_perplexity"}, tokenize={"train_language_weights": {"en": 1}}))
    seen = {}
    for name in order:
        for needed in getattr(cfg, name).requirements():
            assert who[needed] in order[:order.index(name)], (name, needed)
            seen[name] = (needed, who[needed])
    assert seen == {"script_normalize": ("langid_lang", "langid"),
                    "heuristics": ("langid_lang", "langid"), "perplexity": ("langid_lang", "langid"),
                    "dedup": ("perplexity_value", "perplexity"), "tokenize": ("langid_lang", "langid"),
                    "mixture": ("tokenize_num_tokens", "tokenize")}
    assert {what: who[what] for what in ASSEMBLY_REQUIRES} == {
        "tokenize_input_ids": "tokenize", "mixture_repeats": "mixture", "tokenizer": "tokenize",
        "pad_id": "tokenize", "planned_tokens": "mixture"}
    assert [n for n in order if getattr(stage_class(n).Config, "required_by_build", None)] == ["tokenize", "mixture"]


def test_seq_length_bounds_say_why():
    from pipeline.writer import MAX_SEQ_LENGTH, page_and_header_size

    assert _errors(output={"seq_length": 4}) == [
        "c.yaml: output.seq_length: 4 is below 8 tokens: a shorter window is mostly document boundaries "
        "(our floor) (got 4)"]
    assert _errors(output={"seq_length": 10**9, "shuffle_bucket_samples": 1}) == [
        "c.yaml: output.seq_length: 1,000,000,000 tokens per sample cannot be stored: a MindRecord row of "
        "seq_length + 1 ids and up to seq_length document ends must fit one 256 MiB page, so at most "
        "13,421,669 (got 1000000000)"]
    # the bound is the writer's own: the longest row fits a page, one token more does not
    assert MAX_SEQ_LENGTH == 13_421_669
    page_and_header_size(1, 2 * MAX_SEQ_LENGTH + 1)
    with pytest.raises(ValueError, match="does not fit a MindRecord page"):
        page_and_header_size(1, 2 * (MAX_SEQ_LENGTH + 1) + 1)
    assert parse_config(_cfg(output={"seq_length": MAX_SEQ_LENGTH, "shuffle_bucket_samples": 1}))
    # a token budget smaller than one sample could never pack one
    assert _errors(output={"seq_length": 4096},
                   mixture={"token_budget": 4000, "weights": {"web": 1, "reference": 1}}) == [
        "c.yaml: output.seq_length: a sample holds seq_length + 1 = 4,097 tokens, more than "
        "mixture.token_budget = 4,000: no sample could be packed"]


def test_vocab_size_must_hold_the_special_tokens_and_bytes():
    assert _errors(tokenize={"vocab_size": 260, "num_reserved_tokens": 50}) == [
        "c.yaml: tokenize.vocab_size: 260 is too small for a trained tokenizer: 53 special tokens (pad, eos, bos "
        "and 50 reserved) + 256 byte symbols take 309 ids before any merge; use at least 310"]
    assert parse_config(_cfg(tokenize={"vocab_size": 310, "num_reserved_tokens": 50})).tokenize.vocab_size == 310
    # a given tokenizer is used as is: vocab_size does not apply
    assert parse_config(_cfg(tokenize={"vocab_size": 260, "num_reserved_tokens": 50, "tokenizer_path": "t.json"}))


@pytest.mark.parametrize("name, line", [
    ("v" * 300, "version 'vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv...' has 300 characters: at most 100 "
                "(it names directories under corpora/ and report files)"),
    ("../v1", "version '../v1': use ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
              "(e.g. v1, 2024-06.zh)"),
    ("-v1", "version '-v1': use ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(e.g. v1, 2024-06.zh)"),
    ("v1\nv2", "version 'v1\\nv2': use ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
               "(e.g. v1, 2024-06.zh)"),
    ("cache", "version 'cache' is reserved (corpora/.work/cache holds the cross-build cache)"),
])
def test_bad_version_names_stop_the_build_before_any_work(tmp_path, name, line):
    from pipeline.build import build

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_cfg()))
    with pytest.raises(ConfigError) as exc:
        build(name, config, tmp_path / "corpora", log=lambda m: None)
    assert str(exc.value) == line
    assert not (tmp_path / "corpora").exists()


def test_names_at_the_limit_are_fine():
    from pipeline.config import MAX_VERSION_LENGTH, check_version

    assert MAX_VERSION_LENGTH == 100
    for name in ("v1", "2024-06.zh_web", "a" * 100):
        assert check_version(name) == name


@pytest.mark.parametrize("patch, line", [
    ({"output": {"seq_length": 4}}, "error: c.yaml: output.seq_length: 4 is below 8 tokens"),
    ({"tokenize": {"vocab_size": 260, "num_reserved_tokens": 50}},
     "error: c.yaml: tokenize.vocab_size: 260 is too small for a trained tokenizer"),
    ({"langid": OFF}, "error: c.yaml: langid.enabled: false, but heuristics reads its langid_lang"),
])
def test_cli_prints_one_line_and_does_no_work(tmp_path, monkeypatch, patch, line):
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.chdir(tmp_path)
    data = _cfg()
    data["sources"] = {k: {"paths": [str(REPO_ROOT / p) for p in v["paths"]]} for k, v in SOURCES.items()}
    data.update(patch)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["build", "--version", "v1", "--config", "c.yaml", "--corpora-root", "corpora"])
    assert res.exit_code == 2
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith(line), res.stderr
    assert res.stdout == "" and not (tmp_path / "corpora").exists()
    res = CliRunner().invoke(app, ["build", "--version", "x" * 300, "--config", "c.yaml", "--corpora-root", "corpora"])
    assert res.exit_code == 2 and res.stderr.startswith("error: version 'xxxx") and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "corpora").exists()


# --------------------------------------------------------------------------- a stage that can be disabled builds

def small_corpus(root: Path) -> dict:
    """Sources of ~160 real documents (fortunes in five languages, Debian
    Reference pages, two Python files) under ``root``, for quick builds."""
    import io
    import json

    import pyarrow.parquet as pq
    import zstandard

    sample = REPO_ROOT / "data" / "sample"
    data = root / "data"
    (data / "code").mkdir(parents=True)
    with open(sample / "web-fortunes.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "web.jsonl").write_text("".join(lines[::25][:120]), encoding="utf-8")
    pq.write_table(pq.read_table(sample / "reference-debref.parquet").slice(0, 20), data / "reference.parquet")
    with open(sample / "code-cpython.jsonl.zst", "rb") as fh:
        code = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    for rec in map(json.loads, code[:2]):  # two CPython files, as the .py files they are
        name = rec["meta"]["path"].removeprefix("Lib/").replace("/", "__")
        (data / "code" / name).write_text(rec["text"], encoding="utf-8")
    return {"web": {"paths": [str(data / "web.jsonl")]},
            "reference": {"paths": [str(data / "reference.parquet")]},
            "code": {"paths": [str(data / "code" / "*.py")], "format": "text", "lang": "code"}}


@pytest.fixture(scope="module")
def small_sources(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("small"))


# Every stage that can be disabled is off in one of the two builds (two, not
# one per stage, to keep the suite short): langid with the two stages that
# read it, then heuristics and dedup with langid and perplexity running.
@pytest.mark.parametrize("disabled", [("langid", "heuristics", "perplexity"), ("heuristics", "dedup")])
def test_a_stage_that_can_be_disabled_builds_end_to_end(small_sources, tmp_path, disabled):
    import pyarrow.parquet as pq

    from pipeline.build import build
    from pipeline.cli import output_table, summary_table
    from pipeline.lineage import format_lineage, lineage_for_document, lineage_for_step
    from pipeline.versions import verify_version
    from stages import stage_names

    data = {"seed": 3, "sources": small_sources, "executor": {"num_workers": 1},
            "perplexity": {"reference_source": "reference", "lmplz_memory": "64M"},
            "tokenize": {"vocab_size": 600}, "output": {"seq_length": 64}}
    for name in disabled:
        data.setdefault(name, {})["enabled"] = False
    cfg = parse_config(data)  # valid: nothing enabled reads a disabled stage
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    result = build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    # script_normalize is off by default: the stages enabled are the others but the disabled ones
    assert m["stage_order"] == [s for s in stage_names() if s not in disabled and getattr(cfg, s).enabled] \
        == list(m["stages"])
    assert "script_normalize" not in m["stage_order"]
    acc = m["accounting"]
    assert acc["documents_in"] == 120 + 20 + 2 and acc["quarantined"] == 0
    assert {s: c["documents_in"] for s, c in m["ingest"]["per_source"].items()} == {
        "web": 120, "reference": 20, "code": 2}
    # every input record (id from its file and line) is kept or dropped by exactly one enabled stage
    web, reference = (Path(small_sources[s]["paths"][0]).resolve() for s in ("web", "reference"))
    inputs = ({f"web:{web}:{line}" for line in range(1, 121)} | {f"reference:{reference}:{row}" for row in range(1, 21)}
              | {f"code:{path}:1" for path in Path(small_sources["code"]["paths"][0]).parent.glob("*.py")})
    ids = pq.read_table(result.version_dir / "documents", columns=["id"])["id"].to_pylist()
    ids += [i for name in m["stage_order"]
            for i in pq.read_table(result.version_dir / "decisions" / name, columns=["id"])["id"].to_pylist()]
    assert len(ids) == len(set(ids)) == 142 and set(ids) == inputs
    assert m["num_samples"] > 0 and (result.version_dir / "report.html").stat().st_size > 0
    assert verify_version(result.version_dir)["ok"]
    records = lineage_for_step(result.version_dir, 0, global_batch=2)
    segment = records[0]["segments"][0]
    # a segment carries the lineage columns of the stages that ran (the manifest's lineage_columns)
    assert ("langid_lang" in segment) == ("langid" not in disabled)
    assert ("perplexity_bucket" in segment) == ("perplexity" not in disabled)
    assert [c["stage"] for c in m["lineage_columns"]] == [
        s for s in ("langid", "langid", "langid", "perplexity", "perplexity", "dedup", "dedup", "pii", "pii",
                  "tokenize", "mixture")
        if s not in disabled]
    assert segment["doc_id"] in format_lineage(records)
    assert lineage_for_document(result.version_dir, segment["doc_id"], global_batch=2)["pieces"]
    summary_table(m), output_table(m)  # the CLI's tables render


def test_language_codes_are_read_as_document_labels_and_unknown_ones_refused():
    # an unquoted YAML `no` is False to PyYAML: in a language field it is Norwegian
    data = yaml.safe_load("langid: {allowed_languages: [no, nb, zh-Hant, en], min_score_by_lang: {no: 0.4}}\n"
                          "heuristics: {thresholds: {nb: {min_words: 3}, zh_TW: {min_chars: 12}}}")
    cfg = parse_config(_cfg(**data))
    assert cfg.langid.allowed_labels() == {"no", "zh", "en"}
    assert cfg.langid.min_score_labels() == {"no": 0.4}
    assert set(cfg.heuristics.thresholds) == {"no", "zh"}
    assert cfg.heuristics.for_language("no").min_words == 3
    with pytest.raises(ConfigError) as exc:
        parse_config(_cfg(langid={"allowed_languages": ["jp", "en", "english"]}))
    assert "langid.allowed_languages: 'jp', 'english': not a language code" in str(exc.value)
    with pytest.raises(ConfigError, match="empty allow-list"):
        parse_config(_cfg(langid={"allowed_languages": []}))
    with pytest.raises(ConfigError, match="'nb' and 'no' both mean language 'no'"):
        parse_config(_cfg(heuristics={"thresholds": {"nb": {"min_words": 3}, False: {"min_words": 4}}}))


def test_tokenizer_sample_shares_default_to_the_mixture_weights():
    # Unset: the build fills in mixture.weights (the mix the model trains on).
    cfg = parse_config(_cfg(mixture={"weights": {"web": 0.8, "reference": 0.2}}))
    assert cfg.tokenize.train_source_weights == {"web": 0.8, "reference": 0.2}
    assert cfg.tokenize.source_weights() == {"web": 0.8, "reference": 0.2}
    # No mixture weights: the mixture keeps natural shares, and so does the sample.
    assert parse_config(_cfg()).tokenize.train_source_weights == "corpus"
    # What the user sets wins, "corpus" included; the hash follows the resolved value.
    own = parse_config(_cfg(mixture={"weights": {"web": 0.8, "reference": 0.2}},
                            tokenize={"train_source_weights": {"web": 1, "reference": 1}}))
    assert own.tokenize.train_source_weights == {"web": 1.0, "reference": 1.0}
    raw = parse_config(_cfg(mixture={"weights": {"web": 0.8, "reference": 0.2}},
                            tokenize={"train_source_weights": "corpus"}))
    assert raw.tokenize.source_weights() is None
    assert len({config_hash(c) for c in (cfg, own, raw)}) == 3


@pytest.mark.parametrize("shares, line", [
    ({"train_source_weights": {"web": 1, "blogs": 1}},
     "c.yaml: tokenize.train_source_weights.blogs: not a configured source (sources: reference, web)"),
    ({"train_source_weights": {"web": -0.5, "reference": 1}},
     "c.yaml: tokenize.train_source_weights: weights must be finite and >= 0, got {'web': -0.5}"),
    ({"train_source_weights": {"web": 0, "reference": 0}},
     "c.yaml: tokenize.train_source_weights: at least one weight must be > 0 (got {'web': 0.0, 'reference': 0.0})"),
    ({"train_source_weights": "mixture"},
     "c.yaml: tokenize.train_source_weights: a mapping source -> weight, 'corpus' (the corpus's own mix) or null "
     "(mixture.weights) (got 'mixture')"),
    ({"train_language_weights": {"zh": 1, "klingon": 1}},
     "c.yaml: tokenize.train_language_weights: 'klingon': not a language code lid.176 gives (ISO 639-1 such as "
     "en, zh, nb; see docs/stages/langid.md) nor a source's lang"),
])
def test_bad_tokenizer_sample_shares_are_one_config_line(shares, line):
    with pytest.raises(ConfigError) as exc:
        parse_config(_cfg(tokenize=shares), origin="c.yaml")
    assert str(exc.value).splitlines() == [line]


def test_output_formats_are_checked_before_any_work():
    assert parse_config(_cfg()).output.formats == ["mindrecord"]
    assert parse_config(_cfg(output={"formats": ["megatron", "mindrecord_shifted"]})).output.formats == \
        ["megatron", "mindrecord_shifted"]
    assert _errors(output={"formats": ["mindrecord", "tfrecord"]}) == [
        "c.yaml: output.formats: unknown format 'tfrecord': one of mindrecord, mindrecord_shifted, megatron "
        "(got ['mindrecord', 'tfrecord'])"]
    assert _errors(output={"formats": []}) == [
        "c.yaml: output.formats: no output format: list one or more of mindrecord, mindrecord_shifted, megatron "
        "(got [])"]
    assert _errors(output={"formats": ["megatron", "megatron"]}) == [
        "c.yaml: output.formats: 'megatron' is listed twice (got ['megatron', 'megatron'])"]
    assert _errors(output={"formats": ["megatron"], "packing": "best_fit"}) == [
        "c.yaml: output.formats: megatron cannot be written with packing: best_fit (its reader re-packs the "
        "sequences itself, so best-fit padding would be trained as text); use concat_split"]
    assert _errors(output={"eod_pad_length": 0}) == [
        "c.yaml: output.eod_pad_length: 0: actual_seq_len needs at least one entry (seq_length itself) (got 0)"]
