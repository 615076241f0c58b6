"""Training stacks (catalog/training_stacks.yaml): loading, refusals, and how a stack rewrites kernels."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.training_stack import (
    GatherIssue,
    OpRole,
    TrainingStack,
    default_training_stack,
    load_training_stack,
    training_stack_names,
)
from madmax.errors import ConfigError, MadmaxError
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.parallel.stack_kernels import cast_kernels, kernels_of, op_role
from madmax.validate.stack import VTRAIN_STACK, VTRAIN_STACK_PROFILE
from madmax.workload.ops import Op, OpKind, TPSplit

CATALOG = ["megatron-core", "megatron-lm-2021", "pytorch", "fsdp2", "deepspeed", "megatron-deepspeed", "automodel",
           "torchtitan", "torchtitan-compile", "llm-foundry", "olmo-core", "nanotron", "deepspeed-zero3", "hugectr",
           "torchrec", "tf2"]


def test_catalog_lists_every_stack_default_megatron_core():
    assert training_stack_names() == CATALOG
    assert default_training_stack() == "megatron-core"
    assert load_training_stack().name == "megatron-core"


@pytest.mark.parametrize("name", CATALOG)
def test_every_catalog_stack_loads_with_sources(name):
    stack = load_training_stack(name)
    assert stack.name == name and stack.description and stack.sources


def test_default_stack_changes_nothing_but_its_moe_eager_ops():
    stack = load_training_stack("megatron-core")
    assert not stack.unfused and stack.weight_cast_bytes_per_param == 0
    assert stack.expert_bias is not None and stack.glu_clamp is not None  # TEGroupedMLP's eager bias and clamp
    assert stack.zero3_gather is GatherIssue.BLOCK and stack.prefetch_units is None and stack.calibration is None


def test_vtrain_stack_carries_the_vtrain_profile():
    assert load_training_stack(VTRAIN_STACK).calibration == VTRAIN_STACK_PROFILE


def test_unknown_stack_lists_the_training_stacks():
    with pytest.raises(ConfigError, match="allowed: megatron-core, megatron-lm-2021, pytorch, fsdp2, deepspeed"):
        load_training_stack("megatron")


def test_training_refuses_a_serving_stack_with_the_training_names():
    with pytest.raises(ConfigError, match=r"stack='vllm' is a serving engine.*allowed for training: megatron-core"):
        api.simulate("llama-3-8b", "dgx-h100", 8, strategy="dp=8,recompute=none", global_batch=8, stack="vllm")


def test_cli_unknown_training_stack_one_line_exit_2():
    result = CliRunner().invoke(app, ["simulate", "--model", "llama-3-8b", "--system", "dgx-h100", "--num-gpus",
                                      "8", "--stack", "nope"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "allowed: megatron-core" in lines[0]


def test_file_stack_loads(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nweight_cast_bytes_per_param: 6\nzero3_gather: parameter\n")
    stack = load_training_stack(str(path))
    assert stack.name == "mine" and stack.weight_cast_bytes_per_param == 6
    assert stack.zero3_gather is GatherIssue.PARAMETER


def test_bad_field_is_one_sentence():
    with pytest.raises(MadmaxError, match="stack"):
        load_training_stack({"name": "x", "unfused": {"norm": {"kernels": 0, "bytes_factor": 2}}})


def _op(name: str, kind: OpKind = OpKind.ELEMENTWISE, params: int = 0) -> Op:
    return Op(name=name, kind=kind, tp=TPSplit.SEQUENCE, moved_elems_per_token=2.0, params=params)


@pytest.mark.parametrize(("name", "kind", "role"), [
    ("layer.norm1", OpKind.ELEMENTWISE, OpRole.NORM), ("head.norm", OpKind.ELEMENTWISE, OpRole.NORM),
    ("layer.q_norm", OpKind.ELEMENTWISE, OpRole.NORM), ("layer.act", OpKind.ELEMENTWISE, OpRole.ACTIVATION),
    ("layer.expert_act", OpKind.ELEMENTWISE, OpRole.ACTIVATION), ("head.loss", OpKind.ELEMENTWISE, OpRole.LOSS),
    ("layer.residual1", OpKind.ELEMENTWISE, None), ("layer.up", OpKind.GEMM, None)])
def test_op_roles(name, kind, role):
    assert op_role(_op(name, kind)) is role


def test_unfused_norm_becomes_seven_kernels_of_nine_times_the_bytes():
    stack = load_training_stack("pytorch")
    fused = [Kernel(KernelKind.MEMORY, "elementwise", flops=70.0, num_bytes=1000.0)]
    out = kernels_of(stack, _op("layer.norm1"), fused)
    assert len(out) == 7
    assert sum(k.num_bytes for k in out) == pytest.approx(9 * 1000.0)
    assert sum(k.flops for k in out) == pytest.approx(70.0)
    # a launch-only auxiliary kernel and an op no stack splits pass through
    aux = [Kernel(KernelKind.LAUNCH, "elementwise", batch=2)]
    assert kernels_of(stack, _op("layer.norm1"), aux) == aux
    assert kernels_of(stack, _op("layer.residual1"), fused) == fused
    assert kernels_of(load_training_stack("megatron-core"), _op("layer.norm1"), fused) == fused


def test_weight_cast_kernel_per_tensor_six_bytes_per_param():
    kernels = cast_kernels(load_training_stack("pytorch"), [1000.0, 0.0, 500.0])
    assert [k.num_bytes for k in kernels] == [6000.0, 3000.0]
    assert cast_kernels(load_training_stack("deepspeed"), [1000.0]) == []


def test_per_parameter_gathers_skip_persistent_tensors():
    deepspeed = load_training_stack("deepspeed")
    # (elements, elements on this rank): a bias of 36864 and a norm of 24576 stay whole (< 1e5)
    tensors = [(453_000_000, 226_500_000.0), (36_864, 18_432.0), (24_576, 24_576.0), (150_000_000, 75e6)]
    assert deepspeed.gather_sizes(tensors) == (226_500_000.0, 75e6)
    assert load_training_stack("fsdp2").gather_sizes(tensors) is None
    assert deepspeed.gather_sizes([(24_576, 24_576.0)]) == ()


@given(st.text(min_size=1, max_size=20))
def test_any_unknown_name_is_a_config_error(name):
    if name.strip().lower() in CATALOG:
        return
    try:
        stack = load_training_stack(name)
    except ConfigError as exc:  # "allowed:", or "allowed for training:" for a serving engine's name
        assert re.search(r"allowed( for training)?:", str(exc)), str(exc)
        assert "\n" not in str(exc)
    else:
        assert isinstance(stack, TrainingStack)


def test_training_search_refuses_an_unknown_stack_in_one_sentence():
    # Every catalog stack is searched (tests/search/test_search_stack.py); an unknown one is refused with the list.
    from madmax.search.api import find

    with pytest.raises(ConfigError, match="allowed: megatron-core"):
        find("llama-3-8b", "dgx-h100", 8, global_batch=8, stack="nope")


def test_the_result_names_its_stack_in_json_and_in_the_heading_when_not_the_default():
    import json

    args = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    plain = CliRunner().invoke(app, args, env={"COLUMNS": "120"})
    assert plain.exit_code == 0 and "stack" not in plain.output.splitlines()[0]
    chosen = CliRunner().invoke(app, [*args, "--stack", "pytorch"], env={"COLUMNS": "120"})
    assert chosen.exit_code == 0 and chosen.output.splitlines()[0].endswith("(pretrain, bf16, stack pytorch)")
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert data["stack"] == "megatron-core"


@pytest.mark.parametrize("spec", ["x" * 5000, 3, "a\0b", ["pytorch"]])
def test_a_stack_that_is_no_name_nor_file_is_refused_in_one_sentence(spec):
    # A name too long for a path or holding a NUL byte, or not a name at all: never an OSError or TypeError.
    from madmax.config.stack import load_stack

    for load in (load_training_stack, load_stack):
        with pytest.raises(ConfigError, match="neither a catalog"):
            load(spec)
