"""Parameters and FLOPs of a small decoder, computed by hand."""

import dataclasses

import pytest

from madmax.config.model import DecoderModel
from madmax.config.task import Task
from madmax.workload import OpKind, TPSplit, build_workload, param_counts
from madmax.workload.ops import Op
from madmax.workload.transformer import layer_ops

TINY = DecoderModel(name="tiny", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                    ffn_hidden_size=128, is_gated_ffn=True, activation="silu", norm="rmsnorm",
                    vocab_size=1000, max_seq_len=256)


def test_tiny_params_by_hand():
    # head_dim 16; q 64x64=4096, k and v 64x32=2048 each, out 64x64=4096 -> attention 12288 per layer
    # ffn: gate, up 64x128 and down 128x64 -> 3*8192 = 24576 per layer
    # norms: 2 RMSNorm x 64 per layer + final 64; embedding and untied head 1000x64 each
    counts = param_counts(TINY)
    assert counts["attention"] == 2 * 12288
    assert counts["ffn"] == 2 * 24576
    assert counts["norms"] == 2 * 128 + 64
    assert counts["embedding"] == counts["lm_head"] == 64000
    assert sum(counts.values()) == 24576 + 49152 + 320 + 128000


def test_tiny_forward_flops_by_hand():
    # Per token and layer: GEMMs 2*(12288 + 24576) = 73728; causal attention at s=256:
    # 2*2*256*16*4/2 = 32768. Head GEMM 2*64*1000 = 128000. Element-wise ops add their own flops.
    workload = build_workload(TINY, Task(kind="pretrain"))
    gemm_and_attention = 2 * (73728 + 32768) + 128000
    flops = workload.forward_flops_per_token(256)
    elementwise = flops - gemm_and_attention
    assert 0 < elementwise < 0.05 * flops


def test_published_totals():
    # Llama 3.1 405B: 405.85 B (model card); GPT-3: 174.6 B (Brown et al. 2020 Table 2.1, "175B").
    from madmax.config.loaders import load_model

    assert sum(param_counts(load_model("llama-3.1-405b")).values()) == pytest.approx(405.85e9, rel=1e-4)
    assert sum(param_counts(load_model("gpt3-175b")).values()) == pytest.approx(174.6e9, rel=1e-3)


def test_lora_freezes_base_and_adds_adapters():
    # rank 8 on qkv (64 -> 128) and out (64 -> 64): r*(64+128) + r*(64+64) = 8*320 = 2560 per layer
    workload = build_workload(TINY, Task(kind="finetune", finetune="lora", lora_rank=8))
    layer = next(b for b in workload.blocks if b.name == "layer")
    trainable = sum(op.params for op in layer.ops if op.trainable)
    assert trainable == 2560
    assert not any(op.trainable for b in workload.blocks if b.name != "layer" for op in b.ops)


def test_frozen_layers_split_blocks():
    workload = build_workload(TINY, Task(kind="finetune", frozen_layers=1))
    layers = [b for b in workload.blocks if b.name == "layer"]
    assert [(b.count, b.trainable) for b in layers] == [(1, False), (1, True)]


# --- sliding windows ---------------------------------------------------------------------------------


def test_windowed_attention_flops_by_hand():
    # One head of width 16 (4*d = 64 FLOPs per query-key pair). s = 8, w = 4, continuous convention:
    # pairs 8*4 - 4^2/2 = 32 - 8 = 24 per sequence (the causal prefix alone: 8^2/2 = 32), so per token
    # 24/8 = 3 pairs -> 3*64 = 192 FLOPs; 8 tokens -> 1536. Unwindowed: 32/8 = 4 pairs -> 256 per token.
    attn = Op(name="attn", kind=OpKind.ATTENTION, tp=TPSplit.HEADS, heads=1, kv_heads=1, head_dim=16)
    local = dataclasses.replace(attn, window=4)
    assert local.forward_flops(8, 8) == 1536
    assert attn.forward_flops(8, 8) == 8 * 256
    # s <= w: the window covers the whole prefix, s^2/2 pairs as without a window (s = 4: 4*64/2 per token).
    assert local.forward_flops(1, 4) == attn.forward_flops(1, 4) == 128
    # A window of one token: s*1 - 1/2 pairs, (8 - 0.5)/8 per token.
    assert dataclasses.replace(attn, window=1).forward_flops(1, 8) == 64 * 7.5 / 8


