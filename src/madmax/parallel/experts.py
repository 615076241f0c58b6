"""Expert parallelism: where routed experts live, how tokens reach them, and how unevenly.

Megatron-Core folds the experts over the same ranks as attention (MoE parallel folding, Liu et al. 2025,
arXiv 2504.14960): the tp x cp x dp ranks of a pipeline stage are renumbered etp x ep x edp, expert
tensor parallelism innermost. Each of the ep ranks of an expert-parallel group holds E/ep experts (each
split over etp ranks); edp copies of each expert reduce their gradients together.

The token exchange of one MoE layer for one micro-batch (Megatron-Core's all-to-all token dispatcher;
DeepSeek-V3 Sec. 3.2.2): a rank holds T_r tokens (T/tp under sequence parallelism) and sends each to
the top_k experts it chose. Dispatch: an all-to-all over the EP group of T_r * k * h elements per rank
(nccl-tests size: what each rank sends, its own share included), in fp8 when `dispatch_fp8` (DeepEP);
with etp > 1 an all-gather over the ETP group gives each slice of an expert all of the group's rows.
Combine mirrors it: a reduce-scatter over ETP, then the all-to-all back in 16 bits. The backward pass
sends the gradients the same way (16 bits). The busiest rank receives `expert_load` times the mean,
and its exchange takes that much longer.

With the DeepEP dispatcher (`dispatcher=deepep`) and an EP group over several scale-up domains, a token
crosses the scale-out fabric once per destination domain, not once per expert, and is forwarded to its
experts inside the domain (DeepSeek-V3, arXiv 2412.19437, Sec. 3.2.2): an all-to-all among the group's
domains (one rank per domain, the rank's own rail) of T_r * h * D_remote elements, where D_remote is
the expected number of other domains a token reaches (`remote_domains`), then an all-to-all inside the
domain of T_r * k * h elements. The two run one after the other here (DeepEP pipelines them, so this
over-counts by the smaller, the scale-up part).

Load: how unevenly routing fills the ranks is the task's `expert_load` (`madmax.config.task.ExpertLoad`):
the busiest rank's rows over the mean, which scales its expert work and its exchange.

What a training framework runs around the experts beyond the workload's ops (`layer_kernels`,
`dispatch_counts`), each from Megatron-Core's source (megatron/core/transformer/moe/, core_v0.15-0.19):
- the all-to-all dispatcher (`dispatcher=alltoall`, MoEAlltoAllTokenDispatcher) receives rows grouped by
  source rank and sorts them by local expert when a rank holds more than one (`sort_chunks_by_idxs`,
  dispatch_postprocess), and sorts them back before the combine (combine_preprocess): each a read and a
  write of the R x h rows, forward and backward; and before the exchange it all-gathers every rank's
  tokens per expert over the EP group (E int64 per rank, `preprocess`). DeepEP's dispatch returns the
  rows per expert itself and exchanges the counts inside its own kernels: neither applies.
- the stack's per-expert loops and eager ops (`madmax.config.training_stack`): the routed experts' output
  bias added expert by expert (`expert_bias`), the clamp of a clamped GLU before its fused activation
  (`glu_clamp`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.strategy import Strategy
from madmax.config.training_stack import EagerOps, TrainingStack
from madmax.parallel.kernels import CommOp, Kernel, KernelKind, Phase, Where
from madmax.parallel.placement import expert_span
from madmax.parallel.tensor import Shape
from madmax.workload.ops import EXPERT_SPLITS, Block, Op, OpKind

EP_GROUP, ETP_GROUP = "ep", "etp"


@dataclass(frozen=True)
class ExpertSpans:
    """The network spans of a stage's expert groups: expert-parallel, expert-tensor-parallel and the
    expert-data-parallel group that reduces the experts' gradients."""

    ep: Span
    etp: Span
    edp: Span


def spans(s: Strategy, domain_size: int) -> ExpertSpans:
    return ExpertSpans(ep=expert_span(s, ("ep",), domain_size), etp=expert_span(s, ("etp",), domain_size),
                       edp=expert_span(s, ("edp",), domain_size))


