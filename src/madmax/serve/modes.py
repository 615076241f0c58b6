"""The serving modes: how requests reach the engines, and what is measured.

- static: `batch` requests of prompt_len tokens start together: one prefill step of the batch (the
  time to first token), then output_len - 1 decode steps as the context grows; TPOT is their mean and
  output tokens/s = replicas x batch x output_len / (prefill + (output_len - 1) x TPOT).
- concurrency: a closed loop, as benchmark clients with a maximum concurrency measure: `batch` clients
  per replica, all sending at t = 0, each sending its next request when its last token arrives (the front
  end's round trip, `ServingStack.frontend_s`, later at the engine); means over `num_requests` requests
  (default 20 per client: aiperf's profiling phase as AIConfigurator runs it; its warm-up phase drains
  before the profiling phase starts, so the measured requests start from an idle engine).
- saturation: every request queued: the closed loop at each batch up to the memory limit (powers of
  two and the limit), the one with the most output tokens/s reported.
- rate: Poisson arrivals at `request_rate` (or a CSV trace) spread round-robin over the engines;
  percentiles of TTFT, TPOT, inter-token latency and end-to-end latency, and goodput.
- disaggregated: prefill workers and decode workers; a request's KV cache travels from one to the
  other over the fabric after its prefill.

A replica with pp pipeline stages runs pp engines (micro-batch queues, each with 1/pp of the replica's
requests), so a deployment of dp replicas has dp x pp engines (`Deployment.engines`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from madmax.parallel.serving import Step
from madmax.program.serving import (
    Runtime,
    StepProgram,
    build_step,
    group_step_time,
    round_time,
    step_period,
    step_time,
)
from madmax.serve.deployment import Replica
from madmax.serve.group import Group, Router
from madmax.serve.lengths import Lengths
from madmax.serve.loop import Engine, Requests, Scheduler, Tokens, run_engines
from madmax.sim import Schedule, schedule

# Trapezoid samples of a long decode (the step time is piecewise linear in the context).
DECODE_SAMPLES = 17
# Requests simulated per client when num_requests is not given: AIConfigurator's benchmark runs aiperf with
# --num-requests 20 x concurrency after --warmup-request-count 2 x concurrency (ai-dynamo/aiconfigurator
# src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2, BENCH_MULTI_ROUND=20), and
# aiperf finishes each phase before starting the next (ai-dynamo/aiperf aiperf/timing/credit_issuing_strategy.py
# _execute_phases: "Wait for the credits to be returned before continuing to the next phase").
REQUESTS_PER_SLOT = 20
# Requests of a run at a request rate (rate mode, disaggregated workers at a rate) unless num_requests says: a p99
# rests on 10 of them.
RATE_REQUESTS = 1000
# Requests per client of each batch a saturation solve tries (its steady throughput shows in fewer rounds).
SATURATION_PER_SLOT = 10


@dataclass
class Outcome:
    """What a mode measured over the whole deployment: per-request latencies (each with the number of
    requests it stands for, `weight`: one simulated engine stands for its identical peers) and rates.

    tpot_s and tpot_weight cover the requests with more than one output token.
    """

    batch: int
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    weight: np.ndarray
    tpot_s: np.ndarray
    tpot_weight: np.ndarray
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    requests_per_s: float
    tokens: Tokens = field(default_factory=Tokens)
    notes: list[str] = field(default_factory=list)
    # share of the engines' step time during which a waiting request was held, by the limit that held it
    blocked: dict[str, float] = field(default_factory=dict)
    busy_fraction: float = 0.0  # of the open loop's engines x span, the time they were taking steps
    cached_share: float = 0.0  # of the prompt tokens admitted, those found in the prefix cache
    # requests per second that arrived (open loop): (requests - 1) / (last arrival - first arrival), the rate
    # the simulated requests were drawn at, not the nominal one (a Poisson sample of 1,000 strays by +-3%)
    arrival_rate: float | None = None

    def mean(self, name: str) -> float:
        values = getattr(self, name)
        weights = self.tpot_weight if name == "tpot_s" else self.weight
        return float(np.average(values, weights=weights)) if len(values) else 0.0


@dataclass(frozen=True)
class Deployment:
    """A replica's plan and memory, its engine's runtime, how many replicas serve, and the tokens of a
    request (prompt + output) its KV pool is sized by."""

    replica: Replica
    runtime: Runtime
    replicas: int
    context: float
    unbounded_kv: bool = False  # simulate as though the KV pool had room (a plan that does not fit)
    prefix: int = 0  # prompt tokens every request shares, cached once per engine (prefix caching)
    prefix_hit: float = 1.0  # share of the requests that find it cached
    width: int = 1  # speculative decoding: tokens a decoding request's step verifies (k drafted + 1)
    tokens_per_step: float = 1.0  # speculative decoding: tokens a decoding request gains a step on average
    draft_fraction: float = 0.0  # a drafted token's time over a plain decode step's (a draft head), 0: free
    _simulated: dict[Step, tuple[float, StepProgram, Schedule]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def pp(self) -> int:
        return self.replica.plan.pp

    @property
    def engines(self) -> int:
        return self.replicas * self.pp

    @property
    def attention_dp(self) -> int:
        """Replicas that step together as one engine's ranks (attention data parallelism), else 1."""
        e = self.replica.plan.experts
        return e.attention_dp if e is not None else 1

    def step_s(self, step: Step) -> float:
        """The step's time in closed form (`program.serving.step_time`), every rank of an attention-data-parallel
        engine running it, for the loop; with speculative decoding, its drafting too (`draft_s`)."""
        return step_time(self.replica.plan, self.runtime, step) + self.draft_s(step)

    def group_step_s(self, steps: tuple[Step, ...]) -> float:
        """The step of an attention-data-parallel engine whose ranks run `steps` (`group_step_time`), after the
        slowest rank's drafting."""
        drafts = max((self.draft_s(s) for s in steps), default=0.0)
        return group_step_time(self.replica.plan, self.runtime, steps) + drafts

    def draft_s(self, step: Step) -> float:
        """Drafting the k = width - 1 tokens a verifying step checks: k passes of a draft head over the decoding
        requests, each `draft_fraction` of a plain decode step of them (0 for n-gram drafts, found on the host);
        or, with a draft model (`Replica.draft_plan`), k decode steps of it and its prefill of the step's prompt
        chunks (it keeps its own cache of every prompt)."""
        drafter = self.replica.draft_plan
        plain = Step(decode=step.decode, decode_kv_tokens=step.decode_kv_tokens, sampled=step.decode)
        if drafter is not None:
            drafts = (step.decode_width - 1) * step_time(drafter, self.runtime, plain) if step.decode else 0.0
            prompts = step_time(drafter, self.runtime, Step(prefill=step.prefill)) if step.prefill else 0.0
            return drafts + prompts
        if step.decode_width == 1 or not self.draft_fraction:
            return 0.0
        return (step.decode_width - 1) * self.draft_fraction * step_time(self.replica.plan, self.runtime, plain)

    def decode_step(self, batch: int, context: float) -> Step:
        """A decode step of `batch` sequences each reading `context` keys (verifying `width` tokens each)."""
        return Step(decode=batch, decode_kv_tokens=batch * context, sampled=batch * self.width,
                    decode_width=self.width)

    def engine(self, requests: Requests, share: float, **kwargs) -> Engine | Group:
        """One engine serving `requests` with `share` of a replica's KV pool per rank: an `Engine`, or with
        attention data parallelism a `Group` of `attention_dp` of them and the stack's router. `kwargs` go to
        each `Engine`."""
        a = self.attention_dp
        if a == 1:
            return Engine(requests, self.scheduler(share), self.step_s, **kwargs)
        stack = self.runtime.stack
        ranks = [Engine(requests, self.scheduler(share), self.step_s, **kwargs) for _ in range(a)]
        return Group(ranks, self.group_step_s, Router(stack.dp_router, stack.dp_waiting_weight))

    def simulate(self, step: Step) -> tuple[float, StepProgram, Schedule]:
        """The step's program, simulated (once per step): (time of the step, program, schedule). A prefill
        round's time is when its last micro-batch leaves the last stage; a decode step's is its period."""
        if step not in self._simulated:
            built = build_step(self.replica.plan, self.runtime, step, "prefill" if step.prefill else "decode")
            timeline = schedule(built.program)
            stack = self.runtime.stack
            seconds = (round_time(built, timeline) if step.prefill
                       else step_period(built, timeline, stack.host_step_s, stack.host_overlaps_gpu)
                       + self.draft_s(step))  # the draft head's passes are not in the program
            self._simulated[step] = seconds, built, timeline
        return self._simulated[step]

    def scheduler(self, share: float = 1.0) -> Scheduler:
        """One engine's scheduling rules: the stack's, with its share of the replica's KV pool in tokens
        of the run's request length (`kv_bytes_per_sequence` / context)."""
        stack = self.runtime.stack
        per_token = self.replica.kv_bytes_per_sequence / self.context if self.replica.kv_bytes_per_sequence else 0.0
        kv = self.replica.pool_bytes * share / per_token if per_token and not self.unbounded_kv else math.inf
        return Scheduler(budget=stack.max_num_tokens, max_batch=max(1, stack.max_batch // self.pp),
                         chunked=stack.chunked_prefill, mixed=stack.mixed_batches, kv_tokens=kv,
                         reserve_full=stack.reserve_full_kv, admit_lag=stack.host_overlaps_gpu,
                         prefix=self.prefix, prefix_hit=self.prefix_hit, width=self.width,
                         tokens_per_step=self.tokens_per_step)

    def prefill_step(self, batch: int, prompt: int) -> Step:
        """A prefill step of `batch` prompts of `prompt` tokens on a warm engine: with prefix caching the share
        prefix_hit of them (rounded) computes only the tokens after the shared prefix, reading all of them."""
        hits = round(batch * self.prefix_hit) if self.prefix else 0
        return Step(prefill=((prompt - self.prefix, prompt),) * hits + ((prompt, prompt),) * (batch - hits),
                    sampled=batch)


def prefill_rounds(prompts: int, per_step: int) -> list[int]:
    """Prompts in each of the consecutive prefill steps of `prompts` waiting prompts, `per_step` a step."""
    return [per_step] * (prompts // per_step) + ([prompts % per_step] if prompts % per_step else [])


def batch_ladder(cap: int) -> list[int]:
    """Batches tried up to `cap`: the powers of two below it, and `cap`."""
    return sorted({2**i for i in range(int(math.log2(cap)) + 1)} | {cap})


def mean_decode_s(dep: Deployment, batch: int, prompt: int, output: int) -> float:
    """Mean time per output token of decoding: the mean decode step over contexts prompt + 1 .. prompt + output
    - 1 (exact for up to DECODE_SAMPLES steps, else the trapezoid rule on DECODE_SAMPLES evenly spaced steps),
    over the tokens a step gains (speculative decoding: tokens_per_step)."""
    steps = output - 1
    if steps <= 0:
        return 0.0
    if steps <= DECODE_SAMPLES:
        mean = sum(dep.step_s(dep.decode_step(batch, prompt + i)) for i in range(1, steps + 1)) / steps
    else:
        xs = np.linspace(1, steps, DECODE_SAMPLES)
        ys = [dep.step_s(dep.decode_step(batch, prompt + x)) for x in xs]
        mean = float(np.trapezoid(ys, xs) / (steps - 1))
    return mean / dep.tokens_per_step


def static(dep: Deployment, batch: int, prompt: int, output: int, ttft_s: float) -> Outcome:
    """Static batching; `ttft_s` is the simulated prefill round of the batch (all micro-batches)."""
    per_engine = math.ceil(batch / dep.pp)
    tpot = mean_decode_s(dep, per_engine, prompt, output)
    e2e = ttft_s + (output - 1) * tpot
    n = dep.replicas * batch
    decodes = 1 if output > 1 else 0  # a request of one output token has no TPOT
    return Outcome(batch=batch, ttft_s=np.full(1, ttft_s), e2e_s=np.full(1, e2e), weight=np.full(1, float(n)),
                   tpot_s=np.full(decodes, tpot), tpot_weight=np.full(decodes, float(n)),
                   output_tokens_per_s=n * output / e2e, prompt_tokens_per_s=n * prompt / e2e, requests_per_s=n / e2e)


def _shares(total: int, parts: int) -> list[int]:
    """`total` split over `parts` as evenly as possible (round-robin)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def closed_loop(dep: Deployment, batch: int, lengths: Lengths, num_requests: int | None) -> Outcome:
    """`batch` requests in flight per replica, each finished one replaced at once (per engine; an engine with
    attention data parallelism holds the clients of its a replicas)."""
    outcomes = []
    a = dep.attention_dp
    for concurrency, engines in _engine_groups(batch, dep.pp):
        n = max(concurrency, num_requests // dep.engines) if num_requests else REQUESTS_PER_SLOT * concurrency
        outcomes.append((_closed_engine(dep, a * concurrency, lengths, a * n, 1 / dep.pp),
                         engines * dep.replicas // a))
    return _combine(outcomes, batch, dep.runtime.stack.frontend_s)


def _engine_groups(batch: int, pp: int) -> list[tuple[int, int]]:
    """(requests in flight, engines with that many) of a replica's pp engines, zero-load ones left out."""
    shares = _shares(batch, pp)
    return [(c, shares.count(c)) for c in sorted(set(shares)) if c > 0]


def _closed_engine(dep: Deployment, concurrency: int, lengths: Lengths, n: int, share: float) -> Requests:
    prompt, output = lengths.draw(n)
    reqs = Requests(arrival=np.zeros(n), prompt=prompt, output=output)
    sent = [concurrency]
    round_trip = dep.runtime.stack.frontend_s  # the last token's way to the client, the next request's back

    def replace(_: int, at: float) -> None:
        if sent[0] < n:
            reqs.arrival[sent[0]] = at + round_trip
            engine.submit(sent[0], at + round_trip)
            sent[0] += 1

    engine = dep.engine(reqs, share, on_finish=replace)
    for i in range(min(concurrency, n)):
        engine.submit(i, 0.0)
    run_engines([engine])
    return reqs


def _combine(groups: list[tuple[Requests, int]], batch: int, frontend_s: float = 0.0) -> Outcome:
    """Latencies and rates of engine groups, each simulated once and standing for `count` engines that
    run side by side: the rates add up. The front end's time per request (`frontend_s`) adds to every TTFT
    and end-to-end latency the client sees."""
    ttft, e2e, weight, tpot, tpot_weight = [], [], [], [], []
    out_rate = prompt_rate = request_rate = 0.0
    cached = prompts = 0.0
    tokens = Tokens()
    busy, blocked = 0.0, {}
    for reqs, count in groups:
        busy += count * reqs.busy_s
        for reason, seconds in reqs.blocked_s.items():
            blocked[reason] = blocked.get(reason, 0.0) + count * seconds
        done = ~np.isnan(reqs.finish)
        many = done & (reqs.output > 1)
        cached += count * reqs.cached_tokens
        prompts += count * float(reqs.prompt[done].sum())
        ttft.append(reqs.first_token[done] - reqs.arrival[done] + frontend_s)
        e2e.append(reqs.finish[done] - reqs.arrival[done] + frontend_s)
        weight.append(np.full(int(done.sum()), float(count)))
        tpot.append((reqs.finish[many] - reqs.first_token[many]) / (reqs.output[many] - 1))
        tpot_weight.append(np.full(int(many.sum()), float(count)))
        span = float(np.nanmax(reqs.finish) - np.min(reqs.arrival))
        out_rate += count * float(reqs.output[done].sum()) / span
        prompt_rate += count * float(reqs.prompt[done].sum()) / span
        request_rate += count * float(done.sum()) / span
        for s, c in zip(reqs.itl.seconds, reqs.itl.counts, strict=True):
            tokens.add(s, c * count)
    return Outcome(batch=batch, ttft_s=np.concatenate(ttft), e2e_s=np.concatenate(e2e), weight=np.concatenate(weight),
                   tpot_s=np.concatenate(tpot), tpot_weight=np.concatenate(tpot_weight), output_tokens_per_s=out_rate,
                   prompt_tokens_per_s=prompt_rate, requests_per_s=request_rate, tokens=tokens,
                   blocked={k: v / busy for k, v in blocked.items()} if busy else {},
                   cached_share=cached / prompts if prompts else 0.0)


def saturation(dep: Deployment, cap: int, lengths: Lengths, num_requests: int | None) -> Outcome:
    """The closed loop at batches 1, 2, 4, ... up to `cap` and at `cap`; the one with the most output
    tokens/s. Without `num_requests` each batch runs SATURATION_PER_SLOT requests per client: what is asked
    of it is its steady throughput, not a benchmark's means over its rounds."""
    candidates = batch_ladder(cap)
    best = None
    for b in candidates:
        result = closed_loop(dep, b, lengths, num_requests or SATURATION_PER_SLOT * b * dep.replicas)
        if best is None or result.output_tokens_per_s > best.output_tokens_per_s:
            best = result
    assert best is not None
    best.notes.append(f"saturation: batches {', '.join(map(str, candidates))} per replica tried; "
                      f"{best.batch} gives the most output tokens/s; TTFT excludes the wait in the queue")
    return best


def open_loop(dep: Deployment, arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> Outcome:
    """Requests arriving at given times, spread round-robin over the engines (an attention-data-parallel
    engine's router spreads its share over its ranks), each engine on its own."""
    groups = []
    engines = dep.engines // dep.attention_dp
    for e in range(engines):
        idx = np.arange(e, len(arrival), engines)
        if not len(idx):
            continue
        reqs = Requests(arrival=arrival[idx], prompt=prompt[idx], output=output[idx])
        engine = dep.engine(reqs, 1 / dep.pp)
        for i in range(len(idx)):
            engine.submit(i, float(reqs.arrival[i]))
        run_engines([engine])
        groups.append((reqs, 1))
    return _combine_open(groups, dep.runtime.stack.frontend_s, dep.attention_dp)


def _combine_open(groups: list[tuple[Requests, int]], frontend_s: float = 0.0, ranks: int = 1) -> Outcome:
    """Open-loop engines (of `ranks` schedulers each) share one clock: rates over the span from the
    deployment's first arrival to its last finish."""
    out = _combine(groups, batch=0, frontend_s=frontend_s)
    first = min(float(np.min(r.arrival)) for r, _ in groups)
    span = max(float(np.nanmax(r.finish)) for r, _ in groups) - first
    done = [(r, ~np.isnan(r.finish)) for r, _ in groups]
    out.output_tokens_per_s = sum(float(r.output[d].sum()) for r, d in done) / span
    out.prompt_tokens_per_s = sum(float(r.prompt[d].sum()) for r, d in done) / span
    out.requests_per_s = sum(int(d.sum()) for _, d in done) / span
    arrivals = np.concatenate([r.arrival for r, _ in groups])
    if len(arrivals) > 1 and np.ptp(arrivals) > 0:
        out.arrival_rate = (len(arrivals) - 1) / float(np.ptp(arrivals))
    engines = ranks * sum(count for _, count in groups)
    out.busy_fraction = sum(r.busy_s for r, _ in groups) / (span * engines) if span > 0 else 0.0
    return out


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    """n arrival times of a Poisson process of `rate` requests/s (exponential gaps), from t = 0."""
    gaps = np.random.default_rng(seed).exponential(1 / rate, n)
    return np.cumsum(gaps) - gaps[0]


@dataclass(frozen=True)
class Disaggregated:
    """Prefill workers and decode workers, and the KV transfer of a prompt between them: seconds for a prompt of
    the given tokens (its cache's bytes over the fabric)."""

    prefill: Deployment
    decode: Deployment
    transfer_s: Callable[[int], float]


def disaggregated(dis: Disaggregated, arrival: np.ndarray | None, concurrency: int, lengths: Lengths,
                  n: int) -> Outcome:
    """Requests prefilled on the prefill workers (their first token), their KV cache sent to a decode
    worker (round-robin), decoded there. A closed loop of `concurrency` requests, or open-loop arrivals."""
    closed = arrival is None
    arrival = np.zeros(n) if arrival is None else arrival
    prompt, output = lengths.draw(n)
    reqs = Requests(arrival=arrival.copy(), prompt=prompt, output=output)
    decoders = [dis.decode.engine(reqs, 1 / dis.decode.pp, decode_only=True)
                for _ in range(dis.decode.engines // dis.decode.attention_dp)]
    counter = {"decode": 0, "prefill": 0, "sent": min(concurrency, n) if closed else n}

    def to_decode(request: int, at: float) -> None:
        decoders[counter["decode"] % len(decoders)].submit(request, at + dis.transfer_s(int(reqs.prompt[request])))
        counter["decode"] += 1

    prefillers = [dis.prefill.engine(reqs, 1 / dis.prefill.pp, prefill_only=True, on_prefilled=to_decode)
                  for _ in range(dis.prefill.engines // dis.prefill.attention_dp)]

    def to_prefill(request: int, at: float) -> None:
        prefillers[counter["prefill"] % len(prefillers)].submit(request, at)
        counter["prefill"] += 1

    round_trip = dis.prefill.runtime.stack.frontend_s

    def replace(_: int, at: float) -> None:
        if counter["sent"] < n:
            reqs.arrival[counter["sent"]] = at + round_trip
            to_prefill(counter["sent"], at + round_trip)
            counter["sent"] += 1

    for engine in decoders:
        engine.on_finish = replace if closed else None
    for i in range(counter["sent"]):
        to_prefill(i, float(reqs.arrival[i]))
    run_engines([*prefillers, *decoders])
    out = _combine_open([(reqs, 1)], round_trip)
    out.batch = concurrency
    if closed:  # clients that wait for their answers set no arrival rate of their own
        out.arrival_rate = None
    return out
