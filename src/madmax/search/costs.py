"""Seconds and bytes of each unit of each candidate: the inputs of the memory and time estimates.

For candidates i and unit keys k (embedding, layer, head, ...), [n, K] arrays:

    f, b     forward / backward seconds of one micro-batch on the compute stream, as `engine` places
             them: f = (fwd - attn) + max(attn, ring_cp) + sum(tp collectives), and b likewise with the
             recompute first (TP and CP collectives wait for the compute around them; the K/V ring runs
             beside the attention); without the all-to-all overlap, the expert token exchange is added
             to them (it waits for the unit's kernels and the next unit waits for it)
    xf, xb   [n, X, K] with the overlap: the exchange on each of its X streams (ep, etp), after the
             unit's kernels, beside the compute that follows; the pass ends when they have

and, per state group (the dense parameters over their dp x cp ranks; the routed experts over their
expert-data-parallel ranks, on a stream of their own):

    g1       ZeRO-1/2 all-gather of the updated weights, once per unit at the start of the iteration
    g3       ZeRO-3 all-gather of the weights before each forward and backward of the unit
    r_mid    gradient collectives after a backward that is not the last micro-batch's (ZeRO-2/3)
    r_last   after the last micro-batch's backward: DDP all-reduce, or reduce-scatter (+ all-reduce
             across replicas under hybrid sharding)

with its parameters and trainable parameters per rank and its state bytes per trainable parameter
(weights, gradients, optimizer); plus per candidate: p2p (one pipeline send), tied (all-reduce of
tied embeddings) and the step's end (`madmax.program.step_end`): step (gradient-norm all-reduce + host
sync before the optimizer), loss (the last stage's loss all-reduce), beside (host work beside the
optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from madmax.collective import Collective, Span
from madmax.parallel.formats import tensor_bytes
from madmax.program.step_end import step_end_costs
from madmax.search.context import Context
from madmax.search.space import unique_rows
from madmax.search.units import (
    COMBO,
    COMM,
    DATA,
    EXPERT_DATA,
    LAYOUT,
    Layouts,
    MemoryTable,
    UnitTable,
    cast_microbatches,
    comm_s,
    data_plans,
    expert_data_plans,
    layouts,
    strategy,
    unit_table,
)

STATE_ARRAYS = ("params", "trainable", "state", "g1", "g3", "r_mid", "r_last")
PER_CANDIDATE = ("f", "b", "xf", "xb", "p2p", "tied", "step", "loss", "beside")


@dataclass
class StateCosts:
    """One state group's arrays [n, K] (see the module docstring); state [n, 3]."""

    params: np.ndarray
    trainable: np.ndarray
    state: np.ndarray
    g1: np.ndarray
    g3: np.ndarray
    r_mid: np.ndarray
    r_last: np.ndarray

    def take(self, index: np.ndarray) -> StateCosts:
        return StateCosts(**{name: getattr(self, name)[index] for name in STATE_ARRAYS})


@dataclass
class Costs:
    """Per-candidate arrays (see the module docstring); `combo` indexes `table` rows; `groups` the state
    groups, the dense one first (the routed experts' second, in an MoE model)."""

    table: UnitTable
    combo: np.ndarray
    f: np.ndarray
    b: np.ndarray
    xf: np.ndarray
    xb: np.ndarray
    p2p: np.ndarray
    tied: np.ndarray
    groups: tuple[StateCosts, ...]
    step: np.ndarray
    loss: np.ndarray
    beside: np.ndarray

    @property
    def trainable(self) -> np.ndarray:
        """Trainable parameters per rank of each unit [n, K], all groups."""
        return sum(g.trainable for g in self.groups)

    def take(self, index: np.ndarray) -> Costs:
        return Costs(table=self.table, combo=self.combo[index], groups=tuple(g.take(index) for g in self.groups),
                     **{name: getattr(self, name)[index] for name in PER_CANDIDATE})


def combos_of(ctx: Context, cols: dict[str, np.ndarray]) -> tuple[UnitTable, np.ndarray]:
    """The unit table of every (tp, cp, mbs, sp, rec, ep, etp, casts) among `cols` and each candidate's row in it."""
    values, combo = unique_rows({**cols, "casts": cast_microbatches(ctx, cols["m"])}, COMBO)
    return unit_table(ctx, values), combo


def state_bytes(ctx: Context, cols: dict[str, np.ndarray],
                orders: tuple[str, ...]) -> tuple[np.ndarray, list, np.ndarray, np.ndarray]:
    """Bytes per trainable parameter (weights, gradients, optimizer) of each candidate [n, 3], the data
    plans of its distinct (order, tp, cp, pp, dp, zero, shard) rows, those rows and each candidate's
    index into them."""
    values, idx = unique_rows(cols, DATA)
    plans = data_plans(ctx, values, orders)
    per_plan = np.array([p.state_bytes_per_param() for p in plans], dtype=float).reshape(-1, 3)
    return per_plan[idx], plans, values, idx


