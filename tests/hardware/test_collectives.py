"""Collective costs by hand: alpha-beta with participant counts, hierarchical across domains."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.hardware import GPU, System
from madmax.config.loaders import load_system
from madmax.errors import ConfigError
from madmax.hardware.calibration import fit_busbw, load_nccl_rows
from madmax.hardware.collectives import (
    Collective,
    NetworkModel,
    Span,
    network_model,
    ring_all_reduce_s,
    ring_gather_s,
    send_recv_s,
)
from madmax.hardware.profile import CollectiveFit, efficiency_table

GiB = 2**30


def _gpu(name: str) -> GPU:
    return GPU(name=name, flops_per_s={"bf16": 989e12}, hbm_bytes=80 * GiB, hbm_bytes_per_s=3.35e12, tdp_w=700)


def _system(gpu: str = "test-gpu", up_bw: float = 300e9, out_bw: float = 25e9, up_kind: str = "nvlink",
            out_kind: str = "infiniband", domain: int = 8) -> System:
    return System(name="test", gpu=_gpu(gpu), gpus_per_node=domain,
                  scale_up={"kind": up_kind, "bytes_per_s": up_bw, "latency_s": 2e-6, "domain_size": domain},
                  scale_out={"kind": out_kind, "bytes_per_s": out_bw, "latency_s": 5e-6})


def _fraction(kind: str, collective: str) -> float:
    """The busbw fraction efficiency.yaml gives a fabric kind (no GPU-specific entry)."""
    return efficiency_table()["collectives"]["fabrics"][kind]["busbw_fraction"][collective]


def test_ring_all_reduce_by_hand():
    # 1 GiB on 8 GPUs, busbw 100 GB/s, 5 us per step:
    # latency 2*7*5e-6 = 7.0e-5 s; transfer 2*7/8 * 2**30 / 1e11 = 1.879048e-2 s
    t = ring_all_reduce_s(GiB, n=8, busbw_bytes_per_s=100e9, step_latency_s=5e-6)
    assert t == pytest.approx(7.0e-5 + 1.879048e-2, rel=1e-6)


def test_ring_all_reduce_of_1gib_on_8_gpus_through_the_model():
    # NVLink 300 GB/s peak, generic NVLink busbw fraction 0.8 (efficiency.yaml): B = 240 GB/s.
    # t = 2*7*2e-6 + 2*7/8 * 2**30 / 240e9 = 2.8e-5 + 7.829367e-3 = 7.857367e-3 s
    assert _fraction("nvlink", "all_reduce") == 0.8
    t = network_model(_system()).collective_s(Collective.ALL_REDUCE, GiB, Span(8, 1))
    assert t == pytest.approx(7.857367e-3, rel=1e-6)


def test_all_gather_on_2_and_8_gpus():
    # n=2: one step, each GPU receives the other half: 1*5e-6 + 1/2 * 2**30 / 1e11 = 5e-6 + 5.368709e-3
    assert ring_gather_s(GiB, 2, 100e9, 5e-6) == pytest.approx(5e-6 + 5.368709e-3, rel=1e-6)
    # n=8: 7 steps, 7/8 of the output arrives: 7*5e-6 + 7/8 * 2**30 / 1e11 = 3.5e-5 + 9.395241e-3
    assert ring_gather_s(GiB, 8, 100e9, 5e-6) == pytest.approx(3.5e-5 + 9.395241e-3, rel=1e-6)
    # Through the model, pure scale-out (intra=1): B = 25e9 * f_ib; 8 ranks: 7*5e-6 + 7/8 * S / B
    f = _fraction("infiniband", "all_gather")
    t = network_model(_system()).collective_s(Collective.ALL_GATHER, GiB, Span(1, 8))
    assert t == pytest.approx(7 * 5e-6 + 7 / 8 * GiB / (25e9 * f), rel=1e-12)


def test_send_recv_by_hand():
    # alpha + S / B: 2e-6 + 2**20 / 100e9 = 2e-6 + 1.048576e-5
    assert send_recv_s(2**20, 100e9, 2e-6) == pytest.approx(1.248576e-5, rel=1e-9)
    net = network_model(_system())
    # Inside a domain: NVLink; across domains: the NIC.
    assert net.collective_s("send_recv", 2**20, Span(2, 1)) == pytest.approx(
        2e-6 + 2**20 / (300e9 * _fraction("nvlink", "send_recv")), rel=1e-12)
    assert net.collective_s("send_recv", 2**20, Span(1, 2)) == pytest.approx(
        5e-6 + 2**20 / (25e9 * _fraction("infiniband", "send_recv")), rel=1e-12)


@pytest.mark.parametrize("kind", list(Collective))
@pytest.mark.parametrize("span", [Span(1, 1)])
def test_a_group_of_one_costs_nothing(kind, span):
    assert network_model(_system()).collective_s(kind, GiB, span) == 0.0


@pytest.mark.parametrize("kind", list(Collective))
def test_zero_bytes_cost_nothing(kind):
    assert network_model(_system()).collective_s(kind, 0, Span(8, 4)) == 0.0


def test_hierarchical_all_reduce_is_the_sum_of_its_three_phases():
    # DGX H100-like: 8 GPUs per NVLink domain, 4 domains, 1 GiB.
    net = network_model(_system(gpu="h100-sxm", up_bw=450e9, out_bw=50e9))
    s = GiB
    rs = net.collective_s(Collective.REDUCE_SCATTER, s, Span(8, 1))
    ar = net.collective_s(Collective.ALL_REDUCE, s / 8, Span(1, 4))
    ag = net.collective_s(Collective.ALL_GATHER, s, Span(8, 1))
    assert net.collective_s(Collective.ALL_REDUCE, s, Span(8, 4)) == pytest.approx(rs + ar + ag, rel=1e-12)
    # By hand, with the H100 NVLink ring fraction 370/450 = 0.822 and the IB fraction 0.94 (efficiency.yaml):
    # rs = ag = 7*2e-6 + 7/8 * 2**30 / (450e9*0.822) = 1.4e-5 + 2.539941e-3
    # ar = 2*3*5e-6 + 2*3/4 * 2**27 / (50e9*0.94) = 3.0e-5 + 4.283545e-3
    assert rs == pytest.approx(1.4e-5 + 2.539941e-3, rel=1e-6)
    assert ag == pytest.approx(rs, rel=1e-12)
    assert ar == pytest.approx(3.0e-5 + 4.283545e-3, rel=1e-6)


def test_hierarchical_all_gather_and_reduce_scatter():
    # all_gather over Span(8, 4): across domains first (output S/8 among 4), then inside (S among 8), and
    # NCCL's ring passes all 32 ranks: 31 steps, 3 between domains, 28 inside. The two rings count 3 + 7;
    # the other (8-1)*(4-1) = 21 steps inside cost 21 * 2 us more.
    net = network_model(_system())
    s = GiB
    for kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        across = net.collective_s(kind, s / 8, Span(1, 4))
        inside = net.collective_s(kind, s, Span(8, 1))
        assert net.collective_s(kind, s, Span(8, 4)) == pytest.approx(across + inside + 21 * 2e-6, rel=1e-12)
    # Latency alone (a 1-byte gather): 31 steps, 3 * 5 us across and 28 * 2 us inside.
    assert net.collective_s(Collective.ALL_GATHER, 1, Span(8, 4)) == pytest.approx(3 * 5e-6 + 28 * 2e-6, rel=1e-3)
    # The NICs carry (inter-1)/inter * S/intra = 3/4 * S/8 per GPU, the same as a flat ring's
    # 31/32 * S spread over 8 NICs per domain, to within (n-1)/n rounding.


def _a2a_terms(kind: str) -> tuple[float, float]:
    """(c, per-peer seconds) of efficiency.yaml's all-to-all latency c alpha + (n - 1) t_p for a fabric kind."""
    table = efficiency_table()["collectives"]["all_to_all"]
    return float(table["alphas"][kind]), float(table["per_peer"].split()[0]) * 1e-6


