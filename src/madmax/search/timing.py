"""Iteration time of many candidates: a closed form to screen them all, a step-level replay to refine.

Closed form (every candidate; it ranks, it is not reported). With P_sc the seconds of chunk c of
stage s per micro-batch (the f + b of its units; ZeRO-3's gathers and reduce-scatters added where
they serialize with the compute), m micro-batches and vp chunks per stage:

    1F1B          T_pipe = (m - 1) max_s P_s + sum_s P_s
    interleaved   T_pipe = m sum_c max_s P_sc + (pp - 1)/pp sum_s max_c P_sc
    T ~ T_pipe + t_p2p (m + 2 (pp - 1)) + exposed gradient collectives (+ tied embeddings)
        + step end (gradient norm, host sync) + max(optimizer, host work beside it)

Both pipeline forms are exact for identical chunks (Narayanan et al. 2021, Sec. 2.2: (m vp + pp - 1)
chunk steps); with unequal chunks the interleaved one takes each chunk index at its slowest stage. The
last micro-batch's gradient collectives hide behind the backward that follows them (longer for the
earlier chunks of an interleaved stage); ZeRO-2's every-micro-batch reduce-scatters can outrun the
compute, bounded by the data-parallel stream's load from the first backward on. Near the top of the
ranking it is within about 1 % of the replay (benchmarks/search_speed.py).

Mixture of experts: the routed experts' gradients travel on a stream of their own (expert data
parallelism), timed like the dense ones and the later of the two counted; the expert token exchange
either waits after each MoE unit's kernels (in f and b) or, overlapped, runs on its own streams beside
the compute that follows, each step ending when they have (`_overlap_excess`).

Replay (the best candidates): each step of each stage becomes a max-plus map of the compute and
data-parallel clocks (one per state group), composed from its units (`maxplus`) with the exchange
streams as clocks that the step's end folds back into c, and the schedule is replayed step by step
(`pipeline.replay`); this reproduces `madmax.engine`'s task graph at step granularity. A stage ends at
max(c, d.., tied-embedding all-reduce); the step's end (`madmax.program.step_end`) waits for every stage, then
each stage's optimizer step; the iteration at the latest stage. When
m > 3 pp the replay runs m_a = 2 pp + (m mod pp) and m_a + pp micro-batches and extrapolates linearly:
after the warm-up the schedule is periodic in pp micro-batches.
"""

from __future__ import annotations

import numpy as np

from madmax.search import maxplus as mp
from madmax.search.costs import Costs
from madmax.search.pipeline import BLAST, F0, NUM_TYPES, B, F, replay, rounds
from madmax.search.units import StageLayout

NEG = -np.inf


def optimizer_s(compute, layout: StageLayout, costs: Costs) -> np.ndarray:
    """Optimizer step of each stage [n, pp]: memory-bound, moving (2o + g + w) bytes per trainable
    parameter (read and write the state, read the gradient, write the weight) of each state group, as
    the engine does."""
    moved = None
    for group in costs.groups:
        trainable = group.trainable @ layout.per_stage.T  # [n, pp]
        w, g, o = group.state[:, 0:1], group.state[:, 1:2], group.state[:, 2:3]
        moved = trainable * (2 * o + g + w) if moved is None else moved + trainable * (2 * o + g + w)
    values, inverse = np.unique(moved, return_inverse=True)
    seconds = np.array([compute.memory_s(float(x)) if x else 0.0 for x in values])
    return seconds[inverse.reshape(moved.shape)]


