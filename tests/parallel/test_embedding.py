"""Embedding sharding: storage, lookups, balance, offload and collectives computed by hand."""

import pytest

from madmax.collective import Collective, Span
from madmax.config.loaders import load_model
from madmax.errors import StrategyError
from madmax.parallel.embedding import (
    Balance,
    EmbeddingOptimizer,
    EmbeddingStrategy,
    ShardingType,
    Table,
    comm,
    shard,
    tables_of,
)

SGD = EmbeddingOptimizer.SGD


def by_label(comms, label, phase="forward"):
    (found,) = [c for c in comms if c.label == label and c.phase == phase]
    return found


def test_lookup_bytes_of_one_table_per_sample():
    # One fp16 table, dim 128, pooling 20, on one rank: read 20 * 128 * 2 = 5120 B, write the pooled
    # 128 * 2 = 256 B -> 5376 B per sample.
    plan = shard((Table(rows=1000, dim=128, pooling=20, elem_bytes=2),), EmbeddingStrategy(1, 1))
    assert plan.lookup_bytes_per_sample == (5376.0,)
    # Backward, row-wise Adagrad: gradient 256 + 20 lookups x (read+write 256 B row + 4 B state x 2) = 10,656
    assert plan.update_bytes_per_sample == (256 + 20 * (2 * 256 + 8),)
    assert comm(plan, local_batch=1000) == ()  # one rank: nothing to exchange


def test_table_wise_all_to_all_on_8_ranks_by_hand():
    # 8 fp32 tables of dim 64 on 8 ranks of one node, one table each; local batch B = 100.
    # Each rank sends its table's 100 x 64 x 4 = 25,600 B to each of 7 others: 179,200 B over NVLink, and
    # receives as much; with its own share it holds B x sum(dims) x 4 = 100 x 512 x 4 = 204,800 B.
    tables = tuple(Table(1000, 64, 10, 4) for _ in range(8))
    plan = shard(tables, EmbeddingStrategy(num_ranks=8, ranks_per_node=8))
    assert sorted(p.rank for p in plan.pieces) == list(range(8))
    fwd = by_label(comm(plan, 100), "emb.pooled_a2a")
    assert (fwd.kind, fwd.span) == (Collective.ALL_TO_ALL, Span(8, 1))
    assert (fwd.intra_bytes, fwd.inter_bytes, fwd.size_bytes) == (179_200, 0, 204_800)
    assert by_label(comm(plan, 100), "emb.pooled_a2a", "backward").size_bytes == 204_800
    # ids: each rank sends the owner of every other table 100 x 10 int64 = 8,000 B: 7 x 8,000 = 56,000
    assert by_label(comm(plan, 100), "emb.ids_a2a").intra_bytes == 56_000
    # the owner looks up all 8 x 100 samples: per local sample 8 x (10 x 64 x 4 + 64 x 4) = 22,528 B
    assert plan.lookup_bytes_per_sample == (22_528.0,) * 8


def test_table_wise_split_over_two_nodes():
    # Same tables on 2 nodes x 4 ranks: a rank sends 25,600 B to 3 ranks in its node and 4 outside.
    plan = shard(tuple(Table(1000, 64, 10, 4) for _ in range(8)), EmbeddingStrategy(num_ranks=8, ranks_per_node=4))
    fwd = by_label(comm(plan, 100), "emb.pooled_a2a")
    assert fwd.span == Span(4, 2)
    assert (fwd.intra_bytes, fwd.inter_bytes) == (3 * 25_600, 4 * 25_600)
    # uniform size S with S * i(e-1)/n = 102,400 on the busier (inter) fabric: S = 102,400 * 8 / 4 = 204,800
    assert fwd.size_bytes == 204_800


def test_greedy_balance_imbalance_on_a_toy_case():
    # Sizes 5, 4, 3, 3, 3 bytes (dim 1, 1 byte, SGD) on 2 ranks, longest first to the lighter rank:
    # 5 -> r0; 4 -> r1; 3 -> r1 (7); 3 -> r0 (8); 3 -> r1 (10). Loads 8, 10: imbalance 10 / 9.
    tables = tuple(Table(rows, 1, 1, 1) for rows in (5, 4, 3, 3, 3))
    plan = shard(tables, EmbeddingStrategy(num_ranks=2, ranks_per_node=2, optimizer=SGD))
    assert plan.table_bytes == (8.0, 10.0)
    assert plan.imbalance == pytest.approx(10 / 9)


