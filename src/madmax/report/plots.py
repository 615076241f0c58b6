"""Figures of sweep and search results: Pareto frontier, strategy ranking, co-design, serialized vs overlapped.

Each figure is first a `Chart` (plain lists, display units), built from a results table by a
`*_charts` function; `to_plotly` renders it interactive and `to_matplotlib` as a static figure (PNG).
matplotlib and plotly are imported inside the renderers. Display units: hours, USD, MWh, GPU-hours.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

SECONDS_PER_HOUR = 3600
JOULES_PER_MWH = 3.6e9


@dataclass
class Series:
    """One trace: markers, lines (with markers) or bars."""

    name: str
    x: list[Any]
    y: list[float]
    kind: str = "markers"  # markers | lines | bar
    text: list[str] | None = None  # hover text per point
    dashed: bool = False
    color: str | None = None  # default: the renderer's cycle


@dataclass
class Chart:
    key: str  # file name stem, unique in a report
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    log_x: bool = False
    log_y: bool = False
    stacked: bool = False
    horizontal: bool = False  # bars along x, categories on y


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "-", text).strip("-").lower()


def _ok(df):
    rows = df[df["status"] == "ok"]
    return rows[rows["fits"].fillna(False).astype(bool)]


def _hover(row) -> str:
    return (f"{row['system']} x{int(row['num_gpus'])} ({row['whatif']})<br>{row['strategy']}<br>"
            f"{row['time_to_train_s'] / SECONDS_PER_HOUR:.3g} h, ${row['cost_usd']:,.0f}, "
            f"{row['energy_j'] / JOULES_PER_MWH:.3g} MWh, {row['gpu_hours']:,.0f} GPU-h")


def pareto_charts(df) -> list[Chart]:
    """Per model: every feasible point of the catalog hardware (no what-ifs) by system, time to train vs
    cost (where priced) and vs energy, each with its 2-objective Pareto frontier as a line. Points without
    a training amount are left out (their "time to train" is one iteration's, not comparable across
    batches), and a chart needs two distinct points: one point is no frontier."""
    from madmax.sweep.pareto import pareto

    charts = []
    ok = _ok(df)
    ok = ok[(ok["whatif_resource"] == "baseline") & (ok["train_tokens"].notna() | ok["train_samples"].notna())]
    for model, rows in ok.groupby("model", sort=False):
        for col, label, scale in (("cost_usd", "Cost (USD)", 1.0),
                                           ("energy_j", "Energy (MWh)", JOULES_PER_MWH)):
            pts = rows[rows[col].notna()]
            if len(pts[["time_to_train_s", col]].drop_duplicates()) < 2:
                continue
            chart = Chart(key=_slug(f"pareto {model} {col}"), title=f"Pareto frontier: {model}, time vs "
                          f"{label.split(' (')[0].lower()}", x_label="Time to train (h)", y_label=label,
                          log_x=True, log_y=True)
            for system, sub in pts.groupby("system", sort=False):
                chart.series.append(Series(str(system), list(sub["time_to_train_s"] / SECONDS_PER_HOUR),
                                           list(sub[col] / scale), text=[_hover(r) for _, r in sub.iterrows()]))
            front = pareto(pts, ["time_to_train_s", col])
            chart.series.append(Series("Pareto frontier", list(front["time_to_train_s"] / SECONDS_PER_HOUR),
                                       list(front[col] / scale), kind="lines", color="black",
                                       text=[_hover(r) for _, r in front.iterrows()]))
            charts.append(chart)
    return charts


def _ranking_chart(title: str, strategies: list[str], values: list[float], text: list[str] | None = None) -> Chart:
    order = sorted(range(len(values)), key=lambda i: values[i])  # best at the top of a horizontal chart
    return Chart(key=_slug(f"ranking {title}"), title=f"Strategy ranking: {title}",
                 x_label="Tokens/s per GPU", y_label="Strategy", horizontal=True,
                 series=[Series("tokens/s per GPU", [strategies[i] for i in order], [values[i] for i in order],
                                kind="bar", text=[text[i] for i in order] if text else None)])


def ranking_charts(df=None, search_frame=None, top: int = 10) -> list[Chart]:
    """Strategy rankings: of a search table (`madmax search --out`), and from a sweep, per model, the
    best point's search ranking (mode=search) or the strategies of its richest simulate setting."""
    charts = []
    if search_frame is not None and len(search_frame):
        rows = search_frame[search_frame["simulated"]] if "simulated" in search_frame else search_frame
        rows = rows.head(top)
        charts.append(_ranking_chart("search result", list(rows["strategy"]), list(rows["tokens_per_s_per_gpu"]),
                                     [f"{t:.4g} s/iteration, MFU {m:.1%}" for t, m in
                                      zip(rows["iteration_time_s"], rows["mfu"], strict=True)]))
    if df is None:
        return charts
    ok = _ok(df)
    for model, rows in ok.groupby("model", sort=False):
        searched = rows[rows["search_top_json"].notna()]
        if len(searched):
            best = searched.loc[searched["time_to_train_s"].idxmin()]
            ranking = json.loads(best["search_top_json"])[:top]
            if len(ranking) > 1:
                charts.append(_ranking_chart(
                    f"{model} on {int(best['num_gpus'])} x {best['system']}", [r["strategy"] for r in ranking],
                    [r["tokens_per_s_per_gpu"] for r in ranking],
                    [f"{r['iteration_time_s']:.4g} s/iteration, MFU {r['mfu']:.1%}" for r in ranking]))
            continue
        base = rows[rows["whatif_resource"] == "baseline"]
        setting = ["system", "num_gpus", "task", "global_batch", "seq_len", "dtype"]
        groups = [g for _, g in base.groupby(setting, sort=False) if g["strategy_input"].nunique() > 1]
        if groups:
            g = max(groups, key=len).nlargest(top, "tokens_per_s_per_gpu")
            first = g.iloc[0]
            charts.append(_ranking_chart(f"{model} on {int(first['num_gpus'])} x {first['system']}",
                                         [s or "default" for s in g["strategy_input"]],
                                         list(g["tokens_per_s_per_gpu"]), list(g["strategy"])))
    return charts


