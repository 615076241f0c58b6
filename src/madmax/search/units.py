"""Per-unit quantities of many candidates, from a few plans: all transformer layers are identical.

A unit (the embedding, a layer, the LM head; frozen layers are a unit of their own) has the same
kernels on every stage, so its parameters and saved activations depend only on (tp, sp, recompute)
and the tokens of a micro-batch, and its compute seconds on (tp, cp, mbs, sp, recompute): one
`build_plan` + `engine.unit_times` per combination serves every candidate that shares it.
Communication seconds depend on the group's span as well, which comes from the placement of the
axes (`parallel.placement.span`) and the data-parallel plan (`parallel.data.data_parallel_plan`);
both are called once per distinct layout, and each collective once per (kind, size, span) through
the network model's cache.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from madmax.collective import Collective, Span
from madmax.config.strategy import DEFAULT_ORDER, Axis, Recompute, Strategy
from madmax.parallel.kernels import Phase, Where
from madmax.search.context import Context
from madmax.search.space import RECOMPUTES

MEMORY = ("tp", "sp", "rec")
COMBO = ("tp", "cp", "mbs", "sp", "rec")
LAYOUT = ("order", "tp", "cp", "pp", "dp")
DATA = ("order", "tp", "cp", "pp", "dp", "zero", "shard")
# A unit's collectives this search times, by name: (pass, place) of `parallel.kernels`.
COMM = {"tp_fwd": (Phase.FORWARD, Where.AFTER), "tp_bwd": (Phase.BACKWARD, Where.AFTER),
        "cp_fwd": (Phase.FORWARD, Where.BESIDE_ATTENTION), "cp_bwd": (Phase.BACKWARD, Where.BESIDE_ATTENTION)}

Collectives = tuple[tuple[tuple[Collective, float], int], ...]  # ((kind, size_bytes), count), ...


def strategy(row: dict[str, int], orders: tuple[str, ...] = (DEFAULT_ORDER,)) -> Strategy:
    """A Strategy of trusted values (not validated: the rows come from the enumeration)."""
    return Strategy.model_construct(
        tp=row.get("tp", 1), cp=row.get("cp", 1), pp=row.get("pp", 1), dp=row.get("dp", 1), vp=row.get("vp", 1),
        mbs=row.get("mbs", 1), sp=bool(row.get("sp", 0)), recompute=RECOMPUTES[row.get("rec", 0)],
        zero=row.get("zero", 0), shard=row.get("shard", 0) or None, order=orders[row.get("order", 0)])


def _plan(ctx: Context, row: dict[str, int]):
    from madmax.parallel.plan import build_plan

    plan = build_plan(ctx.workload, strategy(row), domain_size=ctx.domain, seq_len=ctx.seq_len,
                      global_batch=ctx.global_batch, dtype=ctx.dtype)
    for unit in plan.units.values():
        # Exchanges between units and embedding tables (other families) have no closed form here.
        assert not unit.has_exchanges and not unit.state_bytes, f"unit {unit.name} has parts the search does not model"
    return plan


@dataclass
class MemoryTable:
    """Arrays [row of (tp, sp, rec) `values`, unit key]: parameters per rank, and the activation bytes of
    a micro-batch of one sequence without context parallelism. Saved and working bytes are proportional
    to the tokens of a rank's micro-batch, mbs*seq/cp (`parallel.tensor.saved_bytes`), so one plan per
    row serves every (mbs, cp)."""

    keys: tuple[str, ...]
    values: np.ndarray
    params: np.ndarray
    trainable: np.ndarray
    saved: np.ndarray
    working: np.ndarray

    def rows_of(self, tp: np.ndarray) -> np.ndarray:
        """A row with each tensor-parallel degree (parameters depend on tp only)."""
        first = {int(v[0]): i for i, v in reversed(list(enumerate(self.values)))}
        return np.array([first[int(t)] for t in tp], dtype=np.int64)


def memory_table(ctx: Context, values: np.ndarray) -> MemoryTable:
    keys: tuple[str, ...] = ()
    rows = []
    for v in values:
        plan = _plan(ctx, dict(zip(MEMORY, (int(x) for x in v), strict=True)))
        keys = keys or tuple(plan.units)
        units = [plan.units[k] for k in keys]
        rows.append([[u.params for u in units], [u.trainable_params for u in units],
                     [u.saved_bytes for u in units], [u.working_bytes for u in units]])
    arr = np.array(rows, dtype=float).reshape(len(values), 4, len(keys))
    return MemoryTable(keys=keys, values=values, params=arr[:, 0], trainable=arr[:, 1], saved=arr[:, 2],
                       working=arr[:, 3])


@dataclass
class UnitTable:
    """Arrays [combo, unit key] of one unit's compute seconds for one micro-batch on one rank.

    fwd/bwd/rec: forward, backward and recompute kernels; attn_f/attn_b: the attention kernel's share
    of fwd/bwd (the K/V ring of context parallelism runs beside it); flops_model: model FLOPs of one
    forward and backward; has_bwd: the unit has a backward pass; p2p_bytes [combo]: one pipeline send;
    comm: per combo, per name of COMM, per key: the unit's collectives.
    """

    keys: tuple[str, ...]
    combos: np.ndarray
    fwd: np.ndarray
    bwd: np.ndarray
    rec: np.ndarray
    attn_f: np.ndarray
    attn_b: np.ndarray
    flops_model: np.ndarray
    has_bwd: np.ndarray
    p2p_bytes: np.ndarray
    comm: list[dict[str, tuple[Collectives, ...]]]


def _collectives(ops) -> Collectives:
    return tuple(Counter((op.kind, op.size_bytes) for op in ops).items())


def _base(ctx: Context, tp: int, cp: int, mbs: int, sp: int) -> tuple[tuple[str, ...], list, float]:
    """Plan without recompute of one (tp, cp, mbs, sp): its units with their kernel times and collectives."""
    from madmax.program.costs import unit_times

    plan = _plan(ctx, {"tp": tp, "cp": cp, "mbs": mbs, "sp": sp})
    units = []
    for unit in plan.units.values():
        # The kernels alone: collectives are timed per span by the caller.
        t = unit_times(replace(unit, comm=()), ctx.compute, ctx.network, ctx.dtype)
        units.append((unit, t, {name: _collectives(unit.collectives(*place)) for name, place in COMM.items()}))
    return tuple(plan.units), units, plan.p2p_bytes


def unit_table(ctx: Context, combos: np.ndarray) -> UnitTable:
    """Compute times, FLOPs and collectives of each (tp, cp, mbs, sp, rec) row of `combos`.

    One plan per (tp, cp, mbs, sp) without recompute; recompute adds, to each layer that has a backward
    pass, its attention forward (selective) or its whole forward with the TP collectives of that forward
    (full), as `parallel.plan` does (Korthikanti et al. 2022, Sec. 5).
    """
    keys: tuple[str, ...] = ()
    base: dict[tuple[int, ...], tuple] = {}
    names = ("fwd", "bwd", "rec", "attn_f", "attn_b", "flops_model", "has_bwd")
    rows: list[dict] = []
    for combo in combos:
        tp, cp, mbs, sp, rec = (int(x) for x in combo)
        if (tp, cp, mbs, sp) not in base:
            base[(tp, cp, mbs, sp)] = _base(ctx, tp, cp, mbs, sp)
        keys, units, p2p_bytes = base[(tp, cp, mbs, sp)]
        row: dict = {name: [] for name in names} | {"comm": {name: [] for name in COMM}, "p2p_bytes": p2p_bytes}
        for unit, t, comm in units:
            redo = unit.is_layer and unit.has_backward
            rec_s, tp_bwd = 0.0, comm["tp_bwd"]
            if redo and RECOMPUTES[rec] is Recompute.SELECTIVE:
                rec_s = t.attention_fwd_s
            elif redo and RECOMPUTES[rec] is Recompute.FULL:
                redone = unit.collectives(*COMM["tp_fwd"]) + unit.collectives(*COMM["tp_bwd"])
                rec_s, tp_bwd = t.fwd_s, _collectives(redone)
            for name, value in zip(names, (t.fwd_s, t.bwd_s, rec_s, t.attention_fwd_s, t.attention_bwd_s,
                                           t.flops_fwd + t.flops_bwd, unit.has_backward), strict=True):
                row[name].append(value)
            for name in COMM:
                row["comm"][name].append(tp_bwd if name == "tp_bwd" else comm[name])
        rows.append(row)
    arrays = {name: np.array([r[name] for r in rows], dtype=float).reshape(len(rows), -1)
              for name in names if name != "has_bwd"}
    return UnitTable(keys=keys, combos=combos, has_bwd=np.array([r["has_bwd"] for r in rows], dtype=bool),
                     p2p_bytes=np.array([r["p2p_bytes"] for r in rows], dtype=float),
                     comm=[{k: tuple(v) for k, v in r["comm"].items()} for r in rows], **arrays)


def comm_s(ctx: Context, ops: Collectives, span: Span) -> float:
    """Seconds of a unit's collectives run one after the other on one stream."""
    return sum(count * ctx.network.collective_s(kind, size, span) for (kind, size), count in ops)