GEMMA_LIKE = DecoderModel(name="gemma-like", num_layers=8, hidden_size=64, num_heads=4, num_kv_heads=2,
                          head_dim=32, ffn_hidden_size=128, is_gated_ffn=True, activation="gelu", norm="rmsnorm",
                          qk_norm=True, post_norms=True, vocab_size=1000, tied_embeddings=True, max_seq_len=256,
                          sliding_window=16, sliding_window_pattern=3)


def test_local_and_global_layers_are_blocks_in_execution_order():
    # Pattern 3: layers 2 and 5 (0-indexed) global; runs: local 2, global 1, local 2, global 1, local 2.
    workload = build_workload(GEMMA_LIKE, Task(kind="pretrain"))
    layers = [(b.name, b.count) for b in workload.blocks if b.is_layer]
    assert layers == [("layer.local", 2), ("layer.global", 1), ("layer.local", 2), ("layer.global", 1),
                      ("layer.local", 2)]
    windows = {b.name: next(op.window for op in b.ops if op.kind is OpKind.ATTENTION) for b in workload.blocks
               if b.is_layer}
    assert windows == {"layer.local": 16, "layer.global": None}
    # Per token at s = 64, 4 heads of 32 (4*d*a = 512 FLOPs per pair): global 64/2 = 32 pairs, local
    # (64*16 - 16^2/2)/64 = 14 pairs; 6 local and 2 global layers: 512 * (6*14 + 2*32) = 75,776.
    attention = sum(b.count * op.forward_flops(1, 64) for b in workload.blocks for op in b.ops
                    if op.kind is OpKind.ATTENTION)
    assert attention == 512 * (6 * 14 + 2 * 32) == 75_776


def test_frozen_layers_and_lora_with_several_layer_blocks():
    # frozen_layers=4: layers 0-3 frozen (local 2, global 1, local 1), then local 1, global 1, local 2.
    workload = build_workload(GEMMA_LIKE, Task(kind="finetune", frozen_layers=4))
    layers = [(b.name, b.count, b.trainable) for b in workload.blocks if b.is_layer]
    assert layers == [("layer.local", 2, False), ("layer.global", 1, False), ("layer.local", 1, False),
                      ("layer.local", 1, True), ("layer.global", 1, True), ("layer.local", 2, True)]
    assert sum(b.count for b in workload.blocks if b.is_layer) == 8
    # LoRA rank 8 on qkv (64 -> 4*32 + 2*2*32 = 256) and out (128 -> 64): 8*(64 + 256) + 8*(128 + 64) =
    # 4,096 per layer, 8 layers.
    lora = build_workload(GEMMA_LIKE, Task(kind="finetune", finetune="lora", lora_rank=8))
    assert lora.params_by_component["lora"] == 8 * 4096
    assert all(sum(op.params for op in b.ops if op.trainable) == 4096 for b in lora.blocks if b.is_layer)


def test_qk_norm_and_post_norms_by_hand():
    # Per layer: q 64*128 = 8,192, k and v 2*64*64 = 8,192 (2 KV heads of 32), o 128*64 = 8,192 -> 24,576;
    # QK-norm 2*32 = 64; GeGLU 3*64*128 = 24,576; 4 RMSNorms 4*64 = 256. Norms: 8*(256 + 64) + final 64 =
    # 2,624. Tied: embedding 64,000, no LM head.
    counts = param_counts(GEMMA_LIKE)
    assert (counts["attention"], counts["ffn"], counts["norms"]) == (8 * 24_576, 8 * 24_576, 2_624)
    assert (counts["embedding"], counts["lm_head"]) == (64_000, 0)
    names = [op.name for op in layer_ops(GEMMA_LIKE)]
    assert names == ["layer.norm1", "layer.qkv", "layer.q_norm", "layer.k_norm", "layer.attn", "layer.out",
                     "layer.post_norm1", "layer.residual1", "layer.norm2", "layer.up", "layer.gate", "layer.act",
                     "layer.down", "layer.post_norm2", "layer.residual2"]
    q_norm = layer_ops(GEMMA_LIKE)[2]
    # RMSNorm over the 4*32 = 128 query features of a token: reads and writes 256 elements, saves 128.
    assert (q_norm.params, q_norm.moved_elems_per_token, q_norm.saved_elems_per_token) == (32, 256, 128)


# --- parallel attention and FFN ------------------------------------------------------------------------

GPTJ_LIKE = DecoderModel(name="gptj-like", num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=256,
                         activation="gelu", norm="layernorm", ffn_bias=True, lm_head_bias=True,
                         parallel_attention=True, shared_input_norm=True, vocab_size=1000, max_seq_len=128)


