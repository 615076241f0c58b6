"""FSDP and ZeRO-3 stacks (torchtitan, llm-foundry, OLMo-core, DeepSpeed ZeRO-3, nanotron): the gathers, the
reduce dtype and the copies each stack adds (docs/model.md, "Software stacks").

Model: GPT-3 style, L = 2 layers, h = 1024, f = 4096, V = 32000, tied embeddings, biases (as
test_stack_effects.py). Units: embedding (wte V x h + wpe s x h), two layers of
P = 3h^2 + 3h + h^2 + h + 2hf + f + h (GEMMs and biases) + 4h (two LayerNorms) parameters each, and the head
(the final LayerNorm, 2h; the LM head is tied to wte).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.collective import Collective
from madmax.config.base import DType
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.config.training_stack import load_training_stack, training_stack_names
from madmax.errors import MadmaxError
from madmax.hardware.collectives import network_model
from madmax.hardware.compute import compute_model
from madmax.parallel.plan import build_plan
from madmax.program.training import build_training
from madmax.sim import schedule
from madmax.validate.inputs import gpt3_model
from madmax.workload import build_workload

L, H, HEADS, F, V, SEQ = 2, 1024, 16, 4096, 32000, 2048
MODEL = gpt3_model("tiny-gpt", L, H, HEADS, F, V, SEQ)
SPEC = load_model(MODEL)
NEW = ["torchtitan", "torchtitan-compile", "llm-foundry", "olmo-core", "nanotron", "deepspeed-zero3"]


def _built(stack, strategy: str, num_gpus: int, global_batch: int | None = None, system: str = "dgx-a100"):
    workload = build_workload(SPEC, Task(kind=TaskKind.PRETRAIN), flash=False)
    strat, gb = resolve_strategy(parse_strategy(strategy), num_gpus=num_gpus, model_name=SPEC.name,
                                 constraints=SPEC.parallel_constraints(), num_pipeline_units=SPEC.num_pipeline_units,
                                 has_experts=False, global_batch=global_batch or num_gpus, seq_len=SEQ, limits={},
                                 accumulates_gradients=True)
    sysm = load_system(system, num_gpus)
    stack = load_training_stack(stack)
    plan = build_plan(workload, strat, domain_size=sysm.scale_up_domain, seq_len=SEQ, global_batch=gb,
                      dtype=DType.BF16, stack=stack)
    compute, network = compute_model(sysm.gpu), network_model(sysm)
    return plan, build_training(plan, compute, network).program, compute, network


def _zero3(stack, n: int = 16):
    return _built(stack, f"tp=1,pp=1,dp={n},mbs=1,zero=3,recompute=none,flash=0", n)


def _layer(plan):
    return next(u for u in plan.units.values() if u.is_layer)


def _indices(program, category: str) -> list[int]:
    return [i for i, c in enumerate(program.category) if c == category]


@pytest.mark.parametrize("name", NEW)
def test_each_new_stack_loads_and_simulates(name):
    stack = load_training_stack(name)
    assert stack.description and stack.sources and name in training_stack_names()
    zero = 1 if name == "nanotron" else 3
    result = api.simulate(MODEL, "dgx-h100", 16, strategy=f"dp=16,zero={zero},recompute=full,flash=0",
                          global_batch=16, seq_len=SEQ, stack=name)
    assert result.fits and 0 < result.mfu < 1 and result.to_dict()["stack"] == name


@pytest.mark.parametrize(("stack", "gathers"), [
    # forward: embedding, 2 layers, head = 4; backward: each unit again but those kept:
    ("megatron-core", 4 + 4),
    ("fsdp2", 4 + 1),  # torchtitan v0.1: the root (embedding, head) and the last block stay gathered
    ("torchtitan", 4 + 3),  # v0.2: only [norm, output] (the head) stays gathered
    ("llm-foundry", 4 + 2),  # FSDP1's root (embedding, norm, head) is not freed after forward
    ("olmo-core", 4 + 2)])  # embeddings: set_unshard_in_backward(False); the root holds the head
def test_backward_gathers_skip_the_units_kept_gathered(stack, gathers):
    _, program, _, _ = _zero3(stack)
    assert len(_indices(program, "dp.all_gather")) == gathers


def test_fp32_reduce_scatter_carries_four_bytes_per_gradient():
    """fsdp2 reduce-scatters each layer's gradients in fp32: 4 P bytes on 16 ranks, where megatron-core's bf16
    carries 2 P (P the layer's parameters, all trainable)."""
    plan, program, _, network = _zero3("fsdp2")
    p = _layer(plan).trainable_params
    assert plan.data.reduce_bytes == 4 and plan.data.grad_bytes == 2
    span = plan.data.shard_span
    durations = {round(program.duration_s[i], 12) for i in _indices(program, "dp.reduce_scatter")}
    assert round(network.collective_s(Collective.REDUCE_SCATTER, 4 * p, span), 12) in durations
    assert round(network.collective_s(Collective.REDUCE_SCATTER, 2 * p, span), 12) not in durations
    core, core_program, _, _ = _zero3("megatron-core")
    assert core.data.reduce_bytes == 2
    assert round(network.collective_s(Collective.REDUCE_SCATTER, 2 * p, span), 12) in {
        round(core_program.duration_s[i], 12) for i in _indices(core_program, "dp.reduce_scatter")}


def test_fp32_all_reduce_without_sharding():
    """nanotron's DDP all-reduces its fp32 gradient buffers: 4 bytes per parameter, once per step."""
    plan, program, _, network = _built("nanotron", "tp=1,pp=1,dp=16,mbs=1,zero=0,recompute=none,flash=0", 16)
    p = _layer(plan).trainable_params
    durations = {round(program.duration_s[i], 12) for i in _indices(program, "dp.all_reduce")}
    assert round(network.collective_s(Collective.ALL_REDUCE, 4 * p, plan.data.grad_span), 12) in durations


def test_fsdp2_copies_on_the_compute_stream_by_hand():
    """Per layer and pass, FSDP2 copies the gathered bf16 weights out of the flat buffer (read 2 P + write 2 P
    bytes) and, before each reduce-scatter, copies the bf16 gradients into an fp32 buffer (read 2 P + write
    4 P); both on the compute stream, both in the breakdown's compute."""
    plan, program, compute, _ = _zero3("fsdp2")
    p = _layer(plan).params
    compute_stream = program.stream_of[next(i for i, c in enumerate(program.category) if c == "forward")]
    copy_out = _indices(program, "gather_copy")
    copy_in = _indices(program, "reduce_copy")
    assert {program.stream_of[i] for i in copy_out + copy_in} == {compute_stream}
    assert round(compute.memory_s(2 * 2 * p), 12) in {round(program.duration_s[i], 12) for i in copy_out}
    assert round(compute.memory_s(p * (2 + 4)), 12) in {round(program.duration_s[i], 12) for i in copy_in}
    # one copy-out per gather, one copy-in per reduce-scatter
    assert len(copy_out) == len(_indices(program, "dp.all_gather"))
    assert len(copy_in) == len(_indices(program, "dp.reduce_scatter"))
    # FSDP1 (llm-foundry) gathers into its flat parameter and reduces in bf16: neither copy
    _, foundry, _, _ = _zero3("llm-foundry")
    assert not _indices(foundry, "gather_copy") and not _indices(foundry, "reduce_copy")


def test_copies_count_as_compute_in_the_breakdown():
    result = api.simulate(MODEL, "dgx-h100", 16, strategy="dp=16,zero=3,recompute=none,flash=0", global_batch=16,
                          seq_len=SEQ, stack="fsdp2").to_dict()
    compute = result["breakdown"]["compute_s"]
    assert compute["gather_copy"] > 0 and compute["reduce_copy"] > 0
    assert compute["total"] == pytest.approx(sum(v for k, v in compute.items() if k != "total"))


def test_prefetched_gather_is_queued_before_the_reduce_scatter_it_overlaps():
    """FSDP issues block k-1's all-gather in block k's pre-backward hook and block k's reduce-scatter in its
    post-backward hook, on one communicator: the backward gather of the first layer (fsdp2 keeps the last
    one gathered) comes before the reduce-scatter of the last layer on the dp stream, and the backward's
    compute waits for neither."""
    _, program, _, _ = _zero3("fsdp2")
    gathers, scatters = _indices(program, "dp.all_gather"), _indices(program, "dp.reduce_scatter")
    backward_gather = gathers[-1]  # the first layer's, in its backward
    # reduce-scatters in program order: head, last layer, first layer, embedding
    assert scatters[0] < backward_gather < scatters[1]
    # DeepSpeed of 2021 (no prefetch) keeps its order: the reduction first, then the next gather
    _, old, _, _ = _zero3("deepspeed")
    first_scatter = _indices(old, "dp.reduce_scatter")[0]
    assert any(i > first_scatter for i in _indices(old, "dp.all_gather"))


def test_zero3_reduce_per_block_with_per_parameter_gathers():
    """deepspeed-zero3 gathers each weight tensor (4 per layer, tensors < 1e5 elements kept whole) but reduces a
    layer's gradients in one bucket: one reduce-scatter per unit with gradients, as megatron-core."""
    plan, program, _, _ = _zero3("deepspeed-zero3")
    assert _layer(plan).gathers is not None and len(_layer(plan).gathers) == 4
    trained = [k for chunk in plan.stages[0] for k in chunk if plan.units[k].trainable_params]
    assert len(_indices(program, "dp.reduce_scatter")) == len(trained)
    _, old, _, _ = _zero3("deepspeed")
    assert len(_indices(old, "dp.reduce_scatter")) > len(trained)  # 2021: one per parameter tensor


def test_compile_fuses_what_eager_splits():
    titan, _, _, _ = _zero3("torchtitan")
    compiled, _, _, _ = _zero3("torchtitan-compile")
    assert len(_layer(compiled).fwd) < len(_layer(titan).fwd)
    assert sum(k.num_bytes for k in _layer(compiled).fwd) < sum(k.num_bytes for k in _layer(titan).fwd)


def _iteration_s(stack: dict, n: int, mbs: int) -> float:
    """Two micro-batches per step, so gradients are reduced and weights gathered across micro-batches too."""
    _, program, _, _ = _built(stack, f"tp=1,pp=1,dp={n},mbs={mbs},zero=3,recompute=none,flash=0", n,
                              global_batch=n * mbs * 2)
    return max(schedule(program).end_s)


@settings(max_examples=12, deadline=None)
@given(n=st.sampled_from([2, 8, 16, 64]), mbs=st.sampled_from([1, 2, 4]), copies=st.booleans())
def test_fp32_reduction_never_faster_than_bf16(n, mbs, copies):
    base = {"name": "x", "prefetch_units": 1, "reduce_copy_in": copies}
    assert _iteration_s({**base, "reduce_dtype": "fp32"}, n, mbs) >= _iteration_s(base, n, mbs) - 1e-12


@settings(max_examples=12, deadline=None)
@given(n=st.sampled_from([2, 8, 16, 64]), mbs=st.sampled_from([1, 2, 4]), fp32=st.booleans())
def test_prefetching_one_block_never_slower_than_none(n, mbs, fp32):
    base = {"name": "x", "reduce_dtype": "fp32" if fp32 else "compute"}
    assert _iteration_s({**base, "prefetch_units": 1}, n, mbs) <= _iteration_s({**base, "prefetch_units": 0}, n, mbs)


@settings(max_examples=8, deadline=None)
@given(n=st.sampled_from([2, 16, 64]), mbs=st.sampled_from([1, 4]))
def test_copies_and_regathers_never_make_a_step_faster(n, mbs):
    base = {"name": "x", "prefetch_units": 1}
    plain = _iteration_s(base, n, mbs)
    assert _iteration_s({**base, "gather_copy_out": True, "reduce_copy_in": True}, n, mbs) >= plain
    assert _iteration_s({**base, "no_backward_gather": ["first", "last_layer", "last"]}, n, mbs) <= plain


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("reduce_dtype", "fp16", "'compute' or 'fp32'"),
    ("no_backward_gather", ["middle"], "'first', 'last_layer' or 'last'"),
    ("zero3_reduce", "bucket", "'block' or 'parameter'"),
    ("gather_copy_out", "often", "bool")])
