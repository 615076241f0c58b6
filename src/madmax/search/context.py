"""The fixed part of a search: model, system, task and cost models, checked once as `simulate` checks them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from madmax.config.base import DType
from madmax.config.hardware import System
from madmax.config.model import ModelSpec
from madmax.config.task import Task, TaskKind
from madmax.errors import ConfigError
from madmax.search.space import Problem


@dataclass(frozen=True)
class Context:
    """Everything that does not change from one candidate to the next."""

    spec: ModelSpec
    system: System
    task: Task
    seq_len: int
    global_batch: int
    workload: Any  # madmax.workload.Workload
    compute: Any  # madmax.hardware.compute.ComputeModel
    network: Any  # madmax.hardware.collectives.NetworkModel
    reserve: Any  # madmax.parallel.memory.Reserve: the software stack's HBM
    calibration: str | Path | None
    simulate_kwargs: dict[str, Any]
    # Every candidate keeps its low-precision GEMMs' weights in that format only (strategy fp8_params).
    fp8_params: bool = False
    # HBM per GPU the search keeps free (`search.api.with_memory_margin`): the system's usable memory is lowered by it
    memory_margin_bytes: float = 0.0
    stack: str = "megatron-core"  # the training stack the simulated candidates run under (`prepare`)
    # tp_overlap settings the simulated candidates try (`core.simulated_variants`); the screen costs none
    tp_overlap: tuple[bool, ...] = (False,)
    dispatchers: tuple[str, ...] = ("alltoall",)  # token dispatchers the simulated MoE candidates try (the same)
    plans: dict = field(default_factory=dict, compare=False, repr=False)  # units of the plans built so far

    @property
    def num_gpus(self) -> int:
        return self.system.cluster_gpus

    @property
    def dtype(self) -> DType:
        return self.task.dtype

    @property
    def domain(self) -> int:
        return self.system.scale_up_domain

    @property
    def capacity_bytes(self) -> float:
        return self.system.gpu.usable_memory_bytes

    @property
    def has_tables(self) -> bool:
        """Whether the model has embedding tables (a recommendation model), whose sharding is searched."""
        return bool(self.workload.tables)

    @property
    def tokens(self) -> int:
        """Tokens of one iteration (global batch x sequence length)."""
        return self.global_batch * self.seq_len

    def problem(self) -> Problem:
        """The sizes the divisibility rules need, from the model's own constraints (as `simulate` uses)."""
        constraints = self.spec.parallel_constraints()
        unknown = sorted(set(constraints) - {"tp", "ep", "etp"})
        assert not unknown, f"search has no rule for constraints on {unknown}"
        limits = {str(axis): limit for axis, (limit, _) in self.spec.degree_limits().items()}

        def sizes(axis: str) -> tuple[int, ...]:
            return tuple(size for _, size in constraints.get(axis, []))

        return Problem(num_gpus=self.num_gpus, global_batch=self.global_batch, seq_len=self.seq_len,
                       num_layers=self.spec.num_pipeline_units, tp_sizes=sizes("tp"),
                       max_degree=tuple(sorted(limits.items())), has_experts=self.has_experts,
                       ep_sizes=sizes("ep"), etp_sizes=sizes("etp"))

    @property
    def has_experts(self) -> bool:
        """Whether the model has routed experts (ep, etp and ep_overlap are searched)."""
        return bool(getattr(self.spec, "has_experts", False))


def prepare(model: Any, system: Any, num_gpus: int | None = None, task: Any = "pretrain",
            global_batch: int | None = None, seq_len: int | None = None, dtype: str | None = None, *,
            calibration: str | Path | None = None, stack: Any = None, **task_fields: Any) -> Context:
    """Load and check the inputs with the request resolver `madmax.simulate` uses; a search also needs
    the global batch.

    stack: the training stack (`madmax.config.training_stack`; None: the default, Megatron-Core). The closed form
    and the replay cost every candidate with the default stack's schedule, under this stack's compute profile
    (its runtime, unless `calibration` is given) and attention kernel; the candidates the search simulates run
    under the stack itself (`simulate_kwargs`), so the reported ranking is the stack's.
    task_fields: finetune, lora_rank, frozen_layers, lora_targets (fine-tuning).
    Raises `MadmaxError` with one sentence on bad input.
    """
    from madmax.config.training_stack import load_training_stack
    from madmax.hardware.collectives import network_model
    from madmax.hardware.compute import compute_model
    from madmax.parallel.memory import runtime_reserve
    from madmax.request import resolve_request

    request = resolve_request(model, system, num_gpus, task, calibration=calibration, global_batch=global_batch,
                              seq_len=seq_len, dtype=dtype, **task_fields)
    t, sysm = request.task, request.system
    if t.kind is TaskKind.INFERENCE:
        raise ConfigError("task=inference is not supported by search yet; allowed: pretrain, finetune")
    if t.global_batch is None:
        raise ConfigError("global_batch is required by search (sequences per optimizer step), "
                          "e.g. --global-batch 1024; allowed: a positive integer")
    training_stack = load_training_stack(stack)
    kwargs = {"model": request.spec, "system": sysm, "num_gpus": sysm.cluster_gpus, "task": t,
              "calibration": calibration}
    if stack is not None:
        kwargs["stack"] = training_stack
    # the stack's runtime profile and attention kernel, as `simulate` costs a candidate under it
    profile = calibration if calibration is not None else training_stack.calibration_for(False)
    kernel = training_stack.attention_kernel(sysm.gpu.architecture)
    compute = compute_model(sysm.gpu, profile, attention_kernel=kernel)
    return Context(spec=request.spec, system=sysm, task=t, seq_len=request.seq_len, global_batch=t.global_batch,
                   workload=request.workload, compute=compute,
                   network=network_model(sysm, compute.profile.network if profile else ()),
                   reserve=runtime_reserve(), calibration=calibration, simulate_kwargs=kwargs,
                   stack=training_stack.name)
