"""The window beside which the context-parallel K/V ring runs (`pass_cost`): the rest of the pass never grows
when a kernel gets faster (issue 28: doubling the FLOP/s slowed an iteration with cp > 1)."""

from __future__ import annotations

import pytest

from madmax.config.loaders import load_system
from madmax.hardware.collectives import network_model
from madmax.hardware.compute import compute_model
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.program.costs import pass_cost

SYSTEM = load_system("dgx-h100")


def _models(flops: float):
    gpu = SYSTEM.gpu.model_copy(update={"name": f"h100-x{flops}",
                                        "flops_per_s": {k: v * flops for k, v in SYSTEM.gpu.flops_per_s.items()}})
    return compute_model(gpu), network_model(SYSTEM)


# A host-bound pass: 40 tiny elementwise kernels (each shorter on the GPU than the host's launch floor), one
# attention kernel of 4 x 32 heads x 2048 queries, then 40 more tiny kernels.
TINY = Kernel(kind=KernelKind.MEMORY, category="elementwise", num_bytes=1e3)
ATTENTION = Kernel(kind=KernelKind.ATTENTION, category="attention", flops=1.0, batch=4, heads=32, kv_heads=8,
                   q_len=2048, kv_len=2048, head_dim=128)
PASS = (TINY,) * 40 + (ATTENTION,) + (TINY,) * 40


def test_the_rest_of_a_host_bound_pass_does_not_grow_when_the_attention_gets_faster():
    slow = pass_cost(PASS, *_models(1.0), "bf16")
    fast = pass_cost(PASS, *_models(2.0), "bf16")
    total, by, _, window = slow
    assert by["launch_wait"] > 0  # host-bound: the GPU waits for the host
    assert fast[1]["attention"] < by["attention"]
    # Before, the rest was T - (attention's GPU time), which grew by what the attention saved, so the ring
    # started later on the faster GPU.
    assert fast[0] - fast[3] <= (total - window) * (1 + 1e-12)


def test_without_host_waits_the_window_is_the_attentions_gpu_time():
    big = Kernel(kind=KernelKind.GEMM, category="gemm", flops=2 * 8192**3, m=8192, k=8192, n=8192)
    total, by, _, window = pass_cost((big, ATTENTION, big), *_models(1.0), "bf16")
    assert "launch_wait" not in by
    assert window == by["attention"]
    assert total == pytest.approx(by["gemm"] + by["attention"])
