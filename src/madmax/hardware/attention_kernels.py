"""Attention kernels by GPU architecture: the curve of each pass and mask of a named kernel.

A flash-attention pass runs at R(kv) = P * e_max * kv / (kv + kv0) (`compute.attention_compute_s`), P the GPU's
dense peak. The compute profile holds one (e_max, kv0) per pass, measured on its own device and software (the
shipped one: torch 2.11 SDPA on an H200, which dispatches to cuDNN there). Frameworks run other kernels --
FlashAttention-2 reaches half of cuDNN's or FlashAttention-3's rate on Hopper -- so a stack names the kernel it
runs per architecture (`madmax.config.kernels`) and this table gives its curves, fitted to published kernel
timings by `madmax.hardware.attention_fit` (catalog/calibration/attention_kernels.yaml, from
attention_kernel_points.yaml). Causal and unmasked attention have their own curves here (the profile has one):
a causal kernel at s keys loses more to its diagonal tiles and shorter rows than its halved FLOP count says.
"""

from __future__ import annotations

from functools import cache

import yaml
from pydantic import Field

from madmax.config.base import Schema
from madmax.config.hardware import Architecture
from madmax.config.kernels import ATTENTION_KERNELS_FILE
from madmax.errors import ConfigError
from madmax.hardware.profile import AttentionPassFit, catalog_path

KERNELS_FILE = ATTENTION_KERNELS_FILE
POINTS_FILE = "calibration/attention_kernel_points.yaml"


class FittedPass(AttentionPassFit):
    """e(kv) = peak_fraction * kv / (kv + kv0) of one pass and mask, fitted to a published panel."""

    derived: bool = Field(description="The panel was derived by a rule of the points file, not measured.")
    median_error: float = Field(ge=0, description="Median |fit / measured - 1| over the panel's sequence lengths.")
    max_error: float = Field(ge=0, description="Largest |fit / measured - 1| over the panel's sequence lengths.")


class Masks(Schema):
    causal: FittedPass
    full: FittedPass = Field(description="No mask: every query attends to every key.")


class KernelCurves(Schema):
    """One kernel on one architecture: a curve per pass and mask, as fractions of the architecture's dense peak."""

    device: str = Field(description="The measured device and shapes.")
    software: str = Field(description="The kernel's release measured.")
    head_dim: int = Field(gt=0, description="Head dimension of the panels (other widths take the same curves).")
    source: str = Field(description="How the curves were obtained and the paper/figure they come from.")
    forward: Masks
    backward: Masks

    def curve(self, causal: bool, backward: bool) -> FittedPass:
        masks = self.backward if backward else self.forward
        return masks.causal if causal else masks.full


class AttentionKernel(Schema):
    description: str = Field(description="The kernel and the frameworks that run it.")
    architectures: dict[Architecture, KernelCurves] = Field(
        description="Curves by architecture; an architecture missing has no published panel.")


class AttentionKernelTable(Schema):
    kernels: dict[str, AttentionKernel]


@cache
def kernel_table() -> AttentionKernelTable:
    """The catalog's attention kernels (catalog/calibration/attention_kernels.yaml)."""
    text = catalog_path(KERNELS_FILE).read_text(encoding="utf-8")
    return AttentionKernelTable.model_validate(yaml.safe_load(text))


def kernel_curves(name: str, architecture: Architecture | None) -> KernelCurves | None:
    """The curves of kernel `name` on `architecture`, or None when it has none there (or the GPU names no
    architecture). An unknown name is a ConfigError naming the allowed ones."""
    kernels = kernel_table().kernels
    if name not in kernels:
        raise ConfigError(f"attention_kernel={name!r} is unknown; allowed: {', '.join(sorted(kernels))}")
    return None if architecture is None else kernels[name].architectures.get(architecture)
