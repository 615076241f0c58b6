"""Speed of one `simulate`: Llama 3.1 405B on 16,384 H100 (tp=8, pp=16, vp=4, 2,048 x 8,192 tokens).

Target (issue 3): well under 0.2 s per simulate. Prints the cold time (first call: imports, catalog,
calibration fit tables) and the median of warm calls, and the number of simulated tasks.

    python benchmarks/simulate_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

CASE = dict(model="llama-3.1-405b", system="dgx-h100", num_gpus=16384, global_batch=2048, seq_len=8192,
            strategy="tp=8,pp=16,vp=4")
TARGET_S = 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    start = time.perf_counter()
    from madmax import api

    result = api.simulate(**CASE, keep_schedule=True)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        api.simulate(**CASE)
        warm.append(time.perf_counter() - t0)
    tasks = len(result.schedule.start_s) if result.schedule else 0
    median = statistics.median(warm)
    print(f"llama-3.1-405b on 16384 x H100, {CASE['strategy']}, 2048 x 8192 tokens")
    print(f"  simulated tasks: {tasks:,}")
    print(f"  cold (imports + first call): {cold:.3f} s")
    print(f"  warm median of {args.repeat}: {median:.3f} s   target < {TARGET_S} s: "
          f"{'met' if median < TARGET_S else 'MISSED'}")
    print(f"  iteration {result.iteration_time_s:.3f} s, MFU {result.mfu:.1%}, fits {result.fits}")


if __name__ == "__main__":
    main()
