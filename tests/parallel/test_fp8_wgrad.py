"""fp8 weight-gradient GEMMs at their own rate (`ComputeModel.wgrad_fraction`, catalog
calibration/fp8_wgrad.yaml fitted by `madmax.validate.wgrad_fit`)."""

from __future__ import annotations

import pytest
import yaml

from madmax.config.base import DType
from madmax.config.loaders import load_gpu
from madmax.config.model import DecoderModel
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task
from madmax.errors import ConfigError
from madmax.hardware.compute import compute_model
from madmax.hardware.profile import catalog_path, catalog_wgrad_fractions, load_profile
from madmax.parallel.kernels import KernelKind
from madmax.parallel.plan import build_plan
from madmax.program.costs import kernel_s
from madmax.validate.wgrad_fit import with_wgrad
from madmax.workload import build_workload

SMALL = DecoderModel(name="small", num_layers=4, hidden_size=2048, num_heads=16, ffn_hidden_size=8192,
                     vocab_size=32000, max_seq_len=4096)


def _layer(dtype: DType):
    s, gb = resolve_strategy(parse_strategy("mbs=2,recompute=none"), num_gpus=1, model_name=SMALL.name,
                             constraints={}, num_pipeline_units=SMALL.num_layers, global_batch=2, seq_len=4096)
    plan = build_plan(build_workload(SMALL, Task(kind="pretrain")), s, domain_size=8, seq_len=4096,
                      global_batch=gb, dtype=dtype)
    return plan.units["layer"]


def test_only_weight_gradients_slow_down_and_by_exactly_one_over_r():
    gpu = load_gpu("h100")
    unit = _layer(DType.FP8)
    base = load_profile(None).model_copy(update={"wgrad_fraction": {}})
    plain, half = compute_model(gpu, base), compute_model(gpu, with_wgrad(base, 0.5))
    gemms = [k for k in (*unit.fwd, *unit.bwd) if k.kind is KernelKind.GEMM]
    # QKV, output, up and down: 4 weight gradients in the plan's fp8 (dtype None), each twice as long at r = 0.5
    assert sum(k.wgrad for k in gemms) == 4 and all(k.dtype in (None, DType.FP8) for k in gemms if k.wgrad)
    for k in gemms:
        ratio = kernel_s(half, k, DType.FP8) / kernel_s(plain, k, DType.FP8)
        assert ratio == pytest.approx(2.0 if k.wgrad else 1.0, rel=1e-12)
    # bf16 weight gradients keep their rate
    bf16 = [k for k in _layer(DType.BF16).bwd if k.kind is KernelKind.GEMM and k.wgrad]
    assert bf16 and all(kernel_s(half, k, DType.BF16) == kernel_s(plain, k, DType.BF16) for k in bf16)


def test_the_fit_is_on_record_but_not_applied():
    """The fitted rate failed the rule for fits (it worsens the fp8 rows of the source it never saw,
    docs/calibration.md): kept with its provenance, not applied by default."""
    table = yaml.safe_load(catalog_path("calibration/fp8_wgrad.yaml").read_text(encoding="utf-8"))
    assert table["wgrad_fraction"]["fp8"] == pytest.approx(0.566, rel=1e-3) and table["adopted"] is False
    assert catalog_wgrad_fractions() == {}
    fit = table["fit"]
    assert (fit["train_rows"], fit["held_out_rows"]) == (15, 12)
    assert fit["errors_after"]["held_out"]["median"] < fit["errors_before"]["held_out"]["median"]
    # the default profile takes the forward rate; a profile may give its own
    gpu = load_gpu("h100")
    assert compute_model(gpu, load_profile(None)).wgrad_fraction(DType.FP8) == 1.0
    assert compute_model(gpu, with_wgrad(load_profile(None), 0.5)).wgrad_fraction(DType.FP8) == 0.5
    assert compute_model(gpu, load_profile(None)).wgrad_fraction(DType.BF16) == 1.0


@pytest.mark.parametrize("value", [0, 1.5, -0.2])
def test_a_profile_rate_outside_0_1_is_refused(tmp_path, value):
    profile = load_profile(None).model_dump(mode="json")
    profile["wgrad_fraction"] = {"fp8": value}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(profile))
    with pytest.raises(ConfigError, match=r"profile\.wgrad_fraction\.fp8"):
        load_profile(path)


def test_an_fp8_run_says_which_rate_its_weight_gradients_take():
    import madmax as mm

    run = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 32}
    profiled = mm.simulate(**run, dtype="fp8", calibration=with_wgrad(load_profile(None), 0.566)).assumptions
    assert any(a.startswith("fp8 weight-gradient GEMMs at 0.566 of a forward-layout GEMM's rate") for a in profiled)
    assert not any("weight-gradient" in a for a in mm.simulate(**run, dtype="fp8").assumptions)  # rate 1: nothing said
