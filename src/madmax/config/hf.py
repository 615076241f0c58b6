"""Hugging Face `config.json` -> our decoder schema, offline (no `transformers` needed).

Field names and their defaults follow each architecture's `PretrainedConfig` in transformers
(`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`, `Phi3Config`, `Gemma2Config`,
`Gemma3TextConfig`, `GPT2Config`, `GPTNeoXConfig`, `GPTJConfig`, `OPTConfig`, `FalconConfig`); only the
fields that shape compute and memory are read. Mixture-of-experts model types (`mixtral`, `qwen2_moe`,
`qwen3_moe`, `deepseek_v2`, `deepseek_v3`, `kimi_k2`, `gpt_oss`, `llama4`) are mapped with
`madmax.config.hf_moe`, whose docstring lists their approximations; vision transformers (`vit`) with
`madmax.config.vit.from_hf`. Mixtral and Qwen-MoE share the
attention and dense parts of Mistral and Qwen2/3 below. A key a config leaves out takes the transformers default
where the published configs rely on it (Gemma 3's sparse `text_config`, Falcon's `max_position_embeddings`);
otherwise the size keys are required. The mapping is exact for the parameter count of the published
checkpoints except where our schema has no field for a detail, each named below:

- OPT's learned position table has 2 extra rows (`OPTLearnedPositionalEmbedding` offset): 2*h params
  short; OPT's `word_embed_proj_dim` != `hidden_size` (OPT-350m's projected embedding) is refused.
- Llama/Qwen3/Qwen3-MoE/Gemma `attention_bias` biases Q, K, V and O; we bias Q, K, V only (h short per layer)
  unless `mlp_bias` is set too (Llama), which biases every projection (`has_bias`).
- Sizes that change no parameter count and (almost) no FLOPs are not represented: rotary fraction
  (`rotary_pct`, `rotary_dim`, `partial_rotary_factor`), RoPE bases and scaling, Gemma's
  `query_pre_attn_scalar`, logit soft-capping and embedding scaling (docs/families.md).
- Qwen2/Qwen3 `use_sliding_window` with full attention in the first `max_window_layers` layers only
  and windows after is refused (our `sliding_window_pattern` interleaves, it does not split).
- Gemma 3 multimodal configs (`Gemma3ForConditionalGeneration`): the text model in `text_config` is
  imported; the SigLIP vision tower and its projector (about 0.42 B parameters) are not modelled.
"""

from __future__ import annotations

from typing import Any

from madmax.config import hf_moe, vit
from madmax.config.hf_keys import HFConfig
from madmax.errors import ConfigError

SUPPORTED = ("llama", "mistral", "qwen2", "gpt2", "gpt_neox", "opt", "qwen3", "phi3", "gemma2", "gemma3",
             "gemma3_text", "gptj", "falcon", "RefinedWebModel", "RefinedWeb", "mixtral", "qwen2_moe", "qwen3_moe",
             "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss", "llama4", "llama4_text", "vit")
OUR_FIELDS = (
    "name, num_layers, hidden_size, num_heads, ffn_hidden_size, vocab_size, max_seq_len "
    "(optional: num_kv_heads, head_dim, is_gated_ffn, activation, norm, has_bias, qkv_bias, ffn_bias, position, "
    "tied_embeddings, parallel_attention, qk_norm, post_norms, sliding_window, sliding_window_pattern, "
    "moe, mla, attention_sinks, mtp_layers)"
)
# The training sequence length an import defaults to when its config names no pre-training length (no
# `rope_scaling.original_max_position_embeddings`): min(max_position_embeddings, this), since
# max_position_embeddings is the longest context a model serves (131,072 for Qwen2-7B), not the length it
# is trained at. 4,096 tokens: the pre-training length of Llama 2 (Touvron et al. 2023, arXiv 2307.09288,
# Table 1) and of Qwen2 before its final long-context phase (Yang et al. 2024, arXiv 2407.10671, Sec. 3.2),
# and the seq_length of Megatron-LM's and NeMo's Llama 2 recipes. A default, not a measurement: the result's
# assumptions say so.
DEFAULT_TRAIN_SEQ_LEN = 4096
# Multimodal model types whose text model sits in `text_config`: what the import leaves out.
_TEXT_CONFIGS = {"gemma3": "the vision tower and its projector", "llama4": "the vision encoder and its projector"}


def model_name(cfg: dict[str, Any], fallback: str) -> str:
    """The name of the model a config describes: its `_name_or_path` (a hub id, or a local path's last
    folder), else its first `architectures` entry, else `fallback` (the folder of the file)."""
    named = cfg.get("_name_or_path")
    if isinstance(named, str) and named.strip():
        named = named.strip().rstrip("/\\")
        local = named.startswith((".", "/", "~", "\\")) or ":" in named or named.count("/") > 1
        return named.replace("\\", "/").rsplit("/", 1)[-1] if local else named
    architectures = cfg.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str) \
            and architectures[0].strip():
        return architectures[0].strip()
    return fallback


