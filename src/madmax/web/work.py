"""Where the server's work runs: simulations in a pool of processes, each search in a process of its own
(stopped at its time limit or when the client goes away). Functions here run in those processes; they
return plain data (JSON-ready dicts), and a `MadmaxError` as its one sentence.

Processes start from a forkserver that imported madmax once, as the sweep runner's do, so a new
worker does not pay the import again and no thread of the server is forked.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from madmax.errors import MadmaxError

PRELOAD = ["madmax.api", "madmax.search.api", "madmax.search.serving", "madmax.search.capacity", "madmax.web.view",
           "madmax.report.trace"]
# A pool process is replaced after this many simulations, so the caches it grows stay bounded.
TASKS_PER_WORKER = 200
# gzip's fast end: a trace is compressed about tenfold either way, and is read at most once.
TRACE_GZIP_LEVEL = 1


def context() -> multiprocessing.context.BaseContext:
    """The forkserver context (spawn where there is none), with madmax preloaded."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def simulation_pool(workers: int, file_root: Path | None = None) -> ProcessPoolExecutor:
    """Simulation processes that read user-named files only under `file_root` (`checks.restrict_files`)."""
    from madmax.config.checks import restrict_files

    return ProcessPoolExecutor(max_workers=workers, mp_context=context(), max_tasks_per_child=TASKS_PER_WORKER,
                               initializer=restrict_files, initargs=(file_root,))


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now, its running simulations too (Python 3.11's executor has no call for it: its
    processes are killed one by one)."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()


def simulate(kwargs: dict[str, Any], view: bool, timeline_options: tuple[int, float]) -> tuple[str, Any]:
    """("result", `madmax.simulate(**kwargs).to_dict()`) or ("error", sentence). With `view`, the result is
    what the page draws: {"result", "bars", "memory_per_stage", "timeline", "trace_gz"} (trace_gz: the
    Chrome trace, gzip-compressed JSON); timeline_options: the segment limit and merge fraction of
    `madmax.web.view.timeline`."""
    from madmax import api

    try:
        result = api.simulate(**kwargs, keep_schedule=view)
    except MadmaxError as exc:
        return "error", str(exc)
    if not view:
        return "result", result.to_dict()
    from madmax.report.trace import trace_events
    from madmax.web.view import breakdown_bars, memory_per_stage, timeline

    data = result.to_dict()
    trace = json.dumps({"traceEvents": trace_events(result), "displayTimeUnit": "ms"}).encode()
    return "result", {"result": data, "bars": breakdown_bars(data["breakdown"]),
                      "memory_per_stage": memory_per_stage(result), "timeline": timeline(result, *timeline_options),
                      "trace_gz": gzip.compress(trace, compresslevel=TRACE_GZIP_LEVEL)}


def simulate_rl(kwargs: dict[str, Any]) -> tuple[str, Any]:
    """("result", `madmax.simulate_rl(**kwargs).to_dict()`) or ("error", sentence)."""
    from madmax.rl import simulate_rl as run

    try:
        return "result", run(**kwargs).to_dict()
    except MadmaxError as exc:
        return "error", str(exc)


def search(kind: str, kwargs: dict[str, Any], queue: Any, file_root: Path | None = None) -> None:
    """Run one search and put its messages on `queue`: ("checked", None) once the inputs load, then
    ("result", data) or ("error", sentence). kind: "training", "serving", "capacity" or "rl". User-named files are
    read only under `file_root`."""
    from madmax.config.checks import restrict_files

    restrict_files(file_root)
    try:
        _check(kind, kwargs)
        queue.put(("checked", None))
        start = time.perf_counter()
        if kind == "serving":
            from madmax.search.serving import find_serving, summary

            found = find_serving(**kwargs)
            queue.put(("result", {**summary(found, kwargs.get("top", 10)), "wall_s": time.perf_counter() - start}))
            return
        if kind == "rl":
            from madmax.rl.search import find_rl

            top = kwargs.pop("top", 10)
            found = find_rl(**kwargs)
            queue.put(("result", {**found.to_dict(top), "wall_s": time.perf_counter() - start}))
            return
        if kind == "capacity":
            from madmax.search.capacity import find_capacity
            from madmax.search.capacity import summary as capacity_summary

            found = find_capacity(kwargs.pop("model"), kwargs.pop("systems"), **kwargs)
            queue.put(("result", {**capacity_summary(found, kwargs.get("top", 5)),
                                  "wall_s": time.perf_counter() - start}))
            return
        from madmax.search.api import find
        from madmax.search.core import summary as candidate
        from madmax.search.text import report

        outcome = find(**kwargs)
        top = kwargs.get("top", 10)
        info = report(outcome, top, time.perf_counter() - start)
        queue.put(("result", {**info, "objective": {"name": outcome.scorer.objective.value,
                                                    "unit": outcome.scorer.unit},
                              "results": [candidate(outcome, i) for i in outcome.top(top)]}))
    except MadmaxError as exc:
        queue.put(("error", str(exc)))
    except Exception as exc:  # a bug: its name, never a traceback, reaches the client
        queue.put(("error", f"the search failed with an internal error ({exc.__class__.__name__})"))


def _check(kind: str, kwargs: dict[str, Any]) -> None:
    """Load the model, system and task as the search will (cheap), so bad input is refused before the
    response starts streaming."""
    if kind == "capacity":
        from madmax.config.stack import load_stack
        from madmax.request import resolve_request
        from madmax.serve.slo import parse_slos

        load_stack(kwargs.get("stack"))
        parse_slos(kwargs.get("slo"))
        systems = kwargs["systems"] if isinstance(kwargs["systems"], list) else [kwargs["systems"]]
        for system in systems:
            resolve_request(kwargs["model"], system, None, "inference", prompt_len=kwargs.get("prompt_len"),
                            output_len=kwargs.get("output_len"))
        return
    if kind == "rl":
        from madmax.config.loaders import load_model, load_system
        from madmax.config.rl import load_rl

        load_rl(kwargs.get("rl"))
        load_model(kwargs["model"])
        load_system(kwargs["system"], kwargs.get("num_gpus"))
        return
    if kind == "serving":
        from madmax.config.stack import load_stack
        from madmax.request import resolve_request

        load_stack(kwargs.get("stack"))
        resolve_request(kwargs["model"], kwargs["system"], kwargs.get("num_gpus"), "inference",
                        prompt_len=kwargs.get("prompt_len"), output_len=kwargs.get("output_len"))
        return
    from madmax.search.context import prepare

    fields = {k: kwargs[k] for k in ("finetune", "lora_rank", "frozen_layers", "lora_targets", "expert_load",
                                     "capacity_factor") if kwargs.get(k) is not None}
    prepare(kwargs["model"], kwargs["system"], kwargs.get("num_gpus"), kwargs.get("task", "pretrain"),
            kwargs.get("global_batch"), kwargs.get("seq_len"), kwargs.get("dtype"),
            calibration=kwargs.get("calibration"), stack=kwargs.get("stack"), **fields)
