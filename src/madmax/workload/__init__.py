"""Model -> workload: ops with FLOPs, shapes, parameters and saved activations, one module per family."""

from __future__ import annotations

from madmax.config.model import ModelSpec
from madmax.config.task import Task
from madmax.workload import dlrm, transformer, vit
from madmax.workload.ops import Block, Op, OpKind, Placement, TPSplit, Workload

BUILDERS = {"decoder": transformer.build, "dlrm": dlrm.build, "vit": vit.build}
PARAM_COUNTERS = {"decoder": transformer.param_counts, "dlrm": dlrm.param_counts, "vit": vit.param_counts}


def build_workload(model: ModelSpec, task: Task, *, flash: bool = True) -> Workload:
    """The workload of `model` for `task`, by its family's builder."""
    return BUILDERS[model.family](model, task, flash=flash)


def param_counts(model: ModelSpec) -> dict[str, int]:
    return PARAM_COUNTERS[model.family](model)


__all__ = ["Block", "Op", "OpKind", "Placement", "TPSplit", "Workload", "build_workload", "param_counts"]