def test_balance_by_lookup_cost():
    # Two tables of equal size but pooling 9 and 1, and two small ones with pooling 1; by size the big ones
    # go to different ranks anyway; by lookups (pooling x dim x bytes, outputs aside) the hot table sits alone.
    tables = (Table(100, 1, 9, 1), Table(100, 1, 1, 1), Table(10, 1, 1, 1), Table(10, 1, 1, 1))
    plan = shard(tables, EmbeddingStrategy(num_ranks=2, ranks_per_node=2, optimizer=SGD, balance=Balance.LOOKUP))
    # per local sample, owner serves 2 samples: hot 2 x (9 + 1) = 20, others 2 x (1 + 1) = 4 each
    assert sorted(plan.lookup_bytes_per_sample) == [12.0, 20.0]
    assert plan.imbalance == pytest.approx(20 / 16)


def test_offload_when_hbm_is_too_small():
    # fp32 table 1000 x 64 = 256,000 B + row-wise Adagrad 1000 x 4 = 4,000 B = 260,000 B; budget 200,000 B.
    # Offloaded 60,000 B, fraction f = 60/260. Host traffic per sample and direction: forward f x reads
    # 10 x 256 = 2,560 B; backward f x (rows 10 x 256 + state 10 x 4) = 2,600 B each way (read in, written back).
    plan = shard((Table(1000, 64, 10, 4),), EmbeddingStrategy(1, 1, hbm_budget_bytes=200_000))
    assert plan.offloaded_bytes == (60_000.0,)
    assert plan.host_bytes_per_sample[0] == pytest.approx(2_560 * 60 / 260)
    assert plan.host_update_bytes_per_sample[0] == pytest.approx(2_600 * 60 / 260)
    assert shard((Table(1000, 64, 10, 4),), EmbeddingStrategy(1, 1, hbm_budget_bytes=260_000)).offloaded_bytes == (0.0,)


def test_offload_takes_the_coldest_table_first():
    # Hot: 100 rows, pooling 50; cold: 1000 rows, pooling 1 (dim 1, 1 byte, SGD: 1,100 B). Budget 300 B: the
    # 800 B excess comes from the cold table (1 read per 1000 B), 800/1000 of its row reads cross the link.
    tables = (Table(100, 1, 50, 1), Table(1000, 1, 1, 1))
    plan = shard(tables, EmbeddingStrategy(1, 1, optimizer=SGD, hbm_budget_bytes=300))
    assert plan.offloaded_bytes == (800.0,)
    assert plan.host_bytes_per_sample[0] == pytest.approx(0.8 * 1)  # read 1 B
    assert plan.host_update_bytes_per_sample[0] == pytest.approx(0.8 * 1)  # read 1 B and write it back


def test_row_wise_reduce_scatter_by_hand():
    # One fp32 table 800 x 16, pooling 4, row-wise on 4 ranks of a node: 200 rows each (12,800 B).
    # Partial sums for all 4 x B samples: reduce-scatter input 4 x 50 x 16 x 4 = 12,800 B per rank (B = 50),
    # over NVLink 3/4 of it: 9,600 B; the backward all-gather moves the same.
    plan = shard((Table(800, 16, 4, 4),), EmbeddingStrategy(4, 4, sharding=ShardingType.RW, optimizer=SGD))
    assert plan.table_bytes == (12_800.0,) * 4
    # per local sample: 4 lookups x 16 x 4 B (expected, uniform ids) + 4 partial outputs x 64 B = 512 B
    assert plan.lookup_bytes_per_sample == (512.0,) * 4
    comms = comm(plan, 50)
    rs = by_label(comms, "emb.rw_reduce_scatter")
    assert (rs.kind, rs.span, rs.size_bytes, rs.intra_bytes) == (Collective.REDUCE_SCATTER, Span(4, 1), 12_800, 9_600)
    assert by_label(comms, "emb.rw_all_gather", "backward").size_bytes == 12_800
    # ids: 50 x 4 x 8 B, 1/4 to each rank: 400 B to each of 3 others
    assert by_label(comms, "emb.ids_a2a").intra_bytes == 1_200


