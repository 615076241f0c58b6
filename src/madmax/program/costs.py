"""Seconds of a plan's kernels and collectives: the cost models applied to one unit of one micro-batch.

Program builders use these to give their segments durations; the search uses them for its estimates.

Eager frameworks issue kernels from the host one at a time, and the host runs ahead of the GPU: a long
GEMM hides the issue time of the small kernels behind it. A pass's kernels therefore form a queue
(`issue_queue_s`): kernel i is issued h_{i-1} after kernel i-1 (h: the profile's launch floor, the
host's time per kernel, measured back to back) and runs on the GPU from max(its issue, the end of kernel
i-1) for g_i (its roofline time, at least the device's own floor `device_floor_s`). A pass made of
tiny kernels is host-bound (n*h); one made of long kernels costs the sum of their GPU times. Under a
CUDA-graph floor (`ComputeModel.floor_s`) the host does not issue kernels one by one: no queue.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache

from madmax.config.units import parse_quantity
from madmax.hardware.collectives import NetworkModel
from madmax.hardware.compute import ComputeModel, compute_model
from madmax.hardware.profile import efficiency_table
from madmax.parallel.kernels import CommOp, Kernel, KernelKind, Phase, Where
from madmax.parallel.plan import UnitPlan

ATTENTION_CATEGORY = "attention"  # the breakdown category of KernelKind.ATTENTION kernels
# (group, collective kind, seconds): a unit's collectives at one place, summed per group and kind in the
# order they first appear.
GroupTimes = tuple[tuple[str, str, float], ...]


@dataclass(frozen=True)
class UnitTimes:
    """Seconds of one unit for one micro-batch on one rank.

    attention_fwd_s / attention_bwd_s: the attention's window of each pass (`pass_cost`: its kernels' GPU
    time, and the host waits after it starts); after_fwd / after_bwd: the collectives after its forward /
    backward kernels (TP); beside_fwd / beside_bwd: those beside its attention (the CP ring);
    overlapped_fwd / overlapped_bwd: those beside the compute that follows (the expert all-to-all under
    two-micro-batch overlap); *_by_kind: kernel seconds by breakdown category; flops_*: model FLOPs of each pass.
    """

    fwd_s: float
    bwd_s: float
    recompute_s: float
    attention_fwd_s: float
    attention_bwd_s: float
    after_fwd: GroupTimes
    after_bwd: GroupTimes
    beside_fwd: GroupTimes
    beside_bwd: GroupTimes
    overlapped_fwd: GroupTimes
    overlapped_bwd: GroupTimes
    fwd_by_kind: dict[str, float]
    bwd_by_kind: dict[str, float]
    recompute_by_kind: dict[str, float]
    flops_fwd: float
    flops_bwd: float
    flops_recompute: float


def kernel_s(compute: ComputeModel, k: Kernel, dtype) -> float:
    """Seconds of one kernel. A batched GEMM (bmm) is one launch: costed as one GEMM of batch*m rows,
    which has its FLOPs and bytes to within the small per-matrix operand."""
    dtype = k.dtype or dtype
    if k.kind is KernelKind.GEMM:
        t = (compute.grouped_gemm_s(k.batch, k.m, k.k, k.n, dtype, k.weight_width, k.multi_stream) if k.grouped
             else compute.gemm_s(k.batch * k.m, k.k, k.n, dtype, k.weight_width))
        return t / compute.wgrad_fraction(dtype) if k.wgrad else t
    if k.kind is KernelKind.ATTENTION and k.segments:
        return compute.attention_varlen_s(k.segments, k.heads, k.kv_heads, k.head_dim, k.causal, dtype, k.window,
                                          k.kv_width)
    if k.kind is KernelKind.ATTENTION:
        return compute.attention_s(k.batch, k.heads, k.kv_heads, k.q_len, k.kv_len, k.head_dim, k.causal, dtype,
                                   backward=k.backward, window=k.window, kv_width=k.kv_width,
                                   scores_saved=k.scores_saved)
    if k.kind is KernelKind.LAUNCH:
        return k.batch * compute.launch_s
    return compute.memory_s(k.num_bytes)


@cache
def device_floor_s() -> float:
    """Shortest time of one kernel on the GPU itself, once issued (efficiency.yaml `compute.device_floor_s`)."""
    return parse_quantity(efficiency_table()["compute"]["device_floor"]["seconds"], "s")


def issue_queue_s(host_s: list[float], gpu_s: list[float]) -> float:
    """End of a queue of kernels issued by the host: kernel i is issued at sum(host_s[:i]) and runs for
    gpu_s[i] from max(its issue, the end of kernel i-1). The first kernel is issued as the pass begins
    (the host ran ahead of the previous pass), so n tiny kernels cost (n-1) h + g."""
    issued = end = 0.0
    for h, g in zip(host_s, gpu_s, strict=True):
        end = max(end, issued) + g
        issued += h
    return end


def pass_cost(kernels: tuple[Kernel, ...], compute: ComputeModel, network: NetworkModel,
              dtype) -> tuple[float, dict[str, float], float, float]:
    """Seconds of one pass of kernels, those seconds by breakdown category, its model FLOPs, and the
    attention's window: the seconds of the pass beside which a collective started with its first attention
    kernel runs (the context-parallel K/V ring) without delaying the rest of the pass.

    Eagerly issued kernels go through `issue_queue_s`: the GPU time of each kernel is reported under
    its category, and the time the GPU waits for the host under "launch_wait". Host work (a host-memory
    copy) blocks the queue for its own time. The window is the attention's GPU time and, when the GPU waits
    for the host, the waits after the attention starts: W = T - t_a - G_rest (T: the pass's end; t_a: when
    its first attention kernel starts in the queue; G_rest: the GPU time of its other kernels after that), so
    that the rest of the pass, T - W = t_a + G_rest, never grows when a kernel gets faster.
    """
    by: dict[str, float] = defaultdict(float)
    flops = sum(k.flops for k in kernels)
    if compute.floor_s is not None:  # a CUDA-graph replay: the floor is already the kernel's minimum
        for k in kernels:
            by[k.category] += network.host_s(k.num_bytes) if k.kind is KernelKind.HOST else kernel_s(compute, k, dtype)
        return sum(by.values()), dict(by), flops, by.get(ATTENTION_CATEGORY, 0.0)
    device = compute_model(compute.gpu, compute.profile, floor_s=device_floor_s(),
                           attention_kernel=compute.attention_kernel)
    p = compute.profile
    host: list[float] = []
    gpu: list[float] = []
    host_work = 0.0
    for k in kernels:
        if k.kind is KernelKind.HOST:
            t = network.host_s(k.num_bytes)
            host.append(t)
            gpu.append(0.0)
            by[k.category] += t
            host_work += t
            continue
        if k.kind is KernelKind.LAUNCH:
            h, g = k.batch * p.launch_s, k.batch * device.launch_s
        else:
            h = p.attention.launch_s if k.kind is KernelKind.ATTENTION else p.launch_s
            g = kernel_s(device, k, dtype)
        host.append(h)
        gpu.append(g)
        by[k.category] += g
    total = issue_queue_s(host, gpu)
    waiting = total - sum(gpu) - host_work
    window = by.get(ATTENTION_CATEGORY, 0.0)
    if waiting > 1e-9 * total:
        by["launch_wait"] += waiting
        if window:
            first = next(i for i, k in enumerate(kernels) if k.category == ATTENTION_CATEGORY)
            started = issue_queue_s(host[:first + 1], gpu[:first + 1]) - gpu[first]
            rest = sum(g for k, g in zip(kernels[first:], gpu[first:], strict=True)
                       if k.category != ATTENTION_CATEGORY)
            window = total - started - rest
    return total, dict(by), flops, window


def group_times(ops: tuple[CommOp, ...], network: NetworkModel) -> GroupTimes:
    """Seconds of `ops` summed per (group, kind), in the order each pair first appears."""
    by: dict[tuple[str, str], float] = {}
    for op in ops:
        key = (op.group, op.kind.value)
        by[key] = by.get(key, 0.0) + network.collective_s(op.kind, op.size_bytes, op.span)
    return tuple((group, kind, seconds) for (group, kind), seconds in by.items())


def unit_times(unit: UnitPlan, compute: ComputeModel, network: NetworkModel, dtype) -> UnitTimes:
    def cost(kernels: tuple[Kernel, ...]) -> tuple[float, dict[str, float], float, float]:
        return pass_cost(kernels, compute, network, dtype)

    fwd, fwd_by, fwd_flops, fwd_window = cost(unit.fwd)
    bwd, bwd_by, bwd_flops, bwd_window = cost(unit.bwd)
    rec, rec_by, rec_flops, _ = cost(unit.recompute)
    F, B = Phase.FORWARD, Phase.BACKWARD
    return UnitTimes(fwd_s=fwd, bwd_s=bwd, recompute_s=rec, attention_fwd_s=fwd_window, attention_bwd_s=bwd_window,
                     after_fwd=group_times(unit.collectives(F, Where.AFTER), network),
                     after_bwd=group_times(unit.collectives(B, Where.AFTER), network),
                     beside_fwd=group_times(unit.collectives(F, Where.BESIDE_ATTENTION), network),
                     beside_bwd=group_times(unit.collectives(B, Where.BESIDE_ATTENTION), network),
                     overlapped_fwd=group_times(unit.collectives(F, Where.OVERLAPPED), network),
                     overlapped_bwd=group_times(unit.collectives(B, Where.OVERLAPPED), network),
                     fwd_by_kind=fwd_by, bwd_by_kind=bwd_by, recompute_by_kind=rec_by, flops_fwd=fwd_flops,
                     flops_bwd=bwd_flops, flops_recompute=rec_flops)
