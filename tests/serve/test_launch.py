"""How an engine is launched and what holds its requests back: the launch rules (engine, sized,
aiconfigurator), engine settings, the front end's round trip, the custom all-reduce past its fitted range,
and the limits a result names. Overlap scheduling's admission is tested with the engine loop
(tests/serve/test_modes.py)."""

from __future__ import annotations

import itertools
import re

import pytest

from madmax import api
from madmax.config.stack import Launch, launched, load_stack, with_settings
from madmax.errors import ConfigError, MadmaxError

ARGS = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 8, "task": "inference"}


def serve(**kwargs):
    return api.simulate(**{**ARGS, **kwargs})


# --- launch rules --------------------------------------------------------------------------------------


def test_engine_launch_keeps_every_default():
    stack = load_stack("trtllm")
    assert launched(stack, Launch.ENGINE, 64, 8192) == (stack, [])


def test_sized_launch_raises_a_budget_that_cannot_hold_a_prompt_beside_the_batch():
    # TensorRT-LLM does not chunk prompts: 64 decodes + an 8192-token prompt need 8256 > 8192 tokens, so the
    # budget becomes 64 + 8192 + 1500 = 9756; a 1024-token prompt fits and nothing changes.
    trt = load_stack("trtllm")
    sized, notes = launched(trt, Launch.SIZED, 64, 8192)
    assert sized.max_num_tokens == 9756 and "max_num_tokens 8,192 -> 9,756" in notes[0]
    assert launched(trt, Launch.SIZED, 64, 1024) == (trt, [])
    # vLLM chunks prompts: its budget stays; a batch beyond its running cap raises the cap.
    vllm = load_stack("vllm")
    assert launched(vllm, Launch.SIZED, 64, 8192) == (vllm, [])
    assert launched(vllm, Launch.SIZED, 2000, 1024)[0].max_batch == 2000
    # A decode worker has no prompt to fit; a prefill worker no decodes.
    assert launched(trt, Launch.SIZED, 64, 8192, "decode") == (trt, [])
    assert launched(trt, Launch.SIZED, 1, 12000, "prefill")[0].max_num_tokens == 13500


def test_aiconfigurator_launch_by_engine():
    # TensorRT-LLM: batch + prompt + 1500 rounded up to a 32-token block, max_batch_size and graphs = batch.
    trt, _ = launched(load_stack("trtllm"), Launch.AICONFIGURATOR, 8, 4096)
    assert (trt.max_num_tokens, trt.max_batch, trt.cuda_graph_max_batch) == (5632, 8, 8)  # 5604 -> 176 blocks
    assert not trt.chunked_prefill
    # vLLM: max_num_batched_tokens = batch + prompt + 1500 (chunked prefill stays on).
    vllm, _ = launched(load_stack("vllm"), Launch.AICONFIGURATOR, 8, 4096)
    assert vllm.max_num_tokens == 5604 and vllm.chunked_prefill and vllm.max_batch == 1024
    # SGLang: max_prefill_tokens = prompt + 1500 (at most its 8192-token chunk), mixed chunks, running = batch.
    sgl, _ = launched(load_stack("sglang"), Launch.AICONFIGURATOR, 16, 1024)
    assert (sgl.max_num_tokens, sgl.mixed_batches, sgl.max_batch) == (2524, True, 16)  # 1024 + 1500
    assert launched(load_stack("sglang"), Launch.AICONFIGURATOR, 16, 8192)[0].max_num_tokens == 8192
    with pytest.raises(ConfigError, match=r"launch aiconfigurator has no rule for stack 'trtllm-0\.9'"):
        launched(load_stack("trtllm-0.9"), Launch.AICONFIGURATOR, 8, 1024)


def test_engine_settings_are_checked_as_the_stack_fields():
    stack = with_settings(load_stack("trtllm"), "max_num_tokens=16384, chunked_prefill=1,frontend_s=2 ms")
    assert (stack.max_num_tokens, stack.chunked_prefill, stack.frontend_s) == (16384, True, 0.002)
    for text, words in [("foo=1", "engine.foo is not an engine setting; allowed: max_num_tokens"),
                        ("max_num_tokens", "is not key=value"),
                        ("max_num_tokens=0", "engine.max_num_tokens='0': Input should be greater than 0"),
                        ("max_batch=2,max_batch=3", "given twice"), ("kv_pool_fraction=1.5", "kv_pool_fraction"),
                        ("frontend_s=1e9", "engine.frontend_s='1e9': Input should be less than or equal to 60"),
                        ("max_num_tokens=nan", "engine.max_num_tokens='nan'")]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            with_settings(load_stack("vllm"), text)


