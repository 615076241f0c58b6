"""Per-unit quantities of many candidates, from a few plans: all transformer layers are identical.

A unit (the embedding, a layer, the LM head; frozen layers are a unit of their own) has the same
kernels on every stage, so its parameters and saved activations depend only on (tp, sp, recompute)
and the tokens of a micro-batch, and its compute seconds on (tp, cp, mbs, sp, recompute): one
`build_plan` + `engine.unit_times` per combination serves every candidate that shares it.
Communication seconds depend on the group's span as well, which comes from the placement of the
axes (`parallel.placement.span`) and the data-parallel plan (`parallel.data.data_parallel_plan`);
both are called once per distinct layout, and each collective once per (kind, size, span) through
the network model's cache.

A mixture-of-experts model adds ep and etp to those keys: they set the routed experts' parameters per
rank (P/(ep*etp)), their grouped GEMMs (rows T*k*etp/tp on E/ep local experts, busiest-rank load) and
the token exchange. The exchange's groups are placed by ep and etp alone (expert ranks are numbered
etp-ep-edp from innermost, `parallel.placement.expert_span`), so the plan of (tp, cp, mbs, sp, ep, etp)
times it exactly, whatever dp and the order. Its plan is built with the overlap on: its exchange is
then the unit's OVERLAPPED collectives, which a candidate without the overlap waits for after the
unit's kernels instead (`Where.AFTER`, the same collectives).

A low-precision format that caches its cast weights for the step (formats.yaml `weight_cache`) casts them
in the first of the m micro-batches, which `parallel.plan` costs as 1/m of a cast in every micro-batch's
forward: its units' kernels depend on m as well, so m joins their key as `casts` (0 for every candidate
when no cast is cached, so that they share one plan whatever their m).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from madmax.collective import Collective, Span
from madmax.config.strategy import DEFAULT_ORDER, Axis, Recompute, Strategy
from madmax.parallel.formats import low_precision
from madmax.parallel.kernels import Phase, Where
from madmax.parallel.tensor import WEIGHT_CAST
from madmax.search.context import Context
from madmax.search.space import RECOMPUTES

MEMORY = ("tp", "sp", "rec", "ep", "etp")
COMBO = ("tp", "cp", "mbs", "sp", "rec", "ep", "etp", "casts")
DENSE = [COMBO.index(name) for name in ("tp", "cp", "mbs", "sp", "casts")]  # the columns of a plan without experts
LAYOUT = ("order", "tp", "cp", "pp", "dp")
DATA = ("order", "tp", "cp", "pp", "dp", "zero", "shard")
# The routed experts' data plan: ranks = tp*cp*dp of a stage, whatever the order (`expert_data_plans`).
EXPERT_DATA = ("ranks", "ep", "etp", "zero")
# A unit's collectives this search times, by name: (pass, place) of `parallel.kernels`.
COMM = {"tp_fwd": (Phase.FORWARD, Where.AFTER), "tp_bwd": (Phase.BACKWARD, Where.AFTER),
        "cp_fwd": (Phase.FORWARD, Where.BESIDE_ATTENTION), "cp_bwd": (Phase.BACKWARD, Where.BESIDE_ATTENTION)}

Collectives = tuple[tuple[tuple[Collective, float], int], ...]  # ((kind, size_bytes), count), ...


def strategy(row: dict[str, int], orders: tuple[str, ...] = (DEFAULT_ORDER,), fp8_params: bool = False) -> Strategy:
    """A Strategy of trusted values (not validated: the rows come from the enumeration). Without a dp, the
    smallest that the expert degrees fold over (ep*etp divides tp*cp*dp); `fp8_params` the search's."""
    ep, etp = row.get("ep", 1), row.get("etp", 1)
    return Strategy.model_construct(
        tp=row.get("tp", 1), cp=row.get("cp", 1), pp=row.get("pp", 1), dp=row.get("dp", ep * etp), vp=row.get("vp", 1),
        mbs=row.get("mbs", 1), sp=bool(row.get("sp", 0)), recompute=RECOMPUTES[row.get("rec", 0)],
        zero=row.get("zero", 0), shard=row.get("shard", 0) or None, order=orders[row.get("order", 0)], ep=ep, etp=etp,
        ep_overlap=bool(row.get("epo", 0)), fp8_params=fp8_params)


