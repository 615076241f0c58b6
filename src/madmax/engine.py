"""Cost a plan and simulate one iteration: plan + cost models -> per-rank streams -> schedule.

One representative rank per pipeline stage (every tp/cp/dp rank of a stage does the same work). Each
has a compute stream and one stream per communicator (tp, cp, pp, dp), as Megatron-LM and PyTorch
FSDP use separate CUDA streams per process group. Tensor-parallel collectives sit between the
computations that produce and consume them; the K/V ring of context parallelism runs beside the
attention; pipeline sends run beside the next micro-batch; gradient reductions run beside the rest
of the backward pass (when overlap is on); the optimizer step waits for all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from madmax.hardware.collectives import Collective, NetworkModel, Span
from madmax.hardware.compute import ComputeModel
from madmax.parallel.kernels import CommOp, Kernel, KernelKind
from madmax.parallel.pipeline import Phase, schedule
from madmax.parallel.plan import Plan, UnitPlan
from madmax.sim import Schedule, Timeline

COMPUTE, TP, CP, PP, DP, EDGE = "compute", "tp", "cp", "pp", "dp", "a2a"


@dataclass(frozen=True)
class UnitTimes:
    """Seconds of one unit for one micro-batch on one rank."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    attention_fwd_s: float
    attention_bwd_s: float
    tp_fwd_by_kind: tuple[tuple[str, float], ...]
    tp_bwd_by_kind: tuple[tuple[str, float], ...]
    cp_fwd_s: float
    cp_bwd_s: float
    fwd_by_kind: dict[str, float]
    bwd_by_kind: dict[str, float]
    recompute_by_kind: dict[str, float]
    flops_fwd: float
    flops_bwd: float
    flops_recompute: float


@dataclass
class Simulation:
    """The schedule plus what the builder learned while building it (per stage)."""

    schedule: Schedule
    stage_of_process: dict[str, int]
    compute_by_kind: list[dict[str, float]] = field(default_factory=list)
    model_flops: list[float] = field(default_factory=list)
    hardware_flops: list[float] = field(default_factory=list)
    optimizer_s: list[float] = field(default_factory=list)
    # Per stage: (task, bytes) -- activations kept when a forward step ends, freed when its backward ends.
    activation_events: list[list[tuple[int, float]]] = field(default_factory=list)


def kernel_s(compute: ComputeModel, k: Kernel, dtype) -> float:
    """Seconds of one kernel. A batched GEMM (bmm) is one launch: costed as one GEMM of batch*m rows,
    which has its FLOPs and bytes to within the small per-matrix operand."""
    dtype = k.dtype or dtype
    if k.kind is KernelKind.GEMM:
        return compute.gemm_s(k.batch * k.m, k.k, k.n, dtype)
    if k.kind is KernelKind.ATTENTION:
        return compute.attention_s(k.batch, k.heads, k.kv_heads, k.q_len, k.kv_len, k.head_dim, k.causal, dtype,
                                   backward=k.backward)
    if k.kind is KernelKind.LAUNCH:
        return k.batch * compute.launch_s
    return compute.memory_s(k.num_bytes)


def unit_times(unit: UnitPlan, compute: ComputeModel, network: NetworkModel, dtype) -> UnitTimes:
    def cost(kernels: tuple[Kernel, ...]) -> tuple[float, dict[str, float], float]:
        by: dict[str, float] = defaultdict(float)
        for k in kernels:
            by[k.category] += network.host_s(k.num_bytes) if k.kind is KernelKind.HOST else kernel_s(compute, k, dtype)
        return sum(by.values()), dict(by), sum(k.flops for k in kernels)

    def comm_by_kind(ops: tuple[CommOp, ...]) -> tuple[tuple[str, float], ...]:
        by: dict[str, float] = {}
        for op in ops:
            by[op.kind.value] = by.get(op.kind.value, 0.0) + network.collective_s(op.kind, op.size_bytes, op.span)
        return tuple(by.items())

    def comm(ops: tuple[CommOp, ...]) -> float:
        return sum(seconds for _, seconds in comm_by_kind(ops))

    fwd, fwd_by, fwd_flops = cost(unit.fwd)
    bwd, bwd_by, bwd_flops = cost(unit.bwd)
    rec, rec_by, rec_flops = cost(unit.recompute)
    return UnitTimes(fwd_s=fwd, bwd_s=bwd, recompute_s=rec, attention_fwd_s=fwd_by.get("attention", 0.0),
                     attention_bwd_s=bwd_by.get("attention", 0.0),
                     tp_fwd_by_kind=comm_by_kind(unit.tp_fwd), tp_bwd_by_kind=comm_by_kind(unit.tp_bwd),
                     cp_fwd_s=comm(unit.cp_fwd), cp_bwd_s=comm(unit.cp_bwd),
                     fwd_by_kind=fwd_by, bwd_by_kind=bwd_by, recompute_by_kind=rec_by, flops_fwd=fwd_flops,
                     flops_bwd=bwd_flops, flops_recompute=rec_flops)


