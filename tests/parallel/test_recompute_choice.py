"""Recompute chosen when the strategy leaves it unset, and partial full recompute (recompute_layers).

The model is GPT-3 style (Korthikanti et al. 2022, Table 2): per layer and micro-batch of s tokens
of width h (tp = 1, bf16) a layer keeps 34 s h bytes with flash attention, 34 s h + 5 a s^2 bytes
without it (a heads: 194 s h here, a s / h = 32), 34 s h with selective recompute, and 2 s h (its
input) with full recompute, which rebuilds 34 (or 194) s h during its backward. The head keeps
129 s h (its logits). One stage, one chunk of L = 8 layers, one micro-batch in flight.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.base import DType
from madmax.config.loaders import load_model
from madmax.config.strategy import Recompute, parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.errors import StrategyError
from madmax.parallel.memory import stage_memory
from madmax.parallel.plan import RECOMPUTED_SUFFIX, build_plan
from madmax.parallel.recompute import choose_recompute
from madmax.validate.inputs import gpt3_model
from madmax.workload import build_workload

LAYERS, HIDDEN, HEADS, FFN, VOCAB, SEQ = 8, 1024, 16, 4096, 32000, 2048
SH = SEQ * HIDDEN  # the unit of the counts above: one byte per token and hidden element
RESERVED = 0.0
SPEC = load_model(gpt3_model("tiny-gpt", LAYERS, HIDDEN, HEADS, FFN, VOCAB, SEQ))


def _workload(flash: bool):
    return build_workload(SPEC, Task(kind=TaskKind.PRETRAIN), flash=flash)


def _plan(text: str, flash: bool = True, pp: int = 1, vp: int = 1):
    s, gb = resolve_strategy(parse_strategy(f"tp=1,pp={pp},vp={vp},mbs=1,flash={int(flash)},{text}"),
                             num_gpus=pp, model_name=SPEC.name, constraints=SPEC.parallel_constraints(),
                             num_pipeline_units=SPEC.num_pipeline_units, global_batch=4 * pp, seq_len=SEQ)
    return build_plan(_workload(flash), s, domain_size=8, seq_len=SEQ, global_batch=gb, dtype=DType.BF16)


def _peak(plan) -> float:
    return max(stage_memory(plan, stage, RESERVED).total_bytes for stage in range(plan.num_stages))


def _choose(capacity: float, flash: bool = True):
    """The choice for the tiny model; the cost of a unit's passes is its recompute FLOPs (a stand-in for
    seconds: the ranking only needs what recompute adds)."""
    base = parse_strategy(f"tp=1,pp=1,mbs=1,flash={int(flash)}")
    return choose_recompute(
        base, build=lambda s: _plan(f"recompute={s.recompute}"
                                    + (f",recompute_layers={s.recompute_layers}" if s.recompute_layers else ""),
                                    flash=flash),
        memories=lambda p: [stage_memory(p, 0, RESERVED)], capacity=capacity,
        pass_s=lambda unit: sum(k.flops for k in unit.recompute))


def _static(flash: bool = True) -> float:
    """Weights, gradients and optimizer state: the peak without recompute less its activations."""
    per_layer = 34 if flash else 194
    return _peak(_plan("recompute=none", flash)) - (LAYERS * per_layer + 129) * SH


def test_saved_bytes_per_layer_follow_korthikanti():
    for flash, kept in ((True, 34), (False, 194)):
        units = _plan("recompute=none", flash).units
        assert units["layer"].saved_bytes == kept * SH
        assert units["head"].saved_bytes == 129 * SH
    full = _plan("recompute=full").units["layer"]
    assert (full.saved_bytes, full.working_bytes) == (2 * SH, 34 * SH)


def test_none_is_chosen_when_it_fits():
    capacity = _peak(_plan("recompute=none"))
    choice = _choose(capacity)
    assert choice.strategy.recompute is Recompute.NONE and choice.fits
    assert choice.reason.startswith("recompute chosen: none (every activation kept")


def test_selective_is_chosen_when_none_does_not_fit_and_selective_does():
    # Without flash: none keeps 8*194 + 129 = 1681 s h, selective 8*34 + 129 = 401 s h; full of all 8
    # layers 8*2 + 129 + 194 = 339 s h also fits but recomputes whole layers, selective only attention.
    capacity = _static(flash=False) + 401 * SH
    choice = _choose(capacity, flash=False)
    assert choice.strategy.recompute is Recompute.SELECTIVE and choice.fits
    assert choice.reason.startswith("recompute chosen: selective (none needs ")
    assert "full adds " in choice.reason  # the other candidate that fits, and what it would cost more


def test_full_of_the_first_n_layers_when_only_that_fits():
    # Flash: selective keeps what none keeps (34 s h per layer), so only full recompute helps. With the
    # first N of 8 layers recomputed: 2N + 34 (8 - N) + 129 kept, plus one layer (34) rebuilt in its
    # backward: 435 - 32 N s h. A budget of 339 s h: N >= 3 (N = 2: 371, N = 3: 339).
    capacity = _static() + 339 * SH
    choice = _choose(capacity)
    assert (choice.strategy.recompute, choice.strategy.recompute_layers) == (Recompute.FULL, 3)
    assert choice.fits
    assert _peak(choice.plan) == pytest.approx(_static() + 339 * SH)
    assert "full of the first 2 layers per chunk needs" in choice.reason
    assert choice.strategy.describe().endswith("recompute=full,recompute_layers=3,sp=0")


def test_each_candidate_is_planned_once():
    # The case above: none, selective, full, then the bisection over 1..8 (4, 2, 3); the reason names
    # N = 2 and the choice is N = 3, both already planned.
    built = []
    base = parse_strategy("tp=1,pp=1,mbs=1,flash=1")

    def build(s):
        built.append((s.recompute, s.recompute_layers))
        return _plan(f"recompute={s.recompute}" + (f",recompute_layers={s.recompute_layers}"
                                                   if s.recompute_layers else ""))

    choice = choose_recompute(base, build=build, memories=lambda p: [stage_memory(p, 0, RESERVED)],
                              capacity=_static() + 339 * SH, pass_s=lambda unit: sum(k.flops for k in unit.recompute))
    assert choice.strategy.recompute_layers == 3
    assert sorted(built, key=str) == sorted({*built}, key=str)
    assert len(built) == 6


def test_full_of_every_layer_is_plain_full():
    # 8 of 8 layers: 16 + 129 + 34 = 179 s h
    choice = _choose(_static() + 179 * SH)
    assert (choice.strategy.recompute, choice.strategy.recompute_layers) == (Recompute.FULL, None)


def test_nothing_fits_takes_the_least_memory_and_says_so():
    choice = _choose(_static())
    assert choice.strategy.recompute is Recompute.FULL and not choice.fits
    assert "the least memory, but nothing fits (full needs" in choice.reason


def test_partial_recompute_flops_are_n_over_l_of_full():
    # Full recompute redoes each layer's forward: 24 s h^2 (GEMMs, b = 1) + 2 s^2 h (causal attention
    # scores and values), plus elementwise work; the first 3 of 8 layers redo 3/8 of it.
    def recompute_flops(plan):
        return sum(sum(k.flops for k in plan.units[key].recompute) for chunk in plan.stages[0] for key in chunk)

    full = recompute_flops(_plan("recompute=full"))
    assert full == pytest.approx(LAYERS * (24 * SEQ * HIDDEN**2 + 2 * SEQ**2 * HIDDEN), rel=2e-3)
    partial = _plan("recompute=full,recompute_layers=3")
    assert recompute_flops(partial) == pytest.approx(full * 3 / 8, rel=1e-12)
    chunk = partial.stages[0][0]
    assert [k.endswith(RECOMPUTED_SUFFIX) for k in chunk if k.startswith("layer")] == [True] * 3 + [False] * 5


def test_recompute_layers_counts_per_chunk():
    # pp=2, vp=2: four chunks of 2 layers; the first layer of each recomputes.
    plan = _plan("recompute=full,recompute_layers=1", pp=2, vp=2)
    for chunks in plan.stages:
        for chunk in chunks:
            layers = [k for k in chunk if k.startswith("layer")]
            assert layers == ["layer" + RECOMPUTED_SUFFIX, "layer"]


@pytest.mark.parametrize(("text", "words"), [
    ("recompute=selective,recompute_layers=2", ["recompute_layers=2 needs recompute=full", "allowed"]),
    ("recompute_layers=2", ["needs recompute=full", "not recompute=auto"]),
    ("recompute=full,recompute_layers=9", ["exceeds the 8 layers", "allowed: 1 to 8"]),
    ("recompute=full,recompute_layers=0", ["strategy.recompute_layers='0'", "greater than 0"]),
    ("recompute=sometimes", ["strategy.recompute='sometimes'", "allowed: none, selective, full, auto"]),
])
def test_bad_recompute_is_one_sentence(text: str, words: list[str]):
    with pytest.raises(StrategyError) as err:
        _plan(text)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


def test_auto_is_the_same_as_unset():
    assert parse_strategy("recompute=auto").recompute is None
    assert "recompute=auto" in parse_strategy("tp=2").describe()


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(-2, 12), pp=st.sampled_from([1, 2, 4]), vp=st.sampled_from([1, 2]),
       mode=st.sampled_from(["none", "selective", "full", "auto"]))
def test_any_recompute_layers_is_a_plan_or_a_strategy_error(layers: int, pp: int, vp: int, mode: str):
    if vp > 1 and pp == 1:
        return
    try:
        plan = _plan(f"recompute={mode},recompute_layers={layers}", pp=pp, vp=vp)
    except StrategyError as exc:
        assert "\n" not in str(exc)
        return
    assert mode == "full" and 1 <= layers <= math.ceil(LAYERS / (pp * vp))
    for chunks in plan.stages:
        for chunk in chunks:
            count = sum(k.startswith("layer") for k in chunk)
            assert sum(k.endswith(RECOMPUTED_SUFFIX) for k in chunk) == min(layers, count)


# --- through the API and the CLI: Llama-3-70B on 64 H100 (80 layers, 20 per stage with pp=4) ----------

LLAMA = {"model": "llama-3-70b", "system": "dgx-h100", "num_gpus": 64, "global_batch": 128}


def test_explicit_recompute_is_honoured_even_when_it_does_not_fit():
    result = api.simulate(**LLAMA, strategy="tp=2,pp=2,mbs=2,recompute=none")
    assert not result.fits and "recompute=none," in result.strategy
    assert result.fits_reason.startswith("stage 0 needs ")
    assert result.recompute_choice is None
    assert not any(a.startswith("recompute chosen") for a in result.assumptions)


def test_result_and_cli_name_the_choice():
    result = api.simulate(**LLAMA, strategy="tp=8,pp=4,mbs=4")
    assert result.fits and result.recompute_choice in result.assumptions
    assert result.to_dict()["recompute_choice"] == result.recompute_choice
    n = int(result.strategy.split("recompute_layers=")[1].split(",")[0])
    assert 1 < n < 20 and ",recompute=full," in result.strategy
    assert result.recompute_choice.startswith(f"recompute chosen: full of the first {n} layers per chunk (none needs ")
    out = CliRunner().invoke(app, ["simulate", "-m", "llama-3-70b", "-s", "dgx-h100", "--num-gpus", "64",
                                   "--global-batch", "128", "--strategy", "tp=8,pp=4,mbs=4"])
    assert out.exit_code == 0, out.output
    assert f"recompute chosen: full of the first {n} layers per chunk (none needs" in out.output
