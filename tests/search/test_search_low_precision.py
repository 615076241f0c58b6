"""Searches in the low-precision training formats (fp8 on Hopper, mxfp8 and nvfp4 on Blackwell) against `simulate`.

The search's closed forms take the bytes of weights and activations, the cached low-precision weight
copies and the per-micro-batch share of the weight cast from the same definitions as the plan
(`parallel.formats.tensor_bytes`, `UnitPlan.cast_cache_bytes`, the plan of each micro-batch count), so the
step replay and the closed-form memory reproduce `simulate` to a relative 1e-9, as in bf16
(test_search_estimates.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from madmax import api
from madmax.config.base import DType
from madmax.errors import MadmaxError
from madmax.parallel.formats import tensor_bytes
from madmax.search.api import find
from madmax.search.context import prepare
from madmax.search.space import RECOMPUTES
from madmax.search.units import _plan, cast_microbatches, memory_table

from .conftest import CASE, MOE_CASE, TINY, cut_node, small_node

TOL = 1e-9
# GEMM weights of one TINY layer: qkv 512 x (512 + 2 x 256) + out 512 x 512 + up, gate, down 512 x 1536 each.
LAYER_GEMM_PARAMS = 524_288 + 262_144 + 3 * 786_432  # 3,145,728


def small_b200() -> dict:
    """The catalog dgx-b200 with 4 GiB per GPU (some candidates do not fit), as conftest cuts the H100."""
    return cut_node("dgx-b200", "b200", "4 GiB", "small-b200")


# NVFP4 keeps the first 2 and last 8 layers in bf16 (formats.yaml), so the Blackwell cases have 12 layers:
# layers 3 and 4 run in the low-precision format.
TWELVE = {**TINY, "name": "tiny-12", "num_layers": 12}
CASES = {
    "fp8-h100": {**CASE, "dtype": "fp8"},
    # fp8 primary weights: no bf16 copy, fp8 parameter gathers (zero 1 and 2 with a sharding group gather)
    "fp8-params-h100": {**CASE, "dtype": "fp8", "zero": [0, 1, 2], "fp8_params": True},
    "mxfp8-b200": {**CASE, "model": TWELVE, "system": small_b200(), "dtype": "mxfp8", "recompute": ["none", "full"],
                   "zero": [0, 3]},
    "fp4-b200": {**CASE, "model": TWELVE, "system": small_b200(), "dtype": "fp4", "recompute": ["none", "full"],
                 "zero": [0, 3]},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def searched(request):
    case = CASES[request.param]
    return case, find(**case, top=3, exact=3, refine=20)


def _check(outcome, i: int, replay) -> None:
    result = api.simulate(**outcome.ctx.simulate_kwargs, strategy=outcome.strategy(i))
    assert replay(outcome, i) == pytest.approx(result.iteration_time_s, rel=TOL)
    assert outcome.peak_memory_bytes[i] == pytest.approx(result.peak_memory_bytes, rel=TOL)


def test_best_candidate_matches_simulate(searched, replay):
    _, outcome = searched
    best = int(outcome.ranked[0])
    result = api.simulate(**outcome.ctx.simulate_kwargs, strategy=outcome.strategy(best))
    assert result.fits
    assert outcome.refined_s[best] == pytest.approx(result.iteration_time_s, rel=TOL)
    _check(outcome, best, replay)


def test_every_micro_batch_count_and_recompute_matches_simulate(searched, replay):
    # The weight cast is spread over the candidate's own m micro-batches (dp sets m here: 8 sequences of
    # mbs 1 over dp = 1, 2, 4, 8), and a full recompute reuses the cached copies instead of casting again.
    _, outcome = searched
    cols = outcome.columns
    seen = {}
    for i in range(outcome.evaluated):
        seen.setdefault((int(cols["m"][i]), int(cols["rec"][i]), int(cols["zero"][i] >= 3)), i)
    assert {m for m, _, _ in seen} >= {1, 2, 4, 8} and {r for _, r, _ in seen} == {0, RECOMPUTES.index("full")}
    for i in seen.values():
        _check(outcome, i, replay)


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8", "fp4"])
def test_low_precision_formats_keep_bf16_tensors(dtype):
    # Weights, gradients and activations stay bf16 (2 bytes); only the GEMM operands are cast.
    assert tensor_bytes(DType(dtype)) == 2.0
    system = small_node() if dtype == "fp8" else small_b200()
    ctx = prepare(TINY, system, 8, "pretrain", 8, 1024, dtype)
    plan = _plan(ctx, {"tp": 2})
    assert plan.act_bytes == plan.data.weight_bytes == 2.0


def test_other_dtypes_keep_their_own_width():
    assert (tensor_bytes(DType.BF16), tensor_bytes(DType.FP16), tensor_bytes(DType.FP32)) == (2.0, 2.0, 4.0)


@pytest.mark.parametrize(("name", "tp", "layer_bytes"), [
    # fp8: 2 copies of 1 byte per weight, plus 5 GEMMs' amax histories: 1024 fp32 x (3 forward + 2 backward).
    ("fp8-h100", 1, 2 * LAYER_GEMM_PARAMS + 5 * 1024 * 4 * 5),  # 6,393,856
    ("fp8-h100", 2, 2 * LAYER_GEMM_PARAMS / 2 + 5 * 1024 * 4 * 5),  # 3,248,128
    # mxfp8: 2 copies of 1 + 1/32 bytes (an E8M0 scale per 32); no histories.
    ("mxfp8-b200", 1, 2 * (1 + 1 / 32) * LAYER_GEMM_PARAMS),  # 6,488,064
    # nvfp4: 2 copies of 0.5 + 1/16 bytes (an E4M3 scale per 16).
    ("fp4-b200", 1, 2 * (0.5 + 1 / 16) * LAYER_GEMM_PARAMS),  # 3,538,944
])
def test_cached_weight_copies_by_hand(name, tp, layer_bytes):
    case = CASES[name]
    ctx = prepare(case["model"], case["system"], 8, "pretrain", 8, 1024, case["dtype"])
    table = memory_table(ctx, np.array([[tp, int(tp > 1), 0, 1, 1]]))
    cache = dict(zip(table.keys, table.cast_cache[0], strict=True))
    assert cache["layer"] == pytest.approx(layer_bytes, rel=1e-12)
    assert cache["head"] == 0.0  # the LM head runs in bf16
    # the layers the recipe keeps in bf16 (nvfp4's first 2 and last 8) cache nothing
    assert all(v == 0.0 for k, v in cache.items() if k.startswith("layer") and k != "layer")


def test_cast_share_follows_each_candidates_micro_batches():
    m = np.array([1, 2, 8])
    fp8 = prepare(TINY, small_node(), 8, "pretrain", 8, 1024, "fp8")
    bf16 = prepare(TINY, small_node(), 8, "pretrain", 8, 1024, "bf16")
    assert cast_microbatches(fp8, m).tolist() == [1, 2, 8]
    assert cast_microbatches(bf16, m).tolist() == [0, 0, 0]  # no cast: one plan serves every m


def test_fp8_params_candidates_say_so_and_hold_less():
    # Every candidate carries the key (simulate reproduces it from the string), and its layers keep no bf16
    # copy of the GEMM weights: 2 fp8 copies less the 2-byte weight, P (2 x 1 - 2) + the amax histories.
    case = {**CASE, "dtype": "fp8", "zero": [1]}
    plain, primary = find(**case, top=1, exact=1, refine=5), find(**case, fp8_params=True, top=1, exact=1, refine=5)
    assert all("fp8_params=1" in primary.strategy(i) for i in range(primary.evaluated))
    assert not any("fp8_params" in plain.strategy(i) for i in range(plain.evaluated))
    ctx = prepare(TINY, small_node(), 8, "pretrain", 8, 1024, "fp8")
    kept = memory_table(ctx, np.array([[1, 0, 0, 1, 1]])).cast_cache[0]
    fp8_only = memory_table(replace(ctx, fp8_params=True, plans={}), np.array([[1, 0, 0, 1, 1]])).cast_cache[0]
    layer = list(memory_table(ctx, np.array([[1, 0, 0, 1, 1]])).keys).index("layer")
    assert kept[layer] - fp8_only[layer] == pytest.approx(2 * LAYER_GEMM_PARAMS, rel=1e-12)


@pytest.mark.parametrize(("change", "message"), [
    ({"dtype": "bf16"}, "fp8_params keeps the GEMM weights in fp8 and needs dtype=fp8; got dtype=bf16"),
    ({"dtype": "fp8", "zero": [1, 3]}, r"zero=\[1, 3\] with fp8_params: .* allowed: zero 0, 1, 2"),
])
def test_fp8_params_search_refuses_what_it_cannot_model(change, message):
    with pytest.raises(MadmaxError, match=message):
        find(**{**CASE, **change}, fp8_params=True)


def test_fp8_params_expert_gathers_match_simulate(replay):
    # The routed experts' parameter gathers move fp8 too (their own discount): candidates with ep > 1 and a
    # ZeRO-1/2 sharding group replay and hold what simulate says.
    outcome = find(**{**MOE_CASE, "dtype": "fp8", "zero": [1, 2]}, fp8_params=True, top=1, exact=1, refine=20)
    cols = outcome.columns
    picked = [i for i in range(outcome.evaluated) if cols["ep"][i] > 1 and cols["shard"][i] != 1][:4]
    assert picked
    for i in picked:
        _check(outcome, i, replay)
