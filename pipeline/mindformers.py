"""``python -m pipeline mindformers VERSION``: the mindformers ``train_dataset`` block for
each output format of a version, and a check of the version against mindformers' own rules.

Every key name and rule below is mindformers 1.8.0's (the release that installs from
PyPI with its own MindSpore; /work/shared/notes/dependencies.md), read in its source
(``site-packages/mindformers/...``) and its configs (branch ``r1.8.0`` of the
mindformers repository):

* ``configs/general/llm_pretrain_dense_template.yaml``: the ``train_dataset`` /
  ``train_dataset_task`` layout of a Megatron pretraining run (``data_loader.type:
  BlendedMegatronDatasetDataLoader``, ``datasets_type: "GPTDataset"``, ``sizes``,
  ``config.{seed, split, seq_length, eod_mask_loss, reset_position_ids,
  create_attention_mask, reset_attention_mask, create_compressed_eod_mask, eod_pad_length,
  eod, pad, data_path}``, ``input_columns``, ``construct_args_key``,
  ``model.model_config.input_sliced_sig: True``).
* ``mindformers/dataset/dataloader/blended_megatron_dataloader.py``
  (``init_gpt_dataset_config``: the ``config`` keys read, incl. ``path_to_cache`` and
  ``add_extra_token_to_sequence``; defaults seed 1234, eod_pad_length 128).
* ``mindformers/trainer/base_trainer.py`` (``_get_columns_with_strategy``: column names
  and ``dataset_strategy`` ``[[dp, 1]] * 5`` for compressed EOD masks;
  ``_check_input_sliced_sig``; ``_train_dataset_postprocess``: ``take(sizes[0] //
  global_batch_size)`` steps).
* ``mindformers/dataset/causal_language_model_dataset.py`` (``_process_mindrecord_data``:
  ``dataset_dir`` scan with ``re.compile(r"mindrecord\\d*$")``; ``input_columns`` are
  MindDataset's ``columns_list``; ``asl_batch_wrapper``).
* ``mindformers/dataset/blended_datasets/indexed_dataset.py`` (``.idx`` header
  ``MMIDIDX\\x00\\x00``, version 1, dtype codes, int32 lengths, int64 byte pointers and
  document indices) and ``gpt_dataset.py`` (``_get_eod_attention_mask`` keeps at most
  ``eod_pad_length`` document ends of a window and drops the rest without a word).

What the version holds (``manifest.json`` ``formats``, written by the build):
``mindrecord`` (``shards/``, ``input_ids`` int32[S+1], ``actual_seq_len``),
``mindrecord_shifted`` (``shifted/``, ``input_ids``, ``labels``, ``loss_mask``,
``position_ids`` int32[S], ``actual_seq_len`` int32[eod_pad_length]) and ``megatron``
(``megatron/corpus_text_document.bin/.idx``). A version without ``formats`` has
``mindrecord`` only.

Imports numpy and yaml; MindSpore (for a shard's schema) inside :func:`check_version`.
Nothing from ``stages/``. Cost: the YAML reads the manifest and the ``.idx`` header and
lengths (4 B per sequence); the check also reads each shard's header and rebuilds
GPTDataset's index (O(num_sequences), :mod:`pipeline.gpt_order`) to count document ends per
window, reading the last token of every sequence only when the bound from the ``.idx``
(sequence ends per window) reaches ``eod_pad_length``.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline import layout
from pipeline.order import check_dp

FORMATS = ("mindrecord", "mindrecord_shifted", "megatron")
#: Folder of each MindRecord format inside a version.
FORMAT_DIRS = {"mindrecord": layout.SHARDS, "mindrecord_shifted": layout.SHIFTED}
#: Column order mindformers feeds the model (``input_columns`` = MindDataset's
#: ``columns_list``); for the pre-shifted format the order of
#: ``base_trainer._get_columns_with_strategy`` with ``create_compressed_eod_mask``.
SHIFTED_COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "actual_seq_len")
#: mindformers' file-name rule for a ``dataset_dir`` scan (causal_language_model_dataset.py).
MINDRECORD_NAME = re.compile(r"mindrecord\d*$")
MEGATRON_PREFIX = layout.megatron_prefix()
#: ``.idx`` header and dtype codes (indexed_dataset.py ``_INDEX_HEADER``, ``DType``).
IDX_HEADER = b"MMIDIDX\x00\x00"
IDX_DTYPES = {4: np.int32, 8: np.uint16}
#: mindformers' default ``eod_pad_length`` (GPTDatasetConfig, blended_megatron_dataloader.py).
DEFAULT_EOD_PAD_LENGTH = 128
#: mindformers' default GPTDataset seed (``config.get("seed", 1234)``).
DEFAULT_GPT_SEED = 1234


def version_formats(manifest: dict[str, Any]) -> list[str]:
    """The output formats a version holds, in :data:`FORMATS` order (``mindrecord``
    only for a version built before ``formats`` existed).

    Raises:
        ValueError: ``formats`` names a format this module does not know.
    """
    found = manifest.get("formats") or {"mindrecord": {}}
    unknown = sorted(set(found) - set(FORMATS))
    if unknown:
        raise ValueError(f"manifest formats: unknown format(s) {', '.join(unknown)}")
    return [f for f in FORMATS if f in found]


def _special_ids(manifest: dict[str, Any]) -> dict[str, int]:
    ids = (manifest.get("tokenizer") or {}).get("special_token_ids") or {}
    return {"pad": int(ids.get("pad", 0)), "eos": int(ids.get("eos", 1)), "bos": int(ids.get("bos", 2))}


def _eod_pad_length(manifest: dict[str, Any]) -> int:
    """The version's ``eod_pad_length`` (config ``output.eod_pad_length``): a format's
    own ``eod_pad_length``, else the width of the pre-shifted ``actual_seq_len``, else a
    top-level ``eod_pad_length``, else mindformers' default 128."""
    formats = manifest.get("formats") or {}
    for spec in (formats.get("mindrecord_shifted") or {}, formats.get("megatron") or {}):
        if spec.get("eod_pad_length"):
            return int(spec["eod_pad_length"])
    width = (((formats.get("mindrecord_shifted") or {}).get("columns") or {}).get("actual_seq_len") or [None])[0]
    return int(width or manifest.get("eod_pad_length") or DEFAULT_EOD_PAD_LENGTH)


