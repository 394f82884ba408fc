"""pipeline/order.py and pipeline/loader.py: which rows each rank gets at each step."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pipeline.loader import create_dataset
from pipeline.order import epoch_positions, num_steps, rank_samples, step_samples, stream_samples
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
    assert step_samples(2, 8) == list(range(16, 24)) == step_samples(2, 8, num_samples=50)
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
        # the sampler starts at step 4: the dataset holds the remaining 2 steps
        assert resumed_dataset.get_dataset_size() == 2
        resumed = _batches(resumed_dataset)
        assert len(resumed) == 2
        for a, b in zip(resumed, full[4:]):
            np.testing.assert_array_equal(a, b)


def test_iterating_again_repeats_the_run_from_its_start(version):
    """A trainer's second pass over the same dataset object is MindSpore's
    repeat of the dataset: the resumed run again from its start (so num_epochs
    of create_dataset must cover the run)."""
    dataset = create_dataset(version, 8, 1, 2, start_step=3)
    iterator = dataset.create_dict_iterator(output_numpy=True, num_epochs=2)
    epochs = [[_global_indices(b["input_ids"]) for b in iterator] for _ in range(2)]
    assert epochs[0] == epochs[1] == [rank_samples(s, 8, 1, 2) for s in (3, 4, 5)]


def test_a_resumed_dataset_reads_with_the_default_iterators(version):
    """The README's loop: create_tuple_iterator / create_dict_iterator without
    num_epochs (-1). A resume through MindSpore's set_init_step fails there
    ("reset step must be less than dataset_size * num_epochs", MindSpore 2.10),
    so start_step moves the sampler instead."""
    dataset = create_dataset(version, 8, 1, 2, start_step=3)
    tuples = dataset.create_tuple_iterator(output_numpy=True)
    assert [_global_indices(next(tuples)[0]) for _ in range(3)] == [rank_samples(s, 8, 1, 2) for s in (3, 4, 5)]
    first = next(create_dataset(version, 8, start_step=5).create_dict_iterator(output_numpy=True))
    assert _global_indices(first["input_ids"]) == list(range(40, 48))


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
        ({"global_batch": 8, "start_step": 18, "num_epochs": 3}, r"past the last step \(17\) of 3 epoch"),
        ({"global_batch": 8, "consumed_samples": 143, "num_epochs": 3}, "consumed_samples 143 is past"),
        ({"global_batch": 8, "consumed_samples": 8, "start_step": 1}, "not both"),
        ({"global_batch": 8, "num_epochs": 0}, "num_epochs"),
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


# ---------------------------------------------------------------- epochs and resume


def test_epoch_permutation_known_properties():
    n = NUM_SAMPLES
    epoch0 = stream_samples(np.arange(n), n, seed=0)
    epoch1 = stream_samples(np.arange(n, 2 * n), n, seed=0)
    epoch2 = stream_samples(np.arange(2 * n, 3 * n), n, seed=0)
    np.testing.assert_array_equal(epoch0, np.arange(n))  # epoch 0: the build's order, whatever the seed
    np.testing.assert_array_equal(stream_samples(np.arange(n), n, seed=5), np.arange(n))
    for epoch in (epoch1, epoch2):
        assert sorted(epoch.tolist()) == list(range(n))  # a permutation of all samples
        assert (epoch != np.arange(n)).sum() > n // 2
    assert epoch1.tolist() != epoch2.tolist()
    np.testing.assert_array_equal(stream_samples(np.arange(n, 2 * n), n, seed=0), epoch1)  # same seed, same order
    assert stream_samples(np.arange(n, 2 * n), n, seed=1).tolist() != epoch1.tolist()
    # pinned: a change of the order scheme would silently change every lineage past epoch 0
    assert epoch1[:10].tolist() == [15, 38, 32, 10, 18, 25, 11, 34, 20, 46]
    # the inverse: where each sample is read in epochs 0..2
    for sample in range(n):
        positions = epoch_positions(sample, n, 3, seed=0)
        assert [positions[0], epoch1[positions[1] - n], epoch2[positions[2] - 2 * n]] == [sample] * 3
    for size in (1, 2, 3, 7, 64, 65, 1000, 4097):  # odd bit counts, powers of two, cycle-walking
        for epoch in (1, 4):
            perm = stream_samples(np.arange(epoch * size, (epoch + 1) * size), size, seed=9)
            assert np.array_equal(np.sort(perm), np.arange(size))


def test_steps_across_epochs_read_every_sample_once_per_epoch(version):
    # 3 epochs of 50 samples at global batch 8: 18 steps; step 6 = samples 48, 49 of
    # epoch 0 and the first 6 of epoch 1; the last 6 positions (144..149) are the run's end
    dataset = create_dataset(version, 8, num_epochs=3, seed=4)
    assert dataset.get_dataset_size() == 18 == num_steps(NUM_SAMPLES, 8, 3)
    read = np.concatenate([_global_indices(b) for b in _batches(dataset)])
    np.testing.assert_array_equal(read, stream_samples(np.arange(144), NUM_SAMPLES, seed=4))
    np.testing.assert_array_equal(read[:50], np.arange(50))  # epoch 0 as before
    assert sorted(read[50:100].tolist()) == list(range(50))  # epoch 1: every sample once
    assert read[48:56].tolist() == [48, 49, *stream_samples(np.arange(50, 56), NUM_SAMPLES, seed=4).tolist()]
    other = np.concatenate([_global_indices(b) for b in _batches(create_dataset(version, 8, num_epochs=3, seed=5))])
    assert other[:50].tolist() == read[:50].tolist() and other[50:].tolist() != read[50:].tolist()


@pytest.mark.parametrize("dp_size", [1, 4])
def test_resume_across_an_epoch_boundary_equals_the_uninterrupted_run(version_with_boundaries, dp_size):
    vdir, bounds = version_with_boundaries
    for rank in range(dp_size):
        full = list(create_dataset(vdir, 8, rank, dp_size, num_epochs=3, seed=2)
                    .create_tuple_iterator(output_numpy=True, num_epochs=1))
        for start in (5, 6, 7, 13):  # before, on and after the step that straddles epochs 0 and 1
            resumed = list(create_dataset(vdir, 8, rank, dp_size, num_epochs=3, seed=2, start_step=start)
                           .create_tuple_iterator(output_numpy=True, num_epochs=1))
            assert len(resumed) == 18 - start
            for (a_ids, a_ends), (b_ids, b_ends) in zip(resumed, full[start:]):
                np.testing.assert_array_equal(a_ids, b_ids)
                np.testing.assert_array_equal(a_ends, b_ends)
        for step, (ids, ends) in enumerate(full):
            want = rank_samples(step, 8, rank, dp_size, num_samples=NUM_SAMPLES, seed=2)
            np.testing.assert_array_equal(ids[:, 0] // 100, want)
            np.testing.assert_array_equal(ends, bounds[want])


@pytest.mark.parametrize("dp_size", [1, 2])
def test_resume_by_consumed_samples_after_a_batch_size_change(version, dp_size):
    """Ramp-up: 5 steps of 8 (40 samples), then global batch 16. The resumed
    run reads positions 40, 41, ... of the same stream, as the uninterrupted
    run with the new batch size would."""
    stream = stream_samples(np.arange(150), NUM_SAMPLES, seed=3)
    first = create_dataset(version, 8, num_epochs=3, seed=3)
    trained = np.concatenate([_global_indices(b) for b in _batches(first)][:5])
    np.testing.assert_array_equal(trained, stream[:40])
    for rank in range(dp_size):
        resumed = create_dataset(version, 16, rank, dp_size, num_epochs=3, seed=3, consumed_samples=40)
        # steps of 16 counted from position 40 % 16 = 8; the resume is step 40 // 16 = 2 of them
        assert resumed.get_dataset_size() == (150 - 8) // 16 - 2  # steps of 16 from position 40
        batches = _batches(resumed)
        assert len(batches) == 8 - 2
        for k, batch in enumerate(batches):
            positions = 40 + 16 * k + rank + dp_size * np.arange(16 // dp_size)
            np.testing.assert_array_equal(batch, _rows()[stream[positions]])


def test_set_init_step_after_start_step_does_not_skip_twice(version):
    from pipeline.loader import ResumeWarning

    full = _batches(create_dataset(version, 8, num_epochs=2))
    dataset = create_dataset(version, 8, num_epochs=2, start_step=4)
    for again in (4, 7):  # mindformers' trainer calls set_init_step(initial_step) on resume
        with pytest.warns(ResumeWarning, match=rf"set_init_step\({again}\) ignored: this dataset already resumed "
                                               r"at step 4"):
            dataset.set_init_step(again)
    resumed = _batches(dataset)
    assert len(resumed) == 12 - 4
    for a, b in zip(resumed, full[4:]):
        np.testing.assert_array_equal(a, b)


def test_set_init_step_on_a_fresh_dataset_resumes_like_start_step(version):
    from pipeline.loader import ResumeWarning

    full = _batches(create_dataset(version, 8, 1, 2, num_epochs=2))
    dataset = create_dataset(version, 8, 1, 2, num_epochs=2)
    with pytest.raises(ValueError, match=r"set_init_step needs an int in \[0, 12\), got 12"):
        dataset.set_init_step(12)
    dataset.set_init_step(0)  # nothing to skip, nothing applied
    dataset.set_init_step(7)  # past the epoch boundary (step 6 straddles it)
    with pytest.warns(ResumeWarning):
        dataset.set_init_step(3)
    resumed = _batches(dataset)
    by_start_step = _batches(create_dataset(version, 8, 1, 2, num_epochs=2, start_step=7))
    assert len(resumed) == len(by_start_step) == 5
    for a, b, c in zip(resumed, by_start_step, full[7:]):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


# ---------------------------------------------------------------- open-file limit


def test_open_file_need_and_build_warning():
    from pipeline.loader import open_files_warning, required_open_files

    assert required_open_files(3, 1) == 8 + 64  # ceil(3 * 2 * 1.25) + 64
    assert required_open_files(400, 1) == 1064 and required_open_files(400, 2) == 1564
    assert required_open_files(3, 1, readers=3) == 23 + 64  # the shard list read 3 times (num_epochs > dp_size)
    assert open_files_warning(384) is None  # 960 + 64 = 1024 fits
    warning = open_files_warning(400)
    assert "400 shards need ~1064 open files" in warning and "ulimit -n 1064" in warning
    assert "output.max_shard_bytes" in warning
    # how the build shows it: manifest output_warnings, printed under the summary and in report.html
    from pipeline.cli import warning_lines

    manifest = {"stage_order": ["langid"], "stages": {"langid": {"warnings": ["w1"]}}, "output_warnings": [warning]}
    assert warning_lines(manifest) == ["warning [langid] w1", f"warning [output] {warning}"]


_FD_SCRIPT = """
import resource, sys
from pipeline.loader import create_dataset
soft, hard = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
try:
    rows = sum(1 for _ in create_dataset(sys.argv[1], 8).create_tuple_iterator(output_numpy=True))
