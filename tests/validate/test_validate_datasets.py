"""Mapping of measured rows to simulate() arguments, checked on hand-picked rows."""

import pytest

from madmax.config.strategy import parse_strategy
from madmax.validate.conventions import METRICS, published_flops_per_token
from madmax.validate.datasets import (
    load_automodel_moe,
    load_datasets,
    load_korthikanti2022,
    load_megatron_bridge_moe,
    load_narayanan2021,
    load_nemo,
    load_vtrain_multi,
    load_vtrain_single,
    read_rows,
)
from madmax.validate.inputs import parallelism_group, system_for


def _case(dataset, row_id):
    return next(c for c in dataset.cases if c.row_id == row_id)


def test_korthikanti_175b_selective_row():
    # published_dev.csv line 32: GPT-3 175B, 64 A100s, TP 8 x PP 8, interleaved with 3 chunks,
    # global batch 64, selective recompute + sequence parallelism, 13.75 s per iteration (Table 5).
    case = _case(load_korthikanti2022(), "published_dev.csv:32")
    kw = case.kwargs
    model = kw["model"]
    assert (model["num_layers"], model["hidden_size"], model["num_heads"]) == (96, 12288, 96)
    assert model["ffn_hidden_size"] == 4 * 12288 and model["vocab_size"] == 51200
    assert (model["norm"], model["position"], model["has_bias"], model["has_dropout"]) == (
        "layernorm", "learned", True, True)
    assert kw["num_gpus"] == 64 and kw["global_batch"] == 64 and kw["seq_len"] == 2048
    assert kw["system"] == "dgx-a100"  # 8 A100 per node, 300 GB/s NVLink, 25 GB/s IB per GPU
    s = parse_strategy(kw["strategy"])
    assert (s.tp, s.pp, s.dp, s.vp, s.mbs) == (8, 8, 1, 3, 1)
    assert s.recompute == "selective" and s.sequence_parallel and not s.flash and not s.dp_overlap
    assert (case.metric, case.measured, case.unit) == ("iteration_time_s", 13.75, "s")
    assert case.parallelism == "tp+pp" and case.family == "gpt"


def test_korthikanti_single_layer_rows_are_unmapped():
    ds = load_korthikanti2022()
    # 9 iteration times + 4 MFU figures; the 5 rows of Table 4 time one layer only.
    assert len(ds.cases) == 13 and len(ds.unmapped) == 5
    assert all("one layer" in u.reason for u in ds.unmapped)


def test_korthikanti_mfu_uses_their_flop_count():
    # MFU = 72 B s l h^2 (1 + s/6h + V/12lh) / (t * N * 312e12), so per token (B s = 1):
    # 22B: l=48, h=6144, s=2048, V=51200: 72*48*6144^2 = 1.304596e11; bracket 1 + 0.0555556 + 0.0144676
    case = _case(load_korthikanti2022(), "published_dev.csv:30")
    assert case.metric == "mfu" and case.peak_flops_per_s == pytest.approx(312e12)
    assert case.published_flops_per_token == pytest.approx(1.304596e11 * 1.0700231, rel=1e-6)


def test_narayanan_eq3_counts_recompute():
    # 1T row (line 11): 96 l h^2 (1 + s/6h + V/16lh), l=128, h=25600, s=2048, V=51200
    # 96*128*25600^2 = 8.0530637e12; bracket 1 + 2048/153600 + 51200/52428800 = 1.0143099
    ds = load_narayanan2021()
    case = _case(ds, "published_dev.csv:11")
    assert case.layer_passes == 4
    assert case.published_flops_per_token == pytest.approx(8.0530637e12 * 1.0143099, rel=1e-6)
    s = parse_strategy(case.kwargs["strategy"])
    assert (s.tp, s.pp, s.dp, s.mbs, s.recompute) == (8, 64, 6, 1, "full")
    assert any("mbs=1 assumed" in a for a in case.assumptions)
    # The four Sec. 5.8 rows give no GPU count or layout.
    assert len(ds.cases) == 22 and len(ds.unmapped) == 4
    assert all("partial row" in u.reason for u in ds.unmapped)


def test_narayanan_zero3_row():
    case = _case(load_narayanan2021(), "published_dev.csv:12")  # 174.6B, 384 GPUs, ZeRO-3, mbs 4
    s = parse_strategy(case.kwargs["strategy"])
    assert (s.tp, s.pp, s.dp, s.mbs, s.zero) == (1, 1, 384, 4, 3)
    assert case.parallelism == "fsdp" and case.kwargs["global_batch"] == 1536


def test_nemo_formula_reproduces_nemo_model_tflops():
    # NeMo 24.07 Llama-2-7B: 16934 tokens/s/GPU and "Model TFLOP/s/GPU 780": 46.06e9 FLOPs/token.
    # Ours: 3 * (32 * (2h(h+2h) + 2h^2 + 2*3*h*11008 + 4*4096*h) + 2*h*32000), h = 4096 = 46.085e9.
    case = _case(load_nemo(), "published_dev.csv:50")
    flops = published_flops_per_token(case.kwargs["model"], 4096)
    assert flops == pytest.approx(46.0849e9, rel=1e-5)
    assert flops * 16934 / 1e12 == pytest.approx(780, rel=2e-3)


