"""Training stacks: how a training framework runs the same model and strategy (catalog/training_stacks.yaml).

The same model under the same strategy trains at different speeds under Megatron-Core with Transformer
Engine, plain PyTorch, FSDP2 (torchtitan, OLMo-core), FSDP1 (llm-foundry), nanotron and DeepSpeed, because
they fuse different kernels, move different extra bytes each step, reduce gradients in different dtypes and
issue their collectives at different granularities. A `TrainingStack` holds those differences, each with its
source; the plan builder applies it to the workload's kernels (`madmax.parallel.stack_kernels`), to the
ZeRO-3 gathers (`gather_sizes`) and to the gradients' reduce dtype (`reduce_bytes`), and the program builder
to when a gather is issued and may start (`prefetch_units`), which backward passes gather again
(`no_backward_gather`), FSDP2's copies on the compute stream and the replicas' all-reduce stream. The
default stack, Megatron-Core, changes nothing: the workload's kernels are its kernels.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, NonNegativeInt, PositiveInt

from madmax.config.base import DType, Schema
from madmax.config.checks import path_rule
from madmax.config.hardware import Architecture
from madmax.config.kernels import AttentionKernels
from madmax.errors import ConfigError

Factor = Annotated[float, Field(ge=1, allow_inf_nan=False)]


class OpRole(StrEnum):
    """What an element-wise op is, for the kernels a stack splits it into."""

    NORM = "norm"  # LayerNorm / RMSNorm (an element-wise op whose name says norm)
    ACTIVATION = "activation"  # the FFN's activation (GELU, SwiGLU: silu(gate) * up)
    LOSS = "loss"  # the cross-entropy over the logits
    RELU = "relu"  # a ReLU right after an MLP layer's GEMM (recommendation models)
    EMBEDDING = "embedding"  # the embedding bags' backward and sparse optimizer update (recommendation models)


class ExchangeDType(StrEnum):
    """Format of the pooled embedding vectors the tables' all-to-all carries and of the replicated tables'
    gradients all-reduced: the table's elements, or the MLPs' compute dtype (16 bits under mixed precision)."""

    TABLE = "table"
    COMPUTE = "compute"


class GatherIssue(StrEnum):
    """How ZeRO-3 / FSDP all-gathers the sharded weights before each pass: one collective per block (a
    transformer layer, FSDP's unit of wrapping), or one per parameter tensor (DeepSpeed ZeRO-3)."""

    BLOCK = "block"
    PARAMETER = "parameter"


class ReduceDType(StrEnum):
    """Format of the gradients the data-parallel reduction carries: the training dtype's (16 bits under mixed
    precision), or fp32 (FSDP2's MixedPrecisionPolicy(reduce_dtype=float32), fp32 gradient accumulation)."""

    COMPUTE = "compute"
    FP32 = "fp32"


class KeptUnit(StrEnum):
    """Units whose weights the backward pass does not gather again under ZeRO-3: the embedding (before the
    layers), the last transformer layer, the head (after the layers)."""

    FIRST = "first"
    LAST_LAYER = "last_layer"
    LAST = "last"


class Unfused(Schema):
    """An element-wise op run as `kernels` eager kernels moving `bytes_factor` times the bytes of the fused one."""

    kernels: PositiveInt = Field(description="Kernels per pass in place of the one fused kernel.")
    bytes_factor: Factor = Field(description="Bytes moved over those of the fused kernel (intermediates written "
                                             "and read back, fp32 upcasts).")


class ExpertGemm(StrEnum):
    """How the routed experts' GEMMs are launched: one grouped kernel over every local expert, or one GEMM per
    local expert spread over several CUDA streams (Transformer Engine's GroupedLinear on Hopper)."""

    GROUPED = "grouped"
    MULTI_STREAM = "multi_stream"


class EagerPass(Schema):
    """Eager kernels of one pass over a tensor of E elements: `kernels` launched once and `kernels_per_expert` per
    local expert (a Python loop over the rank's experts), together moving `moved` x E elements (read plus write)."""

    kernels: NonNegativeInt = Field(0, description="Kernels launched once per pass.")
    kernels_per_expert: NonNegativeInt = Field(0, description="Kernels launched per local expert per pass.")
    moved: float = Field(ge=0, allow_inf_nan=False, description="Elements read and written, over the tensor's E.")


class EagerOps(Schema):
    """Work a stack runs as eager kernels beside a fused op, in the forward and in the backward pass."""

    forward: EagerPass = Field(description="The forward pass (a recomputed forward repeats it).")
    backward: EagerPass = Field(description="The backward pass.")


class TrainingStack(Schema):
    """A training framework's kernel fusion, per-step extra traffic and collective issue, each with its source."""

    name: str = Field(description="Catalog name, e.g. 'megatron-core'.")
    description: str = Field("", description="The framework and the versions these settings describe.")
    unfused: dict[OpRole, Unfused] = Field(default_factory=dict,
                                           description="Element-wise ops the stack runs unfused, by role.")
    weight_cast_bytes_per_param: float = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="Bytes per parameter moved each micro-batch, in each of the forward and backward passes, "
        "casting fp32 master weights to the 16-bit compute dtype and the gradient back (autocast); "
        "0 when the optimizer keeps 16-bit copies (Megatron, DeepSpeed).")
    zero3_gather: GatherIssue = Field(GatherIssue.BLOCK, description="ZeRO-3 all-gather granularity.")
    persistence_threshold: NonNegativeInt = Field(
        0, description="ZeRO-3: parameter tensors with fewer elements stay whole on every rank (never gathered); "
                       "applies with per-parameter gathers.")
    prefetch_units: NonNegativeInt | None = Field(
        None, description="ZeRO-3: blocks whose gathers may run ahead of the compute that needs them (0: a gather "
                          "starts when the compute before it ends); None: as soon as the stream is free. A gather "
                          "prefetched (>= 1) is issued before the gradient reduction of the pass it runs beside.")
    zero3_reduce: GatherIssue | None = Field(
        None, description="ZeRO-3 gradient reduce-scatter granularity: one per block, or one per parameter tensor; "
                          "None: as the gathers (zero3_gather).")
    reduce_dtype: ReduceDType = Field(
        ReduceDType.COMPUTE, description="Format of the gradients the data-parallel reduce-scatter or all-reduce "
                                         "carries: the training dtype's (compute) or fp32 (4 bytes per element).")
    gather_copy_out: bool = Field(
        False, description="ZeRO-3: each all-gather lands in one flat buffer copied into the parameters on the "
                           "compute stream before the pass (reads and writes the gathered bytes).")
    reduce_copy_in: bool = Field(
        False, description="ZeRO-3: each gradient reduce-scatter starts with a copy of the unit's gradients into "
                           "one buffer of the reduce dtype on the compute stream (reads the gradients, writes "
                           "reduce_dtype bytes per element).")
    replica_reduce_stream: bool = Field(
        False, description="Hybrid sharding: the all-reduce over the replicas runs on a stream and communicator of "
                           "its own, beside the shard group's gathers and reduce-scatters; else after them.")
    no_backward_gather: list[KeptUnit] = Field(
        default_factory=list, description="ZeRO-3: units whose backward gathers no weights (kept gathered from "
                                          "their forward, FSDP reshard_after_forward=False, or not needed): first "
                                          "(embedding), last_layer, last (head).")
    recompute_regathers: bool = Field(
        False, description="ZeRO-3 with full recompute: the recomputed forward gathers the weights and releases them, "
                           "and the backward gathers them again (three gathers per micro-batch, not two).")
    gather_peer_copies: bool = Field(
        False, description="Each all-gather lands in a list of one tensor per rank: n copy kernels after it.")
    reduce_peer_copies: bool = Field(
        False, description="ZeRO-3: each gradient reduce-scatter takes a list of one input per rank, flattened into "
                           "one buffer by n copy kernels before it; per parameter tensor where gathers are.")
    pipeline_scatter_gather: bool = Field(
        False, description="Without sequence parallelism, each TP rank sends 1/tp of a pipeline activation (or its "
                           "gradient) to the next stage, whose TP group all-gathers it over the scale-up fabric.")
    calibration: str | None = Field(None, description="Compute profile of the stack's runtime (its launch floor), "
                                                      "a catalog path; None: the shipped default.")
    inference_calibration: str | None = Field(
        None, description="Compute profile of the stack's forward-only steps (task inference), when they run under "
                          "another runtime than its training steps, a catalog path; None: `calibration`.")
    gemm_epilogue: list[OpRole] = Field(
        default_factory=list, description="Element-wise ops of these roles run in the epilogue of the GEMM before "
                                          "them (cuBLASLt bias+ReLU): no kernel and no bytes of their own.")
    embedding_exchange: ExchangeDType = Field(
        ExchangeDType.TABLE, description="Format of the pooled embedding vectors exchanged between ranks and of "
                                         "the replicated tables' gradients: the table's (table) or the compute "
                                         "dtype (compute).")
    embedding_ids_ahead: bool = Field(
        False, description="The next batch's sparse ids travel to their tables' owners during this step, on a stream "
                           "of their own (inter-iteration overlap): no step waits for its own ids' all-to-all.")
    embedding_id_bytes: PositiveInt = Field(8, description="Bytes of one sparse id in the ids' all-to-all.")
    embedding_optimizer: Literal["sgd", "rowwise_adagrad", "adagrad", "adam"] = Field(
        "rowwise_adagrad", description="Optimizer of the embedding tables: its state per row or element, stored "
                                       "and read and written for every row looked up (madmax.parallel.embedding).")
    expert_gemm: ExpertGemm = Field(
        ExpertGemm.GROUPED, description="Routed-expert GEMMs: one grouped kernel (grouped) or one GEMM launch per "
                                        "local expert over several streams (multi_stream).")
    expert_bias: EagerOps | None = Field(
        None, description="Routed experts with biases: the down projection's bias, weighted by the router "
                          "probability, added expert by expert on the R x h output; None: in the GEMM's epilogue.")
    glu_clamp: EagerOps | None = Field(
        None, description="Clamped GLU experts (MoE glu_limit): the clamp of the R x 2f activation input run as eager "
                          "kernels before the fused activation; None: inside the activation's kernel.")
    graph_step: bool = Field(
        False, description="The whole iteration replays as one CUDA graph fed by an asynchronous reader: the host "
                           "issues none of its kernels (each runs at least the device's floor) and does no "
                           "synchronisation, data loading or logging at the step end.")
    attention_kernels: AttentionKernels = Field(
        default_factory=dict, description="The fused-attention kernel the framework runs, by GPU architecture "
        "(catalog calibration/attention_kernels.yaml: fa2, fa3, cudnn, ...); an architecture not listed keeps the "
        "compute profile's attention curve.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source of each field.")

    def gather_sizes(self, params: list[tuple[int, float]]) -> tuple[float, ...] | None:
        """ZeRO-3: the parameters of each all-gather of a block whose tensors have (elements, elements on this
        rank) `params`; None means one gather of the whole block. Tensors below the persistence threshold
        are not gathered (a block of such tensors only gathers nothing)."""
        if self.zero3_gather is GatherIssue.BLOCK:
            return None
        return tuple(rank for whole, rank in params if rank and whole >= self.persistence_threshold)

    def reduce_bytes(self, grad_bytes: float) -> float:
        """Bytes per gradient element the data-parallel reduction carries (`grad_bytes`: the training dtype's)."""
        return DType.FP32.num_bytes if self.reduce_dtype is ReduceDType.FP32 else grad_bytes

    def reduces_per_parameter(self) -> bool:
        """Whether ZeRO-3 reduce-scatters each parameter tensor's gradient on its own (else a block's at once)."""
        return (self.zero3_reduce or self.zero3_gather) is GatherIssue.PARAMETER

    def attention_kernel(self, architecture: Architecture | None) -> str | None:
        """The attention kernel the stack runs on `architecture` (None: the compute profile's curve)."""
        return self.attention_kernels.get(architecture) if architecture else None

    def calibration_for(self, inference: bool) -> str | None:
        """The compute profile of a training (`inference` False) or forward-only step under this stack."""
        return (self.inference_calibration or self.calibration) if inference else self.calibration


