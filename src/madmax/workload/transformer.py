"""Decoder-only transformer (GPT, Llama, Mistral, Qwen2, OPT, GPT-NeoX) as blocks of ops.

Blocks in execution order: embedding, `num_layers` identical layers (pre-norm attention and FFN with
residuals), final norm and LM head with the loss. Fine-tuning freezes weights: LoRA freezes every base
weight and adds adapters; `frozen_layers` freezes the embedding and the bottom layers.
"""

from __future__ import annotations

import dataclasses

from madmax.config.model import DecoderModel, Norm, Position
from madmax.config.task import FinetuneMethod, Task, TaskKind
from madmax.workload.blocks import (
    attention_ops,
    embedding_op,
    ffn_ops,
    lm_head_ops,
    lora_ops,
    norm_op,
    residual_op,
)
from madmax.workload.ops import Block, Op, Placement, Workload


def layer_ops(model: DecoderModel, *, flash: bool = True) -> list[Op]:
    """Forward ops of one transformer layer."""
    h = model.hidden_size
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    return [
        norm_op("layer.norm1", h, norm_params),
        *attention_ops("layer", h, model.num_heads, model.kv_heads, model.head_width, bias=model.has_bias,
                       qkv_bias=model.qkv_bias, dropout=model.has_dropout, flash=flash),
        residual_op("layer.residual1", h, model.has_dropout),
        norm_op("layer.norm2", h, norm_params),
        *ffn_ops("layer", h, model.ffn_hidden_size, gated=model.is_gated_ffn, bias=model.has_bias),
        residual_op("layer.residual2", h, model.has_dropout),
    ]


def param_counts(model: DecoderModel) -> dict[str, int]:
    """Parameters by component: embedding, position, attention, ffn, norms, lm_head (0 when tied)."""
    ops = layer_ops(model)
    L = model.num_layers
    by = lambda *names: sum(op.params for op in ops if op.name.split(".")[1].rstrip("12") in names)  # noqa: E731
    norm_params = 2 if model.norm is Norm.LAYERNORM else 1
    return {
        "embedding": model.vocab_size * model.hidden_size,
        "position": model.max_seq_len * model.hidden_size if model.position is Position.LEARNED else 0,
        "attention": L * by("qkv", "out"),
        "ffn": L * by("up", "gate", "down"),
        "norms": L * by("norm") + norm_params * model.hidden_size,
        "lm_head": 0 if model.tied_embeddings else model.vocab_size * model.hidden_size,
    }


def build(model: DecoderModel, task: Task, *, flash: bool = True) -> Workload:
    """The workload of `model` for `task`: blocks in execution order, with frozen weights marked."""
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

    layer = layer_ops(model, flash=flash)
    if lora:
        layer = _with_lora(layer, task.lora_rank, set(task.lora_targets))
        embed_ops, head = _frozen(embed_ops), _frozen(head)
    blocks = [Block("embedding", tuple(embed_ops), is_layer=False, trainable=not (lora or frozen),
                    placement=Placement.FIRST)]
    if frozen:
        blocks.append(Block("layer", tuple(_frozen(layer)), count=frozen, trainable=False))
    if model.num_layers - frozen:
        blocks.append(Block("layer", tuple(layer), count=model.num_layers - frozen))
    blocks.append(Block("head", tuple(head), is_layer=False, placement=Placement.LAST))
    if lora:
        counts["lora"] = (model.num_layers - frozen) * sum(op.params for op in layer if op.lora_target is None
                                                           and op.name.endswith(("lora_a", "lora_b")))
    return Workload(name=model.name, blocks=tuple(blocks), params_by_component=counts,
                    tied_params=counts["embedding"] if model.tied_embeddings else 0)


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
