"""The tf2 stack's runtimes: the shipped profile with a launch floor (training) or a host time per step call
(inference) fitted to half of nvidia_dlrm."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import madmax as mm
from madmax.config.training_stack import load_training_stack
from madmax.hardware.profile import load_profile
from madmax.validate.datasets import load_nvidia_dlrm
from madmax.validate.tf2_launch_fit import dlrm_key, split_by_model

TF2_PROFILE = "calibration/tf2_dlrm_xla.yaml"
TF2_INFERENCE = "calibration/tf2_dlrm_graph.yaml"


def test_tf2_profile_changes_only_the_launch_floor():
    assert load_training_stack("tf2").calibration == TF2_PROFILE
    assert "calibration" in load_training_stack("tf2").sources
    base = load_profile(None).model_dump(mode="json")
    tf2 = load_profile(TF2_PROFILE).model_dump(mode="json")
    provenance = {"software", "source", "fit_errors", "launch_fit"}
    assert {k for k in base if base[k] != tf2[k]} == provenance | {"launch_s", "attention"}
    assert {k for k in base["attention"] if base["attention"][k] != tf2["attention"][k]} == {"launch_s"}
    assert tf2["launch_s"] == pytest.approx(118.4e-6, rel=1e-3)  # the fit (docs/calibration.md)
    # the attention floor scaled by the same factor: 22.38 us x 118.35 / 18.61 = 142.3 us
    assert tf2["attention"]["launch_s"] == pytest.approx(base["attention"]["launch_s"] * tf2["launch_s"]
                                                         / base["launch_s"], rel=1e-4)
    # the fitted half's training rows (its two inference rows run under the inference runtime)
    assert tf2["launch_fit"]["train_rows"] == 14 and tf2["launch_fit"]["held_out_rows"] == 6


def test_tf2_inference_profile_changes_only_the_step_call():
    assert load_training_stack("tf2").calibration_for(inference=True) == TF2_INFERENCE
    assert load_training_stack("tf2").calibration_for(inference=False) == TF2_PROFILE
    assert load_training_stack("megatron-core").calibration_for(inference=True) is None
    base = load_profile(None).model_dump(mode="json")
    graph = load_profile(TF2_INFERENCE).model_dump(mode="json")
    assert {k for k in base if base[k] != graph[k]} == {"software", "source", "fit_errors", "call_host_s", "call_fit"}
    assert graph["call_host_s"] == pytest.approx(1.565e-3, rel=1e-3)  # the fit on DCNv2's two latencies
    assert (graph["call_fit"]["train_rows"], graph["call_fit"]["held_out_rows"]) == (2, 6)


def test_rows_split_by_model_task_and_batch():
    # 8 keys sorted as text; odd positions held out: no row of a held-out key is fitted.
    fitted, held = split_by_model(list(load_nvidia_dlrm().cases))
    assert {dlrm_key(c) for c in held} == {("dlrm-22.8b", "pretrain", 4096), ("dlrm-4.2b", "inference", 2048),
                                           ("dlrm-dcnv2-22.8b", "pretrain", 8192),
                                           ("dlrm-dcnv2-4.2b", "pretrain", 65536)}
    assert (len(fitted), len(held)) == (16, 12)
    assert not {dlrm_key(c) for c in fitted} & {dlrm_key(c) for c in held}
    # the shipped profile names the same split
    split = load_profile(TF2_PROFILE).launch_fit.split
    assert "held out: dlrm-22.8b pretrain 4096, dlrm-dcnv2-22.8b pretrain 8192" in " ".join(split.split())
    call_split = load_profile(TF2_INFERENCE).call_fit.split
    assert "fitted: dlrm-dcnv2-4.2b inference 2048; held out: dlrm-4.2b inference 2048" in " ".join(call_split.split())


def test_tf2_small_batches_wait_for_the_host():
    # Inference of a 2,048-sample batch is a few hundred microseconds of kernels on an A100; under tf2 the host's
    # step call (1.565 ms, beside the GPU's work) sets the step, while a training step of 65,536 samples
    # (kernels of milliseconds) hardly moves.
    small = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 1, "task": "inference", "batch": 2048}
    default, tf2 = mm.simulate(**small), mm.simulate(**small, stack="tf2")
    assert default.iteration_time_s < 1.2e-3
    assert tf2.iteration_time_s == pytest.approx(1.565e-3, rel=1e-3)
    assert tf2.breakdown["host_s"]["total"] == pytest.approx(1.565e-3, rel=1e-3)
    big = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 1, "global_batch": 65536, "strategy": "zero=0"}
    train_default = mm.simulate(**big, stack="tf2", calibration="calibration/h200_profile.yaml").iteration_time_s
    train_tf2 = mm.simulate(**big, stack="tf2").iteration_time_s
    assert train_tf2 == pytest.approx(train_default, rel=0.1)


def test_step_call_bounds_simulate_and_search_alike():
    # A profile whose step call outlasts the GPU's work: simulate and the search's replay both take C.
    from madmax.validate.launch_fit import with_call

    slow = with_call(load_profile(None), 0.5)
    kwargs = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 8, "global_batch": 8192}
    assert mm.simulate(**kwargs, strategy="zero=0", calibration=slow).iteration_time_s == pytest.approx(0.5)
    frame = mm.search(**kwargs, calibration=slow, top=2)
    assert (frame["estimated_iteration_time_s"] >= 0.5).all()
    simulated = frame[frame["simulated"]]["iteration_time_s"]
    assert simulated.iloc[0] == pytest.approx(0.5) and (simulated >= 0.5 - 1e-9).all()


def test_a_forward_only_step_assumes_no_step_end():
    # Inference has no loss, gradient norm or optimizer step: the step end's host estimates do not apply.
    small = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 1, "task": "inference", "batch": 2048}
    assert not any("step end" in a for a in mm.simulate(**small).assumptions)
    big = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 1, "global_batch": 65536, "strategy": "zero=0"}
    assert any("step end" in a for a in mm.simulate(**big).assumptions)


@settings(max_examples=25, deadline=None)
@given(call=st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False))
def test_a_step_lasts_the_longer_of_its_call_and_its_gpu_work(call):
    # The step call runs on its own stream beside the whole step: max(C, the step without it), whatever C.
    from madmax.validate.launch_fit import with_call

    kwargs = {"model": "dlrm-dcnv2", "system": "dgx-a100", "num_gpus": 1, "task": "inference", "batch": 2048}
    alone = mm.simulate(**kwargs).iteration_time_s
    step = mm.simulate(**kwargs, calibration=with_call(load_profile(None), call)).iteration_time_s
    assert step == pytest.approx(max(call, alone), rel=1e-9, abs=1e-15)
