"""Speculative decoding: the tokens a verifying step gains (Leviathan et al.), the engine loop at a fraction of
a token's worth of steps per token, the draft head's cost and memory, the gain's erosion with the batch, and bad
input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.task import Task
from madmax.errors import ConfigError
from madmax.serve.loop import Engine, Requests, Scheduler, run_engines


@pytest.mark.parametrize("kind, k, a, tokens", [
    ("eagle", 3, 0.7, (1 - 0.7**4) / 0.3), ("ngram", 5, 0.0, 1.0), ("eagle", 4, 1.0, 5.0),
    ("mtp", None, None, 1.85)])  # mtp: DeepSeek-V3's one drafted token, accepted 85% of the time
def test_a_step_gains_the_expected_accepted_run_plus_one(kind, k, a, tokens):
    t = Task(kind="inference", speculative=kind, draft_len=k, acceptance=a)
    assert t.tokens_per_step == pytest.approx(tokens, rel=1e-12)


def engine_run(tau: float, width: int, n: int, output: int, reserve_full: bool, max_batch: int = 8):
    reqs = Requests(arrival=np.arange(n) * 0.05, prompt=np.full(n, 100), output=np.full(n, output))
    scheduler = Scheduler(budget=1000, max_batch=max_batch, chunked=True, mixed=True, kv_tokens=3000.0,
                          reserve_full=reserve_full, width=width, tokens_per_step=tau)
    engine = Engine(reqs, scheduler, lambda step: 0.1)
    for i in range(n):
        engine.submit(i, float(reqs.arrival[i]))
    run_engines([engine])
    return engine


def test_a_request_takes_the_steps_its_tokens_need_at_the_mean_gain():
    # 11 output tokens: the prefill's first, then 10 more at 2.5 a step: 4 steps of 0.1 s
    engine = engine_run(2.5, 4, n=1, output=11, reserve_full=False)
    assert engine.r.finish[0] == pytest.approx(0.1 + 4 * 0.1)
    assert engine.r.itl.seconds == [pytest.approx(0.1 / 2.5)] * len(engine.r.itl.seconds)


@settings(max_examples=40, deadline=None)
@given(tau=st.floats(1.0, 6.0), n=st.integers(1, 12), output=st.integers(1, 40), reserve_full=st.booleans(),
       max_batch=st.integers(1, 8))
def test_the_loop_leaks_no_keys_or_cache_and_is_never_slower(tau, n, output, reserve_full, max_batch):
    fast = engine_run(tau, 4, n, output, reserve_full, max_batch)
    plain = engine_run(1.0, 1, n, output, reserve_full, max_batch)
    assert fast.decode_keys == pytest.approx(0, abs=1e-6) and fast.used == pytest.approx(0, abs=1e-6)
    assert not np.isnan(fast.r.finish).any()
    assert (fast.r.finish <= plain.r.finish + 1e-9).all()  # every step costs the same here


BASE = {"task": "inference", "prompt_len": 1024, "output_len": 256, "dtype": "fp8", "strategy": "tp=4"}
EAGLE = {"speculative": "eagle", "draft_len": 3, "acceptance": 0.7}


def test_a_static_tpot_is_the_verifying_step_and_its_drafts_over_the_tokens_gained():
    r = api.simulate("llama-3.1-70b", "dgx-h100", 4, batch=8, **BASE, **EAGLE)
    tau = (1 - 0.7**4) / 0.3
    # the mean step over the contexts sits near the step at the middle context, which includes the 3 drafts
    assert r.tpot_s == pytest.approx(r.decode_step_time_s / tau, rel=0.01)
    note = next(a for a in r.assumptions if a.startswith("speculative decoding"))
    assert "3 token(s) drafted a step by an EAGLE head" in note and "2.53 tokens a step" in note


def test_the_gain_erodes_as_the_batch_makes_the_step_compute_bound():
    def gain(batch: int) -> float:
        plain = api.simulate("llama-3.1-70b", "dgx-h100", 4, batch=batch, **BASE)
        return plain.tpot_s / api.simulate("llama-3.1-70b", "dgx-h100", 4, batch=batch, **BASE, **EAGLE).tpot_s

    small, large = gain(1), gain(256)
    assert small > 2 and large < 1.5 and small > large  # 2.3x at 1 request, 1.3x at 256 (verifying 4x the tokens)


def test_a_draft_heads_cost_is_its_share_of_a_decode_steps_weight_reads():
    from madmax.request import resolve_request
    from madmax.serve.deployment import engine_settings

    # Llama-3.1-8B: 8.030e9 parameters, 0.525e9 in the embedding and as many in the LM head, 32 layers: a draft
    # pass reads a mean layer (6.980e9 / 32) and the head of the 7.505e9 a decode step reads
    request = resolve_request("llama-3.1-8b", "dgx-h100", 1, "inference", prompt_len=8, output_len=8, **EAGLE)
    head, embedding, total = 525_336_576, 525_336_576, 8_030_261_248
    read = total - embedding
    assert engine_settings(request)["draft_fraction"] == pytest.approx(((read - head) / 32 + head) / read, rel=1e-12)
    ngram = resolve_request("llama-3.1-8b", "dgx-h100", 1, "inference", prompt_len=8, output_len=8,
                            speculative="ngram", draft_len=4, acceptance=0.5)
    assert engine_settings(ngram)["draft_fraction"] == 0.0


def test_mtp_holds_the_models_prediction_modules_and_one_more_layers_cache():
    args = {"task": "inference", "prompt_len": 1024, "output_len": 64, "dtype": "fp8", "strategy": "tp=8", "batch": 8}
    plain = api.simulate("deepseek-v3", "dgx-h200", 8, **args)
    mtp = api.simulate("deepseek-v3", "dgx-h200", 8, speculative="mtp", **args)
    from madmax.config.loaders import load_model
    from madmax.workload.transformer import param_counts

    counts = param_counts(load_model("deepseek-v3"))
    share = counts["mtp"] / (sum(counts.values()) - counts["mtp"])
    assert mtp.weights_bytes_per_gpu == pytest.approx(plain.weights_bytes_per_gpu * (1 + share), rel=1e-9)
    assert mtp.kv_cache_bytes_per_token == pytest.approx(plain.kv_cache_bytes_per_token * (1 + 1 / 61), rel=1e-9)
    assert mtp.tpot_s < plain.tpot_s


@pytest.mark.parametrize("kwargs, names", [
    ({"draft_len": 3}, "task.draft_len applies to speculative decoding"),
    ({"speculative": "eagle", "draft_len": 3}, "needs task.acceptance"),
    ({"speculative": "ngram", "acceptance": 0.5}, "needs task.draft_len"),
    ({"speculative": "eagle", "draft_len": 3, "acceptance": 1.5}, "acceptance"),
    ({"speculative": "eagle", "draft_len": 17, "acceptance": 0.5}, "draft_len"),
    ({"speculative": "medusa"}, "speculative"),
    ({"speculative": "mtp"}, "llama-3.1-8b has none"),
    ({"speculative": "mtp", "mode": "disaggregated", "strategy": "prefill_workers=1,decode_workers=1"},
     "modelled on aggregated engines"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6}, "speculative=draft needs task.draft_model"),
    ({"speculative": "eagle", "draft_len": 3, "acceptance": 0.6, "draft_model": "llama-3.2-1b"},
     "task.draft_model applies to speculative=draft, not eagle"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6, "draft_model": "qwen3-0.6b"},
     "has a vocabulary of 151,936 tokens, llama-3.1-8b of 128,256"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6, "draft_model": "llama-3.1-70b"},
     "has 70.55B parameters, not fewer than llama-3.1-8b's 8.03B"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6, "draft_model": "dlrm-a"}, "is a dlrm model"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6, "draft_model": "nope-1b"}, "task.draft_model: model"),
    ({"speculative": "draft", "draft_len": 3, "acceptance": 0.6, "draft_model": "llama-3.2-1b", "strategy": "pp=2"},
     "pp=1 with a draft model")])
def test_bad_speculative_settings_are_refused(kwargs, names):
    args = {"task": "inference", "prompt_len": 512, "output_len": 64, "batch": 1, **kwargs}
    with pytest.raises(ConfigError, match=names):
        api.simulate("llama-3.1-8b", "dgx-h100", 2 if "mode" in kwargs or "strategy" in kwargs else 1, **args)


DRAFT = {"speculative": "draft", "draft_model": "llama-3.2-1b", "draft_len": 4}


def test_a_draft_model_holds_its_weights_and_cache_and_costs_its_own_steps():
    from madmax.config.stack import load_stack
    from madmax.config.strategy import Strategy
    from madmax.request import resolve_request
    from madmax.serve.deployment import formats, replica

    args = {**BASE, "batch": 16}
    plain = api.simulate("llama-3.1-70b", "dgx-h100", 4, **args)
    drafted = api.simulate("llama-3.1-70b", "dgx-h100", 4, **args, **DRAFT, acceptance=0.7)
    # memory: the draft's weights and its KV cache, beside the target's on each tensor-parallel rank
    request = resolve_request("llama-3.1-70b", "dgx-h100", 4, "inference", prompt_len=1024, output_len=256,
                              dtype="fp8", **DRAFT, acceptance=0.7)
    rep = replica(request, Strategy(tp=4), load_stack(None), formats(request), 8192, 256, 1280)
    draft = rep.draft_plan
    assert draft is not None and draft.tp == 4
    assert drafted.weights_bytes_per_gpu == pytest.approx(plain.weights_bytes_per_gpu + draft.weights_bytes(0),
                                                          rel=1e-12)
    # Llama-3.2-1B's cache: 16 layers x 8 KV heads x 64 x 2 (K and V) x 2 bytes (bf16) = 32 KiB a token, 80 layers x
    # 8 x 128 x 2 x 2 = 320 KiB for Llama-3.1-70B
    assert drafted.kv_cache_bytes_per_token == pytest.approx(plain.kv_cache_bytes_per_token + 32 * 1024, rel=1e-9)
    assert plain.kv_cache_bytes_per_token == pytest.approx(320 * 1024, rel=1e-9)
    # time: the prefill adds the draft's, and with every draft refused (acceptance 0) a step gains one token for
    # the verifying step and 4 draft steps: slower than plain decoding; accepted, faster
    refused = api.simulate("llama-3.1-70b", "dgx-h100", 4, **args, **DRAFT, acceptance=0.0)
    assert drafted.ttft_s > plain.ttft_s and refused.tpot_s > plain.tpot_s > drafted.tpot_s
    bigger = api.simulate("llama-3.1-70b", "dgx-h100", 4, **args, **{**DRAFT, "draft_model": "llama-3.1-8b"},
                          acceptance=0.7)
    assert bigger.tpot_s > drafted.tpot_s  # an 8B draft's steps cost more than a 1B draft's
    note = next(a for a in drafted.assumptions if a.startswith("speculative decoding"))
    assert "4 token(s) drafted a step by the draft model llama-3.2-1b" in note


def test_cli_speculative_options():
    argv = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task", "inference", "--batch",
            "4", "--prompt-len", "512", "--output-len", "32"]
    ok = CliRunner().invoke(app, [*argv, "--speculative", "eagle", "--draft-len", "3", "--acceptance", "0.6"])
    assert ok.exit_code == 0 and "speculative decoding: 3 token(s) drafted" in ok.output
    bad = CliRunner().invoke(app, [*argv, "--speculative", "mtp"])
    assert bad.exit_code == 2 and "has none (mtp_layers=0)" in bad.output
    drafted = CliRunner().invoke(app, [*argv, "--speculative", "draft", "--draft-model", "llama-3.2-1b",
                                       "--draft-len", "3", "--acceptance", "0.6"])
    assert drafted.exit_code == 0 and "by the draft model llama-3.2-1b" in " ".join(drafted.output.split())
    larger = CliRunner().invoke(app, [*argv, "--speculative", "draft", "--draft-model", "llama-3.1-70b",
                                      "--draft-len", "3", "--acceptance", "0.6"])
    assert larger.exit_code == 2 and "allowed: a smaller draft model" in larger.output
    assert math.isfinite(1.0)
