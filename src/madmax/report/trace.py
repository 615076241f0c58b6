"""Chrome Trace Event JSON of a simulated iteration, for Perfetto (ui.perfetto.dev) or chrome://tracing.

One process per simulated rank (pipeline stage), one thread per stream, complete events ("ph": "X")
in microseconds, and each stage's memory in use (weights, gradients, optimizer state, reserved, and the
activations of the micro-batches in flight) as a counter track. An RL step (`RLResult`) is drawn as a few steps
of its phases, one process per pool (`rl_trace_events`). Format: the Trace Event Format document
(Google, "Trace Event Format", 2016).
"""

from __future__ import annotations

import json
from pathlib import Path

from madmax.errors import ConfigError
from madmax.results import Result
from madmax.results.rl import RLResult

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


def rl_trace_events(result: RLResult, steps: int = 3) -> list[dict]:
    """`steps` RL steps, one process per pool and its phases as complete events. In turn (colocated, or the pools
    synchronous) each step is generation, scoring, training, then weight sync; one step off (asynchronous), the
    rollout pool generates step n while the training pool scores and trains step n - 1 (nothing the first
    time), and both take the weight sync when the longer side ends."""
    p = result.phases_s
    pools = list(result.pools)
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": i,
                           "args": {"name": f"{name} pool ({result.pools[name]['gpus']:g} GPUs)"}}
                          for i, name in enumerate(pools)]
    rollout, train = 0, len(pools) - 1  # the same pool when colocated

    def span(pid: int, name: str, start: float, seconds: float, step: int) -> None:
        if seconds > 0:
            events.append({"ph": "X", "name": name.replace("_", " "), "cat": name, "pid": pid, "tid": 0,
                           "ts": start * US, "dur": seconds * US, "args": {"step": step}})

    period = result.step_time_s
    for n in range(steps):
        t = n * period
        span(rollout, "generation", t, p["generation"], n)
        if result.asynchronous:
            if n:
                span(train, "scoring", t, p["scoring"], n - 1)
                span(train, "training", t + p["scoring"], p["training"], n - 1)
            end = t + max(p["generation"], p["scoring"] + p["training"])
        else:
            span(train, "scoring", t + p["generation"], p["scoring"], n)
            span(train, "training", t + p["generation"] + p["scoring"], p["training"], n)
            end = t + p["generation"] + p["scoring"] + p["training"]
        for pid in sorted({rollout, train}):
            span(pid, "weight_sync", end, p["weight_sync"], n)
    return events


def write_trace(result: Result | RLResult, path: Path) -> None:
    events = rl_trace_events(result) if isinstance(result, RLResult) else trace_events(result)
    try:
        Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    except OSError as exc:
        raise ConfigError(f"trace file {str(path)!r} cannot be written: {exc.strerror}") from None
