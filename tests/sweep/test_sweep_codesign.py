"""Co-design gains on a table drawn by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from madmax.sweep import codesign_summary, codesign_table
from madmax.sweep.codesign import findings


def _rows():
    # baseline 100 samples/s; flops x2 -> 150 (gain 1.5), nic x2 -> 110 (1.1), all x2 -> 196 (1.96)
    base = {"group_name": "g", "model": "m", "system": "s", "num_gpus": 8, "task": "pretrain", "global_batch": 16,
            "seq_len": 1024, "dtype": "bf16", "mode": "simulate", "strategy_input": "", "status": "ok",
            "fits": True, "strategy": "tp=1"}
    rows = [("baseline", 1.0, 100.0), ("flops", 2.0, 150.0), ("nic_bandwidth", 2.0, 110.0), ("all", 2.0, 196.0),
            ("flops+nic_bandwidth", float("nan"), 300.0)]  # a custom what-if: not a co-design row
    return pd.DataFrame([{**base, "whatif_resource": r, "whatif_factor": f, "samples_per_s": v} for r, f, v in rows])


def test_gains_over_the_baseline():
    table = codesign_table(_rows())
    gains = dict(zip(table["resource"], table["gain"], strict=True))
    assert gains == pytest.approx({"all": 1.96, "baseline": 1.0, "flops": 1.5, "nic_bandwidth": 1.1})
    grid = codesign_summary(table)
    assert list(grid.index.get_level_values("resource")) == ["flops", "nic_bandwidth", "all"]
    assert grid.loc[("m on 8 x s", "all"), 2.0] == pytest.approx(1.96)
    assert findings(table) == ["m on 8 x s, resources improved 2x: alone nic_bandwidth 1.10x, flops 1.50x; "
                               "all together 1.96x (linear would be 2x)."]


def test_what_ifs_without_a_baseline_leave_nothing_to_compare():
    rows = _rows()
    table = codesign_table(rows[rows["whatif_resource"] != "baseline"])
    assert table.empty and "gain" in table.columns
    assert codesign_summary(table).empty and findings(table) == []


def test_a_sweep_without_a_baseline_says_so_in_one_sentence(make_spec, base_spec, tmp_path):
    from typer.testing import CliRunner

    from madmax.cli import app
    from madmax.sweep.codesign import NOTHING_TO_COMPARE

    spec = make_spec(tmp_path / "spec", {**base_spec, "systems": "dgx-h100", "num_gpus": 8, "strategies": "tp=2",
                                         "whatifs": [{"nic_bandwidth": 2}, {"flops": 2}]})
    result = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1",
                                      "--no-progress"])
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.strip().splitlines()[-1] == NOTHING_TO_COMPARE


def test_the_report_draws_no_frontier_of_one_point_or_without_a_training_amount(reference):
    from madmax.report.plots import pareto_charts
    from madmax.sweep import load

    df = load(reference)
    # p4d.24xlarge is priced, dgx-h100 is not: cost has 2 points (p4d at 8 and 16 GPUs), energy 4
    charts = {c.title: c for c in pareto_charts(df)}
    assert sorted(charts) == ["Pareto frontier: tiny, time vs cost", "Pareto frontier: tiny, time vs energy"]
    assert len(charts["Pareto frontier: tiny, time vs cost"].series[0].x) == 2
    one = df[(df["system"] == "p4d.24xlarge") & (df["num_gpus"] == 8)]
    assert pareto_charts(one) == []  # one point is no frontier
    untrained = df.assign(train_tokens=float("nan"))
    assert pareto_charts(untrained) == []  # "time to train" would be one iteration's
