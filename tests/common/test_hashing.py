"""Tests for common/hashing.py: the seeded hashes every sampling and ordering
decision of a build rests on. The literals are the values these functions
gave before they moved here (stages/packing.py id_hash, pipeline/examples.py
_rank): a change to any of them changes which documents a build samples,
holds out and where it puts them."""

import numpy as np
import pytest

from common.hashing import id_hash, id_hashes, sample_rank

WEB = "web:data/sample/web-fortunes.jsonl.zst:17"


def test_id_hash_of_known_ids_and_seeds():
    assert id_hash(WEB, 0) == 14567640256488386502
    assert id_hash(WEB, 1234) == 15233920020903836032          # configs/default.yaml's seed
    assert id_hash(WEB, 20240601) == 17412653207780166485
    assert id_hash("中文:文档:1", 7) == 18421366804504719677     # UTF-8 bytes of the id


def test_id_hash_takes_the_seed_mod_2_to_the_64():
    assert id_hash("wiki:zh.jsonl:3", -1) == id_hash("wiki:zh.jsonl:3", 2 ** 64 - 1) == 17786757307283976440
    assert id_hash(WEB, 2 ** 64 + 1234) == id_hash(WEB, 1234)


def test_id_hashes_is_id_hash_per_id():
    out = id_hashes([WEB, "中文:文档:1", WEB], 7)
    assert out.dtype == np.uint64 and out.shape == (3,)
    assert out.tolist() == [id_hash(WEB, 7), 18421366804504719677, id_hash(WEB, 7)]
    assert id_hashes([], 7).shape == (0,)


def test_sample_rank_of_known_ids():
    assert sample_rank(WEB, 0).hex() == "5436f99dd2930020"
    assert sample_rank("wiki:zh.jsonl:3", 3).hex() == "8d409c189da7c9c6"


def test_phase_seed_keeps_phase_0_and_steps_by_the_golden_ratio():
    from common.hashing import phase_seed

    assert phase_seed(1234, 0) == 1234
    assert phase_seed(1234, 1) == 11400714819323199719
    assert phase_seed(1234, 2) == 4354685564936846588   # mod 2^64
    with pytest.raises(ValueError, match="phase must be >= 0"):
        phase_seed(1234, -1)
