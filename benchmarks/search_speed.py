"""Speed of `madmax search` and the agreement of its fast estimates with `simulate`.

    python benchmarks/search_speed.py [--case 405b|small|all] [--top K] [--sample N] [--workers W] [--check]

Cases:
- 405b: every strategy of Llama-3.1-405B pre-training on 16,384 H100 (dgx-h100), global batch
  2,048 x 8,192 tokens;
- small: Llama-3.1-8B on 16 H100, global batch 64 x 4,096 tokens.

For each: candidates enumerated, valid (pass the divisibility rules), evaluated (fit in memory),
replayed and simulated; wall time and strategies per second (valid / wall time, the whole search
including the re-simulation of the best); then, for the top K (simulated) and for N more candidates
drawn from the replayed pool, the error of the step replay and of the closed form against `simulate`.

Targets (--check exits 1 when one is missed): the 405b case in under 30 s and over 10,000 strategies/s;
the step replay within 1 % of `simulate` on every checked candidate.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from madmax import api
from madmax.search.api import find

CASES = {
    "405b": {"model": "llama-3.1-405b", "system": "dgx-h100", "num_gpus": 16384, "global_batch": 2048,
             "seq_len": 8192},
    "small": {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 16, "global_batch": 64, "seq_len": 4096},
}
WALL_LIMIT_S, RATE_TARGET, REPLAY_TOL = 30.0, 10_000.0, 0.01


def run(name: str, top: int, sample: int, workers: int) -> list[str]:
    """Prints one case; returns the targets it missed."""
    start = time.perf_counter()
    o = find(**CASES[name], top=top, workers=workers)
    wall = time.perf_counter() - start
    rate = o.valid / wall
    replayed = np.flatnonzero(~np.isnan(o.refined_s))
    print(f"\n## {name}: {o.ctx.spec.name} on {o.ctx.num_gpus} x {o.ctx.system.name}, "
          f"global batch {o.ctx.global_batch} x {o.ctx.seq_len}")
    print(f"enumerated {o.enumerated:,}; rejected " + ", ".join(f"{k} {v:,}" for k, v in o.rejected.items()))
    print(f"valid {o.valid:,}; evaluated {o.evaluated:,}; replayed {len(replayed):,}; simulated {len(o.exact):,}")
    print(f"wall {wall:.2f} s, {rate:,.0f} strategies/s; phases "
          + ", ".join(f"{k} {v:.2f} s" for k, v in o.timings_s.items()))

    checked = [(i, o.exact[i]) for i in o.top(top)]
    rng = np.random.default_rng(0)
    others = [int(i) for i in replayed if int(i) not in o.exact]
    for i in rng.choice(others, size=min(sample, len(others)), replace=False) if others else []:
        checked.append((int(i), api.simulate(**o.ctx.simulate_kwargs, strategy=o.strategy(int(i)))))
    replay = np.array([abs(o.refined_s[i] / r.iteration_time_s - 1) for i, r in checked])
    screen = np.array([abs(o.estimate_s[i] / r.iteration_time_s - 1) for i, r in checked])
    k = len(o.top(top))
    print(f"top {k}: step replay vs simulate max |error| {replay[:k].max():.2e}, closed form "
          f"max {screen[:k].max():.2%} mean {screen[:k].mean():.2%}")
    if len(checked) > k:
        print(f"{len(checked) - k} more replayed candidates: step replay max |error| {replay[k:].max():.2e}, "
              f"closed form max {screen[k:].max():.2%}")
    print("| # | strategy | simulate s | replay s | closed form s |\n|---|---|---|---|---|")
    for rank, (i, r) in enumerate(checked[:k], 1):
        print(f"| {rank} | {o.strategy(i)} | {r.iteration_time_s:.4f} | {o.refined_s[i]:.4f} | "
              f"{o.estimate_s[i]:.4f} |")
    missed = []
    if name == "405b" and wall > WALL_LIMIT_S:
        missed.append(f"405b wall {wall:.1f} s > {WALL_LIMIT_S} s")
    if name == "405b" and rate < RATE_TARGET:
        missed.append(f"405b {rate:,.0f} strategies/s < {RATE_TARGET:,.0f}")
    if replay.max() > REPLAY_TOL:
        missed.append(f"{name} step replay error {replay.max():.2%} > {REPLAY_TOL:.0%}")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--top", type=int, default=10, help="strategies reported (each simulated)")
    parser.add_argument("--sample", type=int, default=20, help="more replayed candidates checked by simulate")
    parser.add_argument("--workers", type=int, default=1, help="processes for the re-simulation")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    missed = []
    for name in CASES if args.case == "all" else [args.case]:
        missed += run(name, args.top, args.sample, args.workers)
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
