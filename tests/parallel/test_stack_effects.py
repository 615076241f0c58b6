"""What a training stack does to the plan and the program (docs/model.md, "Software stacks").

Model: GPT-3 style, L = 2 layers, h = 1024, f = 4096, V = 32000, tied embeddings, biases (Megatron GPT).
Per layer the GEMM weights are qkv h x 3h (+3h bias), out h x h (+h), up h x f (+f), down f x h (+h):
    P = 3h^2 + 3h + h^2 + h + 2hf + f + h = 12,599,296 parameters.
"""

from __future__ import annotations

import pytest

from madmax import api
from madmax.collective import Collective, Span
from madmax.config.base import DType
from madmax.config.hardware import System
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.config.training_stack import load_training_stack
from madmax.hardware.collectives import network_model
from madmax.hardware.compute import compute_model
from madmax.parallel.plan import build_plan
from madmax.program.training import build_training
from madmax.validate.inputs import gpt3_model
from madmax.workload import build_workload

L, H, HEADS, F, V, SEQ = 2, 1024, 16, 4096, 32000, 2048
MODEL = gpt3_model("tiny-gpt", L, H, HEADS, F, V, SEQ)
LAYER_GEMM_PARAMS = 3 * H * H + 3 * H + H * H + H + 2 * H * F + F + H
SPEC = load_model(MODEL)


def _plan(strategy: str, num_gpus: int, stack: str, global_batch: int, system: System | None = None):
    workload = build_workload(SPEC, Task(kind=TaskKind.PRETRAIN), flash=False)
    strat, gb = resolve_strategy(parse_strategy(strategy), num_gpus=num_gpus, model_name=SPEC.name,
                                 constraints=SPEC.parallel_constraints(), num_pipeline_units=SPEC.num_pipeline_units,
                                 has_experts=False, global_batch=global_batch, seq_len=SEQ, limits={},
                                 accumulates_gradients=True)
    sysm = system or load_system("dgx-a100", num_gpus)
    return build_plan(workload, strat, domain_size=sysm.scale_up_domain, seq_len=SEQ, global_batch=gb,
                      dtype=DType.BF16, stack=load_training_stack(stack)), sysm


def _layer(plan):
    return next(u for u in plan.units.values() if u.is_layer)


def test_pytorch_casts_each_gemm_weight_six_bytes_per_pass():
    plan, _ = _plan("tp=1,pp=1,dp=8,mbs=1,zero=0,recompute=full,flash=0", 8, "pytorch", 8)
    layer = _layer(plan)
    fwd = [k.num_bytes for k in layer.fwd if k.category == "weight_cast"]
    bwd = [k.num_bytes for k in layer.bwd if k.category == "weight_cast"]
    assert len(fwd) == 4  # qkv, out, up, down: one cast kernel each
    assert sum(fwd) == pytest.approx(6 * LAYER_GEMM_PARAMS)  # read 4 + write 2 bytes
    assert sum(bwd) == pytest.approx(6 * LAYER_GEMM_PARAMS)  # gradient: read 2 + write 4
    # a full recompute re-enters autocast and casts again
    assert sum(k.num_bytes for k in layer.recompute if k.category == "weight_cast") == pytest.approx(
        6 * LAYER_GEMM_PARAMS)
    # per step: m micro-batches x (forward + backward + recompute) per layer; m = 8 / 8 = 1 here
    assert plan.microbatches == 1


def test_pytorch_cast_splits_over_tensor_parallel_ranks():
    plan, _ = _plan("tp=2,pp=1,dp=4,mbs=1,zero=0,recompute=full,flash=0", 8, "pytorch", 8)
    fwd = sum(k.num_bytes for k in _layer(plan).fwd if k.category == "weight_cast")
    # every GEMM here splits over tp (column: n and its bias; row: k, its bias counted whole per op / tp)
    assert fwd == pytest.approx(6 * LAYER_GEMM_PARAMS / 2)


def test_megatron_core_has_no_cast_and_the_workload_kernels():
    core, _ = _plan("tp=1,pp=1,dp=8,mbs=1,zero=0,recompute=full,flash=0", 8, "megatron-core", 8)
    ds, _ = _plan("tp=1,pp=1,dp=8,mbs=1,zero=0,recompute=full,flash=0", 8, "deepspeed", 8)
    assert not any(k.category == "weight_cast" for k in _layer(core).fwd)
    assert _layer(core).fwd == _layer(ds).fwd  # deepspeed's model code fuses the layer's kernels alike
    assert len(_layer(core).fwd) < len(_plan("tp=1,pp=1,dp=8,mbs=1,zero=0,recompute=full,flash=0", 8, "pytorch",
                                             8)[0].units[_layer(core).name].fwd)