def test_parallel_layer_sums_both_outputs_once():
    ops = layer_ops(GPTJ_LIKE)
    assert [op.name for op in ops] == ["layer.norm1", "layer.qkv", "layer.attn", "layer.out", "layer.up",
                                       "layer.act", "layer.down", "layer.residual"]
    merged = [op.name for op in ops if op.merges_reduction]
    assert merged == ["layer.out"]  # its partial sum joins the down projection's: one TP reduction
    residual = ops[-1]
    # x + attention + FFN: read 3 tensors, write 1 (4*64 elements), 2 adds per feature.
    assert (residual.moved_elems_per_token, residual.flops_per_token) == (256, 128)
    # The shared norm's output is saved once, by qkv; up reads the same tensor.
    assert (ops[1].saved_elems_per_token, ops[4].saved_elems_per_token) == (64, 0)
    # Params per layer: one LayerNorm 128; q, k, v, out 4*64^2 = 16,384 (no biases); fc_in 64*256 + 256 =
    # 16,640; fc_out 256*64 + 64 = 16,448. LM head 1000*64 + 1000 bias = 65,000 (untied).
    counts = param_counts(GPTJ_LIKE)
    assert (counts["norms"], counts["attention"], counts["ffn"]) == (2 * 128 + 128, 2 * 16_384, 2 * 33_088)
    assert counts["lm_head"] == 65_000


def test_parallel_layer_with_two_norms():
    # GPT-NeoX / Falcon-40B: two LayerNorms read x; the second saves nothing new (x is saved by the first).
    neox = GPTJ_LIKE.model_copy(update={"shared_input_norm": False})
    ops = layer_ops(neox)
    assert [op.name for op in ops[:3]] == ["layer.norm1", "layer.norm2", "layer.qkv"]
    assert (ops[0].saved_elems_per_token, ops[1].saved_elems_per_token) == (64, 0)
    assert param_counts(neox)["norms"] == 2 * 256 + 128


# --- catalog totals of the new families (published figures, each derived in tests/config/test_hf.py) ----

def _total(name: str) -> int:
    from madmax.config.loaders import load_model

    return sum(param_counts(load_model(name)).values())


def test_new_catalog_totals_by_hand():
    # keras-hub presets publish exact counts: qwen3_32b_en, qwen3_8b_en, gemma2_9b_en, phi3_mini_4k_instruct_en.
    assert _total("qwen3-32b") == 32_762_123_264
    assert _total("qwen3-8b") == 8_190_735_360
    assert _total("gemma-2-9b") == 9_241_705_984
    assert _total("phi-3-mini-4k") == 3_821_079_552
    # Gemma-3-27B text model (vocabulary 262,208): tied 262208*5376 = 1,409,630,208; layer: q 5376*4096 =
    # 22,020,096, k and v 2*5376*2048 = 22,020,096, o 4096*5376 = 22,020,096, QK-norm 2*128 = 256, GeGLU
    # 3*5376*21504 = 346,816,512, 4 norms 21,504 -> 412,898,560 * 62 = 25,599,710,720; norm 5,376 ->
    # 27,009,346,304 = the Hub's 27,432,406,640 - vision tower and projector 423,060,336 (keras-hub gemma3_27b
    # 27,432,062,576 - gemma3_27b_text 27,009,002,240) = keras-hub gemma3_27b_text + 64 more rows * 5376.
    assert _total("gemma-3-27b") == 27_009_346_304 == 27_432_406_640 - (27_432_062_576 - 27_009_002_240)
    assert _total("gemma-3-27b") == 27_009_002_240 + 64 * 5376
    # GPT-J: the checkpoint's 6,050,882,784 = the model card's 6,053,381,344 - 2,498,560 JAX shard replicas
    # (tests/config/test_hf.py, test_gpt_j_counts_the_checkpoint).
    assert _total("gpt-j-6b") == 6_053_381_344 - 2_498_560
    # Falcon: the Hub's safetensors totals store the tied LM head again, V*h.
    assert _total("falcon-7b") == 7_217_189_760 - 65024 * 4544 == 6_921_720_704
    # Falcon-180B: 65024*14848 = 965,476,352; layer: qkv 14848*(232 + 16)*64 = 235,667,456, dense 14848^2 =
    # 220,463,104, MLP 2*14848*59392 = 1,763,704,832, ln_attn and ln_mlp 4*14848 = 59,392 -> 2,219,894,784 * 80
    # = 177,591,582,720; ln_f 29,696 -> 178,557,088,768 = 179,522,565,120 (Hub) - 965,476,352.
    assert _total("falcon-180b") == 179_522_565_120 - 65024 * 14848 == 178_557_088_768
