"""Overlap is never free: compute beside a collective slows (contention), and TP comm-GEMM overlap.

Hand-computed case: a compute segment of work W = 10 ms starts with a collective of C = 4 ms that holds
a fraction f of the compute's throughput. For the first 4 ms the compute advances at 1 - f, doing
4 (1 - f) ms of its work; the remaining 10 - 4 (1 - f) ms run at full rate after the collective ends:

    T = 4 + 10 - 4 (1 - f) = 10 + 4 f      (f = 0.25: 11 ms)

In general T = W + f min(C, W / (1 - f)): when the collective outlasts the compute (C >= W / (1 - f)),
the compute runs slowed all along and T = W / (1 - f).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.errors import StrategyError
from madmax.sim import Program, schedule

MS = 1e-3


def _overlap_program(work_s: float, comm_s: float, load: float, max_load: float = 0.9):
    """A contended compute segment of `work_s` beside a collective of `comm_s` holding `load`, both at 0:
    the program, the compute stream and the two segments."""
    p = Program()
    compute, comm = p.stream("r0", "compute"), p.stream("r0", "dp")
    p.contend(compute, max_load)
    a = p.add(compute, work_s)
    b = p.add(comm, comm_s, load=load)
    return p, compute, a, b


def _one_overlap(work_s: float, comm_s: float, load: float, max_load: float = 0.9):
    p, _, a, b = _overlap_program(work_s, comm_s, load, max_load)
    return schedule(p), a, b


def test_compute_beside_a_collective_slows_by_f_times_the_overlap():
    s, a, b = _one_overlap(10 * MS, 4 * MS, 0.25)
    assert s.end_s[a] == pytest.approx(11 * MS)  # 10 + 4 * 0.25
    assert s.end_s[b] == pytest.approx(4 * MS)  # the collective itself is not slowed
    assert s.slowdown_s == {a: pytest.approx(1 * MS)}


def test_collective_longer_than_the_compute_slows_all_of_it():
    # W = 3 ms, C = 10 ms, f = 0.25: W / (1 - f) = 4 ms < C, so T = 4 ms.
    s, a, _ = _one_overlap(3 * MS, 10 * MS, 0.25)
    assert s.end_s[a] == pytest.approx(4 * MS)


def test_loads_add_up_to_the_cap():
    # Two collectives of 0.3 each, capped at 0.5: rate 0.5 while both run (4 ms), then full rate.
    p = Program()
    compute, x, y = p.stream("r0", "compute"), p.stream("r0", "dp"), p.stream("r0", "ep")
    p.contend(compute, 0.5)
    a = p.add(compute, 10 * MS)
    p.add(x, 4 * MS, load=0.3)
    p.add(y, 4 * MS, load=0.3)
    assert schedule(p).end_s[a] == pytest.approx(12 * MS)  # 4 ms at half rate do 2 ms of work: 4 + 8


def test_loads_of_another_rank_or_uncontended_streams_cost_nothing():
    p = Program()
    compute, other = p.stream("r0", "compute"), p.stream("r1", "dp")
    p.contend(compute, 0.9)
    a = p.add(compute, 10 * MS)
    p.add(other, 4 * MS, load=0.5)
    plain = p.stream("r0", "side")
    c = p.add(plain, 10 * MS)
    s = schedule(p)
    assert s.end_s[a] == 10 * MS and s.end_s[c] == 10 * MS and s.slowdown_s == {}


def test_a_stretched_segment_moves_what_waits_for_it():
    p, compute, a, _ = _overlap_program(10 * MS, 4 * MS, 0.5)
    after = p.add(compute, 1 * MS, (a,))
    assert schedule(p).end_s[after] == pytest.approx(13 * MS)  # 10 + 4 * 0.5, then 1


@settings(max_examples=60, deadline=None)
@given(work=st.floats(0.1, 50), comm=st.floats(0.1, 50), load=st.floats(0.01, 0.8))
def test_closed_form_of_one_overlap(work, comm, load):
    s, a, _ = _one_overlap(work, comm, load)
    assert s.end_s[a] == pytest.approx(work + load * min(comm, work / (1 - load)), rel=1e-9)


def test_bad_loads_are_builder_bugs():
    p = Program()
    stream = p.stream("r0", "dp")
    with pytest.raises(AssertionError):
        p.add(stream, 1.0, load=1.0)
    with pytest.raises(AssertionError):
        p.contend(stream, 1.0)


# ------------------------------------------------------------------------------------ strategy tp_overlap

def _resolve(text: str):
    return resolve_strategy(parse_strategy(text), num_gpus=8, model_name="m", constraints={},
                            num_pipeline_units=32, global_batch=64, seq_len=4096)


@pytest.mark.parametrize("text", ["tp=1,tp_overlap=1", "tp=2,sp=0,tp_overlap=1"])
def test_tp_overlap_needs_tp_and_sequence_parallelism(text):
    with pytest.raises(StrategyError, match=r"strategy\.tp_overlap needs tp > 1 with sequence parallelism"):
        _resolve(text)


def test_tp_overlap_and_overlap_cost_are_spelled_out():
    s, _ = _resolve("tp=2,tp_overlap=1,overlap_cost=1")
    assert "tp_overlap=1" in s.describe() and "overlap_cost=1" in s.describe()


# ------------------------------------------------------------------------ TP comm-GEMM overlap, simulated

def _tp_comm(strategy: str):
    from madmax import api

    r = api.simulate(model="llama-2-7b", system="dgx-h100", num_gpus=2, global_batch=2, seq_len=2048,
                     strategy=strategy)
    tp = [v for k, v in r.breakdown["communication_s"].items() if k.startswith("tp.")]
    return r, sum(v["total"] for v in tp), sum(v["exposed"] for v in tp)


def test_tp_overlap_exposes_one_chunk_and_charges_the_gemms():
    from madmax.hardware.profile import efficiency_table

    ub = efficiency_table()["overlap"]["tp_userbuffers"]
    plain, total, exposed = _tp_comm("tp=2")
    overlapped, total_o, exposed_o = _tp_comm("tp=2,tp_overlap=1")
    assert total_o == pytest.approx(total)  # the same bytes move
    assert exposed == pytest.approx(total)  # without overlap the GEMMs wait for every TP collective
    # With it, only the first of `chunks` chunks waits (plus the embedding's reduce-scatter and the loss's
    # all-reduces, which stay after their kernels: about 1 % of the TP bytes here); the GEMMs cover the rest.
    assert total / ub["chunks"] <= exposed_o < 1.05 * total / ub["chunks"]
    # The rest, (chunks - 1)/chunks of it, holds sm_fraction of the SMs beside GEMMs that outlast it:
    # the GEMMs lose sm_fraction x its length.
    rest = total * (ub["chunks"] - 1) / ub["chunks"]
    assert overlapped.breakdown["overlap_slowdown_s"] == pytest.approx(ub["sm_fraction"] * rest, rel=0.02)
    assert "overlap_slowdown_s" not in plain.breakdown
    assert overlapped.iteration_time_s < plain.iteration_time_s


def test_tp_overlap_with_tp_1_is_refused_by_simulate():
    from madmax import api

    with pytest.raises(StrategyError, match=r"strategy\.tp_overlap needs tp > 1"):
        api.simulate(model="llama-2-7b", system="dgx-h100", num_gpus=2, global_batch=2, seq_len=2048,
                     strategy="tp=1,tp_overlap=1")


def test_overlap_cost_slows_the_compute_beside_the_gradient_reduction():
    from madmax import api

    kw = dict(model="llama-2-7b", system="dgx-h100", num_gpus=8, global_batch=16, seq_len=2048)
    free = api.simulate(**kw, strategy="tp=1,pp=1")
    paid = api.simulate(**kw, strategy="tp=1,pp=1,overlap_cost=1")
    assert "overlap_slowdown_s" not in free.breakdown
    slowdown = paid.breakdown["overlap_slowdown_s"]
    assert slowdown > 0.0
    # The compute ends later by the slowdown; the iteration by at most that (the last reductions, exposed
    # after the backward, start later too but hide part of it).
    assert free.iteration_time_s < paid.iteration_time_s <= free.iteration_time_s + slowdown * (1 + 1e-9)
    assert any("efficiency.yaml overlap" in note for note in paid.assumptions)
