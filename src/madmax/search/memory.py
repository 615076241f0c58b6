"""Peak memory per GPU of many candidates in closed form: `parallel.memory.stage_memory`, vectorized.

For stage s of a candidate with N_sk units of key k (params P_k, trainable T_k per rank):

    weights     = sum_k N_sk P_k w + h sum_k N_sk C_k          (+ (P_(1) + P_(2)) w_0 under ZeRO-3)
    gradients   = sum_k N_sk T_k g,      optimizer = sum_k N_sk T_k o
    activations = max over the in-flight peaks V of sum_c V_c A_sc  +  max_k working_k
    total       = weights + gradients + optimizer + (1 + f) activations + context + communicators

w, g, o: bytes per parameter after ZeRO sharding (`DataParallelPlan.state_bytes_per_param`; frozen ones hold
weights only, sharded alike under ZeRO-3); h: 1, or under ZeRO-3 the share of the stage's parameters gathered
or kept whole (a layer's low-precision copy lives while it is gathered); the gathered units count only weights
sharded over more than one rank (w < w_0);
in an MoE model the routed experts' parameters (P/(ep*etp) per rank) have their own w, g, o, sharded
over their expert-data-parallel ranks, and the weights, gradients and optimizer terms add over both;
P_(1), P_(2): the stage's two largest units' gatherable parameters (a unit present twice counts twice);
f: the allocator's fragmentation and communicators those of the candidate's process groups (both
`parallel.memory.Reserve`, as `simulate` counts them); ZeRO-3's gathered weights are at most the live limit;
w_0: bytes of an unsharded weight; C_k: the unit's low-precision weight copies (and amax histories) kept
through the step (fp8, mxfp8, nvfp4: `UnitPlan.cast_cache_bytes`, 0 otherwise); A_sc = sum_k (units
of k in chunk c) x saved_k, the activations one micro-batch leaves on chunk c (saved_k in proportion to
the rank's tokens, mbs*seq/cp); V: the per-chunk micro-batch counts in flight at the steps that can be
a peak (`parallel.pipeline.inflight`).
The peak is the worst stage's total, as `simulate` reports it; it matches `simulate` to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from madmax.parallel.memory import Reserve
from madmax.parallel.pipeline import inflight
from madmax.search.units import StageLayout


@dataclass(frozen=True)
class MemoryShape:
    """What memory needs of a shape (pp, vp, m): for each representative stage, its units [R, K], the
    units of each chunk type [R, T, K] and the distinct in-flight peaks by type [R, V, T].

    Chunks of a stage with the same units weigh the same, so their in-flight counts add. Of stages with
    the same units only the first is kept: it has the longest warm-up, so at least as many micro-batches
    in flight on every chunk at each step of the steady state.
    """

    per_stage: np.ndarray
    type_units: np.ndarray
    vectors: np.ndarray


def memory_shape(layout: StageLayout, m: int) -> MemoryShape:
    per_stage = inflight(layout.pp, layout.vp, m)
    reps = np.unique(layout.counts.reshape(layout.pp, -1), axis=0, return_index=True)[1]
    types, peaks = [], []
    for s in sorted(reps):
        kinds, which = np.unique(layout.counts[s], axis=0, return_inverse=True)
        project = np.zeros((layout.vp, len(kinds)))
        project[np.arange(layout.vp), which.ravel()] = 1.0
        types.append(kinds)
        peaks.append(np.unique(per_stage[s] @ project, axis=0))
    num_t, num_v = max(len(t) for t in types), max(len(p) for p in peaks)
    type_units = np.zeros((len(types), num_t, layout.counts.shape[2]))
    vectors = np.zeros((len(types), num_v, num_t))
    for r in range(len(types)):
        type_units[r, :len(types[r])] = types[r]
        vectors[r, :len(peaks[r]), :peaks[r].shape[1]] = peaks[r]
    return MemoryShape(per_stage=layout.per_stage[sorted(reps)], type_units=type_units, vectors=vectors)


def peak_memory(shape: MemoryShape, units: dict[str, np.ndarray], state: np.ndarray, zero: np.ndarray,
                weight_bytes: float, reserve: Reserve, process_groups: tuple[np.ndarray, ...],
                expert_state: np.ndarray | None = None) -> np.ndarray:
    """Peak bytes per GPU [n] of candidates of one shape; units: params, trainable, saved, working,
    cast_cache [n, K] per rank (and expert_params, expert_trainable, their routed experts' share, with
    `expert_state`, the experts' bytes per trainable parameter [n, 3]); process_groups: the sizes of each
    candidate's groups (`parallel.memory.group_sizes`, arrays [n])."""
    per_stage = shape.per_stage  # [R, K]
    params, trainable = units["params"], units["trainable"]
    groups = [(params, trainable, state)]
    if expert_state is not None:
        groups = [(params - units["expert_params"], trainable - units["expert_trainable"], state),
                  (units["expert_params"], units["expert_trainable"], expert_state)]
    total = (reserve.context_bytes + reserve.communicators_bytes(process_groups) * np.ones(len(params)))[:, None]
    for p, t, group_state in groups:
        p_s, t_s = p @ per_stage.T, t @ per_stage.T  # [n, R]
        w, g, o = group_state[:, 0:1], group_state[:, 1:2], group_state[:, 2:3]
        total = (p_s - t_s) * w + t_s * (w + g + o) + total  # frozen weights sharded as trainable ones
    # weights gathered into a buffer of their own: those sharded over more than one rank (w below w_0)
    gatherable = params * (state[:, 0:1] < weight_bytes)
    if expert_state is not None:
        gatherable = ((params - units["expert_params"]) * (state[:, 0:1] < weight_bytes)
                      + units["expert_params"] * (expert_state[:, 0:1] < weight_bytes))
    gathered = reserve.zero3_gathered_params(two_largest(per_stage, gatherable))
    zero3 = zero[:, None] >= 3
    total += np.where(zero3, gathered * weight_bytes, 0.0)
    # low-precision weight copies cached for the step; under ZeRO-3 those of the gathered layers only
    stage_params = params @ per_stage.T
    whole = stage_params - gatherable @ per_stage.T  # weights kept whole (shards of one rank): copies held
    held = np.where(zero3, np.minimum(1.0, (gathered + whole) / np.where(stage_params > 0, stage_params, 1.0)), 1.0)
    total += (units["cast_cache"] @ per_stage.T) * held
    total += (1 + reserve.fragmentation) * activations_by_stage(shape, units["saved"], units["working"])
    return total.max(axis=1)


def two_largest(per_stage: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of the two largest of each stage's units [n, R]: per_stage, the units of each key on a stage [R, K];
    values, a unit's value by key [n, K] (a key with two units on the stage counts twice)."""
    present = per_stage > 0
    vals = np.where(present[None], values[:, None, :], 0.0)  # [n, R, K]
    top = vals.argmax(axis=2)  # [n, R]
    first = np.take_along_axis(vals, top[..., None], axis=2)[..., 0]
    twice = np.take_along_axis(np.broadcast_to(per_stage[None], vals.shape), top[..., None], axis=2)[..., 0] >= 2
    np.put_along_axis(vals, top[..., None], 0.0, axis=2)
    return first + np.where(twice, first, vals.max(axis=2, initial=0.0))


def activations_by_stage(shape: MemoryShape, saved: np.ndarray, working: np.ndarray) -> np.ndarray:
    """Activation bytes of each representative stage [n, R] (the last terms of `peak_memory`): the worst
    in-flight peak of saved activations, and the largest working set of a unit."""
    type_act = np.einsum("nk,stk->nst", saved, shape.type_units)
    peak = np.einsum("nst,svt->nsv", type_act, shape.vectors).max(axis=2)
    return peak + np.where((shape.per_stage > 0)[None], working[:, None, :], 0.0).max(axis=2)
