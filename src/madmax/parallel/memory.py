"""Memory of one rank of each pipeline stage: weights, gradients, optimizer state, activations, reserve.

Weights, gradients and optimizer bytes per parameter come from the data-parallel plan (ZeRO stage,
sharding group), that of the routed experts (sharded over their expert-data-parallel ranks) for theirs.
Activations: each local chunk keeps `saved_bytes` per micro-batch in flight, and the number in flight
comes from the stage's schedule (1F1B keeps up to pp - stage micro-batches on stage `stage`; the
interleaved schedule more), replayed in program order. Full recompute keeps only
each layer's input but rebuilds one layer's activations during its backward (`working_bytes`).
ZeRO-3 holds the gathered weights of the unit running and of the one prefetched, at most
`Reserve.zero3_live_params` of them (DeepSpeed releases gathered weights beyond that): the stage's two
largest units (with the embedding and the LM head on one stage, FSDP's root unit holds both).

The reserve is what the software stack holds outside the model's tensors (`Reserve`, runtime.yaml):
the CUDA context, one NCCL communicator per process group of the rank with more than one rank, and the
caching allocator's fragmentation of the activations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from madmax.config.units import parse_quantity
from madmax.parallel.pipeline import inflight
from madmax.parallel.plan import Plan


@dataclass(frozen=True)
class Reserve:
    """HBM per GPU the software stack holds outside the model's tensors (runtime.yaml `reserve`).

    context_bytes: the CUDA context; communicator_bytes / pair_communicator_bytes: one NCCL communicator
    of a group of more than two / of two ranks; fragmentation: the caching allocator's overhead, as a
    fraction of the activations; zero3_live_params: the most gathered parameters ZeRO-3 keeps resident.
    """

    context_bytes: float
    communicator_bytes: float = 0.0
    pair_communicator_bytes: float = 0.0
    fragmentation: float = 0.0
    zero3_live_params: float = math.inf

    @classmethod
    def flat(cls, reserved_bytes: float) -> Reserve:
        """A reserve of `reserved_bytes` whatever the plan (no communicators, no fragmentation)."""
        return cls(context_bytes=reserved_bytes)

    def communicators_bytes(self, sizes: Iterable[Any]) -> Any:
        """Bytes of the communicators of process groups of `sizes` ranks (ints, or arrays of candidates'
        sizes): a group of one rank has none, of two a pair's, of more a full communicator's."""
        total: Any = 0.0
        for n in sizes:
            total = total + np.where(np.asarray(n) > 2, self.communicator_bytes,
                                     np.where(np.asarray(n) == 2, self.pair_communicator_bytes, 0.0))
        return total

    def zero3_gathered_params(self, two_largest_units_params: Any) -> Any:
        """Parameters ZeRO-3 holds gathered: the unit running and the one prefetched (at most the stage's two
        largest units, `two_largest_units_params`), at most the live limit."""
        return np.minimum(np.asarray(two_largest_units_params, dtype=float), self.zero3_live_params)


@cache
def runtime_reserve() -> Reserve:
    """The software stack's reserve of the catalog (runtime.yaml `reserve`)."""
    text = resources.files("madmax.catalog").joinpath("runtime.yaml").read_text(encoding="utf-8")
    r = yaml.safe_load(text)["reserve"]
    return Reserve(context_bytes=parse_quantity(r["cuda_context_bytes"], "bytes"),
                   communicator_bytes=parse_quantity(r["communicator_bytes"], "bytes"),
                   pair_communicator_bytes=parse_quantity(r["pair_communicator_bytes"], "bytes"),
                   fragmentation=float(r["allocator_fragmentation"]), zero3_live_params=float(r["zero3_live_params"]))


