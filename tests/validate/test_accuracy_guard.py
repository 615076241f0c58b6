"""A regression guard on the dev rows that simulate in seconds: each dataset's error stays within a bound a little
above today's figure (docs/validation.md), so a change that loses accuracy fails here, not months later in an
independent check (issue 28). It bounds errors, never time."""

from __future__ import annotations

import pytest

from madmax.validate import run_validation

# dataset -> (statistic, bound %, today's figure %): the bound leaves room for a small, deliberate change
GUARDS = {
    "korthikanti2022": [("mean_abs_pct", 5.0, 4.2)],  # issue 11's target
    "narayanan2021": [("median_abs_pct", 8.0, 6.2), ("p90_abs_pct", 18.0, 15.1)],
    "nemo": [("median_abs_pct", 16.0, 13.7), ("p90_abs_pct", 27.0, 23.9)],
    "mlperf_dlrm": [("max_abs_pct", 10.0, 7.1)],
}


@pytest.fixture(scope="module")
def report():
    return run_validation(list(GUARDS), jobs=2)


@pytest.mark.parametrize("dataset", sorted(GUARDS))
def test_dev_rows_stay_within_their_guard(report, dataset):
    summary = report.dataset(dataset)
    assert summary.run == summary.mapped and summary.crashed == 0 and summary.not_fitting == 0
    for statistic, bound, _ in GUARDS[dataset]:
        value = getattr(summary.stats, statistic)
        assert value <= bound, f"{dataset} {statistic} {value:.2f}% is past its guard {bound}%"
