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
from enum import StrEnum
from functools import cache
from importlib import resources

import yaml

from madmax.config.base import DType
from madmax.config.training_stack import OpRole
from madmax.parallel.formats import LowPrecision, high_precision
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.parallel.stack_kernels import op_role
from madmax.workload.attention import attention_flops
from madmax.workload.ops import EXPERT_SPLITS, Op, OpKind, TPSplit

MEGATRON_SOFTMAX_FILE = "calibration/megatron_softmax.yaml"
BACKWARD_BYTES_FACTOR = 2  # read saved input + output gradient, write input gradient (vs read + write)


@dataclass(frozen=True)
class AttentionCall:
    """`batch` sequences with `q_len` new tokens each, attending to `kv_len` keys (the new tokens
    included; a mean over the sequences for a decode batch). `decode`: a decode batch, its kernel the decode
    kernel even with several new tokens a sequence (speculative decoding's verification)."""

    batch: int
    q_len: int
    kv_len: float
    decode: bool = False


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
    # Low-precision GEMMs (fp8, mxfp8, nvfp4; `parallel.formats`): operands cast to the format, attention and
    # the GEMMs outside Transformer Engine in bf16. None: GEMM operands taken as they are.
    cast: LowPrecision | None = None
    weight_casts: float = 1.0  # weight casts per micro-batch: 1/m when cast once per step and cached
    # The low-precision GEMMs' weights are kept in the format only (strategy fp8_params): no high-precision copy.
    primary_cast: bool = False
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
    # The routed experts' GEMMs run as one GEMM launch per local expert over several streams (a training stack's
    # `expert_gemm: multi_stream`), not one grouped kernel.
    expert_multi_stream: bool = False

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


class CastSite(StrEnum):
    """Where a low-precision GEMM's operand is cast (`cast_sites`).

    OWN: its own cast kernel reads the bf16 tensor and writes the copies. FUSED: the op that produces the
    tensor writes it in the format (Transformer Engine's LayerNormLinear writes the norm output in fp8); only
    a transpose pass remains where the format needs one. SHARED: the GEMM before it read the same input
    (a gated FFN's gate and up projections), already cast.
    """

    OWN = "own"
    FUSED = "fused"
    SHARED = "shared"


def forward_kernels(op: Op, shape: Shape, *, flash: bool, cast: CastSite = CastSite.OWN) -> list[Kernel]:
    """Kernels of the forward pass of `op` on one rank, with its auxiliary launches; `cast`: where a
    low-precision GEMM's input is cast."""
    return _main_forward(op, shape, flash=flash, cast=cast) + _aux(op)


def backward_kernels(op: Op, shape: Shape, *, flash: bool, cast: CastSite = CastSite.OWN) -> list[Kernel]:
    """Kernels of the backward pass: input gradient always, weight gradient when trainable; each
    auxiliary kernel of the forward has one in the backward. `cast`: where a low-precision GEMM's output
    gradient is cast."""
    return _main_backward(op, shape, flash=flash, cast=cast) + _aux(op)


def _aux(op: Op) -> list[Kernel]:
    return [Kernel(KernelKind.LAUNCH, op.kind.value, batch=op.aux_kernels)] if op.aux_kernels else []


def _main_forward(op: Op, shape: Shape, *, flash: bool, cast: CastSite = CastSite.OWN) -> list[Kernel]:
    cat = op.kind.value
    if op.kind is OpKind.GEMM:
        g, m, k, n = _gemm_shape(op, shape)
        flops = 2.0 * _model_rows(op, shape, g, m) * k * n
        multi = op.tp in EXPERT_SPLITS and shape.expert_multi_stream  # one GEMM per expert, however many
        return [*_operand_cast(op, shape, g * m * k, cast, backward=False),
                Kernel(KernelKind.GEMM, cat, flops=flops, m=m, k=k, n=n, batch=g, grouped=g > 1 or multi,
                       multi_stream=multi, dtype=_gemm_dtype(op, shape), weight_width=shape.weight_width)]
    if op.kind is OpKind.ATTENTION and shape.calls:
        return _serving_attention(op, shape)
    if op.kind is OpKind.ATTENTION:
        return _attention(op, shape, flash=flash, backward=False)
    share = _elementwise_tokens(op, shape) / _tp_div(op, shape)
    return [Kernel(KernelKind.MEMORY, cat, flops=share * op.flops_per_token,
                   num_bytes=share * op.moved_elems_per_token * shape.act_bytes)]


