"""The bounded search (`search.bound`) against the exhaustive one: same pool, floors below every option."""

from __future__ import annotations

import numpy as np
import pytest

from madmax.config.strategy import Recompute
from madmax.search import api as search_api
from madmax.search import bound
from madmax.search.api import find
from madmax.search.core import _Layouts
from madmax.search.space import ROW_COLUMNS, Limits, enumerate_rows


def _bounded(monkeypatch, case: dict, batch: int, **options):
    """`find` forced onto the bounded path, `batch` candidates at a time."""
    monkeypatch.setattr(search_api, "EXHAUSTIVE", 0)
    monkeypatch.setattr(bound, "BATCH", batch)
    return find(**case, **options)


def _replayed(outcome) -> set[str]:
    return {outcome.strategy(int(i)) for i in np.flatnonzero(~np.isnan(outcome.refined_s))}


@pytest.mark.parametrize("which", ["case", "moe_case"])
def test_bounded_search_replays_and_simulates_what_the_exhaustive_one_does(monkeypatch, request, which):
    # 50 candidates per batch, a pool of 30: most rows are never evaluated, yet the pool (and so the
    # replayed, simulated and reported candidates) is the exhaustive search's.
    case = request.getfixturevalue(which)
    whole = find(**case, top=3, exact=5, refine=30)
    part = _bounded(monkeypatch, case, 50, top=3, exact=5, refine=30)
    assert part.rejected["time_bound"] > 0 and part.evaluated < whole.evaluated
    assert part.enumerated == whole.enumerated and part.valid == whole.valid
    assert part.enumerated == sum(part.rejected.values()) + part.evaluated
    assert _replayed(part) == _replayed(whole)
    # The same best times (candidates of equal time may come in another order: the MoE case has ties).
    assert [part.exact[i].iteration_time_s for i in part.top(3)] == pytest.approx(
        [whole.exact[i].iteration_time_s for i in whole.top(3)], rel=1e-12)
    by_strategy = {whole.strategy(i): whole.estimate_s[i] for i in range(whole.evaluated)}
    assert all(part.estimate_s[i] == by_strategy[part.strategy(i)] for i in range(part.evaluated))


@pytest.mark.parametrize("which", ["case", "moe_case"])
def test_floors_are_below_every_option_of_their_row(request, which):
    # Each row's memory floor is at most the peak memory of each of its candidates, and its time floor
    # at most the closed form of each that fits (the exhaustive search has them all).
    case = request.getfixturevalue(which)
    whole = find(**case, top=1, exact=1, refine=1)
    ctx, problem = whole.ctx, whole.ctx.problem()
    limits = Limits(zero=tuple(case["zero"]), recompute=tuple(Recompute(r) for r in case["recompute"]))
    rows = enumerate_rows(problem, limits)
    layouts = _Layouts(ctx, bound._keys(ctx, rows.columns))
    floor, opt = bound._floors(ctx, problem, limits, rows.columns, layouts)
    lower = bound._time_floor(ctx, problem, limits, rows.columns, opt, layouts)
    index = {tuple(int(rows.columns[c][r]) for c in ROW_COLUMNS): r for r in range(len(rows))}
    cols = whole.columns
    for i in range(whole.evaluated):
        r = index[tuple(int(cols[c][i]) for c in ROW_COLUMNS)]
        assert floor[r] <= whole.peak_memory_bytes[i] * (1 + 1e-12)
        assert lower[r] <= whole.estimate_s[i] * (1 + 1e-12)
    # Rows the memory floor rejects hold no candidate that fits.
    fitting = {tuple(int(cols[c][i]) for c in ROW_COLUMNS) for i in range(whole.evaluated)}
    assert all(floor[index[key]] <= ctx.capacity_bytes for key in fitting)
    assert (floor > ctx.capacity_bytes).any()
