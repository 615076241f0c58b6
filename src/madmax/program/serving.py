"""The serving step as a program: every stage of a replica runs the step's kernels and collectives, layer
by layer, for each micro-batch in flight, and hands its activations to the next stage.

A step (`parallel.serving.Step`) is one forward pass of the engine. Within a stage everything is in
order: a layer's kernels, then its tensor-parallel all-reduce, which the next layer waits for (decode
steps have nothing to overlap it with). With pipeline parallelism the engine keeps pp micro-batches in
flight, one per stage (vLLM's and SGLang's batch queues, TensorRT-LLM's micro-batches), each a `Step` of
its own; a micro-batch's next step starts when its token has gone round all the stages.

Time of a step, as the simulated program gives it and as `step_time` computes it in closed form (the
builder's fast estimate, equal to the simulation; `tests/program/test_serving.py`):

    t_s = sum over the stage's layers of (kernels + collectives)              stage s, one micro-batch
    pp = 1:  T_gpu = t_0
    pp > 1:  T_gpu = max(sum_s t_s + pp * t_p2p, pp * max_s t_s)               the period of a micro-batch
    T = max(T_gpu, H) when the host overlaps the GPU (overlap scheduler), else T_gpu + H

with H the host's time per step (pp * H with pp micro-batches) and t_p2p one activation send between stages.
An engine with attention data parallelism whose ranks run different steps takes, per stage, the busiest rank's
own work plus the experts' work on all ranks' tokens (`group_stage_s`, `group_step_time`); with every rank
running one step that is t_s.
A layer's collectives run on their group's stream ("tp", and "ep" for the expert all-to-all of attention
data parallelism) after its kernels; an overlapped one (`Where.OVERLAPPED`: two-batch overlap) runs beside
them, so the layer takes max(kernels, overlapped) + the others. Kernels take the runtime's floor: a
CUDA-graph replay's for the steps the engine captures, the eager floor otherwise. Small all-reduces inside
an NVLink domain use the engine's custom kernels (one-shot: t = a + (n-1) S / B; two-shot:
2a + 2 (n-1)/n S / B), larger ones NCCL.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from madmax.collective import Collective, Span
from madmax.config.hardware import FabricKind, System
from madmax.config.stack import CudaGraphs, ServingStack
from madmax.hardware.collectives import NetworkModel
from madmax.hardware.compute import ComputeModel, compute_model
from madmax.parallel.kernels import CommOp, Where
from madmax.parallel.serving import ServingPlan, ServingUnit, Step
from madmax.program.costs import kernel_s
from madmax.sim import Program, Schedule

COMPUTE, TP, PP, HOST = "compute", "tp", "pp", "host"


@dataclass(frozen=True)
class Runtime:
    """How an engine runs steps on one system: kernel floors with and without CUDA graphs, its
    all-reduce kernels, the host's time per step."""

    stack: ServingStack
    graph: ComputeModel
    eager: ComputeModel
    network: NetworkModel
    nvlink: bool
    scale_up_bytes_per_s: float
    _cache: dict = field(default_factory=dict, compare=False, repr=False)
    _attention: dict = field(default_factory=dict, compare=False, repr=False)

    def compute_for(self, step: Step) -> ComputeModel:
        """The compute model of a step: graph floors when the engine replays a CUDA graph for it."""
        graphs = self.stack.cuda_graphs
        if graphs is CudaGraphs.NONE or step.decode > self.stack.cuda_graph_max_batch:
            return self.eager
        if graphs is CudaGraphs.DECODE and step.prefill:
            return self.eager
        return self.graph

    def comm_s(self, op: CommOp) -> float:
        """Seconds of one collective; all-reduces by the engine's kernels (`all_reduce_s`)."""
        if op.kind is Collective.ALL_REDUCE:
            return self.all_reduce_s(op.size_bytes, op.span)
        return self.network.collective_s(op.kind, op.size_bytes, op.span)

    def all_reduce_s(self, size_bytes: float, span: Span) -> float:
        """A custom one-shot or two-shot kernel for a small message inside an NVLink domain (the first
        rule of the stack whose size limit holds, `AllReduceRule.seconds`), else NCCL
        (`NetworkModel.collective_s`). An engine switches kernels at a size where the next is no slower; where
        the fits (the kernels' from small-message latencies, NCCL's from nccl-tests) disagree at a switch, a
        message past it takes at least what the largest message of the kernels before it took, so the time
        never falls as a message grows."""
        n = span.size
        if n == 1 or size_bytes == 0:
            return 0.0
        floor = 0.0
        if self.nvlink and span.inter == 1:
            for rule in self.stack.all_reduce:
                limit = next((v for k, v in sorted(rule.max_bytes.items(), reverse=True) if k <= n), 0.0)
                if size_bytes <= limit:
                    return max(floor, rule.seconds(size_bytes, n, self.scale_up_bytes_per_s))
                if limit:
                    floor = max(floor, rule.seconds(limit, n, self.scale_up_bytes_per_s))
        return max(floor, self.network.collective_s(Collective.ALL_REDUCE, size_bytes, span))