def test_bad_stack_field_is_one_sentence_naming_it(tmp_path, field, value, allowed):
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"name": "mine", field: value}))
    with pytest.raises(MadmaxError) as error:
        load_training_stack(str(path))
    message = str(error.value)
    assert field in message and "\n" not in message
    result = CliRunner().invoke(app, ["simulate", "--model", "llama-3-8b", "--system", "dgx-h100", "--num-gpus", "8",
                                      "--stack", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and field in result.output
    assert allowed.split()[0].strip("'") in message


def test_catalog_lists_every_stack_for_the_stack_flag():
    result = CliRunner().invoke(app, ["catalog", "list", "stacks"], terminal_width=200)
    assert result.exit_code == 0
    for name in [*training_stack_names(), "trtllm", "vllm", "sglang"]:
        assert name in result.output
    assert "--stack" in result.output
    shown = CliRunner().invoke(app, ["catalog", "show", "olmo-core"])
    assert shown.exit_code == 0 and "reduce_dtype: fp32" in shown.output and "sources:" in shown.output


def test_hybrid_shard_all_reduce_beside_the_shard_collectives():
    """HSDP (shard=8 of dp=16, two replicas): FSDP2 all-reduces each block's fp32 shard (4 P / 8 bytes) over the
    2 replicas on a stream of its own; FSDP1 (llm-foundry) after the reduce-scatter on the same stream, in bf16."""
    strategy = "tp=1,pp=1,dp=16,mbs=1,zero=3,recompute=none,flash=0,shard=8"
    for stack, width, own_stream in (("fsdp2", 4, True), ("llm-foundry", 2, False)):
        plan, program, _, network = _built(stack, strategy, 16)
        reduces, scatters = _indices(program, "dp.all_reduce"), _indices(program, "dp.reduce_scatter")
        assert plan.data.shard == 8 and plan.data.replicas == 2 and reduces
        p = _layer(plan).trainable_params
        assert round(network.collective_s(Collective.ALL_REDUCE, width * p / 8, plan.data.replica_span), 12) in {
            round(program.duration_s[i], 12) for i in reduces}
        separate = {program.stream_of[i] for i in reduces}.isdisjoint({program.stream_of[i] for i in scatters})
        assert separate is own_stream
