"""GEMM ceilings per GPU and dtype (efficiency.yaml gemm_ceiling) and NVLink 5 busbw, by hand."""

import copy
import math

import pytest

from madmax.config.base import DType
from madmax.config.loaders import load_gpu, load_system
from madmax.errors import ConfigError
from madmax.hardware import profile as profile_module
from madmax.hardware.calibration import fit_busbw, load_nccl_rows
from madmax.hardware.collectives import Collective, Span, network_model
from madmax.hardware.compute import ComputeModel, compute_model
from madmax.hardware.profile import catalog_path, gemm_ceiling_scale, load_profile

H200_DEVICE = "NVIDIA H200"  # the shipped profile's device
BF16, FP8, FP4, MXFP8, TF32 = DType.BF16, DType.FP8, DType.FP4, DType.MXFP8, DType.TF32


@pytest.mark.parametrize(
    ("gpu", "dtype", "fitted", "expected", "read"),
    [
        # Bekman MAMF table: mamf(gpu, dtype) / mamf(H200, the dtype whose efficiency it takes).
        ("b200", BF16, BF16, 0.776 / 0.803, "bf16"),
        ("b200", FP8, FP8, 0.763 / 0.734, "fp8"),
        ("b200", FP4, FP8, 0.582 / 0.734, "fp4"),      # fp4 over the fp8 it takes its efficiency from
        ("b200", MXFP8, FP8, 0.763 / 0.734, "fp8"),    # no mxfp8 ceiling: the fp8 one
        ("b200", TF32, TF32, 0.776 / 0.803, "bf16"),   # no tf32 ceiling anywhere: the bf16 ratio
        ("gb200", BF16, BF16, 0.729 / 0.803, "bf16"),
        ("gb200", FP8, FP8, 0.723 / 0.734, "fp8"),
        ("b300", BF16, BF16, 0.786 / 0.803, "bf16"),
        ("b300", FP8, FP8, 0.745 / 0.734, "fp8"),
        ("h100-sxm", FP8, FP8, 1.0, "fp8"),            # H100 and H200 share one entry
        ("a100-80gb", BF16, BF16, 0.859 / 0.803, "bf16"),
        # AMD's MAF table (rocm-blogs, Max-Achievable FLOPs part 2): MI300X bf16 708 / fp16 654 / fp8 1273 TFLOPs of
        # 1307.4 / 1307.4 / 2614.9 -> 0.542 / 0.500 / 0.487; MI325X 843 / 794 / 1519 -> 0.645 / 0.607 / 0.581.
        ("mi300x", BF16, BF16, 0.542 / 0.803, "bf16"),
        ("mi300x", DType.FP16, BF16, 0.500 / 0.803, "fp16"),  # fp16 takes bf16's efficiency, its own ceiling
        ("mi300x", FP8, FP8, 0.487 / 0.734, "fp8"),
        ("mi325x", BF16, BF16, 0.645 / 0.803, "bf16"),
        ("mi325x", FP8, FP8, 0.581 / 0.734, "fp8"),
        # MI355X: Bekman's 1565.0 of 2516.6 TFLOPS bf16 (0.622); fp8 and fp4 assumed (0.560, 0.427)
        ("mi355x", BF16, BF16, 0.622 / 0.803, "bf16"),
        ("mi355x", FP4, FP8, 0.427 / 0.734, "fp4"),
        ("gh200-144gb", BF16, BF16, 0.838 / 0.803, "bf16"),
        ("gh200-96gb", FP8, FP8, 0.776 / 0.734, "fp8"),
    ],
)
def test_each_ceiling_is_looked_up_for_the_gpu_it_names(gpu, dtype, fitted, expected, read):
    g = load_gpu(gpu)
    scale, k = gemm_ceiling_scale((g.name, *g.aliases), H200_DEVICE, dtype, fitted)
    assert scale == pytest.approx(expected, rel=1e-12)
    assert k == read


