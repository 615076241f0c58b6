"""Model descriptions. A family is chosen by the `family` key; parameter counts are computed, never typed.

Only the decoder-only transformer is described here now; MoE, DLRM and ViT families join as further
schemas registered in `MODEL_FAMILIES`, each with its workload module in `madmax.workload`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.config.dlrm import DLRMModel


class Activation(StrEnum):
    GELU = "gelu"
    RELU = "relu"
    SILU = "silu"
    SQUARED_RELU = "squared_relu"


class Norm(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Position(StrEnum):
    ROPE = "rope"
    LEARNED = "learned"
    ALIBI = "alibi"
    NONE = "none"


class DecoderModel(Schema):
    """A decoder-only transformer (GPT, Llama, Mistral, Qwen2, OPT, GPT-NeoX).

    Sizes are counts (layers, heads) or widths in elements. Grouped-query attention has
    `num_kv_heads` < `num_heads`; a gated FFN (SwiGLU, Shazeer 2020) has three matrices, a plain one two.
    """

    family: Literal["decoder"] = Field("decoder", description="Model family.")
    name: str = Field(description="Catalog name, e.g. 'llama-3.1-70b'.")
    aliases: list[str] = Field(default_factory=list, description="Other names, e.g. the Hugging Face id.")
    num_layers: PositiveInt = Field(description="Transformer layers (blocks).")
    hidden_size: PositiveInt = Field(description="Model width h (elements).")
    num_heads: PositiveInt = Field(description="Query heads a.")
    num_kv_heads: PositiveInt | None = Field(None, description="Key/value heads (GQA); default num_heads.")
    head_dim: PositiveInt | None = Field(None, description="Width of one head; default hidden_size/num_heads.")
    ffn_hidden_size: PositiveInt = Field(description="Inner width of the feed-forward block.")
    is_gated_ffn: bool = Field(False, description="Gated FFN (SwiGLU/GeGLU): three matrices instead of two.")
    activation: Activation = Field(Activation.GELU, description="FFN activation.")
    norm: Norm = Field(Norm.LAYERNORM, description="Normalization layer kind.")
    has_bias: bool = Field(False, description="Linear layers carry biases (GPT-2/3, OPT, GPT-NeoX).")
    qkv_bias: bool = Field(False, description="Only the Q, K, V projections carry biases (Qwen2).")
    has_dropout: bool = Field(False, description="Dropout after attention and FFN (keeps masks for backward).")
    position: Position = Field(Position.ROPE, description="Position encoding; 'learned' adds a table.")
    vocab_size: PositiveInt = Field(description="Vocabulary size V.")
    tied_embeddings: bool = Field(False, description="The LM head reuses the input embedding matrix.")
    max_seq_len: PositiveInt = Field(description="Longest context the model supports, tokens.")
    train_seq_len: PositiveInt | None = Field(
        None, description="Sequence length of its pre-training, the default --seq-len; default max_seq_len."
    )
    source: str = Field("", description="Where the architecture numbers come from.")

    @model_validator(mode="after")
    def _shape(self) -> DecoderModel:
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_kv_heads={self.kv_heads} must divide num_heads={self.num_heads}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}; give head_dim"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def default_seq_len(self) -> int:
        return self.train_seq_len or self.max_seq_len

    def parallel_constraints(self) -> dict[str, list[tuple[str, int]]]:
        """Model sizes each parallel degree must divide: TP splits heads, KV heads and the FFN."""
        return {"tp": [("num_heads", self.num_heads), ("num_kv_heads", self.kv_heads),
                       ("ffn_hidden_size", self.ffn_hidden_size)]}

    def degree_limits(self) -> dict[str, tuple[int, str]]:
        """Largest degree of each axis the family is modelled for, with the reason (none here; ep is
        checked against `has_experts`)."""
        return {}

    @property
    def has_experts(self) -> bool:
        return False

    @property
    def num_pipeline_units(self) -> int:
        """Blocks that pipeline stages can split: the layers."""
        return self.num_layers


ModelSpec = DecoderModel | DLRMModel
MODEL_FAMILIES: dict[str, type[Schema]] = {"decoder": DecoderModel, "dlrm": DLRMModel}