@dataclass
class Layouts:
    """Spans of each distinct (order, tp, cp, pp, dp): tensor, context, pipeline-neighbour groups."""

    tp_span: list[Span]
    cp_span: list[Span]
    p2p_span: list[Span]


def layouts(ctx: Context, values: np.ndarray, orders: tuple[str, ...]) -> Layouts:
    from madmax.parallel.placement import span
    from madmax.program.training import p2p_span as _p2p_span

    tp, cp, p2p = [], [], []
    for v in values:
        s = strategy(dict(zip(LAYOUT, (int(x) for x in v), strict=True)), orders)
        tp.append(span(s, (Axis.TP,), ctx.domain))
        cp.append(span(s, (Axis.CP,), ctx.domain))
        p2p.append(_p2p_span(span(s, (Axis.PP,), ctx.domain)))
    return Layouts(tp_span=tp, cp_span=cp, p2p_span=p2p)


def data_plans(ctx: Context, values: np.ndarray, orders: tuple[str, ...]) -> list:
    """The `DataParallelPlan` of each distinct (order, tp, cp, pp, dp, zero, shard) row."""
    from madmax.parallel.data import data_parallel_plan

    return [data_parallel_plan(strategy(dict(zip(DATA, (int(x) for x in v), strict=True)), orders),
                               ctx.domain, ctx.dtype) for v in values]


