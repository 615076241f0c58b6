"""Vision transformers (ViT; Dosovitskiy et al. 2021, arXiv 2010.11929): an image cut into patches, each
patch a token, through a transformer encoder, then a classification head.

An image of `image_size` x `image_size` pixels and `num_channels` channels is cut into
(image_size / patch_size)^2 patches of patch_size x patch_size pixels; each patch, flattened to
C*p*p values, is projected to `hidden_size` (the patch embedding, a convolution of stride p, which is
one GEMM). A learned class token is prepended (`class_token`), learned position embeddings are added,
and `num_layers` encoder layers follow: bidirectional (non-causal) multi-head attention and a plain
two-matrix MLP, LayerNorm before each (pre-norm). The final LayerNorm and a linear head of
`num_classes` outputs read the class token (or, without one, the mean of the patch tokens).

ViT-22B (Dehghani et al. 2023, arXiv 2302.05442) changes the layer: attention and MLP in parallel behind
one LayerNorm (`parallel_layers`), a LayerNorm on every query and key head (`qk_norm`), no biases on the
QKV projection (`qkv_bias`) and no LayerNorm biases (`norm_bias`). Parameter counts are computed
(`madmax.workload.vit.param_counts`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.config.checks import MAX_INT, MAX_LAYERS
from madmax.config.hf_keys import HFConfig
from madmax.errors import ConfigError

# transformers' PretrainedConfig gives a classifier 2 labels when a config names none (num_labels, id2label).
HF_DEFAULT_LABELS = 2


class ViTModel(Schema):
    """A vision transformer: patch embedding, class token, encoder layers, classification head.

    Widths are element counts. The sequence of one image is its patches plus the class token.
    """

    family: Literal["vit"] = Field("vit", description="Model family.")
    name: str = Field(description="Catalog name, e.g. 'vit-l/16'.")
    aliases: list[str] = Field(default_factory=list, description="Other names, e.g. the Hugging Face id.")
    image_size: PositiveInt = Field(description="Side of the square input image, pixels.")
    patch_size: PositiveInt = Field(description="Side of a square patch, pixels; must divide image_size.")
    num_channels: PositiveInt = Field(3, description="Channels of the input image (3 for RGB).")
    num_layers: PositiveInt = Field(le=MAX_LAYERS, description="Encoder layers (depth); at most 16,384.")
    hidden_size: PositiveInt = Field(description="Model width h (elements).")
    num_heads: PositiveInt = Field(description="Attention heads a; must divide hidden_size.")
    ffn_hidden_size: PositiveInt = Field(description="Inner width of the MLP (the paper's 'MLP size').")
    num_classes: PositiveInt = Field(description="Outputs of the classification head (1000 for ImageNet-1k).")
    class_token: bool = Field(
        True, description="A learned class token is prepended to the patches and the head reads it; false: the "
        "head reads the mean of the patch tokens (global average pooling; ViT-22B).")
    activation: Literal["gelu", "relu", "silu", "squared_relu"] = Field(
        "gelu", description="MLP activation (GELU in every published ViT).")
    qkv_bias: bool = Field(True, description="The QKV projection carries biases (false for ViT-22B).")
    bias: bool = Field(True, description="The attention output projection and the MLP carry biases.")
    norm_bias: bool = Field(True, description="LayerNorms carry a bias besides their gain (false for ViT-22B).")
    parallel_layers: bool = Field(
        False, description="Attention and MLP read the same LayerNorm output and are added to the residual "
        "together (ViT-22B, after PaLM); false: sequential pre-norm layers.")
    qk_norm: bool = Field(False, description="A LayerNorm on every query and key head (ViT-22B).")
    has_dropout: bool = Field(False, description="Dropout after attention and MLP (keeps masks for backward).")
    source: str = Field("", description="Where the architecture numbers come from.")

    @model_validator(mode="after")
    def _shape(self) -> ViTModel:
        if self.image_size % self.patch_size:
            raise ValueError(f"patch_size={self.patch_size} does not divide image_size={self.image_size}; allowed: "
                             f"a divisor of {self.image_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads} does not divide hidden_size={self.hidden_size}")
        return self

    @model_validator(mode="after")
    def _tokens_in_range(self) -> ViTModel:
        if self.seq_len > MAX_INT:
            raise ValueError(f"image_size={self.image_size} / patch_size={self.patch_size} gives {self.seq_len:,} "
                             f"tokens per image; allowed: at most {MAX_INT:,} (2**53)")
        return self

    @property
    def num_patches(self) -> int:
        """Patches of one image: (image_size / patch_size)^2."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        """Tokens of one image: its patches, plus the class token when there is one."""
        return self.num_patches + (1 if self.class_token else 0)

    @property
    def patch_width(self) -> int:
        """Values of one flattened patch, C*p*p: the patch embedding's input width."""
        return self.num_channels * self.patch_size**2

    @property
    def head_width(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def default_seq_len(self) -> int:
        """The image's sequence: the only one a ViT of this image size runs."""
        return self.seq_len

    @property
    def max_seq_len(self) -> int:
        return self.seq_len

    @property
    def sample_name(self) -> str:
        """What one element of the batch is: an image (its throughput is counted in images, not patch tokens)."""
        return "image"

    def parallel_constraints(self) -> dict[str, list[tuple[str, int]]]:
        """Model sizes each parallel degree must divide: TP splits the heads and the MLP."""
        return {"tp": [("num_heads", self.num_heads), ("ffn_hidden_size", self.ffn_hidden_size)]}

    def degree_limits(self) -> dict[str, tuple[int, str]]:
        """Largest degree of each axis this family is modelled for, with the reason."""
        return {"cp": (1, f"context parallelism splits long sequences; an image is {self.seq_len} tokens")}

    @property
    def has_experts(self) -> bool:
        return False

    @property
    def num_pipeline_units(self) -> int:
        """Blocks that pipeline stages can split: the encoder layers."""
        return self.num_layers


def from_hf(c: HFConfig) -> dict[str, Any]:
    """Our vit fields from a Hugging Face `ViTConfig` (model_type 'vit'; google/vit-*): pre-LayerNorm
    encoder with a class token, learned positions, biased projections (QKV unless `qkv_bias` is false).

    Classes: `ViTForImageClassification`'s classifier has `num_labels` outputs, the size of `id2label`
    (transformers' `PretrainedConfig` default: 2 labels); a headless `ViTModel` checkpoint (in21k
    backbones) is costed with that head too. Not represented: `ViTModel`'s optional pooler (a dense h x h
    layer on the class token, h^2 + h parameters, off in `ViTForImageClassification`), `encoder_stride`
    (masked-image-modelling decoder) and non-square images (a list `image_size` is refused).
    """
    image, patch = c.size("image_size"), c.size("patch_size")
    if image % patch:
        raise ConfigError(f"{c.where('patch_size')}={patch} does not divide image_size={image}; allowed: a divisor "
                          f"of {image}")
    hidden, heads = c.size("hidden_size"), c.size("num_attention_heads")
    if hidden % heads:
        raise ConfigError(f"{c.where('num_attention_heads')}={heads} does not divide hidden_size={hidden}")
    labels = c.cfg.get("id2label")
    if labels is not None and not (isinstance(labels, dict) and labels):
        raise ConfigError(f"{c.where('id2label')}={labels!r} must map each class index to its label")
    return {
        "family": "vit", "image_size": image, "patch_size": patch, "num_channels": c.size_or("num_channels", 3),
        "num_layers": c.size("num_hidden_layers"), "hidden_size": hidden, "num_heads": heads,
        "ffn_hidden_size": c.size("intermediate_size"),
        "num_classes": len(labels) if labels else c.size_or("num_labels", HF_DEFAULT_LABELS),
        "activation": c.activation("hidden_act", "gelu"), "qkv_bias": c.flag("qkv_bias", True),
        "has_dropout": c.dropout("hidden_dropout_prob", "attention_probs_dropout_prob"),
    }
