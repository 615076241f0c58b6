"""Metamorphic properties of serving predictions on random valid deployments (hypothesis): TTFT never falls
as the request rate rises or the prompt grows, a replica of more GPUs never serves fewer tokens per second,
and TPOT is never below the roofline of the bytes a decode step must read.

Under load an engine works in steps, and where an arrival lands in a step (a short decode step or a long
prefill step) moves its wait by anything from nothing to a whole step: a sampling noise on the mean TTFT of
about S / sqrt(6 n) for steps of S seconds and n requests (the difference of two uniform phases), which
compressing the same arrivals does not hold still. Over 120 requests per engine (about 1,000 here) and steps
of 20-40 ms that is about 0.5% of the TTFT, and `STEP_PHASE` allows four times that and no more; the defect
the issue found (38.0 ms at 1-4 requests/s, 35.0 ms at 32) was 8%. With 15 requests per engine the noise alone
moved a mean by 2.2% (Gemma-3-27B, the @example below), by 0.9% with 60 and +0.6% with 120."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from madmax import api
from madmax.config.loaders import load_model, load_system
from madmax.config.stack import load_stack

STEP_PHASE = 0.02  # the mean TTFT may move this much with where arrivals land in the engine's steps
REQUESTS_PER_ENGINE = 120  # enough that the step-phase noise stays well inside STEP_PHASE (module docstring)
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DENSE = ("llama-3.1-8b", "qwen3-8b", "mistral-7b", "gemma-3-27b")
STACKS = ("trtllm", "vllm", "vllm-0.14", "sglang")


def _serve(model: str, **kwargs):
    return api.simulate(model, "dgx-h100", kwargs.pop("num_gpus", 8), task="inference", **kwargs)


@SLOW
@given(model=st.sampled_from(DENSE), stack=st.sampled_from(STACKS), tp=st.sampled_from([1, 2, 4]),
       prompt=st.integers(64, 4096), output=st.integers(2, 128), rate=st.floats(0.5, 40.0),
       factor=st.floats(1.0, 4.0), seed=st.integers(0, 3))
@example(model="gemma-3-27b", stack="vllm", tp=1, prompt=351, output=30, rate=39.625, factor=2.0, seed=1)
def test_ttft_never_falls_as_the_request_rate_rises(model, stack, tp, prompt, output, rate, factor, seed):
    # The same seed draws the same exponential gaps, so a higher rate compresses the same arrivals: every
    # request arrives no later relative to the ones before it, and no engine can answer it sooner. The 8 GPUs
    # run 8 / tp replicas, each with REQUESTS_PER_ENGINE of the requests.
    def ttft(r: float) -> float:
        return _serve(model, mode="rate", request_rate=r, num_requests=REQUESTS_PER_ENGINE * (8 // tp), seed=seed,
                      prompt_len=prompt, output_len=output, strategy=f"tp={tp}", stack=stack).ttft_s

    assert ttft(rate * factor) >= ttft(rate) * (1 - STEP_PHASE)


@SLOW
@given(model=st.sampled_from(DENSE), stack=st.sampled_from(STACKS), tp=st.sampled_from([1, 2, 4, 8]),
       prompt=st.integers(16, 6000), grow=st.integers(1, 2048), batch=st.sampled_from([1, 4, 16]),
       mode=st.sampled_from(["static", "concurrency"]))
@example(model="llama-3.1-8b", stack="trtllm", tp=1, prompt=1800, grow=248, batch=16, mode="concurrency")
@example(model="llama-3.1-8b", stack="trtllm", tp=1, prompt=4008, grow=83, batch=16, mode="concurrency")
def test_ttft_never_falls_as_the_prompt_grows(model, stack, tp, prompt, grow, batch, mode):
    def ttft(p: int) -> float:
        return _serve(model, mode=mode, batch=batch, prompt_len=p, output_len=16, strategy=f"tp={tp}",
                      stack=stack).ttft_s

    # One static batch's prefill only grows. A closed loop's mean TTFT also moves with how the prompts pack into
    # the steps' token budget: prompts of 2048 tokens fill an 8192-token step four at a time and each finishes
    # in one step, while prompts of 1800 straddle step boundaries and often take two (2% lower at 2048 than at
    # 1800, llama-3.1-8b, 16 clients, found here), as chunked prefill does in the engines. That moves the mean
    # by less than one full step: a prefill of the budget's tokens (or the longest prompt the model takes) with
    # the running decodes beside it (4008 -> 4091 tokens, 16 clients: 649 -> 438 ms, the prefill alone 210.5 ms
    # and the step 210.6 ms, found here).
    if mode == "static":
        assert ttft(prompt + grow) >= ttft(prompt) * (1 - 1e-9)
        return
    budget = min(load_stack(stack).max_num_tokens, load_model(model).max_seq_len - 1)
    full_step = _serve(model, mode="static", batch=1, prompt_len=budget, output_len=1, strategy=f"tp={tp}",
                       stack=stack).ttft_s
    decodes = _serve(model, mode="static", batch=batch, prompt_len=prompt, output_len=2, strategy=f"tp={tp}",
                     stack=stack).decode_step_time_s
    assert ttft(prompt + grow) >= ttft(prompt) - full_step - decodes


@SLOW
@given(model=st.sampled_from(DENSE), stack=st.sampled_from(STACKS), tp=st.sampled_from([1, 2, 4]),
       prompt=st.integers(64, 4096), output=st.integers(16, 512), batch=st.sampled_from([1, 8, 32, 128]))
def test_a_replica_of_more_gpus_never_serves_fewer_tokens(model, stack, tp, prompt, output, batch):
    # The same clients served by one replica of tp GPUs and one of 2 tp GPUs (num_gpus = the replica): halving
    # each GPU's weights and cache saves more than the larger all-reduce group costs.
    def throughput(t: int) -> float:
        return _serve(model, num_gpus=t, mode="concurrency", batch=batch, prompt_len=prompt, output_len=output,
                      strategy=f"tp={t}", stack=stack, num_requests=2 * batch).output_tokens_per_s

    assert throughput(2 * tp) >= throughput(tp) * (1 - 1e-9)


@SLOW
@given(model=st.sampled_from(DENSE), stack=st.sampled_from(STACKS), tp=st.sampled_from([1, 2, 4, 8]),
       prompt=st.integers(16, 8192), output=st.integers(2, 256), batch=st.sampled_from([1, 8, 64]),
       mode=st.sampled_from(["static", "concurrency"]), kv=st.sampled_from(["bf16", "fp8"]))
def test_tpot_is_never_below_the_bytes_a_decode_step_reads(model, stack, tp, prompt, output, batch, mode, kv):
    # A decode step reads every weight of the rank and each running request's cache (at least its prompt):
    # TPOT >= (weights + requests x prompt x KV bytes per token) / HBM bandwidth, per GPU.
    r = _serve(model, mode=mode, batch=batch, prompt_len=prompt, output_len=output, strategy=f"tp={tp}",
               stack=stack, kv_dtype=kv)
    hbm = load_system("dgx-h100").gpu.hbm_bytes_per_s
    running = min(batch, r.max_batch_by_memory)
    kv_read = running * prompt * r.kv_cache_bytes_per_token / tp
    assert r.tpot_s >= (r.weights_bytes_per_gpu + kv_read) / hbm
