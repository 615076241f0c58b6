"""A per-device trace scheduler: tasks on in-order streams with cross-stream dependencies.

Each task belongs to one stream (a CUDA stream of one rank: compute, or a communicator) and has a
duration and dependencies. Like a CUDA stream, a stream runs its tasks in the order they were added;
a task starts when its stream is free and all its dependencies have ended (the MAD-Max method,
Hsia et al. ISCA 2024, Sec. 3). Start times are therefore fixed by the graph alone, and one pass in
topological order computes them: t_start = max(end of previous task on the stream, end of each dep).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """Start and end of every task, in the order they were added, with their streams and labels."""

    start_s: list[float]
    end_s: list[float]
    stream: list[int]
    category: list[str]
    label: list[str]
    stream_names: list[tuple[str, str]]

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)


class Timeline:
    """Builder of a task graph; `run()` returns its Schedule."""

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], int] = {}
        self._duration: list[float] = []
        self._stream: list[int] = []
        self._deps: list[list[int]] = []
        self._category: list[str] = []
        self._label: list[str] = []

    def stream(self, process: str, name: str) -> int:
        """Id of stream `name` of `process` (a rank), created on first use."""
        key = (process, name)
        if key not in self._streams:
            self._streams[key] = len(self._streams)
        return self._streams[key]

    def add(self, stream: int, duration_s: float, deps: tuple[int, ...] = (), *, category: str = "",
            label: str = "") -> int:
        """Append a task to `stream`; returns its id. Later ones may be added with `depend`."""
        assert duration_s >= 0, f"negative duration for {label}"
        self._duration.append(duration_s)
        self._stream.append(stream)
        self._deps.append(list(deps))
        self._category.append(category)
        self._label.append(label)
        return len(self._duration) - 1

    def depend(self, task: int, dep: int) -> None:
        """Make `task` wait for `dep` too (for dependencies on tasks added later)."""
        self._deps[task].append(dep)

    def __len__(self) -> int:
        return len(self._duration)

    def run(self) -> Schedule:
        """Start times by Kahn's algorithm over dependency and stream-order edges."""
        n = len(self._duration)
        succ: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        last_on_stream: dict[int, int] = {}
        for task in range(n):
            prev = last_on_stream.get(self._stream[task])
            if prev is not None:
                succ[prev].append(task)
                indeg[task] += 1
            last_on_stream[self._stream[task]] = task
            for dep in self._deps[task]:
                succ[dep].append(task)
                indeg[task] += 1
        ready_at = [0.0] * n
        start = [0.0] * n
        end = [0.0] * n
        queue = deque(t for t in range(n) if indeg[t] == 0)
        done = 0
        while queue:
            task = queue.popleft()
            done += 1
            start[task] = ready_at[task]
            finish = end[task] = start[task] + self._duration[task]
            for nxt in succ[task]:
                if finish > ready_at[nxt]:
                    ready_at[nxt] = finish
                indeg[nxt] -= 1
                if indeg[nxt] == 0:
                    queue.append(nxt)
        assert done == n, "task graph has a cycle (a schedule bug)"
        names = [key for key, _ in sorted(self._streams.items(), key=lambda kv: kv[1])]
        return Schedule(start, end, list(self._stream), list(self._category), list(self._label), names)
