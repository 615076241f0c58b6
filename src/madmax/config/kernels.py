"""The attention kernel a software stack runs, by GPU architecture (the kernels of catalog/calibration/
attention_kernels.yaml, whose curves `madmax.hardware.attention_kernels` reads).

A training or serving stack names, per architecture, the fused-attention kernel its framework selects there
(Transformer Engine's cuDNN FusedAttention on Hopper, PyTorch SDPA's FlashAttention-2 backend, vLLM's FA3, ...).
An architecture it does not name keeps the compute profile's own attention curve.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated

import yaml
from pydantic import AfterValidator

from madmax.config.hardware import Architecture

ATTENTION_KERNELS_FILE = "calibration/attention_kernels.yaml"


@cache
def attention_kernel_names() -> tuple[str, ...]:
    """Names of the catalog's attention kernels, sorted (fa2, fa3, cudnn, ...)."""
    text = resources.files("madmax.catalog").joinpath(ATTENTION_KERNELS_FILE).read_text(encoding="utf-8")
    return tuple(sorted(yaml.safe_load(text)["kernels"]))


def _known(name: str) -> str:
    names = attention_kernel_names()
    if name not in names:
        raise ValueError(f"unknown attention kernel; allowed: {', '.join(names)}")
    return name


AttentionKernels = dict[Architecture, Annotated[str, AfterValidator(_known)]]
