"""Speed of the serving simulation: one inference simulate, a saturation solve, rate mode with 10,000
requests, and the serving search for Llama 3.1 405B on 8 to 64 H100.

    python benchmarks/serving_speed.py [--repeat 5] [--check]

Targets (issue 9; --check exits 1 when one is missed): one simulate under 50 ms; a saturation solve under
200 ms; rate mode with 10,000 requests under 2 s; `search --task inference` for llama-3.1-405b on 8 to
64 GPUs under 5 s each. Times are warm medians (the first call pays the imports and catalog loads).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from madmax import api
from madmax.search.serving import find_serving

BASE = {"model": "llama-3.1-70b", "system": "dgx-h100", "num_gpus": 8, "task": "inference", "prompt_len": 1024,
        "output_len": 256}
CASES = {
    "simulate (static, tp=8, batch 64)": (0.05, lambda: api.simulate(**BASE, batch=64, strategy="tp=8")),
    "saturation solve (tp=4)": (0.2, lambda: api.simulate(**BASE, mode="saturation", strategy="tp=4")),
    "rate mode, 10,000 requests (tp=4, 20 req/s)": (
        2.0, lambda: api.simulate(**BASE, mode="rate", request_rate=20.0, num_requests=10_000, strategy="tp=4")),
    **{f"search --task inference, 405b on {n} GPUs": (
        5.0, lambda n=n: find_serving("llama-3.1-405b", "dgx-h100", n, prompt_len=1024, output_len=256,
                                      max_tpot=0.05)) for n in (8, 16, 32, 64)},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    missed = []
    for name, (target, run) in CASES.items():
        run()  # warm: imports, catalog, compute tables
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        ok = median < target
        missed += [] if ok else [name]
        print(f"{name:48s} {median * 1e3:9.1f} ms   target < {target * 1e3:,.0f} ms: {'met' if ok else 'MISSED'}")
    if args.check and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
