"""Vision transformers (ViT, ViT-22B) as blocks of ops, written per token (one token = one patch, or the
class token), with s = (image_size / patch_size)^2 (+ 1 with a class token) tokens per image.

Blocks in execution order (Dosovitskiy et al. 2021, arXiv 2010.11929, Eq. 1-4):
- embedding: the patch embedding, a convolution of stride p that is one GEMM of (patches x C*p*p) by
  (C*p*p x h), 2*C*p^2*h FLOPs per patch, C*p^2*h + h parameters; then the class token is prepended
  and the learned position embeddings (s x h) added: a memory-bound pass that reads the patch
  embeddings and the table and writes the sum (3h elements per token). Megatron-LM's ViT keeps both
  replicated on every tensor-parallel rank (plain torch Linear and Embedding), as here.
- layer x L: the decoder's layer (`madmax.workload.transformer.layer_ops`) with bidirectional attention
  (`causal=False`: every token attends to all s tokens, 4*s*h FLOPs per token, the full square), a plain
  GELU MLP of two matrices, LayerNorm and biases. Sequential pre-norm layers, or ViT-22B's parallel
  layers (one LayerNorm feeds attention and MLP, one residual add of both) with QK LayerNorm.
- head: the final LayerNorm and a linear classifier of `num_classes` outputs with its softmax
  cross-entropy (the LM head's ops over C classes instead of V words), once per image on the class token
  (`Block.per_sequence`: the plan gives it b rows, not b*s; 2*h*C FLOPs per image).

The patch-embedding GEMM runs on all s rows, the class token's included: one row too many (1/197 of that
GEMM for a 224-pixel image in patches of 16).
"""

from __future__ import annotations

import dataclasses

from madmax.config.model import DecoderModel, Norm
from madmax.config.task import FinetuneMethod, Task, TaskKind
from madmax.config.vit import ViTModel
from madmax.errors import ConfigError
from madmax.workload.blocks import lm_head_ops, norm_op
from madmax.workload.ops import Block, Op, OpKind, Placement, TPSplit, Workload
from madmax.workload.transformer import layer_ops

# The position add reads the patch embedding and the position table and writes their sum.
POSITION_ADD_TENSORS = 3


def encoder_layer_spec(model: ViTModel) -> DecoderModel:
    """The transformer-layer description of one ViT encoder layer, for `transformer.layer_ops`.

    Only the layer's fields matter (the vocabulary, context and name are the layer builder's unused
    inputs). Biases: ViT biases every projection (has_bias); without QKV biases the MLP keeps its own
    (ffn_bias) and `encoder_layer_ops` adds the output projection's. A LayerNorm without bias
    (ViT-22B) has an RMSNorm's parameters, one gain per feature, and is costed alike (5 FLOPs per
    feature); its QK LayerNorms likewise (`qk_norm_ops`, head_dim parameters each).
    """
    return DecoderModel(
        name=f"{model.name} encoder layer", num_layers=model.num_layers, hidden_size=model.hidden_size,
        num_heads=model.num_heads, ffn_hidden_size=model.ffn_hidden_size, is_gated_ffn=False,
        activation=model.activation, norm=Norm.LAYERNORM if model.norm_bias else Norm.RMSNORM,
        has_bias=model.bias and model.qkv_bias, qkv_bias=model.qkv_bias and not model.bias,
        ffn_bias=model.bias and not model.qkv_bias, has_dropout=model.has_dropout,
        parallel_attention=model.parallel_layers, shared_input_norm=model.parallel_layers, qk_norm=model.qk_norm,
        vocab_size=model.num_classes, max_seq_len=model.seq_len)


def encoder_layer_ops(model: ViTModel, *, flash: bool = True) -> list[Op]:
    """One encoder layer: the decoder's layer ops with bidirectional attention (`causal=False`); the
    attention output projection keeps its bias (h) when only the QKV projection drops its own."""
    ops = layer_ops(encoder_layer_spec(model), flash=flash, causal=False)
    if model.bias and not model.qkv_bias:
        ops = [dataclasses.replace(op, params=op.params + model.hidden_size) if op.name == "layer.out" else op
               for op in ops]
    return ops


