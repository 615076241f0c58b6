"""The Pareto frontier on tables drawn by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from madmax.errors import ConfigError
from madmax.sweep import pareto
from madmax.sweep.pareto import frontier_mask

# name: (time, cost, energy)
#   a (1, 9, 5)  fastest                               -> frontier
#   b (2, 4, 5)  cheaper than a, slower                -> frontier
#   c (3, 4, 6)  b is faster, as cheap, less energy    -> dominated by b
#   d (4, 1, 9)  cheapest                              -> frontier
#   e (5, 5, 1)  least energy                          -> frontier
#   f (6, 6, 6)  dominated by b (2, 4, 5)              -> dominated
#   g (2, 4, 5)  equal to b: neither dominates         -> frontier
#   h (0.5, 1, 1) would dominate all, but does not fit -> dropped
#   i (1, nan, 1) no price                             -> dropped
TABLE = pd.DataFrame({
    "name": list("abcdefghi"),
    "time_to_train_s": [1, 2, 3, 4, 5, 6, 2, 0.5, 1],
    "cost_usd": [9, 4, 4, 1, 5, 6, 4, 1, math.nan],
    "energy_j": [5, 5, 6, 9, 1, 6, 5, 1, 1],
    "tokens_per_s_per_gpu": [9, 5, 4, 3, 2, 1, 5, 10, 9],
    "status": ["ok"] * 9,
    "fits": [True] * 7 + [False, True],
})


def test_three_objectives():
    front = pareto(TABLE, ["time_to_train_s", "cost_usd", "energy_j"])
    assert list(front["name"]) == ["a", "b", "g", "d", "e"]  # sorted by time; b and g tie
    assert list(front.index) == [0, 1, 6, 3, 4]


def test_two_objectives_and_maximize():
    # time vs cost: a (1, 9), b/g (2, 4), d (4, 1); e (5, 5) is beaten by b
    assert list(pareto(TABLE, ["time_to_train_s", "cost_usd"])["name"]) == ["a", "b", "g", "d"]
    # maximize throughput, minimize cost: a (9, 9), b/g (5, 4), d (3, 1) -- same set, sorted by cost
    assert sorted(pareto(TABLE, ["cost_usd"], maximize=["tokens_per_s_per_gpu"])["name"]) == ["a", "b", "d", "g"]


def test_infeasible_rows_are_kept_when_asked():
    # h does not fit and i has no cost; with feasible=False, h dominates everything with a cost
    assert list(pareto(TABLE.drop(index=8), ["time_to_train_s", "cost_usd"], feasible=False)["name"]) == ["h"]


def test_frontier_mask_by_hand():
    # (1,3) (2,2) (3,1) form a staircase; (2,3) is beaten by (2,2), (3,3) by all
    values = np.array([[3, 3], [1, 3], [2, 2], [2, 3], [3, 1]])
    assert frontier_mask(values).tolist() == [False, True, True, False, True]
    assert frontier_mask(np.zeros((0, 2))).tolist() == []


def test_unknown_objective_is_a_config_error():
    with pytest.raises(ConfigError, match="objective 'speed' is not a column"):
        pareto(TABLE, ["speed"])


def test_a_text_column_or_one_named_twice_is_a_config_error():
    """(the web answered both with a 500, issue 28)"""
    text = next(c for c in TABLE.columns if TABLE[c].dtype.kind == "O")
    with pytest.raises(ConfigError, match=rf"objective '{text}' is not a numeric column; allowed: "):
        pareto(TABLE, [text, "cost_usd"] if "cost_usd" in TABLE.columns else [text])
    numeric = next(c for c in TABLE.columns if TABLE[c].dtype.kind == "f")
    with pytest.raises(ConfigError, match=rf"objective '{numeric}' is named twice"):
        pareto(TABLE, [numeric, numeric])