def cast_microbatches(ctx: Context, m: np.ndarray) -> np.ndarray:
    """The `casts` column of candidates with m micro-batches: m where the format caches its cast weights
    for the step (their cast is spread over the m micro-batches), else 0 (every micro-batch casts alike)."""
    fmt = low_precision(ctx.dtype)
    return m if fmt is not None and fmt.weight_cache else np.zeros_like(m)


def _plan(ctx: Context, row: dict[str, int], microbatches: int = 0):
    """The plan of `row`'s strategy with `microbatches` micro-batches (0: those of the context's global batch)."""
    from madmax.parallel.plan import build_plan

    s = strategy(row, fp8_params=ctx.fp8_params)
    batch = microbatches * s.dp * s.mbs if microbatches else ctx.global_batch
    plan = build_plan(ctx.workload, s, domain_size=ctx.domain, seq_len=ctx.seq_len,
                      global_batch=batch, dtype=ctx.dtype, routing=ctx.task.routing)
    for unit in plan.units.values():
        # Exchanges between units and embedding tables (other families) have no closed form here.
        assert not unit.has_exchanges and not unit.state_bytes, f"unit {unit.name} has parts the search does not model"
    return plan


@dataclass
class MemoryTable:
    """Arrays [row of (tp, sp, rec, ep, etp) `values`, unit key]: parameters per rank (with the routed
    experts' share of them), the activation bytes of a micro-batch of one sequence without context
    parallelism, and the low-precision weight copies kept through the step (`UnitPlan.cast_cache_bytes`,
    set by the parameters per rank alone). Saved and working bytes are proportional to the tokens of a
    rank's micro-batch, mbs*seq/cp (`parallel.tensor.saved_bytes`), so one plan per row serves every (mbs, cp)."""

    keys: tuple[str, ...]
    values: np.ndarray
    params: np.ndarray
    trainable: np.ndarray
    expert_params: np.ndarray
    expert_trainable: np.ndarray
    saved: np.ndarray
    working: np.ndarray
    cast_cache: np.ndarray
    # Bytes by which a gather of the trainable dense / expert weights is smaller with fp8_params
    # (`UnitPlan.gather_discount`; 0 without).
    gather_discount: np.ndarray
    expert_gather_discount: np.ndarray

    @property
    def has_experts(self) -> bool:
        return bool(self.expert_params.any())

    def rows_of(self, tp: np.ndarray, ep: np.ndarray, etp: np.ndarray) -> np.ndarray:
        """A row with each (tp, ep, etp) (parameters depend on these only)."""
        at = MEMORY.index
        first = {(int(v[at("tp")]), int(v[at("ep")]), int(v[at("etp")])): i
                 for i, v in reversed(list(enumerate(self.values)))}
        keys, index = np.unique(np.stack([tp, ep, etp], axis=1), axis=0, return_inverse=True)
        return np.array([first[tuple(int(x) for x in k)] for k in keys], dtype=np.int64)[index.ravel()]


def memory_table(ctx: Context, values: np.ndarray) -> MemoryTable:
    """The memory of each (tp, sp, rec, ep, etp) row of `values`: one plan each (kept in `ctx.plans`)."""
    keys: tuple[str, ...] = ()
    rows = []
    for v in values:
        key = ("memory", *(int(x) for x in v))
        if key not in ctx.plans:
            plan = _plan(ctx, dict(zip(MEMORY, key[1:], strict=True)))
            units = list(plan.units.values())
            ctx.plans[key] = tuple(plan.units), [
                [u.params for u in units], [u.trainable_params for u in units], [u.expert_params for u in units],
                [u.expert_trainable_params for u in units], [u.saved_bytes for u in units],
                [u.working_bytes for u in units], [u.cast_cache_bytes for u in units],
                [u.gather_discount[0][1] for u in units], [u.gather_discount[1][1] for u in units]]
        keys, row = ctx.plans[key]
        rows.append(row)
    arr = np.array(rows, dtype=float).reshape(len(values), 9, len(keys))
    return MemoryTable(keys=keys, values=values, params=arr[:, 0], trainable=arr[:, 1], expert_params=arr[:, 2],
                       expert_trainable=arr[:, 3], saved=arr[:, 4], working=arr[:, 5], cast_cache=arr[:, 6],
                       gather_discount=arr[:, 7], expert_gather_discount=arr[:, 8])


