"""`madmax report`: one self-contained HTML page of a sweep's results.

Sections: summary, Pareto frontier (figures and the frontier of time, cost and energy as a table),
strategy ranking, co-design sensitivity (figures, gain table and findings) and the serialized vs
overlapped breakdown. Figures are interactive plotly with plotly.js inlined once (no network needed to
view the page); without plotly they are matplotlib PNGs inlined as base64.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError
from madmax.report.plots import (
    JOULES_PER_MWH,
    SECONDS_PER_HOUR,
    Chart,
    all_charts,
    pareto_gap,
    rate_label,
    sample_name,
    to_matplotlib,
    to_plotly,
)

SECTIONS = {
    "pareto": ("Pareto frontier", "Every point that fits on catalog hardware (no what-ifs), by time to train "
                                  "against cost and energy; the line joins the points no other point beats on "
                                  "both."),
    "ranking": ("Strategy ranking", "The best strategies of one configuration by throughput (each simulated)."),
    "codesign": ("Co-design sensitivity", "Throughput gain when one resource, or all together, improves k times; "
                                          "the dashed line is linear scaling."),
    "breakdown": ("Serialized vs overlapped", "Per iteration: compute plus every collective in full (serialized) "
                                              "and plus only its exposed part (overlapped), for each system's "
                                              "best point."),
}
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{margin-bottom:0}table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
.note{color:#666}.figure{margin:1em 0}img{max-width:100%}"""


def write_report(directory: str | Path, out: str | Path, *, png_dir: str | Path | None = None,
                 search_table: str | Path | None = None) -> list[Path]:
    """Write the page of the results in `directory` to `out`; with `png_dir` also every figure as PNG.

    Returns the PNG files written. ConfigError for a folder without results, an unreadable search
    table, or missing plotting libraries.
    """
    from madmax.sweep.store import load, read_meta

    frame = load(directory)
    search_frame = _read_search(search_table) if search_table is not None else None
    charts = all_charts(frame, search_frame)
    written = []
    if png_dir is not None:
        written = write_pngs([c for cs in charts.values() for c in cs], Path(png_dir))
    title = read_meta(directory).get("name") or Path(directory).name
    page = render_page(title, frame, charts)
    try:
        Path(out).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"out={str(out)!r} cannot be written: {exc.__class__.__name__}") from None
    return written


def _read_search(path: str | Path):
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"search table {str(path)!r} cannot be read as Parquet: {exc.__class__.__name__}") from None