except OSError as exc:
    print("ERROR", exc)
else:
    print("OK", rows, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.parametrize("soft, hard, expected", [
    (40, 4096, "OK 6 72"),  # 3 shards, 1 worker: raised to the need, 72
    (40, 60, "ERROR reading 3 shards with 1 worker(s) needs ~72 open files (MindDataset keeps 2 per shard, "
             "plus margin), the soft limit is 40 and the hard limit 60: run 'ulimit -n 72'"),
])
def test_open_file_limit_is_raised_or_refused_clearly(version, soft, hard, expected):
    import subprocess
    import sys

    # the limit is lowered in a fresh process (it cannot be raised back there without privileges)
    res = subprocess.run([sys.executable, "-c", _FD_SCRIPT, str(version), str(soft), str(hard)],
                         capture_output=True, text=True, timeout=300, cwd=os.getcwd())
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1].startswith(expected), res.stdout


# ---------------------------------------------------------------- mixture phases


@pytest.fixture(scope="module")
def phased_version(tmp_path_factory):
    """The 50 rows as a two-phase schedule: rows 0..29 phase ``main``, 30..49 ``anneal``."""
    root = tmp_path_factory.mktemp("phased")
    vdir = root / "v1"
    shards = write_shards(_rows(), vdir, max_shard_bytes=20 * (SEQ_LENGTH + 1) * 4)
    manifest = {"seq_length": SEQ_LENGTH, "num_samples": NUM_SAMPLES, "shards": shards,
                "phases": [{"name": "main", "first_sample": 0, "num_samples": 30},
                           {"name": "anneal", "first_sample": 30, "num_samples": 20}]}
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    return vdir


