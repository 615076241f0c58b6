"""Recommendation models through the one engine: sharded tables, their exchanges, offload."""

import pytest

from madmax import api
from madmax.config.loaders import load_system
from madmax.hardware.collectives import Collective, Span, network_model

# Two tables of 1,000 rows x 16 fp32 columns, 2 lookups per sample; bottom 8-16, top 16-1; dot interaction.
TINY = {"family": "dlrm", "name": "tiny-dlrm", "num_dense_features": 8, "bottom_mlp": [16],
        "top_mlp": [16, 1], "tables": [{"rows": 1000, "dim": 16, "pooling": 2, "count": 2}],
        "interaction": "dot"}


def test_table_wise_exchange_by_hand():
    # Table-wise on 2 GPUs of one node, 64 samples per GPU: every rank ends with 64 x (16 + 16) pooled
    # fp32 values, half of them from the other rank. The all-to-all's nccl-tests size is what a rank
    # sends and keeps: 64 * 32 * 4 = 8192 bytes, one fp32 pooled vector per table per local sample.
    r = api.simulate(TINY, "dgx-a100", num_gpus=2, global_batch=128, strategy="emb=tw")
    comm = r.breakdown["communication_s"]["emb.pooled_a2a"]
    net = network_model(load_system("dgx-a100", 2))
    one = net.collective_s(Collective.ALL_TO_ALL, 64 * 32 * 4, Span(2, 1))
    assert comm["total"] == pytest.approx(2 * one)  # forward and backward
    assert r.global_batch == 128 and "mbs=64" in r.strategy  # one micro-batch per rank


def test_dlrm_a_on_128_zionex_fits_with_the_exchange_beside_the_bottom_mlp():
    r = api.simulate("dlrm-a", "zionex", num_gpus=128, task="pretrain", global_batch=65536)
    assert r.fits
    b = r.breakdown
    assert b["communication_s"]["emb.pooled_a2a"]["overlapped"] > 0
    # 801.17 B parameters, tables in 2-byte elements: 1.6 TB over 128 GPUs, 12.5 GB each (+ optimizer rows)
    assert r.memory["embedding_tables"] > 801e9 * 2 / 128


def test_tables_beyond_hbm_do_not_fit_unless_offloaded():
    # DLRM-A's 1.6 TB of fp16 tables on 8 x 40 GB: 190 GiB of tables per GPU does not fit ...
    r = api.simulate("dlrm-a", "zionex", num_gpus=8, global_batch=4096)
    assert not r.fits
    assert "embedding_tables 190" in r.fits_reason and "emb_offload=1" in r.fits_reason
    # ... unless the rows beyond HBM live in host memory: then every lookup of them crosses the PCIe
    # host link, which dominates the iteration.
    r = api.simulate("dlrm-a", "zionex", num_gpus=8, global_batch=4096, strategy="emb_offload=1")
    assert r.fits and r.fits_reason is None
    assert any("offloaded" in a for a in r.assumptions)
    assert r.breakdown["compute_s"]["embedding_offload"] > 10 * r.breakdown["compute_s"]["gemm"]


def test_recommendation_inference_is_one_forward_pass():
    # No backward, no gradients, no optimizer state: only weights and tables in memory.
    r = api.simulate(TINY, "dgx-a100", num_gpus=2, task="inference", batch=128)
    assert r.memory["gradients"] == r.memory["optimizer"] == 0
    assert set(r.breakdown["communication_s"]) <= {"emb.ids_a2a", "emb.pooled_a2a"}
    assert r.samples_per_s == pytest.approx(128 / r.iteration_time_s)


def test_dlrm_rejects_pipeline_parallelism_clearly():
    from madmax.errors import StrategyError

    with pytest.raises(StrategyError, match=r"strategy.pp=2 is not modelled for dlrm-a"):
        api.simulate("dlrm-a", "zionex", num_gpus=128, global_batch=65536, strategy="pp=2")


def test_tensor_parallel_mlps_gather_the_pooled_embeddings():
    # TP8 x DDP16 for the MLPs (the paper's DLRM-A example): the tables shard over all 128 GPUs, each TP
    # rank looks up 1/8 of its replica's 4,096 samples and the TP group all-gathers the pooled vectors:
    # 4096 samples x 4096 tables x 94 x 2 bytes per rank.
    r = api.simulate("dlrm-a", "zionex", num_gpus=128, global_batch=65536, strategy="tp=8")
    comm = r.breakdown["communication_s"]
    assert r.breakdown["embedding"]["group"] == 128
    net = network_model(load_system("zionex", 128))
    gather = net.collective_s(Collective.ALL_GATHER, 4096 * 4096 * 94 * 2, Span(8, 1))
    assert comm["emb.tp_all_gather"]["total"] == pytest.approx(gather)
    assert "tp.all_gather" in comm or "tp.all_reduce" in comm  # the MLPs' own TP regions


def test_inspect_dlrm_from_the_cli():
    from typer.testing import CliRunner

    from madmax.cli import app

    result = CliRunner().invoke(app, ["inspect", "dlrm-a"])
    assert result.exit_code == 0, result.output
    assert "801.169 B" in result.output  # 4096 x 2,080,000 x 94 + 20 MLP layers of 3994^2 + bias + logit


def test_tables_can_choose_their_own_sharding():
    # The model file may shard some tables differently from the strategy's default: here the first
    # group row-wise (reduce-scatter of partial sums) and the rest table-wise (all-to-all).
    model = {**TINY, "tables": [{"rows": 1000, "dim": 16, "pooling": 2, "count": 1, "sharding": "rw"},
                                {"rows": 1000, "dim": 16, "pooling": 2, "count": 1}]}
    r = api.simulate(model, "dgx-a100", num_gpus=2, global_batch=128, strategy="emb=tw")
    comm = r.breakdown["communication_s"]
    assert "emb.rw_reduce_scatter" in comm and "emb.pooled_a2a" in comm
