"""Mixture-of-experts serving end to end: every mode with expert parallelism and attention data parallelism,
the exchange in the results and the trace, memory of MLA and EP deployments, the strategy rules and the
search over expert layouts."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.loaders import find_in_catalog
from madmax.errors import StrategyError
from madmax.search.serving import expert_layouts, find_serving


def catalog_model(name: str, renamed: str) -> dict:
    """A catalog model's fields under another name (a model file the tests may change)."""
    entry = find_in_catalog("models", name)
    return {k: v for k, v in entry.items() if k != "aliases"} | {"name": renamed}


MIXTRAL = catalog_model("mixtral-8x7b", "mixtral-like")
DEEPSEEK = catalog_model("deepseek-v3", "deepseek-like")
GPT_OSS = catalog_model("gpt-oss-120b", "gpt-oss-like")
MODES = [("static", {"batch": 16}), ("concurrency", {"batch": 16, "num_requests": 64}), ("saturation", {"batch": 64}),
         ("rate", {"request_rate": 20.0, "num_requests": 100})]


def serve(model, num_gpus, strategy, system="dgx-h100", **kwargs):
    args = {"prompt_len": 512, "output_len": 64, "dtype": "fp8"} | kwargs
    return api.simulate(model, system, num_gpus, task="inference", strategy=strategy, **args)


@pytest.mark.parametrize(("mode", "extra"), MODES, ids=[m for m, _ in MODES])
@pytest.mark.parametrize(("model", "system", "num_gpus", "strategy"), [
    (MIXTRAL, "dgx-h100", 4, "tp=1,ep=4"), (DEEPSEEK, "dgx-h200", 8, "tp=1,ep=8,ep_overlap=1")],
    ids=["mixtral-ep4-dp4", "deepseek-ep8-dp8"])
def test_every_mode_serves_with_attention_data_parallelism(mode, extra, model, system, num_gpus, strategy):
    r = serve(model, num_gpus, strategy, system, mode=mode, **extra)
    assert r.fits and r.output_tokens_per_s > 0 and r.tpot_s > 0
    assert r.strategy.startswith(f"tp=1,pp=1,dp={num_gpus},ep={num_gpus},etp=1")
    exchange = r.breakdown["decode"]["communication_s"]["ep.all_to_all"]
    assert exchange["total"] > 0


def test_disaggregated_workers_take_their_own_expert_layouts():
    # Prefill: one worker of 4 GPUs with attention data parallelism (prefill_tp=1, prefill_ep=4); decode:
    # one worker of tp=4 with the experts split one per pair of ranks (decode_ep=4: ep = tp).
    r = serve(MIXTRAL, 8, "prefill_workers=1,prefill_tp=1,prefill_ep=4,decode_workers=1,decode_tp=4,decode_ep=4",
              mode="disaggregated", batch=32, num_requests=64)
    assert r.fits and r.tpot_s > 0
    assert "prefill_ep=4,decode_ep=4" in r.strategy
    assert "ep.all_to_all" in r.breakdown["prefill"]["communication_s"]
    assert "ep.all_to_all" not in r.breakdown["decode"]["communication_s"]
    with pytest.raises(StrategyError, match=r"prefill_ep=3 does not divide moe\.num_experts=8"):
        serve(MIXTRAL, 8, "prefill_workers=1,prefill_tp=1,prefill_ep=3,decode_workers=1,decode_tp=4",
              mode="disaggregated", batch=32)


def test_json_and_trace_show_the_exchange(tmp_path):
    model = tmp_path / "deepseek.yaml"
    model.write_text(yaml.safe_dump(DEEPSEEK))
    trace = tmp_path / "trace.json"
    args = ["simulate", "-m", str(model), "-s", "dgx-h200", "--task", "inference", "--batch", "8", "--prompt-len",
            "256", "--output-len", "16", "--dtype", "fp8", "--strategy", "tp=1,ep=8"]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["strategy"] == "tp=1,pp=1,dp=8,ep=8,etp=1"
    assert data["breakdown"]["decode"]["communication_s"]["ep.all_to_all"]["exposed"] > 0
    assert CliRunner().invoke(app, [*args, "--trace", str(trace)]).exit_code == 0
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name") for e in events}
    assert {"decode: ep.dispatch", "decode: ep.combine"} <= names


