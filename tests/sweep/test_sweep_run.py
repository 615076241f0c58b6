"""Running sweeps: the rows, resuming after an interruption, and the backends agreeing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from madmax.api import simulate
from madmax.errors import MadmaxError
from madmax.sweep import load, run_sweep
from madmax.sweep.spec import load_sweep
from madmax.sweep.store import completed_keys, shard_paths


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.sort_values("key").reset_index(drop=True),
                                  b.sort_values("key").reset_index(drop=True), check_like=True)


def test_tiny_sweep_rows(reference, tmp_path):
    df = load(reference)
    assert len(df) == 16 and df["key"].is_unique
    assert df["status"].value_counts().to_dict() == {"ok": 8, "error": 8}
    # tp=8 cannot split 4 KV heads: an error row with the engine's sentence, not a crash
    bad = df[df["strategy_input"] == "tp=8"]
    assert bad["error"].str.contains("tp=8 does not divide num_kv_heads=4").all()
    row = df[(df["system"] == "p4d.24xlarge") & (df["num_gpus"] == 16) & (df["strategy_input"] == "tp=2")
             & (df["whatif"] == "baseline")].iloc[0]
    r = simulate(str(reference.parent / "spec" / "tiny.yaml"), "p4d.24xlarge", 16, global_batch=16, seq_len=1024,
                 strategy="tp=2")
    assert row["iteration_time_s"] == r.iteration_time_s and row["mfu"] == r.mfu and row["fits"] == r.fits
    assert row["strategy"] == r.strategy
    assert row["exposed_communication_s"] == r.breakdown["exposed_communication_s"]
    assert row["exposed_tp_all_gather_s"] == r.breakdown["communication_s"]["tp.all_gather"]["exposed"]
    # 1e9 tokens at 16 x 1024 tokens per iteration: 1e9 / 16384 iterations of T seconds
    ideal = 1e9 / (16 * 1024) * r.iteration_time_s
    assert row["ideal_time_to_train_s"] == pytest.approx(ideal, rel=1e-12)
    # the time to train is the goodput model's wall clock (default profile llama3-h100), as simulate(tokens=) says
    g = simulate(str(reference.parent / "spec" / "tiny.yaml"), "p4d.24xlarge", 16, global_batch=16, seq_len=1024,
                 strategy="tp=2", tokens=1e9).time_to_train
    t = g["wall_s"]
    assert ideal < t and row["time_to_train_s"] == pytest.approx(t, rel=1e-12)
    assert row["goodput"] == pytest.approx(g["goodput"]) and row["reliability"] == "llama3-h100"
    assert row["gpu_hours"] == pytest.approx(16 * t / 3600, rel=1e-12)
    # p4d.24xlarge: $4.0975 per GPU-hour; 6,500 W per node of 8 GPUs, 2 nodes
    assert row["cost_usd"] == pytest.approx(4.0975 * 16 * t / 3600, rel=1e-12)
    assert row["energy_j"] == pytest.approx(2 * 6500 * t, rel=1e-12)
    # dgx-h100 has no price: cost is missing, energy is not
    h100 = df[(df["system"] == "dgx-h100") & (df["status"] == "ok")]
    assert h100["cost_usd"].isna().all() and (h100["energy_j"] > 0).all()
    # the NIC what-if never slows training down
    ok = df[df["status"] == "ok"].set_index(["system", "num_gpus", "whatif"])["iteration_time_s"]
    for system, n in [("p4d.24xlarge", 16), ("dgx-h100", 16)]:
        assert ok[(system, n, "nic_bandwidth x2")] <= ok[(system, n, "baseline")]


def test_interrupted_sweep_resumes_to_the_same_rows(reference, make_spec, tmp_path):
    spec = make_spec(tmp_path / "spec")
    out = tmp_path / "out"
    # A run that stops after 5 points, with shards flushed every 2 rows, then a Ctrl-C after 3 more.
    first = run_sweep(spec, out, workers=1, stop_after=5, flush_rows=2, chunk_size=1)
    assert first.interrupted and first.computed == 5 and first.remaining == 11
    assert len(completed_keys(out)) == 5

    def interrupt(done: int, total: int) -> None:
        if done == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, workers=1, flush_rows=100, chunk_size=1, on_progress=interrupt)
    assert len(completed_keys(out)) == 8  # rows received before the interruption were written
    # A write killed half-way leaves a temporary file; the next run removes it and finishes the rest.
    (out / ".part-00000000000000000000-1-00001.parquet.tmp").write_bytes(b"PAR1 half a shard")
    last = run_sweep(spec, out, workers=1)
    assert (last.done_before, last.computed, last.interrupted) == (8, 8, False)
    assert not list(out.glob(".part-*"))
    _same(load(out), load(reference))
    again = run_sweep(spec, out, workers=1)
    assert (again.done_before, again.computed) == (16, 0)
    assert sum(1 for _ in shard_paths(out)) >= 3


def test_process_pool_agrees_with_one_process(reference, make_spec, tmp_path):
    summary = run_sweep(make_spec(tmp_path / "spec"), tmp_path / "out", workers=2, chunk_size=3)
    assert summary.computed == 16
    _same(load(tmp_path / "out"), load(reference))


def test_dask_local_cluster_agrees_with_local(reference, make_spec, tmp_path):
    pytest.importorskip("distributed")
    summary = run_sweep(make_spec(tmp_path / "spec"), tmp_path / "out", workers=2, dask="local",
                        dask_processes=False, chunk_size=2)
    assert summary.computed == 16
    _same(load(tmp_path / "out"), load(reference))


def test_dask_scheduler_address_agrees_with_local(reference, make_spec, tmp_path):
    distributed = pytest.importorskip("distributed")
    # An existing scheduler reached over TCP, as `--dask tcp://HOST:PORT` does.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        summary = run_sweep(make_spec(tmp_path / "spec"), tmp_path / "out", dask=cluster.scheduler_address)
    assert summary.computed == 16
    _same(load(tmp_path / "out"), load(reference))


def test_search_mode_keeps_the_best_strategy(make_spec, base_spec, tmp_path):
    spec = {**base_spec, "mode": "search", "systems": "dgx-h100", "num_gpus": 8, "strategies": None,
            "whatifs": None, "search": {"top": 2, "refine": 30, "zero": [1], "recompute": ["none"]},
            "groups": [{"name": "space"}, {"name": "listed", "strategies": ["tp=1", "tp=2", "tp=8"]}]}
    run_sweep(make_spec(tmp_path / "spec", spec), tmp_path / "out", workers=1)
    df = load(tmp_path / "out").set_index("group_name")
    space, listed = df.loc["space"], df.loc["listed"]
    assert space["status"] == "ok" and space["search_evaluated"] > 2
    ranking = json.loads(space["search_top_json"])
    assert len(ranking) == 2 and ranking[0]["iteration_time_s"] <= ranking[1]["iteration_time_s"]
    assert ranking[0]["iteration_time_s"] == space["iteration_time_s"]
    # the listed candidates: tp=8 is invalid (4 KV heads), the faster of tp=1 and tp=2 is kept
    assert listed["strategy_input"] == "best of: tp=1 | tp=2 | tp=8" and listed["search_evaluated"] == 2
    times = {s: simulate(str(tmp_path / "spec" / "tiny.yaml"), "dgx-h100", 8, global_batch=16, seq_len=1024, strategy=s)
             .iteration_time_s for s in ("tp=1", "tp=2")}
    assert listed["iteration_time_s"] == min(times.values())


def test_search_mode_takes_the_settings_its_screen_does_not_cost(make_spec, base_spec, tmp_path):
    # issue 26: a sweep's search tries tp_overlap on its simulated candidates as `madmax search --tp-overlap` does
    options = {"top": 2, "refine": 30, "zero": [1], "recompute": ["none"], "max_tp": 2}
    spec = {**base_spec, "mode": "search", "systems": "dgx-h100", "num_gpus": 8, "strategies": None,
            "whatifs": None, "groups": [{"name": "plain", "search": options},
                                        {"name": "overlap", "search": {**options, "tp_overlap": [1]}}]}
    run_sweep(make_spec(tmp_path / "spec", spec), tmp_path / "out", workers=1)
    df = load(tmp_path / "out").set_index("group_name")
    plain = json.loads(df.loc["plain", "search_top_json"])
    overlap = json.loads(df.loc["overlap", "search_top_json"])
    assert not any("tp_overlap" in r["strategy"] for r in plain)
    assert all(("tp_overlap=1" in r["strategy"]) == ("tp=2" in r["strategy"] and "sp=1" in r["strategy"])
               for r in overlap)
    bad = make_spec(tmp_path / "bad", {**spec, "groups": [{"search": {**options, "dispatcher": ["nccl"]}}]})
    with pytest.raises(MadmaxError, match="dispatcher"):
        load_sweep(bad)


def test_each_stack_is_simulated_and_searched_under_itself(make_spec, base_spec, tmp_path):
    # issue 26: a sweep's stacks axis runs every point under its stack, in simulate and in search mode, and the
    # row says which: the same numbers as `simulate --stack` / `search --stack` give.
    from madmax import api
    from madmax.search.api import find

    spec = {**base_spec, "systems": "dgx-h100", "num_gpus": 8, "strategies": ["tp=2"], "whatifs": None,
            "train": None, "stacks": ["megatron-core", "fsdp2"],
            "groups": [{"name": "given"},
                       {"name": "searched", "mode": "search", "strategies": None,
                        "search": {"top": 1, "refine": 30, "max_tp": 2}}]}
    run_sweep(make_spec(tmp_path / "spec", spec), tmp_path / "out", workers=1)
    df = load(tmp_path / "out").set_index(["group_name", "stack"])
    model = str(tmp_path / "spec" / "tiny.yaml")
    for stack in ("megatron-core", "fsdp2"):
        given = api.simulate(model, "dgx-h100", 8, global_batch=16, seq_len=1024, strategy="tp=2", stack=stack)
        assert df.loc[("given", stack), "iteration_time_s"] == pytest.approx(given.iteration_time_s, rel=1e-9)
        outcome = find(model, "dgx-h100", 8, "pretrain", 16, 1024, None, top=1, exact=1, refine=30, max_tp=2,
                       stack=None if stack == "megatron-core" else stack)
        best = outcome.exact[outcome.top(1)[0]]
        assert df.loc[("searched", stack), "iteration_time_s"] == pytest.approx(best.iteration_time_s, rel=1e-9)
    assert df.loc[("given", "fsdp2"), "iteration_time_s"] != df.loc[("given", "megatron-core"), "iteration_time_s"]