def test_schedule_known_values():
    from pipeline.order import Stream

    phases = [{"name": "main", "first_sample": 0, "num_samples": 30},
              {"name": "anneal", "first_sample": 30, "num_samples": 20}]
    stream = Stream(NUM_SAMPLES, 8, seed=4, phases=phases)
    # main: 3 whole steps (24 samples, 6 unread); anneal starts at step 3 with 2 steps (4 unread)
    assert stream.schedule() == [
        {"name": "main", "first_sample": 0, "num_samples": 30, "first_position": 0, "first_step": 0, "steps": 3,
         "unread_samples": 6},
        {"name": "anneal", "first_sample": 30, "num_samples": 20, "first_position": 24, "first_step": 3, "steps": 2,
         "unread_samples": 4}]
    # a resume after a ramp-up at consumed_samples 4: steps are positions 4 + 8k, so main ends at 28
    ramp = Stream(NUM_SAMPLES, 8, seed=4, phases=phases, first_position=4)
    assert [(p["first_position"], p["first_step"], p["unread_samples"]) for p in ramp.schedule()] == \
        [(0, 0, 2), (28, 3, 4)]
    assert ramp.samples(np.arange(44)).tolist() == list(range(28)) + list(range(30, 46))
    assert ramp.num_steps(2) == (44 + 40 - 4) // 8 and ramp.epoch_of(43) == 0 and ramp.epoch_of(44) == 1
    later = ramp.samples(np.arange(44, 84))
    assert (later[:24] < 30).all() and (later[24:] >= 30).all()
    assert stream.epoch_positions == 40 and stream.num_steps(2) == 10
    assert stream.samples(np.arange(40)).tolist() == list(range(24)) + list(range(30, 46))
    epoch1 = stream.samples(np.arange(40, 80))
    assert len(set(epoch1.tolist())) == 40 and (epoch1[:24] < 30).all() and (epoch1[24:] >= 30).all()
    assert epoch1.tolist() != stream.samples(np.arange(40)).tolist()
    assert stream.positions_of(5, 2) == [5, 40 + int(np.flatnonzero(epoch1 == 5)[0])]
    assert stream.positions_of(27, 1) == [None]           # unread in epoch 0 at this global batch
    assert stream.positions_of(30, 1) == [24]             # anneal's first sample opens step 3
    with pytest.raises(ValueError, match="anneal \\(20 samples\\) hold no complete global batch of 24"):
        Stream(NUM_SAMPLES, 24, phases=phases)
    with pytest.raises(ValueError, match="do not tile"):
        Stream(NUM_SAMPLES, 8, phases=[{"name": "a", "first_sample": 0, "num_samples": 30}])
    # without phases: exactly the epoch stream
    assert Stream(NUM_SAMPLES, 8, seed=4).samples(np.arange(100)).tolist() == \
        stream_samples(np.arange(100), NUM_SAMPLES, seed=4).tolist()


