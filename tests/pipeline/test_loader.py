"""pipeline/order.py and pipeline/loader.py: which rows each rank gets at each step."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pipeline.loader import create_dataset
from pipeline.order import num_steps, rank_samples, step_samples
from pipeline.writer import write_shards

SEQ_LENGTH = 4
NUM_SAMPLES = 50  # global_batch 8 -> 6 complete steps, samples 48 and 49 never read


def _rows(num_samples: int = NUM_SAMPLES) -> np.ndarray:
    """Row i is [100*i, 100*i + 1, ...]: its content names its global index."""
    return (100 * np.arange(num_samples)[:, None] + np.arange(SEQ_LENGTH + 1)).astype(np.int32)


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    vdir = root / "v1"
    # 20 rows of 5 int32 per shard -> 3 shards of 20, 20, 10 rows
    shards = write_shards(_rows(), vdir, max_shard_bytes=20 * (SEQ_LENGTH + 1) * 4)
    assert len(shards) == 3
    manifest = {"seq_length": SEQ_LENGTH, "num_samples": NUM_SAMPLES, "shards": shards}
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    return vdir


def _batches(dataset) -> list[np.ndarray]:
    return [b["input_ids"] for b in dataset.create_dict_iterator(output_numpy=True, num_epochs=1)]


def _global_indices(batch: np.ndarray) -> list[int]:
    return (batch[:, 0] // 100).tolist()


# ---------------------------------------------------------------- order


def test_order_known_values():
    assert num_steps(50, 8) == 6 and num_steps(7, 8) == 0 and num_steps(0, 8) == 0
    assert step_samples(2, 8) == range(16, 24)
    assert rank_samples(2, 8, 0, 1) == list(range(16, 24))
    assert rank_samples(2, 8, 1, 4) == [17, 21]
    assert rank_samples(0, 8, 3, 4) == [3, 7]


def test_order_ranks_partition_each_step():
    for step in range(5):
        parts = [rank_samples(step, 12, r, 3) for r in range(3)]
        assert sorted(sum(parts, [])) == list(step_samples(step, 12))
        assert all(len(p) == 4 for p in parts)


@pytest.mark.parametrize(
    "args", [(0, 8, 4, 4), (0, 8, -1, 4), (0, 6, 0, 4), (0, 0, 0, 1), (-1, 8, 0, 1)]
)
def test_order_rejects_bad_split(args):
    with pytest.raises(ValueError):
        rank_samples(*args)


# ---------------------------------------------------------------- loader


@pytest.mark.parametrize("dp_size, global_batch", [(1, 8), (2, 8), (4, 8)])
def test_each_rank_gets_its_rows_for_every_step(version, dp_size, global_batch):
    rows = _rows()
    seen = []
    step_counts = set()
    for rank in range(dp_size):
        batches = _batches(create_dataset(version, global_batch, rank, dp_size))
        step_counts.add(len(batches))
        for step, batch in enumerate(batches):
            assert batch.dtype == np.int32 and batch.shape == (global_batch // dp_size, SEQ_LENGTH + 1)
            np.testing.assert_array_equal(batch, rows[rank_samples(step, global_batch, rank, dp_size)])
            seen += _global_indices(batch)
    assert step_counts == {6}  # every rank the same number of steps
    assert sorted(seen) == list(range(48))  # no sample twice, none missing, tail 48/49 dropped


def test_version_by_name_under_corpora_root(version):
    dataset = create_dataset("v1", 8, corpora_root=version.parent)
    assert _global_indices(_batches(dataset)[1]) == list(range(8, 16))


@pytest.mark.parametrize("dp_size", [1, 4])
def test_start_step_equals_the_tail_of_an_uninterrupted_run(version, dp_size):
    for rank in range(dp_size):
        full = _batches(create_dataset(version, 8, rank, dp_size))
        resumed_dataset = create_dataset(version, 8, rank, dp_size, start_step=4)
        assert resumed_dataset.get_dataset_size() == 2
        resumed = _batches(resumed_dataset)
        assert len(resumed) == 2
        for a, b in zip(resumed, full[4:]):
            np.testing.assert_array_equal(a, b)


def test_a_second_epoch_repeats_the_same_steps(version):
    dataset = create_dataset(version, 8, 1, 2, start_step=3)
    iterator = dataset.create_dict_iterator(output_numpy=True, num_epochs=2)
    epochs = [[_global_indices(b["input_ids"]) for b in iterator] for _ in range(2)]
    assert epochs[0] == epochs[1] == [rank_samples(s, 8, 1, 2) for s in (3, 4, 5)]


def test_two_workers_same_batches(version):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs")
    one = _batches(create_dataset(version, 8, 1, 2, num_parallel_workers=1))
    two = _batches(create_dataset(version, 8, 1, 2, num_parallel_workers=2))
    assert len(one) == len(two) == 6
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"global_batch": 8, "dp_rank": 4, "dp_size": 4}, "dp_rank"),
        ({"global_batch": 6, "dp_rank": 0, "dp_size": 4}, "not divisible"),
        ({"global_batch": 8, "num_parallel_workers": (os.cpu_count() or 1) + 1}, "num_parallel_workers"),
        ({"global_batch": 8, "start_step": 6}, "start_step"),
        ({"global_batch": 64}, "no complete global batch"),
    ],
)
def test_bad_arguments_raise(version, kwargs, message):
    with pytest.raises(ValueError, match=message):
        create_dataset(version, **kwargs)


def test_missing_version_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no corpus version 'nope'"):
        create_dataset("nope", 8, corpora_root=tmp_path)


def test_manifest_that_disagrees_with_shards_raises(version, tmp_path):
    manifest = json.loads((version / "manifest.json").read_text())
    cases = [
        ({**manifest, "num_samples": 49}, "num_samples"),
        ({**manifest, "seq_length": 8}, r"expected int32\[8, 9\]"),
        ({**manifest, "num_samples": 51,
          "shards": [*manifest["shards"][:2], {**manifest["shards"][2], "rows": 11}]}, "holds 10 rows"),
    ]
    for edited, message in cases:
        (version / "manifest.json").write_text(json.dumps(edited))
        try:
            with pytest.raises(ValueError, match=message):
                create_dataset(version, 8)
        finally:
            (version / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def version_with_boundaries(tmp_path_factory):
    vdir = tmp_path_factory.mktemp("corpora") / "vb"
    bounds = np.stack([np.arange(NUM_SAMPLES) % SEQ_LENGTH + 1, np.full(NUM_SAMPLES, SEQ_LENGTH)], axis=1)
    bounds = bounds.astype(np.int32)  # row i: [i % 4 + 1, 4], names its row too
    shards = write_shards(_rows(), vdir, max_shard_bytes=20 * (SEQ_LENGTH + 1) * 4,
                          columns={"actual_seq_len": bounds})
    manifest = {"seq_length": SEQ_LENGTH, "num_samples": NUM_SAMPLES, "shards": shards,
                "columns": {"input_ids": [SEQ_LENGTH + 1], "actual_seq_len": [2]}}
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    return vdir, bounds


@pytest.mark.parametrize("dp_size", [1, 4])
def test_boundaries_travel_with_their_rows_and_resume(version_with_boundaries, dp_size):
    vdir, bounds = version_with_boundaries
    for rank in range(dp_size):
        full = list(create_dataset(vdir, 8, rank, dp_size).create_tuple_iterator(output_numpy=True, num_epochs=1))
        resumed = list(create_dataset(vdir, 8, rank, dp_size, start_step=3)
                       .create_tuple_iterator(output_numpy=True, num_epochs=1))
        assert len(full) == 6 and len(resumed) == 3
        for step, (ids, ends) in enumerate(full):
            assert ends.dtype == np.int32 and ends.shape == (8 // dp_size, 2)
            np.testing.assert_array_equal(ends, bounds[rank_samples(step, 8, rank, dp_size)])
            np.testing.assert_array_equal(ids[:, 0] // 100, rank_samples(step, 8, rank, dp_size))
        for (a_ids, a_ends), (b_ids, b_ends) in zip(resumed, full[3:]):
            np.testing.assert_array_equal(a_ids, b_ids)
            np.testing.assert_array_equal(a_ends, b_ends)


def test_choose_columns(version_with_boundaries):
    vdir, _ = version_with_boundaries
    only_ids = next(create_dataset(vdir, 8, columns=["input_ids"]).create_dict_iterator(output_numpy=True))
    assert list(only_ids) == ["input_ids"]
    reordered = next(create_dataset(vdir, 8, columns=["actual_seq_len", "input_ids"])
                     .create_tuple_iterator(output_numpy=True))
    assert reordered[0].shape == (8, SEQ_LENGTH + 1)  # input_ids always first
    with pytest.raises(KeyError, match="position_ids"):
        create_dataset(vdir, 8, columns=["position_ids"])


def test_shard_size_is_checked_by_default_and_digests_on_request(version, tmp_path):
    import shutil

    from pipeline.manifest import write_manifest

    copy = tmp_path / "v1"
    shutil.copytree(version, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    write_manifest(manifest, copy)
    assert create_dataset(copy, 8, check_sha256=True).get_dataset_size() == 6
    shard = copy / manifest["shards"][1]["name"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit of one sample
    shard.write_bytes(bytes(data))
    assert create_dataset(copy, 8).get_dataset_size() == 6  # a size check cannot see it
    with pytest.raises(ValueError, match=f"{shard}: SHA-256 differs from the manifest"):
        create_dataset(copy, 8, check_sha256=True)
    shard.write_bytes(bytes(data) + b"\0" * 8)  # a size change is caught by default, before MindSpore reads
    with pytest.raises(ValueError, match=f"{shard}: {len(data) + 8} bytes, the manifest says {len(data)}"):
        create_dataset(copy, 8)
    shard.write_bytes(bytes(data[:-100]))
    with pytest.raises(ValueError, match="the manifest says"):
        create_dataset(copy, 8)


def test_an_edited_manifest_is_refused(version, tmp_path):
    import shutil

    from pipeline.manifest import ManifestError, write_manifest

    copy = tmp_path / "v1"
    shutil.copytree(version, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    with pytest.raises(ValueError, match="manifest.sha256: missing, so manifest.json cannot be checked"):
        create_dataset(copy, 8, check_sha256=True)  # digests asked for: the manifest's too
    write_manifest(manifest, copy)
    (copy / "manifest.json").write_text(json.dumps({**manifest, "num_samples": 40,
                                                    "shards": [*manifest["shards"][:2],
                                                               {**manifest["shards"][2], "rows": 0}]}))
    with pytest.raises(ManifestError, match="manifest.json: SHA-256 differs from manifest.sha256"):
        create_dataset(copy, 8)
