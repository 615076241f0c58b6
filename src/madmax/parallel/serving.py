"""A serving replica's plan: its blocks split over pipeline stages, what each rank holds (weights and KV
cache), and the kernels and collectives of one serving step on each stage.

A replica is tp x pp GPUs; `dp` replicas serve independently. Tensor parallelism splits every layer as
in training (Megatron's column/row split), without sequence parallelism: each layer all-reduces its
output twice (once in a parallel attention-and-FFN layer). Pipeline stages take consecutive layers,
the embedding on the first and the LM head on the last (`pipeline.split_layers`).

Routed experts (MoE) fold over G = ep x etp GPUs of a stage (`ExpertLayout`): ep ranks hold E/ep experts
each, every expert split over etp ranks by width. G = tp: the experts split inside each replica, whose
tp ranks all hold the step's T tokens; each computes its local experts' rows and the layer's all-reduce
sums their outputs (vLLM's and SGLang's expert parallelism without DP attention, TensorRT-LLM's
moe_ep_size x moe_tp_size = tp_size). G = a x tp with a > 1: attention data parallelism: a replicas,
each with its own batch and KV cache, share one set of experts and step together as one engine; each
MoE layer dispatches the tokens to their experts and combines them back with all-to-alls over the ep
group (DeepSeek-V3 Sec. 3.4; vLLM --data-parallel-size with --enable-expert-parallel, SGLang
--enable-dp-attention, TensorRT-LLM enable_attention_dp). Either way a rank's expert GEMMs see
R = a T k etp / tp rows (times the routing's load factor), and the weights a step reads are those of
the experts its tokens touch: E (1 - (1 - k/E)^(a T)) over the group (`experts.touched_experts`), not all E.
`work` is the step every rank runs; ranks with steps of their own split it into `rank_work` (on a rank's own
tokens) and `expert_work` (the experts over all ranks' tokens, the exchange of the busiest rank).

Multi-head latent attention (DeepSeek-V2/V3) caches the latent: r + d_r elements per token per layer
(kv_lora_rank and the shared rotary key), whole on every tp rank. Decode attention runs in the absorbed
form (the key and value up-projections folded into the query and output sides, as vLLM, SGLang and
TensorRT-LLM serve DeepSeek): a/t query heads of width r + d_r against one latent head, values r wide,
FLOPs 2 (2r + d_r) a/t per query-key pair, the latent read once. Prefill runs the expanded form: a/t
heads of query/key width d_n + d_r and value width d_v over K and V up-projected from the latent.

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

import dataclasses
from dataclasses import dataclass
from typing import Any

from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.strategy import Axis, Strategy
from madmax.config.task import ExpertLoad
from madmax.parallel import experts
from madmax.parallel.kernels import CommOp, Kernel
from madmax.parallel.pipeline import split_layers
from madmax.parallel.placement import span
from madmax.parallel.plan import TP_GROUP, tp_comm, workload_hidden
from madmax.parallel.tensor import AttentionCall, Shape, forward_kernels
from madmax.workload.ops import EXPERT_SPLITS, Block, Op, OpKind, Placement, TPSplit, Workload

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
    token each, or with speculative decoding verifying `decode_width` tokens each (the last accepted and the
    drafted ones); decode_kv_tokens: the keys those sequences read in all (their new tokens included);
    sampled: sequences (or, verifying, positions) whose logits are computed.
    """

    prefill: tuple[tuple[int, int], ...] = ()
    decode: int = 0
    decode_kv_tokens: float = 0.0
    sampled: int = 0
    decode_width: int = 1

    @property
    def tokens(self) -> int:
        """New tokens of the step, T."""
        return sum(q for q, _ in self.prefill) + self.decode * self.decode_width

    def calls(self) -> tuple[AttentionCall, ...]:
        """The attention calls: one per prefill chunk and one for the decode batch (mean keys)."""
        calls = [AttentionCall(1, q, kv) for q, kv in self.prefill]
        if self.decode:
            calls.append(AttentionCall(self.decode, self.decode_width, self.decode_kv_tokens / self.decode,
                                       decode=True))
        return tuple(calls)


