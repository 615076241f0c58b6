"""The serving modes against their definitions: static-batch throughput, the closed loop (lockstep when
every prompt fits one step), rate mode's percentiles and goodput, disaggregation, memory limits."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from madmax import api
from madmax.config.stack import DPRouter
from madmax.parallel.serving import Step
from madmax.results.serving import percentiles
from madmax.serve.group import Group, Router
from madmax.serve.loop import Clocked, Engine, Requests, Scheduler, _steps_to_reach, run_engines
from madmax.serve.modes import batch_ladder, prefill_rounds

ARGS = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 8, "task": "inference"}


def serve(**kwargs):
    return api.simulate(**{**ARGS, **kwargs})


def test_static_throughput_is_the_contract_formula():
    # replicas x batch x output / (prefill + (output - 1) x mean decode step): tp=2 gives 4 replicas.
    r = serve(batch=16, prompt_len=512, output_len=64, strategy="tp=2")
    assert r.output_tokens_per_s == pytest.approx(4 * 16 * 64 / (r.ttft_s + 63 * r.tpot_s), rel=1e-12)
    assert r.e2e_latency_s == pytest.approx(r.ttft_s + 63 * r.tpot_s, rel=1e-12)
    assert r.ttft_s == r.prefill_time_s
    assert r.output_tokens_per_s_per_gpu == pytest.approx(r.output_tokens_per_s / 8, rel=1e-12)
    # The mean decode step over contexts 513..575 sits near the step at the middle context, 512 + 32.
    assert r.tpot_s == pytest.approx(r.decode_step_time_s, rel=0.01)


def test_closed_loop_in_lockstep_is_the_static_batch():
    # 8 requests of 1024 tokens fit one step of TensorRT-LLM (its 8192-token budget sized to 8 + 1024 + 1500):
    # they are prefilled together, decode together and finish together, and the clients' next requests come
    # back together one front-end round trip later, so every wave repeats the static batch; the client sees
    # the front end's 10 ms on top of the engine's TTFT.
    static = serve(batch=8, prompt_len=1024, output_len=16, strategy="tp=1")
    closed = serve(batch=8, prompt_len=1024, output_len=16, strategy="tp=1", mode="concurrency")
    assert closed.ttft_s == pytest.approx(static.ttft_s + 0.010, rel=1e-9)
    assert closed.tpot_s == pytest.approx(static.tpot_s, rel=1e-9)


def test_closed_loop_beyond_the_step_budget_staggers_the_prompts():
    # 32 prompts of 1024 tokens need 4 steps of 8192: later prompts wait, so the mean TTFT exceeds one
    # step of 8 prompts and new prompts then join running decodes (TPOT above a pure decode step).
    r = serve(batch=32, prompt_len=1024, output_len=64, strategy="tp=1", mode="concurrency")
    eight = serve(batch=8, prompt_len=1024, output_len=64, strategy="tp=1")
    assert r.ttft_s > eight.ttft_s
    assert r.tpot_s > r.decode_step_time_s


def test_rate_mode_is_deterministic_and_ordered():
    kwargs = {"mode": "rate", "request_rate": 20.0, "num_requests": 300, "prompt_len": 512, "output_len": 64,
              "strategy": "tp=2", "max_ttft": 0.2, "max_tpot": 0.02}
    a, b = serve(**kwargs), serve(**kwargs)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    for name, p in a.latency.items():
        assert p["p50"] <= p["p90"] <= p["p99"], name
    assert 0.0 <= a.goodput["fraction"] <= 1.0
    assert a.goodput["requests_per_s"] == pytest.approx(a.goodput["fraction"] * a.requests_per_s, rel=1e-12)
    # An underloaded deployment serves what arrives: 300 requests over the span from the first arrival to the
    # last finish, about one end-to-end latency after the last arrival (17.34 s with seed 0).
    from madmax.serve.modes import poisson_arrivals

    span = poisson_arrivals(20.0, 300, 0)[-1] + a.latency["e2e_latency_s"]["mean"]
    assert a.requests_per_s == pytest.approx(300 / span, rel=0.02)


def test_rate_mode_seed_changes_arrivals():
    kwargs = {"mode": "rate", "request_rate": 50.0, "num_requests": 200, "prompt_len": 256, "output_len": 32}
    assert serve(seed=1, **kwargs).ttft_s != serve(seed=2, **kwargs).ttft_s


def test_saturation_picks_the_fastest_batch_within_memory():
    r = serve(mode="saturation", prompt_len=1024, output_len=128, strategy="tp=1")
    assert 1 <= r.batch <= r.max_batch_by_memory
    smaller = serve(mode="concurrency", batch=max(1, r.batch // 2), prompt_len=1024, output_len=128, strategy="tp=1")
    assert r.output_tokens_per_s >= smaller.output_tokens_per_s


def test_a_batch_beyond_the_kv_pool_does_not_fit():
    r = serve(batch=4096, prompt_len=4096, output_len=1024, strategy="tp=1")
    assert not r.fits
    assert "allowed: batch <=" in r.fits_reason and str(r.max_batch_by_memory) in r.fits_reason
    assert r.max_batch_by_memory < 4096


def test_kv_pool_by_hand():
    # TensorRT-LLM gives the KV cache 0.9 of what weights, step activations and the 3 GiB reserve leave.
    r = serve(batch=8, prompt_len=1024, output_len=1024, strategy="tp=1", stack="trtllm")
    m = r.memory
    pool = 0.9 * (m["capacity"] - m["weights"] - m["activations"] - m["reserved"])
    assert m["kv_pool"] == pytest.approx(pool, rel=1e-12)
    # 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B per token; 2048 tokens per request.
    assert r.max_batch_by_memory == int(pool // (131_072 * 2048))
    # vLLM: 0.9 of all HBM, less the rest.
    v = serve(batch=8, prompt_len=1024, output_len=1024, strategy="tp=1", stack="vllm").memory
    assert v["kv_pool"] == pytest.approx(0.9 * v["capacity"] - v["weights"] - v["activations"] - v["reserved"])


def test_disaggregated_adds_the_kv_transfer():
    r = serve(mode="disaggregated", batch=16, prompt_len=2048, output_len=64,
              strategy="prefill_workers=4,decode_workers=1,decode_tp=4")
    assert r.strategy.startswith("prefill_workers=4,prefill_tp=1")
    assert any("KV cache of a prompt sent" in a for a in r.assumptions)
    assert r.ttft_s >= r.prefill_time_s * 0.99
    assert r.fits


def test_fp8_weights_and_cache_halve_the_memory():
    bf16 = serve(batch=8, prompt_len=1024, output_len=128, strategy="tp=1")
    fp8 = serve(batch=8, prompt_len=1024, output_len=128, strategy="tp=1", dtype="fp8", kv_dtype="fp8")
    assert fp8.kv_cache_bytes_per_token == bf16.kv_cache_bytes_per_token / 2
    assert fp8.weights_bytes_per_gpu < 0.6 * bf16.weights_bytes_per_gpu
    assert fp8.tpot_s < bf16.tpot_s


def test_int4_is_weight_only():
    r = serve(batch=1, prompt_len=128, output_len=32, strategy="tp=1", dtype="int4")
    assert r.dtype == "int4"
    # 0.515625 B per layer parameter, the embedding and head in bf16.
    assert r.weights_bytes_per_gpu == pytest.approx(6_979_584_000 * 0.515625 + 2 * (1_050_673_152 + 4096))


def test_trace_shows_a_prefill_and_a_decode_step(tmp_path):
    from madmax.report.trace import write_trace

    r = serve(batch=4, prompt_len=256, output_len=32, strategy="tp=2,pp=2", keep_schedule=True)
    path = tmp_path / "t.json"
    write_trace(r, path)
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["pid"], e["name"].split(":")[0]) for e in events if e["ph"] == "X"}
    for pid in (0, 1):
        assert (pid, "prefill") in names and (pid, "decode") in names


# --- the engine loop on its own ---------------------------------------------------------------------


def run_alone(reqs: Requests, *, mixed: bool = True, kv_tokens: float = 1e9, reserve_full: bool = True,
              admit_lag: bool = False) -> Engine:
    """One engine with a 100-token budget, every request submitted at its arrival, every step 1 s whatever
    it holds; the engine after the run (its requests are `.r`)."""
    engine = Engine(reqs, Scheduler(budget=100, max_batch=8, chunked=True, mixed=mixed, kv_tokens=kv_tokens,
                                    reserve_full=reserve_full, admit_lag=admit_lag), lambda step: 1.0)
    for i, arrival in enumerate(reqs.arrival):
        engine.submit(i, float(arrival))
    run_engines([engine])
    return engine


def one_step_at_a_time(engines: list[Clocked]) -> None:
    """The reference for `run_engines`: only the step that starts first of all engines' is taken, one step a
    time, so every request handed on reaches its engine before any later step is planned."""
    while True:
        times = [e.next_event() for e in engines]
        if min(times) == math.inf:
            return
        engines[times.index(min(times))].run_until(min(times))


def disaggregated_web(prefill: int, decode: int, reqs: Requests, concurrency: int, *, admit_lag: bool,
                      reserve_full: bool, ranks: int = 1) -> list[Clocked]:
    """Prefill-only and decode-only engines handing requests on in turn, round-robin; a closed loop of
    `concurrency` clients, client c sending requests c, c + concurrency, ... A step's time is linear in its tokens
    and the keys it reads (a stretch of decode steps is then timed exactly), a prefill engine's slower per token.
    With `ranks` > 1 a decode worker is an attention-data-parallel group of that many ranks (its step the sum of
    theirs: linear too, where the slowest rank's would change slope within a stretch). Every hand-over checks
    that the engine has not started a step after the request reaches it."""
    rules = dict(budget=64, max_batch=4, chunked=True, mixed=True, kv_tokens=4000.0, reserve_full=reserve_full,
                 admit_lag=admit_lag)
    turns = {"p": 0, "d": 0}
    started: dict[int, float] = {}  # per engine, the start of the last step it took

    def watch(engine: Clocked) -> Clocked:
        step = engine._step

        def stepped(until: float) -> bool:
            before = engine.clock
            done = step(until)
            if engine.clock > before:
                started[id(engine)] = engine.cutoff  # a step's (a stretch's last step's) start
            return done

        engine._step = stepped
        return engine

    def hand(engine: Clocked, request: int, at: float) -> None:
        last = started.get(id(engine), -math.inf)
        assert at >= last, f"request {request} reaches an engine at {at} after its step at {last}"
        engine.submit(request, at)

    def to_decode(request: int, at: float) -> None:
        hand(decoders[turns["d"] % decode], request, at + 0.25)
        turns["d"] += 1

    def to_prefill(request: int, at: float) -> None:
        hand(prefillers[turns["p"] % prefill], request, at)
        turns["p"] += 1

    def replace(request: int, at: float) -> None:
        if request + concurrency < len(reqs):
            reqs.arrival[request + concurrency] = at + 0.1
            to_prefill(request + concurrency, at + 0.1)

    prefillers = [watch(Engine(reqs, Scheduler(**rules), lambda step: 0.5 + 0.01 * step.tokens, prefill_only=True,
                               on_prefilled=to_decode)) for _ in range(prefill)]
    def decode_s(step: Step) -> float:
        return 0.2 + 0.003 * step.tokens + 1e-4 * step.decode_kv_tokens

    def decoder() -> Clocked:
        if ranks == 1:
            return Engine(reqs, Scheduler(**rules), decode_s, decode_only=True, on_finish=replace)
        group = [Engine(reqs, Scheduler(**rules), decode_s, decode_only=True, on_finish=replace) for _ in range(ranks)]
        return Group(group, lambda steps: sum(map(decode_s, steps)), Router(DPRouter.ROUND_ROBIN))

    decoders = [watch(decoder()) for _ in range(decode)]
    for i in range(concurrency):
        to_prefill(i, 0.0)
    return [*prefillers, *decoders]


def run_web(loop, prefill: int, decode: int, concurrency: int, prompts: list[int], outputs: list[int], **rules
            ) -> Requests:
    n = len(prompts)
    reqs = Requests(arrival=np.zeros(n), prompt=np.array(prompts), output=np.resize(outputs, n))
    loop(disaggregated_web(prefill, decode, reqs, min(concurrency, n), **rules))
    return reqs


WEB = dict(concurrency=st.integers(1, 12), prompts=st.lists(st.integers(1, 150), min_size=12, max_size=40),
           outputs=st.lists(st.integers(1, 60), min_size=12), admit_lag=st.booleans(), reserve_full=st.booleans())


@settings(max_examples=40, deadline=None)
@given(decode=st.integers(1, 4), ranks=st.sampled_from([1, 1, 2, 3]), **WEB)
# Request 4 reaches its decoder at 14.5601 s, the start of the step that finishes request 3 there: taken one step
# at a time the clock is 14.5601 and request 4 joins that step; after a stretch of steps it was 14.5601 + 2e-15,
# and request 4 waited a step (0.22 s). Ties on the same grid of step times now join the step (`loop.TIE_S`).
@example(decode=2, ranks=1, concurrency=4, prompts=[1, 16, 73, 103, 107, 150, 1, 1, 1, 1, 1, 1],
         outputs=[39, 37, 1, 49, 1, 9, 1, 1, 1, 1, 1, 1], admit_lag=False, reserve_full=False)
def test_engines_handing_requests_on_match_one_step_at_a_time(decode, ranks, concurrency, prompts, outputs, **rules):
    # run_engines lets an engine that only decodes run to its next completion at once. With one prefill worker
    # (which takes the requests in the order they come) every request's times are those of taking one step at a
    # time in the order the steps start. Before, a decode worker ran past the time a prefill worker handed it a
    # request: DeepSeek-V3 disaggregated on 64 H100 at concurrency 6 gave a mean TTFT 8% high.
    fast = run_web(run_engines, 1, decode, concurrency, prompts, outputs, ranks=ranks, **rules)
    reference = run_web(one_step_at_a_time, 1, decode, concurrency, prompts, outputs, ranks=ranks, **rules)
    np.testing.assert_allclose(fast.first_token, reference.first_token, rtol=1e-9)
    np.testing.assert_allclose(fast.finish, reference.finish, rtol=1e-9)
    assert not np.isnan(reference.finish).any()


@settings(max_examples=40, deadline=None)
@given(prefill=st.integers(2, 3), decode=st.integers(1, 4), **WEB)
def test_no_engine_is_handed_a_request_in_its_past(prefill, decode, concurrency, prompts, outputs, **rules):
    # Several prefill workers take turns, so the order requests are handed on in decides which worker gets one:
    # the times may differ from the one-step reference, but no engine may ever be handed a request that should
    # have joined a step it has already taken (checked by every hand-over), and every request finishes.
    reqs = run_web(run_engines, prefill, decode, concurrency, prompts, outputs, **rules)
    assert not np.isnan(reqs.finish).any() and (reqs.finish >= reqs.first_token).all()


def test_prefill_rounds_and_batch_ladder():
    # 20 prompts, 8 to a step: two full steps and one of the 4 left; one prompt is one step.
    assert prefill_rounds(20, 8) == [8, 8, 4] and prefill_rounds(16, 8) == [8, 8] and prefill_rounds(1, 8) == [1]
    assert batch_ladder(12) == [1, 2, 4, 8, 12] and batch_ladder(16) == [1, 2, 4, 8, 16] and batch_ladder(1) == [1]


def test_engine_by_hand():
    # Two requests arrive at 0 with 10-token prompts and 3 output tokens; one step takes 1 s whatever it
    # holds; budget 100 tokens: step 1 prefills both (first tokens at t=1), steps 2 and 3 decode (t=3).
    reqs = run_alone(Requests(arrival=np.zeros(2), prompt=np.full(2, 10), output=np.full(2, 3))).r
    assert list(reqs.first_token) == [1.0, 1.0]
    assert list(reqs.finish) == [3.0, 3.0]


def test_engine_budget_chunks_a_prompt():
    # A 250-token prompt under a 100-token budget is prefilled in 3 chunked steps (first token at t=3).
    reqs = run_alone(Requests(arrival=np.zeros(1), prompt=np.full(1, 250), output=np.full(1, 2))).r
    assert reqs.first_token[0] == 3.0 and reqs.finish[0] == 4.0


def test_engine_separate_batches_delay_decodes():
    # SGLang-style: request 1 arrives at t=1.5 while request 0 decodes; its prefill step (t 2..3) holds
    # request 0's decoding, which finishes one step later than with mixed batches.
    def run(mixed: bool) -> float:
        reqs = Requests(arrival=np.array([0.0, 1.5]), prompt=np.full(2, 10), output=np.full(2, 4))
        return float(run_alone(reqs, mixed=mixed).r.finish[0])

    assert run(mixed=True) == 4.0
    assert run(mixed=False) == 5.0


def test_overlap_scheduling_admits_an_arrival_one_step_later():
    # Request 0 arrives at 0: prefill [0, 1], decodes after. Request 1 arrives at 1.5, during the decode step
    # [1, 2]: without overlap it is prefilled in [2, 3]; with overlap the step [2, 3] was scheduled at t = 1,
    # before it arrived, so it is prefilled in [3, 4]. An idle engine takes an arrival at once, overlap or not.
    def first_token(lag: bool) -> float:
        reqs = Requests(arrival=np.array([0.0, 1.5]), prompt=np.full(2, 10), output=np.full(2, 6))
        return float(run_alone(reqs, admit_lag=lag).r.first_token[1])

    assert first_token(False) == 3.0 and first_token(True) == 4.0
    idle = Requests(arrival=np.array([5.0]), prompt=np.full(1, 10), output=np.full(1, 2))
    assert run_alone(idle, admit_lag=True).r.first_token[0] == 6.0


def test_engine_admits_within_the_kv_pool():
    # A pool of 25 tokens holds two requests of 10 + 2 tokens, not three: the third waits for a finish.
    reqs = run_alone(Requests(arrival=np.zeros(3), prompt=np.full(3, 10), output=np.full(3, 2)), kv_tokens=25).r
    assert list(reqs.finish) == [2.0, 2.0, 4.0]


@settings(max_examples=50, deadline=None)
@given(span=st.floats(0.0, 100.0), first=st.floats(0.01, 2.0), slope=st.floats(0.0, 0.1))
def test_steps_to_reach_is_the_first_step_past_the_span(span, first, slope):
    m = _steps_to_reach(span, first, slope)
    total = lambda k: k * first + k * (k - 1) / 2 * slope  # noqa: E731
    assert m >= 1
    assert total(m) >= span - 1e-9
    assert m == 1 or total(m - 1) < span + 1e-9


def test_percentiles_by_hand():
    p = percentiles([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1])
    assert p["mean"] == 2.5 and p["p50"] == 2.0 and p["p99"] == 4.0
    weighted = percentiles([1.0, 10.0], [9, 1])
    assert weighted["p50"] == 1.0 and weighted["p99"] == 10.0


def test_on_demand_cache_preempts_the_newest_request():
    # Pool of 25 tokens, two requests of 10 + 10 tokens, 1 s steps, room in the budget. t=1: both prompts
    # (20 tokens held), first tokens. t=2, t=3: both decode (22, 24 held). The next decode needs 26: request 1
    # (the newer) is preempted, its 12 tokens freed; request 0 decodes alone while request 1 waits to
    # recompute its 10 + 3 tokens, which first fit (12 + 13 = 25, with room kept for request 0's next token)
    # only once request 0 has finished at t=10 (it had 7 tokens left); request 1 then recomputes (t=11) and
    # decodes its last 6 tokens (t=17). Its first token stays at t=1.
    reqs = Requests(arrival=np.zeros(2), prompt=np.full(2, 10), output=np.full(2, 10))
    engine = run_alone(reqs, kv_tokens=25, reserve_full=False)
    assert engine.preemptions == 1
    assert list(reqs.first_token) == [1.0, 1.0]
    assert list(reqs.finish) == [10.0, 17.0]


def test_a_step_that_preempts_admits_no_waiting_request():
    # vLLM v1 schedules the running requests first and admits waiting ones only in a step that preempted none
    # (`if not preempted_reqs`): a request preempted for room is not re-admitted into the room it just freed, to be
    # preempted again. Without that rule an on-demand cache thrashed (Llama-3.1-70B on 2 H100 under vLLM,
    # 32 clients of 8192/1024 tokens: 12,462 preemptions of 640 requests, TPOT 359 ms where 52 ms was measured).
    reqs = Requests(arrival=np.zeros(6), prompt=np.full(6, 10), output=np.full(6, 12))
    engine = Engine(reqs, Scheduler(budget=8, max_batch=8, chunked=True, mixed=True, kv_tokens=60,
                                    reserve_full=False), lambda step: 1.0)
    make_room, prefill_work = engine._make_room, engine._prefill_work
    preempted, admitted_after = [False], []

    def room() -> bool:
        before = engine.preemptions
        make_room()
        preempted[0] = engine.preemptions > before
        return preempted[0]

    def work(**admit: bool):
        waiting = len(engine.waiting)
        out = prefill_work(**admit)
        if preempted[0] and len(engine.waiting) < waiting:
            admitted_after.append(engine.clock)
        return out

    engine._make_room, engine._prefill_work = room, work
    for i in range(6):
        engine.submit(i, 0.0)
    run_engines([engine])
    assert engine.preemptions > 0 and not admitted_after
    assert not np.isnan(reqs.finish).any()


def test_an_interval_no_request_has_is_none_not_nan(tmp_path):
    """Requests of one output token have no TPOT or inter-token gap: None (null in JSON, '-' printed), never
    NaN, which is not JSON (issue 28)."""
    import math

    from typer.testing import CliRunner

    from madmax.cli import app

    assert percentiles([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    arrivals = tmp_path / "one_token.csv"
    arrivals.write_text("arrival_s,prompt_len,output_len\n0,128,1\n0.1,128,1\n")
    args = ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task", "inference", "--mode",
            "rate", "--arrivals", str(arrivals)]
    shown = CliRunner().invoke(app, [*args, "--json"])
    assert shown.exit_code == 0 and "NaN" not in shown.output
    latency = json.loads(shown.output)["latency"]
    assert latency["tpot_s"]["p99"] is None and latency["itl_s"]["mean"] is None
    assert math.isfinite(latency["ttft_s"]["p99"])
    printed = CliRunner().invoke(app, args)
    assert printed.exit_code == 0 and "nan" not in printed.output.lower()


def test_a_static_batch_of_millions_is_answered_in_closed_form():
    """Its prefill's full steps are timed once and counted (issue 28: 10,000,000 prompts took minutes): with
    64 prompts of 128 tokens a step (trtllm's 8192-token budget), every 640 more prompts add ten equal steps."""
    def prefill(batch: int) -> float:
        return api.simulate("llama-3-8b", "dgx-h100", 1, task="inference", mode="static", batch=batch,
                            prompt_len=128, output_len=16).prefill_time_s

    ten, twenty, thirty = prefill(640), prefill(1280), prefill(1920)
    assert twenty - ten == pytest.approx(ten, rel=1e-12) and thirty - twenty == pytest.approx(ten, rel=1e-12)
    assert prefill(6400) == pytest.approx(10 * ten, rel=1e-12)  # 100 steps
    assert prefill(10_000_000) > 0  # 128 steps of 78,137 prompts (the sized launch widens the budget): answered
