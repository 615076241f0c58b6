"""A training stack's kernels: unfused element-wise ops and weight casts (`madmax.config.training_stack`).

The plan builder asks, for each op of a block, for the kernels of one pass as the stack runs them
(`kernels_of`), and for the casts of the block's GEMM weights (`cast_kernels`); the default stack,
Megatron-Core, returns the workload's kernels unchanged and casts nothing.
"""

from __future__ import annotations

import dataclasses

from madmax.config.training_stack import OpRole, TrainingStack
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.workload.ops import Op, OpKind


def op_role(op: Op) -> OpRole | None:
    """The role of a workload op by its kind and the last part of its name: the loss (`*.loss`), a norm
    (`*norm*`: LayerNorm, RMSNorm, the q/k norms), the FFN activation (`*act`), an MLP layer's ReLU
    (`relu*`); None for an op no stack splits (GEMMs, attention, residual adds, embeddings)."""
    if op.kind is not OpKind.ELEMENTWISE:
        return None
    part = op.name.rsplit(".", 1)[-1]
    if part == "loss":
        return OpRole.LOSS
    if "norm" in part:
        return OpRole.NORM
    if part.endswith("act"):
        return OpRole.ACTIVATION
    if part.startswith("relu"):
        return OpRole.RELU
    return None


def kernels_of(stack: TrainingStack, op: Op, kernels: list[Kernel]) -> list[Kernel]:
    """`kernels` of `op` for one pass as `stack` runs them: an unfused op's memory-bound kernel of B bytes
    becomes `kernels` launches of B * bytes_factor / kernels bytes each; an op in the GEMM epilogue has no
    memory-bound kernel of its own; other kernels pass unchanged."""
    role = op_role(op)
    if role is not None and role in stack.gemm_epilogue:
        return [k for k in kernels if k.kind is not KernelKind.MEMORY]
    return role_kernels(stack, role, kernels)


def role_kernels(stack: TrainingStack, role: OpRole | None, kernels: list[Kernel]) -> list[Kernel]:
    """`kernels` of an op of `role` as `stack` runs them, split when the stack runs that role unfused."""
    rule = stack.unfused.get(role) if role is not None else None
    if rule is None:
        return kernels
    out: list[Kernel] = []
    for k in kernels:
        if k.kind is not KernelKind.MEMORY:
            out.append(k)
            continue
        piece = dataclasses.replace(k, num_bytes=k.num_bytes * rule.bytes_factor / rule.kernels,
                                    flops=k.flops / rule.kernels)
        out += [piece] * rule.kernels
    return out


def cast_kernels(stack: TrainingStack, params: list[float]) -> list[Kernel]:
    """One cast kernel per weight tensor (`params`: the rank's elements of each), moving
    `weight_cast_bytes_per_param` bytes per element; none when the stack does not cast."""
    if not stack.weight_cast_bytes_per_param:
        return []
    return [Kernel(KernelKind.MEMORY, "weight_cast", num_bytes=n * stack.weight_cast_bytes_per_param)
            for n in params if n]