def test_nemo_rows():
    ds = load_nemo()
    assert len(ds.cases) == 27 and not ds.unmapped
    llama70 = _case(ds, "published_dev.csv:52")
    m = llama70.kwargs["model"]
    assert (m["num_kv_heads"], m["is_gated_ffn"], m["norm"], m["vocab_size"]) == (8, True, "rmsnorm", 32000)
    assert llama70.kwargs["system"] == "dgx-h100" and llama70.kwargs["dtype"] == "fp8"
    assert parse_strategy(llama70.kwargs["strategy"]).vp == 20
    gpt5b = _case(ds, "published_dev.csv:46")  # vocab not stated for NeMo's GPT3 rows
    assert gpt5b.kwargs["model"]["vocab_size"] == 51200
    lora = _case(ds, "published_dev.csv:61")
    assert lora.kwargs["task"]["finetune"] == "lora"
    nemotron = _case(ds, "published_dev.csv:53")
    assert nemotron.kwargs["model"]["activation"] == "squared_relu"


def test_a_moe_row_of_any_source_maps_to_its_catalog_model():
    row = dict(next(r for _, r in read_rows("published_dev.csv") if r["model"] == "Llama-2-7B"))
    row.update(model="Mixtral-8x7B", source="NVIDIA/NeMo docs (test row)", ep="2", dp="4", layers="32",
               hidden="4096", heads="32")
    ds = load_nemo([("mine.csv:2", row)])
    (case,) = ds.cases
    assert case.kwargs["model"]["moe"]["num_experts"] == 8
    assert parse_strategy(case.kwargs["strategy"]).ep == 2
    row.update(model="Switch-Base-128")
    assert "not in the catalog" in load_nemo([("mine.csv:3", row)]).unmapped[0].reason


def test_moe_training_datasets_map_every_row():
    bridge = load_megatron_bridge_moe()
    assert len(bridge.cases) == 19 and not bridge.unmapped
    deepseek = next(c for c in bridge.cases if c.kwargs["model"]["name"] == "deepseek-v3")
    strategy = parse_strategy(deepseek.kwargs["strategy"])
    assert (strategy.tp, strategy.pp, strategy.vp, strategy.ep, strategy.dispatcher) == (2, 8, 4, 64, "deepep")
    assert any("DeepEP assumed" in a for a in deepseek.assumptions)
    automodel = load_automodel_moe()
    assert len(automodel.cases) == 2 and not automodel.unmapped
    assert all(parse_strategy(c.kwargs["strategy"]).zero == 3 for c in automodel.cases)
    gpt_oss = next(c for c in automodel.cases if c.kwargs["model"]["name"] == "gpt-oss-20b")
    assert parse_strategy(gpt_oss.kwargs["strategy"]).ep == 8
    assert any("ep not stated" in a for a in gpt_oss.assumptions)


def test_vtrain_single_first_row():
    # ground_truth_single.csv line 2: 2 GPUs, gb 16, mbs 8, h 1024, 16 heads, 24 layers, s 1024,
    # tp 1, dp 1, pp 2, 372.160408 ms.
    ds = load_vtrain_single()
    assert len(ds.cases) == 1440 and not ds.unmapped
    case = ds.cases[0]
    kw = case.kwargs
    assert kw["num_gpus"] == 2 and kw["global_batch"] == 16 and kw["seq_len"] == 1024
    assert kw["model"]["num_layers"] == 24 and kw["model"]["hidden_size"] == 1024
    assert kw["dtype"] == "fp16" and kw["system"] == "dgx-a100"
    s = parse_strategy(kw["strategy"])
    assert (s.tp, s.pp, s.dp, s.mbs, s.recompute, s.zero) == (1, 2, 1, 8, "full", 0)
    assert case.measured == pytest.approx(0.372160408)


def test_vtrain_multi_uses_800gbps_per_node():
    ds = load_vtrain_multi()
    assert len(ds.cases) == 109 and not ds.unmapped
    system = ds.cases[0].kwargs["system"]
    # 800 Gb/s per 8-GPU node = 100 GB/s per node = 12.5 GB/s per GPU per direction
    assert system["scale_out"]["bytes_per_s"] == "12.5 GB/s" and system["gpu"] == "a100-80gb"


def test_system_for_matches_catalog_or_overrides():
    assert system_for("A100-SXM4-80GB", 8, 300, 25) == "dgx-a100"
    assert system_for("H100-SXM5-80GB", 8, 450, 50) == "dgx-h100"
    custom = system_for("A100-SXM4-80GB", 8, 300, 50)
    assert custom["name"] == "dgx-a100-custom" and custom["scale_out"]["bytes_per_s"] == "50 GB/s"


@pytest.mark.parametrize(("degrees", "group"), [
    ((1, 1, 1, 1, 0), "none"), ((8, 1, 1, 1, 0), "tp"), ((8, 8, 4, 1, 0), "tp+pp+dp"),
    ((1, 1, 64, 1, 3), "fsdp"), ((4, 1, 8, 2, 1), "tp+cp+dp"),
])
def test_parallelism_group(degrees, group):
    assert parallelism_group(*degrees) == group


def test_every_case_has_a_known_metric_and_positive_value():
    for ds in load_datasets():
        for case in ds.cases:
            assert case.measured > 0
            assert case.metric in METRICS, case.metric
            parse_strategy(case.kwargs["strategy"])  # the grammar accepts every strategy we write