def make_runtime(stack: ServingStack, system: System, network: NetworkModel, profile=None) -> Runtime:
    """The runtime of `stack` on `system` (`profile`: a compute profile, default the shipped one)."""
    kernel = stack.attention_kernel(system.gpu.architecture)
    eager = compute_model(system.gpu, profile, stack.eager_floor_s, attention_kernel=kernel)
    graph = compute_model(system.gpu, profile, stack.graph_floor_s, attention_kernel=kernel)
    return Runtime(stack=stack, graph=graph, eager=eager, network=network,
                   nvlink=system.scale_up.kind is FabricKind.NVLINK, scale_up_bytes_per_s=system.scale_up.bytes_per_s)


@dataclass(frozen=True)
class StageTimes:
    """Seconds of one stage for one micro-batch's step: its kernels by category, its collectives by
    kind, the model FLOPs it runs, and the collective seconds hidden behind its kernels (an expert
    all-to-all overlapped with the other half-batch's compute)."""

    compute_s: float
    comm_s: float
    compute_by_kind: dict[str, float]
    comm_by_kind: dict[str, float]
    flops: float
    hidden_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s - self.hidden_s


@dataclass(frozen=True)
class _UnitTimes:
    """One unit's part of a stage that depends on the step's token counts only: its instances, the seconds
    of one instance's kernels (attention cores aside), of its collectives after them and of those beside
    them (overlapped)."""

    unit: ServingUnit
    count: int
    kernels_s: float
    after_s: float
    beside_s: float


def stage_times(plan: ServingPlan, runtime: Runtime, stage: int, step: Step) -> StageTimes:
    """Kernels and collectives of every layer of `stage` for `step`, run in order: the part that depends
    on the step's token counts only (cached), plus its attention cores. A unit instance takes
    max(kernels, overlapped collectives) + the collectives after them."""
    compute = runtime.compute_for(step)
    dense, units = _dense_times(plan, runtime, compute, stage, step.tokens, step.sampled)
    by_kind = dict(dense.compute_by_kind)
    flops = dense.flops
    hidden = 0.0
    calls = step.calls()
    for u in units:
        attention = 0.0
        for category, seconds, kernel_flops in _attention_times(plan, runtime, compute, u.unit, step, calls):
            by_kind[category] = by_kind.get(category, 0.0) + u.count * seconds
            attention += seconds
            flops += u.count * kernel_flops
        hidden += u.count * min(u.kernels_s + attention, u.beside_s)
    return StageTimes(sum(by_kind.values()), dense.comm_s, by_kind, dense.comm_by_kind, flops, hidden)


def _attention_times(plan: ServingPlan, runtime: Runtime, compute: ComputeModel, unit: ServingUnit, step: Step,
                     calls: tuple) -> tuple[tuple[str, float, float], ...]:
    """(category, seconds, FLOPs) of each attention core of one instance of `unit` for `step`, whose attention
    calls are `calls`. The cores depend on the calls and the unit's block only, so the units and pipeline
    stages that share a block, and the steps that repeat a prefill, cost them once (a small cache: a decode
    batch's mean keys change every step)."""
    key = (id(plan), id(compute), id(unit.block), unit.latent, calls)
    found = runtime._attention.get(key)
    if found is not None:
        return found[1]
    out = tuple((k.category, kernel_s(compute, k, plan.act_dtype), k.flops)
                for k in plan.attention_kernels(unit, step))
    if len(runtime._attention) > ATTENTION_CACHE_SIZE:
        runtime._attention.clear()
    runtime._attention[key] = (plan, out)
    return out


ATTENTION_CACHE_SIZE = 1 << 12  # attention costs kept per runtime before that cache starts afresh