def simulate_plan(plan: Plan, compute: ComputeModel, network: NetworkModel) -> Simulation:
    """Build the iteration's task graph for every stage and schedule it."""
    times = {key: unit_times(unit, compute, network, plan.dtype) for key, unit in plan.units.items()}
    builder = _Builder(plan, times, network, compute)
    for stage in range(plan.num_stages):
        builder.stage(stage)
    builder.link_pipeline()
    return builder.finish()


@cache
def _comm_s(network: NetworkModel, kind: Collective, size: float, span: Span) -> float:
    return network.collective_s(kind, size, span)


class _Builder:
    """Adds the tasks of each stage's program to a Timeline and links the stages."""

    def __init__(self, plan: Plan, times: dict[str, UnitTimes], network: NetworkModel,
                 compute: ComputeModel) -> None:
        self.plan, self.times, self.network, self.compute = plan, times, network, compute
        self.tl = Timeline()
        self.pp, self.vp = plan.strategy.pp, plan.strategy.vp
        self.num_virtual = self.pp * self.vp
        self.first: dict[tuple[Phase, int, int], int] = {}  # (phase, virtual chunk, mb) -> first task
        self.send: dict[tuple[Phase, int, int], int] = {}  # -> task the next virtual stage waits for
        self.sim = Simulation(schedule=None, stage_of_process={})  # type: ignore[arg-type]
        self.deferred: list[int] = []  # gradient reductions that wait for the whole backward (no overlap)
        self.pending: dict[tuple[Phase, int, str], list[int]] = {}  # exchanges a unit's pass waits for

    def comm(self, stream: int, op_kind: Collective, size: float, span: Span, axis: str, deps=()) -> int:
        duration = _comm_s(self.network, op_kind, size, span)
        category = f"{axis}.{op_kind.value}"
        return self.tl.add(stream, duration, tuple(deps), category=category, label=category)

    def stage(self, stage: int) -> None:
        plan, tl, times = self.plan, self.tl, self.times
        proc = f"stage{stage}"
        self.sim.stage_of_process[proc] = stage
        streams = {name: tl.stream(proc, name) for name in (COMPUTE, TP, CP, PP, DP, EDGE)}
        cs = streams[COMPUTE]
        by_kind: dict[str, float] = defaultdict(float)
        model_flops = hw_flops = 0.0
        m = plan.microbatches
        data = plan.data
        chunks = plan.stages[stage]
        grad_tasks: list[int] = []
        events: list[tuple[int, float]] = []
        self.sim.activation_events.append(events)
        last_compute = None
        gathered: dict[str, int] = {}
        if data.zero in (1, 2) and data.overlap:
            for chunk in chunks:
                for key in chunk:
                    if plan.units[key].trainable_params:
                        gathered.setdefault(key, self._param_gather(streams[DP], plan.units[key]))
        for step in schedule(stage, self.pp, self.vp, m):
            virtual = step.chunk * self.pp + stage
            units = chunks[step.chunk]
            ordered = units if step.phase is Phase.FORWARD else tuple(reversed(units))
            first_task = None
            for key in ordered:
                unit, t = plan.units[key], times[key]
                if step.phase is Phase.BACKWARD and not unit.has_backward:
                    continue
                deps: list[int] = self._edges_in(streams, step, key)
                if data.zero >= 3 and unit.params > 0:
                    deps.append(self.comm(streams[DP], Collective.ALL_GATHER,
                                          unit.params * data.weight_bytes, data.shard_span, DP))
                if step.phase is Phase.FORWARD and step.microbatch == 0 and key in gathered:
                    deps.append(gathered[key])
                if step.phase is Phase.FORWARD:
                    start, task = self._compute_with_cp(streams, t.fwd_s, t.attention_fwd_s, t.cp_fwd_s, deps,
                                                        "forward")
                    for cat, sec in t.fwd_by_kind.items():
                        by_kind[cat] += sec
                    model_flops += t.flops_fwd
                    hw_flops += t.flops_fwd
                else:
                    rec = None
                    if t.recompute_s:
                        rec = tl.add(cs, t.recompute_s, tuple(deps), category="recompute", label="recompute")
                        deps = [rec]
                        for cat, sec in t.recompute_by_kind.items():
                            by_kind["recompute." + cat] += sec
                        hw_flops += t.flops_recompute
                    start, task = self._compute_with_cp(streams, t.bwd_s, t.attention_bwd_s, t.cp_bwd_s, deps,
                                                        "backward")
                    start = rec if rec is not None else start
                    for cat, sec in t.bwd_by_kind.items():
                        by_kind[cat] += sec
                    model_flops += t.flops_bwd
                    hw_flops += t.flops_bwd
                if first_task is None:
                    first_task = start
                tp_ops = t.tp_fwd_by_kind if step.phase is Phase.FORWARD else t.tp_bwd_by_kind
                if tp_ops:
                    tp_task = task
                    for kind, seconds in tp_ops:
                        tp_task = tl.add(streams[TP], seconds, (tp_task,), category=f"tp.{kind}", label=f"tp {kind}")
                    task = tl.add(cs, 0.0, (tp_task,), category="sync", label="tp wait")
                last_compute = task
                self._edges_out(streams, step, key, task)
                if step.phase is Phase.BACKWARD and unit.trainable_params:
                    grad_tasks += self._grad_sync(streams[DP], unit, task, step.microbatch == m - 1)
                if step.phase is Phase.BACKWARD and unit.update and step.microbatch == m - 1:
                    grad_tasks += [self.comm_op(streams[DP], op, (task,)) for op in unit.update]
            if first_task is None:
                # A backward with nothing to do: frozen bottom units (and every stage below them) or an
                # inference pass. Nothing later waits for it.
                assert step.phase is Phase.BACKWARD
                continue
            assert last_compute is not None
            kept = sum(plan.units[key].saved_bytes for key in units)
            events.append((last_compute, kept if step.phase is Phase.FORWARD else -kept))
            self.first[(step.phase, virtual, step.microbatch)] = first_task
            self._send(streams[PP], step.phase, virtual, step.microbatch, last_compute)
        self._finish_stage(stage, streams, grad_tasks, last_compute)
        self.sim.compute_by_kind.append(dict(by_kind))
        self.sim.model_flops.append(model_flops)
        self.sim.hardware_flops.append(hw_flops)

    def comm_op(self, stream: int, op: CommOp, deps=()) -> int:
        duration = _comm_s(self.network, op.kind, op.size_bytes, op.span)
        return self.tl.add(stream, duration, tuple(deps), category=op.label, label=op.label)

    def _edges_in(self, streams, step, key: str) -> list[int]:
        """Collectives this unit's pass must wait for: ids before a forward lookup, exchanged outputs
        of earlier units before their consumer's forward, returned gradients before a backward."""
        unit = self.plan.units[key]
        deps: list[int] = []
        if step.phase is Phase.FORWARD:
            task = None
            for op in unit.pre_fwd:
                task = self.comm_op(streams[EDGE], op, (task,) if task is not None else ())
            if task is not None:
                deps.append(task)
        deps += self.pending.pop((step.phase, step.microbatch, key), [])
        return deps

    def _edges_out(self, streams, step, key: str, after: int) -> None:
        """Start the exchanges this unit's pass produces, beside the next units' compute."""
        units = self.plan.units
        if step.phase is Phase.FORWARD and units[key].edge_fwd:
            task = after
            for op in units[key].edge_fwd:
                task = self.comm_op(streams[EDGE], op, (task,))
            self.pending.setdefault((Phase.FORWARD, step.microbatch, units[key].edge_to), []).append(task)
        if step.phase is Phase.BACKWARD:
            for producer, unit in units.items():
                if unit.edge_to == key and unit.edge_bwd:
                    task = after
                    for op in unit.edge_bwd:
                        task = self.comm_op(streams[EDGE], op, (task,))
                    self.pending.setdefault((Phase.BACKWARD, step.microbatch, producer), []).append(task)

    def _compute_with_cp(self, streams, total_s: float, attention_s: float, cp_s: float, deps: list[int],
                         label: str) -> tuple[int, int]:
        """First and last task of a unit's compute; with context parallelism the K/V ring runs beside
        its attention."""
        cs = streams[COMPUTE]
        if not cp_s:
            task = self.tl.add(cs, total_s, tuple(deps), category=label, label=label)
            return task, task
        pre = self.tl.add(cs, total_s - attention_s, tuple(deps), category=label, label=label)
        ring = self.tl.add(streams[CP], cp_s, (pre,), category="cp.send_recv", label="cp ring")
        attn = self.tl.add(cs, attention_s, (pre,), category=label, label=label + " attention")
        return pre, self.tl.add(cs, 0.0, (attn, ring), category="sync", label="cp wait")

    def _param_gather(self, dp_stream: int, unit: UnitPlan) -> int:
        data = self.plan.data
        if data.shard == 1:
            return self.tl.add(dp_stream, 0.0, category="sync", label="no gather")
        return self.comm(dp_stream, Collective.ALL_GATHER, unit.trainable_params * data.weight_bytes,
                         data.shard_span, DP)

    def _grad_sync(self, dp_stream: int, unit: UnitPlan, after: int, last_microbatch: bool) -> list[int]:
        """Gradient reduction of one unit: every micro-batch for ZeRO-2/3, else after the last one."""
        data = self.plan.data
        size = unit.trainable_params * data.grad_bytes
        per_microbatch = data.zero >= 2
        if not (per_microbatch or last_microbatch) or (data.shard == 1 and data.replicas == 1):
            return []
        deps = (after,) if data.overlap else ()
        tasks = []
        if data.zero == 0:
            tasks.append(self.comm(dp_stream, Collective.ALL_REDUCE, size, data.grad_span, DP, deps))
        else:
            if data.shard > 1:
                tasks.append(self.comm(dp_stream, Collective.REDUCE_SCATTER, size, data.shard_span, DP, deps))
            if last_microbatch and data.replicas > 1:
                tasks.append(self.comm(dp_stream, Collective.ALL_REDUCE, size / data.shard, data.replica_span, DP,
                                       (tasks[-1],) if tasks else deps))
        if not data.overlap:
            self.deferred.extend(tasks)
        return tasks

    def _send(self, pp_stream: int, phase: Phase, virtual: int, mb: int, after: int) -> None:
        """The activation (forward) or its gradient (backward) sent to the neighbouring virtual stage."""
        last = self.num_virtual - 1
        if (phase is Phase.FORWARD and virtual == last) or (phase is Phase.BACKWARD and virtual == 0):
            self.send[(phase, virtual, mb)] = after
            return
        self.send[(phase, virtual, mb)] = self.comm(pp_stream, Collective.SEND_RECV, self.plan.p2p_bytes,
                                                    _p2p_span(self.plan.pp_span), PP, (after,))

    def _finish_stage(self, stage: int, streams, grad_tasks: list[int], last_compute: int) -> None:
        plan, tl = self.plan, self.tl
        if self.deferred:
            tl.depend(self.deferred[0], last_compute)
            self.deferred = []
        deps = [*list(grad_tasks), last_compute]
        if plan.tied_sync_bytes and stage in (0, plan.num_stages - 1):
            deps.append(self.comm(streams[DP], Collective.ALL_REDUCE, plan.tied_sync_bytes, Span(1, 2), "pp",
                                  (last_compute,)))
        trainable = sum(plan.units[k].trainable_params for chunk in plan.stages[stage] for k in chunk)
        w, g, o = plan.data.state_bytes_per_param()
        moved = trainable * (2 * o + g + w)
        optimizer_s = self.compute.memory_s(moved) if moved else 0.0
        opt = tl.add(streams[COMPUTE], optimizer_s, tuple(deps), category="optimizer", label="optimizer step")
        self.sim.optimizer_s.append(optimizer_s)
        if plan.data.zero in (1, 2) and not plan.data.overlap and plan.data.shard > 1:
            for chunk in plan.stages[stage]:
                for key in chunk:
                    if plan.units[key].trainable_params:
                        self.comm(streams[DP], Collective.ALL_GATHER,
                                  plan.units[key].trainable_params * plan.data.weight_bytes,
                                  plan.data.shard_span, DP, (opt,))

    def link_pipeline(self) -> None:
        """Forward of virtual stage v waits for v-1's send; backward of v waits for v+1's."""
        last = self.num_virtual - 1
        for (phase, virtual, mb), task in self.first.items():
            if phase is Phase.FORWARD and virtual > 0:
                self.tl.depend(task, self.send[(Phase.FORWARD, virtual - 1, mb)])
            elif phase is Phase.BACKWARD and virtual < last:
                self.tl.depend(task, self.send[(Phase.BACKWARD, virtual + 1, mb)])

    def finish(self) -> Simulation:
        self.sim.schedule = self.tl.run()
        return self.sim


def _p2p_span(pp_span: Span) -> Span:
    """Neighbouring stages: within a domain when the pipeline group has ranks inside one."""
    return Span(2, 1) if pp_span.intra > 1 else Span(1, 2)
