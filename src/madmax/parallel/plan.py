"""The plan: a workload under a strategy, as per-rank units, pipeline stages and data-parallel traffic.

The order of the transforms is written once, here: tensor (+ sequence) parallelism and context
parallelism shard each op into per-rank kernels (`tensor`, `context`); recompute decides what is kept
and what is redone; the pipeline splits the blocks into stages (`pipeline`); data parallelism and
ZeRO/FSDP decide how gradients and weights travel (`data`). Timing is not done here: `madmax.engine`
costs the plan and simulates it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from functools import cached_property

from madmax.collective import Collective, Span
from madmax.config import pipeline_layout as layout
from madmax.config.base import DType
from madmax.config.strategy import Axis, Recompute, Strategy
from madmax.config.task import ExpertLoad
from madmax.config.training_stack import ExchangeDType, ExpertGemm, OpRole, TrainingStack, load_training_stack
from madmax.errors import StrategyError
from madmax.parallel import experts
from madmax.parallel.context import ring_kv
from madmax.parallel.data import DataParallelPlan, data_parallel_plan
from madmax.parallel.formats import high_precision, low_precision, tensor_bytes
from madmax.parallel.kernels import CommOp, Kernel, KernelKind, Phase, Where
from madmax.parallel.placement import span
from madmax.parallel.stack_kernels import cast_kernels, kernels_of, role_kernels
from madmax.parallel.tensor import (
    Shape,
    backward_kernels,
    cast_cache_bytes,
    cast_sites,
    forward_kernels,
    primary_cast_params,
    saved_bytes,
    weight_cast_kernels,
)
from madmax.workload.ops import EXPERT_SPLITS, Block, Op, OpKind, Placement, TPSplit, Workload

# Megatron's vocabulary-parallel cross-entropy all-reduces three per-token fp32 values over tp
# (the logit max, the target logit and the sum of exponentials).
CROSS_ENTROPY_ALL_REDUCES = 3
# The process group (stream) of the embedding tables' exchanges: ids, pooled vectors and their gradients.
EMBEDDING_GROUP = "emb"
PREFETCH_GROUP = "prefetch"  # the next iteration's embedding ids, on a stream of their own (Where.AHEAD)
TP_GROUP = Axis.TP.value
# The process groups (streams) that reduce gradients: the dense parameters' (dp x cp) and the routed
# experts' (expert data parallel).
DATA_GROUP, EXPERT_DATA_GROUP = Axis.DP.value, "edp"
# Key suffix of a layer's full-recompute variant when only the first recompute_layers of a chunk redo theirs.
RECOMPUTED_SUFFIX = "_recompute"
# Key suffix of a layer kept in bf16 under a low-precision format (the first and last layers of its recipe).
HIGH_PRECISION_SUFFIX = "_bf16"
ONE_RANK = Span(1, 1)


@dataclass(frozen=True)
class UnitPlan:
    """One block instance (a layer, the embedding or the head) on one rank for one micro-batch.

    comm: every collective of the unit, each tagged with its pass and its place relative to the unit's
    kernels (`Where`): TP collectives after a pass, the CP ring beside the attention, embedding
    exchanges before the forward or to the consuming unit (`edge_to`), sparse-optimizer traffic once
    per iteration.
    """

    name: str
    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]
    recompute: tuple[Kernel, ...]
    comm: tuple[CommOp, ...]
    params: float
    trainable_params: float
    saved_bytes: float
    working_bytes: float
    is_layer: bool
    placement: Placement = Placement.LAYERS
    # Embedding tables (sharded by the embedding plan, not ZeRO): bytes of tables and optimizer state
    # on the worst rank; their optimizer runs fused in the backward pass.
    state_bytes: float = 0.0
    edge_to: str | None = None  # the unit that consumes this one's TO_CONSUMER exchange
    info: tuple[tuple[str, object], ...] = ()  # what the unit's plan reports (e.g. table load imbalance)
    # The routed experts' share of `params` / `trainable_params`: their gradients travel over the
    # expert-data-parallel ranks (`Plan.expert_data`), not the dense ones.
    expert_params: float = 0.0
    expert_trainable_params: float = 0.0
    # ZeRO-3: parameters of each all-gather of the dense state when the stack gathers per parameter tensor
    # (`TrainingStack.gather_sizes`); None: one gather of the whole unit.
    gathers: tuple[float, ...] | None = None
    # Low-precision GEMMs: bytes of the cast weight copies (and delayed-scaling amax histories) kept all step.
    cast_cache_bytes: float = 0.0
    # Weights kept in the low-precision format only (strategy fp8_params): bytes by which a gather of the
    # dense part and of the experts' part is smaller than at the data plan's width, P (a - q) each, over all
    # their parameters and over the trainable ones.
    gather_discount: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0), (0.0, 0.0))

    def state_groups(self, plan: Plan) -> tuple[tuple[str, DataParallelPlan, float, float], ...]:
        """(process group, data-parallel plan, parameters, trainable parameters) of the unit's dense part
        ("dp") and, when it has routed experts, of its experts ("edp", their own group); groups without
        parameters are left out."""
        dense_params = self.params - self.expert_params
        out = [(DATA_GROUP, plan.data, dense_params, self.trainable_params - self.expert_trainable_params)
               ] if dense_params else []
        if self.expert_params:
            assert plan.expert_data is not None
            out.append((EXPERT_DATA_GROUP, plan.expert_data, self.expert_params, self.expert_trainable_params))
        return tuple(out)

    def gather_width(self, group: str, data: DataParallelPlan, params: float, trainable: bool = False) -> float:
        """Mean bytes per parameter that a gather of the unit's `group` part (`params` of them: all, or the
        trainable ones after an optimizer step) moves: the data plan's width, less the weights kept in the
        low-precision format only (`gather_discount`)."""
        discount = self.gather_discount[group == EXPERT_DATA_GROUP][trainable]
        return data.weight_bytes - discount / params if params else data.weight_bytes

    @property
    def has_backward(self) -> bool:
        return bool(self.bwd)

    @cached_property
    def _comm_by_place(self) -> dict[tuple[Phase, Where], tuple[CommOp, ...]]:
        by: dict[tuple[Phase, Where], list[CommOp]] = {}
        for op in self.comm:
            by.setdefault((op.phase, op.where), []).append(op)
        return {key: tuple(ops) for key, ops in by.items()}

    def collectives(self, phase: Phase, where: Where) -> tuple[CommOp, ...]:
        """The unit's collectives of one pass at one place, in the order they run."""
        return self._comm_by_place.get((phase, where), ())

    @property
    def has_exchanges(self) -> bool:
        """Whether the unit exchanges data with other units (before, to a consumer, at the update)."""
        return any(op.where in (Where.BEFORE, Where.AHEAD, Where.TO_CONSUMER, Where.UPDATE, Where.ON_GRADIENT)
                   for op in self.comm)


