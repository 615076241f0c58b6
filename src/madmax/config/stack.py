"""Serving stacks: how an inference engine schedules, launches and communicates (catalog/serving.yaml).

The same model on the same GPUs serves at different speeds under TensorRT-LLM, vLLM and SGLang: their
schedulers batch differently (a token budget per step; prefill chunks mixed with decodes or not), they
replay CUDA graphs for different steps, pick different all-reduce kernels, and spend different host
time per step. A `ServingStack` holds those defaults, each with its source; the two numbers no document
gives (the shortest kernel in a graph replay, the host time of a step) are fitted to measured serving
runs and say so.
"""

from __future__ import annotations

import math
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import Field, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.config.checks import path_rule
from madmax.config.hardware import Architecture
from madmax.config.kernels import AttentionKernels
from madmax.config.units import Seconds
from madmax.errors import ConfigError

Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class CudaGraphs(StrEnum):
    """Which steps replay a captured CUDA graph: none, decode-only steps, or every step."""

    NONE = "none"
    DECODE = "decode"
    ALL = "all"


class Engine(StrEnum):
    """The inference engine a stack profile describes (its launch rules depend on it)."""

    TRTLLM = "trtllm"
    VLLM = "vllm"
    SGLANG = "sglang"


class Launch(StrEnum):
    """How the engine was launched for the run (`launched`).

    ENGINE: every setting at the engine's default.
    SIZED: the defaults, with the token budget and the running-request cap raised where they cannot serve the
    workload (a prompt that does not chunk must fit one step beside the running decodes), as serving
    benchmarks size an engine for its load.
    AICONFIGURATOR: the settings AIConfigurator's generator writes for an aggregated worker (the launch of the
    measured `serving_h100` rows).
    """

    ENGINE = "engine"
    SIZED = "sized"
    AICONFIGURATOR = "aiconfigurator"


class DPRouter(StrEnum):
    """How an engine with attention data parallelism spreads arriving requests over its ranks: in turn, or to
    the rank with the fewest requests (waiting ones weighted by `ServingStack.dp_waiting_weight`)."""

    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"


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
    fitted_max_bytes: float | None = Field(None, gt=0, allow_inf_nan=False,
                                           description="Largest message (bytes) the latency and fraction were "
                                           "fitted on; beyond it each byte costs 1/`large_busbw_fraction`.")
    large_busbw_fraction: Fraction | None = Field(None, description="Bandwidth of the kernel's messages beyond "
                                                  "`fitted_max_bytes`, as a fraction of the scale-up bandwidth "
                                                  "(measured at larger sizes).")

    @model_validator(mode="after")
    def _known(self) -> AllReduceRule:
        if self.algorithm not in ("one_shot", "two_shot"):
            raise ValueError(f"all_reduce algorithm {self.algorithm!r} is unknown; allowed: one_shot, two_shot")
        if (self.fitted_max_bytes is None) != (self.large_busbw_fraction is None):
            raise ValueError("all_reduce fitted_max_bytes and large_busbw_fraction go together; allowed: both or "
                             "neither")
        return self

    def seconds(self, size_bytes: float, ranks: int, link_bytes_per_s: float) -> float:
        """Time of one call on `ranks` GPUs whose links carry `link_bytes_per_s` per direction: one-shot
        t = a + (n-1) S / B, two-shot t = 2a + 2 (n-1)/n S / B, B = fraction x link; past the fitted range each
        further byte moves at the large-message fraction (so the time never falls as the message grows)."""
        n = ranks
        per_byte = (n - 1) if self.algorithm == "one_shot" else 2 * (n - 1) / n
        base = self.latency_s if self.algorithm == "one_shot" else 2 * self.latency_s
        fitted = min(size_bytes, self.fitted_max_bytes or size_bytes)
        t = base + per_byte * fitted / (link_bytes_per_s * self.busbw_fraction)
        if size_bytes > fitted:
            t += per_byte * (size_bytes - fitted) / (link_bytes_per_s * self.large_busbw_fraction)
        return t