@dataclass(frozen=True)
class ServingUnit:
    """One block of the workload on one rank of a stage, `count` instances of it (in a row or interleaved with
    other blocks' layers).

    params: parameters of one instance on one rank; kv_bytes_per_token: its KV cache per cached token
    on one rank; window: a sliding window caps the tokens it caches per sequence (None: all).
    quantized: its GEMM weights are in the serving format (the layers), else 16 bits (embedding, head).
    latent: (kv_lora_rank r, rotary width d_r) of a multi-head latent attention, else None.
    """

    block: Block
    count: int
    params: float
    kv_bytes_per_token: float
    window: int | None
    quantized: bool
    latent: tuple[int, int] | None = None


@dataclass(frozen=True)
class StageWork:
    """The kernels and collectives of one unit instance for one step; `count` instances run one after another."""

    unit: ServingUnit
    kernels: tuple[Kernel, ...]
    comm: tuple[CommOp, ...]


@dataclass(frozen=True)
class ExpertLayout:
    """How a replica's routed experts are split and reached (see the module docstring).

    ep, etp: expert-parallel and expert-tensor-parallel degrees (ep x etp = G GPUs per stage share one
    set of experts); attention_dp: a = G / tp replicas whose tokens meet in the experts (1: the experts
    split inside one replica); load: the busiest rank's expert rows over the mean; strategy and spans:
    the degrees, overlap and dispatch format the token exchange (`experts.token_exchange`) reads, and
    where its groups sit on the network.
    """

    ep: int
    etp: int
    attention_dp: int
    load: float
    strategy: Strategy
    spans: experts.ExpertSpans


