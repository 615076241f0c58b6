"""The launch-floor fit recovers a known floor from rows generated with it; the split is by model shape."""

from dataclasses import replace

import pytest

from madmax.hardware.profile import load_profile
from madmax.validate.datasets import load_vtrain_single
from madmax.validate.launch_fit import (
    fit_launch_floor,
    golden_search,
    predict,
    relative_errors,
    shape_key,
    split_by_shape,
    with_launch,
)


def test_split_alternates_sorted_shapes():
    # vtrain_single: h in {1024, 2048} x L in {12, 16, 20, 24}, 180 rows each. Sorted by (h, L): fitted
    # positions 0, 2, 4, 6 = L12, L20 of each h; held out L16, L24.
    fitted, held = split_by_shape(load_vtrain_single().cases)
    assert len(fitted) == len(held) == 720
    assert {shape_key(c)[:2] for c in fitted} == {(1024, 12), (1024, 20), (2048, 12), (2048, 20)}
    assert {shape_key(c)[:2] for c in held} == {(1024, 16), (1024, 24), (2048, 16), (2048, 24)}


def test_one_shape_has_nothing_held_out():
    all_cases = load_vtrain_single().cases
    cases = [c for c in all_cases if shape_key(c) == shape_key(all_cases[0])][:3]
    assert split_by_shape(cases) == (list(cases), [])


def test_with_launch_scales_the_attention_floor_alike():
    base = load_profile()  # 18.611 us per kernel, 22.3779 us per attention call
    p = with_launch(base, 2 * base.launch_s)
    assert p.launch_s == pytest.approx(2 * 18.611e-6)
    assert p.attention.launch_s == pytest.approx(2 * 22.3779e-6)
    assert p.gemm == base.gemm and p.memory == base.memory


def test_golden_search_finds_a_parabola_minimum():
    assert golden_search(lambda x: (x - 0.3) ** 2, -1.0, 2.0, 1e-6) == pytest.approx(0.3, abs=1e-6)


def test_fit_recovers_a_known_launch_floor():
    # Synthetic rows: 3 rows of each of 4 vTrain shapes, "measured" = predicted with a 45 us floor.
    # The fit starts from the shipped 18.6 us profile and must come back to 45 us.
    cases = load_vtrain_single().cases
    picked = [c for key in sorted({shape_key(c) for c in cases})[:4]
              for c in [c for c in cases if shape_key(c) == key][:3]]
    truth = with_launch(load_profile(), 45e-6)
    synthetic = [replace(r.case, measured=r.predicted) for r in predict(picked, truth)]
    fit = fit_launch_floor(synthetic, load_profile())
    assert fit.launch_s == pytest.approx(45e-6, rel=2e-3)
    assert fit.rows == 12 and fit.loss < 1e-6
    errors = relative_errors(predict(synthetic, with_launch(load_profile(), fit.launch_s)))
    assert errors["count"] == 12 and errors["max"] < 2e-3