def test_table_row_wise_by_hand():
    # 2 fp16 tables 100 x 8 (pooling 2) on 2 nodes x 2 ranks: one table per node, rows split 50/50.
    # Reduce-scatter in the node: input G B d o = 4 x 10 x 8 x 2 = 640 B; then each rank sends its node's
    # pooled vectors for B = 10 samples to the same local rank of the other node: 10 x 8 x 2 = 160 B.
    tables = (Table(100, 8, 2, 2), Table(100, 8, 2, 2))
    plan = shard(tables, EmbeddingStrategy(4, 2, sharding=ShardingType.TWRW, optimizer=SGD))
    assert plan.table_bytes == (800.0,) * 4
    comms = comm(plan, 10)
    rs = by_label(comms, "emb.twrw_reduce_scatter")
    assert (rs.span, rs.size_bytes, rs.intra_bytes) == (Span(2, 1), 640, 320)
    a2a = by_label(comms, "emb.twrw_a2a")
    assert (a2a.span, a2a.intra_bytes, a2a.inter_bytes) == (Span(1, 2), 0, 160)


def test_column_wise_slices_and_data_parallel():
    # A dim-10 table cut in 2 slices (5 + 5 columns) on 2 ranks; a DP table replicated and all-reduced.
    tables = (Table(100, 10, 1, 4), Table(50, 4, 1, 4))
    s = EmbeddingStrategy(2, 2, sharding=(ShardingType.CW, ShardingType.DP), optimizer=EmbeddingOptimizer.ADAM)
    plan = shard(tables, s)
    # CW slice 100 x 5 x 4 = 2,000 B + DP 50 x 4 x 4 = 800 B per rank; Adam 2 fp32 per element: x2
    assert plan.table_bytes == (2_800.0, 2_800.0)
    assert plan.optimizer_bytes == (5_600.0, 5_600.0)
    comms = comm(plan, 8)
    assert by_label(comms, "emb.dp_all_reduce", "update").size_bytes == 800
    # each slice owner needs every id: the other rank sends it 8 x 1 x 8 = 64 B
    assert by_label(comms, "emb.ids_a2a").intra_bytes == 64


def test_two_d_replicas_all_reduce_their_shards():
    # 16 ranks of 8 per node, tables sharded inside a node (group 8), replicated across the 2 nodes.
    tables = tuple(Table(1000, 16, 1, 2) for _ in range(8))
    plan = shard(tables, EmbeddingStrategy(16, 8, group_size=8, optimizer=SGD))
    comms = comm(plan, 32)
    assert by_label(comms, "emb.pooled_a2a").inter_bytes == 0  # the all-to-all stays in the node
    sync = by_label(comms, "emb.replica_all_reduce", "update")
    assert (sync.span, sync.size_bytes) == (Span(1, 2), 1000 * 16 * 2)


def test_dlrm_a_table_wise_on_128_ranks_matches_the_reference_weights():
    # 4096 tables / 128 ranks = 32 per rank x 2,080,000 x 94 x 2 B = 12.51328 GB (the reference prints 12.51
    # GB/GPU of embeddings before the MLP weights); identical tables: imbalance 1.
    plan = shard(tables_of(load_model("dlrm-a")), EmbeddingStrategy(128, 8))
    assert plan.table_bytes[0] == 32 * 2_080_000 * 94 * 2
    assert plan.imbalance == 1.0


@pytest.mark.parametrize(("strategy", "message"), [
    (EmbeddingStrategy(8, 8, group_size=3), "group_size=3 must divide num_ranks=8"),
    (EmbeddingStrategy(12, 8), "num_ranks=12 is not a whole number of nodes of 8 ranks"),
    (EmbeddingStrategy(24, 8, group_size=12), "must divide or be a multiple of ranks_per_node=8"),
    (EmbeddingStrategy(2, 2, sharding=ShardingType.CW, col_shards=4), "col_shards=4 exceeds"),
    (EmbeddingStrategy(2, 2, sharding=(ShardingType.TW,)), "lists 1 types for 2 tables"),
])
def test_impossible_shardings_are_strategy_errors(strategy, message):
    with pytest.raises(StrategyError, match=message):
        shard((Table(10, 2, 1, 4), Table(10, 2, 1, 4)), strategy)
