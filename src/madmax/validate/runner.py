"""Run every mapped case through `simulate`, and summarize the errors per dataset and overall.

Percent error of a row: e = 100 * (predicted - measured) / measured (signed; positive = the prediction
is higher, i.e. slower for times and faster for throughputs), |e| its absolute value. A summary gives
the rows run, the median, mean and 90th percentile of |e|, the mean signed error (bias) and the five
worst rows; groupings split all rows by model family, GPU and parallel axes in use. A dataset that
re-runs another's rows under a different compute profile (`Dataset.baseline`) is compared with it on
those rows (`Comparison`) and left out of the overall figures, so no row counts twice.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from madmax import terminal
from madmax.errors import MadmaxError
from madmax.validate.conventions import engine_value, predicted_value
from madmax.validate.datasets import Case, Dataset, Unmapped, load_datasets

WORST = 5
GROUPINGS = ("family", "gpu", "parallelism", "metric")


@dataclass(frozen=True)
class RowResult:
    """One case after simulation: the prediction and its error, or the error message of a failure.

    error: the MadmaxError sentence (bad input for this row) or, when `crashed`, the exception of an
    engine bug. engine_value: the engine's own FLOP-metric reading (mfu or hfu times peak).
    """

    case: Case
    predicted: float | None = None
    signed_error_pct: float | None = None
    error: str | None = None
    crashed: bool = False
    fits: bool | None = None
    engine_value: float | None = None
    wall_s: float = 0.0

    @property
    def abs_error_pct(self) -> float | None:
        return None if self.signed_error_pct is None else abs(self.signed_error_pct)

    def to_dict(self) -> dict[str, Any]:
        c = self.case
        return {"dataset": c.dataset, "row_id": c.row_id, "label": c.label, "metric": c.metric,
                "unit": c.unit, "measured": c.measured, "predicted": self.predicted,
                "signed_error_pct": self.signed_error_pct, "abs_error_pct": self.abs_error_pct,
                "error": self.error, "crashed": self.crashed, "fits": self.fits,
                "engine_value": self.engine_value, "family": c.family, "gpu": c.gpu,
                "parallelism": c.parallelism, "kwargs": _shown_kwargs(c.kwargs), "assumptions": list(c.assumptions),
                "wall_s": self.wall_s}


def _shown_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The case's arguments as JSON takes them: a profile built in memory by its label."""
    from madmax.validate.markdown import calibration_label

    calibration = kwargs.get("calibration")
    if calibration is None or isinstance(calibration, str):
        return kwargs
    return {**kwargs, "calibration": calibration_label(calibration)}


@dataclass(frozen=True)
class Stats:
    """|error| statistics (percent) over `rows` rows with a prediction."""

    rows: int
    median_abs_pct: float
    mean_abs_pct: float
    p90_abs_pct: float
    max_abs_pct: float
    mean_signed_pct: float
    median_signed_pct: float  # the bias: a median of errors all of one sign is a missing mechanism

    @staticmethod
    def of(results: Iterable[RowResult]) -> Stats | None:
        signed = np.array([r.signed_error_pct for r in results if r.signed_error_pct is not None],
                          dtype=float)
        if signed.size == 0:
            return None
        a = np.abs(signed)
        return Stats(rows=int(a.size), median_abs_pct=float(np.median(a)), mean_abs_pct=float(a.mean()),
                     p90_abs_pct=float(np.percentile(a, 90)), max_abs_pct=float(a.max()),
                     mean_signed_pct=float(signed.mean()), median_signed_pct=float(np.median(signed)))


