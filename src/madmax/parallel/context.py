"""Context parallelism: the sequence split over cp ranks, with a ring exchange of keys and values.

Each rank holds s/cp tokens of every sequence. Attention needs every earlier key and value: in
cp - 1 ring steps each rank passes on a K/V block of b*(s/cp)*2*g*d/tp elements, overlapped with the
attention of the block it already has (Liu et al. 2023, Ring Attention, arXiv 2310.01889; Megatron
context parallelism). The backward pass sends K/V again and their gradients: twice the bytes.
"""

from __future__ import annotations

from madmax.collective import Collective, Span
from madmax.parallel.kernels import CommOp, Phase, Where
from madmax.parallel.tensor import Shape
from madmax.workload.ops import Op, OpKind


def ring_kv(op: Op, shape: Shape, span: Span) -> tuple[list[CommOp], list[CommOp]]:
    """Forward and backward ring exchanges of one attention op on one rank (empty when cp == 1)."""
    if shape.cp == 1 or op.kind is not OpKind.ATTENTION:
        return [], []
    kv_heads = max(1, op.kv_heads // shape.tp)
    block = shape.tokens * 2 * kv_heads * op.head_dim * shape.act_bytes
    steps = shape.cp - 1
    fwd = [CommOp("cp", Collective.SEND_RECV, block, span, "cp.kv", Phase.FORWARD, Where.BESIDE_ATTENTION)
           for _ in range(steps)]
    bwd = [CommOp("cp", Collective.SEND_RECV, 2 * block, span, "cp.kv_grad", Phase.BACKWARD, Where.BESIDE_ATTENTION)
           for _ in range(steps)]
    return fwd, bwd