def closed_form(layout: StageLayout, m: np.ndarray, costs: Costs, zero: np.ndarray,
                opt: np.ndarray) -> np.ndarray:
    """Screening estimate of the iteration time [n] (see the module docstring)."""
    per_stage = layout.per_stage.T  # [K, pp]
    z3 = (zero >= 3)[:, None]
    groups = costs.groups
    g3 = groups[0].g3
    # ZeRO-3: after each unit's backward its reduce-scatter, then the next unit's gather, then its backward
    # (on each state group's stream; the slowest sets the pace).
    extra = np.where(z3 & (groups[0].r_mid > 0), groups[0].r_mid + groups[0].g3, 0.0)
    for group in groups[1:]:
        g3 = np.maximum(g3, group.g3)
        extra = np.maximum(extra, np.where(z3 & (group.r_mid > 0), group.r_mid + group.g3, 0.0))
    f = np.where(z3, np.maximum(costs.f, g3), costs.f)
    b = costs.b + extra
    fwd, bwd = f @ per_stage, b @ per_stage  # [n, pp]
    pp, vp = layout.pp, layout.vp
    pipe = _pipeline(layout, f + b, m, _overlap_excess(layout, f, b, costs))
    if pp > 1:
        pipe += costs.p2p * (m + 2 * (pp - 1))
    first_backward = fwd.sum(axis=1, keepdims=True) + (np.cumsum(bwd[:, ::-1], axis=1)[:, ::-1] - bwd) / vp
    exposed = stream = None
    for group in groups:
        # Gradient collectives of the last micro-batch beyond the backward they hide behind: the chunks of
        # an interleaved stage finish (pp - 1) x vp chunk steps apart, so the earlier ones hide longer.
        r_last = group.r_last @ per_stage
        first = np.where(per_stage > 0, group.r_last[:, :, None], 0.0).max(axis=1)
        late = np.maximum(first, r_last - bwd * (1 + (vp - 1) * pp) / vp)
        # ZeRO-2: the data-parallel stream reduce-scatters every micro-batch from the first backward on.
        load = np.where((zero == 2)[:, None], group.r_mid @ per_stage * (m[:, None] - 1), 0.0) + r_last
        busy = np.maximum(group.g1 @ per_stage, first_backward) + load
        exposed = late if exposed is None else np.maximum(exposed, late)
        stream = busy if stream is None else np.maximum(stream, busy)
    end = np.maximum(pipe[:, None] + exposed, np.where(z3, 0.0, stream))
    return end.max(axis=1) + costs.tied + costs.step + np.maximum(opt.max(axis=1), costs.beside)


def _overlap_excess(layout: StageLayout, f: np.ndarray, b: np.ndarray, costs: Costs) -> np.ndarray | None:
    """Seconds the overlapped expert exchange adds to one micro-batch's forward and backward steps of
    each chunk kind [n, T], or None when nothing is overlapped.

    A step's units run c_1 .. c_N on the compute stream; each unit's exchange a_i starts after it on its
    own stream, and the step ends when both streams have. For N identical units that is
    N max(c, a) + min(c, a); for mixed units, max(sum c + max a, min c + sum a) (the min over the units
    that exchange), an upper bound near the replay.
    """
    if not costs.xf.shape[1] or not (costs.xf.any() or costs.xb.any()):
        return None
    kinds = layout.kinds[0]  # [T, K]
    excess = np.zeros((len(f), len(kinds)))
    for compute, exchange in ((f, costs.xf), (b, costs.xb)):
        sum_c = compute @ kinds.T
        step = sum_c
        for x in range(exchange.shape[1]):
            a = exchange[:, x]  # [n, K]
            sum_a = a @ kinds.T
            chain = np.empty_like(sum_c)
            for t, kind in enumerate(kinds):
                present = np.flatnonzero(kind > 0)
                ap, cp = a[:, present], compute[:, present]
                c_min = np.where(ap > 0, cp, np.inf).min(axis=1)
                chain[:, t] = np.where(np.isfinite(c_min), np.maximum(sum_c[:, t] + ap.max(axis=1),
                                                                      c_min + sum_a[:, t]), sum_c[:, t])
            step = np.maximum(step, chain)
        excess += step - sum_c
    return excess


def _pipeline(layout: StageLayout, unit_s: np.ndarray, m: np.ndarray, excess: np.ndarray | None = None) -> np.ndarray:
    """Pipeline time of m micro-batches [n] from each unit's f + b [n, K] (and each chunk kind's excess
    [n, T] from the overlapped exchange).

    With P_sc the time of chunk c of stage s per micro-batch: 1F1B (vp = 1) takes
    (m - 1) max_s P_s + sum_s P_s; the interleaved schedule m sum_c max_s P_sc (each chunk index
    advances at its slowest stage) + (pp - 1)/pp sum_s max_c P_sc (fill and drain at the slowest chunk
    of each stage). Both are exact for identical chunks.
    """
    kinds, which = layout.kinds
    per_kind = unit_s @ kinds.T  # [n, T]
    if excess is not None:
        per_kind = per_kind + excess
    if layout.vp == 1:
        p = per_kind[:, which[:, 0]]
        return (m - 1) * p.max(axis=1) + p.sum(axis=1)

    def slowest(sets: np.ndarray) -> np.ndarray:
        """sum over the rows of `sets` (kinds present) of the slowest kind present."""
        masks, count = np.unique(sets, axis=0, return_counts=True)
        return sum(c * per_kind[:, mask].max(axis=1) for mask, c in zip(masks, count, strict=True))

    present = np.zeros((layout.pp, layout.vp, len(kinds)), dtype=bool)
    present[np.arange(layout.pp)[:, None], np.arange(layout.vp)[None], which] = True
    return m * slowest(present.any(axis=0)) + (layout.pp - 1) / layout.pp * slowest(present.any(axis=1))


