"""A serving engine as a discrete-event loop over its steps (in-flight, or continuous, batching).

Each step the engine's scheduler picks work under a token budget (`ServingStack.max_num_tokens`) and
a cap on running requests, first come first served (Yu et al. 2022, Orca; Kwon et al. 2023, vLLM):

- mixed batches (TensorRT-LLM, vLLM): every decoding request generates a token; prompts being
  prefilled, then waiting requests, fill the rest of the budget. With chunked prefill a prompt takes
  what is left of the budget and continues next step; without it a prompt waits for a step with room
  for all of it.
- separate batches (SGLang): a step is all prefill (while prompts wait and fit) or all decode.

Overlap scheduling (`admit_lag`: TensorRT-LLM's overlap scheduler, SGLang's overlap schedule, vLLM's async
scheduling): the host schedules step n + 1 while step n runs, so a request that arrives during step n joins
step n + 2 at the earliest; an idle engine takes an arrival at once.

KV cache: with `reserve_full` (TensorRT-LLM's GUARANTEED_NO_EVICT) a request is admitted when its whole
cache (prompt and output) fits the pool; otherwise (vLLM, SGLang) blocks are taken as tokens are computed,
a request is admitted when its prompt fits, and when a decode step finds the pool full the most recently
admitted request is preempted: its cache is freed and it waits at the head of the queue to recompute its
prompt and the tokens it had generated (vLLM's recompute preemption). The prefill step that completes a
prompt samples its first token (the time to first token, TTFT, counts from the request's arrival); each
later step with the request generates one more, until it has its output.

Speed: while nothing but decoding happens (no prompt to prefill or admit, no arrival), k steps of
the same requests are taken at once, up to the next completion or arrival. Their keys grow by D per
step, so the step time is nearly linear in the step index; the stretch is timed by its first and last
steps (exact for a step time linear in the keys read). Engines that hand requests to one another (prefill and
decode workers) are advanced together by `run_engines`: each takes steps up to the earliest time any of them can
next hand a request on, which for an engine that only decodes is its next completion, so no engine is handed a
request after it has taken a step that request should have joined.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from madmax.parallel.serving import Step

StepTime = Callable[[Step], float]

# An arrival this close after a step's start counts as before it. A stretch of k decode steps adds k x their
# mean where single steps add one at a time, so the two clocks differ by rounding (~1e-15 s); an arrival that
# ties a step's start (as hand-overs on the same grid of step times do) would otherwise join one step in one
# and the next in the other. A nanosecond is far below any step.
TIE_S = 1e-9


class Recent:
    """A step-time function that remembers its last few answers: a stretch of decode steps is timed by its
    first and last steps, which `next_emission` has often just asked for."""

    def __init__(self, step_time: Callable, size: int = 4) -> None:
        self.step_time, self.size = step_time, size
        self.answers: dict = {}

    def __call__(self, step):
        found = self.answers.get(step)
        if found is None:
            if len(self.answers) >= self.size:
                self.answers.clear()
            found = self.answers[step] = self.step_time(step)
        return found


@dataclass(frozen=True)
class Scheduler:
    """An engine's scheduling rules: token budget per step, most requests running, chunked prefill,
    prefill and decode in one step, the KV cache pool in tokens, and whether a request reserves its
    whole cache at admission (`reserve_full`) or takes it as its tokens are computed."""

    budget: int
    max_batch: int
    chunked: bool
    mixed: bool
    kv_tokens: float
    reserve_full: bool = True
    admit_lag: bool = False
    prefix: int = 0  # prompt tokens every request shares (prefix caching), 0: none
    prefix_hit: float = 1.0  # share of the requests that find the cached prefix
    width: int = 1  # tokens a decoding request's step verifies (speculative decoding: the drafted ones and one)
    tokens_per_step: float = 1.0  # tokens a decoding request gains a step, on average (speculative decoding)


@dataclass(frozen=True)
class Work:
    """An engine's next step: its prompt chunks (request, tokens already prefilled, tokens now), the requests
    whose prompt it completes, and the step they and the decodes make."""

    chunks: tuple[tuple[int, int, int], ...]
    completing: tuple[int, ...]
    step: Step


@dataclass
class Tokens:
    """Inter-token latencies as (seconds per step, tokens generated at that pace) pairs."""

    seconds: list[float] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)

    def add(self, seconds: float, count: float) -> None:
        if count > 0:
            self.seconds.append(seconds)
            self.counts.append(count)


@dataclass
class Requests:
    """Requests as arrays: arrival (s), prompt and output tokens; filled in by the loop (by every engine
    that serves them): first token and finish times (s), and the inter-token latencies of their decode
    steps."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    first_token: np.ndarray = field(init=False)
    finish: np.ndarray = field(init=False)
    itl: Tokens = field(init=False, default_factory=Tokens)
    busy_s: float = field(init=False, default=0.0)  # seconds of steps, summed over the engines
    # seconds of steps while a waiting request could not start, by the limit that held it: a token budget with no
    # room for a prompt beside the running decodes ("budget"), a budget filled by the prompts it took ("steps"),
    # the cap on running requests ("batch") or the KV pool ("kv")
    blocked_s: dict[str, float] = field(init=False, default_factory=dict)
    cached_tokens: float = field(init=False, default=0.0)  # prompt tokens found in the prefix cache, summed

    def __post_init__(self) -> None:
        self.first_token = np.full(len(self.arrival), np.nan)
        self.finish = np.full(len(self.arrival), np.nan)

    def __len__(self) -> int:
        return len(self.arrival)