def read_idx(idx_path: str | Path) -> dict[str, Any]:
    """The ``.idx`` of a Megatron indexed dataset, as mindformers' ``_IndexReader`` reads it.

    Returns:
        ``version``, ``dtype_code``, ``dtype`` (numpy type or None), ``sequence_count``,
        ``document_count``, ``sequence_lengths`` int32[n], ``sequence_pointers`` int64[n]
        (bytes into the ``.bin``), ``document_indices`` int64[d] (memory-mapped).

    Raises:
        ValueError: wrong magic, a truncated header or arrays (the message names the file).
    """
    path = Path(idx_path)
    with open(path, "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
    if len(head) < 34 or head[:9] != IDX_HEADER:
        raise ValueError(f"{path}: not a Megatron .idx (header {head[:9]!r}, want {IDX_HEADER!r})")
    version, code, seqs, docs = struct.unpack("<QBQQ", head[9:34])
    need = 34 + 4 * seqs + 8 * seqs + 8 * docs
    size = path.stat().st_size
    if size < need:
        raise ValueError(f"{path}: {size} bytes, the header announces {need}")
    data = np.memmap(path, mode="r", dtype=np.uint8)
    lengths = np.frombuffer(data, np.int32, seqs, 34)
    pointers = np.frombuffer(data, np.int64, seqs, 34 + 4 * seqs)
    documents = np.frombuffer(data, np.int64, docs, 34 + 12 * seqs)
    return {"version": version, "dtype_code": code, "dtype": IDX_DTYPES.get(code),
            "sequence_count": seqs, "document_count": docs, "sequence_lengths": lengths,
            "sequence_pointers": pointers, "document_indices": documents}


def layout_comment(global_batch: int, dp_size: int, megatron: bool) -> list[str]:
    """The data-parallel layout under which the lineage holds (mindformers'
    ``base_trainer`` global batch rule, full_batch False: global_batch_size =
    per-rank batch x data_parallel, the per-rank batch being runner_config.batch_size x
    micro_batch_num (pipeline) or x gradient_accumulation_steps, x
    micro_batch_interleave_num)."""
    per_rank = global_batch // dp_size
    what = "GPTDataset sample" if megatron else "row"
    return [
        f"Lineage holds for global batch {global_batch} over data_parallel {dp_size}: {per_rank} {what}s",
        "per rank per step = runner_config.batch_size x micro_batch_num (pipeline) or x",
        "gradient_accumulation_steps (divide batch_size by whichever you set); shuffle False;",
        "full_batch False with dataset_strategy [[dp, 1], ...]: rank r reads",
        f"{what}s s*{global_batch} + r + k*{dp_size} of step s (MindSpore's DistributedSampler(shuffle=False),",
        "as pipeline.order). With full_batch True a step holds the same samples, in blocks per rank.",
        ("GPTDataset sample i -> .idx sequences (= lineage rows, in order) -> documents:"
         " pipeline.mindformers.gpt_sample_lineage(version, manifest, order, i)" if megatron else
         f"`python -m pipeline lineage VERSION --step N --global-batch {global_batch} --dp-size {dp_size}`"),
    ]


def megatron_num_samples(manifest_or_idx: dict[str, Any], seq_length: int, global_batch: int) -> int:
    """Default ``sizes[0]`` for the Megatron format: GPTDataset's samples in one epoch,
    ``(tokens - 1) // seq_length`` (one-token overlap), rounded down to whole global
    batches (the trainer ``take``s ``sizes[0] // global_batch_size`` steps)."""
    tokens = int(np.asarray(manifest_or_idx["sequence_lengths"]).sum(dtype=np.int64))
    return ((tokens - 1) // seq_length) // global_batch * global_batch


def train_dataset_config(version_dir: str | Path, manifest: dict[str, Any], fmt: str, global_batch: int,
                         dp_size: int = 1, num_samples: int | None = None,
                         path_to_cache: str | None = None) -> dict[str, Any]:
    """The mindformers config keys for reading ``fmt`` of a version.

    Args:
        version_dir: the version directory (paths in the result are absolute).
        fmt: one of :data:`FORMATS` the version holds.
        global_batch, dp_size: samples per step and data-parallel size
            (``global_batch % dp_size == 0``).
        num_samples: Megatron only: ``sizes[0]`` (default: one epoch,
            :func:`megatron_num_samples`).
        path_to_cache: Megatron only: where GPTDataset caches its index (default
            ``./output/gpt_dataset_cache/<version>``; GPTDataset's own default is inside
            the version, which is published read-only).

    Returns:
        ``{"train_dataset": ..., "train_dataset_task": ..., "runner_config": {"batch_size"},
        "parallel_config": {"data_parallel"}, "model": {"model_config": ...}, "parallel":
        {"dataset_strategy": ..., "full_batch": False}}``; the value of ``dataset_strategy``
        has one ``[dp, 1]`` per input column.

    Raises:
        ValueError: ``fmt`` not in the version; bad ``global_batch``/``dp_size``.
    """
    check_dp(global_batch, 0, dp_size)
    if fmt not in version_formats(manifest):
        raise ValueError(f"version has no {fmt} format (it has {', '.join(version_formats(manifest))})")
    vdir = Path(version_dir).resolve()
    seq_length = int(manifest["seq_length"])
    ids = _special_ids(manifest)
    seed = int(manifest.get("seed", DEFAULT_GPT_SEED))
    per_rank = global_batch // dp_size
    common = {"num_parallel_workers": 1, "python_multiprocessing": False, "drop_remainder": True,
              "prefetch_size": 1, "numa_enable": False, "seed": seed, "batch_size": per_rank}
    if fmt in FORMAT_DIRS:
        columns = ["input_ids"] if fmt == "mindrecord" else list(SHIFTED_COLUMNS)
        train = {"data_loader": {"type": "MindDataset", "dataset_dir": str(vdir / FORMAT_DIRS[fmt]),
                                 "shuffle": False},
                 "input_columns": columns, "construct_args_key": list(columns), **common}
        model_config = {"input_sliced_sig": fmt == "mindrecord_shifted", "seq_length": seq_length,
                        "pad_token_id": ids["pad"], "eos_token_id": ids["eos"], "bos_token_id": ids["bos"]}
        if fmt == "mindrecord_shifted":
            model_config["use_eod_attn_mask_compression"] = True
    else:
        idx = read_idx(vdir / f"{MEGATRON_PREFIX}.idx")
        sizes0 = num_samples if num_samples is not None else megatron_num_samples(idx, seq_length, global_batch)
        columns = list(SHIFTED_COLUMNS)
        train = {"data_loader": {
            "type": "BlendedMegatronDatasetDataLoader", "datasets_type": "GPTDataset",
            "sizes": [int(sizes0), 0, 0],
            "config": {"seed": seed, "split": "1, 0, 0", "seq_length": seq_length,
                       "eod_mask_loss": False, "reset_position_ids": True, "create_attention_mask": False,
                       "reset_attention_mask": False, "create_compressed_eod_mask": True,
                       "eod_pad_length": _eod_pad_length(manifest), "eod": ids["eos"], "pad": ids["pad"],
                       "add_extra_token_to_sequence": True,
                       # one prefix, no weight: GPTDataset gets sizes[0] samples as they are
                       "data_path": [str(vdir / MEGATRON_PREFIX)],
                       "path_to_cache": path_to_cache or f"./output/gpt_dataset_cache/{vdir.name}"}},
            "input_columns": columns, "construct_args_key": list(columns), **common}
        model_config = {"input_sliced_sig": True, "seq_length": seq_length, "pad_token_id": ids["pad"],
                        "eos_token_id": ids["eos"], "bos_token_id": ids["bos"],
                        "use_eod_attn_mask_compression": True}
    return {"train_dataset": train,
            "train_dataset_task": {"type": "CausalLanguageModelDataset", "dataset_config": "*train_dataset"},
            "runner_config": {"batch_size": per_rank},
            "parallel_config": {"data_parallel": dp_size},
            "model": {"model_config": model_config},
            "parallel": {"dataset_strategy": [[dp_size, 1] for _ in columns], "full_batch": False}}


def format_yaml(version_dir: str | Path, manifest: dict[str, Any], fmt: str, global_batch: int,
                dp_size: int = 1, num_samples: int | None = None, path_to_cache: str | None = None) -> str:
    """:func:`train_dataset_config` as YAML to paste into a mindformers config, with a
    comment naming the format, what mindformers does with it, and the data-parallel
    layout under which lineage holds. ``train_dataset_task.dataset_config`` is the
    anchor ``*train_dataset`` as in mindformers' templates."""
    cfg = train_dataset_config(version_dir, manifest, fmt, global_batch, dp_size, num_samples, path_to_cache)
    notes = {
        "mindrecord": ["Format mindrecord: input_ids int32[seq_length + 1]; the model slices inputs and",
                       "labels itself (input_sliced_sig False). For attention that stops at document ends",
                       f"add eod_reset: True, eod_token_id: {_special_ids(manifest)['eos']}, output_columns:",
                       "[input_ids, position_ids, attention_mask] (then dataset_strategy has 3 entries), or",
                       "use mindrecord_shifted."],
        "mindrecord_shifted": ["Format mindrecord_shifted: pre-shifted columns, actual_seq_len = cumulative",
                               "document ends padded with seq_length. mindformers' asl_batch_wrapper (which",
                               "offsets actual_seq_len rows inside a micro batch) runs only for loaders that",
                               "build compressed masks themselves: keep batch_size x gradient steps such that a",
                               "micro batch holds one row per rank, or offset rows yourself."],
        "megatron": ["Format megatron: GPTDataset re-shuffles the .idx sequences and the windows with",
                     "numpy RandomState(seed) and reads seq_length + 1 tokens per sample, one token",
                     "overlapping the next (pipeline/gpt_order.py reproduces its order exactly).",
                     "sizes[0] = samples requested (default one epoch, whole global batches); the",
                     "trainer trains sizes[0] // global_batch_size steps. Needs",
                     "dataset_broadcast_opt_level 3 (mindformers sets it) and GPTDataset's C++",
                     "helpers (compiled by the data loader; `make -C .../blended_datasets`)."],
    }[fmt]
    text = yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None, width=100)
    text = text.replace("train_dataset:\n", "train_dataset: &train_dataset\n", 1)
    text = text.replace("dataset_config: '*train_dataset'", "dataset_config: *train_dataset")
    head = [f"# mindcorpus version {Path(version_dir).name}, format {fmt} (mindformers 1.8)"]
    head += [f"# {line}" for line in notes + layout_comment(global_batch, dp_size, fmt == "megatron")
             + phase_comment(manifest, global_batch)]
    return "\n".join(head) + "\n" + text


def phase_comment(manifest: dict[str, Any], global_batch: int) -> list[str]:
    """Where each mixture phase (``manifest["phases"]``) starts for a reader
    that takes the rows in order, ``global_batch`` per step (mindformers'
    ``MindDataset``, ``shuffle: False``): one line per phase, and a warning
    line for a phase whose first row is not on a step boundary (that step
    mixes two phases; ``pipeline.loader.create_dataset`` skips such rows
    itself, mindformers does not). Empty without phases."""
    lines = []
    for phase in manifest.get("phases") or ():
        first = int(phase["first_sample"])
        step, rest = divmod(first, global_batch)
        lines.append(f"Mixture phase {phase['name']}: rows {first}..{first + int(phase['num_samples']) - 1} "
                     f"(inclusive), from step {step}{'' if not rest else f' row {rest}'} at global batch "
                     f"{global_batch}.")
    return lines + [f"WARNING: {line}" for line in phase_problems(manifest, global_batch)]


def phase_problems(manifest: dict[str, Any], global_batch: int) -> list[str]:
    """What goes wrong when mindformers reads a staged mixture
    (``manifest["phases"]``) in row order, ``global_batch`` rows per step, one
    line each (empty: nothing): a phase that starts inside a step (that step
    mixes two phases, and from there on ``lineage --step N``, which describes
    ``pipeline.loader.create_dataset``'s steps, no longer names mindformers'
    step N), and a phase smaller than one global batch."""
    problems = []
    for k, phase in enumerate(manifest.get("phases") or ()):
        first, rows = int(phase["first_sample"]), int(phase["num_samples"])
        if rows < global_batch:
            problems.append(f"mixture phase {phase['name']} holds {rows} rows, fewer than one global batch of "
                            f"{global_batch}: lower the global batch or rebuild with a larger token_budget")
        elif k and first % global_batch:
            step, rest = divmod(first, global_batch)
            problems.append(
                f"mixture phase {phase['name']} starts at row {first}, inside step {step} at global batch "
                f"{global_batch}: read in order, step {step} mixes {rest} rows of the previous phase with "
                f"{global_batch - rest} of {phase['name']}, and from step {step} on `lineage --step N` (the "
                f"steps of pipeline.loader.create_dataset) is not mindformers' step N; rebuild with "
                f"mixture.align_samples a multiple of {global_batch}, or train with create_dataset")
    return problems


def _mindrecord_files(version_dir: Path, manifest: dict[str, Any], fmt: str) -> list[str]:
    if fmt == "mindrecord":
        return [s["name"] for s in manifest.get("shards") or []]
    spec = (manifest.get("formats") or {}).get(fmt) or {}
    files = spec.get("files") or spec.get("shards")
    if isinstance(files, dict):
        names = list(files)
    elif isinstance(files, list):
        names = [f["name"] if isinstance(f, dict) else str(f) for f in files]
    else:
        names = [str(p.relative_to(version_dir)) for p in sorted((version_dir / FORMAT_DIRS[fmt]).glob("*"))]
    return [n for n in names if not n.endswith(".db")]


def _check_mindrecord(version_dir: Path, manifest: dict[str, Any], fmt: str) -> list[str]:
    from mindspore.mindrecord import FileReader

    seq_length = int(manifest["seq_length"])
    if fmt == "mindrecord":
        widths = manifest.get("columns") or {"input_ids": [seq_length + 1]}
        want = {name: list(shape) for name, shape in widths.items()}
        if want.get("input_ids") != [seq_length + 1]:
            return [f"{fmt}: manifest columns.input_ids is {want.get('input_ids')}, want [{seq_length + 1}]"]
    else:
        pad = _eod_pad_length(manifest)
        want = {name: [seq_length] for name in SHIFTED_COLUMNS[:4]} | {"actual_seq_len": [pad]}
    problems = []
    names = _mindrecord_files(version_dir, manifest, fmt)
    if not names:
        return [f"{fmt}: no shard files in {FORMAT_DIRS[fmt]}/"]
    for name in names:
        path = version_dir / name
        if not MINDRECORD_NAME.search(path.name):
            problems.append(f"{fmt}: {name}: name does not match mindformers' pattern mindrecord\\d*$, "
                            "a dataset_dir scan skips it")
        if not path.is_file() or not layout.shard_index(path).is_file():
            problems.append(f"{fmt}: {name}: missing data file or its .db index")
            continue
        try:
            reader = FileReader(str(path), num_consumer=1)
            schema = reader.schema()
            reader.close()
        except Exception as exc:  # MindSpore raises RuntimeError/its own types
            problems.append(f"{fmt}: {name}: MindRecord cannot open it: {str(exc).splitlines()[0]}")
            continue
        got = {k: v.get("shape") for k, v in schema.items()}
        if sorted(got) != sorted(want):
            problems.append(f"{fmt}: {name}: columns {sorted(got)}, mindformers' order needs {list(want)}")
        for col, spec in schema.items():
            if spec.get("type") != "int32":
                problems.append(f"{fmt}: {name}: column {col} has type {spec.get('type')}, want int32")
            if col in want and list(spec.get("shape") or []) != want[col]:
                problems.append(f"{fmt}: {name}: column {col} has shape {spec.get('shape')}, want {want[col]}")
    return problems


def megatron_window_ends(idx: dict[str, Any], stream: np.ndarray | None, eod: int, seed: int, seq_length: int,
                         num_samples: int | None) -> np.ndarray:
    """Document ends inside each GPTDataset window's model input (``tokens =
    text[:-1]``; a window ending on EOD does not count it, as ``_get_eod_attention_mask``):
    int64[len(GPTDataset)], in ``sample_index`` order. With ``stream`` None, sequence
    ends instead of EOD tokens: an upper bound read from the ``.idx`` alone. Vectorised
    over the index (:mod:`pipeline.gpt_order`), O(num_epochs * num_sequences); with
    ``stream`` it reads the last token of every sequence (in file order, which touches
    most pages of the ``.bin``)."""
    from pipeline.gpt_order import build_order

    lengths = np.asarray(idx["sequence_lengths"])
    order = build_order(lengths, seed, seq_length, num_samples)
    if stream is None:
        ends_eod = lengths > 0
    else:
        itemsize = np.dtype(idx["dtype"]).itemsize
        last = np.asarray(idx["sequence_pointers"]) // itemsize + lengths - 1
        ends_eod = np.zeros(len(lengths), dtype=bool)
        nonempty = lengths > 0
        ends_eod[nonempty] = np.asarray(stream[last[nonempty]]) == eod
    # stream position of each read sequence's last token
    positions = np.cumsum(lengths[order.document_index], dtype=np.int64) - 1
    positions = positions[ends_eod[order.document_index]]
    window = positions // seq_length
    inside = positions % seq_length != seq_length - 1  # not the window's own last input token
    return np.bincount(window[inside], minlength=len(order) + 1)[:len(order)]


def _check_megatron(version_dir: Path, manifest: dict[str, Any], max_window_check: bool = True) -> list[str]:
    prefix = version_dir / MEGATRON_PREFIX
    problems = []
    if not prefix.name.endswith("_text_document"):
        problems.append(f"megatron: prefix {MEGATRON_PREFIX} does not end in _text_document")
    for suffix in (".bin", ".idx"):
        if not Path(f"{prefix}{suffix}").is_file():
            problems.append(f"megatron: {MEGATRON_PREFIX}{suffix} is missing")
    if problems:
        return problems
    try:
        idx = read_idx(f"{prefix}.idx")
    except ValueError as exc:
        return [f"megatron: {exc}"]
    if idx["version"] != 1:
        problems.append(f"megatron: .idx version {idx['version']}, mindformers reads version 1")
    if idx["dtype"] is None:
        return problems + [f"megatron: .idx dtype code {idx['dtype_code']}; want 4 (int32) or 8 (uint16)"]
    vocab = int((manifest.get("tokenizer") or {}).get("vocab_size") or 0)
    if idx["dtype"] is np.uint16 and vocab > 65536:
        problems.append(f"megatron: uint16 tokens but the vocabulary has {vocab} ids")
    lengths = np.asarray(idx["sequence_lengths"])
    itemsize = np.dtype(idx["dtype"]).itemsize
    if lengths.size and lengths.min() < 1:
        problems.append("megatron: an .idx sequence is empty")
    pointers = np.concatenate(([0], np.cumsum(lengths.astype(np.int64) * itemsize)[:-1]))
    if not np.array_equal(np.asarray(idx["sequence_pointers"]), pointers):
        problems.append("megatron: .idx sequence_pointers are not the byte offsets of consecutive sequences")
    docs = np.asarray(idx["document_indices"])
    if docs.size == 0 or docs[0] != 0 or docs[-1] != idx["sequence_count"]:
        problems.append("megatron: .idx document_indices must run from 0 to the sequence count "
                        "(mindformers asserts it)")
    total = int(lengths.sum(dtype=np.int64))
    bin_size = Path(f"{prefix}.bin").stat().st_size
    if bin_size != total * itemsize:
        problems.append(f"megatron: .bin has {bin_size} bytes, sum of lengths x itemsize is {total * itemsize}")
        return problems
    S = int(manifest["seq_length"])
    if "num_samples" in manifest and total != int(manifest["num_samples"]) * (S + 1):
        problems.append(f"megatron: {total} tokens, want num_samples x (seq_length + 1) = "
                        f"{int(manifest['num_samples']) * (S + 1)}")
    if max_window_check and not problems:
        pad, seed = _eod_pad_length(manifest), int(manifest.get("seed", DEFAULT_GPT_SEED))
        eos = _special_ids(manifest)["eos"]
        counts = megatron_window_ends(idx, None, eos, seed, S, None)  # bound from the .idx alone
        if counts.size and counts.max() >= pad:
            stream = np.memmap(f"{prefix}.bin", mode="r", dtype=idx["dtype"])
            counts = megatron_window_ends(idx, stream, eos, seed, S, None)
        if counts.size and counts.max() >= pad:
            problems.append(f"megatron: a GPTDataset window holds {int(counts.max())} document ends; "
                            f"eod_pad_length {pad} keeps {pad - 1} and drops the rest silently")
    return problems


def lineage_rows(version_dir: str | Path, manifest: dict[str, Any], rows: list[int],
                 columns: tuple[str, ...] = ("sample_index", "segment", "doc_id", "source", "file", "line",
                                             "doc_token_start", "doc_token_end", "sample_token_start",
                                             "sample_token_end")) -> list[dict[str, Any]]:
    """Rows ``rows`` (global positions) of ``lineage/`` in ``(sample_index, segment)``
    order, i.e. the Megatron ``.idx`` sequences of those numbers. Reads the parts'
    Parquet footers for their row counts, then only the row groups holding the rows:
    O(row group) per row, whatever the version's size.

    Raises:
        IndexError: a row past the last lineage row.
    """
    import pyarrow.parquet as pq

    parts = layout.lineage_parts_for(Path(version_dir), manifest, 0, int(manifest["num_samples"]))
    files = [pq.ParquetFile(p) for p in parts]
    # row-group start offsets across all parts
    starts, where = [], []
    at = 0
    for f_index, f in enumerate(files):
        for g in range(f.metadata.num_row_groups):
            starts.append(at)
            where.append((f_index, g))
            at += f.metadata.row_group(g).num_rows
    starts_arr = np.asarray(starts + [at])
    out = []
    cache: dict[int, Any] = {}
    for row in rows:
        if not 0 <= row < at:
            raise IndexError(f"lineage row {row} outside [0, {at})")
        g = int(np.searchsorted(starts_arr, row, side="right")) - 1
        if g not in cache:
            f_index, group = where[g]
            names = [c for c in columns if c in files[f_index].schema_arrow.names]
            cache[g] = files[f_index].read_row_group(group, columns=names)
        table = cache[g]
        out.append({c: table[c][row - int(starts_arr[g])].as_py() for c in table.column_names})
    return out


def gpt_sample_lineage(version_dir: str | Path, manifest: dict[str, Any], order: Any, sample: int) -> list[dict]:
    """The documents of GPTDataset sample ``sample`` (``order``: a
    :class:`pipeline.gpt_order.GPTOrder` of the version's ``.idx``): per piece, the
    lineage row of its sequence with ``doc_token_start``/``doc_token_end`` narrowed to
    the tokens the window holds, and ``window_token_start``/``window_token_end`` (range
    in the ``seq_length + 1`` window; the last token is only a label)."""
    pieces = order.pieces(sample)
    rows = lineage_rows(version_dir, manifest, [s for s, _, _ in pieces])
    out, at = [], 0
    for (sequence, offset, length), row in zip(pieces, rows):
        row = dict(row, sequence=sequence, window_token_start=at, window_token_end=at + length)
        row["doc_token_start"] = int(row["doc_token_start"]) + offset
        row["doc_token_end"] = row["doc_token_start"] + length
        out.append(row)
        at += length
    return out


def gpt_lineage_for_step(version_dir: str | Path, manifest: dict[str, Any], step: int, global_batch: int,
                         dp_size: int = 1, num_samples: int | None = None,
                         path_to_cache: str | Path | None = None) -> list[dict[str, Any]]:
    """What step ``step`` of a mindformers run on the ``megatron`` format trained: per
    rank (``pipeline.order.rank_samples`` layout), each GPTDataset sample with its
    pieces (:func:`gpt_sample_lineage`).

    Args:
        num_samples: the run's ``sizes[0]`` (default as printed: one epoch in whole
            global batches).
        path_to_cache: the run's ``path_to_cache``; GPTDataset's cached index is read
            from there when it matches, else the index is rebuilt
            (:mod:`pipeline.gpt_order`, O(num_sequences)).

    Returns:
        ``[{"dp_rank", "sample", "pieces": [...]}, ...]`` in rank order, then batch order.

    Raises:
        ValueError: no megatron format; a megatron file that breaks
            mindformers' rules (:func:`check_version`'s megatron lines: a
            missing or truncated ``.bin``, a bad ``.idx``); ``step`` past
            ``sizes[0] // global_batch``.
    """
    from pipeline.gpt_order import build_order, load_cached_order
    from pipeline.order import rank_samples

    if "megatron" not in version_formats(manifest):
        raise ValueError("version has no megatron format")
    check_dp(global_batch, 0, dp_size)
    vdir = Path(version_dir)
    # the files GPTDataset would read must be whole before their lineage means anything
    # (found by a hostile test: a .bin cut in half gave a step's documents and exit 0)
    problems = _check_megatron(vdir, manifest, max_window_check=False)
    if problems:
        raise ValueError("; ".join(problems))
    idx = read_idx(vdir / f"{MEGATRON_PREFIX}.idx")
    seq_length = int(manifest["seq_length"])
    seed = int(manifest.get("seed", DEFAULT_GPT_SEED))
    sizes0 = num_samples if num_samples is not None else megatron_num_samples(idx, seq_length, global_batch)
    steps = sizes0 // global_batch
    if not 0 <= step < steps:
        raise ValueError(f"step {step} outside [0, {steps}) (sizes[0] {sizes0} // global batch {global_batch})")
    lengths = np.asarray(idx["sequence_lengths"])
    order = None
    if path_to_cache is not None:
        order = load_cached_order(path_to_cache, str(vdir.resolve() / MEGATRON_PREFIX), lengths, seed,
                                  seq_length, sizes0)
    if order is None:
        order = build_order(lengths, seed, seq_length, sizes0)
    return [{"dp_rank": rank, "sample": sample, "pieces": gpt_sample_lineage(vdir, manifest, order, sample)}
            for rank in range(dp_size) for sample in rank_samples(step, global_batch, rank, dp_size)]


def check_version(version_dir: str | Path, manifest: dict[str, Any]) -> list[str]:
    """Every way the version breaks a mindformers 1.8 rule, one line each (empty: none).

    MindRecord formats: shard names match ``mindrecord\\d*$``, each has its ``.db``, the
    columns are the ones mindformers' order needs, int32, with the shapes of the
    manifest (``input_ids`` [S+1] / pre-shifted [S] and ``actual_seq_len``
    [eod_pad_length]). Pre-shifted: at most ``eod_pad_length`` segments per sample
    (the manifest's ``packing.boundaries_width`` is the most any sample has).
    Megatron: ``.idx`` magic, version 1, dtype int32 or uint16 (uint16 only for a
    vocabulary of <= 65,536 ids), pointers consecutive, document indices 0..n,
    ``.bin`` bytes = sum of lengths x itemsize = ``num_samples x (seq_length + 1)``
    tokens, and no GPTDataset window (seed = the version's, one epoch) with more
    document ends than ``eod_pad_length - 1``.
    """
    vdir = Path(version_dir)
    problems: list[str] = []
    try:
        formats = version_formats(manifest)
    except ValueError as exc:
        return [str(exc)]
    for fmt in formats:
        if fmt in FORMAT_DIRS:
            problems += _check_mindrecord(vdir, manifest, fmt)
        else:
            problems += _check_megatron(vdir, manifest)
    if "mindrecord_shifted" in formats:
        most = int((manifest.get("packing") or {}).get("boundaries_width") or 0)
        pad = _eod_pad_length(manifest)
        if most > pad:
            problems.append(f"mindrecord_shifted: a sample has {most} segments, more than eod_pad_length {pad}")
    return problems
