"""What the page draws of a result (madmax.web.view), on hand-made breakdowns and schedules."""

from types import SimpleNamespace

import pytest

from madmax.web.view import breakdown_bars, memory_per_stage, timeline


def test_training_breakdown_is_one_bar_of_compute_exposed_comm_host_and_bubble():
    breakdown = {"compute_s": {"gemm": 2.0, "attention": 0.5, "total": 2.5},
                 "communication_s": {"tp.all_reduce": {"total": 0.4, "exposed": 0.1, "overlapped": 0.3},
                                     "dp.all_gather": {"total": 0.2, "exposed": 0.0, "overlapped": 0.2}},
                 "host_s": {"total": 0.01, "exposed": 0.004, "overlapped": 0.006}, "pipeline_bubble_s": 0.25}
    assert breakdown_bars(breakdown) == {"iteration": [("gemm", 2.0), ("attention", 0.5),
                                                       ("tp.all_reduce (exposed)", 0.1), ("host (exposed)", 0.004),
                                                       ("pipeline bubble", 0.25)]}


def test_serving_breakdown_is_a_bar_per_phase():
    phase = {"compute_s": {"gemm": 0.08, "total": 0.08}, "communication_s": {}, "host_s": 5e-05}
    bars = breakdown_bars({"stage": 0, "prefill": phase, "decode": {**phase, "compute_s": {"gemm": 0.005}}})
    assert bars == {"prefill": [("gemm", 0.08), ("host (exposed)", 5e-05)],
                    "decode": [("gemm", 0.005), ("host (exposed)", 5e-05)]}


def test_memory_per_stage_splits_static_state_and_the_activation_peak():
    result = SimpleNamespace(memory={"stage": 1}, memory_timeline={0: [(0.0, 10.0), (1.0, 14.0), (2.0, 11.0)],
                                                                   1: [(0.0, 12.0), (1.5, 13.0)]})
    static = "static (weights, gradients, optimizer, reserved)"
    assert memory_per_stage(result) == [{"stage": 0, "parts": {static: 10.0, "activations at peak": 4.0}},
                                        {"stage": 1, "parts": {static: 12.0, "activations at peak": 1.0}}]
    serving = SimpleNamespace(memory_timeline=None, memory={"weights": 5.0, "kv_cache": 2.0, "total": 7.0,
                                                            "capacity": 80.0, "reserved_context": 1.0})
    assert memory_per_stage(serving) == [{"stage": 0, "parts": {"weights": 5.0, "kv_cache": 2.0}}]


def schedule(*tasks):
    """tasks: (stream, start, end, category)."""
    return SimpleNamespace(stream_names=[("stage0", "compute"), ("stage0", "tp")],
                           stream=[t[0] for t in tasks], start_s=[t[1] for t in tasks], end_s=[t[2] for t in tasks],
                           category=[t[3] for t in tasks], label=["" for _ in tasks])


def test_timeline_merges_segments_closer_than_the_fraction_and_keeps_the_longest():
    # An iteration of 10 s; gap allowed 10 * 0.01 = 0.1 s.
    result = SimpleNamespace(schedule=schedule((0, 0.0, 1.0, "forward"), (0, 1.05, 2.0, "forward"),
                                               (0, 2.05, 2.2, "backward"), (0, 5.0, 10.0, "backward"),
                                               (1, 1.0, 1.04, "tp.all_gather"), (1, 1.1, 1.16, "tp.reduce_scatter"),
                                               (1, 1.2, 1.23, "tp.all_gather"), (1, 3.0, 3.0, "tp.all_gather")))
    view = timeline(result, limit=10, merge_fraction=0.01)
    assert view["streams"] == ["stage0/compute", "stage0/tp"]
    # forward and backward are kinds of their own; tp.* collectives are one kind (tp), coloured by the most time.
    assert view["segments"] == [[0, 0.0, 2.0, "forward x 2", "forward"], [0, 2.05, 2.2, "backward", "backward"],
                                [0, 5.0, 10.0, "backward", "backward"],
                                [1, 1.0, 1.23, "tp.all_gather x 2, tp.reduce_scatter x 1", "tp.all_gather"]]
    assert view["omitted"] == 0
    longest = timeline(result, limit=1, merge_fraction=0.0)
    assert longest["segments"] == [[0, 5.0, 10.0, "backward", "backward"]]
    assert longest["omitted"] == 6  # seven positive segments, unmerged


@pytest.mark.parametrize("fraction", [0.0, 2e-4])
def test_timeline_of_a_simulation_covers_its_schedule(fraction):
    import madmax

    result = madmax.simulate("llama-3-8b", "dgx-h100", 16, global_batch=64, strategy="tp=2,pp=2", keep_schedule=True)
    s = result.schedule
    positive = sum(1 for a, b in zip(s.start_s, s.end_s, strict=True) if b > a)
    view = timeline(result, limit=10**6, merge_fraction=fraction)
    if fraction == 0.0:
        assert len(view["segments"]) == positive
    else:
        assert len(view["segments"]) < positive
    assert max(seg[2] for seg in view["segments"]) == max(s.end_s)
