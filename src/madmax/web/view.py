"""What the web page draws of a result, beside its `to_dict()`: the breakdown as stacked bars, memory per
stage and the per-stream timeline of one iteration. Plain dicts and lists (JSON), no plotting here.
"""

from __future__ import annotations

from typing import Any

from madmax.results import Result
from madmax.results.serving import ServingResult

# Phases of a serving breakdown (`ServingResult.breakdown`), one bar each.
SERVING_PHASES = ("prefill", "decode")


def breakdown_bars(breakdown: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Seconds by part, one bar per phase: compute kinds, each collective's exposed time, exposed host
    time and the pipeline bubble. A training breakdown is one bar ("iteration"); a serving one has a
    bar per phase. Overlapped communication is not a part: it hides under compute."""
    phases = [p for p in SERVING_PHASES if p in breakdown] or [None]
    bars = {}
    for phase in phases:
        part = breakdown if phase is None else breakdown[phase]
        items = [(kind, float(s)) for kind, s in part.get("compute_s", {}).items() if kind != "total"]
        for name, comm in part.get("communication_s", {}).items():
            items.append((f"{name} (exposed)", float(comm["exposed"] if isinstance(comm, dict) else comm)))
        host = part.get("host_s")
        if host is not None:
            items.append(("host (exposed)", float(host["exposed"] if isinstance(host, dict) else host)))
        if part.get("pipeline_bubble_s"):
            items.append(("pipeline bubble", float(part["pipeline_bubble_s"])))
        bars[phase or "iteration"] = [(name, s) for name, s in items if s > 0]
    return bars


def memory_per_stage(result: Result | ServingResult) -> list[dict[str, Any]]:
    """Bytes per GPU of each pipeline stage: the static state (weights, gradients, optimizer, reserved)
    and the activations at their peak, from the memory timeline. Without a timeline (a serving result)
    the one rank reported, by component."""
    timeline = result.memory_timeline
    if not timeline:
        parts = {k: float(v) for k, v in result.memory.items()
                 if k not in ("stage", "total", "capacity", "kv_pool") and not k.startswith("reserved_")}
        return [{"stage": int(result.memory.get("stage", 0)), "parts": parts}]
    stages = []
    for stage, points in sorted(timeline.items()):
        static = points[0][1]
        peak = max(used for _, used in points)
        stages.append({"stage": stage, "parts": {"static (weights, gradients, optimizer, reserved)": static,
                                                 "activations at peak": peak - static}})
    return stages


def timeline(result: Result | ServingResult, limit: int, merge_fraction: float) -> dict[str, Any]:
    """The segments of each stream of the simulated iteration: [stream, start_s, end_s, label, category].

    Segments of one stream and kind less than `merge_fraction` of the iteration apart (the kernels of a
    micro-batch's forward pass; a layer's tensor-parallel collectives) are merged into one, too close to
    tell apart on a plot: its category is the one with the most time in it, its label counts each category.
    A kind is the category up to its first '.' (tp.all_gather and tp.reduce_scatter are both tp). If more than
    `limit` remain, the longest are kept and `omitted` counts the others. Streams are named "stageN/stream".
    """
    schedule = result.schedule
    if schedule is None:
        return {"streams": [], "segments": [], "omitted": 0}
    streams = [f"{process}/{stream}" for process, stream in schedule.stream_names]
    tasks = sorted((t for t in range(len(schedule.stream)) if schedule.end_s[t] > schedule.start_s[t]),
                   key=lambda t: (schedule.stream[t], schedule.start_s[t]))
    gap = max((schedule.end_s[t] for t in tasks), default=0.0) * merge_fraction
    groups: list[tuple[int, float, float, list[int]]] = []  # stream, start, end, tasks
    for t in tasks:
        stream, start, end = schedule.stream[t], schedule.start_s[t], schedule.end_s[t]
        if (groups and groups[-1][0] == stream and start - groups[-1][2] < gap
                and _kind(schedule.category[groups[-1][3][0]]) == _kind(schedule.category[t])):
            first = groups[-1]
            first[3].append(t)
            groups[-1] = (stream, first[1], max(first[2], end), first[3])
        else:
            groups.append((stream, start, end, [t]))
    kept = sorted(groups, key=lambda g: g[2] - g[1], reverse=True)[:limit]
    kept.sort(key=lambda g: (g[0], g[1]))
    return {"streams": streams, "segments": [_segment(schedule, g) for g in kept], "omitted": len(groups) - len(kept)}


def _kind(category: str) -> str:
    return category.split(".", 1)[0]


def _segment(schedule: Any, group: tuple[int, float, float, list[int]]) -> list[Any]:
    stream, start, end, members = group
    if len(members) == 1:
        t = members[0]
        return [stream, start, end, schedule.label[t] or schedule.category[t], schedule.category[t]]
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for t in members:
        category = schedule.category[t]
        seconds[category] = seconds.get(category, 0.0) + schedule.end_s[t] - schedule.start_s[t]
        counts[category] = counts.get(category, 0) + 1
    main = max(seconds, key=seconds.__getitem__)
    label = ", ".join(f"{category} x {n}" for category, n in sorted(counts.items(), key=lambda c: -seconds[c[0]]))
    return [stream, start, end, label, main]
