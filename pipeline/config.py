"""The build config: typed, validated when loaded, hashed for the manifest.

A build reads ``configs/<VERSION>.yaml`` when it exists, else
``configs/default.yaml``. Every section is a pydantic model with
``extra="forbid"``: an unknown key or a wrong type stops the run before any
work with :class:`ConfigError`, whose message is one line per problem naming
the key (``dedup.num_bands: Input should be a valid integer``).
Each stage's section is the ``Config`` class next to the stage
(``stages/<name>.py``), so a stage's options are documented where they are used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from stages import STAGES, stage_class

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"


class ConfigError(ValueError):
    """The config cannot be used; the message names each bad key on one line."""


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
            JSONL; anything else is plain text.
        text_field: JSON key or Parquet column holding the document text
            (a Parquet file without that text column is a config error).
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
    """

    paths: list[str] = pydantic.Field(min_length=1)
    format: Literal["auto", "jsonl", "parquet", "text"] = "auto"
    text_field: str = "text"
    text_unit: Literal["file", "line"] = "file"
    lang: str | None = None
    id_field: str | None = None
    root: str | None = None
    storage_options: dict[str, Any] = pydantic.Field(default_factory=dict)


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
            the mindformers convention).
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
        table_part_bytes: target size of one part of ``documents/``,
            ``decisions/<stage>/`` and ``lineage_by_doc/`` (text bytes; parts
            are a power of two in number, split by id hash). A part is one
            task's working set (~3x its bytes, sorted in memory) and one
            file: 32 MiB keeps that task near the size of the others; 1 TB of
            kept text is then ~30,000 parts, as many as partitions.
    """

    seq_length: int = pydantic.Field(2048, ge=8)
    max_shard_bytes: int = pydantic.Field(256 * 1024 * 1024, ge=1024)
    packing: Literal["concat_split", "best_fit"] = "concat_split"
    order_bucket_tokens: int = pydantic.Field(16 * 1024 * 1024, ge=16, le=1 << 30)
    shuffle_bucket_samples: int = pydantic.Field(8192, ge=1)
    table_part_bytes: int = pydantic.Field(32 * 1024 * 1024, ge=1024, le=1 << 30)

    @pydantic.model_validator(mode="after")
    def _bucket_fits_32_bit_offsets(self):
        tokens = self.shuffle_bucket_samples * (self.seq_length + 1)
        if tokens > 1 << 30:
            raise ValueError(f"shuffle_bucket_samples x (seq_length + 1) = {tokens:,} tokens in one shuffle range: "
                             f"at most {1 << 30:,} (lower shuffle_bucket_samples)")
        return self


def _stage_fields() -> dict[str, Any]:
    # No default: parse_config fills a missing section with {} so that a
    # required key inside it is reported as "<stage>.<key>".
    return {name: (stage_class(name).Config, ...) for name in STAGES}


class _BuildBase(_Strict):
    seed: int = 1234
    corpora_dir: str = "corpora"
    sources: dict[str, SourceConfig] = pydantic.Field(min_length=1)
    executor: ExecutorConfig = pydantic.Field(default_factory=ExecutorConfig)
    ingest: IngestConfig = pydantic.Field(default_factory=IngestConfig)
    output: OutputConfig = pydantic.Field(default_factory=OutputConfig)


_BuildConfigModel = None


def _model():
    global _BuildConfigModel
    if _BuildConfigModel is None:
        _BuildConfigModel = pydantic.create_model(
            "BuildConfig", __base__=_BuildBase, **_stage_fields())
    return _BuildConfigModel


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
    for name in ("tokenize", "mixture"):
        if not getattr(cfg, name).enabled:
            errors.append(f"{name}.enabled: this stage cannot be turned off (every version is tokenized and sampled)")
    ref = cfg.perplexity.reference_source
    if cfg.perplexity.enabled and ref not in names:
        errors.append(f"perplexity.reference_source: {ref!r} is not a configured source")
    return errors


def _format_errors(exc: pydantic.ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif err["type"] == "missing":
            lines.append(f"{key}: required key is missing")
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
    data = {**{name: {} for name in STAGES}, **data}
    try:
        cfg = _model().model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError("\n".join(f"{origin}: {line}" for line in _format_errors(exc))) from None
    errors = _cross_checks(cfg)
    if errors:
        raise ConfigError("\n".join(f"{origin}: {line}" for line in errors))
    return cfg


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
    """The resolved config (every default filled in) as plain JSON-able data."""
    return cfg.model_dump(mode="json")


def config_hash(cfg) -> str:
    """sha256 of the resolved config in canonical JSON (sorted keys), with
    credentials redacted (``pipeline.redact``): the hash is published, and a
    hash of a short password can be reversed by trying candidates."""
    from pipeline.redact import redact

    return hashlib.sha256(json.dumps(redact(config_dict(cfg)), sort_keys=True).encode()).hexdigest()