def _main_backward(op: Op, shape: Shape, *, flash: bool, cast: CastSite = CastSite.OWN) -> list[Kernel]:
    cat = op.kind.value
    if op.kind is OpKind.GEMM:
        g, m, k, n = _gemm_shape(op, shape)
        flops = 2.0 * _model_rows(op, shape, g, m) * k * n
        dtype = _gemm_dtype(op, shape)
        multi = op.tp in EXPERT_SPLITS and shape.expert_multi_stream
        kernels = [*_operand_cast(op, shape, g * m * n, cast, backward=True),
                   Kernel(KernelKind.GEMM, cat, flops=flops, m=m, k=n, n=k, batch=g, grouped=g > 1 or multi,
                          multi_stream=multi, dtype=dtype)]
        if op.trainable:
            kernels.append(Kernel(KernelKind.GEMM, cat, flops=flops, m=k, k=m, n=n, batch=g, grouped=g > 1 or multi,
                                  multi_stream=multi, dtype=dtype, wgrad=True))
        return kernels
    if op.kind is OpKind.ATTENTION:
        return _attention(op, shape, flash=flash, backward=True)
    (fwd,) = _main_forward(op, shape, flash=flash)
    return [Kernel(KernelKind.MEMORY, cat, flops=fwd.flops, num_bytes=BACKWARD_BYTES_FACTOR * fwd.num_bytes)]


CAST = "quantize"  # category of the kernels that cast GEMM operands to a low-precision format
WEIGHT_CAST = "weight_quantize"  # category of the cast of the weights to the low-precision format
# GEMMs outside Transformer Engine modules (the MoE router, LoRA adapters): plain torch linears in bf16;
# so is the output layer (Megatron-Core's ColumnParallelLinear), named "<block>.lm" by the workload.
_TORCH_GEMMS = (TPSplit.SEQUENCE, TPSplit.REPLICATED)
OUTPUT_LAYER = ".lm"


def _outside_te(op: Op) -> bool:
    return op.tp in _TORCH_GEMMS or op.name.endswith(OUTPUT_LAYER)


def _low_precision(op: Op, shape: Shape) -> LowPrecision | None:
    """The format of `op`'s GEMM operands: the shape's, except for GEMMs outside Transformer Engine."""
    return None if _outside_te(op) else shape.cast


def _gemm_dtype(op: Op, shape: Shape) -> DType | None:
    """The dtype a GEMM runs in: bf16 for a high-precision GEMM of a low-precision plan, else the shape's
    (None: the plan's dtype)."""
    return high_precision() if shape.cast is not None and _outside_te(op) else shape.gemm_dtype


def _operand_cast(op: Op, shape: Shape, elements: int, site: CastSite, *, backward: bool) -> list[Kernel]:
    """The cast of a low-precision GEMM's activation input (forward) or output gradient (backward).

    With q bytes per cast element (scales included), a bf16 tensor of a bytes per element and c copies:
    OWN reads the tensor (twice when a per-tensor amax is computed first: nvfp4) and writes c copies,
    E (a (1 + amax) + c q); FUSED moves, beyond the producer's bf16 write, E (q - a + 2 q (c - 1)) when a
    transpose pass makes the columnwise copies (per-tensor fp8) and nothing otherwise (the producer writes
    the block-scaled copies; the difference, c q - a per element, is not costed); SHARED nothing. Delayed
    scaling also reads and rolls the GEMM's amax histories each pass: their bytes join the cast kernel
    (Transformer Engine updates them all in one fused kernel, whose launch is not counted apart).
    """
    fmt = _low_precision(op, shape)
    if fmt is None or site is CastSite.SHARED:
        return []
    q, a = fmt.bytes_per_element, shape.act_bytes
    history = 2 * fmt.history_bytes(backward)  # read and write
    if site is CastSite.FUSED:
        if not fmt.transpose_pass:
            return []
        moved = elements * (q - a + 2 * q * (fmt.copies - 1))
    else:
        moved = elements * (a * (1 + fmt.amax_pass) + fmt.copies * q)
    return [Kernel(KernelKind.MEMORY, CAST, num_bytes=moved + history)]