def from_hf_config(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Our model fields from a Hugging Face config mapping; ConfigError for unsupported model types.

    name: the model's name when the config names none (`model_name`). Without a pre-training length in
    the config, the default sequence length is min(max_position_embeddings, DEFAULT_TRAIN_SEQ_LEN).
    """
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
    source = f"Hugging Face config.json (model_type {model_type})"
    c = HFConfig(cfg, model_type)
    if model_type in _TEXT_CONFIGS and isinstance(cfg.get("text_config"), dict):
        c = HFConfig(cfg["text_config"], model_type, prefix="text_config.")
        source = (f"text_config of a Hugging Face config.json (model_type {model_type}): the text model only, "
                  f"{_TEXT_CONFIGS[model_type]} are not modelled")
    builders = {"gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "phi3": _phi3, "gptj": _gptj,
                "gemma2": _gemma, "gemma3": _gemma, "gemma3_text": _gemma, "mixtral": _mixtral,
                "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe, "deepseek_v2": hf_moe.deepseek,
                "deepseek_v3": hf_moe.deepseek, "kimi_k2": hf_moe.deepseek, "gpt_oss": hf_moe.gpt_oss,
                "llama4": hf_moe.llama4, "llama4_text": hf_moe.llama4, "vit": vit.from_hf}
    build = builders.get(model_type, _falcon if model_type in ("falcon", "RefinedWebModel", "RefinedWeb")
                         else _llama_like)
    fields = {"name": model_name(cfg, name), "source": source} | build(c)
    quantized = _checkpoint_format(cfg.get("quantization_config"))
    if quantized and model_type != "vit":
        fields["checkpoint_format"] = quantized
    longest = fields.get("max_seq_len")
    if "train_seq_len" not in fields and isinstance(longest, int) and longest > DEFAULT_TRAIN_SEQ_LEN:
        fields["train_seq_len"] = DEFAULT_TRAIN_SEQ_LEN
        fields["train_seq_len_source"] = (
            f"min(max_position_embeddings {longest:,}, {DEFAULT_TRAIN_SEQ_LEN:,}): a common training length "
            "(Llama 2's and Qwen2's pre-training) where the config names none")
    return fields


def _llama_like(c: HFConfig, like: str | None = None) -> dict[str, Any]:
    """Llama, Mistral, Qwen2, Qwen3 (and the attention and dense parts of Mixtral, Qwen2-MoE and Qwen3-MoE,
    read `like` Mistral, Qwen2 and Qwen3): pre-RMSNorm, RoPE, SwiGLU, grouped-query attention.

    Biases: Qwen2 always biases Q, K, V (not O, not the MLP; Qwen2-MoE unless `qkv_bias` is false); Llama
    biases Q, K, V, O with `attention_bias` and the MLP with `mlp_bias`; Qwen3 biases Q, K, V, O with
    `attention_bias`; Mistral has none. Qwen3 normalizes each query and key head (QK-norm) and defaults
    `head_dim` to 128 (Qwen3-MoE to hidden_size / heads). Windows: Mistral's `sliding_window` on every
    layer; Qwen2/3 only with `use_sliding_window`. A RoPE scaling's original context is the pre-training
    length (8K for Llama 3.1).
    """
    like = like or c.model_type
    heads = c.size("num_attention_heads")
    layers = c.size("num_hidden_layers")
    attention_bias = c.flag("attention_bias", False) if like in ("llama", "qwen3") else False
    mlp_bias = c.flag("mlp_bias", False) if like == "llama" else False
    qwen2_bias = like == "qwen2" and (c.model_type == "qwen2" or c.flag("qkv_bias", True))
    fields: dict[str, Any] = {
        "num_layers": layers, "hidden_size": c.size("hidden_size"),
        "num_heads": heads, "num_kv_heads": c.optional_size("num_key_value_heads") or heads,
        "head_dim": c.size_or("head_dim", 128) if c.model_type == "qwen3" else c.optional_size("head_dim"),
        "ffn_hidden_size": c.size("intermediate_size"),
        "is_gated_ffn": True, "activation": c.activation("hidden_act", "silu"), "norm": "rmsnorm",
        "has_bias": attention_bias and mlp_bias, "ffn_bias": mlp_bias and not attention_bias,
        "qkv_bias": qwen2_bias or (attention_bias and not mlp_bias), "qk_norm": like == "qwen3",
        "has_dropout": c.dropout("attention_dropout"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("max_position_embeddings"),
    }
    if like == "mistral":
        fields |= c.windows(c.optional_size("sliding_window"), None, layers)
    elif like in ("qwen2", "qwen3"):
        fields |= _qwen_windows(c, layers)
    return fields | c.pretraining_length(fields["max_seq_len"])


def _mixtral(c: HFConfig) -> dict[str, Any]:
    """Mixtral: Mistral's attention, every layer's MLP replaced by routed experts."""
    return _llama_like(c, like="mistral") | {"moe": hf_moe.mixtral_experts(c)}


def _qwen_moe(c: HFConfig) -> dict[str, Any]:
    """Qwen2-MoE and Qwen3-MoE: Qwen2's and Qwen3's attention, routed experts on the sparse layers."""
    fields = _llama_like(c, like=c.model_type.removesuffix("_moe"))
    return fields | {"moe": hf_moe.qwen_experts(c, fields["num_layers"])}


def _qwen_windows(c: HFConfig, layers: int) -> dict[str, Any]:
    """Qwen2/3 `use_sliding_window`: the first `max_window_layers` layers attend fully, the rest use the
    window; representable when that is all layers (no window) or none (window everywhere)."""
    if c.cfg.get("layer_types") is not None:
        return c.windows(c.optional_size("sliding_window"), None, layers)
    if not c.flag("use_sliding_window", False):
        return {}
    full = c.cfg.get("max_window_layers", 28)
    if full == 0:
        return c.windows(c.size("sliding_window"), None, layers)
    if isinstance(full, int) and not isinstance(full, bool) and full >= layers:
        return {}
    raise ConfigError(f"{c.where('max_window_layers')}={full!r} with use_sliding_window=true gives full "
                      "attention to the first layers and windows to the rest, which madmax cannot represent; "
                      f"allowed: 0, at least num_hidden_layers={layers}, or use_sliding_window=false")


def _phi3(c: HFConfig) -> dict[str, Any]:
    """Phi-3: Llama-like with fused qkv_proj and gate_up_proj (the same parameters and FLOPs as separate
    projections), no biases (qkv_proj and o_proj are built without them whatever `attention_bias`
    says), partial rotary (no parameters), `sliding_window` on every layer; `original_max_position_embeddings`
    is the pre-training context of the long-context (LongRoPE) variants."""
    heads = c.size("num_attention_heads")
    layers = c.size("num_hidden_layers")
    fields: dict[str, Any] = {
        "num_layers": layers, "hidden_size": c.size("hidden_size"), "num_heads": heads,
        "num_kv_heads": c.optional_size("num_key_value_heads") or heads,
        "ffn_hidden_size": c.size("intermediate_size"), "is_gated_ffn": True,
        "activation": c.activation("hidden_act", "silu"), "norm": "rmsnorm",
        "has_dropout": c.dropout("attention_dropout", "resid_pdrop", "embd_pdrop"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("max_position_embeddings"),
    } | c.windows(c.optional_size("sliding_window"), None, layers)
    original = c.optional_size("original_max_position_embeddings")
    if original is not None and original < fields["max_seq_len"]:
        fields["train_seq_len"] = original
    return fields


def _gemma(c: HFConfig) -> dict[str, Any]:
    """Gemma 2 and 3: RMSNorm before and after attention and FFN (4 per layer), GeGLU (GELU-tanh gated
    FFN), explicit head_dim, tied embeddings, local sliding-window layers interleaved with global ones
    (Gemma 2: every 2nd layer global; Gemma 3: every `sliding_window_pattern`-th, default 6); Gemma 3
    adds QK-norm. Absent keys take `Gemma2Config`/`Gemma3TextConfig` defaults (8 heads, 4 KV heads,
    head_dim 256, vocabulary 256000 / 262208, context 8192 / 131072, window 4096), as the sparse
    `text_config` of Gemma 3 multimodal checkpoints relies on."""
    gemma3 = c.model_type != "gemma2"
    layers = c.size("num_hidden_layers")
    # Gemma2DecoderLayer: layers 0, 2, ... local; Gemma 3: (i + 1) % sliding_window_pattern == 0 global
    pattern = (c.optional_size("sliding_window_pattern", "_sliding_window_pattern") or 6) if gemma3 else 2
    return {
        "num_layers": layers, "hidden_size": c.size("hidden_size"),
        "num_heads": c.size_or("num_attention_heads", 8), "num_kv_heads": c.size_or("num_key_value_heads", 4),
        "head_dim": c.size_or("head_dim", 256), "ffn_hidden_size": c.size("intermediate_size"),
        "is_gated_ffn": True, "activation": c.activation("hidden_activation", "gelu_pytorch_tanh"),
        "norm": "rmsnorm", "qkv_bias": c.flag("attention_bias", False), "qk_norm": gemma3, "post_norms": True,
        "has_dropout": c.dropout("attention_dropout"), "position": "rope",
        "vocab_size": c.size_or("vocab_size", 262208 if gemma3 else 256000),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "max_seq_len": c.size_or("max_position_embeddings", 131072 if gemma3 else 8192),
    } | c.windows(c.size_or("sliding_window", 4096), pattern, layers)


def _gpt2(c: HFConfig) -> dict[str, Any]:
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


def _gptj(c: HFConfig) -> dict[str, Any]:
    """GPT-J: one LayerNorm feeds attention and MLP in parallel (outputs summed), no attention biases,
    biased MLP (4h when `n_inner` is null), biased and untied LM head, rotary on `rotary_dim` of each
    head (no parameters)."""
    hidden = c.size("n_embd")
    return {
        "num_layers": c.size("n_layer"), "hidden_size": hidden, "num_heads": c.size("n_head"),
        "ffn_hidden_size": c.optional_size("n_inner") or 4 * hidden,
        "activation": c.activation("activation_function", "gelu_new"), "norm": "layernorm",
        "ffn_bias": True, "lm_head_bias": True, "parallel_attention": True, "shared_input_norm": True,
        "has_dropout": c.dropout("resid_pdrop", "embd_pdrop", "attn_pdrop"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("n_positions"),
    }


def _gpt_neox(c: HFConfig) -> dict[str, Any]:
    """GPT-NeoX / Pythia: LayerNorm, rotary on `rotary_pct` of each head (no parameters), biased MLP,
    attention biased unless `attention_bias` is false, untied LM head; `use_parallel_residual` (default)
    runs attention and MLP in parallel, each behind its own LayerNorm."""
    attention_bias = c.flag("attention_bias", True)
    return {
        "num_layers": c.size("num_hidden_layers"), "hidden_size": c.size("hidden_size"),
        "num_heads": c.size("num_attention_heads"), "ffn_hidden_size": c.size("intermediate_size"),
        "activation": c.activation("hidden_act", "gelu"), "norm": "layernorm", "has_bias": attention_bias,
        "ffn_bias": not attention_bias, "parallel_attention": c.flag("use_parallel_residual", True),
        "has_dropout": c.dropout("hidden_dropout", "attention_dropout"), "position": "rope",
        "vocab_size": c.size("vocab_size"), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "max_seq_len": c.size("max_position_embeddings"),
    }


def _falcon(c: HFConfig) -> dict[str, Any]:
    """Falcon (and its custom-code configs 'RefinedWebModel', 7B, and 'RefinedWeb', 40B, with the old key
    names n_layer, n_head, n_head_kv). Falcon-7B: multi-query attention (1 KV head), attention and MLP
    in parallel behind one LayerNorm. `new_decoder_architecture` (40B, 180B): `num_kv_heads` KV groups
    and two LayerNorms (ln_attn, ln_mlp) reading the same input. No biases unless `bias`; MLP 4h;
    GELU; rotary unless `alibi`; tied embeddings; context 2048 unless given."""
    hidden = c.size("hidden_size", "n_embed")
    heads = c.size("num_attention_heads", "n_head")
    new_arch = c.flag("new_decoder_architecture", c.model_type == "RefinedWeb")
    if new_arch:
        kv_heads = c.optional_size("num_kv_heads", "n_head_kv") or heads
    else:  # FalconAttention: one KV head with multi_query, whatever num_kv_heads says
        kv_heads = 1 if c.flag("multi_query", True) else heads
    parallel = c.flag("parallel_attn", True)
    norms = c.cfg.get("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    if norms not in (1, 2):
        raise ConfigError(f"{c.where('num_ln_in_parallel_attn')}={norms!r} is not supported; allowed: 1, 2")
    return {
        "num_layers": c.size("num_hidden_layers", "n_layer"), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": kv_heads, "ffn_hidden_size": c.optional_size("ffn_hidden_size") or 4 * hidden,
        "activation": c.activation("activation", "gelu"), "norm": "layernorm",
        "has_bias": c.flag("bias", False), "parallel_attention": parallel,
        "shared_input_norm": parallel and norms == 1,
        "has_dropout": c.dropout("hidden_dropout", "attention_dropout"),
        "position": "alibi" if c.flag("alibi", False) else "rope", "vocab_size": c.size("vocab_size"),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "max_seq_len": c.size_or("max_position_embeddings", 2048),
    }


def _opt(c: HFConfig) -> dict[str, Any]:
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


def _checkpoint_format(quantization: Any) -> str | None:
    """A Hugging Face quantization_config in a few words ('fp8', 'mxfp4', 'awq 4-bit'), or None."""
    if not isinstance(quantization, dict):
        return None
    method = quantization.get("quant_method")
    if not isinstance(method, str) or not method.strip():
        return None
    method, bits = method.strip()[:40], quantization.get("bits")
    return f"{method} {bits}-bit" if isinstance(bits, int) and not isinstance(bits, bool) else method