def test_a_long_prompt_is_served_sized_and_refused_as_the_engine_launches():
    # TensorRT-LLM takes a 32K prompt when its budget is sized to it; its 8192-token default cannot hold it.
    long = {"batch": 4, "prompt_len": 32768, "output_len": 16, "strategy": "tp=8", "mode": "concurrency"}
    r = serve(**long)
    assert r.fits and any("max_num_tokens 8,192 -> 34,272" in a for a in r.assumptions)
    with pytest.raises(MadmaxError, match=r"exceeds the 8192-token step of stack trtllm.*chunked_prefill=1"):
        serve(**long, launch="engine")
    assert serve(**long, launch="engine", engine="chunked_prefill=1").fits


# --- the front end ------------------------------------------------------------------------------------


def test_the_front_end_adds_to_every_ttft_and_the_clients_round_trip():
    base = {"batch": 4, "prompt_len": 512, "output_len": 32, "strategy": "tp=8", "mode": "concurrency"}
    a = serve(**base, engine="frontend_s=0")
    b = serve(**base, engine="frontend_s=5 ms")
    # Four requests in lockstep: the round trip shifts every wave by 5 ms; TPOT does not move.
    assert b.ttft_s == pytest.approx(a.ttft_s + 0.005, rel=1e-9)
    assert b.tpot_s == pytest.approx(a.tpot_s, rel=1e-9)
    assert b.e2e_latency_s == pytest.approx(a.e2e_latency_s + 0.005, rel=1e-9)


# --- collectives ----------------------------------------------------------------------------------------


def test_custom_all_reduce_past_its_fitted_range():
    # vLLM's two-shot kernel: 2a + 2(n-1)/n S / B up to 1 MiB (B = 0.14 x 450 GB/s), then 0.58 x 450 GB/s
    # for each further byte. At n = 4, 4 MiB: 15.8 us + 1.5 x (1 MiB / 63 GB/s + 3 MiB / 261 GB/s).
    rule = load_stack("vllm").all_reduce[1]
    link = 450e9
    mib = 1 << 20
    expected = 2 * 7.9e-6 + 1.5 * (mib / (0.14 * link) + 3 * mib / (0.58 * link))
    assert rule.seconds(4 * mib, 4, link) == pytest.approx(expected, rel=1e-12)
    assert rule.seconds(mib, 4, link) == pytest.approx(2 * 7.9e-6 + 1.5 * mib / (0.14 * link), rel=1e-12)


def test_ttft_rises_with_the_prompt_across_the_all_reduce_thresholds():
    # The case: llama-2-13b on 8 H200 at tp=4 under vLLM took 26.8 ms at 768 tokens and 17.4 ms at
    # 1024 (the two-shot fit applied to 8 MB messages, NCCL beyond). Now every step up in prompt costs more.
    ttft = [api.simulate("llama-2-13b", "dgx-h200", 8, task="inference", batch=1, prompt_len=p, output_len=2,
                         strategy="tp=4", stack="vllm").ttft_s for p in (512, 640, 768, 896, 1024, 1280, 1536)]
    assert all(b > a for a, b in itertools.pairwise(ttft))


# --- limits and memory ------------------------------------------------------------------------------------


def test_a_starved_queue_names_the_token_budget():
    # The reproducer under the engine's own defaults: an 8192-token prompt never fits TensorRT-LLM's
    # 8192-token step beside running decodes, so requests are served one after another; the result says so.
    kwargs = {"model": "llama-3.1-70b", "system": "dgx-b200", "num_gpus": 8, "task": "inference",
              "mode": "concurrency", "batch": 64, "prompt_len": 8192, "output_len": 1024, "dtype": "fp8",
              "strategy": "tp=8"}
    starved = api.simulate(**kwargs, launch="engine")
    assert starved.ttft_s > 10 * starved.prefill_time_s
    assert "max_num_tokens=8,192 leaves no room for a 8,192-token prompt" in starved.limits[0]
    assert "--engine max_num_tokens=9,756" in starved.limits[0]
    # Sized, the prompt shares steps with the decodes: TTFT within a few prefills, nothing to name.
    sized = api.simulate(**kwargs)
    assert sized.ttft_s < sized.prefill_time_s / 4 and not sized.limits
    assert sized.output_tokens_per_s > 10 * starved.output_tokens_per_s