@cache
def _catalog() -> dict:
    text = resources.files("madmax.catalog").joinpath("training_stacks.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def training_stack_names() -> list[str]:
    """Names of the catalog's training stacks, the default first."""
    return [entry["name"] for entry in _catalog()["stacks"]]


def training_stack_entry(name: str) -> dict | None:
    """The catalog entry of the training stack `name` as written (its sources too), or None."""
    return next((e for e in _catalog()["stacks"] if e["name"] == name.strip().lower()), None)


def default_training_stack() -> str:
    """Name of the default training stack (Megatron-Core)."""
    return _catalog()["default"]


def load_training_stack(spec: str | Path | dict | TrainingStack | None = None) -> TrainingStack:
    """A training stack: a catalog name (None: the default, Megatron-Core), a TrainingStack, a mapping or a
    YAML/JSON file."""
    from madmax.config.loaders import load_profile_entry

    found = load_profile_entry(TrainingStack, spec, _catalog(), "stack")
    if found is not None:
        return found
    from madmax.config.stack import stack_names

    if str(spec).strip().lower() in stack_names():
        raise ConfigError(f"stack={str(spec)!r} is a serving engine, for task=inference of a generative model; "
                          f"allowed for training: {', '.join(training_stack_names())}")
    raise ConfigError(f"stack {str(spec)!r} is neither a catalog training stack nor a file{path_rule(spec)}; "
                      f"allowed: {', '.join(training_stack_names())}")