@dataclass(frozen=True)
class StageLayout:
    """Units of each stage and chunk for one (pp, vp): counts [pp, vp, K] and, per (stage, chunk), the
    runs of identical units in forward order ((key index, count), ...)."""

    pp: int
    vp: int
    counts: np.ndarray
    runs: tuple[tuple[tuple[tuple[int, int], ...], ...], ...]

    @property
    def per_stage(self) -> np.ndarray:
        """Units of each key per stage [pp, K]."""
        return self.counts.sum(axis=1)

    @cached_property
    def kinds(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct chunk compositions [T, K] and the kind of each chunk [pp, vp]."""
        kinds, which = np.unique(self.counts.reshape(-1, self.counts.shape[2]), axis=0, return_inverse=True)
        return kinds, which.reshape(self.pp, self.vp)


def stage_layout(ctx: Context, pp: int, vp: int, keys: tuple[str, ...]) -> StageLayout:
    """The split of the units into stages and chunks that `build_plan` makes for (pp, vp)."""
    plan = _plan(ctx, {"pp": pp, "vp": vp})
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros((pp, vp, len(keys)))
    runs = []
    for s, chunks in enumerate(plan.stages):
        stage_runs = []
        for c, chunk in enumerate(chunks):
            chunk_runs: list[list[int]] = []
            for key in chunk:
                counts[s, c, index[key]] += 1
                if chunk_runs and chunk_runs[-1][0] == index[key]:
                    chunk_runs[-1][1] += 1
                else:
                    chunk_runs.append([index[key], 1])
            stage_runs.append(tuple((k, n) for k, n in chunk_runs))
        runs.append(tuple(stage_runs))
    return StageLayout(pp=pp, vp=vp, counts=counts, runs=tuple(runs))
