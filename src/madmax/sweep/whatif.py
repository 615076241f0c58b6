"""Hardware what-ifs: a catalog system with some of its numbers multiplied by a factor.

Each resource is one number of the system (or all FLOP/s peaks of its GPU); a what-if multiplies it:

    flops             GPU dense peak FLOP/s, every dtype        (gpu.flops_per_s)
    hbm_bandwidth     HBM bandwidth, bytes/s                    (gpu.hbm_bytes_per_s)
    hbm_capacity      HBM capacity, bytes                       (gpu.hbm_bytes)
    nvlink_bandwidth  scale-up bandwidth per GPU per direction  (scale_up.bytes_per_s; NVLink, or PCIe)
    nvlink_latency    scale-up latency of one message, s        (scale_up.latency_s)
    nic_bandwidth     scale-out bandwidth per GPU per direction (scale_out.bytes_per_s)
    nic_latency       scale-out latency of one message, s       (scale_out.latency_s)

and, for the time to train a `train` amount, of the reliability profile (`madmax.results.goodput.scaled`):

    failure_rate          every interruption rate                (lower is better)
    checkpoint_bandwidth  the nodes' and the file system's checkpoint bandwidth
    restart_time          restart, repair and warm-up times      (lower is better)

and one count that replaces the profile's rather than multiplying it:

    spares                spare nodes of the job (restart.spares: a failed node's wait for a spare, Erlang C)

A what-if keeps the system's name, price and power (the catalog's node power at load): it asks how fast
the same cluster would be, not what a faster part would cost. Efficiencies stay fractions of the scaled
peaks (the compute and network models key their caches by the numbers, not by the name).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from madmax.config.hardware import System
from madmax.errors import ConfigError

SYSTEM_RESOURCES = ("flops", "hbm_bandwidth", "hbm_capacity", "nvlink_bandwidth", "nvlink_latency", "nic_bandwidth",
                    "nic_latency")
RELIABILITY_RESOURCES = ("failure_rate", "checkpoint_bandwidth", "restart_time")
RESOURCES = SYSTEM_RESOURCES + RELIABILITY_RESOURCES
# What-if settings that are counts, set as given (not multipliers, so not co-design resources).
COUNTS = ("spares",)
# Resources that get better as their number falls: a what-if improving one k times divides it by k.
LATENCIES = frozenset({"nvlink_latency", "nic_latency", "failure_rate", "restart_time"})


def improvement(resource: str, multiplier: float) -> float:
    """How many times better a resource gets: the multiplier, or its inverse for a latency."""
    return 1 / multiplier if resource in LATENCIES else multiplier


def multiplier(resource: str, improvement_factor: float) -> float:
    """The field multiplier that makes `resource` `improvement_factor` times better (inverse of `improvement`)."""
    return 1 / improvement_factor if resource in LATENCIES else improvement_factor


def apply_whatif(system: System, scales: Mapping[str, float]) -> System:
    """`system` with each resource of `scales` multiplied by its factor (factors > 0; 1 leaves it as is)."""
    for name, factor in scales.items():
        if name in COUNTS:
            continue
        if name not in RESOURCES:
            raise ConfigError(f"whatif.{name} is not a resource; allowed: {', '.join(RESOURCES + COUNTS)}")
        if not 0 < factor < math.inf:
            raise ConfigError(f"whatif.{name}={factor} must be a positive, finite multiplier")
    s = {r: float(scales.get(r, 1)) for r in SYSTEM_RESOURCES}
    if all(v == 1 for v in s.values()):
        return system
    gpu = system.gpu.model_copy(update={
        "flops_per_s": {d: v * s["flops"] for d, v in system.gpu.flops_per_s.items()},
        "hbm_bytes_per_s": system.gpu.hbm_bytes_per_s * s["hbm_bandwidth"],
        "hbm_bytes": system.gpu.hbm_bytes * s["hbm_capacity"],
        "usable_bytes": None if system.gpu.usable_bytes is None else system.gpu.usable_bytes * s["hbm_capacity"],
    })
    up = system.scale_up.model_copy(update={"bytes_per_s": system.scale_up.bytes_per_s * s["nvlink_bandwidth"],
                                            "latency_s": system.scale_up.latency_s * s["nvlink_latency"]})
    out = system.scale_out.model_copy(update={"bytes_per_s": system.scale_out.bytes_per_s * s["nic_bandwidth"],
                                              "latency_s": system.scale_out.latency_s * s["nic_latency"]})
    return system.model_copy(update={"gpu": gpu, "scale_up": up, "scale_out": out})


def apply_reliability_whatif(profile, scales: Mapping[str, float]):
    """The reliability profile with the what-if's reliability resources applied (`madmax.results.goodput.scaled`)."""
    from madmax.results.goodput import scaled

    profile = scaled(profile, **{r: float(scales[r]) for r in RELIABILITY_RESOURCES if r in scales})
    if "spares" in scales:
        restart = profile.restart.model_copy(update={"spares": int(scales["spares"])})
        profile = profile.model_copy(update={"restart": restart})
    return profile


def describe(scales: Mapping[str, float]) -> str:
    """A label such as 'flops x2, nic_bandwidth x0.5'; 'baseline' when nothing is scaled."""
    parts = [f"{r} x{scales[r]:g}" for r in RESOURCES if scales.get(r, 1) != 1]
    parts += [f"{c}={scales[c]:g}" for c in COUNTS if c in scales]
    return ", ".join(parts) or "baseline"
