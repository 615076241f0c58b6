"""A search over a token budget ranks and reports its simulated strategies by the expected wall clock."""

from __future__ import annotations

import pytest

from madmax.errors import ConfigError
from madmax.search.api import find, to_frame

ARGS = ("llama-3-8b", "dgx-h100", 16, "pretrain", 64, 2048)


@pytest.fixture(scope="module")
def outcomes():
    kwargs = dict(objective="time", tokens=1e11, top=3, exact=4, refine=50)
    return find(*ARGS, **kwargs), find(*ARGS, **kwargs, reliability="ideal")


def test_the_expected_time_is_the_ideal_over_goodput_and_ranks_the_strategies(outcomes):
    real, ideal = outcomes
    best = real.top(3)
    values = [real.objective_value(i) for i in best]
    assert values == sorted(values)
    for i in best:
        t = real.exact[i].time_to_train
        ideal_s = 1e11 / (64 * 2048) * real.exact[i].iteration_time_s
        assert t["breakdown_s"]["ideal"] == pytest.approx(ideal_s)
        assert real.objective_value(i) == pytest.approx(t["wall_s"]) and t["wall_s"] > ideal_s
    # the ideal profile leaves the ideal time
    i = ideal.top(1)[0]
    assert ideal.objective_value(i) == pytest.approx(1e11 / (64 * 2048) * ideal.exact[i].iteration_time_s)
    frame = to_frame(real)
    assert frame["objective"].iloc[0] == pytest.approx(values[0])


def test_reliability_without_a_token_budget_is_refused():
    with pytest.raises(ConfigError, match="reliability applies to the time to train a token budget"):
        find(*ARGS, objective="time", reliability="ideal", top=1, exact=1, refine=10)
    with pytest.raises(ConfigError, match="reliability applies"):
        find(*ARGS, tokens=1e11, reliability="ideal", top=1, exact=1, refine=10)  # throughput: no time
