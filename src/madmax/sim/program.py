"""A program: the work of every simulated rank as segments on named streams, with what each waits for.

A segment is one piece of work on one stream of one rank, as a CUDA stream would run it: kernels on the
rank's compute stream, or one collective on the stream of its process group ("tp", "dp", "ep",
"kv_transfer", ...). Streams are made per (rank, name) when first used, so a new process group is a new
stream name, not a change here. A stream runs its segments in the order they were added; a segment
starts when its stream is free and every segment it waits for has ended (the MAD-Max per-device trace,
Hsia et al. ISCA 2024, Sec. 3). Program builders (`madmax.program`) write programs; `madmax.sim.schedule`
times them. Nothing here knows models, tasks or collectives.

Contention: a segment may hold a `load`, the fraction of its rank's compute throughput it takes while it
runs (a communication kernel's SMs and HBM traffic), and a stream may be `contended`: its segments run
at rate 1 - (sum of the loads running on the rank beside them), capped. Programs without loads are
timed as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a program, as written: its rank, stream, duration and the segments it waits for."""

    rank: str
    stream: str
    duration_s: float
    after: tuple[int, ...]
    label: str
    category: str


class Program:
    """Segments of every rank; `madmax.sim.schedule(program)` returns their start and end times.

    Segments are numbered in the order they are added. Stored as columns, since a training iteration of a
    large pipeline has hundreds of thousands of segments; `segments()` gives them as `Segment`s.
    """

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], int] = {}
        self.duration_s: list[float] = []
        self.stream_of: list[int] = []
        self.after: list[list[int]] = []
        self.category: list[str] = []
        self.label: list[str] = []
        self.load: dict[int, float] = {}  # segment -> fraction of its rank's compute it holds while running
        self.contended: dict[int, float] = {}  # stream -> the most its rank's loads together take from it

    def stream(self, rank: str, name: str) -> int:
        """Id of stream `name` of `rank`, created on first use."""
        key = (rank, name)
        if key not in self._streams:
            self._streams[key] = len(self._streams)
        return self._streams[key]

    def add(self, stream: int, duration_s: float, after: Iterable[int] = (), *, category: str = "",
            label: str = "", load: float = 0.0) -> int:
        """Append a segment to `stream` (an id from `stream`); returns its number. load: the fraction of
        its rank's compute throughput it takes while it runs (see `contend`)."""
        if duration_s < 0:
            raise AssertionError(f"negative duration for {label}")
        durations = self.duration_s
        durations.append(duration_s)
        self.stream_of.append(stream)
        self.after.append(list(after))
        self.category.append(category)
        self.label.append(label)
        if load:
            _check_load(load, label)
            self.load[len(durations) - 1] = load
        return len(durations) - 1

    def contend(self, stream: int, max_load: float) -> None:
        """Let the loads of `stream`'s rank slow its segments: while loaded segments run, the stream runs
        at rate 1 - min(max_load, sum of their loads)."""
        if not 0.0 <= max_load < 1.0:
            raise AssertionError(f"max_load {max_load} is not a fraction in [0, 1)")
        self.contended[stream] = max_load

    def chain(self, first_after: int, items: Iterable[tuple[int, float, str, str]], load: float = 0.0) -> int:
        """Append segments (stream, duration, category, label) each waiting for the one before, the first
        for `first_after`; returns the last one's number (`first_after` when there are none). load: that
        of each of them (see `add`)."""
        durations, streams, after, categories, labels = (self.duration_s, self.stream_of, self.after, self.category,
                                                         self.label)
        last = first_after
        if load:
            _check_load(load, "a chain")
        for stream, duration_s, category, label in items:
            if duration_s < 0:
                raise AssertionError(f"negative duration for {label}")
            durations.append(duration_s)
            streams.append(stream)
            after.append([last])
            categories.append(category)
            labels.append(label)
            last = len(durations) - 1
            if load:
                self.load[last] = load
        return last

    def wait(self, segment: int, dep: int) -> None:
        """Make `segment` wait for `dep` too (for segments added later, such as a pipeline neighbour's send)."""
        self.after[segment].append(dep)

    @property
    def stream_names(self) -> list[tuple[str, str]]:
        """(rank, stream name) of each stream id."""
        return [key for key, _ in sorted(self._streams.items(), key=lambda kv: kv[1])]

    def segments(self) -> Iterator[Segment]:
        names = self.stream_names
        for i, duration in enumerate(self.duration_s):
            rank, stream = names[self.stream_of[i]]
            yield Segment(rank, stream, duration, tuple(self.after[i]), self.label[i], self.category[i])

    def __len__(self) -> int:
        return len(self.duration_s)


def _check_load(load: float, label: str) -> None:
    if not 0.0 < load < 1.0:
        raise AssertionError(f"load {load} of {label} is not a fraction in (0, 1)")
