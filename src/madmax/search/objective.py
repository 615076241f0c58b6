"""What a search ranks by: throughput, time, cost or energy of training `tokens` tokens.

For a candidate with iteration time T (s) on G GPUs, B*S tokens per iteration and N tokens to train:

    throughput  tokens/s per GPU   = B*S / (T G)                       (higher is better)
    time        seconds            = N T / (B*S)
    cost        USD                = price_per_gpu_hour_usd * G * time / 3600
    energy      joules             = P * time

Power model: P is constant at load for the whole run, `node_power_w` of the system per node (GPUs and
the rest of the server, the catalog's maximum system power) times ceil(G / gpus_per_node); a system
without `node_power_w` counts only its GPUs at board power: P = tdp_w * G. Idle, cooling (PUE) and
network switches are not counted. N defaults to the tokens of one iteration (B*S).
With the GPU count and the global batch fixed, all four rank candidates alike (by T); they differ
in the number reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from madmax.config.checks import positive_number
from madmax.config.hardware import System
from madmax.errors import ConfigError
from madmax.results.cost import SECONDS_PER_HOUR, power_w

__all__ = ["SECONDS_PER_HOUR", "UNITS", "Objective", "Scorer", "power_w", "scorer"]

class Objective(StrEnum):
    THROUGHPUT = "throughput"
    TIME = "time"
    COST = "cost"
    ENERGY = "energy"


UNITS = {Objective.THROUGHPUT: "tokens/s/GPU", Objective.TIME: "s", Objective.COST: "USD", Objective.ENERGY: "J"}


@dataclass(frozen=True)
class Scorer:
    """Turns iteration times into the objective's value; `lower_is_better` orders the ranking."""

    objective: Objective
    tokens_per_iteration: int
    tokens: float
    num_gpus: int
    price_per_gpu_hour_usd: float | None
    power_w: float

    @property
    def lower_is_better(self) -> bool:
        return self.objective is not Objective.THROUGHPUT

    @property
    def unit(self) -> str:
        return UNITS[self.objective]

    def value(self, iteration_time_s: np.ndarray | float) -> np.ndarray | float:
        t = iteration_time_s
        if self.objective is Objective.THROUGHPUT:
            return self.tokens_per_iteration / t / self.num_gpus
        seconds = self.tokens * t / self.tokens_per_iteration
        if self.objective is Objective.TIME:
            return seconds
        if self.objective is Objective.COST:
            return self.price_per_gpu_hour_usd * self.num_gpus * seconds / SECONDS_PER_HOUR
        return self.power_w * seconds

    def sort_key(self, iteration_time_s: np.ndarray) -> np.ndarray:
        """Ascending key: the best candidate first."""
        v = np.asarray(self.value(iteration_time_s), dtype=float)
        return v if self.lower_is_better else -v


def scorer(objective: str | Objective, system: System, tokens_per_iteration: int,
           tokens: float | None = None) -> Scorer:
    """The scorer of `objective`; ConfigError for an unknown objective, a cost without a price or
    a non-positive token count."""
    allowed = ", ".join(o.value for o in Objective)
    try:
        obj = Objective(str(objective).lower())
    except ValueError:
        raise ConfigError(f"objective={objective!r} is unknown; allowed: {allowed}") from None
    tokens = None if tokens is None else positive_number(tokens, "tokens", "tokens to train")
    if obj is Objective.COST and system.price_per_gpu_hour_usd is None:
        raise ConfigError(f"objective=cost needs a price, but system {system.name} has no price_per_gpu_hour_usd; "
                          "allowed: --price USD per GPU-hour (API price=), a system with a price (e.g. "
                          "p5.48xlarge) or another objective")
    return Scorer(objective=obj, tokens_per_iteration=tokens_per_iteration,
                  tokens=float(tokens if tokens is not None else tokens_per_iteration),
                  num_gpus=system.cluster_gpus, price_per_gpu_hour_usd=system.price_per_gpu_hour_usd,
                  power_w=power_w(system))