def _dense_times(plan: ServingPlan, runtime: Runtime, compute: ComputeModel, stage: int, tokens: int,
                 sampled: int) -> tuple[StageTimes, tuple[_UnitTimes, ...]]:
    # Keyed by identity; the entry holds the plan, so no other plan can take its id while it is cached
    # (a search builds many plans against one runtime). The compute models belong to the runtime.
    key = (id(plan), id(compute), stage, tokens, sampled)
    cached = runtime._cache.get(key)
    if cached is not None:
        return cached[1]
    by_kind: dict[str, float] = defaultdict(float)
    comm_by: dict[str, float] = defaultdict(float)
    flops = 0.0
    units = []
    for work in plan.dense_work(stage, tokens, sampled):
        count = work.unit.count
        kernels = after = beside = 0.0
        for k in work.kernels:
            seconds = kernel_s(compute, k, plan.act_dtype)
            by_kind[k.category] += count * seconds
            kernels += seconds
            flops += count * k.flops
        for op in work.comm:
            seconds = runtime.comm_s(op)
            comm_by[f"{op.group}.{op.kind.value}"] += count * seconds
            if op.where is Where.OVERLAPPED:
                beside += seconds
            else:
                after += seconds
        units.append(_UnitTimes(work.unit, count, kernels, after, beside))
    out = (StageTimes(sum(by_kind.values()), sum(comm_by.values()), dict(by_kind), dict(comm_by), flops),
           tuple(units))
    if len(runtime._cache) > CACHE_SIZE:
        runtime._cache.clear()
    runtime._cache[key] = (plan, out)
    return out


CACHE_SIZE = 1 << 16  # step times kept per runtime before the cache starts afresh


def _work_times(runtime: Runtime, compute: ComputeModel, plan: ServingPlan, works) -> tuple[_UnitTimes, ...]:
    """Per unit of `works`: seconds of one instance's kernels, of its collectives after them and beside them."""
    units = []
    for work in works:
        kernels = sum(kernel_s(compute, k, plan.act_dtype) for k in work.kernels)
        after = beside = 0.0
        for op in work.comm:
            if op.where is Where.OVERLAPPED:
                beside += runtime.comm_s(op)
            else:
                after += runtime.comm_s(op)
        units.append(_UnitTimes(work.unit, work.unit.count, kernels, after, beside))
    return tuple(units)


def _cached(runtime: Runtime, plan: ServingPlan, key: tuple, build):
    """`build()`, kept in the runtime's cache under `key` (which holds id(plan)); the entry holds the plan, so
    no other plan can take its id while it is cached."""
    found = runtime._cache.get(key)
    if found is not None:
        return found[1]
    out = build()
    if len(runtime._cache) > CACHE_SIZE:
        runtime._cache.clear()
    runtime._cache[key] = (plan, out)
    return out


def group_stage_s(plan: ServingPlan, runtime: Runtime, stage: int, steps: tuple[Step, ...],
                  compute: ComputeModel | None = None) -> float:
    """Seconds of `stage` for one step of an engine whose attention-data-parallel ranks run `steps` (one per
    rank; a rank without tokens idles). The MoE layers synchronise the ranks every layer (dispatch and combine),
    so a unit instance takes

        max(max_r(K_r) + X, B) + max_r(A_r) + C

    K_r: rank r's own kernels (`ServingPlan.rank_work` on its T_r tokens, its attention), A_r its
    collectives after them (tensor parallel), X the experts' grouped GEMMs over the sum of the ranks' tokens
    (`expert_work`), C and B the token exchange after or beside the kernels, sized by the busiest rank. With
    every rank running the same step this is the unit's max(kernels, beside) + after of `stage_times`. The
    separate maxima of K_r and A_r bound the max of their sums from above (tight when one rank is the
    busiest in both, as the one with the most tokens is)."""
    busy = [s for s in steps if s.tokens]
    if not busy:
        return 0.0
    compute = compute or group_compute(runtime, steps)
    total, busiest = sum(s.tokens for s in busy), max(s.tokens for s in busy)
    ranks = [_cached(runtime, plan, ("rank", id(plan), id(compute), stage, s.tokens, s.sampled),
                     lambda s=s: _work_times(runtime, compute, plan, plan.rank_work(stage, s.tokens, s.sampled)))
             for s in busy]
    shared = _cached(runtime, plan, ("experts", id(plan), id(compute), stage, total, busiest),
                     lambda: _work_times(runtime, compute, plan, plan.expert_work(stage, total, busiest)))
    seconds = 0.0
    for i, x in enumerate(shared):
        kernels = max(r[i].kernels_s + sum(kernel_s(compute, k, plan.act_dtype)
                                           for k in plan.attention_kernels(x.unit, s))
                      for r, s in zip(ranks, busy, strict=True))
        after = max(r[i].after_s for r in ranks)
        beside = max(r[i].beside_s for r in ranks) + x.beside_s
        seconds += x.count * (max(kernels + x.kernels_s, beside) + after + x.after_s)
    return seconds


