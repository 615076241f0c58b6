"""Labels of reports and searches (issue 28): a throughput in the model's own units, labelled Pareto points, log
axes with enough ticks, a co-design table without NaN and a Pareto section that says why it is empty."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from madmax.report.plots import Chart, Series, log_ticks, pareto_charts, rate_label, sample_name
from madmax.sweep import codesign_summary, codesign_table


def test_log_ticks_give_at_least_five_labels_within_a_decade_or_two():
    # 100 .. 1,095 h: powers of ten alone would label only 100 and 1,000; 1-2-5 four; 1-2-3-5 five
    assert log_ticks([99.6, 1095.0]) == [50.0, 100.0, 200.0, 300.0, 500.0, 1000.0, 2000.0]
    # 0.5 .. 4x (co-design factors): every digit
    assert log_ticks([0.5, 4.0]) == [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 3.0, 4.0, 5.0]
    # six decades: the powers of ten
    assert log_ticks([1e-3, 1e3]) == [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0, 1e4]
    # 35,900 .. 47,537 USD, a factor 1.3: round steps of 2,500 (no digit of a decade falls inside but 40,000)
    ticks = log_ticks([35_900.0, 47_537.0])
    assert [t for t in ticks if 35_900 <= t <= 47_537] == [37_500.0, 40_000.0, 42_500.0, 45_000.0, 47_500.0]


def test_matplotlib_and_plotly_put_the_ticks_on_a_log_axis():
    chart = Chart(key="k", title="t", x_label="x", y_label="y", log_x=True,
                  series=[Series("s", [99.6, 300.0, 1095.0], [1.0, 2.0, 3.0])])
    pytest.importorskip("matplotlib")
    from madmax.report.plots import to_matplotlib

    ax = to_matplotlib(chart).axes[0]
    assert [t for t in ax.get_xticks() if 99.6 <= t <= 1095] == [100.0, 200.0, 300.0, 500.0, 1000.0]
    pytest.importorskip("plotly")
    from madmax.report.plots import to_plotly

    xaxis = to_plotly(chart).layout.xaxis
    assert xaxis.type == "log" and "1,000" in xaxis.ticktext and 300.0 in xaxis.tickvals


def _priced_rows() -> pd.DataFrame:
    # two systems, two sizes: (time h, cost USD) p4d x8 (10, 100), x16 (6, 120); p5 x8 (4, 150), x16 (3, 200)
    rows = [("p4d.24xlarge", 8, 10, 100), ("p4d.24xlarge", 16, 6, 120), ("p5.48xlarge", 8, 4, 150),
            ("p5.48xlarge", 16, 3, 200)]
    return pd.DataFrame([{"model": "llama-3-8b", "system": s, "num_gpus": n, "status": "ok", "fits": True,
                          "whatif_resource": "baseline", "whatif": "baseline", "strategy": "tp=1",
                          "train_tokens": 1e9, "train_samples": float("nan"), "time_to_train_s": h * 3600.0,
                          "cost_usd": c, "energy_j": float(h), "gpu_hours": h * n} for s, n, h, c in rows])


def test_the_pareto_frontier_names_its_points():
    cost = next(c for c in pareto_charts(_priced_rows()) if c.title.endswith("time vs cost"))
    front = cost.series[0]
    assert front.name == "Pareto frontier"
    # every point trades time for cost here: all four on the frontier, fastest first
    assert front.labels == ["p5.48xlarge x16", "p5.48xlarge x8", "p4d.24xlarge x16", "p4d.24xlarge x8"]


def test_throughput_labels_follow_the_model():
    assert [sample_name(m) for m in ("llama-3-8b", "vit-b/16", "dlrm-dcnv2")] == ["sequence", "image", "sample"]
    assert sample_name("a-file-the-sweep-loaded.yaml", seq_len=1) == "sample"
    assert [rate_label(u) for u in ("sequence", "image", "sample")] == ["tokens/s per GPU", "images/s per GPU",
                                                                        "samples/s per GPU"]


def test_the_codesign_grid_gives_the_baseline_column_a_gain_of_one():
    base = {"group_name": "g", "model": "m", "system": "s", "num_gpus": 8, "task": "pretrain", "global_batch": 16,
            "seq_len": 1024, "dtype": "bf16", "mode": "simulate", "strategy_input": "", "status": "ok",
            "fits": True, "strategy": "tp=1"}
    rows = pd.DataFrame([{**base, "whatif_resource": r, "whatif_factor": f, "samples_per_s": v}
                         for r, f, v in (("baseline", 1.0, 100.0), ("flops", 2.0, 150.0), ("all", 2.0, 196.0))])
    grid = codesign_summary(codesign_table(rows))
    assert grid[1.0].tolist() == [1.0, 1.0]  # was NaN: the baseline row is dropped from the grid


def test_a_report_without_a_training_amount_says_why_it_has_no_frontier(results):
    pytest.importorskip("matplotlib")
    from madmax.report.html import render_page
    from madmax.report.plots import all_charts, pareto_gap
    from madmax.sweep import load

    frame = load(results)
    assert pareto_gap(frame) is None  # priced, trained: a frontier
    untrained = frame.assign(train_tokens=float("nan"))
    page = render_page("t", untrained, all_charts(untrained))
    assert "No data for this section in these results: the points have no training amount" in page
    # an unpriced system's cost is a dash, with the reason under the table, not NaN
    unpriced = frame.assign(cost_usd=frame["cost_usd"].where(frame["system"] == "p4d.24xlarge"))
    page = render_page("t", unpriced, all_charts(unpriced))
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # plotly.js itself names NaN
    assert "NaN" not in text and "cost -: no price for a2-highgpu-8g" in text
