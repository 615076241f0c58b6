"""Hugging Face `config.json` -> our decoder schema for mixture-of-experts models, offline.

Field names and defaults follow transformers' `MixtralConfig`, `Qwen2MoeConfig`, `Qwen3MoeConfig`,
`DeepseekV3Config` (and DeepSeek's own `configuration_deepseek.py` for `deepseek_v2`, `deepseek_v3` and
Moonshot's `kimi_k2`, which reuse it), `GptOssConfig` and `Llama4TextConfig`. The expert keys (how many
experts, how many per token, their width) are required: a config without them fails naming the key.
`madmax.config.hf` maps the attention and dense parts shared with Mistral and Qwen2/3 and calls
`mixtral_experts` and `qwen_experts` for the experts; DeepSeek, GPT-OSS and Llama 4 are mapped whole here.

Exact for the parameter count of the published checkpoints except where our schema has no field, each
named here:

- Layers: transformers names the MoE layers per family (Qwen `decoder_sparse_step` and `mlp_only_layers`,
  DeepSeek `first_k_dense_replace` and `moe_layer_freq`, Llama 4 `moe_layers` or
  `interleave_moe_layer_step`); ours are layer i >= moe.first_dense_layers with (i + 1) % moe.layer_freq
  == 0. Any other set of MoE layers (a `mlp_only_layers` list with a hole in it) is refused.
- DeepSeek-V3 and Kimi K2 store the router's `e_score_correction_bias` (one value per expert, learnt by
  their load-balancing rule, not by gradient): counted as a router bias, as DeepSeek's modelling code
  (an `nn.Parameter`) and the checkpoint do; transformers registers it as a buffer, so its
  `num_parameters()` is 58 x 256 = 14,848 lower for DeepSeek-V3 (60 x 384 = 23,040 for Kimi K2).
  Their checkpoints also keep a copy of the embedding and LM head inside the MTP layer
  (`model.layers.61.embed_tokens`, `shared_head`): not counted, as the modules share the main model's
  (DeepSeek-V3 report, Sec. 2.2). `attention_bias` with MLA is refused (no published checkpoint has it).
- GPT-OSS: the clamp of the SwiGLU's inputs (`swiglu_limit`, GptOssConfig default 7.0) is kept as
  `moe.glu_limit` (a stack may run it as eager kernels); `swiglu_alpha` costs as SwiGLU; the checkpoint's
  MXFP4 expert weights are a storage format our schema does not record (serve with --weight-dtype fp4).
- Llama 4: chunked local attention (`attention_chunk_size` tokens, each chunk attended from its start)
  is taken as a sliding window of that many tokens on the RoPE layers, the NoPE layers (`no_rope_layers`
  0) global: the same KV-cache bound, but for sequences longer than a chunk a query sees c tokens in a
  window and c/2 on average in a chunk, so the local layers' attention FLOPs are up to twice the real ones.
  The L2 QK-norm (`use_qk_norm`) has no weights and is not represented; an `attention_bias` biases
  Q, K and V here (the O bias, h per layer, has no field). Multimodal configs (`Llama4ForConditionalGeneration`)
  import their `text_config`; the vision encoder and projector (0.87 B on Scout and Maverick) are not modelled.
"""

from __future__ import annotations

from typing import Any

from madmax.config.hf_keys import HFConfig, global_every
from madmax.errors import ConfigError


def mixtral_experts(c: HFConfig) -> dict[str, Any]:
    """Mixtral: every layer's FFN is `num_local_experts` SwiGLU experts of `intermediate_size`, top
    `num_experts_per_tok`; a bias-free router (h x E)."""
    return _experts(c, "num_local_experts", "num_experts_per_tok", "intermediate_size")


def qwen_experts(c: HFConfig, num_layers: int) -> dict[str, Any]:
    """Qwen2-MoE and Qwen3-MoE: `num_experts` experts of `moe_intermediate_size`, top `num_experts_per_tok`,
    on the layers i with (i + 1) % `decoder_sparse_step` == 0 not listed in `mlp_only_layers` (the others
    keep the dense MLP of `intermediate_size`). Qwen2-MoE adds one shared expert of
    `shared_expert_intermediate_size` scaled by a sigmoid gate (h x 1); Qwen3-MoE has none."""
    step = c.size_or("decoder_sparse_step", 1)
    dense = set(c.indices("mlp_only_layers", num_layers) or [])
    moe_layers = [i for i in range(num_layers) if i not in dense and (i + 1) % step == 0]
    moe = _experts(c, "num_experts", "num_experts_per_tok", "moe_intermediate_size")
    moe |= _layout(c, moe_layers, num_layers, "decoder_sparse_step", "mlp_only_layers")
    if c.model_type == "qwen2_moe":
        moe |= {"shared_experts": 1, "shared_expert_ffn_hidden_size": c.size("shared_expert_intermediate_size"),
                "shared_expert_gate": True}
    return moe


