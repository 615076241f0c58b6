"""Iteration time of many candidates: a closed form to screen them all, a step-level replay to refine.

Closed form (every candidate; it ranks, it is not reported). With P_sc the seconds of chunk c of
stage s per micro-batch (the f + b of its units; ZeRO-3's gathers and reduce-scatters added where
they serialize with the compute), m micro-batches and vp chunks per stage:

    1F1B          T_pipe = (m - 1) max_s P_s + sum_s P_s
    interleaved   T_pipe = m sum_c max_s P_sc + (pp - 1)/pp sum_s max_c P_sc
    T ~ T_pipe + t_p2p (m + 2 (pp - 1)) + exposed gradient collectives + optimizer (+ tied embeddings)

Both pipeline forms are exact for identical chunks (Narayanan et al. 2021, Sec. 2.2: (m vp + pp - 1)
chunk steps); with unequal chunks the interleaved one takes each chunk index at its slowest stage. The
last micro-batch's gradient collectives hide behind the backward that follows them (longer for the
earlier chunks of an interleaved stage); ZeRO-2's every-micro-batch reduce-scatters can outrun the
compute, bounded by the data-parallel stream's load from the first backward on. Near the top of the
ranking it is within about 1 % of the replay (benchmarks/search_speed.py).

Replay (the best candidates): each step of each stage becomes a max-plus map of the compute and
data-parallel clocks, composed from its units (`maxplus`), and the schedule is replayed step by step
(`pipeline.replay`); this reproduces `madmax.engine`'s task graph at step granularity. A stage ends at
max(c, d, tied-embedding all-reduce) + its optimizer step; the iteration at the latest stage. When
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
    parameter (read and write the state, read the gradient, write the weight), as the engine does."""
    trainable = costs.trainable @ layout.per_stage.T  # [n, pp]
    w, g, o = costs.state[:, 0:1], costs.state[:, 1:2], costs.state[:, 2:3]
    moved = trainable * (2 * o + g + w)
    values, inverse = np.unique(moved, return_inverse=True)
    seconds = np.array([compute.memory_s(float(x)) if x else 0.0 for x in values])
    return seconds[inverse.reshape(moved.shape)]


def closed_form(layout: StageLayout, m: np.ndarray, costs: Costs, zero: np.ndarray,
                opt: np.ndarray) -> np.ndarray:
    """Screening estimate of the iteration time [n] (see the module docstring)."""
    per_stage = layout.per_stage.T  # [K, pp]
    z3 = (zero >= 3)[:, None]
    f = np.where(z3, np.maximum(costs.f, costs.g3), costs.f)
    # ZeRO-3: after each unit's backward its reduce-scatter, then the next unit's gather, then its backward.
    b = costs.b + np.where(z3 & (costs.r_mid > 0), costs.r_mid + costs.g3, 0.0)
    fwd, bwd = f @ per_stage, b @ per_stage  # [n, pp]
    pp, vp = layout.pp, layout.vp
    pipe = _pipeline(layout, f + b, m)
    if pp > 1:
        pipe += costs.p2p * (m + 2 * (pp - 1))
    # Gradient collectives of the last micro-batch beyond the backward they hide behind: the chunks of
    # an interleaved stage finish (pp - 1) x vp chunk steps apart, so the earlier ones hide longer.
    r_last = costs.r_last @ per_stage
    first = np.where(per_stage > 0, costs.r_last[:, :, None], 0.0).max(axis=1)
    exposed = np.maximum(first, r_last - bwd * (1 + (vp - 1) * pp) / vp)
    # ZeRO-2: the data-parallel stream reduce-scatters every micro-batch from the first backward on.
    load = np.where((zero == 2)[:, None], costs.r_mid @ per_stage * (m[:, None] - 1), 0.0) + r_last
    gathers = costs.g1 @ per_stage
    first_backward = fwd.sum(axis=1, keepdims=True) + (np.cumsum(bwd[:, ::-1], axis=1)[:, ::-1] - bwd) / vp
    stream = np.maximum(gathers, first_backward) + load
    end = np.maximum(pipe[:, None] + exposed, np.where(z3, 0.0, stream)) + opt
    return end.max(axis=1) + costs.tied


