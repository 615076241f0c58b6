"""The profile fields that `madmax calibrate` adds: optional, so older profile files keep loading."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.errors import ConfigError
from madmax.hardware.compute import compute_model
from madmax.hardware.profile import CollectiveFit, ComputeProfile, LaunchFit, load_profile
from madmax.validate.calibrate import device_peaks


def test_shipped_profile_has_no_network_or_launch_fit():
    profile = load_profile()
    assert profile.network == () and profile.launch_fit is None


def test_network_and_launch_fit_validate():
    data = load_profile().model_dump()
    data["network"] = [{"collective": "all_reduce", "num_gpus": 8, "step_latency_s": "2.5 us",
                        "busbw_bytes_per_s": "230 GB/s", "fit_errors": {"in_sample": {"count": 11, "median": 0.0,
                                                                                      "max": 0.001}}}]
    data["launch_fit"] = {"data": "x.csv", "base_profile": "default", "base_launch_s": 1.8611e-05,
                          "objective": "least squares", "split": "by shape", "train_rows": 4, "held_out_rows": 4}
    profile = ComputeProfile.model_validate(data)
    (fit,) = profile.network
    assert isinstance(fit, CollectiveFit) and fit.busbw_bytes_per_s == 230e9
    assert fit.step_latency_s == pytest.approx(2.5e-6)
    assert isinstance(profile.launch_fit, LaunchFit)


def test_vtrain_stack_profile_changes_only_the_launch_floors():
    base, stack = load_profile(), load_profile("calibration/vtrain_megatron_deepspeed_a100.yaml")
    assert stack.gemm == base.gemm and stack.memory == base.memory and stack.reference_peaks == base.reference_peaks
    ratio = stack.launch_s / base.launch_s
    assert stack.attention.launch_s == pytest.approx(base.attention.launch_s * ratio, rel=1e-5)
    from madmax.config.loaders import load_gpu

    assert compute_model(load_gpu("a100-80gb"), stack).launch_s == stack.launch_s


def test_device_peaks():
    assert device_peaks("NVIDIA H200").flops_per_s["bf16"] == 989e12  # efficiency.yaml reference device
    a100 = device_peaks("NVIDIA A100-SXM4-80GB")  # catalog alias a100-sxm4-80gb
    assert a100.flops_per_s["bf16"] == 312e12 and "a100-80gb" in a100.source
    assert device_peaks("cpu x86_64", gpu="h100").hbm_bytes_per_s > 0
    with pytest.raises(ConfigError, match="pass --gpu"):
        device_peaks("NVIDIA RTX Unknown")


def test_measured_collectives_replace_the_busbw_table():
    # A fit on one node of 8 GPUs: alpha 3 us, busbw 300 GB/s. A 1 GiB ring all-reduce on 8 GPUs of
    # that fabric then takes 2*7*3e-6 + 2*7/8 * 2**30 / 300e9 = 4.2e-5 + 6.2634e-3 s.
    from madmax.config.loaders import load_system
    from madmax.hardware.collectives import Collective, Span, network_model
    from madmax.hardware.profile import CollectiveFit

    fit = CollectiveFit(collective="all_reduce", num_gpus=8, num_nodes=1, step_latency_s=3e-6,
                        busbw_bytes_per_s=300e9)
    system = load_system("dgx-h100", 8)
    t = network_model(system, (fit,)).collective_s(Collective.ALL_REDUCE, 2**30, Span(8, 1))
    assert t == pytest.approx(2 * 7 * 3e-6 + 2 * 7 / 8 * 2**30 / 300e9, rel=1e-9)
    # other collectives and the table-based model are untouched
    plain = network_model(system)
    assert plain.collective_s(Collective.ALL_REDUCE, 2**30, Span(8, 1)) != pytest.approx(t)


def test_fits_at_several_group_sizes_each_serve_their_own_groups():
    # nccl-tests all_reduce_perf on 2 and on 8 GPUs of one node (vTrain's A100 node measures 20 us per
    # step at 2 GPUs, 5 us at 8): a group of n takes the fit of the largest measured size <= n, the
    # smallest fit a smaller group; an all_gather, which no fit measures, keeps the table's busbw and
    # takes the last fit's step latency.
    from madmax.config.loaders import load_system
    from madmax.hardware.collectives import Collective, Span, network_model, ring_all_reduce_s, ring_gather_s
    from madmax.hardware.profile import CollectiveFit

    two = CollectiveFit(collective="all_reduce", num_gpus=2, step_latency_s=20e-6, busbw_bytes_per_s=185e9)
    eight = CollectiveFit(collective="all_reduce", num_gpus=8, step_latency_s=5e-6, busbw_bytes_per_s=226e9)
    system = load_system("dgx-a100", 8)
    size = 8 * 2**20
    for fits in ((two, eight), (eight, two)):  # the order of the fits does not matter
        net = network_model(system, fits)
        for n, (alpha, busbw) in ((2, (20e-6, 185e9)), (4, (20e-6, 185e9)), (8, (5e-6, 226e9))):
            expected = ring_all_reduce_s(size, n, busbw, alpha)
            assert net.collective_s(Collective.ALL_REDUCE, size, Span(n, 1)) == pytest.approx(expected, rel=1e-12)
    plain = network_model(system)
    gather = network_model(system, (two, eight)).collective_s(Collective.ALL_GATHER, size, Span(8, 1))
    table_busbw = plain.busbw_bytes_per_s(Collective.ALL_GATHER, Span(8, 1))
    assert gather == pytest.approx(ring_gather_s(size, 8, table_busbw, 5e-6), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(fits=st.dictionaries(st.integers(1, 8), st.tuples(st.floats(1e-7, 1e-4), st.floats(1e10, 1e12)),
                            min_size=1, max_size=4),
       n=st.integers(2, 8), size=st.floats(1.0, 2.0**32))
def test_any_set_of_group_size_fits_picks_the_largest_measured_size_up_to_the_group(fits, n, size):
    from madmax.config.loaders import load_system
    from madmax.hardware.collectives import Collective, Span, network_model, ring_all_reduce_s
    from madmax.hardware.profile import CollectiveFit

    profile_fits = tuple(CollectiveFit(collective="all_reduce", num_gpus=g, step_latency_s=a, busbw_bytes_per_s=b)
                         for g, (a, b) in fits.items())
    chosen = max((g for g in fits if g <= n), default=min(fits))
    alpha, busbw = fits[chosen]
    t = network_model(load_system("dgx-a100", 8), profile_fits).collective_s(Collective.ALL_REDUCE, size, Span(n, 1))
    assert t == pytest.approx(ring_all_reduce_s(size, n, busbw, alpha), rel=1e-9)
