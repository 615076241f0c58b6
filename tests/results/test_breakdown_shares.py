"""The breakdown's per-collective `exposed` rows add up to `exposed communication` (madmax.results.breakdown):
where several collectives are exposed at once, each gets an equal share of that time."""

from __future__ import annotations

import pytest

from madmax import api
from madmax.results import stream_breakdown
from madmax.sim import Schedule


def timeline(tasks: list[tuple[str, float, float, str]]) -> Schedule:
    """One rank ("r") with streams compute, a, b, c and host; tasks as (stream, start, end, category)."""
    names = [("r", "compute"), ("r", "a"), ("r", "b"), ("r", "c"), ("r", "host")]
    index = {stream: i for i, (_, stream) in enumerate(names)}
    return Schedule(start_s=[t[1] for t in tasks], end_s=[t[2] for t in tasks],
                    stream=[index[t[0]] for t in tasks], category=[t[3] for t in tasks],
                    label=[t[3] for t in tasks], stream_names=names)


def test_two_collectives_exposed_together_share_the_time():
    # compute [0, 2) and [6, 8); all_gather [1, 5) on stream a, all_to_all [3, 7) on stream b.
    # [1, 2): ag beside compute (overlapped 1). [2, 3): ag alone, exposed 1. [3, 5): both, compute idle:
    # 2 s split 1 + 1. [5, 6): a2a alone, exposed 1. [6, 7): a2a beside compute (hidden).
    # ag: exposed 1 + 1 = 2, overlapped 4 - 2 = 2; a2a: exposed 1 + 1 = 2, overlapped 2. Union exposed: [2, 6) = 4.
    b = stream_breakdown(timeline([("compute", 0, 2, "gemm"), ("compute", 6, 8, "gemm"),
                                   ("a", 1, 5, "dp.all_gather"), ("b", 3, 7, "emb.a2a")]), "r")
    assert b["exposed_communication_s"] == pytest.approx(4.0)
    assert b["communication"]["dp.all_gather"] == pytest.approx({"total": 4.0, "exposed": 2.0, "overlapped": 2.0})
    assert b["communication"]["emb.a2a"] == pytest.approx({"total": 4.0, "exposed": 2.0, "overlapped": 2.0})
    assert b["pipeline_bubble_s"] == pytest.approx(0.0)  # 8 s = 4 compute + 4 exposed


def test_three_in_flight_split_in_thirds_and_kinds_sum_their_tasks():
    # No compute. [0, 3): one tp task alone, 3 s to tp. [3, 6): two tp tasks and a dp task, 3 s: 1 each, so tp 2
    # and dp 1. [6, 7): dp alone, 1. tp: exposed 5 of 9 s; dp: 2 of 4 s. Union exposed [0, 7) = 7.
    b = stream_breakdown(timeline([("a", 0, 3, "tp"), ("a", 3, 6, "tp"), ("b", 3, 6, "tp"), ("c", 3, 7, "dp")]), "r")
    assert b["exposed_communication_s"] == pytest.approx(7.0)
    assert b["communication"]["tp"] == pytest.approx({"total": 9.0, "exposed": 5.0, "overlapped": 4.0})
    assert b["communication"]["dp"] == pytest.approx({"total": 4.0, "exposed": 2.0, "overlapped": 2.0})


def test_host_work_is_apart_from_communication():
    b = stream_breakdown(timeline([("compute", 0, 1, "gemm"), ("host", 0, 2, "host"), ("a", 1, 3, "tp")]), "r")
    assert b["host"] == pytest.approx({"total": 2.0, "exposed": 1.0, "overlapped": 1.0})
    assert b["communication"]["tp"] == pytest.approx({"total": 2.0, "exposed": 2.0, "overlapped": 0.0})
    assert b["exposed_communication_s"] == pytest.approx(2.0)


@pytest.mark.parametrize("kwargs", [
    {"model": "dlrm-a", "system": "zionex", "num_gpus": 128, "global_batch": 65536, "strategy": "emb=tw"},
    {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 16, "global_batch": 64, "seq_len": 4096,
     "strategy": "tp=2,pp=2"},
])
def test_simulated_rows_add_up_to_exposed_communication(kwargs):
    breakdown = api.simulate(**kwargs).breakdown
    rows = breakdown["communication_s"].values()
    assert sum(c["exposed"] for c in rows) == pytest.approx(breakdown["exposed_communication_s"], rel=1e-9)
    for c in rows:
        assert c["exposed"] + c["overlapped"] == pytest.approx(c["total"], rel=1e-9)
        assert 0 <= c["exposed"] <= c["total"] * (1 + 1e-12)