def test_gemm_time_on_b200_in_fp8_by_hand():
    # H200 profile: e_fp8 = 0.687766, k0 = 623.452, n0 = 971.886, scaled for fp8 by 1979/989 ('peak' shape
    # scaling): 1247.53 and 1944.75. 8192^3: e = 0.687766 (1 - exp(-8192/1247.53)) (1 - exp(-8192/1944.75))
    # = 0.676626; peak 4.5e15 * 0.763/0.734 = 4.677793e15 FLOP/s; t = 2*8192^3 / (peak e) = 3.473842e-4 s.
    # The memory roof, 3 * 8192^2 B / (7.7e12 * 0.934571) + 5.9e-6 s = 3.4e-5 s, is far below.
    b200 = compute_model(load_gpu("b200"))
    p = load_profile()
    assert (p.gemm.peak_fraction[FP8], p.gemm.k0, p.gemm.n0) == (0.687766, 623.452, 971.886)
    s = 1979 / 989
    e = 0.687766 * (1 - math.exp(-8192 / (623.452 * s))) * (1 - math.exp(-8192 / (971.886 * s)))
    assert e == pytest.approx(0.676626, rel=1e-5)
    assert b200.gemm_s(8192, 8192, 8192, FP8) == pytest.approx(2 * 8192**3 / (4.5e15 * 0.763 / 0.734 * e), rel=1e-12)
    assert b200.gemm_s(8192, 8192, 8192, FP8) == pytest.approx(3.473842e-4, rel=1e-5)
    # nvfp4: the same efficiency at the fp4 ceiling, 9e15 * 0.582/0.734: 2*8192^3 / (7.136240e15 e) = 2.277098e-4 s,
    # 0.537 of the 9 PFLOPS peak (cuBLASLt's measured 0.582 at 8192^3, less the shape factors).
    assert b200.gemm_s(8192, 8192, 8192, FP4) == pytest.approx(2 * 8192**3 / (9e15 * 0.582 / 0.734 * e), rel=1e-12)


def test_a_profile_measured_on_the_gpu_itself_needs_no_ceiling():
    b200 = load_gpu("b200")
    names = (b200.name, *b200.aliases)
    assert gemm_ceiling_scale(names, "NVIDIA B200", FP8, FP8) == (1.0, "fp8")
    # ... and carries a B200 profile to an H200 by the inverse ratio.
    assert gemm_ceiling_scale(("h200",), "NVIDIA B200", BF16, BF16)[0] == pytest.approx(0.803 / 0.776)
    # A device found as the catalog spells it, without a `devices` line ('NVIDIA A100-SXM4-80GB' -> a100-sxm4-80gb).
    assert gemm_ceiling_scale(names, "NVIDIA A100-SXM4-80GB", BF16, BF16)[0] == pytest.approx(0.776 / 0.859)
    # A device without an entry: no ceiling can be carried (the model keeps the profile's efficiencies).
    assert gemm_ceiling_scale(names, "NVIDIA RTX PRO 6000", BF16, BF16) is None
    own = load_profile().model_copy(update={"device": "NVIDIA RTX PRO 6000"})
    assert any("no measured GEMM ceiling for gpu b200" in a for a in ComputeModel(b200, own).assumptions)


def test_fallbacks_and_assumed_ceilings_are_listed():
    notes = compute_model(load_gpu("b200")).assumptions
    assert "GEMM ceiling of gpu b200 for mxfp8, int8 taken from its fp8 ceiling (none measured in those dtypes; " \
           "efficiency.yaml gemm_ceiling)" in notes
    assert "fp4 GEMM efficiency taken from fp8 (no fp4 measurements)" in notes
    assert not any("not measured on it" in a for a in notes)  # every B200 ceiling is measured
    gb300 = compute_model(load_gpu("gb300")).assumptions
    assert any(a.startswith("GEMM ceiling of gpu gb300 for bf16, fp8, fp4 not measured on it: GB200's") for a in gb300)
    gb200 = compute_model(load_gpu("gb200")).assumptions
    assert any(a.startswith("GEMM ceiling of gpu gb200 for fp4 not measured on it") for a in gb200)
    custom = load_gpu("mi300x").model_copy(update={"name": "my-accelerator", "aliases": []})
    assert "no measured GEMM ceiling for gpu my-accelerator: NVIDIA H200's efficiencies used as they are" in \
        compute_model(custom).assumptions


def test_attention_takes_the_bf16_ceiling_in_every_dtype():
    # GB200: 0.729/0.803 of the datasheet peak for flash attention, whatever the GEMM dtype.
    gb200, paper = load_gpu("gb200"), load_gpu("gb200").model_copy(update={"name": "gb200-unmeasured", "aliases": []})
    args = (1, 64, 8, 8192, 8192, 128, True)
    ratio = compute_model(paper).attention_s(*args, FP8) / compute_model(gb200).attention_s(*args, FP8)
    assert ratio == pytest.approx(0.729 / 0.803, rel=1e-9)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"mamf_fraction": {"fp8": 1.3}}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]\.mamf_fraction\.fp8"),
        ({"mamf_fraction": {"fp9": 0.7}}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]\.mamf_fraction"),
        ({"mamf_fraction": {}}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]\.mamf_fraction"),
        ({"names": []}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]\.names"),
        ({"assumed": ["bf17"]}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]\.assumed"),
        ({"ceiling": 0.8}, r"^efficiency\.compute\.gemm_ceiling\.gpus\[0\]"),
    ],
)
def test_bad_ceiling_entries_are_one_line_config_errors(monkeypatch, entry, match):
    table = copy.deepcopy(profile_module.efficiency_table())
    table["compute"]["gemm_ceiling"]["gpus"][0].update(entry)
    monkeypatch.setattr(profile_module, "efficiency_table", lambda: table)
    profile_module.gemm_ceilings.cache_clear()
    try:
        with pytest.raises(ConfigError, match=match) as err:
            profile_module.gemm_ceilings()
        assert "\n" not in str(err.value)
    finally:
        profile_module.gemm_ceilings.cache_clear()