def attention_dp(strategy: Strategy) -> int:
    """Replicas that share one set of experts, a = ep x etp / tp (1 when the experts split inside a
    replica, and for dense models)."""
    return max(1, strategy.ep * strategy.etp // strategy.tp)


@dataclass(frozen=True)
class ServingPlan:
    """One replica: stages of units, the groups' spans and the formats of weights, activations, KV cache.

    weight_bytes_per_param: bytes per quantized parameter, scales included; gemm_dtype: the format the
    quantized GEMMs compute in; weight_width: bytes per weight element read by those GEMMs when narrower
    than gemm_dtype (int4 weight-only), else None. experts: the routed experts' layout (MoE models).
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
    experts: ExpertLayout | None = None

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
        token (a routed expert's output on each of its R/T = k etp/tp rows per token, times the load),
        and the fp32 logits of the sampled sequences over this rank's share of the vocabulary."""
        widest = logits = 0.0
        for u in self.stages[stage]:
            for op in u.block.ops:
                if op.kind is not OpKind.GEMM:
                    continue
                n = op.n / (self.tp if op.tp is TPSplit.COLUMN else 1)
                if op.tp in EXPERT_SPLITS and self.experts is not None:
                    e = self.experts
                    n = op.n / (e.etp if op.tp is TPSplit.EXPERT_COLUMN else 1) * op.top_k * e.etp / self.tp * e.load
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
        and sampled sequences only: GEMMs, element-wise ops, the LM head, the TP collectives and the
        expert exchange."""
        out = []
        for unit in self.stages[stage]:
            shape = self._shape(unit, tokens, sampled)
            kernels = [k for op in unit.block.ops if op.kind is not OpKind.ATTENTION
                       for k in forward_kernels(op, shape, flash=True)]
            fwd_comm, _ = tp_comm(unit.block, shape, self.tp_span)
            out.append(StageWork(unit, tuple(kernels), (*fwd_comm, *self._expert_comm(unit, tokens))))
        return tuple(out)

    def rank_work(self, stage: int, tokens: int, sampled: int) -> tuple[StageWork, ...]:
        """The part of `dense_work` one attention-data-parallel rank runs on its own T_r tokens: every GEMM
        and element-wise op but the routed experts', its tensor-parallel collectives and the all-reduce that
        sums its experts' outputs over tp (`tp.experts_out`); `expert_work` is the rest, which the ranks of an
        engine share. For a step every rank runs, rank_work(T) and expert_work(a T, T) hold dense_work's
        kernels and collectives."""
        out = []
        for unit in self.stages[stage]:
            shape = self._shape(unit, tokens, sampled)
            kernels = [k for op in unit.block.ops if op.kind is not OpKind.ATTENTION and op.tp not in EXPERT_SPLITS
                       for k in forward_kernels(op, shape, flash=True)]
            fwd_comm, _ = tp_comm(unit.block, shape, self.tp_span)
            local = [c for c in self._expert_comm(unit, tokens) if c.group == TP_GROUP]
            out.append(StageWork(unit, tuple(kernels), (*fwd_comm, *local)))
        return tuple(out)

    def expert_work(self, stage: int, total: int, busiest: int) -> tuple[StageWork, ...]:
        """The routed experts of `stage`'s units for one step of an engine whose a attention replicas bring
        `total` tokens in all, the busiest `busiest` of them: each rank's grouped GEMMs over
        R = total k / ep rows (times the load; the experts `total` tokens touch), and the dispatch and combine
        all-to-alls, which end when the busiest rank has sent its T_max/tp tokens' k copies. Units without
        routed experts have none."""
        out = []
        for unit in self.stages[stage]:
            routed = experts.routed_op(unit.block)
            e = self.experts
            if routed is None or e is None:
                out.append(StageWork(unit, (), ()))
                continue
            # R = total k etp / (a tp) = total k / ep rows: the tokens of all a replicas over a tp ranks' worth.
            shape = dataclasses.replace(
                self._shape(unit, total, 0), tp=self.tp * e.attention_dp, ep=e.ep, etp=e.etp, expert_load=e.load,
                active_experts=experts.touched_experts(routed.experts, routed.top_k, total) / e.ep)
            kernels = [k for op in unit.block.ops if op.tp in EXPERT_SPLITS
                       for k in forward_kernels(op, shape, flash=True)]
            exchange = [c for c in self._expert_comm(unit, busiest) if c.group != TP_GROUP]
            out.append(StageWork(unit, tuple(kernels), tuple(exchange)))
        return tuple(out)

    def attention_kernels(self, unit: ServingUnit, step: Step) -> tuple[Kernel, ...]:
        """The attention cores of one instance of `unit` for `step`: its prefill chunks and decode batch;
        a latent attention's decode batch in the absorbed form (`_absorbed`)."""
        if unit.block.per_sequence or not any(op.kind is OpKind.ATTENTION for op in unit.block.ops):
            return ()
        calls = step.calls()
        if unit.latent is None:
            return self._attention(unit.block.ops, calls, self.kv_width)
        prefill = tuple(c for c in calls if c.q_len > 1 and not c.decode)
        decode = tuple(c for c in calls if c.q_len == 1 or c.decode)
        expanded, absorbed = _latent_forms(unit.block, unit.latent)
        # The expanded K and V are computed in the activations' format; the absorbed kernel reads the
        # latent (r + d_r elements per key) where a head of width d would read 2d.
        d = next(op.head_dim for op in absorbed if op.kind is OpKind.ATTENTION)
        latent_width = self.kv_width * sum(unit.latent) / (KV_TENSORS * d)
        return (*(self._attention(expanded, prefill, None) if prefill else ()),
                *(self._attention(absorbed, decode, latent_width) if decode else ()))

    def _attention(self, ops, calls: tuple[AttentionCall, ...], kv_width: float | None) -> tuple[Kernel, ...]:
        shape = Shape(batch=1, seq_len=sum(c.batch * c.q_len for c in calls), tp=self.tp, cp=1, sp=False,
                      act_bytes=self.act_dtype.num_bytes, calls=calls, gemm_dtype=self.act_dtype, kv_width=kv_width)
        return tuple(k for op in ops if op.kind is OpKind.ATTENTION for k in forward_kernels(op, shape, flash=True))

    def _shape(self, unit: ServingUnit, tokens: int, sampled: int) -> Shape:
        act = self.act_dtype.num_bytes
        gemm = (self.gemm_dtype, self.weight_width) if unit.quantized else (self.act_dtype, None)
        rows = sampled if unit.block.per_sequence else tokens
        shape = Shape(batch=rows, seq_len=1, tp=self.tp, cp=1, sp=False, act_bytes=act, gemm_dtype=gemm[0],
                      weight_width=gemm[1], kv_width=self.kv_width)
        routed = experts.routed_op(unit.block)
        e = self.experts
        if routed is None or e is None:
            return shape
        # The local experts the step's tokens touch: the a replicas' a*T tokens arrive at the group.
        touched = experts.touched_experts(routed.experts, routed.top_k, e.attention_dp * rows)
        return dataclasses.replace(shape, ep=e.ep, etp=e.etp, expert_load=e.load, active_experts=touched / e.ep)

    def _expert_comm(self, unit: ServingUnit, tokens: int) -> list[CommOp]:
        """An MoE unit's collectives beyond Megatron's: with attention data parallelism, the dispatch and
        combine all-to-alls of the replica's T tokens (T/tp per rank, `experts.token_exchange`); with
        tp > 1, the all-reduce that sums the routed experts' partial outputs over the replica's ranks (T x h),
        unless a shared expert's all-reduce sums them already."""
        e = self.experts
        if e is None or experts.routed_op(unit.block) is None:
            return []
        out: list[CommOp] = []
        if e.attention_dp > 1:
            shape = Shape(batch=tokens, seq_len=1, tp=self.tp, cp=1, sp=self.tp > 1,
                          act_bytes=self.act_dtype.num_bytes, ep=e.ep, etp=e.etp, expert_load=e.load)
            out += experts.token_exchange(unit.block, shape, e.strategy, e.spans)[0]
        shared = any(op.tp is TPSplit.ROW for op in unit.block.ops if ".shared_" in op.name)
        if self.tp > 1 and not shared:
            size = tokens * experts.hidden_of(unit.block) * self.act_dtype.num_bytes
            out.append(CommOp(TP_GROUP, Collective.ALL_REDUCE, size, self.tp_span, "tp.experts_out"))
        return out


def _expanded(op: Op) -> Op:
    """A latent attention in the expanded form: a heads of query/key width d_qk and value width d_v,
    costed at the mean width (d_qk + d_v)/2, which has its FLOPs and bytes."""
    return dataclasses.replace(op, head_dim=(op.head_dim + op.value_dim) // 2, v_head_dim=0)


def _absorbed(op: Op, rank: int, rope: int) -> Op:
    """A latent attention in the absorbed form: the query heads against one latent head (MQA), query/key
    width r + d_r and value width r, costed at the mean width (2r + d_r)/2 (its FLOPs)."""
    return dataclasses.replace(op, kv_heads=1, head_dim=(2 * rank + rope) // 2, v_head_dim=0)


def build_serving_plan(workload: Workload, strategy: Strategy, *, domain_size: int, act_dtype: DType,
                       gemm_dtype: DType, weight_width: float | None, weight_bytes_per_param: float,
                       kv_dtype: DType, routing: ExpertLoad | None = None) -> ServingPlan:
    """The plan of one replica of a resolved serving strategy (tp, pp; dp replicas; ep x etp for the
    routed experts, `routing` their load)."""
    tp, pp = strategy.tp, strategy.pp
    first = [b for b in workload.blocks if b.placement is Placement.FIRST]
    last = [b for b in workload.blocks if b.placement is Placement.LAST]
    layers = [b for b in workload.blocks if b.placement is Placement.LAYERS for _ in range(b.count)]
    shards = strategy.ep * strategy.etp
    stages: list[list[ServingUnit]] = []
    pos = 0
    for stage, count in enumerate(split_layers(len(layers), pp)):
        blocks = (first if stage == 0 else []) + layers[pos:pos + count] + (last if stage == pp - 1 else [])
        pos += count
        # The instances of one block in a stage are one unit, in the order the block first appears: interleaved
        # layers (sliding and full attention, dense and MoE) cost the same in any order, since each instance
        # waits for the one before, and a step is timed per unit, not per layer.
        units: dict[Block, ServingUnit] = {}
        for block in blocks:
            found = units.get(block)
            units[block] = (dataclasses.replace(found, count=found.count + 1) if found is not None
                            else _unit(block, tp, shards, kv_dtype))
        stages.append(list(units.values()))
    return ServingPlan(tp=tp, pp=pp, stages=tuple(tuple(s) for s in stages),
                       tp_span=span(strategy, (Axis.TP,), domain_size),
                       pp_span=span(strategy, (Axis.PP,), domain_size), act_dtype=act_dtype,
                       gemm_dtype=gemm_dtype, weight_width=weight_width,
                       weight_bytes_per_param=weight_bytes_per_param, kv_width=kv_dtype.num_bytes,
                       hidden=workload_hidden(workload), experts=_layout(workload, strategy, domain_size, routing))


def _layout(workload: Workload, s: Strategy, domain_size: int, routing: ExpertLoad | None) -> ExpertLayout | None:
    routed = next((op for b in workload.blocks for op in b.ops if op.tp in EXPERT_SPLITS and op.experts), None)
    if routed is None:
        return None
    load = routing.factor(routed.experts, s.ep) if routing else 1.0
    return ExpertLayout(ep=s.ep, etp=s.etp, attention_dp=attention_dp(s), load=load, strategy=s,
                        spans=experts.spans(s, domain_size))


def _unit(block: Block, tp: int, shards: int, kv_dtype: DType) -> ServingUnit:
    """One instance of `block` on one rank: parameters (dense weights over tp, routed experts over
    ep x etp, the router, norms and MLA's down projections whole), KV bytes per token (K and V of its KV
    heads, one head per rank when there are fewer than tp; a latent attention's r + d_r latent, whole on
    every rank), window, quantized, latent."""
    whole = (TPSplit.SEQUENCE, TPSplit.REPLICATED, TPSplit.DUPLICATED)
    params = sum(op.params / (shards if op.tp in EXPERT_SPLITS else 1 if op.tp in whole else tp)
                 for op in block.ops)
    latent = _latent(block)
    kv = 0.0
    window = None
    for op in block.ops:
        if op.kind is OpKind.ATTENTION:
            per_token = sum(latent) if latent else KV_TENSORS * max(1, op.kv_heads // tp) * op.head_dim
            kv += per_token * kv_dtype.num_bytes
            window = op.window
    return ServingUnit(block, 1, params, kv, window, block.placement is Placement.LAYERS, latent)


def _latent(block: Block) -> tuple[int, int] | None:
    """(kv_lora_rank r, rotary width d_r) of a multi-head latent attention block: kv_down writes the
    latent and the rotary key (r + d_r), kv_up reads the latent (r). None without one."""
    down = next((op for op in block.ops if op.name.endswith(".kv_down")), None)
    up = next((op for op in block.ops if op.name.endswith(".kv_up")), None)
    if down is None or up is None:
        return None
    return up.k, down.n - up.k


# A latent-attention block's ops in the expanded (prefill) and absorbed (decode) forms, by block: they depend on the
# block only, and every step of every serving simulation asks for them. The entry keeps its block alive, so no
# other block can take its id while it is cached.
_LATENT_FORMS: dict[tuple[int, tuple[int, ...]], tuple[Any, tuple, tuple]] = {}


def _latent_forms(block, latent: tuple[int, ...]) -> tuple[tuple, tuple]:
    """(expanded ops, absorbed ops) of a latent-attention `block` (`_expanded`, `_absorbed`), computed once."""
    key = (id(block), latent)
    entry = _LATENT_FORMS.get(key)
    if entry is None or entry[0] is not block:
        expanded = tuple(_expanded(op) if op.kind is OpKind.ATTENTION else op for op in block.ops)
        absorbed = tuple(_absorbed(op, *latent) if op.kind is OpKind.ATTENTION else op for op in block.ops)
        if len(_LATENT_FORMS) > 256:
            _LATENT_FORMS.clear()
        entry = _LATENT_FORMS[key] = (block, expanded, absorbed)
    return entry[1], entry[2]