def weight_cast_bytes(params: float, fmt: LowPrecision, weight_bytes: float) -> float:
    """Bytes one cast of `params` weights of `weight_bytes` each moves: read them (twice with a per-tensor
    amax pass) and write the format's copies, P (w (1 + amax) + c q)."""
    return params * (weight_bytes * (1 + fmt.amax_pass) + fmt.copies * fmt.bytes_per_element)


def weight_cast_kernels(ops: tuple[Op, ...] | list[Op], params: list[float], shape: Shape) -> list[Kernel]:
    """The cast of a unit's low-precision GEMM weights (`params` per op on this rank, kept in
    `high_precision`), per micro-batch: `shape.weight_casts` of a cast each (1/m when cast in the first
    micro-batch and cached for the step)."""
    fmt = shape.cast
    if fmt is None:
        return []
    cast = sum(_cast_params(ops, params, shape))
    if not cast:
        return []
    if shape.primary_cast:  # the optimizer wrote the fp8 weights: only the other copies are made, P (c - 1) 2 q
        moved = cast * (fmt.copies - 1) * 2 * fmt.bytes_per_element
    else:
        moved = weight_cast_bytes(cast, fmt, high_precision().num_bytes)
    return [Kernel(KernelKind.MEMORY, WEIGHT_CAST, num_bytes=shape.weight_casts * moved)]


def cast_cache_bytes(ops: tuple[Op, ...] | list[Op], params: list[float], shape: Shape) -> float:
    """Bytes a unit keeps for its low-precision GEMMs through the step on one rank beyond the weights the
    data-parallel plan counts (a per parameter): the cast weight copies (c q per parameter) and, under
    delayed scaling, every GEMM's amax histories (forward and backward). With `primary_cast` the copies are
    the weights themselves: c q - a per parameter (fp8: 0, the fp8 weight and its transpose replace bf16)."""
    fmt = shape.cast
    if fmt is None:
        return 0.0
    history = fmt.history_bytes(backward=False) + fmt.history_bytes(backward=True)
    per_param = fmt.copies * fmt.bytes_per_element - (shape.act_bytes if shape.primary_cast else 0.0)
    return sum(n * per_param + history for n in _cast_params(ops, params, shape))


def primary_cast_params(ops: tuple[Op, ...] | list[Op], params: list[float], shape: Shape) -> float:
    """Parameters of the unit's low-precision GEMMs that are kept in the format only (`primary_cast`), else 0."""
    return sum(_cast_params(ops, params, shape)) if shape.cast is not None and shape.primary_cast else 0.0


def _cast_params(ops: tuple[Op, ...] | list[Op], params: list[float], shape: Shape) -> list[float]:
    """`params` (per op on this rank) of the ops whose weights are cast: the low-precision GEMMs."""
    return [n for op, n in zip(ops, params, strict=True) if op.kind is OpKind.GEMM and _low_precision(op, shape)]


def cast_sites(ops: tuple[Op, ...] | list[Op], fmt: LowPrecision | None) -> list[tuple[CastSite, CastSite]]:
    """(forward, backward) cast site of each op's GEMM operands in execution order (`CastSite`).

    Forward: SHARED when the op before is a GEMM on the same input (same k, and this one saves nothing of
    its own), FUSED when the op before is a producer the format fuses with (formats.yaml fused_producers),
    else OWN. Backward: the output gradient comes from the next non-GEMM op's backward, FUSED when that op
    is a fused producer of activations, else OWN.
    """
    sites = []
    for i, op in enumerate(ops):
        if fmt is None or op.kind is not OpKind.GEMM:
            sites.append((CastSite.OWN, CastSite.OWN))
            continue
        prev = ops[i - 1] if i else None
        if prev is not None and prev.kind is OpKind.GEMM and prev.k == op.k and not op.saved_elems_per_token:
            fwd = CastSite.SHARED
        elif prev is not None and op_role(prev) in fmt.fused_producers:
            fwd = CastSite.FUSED
        else:
            fwd = CastSite.OWN
        after = next((o for o in ops[i + 1:] if o.kind is not OpKind.GEMM), None)
        activation = after is not None and op_role(after) is OpRole.ACTIVATION
        bwd = CastSite.FUSED if activation and OpRole.ACTIVATION in fmt.fused_producers else CastSite.OWN
        sites.append((fwd, bwd))
    return sites


