"""Tensor (Megatron) parallelism with sequence and context parallelism: ops -> per-rank kernels.

A micro-batch of b sequences of s tokens has T = b*s/cp tokens on each rank (context parallelism
splits the sequence). Column-parallel GEMMs divide n by tp, row-parallel ones k; attention divides
heads. Element-wise ops outside the TP region run on T/tp tokens under sequence parallelism and on
all T otherwise (Korthikanti et al. 2022, Sec. 4.2). Backward: a GEMM's input gradient
(T x n) @ (n x k) and, for trainable weights, its weight gradient (k x T) @ (T x n), each the
forward's FLOPs (Narayanan et al. 2021, Sec. 5.1); an element-wise op reads the saved input and the
output gradient and writes the input gradient, moving twice its forward bytes.

Routed experts (MoE) fold over the same ranks as attention (Megatron-Core's MoE parallel folding): the
tp x cp x dp ranks of a stage become etp x ep x edp expert ranks. Balanced routing gives each rank
R = T * top_k * etp / tp expert rows (T/tp tokens per rank under sequence parallelism, each sent to
top_k experts; the etp ranks of an expert slice all process its rows), times the busiest rank's load
factor; expert widths split by etp. Its local experts run as grouped GEMMs, one group per expert that
receives tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from madmax.config.base import DType
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.workload.attention import attention_flops
from madmax.workload.ops import EXPERT_SPLITS, Op, OpKind, TPSplit

BACKWARD_BYTES_FACTOR = 2  # read saved input + output gradient, write input gradient (vs read + write)


@dataclass(frozen=True)
class AttentionCall:
    """`batch` sequences with `q_len` new tokens each, attending to `kv_len` keys (the new tokens
    included; a mean over the sequences for a decode batch)."""

    batch: int
    q_len: int
    kv_len: float


@dataclass(frozen=True)
class Shape:
    """Per-rank sizes of one micro-batch (training) or one serving step.

    Training: b sequences of s tokens, T = b*s/cp per rank, one attention of s/cp queries over s keys.
    Serving: `calls` lists the step's attention calls (prefill chunks, a decode batch); T is their new
    tokens; `gemm_dtype`/`weight_width` describe quantized GEMMs and `kv_width` the KV cache's format.
    """

    batch: int  # sequences b
    seq_len: int  # full sequence s
    tp: int
    cp: int
    sp: bool
    act_bytes: float  # bytes per activation element
    fp8: bool = False  # FP8 GEMMs (Transformer Engine recipe): inputs cast to fp8, attention in bf16
    calls: tuple[AttentionCall, ...] = ()
    gemm_dtype: DType | None = None  # None: the plan's dtype
    weight_width: float | None = None
    kv_width: float | None = None
    # Routed experts: expert-parallel and expert-tensor-parallel degrees, the busiest rank's rows over
    # the mean (load imbalance, capped by a capacity factor), and the local experts that receive tokens.
    ep: int = 1
    etp: int = 1
    expert_load: float = 1.0
    active_experts: float | None = None  # None: every local expert

    @property
    def expert_tokens(self) -> float:
        """Token-equivalents of expert work on the busiest rank, R / top_k = T * etp / tp * load."""
        return self.tokens * self.etp / self.tp * self.expert_load

    @property
    def tokens(self) -> int:
        """Tokens on one rank: T = b*s/cp, or the new tokens of a serving step's attention calls."""
        if self.calls:
            return sum(c.batch * c.q_len for c in self.calls)
        return self.batch * self.seq_len // self.cp


def _model_rows(op: Op, shape: Shape, groups: int, rows: int) -> float:
    """Rows whose FLOPs count as model FLOPs: a routed-expert GEMM's mean rows per rank (T*k*etp/tp),
    not the busiest rank's rounded ones that set its time."""
    if op.tp in EXPERT_SPLITS:
        return shape.expert_tokens / shape.expert_load * op.top_k
    return groups * rows


