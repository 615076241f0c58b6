"""Hugging Face `config.json` -> our decoder schema, offline (no `transformers` needed).

Field names follow each architecture's `PretrainedConfig` in transformers (documented per model
type); only the fields that shape compute and memory are read.
"""

from __future__ import annotations

from typing import Any

from madmax.errors import ConfigError

SUPPORTED = ("llama", "mistral", "qwen2", "gpt2", "gpt_neox", "opt")
OUR_FIELDS = ("num_layers, hidden_size, num_heads, num_kv_heads, ffn_hidden_size, is_gated_ffn, "
              "vocab_size, tied_embeddings, max_seq_len")


def _need(cfg: dict[str, Any], key: str, model_type: str) -> Any:
    if key not in cfg:
        raise ConfigError(f"Hugging Face config of model_type {model_type!r} lacks field {key!r}")
    return cfg[key]


def from_hf_config(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Our model fields from a Hugging Face config mapping; ConfigError for unsupported model types."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        raise ConfigError(
            f"Hugging Face model_type {model_type!r} is not supported; allowed: {', '.join(SUPPORTED)}; "
            f"for others write a madmax model file with fields {OUR_FIELDS}"
        )
    g = lambda key: _need(cfg, key, model_type)  # noqa: E731
    if model_type in {"llama", "mistral", "qwen2"}:
        heads = g("num_attention_heads")
        return {
            "name": name, "num_layers": g("num_hidden_layers"), "hidden_size": g("hidden_size"),
            "num_heads": heads, "num_kv_heads": cfg.get("num_key_value_heads") or heads,
            "head_dim": cfg.get("head_dim") or None, "ffn_hidden_size": g("intermediate_size"),
            "is_gated_ffn": True, "activation": "silu", "norm": "rmsnorm",
            "qkv_bias": bool(cfg.get("attention_bias", False)) or model_type == "qwen2",
            "position": "rope", "vocab_size": g("vocab_size"),
            "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
            "max_seq_len": g("max_position_embeddings"), "source": f"Hugging Face config.json ({model_type})",
        }
    if model_type == "gpt2":
        hidden = g("n_embd")
        return {
            "name": name, "num_layers": g("n_layer"), "hidden_size": hidden, "num_heads": g("n_head"),
            "ffn_hidden_size": cfg.get("n_inner") or 4 * hidden, "activation": "gelu", "norm": "layernorm",
            "has_bias": True, "position": "learned", "vocab_size": g("vocab_size"),
            "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)), "max_seq_len": g("n_positions"),
            "source": "Hugging Face config.json (gpt2)",
        }
    if model_type == "gpt_neox":
        return {
            "name": name, "num_layers": g("num_hidden_layers"), "hidden_size": g("hidden_size"),
            "num_heads": g("num_attention_heads"), "ffn_hidden_size": g("intermediate_size"),
            "activation": "gelu", "norm": "layernorm", "has_bias": True, "position": "rope",
            "vocab_size": g("vocab_size"), "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
            "max_seq_len": g("max_position_embeddings"), "source": "Hugging Face config.json (gpt_neox)",
        }
    # opt
    hidden = g("hidden_size")
    return {
        "name": name, "num_layers": g("num_hidden_layers"), "hidden_size": hidden,
        "num_heads": g("num_attention_heads"), "ffn_hidden_size": g("ffn_dim"),
        "activation": "relu", "norm": "layernorm", "has_bias": True, "position": "learned",
        "vocab_size": g("vocab_size"), "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "max_seq_len": g("max_position_embeddings"), "source": "Hugging Face config.json (opt)",
    }