def _attention(op: Op, shape: Shape, *, flash: bool, backward: bool) -> list[Kernel]:
    """Causal attention of a rank's heads: q_len = s/cp queries against the whole sequence.

    FLOPs per direction of QK^T and PV: 2*b*h_loc*q*kv*d each, halved by causality (context
    parallelism with load-balanced chunks keeps the half). Backward does 2.5x the forward FLOPs
    (dQ, dK, dV, dP and the recomputed scores; FlashAttention-2, Dao 2023, Sec. 3).
    A non-fused attention (Megatron's baddbmm, fused softmax, bmm) computes the whole score matrix
    (no causal saving), costed like the fused kernel, plus passes over the b*h*q*kv score matrix in HBM:
    the scores are written, read and written by the softmax and read by the second product (4 passes
    forward, twice that backward). Its backward reads the kept probabilities instead of recomputing the
    scores: 2x the forward FLOPs (dQ, dK, dV, dP). Where Megatron's fused softmax kernel does not take
    the shape (`fused_softmax`), the fp32 PyTorch softmax adds its kernels and bytes (`softmax_fallback`).
    Under low-precision training the attention stays in bf16 (Transformer Engine's default: FP8
    dot-product attention off), as it does in layers kept in bf16 (`gemm_dtype`).
    """
    heads = op.heads // shape.tp
    kv_heads = max(1, op.kv_heads // shape.tp)
    # MLA's query/key and value widths differ: the kernel is costed at their mean, which has its FLOPs.
    q, kv, d, b = shape.seq_len // shape.cp, shape.seq_len, (op.head_dim + op.value_dim) // 2, shape.batch
    fwd_flops = 2 * b * heads * q * kv * (op.head_dim + op.value_dim) / (2 if op.causal else 1)
    flops = fwd_flops * ((BWD_ATTENTION_FLOPS if flash else UNFUSED_BWD_ATTENTION_FLOPS) if backward else 1)
    # The unfused path computes the whole score matrix and masks it: no causal saving in time.
    kernels = [Kernel(KernelKind.ATTENTION, "attention", flops=flops, batch=b, heads=heads, kv_heads=kv_heads,
                      q_len=q, kv_len=kv, head_dim=d, causal=op.causal and flash, backward=backward,
                      dtype=high_precision() if shape.cast else shape.gemm_dtype, window=op.window,
                      scores_saved=not flash)]
    if not flash:
        passes = SCORE_PASSES * (2 if backward else 1)
        scores = b * heads * q * kv
        kernels.append(Kernel(KernelKind.MEMORY, "attention", num_bytes=passes * scores * shape.act_bytes))
        if not fused_softmax(b * heads, q, kv, op.causal, shape.act_bytes):
            kernels += softmax_fallback(scores, backward)
    return kernels


@cache
def _softmax_table() -> dict:
    text = resources.files("madmax.catalog").joinpath(MEGATRON_SOFTMAX_FILE).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def fused_softmax(attention_batches: int, q_len: int, kv_len: int, causal: bool, act_bytes: float) -> bool:
    """Whether Megatron's FusedScaleMaskSoftmax runs its fused kernel on scores of `attention_batches`
    (b * heads per rank) matrices of q_len x kv_len: 16-bit scores, min < kv <= max keys, q, kv and the
    batches multiples of 4, and the batches (causal) or the queries (otherwise) a multiple of the rows one
    thread block handles (`catalog/calibration/megatron_softmax.yaml`, with its source). A tp=8 run of
    16 heads at micro-batch 1 (2 batches) takes the fp32 PyTorch path."""
    f = _softmax_table()["fused"]
    m = f["multiple"]
    if act_bytes != 2 or not f["min_keys_exclusive"] < kv_len <= f["max_keys"]:
        return False
    if q_len % m or kv_len % m or attention_batches % m:
        return False
    keys_pow2 = 1 << max(kv_len - 1, 0).bit_length()
    warp = min(keys_pow2, f["warp_size"])
    per_block = f["threads_per_block"] // warp * (2 if keys_pow2 <= f["two_rows_max_keys"] else 1)
    return (attention_batches if causal else q_len) % per_block == 0


def softmax_fallback(scores: float, backward: bool) -> list[Kernel]:
    """The kernels the fp32 PyTorch softmax path adds over the fused kernel, for `scores` score elements:
    its extra launches and the bytes it moves beyond the fused kernel's (megatron_softmax.yaml)."""
    t = _softmax_table()
    pass_ = "backward" if backward else "forward"
    extra = (t["fallback"]["bytes_per_score"][pass_] - t["fused"]["bytes_per_score"][pass_]) * scores
    # Its kernels replace the fused one; the memory kernel below is one of them, the rest are launches.
    launches = t["fallback"]["kernels"][pass_] - 2
    return [Kernel(KernelKind.MEMORY, "attention", num_bytes=extra),
            Kernel(KernelKind.LAUNCH, "attention", batch=launches)]


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
    prefill = [c for c in shape.calls if c.q_len > 1 and not c.decode]
    kernels = []
    if prefill:
        segments = tuple((c.q_len, c.kv_len) for c in prefill for _ in range(c.batch))
        flops = sum(attention_flops(1, heads, q, kv, op.head_dim, op.causal, op.window) for q, kv in segments)
        kernels.append(Kernel(KernelKind.ATTENTION, "attention", flops=flops, segments=segments, **common))
    for c in shape.calls:
        if c.q_len == 1 or c.decode:
            kernels.append(Kernel(KernelKind.ATTENTION, "attention",
                                  flops=attention_flops(c.batch, heads, c.q_len, c.kv_len, op.head_dim, op.causal,
                                                        op.window),
                                  batch=c.batch, q_len=c.q_len, kv_len=c.kv_len, **common))
    return kernels


# Unfused attention: scores written by QK^T, read and written by the softmax, read by PV.
SCORE_PASSES = 4


# dQ, dK, dV, dP products (4 GEMMs) plus the score recompute (1): 2.5x the 2 forward products.
BWD_ATTENTION_FLOPS = 5 / 2
# The unfused backward reads the probabilities its forward kept: the 4 products alone.
UNFUSED_BWD_ATTENTION_FLOPS = 4 / 2


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


def saved_bytes(op: Op, shape: Shape, *, flash: bool, input_kept: bool = False) -> float:
    """Activation bytes `op` keeps for backward on one rank for one micro-batch.

    Inside the TP region (column/row/heads outputs) divided by tp; outside it (norm inputs, residual
    dropout masks, inputs of column-parallel GEMMs) divided by tp only under sequence parallelism
    (Korthikanti et al. 2022, Eq. 2 vs Table 2). The s^2 part of a non-fused attention grows with s.
    `input_kept`: the op that produced the input keeps its 16-bit copy for its own backward (a fused
    attention keeps its output), so a low-precision GEMM's cast copy comes on top of it (`saved_width`).
    """
    t = shape.tokens
    if op.tp in EXPERT_SPLITS:  # the rank's expert rows; the up/gate input (h wide) is not split by etp
        return shape.expert_tokens * op.saved_elems_per_token * saved_width(op, shape, input_kept) / (
            1 if op.tp is TPSplit.EXPERT_COLUMN else shape.etp)
    outside = op.saved_outside_tp or op.tp in (TPSplit.SEQUENCE, TPSplit.REPLICATED)
    div = shape.tp if (not outside or shape.sp) else 1
    elems = op.saved_elems_per_token / div
    if not flash:
        elems += op.saved_elems_per_token_per_seq * shape.seq_len / shape.tp
        heads = op.heads // shape.tp
        if op.kind is OpKind.ATTENTION and not fused_softmax(shape.batch * heads, shape.seq_len // shape.cp,
                                                              shape.seq_len, op.causal, shape.act_bytes):
            # the fp32 softmax output kept for its backward: one 16-bit element more per score
            elems += heads * shape.seq_len
    return t * elems * saved_width(op, shape, input_kept)


def saved_width(op: Op, shape: Shape, input_kept: bool = False) -> float:
    """Bytes per saved element of `op`: a low-precision GEMM of a trainable weight keeps the cast copy of
    its input that its weight-gradient GEMM reads (Transformer Engine's Linear and LayerNormLinear save the
    fp8 input, not the 16-bit one), scales included, plus the 16-bit input when its producer keeps that for
    itself (`input_kept`: the 16-bit tensor is then not this op's to count in a 16-bit run, where both hold
    the same tensor); everything else keeps 16-bit activations."""
    fmt = _low_precision(op, shape) if op.kind is OpKind.GEMM and op.trainable else None
    if fmt is None:
        return shape.act_bytes
    return fmt.bytes_per_element + (shape.act_bytes if input_kept else 0.0)
