"""RL post-training (madmax.rl): one step composed of the rollout, the scoring passes, the training steps and the
weight sync, its layouts, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.rl import load_rl
from madmax.errors import ConfigError, MadmaxError
from madmax.rl import simulate_rl

# Llama-3.1-8B GRPO on two DGX H100 nodes: 16 prompts x 8 samples of 256 + 512 tokens
BASE = {"prompt_len": 256, "response_len": 512}
RL = {"prompts": 16, "samples": 8, "mini_batches": 2}


@pytest.fixture(scope="module")
def colocated():
    return simulate_rl("llama-3.1-8b", "dgx-h100", 16, RL, **BASE)


def test_a_colocated_step_is_its_phases_one_after_another(colocated):
    r = colocated
    assert r.step_time_s == pytest.approx(sum(r.phases_s.values()), rel=1e-12)
    assert r.pools == {"all": {"gpus": 16, "busy_fraction": 1.0}}
    # training: 2 optimizer steps of 64 samples of 768 tokens, as simulate --task finetune runs one
    step = api.simulate("llama-3.1-8b", "dgx-h100", 16, task="finetune", global_batch=64, seq_len=768)
    assert r.phases_s["training"] == pytest.approx(2 * step.iteration_time_s, rel=1e-12)
    # scoring: the policy's and the frozen reference's log-probabilities, a forward pass over the 128 samples each
    forward = api.forward_pass("llama-3.1-8b", "dgx-h100", 16, batch=128, seq_len=768, strategy=step.strategy)
    assert r.passes_s == {"policy log-probabilities": pytest.approx(forward.iteration_time_s, rel=1e-12),
                          "reference log-probabilities": pytest.approx(forward.iteration_time_s, rel=1e-12)}
    assert r.phases_s["scoring"] == pytest.approx(2 * forward.iteration_time_s, rel=1e-12)
    assert r.samples_per_s == pytest.approx(128 / r.step_time_s) and r.response_len == 512


def test_a_forward_pass_is_about_a_third_of_a_training_step():
    # without recompute a step is the forward and a backward of twice its FLOPs: the forward pass ~1/3 of it
    train = api.simulate("llama-3.1-8b", "dgx-h100", 8, task="finetune", global_batch=64, seq_len=2048,
                         strategy="tp=1,recompute=none")
    forward = api.forward_pass("llama-3.1-8b", "dgx-h100", 8, batch=64, seq_len=2048, strategy="tp=1")
    assert 0.25 < forward.iteration_time_s / train.iteration_time_s < 0.45
    assert forward.breakdown["compute_s"]["optimizer"] == 0.0 and "recompute" not in forward.breakdown["compute_s"]


def test_generation_waits_for_the_longest_response():
    even = simulate_rl("llama-3.1-8b", "dgx-h100", 8, RL, **BASE)
    spread = simulate_rl("llama-3.1-8b", "dgx-h100", 8, {**RL, "response_len_std": 512, "max_response_len": 4096},
                         **BASE)
    assert spread.longest_response > 512 and spread.longest_response <= 4096
    assert spread.phases_s["generation"] > even.phases_s["generation"]  # the tail runs alone at a small batch


def test_disaggregated_pools_idle_in_turn_unless_asynchronous():
    sync = simulate_rl("llama-3.1-8b", "dgx-h100", 16, {**RL, "layout": "disaggregated", "rollout_gpus": 8}, **BASE)
    p = sync.phases_s
    assert sync.step_time_s == pytest.approx(sum(p.values()), rel=1e-12)
    assert sync.pools["rollout"]["gpus"] == sync.pools["train"]["gpus"] == 8
    assert sync.pools["rollout"]["busy_fraction"] < 1 and sync.pools["train"]["busy_fraction"] < 1
    overlap = simulate_rl("llama-3.1-8b", "dgx-h100", 16,
                          {**RL, "layout": "disaggregated", "rollout_gpus": 8, "asynchronous": True}, **BASE)
    q = overlap.phases_s
    assert overlap.step_time_s == pytest.approx(max(q["generation"], q["scoring"] + q["training"])
                                                + q["weight_sync"], rel=1e-12)
    assert overlap.step_time_s < sync.step_time_s


def test_a_critic_trains_and_a_reward_model_scores():
    ppo = simulate_rl("llama-3.1-8b", "dgx-h100", 16, {**RL, "critic": True, "reward_model": "llama-3.2-1b"},
                      **BASE)
    grpo = simulate_rl("llama-3.1-8b", "dgx-h100", 16, RL, **BASE)
    assert ppo.phases_s["training"] == pytest.approx(2 * grpo.phases_s["training"], rel=1e-12)
    assert set(ppo.passes_s) == {"policy log-probabilities", "reference log-probabilities", "critic values",
                                 "reward model llama-3.2-1b"}
    assert ppo.passes_s["reward model llama-3.2-1b"] < ppo.passes_s["policy log-probabilities"]


@pytest.mark.parametrize("rl, names", [
    (None, "rl is required for task=rl"),
    ({"prompts": 0}, "rl.prompts=0"),
    ({"prompts": 8, "layout": "disaggregated"}, "needs rollout_gpus"),
    ({"prompts": 8, "asynchronous": True}, "asynchronous applies to layout=disaggregated"),
    ({"prompts": 8, "samples": 3, "mini_batches": 5}, "mini_batches=5 does not divide the 24 responses"),
    ({"prompts": 8, "layout": "disaggregated", "rollout_gpus": 16}, "rollout_gpus=16 leaves no GPU to train"),
    ({"prompts": 8, "layout": "disaggregated", "rollout_gpus": 12}, "rollout_gpus of 12 GPUs is not"),
    ({"prompts": 8, "rollout_tp": 3}, "rollout_tp=3 does not divide"),
    ({"prompts": 8, "reward_model": "dlrm-a"}, "rl.reward_model=dlrm-a is a dlrm model; allowed: a language model"),
    ("prompts=8,samples", "rl setting 'samples' is not key=value"),
    ("prompts=8,colour=red", "rl.colour is not a field of rl; allowed: prompts, samples")])
def test_bad_rl_setups_are_one_sentence(rl, names):
    with pytest.raises(MadmaxError, match=names) as info:
        simulate_rl("llama-3.1-8b", "dgx-h100", 16, rl, **BASE)
    assert "\n" not in str(info.value)


def test_a_colocated_state_that_leaves_no_room_is_refused():
    with pytest.raises(ConfigError, match="leaving no room for the rollout engine"):
        simulate_rl("llama-3.1-70b", "dgx-h100", 8, {"prompts": 8}, prompt_len=256, response_len=256,
                    strategy="tp=8,zero=0")


def test_rl_text_and_file_forms_agree(tmp_path):
    path = tmp_path / "rl.yaml"
    path.write_text("prompts: 16\nsamples: 8\nmini_batches: 2\n")
    assert load_rl(str(path)) == load_rl("prompts=16,samples=8,mini_batches=2") == load_rl(RL)


ARGV = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "16", "--task", "rl", "--prompt-len", "256",
        "--output-len", "512"]


def test_cli_prints_the_phases_and_json(colocated):
    out = CliRunner().invoke(app, [*ARGV, "--rl", "prompts=16,samples=8,mini_batches=2"])
    assert out.exit_code == 0, out.output
    assert "Phases of the step" in out.output and "reference log-probabilities" in out.output
    data = json.loads(CliRunner().invoke(app, [*ARGV, "--rl", "prompts=16,samples=8,mini_batches=2",
                                               "--json"]).output)
    assert data["task"] == "rl" and data["step_time_s"] == pytest.approx(colocated.step_time_s, rel=1e-12)


@pytest.mark.parametrize("extra, names", [
    ([], "rl is required for task=rl"),
    (["--rl", "prompts=8", "--batch", "4"], "batch does not apply to task=rl"),
    (["--rl", "prompts=8", "--mode", "rate"], "mode does not apply to task=rl")])
def test_cli_bad_rl_input_exits_2(extra, names):
    out = CliRunner().invoke(app, [*ARGV, *extra])
    assert out.exit_code == 2 and names in out.output and "Traceback" not in out.output


@pytest.mark.parametrize("lengths, names", [
    ({"prompt_len": 0, "response_len": 512}, "prompt_len=0 is not a positive integer"),
    ({"prompt_len": 256, "response_len": float("nan")}, "response_len=nan is out of range"),
    ({"prompt_len": 256, "response_len": -1}, "response_len=-1 is out of range")])
def test_bad_lengths_are_one_sentence(lengths, names):
    with pytest.raises(ConfigError, match=names):
        simulate_rl("llama-3.1-8b", "dgx-h100", 8, RL, **lengths)


def test_rl_outside_task_rl_is_refused():
    out = CliRunner().invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--rl", "prompts=8"])
    assert out.exit_code == 2 and "--task rl with it" in out.output


def test_the_docs_validation_table_is_current():
    # docs/rl.md's table is written by `python -m madmax.validate.rl --write`; a model change must regenerate it.
    from madmax.validate import rl as rl_validation

    doc = (Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text(encoding="utf-8")
    start, end = (doc.index(m) for m in rl_validation.MARKERS)
    shown = doc[start + len(rl_validation.MARKERS[0]):end].strip()
    assert shown == rl_validation.table([rl_validation.predict(r) for r in rl_validation.rows()])


def test_the_trace_draws_each_pools_phases_step_after_step(tmp_path):
    from madmax.report.trace import rl_trace_events

    r = simulate_rl("llama-3.1-8b", "dgx-h100", 16, {**RL, "layout": "disaggregated", "rollout_gpus": 8,
                                                     "asynchronous": True}, **BASE)
    events = rl_trace_events(r, steps=3)
    spans = [e for e in events if e["ph"] == "X"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {0: "rollout pool (8 GPUs)", 1: "train pool (8 GPUs)"}
    # one step off: 3 generations, the scoring and training of steps 0 and 1, a sync on each pool each step
    count = {}
    for e in spans:
        count[e["name"]] = count.get(e["name"], 0) + 1
    assert count == {"generation": 3, "scoring": 2, "training": 2, "weight sync": 6}
    for e in spans:  # nothing on one pool overlaps, and every step ends with its sync at the period
        same = [o for o in spans if o["pid"] == e["pid"] and o is not e]
        assert all(o["ts"] >= e["ts"] + e["dur"] - 1e-6 or o["ts"] + o["dur"] <= e["ts"] + 1e-6 for o in same)
    syncs = sorted(e["ts"] + e["dur"] for e in spans if e["name"] == "weight sync" and e["pid"] == 0)
    assert syncs == pytest.approx([(k + 1) * r.step_time_s * 1e6 for k in range(3)], rel=1e-9)
    out = CliRunner().invoke(app, [*ARGV, "--rl", "prompts=16,samples=8,mini_batches=2", "--trace",
                                   str(tmp_path / "rl.json")])
    assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / "rl.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in written if e["ph"] == "M"} == {"all pool (16 GPUs)"}
