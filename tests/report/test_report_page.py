"""The report page and its figures."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from madmax.cli import app
from madmax.report.html import write_report
from madmax.report.plots import breakdown_charts, ranking_charts, to_matplotlib, to_plotly
from madmax.sweep import load

FIGURES = ["Pareto frontier: tiny, time vs cost", "Pareto frontier: tiny, time vs energy",
           "Strategy ranking: tiny on", "Co-design sensitivity: tiny on 8 x p4d.24xlarge, strategy_input=tp=1",
           "Serialized vs overlapped: tiny"]


def test_report_html_contains_the_figures(results, tmp_path):
    pytest.importorskip("plotly")
    pngs = write_report(results, tmp_path / "report.html", png_dir=tmp_path / "png")
    page = (tmp_path / "report.html").read_text()
    for title in FIGURES:
        assert title in page, title
    for section in ("Pareto frontier", "Strategy ranking", "Co-design sensitivity", "Serialized vs overlapped"):
        assert f">{section}</h2>" in page
    # the sweep trains an amount: its co-design gains are in the time to train
    assert "Pareto frontier of time, cost and energy" in page and "Time-to-train speed-up by resource" in page
    # self-contained: plotly.js inlined once, nothing fetched from the network
    assert page.count("<script src=") == 0 and page.count("plotly.js v") >= 1
    # one PNG per figure: 2 Pareto + 1 ranking + 8 co-design settings (2 systems x 2 sizes x 2 strategies)
    # + 1 breakdown
    assert len(pngs) == 12 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_report_without_plotly_inlines_pngs(results, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    write_report(results, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 12
    assert 'alt="Co-design sensitivity: tiny on 8 x p4d.24xlarge, strategy_input=tp=1"' in page


def test_breakdown_bars_by_hand():
    # compute 10 s; tp.all_gather 4 s of which 1 s exposed; dp.reduce_scatter 3 s, all hidden; bubble 2 s.
    # serialized: 10 + 4 + 3 + 2 = 19 s; overlapped: 10 + 1 + 0 + 2 = 13 s (the iteration time).
    breakdown = {"compute_s": {"gemm": 9.0, "optimizer": 1.0, "total": 10.0},
                 "communication_s": {"tp.all_gather": {"total": 4.0, "exposed": 1.0, "overlapped": 3.0},
                                     "dp.reduce_scatter": {"total": 3.0, "exposed": 0.0, "overlapped": 3.0}},
                 "exposed_communication_s": 1.0, "pipeline_bubble_s": 2.0}
    df = pd.DataFrame([{"model": "m", "system": "s", "num_gpus": 8, "status": "ok", "fits": True,
                        "whatif_resource": "baseline", "iteration_time_s": 13.0,
                        "breakdown_json": json.dumps(breakdown)}])
    (chart,) = breakdown_charts(df)
    bars = {s.name: s.y for s in chart.series}
    assert chart.series[0].x == ["s x8 serialized", "s x8 overlapped"]
    assert bars == {"compute": [10.0, 10.0], "tp.all_gather": [4.0, 1.0], "dp.reduce_scatter": [3.0, 0.0],
                    "pipeline bubble": [2.0, 2.0]}
    assert [sum(v[k] for v in bars.values()) for k in (0, 1)] == [19.0, 13.0]


def test_ranking_of_a_search_table(tmp_path):
    frame = pd.DataFrame({"strategy": ["tp=2", "tp=1", "tp=4"], "simulated": [True, True, False],
                          "tokens_per_s_per_gpu": [900.0, 800.0, 1000.0], "iteration_time_s": [1.0, 1.1, 0.9],
                          "mfu": [0.5, 0.45, 0.55]})
    (chart,) = ranking_charts(search_frame=frame)
    # simulated rows only, the best at the top of the horizontal bars (last in plot order)
    assert chart.series[0].x == ["tp=1", "tp=2"] and chart.series[0].y == [800.0, 900.0]
    pytest.importorskip("plotly")
    assert to_plotly(chart).data[0].orientation == "h"
    pytest.importorskip("matplotlib")
    assert to_matplotlib(chart).axes[0].get_title() == "Strategy ranking: search result"


def test_report_command(results, tmp_path):
    pytest.importorskip("plotly")
    search = tmp_path / "search.parquet"
    pd.DataFrame({"strategy": ["tp=2"], "simulated": [True], "tokens_per_s_per_gpu": [900.0],
                  "iteration_time_s": [1.0], "mfu": [0.5]}).to_parquet(search)
    result = CliRunner().invoke(app, ["report", str(results), "-o", str(tmp_path / "r.html"), "--search", str(search)])
    assert result.exit_code == 0, result.output
    assert "Strategy ranking: search result" in (tmp_path / "r.html").read_text()
    assert len(load(results)) == 32
