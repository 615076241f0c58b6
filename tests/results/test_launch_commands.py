"""Launch commands (issue 27 part 6): every option printed is one the launcher's table read from its source at the
release named (catalog launchers.yaml), the values are the simulated deployment's, and what a launcher cannot
express is said, not dropped."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.launchers import launcher, launcher_names

SERVE = {"system": "dgx-h100", "task": "inference", "mode": "concurrency", "batch": 16, "prompt_len": 1024,
         "output_len": 128}


def flags_of(launch: dict) -> set[str]:
    """The options a launch uses: `--flag` words of its command, top-level keys of its YAML config."""
    words = set(re.findall(r"(?<![\w-])--[a-z][\w.-]*", launch["command"]))
    keys = set(re.findall(r"^(\w+):", launch["config"] or "", flags=re.M))
    return words | keys


def known(kind: str, tool: str) -> set[str]:
    """Every option the table holds for `tool`, and the options its command template itself passes."""
    entry = launcher(kind, tool)
    return {o.flag for o in entry.options.values()} | set(re.findall(r"--[a-z][\w.-]*", entry.command))


def test_the_table_names_a_source_for_every_option():
    for kind in ("training", "serving", "routers"):
        for name in launcher_names(kind):
            entry = launcher(kind, name)
            assert entry.version and entry.source
            for concept, option in entry.options.items():
                assert option.flag and option.where, (name, concept)


@pytest.mark.parametrize("stack", ["vllm", "vllm-0.14", "sglang", "trtllm"])
@pytest.mark.parametrize(("model", "gpus", "extra"), [
    ("llama-3.1-70b", 8, {"strategy": "tp=4", "dtype": "fp8", "kv_dtype": "fp8"}),
    ("llama-3.1-8b", 2, {"strategy": "tp=1,pp=2", "speculative": "eagle", "draft_len": 3, "acceptance": 0.7}),
    ("llama-3.1-8b", 1, {"strategy": "tp=1", "speculative": "ngram", "draft_len": 4, "acceptance": 0.5,
                         "engine": "chunked_prefill=0,host_overlaps_gpu=0,cuda_graph_max_batch=64"}),
    ("deepseek-v3", 8, {"strategy": "tp=1,ep=8", "dtype": "fp8", "system": "dgx-h200", "speculative": "mtp"}),
    ("qwen3-30b-a3b", 4, {"strategy": "tp=4,ep=4", "dtype": "mxfp4"}),
])
def test_every_printed_serving_option_is_in_the_engines_table(stack, model, gpus, extra):
    r = api.simulate(model=model, num_gpus=gpus, **{**SERVE, "stack": stack, **extra})
    (launch,) = r.launch
    assert flags_of(launch) <= known("serving", launch["tool"])
    assert r.launch_note is None


def test_vllm_command_carries_the_simulated_replica():
    r = api.simulate(model="llama-3.1-70b", num_gpus=8, **SERVE, strategy="tp=4", dtype="fp8", kv_dtype="fp8",
                     stack="vllm")
    (launch,) = r.launch
    assert launch["command"].startswith("vllm serve meta-llama/Llama-3.1-70B")
    for option in ("--tensor-parallel-size 4", "--max-num-batched-tokens 8192", "--max-num-seqs 1024",
                   "--gpu-memory-utilization 0.9", "--kv-cache-dtype fp8", "--quantization fp8"):
        assert option in launch["command"]
    assert any("2 copies of this engine" in n for n in launch["notes"])


def test_attention_data_parallel_engines_per_launcher():
    common = {"model": "deepseek-v3", "num_gpus": 8, **SERVE, "system": "dgx-h200", "strategy": "tp=1,ep=8",
              "dtype": "fp8"}
    vllm = api.simulate(**common, stack="vllm").launch[0]["command"]
    assert "--data-parallel-size 8" in vllm and "--enable-expert-parallel" in vllm
    sglang = api.simulate(**common, stack="sglang").launch[0]["command"]
    assert all(o in sglang for o in ("--tp-size 8", "--dp-size 8", "--enable-dp-attention", "--ep-size 8"))
    trt = api.simulate(**common, stack="trtllm").launch[0]
    assert "--tp_size 8" in trt["command"] and "--ep_size 8" in trt["command"]
    assert "enable_attention_dp: true" in trt["config"]
    assert "--extra_llm_api_options extra_llm_api_options.yaml" in trt["command"]


def test_trtllm_kv_fraction_lives_in_the_yaml_block():
    # a kv_cache_config block in the YAML replaces --kv_cache_free_gpu_memory_fraction: the fraction goes inside
    r = api.simulate(model="llama-3.1-8b", num_gpus=1, **SERVE, kv_dtype="fp8", stack="trtllm",
                     engine="kv_pool_fraction=0.8")
    (launch,) = r.launch
    assert "kv_cache_config: {free_gpu_memory_fraction: 0.8, dtype: fp8}" in launch["config"]
    assert "kv_cache_free_gpu_memory_fraction" not in launch["command"]


def test_speculative_spellings():
    eagle = {"model": "llama-3.1-8b", "num_gpus": 1, **SERVE, "speculative": "eagle", "draft_len": 3,
             "acceptance": 0.7}
    assert ('--speculative-config \'{"method":"eagle3","model":"<EAGLE-3 draft head>","num_speculative_tokens":3}\''
            in api.simulate(**eagle, stack="vllm").launch[0]["command"])
    sglang = api.simulate(**eagle, stack="sglang").launch[0]["command"]
    assert all(o in sglang for o in ("--speculative-algorithm EAGLE3", "--speculative-num-steps 3",
                                     "--speculative-eagle-topk 1", "--speculative-num-draft-tokens 4"))
    trt = api.simulate(**eagle, stack="trtllm").launch[0]["config"]
    assert "speculative_config: {decoding_type: Eagle, max_draft_len: 3" in trt


DISAGG = dict(model="llama-3.1-8b", system="dgx-h100", num_gpus=8, task="inference", mode="disaggregated", batch=8,
              prompt_len=512, output_len=64, strategy="prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=4")


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm"])
def test_a_disaggregated_deployment_prints_its_servers_and_router(stack):
    r = api.simulate(**DISAGG, stack=stack)
    assert r.launch_note is None
    pre, dec, router = r.launch
    assert (pre["role"], dec["role"], router["role"]) == ("prefill", "decode", "router")
    for launch in (pre, dec):  # each server's own layout, and the KV transfer both sides need
        assert flags_of(launch) <= known("serving", launch["tool"])
    assert flags_of(router) <= known("routers", router["tool"])
    assert "2 prefill servers, each on 2 GPUs" in pre["notes"][0] and "decode server, on 4 GPUs" in dec["notes"][0]
    tp = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "trtllm": "--tp_size"}[stack]
    assert f"{tp} 2" in pre["command"] and f"{tp} 4" in dec["command"]
    # The router lists both prefill servers and the decode server.
    text = router["command"] + (router["config"] or "")
    assert text.count("<prefill-host-") == 2 and text.count("<decode-host-") == 1


def test_each_engine_spells_its_disaggregation():
    vllm = api.simulate(**DISAGG, stack="vllm").launch
    assert all('--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\'' in launch["command"]
               for launch in vllm[:2])
    sglang = api.simulate(**DISAGG, stack="sglang").launch
    assert "--disaggregation-mode prefill" in sglang[0]["command"]
    assert "--disaggregation-decode-tp 4" in sglang[0]["command"]  # the decode side's tp, told to the prefill side
    assert "--disaggregation-mode decode" in sglang[1]["command"] and "--disaggregation-decode-tp" not in sglang[1][
        "command"]
    assert sglang[2]["command"].count("--prefill ") == 2 and "--pd-disaggregation" in sglang[2]["command"]
    trt = api.simulate(**DISAGG, stack="trtllm").launch
    assert all("cache_transceiver_config: {backend: DEFAULT}" in launch["config"] for launch in trt[:2])
    assert trt[0]["config_name"].startswith("ctx_") and trt[1]["config_name"].startswith("gen_")
    assert "context_servers: {num_instances: 2" in trt[2]["config"] and "trtllm-serve disaggregated" in trt[2][
        "command"]


def test_serving_without_a_single_engine_command_says_why():
    old = api.simulate(model="llama-3.1-8b", num_gpus=8, **{**SERVE, "mode": "static"}, stack="trtllm-0.9")
    assert old.launch == [] and "trtllm-0.9 names no serving engine" in old.launch_note


TRAIN = {"system": "dgx-h100", "task": "pretrain"}


@pytest.mark.parametrize(("model", "gpus", "extra"), [
    ("llama-3.1-70b", 64, {"strategy": "tp=8,pp=2,vp=5", "dtype": "fp8"}),
    ("llama-3.1-70b", 64, {"strategy": "tp=4,pp=4,recompute=full,zero=1,tp_overlap=1"}),
    ("llama-3.1-8b", 16, {"strategy": "tp=1,zero=3,shard=8,recompute=selective"}),
    ("llama-3.1-8b", 8, {"strategy": "tp=2,cp=2,zero=2"}),
    ("llama-3.1-8b", 8, {"strategy": "tp=1,zero=0", "dtype": "fp16"}),
    ("qwen3-30b-a3b", 16, {"strategy": "tp=1,ep=8,dispatcher=deepep,ep_overlap=1", "dtype": "fp8", "global_batch": 64}),
    ("llama-3.1-405b", 1024, {"strategy": "tp=8,pp=16,vp=8,pp_embedding=1,pp_loss=1", "global_batch": 1024}),
])
def test_every_printed_training_flag_is_in_the_frameworks_table(model, gpus, extra):
    r = api.simulate(model=model, num_gpus=gpus, **{**TRAIN, **extra})
    assert [launch["tool"] for launch in r.launch] == ["megatron-lm", "torchtitan"]
    for launch in r.launch:
        assert flags_of(launch) <= known("training", launch["tool"]), launch["tool"]


def test_megatron_flags_by_hand():
    r = api.simulate(model="llama-3.1-70b", num_gpus=64, **TRAIN, strategy="tp=4,pp=4,vp=5,recompute=full",
                     global_batch=128)
    mega = r.launch[0]["command"]
    assert mega.startswith("torchrun --nproc_per_node 8 --nnodes 8")
    for option in ("--tensor-model-parallel-size 4", "--pipeline-model-parallel-size 4",
                   "--num-virtual-stages-per-pipeline-rank 5", "--sequence-parallel", "--global-batch-size 128",
                   "--seq-length 8192", "--use-distributed-optimizer", "--recompute-granularity full",
                   "--recompute-method block", "--recompute-num-layers 4", "--bf16"):  # 80 layers / (4 x 5)
        assert option in mega
    assert "--virtual-pipeline-model-parallel-size" not in mega  # not a Megatron-LM flag at any tag


def test_megatron_fsdp_deepep_and_fp8():
    moe = api.simulate(model="qwen3-30b-a3b", num_gpus=16, **TRAIN, dtype="fp8",
                       strategy="tp=1,ep=8,dispatcher=deepep,zero=3")
    mega = moe.launch[0]["command"]
    for option in ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                   "--ckpt-format fsdp_dtensor", "--moe-token-dispatcher-type flex", "--moe-enable-deepep",
                   "--fp8-format hybrid", "--fp8-recipe delayed", "--expert-model-parallel-size 8"):
        assert option in mega


def test_torchtitan_data_parallel_and_float8():
    hsdp = api.simulate(model="llama-3.1-8b", num_gpus=16, **TRAIN, strategy="tp=1,zero=3,shard=8", dtype="fp8")
    titan = hsdp.launch[1]
    assert "--parallelism.data_parallel_replicate_degree 2" in titan["command"]
    assert "--parallelism.data_parallel_shard_degree 8" in titan["command"]
    # torchtitan v0.2.0 registers 'quantize.linear.float8'; 'float8' alone is a KeyError there
    assert "--model.converters quantize.linear.float8" in titan["command"] and "--compile.enable" in titan["command"]
    zero1 = api.simulate(model="llama-3.1-8b", num_gpus=8, **TRAIN, strategy="tp=1,zero=1").launch[1]
    assert any("zero=1" in n and "no torchtitan form" in n for n in zero1["notes"])


def test_training_without_a_launcher_says_why():
    vit = api.simulate(model="vit-h/14", num_gpus=8, **TRAIN)
    assert vit.launch == [] and "vit-h/14 is a vit model" in vit.launch_note
    lora = api.simulate(model="llama-3.1-8b", system="dgx-h100", num_gpus=8, task="finetune", finetune="lora")
    assert lora.launch == [] and "lora fine-tuning trains adapters" in lora.launch_note
    full = api.simulate(model="llama-3.1-8b", system="dgx-h100", num_gpus=8, task="finetune")
    assert [launch["tool"] for launch in full.launch] == ["megatron-lm", "torchtitan"]


def test_cli_prints_the_commands():
    out = CliRunner().invoke(app, ["simulate", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--num-gpus", "1",
                                   "--task", "inference", "--batch", "4", "--prompt-len", "256", "--output-len", "16",
                                   "--stack", "trtllm", "--commands"])
    assert out.exit_code == 0
    assert "launch: trtllm 1.0.0" in out.output and "extra_llm_api_options.yaml" in out.output


@settings(max_examples=200, deadline=None)
@given(stack=st.sampled_from(["vllm", "vllm-0.14", "sglang", "trtllm"]),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), a=st.sampled_from([1, 2, 8]),
       ep=st.sampled_from([1, 2, 8]), etp=st.sampled_from([1, 2]), engines=st.integers(1, 64),
       kv_fp8=st.booleans(),
       weights=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8", "fp4", "int8", "int4", "mxfp4"]),
       speculative=st.sampled_from([None, "ngram", "eagle", "mtp"]), k=st.integers(1, 16),
       settings_=st.fixed_dictionaries({"chunked_prefill": st.booleans(), "mixed_batches": st.booleans(),
                                        "host_overlaps_gpu": st.booleans(), "max_num_tokens": st.integers(1, 2**20),
                                        "max_batch": st.integers(1, 4096), "cuda_graph_max_batch": st.integers(1, 1024),
                                        "kv_pool_fraction": st.floats(0.05, 1.0)}))
def test_any_replica_gets_only_table_options(stack, tp, pp, a, ep, etp, engines, kv_fp8, weights, speculative, k,
                                             settings_):
    from madmax.config.loaders import load_model
    from madmax.config.stack import load_stack
    from madmax.results.launch import LaunchedReplica, serving_launch

    launched = load_stack(stack).model_copy(update=settings_)
    replica = LaunchedReplica(tp=tp, pp=pp, ep=ep, etp=etp, attention_dp=a, engines=engines, kv_fp8=kv_fp8,
                              weights=weights, speculative=speculative, draft_len=k)
    launch, why = serving_launch(load_model("qwen3-30b-a3b"), replica, launched)
    assert why is None
    d = launch.to_dict()
    assert flags_of(d) <= known("serving", d["tool"])
    assert str(settings_["max_batch"]) in d["command"]  # the running-request cap is always pinned
    assert all(n and "\n" not in n for n in d["notes"])


@settings(max_examples=200, deadline=None)
@given(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]), vp=st.sampled_from([1, 2, 3]),
       cp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 4]), etp=st.sampled_from([1, 2]), dp=st.integers(1, 64),
       zero=st.integers(0, 3), recompute=st.sampled_from([None, "none", "selective", "full"]),
       layers=st.sampled_from([None, 1, 3]),
       dtype=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8", "mxfp8", "fp4"]),
       flags=st.fixed_dictionaries({name: st.booleans() for name in ("tp_overlap", "dp_overlap", "ep_overlap",
                                                                     "pp_embedding", "pp_loss", "fp8_params")}
                                   | {"dispatcher": st.sampled_from(["alltoall", "deepep"])}),
       per_node=st.sampled_from([4, 8]), mbs=st.integers(1, 4))
def test_any_training_strategy_gets_only_table_flags(tp, pp, vp, cp, ep, etp, dp, zero, recompute, layers, dtype, flags,
                                                     per_node, mbs):
    from madmax.config.base import DType
    from madmax.config.loaders import load_model
    from madmax.config.strategy import Strategy
    from madmax.results.launch import training_launches

    strategy = Strategy(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, dp=dp, zero=zero, mbs=mbs, recompute=recompute,
                        recompute_layers=layers if recompute == "full" else None, **flags)
    n = tp * pp * cp * dp
    launches, why = training_launches(load_model("qwen3-30b-a3b"), strategy, dp * mbs * 4, 4096, DType(dtype), n,
                                      per_node)
    assert why is None and [launch.tool for launch in launches] == ["megatron-lm", "torchtitan"]
    for launch in launches:
        d = launch.to_dict()
        assert flags_of(d) <= known("training", d["tool"]), d["tool"]
        assert all(note and "\n" not in note for note in d["notes"])
