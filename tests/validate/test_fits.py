"""Leave-one-source-out validation (`madmax.validate.fits`): which fits each row leaves out, and the scores."""

from __future__ import annotations

from dataclasses import replace

import pytest

from madmax.hardware.profile import ComputeProfile
from madmax.validate.datasets import Dataset, load_datasets
from madmax.validate.fits import (
    CROSS,
    WITH,
    Fit,
    Registry,
    cross_source_case,
    cross_source_datasets,
    cross_source_scores,
    fit_effect_datasets,
    fit_effects,
    load_fits,
    task_of,
)
from madmax.validate.runner import RowResult


@pytest.fixture(scope="module")
def shipped() -> dict[str, Dataset]:
    return {d.name: d for d in load_datasets(["vtrain_multi", "nemo", "nvidia_dlrm", "megatron_bridge_moe",
                                              "korthikanti2022", "serving_h100"])}


def test_vtrain_rows_run_under_their_stack_without_its_fitted_floor(shipped):
    case = shipped["vtrain_multi"].cases[0]
    crossed = cross_source_case(case)
    assert crossed.kwargs["stack"] == "megatron-deepspeed"  # the stack its rows ran under (fits.yaml)
    assert crossed.kwargs["calibration"] == "calibration/h200_profile.yaml"  # the prior of vtrain_launch_floor
    assert any("vtrain_launch_floor left out" in a for a in crossed.assumptions)


def test_tf2_rows_take_the_default_profile_for_training_and_inference(shipped):
    cases = shipped["nvidia_dlrm"].cases
    for task in ("training", "inference"):
        case = next(c for c in cases if task_of(c.kwargs) == task)
        crossed = cross_source_case(case)
        assert crossed.kwargs["calibration"] == "calibration/h200_profile.yaml"
        fit = "tf2_xla_floor" if task == "training" else "tf2_graph_call"
        assert any(f"{fit} left out" in a for a in crossed.assumptions)


def test_sources_without_an_adopted_fit_of_their_own_are_unchanged(shipped):
    for name in ("nemo", "korthikanti2022", "megatron_bridge_moe"):  # fp8_wgrad (nemo's) is not adopted
        assert all(cross_source_case(c) is c for c in shipped[name].cases)


def test_a_fit_without_a_prior_leaves_its_source_in_sample_only(shipped):
    assert cross_source_case(shipped["serving_h100"].cases[0]) is None
    _, how = cross_source_datasets(list(shipped.values()))
    assert how == {"vtrain_multi": "rerun", "nemo": "same", "nvidia_dlrm": "rerun", "megatron_bridge_moe": "same",
                   "korthikanti2022": "same", "serving_h100": "in-sample only"}


def test_a_fit_of_several_sources_is_not_silently_left_in(shipped):
    registry = load_fits()
    shared = [f.model_copy(update={"sources": ["vtrain", "nemo"]}) if f.name == "vtrain_launch_floor" else f
              for f in registry.fits]
    with pytest.raises(ValueError, match="must be refitted without vtrain"):
        cross_source_case(shipped["vtrain_multi"].cases[0], Registry(sources=registry.sources, fits=shared))


def test_the_not_adopted_wgrad_fit_is_shown_on_every_fp8_training_row(shipped):
    extra = {d.name: d for d in fit_effect_datasets(list(shipped.values()))}
    assert set(extra) == {f"nemo{WITH}fp8_wgrad", f"megatron_bridge_moe{WITH}fp8_wgrad"}
    nemo = extra[f"nemo{WITH}fp8_wgrad"]
    assert len(nemo.cases) == len(shipped["nemo"].cases) == 27  # every nemo row is fp8 on H100
    bridge = extra[f"megatron_bridge_moe{WITH}fp8_wgrad"]
    assert len(bridge.cases) == 14  # its fp8 rows only; the 5 bf16 rows keep theirs
    profile = bridge.cases[0].kwargs["calibration"]
    assert isinstance(profile, ComputeProfile) and profile.wgrad_fraction == {"fp8": 0.5661}


def _row(case, error_pct):
    return RowResult(case, predicted=case.measured * (1 + error_pct / 100), signed_error_pct=error_pct)


def test_scores_by_hand(shipped):
    """Two sources and their pool: the cross-source column reads the `+cross` re-run, the shipped one the rows."""
    korth, dlrm = shipped["korthikanti2022"].cases[:3], shipped["nvidia_dlrm"].cases[:2]
    rows = [_row(c, e) for c, e in zip(korth, (1.0, -3.0, 5.0), strict=True)]
    rows += [_row(c, e) for c, e in zip(dlrm, (10.0, 20.0), strict=True)]
    rows += [_row(replace(c, dataset="nvidia_dlrm" + CROSS), e) for c, e in zip(dlrm, (-30.0, 50.0), strict=True)]
    scores = {s.name: s for s in cross_source_scores(rows, {"korthikanti2022": "same", "nvidia_dlrm": "rerun"})}
    assert scores["korthikanti2022"].scored == "no fit of its own"
    assert scores["korthikanti2022"].cross == scores["korthikanti2022"].shipped
    assert scores["korthikanti2022"].cross.median_abs_pct == pytest.approx(3.0)
    dl = scores["nvidia_dlrm"]
    assert dl.scored == "cross-source" and set(dl.left_out) <= {"tf2_xla_floor", "tf2_graph_call"} and dl.left_out
    assert dl.cross.median_abs_pct == pytest.approx(40.0) and dl.shipped.median_abs_pct == pytest.approx(15.0)
    assert (dl.cross_beyond, dl.shipped_beyond) == (2, 0)  # beyond 25%
    pooled = scores["all training"]  # dense and dlrm together: |1, 3, 5, 30, 50| cross-source
    assert pooled.cross.rows == 5 and pooled.cross.median_abs_pct == pytest.approx(5.0)


def test_a_fit_effect_pairs_each_row_with_itself(shipped):
    nemo = shipped["nemo"].cases[:2]
    rows = [_row(c, e) for c, e in zip(nemo, (12.0, -8.0), strict=True)]
    rows += [_row(replace(c, dataset=f"nemo{WITH}fp8_wgrad"), e) for c, e in zip(nemo, (2.0, -4.0), strict=True)]
    (effect,) = [e for e in fit_effects(rows) if e.fit.startswith("fp8_wgrad")]
    assert effect.fit == "fp8_wgrad (not adopted)" and effect.own_rows == 2 and effect.other_rows == 0
    assert effect.own_with.median_abs_pct == pytest.approx(3.0)
    assert effect.own_without.median_abs_pct == pytest.approx(10.0)


def test_registry_schema_refuses_unknown_fields():
    fit = load_fits().fits[0].model_dump()
    with pytest.raises(ValueError, match="extra"):
        Fit.model_validate({**fit, "colour": "red"})
