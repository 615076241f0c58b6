"""An engine with attention data parallelism: a ranks, each with its own scheduler, that step together.

Engines run the attention of a mixture-of-experts model data-parallel and its experts expert-parallel
(TensorRT-LLM `enable_attention_dp`, SGLang `--enable-dp-attention`, vLLM `--data-parallel-size` with
`--enable-expert-parallel`): each of the a ranks schedules its own requests under its own token budget and KV
pool (`loop.Engine`), and the dispatch and combine all-to-alls of every MoE layer make them wait for one
another. A step therefore lasts as long as its busiest rank's own work plus the experts' work on all ranks'
tokens (`program.serving.group_step_time`): one rank prefilling a long prompt stalls the decodes of every
other. A rank with nothing to do runs a dummy step of one decode token (TensorRT-LLM pads an idle rank with
a dummy generation request, vLLM runs a dummy batch; SGLang's idle batch has no tokens) while any rank
works.

The engine's router assigns each request to a rank when it reaches the engine (`Router`): in turn, or to the
rank with the fewest requests, its waiting ones weighted (`ServingStack.dp_router`, `dp_waiting_weight`). It
sees the ranks as the next step starts, which is when TensorRT-LLM's executor assigns new requests; vLLM's
front end reads counts the DP coordinator publishes every 100 ms plus its own assignments since.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from madmax.config.stack import DPRouter
from madmax.parallel.serving import Step
from madmax.serve.loop import TIE_S, Clocked, Engine, Recent

GroupStepTime = Callable[[tuple[Step, ...]], float]
# An idle rank's step while the others work: one decode token over a one-token cache.
DUMMY = Step(decode=1, decode_kv_tokens=1.0, sampled=1)


@dataclass
class Router:
    """Which rank an arriving request joins: `ROUND_ROBIN` in turn, `LEAST_LOADED` the rank with the lowest
    waiting_weight x waiting + running requests (the first on a tie)."""

    policy: DPRouter
    waiting_weight: int = 1
    turn: int = 0

    def pick(self, ranks: list[Engine]) -> int:
        if self.policy is DPRouter.ROUND_ROBIN:
            self.turn += 1
            return (self.turn - 1) % len(ranks)
        loads = [self.waiting_weight * len(r.waiting) + len(r.prefilling) + r.num_decoding for r in ranks]
        return loads.index(min(loads))


class Group(Clocked):
    """The a ranks of one attention-data-parallel engine, driven like one `Engine` (`submit`, `next_event`,
    `run_until`): each step every rank plans its own work and the step takes `step_time` of them all."""

    def __init__(self, ranks: list[Engine], step_time: GroupStepTime, router: Router) -> None:
        super().__init__()
        self.ranks, self.step_time, self.router = ranks, Recent(step_time), router
        self.admit_lag = ranks[0].s.admit_lag

    @property
    def on_finish(self) -> Callable[[int, float], None] | None:
        return self.ranks[0].on_finish

    @on_finish.setter
    def on_finish(self, callback: Callable[[int, float], None] | None) -> None:
        for rank in self.ranks:
            rank.on_finish = callback

    @property
    def idle(self) -> bool:
        return all(r.idle for r in self.ranks)

    def _only_decoding(self) -> bool:
        return not self.idle and not any(r.waiting or r.prefilling for r in self.ranks)

    def _decode_span(self) -> tuple[int, float, float]:
        """Up to the first completion on any decoding rank; the ranks not decoding run the dummy step."""
        decoding = [r for r in self.ranks if r.num_decoding]
        k = min(r.decode_bound() for r in decoding)

        def steps(ahead: int) -> tuple[Step, ...]:
            return tuple(r.decode_step(ahead) if r.num_decoding else DUMMY for r in self.ranks)

        first = self.step_time(steps(0))
        return k, first, self.step_time(steps(k - 1)) if k > 1 else first

    def _arrive(self) -> None:
        """Hand the requests that have reached the engine to the ranks the router picks."""
        cutoff = (self.cutoff if self.admit_lag else self.clock) + TIE_S
        while self.arrivals and self.arrivals[0][0] <= cutoff:
            self.ranks[self.router.pick(self.ranks)].waiting.append(heapq.heappop(self.arrivals)[1])

    def _step(self, until: float) -> bool:
        for rank in self.ranks:
            rank.clock, rank.cutoff = self.clock, self.cutoff
        works = [r.plan() for r in self.ranks]
        if all(w is None for w in works):
            return any(r.decode_only and r.admitted_now for r in self.ranks)
        if all(w is None or not w.chunks for w in works):
            return self._decode_stretch(until, [r for r, w in zip(self.ranks, works, strict=True) if w])
        seconds = self.step_time(tuple(w.step if w else DUMMY for w in works))
        for rank, work in zip(self.ranks, works, strict=True):
            if work is not None:
                rank.take(work, seconds)
        self.cutoff, self.clock = self.clock, self.clock + seconds
        return True

    def _decode_stretch(self, until: float, decoding: list[Engine]) -> bool:
        """k decode-only steps of every rank that decodes (`decoding`): up to the first completion on any rank,
        and no further than the step the next arrival (or `until`) comes in."""
        k, first, last = self._stretch(until, self.admit_lag)
        for rank in decoding:
            rank.stretch(k, first, last)
        seconds = k * (first + last) / 2
        self.cutoff, self.clock = self.clock + seconds - last, self.clock + seconds
        return True