def test_all_to_all_across_domains_is_bound_by_the_nics():
    # Span(8, 2), n = 16, S = 1 GiB per GPU: 7/16 of S stays in the domain (NVLink), 8/16 leaves (NIC).
    # NVLink: c_nv 2 us + 7 t_p + 7/16 * 2**30 / (300e9 * f_nv); NIC: c_ib 5 us + 15 t_p + 8/16 * 2**30 / (25e9 * f_ib)
    f_nv, f_ib = _fraction("nvlink", "all_to_all"), _fraction("infiniband", "all_to_all")
    (c_nv, t_p), (c_ib, _) = _a2a_terms("nvlink"), _a2a_terms("infiniband")
    t_up = c_nv * 2e-6 + 7 * t_p + 7 / 16 * GiB / (300e9 * f_nv)
    t_out = c_ib * 5e-6 + 15 * t_p + 8 / 16 * GiB / (25e9 * f_ib)
    t = network_model(_system()).collective_s(Collective.ALL_TO_ALL, GiB, Span(8, 2))
    assert t == pytest.approx(max(t_up, t_out), rel=1e-12)
    assert t == pytest.approx(t_out, rel=1e-12)  # the NIC is 12x slower and carries more


def test_all_to_all_latency_is_one_exchange_and_a_cost_per_peer():
    # NCCL posts every peer's send and receive at once: a 1-byte all-to-all over 128 GPUs (16 nodes) costs
    # 13 x 5 us + 127 x 0.3 us = 103.1 us, not the 120 ring steps of 5 us (600 us) a gather takes.
    net = network_model(_system())
    (c_ib, t_p), (c_nv, _) = _a2a_terms("infiniband"), _a2a_terms("nvlink")
    assert (c_ib, c_nv, t_p) == (13.0, 4.5, pytest.approx(0.3e-6))
    assert net.collective_s(Collective.ALL_TO_ALL, 1, Span(8, 16)) == pytest.approx(103.1e-6, rel=1e-3)
    # Inside one node: 4.5 x 2 us + 7 x 0.3 us = 11.1 us (8 H20, alltoall_perf: 10.59 us at 128 B).
    assert net.collective_s(Collective.ALL_TO_ALL, 1, Span(8, 1)) == pytest.approx(11.1e-6, rel=1e-3)
    # Across nodes with one GPU each: the scale-out fabric alone, 13 x 5 us + 15 x 0.3 us.
    assert net.collective_s(Collective.ALL_TO_ALL, 1, Span(1, 16)) == pytest.approx(69.5e-6, rel=1e-3)
    # The latency grows by t_p per peer: 128 GPUs cost 64 x 0.3 us more than 64.
    a2a = Collective.ALL_TO_ALL
    gap = net.collective_s(a2a, 1, Span(8, 16)) - net.collective_s(a2a, 1, Span(8, 8))
    assert gap == pytest.approx(64 * t_p, rel=1e-3)


