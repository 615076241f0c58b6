"""What a run costs in money and energy, from the system's price per GPU-hour and its power at load.

For G GPUs priced at p USD per GPU-hour drawing P watts (the whole cluster) for t seconds:

    cost    USD = p G t / 3600          energy  J = P t

Power model: P is constant at load, `node_power_w` of the system per node (GPUs and the rest of the server:
the catalog's maximum system power, or `--power` x GPUs per node) times ceil(G / gpus_per_node); a system
without `node_power_w` counts only its GPUs at board power, P = tdp_w G. Idle, cooling (PUE) and network
switches are not counted. The search objectives (`madmax.search.objective`) use the same model.
"""

from __future__ import annotations

from typing import Any

from madmax.config.hardware import System

SECONDS_PER_HOUR = 3600
PER_MILLION = 1e6


def power_w(system: System) -> float:
    """Power of the whole cluster at load (W): node power x nodes, else GPU board power x GPUs."""
    gpus = system.cluster_gpus
    if system.node_power_w is not None:
        return system.node_power_w * -(-gpus // system.gpus_per_node)
    return system.gpu.tdp_w * gpus


def cost_of(system: System, seconds: float, tokens: float, token_kind: str = "tokens") -> dict[str, Any]:
    """Price and energy of `tokens` tokens made in `seconds` on the whole cluster of `system`.

    Returns the price (USD per GPU-hour; None without one), USD per hour and per million `token_kind` (None
    without a price), the cluster's power (W; `power_basis` says whether from node power or GPU board power)
    and joules per token. token_kind names what is counted: "tokens" (training: every token of the
    iteration), "output_tokens" (serving: generated tokens).
    """
    gpus = system.cluster_gpus
    price = system.price_per_gpu_hour_usd
    watts = power_w(system)
    per_hour = None if price is None else price * gpus
    per_million = None
    if price is not None and tokens > 0:
        per_million = price * gpus * seconds / SECONDS_PER_HOUR / tokens * PER_MILLION
    return {"price_per_gpu_hour_usd": price, "usd_per_hour": per_hour, f"usd_per_million_{token_kind}": per_million,
            "power_w": watts, "power_basis": "node_power_w" if system.node_power_w is not None else "gpu tdp_w",
            f"joules_per_{token_kind[:-1]}": watts * seconds / tokens if tokens > 0 else None}
