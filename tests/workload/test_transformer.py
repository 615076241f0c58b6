"""Parameters and FLOPs of a small decoder, computed by hand."""

import pytest

from madmax.config.model import DecoderModel
from madmax.config.task import Task
from madmax.workload import build_workload, param_counts

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