@dataclass(frozen=True)
class Summary:
    """One dataset (or all of them): counts, statistics and the worst rows."""

    name: str
    mapped: int
    unmapped: int
    run: int
    failed: int
    crashed: int
    not_fitting: int
    stats: Stats | None
    worst: tuple[RowResult, ...]

    @staticmethod
    def of(name: str, results: Sequence[RowResult], unmapped: int, mapped: int | None = None) -> Summary:
        scored = [r for r in results if r.signed_error_pct is not None]
        worst = sorted(scored, key=lambda r: -(r.abs_error_pct or 0.0))[:WORST]
        return Summary(name=name, mapped=len(results) if mapped is None else mapped, unmapped=unmapped,
                       run=len(scored), failed=sum(r.error is not None for r in results),
                       crashed=sum(r.crashed for r in results),
                       not_fitting=sum(r.fits is False for r in results),
                       stats=Stats.of(results), worst=tuple(worst))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mapped": self.mapped, "unmapped": self.unmapped, "run": self.run,
                "failed": self.failed, "crashed": self.crashed, "not_fitting": self.not_fitting,
                "stats": None if self.stats is None else asdict(self.stats),
                "worst": [r.to_dict() for r in self.worst]}


@dataclass(frozen=True)
class Comparison:
    """A dataset re-run under another profile (`Dataset.baseline`): the same rows before and after."""

    name: str
    baseline: str
    calibration: str
    before: Stats | None
    after: Stats | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "baseline": self.baseline, "calibration": self.calibration,
                "before": None if self.before is None else asdict(self.before),
                "after": None if self.after is None else asdict(self.after)}


@dataclass(frozen=True)
class Report:
    """The outcome of `run_validation`: every row, per-dataset and overall summaries, groupings.

    `overall` and `groups` count only datasets without a baseline; `comparisons` pair each re-run
    dataset with its baseline's rows of the same row ids.
    """

    rows: tuple[RowResult, ...]
    unmapped: tuple[Unmapped, ...]
    datasets: tuple[Summary, ...]
    overall: Summary
    groups: dict[str, dict[str, Stats]]
    comparisons: tuple[Comparison, ...] = ()
    # Every dataset with its software stack's profile: a re-run dataset (held-out rows, fitted profile)
    # stands in for its baseline; None when nothing was re-run.
    overall_with_stacks: Summary | None = None
    # Each source scored with the fits of its own rows left out (`madmax.validate.fits`); () when not run.
    cross_source: tuple[Any, ...] = ()
    fit_effects: tuple[Any, ...] = ()  # each fit on its own sources and on the others (`fits.fit_effects`)

    def dataset(self, name: str) -> Summary:
        for summary in self.datasets:
            if summary.name == name:
                return summary
        raise KeyError(name)

    def select(self, predicate: Callable[[RowResult], bool], name: str = "selection") -> Summary:
        """A summary of the rows for which `predicate` holds (e.g. one dataset's iteration times)."""
        return Summary.of(name, [r for r in self.rows if predicate(r)], unmapped=0)

    def summary_dict(self) -> dict[str, Any]:
        """Summaries, groupings and comparisons (each summary with its worst rows), without all rows."""
        stacks = None if self.overall_with_stacks is None else self.overall_with_stacks.to_dict()
        return {"overall": self.overall.to_dict(), "overall_with_stacks": stacks,
                "datasets": [s.to_dict() for s in self.datasets],
                "groups": {g: {k: asdict(v) for k, v in by.items()} for g, by in self.groups.items()},
                "comparisons": [c.to_dict() for c in self.comparisons],
                "cross_source": [c.to_dict() for c in self.cross_source],
                "fit_effects": [f.to_dict() for f in self.fit_effects]}

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary_dict(), "rows": [r.to_dict() for r in self.rows],
                "unmapped": [asdict(u) for u in self.unmapped]}

    def to_markdown(self, all_rows_up_to: int = 40) -> str:
        from madmax.validate.markdown import report_markdown

        return report_markdown(self, all_rows_up_to=all_rows_up_to)


def _default_simulate() -> Callable[..., Any]:
    from madmax.api import simulate

    return simulate


def run_case(case: Case, simulate: Callable[..., Any]) -> RowResult:
    """Simulate one case; a MadmaxError becomes the row's error, any other exception a crash."""
    return run_group([case], simulate)[0]


