"""A serving replica's plan: its blocks split over pipeline stages, what each rank holds (weights and KV
cache), and the kernels and collectives of one serving step on each stage.

A replica is tp x pp GPUs; `dp` replicas serve independently. Tensor parallelism splits every layer as
in training (Megatron's column/row split), without sequence parallelism: each layer all-reduces its
output twice (once in a parallel attention-and-FFN layer). Pipeline stages take consecutive layers,
the embedding on the first and the LM head on the last (`pipeline.split_layers`).

A serving step (`Step`) is one forward pass of the engine over prefill chunks (q new tokens of a prompt
whose first c tokens are cached attend to c + q keys) and decode requests (one new token each, reading
its cache). Its GEMMs and element-wise ops run on all T new tokens; the LM head and sampling only on the
last token of each sequence that produces a token (`Block.per_sequence`).

Memory (Kwon et al. 2023, vLLM, Sec. 3; NVIDIA TensorRT-LLM KV cache docs): weights at their storage
format (the embedding and LM head stay in 16 bits, as quantized checkpoints keep them), the KV cache
2 * kv_heads_per_rank * head_dim * kv_bytes per token per layer (K and V), a layer with fewer KV heads
than tp ranks keeping one head per rank (replicated), a sliding-window layer at most `window` tokens per
sequence; and the activations of the largest step (`workspace_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from madmax.collective import Span
from madmax.config.base import DType
from madmax.config.strategy import Axis, Strategy
from madmax.parallel.kernels import CommOp, Kernel
from madmax.parallel.pipeline import split_layers
from madmax.parallel.placement import span
from madmax.parallel.plan import tp_comm, workload_hidden
from madmax.parallel.tensor import AttentionCall, Shape, forward_kernels
from madmax.workload.ops import Block, OpKind, Placement, TPSplit, Workload

# K and V: two cached tensors per attention layer.
KV_TENSORS = 2
# Activations of a step in flight at once: the residual stream, the normalized input and an output of
# width h per token, plus the widest GEMM output (`workspace_bytes`).
RESIDUAL_TENSORS = 3
LOGIT_BYTES = DType.FP32.num_bytes  # logits are sampled in fp32


@dataclass(frozen=True)
class Step:
    """One forward pass of a serving engine.

    prefill: per prompt chunk, (new tokens q, keys after it c + q); decode: sequences generating one
    token each; decode_kv_tokens: the keys those sequences read in all (their new tokens included);
    sampled: sequences whose logits are computed (the decodes and the prompts this step completes).
    """

    prefill: tuple[tuple[int, int], ...] = ()
    decode: int = 0
    decode_kv_tokens: float = 0.0
    sampled: int = 0

    @property
    def tokens(self) -> int:
        """New tokens of the step, T."""
        return sum(q for q, _ in self.prefill) + self.decode

    def calls(self) -> tuple[AttentionCall, ...]:
        """The attention calls: one per prefill chunk and one for the decode batch (mean keys)."""
        calls = [AttentionCall(1, q, kv) for q, kv in self.prefill]
        if self.decode:
            calls.append(AttentionCall(self.decode, 1, self.decode_kv_tokens / self.decode))
        return tuple(calls)


@dataclass(frozen=True)
class ServingUnit:
    """One block of the workload on one rank of a stage, `count` instances in a row.

    params: parameters of one instance on one rank; kv_bytes_per_token: its KV cache per cached token
    on one rank; window: a sliding window caps the tokens it caches per sequence (None: all).
    quantized: its GEMM weights are in the serving format (the layers), else 16 bits (embedding, head).
    """

    block: Block
    count: int
    params: float
    kv_bytes_per_token: float
    window: int | None
    quantized: bool


@dataclass(frozen=True)
class StageWork:
    """The kernels and collectives of one unit instance for one step; `count` instances run in a row."""

    unit: ServingUnit
    kernels: tuple[Kernel, ...]
    comm: tuple[CommOp, ...]


@dataclass(frozen=True)
class ServingPlan:
    """One replica: stages of units, the groups' spans and the formats of weights, activations, KV cache.

    weight_bytes_per_param: bytes per quantized parameter, scales included; gemm_dtype: the format the
    quantized GEMMs compute in; weight_width: bytes per weight element read by those GEMMs when narrower
    than gemm_dtype (int4 weight-only), else None.
    """

    tp: int
    pp: int
    stages: tuple[tuple[ServingUnit, ...], ...]
    tp_span: Span
    pp_span: Span
    act_dtype: DType
    gemm_dtype: DType
    weight_width: float | None
    weight_bytes_per_param: float
    kv_width: float
    hidden: int

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def weights_bytes(self, stage: int) -> float:
        """Weights on one rank of `stage`: quantized layers at the serving format, the rest in 16 bits."""
        return sum(u.count * u.params * (self.weight_bytes_per_param if u.quantized else self.act_dtype.num_bytes)
                   for u in self.stages[stage])

    def kv_bytes(self, stage: int, context: float) -> float:
        """KV cache of one sequence of `context` tokens on one rank of `stage`."""
        return sum(u.count * u.kv_bytes_per_token * (context if u.window is None else min(context, u.window))
                   for u in self.stages[stage])

    def workspace_bytes(self, stage: int, tokens: int, sequences: int) -> float:
        """Activations of a step of `tokens` new tokens and `sequences` sampled ones on one rank: the
        residual stream, the normalized input and an output (h each) plus the widest GEMM output per
        token, and the fp32 logits of the sampled sequences over this rank's share of the vocabulary."""
        widest = logits = 0.0
        for u in self.stages[stage]:
            for op in u.block.ops:
                if op.kind is not OpKind.GEMM:
                    continue
                n = op.n / (self.tp if op.tp is TPSplit.COLUMN else 1)
                if u.block.per_sequence:
                    logits = max(logits, n)
                else:
                    widest = max(widest, n)
        per_token = (RESIDUAL_TENSORS * self.hidden + widest) * self.act_dtype.num_bytes
        return tokens * per_token + sequences * logits * LOGIT_BYTES

    def work(self, stage: int, step: Step) -> tuple[StageWork, ...]:
        """Kernels and collectives of each unit of `stage` for `step` (one instance each)."""
        dense = self.dense_work(stage, step.tokens, step.sampled)
        return tuple(StageWork(w.unit, (*w.kernels, *self.attention_kernels(w.unit, step)), w.comm) for w in dense)

    def dense_work(self, stage: int, tokens: int, sampled: int) -> tuple[StageWork, ...]:
        """Everything but the attention cores of `stage`'s units, which depends on the step's new tokens
        and sampled sequences only: GEMMs, element-wise ops, the LM head and the TP collectives."""
        out = []
        for unit in self.stages[stage]:
            shape = self._shape(unit, tokens, sampled)
            kernels = [k for op in unit.block.ops if op.kind is not OpKind.ATTENTION
                       for k in forward_kernels(op, shape, flash=True)]
            fwd_comm, _ = tp_comm(unit.block, shape, self.tp_span)
            out.append(StageWork(unit, tuple(kernels), tuple(fwd_comm)))
        return tuple(out)

    def attention_kernels(self, unit: ServingUnit, step: Step) -> tuple[Kernel, ...]:
        """The attention cores of one instance of `unit` for `step`: its prefill chunks and decode batch."""
        if unit.block.per_sequence or not any(op.kind is OpKind.ATTENTION for op in unit.block.ops):
            return ()
        shape = Shape(batch=1, seq_len=step.tokens, tp=self.tp, cp=1, sp=False, act_bytes=self.act_dtype.num_bytes,
                      calls=step.calls(), gemm_dtype=self.act_dtype, kv_width=self.kv_width)
        return tuple(k for op in unit.block.ops if op.kind is OpKind.ATTENTION
                     for k in forward_kernels(op, shape, flash=True))

    def _shape(self, unit: ServingUnit, tokens: int, sampled: int) -> Shape:
        act = self.act_dtype.num_bytes
        gemm = (self.gemm_dtype, self.weight_width) if unit.quantized else (self.act_dtype, None)
        rows = sampled if unit.block.per_sequence else tokens
        return Shape(batch=rows, seq_len=1, tp=self.tp, cp=1, sp=False, act_bytes=act, gemm_dtype=gemm[0],
                     weight_width=gemm[1], kv_width=self.kv_width)