@dataclass(frozen=True)
class Plan:
    """Everything the engine needs to time one iteration of one strategy."""

    strategy: Strategy
    dtype: DType
    seq_len: int
    global_batch: int
    microbatches: int
    units: dict[str, UnitPlan]
    stages: tuple[tuple[tuple[str, ...], ...], ...]
    data: DataParallelPlan
    pp_span: Span
    p2p_bytes: float
    tied_sync_bytes: float
    act_bytes: float
    expert_data: DataParallelPlan | None = None  # the routed experts' gradients and state (MoE only)
    stack: TrainingStack | None = None  # the training framework (None: the default, Megatron-Core)
    # A stack that scatters each pipeline send over the TP ranks (`TrainingStack.pipeline_scatter_gather`): the
    # bytes the receiving stage's TP group all-gathers after it, and that group; 0 when sends are whole.
    p2p_gather_bytes: float = 0.0
    p2p_gather_span: Span = ONE_RANK

    @property
    def num_stages(self) -> int:
        return len(self.stages)


def build_plan(workload: Workload, strategy: Strategy, *, domain_size: int, seq_len: int, global_batch: int,
               dtype: DType, table_budget_bytes: float | None = None, routing: ExpertLoad | None = None,
               stack: TrainingStack | None = None) -> Plan:
    """Plan of a resolved strategy (dp filled in, rules checked by `resolve_strategy`).

    table_budget_bytes: HBM per rank that embedding tables and their optimizer state may use before
    the rest is offloaded to host memory (None: unlimited). routing: how unevenly the routed experts'
    ranks are loaded (None: balanced). stack: the training framework whose kernels, weight casts and ZeRO-3
    gathers the units get (None: Megatron-Core, the workload's kernels as they are).
    """
    s = strategy
    stack = stack or load_training_stack()
    routed = next((op for b in workload.blocks for op in b.ops if op.experts), None)
    expert_load = routing.factor(routed.experts, s.ep) if routing and routed else 1.0
    fmt = low_precision(dtype)
    act_bytes = tensor_bytes(dtype)
    microbatches = global_batch // (s.dp * s.mbs)
    # Weights cast once per step (the first micro-batch's forward) are costed as 1/m of a cast per micro-batch.
    casts = 1 / microbatches if fmt and fmt.weight_cache else 1.0
    if s.fp8_params and dtype is not DType.FP8:
        raise StrategyError(f"strategy.fp8_params needs dtype=fp8 (fp8 primary weights with per-tensor scaling); "
                            f"got dtype={dtype}; allowed with it: fp8_params=0")
    if s.fp8_params and s.zero >= 3:
        raise StrategyError("strategy.fp8_params is modelled with the distributed optimizer's fp8 parameter "
                            f"gather (zero <= 2), not with ZeRO-3's sharded weights; got zero={s.zero}; allowed "
                            "with it: zero=0, 1 or 2")
    shape = Shape(batch=s.mbs, seq_len=seq_len, tp=s.tp, cp=s.cp, sp=s.sequence_parallel, act_bytes=act_bytes,
                  cast=fmt, weight_casts=casts, primary_cast=s.fp8_params, ep=s.ep, etp=s.etp,
                  expert_load=expert_load, expert_multi_stream=stack.expert_gemm is ExpertGemm.MULTI_STREAM)
    # Outside the transformer layers (the LM head) and in the layers the recipe keeps: bf16 GEMMs, no casts.
    high = dataclasses.replace(shape, cast=None, gemm_dtype=high_precision()) if fmt else shape
    tp_span = span(s, (Axis.TP,), domain_size)
    cp_span = span(s, (Axis.CP,), domain_size)
    moe_spans = experts.spans(s, domain_size)
    # A strategy whose recompute is still unset (the API chooses it first) keeps every activation.
    mode = s.recompute or Recompute.NONE
    partial = mode is Recompute.FULL and s.recompute_layers is not None
    recomputed: dict[str, UnitPlan] = {}  # with recompute_layers: the full-recompute variant of each layer

    def unit(key: str, block: Block, block_shape: Shape, needs_backward: bool) -> UnitPlan:
        """A block's unit; with recompute_layers, a layer's full-recompute variant goes to `recomputed`."""
        if partial and block.is_layer:
            recomputed[key] = _unit(key, block, block_shape, s, tp_span, cp_span, moe_spans,
                                    needs_backward=needs_backward, recompute=Recompute.FULL, stack=stack)
        return _unit(key, block, block_shape, s, tp_span, cp_span, moe_spans, needs_backward=needs_backward,
                     recompute=Recompute.NONE if partial else mode, stack=stack)

    trainable_seen = False
    units: dict[str, UnitPlan] = {}
    order: list[str] = []
    for block in workload.blocks:
        trainable_seen = trainable_seen or any(op.trainable for op in block.ops)
        key = _unit_key(block)
        if any(op.tp is TPSplit.TABLE for op in block.ops):
            units[key] = table_unit(key, block, workload.tables, s, shape, domain_size, table_budget_bytes,
                                    tp_span, stack)
        else:
            block_shape = shape if _transformer(block) else high
            if block.per_sequence:  # a classifier on each sequence's pooled token: b rows, not b*s/cp
                block_shape = dataclasses.replace(block_shape, seq_len=block_shape.cp)
            units[key] = unit(key, block, block_shape, trainable_seen)
        order += [key] * block.count
    units = _with_edges(units, workload)
    if fmt and (fmt.bf16_first or fmt.bf16_last):
        def kept(key: str, block: Block) -> UnitPlan:
            """A layer the recipe keeps in bf16 (with recompute_layers, also its recomputing variant)."""
            return unit(key, block, high, needs_backward=True)
        order = _high_precision_ends(units, order, fmt.bf16_first, fmt.bf16_last, kept, workload)
    data = _with_reduce_dtype(data_parallel_plan(s, domain_size, dtype), stack)
    stages = _stages(units, order, s)
    if partial:
        units, stages = _recompute_first(units, recomputed, stages, s.recompute_layers)
    p2p = shape.tokens * workload_hidden(workload) * act_bytes / (s.tp if s.sequence_parallel else 1)
    # Sequence parallelism already splits the activation over the TP ranks; otherwise a scattering stack sends
    # 1/tp of it from each rank and the next stage's TP group all-gathers it.
    scatter = stack.pipeline_scatter_gather and s.pp > 1 and s.tp > 1 and not s.sequence_parallel
    gather, p2p = (p2p, p2p / s.tp) if scatter else (0.0, p2p)
    tied = workload.tied_params / s.tp * act_bytes if (workload.tied_params and s.pp > 1) else 0.0
    expert_data = (_with_reduce_dtype(data_parallel_plan(s, domain_size, dtype, grad_span=moe_spans.edp), stack)
                   if any(u.expert_params for u in units.values()) else None)
    return Plan(strategy=s, dtype=dtype, seq_len=seq_len, global_batch=global_batch,
                microbatches=microbatches, units=units, stages=stages, data=data,
                pp_span=span(s, (Axis.PP,), domain_size), p2p_bytes=p2p, tied_sync_bytes=tied,
                act_bytes=act_bytes, expert_data=expert_data, stack=stack, p2p_gather_bytes=gather,
                p2p_gather_span=tp_span)


