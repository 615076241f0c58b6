"""Memory of one rank of each pipeline stage: weights, gradients, optimizer state, activations.

Weights, gradients and optimizer bytes per parameter come from the data-parallel plan (ZeRO stage,
sharding group), that of the routed experts (sharded over their expert-data-parallel ranks) for theirs.
Activations: each local chunk keeps `saved_bytes` per micro-batch in flight, and the number in flight
comes from the stage's schedule (1F1B keeps up to pp - stage micro-batches on stage `stage`; the
interleaved schedule more), replayed in program order. Full recompute keeps only
each layer's input but rebuilds one layer's activations during its backward (`working_bytes`).
ZeRO-3 holds the gathered weights of the layer running and of the one prefetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from madmax.parallel.pipeline import peak_in_flight, schedule
from madmax.parallel.plan import Plan

# FSDP keeps the current unit's gathered weights and prefetches the next one.
ZERO3_GATHERED_UNITS = 2


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one rank of a stage."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    reserved_bytes: float
    tables_bytes: float = 0.0  # embedding tables and their optimizer state kept in HBM

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.reserved_bytes + self.tables_bytes)

    def to_dict(self) -> dict[str, float]:
        out = {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
               "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
               "reserved": self.reserved_bytes, "total": self.total_bytes}
        if self.tables_bytes:
            out["embedding_tables"] = self.tables_bytes
        return out


def stage_memory(plan: Plan, stage: int, reserved_bytes: float) -> StageMemory:
    """Peak memory of one rank of `stage`; reserved_bytes: CUDA context, NCCL and allocator overhead."""
    chunks = plan.stages[stage]
    units = [plan.units[key] for chunk in chunks for key in chunk]
    weights = gradients = optimizer = 0.0
    for _, data, params, trainable in (g for u in units for g in u.state_groups(plan)):
        w, g, o = data.state_bytes_per_param()
        weights += (params - trainable) * data.weight_bytes + trainable * w
        gradients += trainable * g
        optimizer += trainable * o
    if plan.data.zero >= 3:
        largest = max((u.params for u in units), default=0.0)  # a stage of empty chunks holds none
        weights += ZERO3_GATHERED_UNITS * largest * plan.data.weight_bytes
    per_chunk = [sum(plan.units[key].saved_bytes for key in chunk) for chunk in chunks]
    steps = schedule(stage, plan.strategy.pp, plan.strategy.vp, plan.microbatches)
    activations = peak_in_flight(steps, per_chunk) + max((u.working_bytes for u in units), default=0.0)
    tables = sum(u.state_bytes for u in units)  # embedding tables and their optimizer state
    return StageMemory(weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer,
                       activations_bytes=activations, reserved_bytes=reserved_bytes, tables_bytes=tables)
