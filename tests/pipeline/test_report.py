import pytest

from pipeline.report import plan_table, training_days


def test_training_days_for_7b_on_1t_tokens():
    t = training_days(7e9, 1e12, 128, peak_flops=400e12, mfu=0.4, overhead=1.3)
    assert t["flops"] == pytest.approx(4.2e22)
    assert t["sustained_flops"] == pytest.approx(2.048e16)
    assert t["ideal_days"] == pytest.approx(4.2e22 / 2.048e16 / 86400)
    assert t["ideal_days"] == pytest.approx(23.7, abs=0.05)  # 23.74
    assert t["planned_days"] == pytest.approx(30.8, abs=0.1)  # 23.74 x 1.3 = 30.86


def test_plan_table_scales_with_parameters_and_accelerators():
    rows = {(r["params"], r["accelerators"]): r["planned_days"] for r in plan_table(1e12)}
    assert rows[(70e9, 128)] == pytest.approx(10 * rows[(7e9, 128)])
    assert rows[(7e9, 64)] == pytest.approx(2 * rows[(7e9, 128)])


@pytest.mark.parametrize("bad", [{"mfu": 0}, {"mfu": 1.5}, {"accelerators": 0}, {"tokens": -1}])
def test_training_days_rejects_impossible_inputs(bad):
    args = {"params": 7e9, "tokens": 1e12, "accelerators": 8, **bad}
    with pytest.raises(ValueError):
        training_days(**args)
