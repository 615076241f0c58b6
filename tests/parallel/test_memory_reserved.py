"""Memory that matches the GPU: the usable capacity a plan must fit in, and the software stack's reserve.

Hand-computed from the catalog: runtime.yaml `reserve` (CUDA context 600 MiB; an NCCL communicator of
688 MiB per process group of more than two ranks, 544 MiB per two-rank group; fragmentation 5% of the
activations; ZeRO-3 keeps at most 1e9 gathered parameters) and gpus.yaml usable_bytes (H100: 79.11 GiB).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax import api
from madmax.config.base import DType
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy, resolve_strategy
from madmax.config.task import Task, TaskKind
from madmax.parallel.memory import RESERVE_PARTS, Reserve, group_sizes, runtime_reserve, stage_memory
from madmax.parallel.plan import build_plan
from madmax.validate.command import resolve
from madmax.validate.inputs import gpt3_model
from madmax.workload import build_workload

MIB, GIB = 2**20, 2**30
RESERVE = runtime_reserve()
SPEC = load_model(gpt3_model("tiny-gpt", 8, 1024, 16, 4096, 32000, 2048))


def _plan(text: str, num_gpus: int):
    s, gb = resolve_strategy(parse_strategy(text), num_gpus=num_gpus, model_name=SPEC.name,
                             constraints=SPEC.parallel_constraints(), num_pipeline_units=SPEC.num_pipeline_units,
                             global_batch=16, seq_len=2048)
    return build_plan(build_workload(SPEC, Task(kind=TaskKind.PRETRAIN)), s, domain_size=8, seq_len=2048,
                      global_batch=gb, dtype=DType.BF16)


def test_runtime_reserve_is_the_catalog_figures():
    expected = Reserve(context_bytes=600 * MIB, communicator_bytes=688 * MIB, pair_communicator_bytes=544 * MIB,
                       fragmentation=0.05, zero3_live_params=1e9)
    assert expected == RESERVE


def test_reserve_of_a_tp8_pp4_dp2_plan():
    # Groups of a rank: tp 8 (688 MiB), cp 1 (none), pp 4 (688 MiB), gradients dp x cp = 2 (544 MiB).
    plan = _plan("tp=8,pp=4,dp=2,mbs=1,recompute=none", 64)
    assert group_sizes(8, 1, 4, 2) == (8, 1, 4, 2)
    for stage in range(plan.num_stages):
        m = stage_memory(plan, stage, RESERVE)
        assert m.context_bytes == 600 * MIB
        assert m.communicators_bytes == (688 + 688 + 544) * MIB
        assert m.fragmentation_bytes == pytest.approx(0.05 * m.activations_bytes)
        assert m.reserved_bytes == pytest.approx(2520 * MIB + 0.05 * m.activations_bytes)
        parts = m.to_dict()
        assert parts["reserved"] == pytest.approx(sum(parts[k] for k in RESERVE_PARTS))
        assert parts["total"] == pytest.approx(sum(parts[k] for k in ("weights", "gradients", "optimizer",
                                                                      "activations", "reserved")))


def test_a_flat_reserve_is_the_old_behaviour():
    plan = _plan("tp=8,pp=4,dp=2,mbs=1,recompute=none", 64)
    flat = stage_memory(plan, 0, 3 * GIB)
    assert flat.reserved_bytes == 3 * GIB and flat.communicators_bytes == flat.fragmentation_bytes == 0.0


def test_groups_of_an_moe_rank():
    # tp 2, cp 1, pp 2, dp 8 -> dp x cp 8; experts: ep 4, etp 1, edp = 2 * 1 * 8 / (4 * 1) = 4.
    sizes = group_sizes(2, 1, 2, 8, 4, 1, experts=True)
    assert sizes == (2, 1, 2, 8, 4, 1, 4)
    assert RESERVE.communicators_bytes(sizes) == (544 + 544 + 688 + 688 + 688) * MIB


def test_communicators_of_candidates_match_one_at_a_time():
    tp, pp, dp = np.array([1, 2, 8]), np.array([4, 1, 2]), np.array([16, 4, 1])
    many = RESERVE.communicators_bytes(group_sizes(tp, 1, pp, dp))
    one = [RESERVE.communicators_bytes(group_sizes(int(t), 1, int(p), int(d))) for t, p, d in zip(tp, pp, dp,
                                                                                                     strict=True)]
    assert many.tolist() == [float(x) for x in one] == [(688 + 688) * MIB, (544 + 688) * MIB, (688 + 544) * MIB]


def test_zero3_gathers_two_units_at_most_the_live_limit():
    assert RESERVE.zero3_gathered_params(4e8) == 4e8  # two layers of 0.2 B parameters
    assert RESERVE.zero3_gathered_params(2 * 5.03e9) == 1e9  # GPT-529.6B's 5 B-parameter layers: DeepSpeed's limit


def test_zero3_gathers_the_two_largest_units_not_twice_the_largest():
    """Stage 0 of tiny-gpt with pp=2 holds the embedding and 4 layers; ZeRO-3 over dp=4 gathers the unit running
    and the one prefetched: the embedding and a layer, not the embedding twice (which made ZeRO-3 hold more
    than ZeRO-2 on stages dominated by one large unit)."""
    plan = _plan("pp=2,dp=4,zero=3,recompute=none", 8)
    params = sorted(plan.units[key].params for chunk in plan.stages[0] for key in chunk)
    # the embedding: 32000 x 1024 token rows + 2048 x 1024 positions = 34.6 M; a layer 12.6 M
    assert params[-1] == (32000 + 2048) * 1024 and params[-2] < params[-1] / 2
    m = stage_memory(plan, 0, RESERVE)
    # bf16: 2 bytes per weight, each sharded over 4 ranks, plus the two largest units gathered whole
    assert m.weights_bytes == pytest.approx(2 * sum(params) / 4 + 2 * (params[-1] + params[-2]))


def test_two_largest_units_by_stage_counts_a_repeated_unit_twice():
    from madmax.search.memory import two_largest

    per_stage = np.array([[1, 4, 0], [0, 1, 1]])  # stage 0: one embedding, 4 layers; stage 1: a layer and the head
    values = np.array([[30.0, 10.0, 50.0], [5.0, 10.0, 1.0]])  # [n=2 candidates, K=3 unit keys]
    # candidate 0: stage 0 30 + 10, stage 1 50 + 10; candidate 1: stage 0 10 + 10 (a layer twice), stage 1 10 + 1
    assert two_largest(per_stage, values).tolist() == [[40.0, 60.0], [20.0, 11.0]]


@given(st.lists(st.integers(1, 4096), max_size=8))
@settings(max_examples=50, deadline=None)
def test_reserve_is_never_negative_and_grows_with_groups(sizes):
    one = float(RESERVE.communicators_bytes(sizes))
    more = float(RESERVE.communicators_bytes([*sizes, 3]))
    assert 0.0 <= one < more == pytest.approx(one + 688 * MIB)


def test_usable_memory_of_the_catalog_gpus():
    assert load_system("dgx-h100").gpu.usable_memory_bytes == pytest.approx(79.11 * GIB)
    assert load_system("dgx-a100").gpu.usable_memory_bytes == pytest.approx(79.15 * GIB)
    v100 = load_system("dgx-a100").gpu.model_copy(update={"usable_bytes": None})
    assert v100.usable_memory_bytes == v100.hbm_bytes == 80 * GIB  # no driver figure: the datasheet's


def test_usable_is_at_most_hbm():
    gpu = load_system("dgx-h100").gpu
    assert gpu.model_copy(update={"hbm_bytes": 4 * GIB}).usable_memory_bytes == 4 * GIB  # a what-if's smaller HBM


def _system(hbm: float, usable: float) -> dict:
    system = load_system("dgx-h100").model_dump()
    system["gpu"].update(hbm_bytes=hbm, usable_bytes=usable)
    return system


ARGS = {"model": "llama-3.1-8b", "num_gpus": 8, "global_batch": 16, "seq_len": 4096,
        "strategy": "tp=2,pp=2,dp=2,mbs=1,zero=1,recompute=full"}


def test_a_plan_at_exactly_the_usable_limit_fits_and_one_byte_over_does_not():
    peak = api.simulate(system="dgx-h100", **ARGS).peak_memory_bytes
    at = api.simulate(system=_system(80 * GIB, peak), **ARGS)
    assert at.peak_memory_bytes == peak and at.fits and at.memory["capacity"] == peak
    over = api.simulate(system=_system(80 * GIB, peak - 1.0), **ARGS)
    assert not over.fits and "GiB usable" in over.fits_reason


def test_a_plan_at_the_datasheet_capacity_does_not_fit():
    # An "80 GB" H100 whose plan needs all 80 GiB: the capacity is what CUDA can allocate, 79.11 GiB.
    peak = api.simulate(system="dgx-h100", **ARGS).peak_memory_bytes
    r = api.simulate(system=_system(peak, peak * 79.11 / 80), **ARGS)
    assert not r.fits and r.memory["capacity"] == pytest.approx(peak * 79.11 / 80)
    assert api.simulate(system="dgx-h100", **ARGS).memory["capacity"] == pytest.approx(79.11 * GIB)


# The rows that ran but were predicted not to fit before the reserve, the usable capacity and ZeRO-3's
# live-parameter limit (issue 11 item 8).
RAN = ("GPT-529.6B 640xA100 dp640 mbs4 gb2560 s2048 zero3", "Nemotron-4-340B 128xH100 tp8 pp8 vp12 dp2 gb32",
       "Llama-2-70B 16xH100 tp4 pp4 gb32 s4096")


@pytest.mark.parametrize("label", RAN)
def test_measured_runs_are_predicted_to_fit(label):
    cases = [c for d in resolve(["narayanan2021", "nemo"]) for c in d.cases if c.label.startswith(label)]
    assert cases
    for case in cases:
        r = api.simulate(**copy.deepcopy(case.kwargs))
        assert r.fits, (case.label, r.fits_reason)
