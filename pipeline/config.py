"""The build config: typed, validated when loaded, hashed for the manifest.

A build reads ``configs/<VERSION>.yaml`` when it exists, else
``configs/default.yaml``. Every section is a pydantic model with
``extra="forbid"``: an unknown key or a wrong type stops the run before any
work with :class:`ConfigError`, whose message is one line per problem naming
the key (``dedup.num_bands: Input should be a valid integer``).
Each stage's section is the ``Config`` class next to the stage
(``stages/<name>.py`` or ``stages/<name>/``, or a module listed under
``plugins``), so a stage's options are documented where they are used; the
model is made from the stages found (``stages.registry``). A model-level check
of a section names the key it is about by starting its message with ``<key>: ``
(``tokenize.vocab_size: 260 is too small ...``).

Checks across sections (:func:`_cross_checks`) run with the typed config,
still before any work: sources named by ``mixture.weights``,
``tokenize.train_source_weights`` and ``perplexity.reference_source``; the stage contract
(``pipeline.contract.contract_errors``: what each enabled stage reads comes
from an earlier enabled stage, what the assembly reads is provided); every
section pickles (it crosses to workers as it is); ``output.seq_length``
against ``mixture.token_budget``. Validators do no I/O: checks that need it
are :func:`preflight`, which the build runs next. Defaults that come from
another section are then filled in (:func:`_resolve_defaults`: the tokenizer's
training-sample shares from ``mixture.weights``). The version name is checked
by :func:`check_version`.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from pipeline.contract import contract_errors
from pipeline.writer import MAX_SEQ_LENGTH
from stages import RegistryError, stage_class, stage_names
from stages.lang_codes import unknown_codes

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"

#: Longest version name. A version is a directory name (``corpora/<V>``,
#: ``corpora/.work/<V>``, ``corpora/.tmp-<V>``) and half of a report's file
#: name (``reports/<A>-vs-<B>.html``): 100 characters keep every one of them
#: well under the 255-byte file-name limit of Linux file systems (and of
#: object-store keys' path segments).
MAX_VERSION_LENGTH = 100
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Names a version cannot take: ``corpora/.work/cache`` is the cross-build
#: cache (input digests, KenLM models), not a work directory.
RESERVED_VERSIONS = frozenset({"cache"})
#: Shortest ``output.seq_length``: our floor; a shorter window is mostly
#: document boundaries and gives a model almost no context.
MIN_SEQ_LENGTH = 8
#: ``output.formats``: what a version can be written as (docs/loader_and_lineage.md, "Formats").
OUTPUT_FORMATS = ("mindrecord", "mindrecord_shifted", "megatron")


class ConfigError(ValueError):
    """The config cannot be used; the message names each bad key on one line."""


def check_version(version: str) -> str:
    """Check a version name before anything is read or written.

    A version name is 1 to :data:`MAX_VERSION_LENGTH` ASCII letters, digits,
    ``.``, ``_`` and ``-``, starting with a letter or digit (so never a hidden
    or relative directory, an option, or a path), and not one of
    :data:`RESERVED_VERSIONS`.

    Returns:
        ``version``, unchanged.

    Raises:
        ConfigError: one line saying what is wrong (long names are shown
            shortened, with their length).
    """
    text = version if isinstance(version, str) else repr(version)
    shown = repr(text if len(text) <= 40 else text[:40] + "...")
    if len(text) > MAX_VERSION_LENGTH:
        raise ConfigError(f"version {shown} has {len(text)} characters: at most {MAX_VERSION_LENGTH} "
                          "(it names directories under corpora/ and report files)")
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise ConfigError(f"version {shown}: use ASCII letters, digits, '.', '_' or '-', starting with a "
                          "letter or digit (e.g. v1, 2024-06.zh)")
    if version in RESERVED_VERSIONS:
        raise ConfigError(f"version {shown} is reserved (corpora/.work/{version} holds the cross-build cache)")
    return version


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class SourceConfig(_Strict):
    """One named input source (e.g. ``web``, ``books``, ``code``).

    Attributes:
        paths: files or glob patterns (``**`` allowed), relative to the
            directory that holds ``configs/`` (the repo root) unless absolute.
            A wildcard skips hidden, partial-upload and temporary names, on
            disk and object storage alike (``pipeline.readers.resolve_paths``).
        format: ``auto`` picks by extension: ``.parquet`` is Parquet;
            ``.jsonl``/``.json``/``.ndjson`` (optionally ``.gz``/``.zst``) is
            JSONL; ``.warc``/``.arc`` (optionally ``.gz``) is WARC;
            ``.html``/``.htm``/``.xhtml`` is HTML; anything else is plain
            text. ``html``: raw web pages, one per file, or one per record of
            a JSONL/Parquet file with the HTML in ``text_field``; ``warc``:
            the ``response`` records of WARC/ARC files (gzip per record, as
            Common Crawl ships them, or uncompressed). Both become their main
            text (``extractor``) with the page's URL, WARC date and record id
            in ``meta`` (docs/inputs_html_warc.md).
        text_field: JSON key or Parquet column holding the document text (for
            ``format: html``, the raw HTML) (a Parquet file without that text
            column is a config error).
        text_unit: for plain text, ``file`` (one document per file) or
            ``line`` (one document per non-empty line).
        lang: a language the source declares (e.g. ``code``); such documents
            skip language ID and use that language's rule preset.
        id_field: a record field holding the input's own document id. The
            document id becomes ``"<source>:<that id>"``, and a record whose id
            was already seen (in any file of any source) is quarantined as
            ``read.duplicate_id``. Null (default): ids are
            ``"<source>:<file>:<line>"``, unique by construction.
        root: where ``paths`` are looked up, and what recorded file names (and
            so document ids) are relative to: a local directory (relative to
            the repo root) or an fsspec URL (``s3://bucket/corpus``). Moving a
            source between disk and object storage changes only ``root``; the
            ids, and so the corpus, stay the same. Null: the repo root.
        storage_options: fsspec options for remote paths (``s3://...``), e.g.
            ``{client_kwargs: {endpoint_url: "https://obs.example.com"}}``.
        extractor: the main-text extractor of ``html``/``warc`` pages:
            ``trafilatura`` or ``resiliparse``. The default is the one that
            scored best against a hand-made reference on 32 held-out pages in
            Chinese and English (docs/inputs_html_warc.md, ``make bench``
            topic ``html``).
    """

    paths: list[str] = pydantic.Field(min_length=1)
    format: Literal["auto", "jsonl", "parquet", "text", "html", "warc"] = "auto"
    text_field: str = "text"
    text_unit: Literal["file", "line"] = "file"
    lang: str | None = None
    id_field: str | None = None
    root: str | None = None
    storage_options: dict[str, Any] = pydantic.Field(default_factory=dict)
    extractor: Literal["trafilatura", "resiliparse"] = "trafilatura"


class ExecutorConfig(_Strict):
    """Where per-partition work runs.

    Attributes:
        kind: ``local`` (a process pool on this machine, the default) or
            ``ray`` (tasks on a Ray cluster; see docs/operations.md).
        num_workers: local worker processes; 1 runs everything in the driver.
        address: the Ray cluster (``auto``, ``host:6379``, ``ray://host:10001``);
            null starts a private local Ray instance.
        num_cpus_per_task: CPUs Ray reserves per task.
        batch_bytes: a stage that decides each document on its own is called
            on batches of about this much text (UTF-8 bytes) of a partition,
            so a worker's memory follows the batch, not the partition; the
            output is the same for any value. 8 MiB: the heuristics stage, the
            hungriest, peaks at ~45x its batch (measured: docs/architecture.md,
            "Scale").
    """

    kind: Literal["local", "ray"] = "local"
    num_workers: int = pydantic.Field(2, ge=1, le=1024)
    address: str | None = None
    num_cpus_per_task: float = pydantic.Field(1.0, gt=0)
    batch_bytes: int = pydantic.Field(8 * 1024 * 1024, ge=1024)


class IngestConfig(_Strict):
    """Reading inputs into partitions.

    Attributes:
        partition_bytes: UTF-8 bytes of text per partition (a partition is
            the unit of parallel work, of resume and of a worker's memory; a
            partition never spans two input files). 32 MiB: a worker holds a
            few times that while a stage runs (measured peak per stage:
            docs/architecture.md, "Scale"); 1 TB of text is then ~30,000
            partitions. For 1 TB on 100 machines, 128-256 MiB halves to
            quarters the number of files every exchange touches.
        partition_max_docs: also close a partition at this many documents
            (null: no limit). 50,000: a task that reads a whole partition
            (view, dedup keys and signatures, assembly emit) holds per-document
            structures too, and 32 MiB of fortunes is 270,000 documents;
            measured on the scale bench (docs/architecture.md, "Scale"). Web
            pages (~3 KB) fill 32 MiB at ~10,000 documents, below the cap.
        max_record_bytes: a JSONL line or text document larger than this is
            quarantined (``read.record_too_large``) instead of loaded.
    """

    # Upper bounds keep every Arrow array of one task under 2**31 bytes or
    # values (32-bit offsets): a partition's text, one record, a part, a bucket.
    partition_bytes: int = pydantic.Field(32 * 1024 * 1024, ge=1024, le=1 << 30)
    partition_max_docs: int | None = pydantic.Field(50_000, ge=1)
    max_record_bytes: int = pydantic.Field(64 * 1024 * 1024, ge=1024, le=1 << 30)


class OutputConfig(_Strict):
    """The MindRecord output.

    Attributes:
        seq_length: tokens the model sees per sample; each row holds
            ``seq_length + 1`` int32 ids (inputs ``[:-1]``, labels ``[1:]``,
            the mindformers convention). From 8 (:data:`MIN_SEQ_LENGTH`, our
            floor) to 13,421,669 (``pipeline.writer.MAX_SEQ_LENGTH``: a row,
            with its document ends, must fit one MindRecord page of 256 MiB);
            a sample must also fit ``mixture.token_budget`` when one is set.
        max_shard_bytes: a shard file is closed when its raw int32 payload
            reaches this size (256 MiB: few files for a small corpus, enough
            files for parallel reads of a large one).
        packing: ``concat_split`` (documents joined with EOS and cut into
            windows; no padding; the mindformers default) or ``best_fit``
            (a document shorter than a window is never split; gaps padded with
            the pad id). See docs/stages/mixture_packing.md.
        order_bucket_tokens: tokens per range of the document order that one
            task packs (~10 bytes per token at a 16-bit vocabulary in that
            task, measured; 16 Mi tokens keep a pack task near the size of the
            other tasks). At 1 TB on big machines raise it with
            ``ingest.partition_bytes`` (fewer, larger exchange segments:
            docs/architecture.md, "Scale"). Only ``best_fit`` output
            depends on it (best fit within each range); ``concat_split``
            output is the same for any value.
        shuffle_bucket_samples: samples per key range of the global shuffle
            (a shard task reads the ranges that overlap its rows: ~1/4 of a
            default shard, so a shard reads ~5 ranges). No effect on the output.
        formats: the files written from the one packed, shuffled sample
            stream, any of :data:`OUTPUT_FORMATS` once each (default
            ``[mindrecord]``, the format of every earlier version):
            ``mindrecord`` (``shards/``: ``input_ids`` int32[seq_length + 1]
            and ``actual_seq_len``), ``mindrecord_shifted`` (``shifted/``:
            mindformers' packed columns ``input_ids``, ``labels``,
            ``loss_mask``, ``position_ids`` int32[seq_length] and
            ``actual_seq_len`` int32[eod_pad_length]) and ``megatron``
            (``megatron/corpus_text_document.bin/.idx``, the indexed dataset
            of mindformers' ``BlendedMegatronDatasetDataLoader``). ``megatron``
            requires ``packing: concat_split``: its reader concatenates the
            sequences itself, so best-fit padding would be trained as text.
            See docs/loader_and_lineage.md, "Formats".
        eod_pad_length: width of ``mindrecord_shifted``'s ``actual_seq_len``:
            the most document ends one sample may hold (its last entry is
            ``seq_length``). 128 is mindformers' default
            (``GPTDatasetConfig.eod_pad_length``,
            ``BlendedMegatronDatasetDataLoader``'s ``eod_pad_length``); set
            the same value in the training config. A sample with more is a
            build error naming the count, never a truncation.
        eod_mask_loss: ``mindrecord_shifted``'s ``loss_mask`` is 0 at the
            position whose input is a document's EOS (the prediction of the
            next document's first token across the reset). Default false,
            as Megatron-LM's ``--eod-mask-loss`` and mindformers'
            pretraining configs (``eod_mask_loss: False``); padding labels
            are masked either way.
        table_part_bytes: target size of one part of ``documents/``,
            ``decisions/<stage>/`` and ``lineage_by_doc/`` (text bytes; parts
            are a power of two in number, split by id hash). A part is one
            task's working set (~3x its bytes, sorted in memory) and one
            file: 32 MiB keeps that task near the size of the others; 1 TB of
            kept text is then ~30,000 parts, as many as partitions.
    """

    seq_length: int = 2048
    max_shard_bytes: int = pydantic.Field(256 * 1024 * 1024, ge=1024)
    packing: Literal["concat_split", "best_fit"] = "concat_split"
    order_bucket_tokens: int = pydantic.Field(16 * 1024 * 1024, ge=16, le=1 << 30)
    shuffle_bucket_samples: int = pydantic.Field(8192, ge=1)
    table_part_bytes: int = pydantic.Field(32 * 1024 * 1024, ge=1024, le=1 << 30)
    formats: list[str] = pydantic.Field(default_factory=lambda: ["mindrecord"])
    eod_pad_length: int = 128
    eod_mask_loss: bool = False

    @pydantic.field_validator("seq_length")
    @classmethod
    def _seq_length_in_bounds(cls, value: int) -> int:
        if value < MIN_SEQ_LENGTH:
            raise ValueError(f"{value} is below {MIN_SEQ_LENGTH} tokens: a shorter window is mostly document "
                             "boundaries (our floor)")
        if value > MAX_SEQ_LENGTH:
            raise ValueError(f"{value:,} tokens per sample cannot be stored: a MindRecord row of seq_length + 1 "
                             f"ids and up to seq_length document ends must fit one 256 MiB page, so at most "
                             f"{MAX_SEQ_LENGTH:,}")
        return value

    @pydantic.field_validator("formats")
    @classmethod
    def _known_formats(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(f"no output format: list one or more of {', '.join(OUTPUT_FORMATS)}")
        unknown = [f for f in value if f not in OUTPUT_FORMATS]
        if unknown:
            raise ValueError(f"unknown format {unknown[0]!r}: one of {', '.join(OUTPUT_FORMATS)}")
        twice = sorted({f for f in value if value.count(f) > 1})
        if twice:
            raise ValueError(f"{twice[0]!r} is listed twice")
        return value

    @pydantic.field_validator("eod_pad_length")
    @classmethod
    def _eod_pad_length_positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"{value}: actual_seq_len needs at least one entry (seq_length itself)")
        return value

    @pydantic.model_validator(mode="after")
    def _megatron_needs_concat_split(self):
        if "megatron" in self.formats and self.packing == "best_fit":
            raise ValueError("formats: megatron cannot be written with packing: best_fit (its reader re-packs the "
                             "sequences itself, so best-fit padding would be trained as text); use concat_split")
        return self

    @pydantic.model_validator(mode="after")
    def _bucket_fits_32_bit_offsets(self):
        tokens = self.shuffle_bucket_samples * (self.seq_length + 1)
        if tokens > 1 << 30:
            raise ValueError(f"shuffle_bucket_samples x (seq_length + 1) = {tokens:,} tokens in one shuffle range: "
                             f"at most {1 << 30:,} (lower shuffle_bucket_samples)")
        return self


def _stage_fields(plugins: tuple[str, ...]) -> dict[str, Any]:
    # No default: parse_config fills a missing section with {} so that a
    # required key inside it is reported as "<stage>.<key>".
    return {name: (stage_class(name, plugins).Config, ...) for name in stage_names(plugins)}


class _BuildBase(_Strict):
    #: Modules (importable dotted names) that define more stages
    #: (``stages.base.Stage`` subclasses with a ``name`` and an ``order``);
    #: each gets its config section. Omitted from the resolved config when
    #: empty. See docs/stages/adding_a_stage.md.
    plugins: tuple[str, ...] = ()
    seed: int = 1234
    corpora_dir: str = "corpora"
    sources: dict[str, SourceConfig] = pydantic.Field(min_length=1)
    executor: ExecutorConfig = pydantic.Field(default_factory=ExecutorConfig)
    ingest: IngestConfig = pydantic.Field(default_factory=IngestConfig)
    output: OutputConfig = pydantic.Field(default_factory=OutputConfig)


_MODELS: dict[tuple, type] = {}


def _model(plugins: tuple[str, ...] = ()):
    """The ``BuildConfig`` model for the built-in stages plus ``plugins``',
    made once per set of stage config classes (a plugin module imported
    again, e.g. reloaded in a notebook, gets a model of its new classes, so
    its sections pickle as the classes workers import)."""
    fields = _stage_fields(plugins)
    key = tuple((name, cls) for name, (cls, _) in fields.items())
    if key not in _MODELS:
        _MODELS[key] = pydantic.create_model("BuildConfig", __base__=_BuildBase, **fields)
    return _MODELS[key]


def _cross_checks(cfg) -> list[str]:
    errors = []
    names = set(cfg.sources)
    for src in cfg.mixture.weights:
        if src not in names:
            errors.append(f"mixture.weights.{src}: not a configured source (sources: {', '.join(sorted(names))})")
    if cfg.mixture.token_budget is not None:
        missing = names - set(cfg.mixture.weights)
        if missing:
            errors.append(f"mixture.weights: no weight for source(s) {', '.join(sorted(missing))} "
                          "(a token budget needs a weight for every source)")
    errors += contract_errors(cfg)
    declared = {src.lang for src in cfg.sources.values() if src.lang}
    for name in stage_names(cfg.plugins):
        for field, codes in getattr(cfg, name).language_codes().items():
            bad = unknown_codes(codes, declared)
            if bad:
                errors.append(f"{name}.{field}: {', '.join(map(repr, bad))}: not a language code lid.176 gives "
                              f"(ISO 639-1 such as en, zh, nb; see docs/stages/langid.md) nor a source's lang")
    sample_sources = cfg.tokenize.train_source_weights
    for src in sample_sources if isinstance(sample_sources, dict) else ():
        if src not in names:
            errors.append(f"tokenize.train_source_weights.{src}: not a configured source "
                          f"(sources: {', '.join(sorted(names))})")
    ref = cfg.perplexity.reference_source
    if cfg.perplexity.enabled and ref is None:
        errors.append("perplexity.reference_source: required key is missing (the source whose documents train "
                      "the KenLM models; or set perplexity.enabled: false)")
    elif cfg.perplexity.enabled and ref not in names:
        errors.append(f"perplexity.reference_source: {ref!r} is not a configured source")
    quality = getattr(cfg, "quality_classifier", None)
    if quality is not None and quality.enabled and quality.reference_source is not None \
            and quality.reference_source not in names:
        errors.append(f"quality_classifier.reference_source: {quality.reference_source!r} is not a configured "
                      f"source (sources: {', '.join(sorted(names))})")
    budget, window = cfg.mixture.token_budget, cfg.output.seq_length + 1
    if budget is not None and budget < window:
        errors.append(f"output.seq_length: a sample holds seq_length + 1 = {window:,} tokens, more than "
                      f"mixture.token_budget = {budget:,}: no sample could be packed")
    for k, phase in enumerate(getattr(cfg.mixture, "phases", None) or ()):
        for src in phase.weights:
            if src not in names:
                errors.append(f"mixture.phases.{k}.weights.{src}: not a configured source "
                              f"(sources: {', '.join(sorted(names))})")
        missing = names - set(phase.weights)
        if phase.weights and missing:
            errors.append(f"mixture.phases.{k}.weights: no weight for source(s) {', '.join(sorted(missing))} "
                          "(give every source a weight, 0 to leave it out of the phase)")
        if phase.token_budget < window:
            errors.append(f"mixture.phases.{k}.token_budget: {phase.token_budget:,} tokens, fewer than a sample "
                          f"(seq_length + 1 = {window:,}): every phase packs its own samples")
    if getattr(cfg.mixture, "align_samples", None) and cfg.output.packing != "concat_split":
        errors.append("mixture.align_samples: needs output.packing: concat_split (best fit's sample count is known "
                      "only after packing)")
    if getattr(cfg.mixture, "phases", None) and "megatron" in cfg.output.formats:
        errors.append("output.formats: megatron cannot carry mixture.phases (mindformers' GPTDataset re-packs and "
                      "re-shuffles the documents of the .bin/.idx, so the schedule would be lost); use mindrecord "
                      "or mindrecord_shifted")
    return errors


def _format_errors(exc: pydantic.ValidationError, always_on: dict[str, str]) -> list[str]:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 2 and err["loc"][1] == "enabled" \
                and str(err["loc"][0]) in always_on:
            lines.append(f"{key}: this stage cannot be turned off: {always_on[str(err['loc'][0])]}")
        elif err["type"] == "extra_forbidden" and len(err["loc"]) == 1 and isinstance(err.get("input"), dict):
            lines.append(f"{key}: unknown key (if it is the section of a stage of your own, list the module "
                         "that defines it under plugins: docs/stages/adding_a_stage.md)")
        elif err["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif err["type"] == "missing":
            lines.append(f"{key}: required key is missing")
        elif err["type"] == "value_error":
            msg = " ".join(err["msg"].removeprefix("Value error, ").split())
            if isinstance(err.get("input"), dict):
                # A section's own check: its message may start with the key it is about.
                field, sep, rest = msg.partition(": ")
                if sep and field.isidentifier():
                    key, msg = f"{key}.{field}", rest
                lines.append(f"{key}: {msg}")
            else:
                lines.append(f"{key}: {msg} (got {err.get('input')!r:.60})")
        else:
            lines.append(f"{key}: {err['msg']} (got {err.get('input')!r:.60})")
    return lines


def parse_config(data: dict[str, Any], origin: str = "<config>"):
    """Validate a config mapping.

    Returns:
        The typed, frozen ``BuildConfig``.

    Raises:
        ConfigError: one line per problem, each naming its key.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the config must be a mapping, not {type(data).__name__}")
    plugins = data.get("plugins") or ()
    if not isinstance(plugins, (list, tuple)) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{origin}: plugins: a list of module names (got {plugins!r:.60})")
    plugins = tuple(plugins)
    try:
        names = stage_names(plugins)
        model = _model(plugins)
    except RegistryError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    always_on = {name: getattr(stage_class(name, plugins).Config, "required_by_build", None) for name in names}
    always_on = {name: why for name, why in always_on.items() if why}
    data = {**{name: {} for name in names}, **data, "plugins": plugins}
    try:
        cfg = model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError("\n".join(f"{origin}: {line}" for line in _format_errors(exc, always_on))) from None
    try:
        errors = _cross_checks(cfg)
    except RegistryError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    for name in names:
        try:
            pickle.dumps(getattr(cfg, name))
        except Exception as exc:  # a plugin's config holding a lambda, a lock, an open file
            errors.append(f"{name}: this section cannot be sent to worker processes (pickle: "
                          f"{type(exc).__name__}: {exc})")
    if errors:
        raise ConfigError("\n".join(f"{origin}: {line}" for line in errors))
    return _resolve_defaults(cfg)


def _resolve_defaults(cfg):
    """Fill in the defaults that come from another section, so that each
    stage reads only its own (the stage contract): an unset
    ``tokenize.train_source_weights`` becomes ``mixture.weights`` (the BPE
    sample follows the mixture's target shares: the vocabulary serves the mix
    the model trains on), or ``"corpus"`` when ``mixture.weights`` is empty
    (the mixture keeps natural shares, i.e. the corpus's own mix). The
    resolved value is what the manifest's config shows and what the tokenize
    stage's fingerprint holds, so changing ``mixture.weights`` retrains a
    tokenizer that follows it."""
    tok = cfg.tokenize
    if tok.train_source_weights is not None:
        return cfg
    weights = dict(cfg.mixture.weights) if cfg.mixture.weights else "corpus"
    return cfg.model_copy(update={"tokenize": tok.model_copy(update={"train_source_weights": weights})})


def preflight(cfg, origin: str = "<config>") -> None:
    """The config checks that need I/O (``Stage.preflight`` of every enabled
    stage: a given KenLM model loads, ...), run once by the build after the
    config is parsed and before any work. Validators themselves do no I/O, so
    a config can be parsed (and cross to workers) without touching files.

    Raises:
        ConfigError: one line per problem, each naming its key.
    """
    plugins = tuple(cfg.plugins)
    errors = []
    for name in stage_names(plugins):
        if not getattr(cfg, name).enabled:
            continue
        lines = stage_class(name, plugins).preflight(getattr(cfg, name))
        if isinstance(lines, str) or not all(isinstance(line, str) for line in lines or ()):
            errors.append(f"{name}: preflight returned {type(lines).__name__}, not a list of lines (a stage bug)")
            continue
        errors += list(lines or ())
    if errors:
        raise ConfigError("\n".join(f"{origin}: {line}" for line in errors))


def config_path_for(version: str, config_dir: Path = CONFIG_DIR) -> Path:
    """``configs/<version>.yaml`` if it exists, else ``configs/default.yaml``."""
    own = config_dir / f"{version}.yaml"
    return own if own.exists() else config_dir / "default.yaml"


def load_config(path: Path):
    """Read and validate a YAML config file (see :func:`parse_config`).

    Raises:
        ConfigError: unreadable file, invalid YAML, unknown key, wrong type.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    return parse_config(data or {}, origin=str(path))


def config_dict(cfg) -> dict[str, Any]:
    """The resolved config (every default filled in) as plain JSON-able data;
    ``plugins`` only when there are some, ``mixture.phases`` and
    ``mixture.align_samples`` only when set (a build without them resolves
    to what it did before the keys existed)."""
    out = cfg.model_dump(mode="json")
    if not out.get("plugins"):
        out.pop("plugins", None)
    mixture = out.get("mixture")
    if isinstance(mixture, dict) and not mixture.get("phases") and mixture.get("align_samples") is None:
        # a one-phase mixture resolves (and hashes) as before mixture.phases existed
        mixture.pop("phases", None)
        mixture.pop("align_samples", None)
    return out


def config_hash(cfg) -> str:
    """sha256 of the resolved config in canonical JSON (sorted keys), with
    credentials redacted (``pipeline.redact``): the hash is published, and a
    hash of a short password can be reversed by trying candidates."""
    from pipeline.redact import redact

    return hashlib.sha256(json.dumps(redact(config_dict(cfg)), sort_keys=True).encode()).hexdigest()
