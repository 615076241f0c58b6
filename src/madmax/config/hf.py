"""Hugging Face `config.json` -> our decoder schema, offline (no `transformers` needed).

Field names and their defaults follow each architecture's `PretrainedConfig` in transformers
(`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `GPT2Config`, `GPTNeoXConfig`, `OPTConfig`); only the
fields that shape compute and memory are read. The mapping is exact for the parameter count of the
published checkpoints except where our schema has no field for a detail, each named below:

- OPT's learned position table has 2 extra rows (`OPTLearnedPositionalEmbedding` offset): 2*h params
  short; OPT's `word_embed_proj_dim` != `hidden_size` (OPT-350m's projected embedding) is refused.
- Llama `attention_bias` without `mlp_bias` biases Q, K, V and O; we bias Q, K, V only (h short per
  layer); `mlp_bias` maps to `has_bias`, which also biases the attention projections.
- GPT-NeoX `attention_bias=false` still has MLP biases; we count attention biases too.
- Sizes that change no parameter or FLOP count are not represented: rotary fraction (`rotary_pct`),
  parallel residual (`use_parallel_residual`), RoPE scaling; Mistral's `sliding_window` is not modelled
  (attention FLOPs beyond the window are over-counted).
"""

from __future__ import annotations

from typing import Any

from madmax.errors import ConfigError

SUPPORTED = ("llama", "mistral", "qwen2", "gpt2", "gpt_neox", "opt")
OUR_FIELDS = (
    "name, num_layers, hidden_size, num_heads, ffn_hidden_size, vocab_size, max_seq_len "
    "(optional: num_kv_heads, head_dim, is_gated_ffn, activation, norm, has_bias, position, tied_embeddings)"
)

# transformers activation names (ACT2FN keys) -> our Activation values.
_ACTIVATIONS = {
    "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
    "gelu_python": "gelu", "gelu_accurate": "gelu", "quick_gelu": "gelu",
    "relu": "relu", "silu": "silu", "swish": "silu", "relu2": "squared_relu",
}


class _Config:
    """Typed access to one Hugging Face config mapping; every failure names the Hugging Face key."""

    def __init__(self, cfg: dict[str, Any], model_type: str) -> None:
        self.cfg = cfg
        self.model_type = model_type

    def _where(self, key: str) -> str:
        return f"Hugging Face config.json (model_type {self.model_type!r}) field {key!r}"

    def size(self, key: str) -> int:
        """A required positive integer."""
        if self.cfg.get(key) is None:
            raise ConfigError(f"{self._where(key)} is missing; it is required to import this model")
        return self._positive(key)

    def optional_size(self, key: str) -> int | None:
        return None if self.cfg.get(key) is None else self._positive(key)

    def _positive(self, key: str) -> int:
        value = self.cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{self._where(key)}={value!r} must be a positive integer")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self._where(key)}={value!r} must be true or false")
        return value

    def dropout(self, *keys: str, default: float = 0.0) -> bool:
        """Whether any of the dropout probabilities `keys` is positive."""
        for key in keys:
            value = self.cfg.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(f"{self._where(key)}={value!r} must be a probability in [0, 1]")
            if value > 0:
                return True
        return False

    def activation(self, key: str, default: str) -> str:
        value = self.cfg.get(key, default)
        if value not in _ACTIVATIONS:
            raise ConfigError(
                f"{self._where(key)}={value!r} is not supported; allowed: {', '.join(_ACTIVATIONS)}"
            )
        return _ACTIVATIONS[value]


