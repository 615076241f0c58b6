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


def timeline(result: Result | ServingResult, limit: int) -> dict[str, Any]:
    """The segments of each stream of the simulated iteration: [stream, start_s, end_s, label, category].

    At most `limit` segments, the longest kept (a segment too short to see on the plot is the one left
    out); `omitted` counts the others. Streams are named "stageN/stream".
    """
    schedule = result.schedule
    if schedule is None:
        return {"streams": [], "segments": [], "omitted": 0}
    streams = [f"{process}/{stream}" for process, stream in schedule.stream_names]
    spans = [(schedule.end_s[t] - schedule.start_s[t], t) for t in range(len(schedule.stream))
             if schedule.end_s[t] > schedule.start_s[t]]
    kept = sorted(spans, reverse=True)[:limit]
    segments = [[schedule.stream[t], schedule.start_s[t], schedule.end_s[t],
                 schedule.label[t] or schedule.category[t], schedule.category[t]]
                for _, t in sorted(kept, key=lambda item: item[1])]
    return {"streams": streams, "segments": segments, "omitted": len(spans) - len(kept)}
