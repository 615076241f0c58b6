"""The fast estimates against `simulate`, and their parts against the definitions they vectorize.

Stated tolerances: the step replay and the closed-form memory reproduce `simulate` to a relative 1e-9
(they follow the same task graph and the same sums, in another order); the closed form that screens
the candidates is within 30 % on this sample (it ranks, it is not reported; near the top of a ranking
it is within about 1 %, see benchmarks/search_speed.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from madmax import api
from madmax.parallel.pipeline import inflight, peak_in_flight, schedule
from madmax.search import maxplus as mp
from madmax.search.api import find
from madmax.search.objective import Scorer, power_w, scorer

REPLAY_TOL, MEMORY_TOL, SCREEN_TOL = 1e-9, 1e-9, 0.30


@pytest.mark.parametrize("zero", [None, [1]])
def test_replay_and_memory_match_simulate_on_a_sample(outcome, case, zero, replay):
    # 20 candidates of every kind (1F1B and interleaved, ZeRO 0/2/3 and then ZeRO-1, hybrid shards,
    # recompute, cp, sp), each replayed on its own (the search replays only its pool).
    if zero is not None:
        outcome = find(**{**case, "zero": zero}, top=1, exact=1, refine=1)
    rng = np.random.default_rng(0)
    sample = rng.choice(outcome.evaluated, size=20, replace=False)
    cols = outcome.columns
    assert len(set(cols["vp"][sample].tolist())) > 1 and len(set(cols["shard"][sample].tolist())) > 1
    for i in sample:
        result = api.simulate(**outcome.ctx.simulate_kwargs, strategy=outcome.strategy(int(i)))
        assert replay(outcome, int(i)) == pytest.approx(result.iteration_time_s, rel=REPLAY_TOL)
        assert outcome.peak_memory_bytes[i] == pytest.approx(result.peak_memory_bytes, rel=MEMORY_TOL)
        assert outcome.estimate_s[i] == pytest.approx(result.iteration_time_s, rel=SCREEN_TOL)
        # MFU of the unsimulated rows: model FLOPs of the iteration / time / peak of all GPUs.
        peak = outcome.ctx.system.gpu.flops_per_s[outcome.ctx.dtype] * outcome.ctx.num_gpus
        assert outcome.model_flops[i] / result.iteration_time_s / peak == pytest.approx(result.mfu, rel=1e-12)


def test_replayed_candidates_match_simulate(outcome):
    # Every candidate the search replayed and simulated: the reported estimate is the simulated time.
    assert outcome.exact
    for i, result in outcome.exact.items():
        assert outcome.refined_s[i] == pytest.approx(result.iteration_time_s, rel=REPLAY_TOL)


@pytest.mark.parametrize(("pp", "vp", "m"), [(4, 1, 3), (4, 1, 9), (2, 3, 2), (3, 2, 6), (4, 3, 8), (4, 2, 40)])
def test_in_flight_peaks_match_the_schedule(pp, vp, m):
    # For random chunk weights, the best of the candidate peaks equals peak_in_flight over the program.
    rng = np.random.default_rng(pp * 100 + vp * 10 + m)
    for stage in range(pp):
        for _ in range(5):
            weights = rng.uniform(0.0, 1.0, vp)
            expected = peak_in_flight(schedule(stage, pp, vp, m), list(weights))
            assert (inflight(pp, vp, m)[stage] @ weights).max() == pytest.approx(expected, rel=1e-12)


def test_maxplus_chain_by_hand():
    # Two units of a ZeRO-3 backward, each: gather g=1 on the data stream, compute b=3, reduce-scatter r=2.
    # Unit map: c' = max(c + 3, d + 4), d' = max(c + 5, d + 6). From c = 10, d = 0:
    # unit 1: c = max(13, 4) = 13, d = max(15, 6) = 15; unit 2: c = max(16, 19) = 19, d = max(18, 21) = 21.
    u = mp.matrix(1, cc=3.0, cd=4.0, dc=5.0, dd=6.0)
    two = mp.power(u, 2)
    c = max(10 + two[0, 0, 0], 0 + two[0, 0, 1], two[0, 0, 2])
    d = max(10 + two[0, 1, 0], 0 + two[0, 1, 1], two[0, 1, 2])
    assert (c, d) == (19.0, 21.0)


def test_objectives_by_hand(outcome):
    system = outcome.ctx.system  # 8 GPUs of a dgx-h100 node (10.2 kW), no price
    # 8 x 1024 tokens per iteration; 2 s per iteration.
    s = scorer("throughput", system, 8192)
    assert s.value(2.0) == pytest.approx(8192 / 2 / 8)  # 512 tokens/s/GPU
    # 1e6 tokens take 1e6 / 8192 iterations of 2 s = 244.140625 s.
    assert scorer("time", system, 8192, 1e6).value(2.0) == pytest.approx(244.140625)
    # One node at 10.2 kW for 244.140625 s = 2,490,234.375 J.
    assert power_w(system) == 10200
    assert scorer("energy", system, 8192, 1e6).value(2.0) == pytest.approx(2490234.375)
    # A price of 12.29 USD per GPU-hour: 12.29 x 8 x 244.140625 / 3600 = 6.667...
    priced = Scorer(objective=s.objective.__class__("cost"), tokens_per_iteration=8192, tokens=1e6, num_gpus=8,
                    price_per_gpu_hour_usd=12.29, power_w=10200)
    assert priced.value(2.0) == pytest.approx(12.29 * 8 * 244.140625 / 3600)
    # Without node power, GPU board power: 700 W x 8.
    bare = system.model_copy(update={"node_power_w": None})
    assert power_w(bare) == 8 * system.gpu.tdp_w
