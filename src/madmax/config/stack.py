"""Serving stacks: how an inference engine schedules, launches and communicates (catalog/serving.yaml).

The same model on the same GPUs serves at different speeds under TensorRT-LLM, vLLM and SGLang: their
schedulers batch differently (a token budget per step; prefill chunks mixed with decodes or not), they
replay CUDA graphs for different steps, pick different all-reduce kernels, and spend different host
time per step. A `ServingStack` holds those defaults, each with its source; the two numbers no document
gives (the shortest kernel in a graph replay, the host time of a step) are fitted to measured serving
runs and say so.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import Field, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.config.units import Seconds
from madmax.errors import ConfigError

Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class CudaGraphs(StrEnum):
    """Which steps replay a captured CUDA graph: none, decode-only steps, or every step."""

    NONE = "none"
    DECODE = "decode"
    ALL = "all"


class KVPoolBasis(StrEnum):
    """What the KV-cache pool is a fraction of: all of HBM (vLLM's gpu_memory_utilization, less the
    weights and activations), or the memory left after weights and activations (TensorRT-LLM's
    free_gpu_memory_fraction)."""

    TOTAL = "total"
    FREE = "free"


class AllReduceRule(Schema):
    """A custom all-reduce kernel used for messages up to `max_bytes` (by group size, the largest key
    <= n applies); larger ones fall to the next rule, then to NCCL."""

    algorithm: str = Field(description="one_shot (every rank reads every peer's buffer) or two_shot "
                                       "(reduce-scatter then all-gather through peer memory).")
    max_bytes: dict[int, float] = Field(description="Largest message (bytes) by group size: {ranks: bytes}.")
    latency_s: Seconds = Field(ge=0, description="Fixed time of one call (one_shot: t = a + (n-1) S / B; "
                                                 "two_shot: t = 2a + 2 (n-1)/n S / B).")
    busbw_fraction: Fraction = Field(description="B as a fraction of the scale-up bandwidth per GPU per direction.")

    @model_validator(mode="after")
    def _known(self) -> AllReduceRule:
        if self.algorithm not in ("one_shot", "two_shot"):
            raise ValueError(f"all_reduce algorithm {self.algorithm!r} is unknown; allowed: one_shot, two_shot")
        return self


class ServingStack(Schema):
    """An inference engine's defaults, each with its source in `sources`."""

    name: str = Field(description="Catalog name, e.g. 'trtllm'.")
    description: str = Field("", description="The engine and the versions these defaults describe.")
    max_num_tokens: PositiveInt = Field(description="Token budget of one step (prefill tokens plus decodes).")
    max_batch: PositiveInt = Field(description="Most requests running at once per engine.")
    chunked_prefill: bool = Field(description="A prompt longer than the budget left is prefilled in chunks over "
                                              "several steps (else it waits for a step with room for all of it).")
    mixed_batches: bool = Field(description="Prefill chunks and decodes share a step (else a step is all prefill "
                                            "or all decode, prefill first).")
    cuda_graphs: CudaGraphs = Field(description="Which steps replay a CUDA graph.")
    cuda_graph_max_batch: PositiveInt = Field(description="Largest decode batch with a captured graph.")
    graph_floor_s: Seconds = Field(ge=0, description="Shortest kernel in a CUDA-graph replay (fitted).")
    eager_floor_s: Seconds | None = Field(
        None, ge=0, description="Shortest kernel issued eagerly; default the compute profile's launch floor.")
    host_step_s: Seconds = Field(ge=0, description="Host time of one step: scheduling, sampling, bookkeeping "
                                                   "(fitted).")
    host_overlaps_gpu: bool = Field(description="The host prepares the next step while the GPU runs this one "
                                                "(overlap scheduler), so a step takes max(GPU, host), else their sum.")
    kv_pool_basis: KVPoolBasis = Field(description="What the KV-cache pool fraction applies to.")
    kv_pool_fraction: Fraction = Field(description="Fraction of that memory given to the KV cache.")
    reserve_full_kv: bool = Field(description="A request is admitted only when the KV cache of its whole prompt "
                                              "and output fits (never evicted), else blocks are taken as tokens are "
                                              "computed and the newest request is preempted when the pool is full.")
    all_reduce: tuple[AllReduceRule, ...] = Field((), description="Custom all-reduce kernels for small messages "
                                                                  "inside an NVLink domain, in order.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source of each field.")

    def prompts_per_step(self, prompt_len: int) -> int:
        """Whole prompts of `prompt_len` tokens one step's budget holds; at least one (a longer prompt is
        chunked, or refused by a stack that does not chunk)."""
        return max(1, self.max_num_tokens // prompt_len)


@cache
def _catalog() -> dict:
    text = resources.files("madmax.catalog").joinpath("serving.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def stack_names() -> list[str]:
    """Names of the catalog's serving stacks."""
    return [entry["name"] for entry in _catalog()["stacks"]]


def load_stack(spec: str | Path | dict | ServingStack | None = None) -> ServingStack:
    """A serving stack: a catalog name (None: the default), a ServingStack, a mapping or a YAML/JSON file."""
    from madmax.config.loaders import load_profile_entry

    found = load_profile_entry(ServingStack, spec, _catalog(), "stack")
    if found is not None:
        return found
    raise ConfigError(f"stack {str(spec)!r} is neither a catalog serving stack nor a file; "
                      f"allowed: {', '.join(stack_names())}")


def weight_bytes_per_param(dtype: str) -> float | None:
    """Bytes per weight element of a quantized format (fp8, fp4, int4), scales included; None for a
    plain format (its element size)."""
    entry = _catalog().get("weight_formats", {}).get(str(dtype))
    return None if entry is None else float(entry["bytes_per_param"])
