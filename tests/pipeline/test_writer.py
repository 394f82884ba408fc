"""pipeline/writer.py: deterministic MindRecord shards, validation, verification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.io import sha256_file
from pipeline.writer import (
    page_and_header_size,
    sha256_file,
    write_shards,
)

SEQ = 9  # seq_length 8 -> rows of 9 tokens


def _samples(num_rows: int, row_length: int = SEQ, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32000, size=(num_rows, row_length), dtype=np.int32)


def _read_back(version_dir: Path, shards: list[dict]) -> np.ndarray:
    import mindspore.dataset as ds

    files = [str(version_dir / s["name"]) for s in shards]
    dataset = ds.MindDataset(files, shuffle=False)
    return np.stack([row["input_ids"] for row in dataset.create_dict_iterator(output_numpy=True, num_epochs=1)])


def test_shards_split_by_payload_and_read_back_in_order(tmp_path):
    samples = _samples(50)
    # 20 rows of 9 int32 = 720 bytes of payload per shard -> 20 + 20 + 10 rows
    shards = write_shards(samples, tmp_path, max_shard_bytes=20 * SEQ * 4 + 3)
    assert [s["name"] for s in shards] == [f"shards/corpus-0000{i}.mindrecord" for i in range(3)]
    assert [s["rows"] for s in shards] == [20, 20, 10]
    for s in shards:
        path = tmp_path / s["name"]
        assert s["bytes"] == path.stat().st_size
        assert s["sha256"] == sha256_file(path)
        assert s["db_sha256"] == sha256_file(Path(f"{path}.db"))
        # sized to the data: MindSpore's default header + page would make this ~50 MB
        assert s["bytes"] < 100_000
    np.testing.assert_array_equal(_read_back(tmp_path, shards), samples)


def test_full_and_short_shards_read_together(tmp_path):
    """Sizing each shard to its own row count would give the short last shard a
    smaller header, and MindDataset rejects a list of files whose metadata differ."""
    samples = _samples(1010)
    shards = write_shards(samples, tmp_path, max_shard_bytes=1000 * SEQ * 4)
    assert [s["rows"] for s in shards] == [1000, 10]
    assert page_and_header_size(1000, SEQ) != page_and_header_size(10, SEQ)
    np.testing.assert_array_equal(_read_back(tmp_path, shards), samples)


def test_same_samples_give_byte_identical_files(tmp_path):
    samples = _samples(30)
    first = write_shards(samples, tmp_path / "a", max_shard_bytes=16 * SEQ * 4)
    second = write_shards(samples.copy(), tmp_path / "b", max_shard_bytes=16 * SEQ * 4)
    assert first == second and len(first) == 2
    for s in first:
        for suffix in ("", ".db"):
            a = (tmp_path / "a" / f"{s['name']}{suffix}").read_bytes()
            b = (tmp_path / "b" / f"{s['name']}{suffix}").read_bytes()
            assert a == b, f"{s['name']}{suffix} differs"


def test_many_long_worst_case_rows_fit_the_sized_header():
    # 800 rows of 2049 tokens at the largest int32 (worst compression) fill
    # ~270 pages of 32 KiB: a 16 KiB header would fail at commit ("shard header is too big").
    page, header = page_and_header_size(800, 2049)
    assert page >= 2 * 5 * 2049 and header > 1 << 14


def test_worst_case_rows_round_trip(tmp_path):
    samples = np.full((800, 2049), 2**31 - 1, dtype=np.int32)
    samples[:, 0] = np.arange(800)
    shards = write_shards(samples, tmp_path)
    assert [s["rows"] for s in shards] == [800]
    np.testing.assert_array_equal(_read_back(tmp_path, shards)[:, 0], np.arange(800))


@pytest.mark.parametrize(
    "bad, error",
    [
        (np.zeros((4, SEQ), dtype=np.int64), TypeError),
        ([[1] * SEQ] * 4, TypeError),
        (np.zeros(SEQ, dtype=np.int32), ValueError),
        (np.zeros((0, SEQ), dtype=np.int32), ValueError),
        (np.zeros((4, 1), dtype=np.int32), ValueError),
        (np.full((4, SEQ), -1, dtype=np.int32), ValueError),
    ],
)
def test_bad_samples_raise_before_writing(tmp_path, bad, error):
    with pytest.raises(error):
        write_shards(bad, tmp_path)
    assert not list(tmp_path.rglob("*.mindrecord"))


def test_existing_shard_is_never_overwritten(tmp_path):
    write_shards(_samples(4), tmp_path)
    with pytest.raises(FileExistsError):
        write_shards(_samples(4, seed=1), tmp_path)


def test_rows_dropped_by_mindspore_raise(tmp_path, monkeypatch):
    """FileWriter drops a bad row with only a WARNING; the row count check catches it."""
    from mindspore.mindrecord import FileWriter

    original = FileWriter.write_raw_data

    def drop_last_row(self, raw_data, parallel_writer=False):
        return original(self, raw_data[:-1], parallel_writer)

    monkeypatch.setattr(FileWriter, "write_raw_data", drop_last_row)
    with pytest.raises(RuntimeError, match="holds 4 rows after commit, expected 5"):
        write_shards(_samples(5), tmp_path)


def test_extra_column_is_stored_in_the_same_rows(tmp_path):
    import mindspore.dataset as ds

    samples = _samples(25)
    bounds = np.sort(np.random.default_rng(3).integers(1, SEQ, size=(25, 3)), axis=1).astype(np.int32)
    bounds[:, -1] = SEQ - 1
    shards = write_shards(samples, tmp_path, max_shard_bytes=10 * SEQ * 4, columns={"actual_seq_len": bounds})
    assert [s["rows"] for s in shards] == [10, 10, 5]  # cut by input_ids payload only
    files = [str(tmp_path / s["name"]) for s in shards]
    rows = list(ds.MindDataset(files, shuffle=False).create_dict_iterator(output_numpy=True, num_epochs=1))
    np.testing.assert_array_equal(np.stack([r["input_ids"] for r in rows]), samples)
    np.testing.assert_array_equal(np.stack([r["actual_seq_len"] for r in rows]), bounds)
    with pytest.raises(ValueError, match="rows"):
        write_shards(samples, tmp_path / "b", columns={"actual_seq_len": bounds[:-1]})
    with pytest.raises(ValueError, match="bad extra column"):
        write_shards(samples, tmp_path / "c", columns={"input_ids": bounds})
    with pytest.raises(TypeError):
        write_shards(samples, tmp_path / "d", columns={"actual_seq_len": bounds.astype(np.int64)})


def test_shard_bytes_do_not_depend_on_how_rows_are_handed_over(tmp_path):
    """MindRecord's layout depends on the rows per write call; ShardWriter
    always writes calls of 1,000 rows, so any split gives the same bytes."""
    from pipeline.writer import ShardWriter, page_and_header_size

    rows = (np.arange(2500 * 9, dtype=np.int32) % 977).reshape(2500, 9)
    page, header = page_and_header_size(2500, 9)
    digests = []
    for name, splits in (("one", [2500]), ("odd", [1, 3, 998, 1000, 498]), ("tiny", [7] * 357 + [1])):
        path = tmp_path / name / "corpus-00000.mindrecord"
        path.parent.mkdir()
        writer = ShardWriter(path, {"input_ids": 9}, page, header)
        start = 0
        for n in splits:
            writer.write({"input_ids": rows[start:start + n]})
            start += n
        assert writer.close() == 2500
        digests.append((sha256_file(path), sha256_file(path.with_name(path.name + ".db"))))
    assert digests[0] == digests[1] == digests[2]