def group_compute(runtime: Runtime, steps: tuple[Step, ...]) -> ComputeModel:
    """The kernels' floors of an attention-data-parallel step: a CUDA graph's only when every rank's step
    replays one (the engines agree on graph or eager across the ranks: TensorRT-LLM gathers each rank's
    can-run-graph flag, SGLang the ranks' forward modes, vLLM pads the ranks to one captured size)."""
    models = {id(m): m for m in (runtime.compute_for(s) for s in steps if s.tokens)}
    return runtime.eager if id(runtime.eager) in models or not models else next(iter(models.values()))


def group_step_time(plan: ServingPlan, runtime: Runtime, steps: tuple[Step, ...]) -> float:
    """Seconds between two steps of an attention-data-parallel engine whose ranks run `steps`: `step_time`'s
    closed form over the stages' `group_stage_s`, the pipeline sends sized by the busiest rank."""
    compute = group_compute(runtime, steps)
    times = [group_stage_s(plan, runtime, s, steps, compute) for s in range(plan.num_stages)]
    busiest = max(steps, key=lambda s: s.tokens)
    return _period(plan, runtime, times, busiest)


def p2p_s(plan: ServingPlan, runtime: Runtime, step: Step) -> float:
    """One send of a micro-batch's activations (T x h) to the next stage (0 without pipeline stages)."""
    if plan.pp == 1:
        return 0.0
    return runtime.network.collective_s(Collective.SEND_RECV, step.tokens * plan.hidden * plan.act_dtype.num_bytes,
                                        _neighbours(plan.pp_span))


def step_time(plan: ServingPlan, runtime: Runtime, step: Step) -> float:
    """Seconds between two steps of one micro-batch (the closed form of the module docstring); equal to
    `step_period` of the simulated program. Kept per runtime: a closed loop of like requests meets the same
    step again and again (in the serving validation, 24 thousand distinct steps of 175 thousand)."""
    def build() -> float:
        times = [stage_times(plan, runtime, s, step).total_s for s in range(plan.num_stages)]
        return _period(plan, runtime, times, step)

    return _cached(runtime, plan, ("step", id(plan), step), build)


def _period(plan: ServingPlan, runtime: Runtime, times: list[float], step: Step) -> float:
    """The module docstring's T from each stage's time for one micro-batch and the host's time."""
    gpu = times[0]
    host = runtime.stack.host_step_s
    if plan.pp > 1:
        gpu = max(sum(times) + plan.pp * p2p_s(plan, runtime, step), plan.pp * max(times))
        return max(gpu, plan.pp * host)
    return max(gpu, host) if runtime.stack.host_overlaps_gpu else gpu + host


@dataclass
class StepProgram:
    """The program of one step round (pp micro-batches through the stages) and what it holds.

    spans: per (micro-batch, stage) its first and last segment on that stage; sends: per micro-batch the
    segment of each stage's send; host: the host segment of each micro-batch.
    """

    program: Program
    step: Step
    pp: int
    spans: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    sends: dict[tuple[int, int], int] = field(default_factory=dict)
    host: list[int] = field(default_factory=list)
    stage_of_rank: dict[str, int] = field(default_factory=dict)


def rank_name(stage: int) -> str:
    return f"stage{stage}"


