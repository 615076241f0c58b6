"""Kernels and collectives: what one rank runs for one op of one micro-batch, after sharding.

Kernels are costed by `madmax.hardware.compute`; collectives by `madmax.hardware.collectives`. A
collective names its process group (the stream it runs on), the pass it belongs to and where it sits
relative to its unit's compute, so a program builder can place it without knowing which parallelism
made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from madmax.collective import Collective, Span
from madmax.config.base import DType


class KernelKind(StrEnum):
    GEMM = "gemm"
    ATTENTION = "attention"
    MEMORY = "memory"
    LAUNCH = "launch"  # a kernel too small to cost more than its launch (transposes, masks, bias adds)
    HOST = "host"  # bytes over the GPU-host link (embedding rows offloaded to host memory)


class Phase(StrEnum):
    """The pass a piece of work belongs to."""

    FORWARD = "F"
    BACKWARD = "B"


class Where(StrEnum):
    """Where a unit's collective runs relative to the unit's own kernels in its pass.

    AFTER: after the pass's kernels, before the next unit starts (Megatron's TP f/g collectives).
    BESIDE_ATTENTION: during the attention kernels, which wait for it (the context-parallel K/V ring).
    BEFORE: before the forward (ids sent to the owners of embedding rows).
    AHEAD: for the next iteration, beside the whole of this one (the next batch's ids sent to the owners of
    embedding rows, HugeCTR's inter-iteration overlap): nothing in this iteration waits for it, and the
    iteration ends no earlier than it does.
    TO_CONSUMER: forward: the unit's output travels to the unit that consumes it, whose forward waits;
    backward: the gradient travels back after the consumer's backward, and this unit's backward waits.
    UPDATE: once per iteration, after the last micro-batch's backward (with the gradient reduction).
    ON_GRADIENT: once per iteration, as soon as the last micro-batch's output gradient is back from the
    consumer (its backward ends), beside the unit's own exchanges and kernels: a gradient that needs only
    that (the replicated embedding tables'); the optimizer step waits for it.
    OVERLAPPED: after the pass's kernels, beside the compute that follows (another micro-batch's, in a
    two-micro-batch overlap of the expert all-to-all); the pass ends when it has.
    WITH_GEMMS: pipelined in chunks with the unit's GEMMs (Transformer Engine comm-GEMM overlap of the
    TP all-gathers and reduce-scatters, strategy tp_overlap): the first chunk's transfer is exposed, the
    rest runs beside the GEMMs.
    """

    AFTER = "after"
    BESIDE_ATTENTION = "beside_attention"
    BEFORE = "before"
    AHEAD = "ahead"
    TO_CONSUMER = "to_consumer"
    UPDATE = "update"
    ON_GRADIENT = "on_gradient"
    OVERLAPPED = "overlapped"
    WITH_GEMMS = "with_gemms"


@dataclass(frozen=True, slots=True)
class Kernel:
    """A GEMM (m x k) @ (k x n) repeated `batch` times, a fused attention, or a memory-bound pass.

    A grouped GEMM (routed experts) runs `batch` GEMMs of m rows, each with its own weights, in one launch.
    An attention kernel runs `batch` sequences of `q_len` queries over `kv_len` keys (kv_len may be a
    mean: a decode step reads the sum of its sequences' caches), or, with `segments`, one variable-length
    call over sequences of different (queries, keys), as serving engines run their prefill chunks.

    category: the op kind it is reported under in the breakdown (gemm, attention, elementwise, ...).
    flops: model FLOPs of the kernel (for MFU); num_bytes: bytes moved by a memory-bound kernel.
    """

    kind: KernelKind
    category: str
    flops: float = 0.0
    m: int = 0
    k: int = 0
    n: int = 0
    batch: int = 1
    heads: int = 0
    kv_heads: int = 0
    q_len: int = 0
    kv_len: float = 0
    head_dim: int = 0
    causal: bool = True
    backward: bool = False
    num_bytes: float = 0.0
    dtype: DType | None = None  # None: the plan's dtype
    window: int | None = None  # attention: keys each query reads back (a sliding window); None: all
    kv_width: float | None = None  # attention: bytes per K/V element when they differ from dtype (fp8 cache)
    weight_width: float | None = None  # GEMM: bytes per weight element when stored narrower (int4)
    segments: tuple[tuple[int, float], ...] = ()  # varlen attention: (queries, keys) of each sequence
    grouped: bool = False  # GEMM: `batch` different weight matrices (routed experts), one grouped launch
    multi_stream: bool = False  # grouped GEMM: one GEMM launch per group over several streams instead
    wgrad: bool = False  # GEMM: a weight gradient dW = X^T dY (its rate: `ComputeModel.wgrad_fraction`)
    scores_saved: bool = False  # attention backward: reads the kept probabilities (unfused), no score recompute


@dataclass(frozen=True, slots=True)
class CommOp:
    """A collective of one rank: its process group (the stream it runs on), algorithm, size (nccl-tests
    convention), the ranks it spans, and its place in the unit's pass."""

    group: str
    kind: Collective
    size_bytes: float
    span: Span
    label: str
    phase: Phase = Phase.FORWARD
    where: Where = Where.AFTER
