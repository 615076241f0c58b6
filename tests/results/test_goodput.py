"""The goodput model (madmax.results.goodput): hand-computed values, Young's interval, invariants and bad input."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax.api import simulate
from madmax.cli import app
from madmax.config.reliability import load_reliability
from madmax.errors import ConfigError, MadmaxError
from madmax.results.goodput import JobState, expected_max_normal, goodput

ROOT = Path(__file__).resolve().parents[2]


def profile(rate_per_gpu_hour: float = 1e-5, *, restart_s: float = 600.0, sigma: float = 0.0, stall_s: float = 0.0,
            asynchronous: bool = False, spare: bool = True, repair_s: float = 3600.0, interval_s: float | None = None,
            node_bw: str = "10 GB/s", fs_bw: str = "1 TB/s"):
    return load_reliability({
        "name": "test", "failures": [{"component": "gpu", "per": "gpu", "rate_per_hour": rate_per_gpu_hour}],
        "restart": {"restart_s": restart_s, "repair_s": repair_s, "spare_nodes": spare},
        "checkpoint": {"asynchronous": asynchronous, "node_bytes_per_s": node_bw, "filesystem_bytes_per_s": fs_bw,
                       "stall_s": stall_s, "interval_s": interval_s},
        "stragglers": {"speed_sigma": sigma}})


def job(gpus: int = 1024, iteration_s: float = 2.0, checkpoint_tb: float = 1.0) -> JobState:
    return JobState(iteration_time_s=iteration_s, tokens_per_iteration=4e6, num_gpus=gpus, gpus_per_node=8,
                    checkpoint_bytes=checkpoint_tb * 1e12, restore_bytes=checkpoint_tb * 1e12, host_bytes_per_s=32e9)


def test_a_synchronous_run_matches_the_equations_by_hand():
    # 1,024 GPUs at 1e-5 failures per GPU-hour: lambda = 1.024e-2 per hour. 128 nodes x 10 GB/s = 1.28 TB/s,
    # above the file system's 1 TB/s: a 1 TB checkpoint writes in 1 s, the synchronous stall; R = 600 + 1 s.
    # tau = 600 s given. 4e12 tokens at 4e6 per 2 s iteration: W = 2e6 s.
    g = goodput(job(), profile(interval_s=600.0), 4e12)
    lam = 1.024e-2 / 3600
    wall = 2e6 * (1 + 1 / 600) / (1 - lam * (601 + (600 + 1) / 2))
    assert g.wall_s == pytest.approx(wall, rel=1e-12)
    assert g.interruptions == pytest.approx(lam * wall, rel=1e-12)
    assert g.checkpoint_write_s == pytest.approx(1.0)
    assert g.restart_each_s == pytest.approx(601.0)
    parts = g.ideal_s + g.stragglers_s + g.checkpoint_s + g.lost_work_s + g.restart_s
    assert parts == pytest.approx(g.wall_s, rel=1e-12)


def test_the_chosen_interval_is_youngs_for_rare_failures_and_short_restarts():
    # lambda = 1.024e-4 per hour (MTBF ~ 9,766 h), stall 1 s: Young's sqrt(2 delta / lambda) = 8,385 s.
    g = goodput(job(), profile(rate_per_gpu_hour=1e-7, restart_s=0.0), 4e12)
    young = math.sqrt(2 * 1.0 / (1.024e-4 / 3600))
    assert g.checkpoint_interval_chosen
    assert g.checkpoint_interval_s == pytest.approx(young, rel=1e-3)
    assert g.checkpoint_interval_s % 2.0 == pytest.approx(0.0, abs=1e-6)  # whole iterations


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(1e-7, 1e-4), restart=st.floats(0, 3600), stall=st.floats(0, 30), sigma=st.floats(0, 0.05),
       asynchronous=st.booleans(), iteration=st.floats(0.1, 30), gpus=st.sampled_from([8, 64, 1024, 8192]))
def test_the_chosen_interval_beats_its_neighbours_and_goodput_is_at_most_one(rate, restart, stall, sigma,
                                                                             asynchronous, iteration, gpus):
    p = profile(rate, restart_s=restart, sigma=sigma, stall_s=stall, asynchronous=asynchronous)
    j = job(gpus, iteration)
    try:
        best = goodput(j, p, 1e12)
    except MadmaxError:
        return  # interruptions faster than recovery: refused, checked below
    assert 0 < best.goodput <= best.effective_training_time_ratio <= 1
    tau = best.checkpoint_interval_s
    for other in (tau - iteration, tau + iteration):
        try:
            neighbour = goodput(j, p.with_interval(other), 1e12)
        except (ConfigError, MadmaxError):
            continue  # shorter than a write or an iteration
        assert best.wall_s <= neighbour.wall_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(rate=st.floats(1e-7, 3e-5), restart=st.floats(0, 1800), sigma=st.floats(0, 0.03), stall=st.floats(0, 10))
def test_goodput_falls_with_the_gpu_count_at_fixed_rates(rate, restart, sigma, stall):
    p = profile(rate, restart_s=restart, sigma=sigma, stall_s=stall, asynchronous=True)
    values = [goodput(job(g), p, 1e12).goodput for g in (8, 64, 512, 4096)]
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(values))


def test_stragglers_follow_the_expected_slowest_of_the_gpus():
    assert expected_max_normal(1) == 0.0
    # Blom's approximation against the exact expectations (numerical integration): within 0.03
    for n, exact in ((2, 0.5642), (8, 1.4236), (1024, 3.2482), (16384, 3.9714)):
        assert expected_max_normal(n) == pytest.approx(exact, abs=0.03)
    g = goodput(job(16384), profile(0.0, sigma=0.01), 1e12)
    assert g.straggler_slowdown == pytest.approx(1 + 0.01 * expected_max_normal(16384))
    excluded = load_reliability({**profile(0.0, sigma=0.01).model_dump(), "stragglers": {
        "speed_sigma": 0.01, "exclude_slowest": 0.01}})
    assert goodput(job(16384), excluded, 1e12).straggler_slowdown == pytest.approx(1 + 0.01 * 2.3263, abs=1e-4)


def test_a_planned_stop_saves_a_checkpoint_first_and_loses_no_work():
    data = profile(0.0, stall_s=2.0).model_dump(mode="json")
    data["failures"] = [{"component": "maintenance", "per": "node", "rate_per_hour": 1e-3, "planned": True}]
    g = goodput(job(), load_reliability(data), 4e12)
    # 128 nodes x 1e-3 per node-hour; each stop: 2 s stall + a 1 s write + 601 s of restart
    lam_p = 128 * 1e-3 / 3600
    assert g.wall_s == pytest.approx(2e6 / (1 - lam_p * 604), rel=1e-12)
    assert g.lost_work_s == 0 and g.checkpoint_interval_s is None and g.mtbf_s == math.inf
    assert g.interruptions == pytest.approx(lam_p * g.wall_s)
    assert g.checkpoint_s == pytest.approx(g.interruptions * 3) and g.restart_s == pytest.approx(g.interruptions * 601)
    # beside failures, the stops add their share to the denominator and the chosen interval still wins
    data["failures"].append({"component": "gpu", "per": "gpu", "rate_per_hour": 1e-5})
    both = goodput(job(), load_reliability(data), 4e12)
    alone = goodput(job(), profile(1e-5, stall_s=2.0), 4e12)
    assert both.wall_s > alone.wall_s and both.mtbf_s == pytest.approx(alone.mtbf_s)
    parts = both.ideal_s + both.stragglers_s + both.checkpoint_s + both.lost_work_s + both.restart_s
    assert parts == pytest.approx(both.wall_s, rel=1e-12)


def test_without_spares_a_restart_waits_for_the_repair():
    spare = goodput(job(), profile(spare=True, interval_s=600), 1e12)
    none = goodput(job(), profile(spare=False, repair_s=3600, interval_s=600), 1e12)
    assert none.restart_each_s == pytest.approx(spare.restart_each_s + 3600)
    assert none.wall_s > spare.wall_s


def test_an_asynchronous_checkpoint_stalls_for_the_copy_and_loses_the_write_in_flight():
    # 1 TB over 1,024 GPUs at 32 GB/s each: 30.5 ms of copy, plus stall_s.
    g = goodput(job(), profile(stall_s=2.0, asynchronous=True, interval_s=600), 1e12)
    assert g.checkpoint_stall_s == pytest.approx(2.0 + 1e12 / 1024 / 32e9)
    lam = 1.024e-2 / 3600
    assert g.lost_work_s == pytest.approx(g.interruptions * ((600 + g.checkpoint_stall_s) / 2 + 1.0))
    assert g.interruptions == pytest.approx(lam * g.wall_s)


@pytest.mark.parametrize(("change", "message"), [
    ({"failures": [{"component": "gpu", "per": "gpu", "rate_per_hour": -1}]}, "rate_per_hour"),
    ({"failures": [{"component": "gpu", "per": "gpu", "rate_per_hour": float("nan")}]}, "rate_per_hour"),
    ({"failures": [{"component": "gpu", "per": "rack", "rate_per_hour": 1e-5}]}, "per"),
    ({"checkpoint": {"node_bytes_per_s": 0, "filesystem_bytes_per_s": "1 TB/s", "stall_s": 0}}, "node_bytes_per_s"),
    ({"stragglers": {"speed_sigma": -0.1}}, "speed_sigma"),
])
def test_a_bad_profile_is_one_sentence_naming_the_field(change, message):
    data = {**profile().model_dump(mode="json"), **change}
    with pytest.raises(ConfigError, match=message) as err:
        load_reliability(data)
    assert "\n" not in str(err.value)


def test_an_interval_shorter_than_a_write_is_refused():
    # 10 TB at 1 TB/s: a 10 s write; a 5 s interval cannot hold it.
    with pytest.raises(ConfigError, match=r"checkpoint_interval=5 s is shorter than a checkpoint write"):
        goodput(job(checkpoint_tb=10), profile(interval_s=5.0), 1e12)
    with pytest.raises(ConfigError, match="checkpoint_interval"):
        profile().with_interval(0)


def test_failures_faster_than_recovery_never_finish():
    with pytest.raises(MadmaxError, match="never finishes"):
        goodput(job(8192), profile(1e-2, restart_s=3600), 1e12)


def test_an_interval_for_a_profile_without_checkpoints_is_refused_not_dropped():
    with pytest.raises(ConfigError, match="checkpoint_interval=600 s applies to checkpoints"):
        goodput(job(), load_reliability("ideal").with_interval(600), 1e12)


def test_failures_without_checkpoints_are_refused():
    data = profile().model_dump(mode="json")
    data["checkpoint"]["enabled"] = False
    with pytest.raises(ConfigError, match=r"checkpoint\.enabled=false"):
        goodput(job(), load_reliability(data), 1e12)


def test_simulate_adds_the_time_to_train_and_ideal_is_the_iterations_alone():
    kwargs = dict(global_batch=512, seq_len=4096, strategy="tp=8,pp=2")
    ideal = simulate("llama-3-70b", "dgx-h100", 256, **kwargs, tokens=1e12, reliability="ideal")
    t = ideal.time_to_train
    iterations = 1e12 / (512 * 4096)
    assert t["wall_s"] == pytest.approx(iterations * ideal.iteration_time_s)
    assert t["goodput"] == 1.0 and t["interruptions"] == 0
    assert t["mtbf_s"] is None and t["checkpoint_interval_s"] is None  # never fails, never checkpoints: no inf
    assert t["gpu_hours"] == pytest.approx(256 * t["wall_s"] / 3600)
    real = simulate("llama-3-70b", "dgx-h100", 256, **kwargs, tokens=1e12)
    assert real.time_to_train["wall_s"] > t["wall_s"]
    assert "time_to_train" in real.to_dict() and "time_to_train" not in simulate(
        "llama-3-70b", "dgx-h100", 256, **kwargs).to_dict()
    # 70.6 B parameters x (2 bytes of bf16 weights + 12 of fp32 master weights and Adam moments)
    assert real.time_to_train["checkpoint_bytes"] == pytest.approx(70.55e9 * 14, rel=0.01)


def test_lora_checkpoints_only_the_adapters():
    kwargs = dict(global_batch=64, seq_len=2048, strategy="tp=8", task="finetune")
    full = simulate("llama-3-8b", "dgx-h100", 8, **kwargs, tokens=1e9)
    lora = simulate("llama-3-8b", "dgx-h100", 8, **kwargs, finetune="lora", lora_rank=16, tokens=1e9)
    assert lora.checkpoint_bytes < full.checkpoint_bytes / 50
    assert lora.restore_bytes > 8e9 * 2  # the frozen base weights are read again


@pytest.mark.parametrize("args", [
    ["--tokens", "-1"],
    ["--tokens", "1e12", "--checkpoint-interval", "0"],
    ["--tokens", "1e12", "--reliability", "no-such-profile"],
    ["--reliability", "ideal"],
    ["--checkpoint-interval", "600"],
])
def test_cli_bad_time_to_train_input_is_one_line_and_exit_2(args):
    result = CliRunner().invoke(app, ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "8",
                                      "--global-batch", "64", "--seq-len", "2048", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_cli_time_to_train_is_refused_for_serving():
    result = CliRunner().invoke(app, ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "1",
                                      "--task", "inference", "--prompt-len", "128", "--output-len", "16",
                                      "--tokens", "1e12"])
    assert result.exit_code == 2 and "tokens applies to training" in result.output


def test_cli_prints_the_time_to_train():
    result = CliRunner().invoke(app, ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "64",
                                      "--global-batch", "256", "--seq-len", "4096", "--tokens", "2e12"])
    assert result.exit_code == 0, result.output
    assert "Time to train 2 T tokens (reliability llama3-h100)" in result.output
    assert "expected interruptions" in result.output and "checkpoint interval" in result.output


def test_docs_goodput_table_is_what_the_benchmark_prints():
    spec = importlib.util.spec_from_file_location("goodput_bench", ROOT / "benchmarks" / "goodput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    doc = (ROOT / "docs" / "goodput.md").read_text(encoding="utf-8")
    start, end = doc.index(bench.MARKERS[0]) + len(bench.MARKERS[0]), doc.index(bench.MARKERS[1])
    assert doc[start:end] == "\n" + bench.tables()


def test_the_wait_for_a_spare_is_erlang_cs():
    from madmax.results.goodput import spare_wait

    hour = 3600.0
    assert spare_wait(1 / hour, hour, None) == 0.0  # as many spares as needed
    assert spare_wait(1 / hour, hour, 0) == hour  # none: every failure waits for its node's repair
    assert spare_wait(2 / hour, hour, 2) == hour  # offered load a = 2 fills both spares: the pool is empty
    # M/M/1 at a = 0.5: P(wait) = 0.5, W = 0.5 x R / (1 - 0.5) = R
    assert spare_wait(0.5 / hour, hour, 1) == pytest.approx(hour, rel=1e-12)
    # M/M/2 at a = 0.5: C = (0.125 x 2 / 1.5) / (1 + 0.5 + 0.125 x 2 / 1.5) = 0.1, W = 0.1 x R / 1.5
    assert spare_wait(0.5 / hour, hour, 2) == pytest.approx(0.1 * hour / 1.5, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(1e-7, 1e-2), repair=st.floats(1.0, 1e5), spares=st.integers(0, 40))
def test_a_spare_more_never_waits_longer(rate, repair, spares):
    from madmax.results.goodput import spare_wait

    fewer, more = spare_wait(rate, repair, spares), spare_wait(rate, repair, spares + 1)
    assert 0 <= more <= fewer * (1 + 1e-12) <= repair * (1 + 1e-12)


def test_only_failures_that_take_a_node_out_wait_for_a_spare():
    # GPU failures (node out) at 1e-5 per GPU-hour and software failures (same nodes) at the same rate per node on
    # 1,024 GPUs / 128 nodes; one spare node repaired in an hour: a = 1.024e-2 and the M/M/1 wait a R / (1 - a)
    both = {"name": "t", "failures": [{"component": "gpu", "per": "gpu", "rate_per_hour": 1e-5},
                                      {"component": "software", "per": "node", "rate_per_hour": 8e-5,
                                       "replaces_node": False}],
            "restart": {"restart_s": 600, "repair_s": 3600, "spares": 1},
            "checkpoint": {"asynchronous": False, "node_bytes_per_s": "10 GB/s", "filesystem_bytes_per_s": "1 TB/s",
                           "stall_s": 0, "interval_s": 600}, "stragglers": {"speed_sigma": 0}}
    g = goodput(job(), load_reliability(both), 4e12)
    a = 1.024e-2
    wait = a * 3600 / (1 - a)
    assert g.spare_wait_s == pytest.approx(wait, rel=1e-12)
    assert g.restart_each_s == pytest.approx(601 + wait / 2, rel=1e-12)  # half the failures replace a node
    none = goodput(job(), load_reliability({**both, "restart": {**both["restart"], "spares": 0}}), 4e12)
    plenty = goodput(job(), load_reliability({**both, "restart": {**both["restart"], "spares": 8}}), 4e12)
    assert plenty.wall_s < g.wall_s < none.wall_s and none.restart_each_s == pytest.approx(601 + 3600 / 2)
    with pytest.raises(ConfigError, match="spares"):
        load_reliability({**both, "restart": {**both["restart"], "spares": -1}})