def build_step(plan: ServingPlan, runtime: Runtime, step: Step, label: str = "step", *,
               program: Program | None = None, after: int | None = None) -> StepProgram:
    """The program of one step round: pp micro-batches (one when pp = 1) through every stage, layer by
    layer, each layer's kernels then its collectives; the host prepares each micro-batch. With `program`
    the round is appended to it, its first micro-batch waiting for segment `after`."""
    prog = Program() if program is None else program
    out = StepProgram(program=prog, step=step, pp=plan.pp)
    compute = runtime.compute_for(step)
    works = [plan.work(s, step) for s in range(plan.num_stages)]
    host_s = runtime.stack.host_step_s
    overlap = runtime.stack.host_overlaps_gpu or plan.pp > 1
    for mb in range(plan.pp):
        host_stream = prog.stream(rank_name(0), HOST)
        start = (after,) if after is not None and mb == 0 else ()
        host = prog.add(host_stream, host_s, start, category="host", label=f"{label}: schedule micro-batch {mb}")
        out.host.append(host)
        prev = after if overlap and mb == 0 else None if overlap else host
        for s, work in enumerate(works):
            rank = rank_name(s)
            out.stage_of_rank[rank] = s
            cs = prog.stream(rank, COMPUTE)
            first = last = None
            for w in work:
                seconds = sum(kernel_s(compute, k, plan.act_dtype) for k in w.kernels)
                comm = [(op, runtime.comm_s(op)) for op in w.comm]
                for _ in range(w.unit.count):
                    deps = (prev,) if prev is not None else ()
                    seg = prog.add(cs, seconds, deps, category="forward", label=f"{label}: {w.unit.block.name}")
                    first = seg if first is None else first
                    seg = _collectives(prog, rank, label, seg, deps, comm)
                    prev = last = seg
            out.spans[(mb, s)] = (first, last)
            if s < plan.num_stages - 1 or plan.pp > 1:
                send = prog.add(prog.stream(rank, PP), p2p_s(plan, runtime, step), (last,), category="pp.send_recv",
                                label=f"{label}: send to stage {(s + 1) % plan.num_stages}")
                out.sends[(mb, s)] = send
                prev = send if s < plan.num_stages - 1 else None
            else:
                prev = None
    return out


def _collectives(prog: Program, rank: str, label: str, kernels: int, deps: tuple[int, ...],
                 comm: list[tuple[CommOp, float]]) -> int:
    """A unit instance's collectives, each on its group's stream: the overlapped ones (the expert
    all-to-all under two-batch overlap) beside its kernels, from the same start; the others after both,
    in order; the compute stream waits for them all. Returns the segment the next unit waits for."""
    seg = kernels
    beside = [(op, sec) for op, sec in comm if op.where is Where.OVERLAPPED]
    if beside:
        over = deps
        for op, sec in beside:
            over = (prog.add(prog.stream(rank, op.group), sec, over, category=f"{op.group}.{op.kind.value}",
                             label=f"{label}: {op.label}"),)
        seg = prog.add(prog.stream(rank, COMPUTE), 0.0, (kernels, *over), category="sync",
                       label="wait for collectives")
    after = [(op, sec) for op, sec in comm if op.where is not Where.OVERLAPPED]
    for op, sec in after:
        seg = prog.add(prog.stream(rank, op.group), sec, (seg,), category=f"{op.group}.{op.kind.value}",
                       label=f"{label}: {op.label}")
    if after:
        seg = prog.add(prog.stream(rank, COMPUTE), 0.0, (seg,), category="sync", label="wait for collectives")
    return seg


def step_period(built: StepProgram, schedule: Schedule, host_s: float, host_overlaps: bool) -> float:
    """The step time read off the simulated round: the module docstring's T from each stage's time for one
    micro-batch (first to last segment of micro-batch 0), the sends and the host."""
    start, end = schedule.start_s, schedule.end_s
    times = [end[built.spans[(0, s)][1]] - start[built.spans[(0, s)][0]] for s in range(_stages(built))]
    if built.pp == 1:
        gpu = times[0]
        return max(gpu, host_s) if host_overlaps else gpu + host_s
    sends = [end[built.sends[(0, s)]] - start[built.sends[(0, s)]] for s in range(_stages(built))]
    gpu = max(sum(times) + sum(sends), built.pp * max(times))
    return max(gpu, built.pp * host_s)


def round_time(built: StepProgram, schedule: Schedule) -> float:
    """When the last micro-batch of the round leaves the last stage: a batch's prefill through the
    pipeline (fill and drain), its first token sampled."""
    last = _stages(built) - 1
    return max(schedule.end_s[built.spans[(mb, last)][1]] for mb in range(built.pp))


def _stages(built: StepProgram) -> int:
    return len(built.stage_of_rank)


def _neighbours(pp_span: Span) -> Span:
    """Neighbouring stages: within a domain when the pipeline group has ranks inside one."""
    return Span(2, 1) if pp_span.intra > 1 else Span(1, 2)