def _dims(costs: Costs) -> tuple[int, int, int]:
    """Clocks of a step map: the state groups' streams (each a data-parallel clock after c), the exchange
    streams, and the whole dimension (with the constant last)."""
    groups, exchanges = len(costs.groups), costs.xf.shape[1]
    return groups, exchanges, 1 + groups + exchanges + 1


def _unit_maps(costs: Costs, k: int, z3: np.ndarray) -> dict[int, np.ndarray]:
    """Max-plus maps [n, D, D] of one unit of key k for the forward and the two backward step types.

    Clocks (c, d_1 .. d_j, x_1 .. x_e, 0). Under ZeRO-3 each state group that has parameters in the unit
    gathers them on its stream before the pass (d_j + g3_j), which the compute waits for; a backward
    then reduces the gradients of each group on its stream after the compute (+ r_j, where r_j > 0); an
    exchange stream runs its collectives after the compute (x' = max(x, c') + a_x).
    """
    n = len(z3)
    num_groups, num_x, dim = _dims(costs)
    one = dim - 1
    gathers = [z3 & (group.params[:, k] > 0) for group in costs.groups] if num_groups > 1 else [z3]
    maps = {}
    for kind in (F, B, BLAST):
        t = costs.f[:, k] if kind == F else costs.b[:, k]
        u = np.full((n, dim, dim), NEG)
        u[:, one, one] = 0.0
        # The compute: after its own clock and each group's gather.
        u[:, 0, 0] = t
        for j, group in enumerate(costs.groups):
            u[:, 0, 1 + j] = np.where(gathers[j], group.g3[:, k] + t, NEG)
        for j, group in enumerate(costs.groups):
            g3, row = group.g3[:, k], 1 + j
            u[:, row, row] = np.where(gathers[j], g3, 0.0)
            if kind == F:
                continue
            r = (group.r_mid if kind == B else group.r_last)[:, k]
            has_r = r > 0
            u[:, row, 0] = np.where(has_r, t + r, NEG)
            for i, other in enumerate(costs.groups):
                via = np.where(gathers[i], other.g3[:, k] + t + r, NEG)
                if i == j:
                    u[:, row, row] = np.where(has_r, np.where(gathers[j], g3 + t + r, r), u[:, row, row])
                else:
                    u[:, row, 1 + i] = np.where(has_r, via, NEG)
        exchange = costs.xf if kind == F else costs.xb
        for x in range(num_x):
            a, row = exchange[:, x, k], 1 + num_groups + x
            u[:, row, row] = a
            u[:, row, 0] = t + a
            for j, group in enumerate(costs.groups):
                u[:, row, 1 + j] = np.where(gathers[j], group.g3[:, k] + t + a, NEG)
        maps[kind] = u
    has_bwd = costs.table.has_bwd[costs.combo][:, k][:, None, None]
    for kind in (B, BLAST):
        maps[kind] = np.where(has_bwd, maps[kind], mp.identity(n, dim))
    return maps


