"""Hugging Face config.json import: real configs (tests/data/hf, sources in its README) give the published
parameter totals; unsupported or incomplete configs fail with one sentence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from madmax.config.hf import SUPPORTED, from_hf_config
from madmax.config.loaders import load_model
from madmax.config.model import Activation, Norm, Position
from madmax.errors import ConfigError
from madmax.workload import param_counts

HF = Path(__file__).parent.parent / "data" / "hf"


def hf_config(name: str) -> dict[str, Any]:
    return json.loads((HF / name / "config.json").read_text())


def total(spec: Any) -> int:
    return sum(param_counts(load_model(spec)).values())


# Totals derived by hand from each config (h hidden, L layers, V vocabulary, f FFN width, per layer):
EXACT = {
    # GPT-2: wte 50257*768 = 38,597,376; wpe 1024*768 = 786,432; layer: 2 LN 3,072, c_attn 768*2304+2304 =
    # 1,771,776, attn c_proj 768*768+768 = 590,592, c_fc 768*3072+3072 = 2,362,368, mlp c_proj 3072*768+768 =
    # 2,360,064 -> 7,087,872 * 12 = 85,054,464; ln_f 1,536; LM head tied.
    "gpt2": (124_439_808, "124.44 M"),
    # Pythia-160M: untied, embed_in + embed_out 2*50304*768 = 77,266,944; layers as GPT-2 (same h, f,
    # biases; rotary has no weights) 85,054,464; final LN 1,536.
    "pythia-160m": (162_322_944, "162.32 M"),
    # GPT-NeoX-20B: 2*50432*6144 = 619,708,416; layer: 2 LN 24,576, qkv 6144*18432+18432 = 113,264,640,
    # dense 6144^2+6144 = 37,754,880, h->4h 6144*24576+24576 = 151,019,520, 4h->h 24576*6144+6144 =
    # 151,001,088 -> 453,064,704 * 44 = 19,934,846,976; final LN 12,288.
    "gpt-neox-20b": (20_554_567_680, "20.55 B"),
    # Qwen2-7B: 2*152064*3584 = 1,089,994,752; layer: q 3584^2+3584 = 12,848,640, k and v
    # 2*(3584*512+512) = 3,671,040 (4 KV heads of 128), o 3584^2 = 12,845,056 (no bias),
    # SwiGLU 3*3584*18944 = 203,685,888, 2 RMSNorm 7,168 -> 233,057,792 * 28 = 6,525,618,176; norm 3,584.
    "qwen2-7b": (7_615_616_512, "7.62 B"),
    # Mistral-7B: 2*32000*4096 = 262,144,000; layer: q and o 2*4096^2 = 33,554,432, k and v
    # 2*4096*1024 = 8,388,608, SwiGLU 3*4096*14336 = 176,160,768, norms 8,192 -> 218,112,000 * 32 =
    # 6,979,584,000; norm 4,096.
    "mistral-7b-v0.1": (7_241_732_096, "7.24 B"),
    # Llama-3.1-8B: Mistral-7B's layers with V = 128256:
    # 2*128256*4096 = 1,050,673,152 + 6,979,584,000 + 4,096.
    "llama-3.1-8b": (8_030_261_248, "8.03 B"),
    # Llama-3.2-1B: tied 128256*2048 = 262,668,288; layer: q and o 2*2048^2 = 8,388,608, k and v
    # 2*2048*512 = 2,097,152, SwiGLU 3*2048*8192 = 50,331,648, norms 4,096 -> 60,821,504 * 16 =
    # 973,144,064; norm 2,048.
    "llama-3.2-1b": (1_235_814_400, "1.24 B"),
    # Mistral-NeMo-12B: head_dim 128 given (not 5120/32 = 160): 2*131072*5120 = 1,342,177,280; layer:
    # q 5120*4096 and o 4096*5120 = 41,943,040, k and v 2*5120*1024 = 10,485,760, SwiGLU 3*5120*14336 =
    # 220,200,960, norms 10,240 -> 272,640,000 * 40 = 10,905,600,000; norm 5,120.
    "mistral-nemo-base-2407": (12_247_782_400, "12.25 B"),
    # Qwen3-32B: head_dim 128 given (64 heads x 128 = 8192 != 5120); untied 2*151936*5120 = 1,555,824,640;
    # layer: q 5120*8192 and o 8192*5120 = 83,886,080, k and v 2*5120*1024 = 10,485,760, QK-norm 2*128 = 256,
    # SwiGLU 3*5120*25600 = 393,216,000, norms 2*5120 = 10,240 -> 487,598,336 * 64 = 31,206,293,504; norm 5,120.
    # Published: keras-hub qwen3_32b_en 32,762,123,264.
    "qwen3-32b": (32_762_123_264, "32.76 B"),
    # Qwen3-8B: 2*151936*4096 = 1,244,659,712; layer: q and o 2*4096^2 = 33,554,432, k and v 2*4096*1024 =
    # 8,388,608, QK-norm 256, SwiGLU 3*4096*12288 = 150,994,944, norms 8,192 -> 192,946,432 * 36 =
    # 6,946,071,552; norm 4,096. keras-hub qwen3_8b_en 8,190,735,360.
    "qwen3-8b": (8_190_735_360, "8.19 B"),
    # Qwen3-4B, tied: 151936*2560 = 388,956,160; layer: q 2560*4096 and o 4096*2560 = 20,971,520, k and v
    # 2*2560*1024 = 5,242,880, QK-norm 256, SwiGLU 3*2560*9728 = 74,711,040, norms 5,120 -> 100,930,816 * 36 =
    # 3,633,509,376; norm 2,560. keras-hub qwen3_4b_en 4,022,468,096.
    "qwen3-4b": (4_022_468_096, "4.02 B"),
    # Gemma-2-9B, tied: 256000*3584 = 917,504,000; layer: q 3584*4096 = 14,680,064, k and v 2*3584*2048 =
    # 14,680,064, o 4096*3584 = 14,680,064, GeGLU 3*3584*14336 = 154,140,672, 4 RMSNorms 4*3584 = 14,336 ->
    # 198,195,200 * 42 = 8,324,198,400; norm 3,584. keras-hub gemma2_instruct_9b_en 9,241,705,984.
    "gemma-2-9b-it": (9_241_705_984, "9.24 B"),
    # Phi-3-mini-4k: untied 2*32064*3072 = 197,001,216; layer: qkv_proj 3072*9216 = 28,311,552, o 3072^2 =
    # 9,437,184, gate_up 3072*16384 + down 8192*3072 = 75,497,472, norms 6,144 -> 113,252,352 * 32 =
    # 3,624,075,264; norm 3,072. keras-hub phi3_mini_4k_instruct_en 3,821,079,552.
    "phi-3-mini-4k-instruct": (3_821_079_552, "3.82 B"),
    # Phi-3-medium-4k: 2*32064*5120 = 328,335,360; layer: qkv_proj 5120*(5120 + 2*1280) = 39,321,600 (10 KV
    # heads of 128), o 5120^2 = 26,214,400, SwiGLU 3*5120*17920 = 275,251,200, norms 10,240 -> 340,797,440 * 40 =
    # 13,631,897,600; norm 5,120. The Hub's safetensors count 13,960,238,080 ("14B").
    "phi-3-medium-4k-instruct": (13_960_238_080, "13.96 B"),
}


def rounded(count: int, published: str) -> bool:
    """Whether `count` rounds to the published figure, e.g. '8.03 B' or '124.44 M'."""
    value, unit = published.split()
    scale = {"M": 1e6, "B": 1e9}[unit]
    decimals = len(value.split(".")[1])
    return round(count / scale, decimals) == float(value)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_published_parameter_totals(name: str) -> None:
    expected, published = EXACT[name]
    assert rounded(expected, published)
    assert total(HF / name / "config.json") == expected


def test_opt_125m_is_short_only_the_two_offset_position_rows() -> None:
    # Published 125,239,296: embed 50272*768 = 38,608,896; positions (2048 + 2)*768 = 1,574,400 (OPT's
    # learned positions have an offset of 2 rows); 12 layers as GPT-2's 85,054,464; final LN 1,536; tied.
    # Our schema has no position-offset field, so we count 2048 rows: 2*768 = 1,536 short (0.0012 %).
    published = 125_239_296
    got = total(HF / "opt-125m" / "config.json")
    assert got == published - 2 * 768
    assert abs(got - published) / published < 0.005
    assert rounded(got, "125.2 M")


def test_each_family_maps_its_architecture() -> None:
    gpt2 = load_model(HF / "gpt2" / "config.json")
    assert gpt2.name == "GPT2LMHeadModel"  # no _name_or_path: the architecture (the folder is the last resort)
    assert (gpt2.position, gpt2.tied_embeddings, gpt2.has_bias, gpt2.norm) == (
        Position.LEARNED, True, True, Norm.LAYERNORM)
    assert (gpt2.ffn_hidden_size, gpt2.activation, gpt2.max_seq_len, gpt2.has_dropout) == (
        3072, Activation.GELU, 1024, True)  # n_inner null -> 4*768; dropout 0.1

    opt = load_model(HF / "opt-125m" / "config.json")
    assert (opt.position, opt.tied_embeddings, opt.activation, opt.max_seq_len) == (
        Position.LEARNED, True, Activation.RELU, 2048)

    neox = load_model(HF / "gpt-neox-20b" / "config.json")
    assert (neox.position, neox.tied_embeddings, neox.has_bias, neox.activation) == (
        Position.ROPE, False, True, Activation.GELU)  # gelu_fast is a GELU

    qwen = load_model(HF / "qwen2-7b" / "config.json")
    assert (qwen.qkv_bias, qwen.has_bias, qwen.kv_heads, qwen.head_width) == (True, False, 4, 128)
    assert (qwen.is_gated_ffn, qwen.norm, qwen.activation) == (True, Norm.RMSNORM, Activation.SILU)

    llama = load_model(HF / "llama-3.1-8b" / "config.json")
    assert (llama.qkv_bias, llama.has_bias, llama.tied_embeddings, llama.kv_heads) == (False, False, False, 8)
    # Llama 3.1 pre-trained at 8K (rope_scaling.original_max_position_embeddings), extended to 128K.
    assert (llama.max_seq_len, llama.default_seq_len) == (131072, 8192)

    nemo = load_model(HF / "mistral-nemo-base-2407" / "config.json")
    assert (nemo.head_width, nemo.hidden_size // nemo.num_heads) == (128, 160)
    assert load_model(HF / "mistral-7b-v0.1" / "config.json").head_dim is None


def test_a_mapping_loads_like_a_file() -> None:
    model = load_model(hf_config("llama-3.1-8b"))
    assert model.name == "LlamaForCausalLM"
    assert sum(param_counts(model).values()) == EXACT["llama-3.1-8b"][0]


def test_llama_biases() -> None:
    base = hf_config("llama-3.2-1b")
    # attention_bias and mlp_bias: per layer q, k, v, o biases 2048+512+512+2048 = 5,120 and
    # gate, up, down 8192+8192+2048 = 18,432: 23,552 * 16 = 376,832 more.
    both = load_model(base | {"attention_bias": True, "mlp_bias": True})
    assert sum(param_counts(both).values()) == EXACT["llama-3.2-1b"][0] + 376_832
    # attention_bias alone: q, k, v biased (3,072 per layer); the o bias (2,048) has no schema field.
    attn = load_model(base | {"attention_bias": True})
    assert attn.qkv_bias and not attn.has_bias
    assert sum(param_counts(attn).values()) == EXACT["llama-3.2-1b"][0] + 16 * 3072


def test_gemma3_multimodal_imports_its_text_model() -> None:
    # gemma-3-4b-it's sparse text_config names hidden_size 2560, intermediate_size 10240, 34 layers and
    # sliding_window 1024; Gemma3TextConfig defaults give 8 heads, 4 KV heads, head_dim 256, vocabulary
    # 262,208, context 131,072, every 6th layer global, tied embeddings.
    # Tied 262208*2560 = 671,252,480; layer: q 2560*2048 = 5,242,880, k and v 2*2560*1024 = 5,242,880,
    # o 2048*2560 = 5,242,880, QK-norm 2*256 = 512, GeGLU 3*2560*10240 = 78,643,200, 4 norms 10,240 ->
    # 94,382,592 * 34 = 3,209,008,128; norm 2,560 -> 3,880,263,168. Published: the Hub's 4,300,079,472 for
    # the whole checkpoint minus the vision tower and projector, 419,816,304 (keras-hub gemma3_4b
    # 4,299,915,632 minus gemma3_4b_text 3,880,099,328; the same 262,144-row text model).
    model = load_model(HF / "gemma-3-4b-it" / "config.json")
    assert sum(param_counts(model).values()) == 3_880_263_168 == 4_300_079_472 - (4_299_915_632 - 3_880_099_328)
    assert (model.num_heads, model.kv_heads, model.head_width, model.vocab_size) == (8, 4, 256, 262208)
    assert (model.sliding_window, model.sliding_window_pattern, model.qk_norm, model.post_norms) == (
        1024, 6, True, True)
    assert model.tied_embeddings and "text_config" in model.source and "vision tower" in model.source
    # The text config alone (model_type gemma3_text, as text-only Gemma 3 checkpoints have) is the same model.
    text = hf_config("gemma-3-4b-it")["text_config"]
    assert sum(param_counts(load_model(text)).values()) == 3_880_263_168


def test_gemma_windows_follow_the_layer_pattern() -> None:
    gemma2 = load_model(HF / "gemma-2-9b-it" / "config.json")
    # Gemma2DecoderLayer: layer 0 local, layer 1 global, ...: every 2nd layer (1-indexed) global.
    assert (gemma2.sliding_window, gemma2.sliding_window_pattern, gemma2.qk_norm) == (4096, 2, False)
    assert [gemma2.layer_window(i) for i in range(4)] == [4096, None, 4096, None]
    # newer configs list layer_types; 5 sliding then 1 full is pattern 6
    text = hf_config("gemma-3-4b-it")["text_config"]
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 5 + ["sliding_attention"] * 4
    assert load_model(text | {"layer_types": types}).sliding_window_pattern == 6
    assert load_model(text | {"layer_types": ["full_attention"] * 34}).sliding_window is None
    with pytest.raises(ConfigError, match=r"field 'layer_types' does not make every k-th layer full"):
        load_model(text | {"layer_types": ["full_attention"] + ["sliding_attention"] * 33})


def test_gpt_j_counts_the_checkpoint() -> None:
    # Untied wte and lm_head 2*50400*4096 = 412,876,800, LM-head bias 50,400; layer: one LayerNorm 2*4096 =
    # 8,192, q, k, v, out 4*4096^2 = 67,108,864 (no biases), fc_in 4096*16384 + 16384 = 67,125,248, fc_out
    # 16384*4096 + 4096 = 67,112,960 -> 201,355,264 * 28 = 5,637,947,392; ln_f 8,192 -> 6,050,882,784, the
    # PyTorch count of EleutherAI/gpt-j-6B. The model card's 6,053,381,344 counts the mesh-transformer-jax
    # parameters on 8 model-parallel shards: 7 more copies of each replicated LayerNorm and fc_out bias,
    # 7*(8,192 + 4,096)*28 = 2,408,448, of ln_f 7*8,192 = 57,344, and 8 embedding-shard biases of 4,096 =
    # 32,768 that the converted checkpoint drops: 2,498,560 in all.
    model = load_model(HF / "gpt-j-6b" / "config.json")
    assert sum(param_counts(model).values()) == 6_050_882_784 == 6_053_381_344 - 2_498_560
    assert (model.parallel_attention, model.shared_input_norm, model.ffn_bias, model.has_bias) == (
        True, True, True, False)
    assert (model.lm_head_bias, model.tied_embeddings, model.ffn_hidden_size) == (True, False, 16384)


def test_falcon_totals_count_the_tied_head_once() -> None:
    # Falcon-7B (multi_query: 1 KV head of 64; one LayerNorm): tied 65024*4544 = 295,469,056; layer: qkv
    # 4544*(71 + 2)*64 = 21,229,568, dense 4544^2 = 20,647,936, MLP 2*4544*18176 = 165,183,488, LN 9,088 ->
    # 207,070,080 * 32 = 6,626,242,560; ln_f 9,088 -> 6,921,720,704. The Hub's safetensors total 7,217,189,760
    # stores lm_head.weight beside the tied embedding: + 65024*4544.
    seven = load_model(HF / "falcon-7b-instruct" / "config.json")
    assert sum(param_counts(seven).values()) == 6_921_720_704 == 7_217_189_760 - 65024 * 4544
    assert (seven.kv_heads, seven.parallel_attention, seven.shared_input_norm) == (1, True, True)
    # Falcon-40B (new_decoder_architecture: 8 KV groups, ln_attn and ln_mlp): 65024*8192 = 532,676,608; layer:
    # qkv 8192*(128 + 16)*64 = 75,497,472, dense 8192^2 = 67,108,864, MLP 2*8192*32768 = 536,870,912, 2 LNs
    # 32,768 -> 679,510,016 * 60 = 40,770,600,960; ln_f 16,384 -> 41,303,293,952 = 41,835,970,560 (Hub
    # safetensors) - 65024*8192.
    forty = load_model(HF / "falcon-40b-instruct" / "config.json")
    assert sum(param_counts(forty).values()) == 41_303_293_952 == 41_835_970_560 - 65024 * 8192
    assert (forty.kv_heads, forty.parallel_attention, forty.shared_input_norm) == (8, True, False)
    # The custom-code configs name the sizes n_layer, n_head, n_head_kv ('RefinedWeb' is the new architecture).
    legacy = {k: v for k, v in hf_config("falcon-40b-instruct").items()
              if k not in ("num_hidden_layers", "num_attention_heads", "num_kv_heads", "new_decoder_architecture")}
    legacy |= {"model_type": "RefinedWeb", "n_layer": 60, "n_head": 128, "n_head_kv": 8}
    assert sum(param_counts(load_model(legacy)).values()) == 41_303_293_952


def test_gpt_neox_parallel_residual_keeps_its_total() -> None:
    neox = load_model(HF / "gpt-neox-20b" / "config.json")
    assert (neox.parallel_attention, neox.shared_input_norm) == (True, False)  # two LayerNorms read x
    sequential = load_model(hf_config("gpt-neox-20b") | {"use_parallel_residual": False})
    assert not sequential.parallel_attention
    assert total(hf_config("gpt-neox-20b") | {"use_parallel_residual": False}) == EXACT["gpt-neox-20b"][0]
    # attention_bias false drops the qkv and dense biases only: (18432 + 6144) * 44 = 1,081,344.
    unbiased = total(hf_config("gpt-neox-20b") | {"attention_bias": False})
    assert unbiased == EXACT["gpt-neox-20b"][0] - 1_081_344


def test_sliding_windows_where_configs_give_them() -> None:
    mistral = load_model(HF / "mistral-7b-v0.1" / "config.json")
    assert (mistral.sliding_window, mistral.sliding_window_pattern) == (4096, None)  # every layer local
    assert mistral.layer_window(31) == 4096
    phi = load_model(HF / "phi-3-mini-4k-instruct" / "config.json")
    assert (phi.sliding_window, phi.default_seq_len) == (2047, 4096)
    qwen = hf_config("qwen2-7b")  # use_sliding_window false: no window though sliding_window is 131072
    assert load_model(qwen).sliding_window is None
    assert load_model(qwen | {"use_sliding_window": True, "max_window_layers": 28}).sliding_window is None
    assert load_model(qwen | {"use_sliding_window": True, "max_window_layers": 0}).sliding_window == 131072
    with pytest.raises(ConfigError, match=r"field 'max_window_layers'=10 with use_sliding_window=true"):
        load_model(qwen | {"use_sliding_window": True, "max_window_layers": 10})


def test_head_dim_and_qk_norm_of_qwen3() -> None:
    qwen3 = load_model(HF / "qwen3-32b" / "config.json")
    assert (qwen3.head_width, qwen3.num_heads * qwen3.head_width, qwen3.hidden_size) == (128, 8192, 5120)
    assert (qwen3.qk_norm, qwen3.qkv_bias, qwen3.sliding_window) == (True, False, None)
    assert load_model(HF / "qwen3-4b" / "config.json").tied_embeddings
    no_head_dim = {k: v for k, v in hf_config("qwen3-32b").items() if k != "head_dim"}
    assert load_model(no_head_dim).head_width == 128  # Qwen3Config's default, not 5120/64 = 80


def test_llama_mlp_bias_alone_biases_the_mlp_only() -> None:
    # mlp_bias: gate and up 8192 each, down 2048 per layer: 18,432 * 16 = 294,912 more; no attention biases.
    model = load_model(hf_config("llama-3.2-1b") | {"mlp_bias": True})
    assert (model.ffn_bias, model.has_bias, model.qkv_bias) == (True, False, False)
    assert sum(param_counts(model).values()) == EXACT["llama-3.2-1b"][0] + 294_912


# --- schema of the new fields ----------------------------------------------------------------------

MODEL = {"name": "m", "num_layers": 4, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 128,
         "vocab_size": 100, "max_seq_len": 64}


@pytest.mark.parametrize(("fields", "message"), [
    ({"shared_input_norm": True}, "model: shared_input_norm=True needs parallel_attention=True (only a parallel "
     "layer has one input for attention and FFN); allowed: shared_input_norm=false"),
    ({"post_norms": True, "parallel_attention": True}, "model: post_norms=True is modelled for sequential layers "
     "only; allowed: post_norms=false with parallel_attention=true"),
    ({"sliding_window_pattern": 6}, "model: sliding_window_pattern=6 needs a sliding_window (the tokens a local "
     "layer attends to); allowed: give sliding_window or drop sliding_window_pattern"),
    ({"sliding_window": 16, "sliding_window_pattern": 1}, "model: sliding_window_pattern=1 makes every layer "
     "global and the sliding_window unused; allowed: 2 or more, or no sliding_window"),
])
def test_bad_combinations_are_one_sentence(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(MODEL | fields)
    assert str(info.value) == message


def test_old_model_files_load_with_the_new_defaults() -> None:
    model = load_model(MODEL)
    assert not (model.parallel_attention or model.shared_input_norm or model.qk_norm or model.post_norms
                or model.ffn_bias or model.lm_head_bias)
    assert (model.sliding_window, model.sliding_window_pattern, model.layer_window(3)) == (None, None, None)


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,model_type", [("bert-base-uncased", "bert"), ("mixtral-8x7b-v0.1", "dbrx")])
def test_unsupported_model_type(name: str, model_type: str) -> None:
    # BERT is an encoder; an MoE config of another family (DBRX) names its model_type and our fields.
    with pytest.raises(ConfigError) as info:
        load_model(hf_config(name) | {"model_type": model_type})
    message = str(info.value)
    assert f"model_type {model_type!r}" in message
    assert "allowed model_type: " + ", ".join(SUPPORTED) in message
    for field in ("num_layers", "hidden_size", "num_heads", "ffn_hidden_size", "vocab_size", "max_seq_len"):
        assert field in message


def test_missing_model_type_in_the_importer() -> None:
    cfg = hf_config("llama-3.1-8b")
    del cfg["model_type"]
    with pytest.raises(ConfigError) as info:
        from_hf_config(cfg, name="x")
    message = str(info.value)
    assert "has no model_type" in message and "llama, mistral, qwen2, gpt2, gpt_neox, opt" in message
    assert "num_layers" in message


def test_missing_model_type_in_a_config_json(tmp_path: Path) -> None:
    cfg = hf_config("llama-3.1-8b")
    del cfg["model_type"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="model_type"):
        load_model(path)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("llama-3.1-8b", "hidden_size"), ("llama-3.1-8b", "intermediate_size"),
        ("mistral-7b-v0.1", "vocab_size"), ("qwen2-7b", "num_attention_heads"),
        ("qwen2-7b", "max_position_embeddings"), ("gpt2", "n_embd"), ("gpt2", "n_positions"),
        ("gpt-neox-20b", "num_hidden_layers"), ("opt-125m", "ffn_dim"),
    ],
)
def test_missing_required_key_is_named(name: str, key: str) -> None:
    cfg = hf_config(name)
    model_type = cfg["model_type"]
    del cfg[key]
    with pytest.raises(ConfigError) as info:
        load_model(cfg)
    assert str(info.value) == (f"Hugging Face config.json (model_type {model_type!r}) field {key!r} "
                               "is missing; it is required to import this model")


@pytest.mark.parametrize("value", [0, -4096, "4096", 4096.0, True])
def test_bad_size_is_named(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(hf_config("llama-3.1-8b") | {"hidden_size": value})
    assert f"field 'hidden_size'={value!r} must be a positive integer" in str(info.value)


def test_unknown_activation_lists_the_allowed() -> None:
    with pytest.raises(ConfigError) as info:
        load_model(hf_config("gpt-neox-20b") | {"hidden_act": "tanh"})
    message = str(info.value)
    assert "field 'hidden_act'='tanh' is not supported" in message
    assert "gelu_new" in message and "silu" in message


def test_opt_with_projected_embedding_is_refused() -> None:
    # OPT-350m embeds in 512 and projects to 1024 (published 331,196,416 parameters); counting its
    # embedding at width 1024 would be 7 % high, so the import refuses rather than approximates.
    with pytest.raises(ConfigError) as info:
        load_model(HF / "opt-350m" / "config.json")
    message = str(info.value)
    assert "'word_embed_proj_dim'=512" in message and "hidden_size=1024" in message
    assert "allowed: word_embed_proj_dim=1024 or absent" in message


def test_shape_errors_of_imported_configs_name_our_field() -> None:
    # 32 query heads cannot share 5 KV heads; the schema says so.
    with pytest.raises(ConfigError, match=r"num_kv_heads=5 must divide num_heads=32"):
        load_model(hf_config("llama-3.1-8b") | {"num_key_value_heads": 5})


def test_a_checkpoints_quantization_is_said_beside_the_result():
    """An HF quantization_config was read and dropped without a word (issue 28): it is kept as the checkpoint's
    format and named beside the result, whose dtype is the run's."""
    import madmax
    from madmax.config.hf import _checkpoint_format

    assert _checkpoint_format({"quant_method": "fp8", "fmt": "e4m3"}) == "fp8"
    assert _checkpoint_format({"quant_method": "awq", "bits": 4}) == "awq 4-bit"
    assert _checkpoint_format({"bits": 4}) is None and _checkpoint_format("fp8") is None
    path = Path(__file__).resolve().parents[1] / "data" / "hf" / "gpt-oss-20b" / "config.json"
    result = madmax.simulate(str(path), "dgx-h100", 8, task="inference", batch=4, prompt_len=128, output_len=16)
    assert ("the checkpoint's weights are mxfp4 (its config.json quantization_config); simulated in bf16 (--dtype)"
            in result.assumptions)
