"""Results of one simulated training iteration (or one DLRM inference pass): throughput, MFU/HFU, the
breakdown and memory, in SI units, read from the program's timeline and the builder's labels.

The breakdown is that of the critical stage (the one whose iteration ends last); memory that of the
worst stage. MFU counts model FLOPs (no recompute) over the dense peak of the training dtype, HFU the
FLOPs run including recompute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from madmax.config.training_stack import default_training_stack
from madmax.config.units import GIB
from madmax.parallel.memory import RESERVE_PARTS, StageMemory
from madmax.parallel.plan import Plan
from madmax.program.training import TrainingProgram, overlap_assumptions
from madmax.results.breakdown import COMPUTE_STREAM, stream_breakdown
from madmax.sim import Schedule


@dataclass(frozen=True)
class Result:
    """Prediction for one model x system x task x strategy; `to_dict()` is the `--json` output."""

    model: str
    system: str
    num_gpus: int
    task: str
    strategy: str
    dtype: str
    global_batch: int
    seq_len: int
    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    # Megatron-LM's "model TFLOP/s/GPU": 3x the forward FLOPs per token (top_k experts, causal attention,
    # LM head and MTP modules), whatever is recomputed or frozen, times tokens/s/GPU.
    model_tflops_per_gpu: float
    peak_memory_bytes: float
    fits: bool
    breakdown: dict[str, Any]
    memory: dict[str, float]
    assumptions: list[str] = field(default_factory=list)
    fits_reason: str | None = None
    error_band: dict[str, Any] | None = None
    # What recompute was chosen and why, when the strategy left it unset (also in `assumptions`).
    recompute_choice: str | None = None
    # The training stack whose profile the prediction used (catalog/training_stacks.yaml).
    stack: str = ""
    # Price and energy per token (`madmax.results.cost.cost_of`): only where a price is known or --price or
    # --power is given, so the other results keep their keys.
    cost: dict[str, Any] | None = None
    # What one element of the batch is (`ModelSpec.sample_name`): sequence, image or sample; labels only.
    sample_name: str = field(default="sequence", repr=False, compare=False)
    # The job's state on storage (`madmax.results.goodput`): what a checkpoint writes (weights and optimizer state
    # of the trainable parameters) and what a restart reads (every weight, and that state).
    checkpoint_bytes: float = field(default=0.0, repr=False, compare=False)
    restore_bytes: float = field(default=0.0, repr=False, compare=False)
    # With a token budget (`simulate(tokens=...)`): the goodput model's time, GPU-hours, cost and energy to train it.
    time_to_train: dict[str, Any] | None = None
    # The command lines that launch it (`madmax.results.launch.Launch.to_dict`): Megatron-LM and torchtitan for a
    # decoder's training, the serving stack's engine for a replica; empty where no launcher applies.
    launch: list[dict[str, Any]] = field(default_factory=list)
    launch_note: str | None = None  # why `launch` is empty
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    memory_timeline: dict[int, list[tuple[float, float]]] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "model": self.model, "system": self.system, "num_gpus": self.num_gpus, "task": self.task,
            "strategy": self.strategy, "dtype": self.dtype, "global_batch": self.global_batch,
            "seq_len": self.seq_len, "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu, "peak_memory_bytes": self.peak_memory_bytes,
            "fits": self.fits, "fits_reason": self.fits_reason,
            "breakdown": self.breakdown,
            "memory": self.memory, "assumptions": list(self.assumptions), "error_band": self.error_band,
            "recompute_choice": self.recompute_choice, "stack": self.stack, "launch": self.launch,
            "launch_note": self.launch_note,
        }
        if self.cost is not None:
            out["cost"] = self.cost
        if self.time_to_train is not None:
            out["time_to_train"] = self.time_to_train
        return out


@dataclass(frozen=True)
class TrainingRun:
    """What the result reports about its request: names, sizes, the resolved strategy and its text."""

    model: str
    system: str
    num_gpus: int
    task: str
    dtype: Any  # madmax.config.base.DType
    strategy: Any  # madmax.config.strategy.Strategy
    strategy_text: str
    global_batch: int
    seq_len: int
    hbm_bytes: float  # what a rank must fit in: the GPU's usable memory (`GPU.usable_memory_bytes`)
    peak_flops_per_s: float
    has_tables: bool
    assumptions: tuple[str, ...]
    forward_flops_per_token: float = 0.0  # the model's, Megatron-LM's convention (routed experts: top_k)
    recompute_choice: str | None = None  # why the recompute was chosen, when the strategy left it unset
    sample_name: str = "sequence"  # what one element of the batch is (`ModelSpec.sample_name`)


def training_result(run: TrainingRun, plan: Plan, built: TrainingProgram, schedule: Schedule,
                    memories: list[StageMemory], error_band: dict[str, Any] | None,
                    keep_schedule: bool) -> Result:
    """Metrics of the critical stage, memory of the worst one, and the error band of the regime."""
    strat, n = run.strategy, run.num_gpus
    worst = max(range(len(memories)), key=lambda i: memories[i].total_bytes)
    peak = memories[worst].total_bytes
    fits = peak <= run.hbm_bytes
    fits_reason = None if fits else over_capacity(memories[worst], run.hbm_bytes, worst,
                                                  run.has_tables and not strat.emb_offload)
    ends = stage_ends(built, schedule)
    critical = max(range(len(ends)), key=lambda i: ends[i])
    iteration = max(ends)
    stage_view = stream_breakdown(schedule, f"stage{critical}")
    ranks_per_stage = strat.tp * strat.cp * strat.dp
    peak_flops = run.peak_flops_per_s * n
    mfu = sum(built.model_flops) * ranks_per_stage / iteration / peak_flops
    hfu = sum(built.hardware_flops) * ranks_per_stage / iteration / peak_flops
    tokens = run.global_batch * run.seq_len
    breakdown = {
        "stage": critical,
        "compute_s": compute_summary(built.compute_by_kind[critical], built.optimizer_s[critical]),
        "communication_s": stage_view["communication"],
        "exposed_communication_s": stage_view["exposed_communication_s"],
        # the host's work of the step (synchronisation, data loading, logging): the GPU waits for `exposed`
        "host_s": stage_view["host"],
        "pipeline_bubble_s": stage_view["pipeline_bubble_s"],
        # with overlap_cost or tp_overlap: the compute lost to the collectives beside it
        **({"overlap_slowdown_s": overlap_slowdown_s(schedule, f"stage{critical}")}
           if strat.overlap_cost or strat.tp_overlap else {}),
        **{unit.name: dict(unit.info) for unit in plan.units.values() if unit.info},
    }
    return Result(
        model=run.model, system=run.system, num_gpus=n, task=run.task, strategy=run.strategy_text,
        dtype=run.dtype.value, global_batch=run.global_batch, seq_len=run.seq_len,
        iteration_time_s=iteration, samples_per_s=run.global_batch / iteration, tokens_per_s=tokens / iteration,
        tokens_per_s_per_gpu=tokens / iteration / n, mfu=mfu, hfu=hfu,
        model_tflops_per_gpu=_model_tflops_per_gpu(run, plan, built, ranks_per_stage, tokens, iteration),
        peak_memory_bytes=peak, fits=fits,
        fits_reason=fits_reason, breakdown=breakdown,
        memory={"stage": worst, **memories[worst].to_dict(), "capacity": run.hbm_bytes},
        assumptions=(list(run.assumptions) + overlap_assumptions(strat.overlap_cost, strat.tp_overlap)
                     + bubble_note(strat, run.global_batch, plan.microbatches, breakdown["pipeline_bubble_s"],
                                   iteration)),
        error_band=error_band, recompute_choice=run.recompute_choice,
        stack=plan.stack.name if plan.stack else default_training_stack(),
        sample_name=run.sample_name, schedule=schedule if keep_schedule else None,
        memory_timeline=memory_timeline(built, schedule, memories) if keep_schedule else None)


# The share of the iteration from which a result says where its pipeline bubble comes from: a larger cluster can be
# slower per GPU because its global batch leaves each replica fewer micro-batches (issue 28: GB200, 1,152 vs 1,024).
BUBBLE_NOTE_SHARE = 0.1
BUBBLE_NOTE_PREFIX = "pipeline bubble "  # how the line begins (the text report prints it as a note, not an assumption)


def bubble_note(strat: Any, global_batch: int, microbatches: int, bubble_s: float, iteration_s: float) -> list[str]:
    """A line naming the batch arithmetic behind a pipeline bubble of at least `BUBBLE_NOTE_SHARE` of the iteration.

    With m micro-batches per replica (global batch / (dp mbs)) through p stages of v chunks each, 1F1B idles each
    stage (p - 1) of the m v + p - 1 chunk steps (Narayanan et al., SC21, Sec. 2.2): fewer micro-batches per
    replica, as a larger dp leaves them, mean a larger bubble."""
    if strat.pp == 1 or iteration_s <= 0 or bubble_s < BUBBLE_NOTE_SHARE * iteration_s:
        return []
    p, v, m = strat.pp, strat.vp, microbatches
    chunks = f" of vp={v} chunks each" if v > 1 else ""
    return [f"{BUBBLE_NOTE_PREFIX}{bubble_s / iteration_s:.0%} of the iteration: global_batch {global_batch:,} / "
            f"(dp={strat.dp} x mbs={strat.mbs}) leaves each replica {m:,} micro-batch{'es' if m > 1 else ''} through "
            f"pp={p} stages{chunks}, and 1F1B idles a stage (p-1)/(m v+p-1) = {(p - 1) / (m * v + p - 1):.0%} of its "
            "steps; more micro-batches per replica (a larger global batch, a smaller dp or mbs) shrink it"]


def overlap_slowdown_s(schedule: Schedule, rank: str) -> float:
    """Seconds the compute of `rank` lost to the collectives running beside it (contention: strategy keys
    overlap_cost and tp_overlap), summed over its compute segments; included in compute_s of the timeline,
    not in the kernels' compute_s."""
    if not schedule.slowdown_s:
        return 0.0
    compute = schedule.stream_names.index((rank, COMPUTE_STREAM))
    return sum(sec for seg, sec in schedule.slowdown_s.items() if schedule.stream[seg] == compute)


