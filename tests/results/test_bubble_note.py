"""A result names the batch arithmetic behind a large pipeline bubble (issue 28: a larger cluster slower per GPU
because its batch leaves each replica fewer micro-batches said nothing)."""

from __future__ import annotations

import madmax
from madmax.config.strategy import Strategy
from madmax.results.training import bubble_note


def test_a_large_bubble_is_explained_by_the_micro_batches_per_replica():
    # Llama-3-70B on 64 H100, tp=8, pp=4 -> dp=2; global batch 16 -> 16 / (2 x 1) = 8 micro-batches per replica;
    # 1F1B idles (4-1)/(8+4-1) = 27% of a stage's steps.
    r = madmax.simulate("llama-3-70b", "dgx-h100", 64, global_batch=16, seq_len=4096, strategy="tp=8,pp=4,zero=1")
    note = next(a for a in r.assumptions if a.startswith("pipeline bubble"))
    assert "global_batch 16 / (dp=2 x mbs=1) leaves each replica 8 micro-batches through pp=4 stages" in note
    assert "= 27% of its steps" in note


def test_a_small_bubble_or_no_pipeline_says_nothing():
    s = Strategy(tp=8, pp=4, dp=2)
    assert bubble_note(s, 256, 128, bubble_s=0.09, iteration_s=1.0) == []  # under a tenth of the iteration
    assert bubble_note(Strategy(tp=8, dp=8), 64, 8, bubble_s=0.5, iteration_s=1.0) == []  # no pipeline
    # interleaved: p=4, v=2, m=4 -> 3 / (4*2 + 3) = 27%
    line, = bubble_note(Strategy(tp=8, pp=4, vp=2, dp=2), 8, 4, bubble_s=0.3, iteration_s=1.0)
    assert "pp=4 stages of vp=2 chunks each" in line and "= 27% of its steps" in line
