"""Collectives at scale by hand: NCCL's ring or tree across domains, leaf and spine of a rail-optimized fabric,
and the step-end gradient-norm all-reduce over thousands of GPUs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.collective import Collective, Span
from madmax.config.hardware import GPU, System
from madmax.config.loaders import load_system
from madmax.config.strategy import Axis, parse_strategy
from madmax.hardware.collectives import network_model, ring_all_reduce_s, ring_gather_s, tree_all_reduce_s
from madmax.hardware.profile import efficiency_table
from madmax.parallel.placement import span

GiB = 2**30
IB = 0.94  # efficiency.yaml collectives.fabrics.infiniband busbw fraction
TREE = efficiency_table()["collectives"]["tree"]


def _system(nodes_per_leaf: int | None = None, oversubscription: float = 1.0, spine_latency_s: float = 0.0,
            gpus_per_node: int = 8) -> System:
    gpu = GPU(name="test-gpu", flops_per_s={"bf16": 989e12}, hbm_bytes=80 * GiB, hbm_bytes_per_s=3.35e12, tdp_w=700)
    out = {"kind": "infiniband", "bytes_per_s": 25e9, "latency_s": 5e-6, "spine_oversubscription": oversubscription,
           "spine_latency_s": spine_latency_s}
    if nodes_per_leaf is not None:
        out["nodes_per_leaf"] = nodes_per_leaf
    return System(name=f"scale-{nodes_per_leaf}-{oversubscription}-{spine_latency_s}-{gpus_per_node}", gpu=gpu,
                  gpus_per_node=gpus_per_node,
                  scale_up={"kind": "nvlink", "bytes_per_s": 300e9, "latency_s": 2e-6, "domain_size": 8},
                  scale_out=out)


def test_the_catalog_tree_factors_are_nccls():
    # NCCL tuning.cc: hwLat NET Tree/LL128 8.5 us vs Ring/LL128 4.0 us; tree busBw * 0.92
    assert TREE["hop_latency_factor"] == pytest.approx(8.5 / 4.0)
    assert TREE["busbw_factor"] == pytest.approx(0.92)


def test_tree_beats_ring_for_a_small_all_reduce_over_1024_nodes():
    # 4 bytes over 1024 domains of one GPU each: ring 2 * 1023 steps of 5 us = 10.23 ms; tree
    # 2 * log2(1024) = 20 levels of 5 us * 2.125 = 212.5 us, plus 2 * 4 B / (25 GB/s * 0.94 * 0.92).
    net = network_model(_system())
    ring = 2 * 1023 * 5e-6 + 2 * 1023 / 1024 * 4 / (25e9 * IB)
    tree = 20 * 5e-6 * 2.125 + 2 * 4 / (25e9 * IB * 0.92)
    assert ring == pytest.approx(10.23e-3, rel=1e-4)
    assert tree == pytest.approx(212.5e-6, rel=1e-4)
    assert net.collective_s(Collective.ALL_REDUCE, 4, Span(1, 1024)) == pytest.approx(tree, rel=1e-12)
    assert tree_all_reduce_s(4, 1024, 25e9 * IB * 0.92, 5e-6 * 2.125) == pytest.approx(tree, rel=1e-12)


def test_ring_beats_tree_only_for_a_very_large_all_reduce_over_1024_nodes():
    # 16 GiB: ring 10.23 ms + 2 * 1023/1024 * 16 GiB / 23.5 GB/s = 1471.5 ms; tree 0.21 ms + 2 * 16 GiB /
    # 21.62 GB/s = 1589.5 ms. At 1 GiB the ring's 10.2 ms of steps still lose to the tree (101.5 vs 99.5 ms).
    net = network_model(_system())
    for size, algorithm in ((16 * GiB, "ring"), (GiB, "tree")):
        ring = ring_all_reduce_s(size, 1024, 25e9 * IB, 5e-6)
        tree = 20 * 5e-6 * 2.125 + 2 * size / (25e9 * IB * 0.92)
        assert (ring < tree) == (algorithm == "ring")
        assert net.collective_s(Collective.ALL_REDUCE, size, Span(1, 1024)) == pytest.approx(min(ring, tree), rel=1e-12)
    assert ring_all_reduce_s(16 * GiB, 1024, 25e9 * IB, 5e-6) == pytest.approx(1.4715, rel=1e-3)


def test_two_domains_keep_the_ring():
    # 2 domains: ring 2 steps of 5 us against a tree level of 2 * 10.6 us; the ring also moves less.
    net = network_model(_system())
    assert net.collective_s(Collective.ALL_REDUCE, 4, Span(1, 2)) == pytest.approx(
        ring_all_reduce_s(4, 2, 25e9 * IB, 5e-6), rel=1e-12)


def test_hierarchical_all_reduce_uses_the_tree_across_domains():
    # 8 GPUs in each of 1024 domains, 4 bytes: NVLink reduce-scatter and all-gather (7 steps of 2 us each)
    # around the tree all-reduce of 4/8 bytes across the domains.
    net = network_model(_system())
    nvlink = 300e9 * efficiency_table()["collectives"]["fabrics"]["nvlink"]["busbw_fraction"]["all_gather"]
    inside = ring_gather_s(4, 8, nvlink, 2e-6)
    across = 20 * 5e-6 * 2.125 + 2 * 0.5 / (25e9 * IB * 0.92)
    assert net.collective_s(Collective.ALL_REDUCE, 4, Span(8, 1024)) == pytest.approx(2 * inside + across, rel=1e-12)


def test_a_group_under_one_leaf_stays_on_its_rail_and_a_larger_one_crosses_the_spine():
    # Members at the same position of every node share a rail; 32 nodes fit under the rail's leaf switch,
    # 64 do not: their traffic crosses a 2:1 oversubscribed spine, 1 us farther.
    net = network_model(_system(nodes_per_leaf=32, oversubscription=2.0, spine_latency_s=1e-6))
    leaf = net.collective_s(Collective.ALL_GATHER, GiB, Span(1, 32))
    spine = net.collective_s(Collective.ALL_GATHER, GiB, Span(1, 64))
    assert leaf == pytest.approx(31 * 5e-6 + 31 / 32 * GiB / (25e9 * IB), rel=1e-12)
    assert spine == pytest.approx(63 * 6e-6 + 63 / 64 * GiB / (12.5e9 * IB), rel=1e-12)
    assert net.busbw_bytes_per_s(Collective.ALL_GATHER, Span(1, 32)) == pytest.approx(25e9 * IB)
    assert net.busbw_bytes_per_s(Collective.ALL_GATHER, Span(1, 64)) == pytest.approx(12.5e9 * IB)


def test_the_nodes_of_a_group_count_its_gpus_per_node():
    # 8 GPUs per scale-up domain but 4 per node (a tray): 32 domains with 8 members each occupy 64 nodes.
    trays = network_model(_system(nodes_per_leaf=32, oversubscription=2.0, gpus_per_node=4))
    nodes = network_model(_system(nodes_per_leaf=32, oversubscription=2.0))
    assert trays.busbw_bytes_per_s(Collective.ALL_GATHER, Span(8, 32)) == pytest.approx(12.5e9 * IB)
    assert nodes.busbw_bytes_per_s(Collective.ALL_GATHER, Span(8, 32)) == pytest.approx(25e9 * IB)
    assert trays.busbw_bytes_per_s(Collective.ALL_GATHER, Span(1, 32)) == pytest.approx(25e9 * IB)


def test_a_non_blocking_spine_costs_only_its_latency():
    flat = network_model(_system())
    fat_tree = network_model(_system(nodes_per_leaf=32, spine_latency_s=0.26e-6))
    t_flat = flat.collective_s(Collective.REDUCE_SCATTER, GiB, Span(1, 64))
    t_tree = fat_tree.collective_s(Collective.REDUCE_SCATTER, GiB, Span(1, 64))
    assert t_tree - t_flat == pytest.approx(63 * 0.26e-6, rel=1e-6)


def test_the_gradient_norm_all_reduce_over_4096_h100s():
    # tp=8, pp=4, dp=128 on 512 DGX H100 (4096 GPUs): with the distributed optimizer the norm's fp32 is
    # all-reduced over every rank, 8 per node in 512 nodes (16 leaves of 32: the spine, 4.0 + 0.26 us).
    # NVLink: 7 steps of 1.9 us each side (bytes negligible); across: tree of floor(log2 512) = 9 levels,
    # 2 * 9 * 4.26 us * 2.125 = 162.9 us, against a ring of 2 * 511 * 4.26 us = 4.35 ms.
    system = load_system("dgx-h100", num_gpus=4096)
    world = span(parse_strategy("tp=8,pp=4,dp=128"), (Axis.TP, Axis.CP, Axis.DP, Axis.PP), 8)
    assert world == Span(8, 512)
    t = network_model(system).collective_s(Collective.ALL_REDUCE, 4, world)
    nvlink = 450e9 * 0.822  # efficiency.yaml: H100 NVLink ring collectives
    inside = 7 * 1.9e-6 + 7 / 8 * 4 / nvlink
    tree = 2 * 9 * 4.26e-6 * 2.125 + 2 * 0.5 / (50e9 * IB * 0.92)
    assert t == pytest.approx(2 * inside + tree, rel=1e-9)
    assert t == pytest.approx(189.5e-6, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(size=st.floats(1.0, 16.0 * GiB), domains=st.integers(2, 4096))
def test_all_reduce_across_domains_is_the_faster_of_ring_and_tree(size: float, domains: int):
    net = network_model(_system())
    ring = ring_all_reduce_s(size, domains, 25e9 * IB, 5e-6)
    tree = tree_all_reduce_s(size, domains, 25e9 * IB * 0.92, 5e-6 * 2.125)
    assert net.collective_s(Collective.ALL_REDUCE, size, Span(1, domains)) == pytest.approx(min(ring, tree), rel=1e-12)
