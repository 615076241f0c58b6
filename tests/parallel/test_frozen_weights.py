"""Frozen weights and ZeRO-3 (issue 28): ZeRO-3 partitions every parameter, frozen or not, and holds low-precision
copies only of the layers it has gathered (LoRA added memory, fp8 kept a whole model's copy on every rank); a
LoRA run counts the FLOPs it computes and says it is LoRA."""

from __future__ import annotations

import pytest

import madmax

GIB = 2**30
LLAMA_70B = {"model": "llama-3-70b", "system": "p4d.24xlarge", "num_gpus": 128, "global_batch": 128, "seq_len": 4096,
             "strategy": "tp=8,zero=3", "task": "finetune"}


def _memory(**kwargs) -> dict:
    return madmax.simulate(**kwargs).to_dict()["memory"]


def test_frozen_weights_are_sharded_like_trainable_ones():
    full, lora = _memory(**LLAMA_70B, finetune="full"), _memory(**LLAMA_70B, finetune="lora")
    # 70.6 B parameters in bf16 over tp=8 x dp=16 ranks: 1.10 GiB each, plus the gathered layers; LoRA's adapters
    # are a rounding error beside them. Freezing never adds memory.
    assert lora["weights"] == pytest.approx(full["weights"], rel=0.01)
    assert lora["total"] < full["total"]
    assert lora["gradients"] < 0.01 * full["gradients"] and lora["optimizer"] < 0.01 * full["optimizer"]


def test_fp8_copies_under_zero3_are_those_of_the_gathered_layers():
    run = {"model": "llama-3.1-405b", "system": "gb200-nvl72", "num_gpus": 128, "global_batch": 64,
           "seq_len": 8192, "strategy": "tp=2,dp=64,zero=3"}
    bf16, fp8 = _memory(**run), _memory(**run, dtype="fp8")
    # the fp8 copy of a gathered layer (1 byte per parameter beside its 2 in bf16) adds at most half the gathered
    # weights, not the whole model's 405e9 / tp = 189 GiB
    assert bf16["weights"] < fp8["weights"] < 1.5 * bf16["weights"] + 1.0 * GIB
    assert fp8["weights"] < 20 * GIB


def test_lora_counts_the_flops_it_computes_and_says_it_is_lora():
    """LoRA computes no weight gradient of its frozen base: its model TFLOP/s are the program's model FLOPs
    (as MFU counts them), not 3 x forward, which credited an A100 with 91% of its peak (issue 28)."""
    run = {"model": "llama-3-8b", "system": "p4d.24xlarge", "num_gpus": 8, "global_batch": 32, "seq_len": 4096}
    lora = madmax.simulate(**run, task="finetune", finetune="lora")
    full = madmax.simulate(**run, task="finetune", finetune="full")
    peak_tflops = 312  # A100 dense bf16
    assert lora.model_tflops_per_gpu == pytest.approx(lora.mfu * peak_tflops, rel=1e-9)
    assert lora.model_tflops_per_gpu < full.model_tflops_per_gpu * 4 / 3  # 4 of 6 N FLOPs, at most faster
    assert any(a.startswith("fine-tuning: LoRA adapters of rank 16 on qkv, out") for a in lora.assumptions)
    assert "fine-tuning: every weight trained" in full.assumptions


def test_zero3_never_holds_more_than_zero2_where_nothing_is_sharded():
    """With one rank to a shard (dp = 1) a weight is whole already: no gathered buffer beside it (issue 28)."""
    run = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 8}
    zero2, zero3 = _memory(**run, strategy="tp=8,zero=2"), _memory(**run, strategy="tp=8,zero=3")
    assert zero3["weights"] == pytest.approx(zero2["weights"], rel=1e-12)
    assert zero3["total"] <= zero2["total"] * (1 + 1e-12)