def write_pngs(charts: list[Chart], directory: Path) -> list[Path]:
    """Each chart as `directory/<key>.png` (matplotlib)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError("png needs matplotlib; install madmax[report]") from None
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for chart in charts:
        path = directory / f"{chart.key}.png"
        to_matplotlib(chart).savefig(path, dpi=120)
        paths.append(path)
    return paths


def _figure_renderer():
    """(head script, chart -> HTML) with plotly, else with matplotlib PNGs."""
    try:
        import plotly.offline

        script = f"<script>{plotly.offline.get_plotlyjs()}</script>"
        return script, lambda c: to_plotly(c).to_html(full_html=False, include_plotlyjs=False, div_id=c.key)
    except ImportError:
        pass
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError("report needs plotly or matplotlib; install madmax[report]") from None

    def png(chart: Chart) -> str:
        buf = io.BytesIO()
        to_matplotlib(chart).savefig(buf, format="png", dpi=110)
        data = base64.b64encode(buf.getvalue()).decode()
        return f'<img alt="{html.escape(chart.title)}" src="data:image/png;base64,{data}">'

    return "", png


def render_page(title: str, frame, charts: dict[str, list[Chart]]) -> str:
    """The whole page as a string."""
    head, figure = _figure_renderer()
    body = [f"<h1>madmax sweep: {html.escape(title)}</h1>", _summary(frame)]
    for section, (heading, note) in SECTIONS.items():
        body.append(f'<h2 id="{section}">{heading}</h2><p class="note">{html.escape(note)}</p>')
        if not charts.get(section):
            why = pareto_gap(frame) if section == "pareto" else None
            because = f": {html.escape(why)}" if why else ""
            body.append(f'<p class="note">No data for this section in these results{because}.</p>')
        for chart in charts.get(section, []):
            body.append(f'<div class="figure">{figure(chart)}</div>')
        if section == "pareto" and charts.get(section):
            body.append(_frontier_table(frame))
        if section == "codesign" and charts.get(section):
            body.append(_codesign_tables(frame))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style>{head}</head><body>{''.join(body)}</body></html>")


def _summary(frame) -> str:
    counts = frame["status"].value_counts().to_dict()
    parts = [f"{len(frame)} points", *(f"{n} {s}" for s, n in counts.items())]
    text = (f"<p>{', '.join(parts)}; models: {html.escape(', '.join(map(str, frame['model'].unique())))}; "
            f"systems: {html.escape(', '.join(map(str, frame['system'].unique())))}.</p>")
    errors = frame[frame["status"] == "error"]["error"].value_counts().head(5)
    if len(errors):
        items = "".join(f"<li>{n} x {html.escape(str(e))}</li>" for e, n in errors.items())
        text += f'<details><summary>Most frequent errors</summary><ul>{items}</ul></details>'
    return text


def _display(rows, unit: str = "sequence") -> Any:
    """Rows with display units: hours, USD, MWh; the throughput per GPU in tokens, images or samples."""
    rate = rate_label(unit)
    per_gpu = rows["tokens_per_s_per_gpu"] if unit == "sequence" else rows["samples_per_s"] / rows["num_gpus"]
    return rows.assign(**{
        "time (h)": rows["time_to_train_s"] / SECONDS_PER_HOUR, "GPU-hours": rows["gpu_hours"],
        "cost (USD)": rows["cost_usd"], "energy (MWh)": rows["energy_j"] / JOULES_PER_MWH,
        rate: per_gpu, "MFU": rows["mfu"]})[
        ["model", "system", "num_gpus", "whatif", "strategy", "time (h)", "GPU-hours", "cost (USD)",
         "energy (MWh)", rate, "MFU"]]


def _frontier_table(frame) -> str:
    from madmax.sweep.pareto import pareto

    parts = []
    catalog = frame[frame["whatif_resource"] == "baseline"]
    unpriced = set()
    for model, rows in catalog.groupby("model", sort=False):
        objectives = [c for c in ("time_to_train_s", "cost_usd", "energy_j") if rows[c].notna().any()]
        unpriced |= set(rows.loc[rows["cost_usd"].isna(), "system"])
        front = pareto(rows, objectives)
        if len(front) > 1 or len(rows) > 1:
            parts.append(_display(front, sample_name(model, rows["seq_len"].iloc[0])).to_html(
                index=False, float_format=lambda v: f"{v:,.4g}", na_rep="-"))
    if not parts:
        return ""
    note = (f'<p class="note">cost -: no price for {html.escape(", ".join(sorted(map(str, unpriced))))} '
            "(price_per_gpu_hour_usd in the sweep file, or --price SYSTEM=USD)</p>" if unpriced else "")
    return "<h3>Pareto frontier of time, cost and energy</h3>" + "".join(parts) + note


def _codesign_tables(frame) -> str:
    from madmax.sweep.codesign import TRAIN_SPEED, codesign_summary, codesign_table, findings, gain_metric

    table = codesign_table(frame)
    what = "Time-to-train speed-up" if gain_metric(frame) == TRAIN_SPEED else "Throughput gain"
    grid = codesign_summary(table)
    grid.columns = [f"x{c:g}" for c in grid.columns]
    items = "".join(f"<li>{html.escape(line)}</li>" for line in findings(table))
    return (f"<h3>{what} by resource and improvement factor</h3>"
            f"{grid.to_html(float_format=lambda v: f'{v:.2f}')}<ul>{items}</ul>")
