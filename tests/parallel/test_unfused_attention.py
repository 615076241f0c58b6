"""Megatron's unfused core attention (strategy flash=0): its softmax kernel's shape rule and its backward.

Sources: catalog/calibration/megatron_softmax.yaml (FusedScaleMaskSoftmax.is_kernel_available,
forward_torch_softmax, get_batch_per_block); docs/model.md "Unfused attention".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from madmax.config.base import DType
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.hardware.compute import compute_model
from madmax.parallel.kernels import KernelKind
from madmax.parallel.plan import build_plan
from madmax.parallel.tensor import fused_softmax
from madmax.validate.inputs import gpt3_model
from madmax.workload import build_workload

L, H, HEADS, F, V, SEQ = 2, 1024, 16, 4096, 32000, 1024
SPEC = load_model(gpt3_model("tiny-gpt", L, H, HEADS, F, V, SEQ))


@pytest.mark.parametrize(("batches", "q", "kv", "causal", "act_bytes", "fused"), [
    (4, 1024, 1024, True, 2, True),    # tp=4, 16 heads, micro-batch 1: 4 attention batches
    (2, 1024, 1024, True, 2, False),   # tp=8, 16 heads, micro-batch 1: 2, not a multiple of 4
    (6, 2048, 2048, True, 2, False),   # tp=8, 48 heads, micro-batch 1
    (12, 2048, 2048, True, 2, True),   # the same at micro-batch 2
    (8, 4096, 4096, True, 2, True),    # the longest keys the kernel takes
    (8, 8192, 8192, True, 2, False),   # beyond 4096 keys
    (8, 1024, 1024, True, 4, False),   # fp32 scores: the kernel needs 16-bit input
    (8, 16, 16, True, 2, False),       # keys must be more than 16
    (4, 32, 32, True, 2, False),       # 32 keys: two rows per warp, 128/32*2 = 8 batches per block
    (8, 32, 32, True, 2, True),
    (4, 36, 64, False, 2, False),      # not causal: the queries by the 8 rows per block (64 keys)
    (4, 40, 64, False, 2, True),
    (4, 1022, 1024, True, 2, False),   # queries not a multiple of 4
])
def test_fused_softmax_takes_the_kernels_shapes(batches, q, kv, causal, act_bytes, fused):
    assert fused_softmax(batches, q, kv, causal, act_bytes) is fused


@given(batches=st.integers(1, 512), q=st.integers(1, 9000), kv=st.integers(1, 9000), causal=st.booleans(),
       act_bytes=st.sampled_from([1, 2, 4]))
def test_fused_softmax_never_takes_a_shape_its_kernel_refuses(batches, q, kv, causal, act_bytes):
    if fused_softmax(batches, q, kv, causal, act_bytes):
        assert act_bytes == 2 and 16 < kv <= 4096 and q % 4 == 0 and kv % 4 == 0 and batches % 4 == 0
        assert (batches if causal else q) % 4 == 0


def _layer(tp: int, mbs: int, recompute: str = "full"):
    strat, gb = resolve_strategy(parse_strategy(f"tp={tp},mbs={mbs},recompute={recompute},flash=0"), num_gpus=tp,
                                 model_name=SPEC.name, constraints=SPEC.parallel_constraints(),
                                 num_pipeline_units=SPEC.num_pipeline_units, has_experts=False,
                                 global_batch=mbs, seq_len=SEQ, limits={}, accumulates_gradients=True)
    workload = build_workload(SPEC, Task(kind=TaskKind.PRETRAIN), flash=False)
    plan = build_plan(workload, strat, domain_size=8, seq_len=SEQ, global_batch=gb, dtype=DType.FP16)
    return next(u for u in plan.units.values() if u.is_layer)


def _attention_kernels(kernels):
    return [k for k in kernels if k.category == "attention"]


def test_fallback_adds_four_kernels_and_the_fp32_bytes_per_pass():
    """tp=8 leaves 2 heads per rank: at micro-batch 1 the scores (2 x 1024 x 1024 per rank) take PyTorch's
    fp32 softmax, 5 kernels for the fused one, 37 - 4 = 33 more bytes per score forward, 41 - 6 = 35 backward."""
    scores = 1 * (HEADS // 8) * SEQ * SEQ
    fused, fallback = _layer(8, 2), _layer(8, 1)
    for pass_, extra_bytes in (("fwd", 33), ("bwd", 35), ("recompute", 33)):
        base = _attention_kernels(getattr(fused, pass_))
        more = _attention_kernels(getattr(fallback, pass_))
        assert len(more) == len(base) + 2
        memory, launch = more[-3:-1]  # before the op's own launches (baddbmm, dropout, permute)
        assert memory.kind is KernelKind.MEMORY and memory.num_bytes == pytest.approx(extra_bytes * scores)
        assert launch.kind is KernelKind.LAUNCH and launch.batch == 3  # + the memory kernel: 4 more launches
    # Without recompute its fp32 output is kept for the backward: one more 16-bit element per score than the
    # fused path keeps (micro-batch 2 keeps twice micro-batch 1's activations).
    kept, fused_kept = _layer(8, 1, "none").saved_bytes, _layer(8, 2, "none").saved_bytes
    assert kept - fused_kept / 2 == pytest.approx(2 * scores)


def test_unfused_backward_does_twice_the_forward_products():
    """The unfused backward reads the kept probabilities: dQ, dK, dV and dP, 4 products to the forward's 2
    (flash attention recomputes the scores: 5). Its kernel counts 2x the forward FLOPs, and a compute-bound
    backward takes 4/5 of the time of one that recomputes the scores."""
    layer = _layer(4, 4)
    (fwd,) = [k for k in layer.fwd if k.kind is KernelKind.ATTENTION]
    (bwd,) = [k for k in layer.bwd if k.kind is KernelKind.ATTENTION]
    assert bwd.scores_saved and bwd.flops == pytest.approx(2 * fwd.flops)
    cm = compute_model(load_system("dgx-a100", 8).gpu)
    shape = (8, 16, 16, 8192, 8192, 128, False, DType.BF16)
    saved = cm.attention_s(*shape, backward=True, scores_saved=True)
    recomputed = cm.attention_s(*shape, backward=True)
    assert saved == pytest.approx(0.8 * recomputed, rel=1e-12)
