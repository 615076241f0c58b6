"""Markdown rendering of a validation `Report`: a summary table, a table per dataset, the worst rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from madmax.validate.runner import Report, RowResult, Stats, Summary

STAT_HEAD = ["median abs %", "mean abs %", "p90 abs %", "max abs %", "bias %"]


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
                                     s.mean_signed_pct)]


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
    if isinstance(m, dict):
        model = (f"{m['name']} (L={m['num_layers']}, h={m['hidden_size']}, a={m['num_heads']}, "
                 f"kv={m.get('num_kv_heads')}, f={m['ffn_hidden_size']}, V={m['vocab_size']})")
    else:
        model = str(m)
    system = kwargs["system"]
    if isinstance(system, dict):
        up, out = system["scale_up"]["bytes_per_s"], system["scale_out"]["bytes_per_s"]
        system = f"{system['name']} (scale-up {up}, scale-out {out} per GPU per direction)"
    return (f"model {model}; system {system}; {kwargs['num_gpus']} GPUs; task {kwargs['task']}; "
            f"global batch {kwargs['global_batch']}; seq {kwargs['seq_len']}; {kwargs['dtype']}; "
            f"strategy {kwargs['strategy']}")


def _dataset_section(report: Report, s: Summary, all_rows_up_to: int) -> list[str]:
    rows = [r for r in report.rows if r.case.dataset == s.name]
    lines = [f"### {s.name}", ""]
    if s.crashed or s.failed:
        lines.append(f"{s.failed} rows failed ({s.crashed} engine crashes):")
        lines += _counted(r.error or "" for r in rows if r.error)
    if s.not_fitting:
        lines += [f"{s.not_fitting} rows predicted not to fit in memory (they ran, so memory errs).", ""]
    shown = rows if len(rows) <= all_rows_up_to else list(s.worst)
    if shown:
        if len(rows) > all_rows_up_to:
            lines += [f"{len(rows)} rows; the {len(shown)} worst:", ""]
        lines += _table(ROW_HEAD, (_row_cells(r) for r in shown))
    unmapped = [u for u in report.unmapped if u.dataset == s.name]
    if unmapped:
        lines.append("Unmapped rows:")
        lines += _counted(u.reason for u in unmapped)
    return lines


def report_markdown(report: Report, all_rows_up_to: int = 40) -> str:
    """The whole report: summary, datasets, worst rows with inputs, groupings."""
    head = ["dataset", "mapped", "unmapped", "run", "failed", *STAT_HEAD]
    lines = ["## Training validation", "",
             "Error e = 100 (predicted - measured) / measured; bias is the mean signed e.", ""]
    lines += _table(head, [*(_summary_row(s) for s in report.datasets), _summary_row(report.overall)])
    for s in report.datasets:
        lines += _dataset_section(report, s, all_rows_up_to)
    if report.overall.worst:
        lines += [f"### The {len(report.overall.worst)} worst rows", ""]
    for i, r in enumerate(report.overall.worst, start=1):
        c = r.case
        lines.append(f"{i}. **{c.label}** ({c.dataset} {c.row_id}): {c.metric} measured {_num(c.measured)}, "
                     f"predicted {_num(r.predicted)} ({_num(r.signed_error_pct, '+.1f')}%)")
        lines.append(f"   - inputs: {describe_inputs(c.kwargs)}")
        lines += [f"   - assumed: {a}" for a in c.assumptions]
    lines.append("")
    for attr, by in report.groups.items():
        if not by:
            continue
        lines += [f"### By {attr}", ""]
        lines += _table([attr, "rows", *STAT_HEAD], ([k, s.rows, *_stats_cells(s)] for k, s in by.items()))
    return "\n".join(lines)