def run_group(cases: Sequence[Case], simulate: Callable[..., Any]) -> list[RowResult]:
    """Simulate cases that share their keyword arguments (a serving row's TTFT and TPOT) once, and score
    each against its own metric."""
    start = time.perf_counter()
    try:
        result = simulate(**copy.deepcopy(cases[0].kwargs))
        data: Mapping[str, Any] = result.to_dict() if hasattr(result, "to_dict") else result
    except MadmaxError as exc:
        return [RowResult(c, error=str(exc), wall_s=time.perf_counter() - start) for c in cases]
    except Exception as exc:  # an engine bug must not hide the other rows; it is reported as a crash
        return [RowResult(c, error=f"{type(exc).__name__}: {exc}", crashed=True, wall_s=time.perf_counter() - start)
                for c in cases]
    wall = (time.perf_counter() - start) / len(cases)
    return [_scored(c, data, wall) for c in cases]


def _scored(case: Case, data: Mapping[str, Any], wall_s: float) -> RowResult:
    try:
        predicted = predicted_value(case.metric, data, flops_per_token=case.published_flops_per_token,
                                    peak_flops_per_s=case.peak_flops_per_s)
        engine = engine_value(case.metric, data, layer_passes=case.layer_passes,
                              peak_flops_per_s=case.peak_flops_per_s)
    except MadmaxError as exc:
        return RowResult(case, error=str(exc), wall_s=wall_s)
    signed = 100.0 * (predicted - case.measured) / case.measured
    fits = data.get("fits")
    return RowResult(case, predicted=predicted, signed_error_pct=signed, engine_value=engine,
                     fits=None if fits is None else bool(fits), wall_s=wall_s)


def _sampled(cases: Sequence[Case], sample: int | None, seed: int) -> list[Case]:
    if sample is None or len(cases) <= sample:
        return list(cases)
    picked = sorted(random.Random(seed).sample(range(len(cases)), sample))
    return [cases[i] for i in picked]


def run_validation(
    datasets: Iterable[str | Dataset] | None = None,
    simulate: Callable[..., Any] | None = None,
    *,
    sample: int | None = None,
    seed: int = 0,
    jobs: int = 1,
) -> Report:
    """Simulate every mapped case of `datasets` (names or `Dataset`s; all when None) and summarize.

    simulate: `madmax.api.simulate` by default; any callable taking its keyword arguments and
    returning an object with `to_dict()` (or a mapping). sample: at most this many cases per dataset,
    drawn with `seed`. jobs > 1 runs cases in that many processes (simulate must be picklable).
    """
    simulate = simulate or _default_simulate()
    if datasets is None:
        resolved = load_datasets()
    else:
        resolved = [d if isinstance(d, Dataset) else load_datasets([d])[0] for d in datasets]
    per_dataset = [(d, _sampled(d.cases, sample, seed)) for d in resolved]
    cases = [c for _, picked in per_dataset for c in picked]
    results = _run_cases(cases, simulate, jobs)
    by_name: dict[str, list[RowResult]] = {}
    for r in results:
        by_name.setdefault(r.case.dataset, []).append(r)
    summaries = tuple(Summary.of(d.name, by_name.get(d.name, []), unmapped=len(d.unmapped),
                                 mapped=len(d.cases)) for d, _ in per_dataset)
    primary = [d for d in resolved if d.baseline is None]
    scored = [r for d in primary for r in by_name.get(d.name, [])]
    unmapped = tuple(u for d in resolved for u in d.unmapped)
    overall = Summary.of("all", scored, unmapped=sum(len(d.unmapped) for d in primary),
                         mapped=sum(len(d.cases) for d in primary))
    replaced = {d.baseline for d in resolved if d.baseline is not None}
    stacked = [r for d in resolved if d.name not in replaced for r in by_name.get(d.name, [])]
    with_stacks = (Summary.of("all, each stack's profile (vTrain: held-out rows)", stacked, unmapped=0,
                              mapped=len(stacked)) if replaced else None)
    return Report(rows=tuple(results), unmapped=unmapped, datasets=summaries, overall=overall,
                  groups=group_stats(scored), comparisons=_comparisons(resolved, by_name),
                  overall_with_stacks=with_stacks)


