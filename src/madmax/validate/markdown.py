"""Markdown rendering of a validation `Report`: a summary table, a table per dataset, the worst rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from madmax.validate.conventions import direction

if TYPE_CHECKING:
    from madmax.validate.runner import Report, RowResult, Stats, Summary

STAT_HEAD = ["median abs %", "mean abs %", "p90 abs %", "max abs %", "bias %", "mean signed %"]


def _table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def _stats_cells(s: Stats | None) -> list[str]:
    if s is None:
        return ["-"] * len(STAT_HEAD)
    return [_num(v, ".1f") for v in (s.median_abs_pct, s.mean_abs_pct, s.p90_abs_pct, s.max_abs_pct,
                                     s.median_signed_pct, s.mean_signed_pct)]


def _summary_row(s: Summary) -> list[Any]:
    return [s.name, s.mapped, s.unmapped, s.run, s.failed, *_stats_cells(s.stats)]


def _row_cells(r: RowResult) -> list[Any]:
    c = r.case
    fits = "" if r.fits is None else ("yes" if r.fits else "**no**")
    return [c.row_id, c.label, c.metric, _num(c.measured), _num(r.predicted),
            _num(r.signed_error_pct, "+.1f"), fits]


ROW_HEAD = ["row", "case", "metric", "measured", "predicted", "error %", "fits"]


def _counted(messages: Iterable[str], limit: int = 8) -> list[str]:
    counts = Counter(messages)
    lines = [f"- {n} x {msg}" for msg, n in counts.most_common(limit)]
    if len(counts) > limit:
        lines.append(f"- ... and {len(counts) - limit} other messages")
    return [*lines, ""]


def describe_inputs(kwargs: dict[str, Any]) -> str:
    """The simulate() arguments of a case in one line: model shape, system, batch, strategy."""
    m = kwargs["model"]
    if isinstance(m, dict) and "tables" in m:
        tables = sum(t.get("count", 1) for t in m["tables"])
        model = (f"{m['name']} ({tables} tables, bottom {m['bottom_mlp']}, top {m['top_mlp']}, "
                 f"{m.get('interaction', 'dot')} interaction)")
    elif isinstance(m, dict) and m.get("family") == "vit":
        model = (f"{m['name']} (L={m['num_layers']}, h={m['hidden_size']}, a={m['num_heads']}, "
                 f"f={m['ffn_hidden_size']}, image {m['image_size']} in patches of {m['patch_size']})")
    elif isinstance(m, dict):
        model = (f"{m['name']} (L={m['num_layers']}, h={m['hidden_size']}, a={m['num_heads']}, "
                 f"kv={m.get('num_kv_heads')}, f={m['ffn_hidden_size']}, V={m['vocab_size']})")
    else:
        model = str(m)
    system = kwargs["system"]
    if isinstance(system, dict):
        up, out = system["scale_up"]["bytes_per_s"], system["scale_out"]["bytes_per_s"]
        system = f"{system['name']} (scale-up {up}, scale-out {out} per GPU per direction)"
    if "prompt_len" in kwargs:  # LLM serving
        kv = f" (KV cache {kwargs['kv_dtype']})" if kwargs.get("kv_dtype") else ""
        text = (f"model {model}; system {system}; {kwargs['num_gpus']} GPUs; task {kwargs['task']} "
                f"({kwargs.get('mode', 'static')}, stack {kwargs.get('stack', 'default')}); batch {kwargs['batch']}; "
                f"prompt {kwargs['prompt_len']}, output {kwargs['output_len']} tokens; {kwargs['dtype']}{kv}; "
                f"strategy {kwargs['strategy']}")
    else:
        batch = f"batch {kwargs['batch']}" if "batch" in kwargs else f"global batch {kwargs.get('global_batch')}"
        text = (f"model {model}; system {system}; {kwargs['num_gpus']} GPUs; task {kwargs['task']}; {batch}; "
                f"seq {kwargs['seq_len']}; {kwargs['dtype']}; strategy {kwargs['strategy']}")
    if kwargs.get("calibration"):
        text += f"; calibration {calibration_label(kwargs['calibration'])}"
    return text


def calibration_label(calibration: Any) -> str:
    """A case's profile in a few words: its file, or the device of a profile built in memory (a cross-source
    prior, `madmax.validate.fits`)."""
    if calibration is None or isinstance(calibration, str):
        return calibration or ""
    device = getattr(calibration, "device", None)
    return f"{device} profile with the cross-source priors" if device else str(calibration)


def _worst_list(rows: Sequence[RowResult]) -> list[str]:
    lines = []
    for i, r in enumerate(rows, start=1):
        c = r.case
        how = "" if r.signed_error_pct is None else f", {direction(c.metric, r.signed_error_pct)}"
        lines.append(f"{i}. **{c.label}** ({c.row_id}): {c.metric} measured {_num(c.measured)}, "
                     f"predicted {_num(r.predicted)} ({_num(r.signed_error_pct, '+.1f')}%{how})")
        lines.append(f"   - inputs: {describe_inputs(c.kwargs)}")
        lines += [f"   - assumed: {a}" for a in c.assumptions]
    return [*lines, ""]


def _dataset_section(report: Report, s: Summary, all_rows_up_to: int) -> list[str]:
    rows = [r for r in report.rows if r.case.dataset == s.name]
    lines = [f"### {s.name}", ""]
    if s.crashed or s.failed:
        lines.append(f"{s.failed} rows failed ({s.crashed} engine crashes):")
        lines += _counted(r.error or "" for r in rows if r.error)
    if s.not_fitting:
        lines += [f"{s.not_fitting} rows predicted not to fit in memory (they ran, so memory errs).", ""]
    from madmax.validate.serving_report import serving_markdown

    lines += serving_markdown(rows)
    if rows and len(rows) <= all_rows_up_to:
        lines += _table(ROW_HEAD, (_row_cells(r) for r in rows))
    if s.worst:
        lines += [f"The {len(s.worst)} worst rows of {s.run}, with their inputs:", ""]
        lines += _worst_list(s.worst)
    unmapped = [u for u in report.unmapped if u.dataset == s.name]
    if unmapped:
        lines.append("Unmapped rows:")
        lines += _counted(u.reason for u in unmapped)
    return lines


def comparison_markdown(report: Report) -> list[str]:
    """Each re-run dataset against its baseline on the same rows: statistics before and after."""
    from madmax.validate.stack import SUFFIX

    stacked = [c for c in report.comparisons if c.name.endswith(SUFFIX)]
    if not stacked:
        return []
    head = ["dataset", "profile", "rows run", *STAT_HEAD]
    lines = ["### vTrain-stack profile (held-out rows only)", "",
             "The same rows with the default profile and with the vTrain-stack profile (launch floor fitted "
             "on the other half of vtrain_single's model shapes; see docs/calibration.md).", ""]
    body = []
    for c in stacked:
        for label, stats in (("default", c.before), (c.calibration or c.name, c.after)):
            body.append([c.name, label, stats.rows if stats else 0, *_stats_cells(stats)])
    return lines + _table(head, body)


def cross_source_markdown(report: Report) -> list[str]:
    """The headline: each source scored with the fits of its own rows left out, beside the shipped fits."""
    if not report.cross_source:
        return []
    from madmax.validate.fits import BEYOND_PCT, FITS_FILE

    beyond = f"> {BEYOND_PCT:g}%"
    head = ["source", "rows", "scored", "own fits left out", "median abs %", "p90 abs %", "bias %", beyond,
            "shipped fits: median abs %", "p90 abs %", "bias %", beyond]
    body = []
    for c in report.cross_source:
        cross = c.cross if c.scored != "in-sample only" else None
        rows = max(s.rows if s else 0 for s in (c.cross, c.shipped))
        body.append([c.name if c.scored != "pooled" else f"**{c.name}**", rows, c.scored,
                     ", ".join(c.left_out) or "-", *_headline_cells(cross, c.cross_beyond),
                     *_headline_cells(c.shipped, c.shipped_beyond)])
    lines = ["## Cross-source accuracy (leave one source out)", "",
             "Each source is predicted with every fit of its own rows left out (`madmax.validate.fits`; the "
             f"fits, their sources and their priors in `catalog/{FITS_FILE}`; the rule they are held to in "
             "docs/calibration.md): a fit of another source stays, a fit of its own is replaced by its prior "
             "(vTrain's rows run under Megatron-DeepSpeed with the default profile's launch floor, TensorFlow's "
             "with the default profile). `no fit of its own`: no adopted fit drew on the source (NeMo's fp8 "
             "weight-gradient rate is not adopted), so its rows are already cross-source. `in-sample only`: a fit "
             "of its rows has no prior (the serving stacks' graph floor and host step), so no cross-source "
             "figure exists. The shipped-fits columns score the same source with every fit shipped (each stack's "
             "profile; vTrain: its held-out half only). `pooled` rows count every row of their group's "
             "sources that has a cross-source figure.", ""]
    return lines + _table(head, body)


def fit_effects_markdown(report: Report) -> list[str]:
    """Each end-to-end fit on the sources it was fitted on (in-sample) and on the others it applies to."""
    if not report.fit_effects:
        return []
    head = ["fit", "own rows", "with it: median abs %", "bias %", "without: median abs %", "bias %",
            "other sources' rows", "with it: median abs %", "bias %", "without: median abs %", "bias %"]
    body = [[e.fit, e.own_rows, *_effect_cells(e.own_with), *_effect_cells(e.own_without), e.other_rows,
             *_effect_cells(e.other_with), *_effect_cells(e.other_without)] for e in report.fit_effects]
    lines = ["### Each fit, in-sample and cross-source", "",
             "Each end-to-end fit with a prior: the rows of its own source it applies to, with it (shipped) and "
             "with its prior; then the rows of every other source it applies to, with and without it. A fit "
             "whose other-source columns are empty applies to its own source's stack or GPUs only.", ""]
    return lines + _table(head, body)


def _effect_cells(s: Stats | None) -> list[str]:
    return ["-", "-"] if s is None else [_num(s.median_abs_pct, ".1f"), _num(s.median_signed_pct, "+.1f")]


def _headline_cells(s: Stats | None, beyond: int) -> list[str]:
    if s is None:
        return ["-"] * 4
    return [_num(s.median_abs_pct, ".1f"), _num(s.p90_abs_pct, ".1f"), _num(s.median_signed_pct, "+.1f"),
            str(beyond)]


def report_markdown(report: Report, all_rows_up_to: int = 40) -> str:
    """The whole report: summary, comparisons, datasets with their worst rows and inputs, groupings."""
    head = ["dataset", "mapped", "unmapped", "run", "failed", *STAT_HEAD]
    lines = [*cross_source_markdown(report), *fit_effects_markdown(report), "## Training and serving validation", "",
             "Error e = 100 (predicted - measured) / measured; bias is the median signed e (e > 0: too slow for "
             "times such as iteration time, TTFT and TPOT; too fast for throughputs). Datasets ending in "
             "`+stack` re-run held-out vTrain rows with the vTrain-stack profile; `all` and the groupings "
             "leave them out. The last row counts every dataset with its software stack's profile: the "
             "`+stack` rows in place of their datasets (held-out rows only).", ""]
    summary = [*(_summary_row(s) for s in report.datasets), _summary_row(report.overall)]
    if report.overall_with_stacks is not None:
        summary.append(_summary_row(report.overall_with_stacks))
    lines += _table(head, summary)
    lines += comparison_markdown(report)
    for s in report.datasets:
        lines += _dataset_section(report, s, all_rows_up_to)
    for attr, by in report.groups.items():
        if not by:
            continue
        lines += [f"### By {attr}", ""]
        lines += _table([attr, "rows", *STAT_HEAD], ([k, s.rows, *_stats_cells(s)] for k, s in by.items()))
    return "\n".join(lines)
