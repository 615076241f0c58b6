"""The base of every input schema: frozen, no unknown keys, a description with units on every field."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, field_validator

from madmax.config.checks import check_numbers


class Schema(BaseModel):
    """Frozen pydantic model that rejects unknown keys, so a typo in a file is an error, not a no-op.

    Every number of every field (in lists and mappings too) must be finite, an integer at most 2**53
    and any other number at most 1e30 in magnitude (`madmax.config.checks.check_numbers`):
    `pooling: .inf` or a width of 4,000 digits is refused with the field's name instead of overflowing
    later."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*", mode="after")
    @classmethod
    def _finite_in_range(cls, value: object) -> object:
        return check_numbers(value)


class DType(StrEnum):
    """Numeric formats. Peak FLOP/s in the catalog are dense (no structured sparsity) per format."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # per-tensor scaled FP8 (Transformer Engine's delayed-scaling recipe in training)
    MXFP8 = "mxfp8"  # block-scaled FP8 on Blackwell: E4M3 values with an E8M0 scale per 32 (catalog formats.yaml)
    INT8 = "int8"
    FP4 = "fp4"  # NVFP4 on Blackwell: E2M1 values with an E4M3 scale per 16
    INT4 = "int4"  # weight-only quantization (W4A16, AWQ/GPTQ): int4 weights read into 16-bit GEMMs
    MXFP4 = "mxfp4"  # OCP MX: E2M1 weights with an E8M0 scale per 32 (gpt-oss's checkpoints); serving only

    @property
    def num_bytes(self) -> float:
        """Bytes per element of a tensor stored in this format (tf32 is stored as fp32; block scales of
        mxfp8 and fp4 not included: catalog formats.yaml)."""
        return _DTYPE_BYTES[self]


_DTYPE_BYTES = {
    DType.FP64: 8, DType.FP32: 4, DType.TF32: 4, DType.BF16: 2, DType.FP16: 2,
    DType.FP8: 1, DType.MXFP8: 1, DType.INT8: 1, DType.FP4: 0.5, DType.INT4: 0.5,
    DType.MXFP4: 0.5,
}
# Other spellings of a dtype that users write.
DTYPE_ALIASES = {"nvfp4": "fp4", "awq": "int4", "gptq": "int4", "w4a16": "int4", "w8a8": "int8"}


def dtype_among(value: object, allowed: tuple[str, ...], role: str) -> str:
    """`value` (a DType or its name, any case) as a lower-case name, if it is one of `allowed`.

    Raises ValueError "is not a {role} dtype; allowed: ..." (pydantic prefixes the field and value).
    """
    text = str(value.value if isinstance(value, DType) else value).lower()
    text = DTYPE_ALIASES.get(text, text)
    if text not in allowed:
        raise ValueError(f"is not {role} dtype; allowed: {', '.join(allowed)}")
    return text