def test_a_batch_beyond_the_kv_pool_queues_and_fits():
    # 4096 requests of 4096 + 1024 tokens do not fit one H100's pool: served, the rest queue (named);
    # static, every cache must be resident: it does not fit.
    kwargs = {"batch": 4096, "prompt_len": 4096, "output_len": 1024, "strategy": "tp=1", "num_requests": 4096}
    served = serve(**kwargs, mode="concurrency")
    assert served.fits and served.max_batch_by_memory < 4096
    assert any(f"holds {served.max_batch_by_memory:,} requests of 5,120 tokens" in s for s in served.limits)
    static = serve(batch=4096, prompt_len=4096, output_len=1024, strategy="tp=1")
    assert not static.fits and "allowed: batch <=" in static.fits_reason


def test_cli_launch_and_engine_errors():
    from typer.testing import CliRunner

    from madmax.cli import app

    base = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100"]
    serving = ["--task", "inference", "--batch", "4", "--prompt-len", "128", "--output-len", "8"]
    for extra, words in [([*serving, "--launch", "tuned"], "task.launch"),
                         ([*serving, "--engine", "budget=8"], "engine.budget is not an engine setting"),
                         (["--launch", "engine"], "task.launch applies only to task kind 'inference'")]:
        out = CliRunner().invoke(app, [*base, *extra])
        assert out.exit_code == 2, out.output
        assert words in out.output and "Traceback" not in out.output, out.output
    ok = CliRunner().invoke(app, [*base, *serving, "--launch", "engine", "--engine", "max_batch=64", "--json"])
    assert ok.exit_code == 0 and '"limits": []' in ok.output


def test_arrivals_beyond_the_deployment_are_named_and_nothing_below_them():
    # Eight one-GPU replicas of Llama-3.1-8B prefill about 70 prompts of 4096 tokens a second: at 50/s every
    # request is served as it comes (a short run's tail is no overload); at 400/s the queue grows.
    def run(rate: float, n: int = 2000):
        return serve(mode="rate", request_rate=rate, num_requests=n, prompt_len=4096, output_len=64,
                     strategy="tp=1")

    for quiet in (run(0.5), run(50.0), run(50.0, 20)):
        assert quiet.limits == []
    busy = run(400.0)
    assert busy.ttft_s > 5 and len(busy.limits) == 1
    # the rate the 2,000 simulated arrivals came at (a Poisson sample's own, within a few percent of 400/s)
    arrived = re.match(r"requests arrive at ([\d,.]+)/s and the deployment serves", busy.limits[0])
    assert arrived and float(arrived.group(1).replace(",", "")) == pytest.approx(400, rel=0.05)


def test_closed_loop_clients_below_the_limits_name_nothing():
    # One to 64 clients of short requests: the front end's round trip is counted in the single-request baseline.
    for batch in (1, 2, 8, 64):
        assert serve(mode="concurrency", batch=batch, prompt_len=512, output_len=64, strategy="tp=1").limits == []


def test_a_poisson_sample_slower_than_its_nominal_rate_is_no_overload():
    # 500 arrivals at a nominal 1/s that came at about 0.91/s (the default seed's sample): Llama-3.1-70B on 4
    # H100 serves each within 0.4 s of TTFT. Held against the nominal rate, the engine (always stepping its
    # decodes) looked overloaded; against the rate the requests arrived at, it is not.
    r = api.simulate("llama-3.1-70b", "dgx-h100", 4, task="inference", mode="rate", request_rate=1.0,
                     prompt_len=2048, output_len=256, strategy="tp=4", num_requests=500)
    assert r.requests_per_s < 0.95 and r.latency["ttft_s"]["p99"] < 0.5
    assert r.limits == []
