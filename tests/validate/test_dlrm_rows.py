"""NVIDIA DeepLearningExamples TF2 DLRM/DCNv2 rows mapped to simulate() arguments, checked by hand."""

import pytest

from madmax.api import simulate
from madmax.config.dlrm import DLRMModel
from madmax.config.loaders import load_system
from madmax.config.strategy import parse_strategy
from madmax.validate.datasets import CRITEO_TABLE_ROWS, load_nvidia_dlrm, read_rows
from madmax.workload.dlrm import param_counts

GIB = 2**30


@pytest.fixture(scope="module")
def dataset():
    return load_nvidia_dlrm()


def _case(dataset, line):
    return next(c for c in dataset.cases if c.row_id == f"published_dev.csv:{line}")


def test_counts(dataset):
    # 20 pretrain rows (16 DLRM on DGX A100, DGX-1, DGX-2; 4 DCNv2 on DGX A100) and 8 inference latency rows
    # (one forward pass of a 2,048-sample batch on one GPU).
    assert len(dataset.cases) == 28 and not dataset.unmapped
    assert sorted(c.metric for c in dataset.cases) == ["latency_ms"] * 8 + ["samples_per_s"] * 20
    inference = [c for c in dataset.cases if c.metric == "latency_ms"]
    assert all(c.kwargs["task"] == "inference" and c.kwargs["batch"] == 2048 for c in inference)


def test_dlrm_22_8b_a100_amp_row(dataset):
    # published_dev.csv line 158: DLRM 22.8B (Criteo T3), 8 x A100 80GB, amp, global batch 65536, 13.8M samples/s.
    case = _case(dataset, 158)
    kw = case.kwargs
    model = kw["model"]
    tables = model["tables"]
    assert len(tables) == 26 and {(t["dim"], t["pooling"]) for t in tables} == {(128, 1)}
    # T3 rows: 45,833,188 + 36,747 + ... + 29,275,261 = 177,944,291; x 128 = 22,776,869,248 elements,
    # "22.8B" to its three digits (22.8e9 / 128 = 178,125,000 rows, 0.10 % away).
    rows = sum(t["rows"] for t in tables)
    assert rows == 177_944_291
    assert rows == pytest.approx(22.8e9 / 128, rel=0.0022)  # half a unit of the last digit of 22.8
    assert model["interaction"] == "dot" and model["embedding_dtype"] == "fp32"
    assert model["bottom_mlp"] == [512, 256, 128] and model["top_mlp"] == [1024, 1024, 512, 256, 1]
    assert model["num_dense_features"] == 13
    assert kw["dtype"] == "fp16" and kw["num_gpus"] == 8 and kw["global_batch"] == 65536
    assert kw["system"] == "dgx-a100" and kw["seq_len"] == 1
    s = parse_strategy(kw["strategy"])
    assert (s.tp, s.pp, s.dp, s.mbs, s.zero, s.emb) == (1, 1, 8, 8192, 0, "tw")  # 65536 / 8 = 8192
    assert (case.metric, case.measured, case.unit) == ("samples_per_s", 13.8e6, "samples/s")
    assert case.family == "dlrm" and case.gpu == "a100-80gb" and case.parallelism == "dp"


def test_table_sizes_match_the_published_model_sizes():
    # doc/DLRM.md: 4.2B / 22.8B / 113B parameters, 15.6 / 84.9 / 421 GiB of fp32 tables; README.md: the
    # largest T0 table weighs 140 GiB (292,775,614 x 128 x 4 B = 149.9e9 B = 139.6 GiB).
    for threshold, params, gib in ((15, 4.2e9, 15.6), (3, 22.8e9, 84.9), (0, 113e9, 421)):
        rows = CRITEO_TABLE_ROWS[threshold]
        assert len(rows) == 26
        assert sum(rows) * 128 == pytest.approx(params, rel=0.01)
        assert sum(rows) * 128 * 4 / GIB == pytest.approx(gib, rel=0.005)
    assert max(CRITEO_TABLE_ROWS[0]) * 128 * 4 / GIB == pytest.approx(139.6, abs=0.05)


