"""Fit a software stack's per-kernel launch floor to measured iteration times, with a held-out split.

The compute profile's `launch_s` is the shortest time of one kernel as the host issues them (see
`madmax.hardware.compute`). The shipped H200 profile measured it for eager PyTorch 2.11 (18.6 us); an
older framework issues its kernels more slowly. Small models are host-bound, so their iteration times
pin it down. With every other parameter of a base profile kept, one number is searched:

    L* = argmin_L  sum_i ln(y_i(L) / m_i)^2

y_i(L): the prediction of row i (its metric, e.g. iteration time) with launch_s = L; m_i the measured
value. The attention launch floor is scaled by the same factor L / L_base (the stack's host overhead
applies to every kernel). The search: the loss on a log-spaced grid of L from 1 us to 1 ms, then a
golden-section search (Kiefer 1953) in ln L between the grid neighbours of the best point.

Held-out errors: rows are split by model shape (`split_by_shape`): shapes sorted by (hidden, layers,
heads, KV heads, FFN width, vocabulary, sequence length), even positions fitted, odd ones held out.
No row of a held-out shape enters the fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from madmax.hardware.profile import ComputeProfile
from madmax.validate.datasets import Case, Dataset
from madmax.validate.runner import RowResult, run_validation

GRID = (1e-6, 1e-3, 13)  # first, last and number of grid points of L, s
GOLDEN = (math.sqrt(5) - 1) / 2


def shape_key(case: Case) -> tuple[Any, ...]:
    """The model shape of a row: (hidden, layers, heads, KV heads, FFN width, vocabulary, sequence length)."""
    m = case.kwargs["model"]
    if not isinstance(m, dict):
        return (str(m), case.kwargs.get("seq_len"))
    return (m["hidden_size"], m["num_layers"], m["num_heads"], m.get("num_kv_heads") or m["num_heads"],
            m["ffn_hidden_size"], m["vocab_size"], case.kwargs.get("seq_len"))


def describe_shape(key: tuple[Any, ...]) -> str:
    if len(key) != 7:
        return " ".join(str(k) for k in key)
    h, layers, a, kv, f, v, s = key
    return f"h{h} L{layers} a{a} kv{kv} f{f} V{v} s{s}"


def _sortable(key: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    return tuple((0, x) if isinstance(x, int | float) else (1, str(x)) for x in key)


def split_by_shape(cases: Sequence[Case]) -> tuple[list[Case], list[Case]]:
    """(fitted, held out): shapes sorted, even positions fitted, odd ones held out (none with one shape)."""
    shapes = sorted({shape_key(c) for c in cases}, key=_sortable)
    held = set(shapes[1::2])
    return [c for c in cases if shape_key(c) not in held], [c for c in cases if shape_key(c) in held]


def with_launch(profile: ComputeProfile, launch_s: float) -> ComputeProfile:
    """`profile` with launch_s = L and the attention launch floor scaled by L / launch_s."""
    data = profile.model_dump()
    scale = launch_s / profile.launch_s if profile.launch_s else 1
    data["launch_s"] = launch_s
    data["attention"]["launch_s"] = profile.attention.launch_s * scale if profile.launch_s else launch_s
    return ComputeProfile.model_validate(data)


def with_call(profile: ComputeProfile, call_host_s: float) -> ComputeProfile:
    """`profile` with the host's time per step call set to `call_host_s`."""
    return profile.model_copy(update={"call_host_s": call_host_s})


def _simulate_with(profile: ComputeProfile, **kwargs: Any) -> Any:
    from madmax.api import simulate

    return simulate(**kwargs, calibration=profile)


def predict(cases: Sequence[Case], profile: ComputeProfile, jobs: int = 1) -> list[RowResult]:
    """Each case simulated with `profile` (rows that fail keep their error message)."""
    if not cases:
        return []
    dataset = Dataset("fit", "launch-floor fit", tuple(cases), ())
    return list(run_validation([dataset], partial(_simulate_with, profile), jobs=jobs).rows)


def fit_errors(train: Sequence[Case], held: Sequence[Case], profile: ComputeProfile,
               jobs: int = 1) -> dict[str, dict[str, Any]]:
    """`relative_errors` of `profile` on the fitted rows ("in_sample") and the held-out ones ("held_out")."""
    return {"in_sample": relative_errors(predict(train, profile, jobs)),
            "held_out": relative_errors(predict(held, profile, jobs))}


def log_ratios(results: Sequence[RowResult]) -> np.ndarray:
    """ln(predicted / measured) of the rows that ran."""
    return np.array([math.log(r.predicted / r.case.measured) for r in results
                     if r.predicted is not None and r.predicted > 0], dtype=float)


def relative_errors(results: Sequence[RowResult]) -> dict[str, Any]:
    """count, median and max of |predicted/measured - 1| (the `FitError` form)."""
    e = np.abs(np.exp(log_ratios(results)) - 1)
    if e.size == 0:
        return {"count": 0, "median": 0.0, "max": 0.0}
    return {"count": int(e.size), "median": float(np.median(e)), "max": float(e.max())}


def golden_search(f: Callable[[float], float], a: float, b: float, tol: float) -> float:
    """The minimizer of a unimodal f on [a, b] to within `tol` (golden-section search)."""
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


@dataclass(frozen=True)
class LaunchResult:
    """The fitted launch floor, the loss there, and the number of loss evaluations."""

    launch_s: float
    loss: float
    evaluations: int
    rows: int


def fit_launch_floor(cases: Sequence[Case], base: ComputeProfile, *, rtol: float = 1e-3,
                     jobs: int = 1) -> LaunchResult:
    """L* = argmin_L sum ln(y_i(L)/m_i)^2 over `cases`, every other parameter of `base` kept.

    Grid of `GRID` in ln L, then golden-section search between the best point's neighbours until the
    bracket is narrower than ln(1 + rtol).
    """
    value, loss, evaluations, rows = fit_log_parameter(cases, partial(with_launch, base), GRID, rtol=rtol, jobs=jobs)
    return LaunchResult(launch_s=value, loss=loss, evaluations=evaluations, rows=rows)


def fit_log_parameter(cases: Sequence[Case], profile_at: Callable[[float], ComputeProfile],
                      grid: tuple[float, float, int], *, rtol: float = 1e-3,
                      jobs: int = 1) -> tuple[float, float, int, int]:
    """x* = argmin_x sum ln(y_i(x)/m_i)^2 over `cases`, y_i(x) simulated with `profile_at(x)`: the loss on
    `grid` (first, last, points; log-spaced), then a golden-section search in ln x between the best point's
    neighbours until the bracket is narrower than ln(1 + rtol). Returns (x*, loss, evaluations, rows)."""
    memo: dict[float, tuple[float, int]] = {}

    def loss(log_x: float) -> float:
        if log_x not in memo:
            r = log_ratios(predict(cases, profile_at(math.exp(log_x)), jobs))
            memo[log_x] = (float(np.sum(r**2)) if r.size else math.inf, int(r.size))
        return memo[log_x][0]

    first, last, num = grid
    points = np.linspace(math.log(first), math.log(last), num)
    values = [loss(float(x)) for x in points]
    i = int(np.argmin(values))
    lo, hi = float(points[max(i - 1, 0)]), float(points[min(i + 1, num - 1)])
    best = golden_search(loss, lo, hi, math.log1p(rtol))
    if loss(best) > values[i]:
        best = float(points[i])
    return math.exp(best), loss(best), len(memo), memo[best][1]
