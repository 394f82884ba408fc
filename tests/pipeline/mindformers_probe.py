"""Run inside the mindformers 1.8 venv (``.venv-mindformers/bin/python``) by
tests/pipeline/test_mindformers.py: reads a version with mindformers' own classes and
writes what they return as .npy files for the test to compare.

Usage: ``python mindformers_probe.py CONFIG.json OUT_DIR`` where CONFIG holds
``version_dir``, ``helpers_dir`` (a folder with the compiled GPTDataset helpers, or
null when mindformers' own folder has them), ``train_dataset`` per format (the config
``python -m pipeline mindformers`` prints, as JSON) and ``batches`` (how many to read).
Imports nothing from this repository.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np


def load_helpers(helpers_dir):
    """Make ``mindformers.dataset.blended_datasets.helpers`` importable from
    ``helpers_dir`` (the .so compiled from mindformers' helpers.cpp with its Makefile's
    flags), so the shared venv's package folder is not written to."""
    if not helpers_dir:
        return
    so = next(Path(helpers_dir).glob("helpers*.so"))
    name = "mindformers.dataset.blended_datasets.helpers"
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module


def megatron_low_level(version_dir, out):
    """(a) IndexedDataset on the pair: every sequence in order."""
    from mindformers.dataset.blended_datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(str(Path(version_dir) / "megatron" / "corpus_text_document"))
    np.save(out / "indexed_lengths.npy", np.asarray(ds.sequence_lengths))
    np.save(out / "indexed_tokens.npy", np.concatenate([ds.get(k) for k in range(len(ds))]).astype(np.int64))
    np.save(out / "indexed_dtype.npy", np.array(str(np.dtype(ds.index.dtype))))


def megatron_gpt(cfg, out):
    """(b) GPTDataset built as BlendedMegatronDatasetDataLoader builds it, and the
    data loader's GeneratorDataset over it."""
    from mindformers.dataset.blended_datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder)
    from mindformers.dataset.blended_datasets.gpt_dataset import GPTDataset
    from mindformers.dataset.dataloader.blended_megatron_dataloader import MegatronDatasetBuilder

    loader = cfg["data_loader"]
    builder = MegatronDatasetBuilder(datasets_type=loader["datasets_type"], config=loader["config"])
    gpt_config = builder.init_gpt_dataset_config()
    dataset = BlendedMegatronDatasetBuilder(GPTDataset, loader["sizes"], lambda: True, gpt_config).build()[0]
    np.save(out / "document_index.npy", np.asarray(dataset.document_index))
    np.save(out / "sample_index.npy", np.asarray(dataset.sample_index))
    np.save(out / "shuffle_index.npy", np.asarray(dataset.shuffle_index))
    rows = [dataset[i] for i in range(len(dataset))]
    for k, name in enumerate(cfg["input_columns"]):
        np.save(out / f"gpt_{name}.npy", np.stack([r[k] for r in rows]))
    text = np.stack([dataset._query_document_sample_shuffle_indices(i)[0] for i in range(len(dataset))])
    np.save(out / "gpt_text.npy", text)
    # the data loader's own path: GeneratorDataset(shuffle=False) over the same GPTDataset
    gen = builder.builder(loader["sizes"], cfg["input_columns"], shuffle=False)
    first = [np.asarray(c) for c in next(gen.create_tuple_iterator(output_numpy=True, num_epochs=1))]
    np.save(out / "loader_first_input_ids.npy", first[0])
    (out / "gpt_len.json").write_text(json.dumps(len(dataset)))


def mindrecord(cfg, fmt, batches, out):
    """(c) CausalLanguageModelDataset with the printed train_dataset block."""
    from mindformers.dataset import CausalLanguageModelDataset
    from mindformers.tools.register import MindFormerConfig

    dataset = CausalLanguageModelDataset(dataset_config=MindFormerConfig(**cfg))
    names = dataset.get_col_names()
    got = {name: [] for name in names}
    for b, row in enumerate(dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)):
        if b >= batches:
            break
        for name, value in zip(names, row):
            got[name].append(np.asarray(value))
    for name, values in got.items():
        np.save(out / f"{fmt}_{name}.npy", np.stack(values))
    (out / f"{fmt}_columns.json").write_text(json.dumps(names))


def main():
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    load_helpers(cfg.get("helpers_dir"))
    if "megatron" in cfg["train_dataset"]:
        megatron_low_level(cfg["version_dir"], out)
        megatron_gpt(cfg["train_dataset"]["megatron"], out)
    for fmt in ("mindrecord", "mindrecord_shifted"):
        if fmt in cfg["train_dataset"]:
            mindrecord(cfg["train_dataset"][fmt], fmt, cfg["batches"], out)


if __name__ == "__main__":
    main()
