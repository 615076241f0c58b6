"""The training iteration as a program: one representative rank per pipeline stage, every pass of every
micro-batch as segments on its compute stream and on the streams of its process groups.

Every tp/cp/dp rank of a stage does the same work, so one rank stands for its stage. Each collective
runs on the stream of its group (`CommOp.group`: "tp", "cp", "dp", "pp", "emb", ...), as Megatron-LM
and PyTorch FSDP use a CUDA stream per process group; streams appear as the program uses them. A unit's
collectives go where `CommOp.where` says: TP collectives between the compute that produces and the
compute that consumes them (after the unit's kernels), the K/V ring of context parallelism beside the
attention, embedding exchanges before the forward or on to the consuming unit, pipeline sends beside
the next micro-batch, gradient reductions beside the rest of the backward pass (when overlap is on);
the optimizer step waits for all of them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from madmax.collective import Collective, Span
from madmax.config.training_stack import KeptUnit
from madmax.hardware.collectives import NetworkModel
from madmax.hardware.compute import ComputeModel
from madmax.hardware.profile import efficiency_table
from madmax.parallel.data import DataParallelPlan
from madmax.parallel.kernels import CommOp, Phase, Where
from madmax.parallel.pipeline import schedule
from madmax.parallel.plan import DATA_GROUP, Plan, UnitPlan
from madmax.program.costs import GroupTimes, UnitTimes, group_times, unit_times
from madmax.program.step_end import StepEnd, step_end_costs
from madmax.sim import Program
from madmax.workload.ops import Placement

COMPUTE = "compute"
DP, PP = DATA_GROUP, "pp"
STEP, HOST = "step", "host"  # the step-end collectives' stream; the host's work the GPU waits for
CALL = "call"  # the host's step call (profile call_host_s), beside the whole step: a step lasts at least that
GEMM_CATEGORY = "gemm"  # the breakdown category of GEMM kernels (OpKind.GEMM)
GATHER_COPY, REDUCE_COPY = "gather_copy", "reduce_copy"  # FSDP2's copies on the compute stream (compute categories)


@dataclass(frozen=True)
class _Contention:
    """What collectives running beside compute take from it (catalog efficiency.yaml `overlap`).

    load(span): the fraction of the compute's throughput an NCCL collective over `span` holds while it
    runs (strategy overlap_cost; 0 without), inside the scale-up domain or across the network;
    tp_load: that of Transformer Engine's pipelined TP collectives (tp_overlap), the SMs it reserves;
    chunks: the pieces each is pipelined in; max_load: the most all loads together take.
    """

    on: bool
    scale_up: float
    scale_out: float
    tp_load: float
    chunks: int
    max_load: float

    @staticmethod
    def of(overlap_cost: bool, tp_overlap: bool) -> _Contention:
        table = efficiency_table()["overlap"]
        nccl, tp = table["nccl"], table["tp_userbuffers"]
        up, out = (float(nccl["scale_up"]), float(nccl["scale_out"])) if overlap_cost else (0.0, 0.0)
        return _Contention(on=overlap_cost or tp_overlap, scale_up=up, scale_out=out, tp_load=float(tp["sm_fraction"]),
                           chunks=int(tp["chunks"]), max_load=float(table["max_load"]))

    def load(self, span: Span) -> float:
        return self.scale_out if span.inter > 1 else self.scale_up


def overlap_assumptions(overlap_cost: bool, tp_overlap: bool) -> list[str]:
    """What the result assumes about overlap's cost: the catalog's estimates in use, when they are."""
    table = efficiency_table()["overlap"]
    notes = []
    if overlap_cost:
        nccl = table["nccl"]
        notes.append(f"collectives beside compute take {nccl['scale_up']:.0%} of its throughput inside a scale-up "
                     f"domain (measured average) and {nccl['scale_out']:.0%} across the network (estimate), "
                     f"{table['max_load']:.0%} at most together (estimate); efficiency.yaml overlap")
    if tp_overlap:
        tp = table["tp_userbuffers"]
        notes.append(f"TP comm-GEMM overlap: {tp['chunks']} chunks, the first exposed; its collectives hold "
                     f"{tp['sm_fraction']:.0%} of the SMs beside the GEMMs (estimate); efficiency.yaml overlap")
    return notes


@dataclass
class TrainingProgram:
    """The iteration's program plus what the builder learned while writing it (per stage).

    stage_of_rank: the stage each simulated rank stands for; activation_events: per stage, (segment,
    bytes) -- activations kept when a forward pass ends, freed when its backward ends.
    """

    program: Program
    stage_of_rank: dict[str, int] = field(default_factory=dict)
    compute_by_kind: list[dict[str, float]] = field(default_factory=list)
    model_flops: list[float] = field(default_factory=list)
    hardware_flops: list[float] = field(default_factory=list)
    optimizer_s: list[float] = field(default_factory=list)
    activation_events: list[list[tuple[int, float]]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # what the program's costs assume (for the result)


def rank_name(stage: int) -> str:
    """The simulated rank that stands for pipeline stage `stage`."""
    return f"stage{stage}"


def build_training(plan: Plan, compute: ComputeModel, network: NetworkModel) -> TrainingProgram:
    """Write the iteration's program for every stage and link the stages."""
    times = {key: unit_times(unit, compute, network, plan.dtype) for key, unit in plan.units.items()}
    builder = _Builder(plan, times, network, compute)
    for stage in range(plan.num_stages):
        builder.stage(stage)
    builder.link_pipeline()
    builder.link_step_end()
    # a forward-only step has no step end (`_Builder._step_end`): its host estimates are not assumed
    step_end = builder.step_end.assumptions if builder.trains else ()
    builder.out.assumptions += [*network.assumptions, *step_end, *_wgrad_assumptions(plan, compute)]
    return builder.out