def routed_op(block: Block) -> Op | None:
    """The block's first routed-expert GEMM (its experts and top_k), or None without experts."""
    return next((op for op in block.ops if op.tp in EXPERT_SPLITS and op.experts), None)


def hidden_of(block: Block) -> int:
    """Width of the tokens an MoE block dispatches: the router's input."""
    return next(op.k for op in block.ops if op.name.endswith(".router"))


def token_exchange(block: Block, shape: Shape, s: Strategy, sp: ExpertSpans) -> tuple[list[CommOp], list[CommOp]]:
    """Dispatch and combine collectives of one MoE block for one micro-batch on the busiest rank,
    forward and backward (see the module docstring); none when its experts are all local (ep = etp = 1)."""
    op = routed_op(block)
    if op is None or (s.ep == 1 and s.etp == 1):
        return [], []
    tokens = shape.tokens / shape.tp if shape.sp else shape.tokens
    hidden = hidden_of(block)
    rows = tokens * op.top_k * shape.expert_load  # rows this rank sends (and, at the busiest rank, receives)
    elems = rows * hidden
    where = Where.OVERLAPPED if s.ep_overlap else Where.AFTER
    half = shape.act_bytes
    dispatch = DType.FP8.num_bytes if s.dispatch_fp8 else half
    F, B = Phase.FORWARD, Phase.BACKWARD

    def a2a(width: float, label: str, phase: Phase) -> list[CommOp]:
        if s.dispatcher != "deepep" or sp.ep.inter == 1:
            return [CommOp(EP_GROUP, Collective.ALL_TO_ALL, elems * width, sp.ep, label, phase, where)]
        # One copy per remote domain over the scale-out fabric (size with the rank's own share, nccl-tests
        # convention: (n-1)/n of it leaves), then the k copies inside the domain.
        n = sp.ep.inter
        across = tokens * shape.expert_load * hidden * remote_domains(op, n) * n / (n - 1) * width
        inside = [CommOp(EP_GROUP, Collective.ALL_TO_ALL, elems * width, Span(sp.ep.intra, 1), label + "_nvl",
                         phase, where)] if sp.ep.intra > 1 else []
        return [CommOp(EP_GROUP, Collective.ALL_TO_ALL, across, Span(1, n), label, phase, where), *inside]

    def etp(kind: Collective, label: str, phase: Phase) -> list[CommOp]:
        if s.etp == 1:
            return []
        return [CommOp(ETP_GROUP, kind, elems * s.etp * half, sp.etp, label, phase, where)]

    fwd = [*a2a(dispatch, "ep.dispatch", F), *etp(Collective.ALL_GATHER, "etp.dispatch_gather", F),
           *etp(Collective.REDUCE_SCATTER, "etp.combine_scatter", F), *a2a(half, "ep.combine", F)]
    bwd = [*a2a(half, "ep.combine_grad", B), *etp(Collective.ALL_GATHER, "etp.combine_grad_gather", B),
           *etp(Collective.REDUCE_SCATTER, "etp.dispatch_grad_scatter", B), *a2a(half, "ep.dispatch_grad", B)]
    if s.ep == 1:
        fwd = [c for c in fwd if c.group != EP_GROUP]
        bwd = [c for c in bwd if c.group != EP_GROUP]
    return fwd, bwd


def remote_domains(op: Op, domains: int) -> float:
    """Expected number of other domains a token's top_k experts are on, the experts spread evenly and in
    order over `domains` domains. A token may use c candidate domains: all of them, or with group-limited
    routing (route_group_topk of route_groups groups) the domains of its groups; its k experts fall on
    c (1 - (1 - 1/c)^k) distinct ones (uniform choice), of which the fraction (domains - 1)/domains is
    remote (its own domain is one of the candidates as often as any other)."""
    candidates = float(domains)
    if op.route_group_topk and op.route_groups > 1:
        per_group = max(1.0, domains / op.route_groups)  # domains a group's experts span
        candidates = min(float(domains), op.route_group_topk * per_group)
    reached = candidates * (1 - (1 - 1 / candidates) ** op.top_k)
    return reached * (domains - 1) / domains


