"""The scheduler: a program's segments -> start and end times (a per-device trace of every rank).

A stream runs its segments in the order they were added; a segment starts when its stream is free and
all the segments it waits for have ended (the MAD-Max method, Hsia et al. ISCA 2024, Sec. 3). Start
times are therefore fixed by the graph alone, and one pass in topological order computes them:
t_start = max(end of the previous segment on the stream, end of each segment it waits for).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from madmax.sim.program import Program


@dataclass(frozen=True)
class Schedule:
    """Start and end of every segment, in the order they were added, with their streams and labels."""

    start_s: list[float]
    end_s: list[float]
    stream: list[int]
    category: list[str]
    label: list[str]
    stream_names: list[tuple[str, str]]

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)


def schedule(program: Program) -> Schedule:
    """Start times by Kahn's algorithm over dependency and stream-order edges (any order of the ready
    segments gives the same times: a start depends on the graph alone). The stream-order edge of a
    segment is kept apart (`next_on_stream`), since every segment but a stream's last has one."""
    n = len(program)
    durations, streams, after = program.duration_s, program.stream_of, program.after
    succ: list[list[int]] = [[] for _ in range(n)]
    next_on_stream = [-1] * n
    indeg = [0] * n
    last_on_stream: dict[int, int] = {}
    for seg in range(n):
        stream = streams[seg]
        prev = last_on_stream.get(stream)
        deps = after[seg]
        if prev is None:
            indeg[seg] = len(deps)
        else:
            indeg[seg] = len(deps) + 1
            next_on_stream[prev] = seg
        last_on_stream[stream] = seg
        for dep in deps:
            succ[dep].append(seg)
    ready_at = [0.0] * n
    end = [0.0] * n
    ready = [s for s in range(n) if indeg[s] == 0]
    pop, push = ready.pop, ready.append
    done = 0
    while ready:
        seg = pop()
        done += 1
        finish = end[seg] = ready_at[seg] + durations[seg]
        nxt = next_on_stream[seg]
        if nxt >= 0:
            if finish > ready_at[nxt]:
                ready_at[nxt] = finish
            indeg[nxt] -= 1
            if not indeg[nxt]:
                push(nxt)
        for nxt in succ[seg]:
            if finish > ready_at[nxt]:
                ready_at[nxt] = finish
            indeg[nxt] -= 1
            if not indeg[nxt]:
                push(nxt)
    assert done == n, "the program's dependency graph has a cycle (a program-builder bug)"
    return Schedule(ready_at, end, list(streams), list(program.category), list(program.label), program.stream_names)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the duration (restored after): writing and scheduling a
    program builds hundreds of thousands of small objects (segments, dependency lists) that reference
    counting frees, and the collector's passes over them cost some 20-30 % of the time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