def _wgrad_assumptions(plan: Plan, compute: ComputeModel) -> list[str]:
    """The weight-gradient rate in use, for each dtype of the plan's weight gradients that has one below 1."""
    dtypes = {k.dtype or plan.dtype for u in plan.units.values() for k in u.bwd if k.wgrad}
    return [f"{d} weight-gradient GEMMs at {compute.wgrad_fraction(d):.3g} of a forward-layout GEMM's rate "
            "(the compute profile's wgrad_fraction; docs/model.md)"
            for d in sorted(dtypes, key=str) if compute.wgrad_fraction(d) < 1]


@cache
def _names(group: str, kind: str) -> tuple[str, str]:
    """Category and label of a collective segment of `group` and `kind`."""
    return f"{group}.{kind}", f"{group} {kind}"


@cache
def _comm_s(network: NetworkModel, kind: Collective, size: float, span: Span) -> float:
    return network.collective_s(kind, size, span)


class _Streams(dict):
    """Stream ids of one rank by group name, made on first use."""

    def __init__(self, program: Program, rank: str) -> None:
        super().__init__()
        self.program, self.rank = program, rank
        # (unit, pass) -> its after-collectives as (stream, seconds, category, label), built on first use
        self.after_items: dict[tuple[str, Phase], list[tuple[int, float, str, str]]] = {}
        # (unit, pass) -> its collectives pipelined with its GEMMs: first chunks, the rest, GEMM seconds
        self.gemm_items: dict[tuple[str, Phase], tuple[list, list, float]] = {}

    def __missing__(self, name: str) -> int:
        self[name] = self.program.stream(self.rank, name)
        return self[name]


