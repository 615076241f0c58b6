"""Hybrid embedding sharding (frequent rows replicated, the rest model-parallel), the recommendation training
stacks (HugeCTR, TF2) and host offload, each against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import madmax.api as mm
from madmax.cli import app
from madmax.config.training_stack import OpRole, load_training_stack
from madmax.parallel.embedding import (
    Balance,
    EmbeddingOptimizer,
    EmbeddingStrategy,
    ShardingType,
    Table,
    break_even_threshold,
    comm,
    harmonic,
    hot_rows,
    shard,
    touched,
)
from madmax.parallel.kernels import Kernel, KernelKind
from madmax.parallel.stack_kernels import role_kernels
from madmax.validate.datasets import load_mlperf_dlrm

SGD = EmbeddingOptimizer.SGD
HYBRID = ShardingType.HYBRID


def test_uniform_table_is_all_hot_or_all_cold():
    # 1,000 rows, pooling 2: each row is looked up 2 / 1000 = 0.002 times per sample.
    table = Table(1000, 4, 2, 4)
    assert hot_rows(table, 0.001) == (1000.0, 1.0)
    assert hot_rows(table, 0.01) == (0.0, 0.0)


def test_zipf_hot_rows_by_hand():
    # s = 1, N = 100, p = 1: row k takes 1 / (k H(100)) with H(100) = 5.187377517639621; q = 0.05 keeps
    # k <= 1 / (0.05 x 5.1874) = 3.855, so K = 3 rows taking H(3) / H(100) = 1.8333 / 5.1874 of the lookups.
    assert harmonic(100, 1.0) == pytest.approx(5.187377517639621)
    k, h = hot_rows(Table(100, 4, 1, 4, zipf=1.0), 0.05)
    assert k == 3 and h == pytest.approx((1 + 1 / 2 + 1 / 3) / 5.187377517639621)


def test_harmonic_tail_matches_the_exact_sum():
    exact = float(np.sum(np.arange(1, 50_001, dtype=float) ** -1.2))
    assert harmonic(50_000, 1.2) == pytest.approx(exact, rel=1e-6)
    assert harmonic(0, 1.2) == 0.0


def test_break_even_threshold_by_hand():
    # 8 ranks, fp32 rows (e = 4), fp16 pooled vectors (o = 2), 6,912 samples per rank:
    # q = e (n-1)/n / (B o (G-1)/G) = 4 / (6912 x 2) = 2.894e-4.
    s = EmbeddingStrategy(8, 8, sharding=HYBRID, output_bytes=2)
    assert break_even_threshold(Table(10, 128, 1, 4), s, 6912) == pytest.approx(4 / (6912 * 2))
    assert break_even_threshold(Table(10, 128, 1, 4), EmbeddingStrategy(1, 1, sharding=HYBRID), 64) == float("inf")


def test_touched_samples():
    assert touched(1.0, 3) == 1.0 and touched(0.0, 3) == 0.0
    assert touched(0.25, 8) == pytest.approx(1 - 0.75**8)


def test_hybrid_replicates_the_small_table_and_shards_the_big_one():
    # Two ranks, SGD, 1-byte elements of width 2, lookup bytes per local sample. Small table 10 rows (0.1
    # lookups per row per sample): hot at q = 0.01, replicated: each rank reads 1 x 2 B and writes its pooled
    # vector 2 B = 4 B. Big table 1,000 rows (0.001): cold. Whole on one rank it serves both ranks' samples,
    # reads 2 x 2 B and writes 2 x 2 B: loads 4 + 8 = 12 and 4. Cut in two row shards (the planner's first
    # split), each serves both ranks' samples for half the ids, read 2 x 0.5 x 2 B, and writes the vectors
    # of the half of the samples that touch it (pooling 1), 2 x 0.5 x 2 B: loads 4 + 4 = 8 on each, the better.
    tables = (Table(10, 2, 1, 1), Table(1000, 2, 1, 1))
    plan = shard(tables, EmbeddingStrategy(2, 2, sharding=HYBRID, optimizer=SGD, hot_threshold=0.01,
                                           balance=Balance.LOOKUP))
    assert plan.lookup_bytes_per_sample == pytest.approx((8.0, 8.0))
    assert plan.table_bytes == pytest.approx((1020.0, 1020.0))  # the small table on both, half the big one each
    by_label = {c.label: c for c in comm(plan, 50)}
    assert by_label["emb.dp_all_reduce"].size_bytes == 20.0  # the replicated rows' gradients, 10 x 2 x 1 B
    # Only the big table's ids travel: 50 samples x 1 lookup x 8 B, half of them to the other rank's shard.
    assert by_label["emb.ids_a2a"].intra_bytes == pytest.approx(50 * 8 / 2)


def test_a_hot_cold_part_is_split_over_distinct_ranks():
    # Four ranks, SGD, 1-byte width-1 rows, nothing hot (q = 1), balanced by lookups with a planner cost of 2
    # lookups per sample of the group for each shard (2 x 4 samples x 1 B = 8 B). Load per local sample:
    #   pooling-8 table whole: 4 x 8 reads + 4 writes + 8 = 44; in 2 shards: 16 reads + 4 (1 - 0.5^8) writes
    #   + 8 = 27.98 each; in 4: 8 + 4 (1 - 0.75^8) + 8 = 19.6 each. A pooling-1 table whole: 4 + 4 + 8 = 16.
    # Whole: loads 44, 16, 16, 16 (max 44). Big table in 2 shards: 27.98, 27.98, 16 + 16, 16 (max 32). In 4:
    # 19.6 + 16 on three ranks (max 35.6); cutting the small tables only adds shard costs. The best keeps 2.
    tables = (Table(1000, 1, 8, 1), *(Table(1000, 1, 1, 1),) * 3)
    plan = shard(tables, EmbeddingStrategy(4, 4, sharding=HYBRID, optimizer=SGD, hot_threshold=1.0,
                                           balance=Balance.LOOKUP, shard_cost=2.0))
    shards = [p for p in plan.pieces if p.table == 0]
    assert len(shards) == 2 and len({p.rank for p in shards}) == 2
    x = 1 - 0.5**8
    assert all(p.rows == 500 and p.share == 0.5 and p.exchanged == pytest.approx(x) for p in shards)
    # Bytes moved, without the planner's cost: a big shard 16 + 4x; a small table 8, two of them on one rank.
    assert sorted(plan.lookup_bytes_per_sample) == pytest.approx([8, 16, 16 + 4 * x, 16 + 4 * x])
    # Free shards (no planner cost): the search cuts until every rank carries the same lookups, 70.4 / 4.
    free = shard(tables, EmbeddingStrategy(4, 4, sharding=HYBRID, optimizer=SGD, hot_threshold=1.0,
                                           balance=Balance.LOOKUP))
    total = 4 * (8 + 4 * (1 - 0.75**8)) + 3 * 8
    assert free.lookup_bytes_per_sample == pytest.approx((total / 4,) * 4)


def test_count_balance_deals_tables_in_snake_order():
    # Merlin DE memory_balanced: 6 tables sorted by size (60..10 rows) dealt to 3 ranks 0, 1, 2, 2, 1, 0:
    # every rank holds two tables, 60 + 10, 50 + 20, 40 + 30 rows. LPT by size (SIZE) does the same here.
    tables = tuple(Table(r, 1, 1, 1) for r in (10, 20, 30, 40, 50, 60))
    plan = shard(tables, EmbeddingStrategy(3, 3, optimizer=SGD, balance=Balance.COUNT))
    by_rank = {r: sorted(tables[p.table].rows for p in plan.pieces if p.rank == r) for r in range(3)}
    assert by_rank == {0: [10, 60], 1: [20, 50], 2: [30, 40]}
    # One big and four small tables on 2 ranks: snake gives 2 + 3 tables (big, 4th | 2nd, 3rd, 5th); LPT by
    # size piles every small table beside nothing (big | 4 small ones).
    tables = (Table(1000, 1, 1, 1), *(Table(10, 1, 1, 1),) * 4)
    count = shard(tables, EmbeddingStrategy(2, 2, optimizer=SGD, balance=Balance.COUNT))
    size = shard(tables, EmbeddingStrategy(2, 2, optimizer=SGD, balance=Balance.SIZE))
    assert sorted(sum(p.rank == r for p in count.pieces) for r in range(2)) == [2, 3]
    assert sorted(sum(p.rank == r for p in size.pieces) for r in range(2)) == [1, 4]


def test_unfused_embedding_update_doubles_its_bytes():
    # tf2 runs the embedding backward as IndexedSlices plus a separate sparse update: 2 kernels each moving
    # the bytes of the fused one (twice in all); other stacks keep the fused kernel.
    fused = [Kernel(KernelKind.MEMORY, "embedding", num_bytes=1000.0)]
    assert [k.num_bytes for k in role_kernels(load_training_stack("tf2"), OpRole.EMBEDDING, fused)] == [1000.0] * 2
    assert role_kernels(load_training_stack("hugectr"), OpRole.EMBEDDING, fused) == fused
    kwargs = {"model": "dlrm-dcnv2", "system": "dgx-h100", "num_gpus": 1, "global_batch": 4096, "strategy": "zero=0"}
    tf2 = mm.simulate(**kwargs, stack="tf2").breakdown["compute_s"]["embedding"]
    assert tf2 > mm.simulate(**kwargs).breakdown["compute_s"]["embedding"]


def test_hybrid_needs_a_threshold_or_a_batch():
    from madmax.errors import StrategyError

    with pytest.raises(StrategyError, match="hybrid"):
        shard((Table(10, 2, 1, 1),), EmbeddingStrategy(2, 2, sharding=HYBRID))


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 10**8), pooling=st.floats(0.5, 200), zipf=st.floats(0, 2.5),
       q=st.floats(0, 1), q2=st.floats(0, 1))
def test_hot_rows_are_bounded_and_shrink_with_the_threshold(rows, pooling, zipf, q, q2):
    table = Table(rows, 8, pooling, 4, zipf=zipf)
    k, h = hot_rows(table, q)
    assert 0 <= k <= rows and 0 <= h <= 1 + 1e-9
    k2, h2 = hot_rows(table, max(q, q2))
    assert k2 <= k and h2 <= h + 1e-9


def test_offload_crosses_the_host_link_once_per_pass():
    # DLRM-A on 8 ZionEX GPUs, global batch 4096 (the paper's 8-GPU batch: 512 per GPU): each table-wise
    # owner serves 4096 samples of 512 tables x 15 lookups x 94 x 2 B = 5.91 GB of rows per iteration; the
    # offloaded fraction f of its rows crosses PCIe (32 GB/s per direction) in the forward (f x 5.91 GB) and
    # in the backward (rows and 4 B of row-wise Adagrad state read in, written back at once).
    r = mm.simulate(model="dlrm-a", system="zionex", num_gpus=8, global_batch=4096, strategy="emb=tw,emb_offload=1")
    reads = 512 * 15 * 94 * 2 * 4096
    stored = 512 * 2_080_000 * (94 * 2 + 4)
    f = r.breakdown["embedding"]["offloaded_bytes_per_gpu"] / stored
    host = f * (reads + reads * (94 * 2 + 4) / (94 * 2)) / 32e9
    assert 0.5 < f < 1
    assert r.iteration_time_s == pytest.approx(host, rel=0.1)  # the host link is nearly the whole step
    assert any("full duplex" in a for a in r.assumptions)


def test_recommendation_stacks_load():
    hugectr, tf2 = load_training_stack("hugectr"), load_training_stack("tf2")
    assert hugectr.graph_step and hugectr.embedding_exchange.value == "compute" and not tf2.graph_step
    assert {"gemm_epilogue", "embedding_exchange", "graph_step"} <= set(hugectr.sources)


def test_hugectr_stack_has_no_host_step_end():
    kwargs = {"model": "dlrm-dcnv2", "system": "dgx-h100", "num_gpus": 8, "global_batch": 55296,
              "strategy": "emb=hybrid,emb_balance=lookup,zero=0"}
    assert mm.simulate(**kwargs, stack="hugectr").breakdown["host_s"]["total"] == 0.0
    assert mm.simulate(**kwargs).breakdown["host_s"]["total"] > 0.0


def test_mlperf_dlrm_rows_within_ten_percent():
    dataset = load_mlperf_dlrm()
    assert len(dataset.cases) == 3
    for case in dataset.cases:
        r = mm.simulate(**case.kwargs)
        samples = case.kwargs["global_batch"] / r.iteration_time_s
        assert abs(samples / case.measured - 1) < 0.10, case.label


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_hot_threshold_outside_the_unit_interval_exits_2(value):
    result = CliRunner().invoke(app, ["simulate", "--model", "dlrm-dcnv2", "--system", "dgx-h100", "--num-gpus", "8",
                                      "--strategy", f"emb=hybrid,emb_hot={value}"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "emb_hot" in lines[0]


def test_hybrid_search_picks_hybrid_when_it_pays():
    from madmax.search.api import find

    outcome = find("dlrm-dcnv2", "dgx-h100", 8, global_batch=55296, emb=["tw", "hybrid"], zero=[0], top=1)
    assert "emb=hybrid" in outcome.strategy(outcome.top(1)[0])
