"""The search of a model with embedding tables: sharding plan x ZeRO, every candidate simulated.

The case: a small DLRM on 16 A100s (two ZionEX nodes of 8) whose HBM is cut to 1316 MiB, 1288 MiB of
it the runtime reserve (the 600 MiB CUDA context and the 688 MiB communicator of the 16-rank data-parallel
group). Its 25 tables are 24 of 100,000 x 64 (pooling 4) and one of 1,000 x 1, which
column-wise sharding cannot cut into its 2 slices (the planner refuses). Dense MLPs:
    bottom 64*1024+1024 + 1024*1024+1024 + 1024*64+64     = 1,181,760
    top    64*1024+1024 + 1024*1024+1024 + 1024*1+1       = 1,117,185   (interaction none: input 64)
                                                          = 2,298,945 parameters
ZeRO 0 keeps 16 bytes per parameter (bf16 weights and gradients, 12 bytes of fp32 Adam state):
36.8 MB = 35.1 MiB, so 1288 + 35.1 > 1316 MiB: no zero=0 plan fits. ZeRO 1 keeps 2 + 2 + 12/16 bytes
per parameter (10.4 MiB): it fits, the tables taking what HBM is left and the rest going to host memory.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.strategy import DEFAULT_ORDER, EMB_BALANCES, EMB_SHARDINGS
from madmax.errors import ConfigError, StrategyError
from madmax.search.api import find
from madmax.search.context import prepare
from madmax.search.space import describe
from madmax.search.tables import TableLimits, enumerate_tables, node_groups

from .conftest import cut_node

runner = CliRunner()

TINY_DLRM = {"family": "dlrm", "name": "tiny-dlrm", "num_dense_features": 64, "bottom_mlp": [1024, 1024, 64],
             "top_mlp": [1024, 1024, 1], "interaction": "none",
             "tables": [{"rows": 100_000, "dim": 64, "pooling": 4, "count": 24},
                        {"rows": 1_000, "dim": 1, "pooling": 1}]}


def small_zionex() -> dict:
    return cut_node("zionex", "a100-40gb", "1316 MiB", "small-zionex")


CASE = {"model": TINY_DLRM, "system": small_zionex(), "num_gpus": 16, "global_batch": 4096}
# The search's memory margin off: the counts below are worked out to the MiB of the cut HBM. One table-placement
# balance (size, the default, said here): test_balances_multiply_the_placed_plans tries the others.
FIND = {**CASE, "memory_margin": 0, "emb_balance": ["size"]}


@pytest.fixture(scope="session")
def dlrm_outcome():
    return find(**FIND, top=3)


@pytest.fixture(scope="session")
def dlrm_files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("dlrm_search")
    paths = {"model": root / "tiny-dlrm.yaml", "system": root / "small-zionex.yaml"}
    paths["model"].write_text(yaml.safe_dump(TINY_DLRM))
    paths["system"].write_text(yaml.safe_dump(small_zionex(), sort_keys=False))
    return paths


def test_node_groups():
    # 128 GPUs, 8 per node: proper divisors 1..64, of which whole nodes: 8, 16, 32, 64.
    assert node_groups(128, 8) == [8, 16, 32, 64]
    assert node_groups(8, 8) == []  # one node: only all ranks


def test_space_by_hand():
    ctx = prepare(**CASE)
    cols = enumerate_tables(ctx, TableLimits(balance=("size",)))
    # Plans: tw, rw, cw, twrw, hybrid x (all 16 ranks, groups of 8) + dp (all ranks) = 11.
    # Dense: zero 0; zero 1-3 over all ranks or one node (shard=8): 1 + 3*2 = 7. 11 * 7 = 77.
    assert len(cols["tp"]) == 77
    assert set(cols["tp"]) == set(cols["pp"]) == set(cols["cp"]) == {1}
    assert set(cols["dp"]) == {16} and set(cols["mbs"]) == {4096 // 16} and set(cols["m"]) == {1}
    assert set(cols["emb_group"]) == {0, 8} and set(cols["shard"]) == {0, 8}
    # Without hybrid groups: 11 plans x 4 stages; on one node (8 GPUs): 6 plans x 4 stages.
    assert len(enumerate_tables(ctx, TableLimits(hybrid=False, balance=("size",)))["tp"]) == 44
    assert len(enumerate_tables(prepare(**{**CASE, "num_gpus": 8}), TableLimits(balance=("size",)))["tp"]) == 24


def test_balances_multiply_the_placed_plans():
    # tw, cw and hybrid deal tables or column slices to ranks, so each takes the three balances; rw, twrw and dp
    # place nothing by choice and keep size. Plans: (3 x 3 + 2) x (all ranks, groups of 8) + dp = 23; x 7 dense = 161.
    ctx = prepare(**CASE)
    cols = enumerate_tables(ctx, TableLimits(balance=EMB_BALANCES))
    assert len(cols["tp"]) == 161
    assert len(enumerate_tables(ctx, TableLimits())["tp"]) == 77  # the default: size only
    placed = np.isin(cols["emb"], [EMB_SHARDINGS.index(e) for e in ("tw", "cw", "hybrid")])
    assert set(cols["emb_bal"][~placed]) == {0} and set(cols["emb_bal"][placed]) == {0, 1, 2}
    strategies = {describe({k: int(v[i]) for k, v in cols.items()}, (DEFAULT_ORDER,)) for i in range(161)}
    assert len(strategies) == 161
    assert any(",emb=hybrid,emb_balance=lookup," in s for s in strategies)
    assert not any("emb=rw,emb_balance" in s for s in strategies)
    with pytest.raises(ConfigError, match=r"emb_balance=\['bytes'\] must list table-placement balances; allowed: "
                                          "size, lookup, count"):
        find(**FIND | {"emb_balance": ["bytes"]})
    with pytest.raises(ConfigError, match=r"emb_balance=.* applies to models with embedding tables"):
        find("llama-3.1-8b", "dgx-h100", 8, global_batch=8, emb_balance=["lookup"])


def test_counts_add_up(dlrm_outcome):
    o = dlrm_outcome
    # cw: 2 plans x 7 dense settings refused by the planner; zero=0 of the other 9 plans does not fit.
    assert o.enumerated == 77 and o.rejected == {"embedding_plan": 14, "memory": 9}
    assert o.evaluated == 77 - 14 - 9 == len(o.exact)
    assert o.valid == o.evaluated + o.rejected["memory"]


def test_best_equals_every_candidate_simulated(dlrm_outcome):
    # Simulate every enumerated candidate independently: the refused ones raise the planner's error,
    # the ones that fit are exactly those evaluated, and the search's best is the best of them.
    ctx = prepare(**CASE)
    cols = enumerate_tables(ctx, TableLimits(balance=("size",)))
    from madmax.search.space import describe

    times, refused = {}, 0
    for i in range(len(cols["tp"])):
        strategy = describe({k: int(v[i]) for k, v in cols.items()}, ("tp-cp-ep-dp-pp",))
        try:
            r = api.simulate(**ctx.simulate_kwargs, strategy=strategy)
        except StrategyError as exc:
            assert "col_shards" in str(exc) and "emb=cw" in strategy
            refused += 1
            continue
        if r.fits:
            times[strategy] = r.iteration_time_s
    assert refused == 14 and len(times) == dlrm_outcome.evaluated
    best = dlrm_outcome.top(1)[0]
    assert dlrm_outcome.exact[best].iteration_time_s == min(times.values())
    assert times[dlrm_outcome.strategy(best)] == min(times.values())
    ranked = [dlrm_outcome.exact[i].iteration_time_s for i in dlrm_outcome.top(10)]
    assert ranked == sorted(ranked)


def test_strategy_names_the_sharding_plan(dlrm_outcome):
    o = dlrm_outcome
    for i in range(o.evaluated):
        text, info = o.strategy(i), o.exact[i].breakdown["embedding"]
        assert f"emb={info['sharding']}" in text
        assert ("emb_group=8" in text) == (info["group"] == 8)
        assert "mbs=256" in text and "zero=0" not in text
        # emb_offload=1 only where the plan keeps rows in host memory (simulate reproduces the rest without it)
        assert ("emb_offload=1" in text) == (info["offloaded_bytes_per_gpu"] > 0)


def test_strategies_without_offload_reproduce_without_the_key():
    # 8 A100s of 40 GB hold these tables whole: no candidate offloads, none prints emb_offload, and the
    # printed string simulates to the searched time.
    o = find(**{**FIND, "system": "zionex", "num_gpus": 8}, top=2, emb=["tw", "rw"])
    texts = [o.strategy(i) for i in range(o.evaluated)]
    assert texts and not any("emb_offload" in t for t in texts)
    best = o.top(1)[0]
    again = api.simulate(**o.ctx.simulate_kwargs, strategy=o.strategy(best))
    assert again.iteration_time_s == pytest.approx(o.exact[best].iteration_time_s, rel=1e-12)


def test_objectives_rank_alike(dlrm_outcome):
    # With the GPUs and the batch fixed, energy = P * N T / B ranks as the time T does; here N = B
    # (one iteration) and P = 6500 W x 2 nodes.
    energy = find(**FIND, objective="energy", top=3)
    assert [energy.strategy(i) for i in energy.top(3)] == [dlrm_outcome.strategy(i) for i in dlrm_outcome.top(3)]
    best = energy.exact[energy.top(1)[0]]
    assert energy.scorer.value(best.iteration_time_s) == pytest.approx(13_000 * best.iteration_time_s)


def test_workers_give_the_same_results(dlrm_outcome):
    again = find(**FIND, top=3, workers=2)
    assert [again.strategy(i) for i in again.top(5)] == [dlrm_outcome.strategy(i) for i in dlrm_outcome.top(5)]


def test_filters_shrink_the_space():
    o = find(**FIND, emb=["tw", "dp"], zero=[1, 3], hybrid=False)
    # tw x (all ranks, groups of 8) + dp = 3 plans x 2 stages; all fit at ZeRO >= 1.
    assert o.enumerated == 6 and o.evaluated == 6
    assert {o.strategy(i).split("emb=")[1][:2] for i in range(6)} == {"tw", "dp"}


def test_dataframe_has_the_sharding_columns(dlrm_outcome):
    pytest.importorskip("pandas")
    from madmax.search.api import to_frame

    frame = to_frame(dlrm_outcome)
    assert len(frame) == dlrm_outcome.evaluated and frame["simulated"].all()
    assert set(frame["emb"]) == {"tw", "rw", "twrw", "dp", "hybrid"} and set(frame["emb_group"]) == {0, 8}
    assert list(frame["emb_offload"]) == ["emb_offload=1" in t for t in frame["strategy"]]
    assert frame["iteration_time_s"].is_monotonic_increasing
    assert list(frame["strategy"]) == [dlrm_outcome.strategy(int(i)) for i in dlrm_outcome.ranked]


@pytest.mark.parametrize(("options", "words"), [
    ({"recompute": ["none"]}, "recompute applies to transformer searches"),
    ({"max_mbs": 4}, "max_mbs applies to transformer searches"),
    ({"emb": ["xw"]}, "allowed: tw, rw, cw, twrw, dp"),
    ({"global_batch": 4100}, "global_batch=4100 is not a multiple of num_gpus=16"),
])
def test_bad_options(options, words):
    with pytest.raises(ConfigError, match=words):
        find(**{**FIND, **options})


def test_emb_needs_tables():
    with pytest.raises(ConfigError, match=r"emb=.* applies to models with embedding tables"):
        find("llama-3.1-8b", "dgx-h100", 8, global_batch=8, emb=["tw"])


def _cli(files, *extra: str):
    return runner.invoke(app, ["search", "-m", str(files["model"]), "-s", str(files["system"]), "--num-gpus", "16",
                               "--global-batch", "4096", "--memory-margin", "0", "--emb-balance", "size", *extra])


def test_cli_json(dlrm_files):
    result = _cli(dlrm_files, "--json", "--top", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["evaluated"] == 54 and data["simulated"] == 54 and len(data["results"]) == 2
    first = data["results"][0]
    assert "emb=" in first["strategy"] and first["fits"]
    assert first["iteration_time_s"] <= data["results"][1]["iteration_time_s"]
    assert first["estimated_iteration_time_s"] == first["iteration_time_s"]


def test_cli_text_and_parquet(dlrm_files, tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    out = tmp_path / "dlrm.parquet"
    result = _cli(dlrm_files, "--top", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "rejected: embedding_plan" in result.output and "samples/s/GPU" in result.output
    frame = pd.read_parquet(out)
    assert len(frame) == 54 and {"emb", "emb_group"} <= set(frame.columns)


def test_cli_transformer_option_exits_2(dlrm_files):
    result = _cli(dlrm_files, "--recompute", "full")
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: recompute applies to transformer searches")


def test_max_tp_adds_tensor_parallel_mlps():
    # With max_tp=2 every plan is also tried with the MLPs split over 2 GPUs (dp halves, the micro-batch
    # doubles); each candidate is a simulate result whose strategy says so.
    outcome = find(**FIND, top=3, max_tp=2, hybrid=False)
    tps = {int(t) for t in outcome.space.columns["tp"]}
    assert tps == {1, 2}
    tp2 = api.simulate(**CASE, strategy="tp=2,emb=tw,emb_offload=1")
    assert "tp=2" in tp2.strategy and tp2.breakdown["embedding"]["group"] == 16
