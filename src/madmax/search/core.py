"""The search: enumerate, prune by divisibility and memory, estimate, refine, re-simulate the best.

1. `space.enumerate_space`: every candidate; the divisibility rules of `resolve_strategy` reject some.
2. Memory in closed form (`memory.peak_memory`, exact); candidates that do not fit are rejected.
3. Every candidate that fits is timed by the closed form (`timing.closed_form`).
4. The best `refine` of them (and all within `margin` of the best) are replayed step by step
   (`timing.refine`), which reproduces `simulate` at step granularity.
5. The best `exact` by the replay are simulated with `madmax.simulate`; they are ranked by the
   simulated numbers, so the reported top K are `simulate` results.
6. Settings the closed form and the replay do not cost are tried on the simulated candidates only, when
   asked (`simulated_variants`, search options tp_overlap and dispatcher): each with tp > 1 and sequence
   parallelism is simulated again with its TP collectives pipelined into the GEMMs (tp_overlap=1), each with
   ep > 1 with the DeepEP dispatcher, and each keeps its fastest form.

A mixture-of-experts model adds ep, etp and the all-to-all overlap to the space; each step accounts for
its routed experts (their state group and gradient stream, their grouped GEMMs, the token exchange). A
space of more than `bound.EXHAUSTIVE` candidates runs steps 2-3 row by row, best first, within floors
that keep the pool of step 4 unchanged (`search.bound`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np

from madmax import terminal
from madmax.errors import StrategyError
from madmax.parallel.formats import tensor_bytes
from madmax.parallel.memory import group_sizes
from madmax.parallel.pipeline import inflight_cap
from madmax.results import Result
from madmax.search.context import Context
from madmax.search.costs import combos_of, expert_state_bytes, state_bytes, unit_costs
from madmax.search.memory import memory_shape, peak_memory
from madmax.search.objective import Scorer
from madmax.search.space import Space, describe, unique_rows
from madmax.search.timing import closed_form, optimizer_s, refine
from madmax.search.units import MEMORY, StageLayout, memory_table, stage_layout


@dataclass
class Outcome:
    """Everything a search found. Arrays are over the evaluated candidates (those that fit).

    estimate_s: closed-form iteration time; refined_s: replayed iteration time (NaN where not
    replayed); exact: simulate results by candidate index; ranked: candidate indices, the simulated
    ones first in objective order, then the rest by their best estimate.
    """

    ctx: Context
    scorer: Scorer
    space: Space
    columns: dict[str, np.ndarray]
    peak_memory_bytes: np.ndarray
    estimate_s: np.ndarray
    refined_s: np.ndarray
    exact: dict[int, Result]
    ranked: np.ndarray
    rejected: dict[str, int]
    model_flops: np.ndarray
    timings_s: dict[str, float] = field(default_factory=dict)
    # per simulated candidate, the strategy keys beyond its columns that its result ran with (`simulated_variants`)
    variants: dict[int, str] = field(default_factory=dict)

    @property
    def enumerated(self) -> int:
        return self.space.enumerated

    @property
    def evaluated(self) -> int:
        return len(self.peak_memory_bytes)

    @property
    def valid(self) -> int:
        """Candidates that pass every divisibility rule (fitting or not)."""
        return self.space.num_valid

    def strategy(self, i: int) -> str:
        return (describe({k: int(v[i]) for k, v in self.columns.items()}, self.space.orders, self.ctx.fp8_params)
                + self.variants.get(i, ""))

    def best_time_s(self) -> np.ndarray:
        """Best available iteration time per candidate: simulated, else replayed, else closed form."""
        t = np.where(np.isnan(self.refined_s), self.estimate_s, self.refined_s)
        for i, r in self.exact.items():
            t[i] = r.iteration_time_s
        return t

    def objective_value(self, i: int) -> float:
        """Candidate i's simulated objective; with a `time_to_train` (`api.with_goodput`) its expected wall clock's:
        time, cost and energy are each proportional to the time, so the ideal value scales by wall / ideal."""
        r = self.exact[i]
        value = float(self.scorer.value(r.iteration_time_s))
        t = r.time_to_train
        return value if t is None else value * t["wall_s"] / t["breakdown_s"]["ideal"]

    def top(self, k: int) -> list[int]:
        """Indices of the best k simulated candidates that fit."""
        return [int(i) for i in self.ranked if int(i) in self.exact and self.exact[int(i)].fits][:k]


def groups(cols: dict[str, np.ndarray], names: tuple[str, ...]) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """(values, candidate indices) for each distinct combination of the named columns."""
    if not len(cols[names[0]]):
        return
    values, inverse = unique_rows(cols, names)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(values) + 1))
    for g, row in enumerate(values):
        yield tuple(int(x) for x in row), order[bounds[g]:bounds[g + 1]]


class _Layouts(dict):
    def __init__(self, ctx: Context, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.ctx, self.keys = ctx, keys

    def __missing__(self, key: tuple[int, int]) -> StageLayout:
        self[key] = stage_layout(self.ctx, key[0], key[1], self.keys)
        return self[key]


class Clock:
    """Wall time of each phase of a search, added up under its name (a phase may run several times)."""

    def __init__(self, timings: dict[str, float] | None = None) -> None:
        self.timings = dict(timings or {})
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now


def run_search(ctx: Context, space: Space, scorer: Scorer, *, refine_count: int = 2000, margin: float = 0.03,
               exact: int = 20, workers: int = 1, timings: dict[str, float] | None = None) -> Outcome:
    """Steps 2-5 of the module docstring on an enumerated space."""
    clock = Clock(timings)
    memory = memory_table(ctx, unique_rows(space.columns, MEMORY)[0]) if len(space) else None
    layouts = _Layouts(ctx, memory.keys if memory else ())
    peak = _peak_memory(ctx, space, memory, layouts) if len(space) else np.zeros(0)
    keep = np.flatnonzero(peak <= ctx.capacity_bytes)
    rejected = {**space.rejected, "memory": len(space) - len(keep)}
    ev = {k: v[keep] for k, v in space.columns.items()}
    clock.lap("memory")
    estimate, flops, costs = np.zeros(len(keep)), np.zeros(len(keep)), None
    if len(keep):
        costs, estimate, flops = estimate_all(ctx, ev, space.orders, memory, layouts, clock)
    return finish(ctx, space, scorer, ev, peak[keep], estimate, flops, rejected, layouts, clock, costs=costs,
                  refine_count=refine_count, margin=margin, exact=exact, workers=workers)


def estimate_all(ctx: Context, cols: dict[str, np.ndarray], orders: tuple[str, ...], memory, layouts: _Layouts,
                 clock: Clock):
    """Costs, closed-form iteration time and model FLOPs of candidates that fit (step 3)."""
    table, combo = combos_of(ctx, cols)
    costs = unit_costs(ctx, cols, table, combo, memory, orders)
    flops = _model_flops(table, combo, layouts, cols)
    clock.lap("costs")
    estimate = np.zeros(len(combo))
    for (pp, vp), idx in groups(cols, ("pp", "vp")):
        sub = costs.take(idx)
        opt = optimizer_s(ctx.compute, layouts[(pp, vp)], sub)
        estimate[idx] = closed_form(layouts[(pp, vp)], cols["m"][idx], sub, cols["zero"][idx], opt)
    # the host's time per step call (profile call_host_s) runs beside the GPU's work: a step lasts at least that
    estimate = np.maximum(estimate, ctx.compute.profile.call_host_s)
    clock.lap("estimate")
    return costs, estimate, flops


def finish(ctx: Context, space: Space, scorer: Scorer, ev: dict[str, np.ndarray], peak: np.ndarray,
           estimate: np.ndarray, flops: np.ndarray, rejected: dict[str, int], layouts: _Layouts, clock: Clock, *,
           costs=None, refine_count: int, margin: float, exact: int, workers: int) -> Outcome:
    """Steps 4-5 on the evaluated candidates `ev`: replay the pool, simulate the best, rank. costs: those
    of every candidate of `ev` (None: computed for the pool alone)."""
    refined = np.full(len(estimate), np.nan)
    results: dict[int, Result] = {}
    if len(estimate):
        pool = _pool(scorer.sort_key(estimate), estimate, refine_count, margin)
        if costs is None:
            sub_cols = {k: v[pool] for k, v in ev.items()}
            table, combo = combos_of(ctx, sub_cols)
            memory = memory_table(ctx, unique_rows(sub_cols, MEMORY)[0])
            pool_costs, at = unit_costs(ctx, sub_cols, table, combo, memory, space.orders), np.arange(len(pool))
        else:
            pool_costs, at = costs, pool
        for (pp, vp, m), idx in groups({k: v[pool] for k, v in ev.items()}, ("pp", "vp", "m")):
            sub = pool_costs.take(at[idx])
            refined[pool[idx]] = np.maximum(refine(layouts[(pp, vp)], m, sub, ev["zero"][pool[idx]],
                                                   optimizer_s(ctx.compute, layouts[(pp, vp)], sub)),
                                            ctx.compute.profile.call_host_s)
        clock.lap("refine")
        by_replay = pool[np.argsort(scorer.sort_key(refined[pool]), kind="stable")]
        results = _simulate(ctx, ev, space, by_replay[:exact], workers)
        clock.lap("simulate")
    variants = simulated_variants(ctx, ev, space, results, workers)
    if variants:
        clock.lap("variants")
    return Outcome(ctx=ctx, scorer=scorer, space=space, columns=ev, peak_memory_bytes=peak,
                   estimate_s=estimate, refined_s=refined, exact=results,
                   ranked=ranking(scorer, estimate, refined, results), rejected=rejected, model_flops=flops,
                   timings_s=clock.timings, variants=variants)


def _peak_memory(ctx: Context, space: Space, memory, layouts: _Layouts) -> np.ndarray:
    """Peak memory per GPU of every candidate, by shape (pp, vp, micro-batches in flight)."""
    cols = space.columns
    _, mem_row = unique_rows(cols, MEMORY)
    state = state_bytes(ctx, cols, space.orders)[0]
    experts = expert_state_bytes(ctx, cols)[0] if memory.has_experts else None
    weight_bytes = tensor_bytes(ctx.dtype)
    scale = cols["mbs"] / cols["cp"]  # activations scale with the tokens of a rank's micro-batch
    # Memory depends on m only through the micro-batches in flight, which stop changing beyond a cap.
    pairs, pair = unique_rows(cols, ("pp", "vp"))
    caps = np.array([inflight_cap(int(p), int(v)) for p, v in pairs], dtype=np.int64)
    flight = {"pp": cols["pp"], "vp": cols["vp"], "m": np.minimum(cols["m"], caps[pair])}
    sizes = group_sizes(cols["tp"], cols["cp"], cols["pp"], cols["dp"], cols["ep"], cols["etp"], memory.has_experts)
    peak = np.empty(len(space))
    for (pp, vp, m), idx in groups(flight, ("pp", "vp", "m")):
        r = mem_row[idx]
        units = {"params": memory.params[r], "trainable": memory.trainable[r], "expert_params": memory.expert_params[r],
                 "expert_trainable": memory.expert_trainable[r], "saved": memory.saved[r] * scale[idx, None],
                 "working": memory.working[r] * scale[idx, None], "cast_cache": memory.cast_cache[r]}
        peak[idx] = peak_memory(memory_shape(layouts[(pp, vp)], m), units, state[idx], cols["zero"][idx],
                                weight_bytes, ctx.reserve, tuple(size[idx] for size in sizes),
                                None if experts is None else experts[idx])
    return peak


def ranking(scorer: Scorer, estimate: np.ndarray, refined: np.ndarray, results: dict[int, Result]) -> np.ndarray:
    """The simulated candidates by their simulated objective (those that fit first), then the rest by the
    replay where it ran, else the closed form."""
    simulated = np.array(sorted(results, key=lambda i: (not results[i].fits,
                                                        float(scorer.sort_key(results[i].iteration_time_s)))),
                         dtype=np.int64)
    best = np.where(np.isnan(refined), estimate, refined)
    order = np.argsort(scorer.sort_key(best), kind="stable")
    return np.concatenate([simulated, order[~np.isin(order, simulated)]])


def _pool(key: np.ndarray, estimate: np.ndarray, count: int, margin: float) -> np.ndarray:
    """The `count` best candidates by the closed form, and those within `margin` of the best (at most
    4 x count of them): the closed form is within a few percent of the replay near the top."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    near = order[estimate[order] <= estimate[order[0]] * (1 + margin)][:4 * count]
    return np.union1d(order[:count], near)