def _program(stack: str, num_gpus: int):
    plan, sysm = _plan(f"tp=1,pp=1,dp={num_gpus},mbs=1,zero=3,recompute=full,flash=0", num_gpus, stack, num_gpus)
    compute = compute_model(sysm.gpu)
    network = network_model(sysm)
    return plan, build_training(plan, compute, network).program, compute, network


def test_deepspeed_gathers_each_parameter_three_times_with_full_recompute():
    """Per micro-batch: forward gathers the embedding (wte V x h, wpe s x h) and each layer's 4 weight
    matrices; the backward gathers each layer's 4 for its recomputed forward and again for its backward,
    and the embedding's 2. Biases and norms (< 1e5 elements) stay whole; the tied head has no weight of
    its own. 10 + 8 + 10 = 28 gathers, each followed by n copy kernels."""
    n = 16
    plan, program, compute, network = _program("deepspeed", n)
    cats = program.category
    gathers = [i for i, c in enumerate(cats) if c == "dp.all_gather"]
    copies = [i for i, c in enumerate(cats) if c == "dp.gather_copies"]
    assert plan.microbatches == 1
    assert len(gathers) == 28 and len(copies) == 28
    assert _layer(plan).gathers == (3 * H * H + 3 * H, H * H + H, H * F + F, F * H + H)
    # one gather of qkv: the ring all-gather of its 2-byte weights over the dp group, (n - 1) latency steps
    qkv = 2 * (3 * H * H + 3 * H)
    durations = sorted({round(program.duration_s[i], 12) for i in gathers})
    assert round(network.collective_s(Collective.ALL_GATHER, qkv, plan.data.shard_span), 12) in durations
    # its copies: n kernels of qkv / n bytes read and written
    assert round(n * compute.memory_s(2 * qkv / n), 12) in {round(program.duration_s[i], 12) for i in copies}


def test_deepspeed_reduce_scatters_each_parameter_after_n_copies():
    """Per micro-batch, each layer's backward reduce-scatters the gradients of its 4 weight matrices one by
    one (each with its bias, as `UnitPlan.gathers` counts them) and its two LayerNorms (kept whole) in one
    more; the embedding its wte and wpe (no small tensor); the head its final norm (kept whole, the head
    tied to wte). 2 x 5 + 2 + 1 = 13 reduce-scatters, each after n copy kernels of its inputs."""
    n = 16
    plan, program, compute, network = _program("deepspeed", n)
    cats = program.category
    scatters = [i for i, c in enumerate(cats) if c == "dp.reduce_scatter"]
    copies = [i for i, c in enumerate(cats) if c == "dp.reduce_copies"]
    assert len(scatters) == 13 and len(copies) == 13
    # fc1's gradient: 2 bytes per element (h x f + f), n pieces read and written once each
    up = 2 * (H * F + F)
    assert round(network.collective_s(Collective.REDUCE_SCATTER, up, plan.data.shard_span), 12) in {
        round(program.duration_s[i], 12) for i in scatters}
    assert round(n * compute.memory_s(2 * up / n), 12) in {round(program.duration_s[i], 12) for i in copies}
    # the layer's tensors kept whole: two LayerNorms' gains and biases, 4h elements of 2 bytes
    small = 2 * 4 * H
    assert round(network.collective_s(Collective.REDUCE_SCATTER, small, plan.data.shard_span), 12) in {
        round(program.duration_s[i], 12) for i in scatters}


def test_deepspeed_zero2_reduces_each_unit_once_without_copies():
    """The per-parameter list reduce-scatter is ZeRO-3's (Init._reduce_scatter_gradient): ZeRO-2 reduces a
    unit's gradients in one collective, with no copies."""
    plan, sysm = _plan("tp=1,pp=1,dp=16,mbs=1,zero=2,recompute=full,flash=0", 16, "deepspeed", 16)
    program = build_training(plan, compute_model(sysm.gpu), network_model(sysm)).program
    assert "dp.reduce_copies" not in program.category
    trained = [k for chunk in plan.stages[0] for k in chunk if plan.units[k].trainable_params]
    assert sum(1 for c in program.category if c == "dp.reduce_scatter") == len(trained)


