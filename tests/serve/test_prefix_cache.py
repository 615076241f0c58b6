"""Prefix caching: a prompt prefix every request shares is computed once per engine, kept once in its KV pool,
and skipped by the requests that find it (the engine loop against hand-counted steps and tokens; the
closed forms; bad input)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.errors import ConfigError
from madmax.serve.loop import Engine, Requests, Scheduler, run_engines


def run(prefix: int, hit: float = 1.0, n: int = 4, prompt: int = 100, output: int = 3, **rules):
    """n requests of `prompt` tokens at t = 0 on one engine whose step takes 1 s per 100 tokens computed and
    1 s per decode; the engine and every step it took (prompt chunks as (tokens now, context))."""
    reqs = Requests(arrival=np.zeros(n), prompt=np.full(n, prompt), output=np.full(n, output))
    steps = []

    def step_time(step):
        return sum(q for q, _ in step.prefill) / 100 + step.decode

    scheduler = Scheduler(**{"budget": 1000, "max_batch": 8, "chunked": True, "mixed": True, "kv_tokens": 10_000.0,
                             "reserve_full": False, "prefix": prefix, "prefix_hit": hit, **rules})
    engine = Engine(reqs, scheduler, step_time)
    take = engine.take

    def taken(work, seconds):
        steps.append(work.step)
        take(work, seconds)

    engine.take = taken
    for i in range(n):
        engine.submit(i, 0.0)
    run_engines([engine])
    return engine, steps


def test_the_first_prompt_computes_the_prefix_and_the_next_ones_skip_it():
    engine, steps = run(prefix=60)
    # All four arrive at once: the first step admits them before any holds the prefix, so all compute it.
    assert steps[0].prefill == ((100, 100),) * 4
    engine, steps = run(prefix=60, max_batch=1)
    # One at a time: the first prompt computes all 100 tokens, the next ones the 40 after the prefix, reading
    # all 100; three requests found 60 tokens each in the cache.
    prefills = [s.prefill for s in steps if s.prefill]
    assert prefills == [((100, 100),), ((40, 100),), ((40, 100),), ((40, 100),)]
    assert engine.r.cached_tokens == 180
    # The prefix stays in the pool once every request has left: 60 tokens held, the requests' own freed.
    assert engine.used == 60 and engine.r.finish[-1] == pytest.approx(1 + 2 + 3 * (0.4 + 2))


def test_the_hit_share_picks_an_even_spread_of_requests():
    engine, _ = run(prefix=60, hit=0.5, n=40, max_batch=1)
    found = engine.r.cached_tokens / 60
    assert 17 <= found <= 22  # half of the 39 requests after the first


@settings(max_examples=25, deadline=None)
@given(prefix=st.integers(1, 99), hit=st.floats(0, 1), n=st.integers(1, 12), output=st.integers(1, 5),
       reserve_full=st.booleans(), max_batch=st.integers(1, 8))
def test_a_shared_prefix_never_slows_a_request_nor_leaks_the_pool(prefix, hit, n, output, reserve_full,
                                                                    max_batch):
    args = {"n": n, "output": output, "reserve_full": reserve_full, "max_batch": max_batch}
    cached, _ = run(prefix, hit, **args)
    plain, _ = run(0, **args)
    assert (cached.r.finish <= plain.r.finish + 1e-9).all()
    assert (cached.r.first_token <= plain.r.first_token + 1e-9).all()
    assert cached.used == (prefix if cached.prefix_cached else 0)  # only the shared prefix stays held


BASE = {"task": "inference", "prompt_len": 2048, "output_len": 64, "dtype": "fp8", "strategy": "tp=1"}


def test_a_static_batch_prefills_the_tokens_after_the_prefix_reading_all():
    plain = api.simulate("llama-3.1-8b", "dgx-h100", 1, batch=8, **BASE)
    cached = api.simulate("llama-3.1-8b", "dgx-h100", 1, batch=8, prefix_len=1536, **BASE)
    short = api.simulate("llama-3.1-8b", "dgx-h100", 1, batch=8, **{**BASE, "prompt_len": 512})
    # 512 new tokens a prompt whose attention reads 2,048 keys: slower than a 512-token prompt, far faster than
    # computing all 2,048
    assert short.ttft_s < cached.ttft_s < 0.4 * plain.ttft_s
    # KV: 8 requests' own 512 + 64 tokens and the prefix once, of 8 x 2,112 without sharing
    assert cached.memory["kv_cache"] == pytest.approx(plain.memory["kv_cache"] * (8 * 576 + 1536) / (8 * 2112))
    assert any(a.startswith("prefix caching: every prompt starts with the same 1,536 tokens") for a in
               cached.assumptions)


def test_served_requests_gain_from_the_prefix_in_time_and_say_how_much_was_cached():
    args = {**BASE, "mode": "rate", "request_rate": 20, "num_requests": 300}
    plain = api.simulate("llama-3.1-8b", "dgx-h100", 1, **args)
    cached = api.simulate("llama-3.1-8b", "dgx-h100", 1, prefix_len=1536, **args)
    assert cached.latency["ttft_s"]["p99"] < plain.latency["ttft_s"]["p99"]
    note = next(a for a in cached.assumptions if a.startswith("prefix caching"))
    # all but the requests that came before the first prompt was computed found 1,536 of their 2,048 tokens
    assert re.search(r"\(7[34]\.\d% of the prompt tokens came from the cache", note)


@pytest.mark.parametrize("kwargs, names", [
    ({"prefix_len": 2048}, "prefix_len=2048 is not shorter than prompt_len=2048"),
    ({"prefix_hit": 0.5}, "give prefix_len too"), ({"prefix_len": 100, "prefix_hit": 1.5}, "prefix_hit"),
    ({"prefix_len": 100, "prefix_hit": float("nan")}, "prefix_hit"), ({"prefix_len": -1}, "prefix_len"),
    ({"prefix_len": 100, "mode": "disaggregated", "strategy": "prefill_workers=1,decode_workers=1"},
     "modelled on aggregated engines")])
def test_bad_prefixes_are_refused(kwargs, names):
    with pytest.raises(ConfigError, match=names):
        api.simulate("llama-3.1-8b", "dgx-h100", 2 if "mode" in kwargs else 1, batch=1, **{**BASE, **kwargs})


def test_cli_prefix_options_and_training_refusal():
    ok = CliRunner().invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task",
                                  "inference", "--batch", "4", "--prompt-len", "1024", "--output-len", "16",
                                  "--prefix-len", "512", "--json"])
    assert ok.exit_code == 0 and "prefix caching" in ok.output
    bad = CliRunner().invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--prefix-len", "512"])
    assert bad.exit_code == 2 and "task.prefix_len applies only to task kind 'inference'" in bad.output


def test_a_trace_with_a_prompt_no_longer_than_the_prefix_is_refused(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,1024,16\n0.1,300,16\n")
    with pytest.raises(ConfigError, match="the shortest has 300 tokens"):
        api.simulate("llama-3.1-8b", "dgx-h100", 1, task="inference", mode="rate", arrivals=trace, prefix_len=512)
