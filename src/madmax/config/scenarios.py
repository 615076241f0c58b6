"""MLPerf Inference scenarios as serving settings (catalog/scenarios.yaml): offline is the saturation mode;
server and interactive are the rate mode held against the benchmark's p99 TTFT and TPOT limits, whose metric
is the highest Poisson rate that meets them (`madmax.search.capacity.highest_rate`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from madmax.errors import ConfigError

SCENARIOS = ("offline", "server", "interactive")


@dataclass(frozen=True)
class Scenario:
    """What a scenario sets: the serving mode, the SLOs (None offline), and a sentence naming its source."""

    name: str
    mode: str
    slo: dict[str, float] | None
    note: str


@cache
def _catalog() -> dict:
    return yaml.safe_load(resources.files("madmax.catalog").joinpath("scenarios.yaml").read_text(encoding="utf-8"))


def benchmark_models() -> dict[str, str]:
    """Catalog model -> the MLPerf benchmark that runs it."""
    return {b["model"]: b["name"] for b in _catalog()["benchmarks"]}


def scenario(name: str, model: str) -> Scenario:
    """The settings of scenario `name` for catalog model `model` (its canonical name); ConfigError naming what
    is allowed for an unknown scenario, a model no benchmark runs, or a scenario its benchmark lacks."""
    key = str(name).strip().lower()
    if key not in SCENARIOS:
        raise ConfigError(f"scenario={name!r} is unknown; allowed: {', '.join(SCENARIOS)}")
    if key == "offline":
        return Scenario(key, "saturation", None, "MLPerf Inference offline scenario: every query at once, the most "
                                                  "output tokens/s (saturation mode)")
    catalog = _catalog()
    bench = next((b for b in catalog["benchmarks"] if b["model"] == model), None)
    if bench is None:
        runs = ", ".join(f"{m} ({b})" for m, b in benchmark_models().items())
        raise ConfigError(f"scenario={key}: no MLPerf Inference benchmark runs {model}; allowed: a model one runs "
                          f"({runs}), or slo=... with mode=rate for any model")
    limits = bench.get(key)
    if limits is None:
        having = [b["model"] for b in catalog["benchmarks"] if key in b]
        raise ConfigError(f"scenario={key}: MLPerf benchmark {bench['name']} has no {key} limits; allowed: server, "
                          f"offline, or a model whose benchmark has them ({', '.join(having)})")
    slo = {k: float(v) for k, v in limits.items()}
    shown = ", ".join(f"{k.replace('_', ' ')} <= {v * 1e3:,.0f} ms" for k, v in slo.items())
    return Scenario(key, "rate", slo, f"MLPerf Inference {bench['name']} {key} scenario: Poisson arrivals within "
                                      f"{shown} ({catalog['source']})")


__all__ = ["SCENARIOS", "Scenario", "benchmark_models", "scenario"]
