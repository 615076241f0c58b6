"""Chrome Trace Event JSON of a simulated iteration, for Perfetto (ui.perfetto.dev) or chrome://tracing.

One process per simulated rank (pipeline stage), one thread per stream, complete events ("ph": "X")
in microseconds, and each stage's memory in use (weights, gradients, optimizer state, reserved, and the
activations of the micro-batches in flight) as a counter track. Format: the Trace Event Format document
(Google, "Trace Event Format", 2016).
"""

from __future__ import annotations

import json
from pathlib import Path

from madmax.errors import ConfigError
from madmax.results import Result

US = 1e6


def trace_events(result: Result) -> list[dict]:
    schedule = result.schedule
    assert schedule is not None, "simulate with keep_schedule=True to write a trace"
    processes = sorted({p for p, _ in schedule.stream_names}, key=lambda p: int(p.removeprefix("stage")))
    pid = {p: i for i, p in enumerate(processes)}
    events: list[dict] = []
    for p in processes:
        events.append({"ph": "M", "name": "process_name", "pid": pid[p], "args": {"name": f"rank of {p}"}})
    for sid, (p, stream) in enumerate(schedule.stream_names):
        events.append({"ph": "M", "name": "thread_name", "pid": pid[p], "tid": sid, "args": {"name": stream}})
    for task, sid in enumerate(schedule.stream):
        duration = schedule.end_s[task] - schedule.start_s[task]
        if duration <= 0:
            continue
        p = schedule.stream_names[sid][0]
        events.append({"ph": "X", "name": schedule.label[task] or schedule.category[task],
                       "cat": schedule.category[task], "pid": pid[p], "tid": sid,
                       "ts": schedule.start_s[task] * US, "dur": duration * US})
    for stage, points in (result.memory_timeline or {}).items():
        for t, used in points:
            events.append({"ph": "C", "name": "memory", "pid": pid[f"stage{stage}"], "ts": t * US,
                           "args": {"GiB": used / 2**30}})
    return events


def write_trace(result: Result, path: Path) -> None:
    try:
        Path(path).write_text(json.dumps({"traceEvents": trace_events(result), "displayTimeUnit": "ms"}))
    except OSError as exc:
        raise ConfigError(f"trace file {str(path)!r} cannot be written: {exc.strerror}") from None