def _gemm_shape(op: Op, shape: Shape) -> tuple[int, int, int, int]:
    """(groups, rows per group, k, n) of a GEMM on one rank: one group for a plain GEMM, whose
    column-parallel n or row-parallel k splits over tp; for routed experts, the local experts that receive
    rows, sharing the rank's R rows, with n (up, gate) or k (down) split over etp."""
    if op.tp in EXPERT_SPLITS:
        rows = math.ceil(shape.expert_tokens * op.top_k)
        local = op.experts / shape.ep
        groups = max(1, min(rows, round(local if shape.active_experts is None else shape.active_experts)))
        degree, splits_n, splits_k = shape.etp, op.tp is TPSplit.EXPERT_COLUMN, op.tp is TPSplit.EXPERT_ROW
    else:
        rows = math.ceil(shape.tokens / shape.tp) if op.tp is TPSplit.SEQUENCE and shape.sp else shape.tokens
        groups, degree, splits_n, splits_k = 1, shape.tp, op.tp is TPSplit.COLUMN, op.tp is TPSplit.ROW
    k, n = op.k, op.n
    if splits_n:
        n = -(-n // degree)
    elif splits_k:
        k = -(-k // degree)
    return groups, math.ceil(rows / groups), k, n


def forward_kernels(op: Op, shape: Shape, *, flash: bool) -> list[Kernel]:
    """Kernels of the forward pass of `op` on one rank, with its auxiliary launches."""
    return _main_forward(op, shape, flash=flash) + _aux(op)


def backward_kernels(op: Op, shape: Shape, *, flash: bool) -> list[Kernel]:
    """Kernels of the backward pass: input gradient always, weight gradient when trainable; each
    auxiliary kernel of the forward has one in the backward."""
    return _main_backward(op, shape, flash=flash) + _aux(op)


def _aux(op: Op) -> list[Kernel]:
    return [Kernel(KernelKind.LAUNCH, op.kind.value, batch=op.aux_kernels)] if op.aux_kernels else []


def _main_forward(op: Op, shape: Shape, *, flash: bool) -> list[Kernel]:
    cat = op.kind.value
    if op.kind is OpKind.GEMM:
        g, m, k, n = _gemm_shape(op, shape)
        flops = 2.0 * _model_rows(op, shape, g, m) * k * n
        return [*_fp8_cast(shape, g * m * k), Kernel(KernelKind.GEMM, cat, flops=flops, m=m, k=k, n=n,
                                                     batch=g, grouped=g > 1, dtype=shape.gemm_dtype,
                                                     weight_width=shape.weight_width)]
    if op.kind is OpKind.ATTENTION and shape.calls:
        return _serving_attention(op, shape)
    if op.kind is OpKind.ATTENTION:
        return _attention(op, shape, flash=flash, backward=False)
    share = _elementwise_tokens(op, shape) / _tp_div(op, shape)
    return [Kernel(KernelKind.MEMORY, cat, flops=share * op.flops_per_token,
                   num_bytes=share * op.moved_elems_per_token * shape.act_bytes)]


def _main_backward(op: Op, shape: Shape, *, flash: bool) -> list[Kernel]:
    cat = op.kind.value
    if op.kind is OpKind.GEMM:
        g, m, k, n = _gemm_shape(op, shape)
        flops = 2.0 * _model_rows(op, shape, g, m) * k * n
        kernels = [*_fp8_cast(shape, g * m * n), Kernel(KernelKind.GEMM, cat, flops=flops, m=m, k=n, n=k, batch=g,
                                                        grouped=g > 1)]
        if op.trainable:
            kernels.append(Kernel(KernelKind.GEMM, cat, flops=flops, m=k, k=m, n=n, batch=g, grouped=g > 1))
        return kernels
    if op.kind is OpKind.ATTENTION:
        return _attention(op, shape, flash=flash, backward=True)
    (fwd,) = _main_forward(op, shape, flash=flash)
    return [Kernel(KernelKind.MEMORY, cat, flops=fwd.flops, num_bytes=BACKWARD_BYTES_FACTOR * fwd.num_bytes)]


FP8_COPIES = 2  # the fp8 tensor and its transpose


def _fp8_cast(shape: Shape, elements: int) -> list[Kernel]:
    """The cast of a GEMM's activation input (forward) or output gradient (backward) to fp8: read the
    bf16 tensor, write its fp8 copy and the transposed fp8 copy the other GEMM of the backward needs
    (Transformer Engine's cast-transpose, delayed-scaling recipe; weights are cast once per iteration
    and not counted)."""
    if not shape.fp8:
        return []
    moved = elements * (shape.act_bytes + FP8_COPIES * DType.FP8.num_bytes)
    return [Kernel(KernelKind.MEMORY, "fp8_cast", num_bytes=moved)]


def _attention(op: Op, shape: Shape, *, flash: bool, backward: bool) -> list[Kernel]:
    """Causal attention of a rank's heads: q_len = s/cp queries against the whole sequence.

    FLOPs per direction of QK^T and PV: 2*b*h_loc*q*kv*d each, halved by causality (context
    parallelism with load-balanced chunks keeps the half). Backward does 2.5x the forward FLOPs
    (dQ, dK, dV, dP and the recomputed scores; FlashAttention-2, Dao 2023, Sec. 3).
    A non-fused attention (Megatron's baddbmm, fused softmax, bmm) computes the whole score matrix
    (no causal saving), costed like the fused kernel, plus passes over the b*h*q*kv score matrix in HBM: the scores are
    written, read and written by the softmax and read by the second product (4 passes forward, twice
    that backward). Under FP8 training the attention stays in bf16 (Transformer Engine's default:
    FP8 dot-product attention off).
    """
    heads = op.heads // shape.tp
    kv_heads = max(1, op.kv_heads // shape.tp)
    # MLA's query/key and value widths differ: the kernel is costed at their mean, which has its FLOPs.
    q, kv, d, b = shape.seq_len // shape.cp, shape.seq_len, (op.head_dim + op.value_dim) // 2, shape.batch
    fwd_flops = 2 * b * heads * q * kv * (op.head_dim + op.value_dim) / (2 if op.causal else 1)
    flops = fwd_flops * (BWD_ATTENTION_FLOPS if backward else 1)
    # The unfused path computes the whole score matrix and masks it: no causal saving in time.
    kernels = [Kernel(KernelKind.ATTENTION, "attention", flops=flops, batch=b, heads=heads, kv_heads=kv_heads,
                      q_len=q, kv_len=kv, head_dim=d, causal=op.causal and flash, backward=backward,
                      dtype=DType.BF16 if shape.fp8 else None, window=op.window)]
    if not flash:
        passes = SCORE_PASSES * (2 if backward else 1)
        kernels.append(Kernel(KernelKind.MEMORY, "attention",
                              num_bytes=passes * b * heads * q * kv * shape.act_bytes))
    return kernels


def _serving_attention(op: Op, shape: Shape) -> list[Kernel]:
    """A serving step's attention on one rank: one variable-length kernel over its prefill chunks (each
    attending to its sequence's cached keys and its own, causally) and one over its decode batch (reading
    the caches), in the 16-bit activation format over a KV cache of `kv_width` bytes per element. Heads
    split over tp; KV heads too, one per rank when there are fewer KV heads than ranks (replicated).
    FLOPs from `attention_flops`."""
    heads = op.heads // shape.tp
    kv_heads = max(1, op.kv_heads // shape.tp)
    dtype = shape.gemm_dtype or DType.BF16  # the 16-bit activation format the plan gives
    common = {"heads": heads, "kv_heads": kv_heads, "head_dim": op.head_dim, "causal": op.causal, "dtype": dtype,
              "window": op.window, "kv_width": shape.kv_width}
    prefill = [c for c in shape.calls if c.q_len > 1]
    kernels = []
    if prefill:
        segments = tuple((c.q_len, c.kv_len) for c in prefill for _ in range(c.batch))
        flops = sum(attention_flops(1, heads, q, kv, op.head_dim, op.causal, op.window) for q, kv in segments)
        kernels.append(Kernel(KernelKind.ATTENTION, "attention", flops=flops, segments=segments, **common))
    for c in shape.calls:
        if c.q_len == 1:
            kernels.append(Kernel(KernelKind.ATTENTION, "attention",
                                  flops=attention_flops(c.batch, heads, 1, c.kv_len, op.head_dim, op.causal, op.window),
                                  batch=c.batch, q_len=1, kv_len=c.kv_len, **common))
    return kernels


# Unfused attention: scores written by QK^T, read and written by the softmax, read by PV.
SCORE_PASSES = 4


# dQ, dK, dV, dP products (4 GEMMs) plus the score recompute (1): 2.5x the 2 forward products.
BWD_ATTENTION_FLOPS = 5 / 2


def _tp_div(op: Op, shape: Shape) -> int:
    if op.tp is TPSplit.EXPERT_REGION:
        return shape.etp
    return shape.tp if op.tp in (TPSplit.TP_REGION, TPSplit.VOCAB, TPSplit.HEADS) else 1


def _elementwise_tokens(op: Op, shape: Shape) -> float:
    """Tokens an element-wise op touches on one rank: T/tp in the sequence-parallel region; the
    token-equivalents of the rank's expert rows for an expert op (its per-token sizes count top_k)."""
    if op.tp is TPSplit.SEQUENCE and shape.sp:
        return shape.tokens / shape.tp
    if op.tp is TPSplit.EXPERT_REGION:
        return shape.expert_tokens
    return shape.tokens


def saved_bytes(op: Op, shape: Shape, *, flash: bool) -> float:
    """Activation bytes `op` keeps for backward on one rank for one micro-batch.

    Inside the TP region (column/row/heads outputs) divided by tp; outside it (norm inputs, residual
    dropout masks, inputs of column-parallel GEMMs) divided by tp only under sequence parallelism
    (Korthikanti et al. 2022, Eq. 2 vs Table 2). The s^2 part of a non-fused attention grows with s.
    """
    t = shape.tokens
    if op.tp in EXPERT_SPLITS:  # the rank's expert rows; the up/gate input (h wide) is not split by etp
        return shape.expert_tokens * op.saved_elems_per_token * shape.act_bytes / (
            1 if op.tp is TPSplit.EXPERT_COLUMN else shape.etp)
    outside = op.saved_outside_tp or op.tp in (TPSplit.SEQUENCE, TPSplit.REPLICATED)
    div = shape.tp if (not outside or shape.sp) else 1
    elems = op.saved_elems_per_token / div
    if not flash:
        elems += op.saved_elems_per_token_per_seq * shape.seq_len / shape.tp
    return t * elems * shape.act_bytes
