"""Compute cost model: the roofline by hand on a round-number profile, and the shipped H200 calibration."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.base import DType
from madmax.config.hardware import GPU
from madmax.errors import ConfigError
from madmax.hardware.compute import ComputeModel, compute_model, grouped_gemm_terms
from madmax.hardware.profile import ComputeProfile, load_profile

GiB = 2**30
BF16 = DType.BF16

# Round numbers so that every expected value below can be redone on paper.
ROUND_PROFILE = ComputeProfile.model_validate({
    "device": "paper", "software": "none", "source": "this test",
    "reference_peaks": {"flops_per_s": {"bf16": 1e15}, "hbm_bytes_per_s": 1e12},
    "launch_s": 10e-6,
    "memory": {"latency_s": 2e-6, "copy_fraction": 0.8},
    "gemm": {"reference_dtype": "bf16", "peak_fraction": {"bf16": 0.5}, "k0": 1000, "n0": 1000,
             "read_fraction": 0.9},
    "attention": {"launch_s": 20e-6, "read_fraction": 0.9, "forward": {"peak_fraction": 0.6, "kv0": 1000},
                  "backward": {"peak_fraction": 0.5, "kv0": 2000}},
})
PAPER_GPU = GPU(name="paper-gpu", flops_per_s={"bf16": 1e15}, hbm_bytes=80 * GiB, hbm_bytes_per_s=1e12, tdp_w=700)

# The H200 as in the catalog (NVIDIA datasheet, dense peaks) and the A100 80GB (no fp8).
H200 = GPU(name="h200", flops_per_s={"fp64": 67e12, "fp32": 67e12, "tf32": 494.5e12, "bf16": 989e12,
                                     "fp16": 989e12, "fp8": 1979e12, "int8": 1979e12},
           hbm_bytes=141 * GiB, hbm_bytes_per_s=4.8e12, tdp_w=700)
H100 = H200.model_copy(update={"name": "h100-sxm", "hbm_bytes_per_s": 3.35e12})
A100 = GPU(name="a100-80gb", flops_per_s={"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12,
                                          "fp16": 312e12, "int8": 624e12},
           hbm_bytes=80 * GiB, hbm_bytes_per_s=2.039e12, tdp_w=400)


def paper() -> ComputeModel:
    return compute_model(PAPER_GPU, ROUND_PROFILE)


def test_big_gemm_is_compute_bound_by_hand():
    # 8192^3: e = 0.5 * (1 - exp(-8.192))^2 = 0.4997232; F = 2 * 8192^3 = 1.0995116e12 FLOP
    # t = F / (1e15 * e) = 2.200241e-3 s; memory 2e-6 + 2*3*8192^2 / 0.9e12 = 4.49e-4 s is below it.
    assert paper().gemm_s(8192, 8192, 8192, BF16) == pytest.approx(2.200241e-3, rel=1e-6)


def test_decode_gemm_is_memory_bound_by_hand():
    # m = 1: bytes = 2 * (8192 + 8192^2 + 8192) = 134,250,496; t = 2e-6 + bytes / 0.9e12 = 1.511672e-4 s
    # (compute: 2*8192^2 / (1e15 * 0.4997) = 2.7e-7 s; launch floor 1e-5 s).
    assert paper().gemm_s(1, 8192, 8192, BF16) == pytest.approx(1.511672e-4, rel=1e-6)


def test_tiny_kernels_cost_the_launch_floor():
    assert paper().gemm_s(16, 16, 16, BF16) == 10e-6
    assert paper().memory_s(1000) == 10e-6
    assert paper().attention_s(1, 1, 1, 1, 16, 64, False, BF16) == 20e-6


def test_memory_bound_kernel_by_hand():
    # 1 GB read + written: 2e-6 + 1e9 / (0.8 * 1e12) = 1.252e-3 s
    assert paper().memory_s(1e9) == pytest.approx(1.252e-3, rel=1e-12)


def test_decode_attention_streams_the_kv_cache_by_hand():
    # 1 query over 32768 keys, 32 query heads, 8 KV heads, d = 128, bf16:
    # bytes = 2 B * 2 * 128 * (32*1 + 8*32768) = 134,234,112; t = 2e-6 + bytes / 0.9e12 = 1.511490e-4 s
    t = paper().attention_s(1, 32, 8, 1, 32768, 128, True, BF16)
    assert t == pytest.approx(1.511490e-4, rel=1e-6)


def test_prefill_attention_forward_and_backward_by_hand():
    # Causal, b=1, h=32, s=8192, d=128: F = 4 * 32 * 128 * 8192^2 / 2 = 5.4975581e11 FLOP
    # forward: F * (8192 + 1000) / 8192 / (0.6 * 1e15) = 1.028108e-3 s
    # backward: 5/2 F * (8192 + 2000) / 8192 / (0.5 * 1e15) = 3.419868e-3 s
    model = paper()
    assert model.attention_s(1, 32, 32, 8192, 8192, 128, True, BF16) == pytest.approx(1.028108e-3, rel=1e-6)
    assert model.attention_s(1, 32, 32, 8192, 8192, 128, True, BF16, backward=True) == pytest.approx(
        3.419868e-3, rel=1e-6)
    # Without the mask, twice the pairs: twice the compute-bound time.
    assert model.attention_s(1, 32, 32, 8192, 8192, 128, False, BF16) == pytest.approx(2 * 1.028108e-3, rel=1e-6)


def test_big_gemm_on_h200_is_within_10_percent_of_the_measured_4096_cube():
    # Measured (calibration/h200_kernels.jsonl): bf16 4096^3 in 186.80 us = 735.7 TFLOP/s = 0.744 of 989.
    measured_s = 1.8680158e-4
    t = compute_model(H200).gemm_s(4096, 4096, 4096, BF16)
    assert abs(t / measured_s - 1) < 0.10
    efficiency = 2 * 4096**3 / t / 989e12
    assert 0.744 * 0.9 < efficiency < 0.744 * 1.1


def test_the_shipped_profile_names_device_and_software():
    profile = load_profile()
    assert profile.device == "NVIDIA H200"
    assert "torch 2.11" in profile.software
    assert all(0 < f <= 1 for f in profile.gemm.peak_fraction.values())


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 65536), k=st.integers(1, 65536), n=st.integers(1, 65536),
       dtype=st.sampled_from([DType.BF16, DType.FP8, DType.TF32, DType.FP32, DType.FP16]))
def test_gemm_time_is_never_below_the_peak_roofs(m, k, n, dtype):
    # t >= F / peak and t >= bytes / HBM: no efficiency is above 1.
    t = compute_model(H200).gemm_s(m, k, n, dtype)
    assert t >= 2 * m * k * n / H200.flops_per_s[dtype]
    assert t >= dtype.num_bytes * (m * k + k * n + m * n) / H200.hbm_bytes_per_s


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 32768), k=st.integers(1, 32768), n=st.integers(1, 32768),
       dim=st.sampled_from("mkn"), grow=st.integers(1, 32768))
def test_a_bigger_gemm_never_takes_less_time(m, k, n, dim, grow):
    model = compute_model(H200)
    bigger = {"m": m, "k": k, "n": n}
    bigger[dim] += grow
    assert model.gemm_s(bigger["m"], bigger["k"], bigger["n"], BF16) >= model.gemm_s(m, k, n, BF16)


@settings(max_examples=200, deadline=None)
@given(s=st.integers(1, 65536), grow=st.integers(1, 65536), backward=st.booleans())
def test_longer_attention_never_takes_less_time(s, grow, backward):
    model = compute_model(H200)
    assert (model.attention_s(1, 32, 8, s + grow, s + grow, 128, True, BF16, backward)
            >= model.attention_s(1, 32, 8, s, s, 128, True, BF16, backward))


def test_other_gpus_use_the_h200_efficiencies_as_fractions_of_their_own_peaks():
    h200, h100 = compute_model(H200), compute_model(H100)
    # Same compute peak: a compute-bound GEMM takes the same time on both.
    assert h100.gemm_s(8192, 8192, 8192, BF16) == h200.gemm_s(8192, 8192, 8192, BF16)
    # A big memory-bound kernel scales with HBM bandwidth: t - t_lat in the ratio 4.8 / 3.35.
    lat = load_profile().memory.latency_s
    assert (h100.memory_s(8 * GiB) - lat) / (h200.memory_s(8 * GiB) - lat) == pytest.approx(4.8 / 3.35)
    assert any("applied to gpu h100-sxm" in a for a in h100.assumptions)


def test_a_dtype_the_gpu_lacks_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^gpu a100-80gb has no fp8 peak; allowed dtypes: "
                                          r"fp64, fp32, tf32, bf16, fp16, int8$"):
        compute_model(A100).gemm_s(1024, 1024, 1024, DType.FP8)
    with pytest.raises(ConfigError, match="no fp8 peak"):
        compute_model(A100).attention_s(1, 8, 8, 128, 128, 128, True, DType.FP8)


def test_unmeasured_dtypes_fall_back_and_say_so():
    # fp16 has no rows: it takes bf16's fraction of peak; same peak on H200, so the same time.
    model = compute_model(H200)
    assert model.gemm_s(4096, 4096, 4096, DType.FP16) == model.gemm_s(4096, 4096, 4096, BF16)
    assert any(a.startswith("fp16 GEMM efficiency taken from bf16") for a in model.assumptions)


def test_empty_kernels_cost_nothing_and_negative_sizes_are_errors():
    model = compute_model(H200)
    assert model.gemm_s(0, 4096, 4096, BF16) == 0.0
    assert model.memory_s(0) == 0.0
    assert model.attention_s(0, 32, 8, 128, 128, 128, True, BF16) == 0.0
    with pytest.raises(ConfigError, match="m=-1"):
        model.gemm_s(-1, 4096, 4096, BF16)
    with pytest.raises(ConfigError, match="num_bytes=-5"):
        model.memory_s(-5)
    with pytest.raises(ConfigError, match="q_len <= kv_len"):
        model.attention_s(1, 32, 8, 256, 128, 128, True, BF16)


def test_compute_model_is_cached_and_hashable():
    assert compute_model(H200) is compute_model(H200.model_copy())
    assert compute_model(H200) is not compute_model(H100)
    assert hash(compute_model(H200))
    assert ComputeModel(H200).gemm_s(4096, 4096, 4096, BF16) == compute_model(H200).gemm_s(4096, 4096, 4096, BF16)


def test_profile_from_a_file(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(ROUND_PROFILE.model_dump_json())
    assert compute_model(PAPER_GPU, path).memory_s(1e9) == pytest.approx(1.252e-3, rel=1e-12)
    with pytest.raises(ConfigError, match="does not exist"):
        compute_model(PAPER_GPU, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: x\n")
    with pytest.raises(ConfigError, match="profile"):
        compute_model(PAPER_GPU, bad)


def test_gemm_efficiency_formula():
    from madmax.hardware.compute import gemm_efficiency

    # k = k0, n -> infinity: e_d * (1 - 1/e)
    assert gemm_efficiency(1000, 1e12, 0.5, 1000, 1000) == pytest.approx(0.5 * (1 - 1 / math.e))


# Grouped GEMMs of routed experts (`ComputeModel.grouped_gemm_s`, efficiency.yaml `grouped_gemm`): the rule by
# hand, the Transformer Engine measurement it is calibrated on, and that splitting rows never speeds it up.


def test_grouped_gemm_terms_from_the_catalog():
    assert grouped_gemm_terms() == (64, pytest.approx(1.8e-6))


def test_grouped_gemm_by_hand():
    # Paper profile (e_d 0.5, k0 1000, P 1e15, HBM 1e12 read at 0.9): 16 groups of 2000 rows, k 2000, n 1000.
    # Rows padded to the 64-row tile: 2048. e_k = 0.5 (1 - exp(-2)) = 0.4323324 (no n factor).
    # Per group 2 * 2048 * 2000 * 1000 / (1e15 * 0.4323324) = 1.894839e-5 s, plus t_g 1.8e-6: 2.074839e-5 s;
    # 16 groups: 3.319742e-4 s. Memory: 16 * 2 B * (2000*2000 + 2000*1000 + 2000*1000) = 2.56e8 B,
    # 2e-6 + 2.56e8 / 0.9e12 = 2.864e-4 s, below it.
    per_group = 2 * 2048 * 2000 * 1000 / (1e15 * 0.5 * (1 - math.exp(-2))) + 1.8e-6
    assert per_group == pytest.approx(2.074839e-5, rel=1e-6)
    assert paper().grouped_gemm_s(16, 2000, 2000, 1000, BF16, multi_stream=True) == pytest.approx(3.319742e-4,
                                                                                                   rel=1e-6)
    # One grouped kernel (serving's fused MoE): the dense e(k, n) = 0.4323324 (1 - exp(-1)) = 0.2732861, no t_g:
    # 16 * 2 * 2048 * 2000 * 1000 / (1e15 * 0.2732861) = 4.796147e-4 s.
    assert paper().grouped_gemm_s(16, 2000, 2000, 1000, BF16) == pytest.approx(4.796147e-4, rel=1e-6)


@pytest.mark.parametrize(("groups", "rows", "measured_tflops"), [(8, 4096, 627.903), (16, 2048, 553.945)])
def test_transformer_engine_grouped_gemm_on_h100(groups, rows, measured_tflops):
    # NVIDIA/TransformerEngine PR #2045: general_grouped_gemm (multi-stream cuBLAS, TE 2.7, CUDA 12.9) on H100,
    # Qwen3-30B's expert up-projection (n 768, k 2048): the calibration points of group_s, within 3%.
    model = compute_model(H100, None)
    flops = 2 * groups * rows * 768 * 2048
    predicted = flops / model.grouped_gemm_s(groups, rows, 2048, 768, BF16, multi_stream=True) / 1e12
    assert predicted == pytest.approx(measured_tflops, rel=0.03)


@settings(max_examples=60, deadline=None)
@given(st.integers(6, 16), st.integers(0, 6), st.integers(1, 3), st.sampled_from([256, 768, 2048, 7168]),
       st.sampled_from([256, 768, 2048, 7168]), st.booleans())
def test_the_same_rows_over_more_groups_never_run_faster(log_rows, log_groups, more, k, n, multi_stream):
    rows, groups = 2**log_rows, 2**log_groups
    model = compute_model(H100, None)
    fewer = model.grouped_gemm_s(groups, math.ceil(rows / groups), k, n, BF16, multi_stream=multi_stream)
    split = model.grouped_gemm_s(groups * 2**more, math.ceil(rows / (groups * 2**more)), k, n, BF16,
                                 multi_stream=multi_stream)
    assert split >= fewer