def test_mla_memory_and_the_batch_it_holds():
    # DeepSeek-V3 on 8 H200, fp8 weights and cache, tp=8: 61 * 576 B = 35,136 B of latent per token on every
    # rank (the replica holds 8 copies: 281,088 B per token). The pool holds pool / (35,136 * 2048) requests
    # of 1024 + 1024 tokens.
    r = serve(DEEPSEEK, 8, "tp=8,ep=8", "dgx-h200", batch=8, prompt_len=1024, output_len=1024, kv_dtype="fp8")
    assert r.kv_cache_bytes_per_token == 8 * 35_136
    assert r.max_batch_by_memory == math.floor(r.memory["kv_pool"] / (35_136 * 2048))
    # Weights: the routed experts over 8 GPUs either way; attention data parallelism (tp=1) keeps every
    # dense weight whole on each GPU, so it holds more per GPU and fewer requests per GPU.
    dp = serve(DEEPSEEK, 8, "tp=1,ep=8", "dgx-h200", batch=8, prompt_len=1024, output_len=1024, kv_dtype="fp8")
    assert dp.weights_bytes_per_gpu > r.weights_bytes_per_gpu
    assert dp.max_batch_by_memory < r.max_batch_by_memory


def test_gpt_oss_serves_with_fp4_weights_on_blackwell():
    # NVFP4 weights (0.5625 B per parameter with scales) for the layers; the embedding and LM head (201,088 x
    # 2,880 each) and the final norm (2,880) stay in 16 bits.
    fp4 = serve(GPT_OSS, 1, "tp=1", "dgx-b200", dtype="fp4", batch=8)
    fp8 = serve(GPT_OSS, 1, "tp=1", "dgx-b200", dtype="fp8", batch=8)
    kept = 2 * (2 * 201_088 * 2880 + 2880)
    assert fp4.weights_bytes_per_gpu - kept == pytest.approx(0.5625 * (fp8.weights_bytes_per_gpu - kept), rel=1e-12)
    assert fp4.tpot_s < fp8.tpot_s


BAD = [
    (MIXTRAL, 8, "tp=1,ep=3", "strategy.ep=3 does not divide moe.num_experts=8 of mixtral-like; allowed: 1, 2, 4, 8"),
    (MIXTRAL, 8, "tp=4,ep=2,etp=1", "strategy.ep*etp=2*1=2 is neither tp=4"),
    (MIXTRAL, 8, "tp=1,ep=8,etp=3", "strategy.etp=3 does not divide moe.expert_ffn_hidden_size=14336"),
    (MIXTRAL, 8, "tp=2,ep=2,ep_overlap=1", "dispatch_fp8 and dispatcher act on the expert all-to-all"),
    (MIXTRAL, 4, "tp=1,ep=8", "strategy.ep*etp=8*1=8 spans 8 replicas of tp=1, which do not divide the dp=4"),
    ("llama-3.1-8b", 8, "tp=1,ep=2", "strategy.ep=2 places routed experts; llama-3.1-8b has none; allowed: 1"),
]


@pytest.mark.parametrize(("model", "num_gpus", "strategy", "message"), BAD, ids=[b[2] for b in BAD])
def test_impossible_expert_layouts_are_refused_in_one_sentence(model, num_gpus, strategy, message, tmp_path):
    with pytest.raises(StrategyError) as err:
        serve(model, num_gpus, strategy, batch=4)
    assert message in str(err.value) and "allowed" in str(err.value)
    spec = model
    if isinstance(model, dict):
        spec = tmp_path / "model.yaml"
        spec.write_text(yaml.safe_dump(model))
    out = CliRunner().invoke(app, ["simulate", "-m", str(spec), "-s", "dgx-h100", "--num-gpus", str(num_gpus),
                                   "--task", "inference", "--batch", "4", "--prompt-len", "64", "--output-len", "8",
                                   "--strategy", strategy])
    assert out.exit_code == 2 and len([line for line in out.stderr.splitlines() if line.strip()]) == 1


def test_expert_layouts_of_the_search():
    # tp=2 among 4 replicas: width split over the pair, one expert group per rank, attention data
    # parallelism over 2 and 4 replicas (ep 4, 8); a dense model has one layout.
    from madmax.config.loaders import load_model

    assert expert_layouts(load_model(MIXTRAL), 2, 4) == [(1, 2), (2, 1), (4, 1), (8, 1)]
    assert expert_layouts(load_model(MIXTRAL), 8, 2) == [(1, 8), (8, 1)]  # ep=16 does not divide 8 experts
    assert expert_layouts(load_model("llama-3.1-8b"), 2, 4) == [(1, 1)]


def test_search_finds_expert_parallel_layouts():
    found = find_serving(MIXTRAL, "dgx-h100", 4, prompt_len=512, output_len=64, dtypes=["fp8"], kv_dtypes=["fp8"],
                         max_batch=64, top=3)
    layouts = {(c.tp, c.ep, c.etp) for c in found.candidates}
    assert {(1, 4, 1), (4, 4, 1), (4, 1, 4), (2, 4, 1)} <= layouts
    for c, r in found.top(3):
        assert r.strategy.startswith(c.strategy) and r.fits
