"""Decoder-only transformers, dense and mixture-of-experts (GPT, Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3,
OPT, GPT-NeoX, GPT-J, Falcon; Mixtral, Qwen-MoE, DeepSeek-V3, Kimi K2, GPT-OSS, Llama 4).

Blocks in execution order: embedding, the `num_layers` layers, the multi-token-prediction modules
(DeepSeek-V3), final norm and LM head with the loss. MoE layers replace the FFN by a router, routed
experts and shared experts (`moe_ops`); MLA replaces the attention (`mla_attention_ops`).
A layer is sequential (norm, attention, residual add, norm, FFN, residual add; Gemma adds a norm on
each output before its add) or parallel (attention and FFN read the same input, one add of both
outputs). Layers whose attention differs (local sliding-window layers and global ones, Gemma 2/3) are
separate blocks, consecutive equal layers merged into one block with a count. Fine-tuning freezes
weights: LoRA freezes every base weight and adds adapters; `frozen_layers` freezes the embedding and
the bottom layers.
"""

from __future__ import annotations

import dataclasses
import itertools

from madmax.config.model import DecoderModel, Norm, Position
from madmax.config.task import FinetuneMethod, Task, TaskKind
from madmax.workload.blocks import (
    attention_ops,
    embedding_op,
    ffn_ops,
    lm_head_ops,
    lora_ops,
    mla_attention_ops,
    moe_ops,
    norm_op,
    qk_norm_ops,
    residual_op,
    sampling_op,
)
from madmax.workload.ops import Block, Op, OpKind, Placement, TPSplit, Workload


def layer_ops(model: DecoderModel, *, flash: bool = True, window: int | None = None, moe: bool = False,
              causal: bool = True) -> list[Op]:
    """Forward ops of one layer whose attention looks `window` tokens back (None: a global layer), with
    routed experts instead of the dense FFN when `moe`. `causal=False`: bidirectional attention over the
    whole sequence (an encoder layer, `madmax.workload.vit`).

    Sequential: norm1, qkv, [q_norm, k_norm], attn, out, [post_norm1], residual1, norm2, up, [gate], act,
    down, [post_norm2], residual2. Parallel: norm1, [norm2], qkv, [q_norm, k_norm], attn, out, up, [gate],
    act, down, residual: `out` is marked `merges_reduction` (its partial sum joins the down projection's
    before one tensor-parallel reduction) and one residual add takes both outputs.
    """
    h = model.hidden_size
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    if model.mla is not None:
        m = model.mla
        attn = mla_attention_ops("layer", h, model.num_heads, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                                 qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                                 v_head_dim=m.v_head_dim, norm_params=norm_params, window=window)
    else:
        attn = attention_ops("layer", h, model.num_heads, model.kv_heads, model.head_width, bias=model.has_bias,
                             qkv_bias=model.qkv_bias, dropout=model.has_dropout, flash=flash, window=window,
                             causal=causal)
    if model.qk_norm:
        attn = [attn[0], *qk_norm_ops("layer", model.num_heads, model.kv_heads, model.head_width), *attn[1:]]
    if model.attention_sinks:  # one learned logit per query head
        attn = [dataclasses.replace(op, params=op.params + model.num_heads) if op.kind is OpKind.ATTENTION else op
                for op in attn]
    if moe:
        assert model.moe is not None
        e = model.moe
        ffn = moe_ops("layer", h, num_experts=e.num_experts, top_k=e.top_k, expert_ffn=e.expert_ffn_hidden_size,
                      gated=model.is_gated_ffn, expert_bias=e.expert_bias, router_bias=e.router_bias,
                      shared_ffn=e.shared_width, shared_gate=e.shared_expert_gate,
                      shared_bias=model.has_bias or model.ffn_bias, route_groups=e.route_groups,
                      route_group_topk=e.route_group_topk or 0, glu_limit=e.glu_limit)
    else:
        ffn = ffn_ops("layer", h, model.ffn_hidden_size, gated=model.is_gated_ffn,
                      bias=model.has_bias or model.ffn_bias)
    norm1, norm2 = norm_op("layer.norm1", h, norm_params), norm_op("layer.norm2", h, norm_params)
    if model.parallel_attention:
        return _parallel_layer(model, norm1, norm2, attn, ffn)
    post1, post2 = ([norm_op(f"layer.post_norm{i}", h, norm_params)] if model.post_norms else [] for i in (1, 2))
    return [norm1, *attn, *post1, residual_op("layer.residual1", h, model.has_dropout),
            norm2, *ffn, *post2, residual_op("layer.residual2", h, model.has_dropout)]