def memory_timeline(built: TrainingProgram, schedule: Schedule,
                    memories: list[StageMemory]) -> dict[int, list[tuple[float, float]]]:
    """Per stage, (time, bytes in use) after each change: static state plus the activations kept."""
    timeline = {}
    for stage, events in enumerate(built.activation_events):
        static = memories[stage].total_bytes - memories[stage].activations_bytes
        used, points = static, [(0.0, static)]
        for segment, delta in sorted(events, key=lambda e: schedule.end_s[e[0]]):
            used += delta
            points.append((schedule.end_s[segment], used))
        timeline[stage] = points
    return timeline


def over_capacity(memory: StageMemory, capacity: float, stage: int, can_offload: bool) -> str:
    """Why a plan does not fit: the largest parts of the worst rank against the GPU's usable memory."""
    parts = sorted(((v, k) for k, v in memory.to_dict().items() if k != "total" and k not in RESERVE_PARTS),
                   reverse=True)
    largest = ", ".join(f"{k} {v / GIB:.1f} GiB" for v, k in parts[:3] if v)
    hint = "; emb_offload=1 keeps the excess embedding rows in host memory" if can_offload else ""
    return (f"stage {stage} needs {memory.total_bytes / GIB:.1f} GiB per GPU ({largest}) but the GPU has "
            f"{capacity / GIB:.1f} GiB usable{hint}")