class ServingStack(Schema):
    """An inference engine's defaults, each with its source in `sources`."""

    name: str = Field(description="Catalog name, e.g. 'trtllm'.")
    description: str = Field("", description="The engine and the versions these defaults describe.")
    engine: Engine | None = Field(None, description="The engine (trtllm, vllm, sglang): which launch rules apply.")
    version: str = Field("", description="The engine releases these defaults were read from, e.g. '0.11-0.13'.")
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
    dp_router: DPRouter = Field(DPRouter.LEAST_LOADED, description="How an engine with attention data "
                                "parallelism assigns an arriving request to one of its ranks: round_robin, or "
                                "least_loaded (the rank with the lowest dp_waiting_weight x waiting + running "
                                "requests, the first on a tie).")
    dp_waiting_weight: PositiveInt = Field(1, description="Weight of a rank's waiting requests against its running "
                                           "ones in the least_loaded router.")
    frontend_s: Seconds = Field(0.0, ge=0, le=60, description="The HTTP front end's time per request: the "
                                "request's way from the client to the engine's queue and the first token's way "
                                "back (in TTFT and in a closed-loop client's round trip), at most 60 s (a clock "
                                "of many such round trips stays exact to the microsecond).")
    attention_kernels: AttentionKernels = Field(
        default_factory=dict, description="The fused-attention kernel the engine runs for prefill and decode, by GPU "
        "architecture (catalog calibration/attention_kernels.yaml); an architecture not listed keeps the compute "
        "profile's attention curve.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source of each field.")

    def attention_kernel(self, architecture: Architecture | None) -> str | None:
        """The attention kernel the engine runs on `architecture` (None: the compute profile's curve)."""
        return self.attention_kernels.get(architecture) if architecture else None

    @property
    def label(self) -> str:
        """The profile's name with the releases it describes, e.g. 'vllm (0.11-0.13)'."""
        return f"{self.name} ({self.version})" if self.version else self.name

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


def default_stack() -> str:
    """Name of the default serving stack."""
    return _catalog()["default"]


def stack_entry(name: str) -> dict | None:
    """The catalog entry of the serving stack `name` as written (its sources too), or None."""
    return next((e for e in _catalog()["stacks"] if e["name"] == name.strip().lower()), None)


def load_stack(spec: str | Path | dict | ServingStack | None = None) -> ServingStack:
    """A serving stack: a catalog name (None: the default), a ServingStack, a mapping or a YAML/JSON file."""
    from madmax.config.loaders import load_profile_entry

    found = load_profile_entry(ServingStack, spec, _catalog(), "stack")
    if found is not None:
        return found
    raise ConfigError(f"stack {str(spec)!r} is neither a catalog serving stack nor a file{path_rule(spec)}; "
                      f"allowed: {', '.join(stack_names())}")


def weight_format_name(dtype: str) -> str | None:
    """What a quantized weight format is called in results and launch notes (catalog serving.yaml
    weight_formats), e.g. 'int8 W8A8 (SmoothQuant)'; None for a plain format."""
    entry = _catalog().get("weight_formats", {}).get(str(dtype))
    return None if entry is None else str(entry["name"])


def weight_bytes_per_param(dtype: str) -> float | None:
    """Bytes per weight element of a quantized format (fp8, fp4, int4), scales included; None for a
    plain format (its element size)."""
    entry = _catalog().get("weight_formats", {}).get(str(dtype))
    return None if entry is None else float(entry["bytes_per_param"])


# ---------------------------------------------------------------------------------------------- launch

# Settings a launch or the user may change: the scheduler's, the memory split's and the front end's.
ENGINE_SETTINGS = ("max_num_tokens", "max_batch", "chunked_prefill", "mixed_batches", "cuda_graphs",
                   "cuda_graph_max_batch", "host_overlaps_gpu", "kv_pool_fraction", "reserve_full_kv", "frontend_s",
                   "dp_router", "dp_waiting_weight")


def sized_budget(batch: int, prompt: int) -> int:
    """The token budget serving benchmarks give a step for `batch` running requests and a `prompt`: room for
    the prompt beside every decode, and the margin of AIConfigurator's rule (`launch.margin_tokens`)."""
    return batch + prompt + int(_catalog()["launch"]["margin_tokens"])