def expert_state_bytes(ctx: Context, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, list, np.ndarray, np.ndarray]:
    """`state_bytes` of the routed experts: by their data plan of each distinct (tp*cp*dp, ep, etp, zero)."""
    values, idx = unique_rows({**cols, "ranks": cols["tp"] * cols["cp"] * cols["dp"]}, EXPERT_DATA)
    plans = expert_data_plans(ctx, values)
    per_plan = np.array([p.state_bytes_per_param() for p in plans], dtype=float).reshape(-1, 3)
    return per_plan[idx], plans, values, idx


def unit_costs(ctx: Context, cols: dict[str, np.ndarray], table: UnitTable, combo: np.ndarray,
               memory: MemoryTable, orders: tuple[str, ...]) -> Costs:
    """Seconds of every unit of every candidate in `cols` (see the module docstring)."""
    f, b, xf, xb, p2p = compute_costs(ctx, cols, table, combo, orders)
    groups = [_dense_costs(ctx, cols, memory, orders)]
    if memory.has_experts:
        groups.append(_expert_costs(ctx, cols, memory))
    tied = np.zeros(len(combo))
    if ctx.workload.tied_params:  # the engine's all-reduce of tied embeddings between the first and last stage
        act = tensor_bytes(ctx.dtype)
        tps, tp_idx = np.unique(cols["tp"], return_inverse=True)
        per_tp = np.array([ctx.network.collective_s(Collective.ALL_REDUCE, float(ctx.workload.tied_params / int(t)
                                                                                 * act), Span(1, 2)) for t in tps])
        tied = np.where(cols["pp"] > 1, per_tp[tp_idx.ravel()], 0.0)
    step, loss, beside = _step_end_costs(ctx, cols, orders)
    return Costs(table=table, combo=combo, f=f, b=b, xf=xf, xb=xb, p2p=p2p, tied=tied, groups=tuple(groups),
                 step=step, loss=loss, beside=beside)


