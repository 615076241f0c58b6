"""Kernels: what one rank runs for one op of one micro-batch, after sharding. Costed by `hardware`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from madmax.config.base import DType
from madmax.config.strategy import Axis
from madmax.hardware.collectives import Collective, Span


class KernelKind(StrEnum):
    GEMM = "gemm"
    ATTENTION = "attention"
    MEMORY = "memory"
    LAUNCH = "launch"  # a kernel too small to cost more than its launch (transposes, masks, bias adds)
    HOST = "host"  # bytes over the GPU-host link (embedding rows offloaded to host memory)


@dataclass(frozen=True, slots=True)
class Kernel:
    """A GEMM (m x k) @ (k x n) repeated `batch` times, a fused attention, or a memory-bound pass.

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
    kv_len: int = 0
    head_dim: int = 0
    causal: bool = True
    backward: bool = False
    num_bytes: float = 0.0
    dtype: DType | None = None  # None: the training dtype


@dataclass(frozen=True, slots=True)
class CommOp:
    """A collective of one rank: its axis, algorithm, size (nccl-tests convention) and group span."""

    axis: Axis
    kind: Collective
    size_bytes: float
    span: Span
    label: str
