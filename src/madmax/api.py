"""The public Python API; the CLI is a thin layer over it. `simulate(...).to_dict()` equals `--json`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from madmax.config.base import DType
from madmax.config.hardware import System
from madmax.config.loaders import load_model, load_system, validate
from madmax.config.model import ModelSpec
from madmax.config.strategy import Axis, Strategy, parse_strategy, resolve_strategy
from madmax.config.task import COMPUTE_DTYPES, Task, TaskKind
from madmax.config.units import parse_quantity
from madmax.errors import ConfigError
from madmax.results import Result, stream_breakdown

__all__ = ["Result", "inspect", "simulate"]


@cache
def _runtime() -> dict[str, Any]:
    return yaml.safe_load(resources.files("madmax.catalog").joinpath("runtime.yaml").read_text())


def make_task(task: str | Task | dict, **fields: Any) -> Task:
    """A Task from its kind and the fields given (None means not given)."""
    if isinstance(task, Task):
        return task
    data = dict(task) if isinstance(task, dict) else {"kind": task}
    data.update({k: v for k, v in fields.items() if v is not None})
    if isinstance(data.get("kind"), str) and data["kind"] not in {k.value for k in TaskKind}:
        raise ConfigError(f"task={data['kind']!r} is unknown; allowed: {', '.join(k.value for k in TaskKind)}")
    return validate(Task, data, "task")




def simulate(model: str | Path | dict | ModelSpec, system: str | Path | dict | System, num_gpus: int | None = None,
             task: str | Task | dict = "pretrain", global_batch: int | None = None, seq_len: int | None = None,
             dtype: str | None = None, strategy: str | dict | Strategy | None = None, *,
             batch: int | None = None, prompt_len: int | None = None, output_len: int | None = None,
             finetune: str | None = None, lora_rank: int | None = None, frozen_layers: int | None = None,
             lora_targets: list[str] | None = None, calibration: str | Path | None = None,
             keep_schedule: bool = False) -> Result:
    """Predict one training iteration (or one inference batch) of `model` on `system` with `strategy`.

    Mirrors `madmax simulate`: names are catalog names or files; `strategy` uses the grammar
    `tp=8,pp=4,dp=32,cp=1,ep=1,vp=1,mbs=1,zero=1,recompute=selective,sp=1`; keys not given take
    defaults and dp is derived from the GPU count. `calibration`: a compute profile file (see
    `madmax calibrate`); default the shipped H200 profile. Raises `MadmaxError` for bad input; a
    strategy that does not fit in memory is a result with `fits == False`.
    """
    from madmax.engine import simulate_plan
    from madmax.hardware.collectives import network_model
    from madmax.hardware.compute import compute_model
    from madmax.parallel.memory import stage_memory

    run = _resolve(model, system, num_gpus, task, strategy, calibration, dict(
        global_batch=global_batch, seq_len=seq_len, dtype=dtype, batch=batch, prompt_len=prompt_len,
        output_len=output_len, finetune=finetune, lora_rank=lora_rank, frozen_layers=frozen_layers,
        lora_targets=lora_targets))
    reserved = parse_quantity(_runtime()["reserved_memory_bytes"], "bytes")
    plan, notes = _plan(run, reserved)
    run = dataclasses.replace(run, assumptions=run.assumptions + notes)
    compute = compute_model(run.system.gpu, calibration)
    network = network_model(run.system, compute.profile.network if calibration else ())
    sim = simulate_plan(plan, compute, network)
    memories = [stage_memory(plan, stage, reserved) for stage in range(plan.num_stages)]
    return _result(run, plan, sim, memories, keep_schedule)


@dataclass(frozen=True)
class _Run:
    """A simulation request, validated: the model, system, task, workload and resolved strategy."""

    spec: ModelSpec
    system: System
    task: Task
    workload: Any
    strategy: Strategy
    global_batch: int
    seq_len: int
    calibration: str | Path | None
    assumptions: tuple[str, ...]


def _resolve(model, system, num_gpus, task, strategy, calibration, fields: dict[str, Any]) -> _Run:
    """Load the inputs and check every rule; MadmaxError with one sentence otherwise."""
    from madmax.workload import build_workload

    spec = load_model(model)
    sysm = load_system(system, num_gpus)
    assumptions = []
    if fields["dtype"] is None and not isinstance(task, Task | dict):
        fields["dtype"] = DType.BF16.value if DType.BF16 in sysm.gpu.flops_per_s else DType.FP16.value
        if fields["dtype"] != DType.BF16.value:
            assumptions.append(f"dtype not given: fp16, since gpu {sysm.gpu.name} has no bf16 peak")
    t = make_task(task, **fields)
    if t.dtype not in sysm.gpu.flops_per_s:
        allowed = ", ".join(d.value for d in sysm.gpu.flops_per_s if d.value in COMPUTE_DTYPES)
        raise ConfigError(f"dtype={t.dtype.value} has no peak on gpu {sysm.gpu.name}; allowed: {allowed}")
    seq = t.seq_len or spec.default_seq_len
    if seq > spec.max_seq_len:
        raise ConfigError(f"seq_len={seq} exceeds max_seq_len={spec.max_seq_len} of {spec.name}")
    requested = parse_strategy(strategy)
    workload = build_workload(spec, t, flash=requested.flash)
    if t.kind is TaskKind.INFERENCE:
        if workload.generates_tokens:
            raise ConfigError(f"task=inference of {spec.name} (prefill and token-by-token decode) is not "
                              "supported yet; allowed: pretrain, finetune (inference: recommendation models)")
        if t.batch is None:
            raise ConfigError("task.batch is required for inference: the requests (samples) served at once")
        t = t.model_copy(update={"global_batch": t.batch})
    strat, batch_size = resolve_strategy(
        requested, num_gpus=sysm.cluster_gpus, model_name=spec.name,
        constraints={Axis(a): sizes for a, sizes in spec.parallel_constraints().items()},
        num_pipeline_units=spec.num_pipeline_units, has_experts=spec.has_experts, global_batch=t.global_batch,
        seq_len=seq, limits={Axis(a): lim for a, lim in spec.degree_limits().items()},
        accumulates_gradients=workload.accumulates_gradients)
    if t.global_batch is None:
        assumptions.append(f"global_batch not given: {batch_size} = dp*mbs*pp sequences")
    return _Run(spec, sysm, t, workload, strat, batch_size, seq, calibration, tuple(assumptions))


def _plan(run: _Run, reserved: float) -> tuple[Any, tuple[str, ...]]:
    """The plan and what it assumed; with emb_offload, embedding tables get the HBM the rest of the rank leaves and rows
    beyond it live in host memory."""
    from madmax.parallel.memory import stage_memory
    from madmax.parallel.plan import build_plan

    def build(budget: float | None = None):
        return build_plan(run.workload, run.strategy, domain_size=run.system.scale_up_domain, seq_len=run.seq_len,
                          global_batch=run.global_batch, dtype=run.task.dtype, table_budget_bytes=budget)

    plan = build()
    if run.workload.tables and run.strategy.emb_offload:
        memories = [stage_memory(plan, stage, reserved) for stage in range(plan.num_stages)]
        rest = max(m.total_bytes - m.tables_bytes for m in memories)
        if any(m.tables_bytes + rest > run.system.gpu.hbm_bytes for m in memories):
            plan = build(max(0.0, run.system.gpu.hbm_bytes - rest))
            return plan, ("embedding rows beyond HBM are offloaded to host memory (no software cache)",)
    return plan, ()


def _result(run: _Run, plan, sim, memories, keep_schedule: bool) -> Result:
    """Metrics of the critical stage, memory of the worst one, and the error band of the regime."""
    from madmax.validate.trust import error_band

    sysm, strat, n = run.system, run.strategy, run.system.cluster_gpus
    worst = max(range(len(memories)), key=lambda i: memories[i].total_bytes)
    peak = memories[worst].total_bytes
    fits = peak <= sysm.gpu.hbm_bytes
    fits_reason = None if fits else _over_capacity(memories[worst], sysm.gpu.hbm_bytes, worst,
                                                   bool(run.workload.tables) and not strat.emb_offload)
    ends = _stage_ends(sim)
    critical = max(range(len(ends)), key=lambda i: ends[i])
    iteration = max(ends)
    stage_view = stream_breakdown(sim.schedule, f"stage{critical}")
    ranks_per_stage = strat.tp * strat.cp * strat.dp
    peak_flops = sysm.gpu.flops_per_s[run.task.dtype] * n
    mfu = sum(sim.model_flops) * ranks_per_stage / iteration / peak_flops
    hfu = sum(sim.hardware_flops) * ranks_per_stage / iteration / peak_flops
    tokens = run.global_batch * run.seq_len
    breakdown = {
        "stage": critical,
        "compute_s": _compute_summary(sim.compute_by_kind[critical], sim.optimizer_s[critical]),
        "communication_s": stage_view["communication"],
        "exposed_communication_s": stage_view["exposed_communication_s"],
        "pipeline_bubble_s": stage_view["pipeline_bubble_s"],
        **{unit.name: dict(unit.info) for unit in plan.units.values() if unit.info},
    }
    # The bands are residuals of the shipped profile (a user profile has its own accuracy), and only
    # a family with validation rows has one.
    band = None if run.calibration else error_band(run.spec.name, n, strat, sysm.gpu.name)
    if band is not None and "family" not in band["matched"]:
        band = None
    return Result(
        model=run.spec.name, system=sysm.name, num_gpus=n, task=run.task.kind.value,
        strategy=strat.describe() + (_emb_keys(strat) if run.workload.tables else ""),
        dtype=run.task.dtype.value, global_batch=run.global_batch, seq_len=run.seq_len,
        iteration_time_s=iteration, samples_per_s=run.global_batch / iteration, tokens_per_s=tokens / iteration,
        tokens_per_s_per_gpu=tokens / iteration / n, mfu=mfu, hfu=hfu, peak_memory_bytes=peak, fits=fits,
        fits_reason=fits_reason, breakdown=breakdown,
        memory={"stage": worst, **memories[worst].to_dict(), "capacity": sysm.gpu.hbm_bytes},
        assumptions=list(run.assumptions), error_band=band, schedule=sim.schedule if keep_schedule else None,
        memory_timeline=_memory_timeline(sim, memories) if keep_schedule else None)


def _memory_timeline(sim, memories) -> dict[int, list[tuple[float, float]]]:
    """Per stage, (time, bytes in use) after each change: static state plus the activations kept."""
    timeline = {}
    for stage, events in enumerate(sim.activation_events):
        static = memories[stage].total_bytes - memories[stage].activations_bytes
        used, points = static, [(0.0, static)]
        for task, delta in sorted(events, key=lambda e: sim.schedule.end_s[e[0]]):
            used += delta
            points.append((sim.schedule.end_s[task], used))
        timeline[stage] = points
    return timeline


def _over_capacity(memory, capacity: float, stage: int, can_offload: bool) -> str:
    """Why a plan does not fit: the largest parts of the worst rank against the GPU's HBM."""
    parts = sorted(((v, k) for k, v in memory.to_dict().items() if k != "total"), reverse=True)
    largest = ", ".join(f"{k} {v / 2**30:.1f} GiB" for v, k in parts[:3] if v)
    hint = "; emb_offload=1 keeps the excess embedding rows in host memory" if can_offload else ""
    return (f"stage {stage} needs {memory.total_bytes / 2**30:.1f} GiB per GPU ({largest}) but the GPU has "
            f"{capacity / 2**30:.1f} GiB{hint}")