def build_serving_plan(workload: Workload, strategy: Strategy, *, domain_size: int, act_dtype: DType,
                       gemm_dtype: DType, weight_width: float | None, weight_bytes_per_param: float,
                       kv_dtype: DType) -> ServingPlan:
    """The plan of one replica of a resolved serving strategy (tp, pp; dp replicas)."""
    tp, pp = strategy.tp, strategy.pp
    first = [b for b in workload.blocks if b.placement is Placement.FIRST]
    last = [b for b in workload.blocks if b.placement is Placement.LAST]
    layers = [b for b in workload.blocks if b.placement is Placement.LAYERS for _ in range(b.count)]
    stages: list[list[ServingUnit]] = []
    pos = 0
    for stage, count in enumerate(split_layers(len(layers), pp)):
        blocks = (first if stage == 0 else []) + layers[pos:pos + count] + (last if stage == pp - 1 else [])
        pos += count
        units: list[ServingUnit] = []
        for block in blocks:
            if units and units[-1].block is block:  # consecutive instances of one layer block
                units[-1] = ServingUnit(block, units[-1].count + 1, *_unit_fields(block, tp, kv_dtype))
            else:
                units.append(ServingUnit(block, 1, *_unit_fields(block, tp, kv_dtype)))
        stages.append(units)
    return ServingPlan(tp=tp, pp=pp, stages=tuple(tuple(s) for s in stages),
                       tp_span=span(strategy, (Axis.TP,), domain_size),
                       pp_span=span(strategy, (Axis.PP,), domain_size), act_dtype=act_dtype,
                       gemm_dtype=gemm_dtype, weight_width=weight_width,
                       weight_bytes_per_param=weight_bytes_per_param, kv_width=kv_dtype.num_bytes,
                       hidden=workload_hidden(workload))


def _unit_fields(block: Block, tp: int, kv_dtype: DType) -> tuple[float, float, int | None, bool]:
    """(params per rank, KV bytes per token per rank, window, quantized) of one instance of `block`."""
    params = sum(op.params / (1 if op.tp in (TPSplit.SEQUENCE, TPSplit.REPLICATED) else tp) for op in block.ops)
    kv = 0.0
    window = None
    for op in block.ops:
        if op.kind is OpKind.ATTENTION:
            kv += KV_TENSORS * max(1, op.kv_heads // tp) * op.head_dim * kv_dtype.num_bytes
            window = op.window
    return params, kv, window, block.placement is Placement.LAYERS