def _with_reduce_dtype(data: DataParallelPlan, stack: TrainingStack) -> DataParallelPlan:
    """The data-parallel plan with the gradients reduced in the stack's reduce dtype (fp32: 4 bytes each)."""
    wire = stack.reduce_bytes(data.grad_bytes)
    return data if wire == data.grad_bytes else dataclasses.replace(data, reduce_elem_bytes=wire)


def _unit_key(block: Block) -> str:
    """The key of a block's unit: its name, suffixed for a frozen layer (the trainable one may share its name)."""
    return block.name if block.trainable or not block.is_layer else f"{block.name}_frozen"


def _transformer(block: Block) -> bool:
    """Whether a block runs transformer layers (Transformer Engine modules, in the low-precision format): the
    layers and the multi-token-prediction layers; not the embedding or the head."""
    return block.is_layer or any(op.kind is OpKind.ATTENTION for op in block.ops)


def _high_precision_ends(units: dict[str, UnitPlan], order: list[str], first: int, last: int, build,
                         workload: Workload) -> list[str]:
    """The execution order with the first `first` and last `last` transformer layers kept in bf16: units of
    their own (key + HIGH_PRECISION_SUFFIX, made by `build(key, block)` and added to `units`), as Megatron's
    --first-last-layers-bf16 and the NVFP4 recipe keep them. Frozen layers stay as they are (no gradients)."""
    blocks = {_unit_key(b): b for b in workload.blocks}
    layers = [i for i, key in enumerate(order) if units[key].placement is Placement.LAYERS]
    ends = set(layers[:first]) | set(layers[max(len(layers) - last, 0):])
    out = list(order)
    for i in sorted(ends):
        key = order[i]
        if not blocks[key].trainable:
            continue
        out[i] = key + HIGH_PRECISION_SUFFIX
        if out[i] not in units:
            units[out[i]] = build(out[i], blocks[key])
    return out