def _model_tflops_per_gpu(run: TrainingRun, plan: Any, built: Any, ranks_per_stage: int, tokens: int,
                          iteration: float) -> float:
    """Model TFLOP/s per GPU: Megatron-LM's 3 x forward FLOPs per token when every weight trains; with
    frozen weights (LoRA, frozen layers) the model FLOPs the program computes, as MFU counts them, since the
    frozen weights' gradients are never computed (3 x forward would credit LoRA with 91% of an A100's peak)."""
    frozen = any(u.trainable_params < u.params for u in plan.units.values())
    if frozen:
        return sum(built.model_flops) * ranks_per_stage / iteration / run.num_gpus / 1e12
    return 3 * run.forward_flops_per_token * tokens / iteration / run.num_gpus / 1e12


def stage_ends(built: TrainingProgram, schedule: Schedule) -> list[float]:
    """When each stage's last segment ends."""
    ends = [0.0] * len(built.model_flops)
    for segment, stream in enumerate(schedule.stream):
        stage = built.stage_of_rank[schedule.stream_names[stream][0]]
        ends[stage] = max(ends[stage], schedule.end_s[segment])
    return ends


def compute_summary(by_kind: dict[str, float], optimizer_s: float) -> dict[str, float]:
    """Compute seconds by kernel category; recompute of every category folded into one entry."""
    summary: dict[str, float] = {}
    for kind, seconds in by_kind.items():
        key = "recompute" if kind.startswith("recompute.") else kind
        summary[key] = summary.get(key, 0.0) + seconds
    summary["optimizer"] = optimizer_s
    summary["total"] = sum(summary.values())
    return summary