def step_maps(layout: StageLayout, costs: Costs, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients [n, pp*vp*4, 1 + j, 2 + j] of every step map (rows c', d_1', ..; columns c, d_1, .., 0)
    and the data-parallel clocks at the start [n, pp, j], j state groups."""
    n, pp, vp = len(zero), layout.pp, layout.vp
    num_groups, num_x, dim = _dims(costs)
    keep = [*range(1 + num_groups), dim - 1]  # the clocks that outlive a step, and the constant
    units = {k: _unit_maps(costs, k, zero >= 3) for k in range(costs.f.shape[1])}
    powers: dict[tuple[int, int, int], np.ndarray] = {}

    def run(k: int, kind: int, count: int) -> np.ndarray:
        """A run of `count` identical units (repeated squaring, shared by the chunks of the shape)."""
        if (k, kind, count) not in powers:
            powers[(k, kind, count)] = mp.power(units[k][kind], count)
        return powers[(k, kind, count)]

    maps = np.empty((n, pp * vp * NUM_TYPES, 1 + num_groups, 2 + num_groups))
    d0 = np.zeros((n, pp, num_groups))
    trainable = costs.trainable > 0  # [n, K]
    gathers = (zero == 1) | (zero == 2)
    for s in range(pp):
        gate, d0[:, s] = _first_gathers(layout.runs[s], costs)
        for c in range(vp):
            runs = layout.runs[s][c]
            forward, first, backward, last = (mp.identity(n, dim) for _ in range(4))
            for k, count in runs:
                forward = mp.mul(run(k, F, count), forward)
                # The first micro-batch's forward waits for the key's weight gathers (ZeRO-1/2); its
                # exchange starts after that forward.
                gated = units[k][F].copy()
                start = np.where(gathers & trainable[:, k], gate[k], NEG)
                gated[:, 0, dim - 1] = start + costs.f[:, k]
                for x in range(num_x):
                    gated[:, 1 + num_groups + x, dim - 1] = start + costs.f[:, k] + costs.xf[:, x, k]
                first = mp.mul(run(k, F, count - 1), mp.mul(gated, first))
            for k, count in reversed(runs):
                backward, last = mp.mul(run(k, B, count), backward), mp.mul(run(k, BLAST, count), last)
            for kind, mat in ((F0, first), (F, forward), (B, backward), (BLAST, last)):
                q = (s * vp + c) * NUM_TYPES + kind
                if num_x:  # the step ends when its exchange streams have (they start idle: after c)
                    mat = mat.copy()
                    mat[:, 0] = np.maximum(mat[:, 0], mat[:, 1 + num_groups:dim - 1].max(axis=1))
                maps[:, q] = mat[:, :1 + num_groups][:, :, keep]
    return maps, d0


def _first_gathers(stage_runs, costs: Costs) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """ZeRO-1/2: the weight all-gathers every unit of the stage issues at the start, in program order, on
    each state group's stream; the first forward of each key waits for the gathers of its first unit
    (the engine keeps one dependency per key). Returns the end of those gathers per key [n] and each
    stream's end [n, j]."""
    n, num_keys = costs.f.shape
    gate: dict[int, np.ndarray] = {k: np.full(n, NEG) for k in range(num_keys)}
    ends = np.zeros((n, len(costs.groups)))
    for j, group in enumerate(costs.groups):
        trainable = group.trainable > 0
        clock = np.zeros(n)
        seen: set[int] = set()
        for chunk in stage_runs:
            for k, count in chunk:
                if k not in seen:
                    seen.add(k)
                    gate[k] = np.maximum(gate[k], np.where(trainable[:, k], clock + group.g1[:, k], NEG))
                clock = clock + count * np.where(trainable[:, k], group.g1[:, k], 0.0)
        ends[:, j] = clock
    return gate, ends


def _replay_end(layout: StageLayout, m: int, maps: np.ndarray, d0: np.ndarray, costs: Costs,
                opt: np.ndarray) -> np.ndarray:
    c, d = replay(rounds(layout.pp, layout.vp, m), maps, d0, costs.p2p)
    end = np.maximum(c, d[:, :, 0])
    if layout.pp > 1:  # the tied embeddings' all-reduce runs on the dense data-parallel stream
        tied = np.maximum(c, d[:, :, 0]) + costs.tied[:, None]
        end[:, [0, -1]] = np.maximum(end[:, [0, -1]], tied[:, [0, -1]])
    for j in range(1, d.shape[2]):
        end = np.maximum(end, d[:, :, j])
    # The step's end: the gradient norm waits for every stage (and the last stage's loss all-reduce), then
    # the host sync, then each stage's optimizer beside the host's work (`madmax.program.step_end`).
    ready = np.maximum(end.max(axis=1), c[:, -1] + costs.loss)
    return ready + costs.step + np.maximum(opt.max(axis=1), costs.beside)


def refine(layout: StageLayout, m: int, costs: Costs, zero: np.ndarray, opt: np.ndarray) -> np.ndarray:
    """Iteration time [n] by replaying the schedule of m micro-batches (see the module docstring)."""
    maps, d0 = step_maps(layout, costs, zero)
    pp = layout.pp
    if m <= 3 * pp:
        return _replay_end(layout, m, maps, d0, costs, opt)
    m_a = 2 * pp + m % pp
    t_a = _replay_end(layout, m_a, maps, d0, costs, opt)
    t_b = _replay_end(layout, m_a + pp, maps, d0, costs, opt)
    return t_a + (m - m_a) / pp * (t_b - t_a)
