"""Tests for common/checks.py."""

import pytest

from common.checks import check_int


def test_check_int_returns_the_value_at_and_above_the_minimum():
    assert check_int("step", 0, 0) == 0
    assert check_int("global_batch", 8, 1) == 8


@pytest.mark.parametrize("value, message", [
    (0, "global_batch must be an int >= 1, got 0"),
    (True, "global_batch must be an int >= 1, got True"),      # bool is not an int here
    (2.0, "global_batch must be an int >= 1, got 2.0"),
    ("8", "global_batch must be an int >= 1, got '8'"),
])
def test_check_int_raises_value_error_naming_argument_bound_and_value(value, message):
    with pytest.raises(ValueError) as info:
        check_int("global_batch", value, 1)
    assert str(info.value) == message


def test_check_int_prefix_and_type_error():
    with pytest.raises(ValueError) as info:
        check_int("seq_length", -3, 1, where="v1/manifest.json: ")
    assert str(info.value) == "v1/manifest.json: seq_length must be an int >= 1, got -3"
    with pytest.raises(TypeError) as info:
        check_int("dp_size", "2", 1, type_error=True)
    assert str(info.value) == "dp_size must be an int, got str"
    with pytest.raises(ValueError, match="dp_size must be an int >= 1, got 0"):
        check_int("dp_size", 0, 1, type_error=True)