def test_nvls_all_reduce_on_8_b200_by_hand():
    # NVLink 5: 900 GB/s per GPU per direction, 1.9 us per step (systems.yaml dgx-b200); NVLS from 8 ranks:
    # B = 0.88 * 900e9 = 792 GB/s. 1 GiB: 2*7*1.9e-6 + 2*7/8 * 2**30 / 792e9 = 2.66e-5 + 2.372536e-3 = 2.399136e-3 s
    system = load_system("dgx-b200")
    assert system.scale_up.bytes_per_s == 900e9 and system.scale_up.latency_s == pytest.approx(1.9e-6)
    net = network_model(system)
    assert net.collective_s(Collective.ALL_REDUCE, 2**30, Span(8, 1)) == pytest.approx(2.399136e-3, rel=1e-6)
    # 4 GPUs take the ring: 0.772 * 900e9 = 694.8 GB/s; 2*3*1.9e-6 + 2*3/4 * 2**30 / 694.8e9 = 2.329495e-3 s
    assert net.collective_s(Collective.ALL_REDUCE, 2**30, Span(4, 1)) == pytest.approx(2.329495e-3, rel=1e-6)
    assert net.busbw_bytes_per_s(Collective.ALL_GATHER, Span(8, 1)) == pytest.approx(0.772 * 900e9)
    for name in ("gb200-nvl72", "dgx-b300", "gb300-nvl72"):
        other = network_model(load_system(name))
        assert other.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(8, 1)) == pytest.approx(0.88 * 900e9)


def test_the_nvl72_fraction_is_the_fit_of_the_shipped_sweep():
    # alpha held at the systems' 1.9 us: B = 792 GB/s = 0.880 of 900 GB/s (calibration/SOURCE.md).
    rows = load_nccl_rows(catalog_path("calibration/nccl_gb200_nvl72_all_reduce.csv"))
    fit = fit_busbw(rows, step_latency_s=1.9e-6)
    assert fit["peak_fraction"] == pytest.approx(0.880, abs=5e-4)
    assert fit["median"] < 0.07 and fit["max"] < 0.12
    net = network_model(load_system("gb200-nvl72"))
    for row in rows:
        t = net.collective_s(Collective.ALL_REDUCE, float(row["size_bytes"]), Span(72, 1))
        assert abs(t / (float(row["time_us"]) * 1e-6) - 1) <= fit["max"] + 0.01, row


def test_a_busbw_table_without_an_entry_from_one_rank_is_a_config_error(monkeypatch):
    # {8: 0.88} alone leaves groups of 2-7 without a fraction: refused in one line naming the entry.
    from madmax.hardware import collectives

    table = copy.deepcopy(collectives.efficiency_table())
    entry = next(e for e in table["collectives"]["gpus"] if "b200" in e["names"])
    entry["busbw_fraction"]["all_reduce"] = {8: 0.88}
    monkeypatch.setattr(collectives, "efficiency_table", lambda: table)
    system = load_system("dgx-b200").model_copy(update={"name": "dgx-b200-edited"})
    with pytest.raises(ConfigError, match=r"^efficiency\.yaml nvlink\.all_reduce=\{8: 0\.88\}: need fractions > 0 "
                                          r"and an entry from 1 rank$"):
        network_model(system)


def test_amd_assumed_ceilings_are_listed():
    mi355x = compute_model(load_gpu("mi355x")).assumptions
    expected = "GEMM ceiling of gpu mi355x for fp8, fp4 not measured on it: fp8 from MI325X's"
    assert any(a.startswith(expected) for a in mi355x)
    assert not any("not measured on it" in a for a in compute_model(load_gpu("mi300x")).assumptions)


def test_a_bf16_gemm_on_mi300x_by_hand():
    # The H200 profile's bf16 shape law (same k0, n0) on both; the MI300X's large-GEMM level is rescaled by its
    # ceiling, 0.542/0.803, on its 1307.4 TFLOPS peak. At 8192^3 both are compute bound, so the time ratio is
    # (989e12 x 1) / (1307.4e12 x 0.542/0.803) = 1.120738.
    h200, mi300x = compute_model(load_gpu("h200")), compute_model(load_gpu("mi300x"))
    ratio = mi300x.gemm_s(8192, 8192, 8192, BF16) / h200.gemm_s(8192, 8192, 8192, BF16)
    assert ratio == pytest.approx(989 / (1307.4 * 0.542 / 0.803), rel=1e-9)
    assert ratio == pytest.approx(1.120738, rel=1e-6)