class Clocked:
    """An engine's clock and its queue of requests not yet arrived, and the loop that drives it: `submit` a
    request at its arrival time, `run_until` takes steps while they start at or before a time. Subclasses say
    when they are `idle`, how arrivals join them (`_arrive`) and what a step is (`_step`)."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.cutoff = 0.0  # the latest arrival the next step may take (overlap scheduling: the last step's start)
        self.arrivals: list[tuple[float, int]] = []  # heap of (time, request) not yet arrived

    @property
    def idle(self) -> bool:
        raise NotImplementedError

    def _arrive(self) -> None:
        raise NotImplementedError

    def _step(self, until: float) -> bool:
        """One step, or a stretch of decode-only steps; False when there is nothing to do."""
        raise NotImplementedError

    def submit(self, request: int, at: float) -> None:
        heapq.heappush(self.arrivals, (at, request))

    def _only_decoding(self) -> bool:
        """Whether the engine's next steps are decode-only (nothing to prefill or admit)."""
        return False

    def _decode_span(self) -> tuple[int, float, float]:
        """For an engine only decoding: k, its decode-only steps up to its next completion (or full pool), and
        the times of the first and the k-th."""
        raise NotImplementedError

    def next_emission(self) -> float:
        """No earlier than this the engine hands a request on (finishes one, or completes a prompt for a decode
        worker) unless a request reaches it first: `next_event`, or for an engine only decoding its next
        completion (a decode step is no faster when it reads more keys, so each of the k takes at least the
        lesser of the first and the k-th), no later than its next arrival (a request of one output token is
        handed on when it is admitted)."""
        if not self._only_decoding():
            return self.next_event()
        k, first_s, last_s = self._decode_span()
        done = self.clock + k * min(first_s, last_s)
        return min(done, self.arrivals[0][0]) if self.arrivals else done

    def _stretch(self, until: float, admit_lag: bool) -> tuple[int, float, float]:
        """The decode-only steps to take now: (k, first and last step times), up to the next completion, and no
        further than the step during which the next arrival (or `until`) comes."""
        k, first, at_k = self._decode_span()
        if k == 1:
            return 1, first, first
        slope = (at_k - first) / (k - 1)
        arrival = self.arrivals[0][0] if self.arrivals else None
        k = stretch_steps(k, first, slope, self.clock, until, arrival, admit_lag)
        return k, first, first + (k - 1) * slope

    def next_event(self) -> float:
        """When the engine can next start a step: now when it has work, else at the next arrival."""
        if not self.idle:
            return self.clock
        return self.arrivals[0][0] if self.arrivals else math.inf

    def run_until(self, until: float) -> None:
        """Take steps while they start at or before `until` (another engine's next event, or the end)."""
        while True:
            self._arrive()
            if self.idle:
                if not self.arrivals or self.arrivals[0][0] > until:
                    return
                self.clock = max(self.clock, self.arrivals[0][0])
                self.cutoff = self.clock  # an idle engine takes the arrival at once
                continue
            if self.clock > until:
                return
            # Nothing admissible while nothing runs would be a request larger than the pool or the budget,
            # which the caller refuses before simulating.
            assert self._step(until), "a waiting request can never be admitted"