def _simulate(ctx: Context, cols: dict[str, np.ndarray], space: Space, indices: np.ndarray,
              workers: int) -> dict[int, Result]:
    """`madmax.simulate` of each candidate, in `workers` processes when more than one."""
    strategies = [describe({k: int(v[i]) for k, v in cols.items()}, space.orders, ctx.fp8_params) for i in indices]
    results = simulate_many(ctx, strategies, workers)
    return {int(i): r for i, r in zip(indices, results, strict=True)}


TP_OVERLAP = ",tp_overlap=1"
DEEPEP = ",dispatcher=deepep"


def _variant_suffixes(ctx: Context, cols: dict[str, np.ndarray], i: int) -> list[str]:
    """The strategy suffixes candidate i may run with, the plain one ("") first where allowed: tp_overlap=1 for
    tp > 1 with sequence parallelism, the DeepEP dispatcher for ep > 1, each as `ctx` allows, in combination."""
    choices = []
    if cols["tp"][i] > 1 and cols["sp"][i]:
        choices.append([TP_OVERLAP if on else "" for on in ctx.tp_overlap])
    if "ep" in cols and cols["ep"][i] > 1:
        choices.append([DEEPEP if d == "deepep" else "" for d in ctx.dispatchers])
    return ["".join(combo) for combo in product(*choices)]


