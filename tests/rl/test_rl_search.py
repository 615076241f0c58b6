"""The RL layout search (madmax.rl.search): which layouts it tries, that each is the step simulate_rl predicts, the
settings a setup states held, and bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import madmax
from madmax.cli import app
from madmax.config.rl import RLLayout, RLSetup, load_rl
from madmax.errors import ConfigError
from madmax.rl import simulate_rl, split_pools
from madmax.rl.search import candidates, find_rl

# Llama-3.2-1B GRPO on one DGX H100: 16 prompts x 8 samples of 128 + 256 tokens (small, so every layout is quick)
BASE = {"prompt_len": 128, "response_len": 256}
RL = "prompts=16,samples=8"


@pytest.fixture(scope="module")
def found():
    return find_rl("llama-3.2-1b", "dgx-h100", 8, RL, **BASE)


def _count(setup: str, n: int, node: int = 8) -> int:
    s = load_rl(setup)
    return len(candidates(s, n, node, set(s.model_fields_set)))


def test_the_layouts_tried_are_counted_by_hand():
    # colocated: rollout tp 1, 2, 4, 8 (4). One node, disaggregated: rollout pools of 1..7 GPUs with every power of
    # two dividing them (1; 1,2; 1; 1,2,4; 1; 1,2; 1 = 11), each synchronous and asynchronous (22): 26.
    assert _count(RL, 8) == 4 + 22
    # two nodes: one whole-node split, 4 tps, 2 steps: 8 + 4
    assert _count(RL, 16) == 12
    # sixteen nodes: the rollout pool at each eighth (2, 4, ..., 14 nodes): 7 x 4 x 2 + 4
    assert _count(RL, 128) == 60
    # stated settings hold their axis
    assert _count(RL + ",layout=colocated", 8) == 4
    assert _count(RL + ",layout=colocated,rollout_tp=2", 8) == 1
    assert _count(RL + ",layout=disaggregated,rollout_gpus=4", 8) == 3 * 2
    assert _count(RL + ",layout=disaggregated,rollout_gpus=4,asynchronous=false", 8) == 3


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(1, 64), node=st.sampled_from([1, 2, 4, 8, 16]), within=st.integers(1, 16))
def test_every_layout_tried_is_a_valid_split(nodes, node, within):
    n = nodes * node if nodes > 1 else min(within, node)
    setup = load_rl(RL)
    for c in candidates(setup, n, node, set()):
        rollout, train = split_pools(c.setup(setup), n, node)  # raises for a split simulate_rl would refuse
        assert rollout % c.rollout_tp == 0 and c.rollout_tp <= node
        assert (rollout, train) == ((n, n) if c.layout is RLLayout.COLOCATED else (c.rollout_gpus, n - c.rollout_gpus))


def test_each_layout_is_the_step_simulate_rl_predicts(found):
    assert len(found.ranked) == 26 and not found.refused
    times = [r.step_time_s for _, r in found.ranked]
    assert times == sorted(times)
    c, best = found.best
    train = found.num_gpus if c.layout is RLLayout.COLOCATED else found.num_gpus - c.rollout_gpus
    again = simulate_rl("llama-3.2-1b", "dgx-h100", 8, c.setup(load_rl(RL)), strategy=found.train_strategies[train],
                        **BASE)
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)


def test_an_asynchronous_step_is_never_slower_than_its_synchronous_twin(found):
    steps = {(c.rollout_gpus, c.rollout_tp, c.asynchronous): r for c, r in found.ranked
             if c.layout is RLLayout.DISAGGREGATED}
    for (pool, tp, asynchronous), r in steps.items():
        if asynchronous:
            sync = steps[(pool, tp, False)]
            assert r.step_time_s <= sync.step_time_s
            # overlapped, the step is the longer side plus the sync; in turn, their sum
            p = r.phases_s
            assert r.step_time_s == pytest.approx(max(p["generation"], p["scoring"] + p["training"])
                                                  + p["weight_sync"], rel=1e-12)


def test_the_frame_and_the_api_agree(found):
    df = madmax.search_rl("llama-3.2-1b", "dgx-h100", 8, RL + ",layout=colocated", **BASE)
    assert list(df["candidate"]) == sorted(df["candidate"], key=lambda c: df.set_index("candidate").loc[c,
                                                                                                       "step_time_s"])
    assert df.attrs["candidates"] == 4 and set(df["layout"]) == {"colocated"}
    colocated = {c.rollout_tp: r.step_time_s for c, r in found.ranked if c.layout is RLLayout.COLOCATED}
    for tp, t in zip(df["rollout_tp"], df["step_time_s"], strict=True):
        assert t == pytest.approx(colocated[tp], rel=1e-12)


def test_a_stated_layout_that_cannot_run_is_its_one_sentence():
    with pytest.raises(ConfigError, match=r"rl\.rollout_gpus=8 leaves no GPU to train of the 8"):
        find_rl("llama-3.2-1b", "dgx-h100", 8, RL + ",layout=disaggregated,rollout_gpus=8", **BASE)
    with pytest.raises(ConfigError, match=r"rl\.rollout_tp=3 does not divide"):
        find_rl("llama-3.2-1b", "dgx-h100", 8, RL + ",layout=disaggregated,rollout_gpus=4,rollout_tp=3", **BASE)


ARGV = ["search", "-m", "llama-3.2-1b", "-s", "dgx-h100", "--num-gpus", "8", "--task", "rl", "--prompt-len", "128",
        "--output-len", "256", "--no-progress"]


def test_cli_prints_the_layouts_and_json():
    out = CliRunner().invoke(app, [*ARGV, "--rl", RL + ",layout=colocated", "--top", "2"])
    assert out.exit_code == 0, out.output
    assert "4 layouts, 4 simulated, 0 refused" in out.output and "Top 2 by step time" in out.output
    data = json.loads(CliRunner().invoke(app, [*ARGV, "--rl", RL + ",layout=colocated", "--json", "--top",
                                               "2"]).output)
    assert data["task"] == "rl" and data["candidates"] == 4 and len(data["results"]) == 2
    assert data["results"][0]["step_time_s"] <= data["results"][1]["step_time_s"]


@pytest.mark.parametrize("extra, names", [
    (["--rl", RL, "--global-batch", "8"], "global_batch does not apply to an RL layout search"),
    (["--rl", RL, "--max-tp", "2"], "max_tp does not apply to an RL layout search"),
    (["--rl", RL, "--objective", "cost"], "objective does not apply to an RL layout search"),
    ([], "rl is required for task=rl"),
    (["--rl", "prompts=8,layout=disaggregated,rollout_gpus=9"], "rl.rollout_gpus=9 leaves no GPU to train")])
def test_cli_bad_rl_search_input_exits_2(extra, names):
    out = CliRunner().invoke(app, [*ARGV, *extra])
    assert out.exit_code == 2 and names in out.output and "Traceback" not in out.output


def test_rl_outside_a_task_rl_search_is_refused():
    out = CliRunner().invoke(app, ["search", "-m", "llama-3.2-1b", "-s", "dgx-h100", "--rl", "prompts=8"])
    assert out.exit_code == 2 and "--task rl with it" in out.output


def test_a_candidate_keeps_the_rest_of_the_setup():
    base = load_rl("prompts=16,samples=4,mini_batches=2,critic=true,response_len_std=100")
    c = candidates(base, 16, 8, set())[-1]
    setup = c.setup(base)
    assert isinstance(setup, RLSetup) and setup.critic and setup.mini_batches == 2 and setup.samples == 4
    assert setup.response_len_std == 100 and setup.layout is c.layout
