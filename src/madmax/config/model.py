"""Model descriptions. A family is chosen by the `family` key; parameter counts are computed, never typed.

The decoder-only transformer covers dense and mixture-of-experts LLMs (an `moe` section replaces the
FFN of some layers by routed experts; an `mla` section replaces grouped-query attention by DeepSeek's
multi-head latent attention). Recommendation models are the `dlrm` family, vision transformers the `vit`
family. Each family has its workload module in `madmax.workload`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from madmax.config.base import Schema
from madmax.config.checks import MAX_LAYERS
from madmax.config.dlrm import DLRMModel
from madmax.config.vit import ViTModel


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


class MoE(Schema):
    """Routed experts replacing the FFN of the MoE layers (Shazeer et al. 2017; Mixtral, DeepSeek-V3, Qwen3-MoE).

    Each token's router picks `top_k` of `num_experts` experts, each a gated or plain FFN of width
    `expert_ffn_hidden_size` (the model's `is_gated_ffn` and `activation`); `shared_experts` always-on
    experts of `shared_expert_ffn_hidden_size` in total run beside them (DeepSeek, Qwen2-MoE, Llama 4).
    Layer i (from 0) is an MoE layer when i >= `first_dense_layers` and (i + 1) % `layer_freq` == 0;
    the others keep the dense FFN of `ffn_hidden_size`.
    """

    num_experts: PositiveInt = Field(description="Routed experts E per MoE layer.")
    top_k: PositiveInt = Field(description="Experts each token is routed to, k.")
    expert_ffn_hidden_size: PositiveInt = Field(description="Inner width of one routed expert.")
    shared_experts: int = Field(0, ge=0, description="Shared (always-on) experts per MoE layer.")
    shared_expert_ffn_hidden_size: PositiveInt | None = Field(
        None, description="Inner width of the shared experts together; default shared_experts * "
        "expert_ffn_hidden_size.")
    shared_expert_gate: bool = Field(
        False, description="A sigmoid gate (hidden_size -> 1) scales the shared expert's output (Qwen2-MoE).")
    first_dense_layers: int = Field(0, ge=0, description="Leading layers with a dense FFN (DeepSeek "
                                    "first_k_dense_replace).")
    layer_freq: PositiveInt = Field(1, description="Every k-th layer is an MoE layer (Llama 4 Maverick: 2).")
    expert_bias: bool = Field(False, description="Expert projections carry biases (GPT-OSS).")
    router_bias: bool = Field(
        False, description="The router carries a bias of num_experts elements (GPT-OSS; DeepSeek-V3's "
        "e_score_correction_bias).")
    glu_limit: PositiveFloat | None = Field(
        None, description="Clamp of a gated expert's activation inputs (GPT-OSS swiglu_limit 7.0): the gate at "
        "most L, the linear input within [-L, L]; None: no clamp.")
    route_groups: PositiveInt = Field(
        1, description="Group-limited routing (DeepSeek-V3 n_group): the experts form this many "
        "equal groups, consecutive in expert order; 1: no groups.")
    route_group_topk: PositiveInt | None = Field(
        None, description="Groups a token's top_k experts come from (DeepSeek-V3 topk_group: 4 of 8, which "
        "limits each token to 4 nodes when groups are nodes); None: all groups.")

    @property
    def shared_width(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.shared_experts * self.expert_ffn_hidden_size

    @model_validator(mode="after")
    def _shape(self) -> MoE:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}; "
                             f"allowed: 1 to {self.num_experts}")
        if self.shared_expert_ffn_hidden_size is not None and not self.shared_experts:
            raise ValueError("shared_expert_ffn_hidden_size needs shared_experts >= 1; allowed: give "
                             "shared_experts or drop shared_expert_ffn_hidden_size")
        if self.shared_expert_gate and not self.shared_experts:
            raise ValueError("shared_expert_gate=true needs shared_experts >= 1")
        if self.num_experts % self.route_groups:
            raise ValueError(f"route_groups={self.route_groups} does not divide num_experts={self.num_experts}")
        if self.route_group_topk is not None and self.route_group_topk > self.route_groups:
            raise ValueError(f"route_group_topk={self.route_group_topk} exceeds route_groups={self.route_groups}; "
                             f"allowed: 1 to {self.route_groups}")
        return self


class MLA(Schema):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): queries and keys/values pass through
    low-rank latents; each head's query and key are a `qk_nope_head_dim` part plus a `qk_rope_head_dim`
    rotary part (the rotary key is one head shared by all), its value `v_head_dim` wide. The KV cache
    keeps the compressed latent (kv_lora_rank) and the rotary key (qk_rope_head_dim) per token."""

    q_lora_rank: PositiveInt | None = Field(None, description="Query latent width; None: queries are "
                                            "projected directly from the hidden state (DeepSeek-V2-Lite).")
    kv_lora_rank: PositiveInt = Field(description="Key/value latent width (the cached latent).")
    qk_nope_head_dim: PositiveInt = Field(description="Per-head query/key width without rotary encoding.")
    qk_rope_head_dim: PositiveInt = Field(description="Per-head query/key width with rotary encoding.")
    v_head_dim: PositiveInt = Field(description="Per-head value width.")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class DecoderModel(Schema):
    """A decoder-only transformer (GPT, Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, OPT, GPT-NeoX, GPT-J, Falcon).

    Sizes are counts (layers, heads) or widths in elements. Grouped-query attention has
    `num_kv_heads` < `num_heads`; a gated FFN (SwiGLU, Shazeer 2020) has three matrices, a plain one two.
    A layer is sequential (norm, attention, residual, norm, FFN, residual) or, with `parallel_attention`,
    parallel (attention and FFN read the same input; one residual add of both outputs). With a
    `sliding_window`, local layers attend to the last `sliding_window` tokens only; a
    `sliding_window_pattern` k interleaves global layers (every k-th). docs/families.md lists, per family,
    what is modelled and what is ignored.
    """

    family: Literal["decoder"] = Field("decoder", description="Model family.")
    name: str = Field(description="Catalog name, e.g. 'llama-3.1-70b'.")
    aliases: list[str] = Field(default_factory=list, description="Other names, e.g. the Hugging Face id.")
    num_layers: PositiveInt = Field(le=MAX_LAYERS, description="Transformer layers (blocks); at most 16,384 (the "
                                    "workload and the plan hold each layer).")
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
    ffn_bias: bool = Field(
        False, description="The FFN projections carry biases though the attention ones do not (GPT-J; Llama "
        "mlp_bias); has_bias already biases both."
    )
    lm_head_bias: bool = Field(False, description="The LM head carries a bias of vocab_size elements (GPT-J).")
    has_dropout: bool = Field(False, description="Dropout after attention and FFN (keeps masks for backward).")
    parallel_attention: bool = Field(
        False, description="Attention and FFN both read the layer's normed input and their outputs are summed "
        "into the residual once (GPT-J, Falcon, GPT-NeoX use_parallel_residual); false: the FFN reads the "
        "attention block's output (sequential)."
    )
    shared_input_norm: bool = Field(
        False, description="Parallel layers only: one input norm feeds both attention and FFN (GPT-J, "
        "Falcon-7B: 1 norm per layer); false: one norm each (GPT-NeoX, Falcon-40B/180B: 2 norms per layer)."
    )
    qk_norm: bool = Field(
        False, description="An RMSNorm of width head_dim on every query and key head (Qwen3, Gemma 3): 2 ops "
        "and 2*head_dim parameters per layer."
    )
    post_norms: bool = Field(
        False, description="A norm on the attention output and one on the FFN output before each residual "
        "add (Gemma 2/3): 2 more norms of hidden_size features per layer (sequential layers only)."
    )
    sliding_window: PositiveInt | None = Field(
        None, description="Tokens a local layer's query attends to: itself and the sliding_window - 1 before "
        "it; None: every layer attends to its whole causal prefix."
    )
    sliding_window_pattern: PositiveInt | None = Field(
        None, description="Every k-th layer is global, the others local: layer i (counted from 0) is global "
        "when (i + 1) % k == 0 (Gemma 2: 2, Gemma 3: 6); None with a sliding_window: every layer is local "
        "(Mistral 7B v0.1, Phi-3)."
    )
    position: Position = Field(Position.ROPE, description="Position encoding; 'learned' adds a table.")
    moe: MoE | None = Field(None, description="Mixture-of-experts layers; None: every layer has the dense FFN.")
    mla: MLA | None = Field(None, description="Multi-head latent attention; None: (grouped-query) attention.")
    attention_sinks: bool = Field(
        False, description="A learned sink logit per query head joins each softmax (GPT-OSS): num_heads "
        "parameters per layer.")
    mtp_layers: int = Field(
        0, ge=0, le=MAX_LAYERS, description="Multi-token-prediction modules after the model (DeepSeek-V3: 1), "
        "each a norm pair, a (2h x h) projection and one more layer; they share the embedding and LM head. In "
        "training they run on every token; a serving engine may skip them.")
    vocab_size: PositiveInt = Field(description="Vocabulary size V.")
    tied_embeddings: bool = Field(False, description="The LM head reuses the input embedding matrix.")
    max_seq_len: PositiveInt = Field(description="Longest context the model supports, tokens.")
    train_seq_len: PositiveInt | None = Field(
        None, description="Sequence length of its pre-training, the default --seq-len; default max_seq_len."
    )
    train_seq_len_source: str = Field(
        "", description="Why train_seq_len is what it is when it is a default rather than the model's own (a "
        "Hugging Face import's); listed in the assumptions when the sequence length is not given.")
    source: str = Field("", description="Where the architecture numbers come from.")
    checkpoint_format: str | None = Field(
        None, max_length=200, description="The checkpoint's own weight format where its config names one (a Hugging "
        "Face quantization_config: 'fp8', 'mxfp4'), said beside each result: the run's dtype decides what is "
        "simulated.")

    @model_validator(mode="after")
    def _shape(self) -> DecoderModel:
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_kv_heads={self.kv_heads} must divide num_heads={self.num_heads}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}; give head_dim"
            )
        if self.shared_input_norm and not self.parallel_attention:
            raise ValueError("shared_input_norm=True needs parallel_attention=True (only a parallel layer has one "
                             "input for attention and FFN); allowed: shared_input_norm=false")
        if self.post_norms and self.parallel_attention:
            raise ValueError("post_norms=True is modelled for sequential layers only; allowed: post_norms=false "
                             "with parallel_attention=true")
        pattern = self.sliding_window_pattern
        if pattern is not None and self.sliding_window is None:
            raise ValueError(f"sliding_window_pattern={pattern} needs a sliding_window (the tokens a local layer "
                             "attends to); allowed: give sliding_window or drop sliding_window_pattern")
        if pattern == 1:
            raise ValueError("sliding_window_pattern=1 makes every layer global and the sliding_window unused; "
                             "allowed: 2 or more, or no sliding_window")
        if self.moe is not None and not any(self.is_moe_layer(i) for i in range(self.num_layers)):
            raise ValueError(f"moe.first_dense_layers={self.moe.first_dense_layers} and moe.layer_freq="
                             f"{self.moe.layer_freq} leave no MoE layer among the {self.num_layers} layers")
        if self.moe is not None and self.moe.glu_limit is not None and not self.is_gated_ffn:
            raise ValueError(f"moe.glu_limit={self.moe.glu_limit} clamps a gated activation's inputs; allowed: "
                             "is_gated_ffn=true, or no glu_limit")
        if self.mla is not None and (self.parallel_attention or self.qk_norm):
            raise ValueError("mla is modelled with sequential layers and no qk_norm (DeepSeek's layout); "
                             "allowed: parallel_attention=false and qk_norm=false with mla")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    def layer_window(self, layer: int) -> int | None:
        """Tokens that layer `layer` (counted from 0) attends to back, itself included; None: a global layer."""
        k = self.sliding_window_pattern
        if self.sliding_window is None or (k is not None and (layer + 1) % k == 0):
            return None
        return self.sliding_window

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer `layer` (from 0) has routed experts instead of the dense FFN."""
        m = self.moe
        return m is not None and layer >= m.first_dense_layers and (layer + 1) % m.layer_freq == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def default_seq_len(self) -> int:
        return self.train_seq_len or self.max_seq_len

    @property
    def sample_name(self) -> str:
        """What one element of the batch is: a sequence (its throughput is counted in tokens)."""
        return "sequence"

    def parallel_constraints(self) -> dict[str, list[tuple[str, int]]]:
        """Model sizes each parallel degree must divide: TP splits heads, KV heads and the dense FFN (of
        the dense layers and the shared experts); EP splits the experts, ETP each expert's width."""
        tp = [("num_heads", self.num_heads)]
        if self.mla is None:
            tp.append(("num_kv_heads", self.kv_heads))
        if self.moe is None or self.num_moe_layers < self.num_layers:
            tp.append(("ffn_hidden_size", self.ffn_hidden_size))
        if self.moe is not None and self.moe.shared_experts:
            tp.append(("moe.shared_expert_ffn_hidden_size", self.moe.shared_width))
        out = {"tp": tp}
        if self.moe is not None:
            out["ep"] = [("moe.num_experts", self.moe.num_experts)]
            out["etp"] = [("moe.expert_ffn_hidden_size", self.moe.expert_ffn_hidden_size)]
        return out

    def degree_limits(self) -> dict[str, tuple[int, str]]:
        """Largest degree of each axis the family is modelled for, with the reason (none here; ep is
        checked against `has_experts`)."""
        return {}

    @property
    def has_experts(self) -> bool:
        return self.moe is not None

    @property
    def num_pipeline_units(self) -> int:
        """Blocks that pipeline stages can split: the layers."""
        return self.num_layers


ModelSpec = DecoderModel | DLRMModel | ViTModel
MODEL_FAMILIES: dict[str, type[Schema]] = {"decoder": DecoderModel, "dlrm": DLRMModel, "vit": ViTModel}