class Engine(Clocked):
    """One engine (a replica, or one of a pipelined replica's micro-batch queues) serving requests.

    `submit` hands it a request at its arrival time; `run_until` takes steps while they start before a
    time. Requests that finish are passed to `on_finish(request, time)` (a closed loop submits the next
    one there). `decode_only` engines (disaggregated decode workers) receive requests whose prompt is
    already cached and whose first token is already out.
    """

    def __init__(self, requests: Requests, scheduler: Scheduler, step_time: StepTime, *,
                 on_finish: Callable[[int, float], None] | None = None, decode_only: bool = False,
                 prefill_only: bool = False, on_prefilled: Callable[[int, float], None] | None = None) -> None:
        self.r, self.s, self.step_time = requests, scheduler, Recent(step_time)
        self.on_finish, self.on_prefilled = on_finish, on_prefilled
        self.decode_only, self.prefill_only = decode_only, prefill_only
        super().__init__()
        self.waiting: deque[int] = deque()
        self.prefilling: list[list[int]] = []  # [request, tokens prefilled]
        # heap of (decode steps done when it finishes, request, admission epoch); stale epochs are skipped
        self.decoders: list[tuple[int, int, int]] = []
        self.decoding: dict[int, int] = {}  # request -> its epoch, while it decodes
        self.admitted: list[int] = []  # decoding requests in the order they started (the last is preempted)
        self.num_decoding = 0
        self.decode_keys = 0.0  # keys the decoders read at their next step, summed
        self.decode_steps = 0
        self.used = 0.0  # KV tokens held (reserved or computed)
        self.held: dict[int, float] = {}  # per request, besides the tokens its decode steps added (on-demand caches)
        # per decoder: the keys its first step read and the decode steps done when it started; it reads
        # tokens_per_step more keys a step (a fraction of a token on average with speculative decoding) and, with
        # an on-demand cache, holds as many more tokens (`_keys`, `_release`)
        self.started: dict[int, tuple[int, int]] = {}
        self.recompute: dict[int, int] = {}  # tokens a preempted request had generated, to recompute
        self.epoch = 0
        self.preemptions = 0
        self.prefix_cached = False  # whether the shared prefix's KV cache is held (once a prompt computed it)
        self.admitted_now = 0
        self._blocked: str | None = None  # the limit that kept this step from starting a waiting request

    # -- input ----------------------------------------------------------------------------------------

    def _arrive(self) -> None:
        cutoff = (self.cutoff if self.s.admit_lag else self.clock) + TIE_S
        while self.arrivals and self.arrivals[0][0] <= cutoff:
            self.waiting.append(heapq.heappop(self.arrivals)[1])

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.prefilling or self.num_decoding)

    def _only_decoding(self) -> bool:
        return bool(self.num_decoding) and not (self.waiting or self.prefilling)

    def _decode_span(self) -> tuple[int, float, float]:
        k = self.decode_bound()
        first = self.step_time(self.decode_step())
        return k, first, self.step_time(self.decode_step(k - 1)) if k > 1 else first

    # -- the loop -------------------------------------------------------------------------------------

    def _step(self, until: float) -> bool:
        """One step, or a stretch of decode-only steps; False when there is nothing to do."""
        work = self.plan()
        if work is None:
            return bool(self.decode_only and self.admitted_now)  # admitted requests that were already done
        if not work.chunks:
            return self._decode_stretch(until)
        self.take(work, self.step_time(work.step))
        return True

    def plan(self) -> Work | None:
        """The work of this engine's next step, admitting the waiting requests it takes; None without any."""
        # On-demand caches: the running decoders' next tokens first, as vLLM schedules running requests; a step that
        # had to preempt one admits no waiting request (vLLM v1's scheduler: `if not preempted_reqs`).
        preempted = not self.s.reserve_full and self._make_room()
        chunks, completing = self._prefill_work(admit=not preempted)
        decodes = self.num_decoding if (self.s.mixed or not chunks) and not self.prefill_only else 0
        if not chunks and not decodes:
            return None
        step = Step(prefill=tuple((q, done + q) for _, done, q in chunks), decode=decodes,
                    decode_kv_tokens=self.decode_keys if decodes else 0.0,
                    sampled=decodes * self.s.width + len(completing), decode_width=self.s.width if decodes else 1)
        return Work(tuple(chunks), tuple(completing), step)

    def take(self, work: Work, seconds: float) -> None:
        """Run `work` (from `plan`) as a step of `seconds` from the engine's clock."""
        if not self.s.reserve_full:
            for request, _, q in work.chunks:
                self._hold(request, q)
        self.cutoff = self.clock
        self.clock += seconds
        self._busy(seconds)
        if work.step.decode:
            self._advance_decoders(1, seconds, seconds)
        for request, done, q in work.chunks:
            if done + q < self._prompt(request):
                self._set_prefilled(request, done + q)
        for request in work.completing:
            self._first_token(request)

    def _prompt(self, request: int) -> int:
        """Tokens to prefill: the prompt, and the tokens a preempted request had generated."""
        return int(self.r.prompt[request]) + self.recompute.get(request, 0)

    def _admission_tokens(self, request: int, chunk: int) -> float:
        """KV tokens a request must find free to start: all of its prompt and output when the whole cache is
        reserved, else the chunk it prefills now."""
        if self.s.reserve_full:
            return (self._prompt(request) + int(self.r.output[request]) - self.recompute.get(request, 0)
                    - self._cached(request))
        return chunk

    def _cached(self, request: int) -> int:
        """Prompt tokens of `request` found in the prefix cache: the shared prefix once the engine holds it, for
        the share `prefix_hit` of the requests (request i hits when the fractional part of i x the golden ratio
        is below it: an even spread without a random draw)."""
        if not (self.s.prefix and self.prefix_cached):
            return 0
        return self.s.prefix if (request * 0.6180339887498949) % 1.0 < self.s.prefix_hit else 0

    def _hold(self, request: int, tokens: float) -> None:
        self.used += tokens
        self.held[request] = self.held.get(request, 0.0) + tokens

    def _release(self, request: int) -> None:
        """Free the request's KV tokens: those it was given, and (on-demand caches) those its decode steps added."""
        started = self.started.pop(request, None)
        grown = 0 if started is None or self.s.reserve_full else self.decode_steps - started[1]
        self.used -= self.held.pop(request, 0.0) + grown * self.s.tokens_per_step

    def _prefill_work(self, admit: bool = True) -> tuple[list[tuple[int, int, int]], list[int]]:
        """This step's prompt chunks as (request, tokens already prefilled, tokens now) and the requests
        whose prompt completes, admitting waiting requests (when `admit`) while the budget, batch and pool allow."""
        if self.decode_only:
            self.admitted_now = self._admit_decoders()
            return [], []
        budget = self.s.budget - (self.num_decoding if self.s.mixed else 0)
        chunks: list[tuple[int, int, int]] = []
        completing: list[int] = []
        self._blocked = None
        for entry in self.prefilling:
            if budget <= 0:
                break
            request, done = entry
            left = self._prompt(request) - done
            take = min(left, budget) if self.s.chunked else (left if left <= budget else 0)
            if not self.s.reserve_full:
                room = int(max(0.0, self._free() - sum(q for _, _, q in chunks)))
                if take and room < take and room < budget:
                    self._blocked = "kv"
                take = min(take, room)
            if take == 0:
                self._blocked = self._blocked or ("steps" if chunks else "budget")
                break
            chunks.append((request, done, take))
            budget -= take
            if take == left:
                completing.append(request)
        while admit and self.waiting and budget > 0:
            request = self.waiting[0]
            cached = self._cached(request)
            prompt = self._prompt(request) - cached
            take = min(prompt, budget) if self.s.chunked else (prompt if prompt <= budget else 0)
            need = self._admission_tokens(request, take)
            taken = 0 if self.s.reserve_full else sum(q for _, _, q in chunks)
            running = len(self.prefilling) + self.num_decoding
            if take == 0 or running >= self.s.max_batch or need + taken > self._free():
                if take == 0:  # a full step is the budget at work; none taken beside the decodes, starvation
                    self._blocked = "steps" if chunks else "budget"
                else:
                    self._blocked = "batch" if running >= self.s.max_batch else "kv"
                break
            self.waiting.popleft()
            if self.s.reserve_full:
                self._hold(request, need)
            self.r.cached_tokens += cached
            self.prefilling.append([request, cached])
            chunks.append((request, cached, take))
            budget -= take
            if take == prompt:
                completing.append(request)
        if self.waiting and not admit:
            self._blocked = "kv"  # a decoder was preempted for room this step
        elif self.waiting and budget <= 0 and self._blocked is None:
            self._blocked = "steps" if chunks else "budget"
        return chunks, completing

    def _busy(self, seconds: float) -> None:
        """Count a step's time, and against the limit that kept a waiting request from starting in it."""
        self.r.busy_s += seconds
        if self._blocked is not None and self.waiting:
            self.r.blocked_s[self._blocked] = self.r.blocked_s.get(self._blocked, 0.0) + seconds

    def _set_prefilled(self, request: int, done: int) -> None:
        for entry in self.prefilling:
            if entry[0] == request:
                entry[1] = done
                return

    def _first_token(self, request: int) -> None:
        """The step completing a prompt samples the request's first token (or, after a preemption, the
        token after those it had generated). The first prompt an engine computes in full leaves the shared
        prefix's KV cache with the engine (its tokens no longer the request's)."""
        self.prefilling = [e for e in self.prefilling if e[0] != request]
        if self.s.prefix and not self.prefix_cached:
            self.prefix_cached = True
            self.held[request] = self.held.get(request, 0.0) - self.s.prefix
        if math.isnan(self.r.first_token[request]):
            self.r.first_token[request] = self.clock
        if self.prefill_only:
            self._release(request)
            if self.on_prefilled is not None:
                self.on_prefilled(request, self.clock)
            return
        self._start_decoding(request)

    def _start_decoding(self, request: int) -> None:
        generated = self.recompute.pop(request, 0) + 1
        left = int(self.r.output[request]) - generated
        if left <= 0:
            self._finish(request)
            return
        self.epoch += 1
        if self.s.tokens_per_step != 1:  # speculative decoding: the steps that produce its tokens on average
            left = math.ceil(left / self.s.tokens_per_step - 1e-9)
        heapq.heappush(self.decoders, (self.decode_steps + left, request, self.epoch))
        self.started[request] = (int(self.r.prompt[request]) + generated, self.decode_steps)
        self.decoding[request] = self.epoch
        self.admitted.append(request)
        self.num_decoding += 1
        self.decode_keys += int(self.r.prompt[request]) + generated  # the next step reads prompt + tokens out

    def _admit_decoders(self) -> int:
        """A decode worker admits requests whose prompt's KV cache has arrived; returns how many."""
        admitted = 0
        while self.waiting:
            request = self.waiting[0]
            need = (int(self.r.prompt[request]) + int(self.r.output[request]) if self.s.reserve_full
                    else int(self.r.prompt[request]) + 1)
            if self.num_decoding >= self.s.max_batch or self.used + need > self.s.kv_tokens:
                break
            self.waiting.popleft()
            self._hold(request, need if self.s.reserve_full else int(self.r.prompt[request]))
            self._start_decoding(request)  # a request of one output token finishes here
            admitted += 1
        return admitted

    def _make_room(self) -> bool:
        """On-demand caches: preempt the most recently started decoders until their next tokens fit; whether any
        was."""
        preempted = False
        while self.num_decoding and self.used + self.num_decoding > self.s.kv_tokens:
            self._preempt()
            preempted = True
        return preempted

    def _free(self) -> float:
        """KV tokens free for prompts this step: on-demand caches keep room for the decoders' next tokens."""
        pending = self.num_decoding if not self.s.reserve_full and not self.prefill_only else 0
        return self.s.kv_tokens - self.used - pending

    def _preempt(self) -> None:
        """Free the cache of the last decoder to start; it waits first in line to recompute its prompt and the
        tokens it had generated."""
        while self.admitted and self.admitted[-1] not in self.decoding:
            self.admitted.pop()
        request = self.admitted.pop()
        self.decoding.pop(request)  # its heap entry is stale from now (`_drop_stale`)
        keys = self._keys(request, self.decode_steps)
        generated = min(int(self.r.output[request]) - 1, int(keys) - int(self.r.prompt[request]))
        self.num_decoding -= 1
        self.decode_keys -= keys
        self._release(request)
        self.recompute[request] = generated
        self.waiting.appendleft(request)
        self.preemptions += 1

    def _decode_stretch(self, until: float) -> bool:
        """k decode-only steps: up to the next completion, and no further than the step during which the
        next arrival (or `until`) comes, or (on-demand caches) the pool fills."""
        self.stretch(*self._stretch(until, self.s.admit_lag))
        return True

    def decode_bound(self) -> int:
        """Decode-only steps the engine can take before its next decoder finishes or (on-demand caches) its
        pool fills."""
        self._drop_stale()
        d, k = self.num_decoding, self.decoders[0][0] - self.decode_steps
        if not self.s.reserve_full and math.isfinite(self.s.kv_tokens):
            k = max(1, min(k, int((self.s.kv_tokens - self.used) // (d * self.s.tokens_per_step))))
        return k

    def decode_step(self, ahead: int = 0) -> Step:
        """The decode-only step of the running decoders `ahead` steps from now (each reads one more key a step)."""
        d = self.num_decoding
        return Step(decode=d, decode_kv_tokens=self.decode_keys + ahead * d * self.s.tokens_per_step,
                    sampled=d * self.s.width, decode_width=self.s.width)

    def stretch(self, k: int, first_s: float, last_s: float) -> None:
        """Take k decode-only steps whose times run linearly from `first_s` to `last_s`."""
        seconds = k * (first_s + last_s) / 2
        self.cutoff = self.clock + seconds - last_s
        self.clock += seconds
        self._busy(seconds)
        self._advance_decoders(k, first_s, last_s)

    def _drop_stale(self) -> None:
        """Heap entries of preempted decoders (their epoch is gone) are skipped."""
        while self.decoders and self.decoding.get(self.decoders[0][1]) != self.decoders[0][2]:
            heapq.heappop(self.decoders)

    def _advance_decoders(self, k: int, first_s: float, last_s: float) -> None:
        """k decode steps of every decoder: their keys grow by k per request; those done leave."""
        d, tau = self.num_decoding, self.s.tokens_per_step
        self.r.itl.add((first_s + last_s) / 2 / tau, k * d * tau)
        self.decode_steps += k
        self.decode_keys += k * d * tau
        if not self.s.reserve_full:  # each decoder's cache grows k tokens (`_release` frees them)
            self.used += k * d * tau
        while self.decoders and self.decoders[0][0] <= self.decode_steps:
            _, request, epoch = heapq.heappop(self.decoders)
            if self.decoding.get(request) != epoch:
                continue
            del self.decoding[request]
            self.num_decoding -= 1
            self.decode_keys -= self._keys(request, self.decode_steps)
            self._finish(request)

    def _keys(self, request: int, steps: int) -> float:
        """The keys a decoder had added to `decode_keys` when `steps` decode steps were done (its prompt and the
        tokens it had at its start, then tokens_per_step a step; prompt + output when it finishes at one token
        a step)."""
        base, start = self.started[request]
        return base + (steps - start) * self.s.tokens_per_step

    def _finish(self, request: int) -> None:
        self.r.finish[request] = self.clock
        self._release(request)
        if self.on_finish is not None:
            self.on_finish(request, self.clock)


def stretch_steps(k: int, first_s: float, slope_s: float, clock: float, until: float, arrival: float | None,
                  admit_lag: bool) -> int:
    """At most k decode-only steps of times first + j slope from `clock`: no further than the step during
    which `until` comes, nor than the one the next arrival comes in (one more when overlap-scheduled: it
    joins the step after next)."""
    if until < math.inf:
        k = min(k, _steps_to_reach(until - clock, first_s, slope_s))
    if arrival is not None:
        span = arrival - clock - TIE_S  # an arrival at a step's start joins that step (`TIE_S`)
        reach = _steps_to_reach(span, first_s, slope_s) if span > 0 else 0
        k = min(k, max(1, reach + admit_lag))
    return k


def _steps_to_reach(span_s: float, first_s: float, slope_s: float) -> int:
    """Smallest m >= 1 with m*first + m(m-1)/2*slope >= span: the step during which `span` elapses."""
    if span_s <= first_s:
        return 1
    # m^2 a + m b - span = 0 with a = slope/2, b = first - slope/2 (> 0): the positive root, written
    # 2 span / (b + sqrt(b^2 + 4 a span)) so that it stays exact as the slope goes to zero.
    a, b = max(0.0, slope_s) / 2, first_s - max(0.0, slope_s) / 2
    root = 2 * span_s / (b + math.sqrt(b * b + 4 * a * span_s))
    m = max(1, math.ceil(root))
    while m > 1 and (m - 1) * first_s + (m - 1) * (m - 2) / 2 * slope_s >= span_s:  # rounding at the boundary
        m -= 1
    return m


def run_engines(engines: list[Clocked], *, end: float = math.inf) -> None:
    """Advance engines that hand requests to each other until all are idle, or `end`: the one whose next step
    comes first runs while its steps start no later than any engine's `next_emission` (no request can reach an
    engine before some engine hands one on, so no step it takes could have taken a later arrival). Engines that
    only decode run up to their next completion at once, not a step each in turn."""
    if len(engines) == 1:
        engines[0].run_until(end)
        return
    while True:
        times = [e.next_event() for e in engines]
        soonest = min(times)
        if soonest == math.inf or soonest > end:
            return
        i = times.index(soonest)
        handed = min(e.next_emission() for e in engines)
        engines[i].run_until(min(max(handed, soonest), end))