def _with_edges(units: dict[str, UnitPlan], workload: Workload) -> dict[str, UnitPlan]:
    """Point each unit with an output exchange (TO_CONSUMER) at the first later block that consumes it."""
    names = [b.name for b in workload.blocks]
    keys = list(units)
    out = dict(units)
    for i, key in enumerate(keys):
        if not units[key].collectives(Phase.FORWARD, Where.TO_CONSUMER):
            continue
        for later, block in zip(keys[i + 1:], workload.blocks[i + 1:], strict=True):
            consumed = block.consumes if block.consumes is not None else (names[names.index(block.name) - 1],)
            if workload.blocks[i].name in consumed:
                out[key] = dataclasses.replace(units[key], edge_to=later)
                break
        else:
            raise AssertionError(f"no block consumes the output of {key}")
    return out


def table_unit(key: str, block: Block, tables: tuple, s: Strategy, shape: Shape, domain_size: int,
               budget_bytes: float | None, tp_span: Span, stack: TrainingStack | None = None) -> UnitPlan:
    """Embedding tables placed by the embedding-sharding plan (`parallel.embedding`), worst rank.

    Forward: the rank's lookups (a memory-bound gather of its pieces' rows for the samples it serves)
    after the ids reach their owners; the pooled vectors then travel to the ranks that own the samples
    (edge to the interaction). Backward: the pooled gradients travel back, then the fused backward and
    optimizer update the rows looked up. Offloaded rows cross the host link on every lookup.
    With tensor parallelism the tables shard over all dp x tp ranks; each TP rank looks up 1/tp of its
    replica's micro-batch and the TP group all-gathers the pooled vectors, since every TP rank runs the
    interaction on the whole micro-batch (its backward is a split, no exchange).
    The stack decides the format of the exchanged pooled vectors and whether the backward's sparse update
    runs fused (`TrainingStack.embedding_exchange`, `unfused[embedding]`). Offloaded rows' host-link time
    comes first in each pass: the queue waits for it (`madmax.program.costs.pass_cost`).
    """
    from madmax.parallel import embedding as emb

    stack = stack or load_training_stack()

    ranks = (s.dp or 1) * s.tp
    if shape.batch % s.tp:
        raise StrategyError(f"strategy.tp={s.tp} does not divide the micro-batch of {shape.batch} samples whose "
                            f"embeddings its ranks look up; allowed: a tp dividing {shape.batch}")
    local = shape.batch // s.tp
    shardings = _table_shardings(tables, s.emb)
    _check_hybrid_keys(s, shardings)
    exchanged = shape.act_bytes if stack.embedding_exchange is ExchangeDType.COMPUTE else None
    strategy = emb.EmbeddingStrategy(num_ranks=ranks, ranks_per_node=min(domain_size, ranks),
                                     sharding=shardings, group_size=s.emb_group,
                                     balance=emb.Balance(s.emb_balance),
                                     hbm_budget_bytes=budget_bytes,
                                     output_bytes=exchanged, hot_threshold=s.emb_hot, local_batch=local,
                                     cold=emb.ShardingType(s.emb_cold), dp_max_bytes=s.emb_dp_bytes,
                                     shard_cost=s.emb_shard_cost or 0.0, grad_bytes=exchanged,
                                     index_bytes=stack.embedding_id_bytes,
                                     optimizer=emb.EmbeddingOptimizer(stack.embedding_optimizer))
    plan = _shard(tuple(emb.Table(t.rows, t.dim, t.pooling, t.elem_bytes, t.name, t.zipf) for t in tables), strategy)
    trains = any(op.trainable for op in block.ops)
    worst = max(range(len(plan.lookup_bytes_per_sample)), key=lambda r: plan.lookup_bytes_per_sample[r])
    fwd = [Kernel(KernelKind.MEMORY, "embedding", num_bytes=local * plan.lookup_bytes_per_sample[worst])]
    bwd = role_kernels(stack, OpRole.EMBEDDING, [Kernel(KernelKind.MEMORY, "embedding",
                                                        num_bytes=local * plan.update_bytes_per_sample[worst])])
    host = local * max(plan.host_bytes_per_sample)
    if host:
        fwd.insert(0, Kernel(KernelKind.HOST, "embedding_offload", num_bytes=host))
        bwd.insert(0, Kernel(KernelKind.HOST, "embedding_offload",
                             num_bytes=local * max(plan.host_update_bytes_per_sample)))
    if not trains:  # inference: lookups only, no optimizer state
        bwd = []
    # The ids and pooled vectors travel on the embedding exchange's own stream ("emb"), beside the bottom
    # MLP (the next batch's ids on one more, "prefetch", where the stack sends them a step ahead); the sparse
    # optimizer's traffic joins the gradient reduction ("dp"), the replicated tables' as soon as the pooled
    # gradient is back (it needs nothing of the model-parallel exchange).
    comm: list[CommOp] = []
    for c in emb.comm(plan, local):
        if not trains and c.phase != "forward":
            continue
        if c.label == "emb.ids_a2a" and stack.embedding_ids_ahead:
            comm.append(CommOp(PREFETCH_GROUP, c.kind, c.size_bytes, c.span, c.label, Phase.FORWARD, Where.AHEAD))
        elif c.label == "emb.ids_a2a":
            comm.append(CommOp(EMBEDDING_GROUP, c.kind, c.size_bytes, c.span, c.label, Phase.FORWARD, Where.BEFORE))
        elif c.label == "emb.dp_all_reduce":  # the replicated rows' gradient needs only the pooled gradient
            comm.append(CommOp("dp", c.kind, c.size_bytes, c.span, c.label, Phase.BACKWARD, Where.ON_GRADIENT))
        elif c.phase == "update":
            comm.append(CommOp("dp", c.kind, c.size_bytes, c.span, c.label, Phase.BACKWARD, Where.UPDATE))
        else:
            phase = Phase.FORWARD if c.phase == "forward" else Phase.BACKWARD
            comm.append(CommOp(EMBEDDING_GROUP, c.kind, c.size_bytes, c.span, c.label, phase, Where.TO_CONSUMER))
    if s.tp > 1:
        pooled = shape.batch * sum(t.dim * t.elem_bytes for t in tables)
        comm.append(CommOp(EMBEDDING_GROUP, Collective.ALL_GATHER, pooled, tp_span, "emb.tp_all_gather",
                           Phase.FORWARD, Where.TO_CONSUMER))
    if not any(op.where is Where.TO_CONSUMER for op in comm):  # every table replicated: no gradient comes back
        comm = [dataclasses.replace(op, where=Where.UPDATE) if op.where is Where.ON_GRADIENT else op for op in comm]
    state = max(plan.table_bytes[r] + (plan.optimizer_bytes[r] if trains else 0) - plan.offloaded_bytes[r]
                for r in range(len(plan.table_bytes)))
    return UnitPlan(name=key, fwd=tuple(fwd), bwd=tuple(bwd), recompute=(), comm=tuple(comm), params=0.0,
                    trainable_params=0.0, saved_bytes=0.0, working_bytes=0.0, is_layer=False,
                    placement=block.placement, state_bytes=state,
                    info=(("sharding", s.emb), ("group", strategy.group), ("size_imbalance", plan.size_imbalance),
                          ("lookup_imbalance", plan.lookup_imbalance),
                          ("offloaded_bytes_per_gpu", max(plan.offloaded_bytes))))


