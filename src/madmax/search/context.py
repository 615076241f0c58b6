"""The fixed part of a search: model, system, task and cost models, checked once as `simulate` checks them."""

from __future__ import annotations

from dataclasses import dataclass
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
    reserved_bytes: float
    calibration: str | Path | None
    simulate_kwargs: dict[str, Any]

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
        return self.system.gpu.hbm_bytes

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
        unknown = sorted(set(constraints) - {"tp"})
        assert not unknown, f"search has no rule for constraints on {unknown}"
        limits = {str(axis): limit for axis, (limit, _) in self.spec.degree_limits().items()}
        return Problem(num_gpus=self.num_gpus, global_batch=self.global_batch, seq_len=self.seq_len,
                       num_layers=self.spec.num_pipeline_units,
                       tp_sizes=tuple(size for _, size in constraints.get("tp", [])),
                       max_degree=tuple(sorted(limits.items())))


def prepare(model: Any, system: Any, num_gpus: int | None = None, task: Any = "pretrain",
            global_batch: int | None = None, seq_len: int | None = None, dtype: str | None = None, *,
            calibration: str | Path | None = None, **task_fields: Any) -> Context:
    """Load and check the inputs as `madmax.simulate` does; a search also needs the global batch.

    task_fields: finetune, lora_rank, frozen_layers, lora_targets (fine-tuning).
    Raises `MadmaxError` with one sentence on bad input.
    """
    from madmax.api import _runtime, make_task
    from madmax.config.loaders import load_model, load_system
    from madmax.config.units import parse_quantity
    from madmax.hardware.collectives import network_model
    from madmax.hardware.compute import compute_model
    from madmax.workload import build_workload

    spec = load_model(model)
    sysm = load_system(system, num_gpus)
    if dtype is None and not isinstance(task, Task | dict):
        dtype = DType.BF16.value if DType.BF16 in sysm.gpu.flops_per_s else DType.FP16.value
    t = make_task(task, global_batch=global_batch, seq_len=seq_len, dtype=dtype, **task_fields)
    if t.kind is TaskKind.INFERENCE:
        raise ConfigError("task=inference is not supported by search yet; allowed: pretrain, finetune")
    if t.dtype not in sysm.gpu.flops_per_s:
        allowed = ", ".join(d.value for d in sysm.gpu.flops_per_s
                            if d in (DType.BF16, DType.FP16, DType.FP8, DType.FP32))
        raise ConfigError(f"dtype={t.dtype.value} has no peak on gpu {sysm.gpu.name}; allowed: {allowed}")
    seq = t.seq_len or spec.default_seq_len
    if seq > spec.max_seq_len:
        raise ConfigError(f"seq_len={seq} exceeds max_seq_len={spec.max_seq_len} of {spec.name}")
    if t.global_batch is None:
        raise ConfigError("global_batch is required by search (sequences per optimizer step), "
                          "e.g. --global-batch 1024; allowed: a positive integer")
    kwargs = {"model": spec, "system": sysm, "num_gpus": sysm.cluster_gpus, "task": t, "calibration": calibration}
    compute = compute_model(sysm.gpu, calibration)
    return Context(spec=spec, system=sysm, task=t, seq_len=seq, global_batch=t.global_batch,
                   workload=build_workload(spec, t, flash=True), compute=compute,
                   network=network_model(sysm, compute.profile.network if calibration else ()),
                   reserved_bytes=parse_quantity(_runtime()["reserved_memory_bytes"], "bytes"),
                   calibration=calibration, simulate_kwargs=kwargs)
