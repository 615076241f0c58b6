"""Hugging Face import of mixture-of-experts configs (madmax.config.hf_moe): real configs (tests/data/hf,
sources in its README) give the published total and active parameters; missing or inconsistent expert
keys fail with one sentence naming the Hugging Face key.

Per-layer counts below: h hidden, E experts, f expert width; a SwiGLU expert has 3*h*f weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from madmax.config.loaders import load_model
from madmax.errors import ConfigError
from madmax.workload.transformer import active_params, param_counts

HF = Path(__file__).parent.parent / "data" / "hf"


def hf_config(name: str) -> dict[str, Any]:
    return json.loads((HF / name / "config.json").read_text())


def counts(spec: Any) -> tuple[int, int, dict[str, int]]:
    """Total and active parameters and the components of a model."""
    model = load_model(spec)
    by_component = param_counts(model)
    return sum(by_component.values()), active_params(model, by_component), by_component


def test_mixtral_8x7b() -> None:
    # Untied 2*32000*4096 = 262,144,000; layer: q and o 2*4096^2 = 33,554,432, k and v 2*4096*1024 = 8,388,608,
    # router 4096*8 = 32,768, experts 8 * 3*4096*14336 = 8 * 176,160,768 = 1,409,286,144, norms 8,192 ->
    # 1,451,270,144 * 32 = 46,440,644,608; final norm 4,096 -> 46,702,792,704 (Mistral AI: 46.7B).
    # Active: 2 experts 352,321,536 instead of 8: (1,451,270,144 - 1,056,964,608) * 32 + 262,148,096 =
    # 12,879,925,248 (Mistral AI: 12.9B per token).
    total, active, _ = counts(HF / "mixtral-8x7b-v0.1" / "config.json")
    assert (total, active) == (46_702_792_704, 12_879_925_248)
    model = load_model(HF / "mixtral-8x7b-v0.1" / "config.json")
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.top_k, model.moe.expert_ffn_hidden_size) == (8, 2, 14336)
    assert (model.moe.shared_experts, model.num_moe_layers, model.sliding_window) == (0, 32, None)


def test_qwen1_5_moe_has_a_gated_shared_expert() -> None:
    # Untied 2*151936*2048 = 622,329,856; layer: q, k, v with biases 3*(2048^2 + 2048) = 12,589,056, o 2048^2 =
    # 4,194,304, router 2048*60 = 122,880, experts 60 * 3*2048*1408 = 60 * 8,650,752 = 519,045,120, shared
    # expert 3*2048*5632 = 34,603,008 and its sigmoid gate 2048, norms 4,096 -> 570,560,512 * 24 =
    # 13,693,452,288; final norm 2,048 -> 14,315,784,192 (Qwen: 14.3B).
    # Active: 4 experts 34,603,008: (570,560,512 - 484,442,112) * 24 + 622,331,904 = 2,689,173,504 (2.7B).
    total, active, _ = counts(HF / "qwen1.5-moe-a2.7b" / "config.json")
    assert (total, active) == (14_315_784_192, 2_689_173_504)
    model = load_model(HF / "qwen1.5-moe-a2.7b" / "config.json")
    assert model.moe is not None
    assert (model.moe.shared_experts, model.moe.shared_width, model.moe.shared_expert_gate) == (1, 5632, True)
    assert (model.qkv_bias, model.qk_norm, model.ffn_hidden_size) == (True, False, 5632)


def test_qwen3_30b_a3b() -> None:
    # Untied 2*151936*2048 = 622,329,856; layer: q 2048*4096 and o 4096*2048 = 16,777,216, k and v 2*2048*512 =
    # 2,097,152, QK-norm 2*128 = 256, router 2048*128 = 262,144, experts 128 * 3*2048*768 = 128 * 4,718,592 =
    # 603,979,776, norms 4,096 -> 623,120,640 * 48 = 29,909,790,720; final norm 2,048 -> 30,532,122,624
    # (model card: 30.5B). Active: 8 experts 37,748,736: (623,120,640 - 566,231,040) * 48 + 622,331,904 =
    # 3,353,032,704 (model card: 3.3B, the count cut to one decimal).
    total, active, _ = counts(HF / "qwen3-30b-a3b" / "config.json")
    assert (total, active) == (30_532_122_624, 3_353_032_704)
    model = load_model(HF / "qwen3-30b-a3b" / "config.json")
    assert (model.head_width, model.qk_norm, model.qkv_bias, model.num_moe_layers) == (128, True, False, 48)


def test_deepseek_v3_main_model_mtp_and_active() -> None:
    # Untied 2*129280*7168 = 1,853,358,080. MLA per layer: q_down 7168*1536 = 11,010,048, its norm 1,536,
    # q_up 1536*128*(128 + 64) = 37,748,736, kv_down 7168*(512 + 64) = 4,128,768, its norm 512, kv_up
    # 512*128*(128 + 128) = 16,777,216, o 128*128*7168 = 117,440,512 -> 187,107,328; 2 norms 14,336.
    # Dense layers (3): MLP 3*7168*18432 = 396,361,728 -> 583,483,392 each, 1,750,450,176.
    # MoE layers (58): router 7168*256 + the 256 e_score_correction_bias = 1,835,264, experts 256 *
    # 3*7168*2048 = 256 * 44,040,192 = 11,274,289,152, shared expert 44,040,192 -> 11,507,286,272 each,
    # 667,422,603,776. Final norm 7,168. Main model: 671,026,419,200 (DeepSeek: 671B).
    # MTP module: eh_proj 2*7168*7168 = 102,760,448, enorm and hnorm 14,336, one MoE layer 11,507,286,272,
    # its head norm 7,168 -> 11,610,068,224.
    # Active: 8 routed experts 352,321,536 instead of 256: (11,507,286,272 - 10,921,967,616) * 58 +
    # 1,750,450,176 + 1,853,358,080 + 7,168 = 37,552,297,472 (DeepSeek: 37B, the count cut to billions).
    total, active, by_component = counts(HF / "deepseek-v3" / "config.json")
    assert (total - by_component["mtp"], by_component["mtp"], active) == (
        671_026_419_200, 11_610_068_224, 37_552_297_472)
    model = load_model(HF / "deepseek-v3" / "config.json")
    assert model.mla is not None and model.moe is not None
    assert (model.mla.q_lora_rank, model.mla.kv_lora_rank, model.mla.qk_head_dim, model.mla.v_head_dim) == (
        1536, 512, 192, 128)
    assert (model.moe.first_dense_layers, model.moe.router_bias, model.mtp_layers) == (3, True, 1)
    assert model.default_seq_len == 4096  # rope_scaling original_max_position_embeddings


def test_kimi_k2_is_deepseek_v3_shaped() -> None:
    # Untied 2*163840*7168 = 2,348,810,240. MLA with 64 heads: 11,010,048 + 1,536 + 1536*64*192 = 18,874,368 +
    # 4,128,768 + 512 + 512*64*256 = 8,388,608 + 64*128*7168 = 58,720,256 -> 101,124,096; norms 14,336.
    # Dense layer (1): 101,124,096 + 14,336 + 396,361,728 = 497,500,160. MoE layers (60): router 7168*384 + 384
    # = 2,752,896, experts 384 * 44,040,192 = 16,911,433,728, shared 44,040,192 -> 17,059,365,248 each,
    # 1,023,561,914,880. Final norm 7,168 -> 1,026,408,232,448 (Moonshot: 1T).
    # Active: (17,059,365,248 - 16,559,112,192) * 60 + 497,500,160 + 2,348,817,408 = 32,861,500,928 (32B, cut).
    total, active, by_component = counts(HF / "kimi-k2-instruct" / "config.json")
    assert (total, active, "mtp" in by_component) == (1_026_408_232_448, 32_861_500_928, False)
    model = load_model(HF / "kimi-k2-instruct" / "config.json")
    assert model.moe is not None and model.moe.first_dense_layers == 1


def test_gpt_oss_20b() -> None:
    # Untied 2*201088*2880 = 1,158,266,880. Layer: q 2880*4096 + 4096 = 11,800,576, k and v 2*(2880*512 + 512) =
    # 2,950,144, o 4096*2880 + 2880 = 11,799,360, sinks 64, router 2880*32 + 32 = 92,192, experts 32 *
    # (2*(2880*2880 + 2880) + 2880*2880 + 2880) = 32 * 24,891,840 = 796,538,880, norms 5,760 -> 823,186,976 *
    # 24 = 19,756,487,424; final norm 2,880 -> 20,914,757,184 (OpenAI: 20.91B).
    # Active without the input embedding (OpenAI's convention): (823,186,976 - 796,538,880 + 4 * 24,891,840)
    # * 24 + LM head 579,133,440 + 2,880 = 3,608,307,264 (OpenAI: 3.61B).
    total, active, by_component = counts(HF / "gpt-oss-20b" / "config.json")
    assert (total, active - by_component["embedding"]) == (20_914_757_184, 3_608_307_264)
    model = load_model(HF / "gpt-oss-20b" / "config.json")
    assert model.moe is not None
    assert (model.has_bias, model.attention_sinks, model.moe.expert_bias, model.moe.router_bias) == (
        True, True, True, True)
    assert model.moe.glu_limit == 7.0  # config swiglu_limit; GptOssConfig's default when absent
    cfg = hf_config("gpt-oss-20b")
    del cfg["swiglu_limit"]
    assert load_model(cfg).moe.glu_limit == 7.0
    # layer_types alternate sliding, full: layer 0 local, layer 1 global (our pattern 2).
    assert (model.sliding_window, model.sliding_window_pattern) == (128, 2)
    assert [model.layer_window(i) for i in range(3)] == [128, None, 128]
    assert (model.head_width, model.default_seq_len) == (64, 4096)


def test_llama_4_scout_text_model() -> None:
    # text_config. Untied 2*202048*5120 = 2,068,971,520. Layer: q and o 2*5120^2 = 52,428,800, k and v
    # 2*5120*1024 = 10,485,760, router 5120*16 = 81,920, experts 16 * 3*5120*8192 = 16 * 125,829,120 =
    # 2,013,265,920, shared expert 125,829,120, norms 10,240 -> 2,202,101,760 * 48 = 105,700,884,480; final norm
    # 5,120 -> 107,769,861,120. Meta's 109B includes the vision encoder and projector of vision_config, not
    # modelled: 34 layers of (4*(1408^2 + 1408) + 2*1408*5632 + 5632 + 1408 + 4*1408) = 23,807,872, class and
    # position embeddings 1,408 + 577*1408, patch embedding 3*14*14*1408 = 827,904, 2 LayerNorms 5,632, adapter
    # 5632*4096 + 4096*4096 = 39,845,888, projector 4096*5120 = 20,971,520 -> 871,932,416; 108,641,793,536 in
    # all (109B). Active: 1 expert of 16: (2,202,101,760 - 1,887,436,800) * 48 + 2,068,976,640 =
    # 17,172,894,720 (17B).
    path = HF / "llama-4-scout-17b-16e-instruct" / "config.json"
    total, active, _ = counts(path)
    vision = 34 * 23_807_872 + 1408 + 577 * 1408 + 827_904 + 5632 + 39_845_888 + 20_971_520
    assert (total, vision, active) == (107_769_861_120, 871_932_416, 17_172_894_720)
    assert round((total + vision) / 1e9) == 109
    model = load_model(path)
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.top_k, model.moe.shared_experts, model.num_moe_layers) == (16, 1, 1, 48)
    # no_rope_layers [] -> every 4th layer NoPE (global), the others chunked (our sliding window of 8192).
    assert (model.sliding_window, model.sliding_window_pattern, model.qk_norm) == (8192, 4, False)
    assert "text_config" in model.source and "vision encoder" in model.source
    assert model.default_seq_len == 8192


def test_llama_4_interleaved_moe_layers() -> None:
    # Maverick's layout: interleave_moe_layer_step 2 makes layers 1, 3, ..., 47 MoE (transformers' moe_layers
    # range(1, 48, 2)), ours layer_freq 2; the others a dense MLP of intermediate_size_mlp 16384.
    text = hf_config("llama-4-scout-17b-16e-instruct")["text_config"] | {"interleave_moe_layer_step": 2}
    model = load_model(text)
    assert model.moe is not None
    assert (model.moe.layer_freq, model.moe.first_dense_layers, model.num_moe_layers) == (2, 0, 24)
    assert (model.is_moe_layer(0), model.is_moe_layer(1), model.ffn_hidden_size) == (False, True, 16384)
    # An explicit moe_layers list overrides the step; no_rope_layers lists RoPE (1) and NoPE (0) layers.
    listed = load_model(text | {"moe_layers": list(range(1, 48, 2)), "no_rope_layers": [1, 0] * 24})
    assert listed.moe == model.moe and listed.sliding_window_pattern == 2
    assert load_model(text | {"attention_chunk_size": None}).sliding_window is None


def test_qwen_dense_leading_layers_and_sparse_step() -> None:
    base = hf_config("qwen3-30b-a3b")
    # mlp_only_layers [0, 1]: the first two layers dense, as our first_dense_layers 2.
    lead = load_model(base | {"mlp_only_layers": [0, 1]})
    assert lead.moe is not None and (lead.moe.first_dense_layers, lead.num_moe_layers) == (2, 46)
    # decoder_sparse_step 2: layers 1, 3, ... MoE ((i + 1) % 2 == 0), as our layer_freq 2.
    sparse = load_model(base | {"decoder_sparse_step": 2})
    assert sparse.moe is not None and (sparse.moe.layer_freq, sparse.num_moe_layers) == (2, 24)


def test_deepseek_v2_lite_without_a_query_latent() -> None:
    # q_lora_rank null: queries projected directly (h x a*(d_n + d_r)); V2 routes without a bias.
    cfg = hf_config("deepseek-v3") | {"model_type": "deepseek_v2", "q_lora_rank": None}
    model = load_model(cfg)
    assert model.mla is not None and model.moe is not None
    assert (model.mla.q_lora_rank, model.moe.router_bias) == (None, False)


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "key"), [
    ("mixtral-8x7b-v0.1", "num_local_experts"), ("mixtral-8x7b-v0.1", "num_experts_per_tok"),
    ("qwen3-30b-a3b", "num_experts"), ("qwen3-30b-a3b", "moe_intermediate_size"),
    ("qwen1.5-moe-a2.7b", "shared_expert_intermediate_size"), ("deepseek-v3", "n_routed_experts"),
    ("deepseek-v3", "kv_lora_rank"), ("deepseek-v3", "n_shared_experts"), ("deepseek-v3", "q_lora_rank"),
    ("kimi-k2-instruct", "moe_intermediate_size"), ("gpt-oss-20b", "num_local_experts"),
])
def test_missing_expert_key_is_named(name: str, key: str) -> None:
    cfg = hf_config(name)
    del cfg[key]
    with pytest.raises(ConfigError) as info:
        load_model(cfg)
    assert str(info.value).startswith(f"Hugging Face config.json (model_type {cfg['model_type']!r}) field {key!r} "
                                      "is missing; it is required to import this model")


def test_missing_key_of_a_text_config_names_its_path() -> None:
    cfg = hf_config("llama-4-scout-17b-16e-instruct")
    del cfg["text_config"]["num_local_experts"]
    with pytest.raises(ConfigError, match=r"field 'text_config.num_local_experts' is missing"):
        load_model(cfg)


@pytest.mark.parametrize(("name", "experts_key"), [
    ("mixtral-8x7b-v0.1", "num_local_experts"), ("qwen3-30b-a3b", "num_experts"), ("deepseek-v3", "n_routed_experts"),
])
def test_more_experts_per_token_than_experts_is_refused(name: str, experts_key: str) -> None:
    cfg = hf_config(name)
    experts = cfg[experts_key]
    with pytest.raises(ConfigError) as info:
        load_model(cfg | {"num_experts_per_tok": experts + 1})
    assert str(info.value) == (f"Hugging Face config.json (model_type {cfg['model_type']!r}) field "
                               f"'num_experts_per_tok'={experts + 1} exceeds {experts_key}={experts}; allowed: "
                               f"1 to {experts}")


def test_moe_layers_we_cannot_represent_are_refused() -> None:
    # Dense layers 0 and 5 leave MoE layers 1-4 and 6-47: no first_dense_layers and layer_freq give that.
    with pytest.raises(ConfigError) as info:
        load_model(hf_config("qwen3-30b-a3b") | {"mlp_only_layers": [0, 5]})
    assert str(info.value) == (
        "Hugging Face config.json (model_type 'qwen3_moe') fields 'decoder_sparse_step' and 'mlp_only_layers' make "
        "the MoE layers 1, 2, 3, 4, 6, 7, 8, 9, ... of 48, which madmax cannot represent; allowed: every k-th "
        "layer from the first MoE layer on (our moe.first_dense_layers and moe.layer_freq)")
    with pytest.raises(ConfigError, match=r"make the MoE layers none of 48"):
        load_model(hf_config("qwen3-30b-a3b") | {"mlp_only_layers": list(range(48))})
    with pytest.raises(ConfigError, match=r"field 'mlp_only_layers'=\[48\] must be a list of layer indices"):
        load_model(hf_config("qwen3-30b-a3b") | {"mlp_only_layers": [48]})


@pytest.mark.parametrize(("name", "fields", "message"), [
    ("deepseek-v3", {"attention_bias": True}, "field 'attention_bias'=true biases the MLA projections"),
    ("deepseek-v3", {"n_shared_experts": -1}, "field 'n_shared_experts'=-1 must be a non-negative integer"),
    ("deepseek-v3", {"moe_layer_freq": 2}, "fields 'first_k_dense_replace' and 'moe_layer_freq' make the MoE "
     "layers 4, 6, 8"),
    ("gpt-oss-20b", {"layer_types": ["full_attention", "sliding_attention"] * 12},
     "field 'layer_types' does not make every k-th layer full attention"),
    ("gpt-oss-20b", {"swiglu_limit": -7}, "field 'swiglu_limit'=-7 must be a positive number"),
    ("gpt-oss-20b", {"swiglu_limit": "7"}, "field 'swiglu_limit'='7' must be a positive number"),
])
def test_inconsistent_configs_are_one_sentence(name: str, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_model(hf_config(name) | fields)


def test_bad_no_rope_layers_are_named() -> None:
    text = hf_config("llama-4-scout-17b-16e-instruct")["text_config"]
    with pytest.raises(ConfigError, match=r"field 'no_rope_layers'=\[1, 2\] must give 1 \(RoPE\) or 0 \(NoPE\)"):
        load_model(text | {"no_rope_layers": [1, 2]})
    with pytest.raises(ConfigError, match=r"field 'no_rope_layers' does not make every k-th layer a NoPE"):
        load_model(text | {"no_rope_layers": [0] + [1] * 47})


# Keys an MoE config may carry, with values a user could get wrong (missing, zero, negative, wrong type).
_FUZZ_VALUES = (None, 0, -1, 1, 2, 3, 8, 64, 3.5, "8", True, [])
_FUZZ_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
              "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "n_group",
              "topk_group", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "num_nextn_predict_layers",
              "intermediate_size", "shared_expert_intermediate_size", "interleave_moe_layer_step")


@pytest.mark.parametrize("name", ["mixtral-8x7b-v0.1", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b",
                                  "qwen1.5-moe-a2.7b"])
def test_any_mangled_moe_config_imports_or_fails_in_one_sentence(name: str, mangled_configs_import_or_fail) -> None:
    mangled_configs_import_or_fail(hf_config(name), _FUZZ_KEYS, _FUZZ_VALUES, examples=60)
