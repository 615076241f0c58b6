"""Figures of sweep and search results: Pareto frontier, strategy ranking, co-design, serialized vs overlapped.

Each figure is first a `Chart` (plain lists, display units), built from a results table by a
`*_charts` function; `to_plotly` renders it interactive and `to_matplotlib` as a static figure (PNG).
matplotlib and plotly are imported inside the renderers. Display units: hours, USD, MWh, GPU-hours.
"""

from __future__ import annotations

import json
import math
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
    labels: list[str] | None = None  # text written beside each point (a frontier's systems and sizes)


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
            # the frontier first, so that each system's markers are drawn over it; its points are labelled
            front = pareto(pts, ["time_to_train_s", col])
            chart.series.append(Series("Pareto frontier", list(front["time_to_train_s"] / SECONDS_PER_HOUR),
                                       list(front[col] / scale), kind="lines", color="black",
                                       text=[_hover(r) for _, r in front.iterrows()],
                                       labels=[f"{r['system']} x{int(r['num_gpus'])}" for _, r in front.iterrows()]))
            for system, sub in pts.groupby("system", sort=False):
                chart.series.append(Series(str(system), list(sub["time_to_train_s"] / SECONDS_PER_HOUR),
                                           list(sub[col] / scale), text=[_hover(r) for _, r in sub.iterrows()]))
            charts.append(chart)
    return charts


def pareto_gap(df) -> str | None:
    """Why a sweep has no Pareto chart (None when it has one): no point has a training amount, so no time to
    train to compare; or no model has two distinct feasible points on the catalog hardware."""
    ok = _ok(df)
    ok = ok[ok["whatif_resource"] == "baseline"]
    if ok.empty:
        return "no point fits in memory on the catalog hardware (what-ifs are left out)"
    if not (ok["train_tokens"].notna() | ok["train_samples"].notna()).any():
        return ("the points have no training amount (train: {tokens: N} or {samples: N} in the sweep file), so "
                "their times to train are single iterations of different batches, not comparable")
    if pareto_charts(df):
        return None
    return "no model has two feasible points on the catalog hardware to trade time against cost or energy"


def log_ticks(values: list[float]) -> list[float]:
    """Ticks of a log axis over `values`: the powers of ten, else 1, 2 and 5 per decade, else 1, 2, 3 and 5, else
    every digit, the first that puts five within the data (a range of a decade or two otherwise shows one or two
    powers of ten); a range too narrow for three of them (a factor of about two) gets evenly spaced round values."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return []
    lo, hi = min(positive) * (1 - 1e-9), max(positive) * (1 + 1e-9)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    inside: list[float] = []
    for digits in ((1,), (1, 2, 5), (1, 2, 3, 5), tuple(range(1, 10))):
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in digits]
        inside = [t for t in ticks if lo <= t <= hi]
        if len(inside) >= 5:
            break
    if len(inside) < 3:
        return _linear_ticks(lo, hi)
    below = [t for t in ticks if t < lo][-1:]
    above = [t for t in ticks if t > hi][:1]
    return [float(f"{t:.6g}") for t in below + inside + above]


def _linear_ticks(lo: float, hi: float) -> list[float]:
    """Five or so round values (steps of 1, 2, 2.5 or 5 times a power of ten) from below lo to above hi."""
    if hi <= lo * (1 + 1e-6):  # one value
        return [float(f"{lo:.6g}")]
    raw = (hi - lo) / 5
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    count = math.ceil((hi - start) / step) + 1
    return [float(f"{start + i * step:.6g}") for i in range(count + 1) if start + i * step > 0]


def tick_text(v: float) -> str:
    """A tick's label: 2 and 0.5, not 2x10^0; thousands with separators."""
    return f"{v:,.0f}" if v >= 1000 else f"{v:g}"


def sample_name(model: str, seq_len: Any = None) -> str:
    """What one batch element of `model` is (`ModelSpec.sample_name`: sequence, image, sample); a model that is
    not a catalog name (a file or mapping of the sweep) is a sample when its sequence is one token."""
    from madmax.config.loaders import load_model
    from madmax.errors import MadmaxError

    try:
        return load_model(str(model)).sample_name
    except MadmaxError:
        return "sample" if seq_len == 1 else "sequence"


def rate_label(name: str) -> str:
    """The throughput a chart of `sample_name` models shows: tokens/s per GPU, or images or samples."""
    return "tokens/s per GPU" if name == "sequence" else f"{name}s/s per GPU"