class _Builder:
    """Adds the segments of each stage's passes to a Program and links the stages."""

    def __init__(self, plan: Plan, times: dict[str, UnitTimes], network: NetworkModel,
                 compute: ComputeModel) -> None:
        self.plan, self.times, self.network, self.compute = plan, times, network, compute
        self.out = TrainingProgram(program=Program())
        self.prog = self.out.program
        self.pp, self.vp = plan.strategy.pp, plan.strategy.vp
        self.num_virtual = self.pp * self.vp
        self.first: dict[tuple[Phase, int, int], int] = {}  # (phase, virtual chunk, mb) -> first segment
        self.send: dict[tuple[Phase, int, int], int] = {}  # -> segment the next virtual stage waits for
        # gradient reductions that wait for the whole backward (no overlap): the first of each stream waits
        self.deferred: dict[int, int] = {}  # stream -> its first deferred segment
        self.pending: dict[tuple[Phase, int, str], list[int]] = {}  # exchanges a unit's pass waits for
        self.consumers: dict[str, list[str]] = defaultdict(list)  # unit -> producers whose output it reads
        # Whether any unit exchanges data with another (embedding tables); LLM plans skip the edge bookkeeping.
        self.exchanges = any(u.has_exchanges for u in plan.units.values())
        strategy = plan.strategy
        # the plan's domain from the strategy's own size: network.system is the first system of equal fabric the
        # network cache saw (collectives._system_key), not necessarily of this run's GPU count
        world = strategy.tp * strategy.cp * (strategy.dp or 1) * strategy.pp
        self.step_end: StepEnd = step_end_costs(strategy, plan.data.zero, plan.data.grad_span, network,
                                                min(network.system.scale_up.domain_size, world))
        if plan.stack is not None and plan.stack.graph_step:  # one CUDA graph per step: no host work at its end
            self.step_end = dataclasses.replace(self.step_end, host_sync_s=0.0, host_beside_s=0.0, assumptions=())
        self.step_ready: list[tuple[int, int]] = []  # per stage: (gradients ready, gradient-norm all-reduce)
        self.trains = any(unit.trainable_params for unit in plan.units.values())
        self._groups: dict[str, tuple] = {}
        self.contention = _Contention.of(plan.strategy.overlap_cost, plan.strategy.tp_overlap)
        self._unit_loads: dict[str, dict[str, float]] = {}
        for key, unit in plan.units.items():
            if unit.edge_to is not None:
                self.consumers[unit.edge_to].append(key)

    def comm(self, stream: int, op_kind: Collective, size: float, span: Span, group: str, deps=()) -> int:
        duration = _comm_s(self.network, op_kind, size, span)
        category = f"{group}.{op_kind.value}"
        return self.prog.add(stream, duration, tuple(deps), category=category, label=category,
                             load=self.contention.load(span))

    def comm_op(self, stream: int, op: CommOp, deps=()) -> int:
        duration = _comm_s(self.network, op.kind, op.size_bytes, op.span)
        return self.prog.add(stream, duration, tuple(deps), category=op.label, label=op.label,
                             load=self.contention.load(op.span))

    def stage(self, stage: int) -> None:
        plan, prog, times = self.plan, self.prog, self.times
        rank = rank_name(stage)
        self.out.stage_of_rank[rank] = stage
        streams = _Streams(prog, rank)
        cs = streams[COMPUTE]
        if self.contention.on:
            prog.contend(cs, self.contention.max_load)
        call = self.compute.profile.call_host_s
        if call:
            prog.add(streams[CALL], call, (), category="host", label="step call (dispatch, next batch)")
        by_kind: dict[str, float] = defaultdict(float)
        model_flops = hw_flops = 0.0
        m = plan.microbatches
        data = plan.data
        chunks = plan.stages[stage]
        grad_segments: list[int] = []
        events: list[tuple[int, float]] = []
        self.out.activation_events.append(events)
        last_compute = None
        gathered: dict[str, list[int]] = {}
        done: list[int] = []  # the last segment of each unit's pass, in order (ZeRO-3 prefetch depth)
        if data.zero in (1, 2) and data.overlap:
            for chunk in chunks:
                for key in chunk:
                    if plan.units[key].trainable_params:  # one gather per layer; the first gates the forward
                        gathered.setdefault(key, self._param_gather(streams, plan.units[key]))
        tail = None  # the collectives the compute stream's next segment waits for (after the unit before)
        passes: dict[tuple[str, Phase], int] = defaultdict(int)  # (unit, pass) -> times it ran
        zero3 = _ZeroGathers(self, streams, stage) if data.zero >= 3 else None
        for step in schedule(stage, self.pp, self.vp, m):
            virtual = step.chunk * self.pp + stage
            units = chunks[step.chunk]
            ordered = units if step.phase is Phase.FORWARD else tuple(reversed(units))
            first_segment = None
            overlapped: list[int] = []
            for key in ordered:
                unit, t = plan.units[key], times[key]
                if step.phase is Phase.BACKWARD and not unit.has_backward:
                    continue
                deps: list[int] = self._edges_in(streams, step, key) if self.exchanges else []
                if tail is not None:
                    deps.append(tail)
                    tail = None
                if zero3 is not None:
                    deps = zero3.before_pass(deps, done, by_kind)
                if step.phase is Phase.FORWARD and step.microbatch == 0 and key in gathered:
                    deps += gathered[key]
                passes[(key, step.phase)] += 1
                if step.phase is Phase.FORWARD:
                    start, seg = self._compute(streams, key, Phase.FORWARD, deps, "forward")
                else:
                    rec = None
                    if t.recompute_s:
                        rec = prog.add(cs, t.recompute_s, tuple(deps), category="recompute", label="recompute")
                        deps = [rec]
                        if data.zero >= 3 and unit.params > 0 and plan.stack and plan.stack.recompute_regathers:
                            done.append(rec)  # the recomputed forward released its weights: gathered again
                            deps += self._weight_gathers(streams, unit, _prefetch_start(plan.stack, done))[0]
                    start, seg = self._compute(streams, key, Phase.BACKWARD, deps, "backward")
                    start = rec if rec is not None else start
                if first_segment is None:
                    first_segment = start
                after = self._after(streams, key, step.phase, seg)
                tail, seg = (after if after != seg else None), after
                beside = t.overlapped_fwd if step.phase is Phase.FORWARD else t.overlapped_bwd
                if beside:
                    overlapped += self._overlapped(streams, beside, seg, self._loads(unit))
                last_compute = seg
                done.append(seg)
                if self.exchanges:
                    grad_segments += self._edges_out(streams, step, key, seg, step.microbatch == m - 1)
                if step.phase is Phase.BACKWARD and unit.trainable_params:
                    for group, d, params, trainable in self._state_groups(unit):
                        synced = self._grad_sync(streams[group], group, d, trainable, seg, step.microbatch == m - 1,
                                                 self._reduce_sizes(unit, group, d, params, trainable),
                                                 copy=(cs, by_kind), replicas=self._replica_stream(streams, group))
                        grad_segments += synced
                        if synced and not d.overlap and d.zero >= 2:
                            # Reduced in place, every micro-batch (DeepSpeed's overlap_comm=False): the next
                            # compute and the step's end wait for it.
                            tail = synced[-1]
                            overlapped.append(synced[-1])
                if step.phase is Phase.BACKWARD and step.microbatch == m - 1:
                    grad_segments += [self.comm_op(streams[op.group], op, (seg,))
                                      for op in unit.collectives(Phase.BACKWARD, Where.UPDATE)]
            if not units:
                # An empty chunk of a pipeline layout (Megatron allows "E||t|L"): it receives the activation
                # (or its gradient) and sends it on, computing nothing.
                first_segment = last_compute = prog.add(cs, 0.0, (), category="sync", label="empty pipeline chunk")
            if first_segment is None:
                # A backward with nothing to do: frozen bottom units (and every stage below them) or an
                # inference pass. Nothing later waits for it.
                assert step.phase is Phase.BACKWARD
                continue
            assert last_compute is not None
            if overlapped:
                last_compute = prog.add(cs, 0.0, (last_compute, *overlapped), category="sync",
                                        label="wait for overlapped collectives")
            kept = sum(plan.units[key].saved_bytes for key in units)
            events.append((last_compute, kept if step.phase is Phase.FORWARD else -kept))
            self.first[(step.phase, virtual, step.microbatch)] = first_segment
            self._send(streams[PP], step.phase, virtual, step.microbatch, last_compute)
        self._finish_stage(stage, streams, grad_segments, last_compute)
        # Each (unit, pass) costs the same every micro-batch: the stage's totals are counts times them.
        for (key, phase), count in passes.items():
            t = times[key]
            if phase is Phase.FORWARD:
                kinds = t.fwd_by_kind.items()
                model_flops += count * t.flops_fwd
                hw_flops += count * t.flops_fwd
            else:
                if t.recompute_s:
                    for cat, sec in t.recompute_by_kind.items():
                        by_kind["recompute." + cat] += count * sec
                    hw_flops += count * t.flops_recompute
                kinds = t.bwd_by_kind.items()
                model_flops += count * t.flops_bwd
                hw_flops += count * t.flops_bwd
            for cat, sec in kinds:
                by_kind[cat] += count * sec
        self.out.compute_by_kind.append(dict(by_kind))
        self.out.model_flops.append(model_flops)
        self.out.hardware_flops.append(hw_flops)

    def _after(self, streams: _Streams, key: str, phase: Phase, seg: int) -> int:
        """The collectives after a unit's kernels, one segment per group and kind in order on the group's
        stream; the compute stream waits for the last (the next unit consumes their result). The segments
        of a (unit, pass) are the same every micro-batch: written out once per stage and reused."""
        items = streams.after_items.get((key, phase))
        if items is None:
            t = self.times[key]
            items = streams.after_items[(key, phase)] = [
                (streams[group], seconds, *_names(group, kind))
                for group, kind, seconds in (t.after_fwd if phase is Phase.FORWARD else t.after_bwd)]
        return self.prog.chain(seg, items) if items else seg

    def _overlapped(self, streams: _Streams, overlapped: GroupTimes, seg: int, loads: dict[str, float]) -> list[int]:
        """Collectives that run beside the compute after the unit (the expert all-to-all of a micro-batch
        hidden behind another's compute): on their groups' streams after the unit's kernels; the pass
        ends when they have (its caller waits for the segments returned)."""
        out = []
        for group, kind, seconds in overlapped:
            out.append(self.prog.add(streams[group], seconds, (seg,), category=f"{group}.{kind}",
                                     label=f"{group} {kind} (overlapped)", load=loads.get(group, 0.0)))
        return out

    def _loads(self, unit: UnitPlan) -> dict[str, float]:
        """The load (`_Contention.load`) of each process group of the unit's collectives, by its span."""
        loads = self._unit_loads.get(unit.name)
        if loads is None:
            loads = self._unit_loads[unit.name] = {op.group: self.contention.load(op.span) for op in unit.comm}
        return loads

    def _compute(self, streams: _Streams, key: str, phase: Phase, deps: list[int], label: str) -> tuple[int, int]:
        """First and last segment of a unit's pass (`_compute_beside`), with its TP collectives pipelined
        with its GEMMs under comm-GEMM overlap (Where.WITH_GEMMS): the first of `chunks` chunks of each
        is exposed before the pass, the rest runs on the TP stream beside the GEMMs, holding the SMs
        Transformer Engine reserves for it (their load slows the GEMMs); the pass ends when both have."""
        t = self.times[key]
        forward = phase is Phase.FORWARD
        total, attention, beside = ((t.fwd_s, t.attention_fwd_s, t.beside_fwd) if forward
                                    else (t.bwd_s, t.attention_bwd_s, t.beside_bwd))
        heads, rests, gemm_s = self._gemms_overlapped(streams, key, phase)
        loads = self._loads(self.plan.units[key]) if beside else None
        if not heads:
            return self._compute_beside(streams, total, attention, beside, deps, label, loads)
        cs = streams[COMPUTE]
        # on the compute stream, so that the first chunks wait for the compute before them
        first = self.prog.add(cs, 0.0, tuple(deps), category="sync", label="tp overlap start")
        head = self.prog.chain(first, heads)
        _, seg = self._compute_beside(streams, total - gemm_s, attention, beside, [head], label, loads)
        rest = self.prog.chain(seg, rests, self.contention.tp_load)
        gemms = self.prog.add(cs, gemm_s, (seg,), category=label, label=label + " GEMMs")
        return first, self.prog.add(cs, 0.0, (gemms, rest), category="sync", label="wait for collectives")

    def _gemms_overlapped(self, streams: _Streams, key: str, phase: Phase) -> tuple[list, list, float]:
        """The unit's collectives pipelined with its GEMMs in one pass, per kind, as (stream, seconds,
        category, label) of their first chunks and of the rest, and the pass's GEMM seconds (written out
        once per stage, unit and pass)."""
        cached = streams.gemm_items.get((key, phase))
        if cached is None:
            by = group_times(self.plan.units[key].collectives(phase, Where.WITH_GEMMS), self.network)
            t = self.times[key]
            gemm_s = (t.fwd_by_kind if phase is Phase.FORWARD else t.bwd_by_kind).get(GEMM_CATEGORY, 0.0)
            n = self.contention.chunks
            heads = [(streams[group], sec / n, f"{group}.{kind}", f"{group} {kind} first chunk")
                     for group, kind, sec in by]
            rests = [(streams[group], sec * (n - 1) / n, f"{group}.{kind}", f"{group} {kind} beside the GEMMs")
                     for group, kind, sec in by]
            cached = streams.gemm_items[(key, phase)] = (heads, rests, gemm_s)
        return cached

    def _edges_in(self, streams: _Streams, step, key: str) -> list[int]:
        """Collectives this unit's pass must wait for: those before its forward (ids to their owners), the
        exchanged outputs of earlier units before their consumer's forward, returned gradients before a
        backward. Those for the next iteration (Where.AHEAD) start with the forward and nothing waits for them."""
        unit = self.plan.units[key]
        deps: list[int] = []
        if step.phase is Phase.FORWARD:
            for op in unit.collectives(Phase.FORWARD, Where.AHEAD):  # the next iteration's: nothing waits
                self.comm_op(streams[op.group], op)
            seg = None
            for op in unit.collectives(Phase.FORWARD, Where.BEFORE):
                seg = self.comm_op(streams[op.group], op, (seg,) if seg is not None else ())
            if seg is not None:
                deps.append(seg)
        deps += self.pending.pop((step.phase, step.microbatch, key), [])
        return deps

    def _edges_out(self, streams: _Streams, step, key: str, after: int, last_microbatch: bool) -> list[int]:
        """Start the exchanges this unit's pass produces, beside the next units' compute; after the last
        micro-batch's backward, the producers' reductions that need only their output gradient
        (Where.ON_GRADIENT), returned for the optimizer step to wait for."""
        units = self.plan.units
        early: list[int] = []
        out = units[key].collectives(Phase.FORWARD, Where.TO_CONSUMER)
        if step.phase is Phase.FORWARD and out:
            seg = after
            for op in out:
                seg = self.comm_op(streams[op.group], op, (seg,))
            self.pending.setdefault((Phase.FORWARD, step.microbatch, units[key].edge_to), []).append(seg)
        if step.phase is Phase.BACKWARD:
            for producer in self.consumers.get(key, ()):
                if last_microbatch:
                    early += [self.comm_op(streams[op.group], op, (after,))
                              for op in units[producer].collectives(Phase.BACKWARD, Where.ON_GRADIENT)]
                back = units[producer].collectives(Phase.BACKWARD, Where.TO_CONSUMER)
                if not back:
                    continue
                seg = after
                for op in back:
                    seg = self.comm_op(streams[op.group], op, (seg,))
                self.pending.setdefault((Phase.BACKWARD, step.microbatch, producer), []).append(seg)
        return early

    def _compute_beside(self, streams: _Streams, total_s: float, attention_s: float, beside: GroupTimes,
                        deps: list[int], label: str, loads: dict[str, float] | None = None) -> tuple[int, int]:
        """First and last segment of a unit's compute; collectives that run beside its attention (the
        context-parallel K/V ring) start with it and the unit ends when both have."""
        cs = streams[COMPUTE]
        if not beside or not any(seconds for _, _, seconds in beside):
            seg = self.prog.add(cs, total_s, tuple(deps), category=label, label=label)
            return seg, seg
        pre = self.prog.add(cs, total_s - attention_s, tuple(deps), category=label, label=label)
        ring = [self.prog.add(streams[group], seconds, (pre,), category=f"{group}.{kind}",
                              label=f"{group} {kind} beside attention", load=(loads or {}).get(group, 0.0))
                for group, kind, seconds in beside]
        attn = self.prog.add(cs, attention_s, (pre,), category=label, label=label + " attention")
        return pre, self.prog.add(cs, 0.0, (attn, *ring), category="sync", label="wait for collectives")

    def _state_groups(self, unit: UnitPlan) -> tuple[tuple[str, DataParallelPlan, float, float], ...]:
        """`UnitPlan.state_groups` of a unit, computed once (it is asked every micro-batch)."""
        cached = self._groups.get(unit.name)
        if cached is None:
            cached = self._groups[unit.name] = unit.state_groups(self.plan)
        return cached

    def _weight_gathers(self, streams: _Streams, unit: UnitPlan, start: tuple[int, ...]) -> tuple[list[int], float]:
        """ZeRO-3: the unit's weights all-gathered over their shard, as the plan's training stack issues them:
        one gather per state group, or per parameter tensor of the dense group (`UnitPlan.gathers`); each
        followed by n copies of its pieces when the stack gathers into a list of n tensors; each starting
        after `start` (the compute a prefetch waits for: `_ZeroGathers`). Returns the segments and the bytes
        gathered."""
        stack = self.plan.stack
        copies = stack is not None and stack.gather_peer_copies
        segs, moved = [], 0.0
        for group, d, params, _ in self._state_groups(unit):
            sizes = unit.gathers if group == DATA_GROUP and unit.gathers is not None else (params,)
            width = unit.gather_width(group, d, params)
            for size in sizes:
                seg = self.comm(streams[group], Collective.ALL_GATHER, size * width, d.shard_span, group, start)
                if d.shard > 1:
                    moved += size * width
                if copies and d.shard > 1:
                    piece = size * width / d.shard
                    seg = self.prog.add(streams[group], d.shard * self.compute.memory_s(2 * piece), (seg,),
                                        category=f"{group}.gather_copies", label=f"{group} gather copies")
                segs.append(seg)
        return segs, moved

    def _param_gather(self, streams: _Streams, unit: UnitPlan) -> list[int]:
        """ZeRO-1/2: the updated weights of each of the unit's state groups gathered over their shard."""
        segs = []
        for group, d, _, trainable in self._state_groups(unit):
            if not trainable:
                continue
            if d.shard == 1:
                segs.append(self.prog.add(streams[group], 0.0, category="sync", label="no gather"))
            else:
                segs.append(self.comm(streams[group], Collective.ALL_GATHER,
                                      trainable * unit.gather_width(group, d, trainable, trainable=True),
                                      d.shard_span, group))
        return segs

    def _reduce_sizes(self, unit: UnitPlan, group: str, d: DataParallelPlan, params: float,
                      trainable: float) -> tuple[float, ...]:
        """ZeRO-3: the parameters of each gradient reduce-scatter of a unit's state group: one per parameter
        tensor where the stack gathers per tensor (`UnitPlan.gathers`; the tensors it keeps whole on every
        rank reduced together in one more), else the whole group's in one."""
        stack = self.plan.stack
        if (d.zero < 3 or group != DATA_GROUP or unit.gathers is None or trainable != params
                or (stack is not None and not stack.reduces_per_parameter())):
            return (trainable,)
        rest = trainable - sum(unit.gathers)
        return (*unit.gathers, rest) if rest > 0 else unit.gathers

    def _grad_sync(self, stream: int, group: str, data: DataParallelPlan, trainable: float, after: int,
                   last_microbatch: bool, sizes: tuple[float, ...] = (),
                   copy: tuple[int, dict[str, float]] | None = None, replicas: int | None = None) -> list[int]:
        """Gradient reduction of one unit's state group: every micro-batch for ZeRO-2/3, else after the
        last one. ZeRO-3 reduce-scatters it in `sizes` pieces (parameters each; default: one), each after
        n copies of its inputs when the stack passes a list of one tensor per rank (`reduce_peer_copies`), or
        after one copy of the gradients into a buffer of the reduce dtype on the compute stream `copy` (its
        stream id and the stage's compute seconds by kind) where the stack copies them in (`reduce_copy_in`).
        With hybrid sharding the shard is then all-reduced over the replicas, on the stream `replicas` when the
        stack gives that all-reduce a stream of its own (`replica_reduce_stream`), else on `stream`.
        Without overlap (`dp_overlap=0`) a reduction after the last micro-batch waits for the whole backward;
        one every micro-batch (ZeRO-2/3) runs at once, and the caller makes the compute stream wait for it:
        deferring it to the end would put it, in its stream's order, before the next micro-batch's weight
        gathers that the backward itself waits for (a cycle)."""
        size = trainable * data.reduce_bytes
        per_microbatch = data.zero >= 2
        if not trainable or not (per_microbatch or last_microbatch) or (data.shard == 1 and data.replicas == 1):
            return []
        deps = (after,) if data.overlap or per_microbatch else ()  # deferred ones wait in `_finish_stage`
        segs = []
        if data.zero == 0:
            segs.append(self.comm(stream, Collective.ALL_REDUCE, size, data.grad_span, group, deps))
        else:
            if data.shard > 1:
                pieces = sizes or (trainable,)  # `_reduce_sizes`: one piece below ZeRO-3
                stack = self.plan.stack
                copies = data.zero >= 3 and stack is not None and stack.reduce_peer_copies
                if data.zero >= 3 and stack is not None and stack.reduce_copy_in and copy is not None:
                    # the gradients read in the training dtype, written in the reduce dtype, before the collective
                    seconds = self.compute.memory_s(trainable * (data.grad_bytes + data.reduce_bytes))
                    deps = (self.prog.add(copy[0], seconds, deps, category=REDUCE_COPY, label="reduce copy-in"),)
                    copy[1][REDUCE_COPY] += seconds
                for piece in pieces:
                    if copies:
                        share = piece * data.reduce_bytes / data.shard
                        segs.append(self.prog.add(stream, data.shard * self.compute.memory_s(2 * share), deps,
                                                  category=f"{group}.reduce_copies", label=f"{group} reduce copies"))
                        deps = (segs[-1],)
                    segs.append(self.comm(stream, Collective.REDUCE_SCATTER, piece * data.reduce_bytes,
                                          data.shard_span, group, deps))
                    deps = (segs[-1],)
            if last_microbatch and data.replicas > 1:
                segs.append(self.comm(stream if replicas is None else replicas, Collective.ALL_REDUCE,
                                      size / data.shard, data.replica_span, group, (segs[-1],) if segs else deps))
        if not data.overlap and not per_microbatch and segs:
            # after the whole backward; ZeRO-2/3 reduce in place (the caller waits)
            self.deferred.setdefault(stream, segs[0])
        return segs

    def _replica_stream(self, streams: _Streams, group: str) -> int | None:
        """The stream of the all-reduce over the replicas of `group` when the stack runs it beside the shard
        group's collectives (FSDP2's all_reduce_stream), else None (after them, on the group's stream)."""
        stack = self.plan.stack
        return streams[f"{group}.replicas"] if stack is not None and stack.replica_reduce_stream else None

    def _send(self, pp_stream: int, phase: Phase, virtual: int, mb: int, after: int) -> None:
        """The activation (forward) or its gradient (backward) sent to the neighbouring virtual stage."""
        last = self.num_virtual - 1
        if (phase is Phase.FORWARD and virtual == last) or (phase is Phase.BACKWARD and virtual == 0):
            self.send[(phase, virtual, mb)] = after
            return
        plan = self.plan
        sent = self.comm(pp_stream, Collective.SEND_RECV, plan.p2p_bytes, p2p_span(plan.pp_span), PP, (after,))
        if plan.p2p_gather_bytes:  # a scattered send: the receiving TP group all-gathers the pieces
            sent = self.comm(pp_stream, Collective.ALL_GATHER, plan.p2p_gather_bytes, plan.p2p_gather_span, PP, (sent,))
        self.send[(phase, virtual, mb)] = sent

    def _finish_stage(self, stage: int, streams: _Streams, grad_segments: list[int], last_compute: int) -> None:
        plan, prog = self.plan, self.prog
        # Each stream's first deferred reduction waits for the backward's end, the rest follow it in stream
        # order (the dense group's and the experts' reductions run on streams of their own: waiting on the
        # first of all of them alone let the experts' start at time 0).
        for first in self.deferred.values():
            prog.wait(first, last_compute)
        self.deferred = {}
        deps = [*list(grad_segments), last_compute]
        if plan.tied_sync_bytes and stage in (0, plan.num_stages - 1):
            deps.append(self.comm(streams[DP], Collective.ALL_REDUCE, plan.tied_sync_bytes, Span(1, 2), PP,
                                  (last_compute,)))
        members = [(plan.units[k], g) for chunk in plan.stages[stage] for k in chunk
                   for g in self._state_groups(plan.units[k])]
        moved = 0.0
        for _, (_, d, _, trainable) in members:
            w, g, o = d.state_bytes_per_param()
            moved += trainable * (2 * o + g + w)
        optimizer_s = self.compute.memory_s(moved) if moved else 0.0
        deps = self._step_end(streams, stage, deps, last_compute)
        opt = prog.add(streams[COMPUTE], optimizer_s, tuple(deps), category="optimizer", label="optimizer step")
        self.out.optimizer_s.append(optimizer_s)
        for unit, (group, d, _, trainable) in members:
            if d.zero in (1, 2) and not d.overlap and d.shard > 1 and trainable:
                width = unit.gather_width(group, d, trainable, trainable=True)
                self.comm(streams[group], Collective.ALL_GATHER, trainable * width, d.shard_span, group, (opt,))

    def _step_end(self, streams: _Streams, stage: int, deps: list[int], last_compute: int) -> list[int]:
        """The step's work outside the passes' kernels (`madmax.program.step_end`): the last stage's loss
        all-reduce, the gradient-norm all-reduce once every stage's gradients are ready (`link_step_end`),
        the host's synchronisation that the optimizer step waits for, and beside the optimizer's kernels the
        host's data loading and logging. Returns what the optimizer step waits for."""
        costs, prog = self.step_end, self.prog
        if not self.trains:  # inference: no loss to log, no gradients, no optimizer step
            return deps
        if stage == self.plan.num_stages - 1:
            self.comm(streams[STEP], Collective.ALL_REDUCE, costs.loss_bytes, costs.loss_span, STEP, (last_compute,))
        ready = prog.add(streams[STEP], 0.0, tuple(deps), category="sync", label="gradients ready")
        norm = self.comm(streams[STEP], Collective.ALL_REDUCE, costs.grad_norm_bytes, costs.norm_span, STEP, (ready,))
        self.step_ready.append((ready, norm))
        sync = prog.add(streams[HOST], costs.host_sync_s, (norm,), category="host", label="host sync, optimizer launch")
        prog.add(streams[HOST], costs.host_beside_s, (sync,), category="host", label="data loading and logging")
        return [sync]

    def link_step_end(self) -> None:
        """The gradient norm is one all-reduce over every stage: each stage's starts when all are ready."""
        for _, norm in self.step_ready:
            for ready, _ in self.step_ready:
                self.prog.wait(norm, ready)

    def link_pipeline(self) -> None:
        """Forward of virtual stage v waits for v-1's send; backward of v waits for v+1's."""
        last = self.num_virtual - 1
        for (phase, virtual, mb), seg in self.first.items():
            if phase is Phase.FORWARD and virtual > 0:
                self.prog.wait(seg, self.send[(Phase.FORWARD, virtual - 1, mb)])
            elif phase is Phase.BACKWARD and virtual < last:
                self.prog.wait(seg, self.send[(Phase.BACKWARD, virtual + 1, mb)])


