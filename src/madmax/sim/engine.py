"""The scheduler: a program's segments -> start and end times (a per-device trace of every rank).

A stream runs its segments in the order they were added; a segment starts when its stream is free and
all the segments it waits for have ended (the MAD-Max method, Hsia et al. ISCA 2024, Sec. 3). Start
times are therefore fixed by the graph alone, and one pass in topological order computes them:
t_start = max(end of the previous segment on the stream, end of each segment it waits for).
"""

from __future__ import annotations

import bisect
import gc
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from madmax.sim.program import Program


@dataclass(frozen=True)
class Schedule:
    """Start and end of every segment, in the order they were added, with their streams and labels.

    slowdown_s: the seconds each slowed segment gained from the loads running beside it (contention;
    only segments that gained any).
    """

    start_s: list[float]
    end_s: list[float]
    stream: list[int]
    category: list[str]
    label: list[str]
    stream_names: list[tuple[str, str]]
    slowdown_s: dict[int, float] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)


def schedule(program: Program) -> Schedule:
    """Start times by Kahn's algorithm over dependency and stream-order edges (any order of the ready
    segments gives the same times: a start depends on the graph alone).

    With contention (`Program.contend` and segment loads), two passes: the first times the program at
    full rate; then each segment of a contended stream is stretched to the time its work takes at the
    rate its rank's loads leave it, over the load profile of the first pass (`_stretched`), and the
    program is timed again with those durations. The second pass moves what follows a stretched
    segment, not the load profile it was stretched over: one step of the fixed point, exact when a
    load's segment does not itself wait for the segment it slows.
    """
    graph = _graph(program)
    durations = program.duration_s
    start, end = _times(durations, graph)
    slowdown: dict[int, float] = {}
    if program.load and program.contended:
        stretched = _stretched(program, start, end)
        if stretched:
            durations = list(durations)
            for seg, duration in stretched.items():
                slowdown[seg] = duration - durations[seg]
                durations[seg] = duration
            start, end = _times(durations, graph)
    return Schedule(start, end, list(program.stream_of), list(program.category), list(program.label),
                    program.stream_names, slowdown)


def _graph(program: Program) -> tuple[list[list[int]], list[int], list[int]]:
    """Successors, next segment on the same stream (-1: none) and in-degree of every segment. The
    stream-order edge is kept apart (`next_on_stream`), since every segment but a stream's last has one."""
    n = len(program)
    streams, after = program.stream_of, program.after
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
    return succ, next_on_stream, indeg


def _times(durations: list[float], graph: tuple[list[list[int]], list[int], list[int]]
           ) -> tuple[list[float], list[float]]:
    """Start and end of every segment: t_start = max(end of the previous segment on the stream, end of
    each segment it waits for)."""
    succ, next_on_stream, indeg = graph
    indeg = list(indeg)
    n = len(durations)
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
    return ready_at, end


def _stretched(program: Program, start: list[float], end: list[float]) -> dict[int, float]:
    """Durations of the contended streams' segments that ran beside loads, at the rate the loads leave.

    Per rank the loads form a step function L(t) (the sum of the loads of its segments running at t);
    a segment of a contended stream with cap c that starts at s with work d (its duration at full rate)
    ends at the T where the integral from s to T of (1 - min(c, L(t))) dt = d.
    """
    rank_of = [rank for rank, _ in program.stream_names]
    steps: dict[str, list[tuple[float, int, float]]] = defaultdict(list)
    for seg, load in program.load.items():
        a, b = start[seg], end[seg]
        if b > a:
            rank = rank_of[program.stream_of[seg]]
            steps[rank] += [(a, 1, load), (b, -1, load)]
    profiles: dict[str, tuple[list[float], list[float]]] = {}
    for rank, events in steps.items():
        events.sort()
        times: list[float] = []
        levels: list[float] = []
        # load -> how many segments with it are running: counted, not summed, so that no rounding residue
        # is left once they have all ended
        running: dict[float, int] = defaultdict(int)
        for t, change, load in events:
            running[load] += change
            level = sum(f * count for f, count in running.items())
            if times and times[-1] == t:
                levels[-1] = level
            else:
                times.append(t)
                levels.append(level)
        profiles[rank] = (times, levels)
    out: dict[int, float] = {}
    durations, stream_of, contended = program.duration_s, program.stream_of, program.contended
    for seg, stream in enumerate(stream_of):
        cap = contended.get(stream)
        if cap is None or not durations[seg]:
            continue
        profile = profiles.get(rank_of[stream])
        if profile is None:
            continue
        duration = _duration(profile, start[seg], durations[seg], cap)
        if duration > durations[seg]:
            out[seg] = duration
    return out


def _duration(profile: tuple[list[float], list[float]], t: float, work: float, cap: float) -> float:
    """Seconds that `work` seconds of full-rate work started at t take, at rate 1 - min(cap, level) over
    the step function `profile` (level[i] from times[i] to times[i + 1]; zero before the first and after
    the last); exactly `work` when no load runs before it is done."""
    times, levels = profile
    i = bisect.bisect_right(times, t) - 1
    last = len(times) - 1
    elapsed, left, slowed = 0.0, work, False
    while i < last:  # past the last step every load has ended: full rate
        level = min(cap, levels[i]) if i >= 0 else 0.0
        span = times[i + 1] - t
        rate = 1.0 - level
        if left <= rate * span:
            return elapsed + left / rate if (slowed or level) else work
        slowed = slowed or bool(level)
        left -= rate * span
        elapsed += span
        t = times[i + 1]
        i += 1
    return elapsed + left if slowed else work


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
