"""Decoder-only transformer (GPT, Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, OPT, GPT-NeoX, GPT-J, Falcon).

Blocks in execution order: embedding, the `num_layers` layers, final norm and LM head with the loss.
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
    norm_op,
    qk_norm_ops,
    residual_op,
    sampling_op,
)
from madmax.workload.ops import Block, Op, Placement, Workload


def layer_ops(model: DecoderModel, *, flash: bool = True, window: int | None = None) -> list[Op]:
    """Forward ops of one layer whose attention looks `window` tokens back (None: a global layer).

    Sequential: norm1, qkv, [q_norm, k_norm], attn, out, [post_norm1], residual1, norm2, up, [gate], act,
    down, [post_norm2], residual2. Parallel: norm1, [norm2], qkv, [q_norm, k_norm], attn, out, up, [gate],
    act, down, residual: `out` is marked `merges_reduction` (its partial sum joins the down projection's
    before one tensor-parallel reduction) and one residual add takes both outputs.
    """
    h = model.hidden_size
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    attn = attention_ops("layer", h, model.num_heads, model.kv_heads, model.head_width, bias=model.has_bias,
                         qkv_bias=model.qkv_bias, dropout=model.has_dropout, flash=flash, window=window)
    if model.qk_norm:
        attn = [attn[0], *qk_norm_ops("layer", model.num_heads, model.kv_heads, model.head_width), *attn[1:]]
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


def param_counts(model: DecoderModel) -> dict[str, int]:
    """Parameters by component: embedding, position, attention, ffn, norms (layer, QK and final norms),
    lm_head (its bias only when tied)."""
    ops = layer_ops(model)
    L, h, V = model.num_layers, model.hidden_size, model.vocab_size
    by = lambda *parts: sum(op.params for op in ops if _part(op) in parts)  # noqa: E731
    norms = sum(op.params for op in ops if _part(op).rstrip("12").endswith("norm"))
    assert by("qkv", "out", "up", "gate", "down") + norms == sum(op.params for op in ops), "uncounted weights"
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    return {
        "embedding": V * h,
        "position": model.max_seq_len * h if model.position is Position.LEARNED else 0,
        "attention": L * by("qkv", "out"),
        "ffn": L * by("up", "gate", "down"),
        "norms": L * norms + norm_params * h,
        "lm_head": (0 if model.tied_embeddings else V * h) + (V if model.lm_head_bias else 0),
    }


def layer_runs(model: DecoderModel, frozen: int) -> list[tuple[int | None, bool, int]]:
    """Consecutive equal layers as (window, trainable, count) in execution order: the bottom `frozen`
    layers are not trainable; a window of None is a global layer (Gemma 3: 5 local, 1 global, ...)."""
    kinds = ((model.layer_window(i), i >= frozen) for i in range(model.num_layers))
    return [(window, trainable, len(list(run))) for (window, trainable), run in itertools.groupby(kinds)]


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
    runs = layer_runs(model, frozen)
    uniform = len({window for window, _, _ in runs}) == 1
    adapters = 0
    for window, trainable, count in runs:
        layer = layer_ops(model, flash=flash, window=window)
        if lora:
            layer = _with_lora(layer, task.lora_rank, set(task.lora_targets))
            adapters = sum(op.params for op in layer if op.name.endswith(("lora_a", "lora_b")))
        name = "layer" if uniform else "layer.global" if window is None else "layer.local"
        ops = tuple(layer) if trainable else tuple(_frozen(layer))
        blocks.append(Block(name, ops, count=count, trainable=trainable))
    blocks.append(Block("head", tuple(head), is_layer=False, placement=Placement.LAST))
    if lora:
        counts["lora"] = (model.num_layers - frozen) * adapters
    if task.kind is TaskKind.INFERENCE:
        blocks = _serving(blocks, [*head[:-1], sampling_op(V)])
    return Workload(name=model.name, blocks=tuple(blocks), params_by_component=counts,
                    tied_params=counts["embedding"] if model.tied_embeddings else 0)


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