def _prefetch_start(stack, done: list[int]) -> tuple[int, ...]:
    """What a ZeRO-3 gather issued at the pass about to run waits for: nothing without a prefetch limit (the
    stream permitting), else the end of the compute `prefetch_units` passes before it."""
    depth = stack.prefetch_units if stack is not None else None
    return (done[-depth - 1],) if depth is not None and len(done) > depth else ()


class _ZeroGathers:
    """ZeRO-3's weight gathers of one stage, pass by pass, as the stack issues them.

    Without a prefetch limit (None) or with 0, a pass's gathers are issued when it comes (after the compute
    before it, with 0). With a limit d >= 1 (FSDP: `prefetch_units`), the pass about to run issues the gathers
    of the passes up to d ahead, each starting once the compute before this pass has ended: the gather of
    pass i + d starts when pass i does, and it is queued on the group's stream before the gradient
    reduce-scatter of pass i, as FSDP issues the next unit's all-gather in the pre-backward (or pre-forward)
    hook and the reduce-scatter in the post-backward hook, on one NCCL communicator that runs them in order.
    A unit of the stack's `no_backward_gather` gathers nothing in its backward. With `gather_copy_out` a pass
    first copies its gathered weights out of the flat buffer on the compute stream.
    """

    def __init__(self, builder: _Builder, streams: _Streams, stage: int) -> None:
        plan = builder.plan
        self.builder, self.streams, self.stack = builder, streams, plan.stack
        self.depth = self.stack.prefetch_units if self.stack is not None else None
        kept = set(self.stack.no_backward_gather) if self.stack is not None else set()
        chunks = plan.stages[stage]
        last_layer = None  # (chunk, position) of the model's last transformer layer, when this stage holds it
        if stage == plan.num_stages - 1:
            layers = [i for i, key in enumerate(chunks[-1]) if plan.units[key].placement is Placement.LAYERS]
            last_layer = (len(chunks) - 1, layers[-1]) if layers else None
        self.units: list[UnitPlan | None] = []  # per pass in the builder's order: the unit whose weights it gathers
        for step in schedule(stage, plan.strategy.pp, plan.strategy.vp, plan.microbatches):
            positions = range(len(chunks[step.chunk]))
            for pos in positions if step.phase is Phase.FORWARD else reversed(positions):
                unit = plan.units[chunks[step.chunk][pos]]
                if step.phase is Phase.BACKWARD and not unit.has_backward:
                    continue
                skip = step.phase is Phase.BACKWARD and (
                    (KeptUnit.FIRST in kept and unit.placement is Placement.FIRST)
                    or (KeptUnit.LAST in kept and unit.placement is Placement.LAST)
                    or (KeptUnit.LAST_LAYER in kept and (step.chunk, pos) == last_layer))
                self.units.append(unit if unit.params > 0 and not skip else None)
        self.issued: dict[int, tuple[list[int], float]] = {}
        self.next = 0

    def before_pass(self, deps: list[int], done: list[int], by_kind: dict[str, float]) -> list[int]:
        """What the pass about to run waits for: `deps` and its gathers (or the copy-out after them); issues the
        gathers of the passes up to `prefetch_units` ahead. `done`: the last segment of each pass so far."""
        i, self.next = self.next, self.next + 1
        builder = self.builder
        start = (done[-1],) if self.depth is not None and done else ()
        for j in range(i, min(i + (self.depth or 0), len(self.units) - 1) + 1):
            unit = self.units[j]
            if j not in self.issued and unit is not None:
                self.issued[j] = builder._weight_gathers(self.streams, unit, start)
        segs, moved = self.issued.pop(i, ([], 0.0))
        if not segs:
            return deps
        if self.stack is not None and self.stack.gather_copy_out and moved:
            seconds = builder.compute.memory_s(2 * moved)  # the flat buffer read, the parameters written
            by_kind[GATHER_COPY] += seconds
            return [builder.prog.add(self.streams[COMPUTE], seconds, (*deps, *segs), category=GATHER_COPY,
                                     label="gather copy-out")]
        return [*deps, *segs]


def p2p_span(pp_span: Span) -> Span:
    """Neighbouring stages: within a domain when the pipeline group has ranks inside one."""
    return Span(2, 1) if pp_span.intra > 1 else Span(1, 2)
