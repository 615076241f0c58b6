"""The serving rows' accuracy by stack, mode and model, the dev targets of issue 24, and the same rows
predicted by AIConfigurator (docs/validation.md).

For a time, e = 100 (predicted - measured) / measured; "beyond 2x" counts rows whose prediction is more than
twice or less than half the measurement, "beyond 4x" likewise. AIConfigurator's predictions are read from
`data/serving/aiconfigurator_h100.csv` (`benchmarks/aiconfigurator_serving.py` writes it where aiconfigurator
is installed); its perf database was built from its own silicon measurements, these rows among them.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from madmax.validate.runner import RowResult

SERVING_METRICS = ("ttft_ms", "tpot_ms")
AIC_CSV = "serving/aiconfigurator_h100.csv"
# Issue 24's dev targets on the H100 rows: (median |e| %, p90 |e| %, rows beyond 4x) at most.
TARGETS = {"ttft_ms": (20.0, 60.0, 0), "tpot_ms": (10.0, None, None)}


@dataclass(frozen=True)
class Errors:
    """Accuracy of predictions against measurements: rows, |e| median and p90 (%), bias (median signed e, %),
    and the rows beyond 2x and 4x."""

    rows: int
    median: float
    p90: float
    bias: float
    beyond_2x: int
    beyond_4x: int

    @classmethod
    def of(cls, predicted: Sequence[float], measured: Sequence[float]) -> Errors | None:
        if not len(predicted):
            return None
        ratio = np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float)
        signed = 100 * (ratio - 1)
        return cls(len(ratio), float(np.median(np.abs(signed))), float(np.percentile(np.abs(signed), 90)),
                   float(np.median(signed)), int(np.sum((ratio > 2) | (ratio < 0.5))),
                   int(np.sum((ratio > 4) | (ratio < 0.25))))

    def cells(self) -> list[str]:
        return [str(self.rows), f"{self.median:.1f}", f"{self.p90:.1f}", f"{self.bias:+.1f}", str(self.beyond_2x),
                str(self.beyond_4x)]


HEAD = ["rows", "median abs %", "p90 abs %", "bias %", "beyond 2x", "beyond 4x"]


def serving_rows(rows: Iterable[RowResult]) -> list[RowResult]:
    """The predicted serving rows (TTFT and TPOT cases)."""
    return [r for r in rows if r.case.metric in SERVING_METRICS and r.predicted is not None]


@cache
def _stack_label(name: str) -> str:
    from madmax.config.stack import load_stack

    return load_stack(name).label


def stack_of(r: RowResult) -> str:
    """The row's serving stack profile, its releases and its launch, e.g. 'vllm (0.11-0.13), aiconfigurator'."""
    kwargs = r.case.kwargs
    label = _stack_label(kwargs["stack"]) if isinstance(kwargs.get("stack"), str) else "?"
    return f"{label}, {kwargs.get('launch', 'sized')}"


def mode_of(r: RowResult) -> str:
    return "disaggregated" if r.case.parallelism == "disagg" else "aggregated"


def model_of(r: RowResult) -> str:
    return r.case.label.split()[0]


def _grouped(rows: Sequence[RowResult], keys: Sequence[Callable[[RowResult], str]]) -> list[list[str]]:
    buckets: dict[tuple[str, ...], list[RowResult]] = {}
    for r in rows:
        buckets.setdefault((r.case.metric, *(k(r) for k in keys)), []).append(r)
    out = []
    for key, group in sorted(buckets.items()):
        errors = Errors.of([r.predicted for r in group], [r.case.measured for r in group])
        out.append([key[0].removesuffix("_ms").upper(), *key[1:], *errors.cells()])
    return out


def _table(head: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in body]
    return [*lines, ""]


def target_checks(rows: Sequence[RowResult]) -> list[tuple[str, str, bool]]:
    """Each dev target against its figure on the rows: (metric, what was measured against what, met)."""
    checks = []
    for metric, (median, p90, beyond) in TARGETS.items():
        e = Errors.of([r.predicted for r in rows if r.case.metric == metric],
                      [r.case.measured for r in rows if r.case.metric == metric])
        if e is None:
            continue
        name = metric.removesuffix("_ms").upper()
        checks.append((name, f"median {e.median:.1f}% (target <= {median:g}%)", e.median <= median))
        if p90 is not None:
            checks.append((name, f"p90 {e.p90:.1f}% (target <= {p90:g}%)", e.p90 <= p90))
        if beyond is not None:
            checks.append((name, f"{e.beyond_4x} rows beyond 4x (target {beyond})", e.beyond_4x <= beyond))
    refused = sum(1 for r in rows if r.fits is False and r.case.metric == "ttft_ms")
    checks.append(("fits", f"deployments predicted not to fit: {refused} (target 0)", not refused))
    return checks


