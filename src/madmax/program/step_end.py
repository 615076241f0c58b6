"""Per-iteration costs outside the passes' kernels, at the end of the training step.

Megatron-LM's step ends with work that is small at one node and grows, or stays, at thousands of GPUs
(catalog `runtime.yaml` `step_end`; docs/model.md "Behaviour at scale"):

- the gradient norm for clipping: one fp32 all-reduced over the model-parallel ranks (tp x pp), or over
  every rank of the replica with a sharded optimizer (ZeRO >= 1), whose ranks each hold a shard. Tiny,
  so latency-bound: NCCL's tree keeps it to ~2 log2(nodes) network hops;
- the loss, averaged over the data-parallel ranks on the last stage for logging;
- the host synchronisation: the norm is read on the host, so the GPU idles while Python launches the
  clipping and optimizer kernels (`host_sync_s`, an estimate);
- the host's data loading and logging for the next iteration, beside the optimizer's kernels
  (`data_loading_s` + `logging_s`, estimates): exposed only when longer than they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from madmax.collective import Collective, Span
from madmax.config.strategy import Axis, Strategy
from madmax.config.units import parse_quantity
from madmax.hardware.collectives import NetworkModel
from madmax.hardware.profile import catalog_path
from madmax.parallel.placement import span


@dataclass(frozen=True)
class StepEnd:
    """The step-end costs of one strategy: its two small all-reduces (bytes, group, seconds) and the host's
    seconds before (`host_sync_s`) and beside (`host_beside_s`) the optimizer step."""

    grad_norm_bytes: float
    loss_bytes: float
    norm_span: Span
    loss_span: Span
    norm_s: float
    loss_s: float
    host_sync_s: float
    host_beside_s: float
    assumptions: tuple[str, ...]


@cache
def _table() -> dict[str, Any]:
    return yaml.safe_load(catalog_path("runtime.yaml").read_text(encoding="utf-8"))["step_end"]


@cache
def _host() -> tuple[float, float, tuple[str, ...]]:
    """The host's seconds before and beside the optimizer step, and the assumptions naming the estimates
    among them: the same for every strategy, parsed once (the search asks per candidate)."""
    table = _table()
    host = {key: parse_quantity(table[key], "s") for key in ("host_sync_s", "data_loading_s", "logging_s")}
    estimates = [key for key in host if str(table["sources"][key]).startswith("ESTIMATE")]
    guessed = ", ".join(f"{key} {host[key] * 1e3:g} ms" for key in estimates)
    notes = (f"step end: host time per iteration is an estimate ({guessed}; catalog runtime.yaml step_end)",
             ) if estimates else ()
    return host["host_sync_s"], host["data_loading_s"] + host["logging_s"], notes


def norm_span(strategy: Strategy, zero: int, domain_size: int) -> Span:
    """The ranks of the gradient-norm all-reduce: every rank with a sharded optimizer (ZeRO >= 1), else
    the model-parallel ranks tp x pp (the data-parallel replicas hold the same gradients)."""
    axes = (Axis.TP, Axis.CP, Axis.DP, Axis.PP) if zero >= 1 else (Axis.TP, Axis.PP)
    return span(strategy, axes, domain_size)


def step_end_costs(strategy: Strategy, zero: int, loss_span: Span, network: NetworkModel,
                   domain_size: int) -> StepEnd:
    """The step-end costs of `strategy` with ZeRO stage `zero`; `loss_span`: its data-parallel ranks
    (dp x cp); `domain_size`: the scale-up domain its ranks are placed on (the plan's)."""
    table = _table()
    host_sync_s, host_beside_s, notes = _host()
    norm_bytes, loss_bytes = float(table["grad_norm_bytes"]), float(table["loss_bytes"])
    group = norm_span(strategy, zero, domain_size)
    return StepEnd(grad_norm_bytes=norm_bytes, loss_bytes=loss_bytes, norm_span=group, loss_span=loss_span,
                   norm_s=network.collective_s(Collective.ALL_REDUCE, norm_bytes, group),
                   loss_s=network.collective_s(Collective.ALL_REDUCE, loss_bytes, loss_span),
                   host_sync_s=host_sync_s, host_beside_s=host_beside_s, assumptions=notes)
