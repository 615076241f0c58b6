"""Pipeline parallelism: the 1F1B / interleaved schedules (the split of the layers into chunks is the
strategy's pipeline layout, `madmax.config.pipeline_layout`; `split_layers` is its default).

The schedules are orders of work, not formulas: `madmax.sim` turns them into events so bubbles and
the number of micro-batches in flight (hence activation memory) come out of the simulation.
Sources: Narayanan et al. 2021 (SC21, arXiv 2104.04473) Sec. 2.2 (1F1B, interleaved); Megatron-LM
`schedules.py` (warm-up counts of the interleaved schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from madmax.config.pipeline_layout import split_layers
from madmax.parallel.kernels import Phase

__all__ = ["Step", "inflight", "inflight_cap", "peak_in_flight", "schedule", "split_layers"]


@dataclass(frozen=True, slots=True)
class Step:
    """One unit of pipeline work on a stage: a phase of micro-batch `microbatch` on local chunk `chunk`."""

    phase: Phase
    microbatch: int
    chunk: int


def schedule(stage: int, pp: int, vp: int, microbatches: int) -> list[Step]:
    """Program order of one stage: 1F1B when vp == 1, Megatron's interleaved 1F1B when vp > 1.

    1F1B: pp - stage - 1 warm-up forwards, then alternate one forward and one backward, then the
    remaining backwards. Interleaved: forward k runs chunk (k // pp) % vp of micro-batch
    (k // (pp*vp))*pp + k % pp; warm-up is (pp - stage - 1)*2 + (vp - 1)*pp forwards.
    """
    m = microbatches
    if vp == 1:
        warmup = min(pp - stage - 1, m)
        steps = [Step(Phase.FORWARD, i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            steps.append(Step(Phase.FORWARD, warmup + i, 0))
            steps.append(Step(Phase.BACKWARD, i, 0))
        steps += [Step(Phase.BACKWARD, i, 0) for i in range(m - warmup, m)]
        return steps
    total = m * vp
    warmup = min((pp - stage - 1) * 2 + (vp - 1) * pp, total)

    def unit(k: int, phase: Phase) -> Step:
        group, pos = divmod(k, pp * vp)
        chunk = pos // pp
        if phase is Phase.BACKWARD:
            chunk = vp - 1 - chunk
        return Step(phase, group * pp + pos % pp, chunk)

    steps = [unit(k, Phase.FORWARD) for k in range(warmup)]
    for i in range(total - warmup):
        steps.append(unit(warmup + i, Phase.FORWARD))
        steps.append(unit(i, Phase.BACKWARD))
    steps += [unit(k, Phase.BACKWARD) for k in range(total - warmup, total)]
    return steps


def inflight_cap(pp: int, vp: int) -> int:
    """Micro-batches beyond which the in-flight maxima of the interleaved schedule no longer change: its
    steady state is periodic (pp*vp steps), so a program that covers the warm-up and one period has the
    same maxima as a longer one."""
    if vp == 1:
        return pp
    warmup = 2 * (pp - 1) + (vp - 1) * pp
    cap = -(-(warmup + pp * vp + 1) // vp)
    return -(-cap // pp) * pp


@lru_cache(maxsize=4096)
def inflight(pp: int, vp: int, m: int) -> tuple[np.ndarray, ...]:
    """Per stage, the per-chunk counts of micro-batches in flight [V, vp] that can be its memory peak.

    In program order (`parallel.pipeline.schedule`) the count of forwards whose backward has not run
    grows through the warm-up and then stays at its maximum after every steady-state forward; with
    non-negative chunk weights the peak is at one of those steps, so they are the candidates (all with
    the same total, none dominates another). 1F1B keeps min(pp - s, m) on stage s. Interleaved: forward
    unit k runs chunk (k // pp) % vp, backward unit i chunk vp - 1 - (i // pp) % vp; after the warm-up
    of w forwards, the i-th steady step has run forwards 0..w+i and backwards 0..i-1.
    """
    if vp == 1:
        return tuple(np.array([[float(min(pp - s, m))]]) for s in range(pp))
    mm = min(m, inflight_cap(pp, vp))
    total = mm * vp
    k = np.arange(total)
    fwd = np.zeros((total + 1, vp))
    fwd[1:][k, (k // pp) % vp] = 1.0
    bwd = np.zeros((total + 1, vp))
    bwd[1:][k, vp - 1 - (k // pp) % vp] = 1.0
    fwd, bwd = fwd.cumsum(axis=0), bwd.cumsum(axis=0)  # row n: units 0..n-1 of each chunk
    out = []
    for stage in range(pp):
        warmup = min((pp - stage - 1) * 2 + (vp - 1) * pp, total)
        if warmup == total:
            out.append(fwd[total][None])
            continue
        i = np.arange(total - warmup)
        out.append(np.unique(fwd[warmup + i + 1] - bwd[i], axis=0))
    return tuple(out)


def peak_in_flight(steps: list[Step], chunk_weights: list[float]) -> float:
    """Largest weighted count of forwards whose backward has not run yet, over the program order.

    chunk_weights: the activation memory one micro-batch leaves on each local chunk (any unit), so
    the result is the peak activation memory of the stage in that unit.
    """
    current = peak = 0.0
    for step in steps:
        weight = chunk_weights[step.chunk]
        current += weight if step.phase is Phase.FORWARD else -weight
        peak = max(peak, current)
    return peak
