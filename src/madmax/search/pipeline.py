"""Pipeline shapes shared by many candidates, and the step-level replay of the schedule in max-plus form.

A *shape* is (pp, vp, m): the split of the units into stages and chunks, the micro-batches in flight
on each stage (activation memory) and the order of the forward (F) and backward (B) steps of every
stage (`parallel.pipeline.schedule`, the same program `madmax.engine` simulates).

The replay times steps, not kernels. A step of a stage is a max-plus linear map of the compute
stream's clock c and the data-parallel stream's d (plus the constant 0 for absolute gates):

    c' = max(s + a0, d + a1, a2)        s = max(c, arrival of the neighbour's send)
    d' = max(s + b0, d + b1, b2)

(an MoE model has a second data-parallel clock, its routed experts' gradient stream: 3 x 4 coefficients)

composed from the units of the step (`madmax.search.timing`). A send to the next virtual stage runs on
the pipeline stream after the step: e = max(p_free, c') + t_p2p. The replay is vectorized over the
candidates of one shape and over the stages: the steps are grouped into rounds whose inputs were all
produced by earlier rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from madmax.parallel.pipeline import Phase, schedule

F0, F, B, BLAST = range(4)  # step types: first forward, forward, backward, last backward
NUM_TYPES = 4


@dataclass(frozen=True)
class Rounds:
    """The steps of every stage of one shape, grouped into rounds (see the module docstring).

    Each round: stage [k], map index q = (stage*vp + chunk)*4 + type [k], the slot its arrival is read
    from [k] (the last slot holds 0: no dependency), and the steps that send: their position in the
    round, stage and slot.
    """

    pp: int
    vp: int
    m: int
    num_slots: int
    rounds: tuple[tuple[np.ndarray, ...], ...]


@lru_cache(maxsize=1024)
def rounds(pp: int, vp: int, m: int) -> Rounds:
    progs = [schedule(s, pp, vp, m) for s in range(pp)]
    last_virtual = pp * vp - 1
    round_of: dict[tuple, int] = {}
    pos = [0] * pp
    prev = [-1] * pp
    nodes: list[tuple[int, int, int, tuple | None, tuple | None]] = []  # round, stage, q, dep, key if sends
    remaining = sum(len(p) for p in progs)
    while remaining:
        for s in range(pp):
            while pos[s] < len(progs[s]):
                step = progs[s][pos[s]]
                v = step.chunk * pp + s
                forward = step.phase is Phase.FORWARD
                dep = None
                if forward and v > 0:
                    dep = (Phase.FORWARD, v - 1, step.microbatch)
                elif not forward and v < last_virtual:
                    dep = (Phase.BACKWARD, v + 1, step.microbatch)
                if dep is not None and dep not in round_of:
                    break
                r = max(prev[s], round_of[dep] if dep is not None else -1) + 1
                key = (step.phase, v, step.microbatch)
                round_of[key] = prev[s] = r
                kind = (F0 if step.microbatch == 0 else F) if forward else (BLAST if step.microbatch == m - 1 else B)
                sends = (forward and v < last_virtual) or (not forward and v > 0)
                nodes.append((r, s, (s * vp + step.chunk) * NUM_TYPES + kind, dep, key if sends else None))
                pos[s] += 1
                remaining -= 1
    return _slotted(pp, vp, m, nodes)


def _slotted(pp: int, vp: int, m: int, nodes: list) -> Rounds:
    """Rounds with send values kept in reusable slots (each value is read once, by one later step)."""
    by_round: dict[int, list] = {}
    for node in nodes:
        by_round.setdefault(node[0], []).append(node)
    slot_of: dict[tuple, int] = {}
    free: list[int] = []
    num_slots = 0
    raw = []
    for r in sorted(by_round):
        group = by_round[r]
        deps = [slot_of.pop(n[3]) if n[3] is not None else -1 for n in group]
        free += [d for d in deps if d >= 0]
        outs = []
        for i, n in enumerate(group):
            if n[4] is not None:
                if not free:
                    free.append(num_slots)
                    num_slots += 1
                slot_of[n[4]] = free.pop()
                outs.append((i, n[1], slot_of[n[4]]))
        raw.append(([n[1] for n in group], [n[2] for n in group], deps, outs))
    out = []
    for stages, qs, deps, outs in raw:
        deps_arr = np.array([num_slots if d < 0 else d for d in deps], dtype=np.intp)
        send = np.array([o[0] for o in outs], dtype=np.intp)
        out.append((np.array(stages, dtype=np.intp), np.array(qs, dtype=np.intp), deps_arr, send,
                    np.array([o[1] for o in outs], dtype=np.intp), np.array([o[2] for o in outs], dtype=np.intp)))
    return Rounds(pp=pp, vp=vp, m=m, num_slots=num_slots, rounds=tuple(out))


def replay(r: Rounds, maps: np.ndarray, d0: np.ndarray, p2p_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Final compute and data-parallel clocks of each stage after its last step: c [n, pp], d [n, pp, j].

    maps: [n, pp*vp*4, 1 + j, 2 + j] the coefficients of each step map, rows (c', d_1', ..), columns
    (s, d_1, .., 0) with s the step's start; d0: [n, pp, j] the data-parallel clocks at the start
    (ZeRO-1/2 parameter gathers); p2p_s: [n] one send's seconds.
    """
    n, j = maps.shape[0], maps.shape[2] - 1
    c = np.zeros((n, r.pp))
    d = [d0[:, :, i].copy() for i in range(j)]
    pipe = np.zeros((n, r.pp))
    slots = np.zeros((n, r.num_slots + 1))
    cols = [[np.ascontiguousarray(maps[:, :, row, col]) for col in range(j + 2)] for row in range(j + 1)]
    p = p2p_s[:, None]
    for stages, qs, deps, send, send_stage, send_slot in r.rounds:
        start = np.maximum(c[:, stages], slots[:, deps])
        dk = [x[:, stages] for x in d]
        clocks = []
        for row in range(j + 1):
            coef = cols[row]
            value = start + coef[0][:, qs]
            for i in range(j):
                value = np.maximum(value, dk[i] + coef[i + 1][:, qs])
            clocks.append(np.maximum(value, coef[j + 1][:, qs]))
        end = clocks[0]
        c[:, stages] = end
        for i in range(j):
            d[i][:, stages] = clocks[i + 1]
        if len(send):
            sent = np.maximum(pipe[:, send_stage], end[:, send]) + p
            pipe[:, send_stage] = sent
            slots[:, send_slot] = sent
    return c, np.stack(d, axis=2)
