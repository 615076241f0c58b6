"""LLM serving rows (trtllm_static, serving_h100): counts, hand-picked rows' simulate() arguments, metrics."""

import pickle
from collections import Counter

import pytest

from madmax.config.strategy import parse_strategy
from madmax.validate.command import bands_from
from madmax.validate.conventions import LOWER_IS_BETTER, METRICS, SERVING_METRICS, direction, predicted_value
from madmax.validate.datasets import LOADERS, Case, Dataset, read_rows
from madmax.validate.markdown import describe_inputs
from madmax.validate.runner import run_case, run_validation
from madmax.validate.serving import load_serving_h100, load_trtllm_static


@pytest.fixture(scope="module")
def trtllm():
    return load_trtllm_static()


@pytest.fixture(scope="module")
def serving():
    return load_serving_h100()


def _case(dataset, row_id):
    return next(c for c in dataset.cases if c.row_id == row_id)


def test_both_datasets_are_registered():
    assert {"trtllm_static", "serving_h100"} <= set(LOADERS)


def test_trtllm_counts(trtllm):
    # 72 TensorRT-LLM v0.9 rows: 6 models (Mixtral-8x7B among them) x 2 GPUs x (4 throughput + 2 TTFT) rows.
    assert len(trtllm.cases) == 72 and not trtllm.unmapped
    assert Counter(c.metric for c in trtllm.cases) == {"output_tokens_per_s_per_gpu": 48, "ttft_ms": 24}


def test_trtllm_mixtral_row(trtllm):
    # published_dev.csv: Mixtral-8x7B, 2 x H100, TP 2, fp8, static batch 512, ISL 128 / OSL 128: 5255 tokens/s/GPU.
    case = next(c for c in trtllm.cases if c.kwargs["model"] == "mixtral-8x7b" and c.measured == 5255)
    assert case.kwargs["strategy"] == "tp=2,pp=1" and case.kwargs["batch"] == 512
    assert any("experts split by width over tp=2" in a for a in case.assumptions)


def test_trtllm_llama70b_throughput_row(trtllm):
    # published_dev.csv line 100: Llama-2-70B, 4 x H100, TP 4, fp8 engine (fp8 KV cache), static batch 512,
    # ISL 128 / OSL 2048, 2725 output tokens/s/GPU.
    case = _case(trtllm, "published_dev.csv:100")
    assert case.kwargs == {"model": "llama-2-70b", "system": "dgx-h100", "num_gpus": 4, "task": "inference",
                           "mode": "static", "batch": 512, "prompt_len": 128, "output_len": 2048, "dtype": "fp8",
                           "kv_dtype": "fp8", "strategy": "tp=4,pp=1", "stack": "trtllm-0.9"}
    assert (case.metric, case.measured, case.unit) == ("output_tokens_per_s_per_gpu", 2725.0, "tokens/s/GPU")
    assert (case.family, case.gpu, case.parallelism) == ("llama", "h100-sxm", "tp4")
    # its shape columns (80 layers, h 8192, 64/8 heads, f 28672, V 32000) are the catalog's: no shape note
    assert not any("catalog llama-2-70b" in a for a in case.assumptions)


def test_trtllm_a100_ttft_row(trtllm):
    # line 152: Llama-2-70B, 8 x A100, TP 8, fp16, batch 1, input 2048, 1 output token: 249.2 ms.
    case = _case(trtllm, "published_dev.csv:152")
    assert case.kwargs == {"model": "llama-2-70b", "system": "dgx-a100", "num_gpus": 8, "task": "inference",
                           "mode": "static", "batch": 1, "prompt_len": 2048, "output_len": 1, "dtype": "fp16",
                           "strategy": "tp=8,pp=1", "stack": "trtllm-0.9"}
    assert (case.metric, case.measured, case.unit) == ("ttft_ms", 249.2, "ms")
    assert "KV cache in the engine's dtype (fp16)" in case.assumptions


def test_trtllm_shape_differences_and_longer_context(trtllm):
    # Falcon-180B rows leave ffn_hidden empty; the catalog's 4h = 4 * 14848 = 59392 is used.
    falcon = next(c for c in trtllm.cases if c.label.startswith("falcon-180b"))
    assert "row does not state ffn_hidden; catalog falcon-180b has ffn_hidden_size=59392" in falcon.assumptions
    # GPT-J has a 2048-token context but the engine served ISL 2048 + OSL 2048 = 4096 (line 86)
    gptj = _case(trtllm, "published_dev.csv:86")
    assert gptj.kwargs["model"]["name"] == "gpt-j-6b" and gptj.kwargs["model"]["max_seq_len"] == 4096
    assert any("max_seq_len=4096" in a for a in gptj.assumptions)
    assert pickle.loads(pickle.dumps(gptj)) == gptj  # the process pool sends cases to its workers