def test_dcnv2_row_has_three_low_rank_cross_layers(dataset):
    # Line 174: DCNv2 22.8B, 8 x A100, amp. dcnv2.py: num_cross_layers 3, cross_layer_projection_dim 512.
    model = DLRMModel.model_validate(_case(dataset, 174).kwargs["model"])
    assert (model.interaction, model.num_cross_layers, model.low_rank) == ("dcnv2", 3, 512)
    # N = 128 + 26 * 128 = 3456; each cross layer U (N x 512), V (512 x N) and a bias of N:
    # 3 * (2 * 3456 * 512 + 3456) = 3 * 3,542,400 = 10,627,200 parameters.
    assert model.interaction_width == 3456
    counts = param_counts(model)
    assert counts["interaction"] == 10_627_200
    # bottom 13*512+512 + 512*256+256 + 256*128+128 = 171,392; top over N = 3456:
    # 3456*1024+1024 + 1024^2+1024 + 1024*512+512 + 512*256+256 + 256+1 = 5,245,953 (as catalog dlrm-dcnv2).
    assert (counts["bottom_mlp"], counts["top_mlp"]) == (171_392, 5_245_953)
    assert counts["embedding"] == 177_944_291 * 128


def test_dtypes(dataset):
    # tf32 rows stay tf32 (A100 tensor cores), V100 fp32 rows fp32, amp rows fp16 MLPs over fp32 tables.
    assert _case(dataset, 157).kwargs["dtype"] == "tf32"
    assert _case(dataset, 163).kwargs["dtype"] == "fp32"
    amp = _case(dataset, 164).kwargs
    assert amp["dtype"] == "fp16" and amp["model"]["embedding_dtype"] == "fp32"


def test_t0_rows_slice_columns(dataset):
    # Line 159: 113B (T0) on 8 x A100 80GB. Table-wise sharding cannot hold the 139.6 GiB table on one
    # 80 GiB GPU; Merlin DE slices it by columns, so the whole model is simulated column-wise.
    case = _case(dataset, 159)
    assert parse_strategy(case.kwargs["strategy"]).emb == "cw"
    assert any("column-sliced" in a for a in case.assumptions)


def test_v100_systems(dataset):
    # DGX-1: 8 x V100 32GB, 6 NVLink x 25 GB/s = 150 GB/s per GPU per direction (hybrid cube-mesh);
    # DGX-2: 16 x V100 32GB over NVSwitch, also 150 GB/s per GPU per direction.
    dgx1 = load_system(_case(dataset, 163).kwargs["system"])
    dgx2 = load_system(_case(dataset, 169).kwargs["system"])
    for system, gpus in ((dgx1, 8), (dgx2, 16)):
        assert system.gpu.name == "v100-32gb" and system.gpus_per_node == gpus
        assert system.scale_up.bytes_per_s == pytest.approx(150e9)
        assert system.scale_up.domain_size == gpus
        assert system.scale_out.bytes_per_s == pytest.approx(50e9 / 8)  # 50 Gb/s of EDR IB per GPU
    s = parse_strategy(_case(dataset, 169).kwargs["strategy"])
    assert (s.dp, s.mbs) == (16, 4096)  # 65536 / 16


def test_other_sizes_scale_the_mlperf_profile():
    # A row without "(Criteo Tn)" takes dlrm-mlperf-v1's 26 row counts (187,767,399 in all) scaled so that
    # rows x 128 = params_b * 1e9: 10.0e9 / 128 = 78,125,000 rows (each table rounded to whole rows).
    row = dict(next(r for _, r in read_rows("published_dev.csv") if r["model"].startswith("DLRM 22.8B")))
    row.update(model="DLRM 10B params", params_b="10.0")
    (case,) = load_nvidia_dlrm([("mine.csv:2", row)]).cases
    rows = [t["rows"] for t in case.kwargs["model"]["tables"]]
    assert len(rows) == 26 and sum(rows) == pytest.approx(78_125_000, abs=13)
    assert rows[0] == round(39_884_406 * 78_125_000 / 187_767_399)
    assert any("MLPerf Criteo Terabyte profile" in a for a in case.assumptions)


def test_the_22_8b_row_simulates(dataset):
    result = simulate(**_case(dataset, 158).kwargs)
    assert result.fits and result.samples_per_s > 0
    # One micro-batch of 8192 samples per GPU: iteration time = 65536 / samples_per_s.
    assert result.iteration_time_s == pytest.approx(65536 / result.samples_per_s)