def _table_shardings(tables: tuple, default: str):
    """One sharding for all tables (the strategy's `emb`), or per table where the model names one."""
    from madmax.parallel import embedding as emb

    if not any(t.sharding for t in tables):
        return emb.ShardingType(default)
    return tuple(emb.ShardingType(t.sharding or default) for t in tables)


def _check_hybrid_keys(s: Strategy, shardings) -> None:
    """StrategyError for a hybrid-only key given where no table is sharded hybrid, or for both ways of choosing
    the replicated rows at once."""
    from madmax.parallel import embedding as emb

    hybrid = emb.ShardingType.HYBRID in (shardings if isinstance(shardings, tuple) else (shardings,))
    given = {"emb_hot": s.emb_hot is not None, "emb_dp_bytes": s.emb_dp_bytes is not None,
             "emb_cold": s.emb_cold != "tw", "emb_shard_cost": s.emb_shard_cost is not None}
    for key, set_ in given.items():
        if set_ and not hybrid:
            raise StrategyError(f"strategy.{key}={getattr(s, key)} applies to hybrid sharding; emb={s.emb} shards "
                                "no table hybrid; allowed: emb=hybrid, or omit it")
    if given["emb_shard_cost"] and s.emb_balance != "lookup":
        raise StrategyError(f"strategy.emb_shard_cost={s.emb_shard_cost:g} weighs the lookup balance; "
                            f"emb_balance={s.emb_balance}; allowed: emb_balance=lookup, or omit it")
    if given["emb_hot"] and given["emb_dp_bytes"]:
        raise StrategyError(f"strategy.emb_hot={s.emb_hot:g} and emb_dp_bytes={s.emb_dp_bytes:g} both choose the "
                            "replicated rows; allowed: one of them")


