"""What a strategy that leaves keys unset becomes (issue 28): the experts spread over a stage's ranks, and the
lowest ZeRO stage that fits, each said in the result's assumptions."""

from __future__ import annotations

import pytest

import madmax
from madmax.config.strategy import Strategy, default_expert_parallel


@pytest.mark.parametrize(("strategy", "num_gpus", "experts", "expected"), [
    # tp=2, pp=2 on 64 GPUs: a stage has 64 / 2 = 32 tp*cp*dp ranks; 256 experts -> ep = 32
    (Strategy(tp=2, pp=2), 64, 256, 32),
    # etp=2 halves the ranks left to ep: 32 / 2 = 16
    (Strategy(tp=2, pp=2, etp=2), 64, 256, 16),
    # Mixtral's 8 experts on 16 ranks: ep stops at the experts, 8
    (Strategy(), 16, 8, 8),
    # 6 experts on 8 ranks: the largest common divisor of 6 and 8 is 2
    (Strategy(), 8, 6, 2),
    # tp*pp = 6 does not divide 16 GPUs: left at 1, resolve_strategy says why
    (Strategy(tp=2, pp=3), 16, 8, 1),
])
def test_unset_ep_spreads_the_experts_over_a_stages_ranks(strategy, num_gpus, experts, expected):
    assert default_expert_parallel(strategy, num_gpus, experts) == expected


def test_deepseek_v3_with_no_strategy_gets_a_plan_that_fits():
    """Before: dp=256, ep=1, zero=1 needed 2,587 GiB per GPU (every expert on every GPU)."""
    r = madmax.simulate("deepseek-v3", "dgx-h100", 256)
    s = r.to_dict()["strategy"]
    # 256 routed experts over the 256 ranks of the one stage: one per GPU
    assert "ep=256" in s and "zero=3" in s
    assert r.fits
    notes = " ".join(r.assumptions)
    assert "ep not given: 256" in notes
    # zero=1 and zero=2 are named with what they need (118 and 86 GiB of 79 GiB)
    assert "zero not given: 3, the lowest ZeRO stage that fits (zero=1 needs" in notes


def test_a_given_ep_and_zero_are_kept_even_when_they_do_not_fit():
    r = madmax.simulate("qwen3-30b-a3b", "dgx-h100", 8, strategy="ep=1,zero=0,recompute=none")
    assert "ep=1," in r.to_dict()["strategy"] and "zero=0" in r.to_dict()["strategy"]
    assert not r.fits
    assert not any("not given" in a and ("ep" in a or "zero" in a) for a in r.assumptions)


def test_a_dense_model_that_fits_at_zero_1_keeps_it_silently():
    r = madmax.simulate("llama-3-8b", "dgx-h100", 8, global_batch=8, seq_len=2048, strategy="recompute=selective")
    assert "zero=1" in r.to_dict()["strategy"] and r.fits
    assert not any(a.startswith("zero not given") for a in r.assumptions)


def test_a_dense_model_too_large_for_zero_1_gets_the_lowest_stage_that_fits():
    # Llama-3.1-70B on 16 H100 with dp=16: zero=1 keeps 2 bytes of weights and 2 of gradients per parameter
    # (70.6e9 * 4 = 282 GB > 80 GB); zero=2 shards the gradients (141 GB + 70.6e9 * 2 / 16 > 80 GB); zero=3 fits.
    r = madmax.simulate("llama-3.1-70b", "dgx-h100", 16, global_batch=16, seq_len=4096,
                        strategy="recompute=full")
    assert "zero=3" in r.to_dict()["strategy"] and r.fits
    note = next(a for a in r.assumptions if a.startswith("zero not given"))
    assert "zero=1 needs" in note and "zero=2 needs" in note and "zero=3 needs" in note
