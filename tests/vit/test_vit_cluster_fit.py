"""The fitted cluster of the reference's ViT sheet: the model split, the system and profile it simulates, the
grid search, and the shipped fit's record."""

from __future__ import annotations

import math

import pytest

from madmax.api import simulate
from madmax.config.loaders import load_system
from madmax.validate.datasets import load_vit_reference
from madmax.validate.runner import run_case
from madmax.validate.vit import (
    ClusterFit,
    cluster_system,
    fitted_case,
    grid_minimum,
    load_cluster_fit,
    measured_sha256,
    split_by_model,
    stack_profile,
)


def test_split_fits_every_other_model_by_width_then_layers() -> None:
    fitted, held = split_by_model(load_vit_reference().cases)
    # L (1024), H (1280), 10B (5120), 25B (7680), 60B (10240 x 48), 120B (10240 x 96): L, 10B, 60B fitted
    assert {c.label.split()[0] for c in fitted} == {"ViT-L", "ViT-10B", "ViT-60B"}
    assert {c.label.split()[0] for c in held} == {"ViT-H", "ViT-25B", "ViT-120B"}
    assert len(fitted) == 4 and len(held) == 5


def test_cluster_system_is_dc_a_with_the_fitted_scale_out() -> None:
    system = load_system(cluster_system(8.0), 128)
    dc_a = load_system("dc-a", 128)
    assert system.scale_out.bytes_per_s == pytest.approx(1e9)  # 8 Gbit/s = 1 GB/s
    assert system.scale_up == dc_a.scale_up and system.gpus_per_node == 8 and system.gpu == dc_a.gpu


def test_stack_profile_scales_gemm_and_attention_peaks_capped_at_one() -> None:
    from madmax.hardware.profile import load_profile

    base = load_profile(None)
    half = stack_profile(0.5)
    assert half.gemm.peak_fraction["bf16"] == pytest.approx(0.5 * base.gemm.peak_fraction["bf16"])
    assert half.attention.backward.peak_fraction == pytest.approx(0.5 * base.attention.backward.peak_fraction)
    assert half.launch_s == base.launch_s
    assert stack_profile(10.0).gemm.peak_fraction["bf16"] == 1.0


def test_grid_minimum_refines_between_the_best_points_neighbours() -> None:
    # minimum at B = 10, k = 0.42: the coarse grid finds (8, 0.4); the finer grid, B geometric 4..16 in
    # 9 points (ratio 2**0.25) and k 0.2..0.6 in steps of 0.05, lands on its nearest point (8 x 2**0.25, 0.4)
    value, b, k = grid_minimum(lambda b, k: math.log(b / 10) ** 2 + (k - 0.42) ** 2, [2, 4, 8, 16, 32],
                               [0.2, 0.4, 0.6, 0.8])
    assert b == pytest.approx(8 * 2 ** 0.25) and k == pytest.approx(0.4)
    assert value == pytest.approx(math.log(b / 10) ** 2 + (k - 0.42) ** 2)


def test_a_slower_network_slows_the_network_bound_row() -> None:
    case = next(c for c in load_vit_reference().cases if c.label.startswith("ViT-60B"))
    fast = run_case(fitted_case(case, ClusterFit(200.0, 1.0)), simulate)
    slow = run_case(fitted_case(case, ClusterFit(5.0, 1.0)), simulate)
    plain = run_case(case, simulate)
    assert fast.predicted == pytest.approx(plain.predicted, rel=1e-6)  # dc-a's own 200 Gbit/s, shipped profile
    assert slow.predicted < fast.predicted / 3
    assert any("Gbit/s scale-out per GPU" in note for note in fitted_case(case, ClusterFit(5.0, 1.0)).assumptions)


def test_the_shipped_fit_is_recorded_with_its_data() -> None:
    from importlib import resources

    import yaml

    fit = load_cluster_fit()
    assert 1.0 <= fit.scale_out_gbit_per_s <= 400.0 and 0.1 <= fit.compute_scale <= 1.0
    text = resources.files("madmax.validate").joinpath("data", "reference", "vit_cluster_fit.yaml").read_text()
    record = yaml.safe_load(text)
    assert measured_sha256() in record["data"]
    assert len(record["fitted_rows"]) == 4 and len(record["held_out_rows"]) == 5
