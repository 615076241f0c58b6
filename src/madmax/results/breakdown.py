"""The breakdown of one rank's timeline: compute, communication exposed and overlapped by kind, bubble.

Exposed communication is the time a rank's communication streams are busy while its compute stream
is not (the MAD-Max definition: iteration time minus compute time, split by collective); the rest of
the idle time of the compute stream is the pipeline bubble. The breakdown is that of the critical
stage: the one whose iteration ends last.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

from madmax.sim import Schedule

COMPUTE_STREAM = "compute"
HOST_CATEGORY = "host"  # tasks of the host stream (program.training.HOST, program.serving.HOST)


def _busy(intervals: list[tuple[float, float]]):
    """busy(t): compute time spent before t, for sorted non-overlapping intervals."""
    starts = [a for a, _ in intervals]
    prefix = [0.0]
    for a, b in intervals:
        prefix.append(prefix[-1] + b - a)

    def busy(t: float) -> float:
        i = bisect.bisect_right(starts, t)
        if i == 0:
            return 0.0
        a, b = intervals[i - 1]
        return prefix[i - 1] + min(t, b) - a

    return busy


def stream_breakdown(schedule: Schedule, process: str) -> dict[str, Any]:
    """Compute, exposed/overlapped communication by kind, host time, and bubble of one process (rank).

    The exposed communication is the time at least one collective is in flight and compute is not:
    measured on the union of the communication intervals, so concurrent collectives count once. Each
    kind's `exposed` is its share of that time: where k collectives are exposed together, each gets
    1/k of it (`_exposed_shares`), so the kinds' `exposed` add up to `exposed_communication_s`; its
    `overlapped` is the rest of its time (hidden behind compute or behind another exposed
    collective), so `exposed + overlapped = total` per kind. Tasks of category "host" (the host's work
    the GPU waits for or runs beside: synchronisation, data loading) are reported apart as `host`
    ({total, exposed, overlapped}: exposed where compute is not busy), not as communication; the bubble
    is what remains of the rank's iteration.
    """
    ids = {i for i, (p, _) in enumerate(schedule.stream_names) if p == process}
    compute_id = schedule.stream_names.index((process, COMPUTE_STREAM))
    compute: list[tuple[float, float]] = []
    comm: list[tuple[float, float, str]] = []
    end = 0.0
    for task, stream in enumerate(schedule.stream):
        if stream not in ids:
            continue
        a, b = schedule.start_s[task], schedule.end_s[task]
        end = max(end, b)
        if b <= a:
            continue
        if stream == compute_id:
            compute.append((a, b))
        else:
            comm.append((a, b, schedule.category[task]))
    compute.sort()
    busy = _busy(compute)
    host = {"total": 0.0, "exposed": 0.0, "overlapped": 0.0}
    for a, b, cat in comm:
        if cat == HOST_CATEGORY:
            overlapped = min(b - a, max(0.0, busy(b) - busy(a)))
            host["total"] += b - a
            host["overlapped"] += overlapped
            host["exposed"] += b - a - overlapped
    collectives = [(a, b, cat) for a, b, cat in comm if cat != HOST_CATEGORY]
    shares = _exposed_shares(collectives, busy)
    by_kind: dict[str, dict[str, float]] = {}
    for a, b, cat in collectives:
        entry = by_kind.setdefault(cat, {"total": 0.0, "exposed": shares[cat], "overlapped": 0.0})
        entry["total"] += b - a
    for entry in by_kind.values():
        entry["overlapped"] = max(0.0, entry["total"] - entry["exposed"])
    exposed = 0.0
    for a, b in _union(sorted((a, b) for a, b, _ in collectives)):
        exposed += max(0.0, (b - a) - (busy(b) - busy(a)))
    compute_s = sum(b - a for a, b in compute)
    return {"time_s": end, "compute_s": compute_s, "exposed_communication_s": exposed,
            "pipeline_bubble_s": max(0.0, end - compute_s - exposed - host["exposed"]),
            "communication": dict(by_kind), "host": host}


def _exposed_shares(tasks: list[tuple[float, float, str]], busy) -> dict[str, float]:
    """Exposed seconds by kind: between consecutive task starts and ends, the time compute is idle is
    split equally among the tasks in flight (k tasks together: 1/k each), so the shares add up to the
    exposed time of the union of the tasks."""
    events = sorted([(a, 1, cat) for a, _, cat in tasks] + [(b, -1, cat) for _, b, cat in tasks])
    active: dict[str, int] = defaultdict(int)
    in_flight = 0
    shares: dict[str, float] = defaultdict(float)
    last = 0.0
    for t, step, cat in events:
        if in_flight and t > last:
            idle = max(0.0, (t - last) - (busy(t) - busy(last)))
            for kind, count in active.items():
                shares[kind] += idle * count / in_flight
        active[cat] += step
        in_flight += step
        last = t
    return shares


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in intervals:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