def targets_lines(rows: Sequence[RowResult]) -> list[str]:
    """The dev targets, met or missed, a line per metric."""
    by_metric: dict[str, list[str]] = {}
    for name, text, ok in target_checks(rows):
        by_metric.setdefault(name, []).append(f"{text}: {'met' if ok else 'missed'}")
    lines = [f"- {name}: " + "; ".join(texts) if name != "fits" else f"- {texts[0]}"
             for name, texts in by_metric.items()]
    return [*lines, ""]


@cache
def aiconfigurator_predictions() -> dict[str, dict[str, str]]:
    """AIConfigurator's predictions by row id (without the metric), or {} when the file is absent."""
    path = resources.files("madmax.validate.data").joinpath(AIC_CSV)
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as f:
        return {row["row_id"]: row for row in csv.DictReader(f)}


def aiconfigurator_lines(rows: Sequence[RowResult]) -> list[str]:
    """madmax and AIConfigurator on the rows both predicted, by metric and stack."""
    aic = aiconfigurator_predictions()
    if not aic:
        return ["AIConfigurator's predictions are not in this package (`python benchmarks/aiconfigurator_serving.py` "
                "with aiconfigurator installed writes them).", ""]
    pairs = []
    for r in rows:
        entry = aic.get(r.case.row_id.rsplit(":", 1)[0])
        if entry and entry["status"] == "ok" and entry[r.case.metric]:
            pairs.append((r, float(entry[r.case.metric])))
    if not pairs:
        return ["No row is predicted by both.", ""]
    versions = sorted({e["aiconfigurator"] for e in aic.values()})
    fallback = sum(1 for e in aic.values() if e["note"].startswith("no database"))
    refused = sum(1 for e in aic.values() if e["status"] != "ok")
    lines = [f"The same rows predicted by AIConfigurator {', '.join(versions)} (`cli_estimate`, each row's own "
             f"layout; {fallback} rows answered by a newer backend version's database than they were measured "
             f"with, {refused} rows it refuses), beside madmax on the rows both predict:", ""]
    body = []
    groups: dict[tuple[str, str], list[tuple[RowResult, float]]] = {}
    for r, value in pairs:
        groups.setdefault((r.case.metric, "all"), []).append((r, value))
        groups.setdefault((r.case.metric, f"{r.case.kwargs.get('stack')} {mode_of(r)}"), []).append((r, value))
    for (metric, key), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "all", kv[0][1])):
        measured = [r.case.measured for r, _ in group]
        ours = Errors.of([r.predicted for r, _ in group], measured)
        theirs = Errors.of([v for _, v in group], measured)
        body.append([metric.removesuffix("_ms").upper(), key, str(ours.rows),
                     f"{ours.median:.1f} / {ours.p90:.1f} / {ours.bias:+.1f} / {ours.beyond_4x}",
                     f"{theirs.median:.1f} / {theirs.p90:.1f} / {theirs.bias:+.1f} / {theirs.beyond_4x}"])
    head = ["metric", "stack, mode", "rows", "madmax median / p90 / bias % / beyond 4x",
            "AIConfigurator median / p90 / bias % / beyond 4x"]
    return [*lines, *_table(head, body)]


def serving_markdown(rows: Iterable[RowResult]) -> list[str]:
    """The section of docs/validation.md for serving rows: targets, by stack and mode, by model, and beside
    AIConfigurator."""
    scored = serving_rows(rows)
    if not any(r.case.metric == "tpot_ms" for r in scored):  # a served deployment's rows, not a static table's
        return []
    lines = ["#### Serving accuracy by stack (issue 24's dev targets)", "", *targets_lines(scored)]
    lines += _table(["metric", "stack (releases), launch", "mode", *HEAD], _grouped(scored, (stack_of, mode_of)))
    lines += ["#### By model", ""]
    lines += _table(["metric", "model", *HEAD], _grouped(scored, (model_of,)))
    lines += ["#### Beside AIConfigurator", "", *aiconfigurator_lines(scored)]
    return lines