def _parallel_layer(model: DecoderModel, norm1: Op, norm2: Op, attn: list[Op], ffn: list[Op]) -> list[Op]:
    """x + attention(norm1(x)) + FFN(norm(x)), norm = norm1 when shared (GPT-J, Falcon-7B), else norm2
    (GPT-NeoX, Falcon-40B). Both norms read x, which norm1 saves already; with a shared norm, qkv and up
    read one tensor, which qkv saves already."""
    norms = [norm1] if model.shared_input_norm else [norm1, dataclasses.replace(norm2, saved_elems_per_token=0.0)]
    *attn_in, out = attn
    up, *ffn_rest = ffn
    if model.shared_input_norm:
        up = dataclasses.replace(up, saved_elems_per_token=0.0)
    return [*norms, *attn_in, dataclasses.replace(out, merges_reduction=True), up, *ffn_rest,
            residual_op("layer.residual", model.hidden_size, model.has_dropout, branches=2)]


def _part(op: Op) -> str:
    """The op's role inside a layer: 'qkv', 'norm1', 'q_norm', 'post_norm2', ..."""
    return op.name.split(".", 1)[1]


# The component each op of a layer counts under (op role -> component); norms are every role ending in
# "norm" (layer, QK, latent and post norms).
_COMPONENTS = {
    "attention": ("qkv", "out", "attn", "q_down", "q_up", "q_proj", "kv_down", "kv_up"),
    "ffn": ("up", "gate", "down"),
    "shared_experts": ("shared_up", "shared_gate", "shared_down", "shared_expert_gate"),
    "router": ("router",),
    "experts": ("expert_up", "expert_gate", "expert_down"),
}


def _layer_params(ops: list[Op]) -> dict[str, int]:
    out = {name: sum(op.params for op in ops if _part(op) in parts) for name, parts in _COMPONENTS.items()}
    out["norms"] = sum(op.params for op in ops if _part(op).rstrip("12").endswith("norm"))
    assert sum(out.values()) == sum(op.params for op in ops), "uncounted weights"
    return out


def param_counts(model: DecoderModel) -> dict[str, int]:
    """Parameters by component: embedding, position, attention, ffn (dense layers), shared_experts, router,
    experts (all routed experts), norms (layer, QK, latent and final norms), mtp (the multi-token-prediction
    modules, which share the embedding and LM head), lm_head (its bias only when tied). Components a model
    does not have are left out."""
    h, V = model.hidden_size, model.vocab_size
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    counts = {"embedding": V * h, "position": model.max_seq_len * h if model.position is Position.LEARNED else 0}
    layers = {name: 0 for name in (*_COMPONENTS, "norms")}
    for moe in (False, True):
        n = sum(model.is_moe_layer(i) == moe for i in range(model.num_layers))
        if n:
            for name, value in _layer_params(layer_ops(model, moe=moe)).items():
                layers[name] += n * value
    layers["norms"] += norm_params * h
    counts |= {name: value for name, value in layers.items() if value or name in ("attention", "ffn", "norms")}
    if model.mtp_layers:
        counts["mtp"] = model.mtp_layers * sum(op.params for op in mtp_ops(model))
    counts["lm_head"] = (0 if model.tied_embeddings else V * h) + (V if model.lm_head_bias else 0)
    return counts


def active_params(model: DecoderModel, counts: dict[str, int] | None = None) -> int:
    """Parameters one token's forward pass through the main model uses: all but the routed experts it is
    not sent to (top_k of num_experts per MoE layer), embedding table included (the convention of
    Mistral, DeepSeek and Qwen; OpenAI's GPT-OSS counts leave the embedding out), the multi-token-prediction
    modules left out (DeepSeek-V3's "37B activated" is the main model's)."""
    counts = counts or param_counts(model)
    total = sum(counts.values()) - counts.get("mtp", 0)
    if model.moe is None:
        return total
    e = model.moe
    routed = counts.get("experts", 0)
    return total - routed + routed * e.top_k // e.num_experts


def mtp_ops(model: DecoderModel, *, flash: bool = True) -> list[Op]:
    """One multi-token-prediction module (DeepSeek-V3, arXiv 2412.19437, Sec. 2.2): RMSNorms of the
    previous depth's hidden state and of the next token's embedding, their concatenation projected
    (2h x h), one transformer layer (an MoE layer when the model has experts), then the shared LM head
    (its final norm is the module's own) and a cross-entropy loss. The embedding lookup and the LM head
    weights are the main model's (no parameters here)."""
    h, V = model.hidden_size, model.vocab_size
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    layer = layer_ops(model, flash=flash, moe=model.moe is not None)
    return [norm_op("mtp.enorm", h, norm_params), norm_op("mtp.hnorm", h, norm_params),
            Op(name="mtp.eh_proj", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=2 * h, n=h, params=2 * h * h,
               saved_elems_per_token=2 * h, saved_outside_tp=True),
            *(dataclasses.replace(op, name="mtp." + _part(op)) for op in layer),
            norm_op("mtp.head_norm", h, norm_params), *(dataclasses.replace(op, name="mtp." + _part(op))
                                                         for op in lm_head_ops(h, V, params=0))]