def embedding_ops(model: ViTModel) -> list[Op]:
    """Patch embedding GEMM (C*p*p -> h, with bias when the model has biases) and the class token and
    position add (s*h position parameters, plus h for the class token)."""
    h, k = model.hidden_size, model.patch_width
    return [
        Op(name="embed.patch", kind=OpKind.GEMM, tp=TPSplit.REPLICATED, k=k, n=h,
           params=k * h + (h if model.bias else 0), saved_elems_per_token=k),
        Op(name="embed.positions", kind=OpKind.EMBEDDING, tp=TPSplit.REPLICATED, n=h,
           moved_elems_per_token=POSITION_ADD_TENSORS * h, flops_per_token=h,
           params=model.seq_len * h + (h if model.class_token else 0)),
    ]


def head_ops(model: ViTModel) -> list[Op]:
    """Final LayerNorm, the classifier (h x C, with bias) and its softmax cross-entropy."""
    h, c = model.hidden_size, model.num_classes
    norm = norm_op("head.norm", h, 2 if model.norm_bias else 1)
    return [norm, *lm_head_ops(h, c, params=h * c + c)]


def _components(ops: list[Op], names: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Parameters of `ops` by component; each op counts under the component listing its role."""
    out = {name: sum(op.params for op in ops if op.name.split(".", 1)[1] in roles) for name, roles in names.items()}
    assert sum(out.values()) == sum(op.params for op in ops), "uncounted weights"
    return out


def param_counts(model: ViTModel) -> dict[str, int]:
    """Parameters by component: patch_embedding (C*p^2*h + h), position (s*h, plus h for the class
    token), attention, mlp, norms (the layers' and the final one), head (h*C + C)."""
    layer = encoder_layer_ops(model)
    per_layer = _components(layer, {
        "attention": ("qkv", "attn", "out"), "mlp": ("up", "act", "down"),
        "norms": ("norm1", "norm2", "q_norm", "k_norm"), "residual": ("residual", "residual1", "residual2")})
    embed, head = embedding_ops(model), head_ops(model)
    return {"patch_embedding": embed[0].params, "position": embed[1].params,
            "attention": model.num_layers * per_layer["attention"], "mlp": model.num_layers * per_layer["mlp"],
            "norms": model.num_layers * per_layer["norms"] + head[0].params, "head": head[1].params}


def build(model: ViTModel, task: Task, *, flash: bool = True) -> Workload:
    """The workload of `model` for `task`. Fine-tuning is full (LoRA and frozen layers are decoder
    notions here); inference is one forward pass per batch of images (nothing trains)."""
    if task.kind is TaskKind.FINETUNE and (task.finetune is FinetuneMethod.LORA or task.frozen_layers):
        raise ConfigError(f"task.finetune={task.finetune.value!r} with frozen_layers={task.frozen_layers} is not "
                          f"modelled for the vit model {model.name}; allowed: finetune 'full', frozen_layers 0")
    if task.seq_len not in (None, model.seq_len):
        raise ConfigError(f"task.seq_len={task.seq_len} does not apply to the vit model {model.name}: an image of "
                          f"{model.image_size} pixels in patches of {model.patch_size} is {model.seq_len} tokens; "
                          f"allowed: {model.seq_len} or unset (change image_size for another resolution)")
    layer = encoder_layer_ops(model, flash=flash)
    blocks = [Block("embedding", tuple(embedding_ops(model)), is_layer=False, placement=Placement.FIRST),
              Block("layer", tuple(layer), count=model.num_layers),
              Block("head", tuple(head_ops(model)), is_layer=False, placement=Placement.LAST, per_sequence=True)]
    if task.kind is TaskKind.INFERENCE:  # forward only: nothing trains, nothing is kept for a backward
        blocks = [dataclasses.replace(b, trainable=False,
                                      ops=tuple(dataclasses.replace(op, trainable=False) for op in b.ops))
                  for b in blocks]
    return Workload(name=model.name, blocks=tuple(blocks), params_by_component=param_counts(model),
                    accumulates_gradients=False, generates_tokens=False)