def _emb_keys(strat: Strategy) -> str:
    """The embedding-sharding keys, shown for models with tables: `,emb=tw` (`,emb_group=G` in 2-D)."""
    return (f",emb={strat.emb}" + (f",emb_group={strat.emb_group}" if strat.emb_group else "")
            + (",emb_offload=1" if strat.emb_offload else ""))


def _stage_ends(sim) -> list[float]:
    ends = [0.0] * len(sim.model_flops)
    for task, stream in enumerate(sim.schedule.stream):
        stage = sim.stage_of_process[sim.schedule.stream_names[stream][0]]
        ends[stage] = max(ends[stage], sim.schedule.end_s[task])
    return ends


def _compute_summary(by_kind: dict[str, float], optimizer_s: float) -> dict[str, float]:
    summary: dict[str, float] = {}
    for kind, seconds in by_kind.items():
        key = "recompute" if kind.startswith("recompute.") else kind
        summary[key] = summary.get(key, 0.0) + seconds
    summary["optimizer"] = optimizer_s
    summary["total"] = sum(summary.values())
    return summary


def inspect(model: str | Path | dict | ModelSpec, seq_len: int | None = None) -> dict[str, Any]:
    """The normalized model with parameter counts, FLOPs per token and bytes per parameter."""
    from madmax.workload import build_workload, param_counts

    spec = load_model(model)
    seq = spec.default_seq_len if seq_len is None else seq_len
    if seq <= 0:
        raise ConfigError(f"seq_len={seq} must be a positive number of tokens")
    counts = param_counts(spec)
    total = sum(counts.values())
    workload = build_workload(spec, Task(kind=TaskKind.PRETRAIN))
    fwd = workload.forward_flops_per_token(seq)
    return {
        "model": spec.model_dump(mode="json"),
        "total_params": total,
        "active_params": total,
        "params_by_component": counts,
        "seq_len": seq,
        "forward_flops_per_token": fwd,
        "training_flops_per_token": 3 * fwd,
        "bytes_per_param": {d.value: d.num_bytes for d in (DType.FP32, DType.BF16, DType.FP8)},
        "weights_bytes": {d.value: total * d.num_bytes for d in (DType.FP32, DType.BF16, DType.FP8)},
    }
