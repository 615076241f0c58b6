"""A full-mesh scale-up domain (AMD Infinity Fabric): a group of n GPUs uses n - 1 of each GPU's links."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from madmax.config.hardware import GPU, ScaleUp, System
from madmax.config.loaders import load_system
from madmax.errors import ConfigError
from madmax.hardware.collectives import Collective, Span, network_model
from madmax.hardware.profile import CollectiveFit, efficiency_table

GiB = 2**30


def _system(topology: str = "full_mesh", domain: int = 8, up_bw: float = 448e9, gpu: str = "test-gpu") -> System:
    g = GPU(name=gpu, flops_per_s={"bf16": 1307.4e12}, hbm_bytes=192 * GiB, hbm_bytes_per_s=5.3e12, tdp_w=750)
    return System(name=f"mesh-{topology}-{domain}", gpu=g, gpus_per_node=domain,
                  scale_up={"kind": "xgmi", "bytes_per_s": up_bw, "latency_s": 1.75e-6, "domain_size": domain,
                            "topology": topology},
                  scale_out={"kind": "roce", "bytes_per_s": 50e9, "latency_s": 4e-6})


def test_the_xgmi_fractions_are_the_measured_ones():
    # efficiency.yaml fabrics.xgmi, copied by hand: all_reduce 0.671 (rccl-tests fit, 300.5 of 448 GB/s),
    # all_to_all 0.706 (316.5 of 448), send_recv 0.727 (46.55 of 64 GB/s per link).
    f = efficiency_table()["collectives"]["fabrics"]["xgmi"]["busbw_fraction"]
    assert (f["all_reduce"], f["all_to_all"], f["send_recv"]) == (0.671, 0.706, 0.727)


def test_tp2_and_tp8_all_reduce_by_hand():
    # 1 GiB all-reduce on an 8-GPU mesh of 7 x 64 GB/s links (448 GB/s per GPU per direction), alpha 1.75 us.
    # tp=8: all 7 links, B = 448e9 * 0.671 = 300.608e9:
    #   t = 2*7*1.75e-6 + 2*7/8 * 2**30 / 300.608e9 = 2.45e-5 + 6.250826e-3 = 6.275326e-3 s
    # tp=2: one link, B = 64e9 * 0.671 = 42.944e9:
    #   t = 2*1*1.75e-6 + 2*1/2 * 2**30 / 42.944e9 = 3.5e-6 + 2.500330e-2 = 2.500680e-2 s
    net = network_model(_system())
    assert net.collective_s(Collective.ALL_REDUCE, GiB, Span(8, 1)) == pytest.approx(6.275326e-3, rel=1e-6)
    assert net.collective_s(Collective.ALL_REDUCE, GiB, Span(2, 1)) == pytest.approx(2.500680e-2, rel=1e-6)
    # tp=4: three links, B = 3 * 64e9 * 0.671 = 128.832e9: 2*3*1.75e-6 + 2*3/4 * 2**30 / 128.832e9
    assert net.collective_s(Collective.ALL_REDUCE, GiB, Span(4, 1)) == pytest.approx(
        1.05e-5 + 1.5 * GiB / 128.832e9, rel=1e-9)


def test_a_switch_gives_every_group_the_whole_bandwidth():
    # The same links behind a switch: tp=2 gets B = 448e9 * 0.671 too: 3.5e-6 + 2**30 / 300.608e9
    net = network_model(_system("switch"))
    assert net.collective_s(Collective.ALL_REDUCE, GiB, Span(2, 1)) == pytest.approx(
        3.5e-6 + GiB / 300.608e9, rel=1e-9)
    assert net.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(2, 1)) == pytest.approx(300.608e9)


def test_send_recv_inside_the_mesh_uses_one_link():
    # 1 MiB between two GPUs: alpha + S / (64e9 * 0.727) = 1.75e-6 + 2**20 / 46.528e9
    net = network_model(_system())
    assert net.collective_s(Collective.SEND_RECV, 2**20, Span(2, 1)) == pytest.approx(
        1.75e-6 + 2**20 / 46.528e9, rel=1e-9)


def test_hierarchical_all_reduce_uses_the_group_links_inside():
    # 4 GPUs in each of 2 nodes: reduce-scatter and all-gather inside over 3 links (B_in = 3*64e9*0.671 =
    # 128.832e9), all-reduce across on S/4 over the 50 GB/s NIC (roce, 0.94; ring and tree both of 2 ranks).
    net = network_model(_system())
    s = GiB
    inside = 3 * 1.75e-6 + 3 / 4 * s / 128.832e9
    b_out = 50e9 * 0.94
    ring = 2 * 4e-6 + s / 4 / b_out
    tree = 2 * 4e-6 * 2.125 + 2 * s / 4 / (b_out * 0.92)
    assert net.collective_s(Collective.ALL_REDUCE, s, Span(4, 2)) == pytest.approx(
        2 * inside + min(ring, tree), rel=1e-9)


def test_the_catalog_platforms_are_meshes():
    for name in ("amd-mi300x-8", "amd-mi325x-8", "amd-mi350x-8", "amd-mi355x-8"):
        up = load_system(name).scale_up
        assert (up.topology, up.domain_size, str(up.kind)) == ("full_mesh", 8, "xgmi")
    # MI300X: 7 links x 64 GB/s; a pair of GPUs shares one: 448e9 / 7 = 64e9
    assert load_system("amd-mi300x-8").scale_up.group_bytes_per_s(2) == pytest.approx(64e9)
    assert load_system("amd-mi355x-8").scale_up.group_bytes_per_s(8) == pytest.approx(537.6e9)


def test_a_mesh_of_one_gpu_is_refused():
    with pytest.raises(ValueError, match="topology=full_mesh needs domain_size >= 2"):
        ScaleUp(kind="xgmi", bytes_per_s=64e9, latency_s=1e-6, domain_size=1, topology="full_mesh")
    with pytest.raises(ConfigError, match="topology"):
        from madmax.config.loaders import load_system as load

        data = load_system("amd-mi300x-8").model_dump(exclude={"gpu"}) | {"gpu": "mi300x"}
        data["scale_up"] = {**data["scale_up"], "topology": "torus"}
        load(data)


def test_a_measured_fit_on_a_mesh_is_given_back_at_its_size():
    # A calibration profile's all_reduce fit measured on 8 GPUs of the mesh (300 GB/s busbw, 2 us) is used as
    # measured for 8; a group of 2 takes the same per-link efficiency on its one link: 300e9 / 7.
    fit = CollectiveFit(collective="all_reduce", num_gpus=8, step_latency_s=2e-6, busbw_bytes_per_s=300e9)
    net = network_model(_system(), (fit,))
    assert net.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(8, 1)) == pytest.approx(300e9)
    assert net.busbw_bytes_per_s(Collective.ALL_REDUCE, Span(2, 1)) == pytest.approx(300e9 / 7)


@given(n=st.integers(2, 7), size=st.floats(1e3, 1e10))
def test_a_larger_group_never_gets_less_bandwidth_on_a_mesh(n, size):
    net = network_model(_system())
    per_byte = [net.busbw_bytes_per_s(Collective.ALL_GATHER, Span(k, 1)) for k in (n, n + 1)]
    assert per_byte[0] < per_byte[1]
    # and a mesh is never faster than the same links behind a switch
    switch = network_model(_system("switch"))
    assert net.collective_s(Collective.ALL_GATHER, size, Span(n, 1)) >= switch.collective_s(
        Collective.ALL_GATHER, size, Span(n, 1))