def test_a_measured_all_to_all_gives_its_whole_latency():
    # A profile's all-to-all measured across 2 nodes (alltoall_perf, fitted L = 40 us, 45 GB/s busbw) is the
    # latency of that group, not a per-step alpha: 1 MiB over Span(8, 2) costs 40 us + 8/16 MiB / 45 GB/s. It does
    # not become the fabric's ring step: a 1-byte all-gather over 2 nodes still takes 1 x 5 us there.
    fit = CollectiveFit(collective="all_to_all", num_gpus=16, num_nodes=2, step_latency_s=40e-6,
                        busbw_bytes_per_s=45e9)
    net = network_model(_system(), (fit,))
    assert net.collective_s(Collective.ALL_TO_ALL, 2**20, Span(8, 2)) == pytest.approx(40e-6 + 2**19 / 45e9)
    assert net.collective_s(Collective.ALL_GATHER, 1, Span(1, 2)) == pytest.approx(5e-6, rel=1e-3)


def test_all_to_all_on_the_pplx_kernels_rows():
    # The fit's own rows (efficiency.yaml collectives.all_to_all): torch all_to_all_single of 1,892,352 B per rank
    # on H100 nodes over InfiniBand, ppl-ai/pplx-kernels README: EP32 95.7 us, EP64 101.6, EP128 132.0, within 5%.
    net = network_model(load_system("dgx-h100", num_gpus=128))
    for nodes, measured in ((4, 95.7e-6), (8, 101.6e-6), (16, 132.0e-6)):
        t = net.collective_s(Collective.ALL_TO_ALL, 1_892_352, Span(8, nodes))
        assert t == pytest.approx(measured, rel=0.05)