def codesign_charts(df) -> list[Chart]:
    """Per setting: throughput gain vs improvement factor of each resource alone and all together,
    with linear scaling (gain = factor) dashed."""
    from madmax.sweep.codesign import codesign_table

    table = codesign_table(df)
    charts = []
    for setting, sub in table.groupby("setting", sort=False):
        if (sub["resource"] != "baseline").sum() == 0:
            continue
        chart = Chart(key=_slug(f"codesign {setting}"), title=f"Co-design sensitivity: {setting}",
                      x_label="Resource improvement (x)", y_label="Throughput gain (x)", log_x=True, log_y=True)
        base = sub[sub["resource"] == "baseline"]
        for resource in [r for r in dict.fromkeys(sub["resource"]) if r != "baseline"]:
            rows = sub[sub["resource"] == resource]
            pts = sorted([*zip(rows["factor"], rows["gain"], rows["fits"], strict=True),
                          *((1.0, g, f) for g, f in zip(base["gain"][:1], base["fits"][:1], strict=True))])
            chart.series.append(Series(resource, [p[0] for p in pts], [p[1] for p in pts], kind="lines",
                                       text=[f"{resource} x{f:g}: {g:.3f}x" + ("" if fits else ", does not fit")
                                             for f, g, fits in pts]))
        factors = sorted({1.0, *sub["factor"].dropna()})
        chart.series.append(Series("linear", factors, factors, kind="lines", dashed=True))
        charts.append(chart)
    return charts


def breakdown_charts(df, limit: int = 12) -> list[Chart]:
    """Per model, "serialized vs overlapped" (MAD-Max Fig. 1 style): for the best point of each system
    (the catalog hardware), one bar with compute plus every collective in full (as if nothing overlapped)
    and one with compute plus only the exposed part of each; the pipeline bubble on both."""
    charts = []
    ok = _ok(df)
    ok = ok[ok["breakdown_json"].notna() & (ok["whatif_resource"] == "baseline")]
    for model, rows in ok.groupby("model", sort=False):
        best = rows.loc[rows.groupby(["system", "num_gpus"], sort=False)["iteration_time_s"].idxmin()]
        best = best.sort_values("iteration_time_s").head(limit)
        labels, parts = [], {}
        for _, row in best.iterrows():
            b = json.loads(row["breakdown_json"])
            label = f"{row['system']} x{int(row['num_gpus'])}"
            labels += [f"{label} serialized", f"{label} overlapped"]
            for name, serial, overlapped in [("compute", b["compute_s"]["total"], b["compute_s"]["total"]),
                                             *((k, c["total"], c["exposed"]) for k, c in
                                               b["communication_s"].items()),
                                             ("pipeline bubble", b["pipeline_bubble_s"], b["pipeline_bubble_s"])]:
                parts.setdefault(name, {})[label] = (serial, overlapped)
        if not labels:
            continue
        chart = Chart(key=_slug(f"breakdown {model}"), title=f"Serialized vs overlapped: {model}",
                      x_label="Configuration", y_label="Time per iteration (s)", stacked=True)
        for name, by_label in parts.items():
            y = []
            for label in labels:
                base, which = label.rsplit(" ", 1)
                pair = by_label.get(base, (0.0, 0.0))
                y.append(pair[0] if which == "serialized" else pair[1])
            chart.series.append(Series(name, labels, y, kind="bar"))
        charts.append(chart)
    return charts


