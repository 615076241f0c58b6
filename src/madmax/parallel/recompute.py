"""Activation recompute chosen when the strategy leaves it unset (or says `recompute=auto`).

Published configurations often do not say how activations are saved. The candidates, cheapest first:
keep everything (`none`); recompute the attention core (`selective`); recompute in full the first N
layers of each pipeline chunk (`full` with `recompute_layers=N`, Megatron's recompute_method=block),
N = 1 .. the layers of the largest chunk (all of them is plain `full`).

Memory is read off each candidate's plan (`stage_memory`), without simulating. The cost is ranked
analytically: what a candidate adds to an iteration is the work of its recompute, so each candidate is
ranked by the busiest stage's serial work per iteration,
    max over stages of  sum over the stage's passes (forward + backward + recompute kernel seconds
                        + the seconds of the collectives that follow each pass),
which differs between candidates only by the recomputed forward and the collectives it repeats. Full
recompute's memory falls and its cost rises with N, so the smallest N that fits is the only full
candidate worth costing (found by bisection). The choice is the cheapest candidate that fits; when
none does, the one that needs least memory, and the result says it does not fit. An explicit
recompute is never replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from madmax.config.strategy import Recompute, Strategy
from madmax.config.units import GIB
from madmax.parallel.memory import StageMemory
from madmax.parallel.plan import Plan, UnitPlan, largest_chunk_layers


@dataclass(frozen=True)
class Candidate:
    """One way of saving activations, planned: its strategy, plan, worst stage's bytes and its cost."""

    strategy: Strategy
    plan: Plan
    peak_bytes: float
    fits: bool
    busy_s: float  # the busiest stage's serial work per iteration (see the module docstring)

    @property
    def label(self) -> str:
        s = self.strategy
        if s.recompute is Recompute.FULL and s.recompute_layers is not None:
            n = s.recompute_layers
            return f"full of the first {n} layer{'s' if n > 1 else ''} per chunk"
        return str(s.recompute)

    @property
    def needs(self) -> str:
        return f"{self.label} needs {self.peak_bytes / GIB:.1f} GiB"


@dataclass(frozen=True)
class Choice:
    """The strategy with its recompute resolved, its plan, and why it was chosen (for `assumptions`)."""

    strategy: Strategy
    plan: Plan
    fits: bool
    reason: str


def chunk_layers(plan: Plan) -> int:
    """Layers of the largest pipeline chunk: the most that `recompute_layers` can name."""
    return largest_chunk_layers(plan.units, plan.stages)


def busy_s(plan: Plan, pass_s: Callable[[UnitPlan], float]) -> float:
    """The busiest stage's serial work per iteration: every micro-batch runs each unit of the stage's
    chunks once (`pass_s`: its forward, backward and recompute, with the collectives after them)."""
    return plan.microbatches * max(sum(pass_s(plan.units[key]) for chunk in chunks for key in chunk)
                                   for chunks in plan.stages)


def choose_recompute(strategy: Strategy, *, build: Callable[[Strategy], Plan],
                     memories: Callable[[Plan], Sequence[StageMemory]], capacity: float,
                     pass_s: Callable[[UnitPlan], float]) -> Choice:
    """The cheapest recompute of `strategy` (whose recompute is unset) that fits `capacity` bytes.

    build: the plan of a strategy; memories: its per-stage memory; pass_s: a unit's seconds per
    micro-batch (forward, backward, recompute and the collectives after them), for the ranking.
    """
    assert strategy.recompute is None, "an explicit recompute is honoured, not chosen"

    @cache  # the bisection's candidates are named again in the reason
    def plan(recompute: Recompute, layers: int | None = None) -> Candidate:
        s = strategy.model_copy(update={"recompute": recompute, "recompute_layers": layers})
        p = build(s)
        peak = max(m.total_bytes for m in memories(p))
        return Candidate(s, p, peak, peak <= capacity, busy_s(p, pass_s))

    none = plan(Recompute.NONE)
    usable = f"of {capacity / GIB:.1f} GiB usable"
    if none.fits:
        return Choice(none.strategy, none.plan, True,
                      f"recompute chosen: none (every activation kept: {none.peak_bytes / GIB:.1f} GiB {usable})")
    if not any(u.is_layer and u.has_backward for u in none.plan.units.values()):
        return Choice(none.strategy, none.plan, False,
                      f"recompute chosen: none, nothing to recompute ({none.needs} {usable})")
    most = chunk_layers(none.plan)
    selective, full = plan(Recompute.SELECTIVE), plan(Recompute.FULL)
    if not (selective.fits or full.fits):
        least = min((selective, full), key=lambda c: c.peak_bytes)
        return Choice(least.strategy, least.plan, False,
                      f"recompute chosen: {least.label}, the least memory, but nothing fits "
                      f"({least.needs} {usable})")
    why = [none.needs]
    partial = None
    if full.fits:
        # the smallest N that fits: memory falls as N grows, so bisect over 1 .. most (most: plain full)
        low, high = 1, most
        while low < high:
            mid = (low + high) // 2
            if plan(Recompute.FULL, mid).fits:
                high = mid
            else:
                low = mid + 1
        partial = full if low == most else plan(Recompute.FULL, low)
    fitting = [c for c in (selective, partial) if c is not None and c.fits]
    chosen = min(fitting, key=lambda c: c.busy_s)  # a tie keeps selective
    if chosen is partial:
        if not selective.fits:
            why.append(selective.needs)
        if low > 1:
            why.append(plan(Recompute.FULL, low - 1).needs)
    why[-1] += f" {usable}"
    why += [f"{c.label} adds {(c.busy_s - chosen.busy_s) * 1e3:.1f} ms of work per iteration more"
            for c in fitting if c is not chosen]
    return Choice(chosen.strategy, chosen.plan, True, f"recompute chosen: {chosen.label} ({'; '.join(why)})")
