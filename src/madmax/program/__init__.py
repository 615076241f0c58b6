"""Program builders: a task's work written as per-rank programs of segments for `madmax.sim`.

A task is a program builder: the training iteration (`training`: forward and backward passes of every
micro-batch, gradient reduction, optimizer step) and the serving step (`serving`: prefill and decode
of a batch of requests). Each declares whether it has a fast estimate, a closed form of its program's
time that the strategy search may screen candidates with; a builder without one (for a workload) has
every candidate simulated exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from madmax.config.task import TaskKind


@dataclass(frozen=True)
class ProgramBuilder:
    """A task's program builder and its declared capabilities.

    fast_estimate(workload): whether the search may screen the workload's candidates with the
    builder's closed form instead of simulating each one.
    """

    name: str
    description: str
    fast_estimate: Callable[[Any], bool]


def _training_estimates(workload: Any) -> bool:
    """The training iteration's closed form (`madmax.search.timing`) covers units that exchange nothing
    with other units; embedding tables' exchanges and their sharding planner have none."""
    return not workload.tables


def _serving_estimates(workload: Any) -> bool:
    """A serving step's time is a sum over its stages' kernels and collectives (`program.serving.step_time`),
    checked against the simulated step program."""
    del workload
    return True


TRAINING = ProgramBuilder("training", "one training iteration: passes of every micro-batch, gradient "
                                      "reduction and the optimizer step (`program.training`)", _training_estimates)
SERVING = ProgramBuilder("serving", "serving steps: prefill and decode of a batch of requests "
                                    "(`program.serving`)", _serving_estimates)


def builder_for(task: TaskKind, workload: Any) -> ProgramBuilder:
    """The builder of `task` on `workload`: token generation is served step by step; training, and a
    recommendation model's inference pass (one forward), run as a training-style iteration."""
    if task is TaskKind.INFERENCE and workload.generates_tokens:
        return SERVING
    return TRAINING
