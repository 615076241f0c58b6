"""Fit the two undocumented numbers of each serving stack to measured serving runs, and report held-out errors.

    python benchmarks/calibrate_serving.py [--stack trtllm|vllm|sglang|all] [--jobs N] [--write]

The stacks' other fields are their engines' documented defaults (catalog/serving.yaml). Two are not
documented anywhere: `graph_floor_s`, the shortest kernel of a CUDA-graph replay, and `host_step_s`, the
host's time per step. For each stack they are chosen on a grid to minimize the median |log(predicted /
measured)| of the TPOT of the stack's aggregated rows of `serving_h100` whose model is in the FIT set
(the decode step is where the kernel floor and the host time show; TTFT at a fixed concurrency depends as
much on how the benchmark released its requests, which the rows do not say, and is reported, not fitted);
the other models' rows are held out and reported separately (no row is fitted to itself):

    trtllm  fit Llama-3.1-8B (bf16),  held out Qwen3-32B (fp8)
    vllm    fit Qwen3-32B (bf16/fp8), held out Llama-3.1-70B (fp8)
    sglang  fit Qwen3-32B rows at tp 1-2, held out Qwen3-32B rows at tp 4-8 (one model measured)

`--write` puts the fitted values into catalog/serving.yaml. docs/serving.md records the last fit.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from madmax.config.stack import load_stack

GRAPH_FLOORS_US = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0)
HOST_STEPS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
FIT = {"trtllm": lambda kw: kw["model"] == "llama-3.1-8b",
       "vllm": lambda kw: kw["model"] == "qwen3-32b",
       "sglang": lambda kw: "tp=1," in kw["strategy"] or "tp=2," in kw["strategy"]}


def rows(stack: str) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """(simulate kwargs, {metric: measured}) of the stack's aggregated serving_h100 rows, one per row."""
    from madmax.validate.datasets import load_datasets

    (dataset,) = load_datasets(["serving_h100"])
    by_row: dict[str, tuple[dict, dict]] = {}
    for case in dataset.cases:
        kw = case.kwargs
        if kw.get("stack") != stack or kw.get("mode") != "concurrency":
            continue
        row = case.row_id.rsplit(":", 1)[0]
        entry = by_row.setdefault(row, (dict(kw), {}))
        entry[1][case.metric] = case.measured
    return list(by_row.values())


def _run(job: tuple[dict, dict, float, float]) -> tuple[float, float] | None:
    from madmax import api
    from madmax.errors import MadmaxError

    kwargs, stack, floor_s, host_s = job
    try:
        r = api.simulate(**{**kwargs, "stack": {**stack, "graph_floor_s": floor_s, "host_step_s": host_s}})
    except MadmaxError:
        return None
    return r.ttft_s * 1e3, r.tpot_s * 1e3


def errors(cases, stack: dict, floor_s: float, host_s: float, pool) -> dict[str, list[float]]:
    """log(predicted / measured) of each row's TTFT and TPOT, by metric."""
    results = pool.map(_run, [(kw, stack, floor_s, host_s) for kw, _ in cases], chunksize=4)
    out: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": []}
    for (_, measured), result in zip(cases, results, strict=True):
        if result is None:
            continue
        for metric, value in zip(("ttft_ms", "tpot_ms"), result, strict=True):
            if metric in measured:
                out[metric].append(math.log(value / measured[metric]))
    return out


def summary(logs: list[float]) -> str:
    pct = sorted(abs(math.exp(e) - 1) * 100 for e in logs)
    if not pct:
        return "no rows"
    p90 = pct[min(len(pct) - 1, int(0.9 * len(pct)))]
    return f"{len(pct)} values, median |e| {statistics.median(pct):.1f}%, p90 {p90:.1f}%"


def fit(stack_name: str, jobs: int) -> tuple[float, float]:
    stack = load_stack(stack_name).model_dump()
    cases = rows(stack_name)
    train = [c for c in cases if FIT[stack_name](c[0])]
    held = [c for c in cases if not FIT[stack_name](c[0])]
    with ProcessPoolExecutor(jobs) as pool:
        best = None
        for floor_us, host_ms in itertools.product(GRAPH_FLOORS_US, HOST_STEPS_MS):
            logs = errors(train, stack, floor_us * 1e-6, host_ms * 1e-3, pool)["tpot_ms"]
            score = statistics.median(abs(e) for e in logs)
            if best is None or score < best[0]:
                best = (score, floor_us, host_ms)
        _, floor_us, host_ms = best
        print(f"{stack_name}: graph_floor_s {floor_us} us, host_step_s {host_ms} ms")
        for label, part in ((f"fitted rows ({len(train)})", train), (f"held-out rows ({len(held)})", held)):
            by_metric = errors(part, stack, floor_us * 1e-6, host_ms * 1e-3, pool)
            for metric in ("tpot_ms", "ttft_ms"):
                logs = by_metric[metric]
                bias = 100 * (math.exp(statistics.median(logs)) - 1)
                print(f"  {label:20s} {metric}: {summary(logs)}, bias {bias:+.1f}%")
    return floor_us * 1e-6, host_ms * 1e-3


def write(values: dict[str, tuple[float, float]]) -> None:
    from madmax.hardware.profile import catalog_path

    path = catalog_path("serving.yaml")
    text = path.read_text(encoding="utf-8")
    for name, (floor_s, host_s) in values.items():
        start = text.index(f"  - name: {name}\n")
        end = text.find("  - name:", start + 1)
        end = len(text) if end < 0 else end
        block = text[start:end]
        lines = []
        for line in block.splitlines(keepends=True):
            if line.startswith("    graph_floor_s:"):
                line = f"    graph_floor_s: {floor_s * 1e6:g} us\n"
            elif line.startswith("    host_step_s:"):
                line = f"    host_step_s: {host_s * 1e3:g} ms\n"
            lines.append(line)
        text = text[:start] + "".join(lines) + text[end:]
    path.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="all", choices=["all", *FIT])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="write the fitted values into catalog/serving.yaml")
    args = parser.parse_args()
    names = list(FIT) if args.stack == "all" else [args.stack]
    values = {name: fit(name, args.jobs) for name in names}
    if args.write:
        write(values)


if __name__ == "__main__":
    main()