def test_serving_counts(serving):
    # 917 rows: dense 177 Llama-3.1-8B + 45 Llama-3.1-70B + 362 Qwen3-32B = 584 rows; MoE 129 Qwen3-235B +
    # 8 DeepSeek-V3 + 92 DeepSeek-R1 + 74 gpt-oss + 30 MiniMax-M2.5. Unmapped: 2 Qwen3-235B vLLM disaggregated rows
    # (attention DP without expert parallelism in a worker) and the 92 DeepSeek-R1 disaggregated rows that state no
    # worker counts (their deployment is unknown).
    assert len(serving.cases) == 2 * 823 and len(serving.unmapped) == 94
    rows = Counter(c.kwargs["model"] if isinstance(c.kwargs["model"], str) else c.kwargs["model"]["name"]
                   for c in serving.cases if c.metric == "ttft_ms")
    assert rows == {"llama-3.1-8b": 177, "llama-3.1-70b": 45, "qwen3-32b": 362, "qwen3-235b-a22b": 127,
                    "deepseek-v3": 8, "gpt-oss-120b": 74, "minimax-m2": 30}
    assert Counter(c.metric for c in serving.cases) == {"ttft_ms": 823, "tpot_ms": 823}
    assert len({c.row_id for c in serving.cases}) == len(serving.cases)


def test_serving_moe_layouts(serving):
    strategies = {c.kwargs["strategy"] for c in serving.cases if c.metric == "tpot_ms"}
    assert "tp=8,pp=1,ep=8,etp=1" in strategies  # Qwen3-235B on TensorRT-LLM: experts by EP inside the engine
    # silicon_h100.csv line 2: one prefill worker of tp 1 with attention DP 16 and EP 16, three decode workers of tp 16
    r1 = _case(serving, "silicon_h100.csv:2:tpot_ms")
    assert r1.kwargs["strategy"] == ("prefill_workers=1,prefill_tp=1,prefill_pp=1,decode_workers=3,decode_tp=16,"
                                     "decode_pp=1,prefill_ep=16,decode_ep=16")
    gpt_oss = next(c for c in serving.cases if c.kwargs["dtype"] == "mxfp4")
    assert gpt_oss.kwargs["model"].startswith("gpt-oss")
    assert any("MXFP4 checkpoint" in a for a in gpt_oss.assumptions)


def test_serving_llama70b_agg_row(serving):
    # silicon_h100.csv line 780: Llama-3.1-70B fp8, vLLM (version empty), TP 4, 16 requests in flight,
    # ISL 1024 / OSL 1024: TTFT 121.41 ms, TPOT 13.19 ms. moe_tp_size=4 only repeats tp_size.
    ttft, tpot = _case(serving, "silicon_h100.csv:780:ttft_ms"), _case(serving, "silicon_h100.csv:780:tpot_ms")
    assert ttft.kwargs == tpot.kwargs == {
        "model": "llama-3.1-70b", "system": "dgx-h100", "num_gpus": 4, "task": "inference", "mode": "concurrency",
        "batch": 16, "prompt_len": 1024, "output_len": 1024, "dtype": "fp8", "strategy": "tp=4,pp=1",
        "stack": "vllm", "launch": "engine"}
    assert ttft.measured == pytest.approx(121.41327) and tpot.measured == pytest.approx(13.192186)
    assert (ttft.unit, ttft.family, ttft.gpu, ttft.parallelism) == ("ms", "llama", "h100-sxm", "tp4")
    assert "vllm ?" in ttft.label and any("vllm (version not stated)" in a for a in ttft.assumptions)
    assert any("moe_tp_size=4 ignored" in a for a in ttft.assumptions)
    assert any("requests per measurement not stated" in a for a in ttft.assumptions)


def test_serving_disaggregated_row(serving):
    # line 680: Qwen3-32B fp8, vLLM 0.12.0, 8 prefill workers of TP 1 + 2 decode workers of TP 4 = 16 GPUs;
    # no silicon_concurrency: decode_batch_size 224 x 2 decode workers = 448 requests in flight.
    case = _case(serving, "silicon_h100.csv:680:tpot_ms")
    assert case.kwargs == {
        "model": "qwen3-32b", "system": "dgx-h100", "num_gpus": 16, "task": "inference", "mode": "disaggregated",
        "batch": 448, "prompt_len": 4000, "output_len": 1000, "dtype": "fp8",
        "strategy": "prefill_workers=8,prefill_tp=1,prefill_pp=1,decode_workers=2,decode_tp=4,decode_pp=1",
        "stack": "vllm", "launch": "aiconfigurator"}
    assert case.parallelism == "disagg" and case.measured == pytest.approx(8.7457549)
    s = parse_strategy(case.kwargs["strategy"])
    assert (s.prefill_workers, s.decode_workers, s.decode_tp) == (8, 2, 4)
    assert any("224 x 2 = 448" in a for a in case.assumptions)