def test_a100_and_h100_nvlink_busbw():
    # A100: 230 of 300 GB/s (NVIDIA/nccl-tests#149). H100 all_reduce on 8 GPUs uses NVLS: 0.964 * 450 GB/s;
    # on 4 GPUs NVLS brings nothing (NVIDIA/nccl#1455): the ring 0.822 * 450 GB/s.
    a100 = network_model(_system(gpu="a100-80gb"))
    assert a100.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(8, 1)) == pytest.approx(0.767 * 300e9)
    h100 = network_model(_system(gpu="h100-sxm", up_bw=450e9, out_bw=50e9))
    assert h100.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(8, 1)) == pytest.approx(0.964 * 450e9)
    assert h100.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(4, 1)) == pytest.approx(0.822 * 450e9)
    assert h100.busbw_bytes_per_s(Collective.ALL_GATHER, Span(8, 1)) == pytest.approx(0.822 * 450e9)
    assert h100.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(1, 4)) == pytest.approx(0.94 * 50e9)


def test_dgx_h100_reproduces_the_nccl_tests_rows_within_the_fit_error():
    # The model uses the system's 2 us NVLink latency; the fit found 2.10 us. Allow the fit's own max error.
    fit = fit_busbw(load_nccl_rows())
    net = network_model(_system(gpu="h100-sxm", up_bw=450e9, out_bw=50e9))
    for row in load_nccl_rows():
        t = net.collective_s(Collective.ALL_REDUCE, float(row["size_bytes"]), Span(8, 1))
        assert abs(t / (float(row["time_us"]) * 1e-6) - 1) <= fit["max"] + 0.01, row


def test_fabrics_without_measurements_are_listed_as_assumptions():
    assert network_model(_system()).assumptions == ()
    net = network_model(_system(up_kind="ethernet", out_kind="roce"))
    assert any("ethernet" in a and "default" in a for a in net.assumptions)
    # xGMI's bandwidths are measured (rccl-tests on MI300X, efficiency.yaml fabrics.xgmi); its all-to-all latency
    # is not (measured on NVLink and InfiniBand only), and says so.
    xgmi = network_model(_system(up_kind="xgmi")).assumptions
    assert [a for a in xgmi if "xgmi" in a] == [
        "scale-up fabric xgmi: the all-to-all's latency (4.5 alpha + 0.3 us per peer) is assumed, measured on "
        "NVLink and InfiniBand only (efficiency.yaml collectives.all_to_all)"]
    assert any("roce" in a and "assumed" in a for a in net.assumptions)


def test_cached_per_system_whatever_the_cluster_size():
    system = _system()
    assert network_model(system) is network_model(system.with_gpus(64))
    assert isinstance(network_model(system), NetworkModel)
    assert hash(network_model(system))  # usable as a functools.cache key


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda net: net.collective_s("all_reduce", -1, Span(8, 1)), "size_bytes=-1"),
        (lambda net: net.collective_s("all_reduce", 1, Span(16, 1)), "scale-up domain of 8"),
        (lambda net: net.collective_s("broadcast", 1, Span(8, 1)), "allowed: all_reduce"),
        (lambda net: Span(0, 1), "must be >= 1"),
    ],
)
def test_bad_input_is_a_config_error(call, match):
    with pytest.raises(ConfigError, match=match):
        call(network_model(_system()))


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(list(Collective)),
    size=st.floats(min_value=1, max_value=1e11),
    intra=st.sampled_from([1, 2, 4, 8]),
    inter=st.integers(min_value=1, max_value=64),
    up_scale=st.floats(min_value=1, max_value=10),
    out_scale=st.floats(min_value=1, max_value=10),
)
def test_more_bandwidth_is_never_slower(kind, size, intra, inter, up_scale, out_scale):
    base = network_model(_system()).collective_s(kind, size, Span(intra, inter))
    faster = network_model(_system(up_bw=300e9 * up_scale, out_bw=25e9 * out_scale))
    assert faster.collective_s(kind, size, Span(intra, inter)) <= base * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(list(Collective)), size=st.floats(min_value=1, max_value=1e11),
       intra=st.sampled_from([1, 2, 4, 8]), inter=st.integers(min_value=1, max_value=64),
       factor=st.floats(min_value=1, max_value=100))
def test_more_bytes_are_never_faster(kind, size, intra, inter, factor):
    net = network_model(_system())
    assert net.collective_s(kind, size * factor, Span(intra, inter)) >= net.collective_s(kind, size, Span(intra, inter))