def launched(stack: ServingStack, launch: Launch, batch: int, prompt: int, role: str = "agg"
             ) -> tuple[ServingStack, list[str]]:
    """The stack as launched for `batch` requests of `prompt` tokens on a worker of `role` (agg, prefill,
    decode), and a note for every setting the launch changed.

    SIZED keeps the engine's defaults unless they cannot serve the load: an engine that does not chunk prompts
    gets max_num_tokens = batch + prompt + margin when batch + prompt exceed it (a prompt must fit one step
    beside the running decodes, else it waits until every earlier request finishes), and max_batch = batch
    when the batch exceeds it. AICONFIGURATOR sets what its generator writes (`catalog/serving.yaml`
    `launch.sources`): TensorRT-LLM max_num_tokens = batch + prompt + margin rounded up to a KV block,
    max_batch_size and the CUDA-graph batches = batch, 80% of free memory for the KV cache (its templates'
    default); vLLM max_num_batched_tokens = batch + prompt + margin; SGLang max_prefill_tokens = prompt + margin
    with mixed chunks and max_running_requests = batch; prefill workers prompt + margin, decode workers batch.
    """
    if launch is Launch.ENGINE:
        return stack, []
    step = {"agg": (batch, prompt), "prefill": (0, prompt), "decode": (batch, 0)}[role]
    if launch is Launch.SIZED:
        update: dict = {}
        if not stack.chunked_prefill and sum(step) > stack.max_num_tokens:
            update["max_num_tokens"] = sized_budget(*step) if role != "decode" else batch
        if batch > stack.max_batch and role != "prefill":
            update["max_batch"] = batch
        return _changed(stack, update, "launch sized", "the engine's default cannot serve the load")
    if stack.engine is None:
        raise ConfigError(f"launch aiconfigurator has no rule for stack {stack.name!r}, which names no engine; "
                          "allowed: launch engine or sized, or a stack with engine trtllm, vllm or sglang")
    budget = batch if role == "decode" else sized_budget(*step)
    block = int(_catalog()["launch"]["block_tokens"])
    update = {}
    if stack.engine is Engine.TRTLLM:
        update = {"max_num_tokens": block * math.ceil(budget / block), "chunked_prefill": False,
                  "kv_pool_fraction": float(_catalog()["launch"]["trtllm_kv_fraction"])}
        if role != "prefill":
            update.update(max_batch=batch, cuda_graph_max_batch=batch)
    elif stack.engine is Engine.VLLM:
        update = {"max_num_tokens": budget, "max_batch": max(stack.max_batch, batch),
                  "cuda_graph_max_batch": max(stack.cuda_graph_max_batch, batch)}
    else:  # SGLang's max_prefill_tokens holds the prompt tokens of a step, the running decodes counted in it
        update = {"max_num_tokens": min(stack.max_num_tokens, sized_budget(0, prompt)) if role != "decode"
                  else stack.max_num_tokens}
        if role != "prefill":
            update.update(max_batch=batch, cuda_graph_max_batch=batch, mixed_batches=role == "agg")
    return _changed(stack, update, "launch aiconfigurator", "its generator's rule for this engine")


def _changed(stack: ServingStack, update: dict, launch: str, why: str) -> tuple[ServingStack, list[str]]:
    moved = {k: v for k, v in update.items() if getattr(stack, k) != v}
    if not moved:
        return stack, []
    text = ", ".join(f"{k} {_shown(getattr(stack, k))} -> {_shown(v)}" for k, v in moved.items())
    return stack.model_copy(update=moved), [f"{launch}: {text} ({why}; `--launch engine` keeps the defaults)"]


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


def with_settings(stack: ServingStack, text: str | None) -> ServingStack:
    """The stack with the user's engine settings, e.g. "max_num_tokens=16384,chunked_prefill=1"; each
    checked as the stack's own field."""
    if not text:
        return stack
    update: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ConfigError(f"engine setting {item.strip()!r} is not key=value; allowed keys: "
                              f"{', '.join(ENGINE_SETTINGS)}")
        if key not in ENGINE_SETTINGS:
            raise ConfigError(f"engine.{key} is not an engine setting; allowed: {', '.join(ENGINE_SETTINGS)}")
        if key in update:
            raise ConfigError(f"engine.{key} is given twice; allowed: each setting once")
        update[key] = value.strip()
    from madmax.config.loaders import validate

    return validate(ServingStack, {**stack.model_dump(), **update}, "engine")