def _cost(case: Case) -> float:
    """A rough cost of simulating `case` (GPUs times layers), to start the slowest rows first."""
    model = case.kwargs.get("model")
    layers = model.get("num_layers", 1) if isinstance(model, dict) else 1
    return float(case.kwargs.get("num_gpus") or 1) * layers


def _run_chunk(groups: Sequence[Sequence[Case]], simulate: Callable[..., Any]) -> list[list[RowResult]]:
    return [run_group(g, simulate) for g in groups]


def _same_run(cases: Sequence[Case]) -> list[list[int]]:
    """Indices of `cases` grouped by their keyword arguments, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(json.dumps(c.kwargs, sort_keys=True, default=str), []).append(i)
    return list(groups.values())


def _run_cases(cases: Sequence[Case], simulate: Callable[..., Any], jobs: int) -> list[RowResult]:
    """run_case over `cases` in order, one simulation per set of keyword arguments (`_same_run`); with
    jobs > 1 in a process pool, over 4 x jobs chunks of about equal estimated cost (longest first, each
    group to the least loaded chunk). Rows done advance the command's progress bar."""
    terminal.expect(len(cases))
    groups = _same_run(cases)
    results: list[RowResult | None] = [None] * len(cases)

    def place(group: list[int], rows: list[RowResult]) -> None:
        for i, r in zip(group, rows, strict=True):
            results[i] = r
        terminal.advance(len(rows))

    if jobs <= 1 or len(groups) < 2:
        for g in groups:
            place(g, run_group([cases[i] for i in g], simulate))
        return results  # type: ignore[return-value]
    bins: list[list[list[int]]] = [[] for _ in range(min(4 * jobs, len(groups)))]
    loads = [0.0] * len(bins)
    for g in sorted(groups, key=lambda g: -_cost(cases[g[0]])):
        b = loads.index(min(loads))
        bins[b].append(g)
        loads[b] += _cost(cases[g[0]])
    bins = [b for _, b in sorted(zip(loads, bins, strict=True), key=lambda lb: -lb[0]) if b]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = pool.map(_run_chunk, [[[cases[i] for i in g] for g in b] for b in bins], [simulate] * len(bins))
        for b, chunk in zip(bins, done, strict=True):
            for g, rows in zip(b, chunk, strict=True):
                place(g, rows)
    return results  # type: ignore[return-value]


def _comparisons(datasets: Sequence[Dataset], by_name: Mapping[str, list[RowResult]]) -> tuple[Comparison, ...]:
    out = []
    for d in datasets:
        if d.baseline is None:
            continue
        after = by_name.get(d.name, [])
        ids = {r.case.row_id for r in after}
        before = [r for r in by_name.get(d.baseline, []) if r.case.row_id in ids]
        calibration = _shown_kwargs(d.cases[0].kwargs).get("calibration") or "" if d.cases else ""
        out.append(Comparison(d.name, d.baseline, calibration, Stats.of(before), Stats.of(after)))
    return tuple(out)


def group_stats(results: Sequence[RowResult],
                groupings: Sequence[str] = GROUPINGS) -> dict[str, dict[str, Stats]]:
    """|error| statistics of `results` split by each Case attribute in `groupings`."""
    groups: dict[str, dict[str, Stats]] = {}
    for attr in groupings:
        buckets: dict[str, list[RowResult]] = {}
        for r in results:
            buckets.setdefault(str(getattr(r.case, attr)), []).append(r)
        groups[attr] = {key: s for key, rows in sorted(buckets.items()) if (s := Stats.of(rows)) is not None}
    return groups