def unit_info(block: Block, shape: Shape, sp: ExpertSpans) -> tuple[tuple[str, object], ...]:
    """What an MoE unit's plan reports: local experts, rows on the busiest rank, its load factor and
    whether the EP group stays inside one scale-up domain."""
    op = routed_op(block)
    assert op is not None
    return (("local_experts", op.experts // shape.ep), ("expert_rows", math.ceil(shape.expert_tokens * op.top_k)),
            ("expert_load", shape.expert_load), ("ep_span", f"{sp.ep.intra}x{sp.ep.inter}"))


def touched_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected experts that receive at least one of `tokens` tokens, each routed to top_k of num_experts
    uniformly: E (1 - (1 - k/E)^T) (one token touches k; many touch all E)."""
    return num_experts * (1 - (1 - top_k / num_experts) ** tokens)


COUNT_BYTES = 8  # one int64 count of tokens per expert


def dispatch_counts(block: Block, s: Strategy, sp: ExpertSpans) -> list[CommOp]:
    """The all-to-all dispatcher's all-gather of every rank's tokens per expert over the EP group before the
    exchange (Megatron-Core MoEAlltoAllTokenDispatcher.preprocess: E int64 from each rank; nccl-tests size: the
    gathered output, ep E 8 bytes; Megatron gathers over tp x ep ranks, the tp copies' few bytes more left out),
    forward only, placed as the exchange it precedes (beside the next compute under `ep_overlap`); none without
    expert parallelism or with DeepEP, which exchanges its counts inside its own kernels."""
    op = routed_op(block)
    if op is None or s.ep == 1 or s.dispatcher != "alltoall":
        return []
    where = Where.OVERLAPPED if s.ep_overlap else Where.AFTER
    return [CommOp(EP_GROUP, Collective.ALL_GATHER, s.ep * op.experts * COUNT_BYTES, sp.ep, "ep.counts",
                   Phase.FORWARD, where)]


def layer_kernels(block: Block, op: Op, shape: Shape, s: Strategy, stack: TrainingStack, *,
                  backward: bool) -> list[Kernel]:
    """Kernels an MoE layer runs beside `op` in one pass beyond the op's own, on the busiest rank's R rows
    (see the module docstring): with the all-to-all dispatcher and more than one local expert, the sort by
    local expert after the permute and its mirror after the down projection (each reads and writes R x h);
    the stack's eager expert-bias loop after the down projection (on R x h) and its eager clamp of a
    clamped GLU beside the activation (on the R x 2f/etp gate and linear inputs)."""
    routed = routed_op(block)
    part = op.name.rsplit(".", 1)[-1]
    if routed is None or part not in ("permute", "expert_act", "expert_down"):
        return []
    rows = shape.expert_tokens * routed.top_k
    hidden = hidden_of(block)
    local = max(1, routed.experts // shape.ep)
    out: list[Kernel] = []
    if part in ("permute", "expert_down") and s.dispatcher == "alltoall" and local > 1:
        out.append(Kernel(KernelKind.MEMORY, OpKind.ELEMENTWISE.value, num_bytes=2 * rows * hidden * shape.act_bytes))
    if part == "expert_down" and _has_bias(op) and stack.expert_bias is not None:
        out += _eager(stack.expert_bias, rows * hidden, local, shape, backward)
    if part == "expert_act" and op.glu_clamp and stack.glu_clamp is not None:
        out += _eager(stack.glu_clamp, rows * 2 * routed.n / shape.etp, local, shape, backward)
    return out


def _has_bias(op: Op) -> bool:
    """Whether a routed-expert GEMM carries biases: its parameters exceed its E weight matrices (k x n)."""
    return op.params > op.experts * op.k * op.n


def _eager(ops: EagerOps, elements: float, local: int, shape: Shape, backward: bool) -> list[Kernel]:
    """One pass of eager ops over a tensor of `elements` activation elements: its kernels (`kernels` once and
    `kernels_per_expert` per local expert), together moving `moved` x elements elements (read plus write)."""
    p = ops.backward if backward else ops.forward
    n = p.kernels + p.kernels_per_expert * local
    if not n:
        return []
    return [Kernel(KernelKind.MEMORY, OpKind.ELEMENTWISE.value, num_bytes=p.moved * elements * shape.act_bytes / n)] * n