def test_megatron_core_reduce_scatters_each_unit_once():
    plan, program, _, _ = _program("megatron-core", 16)
    assert "dp.reduce_copies" not in program.category
    trained = [k for chunk in plan.stages[0] for k in chunk if plan.units[k].trainable_params]
    assert sum(1 for c in program.category if c == "dp.reduce_scatter") == len(trained)


@pytest.mark.parametrize(("stack", "sp", "scattered"), [
    ("megatron-lm-2021", 0, True), ("megatron-deepspeed", 0, True), ("megatron-lm-2021", 1, False),
    ("megatron-core", 0, False)])
def test_pipeline_sends_scatter_over_tensor_parallel_ranks(stack, sp, scattered):
    """Megatron-LM of 2021 (Narayanan et al. 2021, Sec. 4.1) and DeepSpeed's pipeline engine send 1/tp of a
    stage's activation from each TP rank and all-gather it on the next stage; sequence parallelism has already
    split it (b s h / tp per rank) and Megatron-Core sends it whole. mbs 1, s = 2048, h = 1024, 2 bytes."""
    plan, sysm = _plan(f"tp=4,pp=2,dp=1,mbs=1,sp={sp},recompute=full,flash=0", 8, stack, 8)
    whole = 1 * SEQ * H * 2
    if scattered:
        assert plan.p2p_bytes == whole / 4 and plan.p2p_gather_bytes == whole
        assert plan.p2p_gather_span == Span(4, 1)
    else:
        assert plan.p2p_bytes == (whole / 4 if sp else whole) and plan.p2p_gather_bytes == 0
    program = build_training(plan, compute_model(sysm.gpu), network_model(sysm)).program
    gathers = sum(1 for c in program.category if c == "pp.all_gather")
    sends = sum(1 for c in program.category if c == "pp.send_recv")
    assert sends > 0 and gathers == (sends if scattered else 0)


def test_fsdp2_gathers_per_block():
    # one gather per unit and pass, never per tensor; which backward passes gather again:
    # tests/parallel/test_fsdp_stacks.py
    plan, _, _, _ = _program("fsdp2", 16)
    assert all(u.gathers is None for u in plan.units.values() if u.params)


def _time(stack: str, num_gpus: int, strategy: str) -> float:
    return api.simulate(MODEL, "dgx-a100", num_gpus, strategy=strategy, global_batch=num_gpus, seq_len=SEQ,
                        stack=stack).iteration_time_s


def test_pytorch_slower_than_megatron_core():
    strategy = "tp=1,pp=1,dp=8,mbs=1,zero=1,recompute=full,flash=0"
    assert _time("pytorch", 8, strategy) > _time("megatron-core", 8, strategy)
    assert _time("megatron-lm-2021", 8, strategy) > _time("megatron-core", 8, strategy)  # its fp32 loss


def test_deepspeed_zero3_cost_grows_with_ranks():
    """At a fixed micro-batch per rank, megatron-core's ZeRO-3 time barely moves with n, DeepSpeed's grows:
    its n copies per gather, issued with no prefetch."""
    def ratio(n: int) -> float:
        strategy = f"tp=1,pp=1,dp={n},mbs=1,zero=3,recompute=full,flash=0"
        return _time("deepspeed", n, strategy) / _time("megatron-core", n, strategy)

    small, large = ratio(16), ratio(64)
    assert 1 < small < large


def test_result_names_a_given_stack():
    result = api.simulate(MODEL, "dgx-a100", 8, strategy="dp=8,zero=1,recompute=full,flash=0", global_batch=8,
                          seq_len=SEQ, stack="fsdp2")
    assert any(a.startswith("software stack: fsdp2") for a in result.to_dict()["assumptions"])


def test_megatron_deepspeed_runs_on_its_profile():
    # Megatron-LM 2021's kernels (its fp32 loss) on the profile of vTrain's runs: the same as megatron-lm-2021
    # given that profile, and slower than megatron-core's fused loss on it.
    strategy = "tp=1,pp=1,dp=8,mbs=1,zero=0,recompute=full,flash=0"
    vtrain = _time("megatron-deepspeed", 8, strategy)
    profile = load_training_stack("megatron-deepspeed").calibration
    on = {stack: api.simulate(MODEL, "dgx-a100", 8, strategy=strategy, global_batch=8, seq_len=SEQ, stack=stack,
                              calibration=profile).iteration_time_s for stack in ("megatron-lm-2021", "megatron-core")}
    assert vtrain == pytest.approx(on["megatron-lm-2021"])
    assert vtrain > on["megatron-core"]