def test_serving_rows_name_their_engine_version_and_launch(serving):
    # The stack profile follows the engine version (vLLM 0.18 schedules asynchronously: vllm-0.14), the launch
    # follows when AIConfigurator's generator wrote that engine's settings (TensorRT-LLM from its first commit;
    # vLLM and SGLang from 2025-12-04, so SGLang 0.5.1.post1 of August 2025 ran its defaults).
    expected = {587: ("vllm", "aiconfigurator"), 683: ("vllm-0.14", "aiconfigurator"), 780: ("vllm", "engine"),
                400: ("trtllm", "aiconfigurator"), 10: ("sglang", "engine"), 88: ("sglang", "aiconfigurator")}
    for line, (stack, launch) in expected.items():
        case = _case(serving, f"silicon_h100.csv:{line}:ttft_ms")
        assert (case.kwargs["stack"], case.kwargs["launch"]) == (stack, launch), line
        assert any(f"launch {launch}" in a for a in case.assumptions), line
    # TensorRT-LLM with fp8 weights keeps an fp8 KV cache (trtllm-bench forces it); the others the 16-bit default.
    assert _case(serving, "silicon_h100.csv:2:ttft_ms").kwargs["kv_dtype"] == "fp8"
    assert "kv_dtype" not in _case(serving, "silicon_h100.csv:780:ttft_ms").kwargs


def _serving_row(line):
    return dict(next(r for i, r in read_rows("serving/silicon_h100.csv") if i == f"silicon_h100.csv:{line}"))


def test_serving_rows_that_cannot_be_mapped():
    unknown = _serving_row(680) | {"model_path": "someone/NewModel", "decode_attention_dp_size": "8"}
    odd = _serving_row(680) | {"prefill_num_workers": "4"}  # 4 x 1 + 2 x 4 = 12 GPUs: not whole DGX nodes
    int8 = _serving_row(400) | {"precision": "int8", "gemm_quant_mode": "int8"}
    dense_dp = _serving_row(680) | {"decode_attention_dp_size": "2"}
    rows = [("x.csv:2", unknown), ("x.csv:3", odd), ("x.csv:4", int8), ("x.csv:5", dense_dp)]
    reasons = [u.reason for u in load_serving_h100(rows).unmapped]
    assert reasons[0].startswith("model 'someone/NewModel' is not mapped")
    assert "num_gpus=12" in reasons[1] and "multiple of 8" in reasons[1]
    assert reasons[2].startswith("precision int8 is not mapped")
    assert "dense model" in reasons[3]


def test_serving_metric_conversions():
    result = {"ttft_s": 0.25, "tpot_s": 0.0125, "output_tokens_per_s_per_gpu": 1234.5}
    assert set(SERVING_METRICS) <= set(METRICS)
    assert predicted_value("ttft_ms", result) == pytest.approx(250.0)  # 0.25 s = 250 ms
    assert predicted_value("tpot_ms", result) == pytest.approx(12.5)  # 0.0125 s = 12.5 ms
    assert predicted_value("output_tokens_per_s_per_gpu", result) == 1234.5
    # e > 0 is too slow for a time, too fast for a throughput
    assert {"ttft_ms", "tpot_ms"} <= LOWER_IS_BETTER and "output_tokens_per_s_per_gpu" not in LOWER_IS_BETTER
    assert direction("ttft_ms", 10.0) == "too slow" and direction("output_tokens_per_s_per_gpu", 10.0) == "too fast"
    assert direction("tpot_ms", -5.0) == "too fast" and direction("output_tokens_per_s_per_gpu", -5.0) == "too slow"


def test_one_ttft_row_through_the_engine(trtllm):
    from madmax.api import simulate

    case = _case(trtllm, "published_dev.csv:149")  # Llama-2-7B, 1 A100, fp16, input 128: 16.2 ms
    row = run_case(case, simulate)
    assert row.error is None and row.fits
    assert row.predicted == pytest.approx(simulate(**case.kwargs).ttft_s * 1e3)
    assert row.signed_error_pct == pytest.approx(100 * (row.predicted - 16.2) / 16.2)
    assert "prompt 128, output 1 tokens; fp16; strategy tp=1,pp=1" in describe_inputs(case.kwargs)


def test_error_bands_leave_serving_rows_out(trtllm):
    cases = [c for c in trtllm.cases if c.metric == "ttft_ms"][:5]

    def fake(**_):
        return {"ttft_s": 0.01, "tpot_s": 0.0, "output_tokens_per_s_per_gpu": 1.0, "fits": True}

    report = run_validation([Dataset("trtllm_static", "", tuple(cases), ())], simulate=fake)
    assert report.dataset("trtllm_static").run == 5 and bands_from(report) == []
    assert all(isinstance(r.case, Case) for r in report.rows)


def test_a_disaggregated_row_without_worker_counts_is_not_scored(serving):
    # silicon_h100.csv line 740 names a tp-16 prefill and no worker counts, yet its TTFT and TPOT (7137.27 ms,
    # 15.21 ms) are those of line 6, whose prefill worker is tp 1 with attention DP 16 beside three decode workers:
    # one worker each would score a deployment that was not measured.
    assert not any(c.row_id.startswith("silicon_h100.csv:740:") for c in serving.cases)
    reasons = {u.row_id: u.reason for u in serving.unmapped}
    assert "deployment is unknown" in reasons["silicon_h100.csv:740"]
    assert sum("deployment is unknown" in r for r in reasons.values()) == 92