def to_plotly(chart: Chart):
    """An interactive plotly figure of `chart`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in chart.series:
        if s.kind == "bar":
            x, y = (s.y, s.x) if chart.horizontal else (s.x, s.y)
            fig.add_trace(go.Bar(name=s.name, x=x, y=y, orientation="h" if chart.horizontal else "v",
                                 hovertext=s.text))
        else:
            fig.add_trace(go.Scatter(name=s.name, x=s.x, y=s.y, mode="markers" if s.kind == "markers" else
                                     "lines+markers", hovertext=s.text,
                                     line={"dash": "dash" if s.dashed else "solid", "color": s.color},
                                     marker={"color": s.color}))
    fig.update_layout(title=chart.title, barmode="stack" if chart.stacked else "group", template="plotly_white",
                      xaxis_title=chart.x_label, yaxis_title=chart.y_label, legend_title_text="")
    if chart.log_x:
        fig.update_xaxes(type="log")
    if chart.log_y:
        fig.update_yaxes(type="log")
    return fig


def to_matplotlib(chart: Chart):
    """A static matplotlib Figure of `chart` (no pyplot, so no display backend is needed)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    categories = list(dict.fromkeys(x for s in chart.series if s.kind == "bar" for x in s.x))
    tall = chart.horizontal and len(categories) > 6
    fig = Figure(figsize=(10, 0.4 * len(categories) + 2 if tall else 5.5), layout="constrained")
    ax = fig.subplots()
    if len(chart.series) > 10:  # the default cycle has 10 colours
        ax.set_prop_cycle(color=colormaps["tab20"].colors)
    bottom = [0.0] * len(categories)
    for s in chart.series:
        if s.kind == "bar":
            pos = [categories.index(x) for x in s.x]
            start = [bottom[p] for p in pos] if chart.stacked else [0.0] * len(pos)
            if chart.horizontal:
                ax.barh(pos, s.y, left=start, label=s.name)
            else:
                ax.bar(pos, s.y, bottom=start, label=s.name)
            if chart.stacked:
                for p, v in zip(pos, s.y, strict=True):
                    bottom[p] += v
        else:
            line = "none" if s.kind == "markers" else "--" if s.dashed else "-"
            color = s.color or ("0.5" if s.dashed else None)
            ax.plot(s.x, s.y, marker="" if s.dashed else "o", linestyle=line, label=s.name, markersize=4,
                    **({"color": color} if color else {}))
    if categories:
        ticks, labels = range(len(categories)), [str(c) for c in categories]
        if chart.horizontal:
            ax.set_yticks(ticks, labels, fontsize=7)
        else:
            ax.set_xticks(ticks, labels, rotation=60, ha="right", fontsize=7)
    ax.set(title=chart.title, xlabel=chart.x_label, ylabel=chart.y_label)
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1000 else f"{v:g}")  # 2 and 0.5, not 2x10^0
    for is_log, set_scale, axis, values in ((chart.log_x, ax.set_xscale, ax.xaxis, [v for s in chart.series
                                                                                      for v in s.x]),
                                            (chart.log_y, ax.set_yscale, ax.yaxis, [v for s in chart.series
                                                                                      for v in s.y])):
        if is_log:
            set_scale("log")
            axis.set_major_formatter(plain)
            # label the minor ticks only within one decade, where there are no major ones
            wide = values and max(values) > 10 * min(values)
            axis.set_minor_formatter(NullFormatter() if wide else plain)
    if len(chart.series) > 1 and not chart.horizontal:
        ax.legend(fontsize=7, ncols=2 if len(chart.series) > 8 else 1)
    ax.grid(alpha=0.3)
    return fig


def all_charts(df, search_frame=None) -> dict[str, list[Chart]]:
    """Every figure of a report, by section."""
    return {"pareto": pareto_charts(df), "ranking": ranking_charts(df, search_frame),
            "codesign": codesign_charts(df), "breakdown": breakdown_charts(df)}