def from_hf_config(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Our model fields from a Hugging Face config mapping; ConfigError for unsupported model types."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        what = (
            "has no model_type" if model_type is None
            else f"has model_type {model_type!r}, which madmax cannot import"
        )
        raise ConfigError(
            f"Hugging Face config.json {what}; allowed model_type: {', '.join(SUPPORTED)}; "
            f"for another architecture write a madmax model file with the fields {OUR_FIELDS}"
        )
    c = _Config(cfg, model_type)
    common = {"name": name, "source": f"Hugging Face config.json (model_type {model_type})"}
    if model_type in {"llama", "mistral", "qwen2"}:
        return common | _llama_like(c)
    return common | {"gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt}[model_type](c)


def _llama_like(c: _Config) -> dict[str, Any]:
    """Llama, Mistral, Qwen2: pre-RMSNorm, RoPE, SwiGLU, grouped-query attention, no learned positions.

    Biases: Qwen2 always biases Q, K, V (not O, not the MLP); Llama biases Q, K, V, O with
    `attention_bias` and the MLP with `mlp_bias`; Mistral has none.
    """
    heads = c.size("num_attention_heads")
    attention_bias = c.flag("attention_bias", False) if c.model_type == "llama" else False
    mlp_bias = c.flag("mlp_bias", False) if c.model_type == "llama" else False
    fields: dict[str, Any] = {
        "num_layers": c.size("num_hidden_layers"), "hidden_size": c.size("hidden_size"),
        "num_heads": heads, "num_kv_heads": c.optional_size("num_key_value_heads") or heads,
        "head_dim": c.optional_size("head_dim"), "ffn_hidden_size": c.size("intermediate_size"),
        "is_gated_ffn": True, "activation": c.activation("hidden_act", "silu"), "norm": "rmsnorm",
        "has_bias": mlp_bias, "qkv_bias": c.model_type == "qwen2" or (attention_bias and not mlp_bias),
        "has_dropout": c.dropout("attention_dropout"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("max_position_embeddings"),
    }
    # Llama 3.x: the context before RoPE scaling is the pre-training length (8K for Llama 3.1).
    scaling = c.cfg.get("rope_scaling")
    if isinstance(scaling, dict) and isinstance(scaling.get("original_max_position_embeddings"), int):
        original = scaling["original_max_position_embeddings"]
        if 0 < original <= fields["max_seq_len"]:
            fields["train_seq_len"] = original
    return fields


def _gpt2(c: _Config) -> dict[str, Any]:
    """GPT-2: pre-LayerNorm, learned positions, biases everywhere, tied LM head, 4h MLP by default."""
    hidden = c.size("n_embd")
    return {
        "num_layers": c.size("n_layer"), "hidden_size": hidden, "num_heads": c.size("n_head"),
        "ffn_hidden_size": c.optional_size("n_inner") or 4 * hidden,
        "activation": c.activation("activation_function", "gelu_new"), "norm": "layernorm",
        "has_bias": True, "has_dropout": c.dropout("resid_pdrop", "embd_pdrop", "attn_pdrop", default=0.1),
        "position": "learned", "vocab_size": c.size("vocab_size"),
        "tied_embeddings": c.flag("tie_word_embeddings", True), "max_seq_len": c.size("n_positions"),
    }


def _gpt_neox(c: _Config) -> dict[str, Any]:
    """GPT-NeoX / Pythia: LayerNorm, rotary on `rotary_pct` of each head (no parameters), biases,
    untied LM head. The parallel residual (`use_parallel_residual`) computes the same ops."""
    return {
        "num_layers": c.size("num_hidden_layers"), "hidden_size": c.size("hidden_size"),
        "num_heads": c.size("num_attention_heads"), "ffn_hidden_size": c.size("intermediate_size"),
        "activation": c.activation("hidden_act", "gelu"), "norm": "layernorm", "has_bias": True,
        "has_dropout": c.dropout("hidden_dropout", "attention_dropout"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("max_position_embeddings"),
    }


def _opt(c: _Config) -> dict[str, Any]:
    """OPT: LayerNorm, learned positions (2 offset rows not represented), ReLU MLP, tied LM head."""
    hidden = c.size("hidden_size")
    projected = c.optional_size("word_embed_proj_dim")
    if projected is not None and projected != hidden:
        raise ConfigError(
            f"Hugging Face config.json (model_type 'opt') field 'word_embed_proj_dim'={projected} differs "
            f"from hidden_size={hidden} (a projected embedding, as in OPT-350m), which the madmax schema "
            f"cannot represent; allowed: word_embed_proj_dim={hidden} or absent"
        )
    return {
        "num_layers": c.size("num_hidden_layers"), "hidden_size": hidden,
        "num_heads": c.size("num_attention_heads"), "ffn_hidden_size": c.size("ffn_dim"),
        "activation": c.activation("activation_function", "relu"), "norm": "layernorm",
        "has_bias": c.flag("enable_bias", True),
        "has_dropout": c.dropout("dropout", default=0.1) or c.dropout("attention_dropout"),
        "position": "learned", "vocab_size": c.size("vocab_size"),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "max_seq_len": c.size("max_position_embeddings"),
    }
