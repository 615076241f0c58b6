"""Data parallelism: DDP gradient all-reduce, ZeRO-1/2 (distributed optimizer) and ZeRO-3/FSDP.

Gradients are reduced over the dp x cp ranks holding the same weights. Plain DDP all-reduces them
once per iteration, in per-layer buckets as the last micro-batch's backward produces them, hidden
behind the rest of the backward pass. ZeRO-1 reduce-scatters them instead and all-gathers the
updated weights after the optimizer step; ZeRO-2 keeps only the gradient shard, so it
reduce-scatters after every micro-batch; ZeRO-3 (FSDP) also shards the weights and all-gathers each
layer before its forward and again before its backward (Rajbhandari et al. 2020, ZeRO, arXiv
1910.02054, Sec. 5). Hybrid sharding shards within `shard` ranks and all-reduces the shard across
the dp/shard replicas (PyTorch FSDP HYBRID_SHARD).

Bytes per parameter (mixed precision, Adam): weights and gradients in the training dtype, fp32
master weights and Adam's two moments (ZeRO paper Sec. 3.1: 2 + 2 + 12 = 16 bytes); in fp32
training the master copy is the weight itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from madmax.collective import Span
from madmax.config.base import DType
from madmax.config.strategy import Axis, Strategy
from madmax.parallel.formats import tensor_bytes
from madmax.parallel.placement import span

ADAM_MOMENTS = 2


@dataclass(frozen=True)
class DataParallelPlan:
    """How weights, gradients and optimizer state are kept and moved across data-parallel ranks.

    grad_span: all ranks holding the same weights (dp x cp); shard_span: ranks sharing one copy of
    the sharded state; replica_span: the copies of each shard (hybrid sharding; 1 x 1 otherwise).
    """

    zero: int
    grad_span: Span
    shard_span: Span
    replica_span: Span
    weight_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    overlap: bool
    # Bytes per gradient element the reduction carries when not the gradients' own (a stack's fp32 reduce dtype).
    reduce_elem_bytes: float | None = None

    @property
    def reduce_bytes(self) -> float:
        """Bytes per gradient element the reduce-scatter or all-reduce carries (the gradients' own by default)."""
        return self.grad_bytes if self.reduce_elem_bytes is None else self.reduce_elem_bytes

    @property
    def shard(self) -> int:
        return self.shard_span.intra * self.shard_span.inter

    @property
    def replicas(self) -> int:
        return self.replica_span.intra * self.replica_span.inter

    def state_bytes_per_param(self) -> tuple[float, float, float]:
        """Weights, gradients and optimizer bytes per (trainable) parameter on one rank."""
        shard = self.shard
        weights = self.weight_bytes / (shard if self.zero >= 3 else 1)
        grads = self.grad_bytes / (shard if self.zero >= 2 else 1)
        optimizer = self.optimizer_bytes / (shard if self.zero >= 1 else 1)
        return weights, grads, optimizer


def data_parallel_plan(s: Strategy, domain_size: int, dtype: DType, grad_span: Span | None = None) -> DataParallelPlan:
    """How the weights of the dense parameters travel over their dp x cp ranks, or, with `grad_span`,
    those of the routed experts over their expert-data-parallel ranks (sharded over all of them with
    ZeRO >= 1, as Megatron-Core's distributed optimizer does)."""
    # Low-precision formats (fp8, mxfp8, nvfp4) keep bf16 weights and gradients; the cast copies are the units'.
    weight = tensor_bytes(dtype)
    fp32 = DType.FP32.num_bytes
    master = 0 if dtype is DType.FP32 else fp32
    experts = grad_span is not None
    grad_span = grad_span or span(s, (Axis.DP, Axis.CP), domain_size)
    group = grad_span.intra * grad_span.inter
    if s.zero == 0:
        shard = 1
    elif experts:
        shard = group
    else:
        shard = min(s.shard or group, group) * (s.cp if s.shard else 1)
    if shard >= group:
        shard_span, replica_span = grad_span, Span(1, 1)
    else:
        # Shard groups are the innermost `shard` ranks of the group: as many per domain as fit.
        intra = min(grad_span.intra, shard)
        shard_span = Span(intra=intra, inter=shard // intra)
        replica_intra = max(1, grad_span.intra // intra)
        replica_span = Span(intra=replica_intra, inter=(group // shard) // replica_intra)
    return DataParallelPlan(zero=s.zero, grad_span=grad_span, shard_span=shard_span, replica_span=replica_span,
                            weight_bytes=weight, grad_bytes=weight,
                            optimizer_bytes=master + ADAM_MOMENTS * fp32, overlap=s.dp_overlap)