def _step_end_costs(ctx: Context, cols: dict[str, np.ndarray], orders: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """The engine's step end of each candidate [n] (`madmax.program.step_end`): gradient norm + host sync
    before the optimizer, the loss all-reduce, the host's work beside the optimizer."""
    values, idx = unique_rows(cols, DATA)
    ends = [step_end_costs(strategy(row, orders), plan.zero, plan.grad_span, ctx.network, ctx.domain)
            for row, plan in zip((dict(zip(DATA, (int(x) for x in v), strict=True)) for v in values),
                                 data_plans(ctx, values, orders), strict=True)]
    per_row = np.array([(e.norm_s + e.host_sync_s, e.loss_s, e.host_beside_s) for e in ends], dtype=float)
    per_row = per_row.reshape(-1, 3)[idx.ravel()]
    return per_row[:, 0], per_row[:, 1], per_row[:, 2]


def compute_costs(ctx: Context, cols: dict[str, np.ndarray], table: UnitTable, combo: np.ndarray,
                  orders: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """f, b [n, K], the overlapped exchange xf, xb [n, X, K] and one pipeline send p2p [n] of every
    candidate (the compute stream's part of `unit_costs`, without the state groups)."""
    lay_values, lay_idx = unique_rows(cols, LAYOUT)
    lay = layouts(ctx, lay_values, orders)
    f, b = _compute_and_inner_comm(ctx, table, combo, lay_idx, lay)
    epo = cols["epo"].astype(bool)[:, None, None]
    xf, xb = table.x_fwd[combo], table.x_bwd[combo]
    if xf.shape[1]:  # without the overlap the exchange waits after the unit's kernels
        f = f + np.where(epo, 0.0, xf).sum(axis=1)
        b = b + np.where(epo, 0.0, xb).sum(axis=1)
        xf, xb = np.where(epo, xf, 0.0), np.where(epo, xb, 0.0)
    sizes, size_idx = np.unique(table.p2p_bytes, return_inverse=True)
    pairs, pair_idx = unique_rows({"size": size_idx.ravel()[combo], "layout": lay_idx}, ("size", "layout"))
    # Plain floats into the network model: its cache is shared with `simulate`.
    p2p = np.array([ctx.network.collective_s(Collective.SEND_RECV, float(sizes[j]), lay.p2p_span[k])
                    for j, k in pairs])[pair_idx]
    return f, b, xf, xb, np.where(cols["pp"] > 1, p2p, 0.0)


def _dense_costs(ctx: Context, cols: dict[str, np.ndarray], memory: MemoryTable,
                 orders: tuple[str, ...]) -> StateCosts:
    """The dense parameters' state group: everything but the routed experts, over dp x cp."""
    rows = memory.rows_of(cols["tp"], cols["ep"], cols["etp"])
    params, trainable = memory.params - memory.expert_params, memory.trainable - memory.expert_trainable
    state, plans, values, data_idx = state_bytes(ctx, cols, orders)
    plan_rows = rows[_first(data_idx, len(values))]  # the dense parameters depend on tp alone, which DATA holds
    per_plan = _data_comm(ctx, params[plan_rows], trainable[plan_rows], plans, memory.gather_discount[plan_rows])
    g1, g3, r_mid, r_last = (x[data_idx] for x in per_plan)
    return StateCosts(params=params[rows], trainable=trainable[rows], state=state, g1=g1, g3=g3, r_mid=r_mid,
                      r_last=r_last)


def _expert_costs(ctx: Context, cols: dict[str, np.ndarray], memory: MemoryTable) -> StateCosts:
    """The routed experts' state group, over their expert-data-parallel ranks."""
    rows = memory.rows_of(cols["tp"], cols["ep"], cols["etp"])
    state, plans, values, data_idx = expert_state_bytes(ctx, cols)
    plan_rows = rows[_first(data_idx, len(values))]  # the experts' parameters depend on ep, etp, which it holds
    per_plan = _data_comm(ctx, memory.expert_params[plan_rows], memory.expert_trainable[plan_rows], plans,
                          memory.expert_gather_discount[plan_rows])
    g1, g3, r_mid, r_last = (x[data_idx] for x in per_plan)
    return StateCosts(params=memory.expert_params[rows], trainable=memory.expert_trainable[rows], state=state,
                      g1=g1, g3=g3, r_mid=r_mid, r_last=r_last)


def _first(index: np.ndarray, count: int) -> np.ndarray:
    """The first candidate of each of `count` distinct rows, from each candidate's row `index`."""
    first = np.empty(count, dtype=np.int64)
    first[index[::-1]] = np.arange(len(index))[::-1]
    return first


def _compute_and_inner_comm(ctx: Context, table: UnitTable, combo: np.ndarray, lay_idx: np.ndarray,
                            lay: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """f and b [n, K]: compute with the TP collectives after it and the CP ring beside the attention."""
    span_ids: dict[tuple[Span, Span], int] = {}
    lay_span = np.array([span_ids.setdefault(pair, len(span_ids))
                         for pair in zip(lay.tp_span, lay.cp_span, strict=True)])
    spans = list(span_ids)
    keys, key_idx = unique_rows({"comm": table.comm_idx[combo], "spans": lay_span[lay_idx]}, ("comm", "spans"))
    comm = {name: np.zeros((len(keys), len(table.keys))) for name in COMM}
    for row, (j, sid) in enumerate(keys):
        tp_span, cp_span = spans[sid]
        for name, arr in comm.items():
            arr[row] = [comm_s(ctx, ops, tp_span if name.startswith("tp") else cp_span) for ops in table.comm[j][name]]
    t = {name: arr[key_idx] for name, arr in comm.items()}
    fwd, bwd, rec = table.fwd[combo], table.bwd[combo], table.rec[combo]
    attn_f, attn_b = table.attn_f[combo], table.attn_b[combo]
    f = np.where(t["cp_fwd"] > 0, fwd - attn_f + np.maximum(attn_f, t["cp_fwd"]), fwd) + t["tp_fwd"]
    b = rec + np.where(t["cp_bwd"] > 0, bwd - attn_b + np.maximum(attn_b, t["cp_bwd"]), bwd) + t["tp_bwd"]
    return f, np.where(table.has_bwd[combo], b, 0.0)


def _data_comm(ctx: Context, params: np.ndarray, trainable: np.ndarray, plans: list,
               discount: np.ndarray) -> tuple[np.ndarray, ...]:
    """g1, g3, r_mid, r_last [plan, K] (see the module docstring) of one state group; params, trainable
    [plan, K]: the group's parameters per rank under each plan's degrees; discount [plan, K]: bytes by which
    the gather of the trainable ones is smaller (weights kept in fp8 only, `UnitPlan.gather_discount`)."""
    net = ctx.network
    out = np.zeros((len(plans), 4, params.shape[1]))
    for i, plan in enumerate(plans):
        for k in range(params.shape[1]):
            p, t = float(params[i, k]), float(trainable[i, k])
            size = t * plan.grad_bytes
            if plan.zero in (1, 2) and plan.shard > 1 and t:
                out[i, 0, k] = net.collective_s(Collective.ALL_GATHER, t * plan.weight_bytes - float(discount[i, k]),
                                                plan.shard_span)
            if plan.zero >= 3:
                out[i, 1, k] = net.collective_s(Collective.ALL_GATHER, p * plan.weight_bytes, plan.shard_span)
            if not t or (plan.shard == 1 and plan.replicas == 1):
                continue
            if plan.zero == 0:
                out[i, 3, k] = net.collective_s(Collective.ALL_REDUCE, size, plan.grad_span)
                continue
            rs = net.collective_s(Collective.REDUCE_SCATTER, size, plan.shard_span) if plan.shard > 1 else 0.0
            ar = (net.collective_s(Collective.ALL_REDUCE, size / plan.shard, plan.replica_span)
                  if plan.replicas > 1 else 0.0)
            out[i, 2, k] = rs if plan.zero >= 2 else 0.0
            out[i, 3, k] = rs + ar
    return out[:, 0], out[:, 1], out[:, 2], out[:, 3]