@dataclass
class UnitTable:
    """Arrays [combo, unit key] of one unit's compute seconds for one micro-batch on one rank.

    fwd/bwd/rec: forward, backward and recompute kernels; attn_f/attn_b: the attention kernel's share
    of fwd/bwd (the K/V ring of context parallelism runs beside it); flops_model: model FLOPs of one
    forward and backward; has_bwd: the unit has a backward pass; p2p_bytes [combo]: one pipeline send;
    comm: per name of COMM, per key, the units' tensor- and context-parallel collectives of each distinct
    (tp, cp, mbs, sp, full recompute or not), timed per span by the caller; comm_idx [combo]: a combo's
    entry in it; x_fwd/x_bwd [combo, group, key]: seconds of the expert token exchange after the forward
    / backward kernels on each of `exchange_groups`' streams (ep, etp).
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
    comm_idx: np.ndarray
    exchange_groups: tuple[str, ...]
    x_fwd: np.ndarray
    x_bwd: np.ndarray


def _collectives(ops) -> Collectives:
    return tuple(Counter((op.kind, op.size_bytes) for op in ops).items())


def _exchange_s(ctx: Context, ops) -> dict[str, float]:
    """Seconds of the exchange collectives `ops` per group, in their order (each keeps its own span)."""
    out: dict[str, float] = {}
    for op in ops:
        out[op.group] = out.get(op.group, 0.0) + ctx.network.collective_s(op.kind, op.size_bytes, op.span)
    return out


def _base(ctx: Context, tp: int, cp: int, mbs: int, sp: int, ep: int, etp: int,
          casts: int) -> tuple[tuple[str, ...], list, float]:
    """Plan without recompute of one (tp, cp, mbs, sp, ep, etp, casts): its units with their kernel times, their
    tensor- and context-parallel collectives, and their expert exchange (OVERLAPPED: see the module
    docstring); casts: its micro-batches where they set the weight casts' share (`cast_microbatches`).
    Each unit's `recompute_s` is what a full recompute redoes: its forward but the low-precision weight
    casts, whose cached copies the recompute reuses (`parallel.plan`)."""
    from madmax.program.costs import unit_times

    exchanged = ep > 1 or etp > 1
    plan = _plan(ctx, {"tp": tp, "cp": cp, "mbs": mbs, "sp": sp, "ep": ep, "etp": etp, "epo": int(exchanged)},
                 microbatches=casts)
    units = []
    for unit in plan.units.values():
        # The kernels alone: collectives are timed per span by the caller.
        redone = tuple(k for k in unit.fwd if k.category != WEIGHT_CAST)
        t = unit_times(replace(unit, comm=(), recompute=redone), ctx.compute, ctx.network, ctx.dtype)
        comm = {name: unit.collectives(*place) for name, place in COMM.items()}
        for name, ops in comm.items():
            assert all(op.group == name[:2] for op in ops), f"unit {unit.name} has {name} collectives off its group"
        exchange = {phase: unit.collectives(phase, Where.OVERLAPPED) for phase in (Phase.FORWARD, Phase.BACKWARD)}
        units.append((unit, t, comm, exchange))
    return tuple(plan.units), units, plan.p2p_bytes


@dataclass(frozen=True)
class _Units:
    """The units of one plan without recompute as arrays over the unit keys [K]: kernel seconds (refwd: the
    forward a full recompute redoes), FLOPs, whether each has a backward pass and is a layer that recompute
    redoes; their collectives by name of COMM, plus `tp_full` (the backward's with a full recompute: the
    forward's first); and the expert exchange's seconds per group after the forward, the backward, and the
    backward with a full recompute."""

    keys: tuple[str, ...]
    fwd: np.ndarray
    bwd: np.ndarray
    refwd: np.ndarray
    attn_f: np.ndarray
    attn_b: np.ndarray
    flops: np.ndarray
    has_bwd: np.ndarray
    redo: np.ndarray
    p2p_bytes: float
    comm: dict[str, tuple[Collectives, ...]]
    x_fwd: dict[str, np.ndarray]
    x_bwd: dict[str, np.ndarray]


def _units(ctx: Context, *key: int) -> _Units:
    """`_base` of (tp, cp, mbs, sp, ep, etp, casts) as arrays (kept in `ctx.plans`)."""
    if ("units", key) in ctx.plans:
        return ctx.plans[("units", key)]
    keys, units, p2p_bytes = _base(ctx, *key)
    redo = [unit.is_layer and unit.has_backward for unit, _, _, _ in units]
    comm = {name: tuple(_collectives(c[name]) for _, _, c, _ in units) for name in COMM}
    comm["tp_full"] = tuple(_collectives(c["tp_fwd"] + c["tp_bwd"]) if r else full
                            for (_, _, c, _), r, full in zip(units, redo, comm["tp_bwd"], strict=True))
    x = {phase: [_exchange_s(ctx, e[phase] if phase is Phase.FORWARD or u.has_backward else ())
                 for u, _, _, e in units] for phase in (Phase.FORWARD, Phase.BACKWARD)}
    groups = sorted({g for per_key in x[Phase.FORWARD] + x[Phase.BACKWARD] for g in per_key})

    def by_group(per_key: list[dict[str, float]]) -> dict[str, np.ndarray]:
        return {g: np.array([k.get(g, 0.0) for k in per_key]) for g in groups}

    out = _Units(keys=keys, fwd=np.array([t.fwd_s for _, t, _, _ in units]),
                 bwd=np.array([t.bwd_s for _, t, _, _ in units]),
                 refwd=np.array([t.recompute_s for _, t, _, _ in units]),
                 attn_f=np.array([t.attention_fwd_s for _, t, _, _ in units]),
                 attn_b=np.array([t.attention_bwd_s for _, t, _, _ in units]),
                 flops=np.array([t.flops_fwd + t.flops_bwd for _, t, _, _ in units]),
                 has_bwd=np.array([u.has_backward for u, _, _, _ in units], dtype=bool),
                 redo=np.array(redo, dtype=bool), p2p_bytes=p2p_bytes, comm=comm,
                 x_fwd=by_group(x[Phase.FORWARD]), x_bwd=by_group(x[Phase.BACKWARD]))
    ctx.plans[("units", key)] = out
    return out


def unit_table(ctx: Context, combos: np.ndarray) -> UnitTable:
    """Compute times, FLOPs and collectives of each (tp, cp, mbs, sp, rec, ep, etp, casts) row of `combos`.

    One plan per (tp, cp, mbs, sp) without recompute; recompute adds, to each layer that has a backward
    pass, its attention forward (selective) or its whole forward with the TP collectives and the expert
    exchange of that forward (full), as `parallel.plan` does (Korthikanti et al. 2022, Sec. 5).

    With experts spread (ep or etp > 1): the routed experts' kernels and exchange depend on tp, cp and
    mbs only through the tokens each tensor-parallel rank routes, x = mbs*seq/(cp*tp)
    (`parallel.tensor.Shape.expert_tokens`; the exchange sends T/tp tokens under the sequence
    parallelism an MoE model needs), and no other kernel depends on ep or etp. So

        unit(tp, cp, mbs, ep, etp) = unit(tp, cp, mbs, 1, 1) + unit(r, ep, etp) - unit(r, 1, 1)

    in kernel seconds and FLOPs, with r the first (tp, cp, mbs) seen with the same x, and the exchange of
    unit(r, ep, etp): one plan per (tp, cp, mbs) and one per (x, ep, etp), not one per combination.
    The plans are kept in `ctx.plans` for later calls.
    """
    c = combos.astype(np.int64).reshape(-1, len(COMBO))
    tp, cp, mbs, _, rec, ep, etp, casts = c.T
    dense_keys, d_idx = np.unique(c[:, DENSE], axis=0, return_inverse=True)
    d_idx = d_idx.ravel()
    dense = [_units(ctx, *(int(x) for x in k[:4]), 1, 1, int(k[4])) for k in dense_keys]
    keys = dense[0].keys if dense else ()

    def stack(name: str, units: list[_Units]) -> np.ndarray:
        return np.array([getattr(u, name) for u in units]).reshape(len(units), len(keys))

    fwd, bwd, refwd, flops = (stack(name, dense)[d_idx] for name in ("fwd", "bwd", "refwd", "flops"))
    attn_f, attn_b, has_bwd, redo = (stack(name, dense)[d_idx] for name in ("attn_f", "attn_b", "has_bwd", "redo"))
    spread = np.flatnonzero((ep > 1) | (etp > 1))
    groups: tuple[str, ...] = ()
    x_fwd = x_bwd = np.zeros((len(c), 0, len(keys)))
    if len(spread):
        tokens, ranks = mbs[spread] * ctx.seq_len, cp[spread] * tp[spread]
        share = np.stack([tokens // np.gcd(tokens, ranks), ranks // np.gcd(tokens, ranks), ep[spread], etp[spread],
                          casts[spread]], axis=1)
        shares, first, e_idx = np.unique(share, axis=0, return_index=True, return_inverse=True)
        pairs = []
        for (a, b, e, t, n), j in zip(shares.tolist(), first, strict=True):
            rep = ctx.plans.setdefault(("rep", a, b, n), tuple(int(x) for x in c[spread[j], :4]))
            pairs.append((_units(ctx, *rep, e, t, n), _units(ctx, *rep, 1, 1, n)))
        e_idx = e_idx.ravel()
        for name, arr in (("fwd", fwd), ("bwd", bwd), ("refwd", refwd), ("flops", flops)):
            arr[spread] += np.array([getattr(s, name) - getattr(r, name) for s, r in pairs])[e_idx]
        groups = tuple(sorted({g for s, _ in pairs for g in (*s.x_fwd, *s.x_bwd)}))
        x_fwd, x_bwd = (np.zeros((len(c), len(groups), len(keys))) for _ in range(2))
        for arr, name in ((x_fwd, "x_fwd"), (x_bwd, "x_bwd")):
            per = np.array([[getattr(s, name).get(g, np.zeros(len(keys))) for g in groups] for s, _ in pairs])
            arr[spread] = per[e_idx]
    full = (rec == RECOMPUTES.index(Recompute.FULL))[:, None] & redo
    selective = (rec == RECOMPUTES.index(Recompute.SELECTIVE))[:, None] & redo
    rec_s = np.where(selective, attn_f, np.where(full, refwd, 0.0))
    x_bwd = x_bwd + np.where(full[:, None, :], x_fwd, 0.0)  # the recomputed forward's exchange first
    comm = [entry for u in dense for entry in ({k: v for k, v in u.comm.items() if k != "tp_full"},
                                               {**{k: v for k, v in u.comm.items() if k != "tp_full"},
                                                "tp_bwd": u.comm["tp_full"]})]
    return UnitTable(keys=keys, combos=combos, fwd=fwd, bwd=bwd, rec=rec_s, attn_f=attn_f, attn_b=attn_b,
                     flops_model=flops, has_bwd=has_bwd,
                     p2p_bytes=np.array([u.p2p_bytes for u in dense], dtype=float)[d_idx], comm=comm,
                     comm_idx=2 * d_idx + (rec == RECOMPUTES.index(Recompute.FULL)), exchange_groups=groups,
                     x_fwd=x_fwd, x_bwd=x_bwd)


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

    return [data_parallel_plan(strategy(dict(zip(DATA, (int(x) for x in v), strict=True)), orders, ctx.fp8_params),
                               ctx.domain, ctx.dtype) for v in values]


def expert_data_plans(ctx: Context, values: np.ndarray) -> list:
    """The routed experts' `DataParallelPlan` of each distinct (ranks, ep, etp, zero) row: their state
    sharded over the whole expert-data-parallel group with ZeRO >= 1 (`parallel.data`), a group placed by
    the tp*cp*dp ranks of a stage and ep, etp alone (`parallel.placement.expert_span`)."""
    from madmax.parallel.data import data_parallel_plan
    from madmax.parallel.experts import spans

    plans = []
    for ranks, ep, etp, zero in values.tolist():
        s = strategy({"dp": ranks, "ep": ep, "etp": etp, "zero": zero})
        plans.append(data_parallel_plan(s, ctx.domain, ctx.dtype, grad_span=spans(s, ctx.domain).edp))
    return plans


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
