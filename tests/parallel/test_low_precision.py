"""Low-precision training formats (fp8, mxfp8, nvfp4): cast kernels, weight casts, bf16 layers, refusals.

Numbers are hand-computed from catalog/formats.yaml: fp8 1 byte per element, per-tensor scale, a cast writes
the fp8 copy and its transpose, amax history 1024 fp32 entries for 3 forward and 2 backward tensors per GEMM;
mxfp8 1 byte + one 1-byte scale per 32 (1.03125 B); nvfp4 0.5 byte + one 1-byte scale per 16 (0.5625 B) and a
per-tensor amax pass; activations in bf16 (2 B).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.base import DType
from madmax.config.loaders import load_model
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.errors import ConfigError, MadmaxError
from madmax.parallel.formats import low_precision
from madmax.parallel.kernels import KernelKind
from madmax.parallel.memory import stage_memory
from madmax.parallel.plan import HIGH_PRECISION_SUFFIX, build_plan
from madmax.parallel.tensor import (
    CAST,
    WEIGHT_CAST,
    CastSite,
    Shape,
    backward_kernels,
    cast_sites,
    forward_kernels,
    saved_bytes,
    weight_cast_bytes,
)
from madmax.request import make_task, resolve_request
from madmax.validate.inputs import llama_model
from madmax.workload import build_workload
from madmax.workload.ops import Op, OpKind, TPSplit

T, H, N = 2048, 4096, 12288  # tokens, GEMM input and output widths
QKV = Op(name="layer.qkv", kind=OpKind.GEMM, tp=TPSplit.COLUMN, k=H, n=N, params=H * N, saved_elems_per_token=H)
HISTORY_FWD = 2 * 1024 * 4 * 3  # read and roll-write 1024 fp32 amaxes of input, weight and output
HISTORY_BWD = 2 * 1024 * 4 * 2  # of the output and input gradients


def _shape(dtype: str) -> Shape:
    return Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2, cast=low_precision(DType(dtype)))


def _cast_bytes(kernels) -> float:
    return sum(k.num_bytes for k in kernels if k.category == CAST)


def test_catalog_formats():
    fp8, mx, nv = (low_precision(DType(d)) for d in ("fp8", "mxfp8", "fp4"))
    assert (fp8.bytes_per_element, mx.bytes_per_element, nv.bytes_per_element) == (1, 1.03125, 0.5625)
    assert (fp8.amax_history, mx.amax_history, nv.amax_history) == (1024, 0, 0)
    assert (nv.bf16_first, nv.bf16_last) == (2, 8)
    assert low_precision(DType.BF16) is None


@pytest.mark.parametrize(("dtype", "per_element", "history"), [
    ("fp8", 2 + 2 * 1, HISTORY_FWD),  # read bf16, write fp8 and its transpose
    ("mxfp8", 2 + 2 * 1.03125, 0),  # rowwise and columnwise copies, each with its 1/32 B of scales
    ("fp4", 2 * 2 + 2 * 0.5625, 0),  # amax pass + cast read, two nvfp4 copies
])
def test_forward_cast_of_one_gemm_input(dtype, per_element, history):
    kernels = forward_kernels(QKV, _shape(dtype), flash=True)
    assert _cast_bytes(kernels) == T * H * per_element + history
    gemm = next(k for k in kernels if k.kind is KernelKind.GEMM)
    assert gemm.dtype is None  # the plan's dtype: fp8, mxfp8 or fp4 peak


def test_backward_cast_of_one_gemm_output_gradient():
    # dY is T x N: 2048 * 12288 = 25,165,824 elements, 4 bytes each (read 2, write 1 + 1), plus 2 histories.
    assert _cast_bytes(backward_kernels(QKV, _shape("fp8"), flash=True)) == 25_165_824 * 4 + HISTORY_BWD == 100_679_680


def test_fused_norm_cast_leaves_the_transpose():
    # LayerNormLinear: the norm writes fp8 (1 B instead of 2); the transpose reads it and writes 1 B.
    kernels = forward_kernels(QKV, _shape("fp8"), flash=True, cast=CastSite.FUSED)
    assert _cast_bytes(kernels) == T * H * (1 - 2 + 2 * 1) + HISTORY_FWD == 8_413_184
    # mxfp8 quantizes both copies in the norm: no pass left; a shared input: no cast at all.
    assert _cast_bytes(forward_kernels(QKV, _shape("mxfp8"), flash=True, cast=CastSite.FUSED)) == 0
    assert _cast_bytes(forward_kernels(QKV, _shape("fp8"), flash=True, cast=CastSite.SHARED)) == 0


def test_output_layer_and_router_stay_bf16_in_any_block():
    # The multi-token-prediction block's own LM head ("mtp.lm") and the MoE router are not TE modules.
    for op in (dataclasses.replace(QKV, name="mtp.lm"), dataclasses.replace(QKV, name="layer.router",
                                                                             tp=TPSplit.SEQUENCE)):
        kernels = forward_kernels(op, _shape("fp8"), flash=True) + backward_kernels(op, _shape("fp8"), flash=True)
        assert _cast_bytes(kernels) == 0
        assert {k.dtype for k in kernels if k.kind is KernelKind.GEMM} == {DType.BF16}


@pytest.mark.parametrize(("dtype", "per_element"), [("bf16", 2), ("fp8", 1), ("mxfp8", 1.03125), ("fp4", 0.5625)])
def test_a_low_precision_gemm_saves_its_cast_input(dtype, per_element):
    # Transformer Engine keeps the cast copy of a GEMM's input for its weight gradient, not the 16-bit one:
    # T tokens x H inputs of the QKV GEMM at the format's bytes per element (scales included).
    shape = _shape(dtype) if dtype != "bf16" else Shape(batch=1, seq_len=T, tp=1, cp=1, sp=False, act_bytes=2)
    assert saved_bytes(QKV, shape, flash=True) == T * H * per_element


def test_frozen_and_bf16_gemms_save_16_bit_inputs():
    fp8 = _shape("fp8")
    frozen = dataclasses.replace(QKV, trainable=False)
    lm_head = dataclasses.replace(QKV, name="model.lm")  # outside Transformer Engine: a bf16 GEMM
    assert saved_bytes(frozen, fp8, flash=True) == saved_bytes(lm_head, fp8, flash=True) == T * H * 2


def test_weight_cast_bytes_per_parameter():
    fp8, mx, nv = (low_precision(DType(d)) for d in ("fp8", "mxfp8", "fp4"))
    assert weight_cast_bytes(1e9, fp8, 2) == 4e9  # read bf16, write fp8 + transpose
    assert weight_cast_bytes(1e9, mx, 2) == 4.0625e9
    assert weight_cast_bytes(1e9, nv, 2) == 5.125e9  # amax pass, read, two nvfp4 copies


SPEC = load_model(llama_model("tiny-llama", 16, 1024, 16, 8, 2816, 32000, 2048))
# GEMM weights of one layer: qkv 1024 x (1024 + 2 * 512), out 1024^2, up, gate, down 1024 x 2816 each.
LAYER_GEMM_PARAMS = 1024 * 2048 + 1024 * 1024 + 3 * 1024 * 2816
assert LAYER_GEMM_PARAMS == 11_796_480


def _plan(dtype: str, strategy: str = "tp=1,pp=1,mbs=1,recompute=none", global_batch: int = 4, spec=SPEC,
          num_gpus: int = 1):
    s, gb = resolve_strategy(parse_strategy(strategy), num_gpus=num_gpus, model_name=spec.name,
                             constraints=spec.parallel_constraints(), num_pipeline_units=spec.num_pipeline_units,
                             global_batch=global_batch, seq_len=2048)
    return build_plan(build_workload(spec, Task(kind=TaskKind.PRETRAIN)), s, domain_size=8, seq_len=2048,
                      global_batch=gb, dtype=DType(dtype))


def test_llama_layer_cast_sites():
    ops = next(b for b in build_workload(SPEC, Task(kind=TaskKind.PRETRAIN)).blocks if b.is_layer).ops
    sites = {op.name.rsplit(".", 1)[-1]: s for op, s in zip(ops, cast_sites(ops, low_precision(DType.FP8)),
                                                             strict=True) if op.kind is OpKind.GEMM}
    own, fused, shared = CastSite.OWN, CastSite.FUSED, CastSite.SHARED
    assert sites == {"qkv": (fused, own), "out": (own, own), "up": (fused, own), "gate": (shared, own),
                     "down": (own, own)}


def test_weights_cast_once_per_step_and_cached():
    plan = _plan("fp8")  # 4 micro-batches: a quarter of the cast per micro-batch
    layer = plan.units["layer"]
    (cast,) = [k for k in layer.fwd if k.category == WEIGHT_CAST]
    assert cast.num_bytes == LAYER_GEMM_PARAMS * 4 / 4
    assert not [k for k in layer.bwd if k.category == WEIGHT_CAST]
    # The fp8 weights and transposes (2 B per parameter) and 5 GEMMs' histories (1024 x 4 B x 5) stay all step.
    assert layer.cast_cache_bytes == LAYER_GEMM_PARAMS * 2 + 5 * 1024 * 4 * 5 == 23_695_360
    bf16 = stage_memory(_plan("bf16"), 0, 0.0)
    assert stage_memory(plan, 0, 0.0).weights_bytes - bf16.weights_bytes == 16 * 23_695_360


def test_fp8_layer_saves_cast_gemm_inputs_and_the_attention_output():
    # Per token of tiny-llama (h 1024, FFN 2816, flash attention, no recompute): the QKV and up/gate inputs
    # (norm outputs, cast by LayerNormLinear) and the down projection's input drop from 2 B to 1 B per
    # element; the output projection's input is flash attention's output, kept in bf16 by the attention,
    # plus its fp8 copy (2 -> 3 B). fp8 - bf16 = -1024 - 1024 - 2816 + 1024 = -3840 B per token.
    fp8, bf16 = _plan("fp8").units["layer"], _plan("bf16").units["layer"]
    assert fp8.saved_bytes - bf16.saved_bytes == 2048 * -3840


def test_lm_head_and_attention_stay_bf16():
    plan = _plan("fp8")
    head = plan.units["head"]
    assert [k.dtype for k in head.fwd + head.bwd if k.kind is KernelKind.GEMM] == [DType.BF16] * 3
    assert not [k for k in head.fwd + head.bwd if k.category in (CAST, WEIGHT_CAST)]
    assert {k.dtype for k in plan.units["layer"].fwd if k.kind is KernelKind.ATTENTION} == {DType.BF16}


def test_nvfp4_keeps_first_two_and_last_eight_layers_in_bf16():
    plan = _plan("fp4")
    (chunk,) = plan.stages[0]
    layers = [k for k in chunk if k.startswith("layer")]
    bf16 = "layer" + HIGH_PRECISION_SUFFIX
    assert layers == [bf16] * 2 + ["layer"] * 6 + [bf16] * 8
    low, high = plan.units["layer"], plan.units[bf16]
    low_gemms = [k for k in low.fwd + low.bwd if k.kind is KernelKind.GEMM]
    high_gemms = [k for k in high.fwd + high.bwd if k.kind is KernelKind.GEMM]
    assert {k.dtype for k in low_gemms} == {None} and {k.dtype for k in high_gemms} == {DType.BF16}
    # Same model FLOPs, only the rate differs: 6 layers at the fp4 peak, 10 at the bf16 peak.
    assert sum(k.flops for k in low_gemms) == sum(k.flops for k in high_gemms)
    assert not [k for k in high.fwd + high.bwd if k.category in (CAST, WEIGHT_CAST)] and not high.cast_cache_bytes


@settings(max_examples=20, deadline=None)
@given(layers=st.integers(min_value=1, max_value=24))
def test_bf16_layer_count_for_any_depth(layers):
    spec = load_model(llama_model("fuzz-llama", layers, 256, 4, 4, 512, 1000, 2048))
    plan = _plan("fp4", spec=spec)
    keys = [k for chunk in plan.stages[0] for k in chunk if k.startswith("layer")]
    assert len(keys) == layers
    assert sum(k.endswith(HIGH_PRECISION_SUFFIX) for k in keys) == min(layers, 10)


@pytest.mark.parametrize("dtype", ["nvfp4", "mxfp8"])
def test_block_scaled_formats_refused_on_hopper(dtype):
    with pytest.raises(ConfigError, match=r"has no peak on gpu h100-sxm; allowed: .*fp8"):
        resolve_request("llama-3.1-8b", "dgx-h100", task="pretrain", dtype=dtype)


def test_blackwell_takes_them():
    request = resolve_request("llama-3.1-8b", "dgx-b200", task="pretrain", dtype="nvfp4")
    assert request.task.dtype is DType.FP4
    assert request.system.gpu.peak_flops_per_s(DType.MXFP8) == request.system.gpu.peak_flops_per_s(DType.FP8)


def test_mxfp8_is_a_training_recipe():
    with pytest.raises(MadmaxError, match=r"task\.dtype=mxfp8 is a training recipe"):
        make_task("inference", dtype="mxfp8", batch=1, prompt_len=8, output_len=8)


def test_bf16_layers_recompute_like_the_others():
    # recompute_layers=1 with pp=2 (layers 0-7 and 8-15): the first layer of each stage recomputes; both
    # are bf16 (layer 0 among the first two, layer 8 among the last eight).
    plan = _plan("fp4", "tp=1,pp=2,mbs=1,recompute=full,recompute_layers=1", num_gpus=2)
    firsts = [next(k for k in chunk if k.startswith("layer")) for (chunk,) in plan.stages]
    assert firsts == ["layer" + HIGH_PRECISION_SUFFIX + "_recompute"] * 2
    assert plan.units[firsts[0]].recompute and not plan.units["layer" + HIGH_PRECISION_SUFFIX].recompute


def test_fp8_primary_weights_replace_the_bf16_copy():
    # fp8_params: the fp8 weight and its transpose are the weights (2 B per GEMM parameter instead of bf16 2 B
    # plus the 2 B cached copies); norms and the embedding keep bf16.
    plain, primary = _plan("fp8"), _plan("fp8", "tp=1,pp=1,mbs=1,recompute=none,fp8_params=1")
    layer, layer_p = plain.units["layer"], primary.units["layer"]
    assert layer.cast_cache_bytes - layer_p.cast_cache_bytes == LAYER_GEMM_PARAMS * 2
    assert stage_memory(plain, 0, 0.0).weights_bytes - stage_memory(primary, 0, 0.0).weights_bytes == (
        16 * LAYER_GEMM_PARAMS * 2)
    # No cast from bf16: the optimizer wrote the fp8 weights, the transpose is made once per step (read and
    # write 1 B per parameter), a quarter of it in each of the 4 micro-batches.
    (cast,) = [k for k in layer_p.fwd if k.category == WEIGHT_CAST]
    assert cast.num_bytes == LAYER_GEMM_PARAMS * 2 / 4


def test_fp8_primary_weights_are_gathered_in_fp8():
    plan = _plan("fp8", "tp=1,pp=1,mbs=1,recompute=none,zero=1,fp8_params=1", global_batch=8, num_gpus=2)
    layer = plan.units["layer"]
    norms = layer.trainable_params - LAYER_GEMM_PARAMS  # two RMSNorm weights of 1024
    assert norms == 2 * 1024
    gathered = layer.trainable_params * layer.gather_width("dp", plan.data, layer.trainable_params, trainable=True)
    assert gathered == pytest.approx(norms * 2 + LAYER_GEMM_PARAMS * 1)


def test_fp8_primary_weights_need_fp8():
    with pytest.raises(MadmaxError, match=r"strategy.fp8_params needs dtype=fp8 .* got dtype=bf16"):
        _plan("bf16", "tp=1,pp=1,mbs=1,recompute=none,fp8_params=1")
    assert "fp8_params=1" in parse_strategy("tp=2,fp8_params=1").describe()
    with pytest.raises(MadmaxError, match=r"strategy.fp8_params .*zero <= 2.* got zero=3"):
        _plan("fp8", "tp=1,pp=1,mbs=1,recompute=none,zero=3,fp8_params=1", global_batch=8, num_gpus=2)
