"""Quantized serving formats (issue 27 part 5): int8 W8A8 on int8 tensor cores, int4 weight-only (AWQ/GPTQ),
MXFP4 weights (W4A8 where the GPU has MXFP8 tensor cores, weight-only elsewhere); refused where they do not
apply, with one sentence."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.base import DType
from madmax.errors import MadmaxError
from madmax.request import resolve_request
from madmax.serve.deployment import formats

ARGS = {"model": "llama-3.1-8b", "num_gpus": 1, "task": "inference"}
# Llama-3.1-8B: 6,979,584,000 parameters in the layers, the embedding and the head 525,336,576 each (+ norm)
LAYER_PARAMS = 6_979_584_000
EMBED_AND_HEAD = 2 * (1_050_673_152 + 4096)


def fmt(system: str, dtype: str):
    return formats(resolve_request("llama-3.1-8b", system, 1, "inference", dtype=dtype, batch=1, prompt_len=128,
                                   output_len=16))


@pytest.mark.parametrize(("system", "dtype", "gemm", "narrower", "stored"), [
    ("dgx-h100", "int8", DType.INT8, None, 1.0),          # W8A8: int8 tensor cores, 1 B weights
    ("p4d.24xlarge", "int8", DType.INT8, None, 1.0),       # A100: int8 at twice the bf16 peak
    ("dgx-h100", "int4", DType.BF16, 0.515625, 0.515625),  # weight-only: 4 bits + an fp16 scale per 128
    ("dgx-h100", "awq", DType.BF16, 0.515625, 0.515625),   # AWQ and GPTQ are int4 weight-only
    ("dgx-h100", "gptq", DType.BF16, 0.515625, 0.515625),
    ("dgx-h100", "mxfp4", DType.BF16, 0.53125, 0.53125),   # Hopper: MXFP4 weights into bf16 GEMMs
    ("dgx-b200", "mxfp4", DType.MXFP8, 0.53125, 0.53125),  # Blackwell: MXFP4 x MXFP8 (W4A8)
    ("dgx-b200", "fp8", DType.FP8, None, 1.0),
])
def test_formats_by_gpu(system, dtype, gemm, narrower, stored):
    f = fmt(system, dtype)
    assert (f.gemm, f.weight_width, f.weight_bytes_per_param) == (gemm, narrower, stored)


def test_aliases_name_the_format_they_stand_for():
    assert fmt("dgx-h100", "awq").label == "int4" and fmt("dgx-h100", "w8a8").label == "int8"


def test_mxfp4_weights_and_their_memory_bound_decode():
    # 0.53125 B per layer parameter (E2M1 + an E8M0 scale per 32), the embedding and head in bf16.
    mx = api.simulate(**ARGS, system="dgx-h100", batch=1, prompt_len=128, output_len=32, dtype="mxfp4")
    bf = api.simulate(**ARGS, system="dgx-h100", batch=1, prompt_len=128, output_len=32)
    assert mx.weights_bytes_per_gpu == pytest.approx(LAYER_PARAMS * 0.53125 + EMBED_AND_HEAD)
    assert mx.dtype == "mxfp4"
    assert any("MXFP4" in a and "read into bf16 GEMMs" in a for a in mx.assumptions)
    # One request's decode step reads the weights: a quarter of the layers' bytes makes it faster, though
    # the bf16 head and the step's fixed costs keep it above a quarter of the bf16 step.
    assert 0.25 * bf.decode_step_time_s < mx.decode_step_time_s < 0.75 * bf.decode_step_time_s


def test_int8_runs_on_int8_tensor_cores():
    # H100's dense int8 and fp8 peaks are equal (1,979 TOPS): W8A8 and fp8 predict the same steps.
    i8 = api.simulate(**ARGS, system="dgx-h100", batch=4, prompt_len=1024, output_len=16, dtype="int8")
    f8 = api.simulate(**ARGS, system="dgx-h100", batch=4, prompt_len=1024, output_len=16, dtype="fp8")
    assert i8.prefill_time_s == pytest.approx(f8.prefill_time_s, rel=1e-9)
    assert i8.weights_bytes_per_gpu == f8.weights_bytes_per_gpu
    assert any("W8A8" in a and "int8 tensor cores" in a for a in i8.assumptions)
    # A100: int8 tensor cores at twice the bf16 peak make a long prefill faster, not twice (attention, norms)
    a8 = api.simulate(**ARGS, system="p4d.24xlarge", batch=4, prompt_len=1024, output_len=16, dtype="int8")
    a16 = api.simulate(**ARGS, system="p4d.24xlarge", batch=4, prompt_len=1024, output_len=16)
    assert 0.5 * a16.prefill_time_s < a8.prefill_time_s < 0.9 * a16.prefill_time_s


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"system": "p3dn.24xlarge", "dtype": "int8"}, "dtype=int8 has no peak on gpu v100-32gb; allowed: fp16, fp32, "
                                                   "int4, mxfp4"),
    ({"system": "dgx-h100", "dtype": "int8", "task": "pretrain"}, "applies to inference"),
    ({"system": "dgx-h100", "dtype": "int3"}, "allowed: bf16, fp16, fp8, fp32, tf32, mxfp8, fp4, int8, int4, mxfp4"),
    ({"system": "dgx-h100", "dtype": "mxfp4", "model": "vit-h/14"}, "is a weight format of LLM serving"),
])
def test_formats_refused_in_one_sentence(kwargs, says):
    args = {**ARGS, "batch": 1, "prompt_len": 16, "output_len": 4, **kwargs}
    if args.get("task") == "pretrain" or args.get("model") == "vit-h/14":
        args = {k: v for k, v in args.items() if k not in ("prompt_len", "output_len")}
    if args.get("task") == "pretrain":
        args.pop("batch")
    with pytest.raises(MadmaxError) as err:
        api.simulate(**args)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_a_format_the_gpu_lacks_with_exit_2():
    out = CliRunner().invoke(app, ["simulate", "--model", "llama-3.1-8b", "--system", "p3dn.24xlarge",
                                   "--num-gpus", "8", "--task", "inference", "--batch", "1", "--prompt-len", "16",
                                   "--output-len", "4", "--dtype", "w8a8"])
    assert out.exit_code == 2 and "int8 has no peak on gpu v100-32gb" in out.output


def test_layout_search_tries_named_quantized_formats():
    from madmax.search.serving import find_serving

    found = find_serving("llama-3.1-8b", "dgx-h100", 1, prompt_len=512, output_len=64, dtypes=["awq", "mxfp4"],
                         kv_dtypes=["fp8"], exact=2, top=2)
    assert {c.dtype for c in found.candidates} == {"int4", "mxfp4"}
    with pytest.raises(MadmaxError, match=r"allowed: bf16, fp16, fp8, int4, int8, mxfp4$"):
        find_serving("llama-3.1-8b", "dgx-h100", 1, prompt_len=512, output_len=64, dtypes=["fp4"])


def test_every_weight_format_has_a_name_and_bytes():
    from madmax.config.stack import weight_bytes_per_param, weight_format_name

    for dtype in ("fp8", "fp4", "int8", "int4", "mxfp4"):
        assert weight_format_name(dtype) and weight_bytes_per_param(dtype) > 0, dtype
    assert weight_format_name("bf16") is None and weight_bytes_per_param("bf16") is None
