"""A request, resolved: what `madmax.simulate` and `madmax.search` both need before any plan.

Loads the model and system (catalog names or files), builds the task with its defaults, checks the
dtype against the GPU and the sequence against the model, and builds the workload. Every failure is a
`MadmaxError` with one sentence; `madmax.api` and `madmax.search` call this one resolver, so the same
input is accepted or refused the same way by both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from madmax.config.base import DType
from madmax.config.checks import usable_path
from madmax.config.hardware import System
from madmax.config.loaders import load_model, load_system, validate
from madmax.config.model import ModelSpec
from madmax.config.task import COMPUTE_DTYPES, INFERENCE_ONLY_DTYPES, FinetuneMethod, Task, TaskKind
from madmax.errors import ConfigError, MadmaxError


@dataclass(frozen=True)
class Request:
    """The validated model, system and task, the workload of the task, and what was assumed."""

    spec: ModelSpec
    system: System
    task: Task
    workload: Any  # madmax.workload.Workload
    seq_len: int
    calibration: str | Path | None
    assumptions: tuple[str, ...]
    draft: Any = None  # speculative=draft: the draft model (ModelSpec) and its workload
    draft_workload: Any = None

    @property
    def num_gpus(self) -> int:
        return self.system.cluster_gpus


def make_task(task: str | Task | dict, **fields: Any) -> Task:
    """A Task from its kind and the fields given (None means not given)."""
    if isinstance(task, Task):
        return task
    data = dict(task) if isinstance(task, dict) else {"kind": task}
    data.update({k: v for k, v in fields.items() if v is not None})
    if isinstance(data.get("kind"), str) and data["kind"] not in {k.value for k in TaskKind}:
        raise ConfigError(f"task={data['kind']!r} is unknown; allowed: {', '.join(k.value for k in TaskKind)}")
    return validate(Task, data, "task")


def gemm_format(dtype: DType, gpu: Any) -> DType:
    """The format a GEMM with `dtype` weights runs in on `gpu`: int4 is weight-only (AWQ/GPTQ kernels read int4
    weights into 16-bit math); MXFP4 weights meet MXFP8 activations where the GPU has MXFP8 tensor cores (W4A8)
    and 16-bit ones elsewhere, as TensorRT-LLM runs gpt-oss (catalog serving.yaml weight_formats: mxfp4); every
    other dtype runs as itself (int8: W8A8 on int8 tensor cores)."""
    if dtype is DType.INT4:
        return gpu.half_dtype
    if dtype is DType.MXFP4:
        return DType.MXFP8 if DType.MXFP8 in gpu.flops_per_s else gpu.half_dtype
    return dtype


def resolve_request(model: Any, system: Any, num_gpus: int | None = None, task: Any = "pretrain", *,
                    calibration: str | Path | None = None, flash: bool = True, **fields: Any) -> Request:
    """Load and check model, system and task; `fields` are Task fields (None: not given).

    dtype, when not given for a task named by its kind, is bf16, or fp16 on GPUs without bf16 (listed
    in the assumptions). flash: whether the workload's attention is fused (from the strategy).
    """
    from madmax.workload import build_workload

    if calibration is not None and not isinstance(calibration, BaseModel):  # a profile file, or a ComputeProfile
        calibration = usable_path(calibration, "calibration")
    spec = load_model(model)
    sysm = load_system(system, num_gpus)
    assumptions = []
    if fields.get("dtype") is None and not isinstance(task, Task | dict):
        fields["dtype"] = sysm.gpu.half_dtype.value
        if fields["dtype"] != DType.BF16.value:
            assumptions.append(f"dtype not given: fp16, since gpu {sysm.gpu.name} has no bf16 peak")
    t = make_task(task, **fields)
    computed = gemm_format(t.dtype, sysm.gpu)
    if computed not in sysm.gpu.flops_per_s:
        kinds = COMPUTE_DTYPES + (INFERENCE_ONLY_DTYPES if t.kind is TaskKind.INFERENCE else ())
        allowed = ", ".join(d for d in kinds if gemm_format(DType(d), sysm.gpu) in sysm.gpu.flops_per_s)
        raise ConfigError(f"dtype={t.dtype.value} has no peak on gpu {sysm.gpu.name}; allowed: {allowed}")
    if not spec.has_experts and ("expert_load" in t.model_fields_set or t.capacity_factor is not None):
        raise ConfigError(f"task.expert_load and task.capacity_factor describe the routing of a mixture-of-experts "
                          f"model; {spec.name} has no experts; allowed: omit them")
    seq = t.seq_len or spec.default_seq_len
    if seq > spec.max_seq_len:
        raise ConfigError(f"seq_len={seq} exceeds max_seq_len={spec.max_seq_len} of {spec.name}")
    if t.seq_len is None and t.kind is not TaskKind.INFERENCE and getattr(spec, "train_seq_len_source", ""):
        assumptions.append(f"seq_len not given: {seq:,} tokens, {spec.train_seq_len_source}")
    if t.kind is TaskKind.FINETUNE:
        assumptions.append(_finetune_note(t))
    checkpoint = getattr(spec, "checkpoint_format", None)
    if checkpoint:
        assumptions.append(f"the checkpoint's weights are {checkpoint} (its config.json quantization_config); "
                           f"simulated in {t.dtype.value} (--dtype)")
    workload = build_workload(spec, t, flash=flash)
    draft = _draft_model(spec, t)
    return Request(spec=spec, system=sysm, task=t, workload=workload, seq_len=seq, calibration=calibration,
                   assumptions=tuple(assumptions), draft=draft,
                   draft_workload=None if draft is None else build_workload(draft, t, flash=flash))


def _draft_model(spec: Any, t: Task) -> Any:
    """The draft model of speculative=draft, checked: a model that generates tokens, with the served model's
    vocabulary (the engine verifies its token ids against the target's) and fewer parameters than it."""
    if t.draft_model is None:
        return None
    from madmax.workload import param_counts

    try:
        draft = load_model(t.draft_model)
    except MadmaxError as exc:
        raise ConfigError(f"task.draft_model: {exc}") from None
    name = draft.name
    if draft.family != spec.family or not hasattr(draft, "vocab_size"):
        raise ConfigError(f"task.draft_model={name} is a {draft.family} model; allowed: a {spec.family} model that "
                          "generates tokens")
    if draft.vocab_size != spec.vocab_size:
        raise ConfigError(f"task.draft_model={name} has a vocabulary of {draft.vocab_size:,} tokens, {spec.name} of "
                          f"{spec.vocab_size:,}; allowed: a draft with the served model's vocabulary (its tokens are "
                          "verified by id)")
    size, served = sum(param_counts(draft).values()), sum(param_counts(spec).values())
    if size >= served:
        raise ConfigError(f"task.draft_model={name} has {size / 1e9:.2f}B parameters, not fewer than {spec.name}'s "
                          f"{served / 1e9:.2f}B; allowed: a smaller draft model")
    return draft


@dataclass(frozen=True)
class TrainingRequest:
    """A request whose strategy is resolved (dp derived, every rule checked) with its global batch."""

    request: Request
    strategy: Any  # madmax.config.strategy.Strategy
    global_batch: int
    assumptions: tuple[str, ...]
    stack: Any = None  # madmax.config.training_stack.TrainingStack; None: the default (Megatron-Core)


def resolve_training(request: Request, requested: Any) -> TrainingRequest:
    """Check the strategy against the model and cluster (`resolve_strategy`); a recommendation model's
    inference pass serves `task.batch` samples as one global batch."""
    from madmax.config.strategy import Axis, check_training_keys, default_expert_parallel, resolve_strategy

    spec, t = request.spec, request.task
    if gemm_format(t.dtype, request.system.gpu) is not t.dtype:  # weights stored narrower than the math
        raise ConfigError(f"task.dtype={t.dtype.value} is a weight format of LLM serving (4-bit weights read into "
                          f"wider GEMMs); allowed for an inference pass of {spec.name}: bf16, fp16, fp8 or int8 "
                          "where the GPU has them")
    check_training_keys(requested, spec.name, spec.has_experts, bool(request.workload.tables))
    notes = []
    if spec.has_experts and "ep" not in requested.model_fields_set:
        ep = default_expert_parallel(requested, request.num_gpus, spec.moe.num_experts)
        requested = requested.model_copy(update={"ep": ep})
        if ep > 1:
            notes.append(_expert_parallel_note(ep, spec.moe.num_experts, request.num_gpus // requested.pp))
    if t.kind is TaskKind.INFERENCE:
        if t.batch is None:
            raise ConfigError("task.batch is required for inference: the requests (samples) served at once")
        t = t.model_copy(update={"global_batch": t.batch})
    strat, batch_size = resolve_strategy(
        requested, num_gpus=request.num_gpus, model_name=spec.name,
        constraints=spec.parallel_constraints(),
        num_pipeline_units=spec.num_pipeline_units, has_experts=spec.has_experts, global_batch=t.global_batch,
        seq_len=request.seq_len, limits={Axis(a): lim for a, lim in spec.degree_limits().items()},
        accumulates_gradients=request.workload.accumulates_gradients)
    if strat.pp_embedding and strat.pp_loss and "pp_embedding" not in requested.model_fields_set:
        notes.append(f"pp*vp={strat.pp}*{strat.vp} = the {spec.num_pipeline_units} layers + 2: the embedding and the "
                     "loss each take a layer's slot of the pipeline split (pp_embedding=1,pp_loss=1, Megatron's "
                     "account_for_embedding/loss_in_pipeline_split, the only split Megatron runs with these chunks)")
    if t.global_batch is None:
        notes.append(f"global_batch not given: {batch_size} = dp*mbs*pp sequences")
    return TrainingRequest(request=request, strategy=strat, global_batch=batch_size,
                           assumptions=request.assumptions + tuple(notes))


def _expert_parallel_note(ep: int, num_experts: int, stage_ranks: int) -> str:
    """Why the experts were spread over `ep` ranks when the strategy did not say (`default_expert_parallel`)."""
    held = num_experts // ep
    return (f"ep not given: {ep}, the experts spread over a pipeline stage's {stage_ranks} tp*cp*dp ranks "
            f"({held} of the {num_experts} routed experts per GPU), as Megatron-Bridge's MoE recipes spread them "
            "(Qwen3-30B-A3B ep=16 on 16 H100, Qwen3-235B-A22B ep=32 on a stage of 32); Megatron-Core's own "
            "default, ep=1, holds every expert on every GPU")


def _finetune_note(t: Task) -> str:
    """What a fine-tuning run trains, said with every result (a LoRA run otherwise looks like a full one)."""
    frozen = f", the embedding and the first {t.frozen_layers} layers frozen" if t.frozen_layers else ""
    if t.finetune is FinetuneMethod.LORA:
        return (f"fine-tuning: LoRA adapters of rank {t.lora_rank} on {', '.join(t.lora_targets)}, every base "
                f"weight frozen (no weight gradient, no optimizer state){frozen}")
    return f"fine-tuning: full{frozen}" if frozen else "fine-tuning: every weight trained"