def deepseek(c: HFConfig) -> dict[str, Any]:
    """DeepSeek-V2/V3 and Kimi K2: multi-head latent attention and fine-grained experts.

    MLA: `q_lora_rank` (null: queries projected directly, V2-Lite), `kv_lora_rank`, `qk_nope_head_dim`,
    `qk_rope_head_dim`, `v_head_dim`. Experts: `n_routed_experts` of `moe_intermediate_size`, top
    `num_experts_per_tok`, beside `n_shared_experts` shared ones, on layers i >= `first_k_dense_replace`
    with i % `moe_layer_freq` == 0 (DeepSeek's modelling code); the first layers keep a dense MLP of
    `intermediate_size`. V3 and Kimi K2 route with a bias (`e_score_correction_bias`); V2 without.
    `num_nextn_predict_layers` multi-token-prediction modules (DeepSeek-V3: 1; absent: none). Group-limited
    routing: `n_group` groups, the experts of a token from its best `topk_group` (V3: 4 of 8; 1: none).
    """
    fields = _base(c)
    layers = fields["num_layers"]
    if c.flag("attention_bias", False):
        raise ConfigError(f"{c.where('attention_bias')}=true biases the MLA projections, which madmax does not "
                          "model; allowed: false")
    if "q_lora_rank" not in c.cfg:
        raise ConfigError(f"{c.where('q_lora_rank')} is missing; it is required to import this model "
                          "(null when queries have no latent)")
    first = c.count("first_k_dense_replace", 0)
    freq = c.size_or("moe_layer_freq", 1)
    moe = _experts(c, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
    moe |= _layout(c, [i for i in range(first, layers) if i % freq == 0], layers,
                   "first_k_dense_replace", "moe_layer_freq")
    moe |= {"shared_experts": c.count("n_shared_experts"), "router_bias": c.model_type != "deepseek_v2"}
    groups = c.size_or("n_group", 1)
    if groups > 1:
        moe |= {"route_groups": groups, "route_group_topk": c.size_or("topk_group", groups)}
    mla = {"q_lora_rank": c.optional_size("q_lora_rank"), "kv_lora_rank": c.size("kv_lora_rank"),
           "qk_nope_head_dim": c.size("qk_nope_head_dim"), "qk_rope_head_dim": c.size("qk_rope_head_dim"),
           "v_head_dim": c.size("v_head_dim")}
    return fields | {"num_kv_heads": None, "ffn_hidden_size": c.size("intermediate_size"), "moe": moe, "mla": mla,
                     "mtp_layers": c.count("num_nextn_predict_layers", 0)}


def gpt_oss(c: HFConfig) -> dict[str, Any]:
    """GPT-OSS: grouped-query attention with biased Q, K, V, O (`attention_bias`, default true) and a
    learned sink logit per head; layers alternating sliding (`sliding_window` 128) and full attention,
    starting sliding (`layer_types`); every layer's FFN is `num_local_experts` experts of
    `intermediate_size` with biases and clamped GLU inputs (`swiglu_limit`), top `num_experts_per_tok`,
    behind a biased router; untied head. Absent `head_dim`, `sliding_window` and `swiglu_limit` take
    `GptOssConfig`'s 64, 128 and 7.0."""
    fields = _base(c)
    layers = fields["num_layers"]
    moe = mixtral_experts(c) | {"expert_bias": True, "router_bias": True,
                                "glu_limit": c.positive_number("swiglu_limit", 7.0)}
    return fields | {"head_dim": c.size_or("head_dim", 64), "ffn_hidden_size": c.size("intermediate_size"),
                     "has_bias": c.flag("attention_bias", True), "attention_sinks": True, "moe": moe,
                     } | c.windows(c.size_or("sliding_window", 128), 2, layers)


def llama4(c: HFConfig) -> dict[str, Any]:
    """Llama 4 (text model): grouped-query attention (`head_dim` 128 by default), experts of
    `intermediate_size` (top `num_experts_per_tok` of `num_local_experts`) plus one shared expert of the
    same width on the `moe_layers` (default every `interleave_moe_layer_step`-th layer, counted from 1),
    the other layers a dense MLP of `intermediate_size_mlp`; chunked attention on the RoPE layers
    (approximated by a sliding window, see the module docstring)."""
    fields = _base(c)
    layers = fields["num_layers"]
    step = c.size_or("interleave_moe_layer_step", 1)
    moe_layers = c.indices("moe_layers", layers)
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    moe = mixtral_experts(c) | {"shared_experts": 1}
    moe |= _layout(c, moe_layers, layers, "moe_layers", "interleave_moe_layer_step")
    return fields | {"head_dim": c.size_or("head_dim", 128), "ffn_hidden_size": c.size("intermediate_size_mlp"),
                     "qkv_bias": c.flag("attention_bias", False), "moe": moe} | _chunked_windows(c, layers)


def _base(c: HFConfig) -> dict[str, Any]:
    """The fields every MoE family here shares: pre-RMSNorm, RoPE, SwiGLU (`hidden_act`), sizes."""
    heads = c.size("num_attention_heads")
    fields = {
        "num_layers": c.size("num_hidden_layers"), "hidden_size": c.size("hidden_size"), "num_heads": heads,
        "num_kv_heads": c.optional_size("num_key_value_heads") or heads, "is_gated_ffn": True,
        "activation": c.activation("hidden_act", "silu"), "norm": "rmsnorm", "position": "rope",
        "has_dropout": c.dropout("attention_dropout"), "vocab_size": c.size("vocab_size"),
        "tied_embeddings": c.flag("tie_word_embeddings", False), "max_seq_len": c.size("max_position_embeddings"),
    }
    return fields | c.pretraining_length(fields["max_seq_len"])


def _experts(c: HFConfig, experts_key: str, top_k_key: str, width_key: str) -> dict[str, Any]:
    """Our moe fields of the routed experts, from the keys of their count, top-k and width."""
    experts, top_k = c.size(experts_key), c.size(top_k_key)
    if top_k > experts:
        raise ConfigError(f"{c.where(top_k_key)}={top_k} exceeds {c.prefix + experts_key}={experts}; allowed: "
                          f"1 to {experts}")
    return {"num_experts": experts, "top_k": top_k, "expert_ffn_hidden_size": c.size(width_key)}


def _layout(c: HFConfig, moe_layers: list[int], num_layers: int, *keys: str) -> dict[str, int]:
    """Our first_dense_layers and layer_freq making exactly `moe_layers` (sorted indices) the MoE layers;
    ConfigError naming the Hugging Face `keys` that chose them when no pair does."""
    if moe_layers:
        first = moe_layers[0]
        freq = moe_layers[1] - first if len(moe_layers) > 1 else first + 1
        if [i for i in range(first, num_layers) if (i + 1) % freq == 0] == moe_layers:
            return {"first_dense_layers": 0 if first + 1 == freq else first, "layer_freq": freq}
    shown = ", ".join(map(str, moe_layers[:8])) + (", ..." if len(moe_layers) > 8 else "") or "none"
    names = " and ".join(repr(c.prefix + key) for key in keys)
    raise ConfigError(f"Hugging Face config.json (model_type {c.model_type!r}) fields {names} make the MoE layers "
                      f"{shown} of {num_layers}, which madmax cannot represent; allowed: every k-th layer from the "
                      "first MoE layer on (our moe.first_dense_layers and moe.layer_freq)")


def _chunked_windows(c: HFConfig, num_layers: int) -> dict[str, Any]:
    """Llama 4's chunked attention as our sliding window: `attention_chunk_size` tokens (default 8192;
    null: no chunking) on the RoPE layers, global attention on the NoPE layers (`no_rope_layers` 0; when
    empty or absent, every `no_rope_layer_interval`-th layer, default 4)."""
    chunk = c.optional_size("attention_chunk_size") if "attention_chunk_size" in c.cfg else 8192
    interval = c.size_or("no_rope_layer_interval", 4)
    rope = c.cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(rope, list) or len(rope) < num_layers or any(r not in (0, 1) or isinstance(r, bool)
                                                                   for r in rope[:num_layers]):
        raise ConfigError(f"{c.where('no_rope_layers')}={rope!r} must give 1 (RoPE) or 0 (NoPE) for each of the "
                          f"{num_layers} layers")
    try:
        pattern = global_every([r == 0 for r in rope[:num_layers]])
    except ValueError:
        raise ConfigError(f"{c.where('no_rope_layers')} does not make every k-th layer a NoPE (global) layer, "
                          "which our sliding_window_pattern needs; allowed: a repeating pattern of k-1 ones then "
                          "one zero") from None
    if chunk is None or pattern == 1:
        return {}
    return {"sliding_window": chunk, "sliding_window_pattern": pattern}
