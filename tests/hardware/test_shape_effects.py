"""Shape effects of the compute model: flash attention's head-dimension padding, by hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.base import DType
from madmax.config.hardware import GPU
from madmax.hardware.compute import compute_model, flash_head_dim, flash_head_dims
from madmax.hardware.profile import ComputeProfile

from .test_compute import PAPER_GPU, ROUND_PROFILE  # round numbers, redone on paper

GiB = 2**30
BF16 = DType.BF16


def paper():
    return compute_model(PAPER_GPU, ROUND_PROFILE)


def test_flash_attention_head_dims_are_flashattention2s_kernels():
    # FlashAttention-2 static_switch.h HEADDIM_SWITCH (catalog/calibration/flash_attention.yaml).
    assert flash_head_dims() == (32, 64, 96, 128, 160, 192, 256)


@pytest.mark.parametrize(("head_dim", "padded"), [
    (1, 32), (32, 32), (48, 64), (64, 64), (80, 96), (96, 96), (112, 128), (128, 128), (144, 160),
    (160, 160), (176, 192), (200, 256), (256, 256),
    (320, 320),  # above the largest kernel: no kernel, costed unpadded
])
def test_a_head_runs_in_the_kernel_of_the_next_compiled_width(head_dim, padded):
    assert flash_head_dim(head_dim) == padded


def test_prefill_attention_of_an_80_wide_head_costs_the_96_wide_kernel_by_hand():
    # Causal, b=1, h=32, s=8192, d=80 padded to 96: F = 4 * 32 * 96 * 8192^2 / 2 = 4.1231686e11 FLOP;
    # forward F * (8192 + 1000) / 8192 / (0.6 * 1e15) = 7.710810e-4 s (the 128-wide time, 1.028108e-3 s,
    # times 96/128). HBM: 2 B * 2 * 80 * 2 * 32 * 8192 = 1.68e8 B, 1.9e-4 s: below it.
    model = paper()
    t80 = model.attention_s(1, 32, 32, 8192, 8192, 80, True, BF16)
    assert t80 == pytest.approx(7.710810e-4, rel=1e-6)
    assert t80 == model.attention_s(1, 32, 32, 8192, 8192, 96, True, BF16)
    # Backward, 5/2 the padded FLOPs: 5/2 F * (8192 + 2000) / 8192 / (0.5 * 1e15) = 2.564901e-3 s.
    assert model.attention_s(1, 32, 32, 8192, 8192, 80, True, BF16, backward=True) == pytest.approx(
        2.564901e-3, rel=1e-6)


def test_padding_adds_flops_not_bytes_by_hand():
    # Decode (one query over 32768 keys, 32 query and 8 KV heads, d = 80) is memory-bound: the cache is
    # read at its real width: bytes = 2 B * 2 * 80 * (32 + 8 * 32768) = 83,896,320;
    # t = 2e-6 + bytes / 0.9e12 = 9.521813e-5 s (compute at d = 96: 4 * 32 * 96 * 32768 FLOP, 0.7 us).
    t = paper().attention_s(1, 32, 8, 1, 32768, 80, False, BF16)
    assert t == pytest.approx(9.521813e-5, rel=1e-6)


def test_variable_length_attention_is_padded_too():
    model = paper()
    segments = ((4096, 4096.0), (2048, 6144.0))
    assert (model.attention_varlen_s(segments, 32, 32, 112, True, BF16)
            == model.attention_varlen_s(segments, 32, 32, 128, True, BF16))


@settings(max_examples=200, deadline=None)
@given(d=st.integers(1, 320), grow=st.integers(1, 64), s=st.integers(1, 16384), backward=st.booleans())
def test_a_wider_head_never_takes_less_time(d, grow, s, backward):
    model = paper()
    assert (model.attention_s(2, 16, 4, s, s, d + grow, True, BF16, backward)
            >= model.attention_s(2, 16, 4, s, s, d, True, BF16, backward))


def test_the_calibration_fit_counts_the_padded_flops():
    # A measured 80-wide row is fitted with the FLOPs of the 96-wide kernel, as the model predicts it,
    # and with the bytes of its real width: 4 * 8 * 96 * 2048^2 / 2 FLOP; 2 * 2 B * 80 * 2 * 8 * 2048 B.
    from madmax.hardware.calibration import _prefill_columns

    row = {"batch": 1, "heads": 8, "seq": 2048, "head_dim": 80, "fwd_s": 1e-3, "fwd_bwd_s": 3e-3}
    flops, num_bytes, _, _ = _prefill_columns([row], backward=False)
    assert flops[0] == pytest.approx(4 * 8 * 96 * 2048**2 / 2)
    assert num_bytes[0] == pytest.approx(2 * 2 * 80 * 2 * 8 * 2048)


# ---- k0 and n0 scaled by a dtype's peak (GemmFit.shape_scaling = "peak") -------------------------------------

def _two_dtype_profile(scaling: str) -> ComputeProfile:
    data = ROUND_PROFILE.model_dump()
    data["reference_peaks"]["flops_per_s"] = {"bf16": 1e15, "fp8": 2e15}
    data["gemm"]["peak_fraction"] = {"bf16": 0.5, "fp8": 0.5}
    data["gemm"]["shape_scaling"] = scaling
    return ComputeProfile.model_validate(data)


TWO_DTYPE_GPU = GPU(name="paper-gpu-fp8", flops_per_s={"bf16": 1e15, "fp8": 2e15}, hbm_bytes=80 * GiB,
                    hbm_bytes_per_s=1e12, tdp_w=700)


def test_peak_scaling_doubles_k0_and_n0_for_a_dtype_twice_as_fast():
    import math
    cm = compute_model(TWO_DTYPE_GPU, _two_dtype_profile("peak"))
    m = k = n = 2000
    # fp8: k0 = n0 = 1000 * 2e15/1e15 = 2000, e = 0.5 (1 - e^-1)^2; t = 2 m k n / (2e15 e)
    e = 0.5 * (1 - math.exp(-1)) ** 2
    assert cm.gemm_s(m, k, n, DType.FP8) == pytest.approx(2 * m * k * n / (2e15 * e))
    # bf16 keeps the fitted k0 = n0 = 1000: e = 0.5 (1 - e^-2)^2
    e16 = 0.5 * (1 - math.exp(-2)) ** 2
    assert cm.gemm_s(m, k, n, BF16) == pytest.approx(2 * m * k * n / (1e15 * e16))
    # 'shared' (profiles fitted before the rule): fp8 uses bf16's shape
    shared = compute_model(TWO_DTYPE_GPU, _two_dtype_profile("shared"))
    assert shared.gemm_s(m, k, n, DType.FP8) == pytest.approx(2 * m * k * n / (2e15 * e16))


def test_shipped_fp8_gemms_within_six_percent_of_the_h200_measurements():
    from madmax.hardware.calibration import load_records, predictions
    from madmax.hardware.profile import load_profile

    rows = [r for r in load_records() if r.get("kind") == "gemm" and r["dtype"].startswith("fp8")]
    pairs = predictions(load_profile(None), rows)["gemm"]
    assert len(pairs) == 3
    for predicted, measured in pairs:
        assert predicted / measured - 1 == pytest.approx(0, abs=0.06)