def group_sizes(tp: Any, cp: Any, pp: Any, dp: Any, ep: Any = 1, etp: Any = 1, experts: bool = False) -> tuple:
    """Sizes of the process groups a training rank communicates in (Megatron-Core's): tp, cp, pp (its
    sends and receives to the neighbouring stages), the gradient group dp x cp and, with routed experts,
    ep, etp and the experts' data-parallel group edp = tp cp dp / (ep etp). Ints or arrays of candidates."""
    sizes = (tp, cp, pp, dp * cp)
    if experts:
        sizes += (ep, etp, tp * cp * dp // (ep * etp))
    return sizes


def plan_groups(plan: Plan) -> tuple:
    """`group_sizes` of a plan's strategy."""
    s = plan.strategy
    return group_sizes(s.tp, s.cp, s.pp, s.dp or 1, s.ep, s.etp, plan.expert_data is not None)


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one rank of a stage; reserved = context + communicators + fragmentation."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    context_bytes: float
    tables_bytes: float = 0.0  # embedding tables and their optimizer state kept in HBM
    communicators_bytes: float = 0.0
    fragmentation_bytes: float = 0.0

    @property
    def reserved_bytes(self) -> float:
        return self.context_bytes + self.communicators_bytes + self.fragmentation_bytes

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.reserved_bytes + self.tables_bytes)

    def to_dict(self) -> dict[str, float]:
        """The parts by name; "reserved" is the sum of the `RESERVE_PARTS`, listed too."""
        out = {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
               "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
               "reserved": self.reserved_bytes, "total": self.total_bytes}
        if self.tables_bytes:
            out["embedding_tables"] = self.tables_bytes
        out.update(zip(RESERVE_PARTS, (self.context_bytes, self.communicators_bytes, self.fragmentation_bytes),
                       strict=True))
        return out


# The keys of `StageMemory.to_dict` that detail "reserved" (not parts of the total beside it).
RESERVE_PARTS = ("reserved_context", "reserved_communicators", "reserved_fragmentation")


def checkpoint_state_bytes(plan: Plan, total_params: float) -> dict[str, float]:
    """What a checkpoint of the whole job writes (the trainable parameters' weights and optimizer state: frozen
    weights are read again from the base model) and what a restart reads (every weight and that state), in bytes;
    the trainable share is the plan's units'."""
    units = plan.units.values()
    params = sum(u.params for u in units)
    trainable = total_params * (sum(u.trainable_params for u in units) / params if params else 1.0)
    weight, optimizer = plan.data.weight_bytes, plan.data.optimizer_bytes
    return {"checkpoint_bytes": trainable * (weight + optimizer),
            "restore_bytes": total_params * weight + trainable * optimizer}


def stage_memory(plan: Plan, stage: int, reserve: Reserve | float) -> StageMemory:
    """Peak memory of one rank of `stage`; reserve: the software stack's (a number: a flat reserve)."""
    if not isinstance(reserve, Reserve):
        reserve = Reserve.flat(reserve)
    chunks = plan.stages[stage]
    units = [plan.units[key] for chunk in chunks for key in chunk]
    weights = gradients = optimizer = 0.0
    for _, data, params, trainable in (g for u in units for g in u.state_groups(plan)):
        w, g, o = data.state_bytes_per_param()
        # ZeRO-3 partitions every parameter, frozen or not (DeepSpeed's and FSDP's partitioning does not look
        # at requires_grad): a frozen weight is sharded like a trainable one and has no gradient or state.
        weights += (params - trainable) * w + trainable * w
        gradients += trainable * g
        optimizer += trainable * o
    cast = sum(u.cast_cache_bytes for u in units)  # low-precision weight copies cached for the step
    if plan.data.zero >= 3:
        # Only weights sharded over more than one rank are gathered into a buffer of their own: with one
        # rank to a shard (dp = 1, or experts whose expert-data-parallel group is one rank) the weight is
        # whole already, and FSDP and DeepSpeed use it in place.
        sharded = [sum(params for _, d, params, _ in u.state_groups(plan) if d.shard > 1) for u in units]
        gathered = float(reserve.zero3_gathered_params(sum(sorted(sharded)[-2:])))  # empty chunks: none
        weights += gathered * plan.data.weight_bytes
        # A ZeRO-3 layer's low-precision copy is cast from its gathered weights and freed with them: the
        # copies held at once are those of the gathered layers and of the weights kept whole, not the stage's.
        total = sum(u.params for u in units)
        whole = total - sum(sharded)
        cast *= min(1.0, (gathered + whole) / total) if total else 0.0
    weights += cast
    per_chunk = [sum(plan.units[key].saved_bytes for key in chunk) for chunk in chunks]
    # The peak over the stage's program of the activations of the forwards whose backward has not run
    # (`peak_in_flight`), from the schedule's candidate in-flight counts (cached per pipeline shape).
    in_flight = float((inflight(plan.strategy.pp, plan.strategy.vp, plan.microbatches)[stage] @ per_chunk).max())
    activations = in_flight + max((u.working_bytes for u in units), default=0.0)
    tables = sum(u.state_bytes for u in units)  # embedding tables and their optimizer state
    return StageMemory(weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer,
                       activations_bytes=activations, context_bytes=reserve.context_bytes, tables_bytes=tables,
                       communicators_bytes=float(reserve.communicators_bytes(plan_groups(plan))),
                       fragmentation_bytes=reserve.fragmentation * activations)