def _ranking_chart(title: str, strategies: list[str], values: list[float], text: list[str] | None = None,
                   unit: str = "sequence") -> Chart:
    order = sorted(range(len(values)), key=lambda i: values[i])  # best at the top of a horizontal chart
    label = rate_label(unit)
    return Chart(key=_slug(f"ranking {title}"), title=f"Strategy ranking: {title}",
                 x_label=label[0].upper() + label[1:], y_label="Strategy", horizontal=True,
                 series=[Series(label, [strategies[i] for i in order], [values[i] for i in order],
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
        unit = sample_name(model, rows["seq_len"].iloc[0])
        # per GPU: tokens for sequences; an image's or a sample's rate is the samples' (an iteration's batch
        # over its time), which the tokens' equals for a one-token sample
        per_token = unit == "sequence"
        searched = rows[rows["search_top_json"].notna()]
        if len(searched):
            best = searched.loc[searched["time_to_train_s"].idxmin()]
            ranking = json.loads(best["search_top_json"])[:top]
            tokens = best["global_batch"] * best["seq_len"]
            if len(ranking) > 1:
                charts.append(_ranking_chart(
                    f"{model} on {int(best['num_gpus'])} x {best['system']}", [r["strategy"] for r in ranking],
                    [r["tokens_per_s_per_gpu"] * (1 if per_token else best["global_batch"] / tokens)
                     for r in ranking],
                    [f"{r['iteration_time_s']:.4g} s/iteration, MFU {r['mfu']:.1%}" for r in ranking], unit))
            continue
        base = rows[rows["whatif_resource"] == "baseline"]
        setting = ["system", "num_gpus", "task", "global_batch", "seq_len", "dtype"]
        groups = [g for _, g in base.groupby(setting, sort=False) if g["strategy_input"].nunique() > 1]
        if groups:
            g = max(groups, key=len).nlargest(top, "tokens_per_s_per_gpu")
            first = g.iloc[0]
            values = g["tokens_per_s_per_gpu"] if per_token else g["samples_per_s"] / g["num_gpus"]
            charts.append(_ranking_chart(f"{model} on {int(first['num_gpus'])} x {first['system']}",
                                         [s or "default" for s in g["strategy_input"]],
                                         list(values), list(g["strategy"]), unit))
    return charts


def codesign_charts(df) -> list[Chart]:
    """Per setting: throughput gain vs improvement factor of each resource alone and all together,
    with linear scaling (gain = factor) dashed."""
    from madmax.sweep.codesign import TRAIN_SPEED, codesign_table, gain_metric

    table = codesign_table(df)
    y_label = "Time-to-train speed-up (x)" if gain_metric(df) == TRAIN_SPEED else "Throughput gain (x)"
    charts = []
    for setting, sub in table.groupby("setting", sort=False):
        if (sub["resource"] != "baseline").sum() == 0:
            continue
        chart = Chart(key=_slug(f"codesign {setting}"), title=f"Co-design sensitivity: {setting}",
                      x_label="Resource improvement (x)", y_label=y_label, log_x=True, log_y=True)
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
            mode = "markers" if s.kind == "markers" else "lines+markers"
            fig.add_trace(go.Scatter(name=s.name, x=s.x, y=s.y, mode=mode + ("+text" if s.labels else ""),
                                     hovertext=s.text, text=s.labels, textposition="top right",
                                     line={"dash": "dash" if s.dashed else "solid", "color": s.color},
                                     marker={"color": s.color}))
    fig.update_layout(title=chart.title, barmode="stack" if chart.stacked else "group", template="plotly_white",
                      xaxis_title=chart.x_label, yaxis_title=chart.y_label, legend_title_text="")
    for is_log, update, values in ((chart.log_x, fig.update_xaxes, [v for s in chart.series for v in s.x]),
                                   (chart.log_y, fig.update_yaxes, [v for s in chart.series for v in s.y])):
        if is_log:
            ticks = log_ticks(values)
            update(type="log", tickvals=ticks, ticktext=[tick_text(t) for t in ticks])
    return fig


def to_matplotlib(chart: Chart):
    """A static matplotlib Figure of `chart` (no pyplot, so no display backend is needed)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

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
            for x, y, text in zip(s.x, s.y, s.labels or (), strict=False):
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if categories:
        ticks, labels = range(len(categories)), [str(c) for c in categories]
        if chart.horizontal:
            ax.set_yticks(ticks, labels, fontsize=7)
        else:
            ax.set_xticks(ticks, labels, rotation=60, ha="right", fontsize=7)
    ax.set(title=chart.title, xlabel=chart.x_label, ylabel=chart.y_label)
    for is_log, set_scale, axis, values in ((chart.log_x, ax.set_xscale, ax.xaxis, [v for s in chart.series
                                                                                      for v in s.x]),
                                            (chart.log_y, ax.set_yscale, ax.yaxis, [v for s in chart.series
                                                                                      for v in s.y])):
        if is_log:
            set_scale("log")
            axis.set_major_locator(FixedLocator(log_ticks(values)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
            axis.set_minor_locator(NullLocator())
            axis.set_minor_formatter(NullFormatter())
    if len(chart.series) > 1 and not chart.horizontal:
        ax.legend(fontsize=7, ncols=2 if len(chart.series) > 8 else 1)
    ax.grid(alpha=0.3)
    return fig


def all_charts(df, search_frame=None) -> dict[str, list[Chart]]:
    """Every figure of a report, by section."""
    return {"pareto": pareto_charts(df), "ranking": ranking_charts(df, search_frame),
            "codesign": codesign_charts(df), "breakdown": breakdown_charts(df)}