def simulated_variants(ctx: Context, cols: dict[str, np.ndarray], space: Space, results: dict[int, Result],
                     workers: int) -> dict[int, str]:
    """Step 6: each simulated candidate simulated again with the settings the screen does not cost, where `ctx`
    allows them: tp_overlap=1 (Megatron's --tp-comm-overlap: the all-gathers and reduce-scatters pipelined with
    the GEMMs) for tp > 1 with sequence parallelism, and the DeepEP dispatcher (`dispatcher=deepep`) for ep > 1,
    alone and together. A candidate keeps the fastest of its allowed forms, those that fit first (every objective
    improves as the iteration time falls); its plain form only when allowed. `results` is updated in place;
    returns the suffix of each candidate that took a variant. A variant `simulate` refuses is not taken."""
    forms = {i: _variant_suffixes(ctx, cols, i) for i in results}
    jobs = [(i, suffix) for i, suffixes in forms.items() for suffix in suffixes if suffix]
    if not jobs:
        return {}
    strategies = [describe({k: int(v[i]) for k, v in cols.items()}, space.orders, ctx.fp8_params) + suffix
                  for i, suffix in jobs]
    tried: dict[int, list[tuple[str, Result]]] = {}
    for (i, suffix), r in zip(jobs, simulate_many(ctx, strategies, workers, refused=(StrategyError,)), strict=True):
        if not isinstance(r, Exception):
            tried.setdefault(i, []).append((suffix, r))
    chosen = {}
    for i, simulated in tried.items():
        if "" in forms[i]:  # the plain form is allowed: its result is already in
            simulated = [("", results[i]), *simulated]
        suffix, best = max(simulated, key=lambda form: (form[1].fits, -form[1].iteration_time_s))
        results[i] = best
        if suffix:
            chosen[i] = suffix
    return chosen


