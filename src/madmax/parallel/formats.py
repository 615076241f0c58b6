"""Low-precision training formats (fp8, mxfp8, nvfp4): the numbers of catalog/formats.yaml as a `LowPrecision`.

A format says how a GEMM operand is cast from the bf16 tensor: bytes per element with its block scales,
the copies the cast writes (rowwise and columnwise), whether a per-tensor amax must be read first, whether
the columnwise copy is a transpose pass of a fused cast, and the amax history of delayed scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from madmax.config.base import DType
from madmax.config.training_stack import OpRole

FP32_BYTES = DType.FP32.num_bytes  # amax history entries are fp32


@dataclass(frozen=True)
class LowPrecision:
    """One training format of formats.yaml (see its header for each field)."""

    name: str
    element_bytes: float
    scale_bytes_per_element: float
    copies: int
    transpose_pass: bool
    amax_pass: bool
    amax_history: int
    fused_producers: tuple[OpRole, ...]
    bf16_first: int
    bf16_last: int
    weight_cache: bool
    meta_forward: int
    meta_backward: int

    @property
    def bytes_per_element(self) -> float:
        """Bytes of one cast element with its share of the block scales: e.g. mxfp8 1 + 1/32."""
        return self.element_bytes + self.scale_bytes_per_element

    def history_bytes(self, backward: bool) -> float:
        """Bytes of one GEMM's amax histories in one pass (delayed scaling; 0 for block/current scaling)."""
        return self.amax_history * FP32_BYTES * (self.meta_backward if backward else self.meta_forward)


@cache
def _table() -> dict:
    text = resources.files("madmax.catalog").joinpath("formats.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def high_precision() -> DType:
    """The format of what stays out of the low-precision region (attention, LM head): bf16."""
    return DType(_table()["high_precision"]["dtype"])


@cache
def low_precision(dtype: DType) -> LowPrecision | None:
    """The training format of `dtype`, or None when its GEMMs take their operands as they are (bf16, fp32...)."""
    table = _table()
    entry = table["formats"].get(str(dtype))
    if entry is None:
        return None
    meta = table["meta_tensors_per_gemm"]
    return LowPrecision(
        name=str(dtype), element_bytes=float(entry["element_bytes"]),
        scale_bytes_per_element=entry["scale_bytes"] / entry["block"] if entry["block"] else 0.0,
        copies=int(entry["copies"]), transpose_pass=bool(entry["transpose_pass"]), amax_pass=bool(entry["amax_pass"]),
        amax_history=int(entry["amax_history"]),
        fused_producers=tuple(OpRole(role) for role in entry["fused_producers"]),
        bf16_first=int(entry["bf16_layers"]["first"]), bf16_last=int(entry["bf16_layers"]["last"]),
        weight_cache=bool(table["weight_cache"]["per_step"]), meta_forward=int(meta["forward"]),
        meta_backward=int(meta["backward"]))


def tensor_bytes(dtype: DType) -> float:
    """Bytes per element of the weights, gradients and activations a `dtype` run keeps and sends: a
    low-precision format (fp8, mxfp8, nvfp4) casts its GEMM operands from high-precision tensors, which it
    keeps (`high_precision`, bf16); any other dtype keeps its own width. The plan, the data plan and the
    search's closed forms all take it from here."""
    return high_precision().num_bytes if low_precision(dtype) else dtype.num_bytes
