"""The interface contract (DESIGN.md section 3): JSON keys, CLI flags, API == CLI, fits, trace, inspect.

Keys and flags are frozen: the contract changes only by extending it, so these tests check that every
contract key and flag is present, never that nothing else is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.loaders import load_model

runner = CliRunner()

CONTRACT_KEYS = {"iteration_time_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                 "peak_memory_bytes", "fits", "breakdown"}
CONTRACT_FLAGS = {"--model", "--system", "--num-gpus", "--task", "--global-batch", "--seq-len", "--dtype",
                  "--strategy", "--batch", "--prompt-len", "--output-len", "--json", "--trace"}

# llama-3.1-8b on one DGX H100 node, tp=2 -> dp=4; 64 sequences of its 8192-token pre-training length.
ARGS = ["-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "8", "--global-batch", "64", "--strategy", "tp=2"]
KWARGS = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 64, "strategy": "tp=2"}


def cli_json(*args: str) -> dict:
    result = runner.invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def llama8b() -> dict:
    return cli_json(*ARGS)


def test_contract_keys_present(llama8b: dict) -> None:
    assert set(llama8b) >= CONTRACT_KEYS
    assert isinstance(llama8b["fits"], bool)
    for key in CONTRACT_KEYS - {"fits", "breakdown"}:
        assert isinstance(llama8b[key], int | float) and llama8b[key] > 0, key
    # breakdown: compute, communication per collective kind split exposed/overlapped, pipeline bubble.
    breakdown = llama8b["breakdown"]
    assert {"compute_s", "communication_s", "exposed_communication_s", "pipeline_bubble_s"} <= set(breakdown)
    assert breakdown["communication_s"], "tp=2 and dp=4 communicate"
    for kind, parts in breakdown["communication_s"].items():
        assert set(parts) >= {"total", "exposed", "overlapped"}, kind
        assert parts["exposed"] + parts["overlapped"] == pytest.approx(parts["total"], rel=1e-9)


def test_api_to_dict_equals_cli_json(llama8b: dict) -> None:
    assert api.simulate(**KWARGS).to_dict() == llama8b


def test_api_equals_cli_with_pipeline_and_finetune() -> None:
    cli = cli_json("-m", "llama-3.1-70b", "-s", "dgx-h100", "--num-gpus", "16", "--task", "finetune",
                   "--finetune", "lora", "--global-batch", "32", "--seq-len", "4096", "--strategy", "tp=8,pp=2")
    result = api.simulate("llama-3.1-70b", "dgx-h100", num_gpus=16, task="finetune", finetune="lora",
                          global_batch=32, seq_len=4096, strategy="tp=8,pp=2")
    assert result.to_dict() == cli


def test_throughput_identities(llama8b: dict) -> None:
    r = llama8b
    # 64 sequences x 8192 tokens = 524288 tokens per iteration, over 8 GPUs.
    assert (r["global_batch"], r["seq_len"], r["num_gpus"]) == (64, 8192, 8)
    assert r["tokens_per_s"] == pytest.approx(64 * 8192 / r["iteration_time_s"], rel=1e-12)
    assert r["samples_per_s"] == pytest.approx(64 / r["iteration_time_s"], rel=1e-12)
    assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s"] / 8, rel=1e-12)
    assert 0 < r["mfu"] <= r["hfu"] <= 1


def test_cli_flags_frozen() -> None:
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", result.stdout))
    assert flags >= CONTRACT_FLAGS, CONTRACT_FLAGS - flags
    assert re.search(r"--model\s+-m\b", result.stdout) and re.search(r"--system\s+-s\b", result.stdout)


def test_not_fitting_is_a_result_not_an_error() -> None:
    # llama-3.1-70b (70.6 B params) with tp=1 keeps every weight on each A100 80GB: its bf16 weights
    # alone are 2 B * 70.6e9 = 141 GB > the 79.15 GiB = 85.0 GB CUDA can allocate (gpus.yaml usable_bytes).
    r = cli_json("-m", "llama-3.1-70b", "-s", "dgx-a100", "--num-gpus", "8", "--strategy", "tp=1",
                 "--global-batch", "8")
    assert r["fits"] is False
    assert r["peak_memory_bytes"] > r["memory"]["capacity"] == 79.15 * 2**30
    assert r["iteration_time_s"] > 0


def test_trace_is_chrome_trace_json(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    args = ["-m", "llama-3.1-8b", "-s", "dgx-h100", "--global-batch", "16", "--strategy", "tp=2,pp=2"]
    result = runner.invoke(app, ["simulate", *args, "--trace", str(path)])
    assert result.exit_code == 0, result.output
    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete
    assert all(e["dur"] > 0 and e["ts"] >= 0 and isinstance(e["name"], str) for e in complete)
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["pid"] for e in complete} <= named_pids
    assert {(e["pid"], e["tid"]) for e in complete} <= named_tids
    assert len(named_pids) == 2  # one process per pipeline stage


def test_inspect_llama_405b_total_params() -> None:
    # Llama 3.1 405B: L=126, h=16384, 128 heads of 128, 8 KV heads, SwiGLU ffn 53248, V=128256, untied.
    #   attention per layer: Q and O 2*h*h = 536,870,912; K and V 2*h*(8*128) = 33,554,432
    #   MLP per layer: 3*h*53248 = 2,617,245,696; two RMSNorms 2*h = 32,768
    #   layer = 3,187,703,808; x126 = 401,650,679,808
    #   embedding + LM head 2*V*h = 4,202,692,608; final norm h = 16,384
    #   total = 405,853,388,800 (the published 405.85 B)
    result = runner.invoke(app, ["inspect", "llama-3.1-405b", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["total_params"] == 405_853_388_800
    assert info == api.inspect("meta-llama/Llama-3.1-405B")  # the Hugging Face id is an alias


def test_inspect_reports_the_active_params_and_flops_of_experts() -> None:
    # Mixtral 8x7B: 46,702,792,704 parameters, 12,879,925,248 used per token (2 of 8 experts; derived in
    # tests/config/test_hf_moe.py). Forward FLOPs count each token's top_k experts: one more expert per token
    # adds, per layer, its GEMMs 2 * 3*4096*14336 = 352,321,536, its activation 8*14336 = 114,688 and its
    # share of the weighted sum 2*4096 = 8,192: 352,444,416 * 32 layers = 11,278,221,312.
    info = api.inspect("mixtral-8x7b", seq_len=4096)
    assert (info["total_params"], info["active_params"]) == (46_702_792_704, 12_879_925_248)
    top1 = load_model("mixtral-8x7b")
    assert top1.moe is not None
    top1 = top1.model_copy(update={"moe": top1.moe.model_copy(update={"top_k": 1})})
    difference = info["forward_flops_per_token"] - api.inspect(top1, seq_len=4096)["forward_flops_per_token"]
    assert difference == 11_278_221_312
    # Dense and recommendation models use every weight.
    for name in ("llama-3.1-8b", "dlrm-a"):
        dense = api.inspect(name)
        assert dense["active_params"] == dense["total_params"]