def _pipeline(layout: StageLayout, unit_s: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Pipeline time of m micro-batches [n] from each unit's f + b [n, K].

    With P_sc the time of chunk c of stage s per micro-batch: 1F1B (vp = 1) takes
    (m - 1) max_s P_s + sum_s P_s; the interleaved schedule m sum_c max_s P_sc (each chunk index
    advances at its slowest stage) + (pp - 1)/pp sum_s max_c P_sc (fill and drain at the slowest chunk
    of each stage). Both are exact for identical chunks.
    """
    kinds, which = layout.kinds
    per_kind = unit_s @ kinds.T  # [n, T]
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


def _unit_maps(costs: Costs, k: int, z3: np.ndarray) -> dict[int, np.ndarray]:
    """Max-plus maps [n, 3, 3] of one unit of key k for the forward and the two backward step types."""
    n = len(z3)
    f, b, g3 = costs.f[:, k], costs.b[:, k], costs.g3[:, k]
    fwd = np.where(z3[:, None, None], mp.matrix(n, cc=f, cd=g3 + f, dd=g3), mp.matrix(n, cc=f))
    maps = {F: fwd}
    for kind, r in ((B, costs.r_mid[:, k]), (BLAST, costs.r_last[:, k])):
        has_r = (r > 0)[:, None, None]
        zero3 = np.where(has_r, mp.matrix(n, cc=b, cd=g3 + b, dc=b + r, dd=g3 + b + r),
                         mp.matrix(n, cc=b, cd=g3 + b, dd=g3))
        other = np.where(has_r, mp.matrix(n, cc=b, dc=b + r, dd=r), mp.matrix(n, cc=b))
        maps[kind] = np.where(z3[:, None, None], zero3, other)
    has_bwd = costs.table.has_bwd[costs.combo][:, k][:, None, None]
    for kind in (B, BLAST):
        maps[kind] = np.where(has_bwd, maps[kind], mp.identity(n))
    return maps


def step_maps(layout: StageLayout, costs: Costs, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients [n, pp*vp*4, 6] of every step map and the data-parallel clock at the start [n, pp]."""
    n, pp, vp = len(zero), layout.pp, layout.vp
    units = {k: _unit_maps(costs, k, zero >= 3) for k in range(costs.f.shape[1])}
    powers: dict[tuple[int, int, int], np.ndarray] = {}

    def run(k: int, kind: int, count: int) -> np.ndarray:
        """A run of `count` identical units (repeated squaring, shared by the chunks of the shape)."""
        if (k, kind, count) not in powers:
            powers[(k, kind, count)] = mp.power(units[k][kind], count)
        return powers[(k, kind, count)]

    maps = np.empty((n, pp * vp * NUM_TYPES, 6))
    d0 = np.zeros((n, pp))
    trainable = costs.trainable > 0  # [n, K]
    gathers = (zero == 1) | (zero == 2)
    for s in range(pp):
        gate, d0[:, s] = _first_gathers(layout.runs[s], costs.g1, trainable)
        for c in range(vp):
            runs = layout.runs[s][c]
            forward, first, backward, last = (mp.identity(n) for _ in range(4))
            for k, count in runs:
                forward = mp.mul(run(k, F, count), forward)
                # The first micro-batch's forward waits for the key's weight gather (ZeRO-1/2).
                gated = units[k][F].copy()
                gated[:, 0, 2] = np.where(gathers & trainable[:, k], gate[k] + costs.f[:, k], NEG)
                first = mp.mul(run(k, F, count - 1), mp.mul(gated, first))
            for k, count in reversed(runs):
                backward, last = mp.mul(run(k, B, count), backward), mp.mul(run(k, BLAST, count), last)
            for kind, mat in ((F0, first), (F, forward), (B, backward), (BLAST, last)):
                q = (s * vp + c) * NUM_TYPES + kind
                maps[:, q, :3], maps[:, q, 3:] = mat[:, 0, :], mat[:, 1, :]
    return maps, d0


def _first_gathers(stage_runs, g1: np.ndarray, trainable: np.ndarray) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """ZeRO-1/2: the weight all-gathers every unit of the stage issues at the start, in program order;
    the first forward of each key waits for the gather of its first unit (the engine keeps one
    dependency per key). Returns the end of that gather per key [n] and the stream's end [n]."""
    n = len(g1)
    clock = np.zeros(n)
    gate: dict[int, np.ndarray] = {k: np.full(n, NEG) for k in range(g1.shape[1])}
    for chunk in stage_runs:
        for k, count in chunk:
            if not np.isfinite(gate[k]).any():
                gate[k] = np.where(trainable[:, k], clock + g1[:, k], NEG)
            clock = clock + count * np.where(trainable[:, k], g1[:, k], 0.0)
    return gate, clock


def _replay_end(layout: StageLayout, m: int, maps: np.ndarray, d0: np.ndarray, costs: Costs,
                opt: np.ndarray) -> np.ndarray:
    c, d = replay(rounds(layout.pp, layout.vp, m), maps, d0, costs.p2p)
    end = np.maximum(c, d)
    if layout.pp > 1:
        tied = np.maximum(c, d) + costs.tied[:, None]
        end[:, [0, -1]] = np.maximum(end[:, [0, -1]], tied[:, [0, -1]])
    return (end + opt).max(axis=1)


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