def layer_runs(model: DecoderModel, frozen: int) -> list[tuple[int | None, bool, bool, int]]:
    """Consecutive equal layers as (window, moe, trainable, count) in execution order: the bottom `frozen`
    layers are not trainable; a window of None is a global layer (Gemma 3: 5 local, 1 global, ...); moe:
    routed experts instead of the dense FFN (DeepSeek-V3: 3 dense, then 58 MoE)."""
    kinds = ((model.layer_window(i), model.is_moe_layer(i), i >= frozen) for i in range(model.num_layers))
    return [(*kind, len(list(run))) for kind, run in itertools.groupby(kinds)]


def layer_name(model: DecoderModel, window: int | None, moe: bool) -> str:
    """'layer', qualified by '.local'/'.global' when windows differ between layers and by '.dense'/'.moe'
    when only some layers have experts (equal names mean equal ops)."""
    name = "layer"
    if len({model.layer_window(i) for i in range(model.num_layers)}) > 1:
        name += ".global" if window is None else ".local"
    if model.moe is not None and model.num_moe_layers < model.num_layers:
        name += ".moe" if moe else ".dense"
    return name


def build(model: DecoderModel, task: Task, *, flash: bool = True) -> Workload:
    """The workload of `model` for `task`: blocks in execution order, with frozen weights marked.

    Layer blocks are named 'layer' when every layer attends alike, else 'layer.local' and
    'layer.global' (equal names mean equal ops).
    """
    h, V = model.hidden_size, model.vocab_size
    counts = param_counts(model)
    lora = task.kind is TaskKind.FINETUNE and task.finetune is FinetuneMethod.LORA
    frozen = task.frozen_layers if task.kind is TaskKind.FINETUNE else 0
    if frozen > model.num_layers:
        from madmax.errors import ConfigError

        raise ConfigError(f"task.frozen_layers={frozen} exceeds num_layers={model.num_layers} of {model.name}")

    embed_ops = [embedding_op("embed.tokens", V, h)]
    if model.position is Position.LEARNED:
        embed_ops.append(embedding_op("embed.positions", model.max_seq_len, h))
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    head = [norm_op("head.norm", h, norm_params), *lm_head_ops(h, V, params=counts["lm_head"])]
    if lora:
        embed_ops, head = _frozen(embed_ops), _frozen(head)
    blocks = [Block("embedding", tuple(embed_ops), is_layer=False, trainable=not (lora or frozen),
                    placement=Placement.FIRST)]
    adapters = 0
    for window, moe, trainable, count in layer_runs(model, frozen):
        layer = layer_ops(model, flash=flash, window=window, moe=moe)
        if lora:
            layer = _with_lora(layer, task.lora_rank, set(task.lora_targets))
        if lora and trainable:
            adapters += count * sum(op.params for op in layer if op.name.endswith(("lora_a", "lora_b")))
        ops = tuple(layer) if trainable else tuple(_frozen(layer))
        blocks.append(Block(layer_name(model, window, moe), ops, count=count, trainable=trainable))
    if model.mtp_layers and task.kind is not TaskKind.INFERENCE:
        mtp = mtp_ops(model, flash=flash)
        blocks.append(Block("mtp", tuple(_frozen(mtp) if lora else mtp), count=model.mtp_layers, is_layer=False,
                            trainable=not lora, placement=Placement.LAST))
    blocks.append(Block("head", tuple(head), is_layer=False, placement=Placement.LAST))
    if lora:
        counts["lora"] = adapters
    if task.kind is TaskKind.INFERENCE:
        blocks = _serving(blocks, [*head[:-1], sampling_op(V)])
    return Workload(name=model.name, blocks=tuple(blocks), params_by_component=counts,
                    tied_params=counts["embedding"] if model.tied_embeddings else 0,
                    active_params=active_params(model, counts))


def _serving(blocks: list[Block], head: list[Op]) -> list[Block]:
    """The blocks of a serving step: nothing trains; the head's loss becomes the sampling of the next
    token, and the head (final norm, LM head, sampling) runs on the last token of each sequence only."""
    out = [dataclasses.replace(b, trainable=False, ops=tuple(_frozen(list(b.ops)))) for b in blocks[:-1]]
    return [*out, dataclasses.replace(blocks[-1], ops=tuple(_frozen(head)), trainable=False, per_sequence=True)]


def _frozen(ops: list[Op]) -> list[Op]:
    return [dataclasses.replace(op, trainable=False) for op in ops]


def _with_lora(ops: list[Op], rank: int, targets: set[str]) -> list[Op]:
    """Base weights frozen; each targeted projection followed by its trainable adapter."""
    out: list[Op] = []
    for op in ops:
        out.append(dataclasses.replace(op, trainable=False))
        if op.lora_target in targets:
            out.extend(lora_ops(op, rank))
    return out