def simulate_many(ctx: Context, strategies: list[str], workers: int, *,
                  refused: tuple[type[Exception], ...] = (), chunksize: int | None = None) -> list[Any]:
    """`madmax.simulate` of each strategy string, in `workers` processes (forked) when more than one.

    An error of a type in `refused` comes back in the list in place of the result (a candidate the
    engine refuses); any other error propagates. chunksize: strategies per task sent to a process
    (default a quarter of each process' share). Each finished simulation advances the command's progress bar.
    """
    jobs = [(ctx.simulate_kwargs, s, refused) for s in strategies]
    terminal.expect(len(jobs))
    if workers > 1 and len(strategies) > workers:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if "fork" in multiprocessing.get_all_start_methods():
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                chunks = chunksize or max(1, len(jobs) // (4 * workers))
                return list(terminal.counted(pool.map(_simulate_one, jobs, chunksize=chunks)))
    return [_simulate_one(job) for job in terminal.counted(jobs)]


def _simulate_one(job: tuple[dict[str, Any], str, tuple[type[Exception], ...]]) -> Any:
    from madmax.api import simulate

    kwargs, strategy, refused = job
    try:
        return simulate(**kwargs, strategy=strategy)
    except refused as exc:
        return exc


def _model_flops(table, combo: np.ndarray, layouts: _Layouts, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Model FLOPs of one iteration per candidate: m x sum over units of (forward + backward) FLOPs of one
    rank x the ranks of a stage (tp*cp*dp), as `simulate` counts them for MFU."""
    counts = layouts[(1, 1)].per_stage[0]  # units of each key in the whole model
    return (table.flops_model[combo] @ counts) * cols["m"] * cols["tp"] * cols["cp"] * cols["dp"]


def summary(outcome: Outcome, i: int) -> dict[str, Any]:
    """The simulate result of candidate i as `to_dict()` with the search's strategy string and scores."""
    r = outcome.exact[i]
    return {**r.to_dict(), "strategy": outcome.strategy(i),
            "objective": {"name": outcome.scorer.objective.value, "unit": outcome.scorer.unit,
                          "value": outcome.objective_value(i)},
            "estimated_iteration_time_s": float(outcome.refined_s[i] if not np.isnan(outcome.refined_s[i])
                                                else outcome.estimate_s[i])}