@pytest.mark.parametrize("dp_size", [1, 2])
def test_loader_reads_the_phases_in_order_and_never_mixes_them_in_a_step(phased_version, dp_size):
    from pipeline.order import Stream

    stream = Stream(NUM_SAMPLES, 8, seed=4, phases=json.loads((phased_version / "manifest.json").read_text())["phases"])
    for rank in range(dp_size):
        dataset = create_dataset(phased_version, 8, rank, dp_size, num_epochs=2, seed=4)
        assert dataset.get_dataset_size() == 10
        batches = _batches(dataset)
        for step, batch in enumerate(batches):
            want = stream.samples(np.arange(step * 8, step * 8 + 8))[rank::dp_size]
            assert _global_indices(batch) == want.tolist()
            assert len({int(s >= 30) for s in want}) == 1, step  # one phase per step
        assert [int(b[0, 0] // 100 >= 30) for b in batches] == [0, 0, 0, 1, 1] * 2
        # a resume at the switch, and by consumed samples, continue the same stream
        resumed = _batches(create_dataset(phased_version, 8, rank, dp_size, num_epochs=2, seed=4, start_step=3))
        assert [_global_indices(b) for b in resumed] == [_global_indices(b) for b in batches[3:]]
        by_samples = _batches(create_dataset(phased_version, 8, rank, dp_size, num_epochs=2, seed=4,
                                             consumed_samples=24))
        assert [_global_indices(b) for b in by_samples] == [_global_indices(b) for b in batches[3:]]


def test_a_ramp_up_resume_off_the_grid_keeps_phases_apart(phased_version):
    """4 samples trained at another batch size, then global batch 8 from consumed_samples 4:
    main ends at position 28, so no step of the resumed run holds two phases."""
    from pipeline.order import Stream

    phases = json.loads((phased_version / "manifest.json").read_text())["phases"]
    stream = Stream(NUM_SAMPLES, 8, seed=4, phases=phases, first_position=4)
    for dp_size in (1, 2):
        for rank in range(dp_size):
            batches = _batches(create_dataset(phased_version, 8, rank, dp_size, num_epochs=2, seed=4,
                                              consumed_samples=4))
            assert len(batches) == stream.num_steps(2)
            for k, batch in enumerate(batches):
                want = stream.samples(4 + 8 * k + np.arange(8))
                assert _global_indices(batch) == want[rank::dp_size].tolist()
                assert len({int(s >= 30) for s in want}) == 1, k
