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
    table = plan_table(1e12)
    # one row per model size, one cell per accelerator count, in the constants' order
    assert [[(c["params"], c["accelerators"]) for c in row] for row in table] == \
        [[(n, a) for a in (8, 64, 128, 512)] for n in (1e9, 7e9, 13e9, 70e9)]
    rows = {(c["params"], c["accelerators"]): c["planned_days"] for row in table for c in row}
    assert rows[(7e9, 128)] == pytest.approx(30.86, abs=0.01)  # as test_training_days_for_7b_on_1t_tokens
    assert rows[(70e9, 128)] == pytest.approx(10 * rows[(7e9, 128)])
    assert rows[(7e9, 64)] == pytest.approx(2 * rows[(7e9, 128)])


def test_plan_table_takes_the_model_sizes_asked_for():
    """``inspect`` adds its --model-params to the sizes; each cell is
    training_days of that size and count."""
    table = plan_table(2e11, peak_flops=1e15, mfu=0.5, overhead=2.0, model_sizes=[3e9])
    assert len(table) == 1 and [c["accelerators"] for c in table[0]] == [8, 64, 128, 512]
    # 6 * 3e9 * 2e11 = 3.6e21 FLOPs / (8 * 1e15 * 0.5) / 86,400 = 10.42 ideal days, x2 planned
    assert table[0][0]["ideal_days"] == pytest.approx(3.6e21 / 4e15 / 86400)
    assert table[0][0]["planned_days"] == pytest.approx(20.83, abs=0.01)


@pytest.mark.parametrize("bad", [{"mfu": 0}, {"mfu": 1.5}, {"accelerators": 0}, {"tokens": -1}])
def test_training_days_rejects_impossible_inputs(bad):
    args = {"params": 7e9, "tokens": 1e12, "accelerators": 8, **bad}
    with pytest.raises(ValueError):
        training_days(**args)


def test_run_plan_of_a_planned_run_not_the_version():
    """The seed's example: 1e12 tokens, 7e9 parameters, 128 accelerators at the
    defaults give 23.74 ideal and 30.86 planned days; against a version of 2e9
    tokens that is 500 epochs, and 1e12 / (512 * 4096) = 476,837.16 -> 476,838 steps."""
    from pipeline.report import run_plan

    p = run_plan(1e12, 7e9, 128, version_tokens=2_000_000_000, seq_length=4096, global_batch=512)
    assert p["flops"] == pytest.approx(4.2e22)
    assert p["ideal_days"] == pytest.approx(23.7359, abs=1e-4)  # 4.2e22 / (128 * 4e14 * 0.4) / 86,400
    assert p["planned_days"] == pytest.approx(30.8567, abs=1e-4)  # x1.3
    assert p["epochs"] == pytest.approx(500.0)
    assert p["steps"] == 476_838
    with pytest.raises(ValueError, match="version_tokens"):
        run_plan(1e12, 7e9, 128, version_tokens=0)


def test_cli_inspect_plan_without_a_version():
    from typer.testing import CliRunner

    from pipeline.cli import app

    res = CliRunner().invoke(app, ["inspect", "--plan", "--tokens", "1e12", "--model-params", "7e9",
                                   "--accelerators", "128"])
    assert res.exit_code == 0, res.output
    assert "ideal: 23.7 days" in res.output and "planned (x1.3 for restarts, evaluation, checkpoints): 30.9 days" \
        in res.output
    res = CliRunner().invoke(app, ["inspect", "--plan"])
    assert res.exit_code == 2 and "--plan needs --tokens N or a VERSION" in res.output
    res = CliRunner().invoke(app, ["inspect"])
    assert res.exit_code == 2 and "inspect needs a VERSION" in res.output