@functools.lru_cache(maxsize=256)
def _shard(tables: tuple, strategy):
    """The embedding plan, cached: the same tables and sharding recur across ZeRO and batch variants."""
    from madmax.parallel import embedding as emb

    return emb.shard(tables, strategy)


def workload_hidden(workload: Workload) -> int:
    """Width of the activations passed between pipeline stages (the embedding output width)."""
    for block in workload.blocks:
        for op in block.ops:
            if op.kind is OpKind.EMBEDDING:
                return op.n
    raise AssertionError("workload without an embedding")


def _stages(units: dict[str, UnitPlan], order: list[str], s: Strategy) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Units of each stage's local chunks; virtual chunk v runs on stage v % pp as its chunk v // pp.

    The chunks follow the strategy's pipeline layout (`layout.pipeline_layout`: its pp_layout, the
    pp_embedding/pp_loss split, else the even split): 'E' places the FIRST units (embedding), each 't' the
    next LAYERS unit, each 'm' the next MTP unit and 'L' the head (final norm, LM head, loss). The LAST
    units are the MTP layers, then the head. A chunk may hold no unit at all (Megatron allows "E||t|L").
    """
    pp, vp = s.pp, s.vp
    firsts = [k for k in order if units[k].placement is Placement.FIRST]
    layers = iter([k for k in order if units[k].placement is Placement.LAYERS])
    lasts = [k for k in order if units[k].placement is Placement.LAST]
    mtps, heads = iter(lasts[:-1]), lasts[-1:]
    chunks_of = layout.pipeline_layout(pp, vp, sum(units[k].placement is Placement.LAYERS for k in order),
                                       text=s.pp_layout, embedding=s.pp_embedding, loss=s.pp_loss,
                                       mtp_layers=max(len(lasts) - 1, 0))
    if len(chunks_of) == 1:  # one chunk: every unit in execution order
        return ((tuple(order),),)
    place = {layout.EMBEDDING: lambda: firsts, layout.LAYER: lambda: [next(layers)],
             layout.MTP: lambda: [next(mtps)], layout.LOSS: lambda: heads}
    chunks = [[key for symbol in chunk for key in place[symbol]()] for chunk in chunks_of]
    return tuple(tuple(tuple(chunks[c * pp + stage]) for c in range(vp)) for stage in range(pp))


def largest_chunk_layers(units: dict[str, UnitPlan], stages: tuple[tuple[tuple[str, ...], ...], ...]) -> int:
    """Layers (LAYERS units) of the largest pipeline chunk of `stages`."""
    return max(sum(units[k].placement is Placement.LAYERS for k in chunk) for chunks in stages for chunk in chunks)


def _recompute_first(units: dict[str, UnitPlan], recomputed: dict[str, UnitPlan],
                     stages: tuple[tuple[tuple[str, ...], ...], ...],
                     layers: int) -> tuple[dict[str, UnitPlan], tuple[tuple[tuple[str, ...], ...], ...]]:
    """Megatron's block recompute (recompute_method=block, recompute_num_layers=N): the first N layers of
    each chunk of each stage run their forward again before their backward and keep only their input;
    the others keep all their activations. The recomputing layers are units of their own (key suffixed
    RECOMPUTED_SUFFIX, same name)."""
    most = largest_chunk_layers(units, stages)
    if layers > most:
        raise StrategyError(f"strategy.recompute_layers={layers} exceeds the {most} layers of the largest pipeline "
                            f"chunk; allowed: 1 to {most}")
    out = dict(units)
    out.update({key + RECOMPUTED_SUFFIX: unit for key, unit in recomputed.items()})

    def chunk_keys(chunk: tuple[str, ...]) -> tuple[str, ...]:
        keys, seen = [], 0
        for key in chunk:
            if units[key].placement is Placement.LAYERS and seen < layers:
                seen += 1
                keys.append(key + RECOMPUTED_SUFFIX if key in recomputed else key)
            else:
                keys.append(key)
        return tuple(keys)

    return out, tuple(tuple(chunk_keys(chunk) for chunk in chunks) for chunks in stages)


def _unit(key: str, block: Block, shape: Shape, s: Strategy, tp_span: Span, cp_span: Span,
          moe_spans: experts.ExpertSpans, *, needs_backward: bool, recompute: Recompute,
          stack: TrainingStack) -> UnitPlan:
    """One block's unit; `recompute` is what its layers redo (the strategy's mode, or per layer with
    recompute_layers). `stack` splits unfused element-wise ops into its kernels and adds its weight casts
    (16-bit compute over fp32 weights: each GEMM weight cast in the forward, its gradient in the backward;
    a full recompute, which re-enters autocast, casts again)."""
    flash = s.flash
    rank_params = [_rank_params(op, s) for op in block.ops]
    per_rank = list(zip(block.ops, rank_params, strict=True))
    sites = cast_sites(block.ops, shape.cast)  # where each low-precision GEMM's operands are cast
    fwd = [k for op, (site, _) in zip(block.ops, sites, strict=True)
           for k in (*kernels_of(stack, op, forward_kernels(op, shape, flash=flash, cast=site)),
                     *experts.layer_kernels(block, op, shape, s, stack, backward=False))]
    bwd = ([k for op, (_, site) in zip(block.ops, sites, strict=True)
            for k in (*kernels_of(stack, op, backward_kernels(op, shape, flash=flash, cast=site)),
                      *experts.layer_kernels(block, op, shape, s, stack, backward=True))]
           if needs_backward else [])
    if shape.act_bytes < DType.FP32.num_bytes:
        fwd += cast_kernels(stack, [n for op, n in per_rank if op.kind is OpKind.GEMM])
        bwd += cast_kernels(stack, [n for op, n in per_rank if op.kind is OpKind.GEMM
                                    and op.trainable]) if needs_backward else []
    keeps_s2 = not flash and not (recompute is Recompute.SELECTIVE and block.is_layer)
    # A fused attention that is not recomputed keeps its output for its backward; the GEMM after it (the
    # output projection) saves its own copy only in a low-precision format (`saved_width`).
    attention_kept = flash and not (recompute is Recompute.SELECTIVE and block.is_layer)
    kept_by_producer = [attention_kept and i > 0 and block.ops[i - 1].kind is OpKind.ATTENTION
                        for i in range(len(block.ops))]
    saved = sum(saved_bytes(op, shape, flash=not keeps_s2, input_kept=kept)
                for op, kept in zip(block.ops, kept_by_producer, strict=True)) if needs_backward else 0.0
    tp_fwd, tp_bwd = tp_comm(block, shape, tp_span, gemm_where=Where.WITH_GEMMS if s.tp_overlap else Where.AFTER)
    moe_fwd, moe_bwd = experts.token_exchange(block, shape, s, moe_spans)
    moe_fwd = experts.dispatch_counts(block, s, moe_spans) + moe_fwd
    working = 0.0
    redone: list[Kernel] = []
    if block.is_layer and needs_backward and recompute is Recompute.SELECTIVE:
        redone = [k for op in block.ops if op.kind is OpKind.ATTENTION
                  for k in forward_kernels(op, shape, flash=flash)]
    elif block.is_layer and needs_backward and recompute is Recompute.FULL:
        redone = list(fwd)
        working = saved
        saved = shape.tokens * block.ops[0].saved_elems_per_token * shape.act_bytes / (
            shape.tp if shape.sp else 1)
        # the recomputed forward repeats its collectives before the backward's own
        tp_bwd = [dataclasses.replace(op, phase=Phase.BACKWARD) for op in tp_fwd] + tp_bwd
        moe_bwd = [dataclasses.replace(op, phase=Phase.BACKWARD) for op in moe_fwd] + moe_bwd
    # Low-precision weights are cast in the forward (a recompute reuses the cast copies).
    fwd += weight_cast_kernels(block.ops, rank_params, shape)
    cp_fwd: list[CommOp] = []
    cp_bwd: list[CommOp] = []
    for op in block.ops:
        f, b = ring_kv(op, shape, cp_span)
        cp_fwd += f
        cp_bwd += b if needs_backward else []
    comm = (tuple(tp_fwd) + (tuple(tp_bwd) if needs_backward else ()) + tuple(cp_fwd) + tuple(cp_bwd)
            + tuple(moe_fwd) + (tuple(moe_bwd) if needs_backward else ()))
    expert = [(op, n) for op, n in per_rank if op.tp in EXPERT_SPLITS]
    info = experts.unit_info(block, shape, moe_spans) if expert else ()
    return UnitPlan(name=key, fwd=tuple(fwd), bwd=tuple(bwd), recompute=tuple(redone), comm=comm,
                    params=sum(n for _, n in per_rank), trainable_params=sum(n for op, n in per_rank if op.trainable),
                    saved_bytes=saved, working_bytes=working, is_layer=block.is_layer, placement=block.placement,
                    expert_params=sum(n for _, n in expert),
                    expert_trainable_params=sum(n for op, n in expert if op.trainable), info=info,
                    cast_cache_bytes=cast_cache_bytes(block.ops, rank_params, shape),
                    gather_discount=_gather_discount(block.ops, rank_params, shape),
                    gathers=stack.gather_sizes([(op.params, n) for op, n in per_rank
                                                if op.params and op.tp not in EXPERT_SPLITS]))


def _gather_discount(ops: tuple[Op, ...], params: list[float],
                     shape: Shape) -> tuple[tuple[float, float], tuple[float, float]]:
    """(dense, experts) x (all, trainable): bytes saved per gather of the unit's weights when its
    low-precision GEMMs keep them in the format only, P (a - q) over those parameters of each part."""
    if shape.cast is None or not shape.primary_cast:
        return ((0.0, 0.0), (0.0, 0.0))
    saved = shape.act_bytes - shape.cast.bytes_per_element

    def discount(expert: bool, trainable: bool) -> float:
        part = [(op, n) for op, n in zip(ops, params, strict=True)
                if (op.tp in EXPERT_SPLITS) == expert and (op.trainable or not trainable)]
        return primary_cast_params([op for op, _ in part], [n for _, n in part], shape) * saved

    return ((discount(False, False), discount(False, True)), (discount(True, False), discount(True, True)))


def _rank_params(op: Op, s: Strategy) -> float:
    """Parameters of `op` held by one rank: routed experts split over ep x etp, computed-whole ops not
    split, the rest over tp."""
    if op.tp in EXPERT_SPLITS:
        return op.params / (s.ep * s.etp)
    if op.tp in (TPSplit.SEQUENCE, TPSplit.REPLICATED, TPSplit.DUPLICATED):
        return op.params
    return op.params / s.tp


def tp_comm(block: Block, shape: Shape, tp_span: Span,
            gemm_where: Where = Where.AFTER) -> tuple[list[CommOp], list[CommOp]]:
    """Tensor-parallel collectives of one block per micro-batch, from its ops (Megatron's f and g).

    A column-parallel GEMM opens a TP region, the next row-parallel GEMM closes it (Shoeybi et al. 2019,
    Fig. 3; Korthikanti et al. 2022, Fig. 5). Without sequence parallelism the closer all-reduces its
    T x n output in the forward pass and the opener all-reduces its T x k input gradient in the
    backward; with it, the opener all-gathers T x k (forward) / reduce-scatters its gradient
    (backward) and the closer reduce-scatters T x n (forward) / all-gathers (backward). A region still
    open at the block's end either feeds the vocabulary-parallel loss (three fp32 all-reduces per
    token: max, target logit, sum of exponentials) or is gathered (T x n forward; its backward is a
    split). A vocabulary-parallel embedding reduces its output over tp. In a parallel attention-and-FFN
    layer (GPT-J, Falcon) the attention's output projection `merges_reduction`: both row-parallel
    outputs are summed before one reduction, and the FFN's input is the attention's (no second gather
    forward, its gradient reduced with the first in the backward). gemm_where: the place of the
    collectives that open and close a region (WITH_GEMMS under comm-GEMM overlap); the embedding's and
    the loss's stay AFTER.
    """
    if shape.tp == 1:
        return [], []
    t, b = shape.tokens, shape.act_bytes

    def op(kind: Collective, width: float, label: str, phase: Phase = Phase.FORWARD,
           where: Where = Where.AFTER) -> CommOp:
        return CommOp(TP_GROUP, kind, t * width * b, tp_span, label, phase, where)

    fwd: list[CommOp] = []
    bwd: list[CommOp] = []
    opener = None
    merged = False  # a row-parallel GEMM deferred its reduction to the next one (parallel attention and FFN)
    reduced = False  # the embedding sum (tokens, positions) is reduced once
    back = Phase.BACKWARD
    for o in block.ops:
        if o.kind is OpKind.EMBEDDING and o.tp is TPSplit.VOCAB and not reduced:
            reduced = True
            fwd.append(op(Collective.REDUCE_SCATTER if shape.sp else Collective.ALL_REDUCE, o.n, "tp.embed_out"))
            bwd += [op(Collective.ALL_GATHER, o.n, "tp.embed_grad", back)] if shape.sp else []
        elif o.kind is OpKind.GEMM and o.tp in (TPSplit.COLUMN, TPSplit.DUPLICATED) and opener is None:
            opener = o
            if merged:  # the same input as the region before: already gathered; its gradient reduced with it
                continue
            fwd += [op(Collective.ALL_GATHER, o.k, f"tp.{o.name}_in", where=gemm_where)] if shape.sp else []
            bwd.append(op(Collective.REDUCE_SCATTER if shape.sp else Collective.ALL_REDUCE, o.k,
                          f"tp.{o.name}_in_grad", back, gemm_where))
        elif o.kind is OpKind.GEMM and o.tp is TPSplit.ROW and opener is not None:
            opener = None
            merged = o.merges_reduction
            if merged:  # its partial sum joins the next row-parallel GEMM's before one reduction
                continue
            fwd.append(op(Collective.REDUCE_SCATTER if shape.sp else Collective.ALL_REDUCE, o.n, f"tp.{o.name}_out",
                          where=gemm_where))
            bwd += [op(Collective.ALL_GATHER, o.n, f"tp.{o.name}_out_grad", back, gemm_where)] if shape.sp else []
    if opener is not None:
        if any(o.tp is TPSplit.TP_REGION and o.name.endswith(".loss") for o in block.ops):
            fwd += [CommOp(TP_GROUP, Collective.ALL_REDUCE, t * DType.FP32.num_bytes, tp_span, "tp.loss")
                    for _ in range(CROSS_ENTROPY_ALL_REDUCES)]
        else:
            last = [o for o in block.ops if o.kind is OpKind.GEMM and o.tp is TPSplit.COLUMN][-1]
            fwd.append(op(Collective.ALL_GATHER, last.n, f"tp.{last.name}_gather"))
    return fwd, bwd


