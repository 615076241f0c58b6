"""A search too large to evaluate whole: its rows bounded below in memory and time, evaluated best first.

Beyond EXHAUSTIVE candidates that pass the divisibility rules (a 671B mixture-of-experts model on a
thousand GPUs has some 70 million), the search works on rows, not candidates: a row is the degrees,
vp and mbs (`space.Rows`), its candidates the options ZeRO x shard, recompute, sp and order. Two floors
of each row, below every one of its options, decide which rows are evaluated:

    memory floor  max over its stages of (min over ZeRO stages of the weights, gradients and optimizer
                  state, sharded over the whole group, and the low-precision weight copies) + (1 + f)
                  (min over recompute of the activations) + the reserve of the row's process groups
                  (`parallel.memory.Reserve`): above the usable memory, no option fits, and the row's
                  candidates are rejected under `memory`.
    time floor    T_floor = T_pipe(f0 + b0) + t_p2p (m + 2 (pp - 1)) + max_s opt_s, the closed form
                  (`timing.closed_form`) without what the options add: f0, b0 without recompute and
                  without ZeRO-3's gathers, no gradient collectives, and the optimizer step of the most
                  sharded state; the least over the orders and sp settings of the row.

The rows are then evaluated in increasing T_floor, BATCH candidates at a time, exactly as the
exhaustive search evaluates every candidate (memory, then the closed form of those that fit). After
each batch the threshold is the larger of the `refine`-th best closed form so far and the best x
(1 + margin), which can only fall. A row whose floor is above it cannot place a candidate in the replay
pool (every option's closed form is at least the floor), so once the next row's floor exceeds it, the
rest are rejected under `time_bound`: the pool, and so the replayed and simulated candidates, are those
the exhaustive search would pick (up to ties).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from madmax.config.strategy import Recompute
from madmax.parallel.formats import tensor_bytes
from madmax.parallel.memory import group_sizes
from madmax.parallel.pipeline import inflight_cap
from madmax.search.context import Context
from madmax.search.core import Clock, Outcome, _Layouts, _peak_memory, estimate_all, finish, groups
from madmax.search.costs import combos_of, compute_costs
from madmax.search.memory import activations_by_stage, memory_shape, two_largest
from madmax.search.objective import Scorer
from madmax.search.space import RECOMPUTES, Limits, Problem, Rows, Space, expand, unique_rows
from madmax.search.timing import _overlap_excess, _pipeline
from madmax.search.units import DATA, EXPERT_DATA, MEMORY, data_plans, expert_data_plans, memory_table

EXHAUSTIVE = 3_000_000  # valid candidates up to which every one is evaluated
BATCH = 250_000  # candidates evaluated at a time in a bounded search
SLACK = 1e-9  # relative: the floors are sums in another order than the exact figures they bound


def run_bounded(ctx: Context, problem: Problem, limits: Limits, rows: Rows, scorer: Scorer, *,
                refine_count: int = 2000, margin: float = 0.03, exact: int = 20, workers: int = 1,
                timings: dict[str, float] | None = None) -> Outcome:
    """The search of the module docstring on the rows of a space."""
    clock = Clock(timings)
    cols = rows.columns
    layouts = _Layouts(ctx, _keys(ctx, cols))
    floor, opt = _floors(ctx, problem, limits, cols, layouts)
    fits = floor * (1 - SLACK) <= ctx.capacity_bytes
    rejected = {**rows.rejected, "memory": int(rows.weight[~fits].sum()), "time_bound": 0}
    alive = np.flatnonzero(fits)
    clock.lap("memory floor")
    lower = _time_floor(ctx, problem, limits, {k: v[alive] for k, v in cols.items()}, opt[alive], layouts)
    alive = alive[np.argsort(lower, kind="stable")]
    lower = np.sort(lower, kind="stable")
    clock.lap("time floor")
    parts: list[tuple] = []
    estimates = np.zeros(0)
    threshold, start = np.inf, 0
    total = np.cumsum(rows.weight[alive])
    while start < len(alive) and lower[start] * (1 - SLACK) <= threshold:
        done = total[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(total, done + BATCH, side="right")))
        stop = min(stop, start + int(np.searchsorted(lower[start:] * (1 - SLACK), threshold, side="right")))
        batch = expand(problem, limits, rows, alive[start:stop])
        space = Space(columns=batch, enumerated=0, orders=limits.orders)
        memory = memory_table(ctx, unique_rows(batch, MEMORY)[0])
        peak = _peak_memory(ctx, space, memory, layouts)
        keep = np.flatnonzero(peak <= ctx.capacity_bytes)
        rejected["memory"] += len(peak) - len(keep)
        ev = {k: v[keep] for k, v in batch.items()}
        clock.lap("memory")
        if len(keep):
            _, estimate, flops = estimate_all(ctx, ev, limits.orders, memory, layouts, clock)
            parts.append((ev, peak[keep], estimate, flops))
            estimates = np.concatenate([estimates, estimate])
            kth = np.partition(estimates, refine_count - 1)[refine_count - 1] if len(estimates) >= refine_count \
                else np.inf
            threshold = max(kth, estimates.min() * (1 + margin))
        start = stop
    rejected["time_bound"] = int(rows.weight[alive[start:]].sum())
    ev = {k: np.concatenate([p[0][k] for p in parts]) for k in parts[0][0]} if parts else expand(
        problem, limits, rows, np.zeros(0, dtype=np.int64))
    peak, estimate, flops = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0) for i in (1, 2, 3))
    space = Space(columns=ev, enumerated=rows.enumerated, rejected=rows.rejected, orders=limits.orders,
                  valid=rows.valid)
    return finish(ctx, space, scorer, ev, peak, estimate, flops, rejected, layouts, clock, refine_count=refine_count,
                  margin=margin, exact=exact, workers=workers)


def _keys(ctx: Context, cols: dict[str, np.ndarray]) -> tuple[str, ...]:
    """The unit keys of the model (those of any plan)."""
    first = {name: cols[name][:1] for name in ("tp", "ep", "etp")}
    return memory_table(ctx, np.array([[int(first["tp"][0]), int(first["tp"][0] > 1), 0, int(first["ep"][0]),
                                        int(first["etp"][0])]])).keys


def _probe(problem: Problem, cols: dict[str, np.ndarray], *, zero: int, rec: int, sp: int, order: int
           ) -> dict[str, np.ndarray]:
    """One candidate of each row with the given options (shard 0: the whole group; sp only with tp > 1)."""
    n = len(cols["tp"])

    def full(value: int) -> np.ndarray:
        return np.full(n, value, dtype=np.int32)

    return {**cols, "m": problem.global_batch // (cols["dp"] * cols["mbs"]), "zero": full(zero), "shard": full(0),
            "rec": full(rec), "sp": np.where(cols["tp"] > 1, sp, 0).astype(np.int32), "order": full(order)}


def _sps(problem: Problem, limits: Limits) -> list[int]:
    """The sp settings rows with tp > 1 take (an MoE model's need sp)."""
    return [1] if problem.has_experts else sorted({int(s) for s in limits.sp})


def _floors(ctx: Context, problem: Problem, limits: Limits, cols: dict[str, np.ndarray],
            layouts: _Layouts) -> tuple[np.ndarray, np.ndarray]:
    """The memory floor of each row (module docstring) [n], and its optimizer floor: the step of its
    slowest stage with the most sharded state (ZeRO max(zero), the whole group) [n].

    Parameters depend on (tp, ep, etp) alone and activations are proportional to the tokens of a rank's
    micro-batch (mbs/cp sequences), so each stage's sums are taken once per distinct (tp, ep, etp).
    """
    n = len(cols["tp"])
    recs = [RECOMPUTES.index(r) for r in limits.recompute]
    keeps = [(r, s) for r in recs for s in _sps(problem, limits)]
    # The memory table's rows: each distinct (tp, ep, etp) with each (rec, sp) the activations take.
    triples, t_idx = unique_rows(cols, ("tp", "ep", "etp"))
    values = np.array([(tp, s if tp > 1 else 0, r, ep, etp) for r, s in keeps for tp, ep, etp in triples.tolist()],
                      dtype=np.int64).reshape(-1, len(MEMORY))
    memory = memory_table(ctx, values)
    ranks = cols["tp"] * cols["cp"] * cols["dp"]
    states = {z: _state_per_row(ctx, limits, cols, ranks, z) for z in limits.zero}
    weight_bytes = tensor_bytes(ctx.dtype)
    scale = cols["mbs"] / cols["cp"]
    m = problem.global_batch // (cols["dp"] * cols["mbs"])
    pairs, pair = unique_rows(cols, ("pp", "vp"))
    caps = np.array([inflight_cap(int(p), int(v)) for p, v in pairs], dtype=np.int64)
    floor, moved = np.empty(n), np.empty(n)
    for (pp, vp, mm), idx in groups({"pp": cols["pp"], "vp": cols["vp"], "m": np.minimum(m, caps[pair])},
                                    ("pp", "vp", "m")):
        shape = memory_shape(layouts[(pp, vp)], mm)
        here, inv = np.unique(t_idx[idx], return_inverse=True)  # the group's (tp, ep, etp), each row's
        inv = inv.ravel()
        per_stage = shape.per_stage.T  # [K, R]
        params, trainable = memory.params[here], memory.trainable[here]
        split = [(params, trainable)]
        if memory.has_experts:
            experts = (memory.expert_params[here], memory.expert_trainable[here])
            split = [(params - experts[0], trainable - experts[1]), experts]
        sums = [((p - t) @ per_stage * weight_bytes)[inv] for p, t in split]  # untrainable weights [n, R]
        sums[0] = sums[0] + (memory.cast_cache[here] @ per_stage)[inv]  # low-precision weight copies
        trained = [(t @ per_stage)[inv] for _, t in split]
        gathered = ctx.reserve.zero3_gathered_params(two_largest(per_stage.T, params))[inv] * weight_bytes  # ZeRO-3's
        held = None
        for z, state in states.items():
            bytes_ = sum(w + t * (s[idx, 0:1] + s[idx, 1:2] + s[idx, 2:3])
                         for w, t, s in zip(sums, trained, state, strict=False))
            if z >= 3:
                bytes_ = bytes_ + gathered
            held = bytes_ if held is None else np.minimum(held, bytes_)
        kept = np.min([activations_by_stage(shape, memory.saved[k * len(triples) + here],
                                            memory.working[k * len(triples) + here])[inv]
                       for k in range(len(keeps))], axis=0) * scale[idx, None]
        # The reserve of the row's process groups (the degrees are the row's); fragmentation of the least kept.
        degrees = (cols[c][idx] for c in ("tp", "cp", "pp", "dp", "ep", "etp"))
        comm = ctx.reserve.communicators_bytes(group_sizes(*degrees, memory.has_experts))
        floor[idx] = (held + (1 + ctx.reserve.fragmentation) * kept).max(axis=1) + ctx.reserve.context_bytes + comm
        most = states[max(limits.zero)]  # the optimizer moves 2o + g + w bytes per trainable parameter
        moved[idx] = sum(t * (2 * s[idx, 2:3] + s[idx, 1:2] + s[idx, 0:1])
                         for t, s in zip(trained, most, strict=False)).max(axis=1)
    values, inverse = np.unique(moved, return_inverse=True)
    seconds = np.array([ctx.compute.memory_s(float(x)) if x else 0.0 for x in values])
    return floor, seconds[inverse.ravel()]


def _state_per_row(ctx: Context, limits: Limits, cols: dict[str, np.ndarray], ranks: np.ndarray,
                   zero: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Bytes per trainable parameter [n, 3] of the dense and the expert state of each row at ZeRO stage
    `zero`, sharded over the whole group (None: no experts)."""
    full = {k: np.full(len(ranks), v, dtype=np.int64) for k, v in (("order", 0), ("zero", zero), ("shard", 0))}
    values, idx = unique_rows({**cols, **full}, DATA)
    dense = np.array([p.state_bytes_per_param() for p in data_plans(ctx, values, limits.orders)]).reshape(-1, 3)[idx]
    if not ctx.has_experts:
        return dense, None
    values, idx = unique_rows({**cols, **full, "ranks": ranks}, EXPERT_DATA)
    experts = np.array([p.state_bytes_per_param() for p in expert_data_plans(ctx, values)]).reshape(-1, 3)[idx]
    return dense, experts


def _time_floor(ctx: Context, problem: Problem, limits: Limits, cols: dict[str, np.ndarray], opt: np.ndarray,
                layouts: _Layouts) -> np.ndarray:
    """The time floor of each row (module docstring) [n]; opt: its optimizer floor [n]."""
    lower = np.full(len(cols["tp"]), np.inf)
    if not len(lower):
        return lower
    none = RECOMPUTES.index(Recompute.NONE)
    for order in range(len(limits.orders)):
        for sp in _sps(problem, limits):
            probe = _probe(problem, cols, zero=max(limits.zero), rec=none, sp=sp, order=order)
            table, combo = combos_of(ctx, probe)
            f, b, xf, xb, p2p = compute_costs(ctx, probe, table, combo, limits.orders)
            for (pp, vp), idx in groups(probe, ("pp", "vp")):
                layout, m = layouts[(pp, vp)], probe["m"][idx]
                excess = _overlap_excess(layout, f[idx], b[idx], _Exchange(xf[idx], xb[idx]))
                t = _pipeline(layout, f[idx] + b[idx], m, excess) + p2p[idx] * (m + 2 * (pp - 1))
                lower[idx] = np.minimum(lower[idx], t + opt[idx])
    return lower


@dataclass(frozen=True)
class _Exchange:
    """The overlapped exchange of some candidates, as `timing._overlap_excess` reads it from their costs."""

    xf: np.ndarray
    xb: np.ndarray
