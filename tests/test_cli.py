"""The `madmax` command on bad input: exit status 2 and one sentence naming the field, never a traceback.

DESIGN.md section 3: "Bad input (unknown name, impossible strategy, a GPU count the strategy does not
divide, negative or zero sizes, malformed files) ends with exit status 2 and one clear sentence naming
the field and what is allowed, never a traceback." Our own errors print one line `error: ...` on stderr;
a malformed flag (a word where a number goes, an unknown subcommand argument) is refused by click with
its usage message, which also exits 2.

Each case lists words the message must contain: the field, the value given and, where the rule has
one, what is allowed. The arithmetic behind each expected word is in the comment beside the case.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from madmax.cli import app

runner = CliRunner()

SIM = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100"]  # 32 heads, 8 KV heads, 32 layers, 8 GPUs
INF = [*SIM, "--task", "inference", "--prompt-len", "128", "--output-len", "128"]

# A tiny model of our schema; each bad-file case changes one field.
TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "num_heads": 8, "ffn_hidden_size": 1024,
        "vocab_size": 1000, "max_seq_len": 512}
NODE = {"name": "my-node", "gpu": "h999", "gpus_per_node": 8,
        "scale_up": {"kind": "nvlink", "bytes_per_s": "450 GB/s", "latency_s": "2 us", "domain_size": 8},
        "scale_out": {"kind": "infiniband", "bytes_per_s": "400 Gbit/s", "latency_s": "4 us"}}


@dataclass(frozen=True)
class File:
    """A file written under tmp_path before the command runs; its path replaces it in the arguments."""

    name: str
    text: str


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str | File]
    words: list[str]
    usage: bool = False  # refused by click's argument parsing, not by madmax


def sim(*args: str | File) -> list[str | File]:
    return [*SIM, *args]


def inf(*args: str | File) -> list[str | File]:
    """An inference run of 8 requests of 128 + 128 tokens, with `args` changed or added (later flags win)."""
    return [*INF, "--batch", "8", *args]


def inf_no_batch(*args: str | File) -> list[str | File]:
    return [*INF, *args]


def model_file(name: str, **changes: object) -> File:
    return File(name, json.dumps({**TINY, **changes}))


CASES = [
    # --- names and files ---------------------------------------------------------------------
    Case("unknown-model", ["simulate", "-m", "llama-9", "-s", "dgx-h100"],
         ["model 'llama-9'", "neither a catalog name nor a file", "madmax catalog list models"]),
    Case("unknown-system", ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-z900"],
         ["system 'dgx-z900'", "madmax catalog list systems"]),
    Case("unknown-gpu-in-system-file",
         ["simulate", "-m", "llama-3.1-8b", "-s", File("node.yaml", yaml.safe_dump(NODE))],
         ["gpu 'h999'", "madmax catalog list gpus"]),
    Case("missing-model-file", ["simulate", "-m", File("!missing/model.yaml", ""), "-s", "dgx-h100"],
         ["model file", "model.yaml", "does not exist"]),
    Case("missing-system-file", ["simulate", "-m", "llama-3.1-8b", "-s", File("!missing/node.json", "")],
         ["system file", "node.json", "does not exist"]),
    # PyYAML: the flow sequence "[x" is still open when ':' arrives on line 2.
    Case("malformed-yaml", sim("-m", File("bad.yaml", "name: [x\n  y: :")),
         ["model file", "bad.yaml", "not valid YAML/JSON", "line 2"]),
    Case("malformed-json", sim("-m", File("bad.json", '{"name": "x",}')),
         ["model file", "bad.json", "not valid YAML/JSON", "line 1"]),
    Case("json-list-not-mapping", sim("-m", File("list.json", "[1, 2]")),
         ["list.json", "must hold a mapping of fields", "got list"]),
    Case("empty-file", sim("-m", File("empty.yaml", "")), ["empty.yaml", "is empty"]),
    Case("zero-hidden-size", sim("-m", model_file("zero.json", hidden_size=0)),
         ["model.hidden_size=0", "greater than 0"]),
    Case("negative-layers", sim("-m", model_file("neg.json", num_layers=-2)),
         ["model.num_layers=-2", "greater than 0"]),
    Case("unknown-key-in-model", sim("-m", model_file("typo.json", num_layer=4)),
         ["model.num_layer", "is not a field of model", "num_layers"]),
    # 8 query heads cannot be grouped over 3 KV heads.
    Case("kv-heads-not-dividing-heads", sim("-m", model_file("gqa.json", num_kv_heads=3)),
         ["num_kv_heads=3", "num_heads=8"]),
    Case("hf-unsupported-model-type",
         sim("-m", File("bert/config.json", json.dumps({"model_type": "bert", "hidden_size": 768}))),
         ["model_type 'bert'", "allowed model_type: llama", "gpt2"]),
    Case("hf-missing-required-field",
         sim("-m", File("llama/config.json", json.dumps({"model_type": "llama", "num_attention_heads": 8}))),
         ["model_type 'llama'", "'num_hidden_layers'", "missing"]),
    # --- cluster size ------------------------------------------------------------------------
    Case("num-gpus-zero", sim("--num-gpus", "0"), ["num_gpus=0", "positive"]),
    Case("num-gpus-negative", sim("--num-gpus", "-8"), ["num_gpus=-8", "positive"]),
    # 12 GPUs = 1.5 DGX H100 nodes of 8.
    Case("num-gpus-not-whole-nodes", sim("--num-gpus", "12"),
         ["num_gpus=12", "dgx-h100", "allowed: 1..8 or a multiple of 8"]),
    Case("num-gpus-not-a-number", sim("--num-gpus", "eight"), ["'--num-gpus'"], usage=True),
    # --- task ----------------------------------------------------------------------------------
    Case("global-batch-zero", sim("--global-batch", "0"), ["global_batch=0", "greater than 0"]),
    Case("global-batch-negative", sim("--global-batch", "-4"), ["global_batch=-4", "greater than 0"]),
    Case("seq-len-zero", sim("--seq-len", "0"), ["seq_len=0", "greater than 0"]),
    # Llama 3.1 supports 128K = 131072 tokens; 256K = 262144 is beyond.
    Case("seq-len-beyond-max", sim("--seq-len", "262144"), ["seq_len=262144", "max_seq_len=131072"]),
    Case("unknown-dtype", sim("--dtype", "fp7"), ["dtype='fp7'", "allowed: bf16, fp16, fp8, fp32"]),
    Case("serving-dtype-not-training", sim("--dtype", "int8"), ["dtype=int8 applies to inference",
                                                                 "allowed for pretrain: bf16, fp16, fp8, fp32"]),
    # A100 tensor cores have no FP8 (H100 is the first with it).
    Case("fp8-on-a100", ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-a100", "--dtype", "fp8"],
         ["dtype=fp8", "a100", "allowed:", "bf16"]),
    Case("unknown-task", sim("--task", "pretrian"), ["task='pretrian'", "allowed: pretrain, finetune"]),
    # --- inference ---------------------------------------------------------------------------------
    Case("inference-batch-zero", inf("--batch", "0"), ["task.batch=0", "greater than 0"]),
    Case("inference-prompt-negative", inf("--prompt-len", "-5"), ["task.prompt_len=-5", "greater than 0"]),
    Case("inference-output-zero", inf("--output-len", "0"), ["task.output_len=0", "greater than 0"]),
    Case("inference-unknown-mode", inf("--mode", "burst"), ["task.mode='burst'", "'static'", "'rate'"]),
    Case("inference-rate-without-rate", inf("--mode", "rate"), ["task.mode=rate", "request_rate"]),
    Case("inference-rate-not-positive", inf("--mode", "rate", "--request-rate", "0"),
         ["task.request_rate=0", "0.001"]),
    Case("inference-static-needs-batch", inf_no_batch("--mode", "static"), ["task.batch", "required", "static"]),
    # The H100 has no fp4 tensor cores (Blackwell is the first).
    Case("inference-fp4-on-h100", inf("--dtype", "fp4"), ["dtype=fp4", "h100", "allowed:", "fp8"]),
    Case("inference-unknown-kv-dtype", inf("--kv-dtype", "int3"), ["task.kv_dtype='int3'", "allowed: bf16, fp16, fp8"]),
    # llama-3.1-8b: 131072 tokens of context; 131000 + 1000 = 132000 is beyond.
    Case("inference-beyond-context", inf("--prompt-len", "131000", "--output-len", "1000"),
         ["prompt_len + output_len = 132000", "max_seq_len=131072"]),
    Case("inference-training-key", inf("--strategy", "zero=3"), ["strategy.zero", "inference", "allowed: tp, pp, dp"]),
    # 32 heads: tp=3 divides none of 32 heads, 14336 FFN, 8 KV heads.
    Case("inference-tp-not-dividing", inf("--strategy", "tp=3"),
         ["strategy.tp=3", "num_heads=32", "allowed: 1, 2, 4, 8"]),
    Case("inference-unknown-stack", inf("--stack", "tgi"), ["stack 'tgi'", "allowed: trtllm", "vllm", "sglang"]),
    Case("stack-on-training", sim("--stack", "vllm"),
         ["stack='vllm'", "inference", "allowed for training: megatron-core"]),
    # a stack file naming an attention kernel the catalog does not have (catalog/calibration/attention_kernels.yaml)
    Case("stack-unknown-attention-kernel",
         sim("--stack", File("stack.yaml", "name: mine\nattention_kernels: {hopper: fa9}\n")),
         ["stack.attention_kernels.hopper='fa9'", "unknown attention kernel", "allowed: cudnn, fa2, fa3"]),
    Case("inference-arrivals-missing", [*SIM, "--task", "inference", "--mode", "rate", "--arrivals", "no-such.csv"],
         ["task.arrivals", "no-such.csv", "does not exist"]),
    # nothing asked for is dropped: options the run would not use are refused (issue 28)
    Case("inference-arrivals-and-lengths", inf("--mode", "rate", "--arrivals", "no-such.csv"),
         ["task.prompt_len does not apply beside task.arrivals"]),
    Case("inference-seq-len", inf("--seq-len", "4096"), ["task.seq_len applies to training", "prompt_len"]),
    Case("inference-global-batch", inf("--global-batch", "64"), ["task.global_batch applies to training"]),
    Case("static-num-requests", inf("--num-requests", "100"), ["task.num_requests does not apply to mode static"]),
    Case("seed-without-rate", inf("--mode", "concurrency", "--seed", "3"),
         ["task.seed draws Poisson arrivals or request lengths, which only a request_rate or a prompt_len_std"]),
    Case("inference-disaggregated-without-workers", inf("--mode", "disaggregated"),
         ["disaggregated", "prefill_workers", "decode_workers"]),
    # 4 x 1 + 1 x 2 = 6 GPUs of the 8 of one node.
    Case("inference-disaggregated-gpus", inf("--mode", "disaggregated", "--strategy",
                                             "prefill_workers=4,decode_workers=1,decode_tp=2"),
         ["= 6 GPUs", "num_gpus=8"]),
    Case("inference-goodput-limit-negative", inf("--max-ttft", "-1"), ["task.max_ttft_s=-1", "greater than 0"]),
    # llama-3.1-8b has 32 layers.
    Case("frozen-layers-beyond-num-layers", sim("--task", "finetune", "--frozen-layers", "40"),
         ["frozen_layers=40", "num_layers=32"]),
    Case("frozen-layers-on-pretrain", sim("--frozen-layers", "2"), ["frozen_layers", "finetune"]),
    Case("unknown-finetune-method", sim("--task", "finetune", "--finetune", "qlora"),
         ["finetune='qlora'", "'full'", "'lora'"]),
    Case("lora-rank-zero", sim("--task", "finetune", "--finetune", "lora", "--lora-rank", "0"),
         ["lora_rank=0", "greater than 0"]),
    # --- strategy grammar ----------------------------------------------------------------------
    Case("unknown-strategy-key", sim("--strategy", "tq=2"), ["strategy key 'tq'", "allowed: tp, pp, dp"]),
    Case("strategy-item-not-key-value", sim("--strategy", "tp8"), ["strategy item 'tp8'", "key=value"]),
    Case("strategy-value-missing", sim("--strategy", "tp="), ["strategy item 'tp='", "key=value"]),
    Case("tp-zero", sim("--strategy", "tp=0"), ["strategy.tp='0'", "greater than 0"]),
    Case("tp-not-a-number", sim("--strategy", "tp=two"), ["strategy.tp='two'", "integer"]),
    Case("zero-4", sim("--strategy", "zero=4"), ["strategy.zero='4'", "less than or equal to 3"]),
    Case("recompute-bogus", sim("--strategy", "recompute=bogus"),
         ["strategy.recompute='bogus'", "allowed: none, selective, full, auto"]),
    Case("sp-maybe", sim("--strategy", "sp=maybe"), ["strategy.sp='maybe'", "allowed: 1, 0, true, false"]),
    Case("flash-maybe", sim("--strategy", "flash=maybe"), ["strategy.flash='maybe'", "allowed: 1, 0"]),
    Case("order-missing-axis", sim("--strategy", "order=tp-cp-dp-pp"),
         ["strategy.order='tp-cp-dp-pp'", "missing ep", "tp-cp-ep-dp-pp"]),
    # --- strategy rules ------------------------------------------------------------------------
    # 24 GPUs (3 nodes), tp=3: 32 heads % 3 = 2; common divisors of 32 heads, 8 KV heads, ffn 14336: 1, 2, 4, 8.
    Case("tp-not-dividing-heads", sim("--num-gpus", "24", "--strategy", "tp=3"),
         ["strategy.tp=3", "num_heads=32", "llama-3.1-8b", "allowed: 1, 2, 4, 8"]),
    # llama-3.1-70b: 64 heads, 8 KV heads; tp=16 divides 64 but not 8.
    Case("tp-not-dividing-kv-heads",
         ["simulate", "-m", "llama-3.1-70b", "-s", "dgx-h100", "--num-gpus", "16", "--strategy", "tp=16"],
         ["strategy.tp=16", "num_kv_heads=8", "allowed: 1, 2, 4, 8"]),
    # tp*pp = 16 on 8 GPUs; divisors of 8: 1, 2, 4, 8.
    Case("product-not-dividing-gpus", sim("--strategy", "tp=4,pp=4"),
         ["tp*pp*cp=4*4*1=16", "num_gpus=8", "allowed products: 1, 2, 4, 8"]),
    # 8 GPUs / tp=2 = dp 4, not 2.
    Case("dp-mismatch", sim("--strategy", "tp=2,dp=2"), ["strategy.dp=2", "num_gpus=8", "set dp=4"]),
    Case("vp-without-pp", sim("--strategy", "vp=2"), ["strategy.vp=2", "pp > 1"]),
    # pp*vp = 8*8 = 64 chunks of 32 layers.
    Case("pp-vp-above-layers", sim("--strategy", "pp=8,vp=8"), ["strategy.pp*vp=8*8", "32 layers", "allowed"]),
    Case("ep-on-dense-model", sim("--strategy", "ep=2"), ["strategy.ep=2", "mixture-of-experts", "allowed: 1"]),
    # dp = 8; 3 does not divide 8.
    Case("shard-not-dividing-dp", sim("--strategy", "shard=3"), ["strategy.shard=3", "dp=8", "allowed: 1, 2, 4, 8"]),
    Case("shard-without-zero", sim("--strategy", "shard=2,zero=0"), ["strategy.shard=2", "zero >= 1"]),
    # dp = 8, mbs = 2: 8 sequences are 1 per replica, less than one micro-batch of 2.
    Case("global-batch-not-multiple-of-dp-mbs", sim("--global-batch", "8", "--strategy", "mbs=2"),
         ["global_batch=8", "dp*mbs=8*2=16", "allowed mbs: 1"]),
    Case("global-batch-not-multiple-of-dp", sim("--global-batch", "12"), ["global_batch=12", "dp=8"]),
    # pp=2 -> dp=4; 12 / 4 = 3 micro-batches per replica, not a multiple of pp=2; dp*mbs*pp = 8.
    Case("interleaved-microbatches-not-multiple-of-pp", sim("--global-batch", "12", "--strategy", "pp=2,vp=2"),
         ["vp=2", "(3)", "multiple of pp=2", "multiple of dp*mbs*pp=8"]),
    # 1004 = 4 * 251, so cp=8 does not split it.
    Case("cp-not-dividing-seq-len", sim("--seq-len", "1004", "--strategy", "cp=8"), ["strategy.cp=8", "seq_len=1004"]),
    # --- mixture of experts (qwen3-30b-a3b: 128 experts, expert width 768) --------------------------
    Case("ep-not-dividing-experts", ["simulate", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--strategy", "ep=3"],
         ["strategy.ep=3", "moe.num_experts=128", "allowed: 1, 2, 4, 8"]),
    # ep*etp = 16 on 8 GPUs (tp*cp*dp = 8).
    Case("ep-not-dividing-gpus", ["simulate", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--strategy", "ep=16"],
         ["strategy.ep*etp=16*1=16", "tp*cp*dp=8", "allowed ep*etp: 1, 2, 4, 8"]),
    Case("etp-without-ep", ["simulate", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--strategy", "ep=1,etp=2"],
         ["strategy.etp=2", "needs expert parallelism", "allowed with ep=1: etp=1"]),
    Case("top-k-above-experts", sim("-m", model_file("moe.json", moe={"num_experts": 8, "top_k": 9,
                                                                      "expert_ffn_hidden_size": 64})),
         ["top_k=9", "num_experts=8", "allowed: 1 to 8"]),
    Case("moe-missing-field", sim("-m", model_file("moe.json", moe={"num_experts": 8})),
         ["model.moe.top_k", "required"]),
    Case("hf-moe-missing-field",
         sim("-m", File("mixtral/config.json", json.dumps({
             "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512,
             "num_local_experts": 8}))),
         ["model_type 'mixtral'", "'num_experts_per_tok'", "missing"]),
    Case("expert-load-below-mean", ["simulate", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--strategy", "ep=8",
                                    "--expert-load", "0.5"], ["task.expert_load='0.5'", ">= 1", "zipf:ALPHA"]),
    Case("expert-load-on-dense-model", sim("--expert-load", "1.2"),
         ["task.expert_load", "mixture-of-experts", "llama-3.1-8b has no experts"]),
    Case("ep-overlap-one-microbatch",
         ["simulate", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--strategy", "ep=8,ep_overlap=1", "--global-batch",
          "8"], ["strategy.ep_overlap=1", "1 micro-batch", "allowed: ep_overlap=0"]),
    # --- output --------------------------------------------------------------------------------
    Case("trace-into-missing-directory", sim("--trace", File("!missing/dir/trace.json", "")),
         ["trace file", "trace.json", "cannot be written"]),
    # --- other commands --------------------------------------------------------------------------
    Case("catalog-show-unknown", ["catalog", "show", "nosuch"], ["'nosuch'", "madmax catalog list"]),
    Case("catalog-list-unknown-kind", ["catalog", "list", "nosuch"], ["'nosuch'", "'models'", "'systems'"], usage=True),
    Case("schema-unknown-kind", ["schema", "nosuch"], ["'nosuch'", "'model'", "'strategy'"], usage=True),
    Case("inspect-unknown-model", ["inspect", "nosuch"], ["model 'nosuch'", "madmax catalog list models"]),
    Case("inspect-negative-seq-len", ["inspect", "llama-3.1-8b", "--seq-len", "-5"], ["seq_len=-5", "positive"]),
    Case("simulate-without-model", ["simulate", "-s", "dgx-h100"], ["'--model'"], usage=True),
    Case("unknown-flag", sim("--gpus", "8"), ["--gpus"], usage=True),
]


def materialize(args: list[str | File], tmp_path: Path) -> list[str]:
    """Write each File under tmp_path; a name starting with '!' is a path that must not exist."""
    out = []
    for arg in args:
        if isinstance(arg, File):
            path = tmp_path / arg.name.removeprefix("!")
            if not arg.name.startswith("!"):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(arg.text)
            arg = str(path)
        out.append(arg)
    return out


def flat(text: str) -> str:
    """Click's usage error drawn in a box and wrapped at 80 columns, as one line of words."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_sentence(case: Case, tmp_path: Path) -> None:
    result = runner.invoke(app, materialize(case.args, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stdout == ""  # errors go to stderr; nothing half-printed on stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr  # click's usage errors too: one line, not typer's usage box
    message = lines[0]
    assert message.startswith("error: "), message
    if case.usage:
        assert "Invalid value" in message or "Missing option" in message or "No such option" in message, message
        assert message.endswith("--help`"), message  # names the command's help
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"
    if case.id.startswith("trace"):
        assert not (tmp_path / "missing").exists()


def test_lora_target_unknown_is_a_config_error() -> None:
    # No CLI flag sets lora_targets; the Python API takes a task mapping.
    from madmax import api
    from madmax.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        api.simulate("llama-3.1-8b", "dgx-h100", task={"kind": "finetune", "finetune": "lora",
                                                      "lora_targets": ["qkv", "ffn"]})
    assert "lora_targets" in str(info.value) and "'ffn'" in str(info.value)
    assert "allowed: down, gate, out, qkv, up" in str(info.value)


def test_console_script_exits_2_without_traceback() -> None:
    # The real entry point (`madmax` = madmax.cli:main), not the test runner.
    proc = subprocess.run([sys.executable, "-m", "madmax.cli", "simulate", "-m", "nosuch-model", "-s", "dgx-h100"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: model 'nosuch-model' is neither a catalog name nor a file")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# --- good input of the other commands ----------------------------------------------------------


def test_catalog_list_and_show() -> None:
    listed = runner.invoke(app, ["catalog", "list", "models"])
    assert listed.exit_code == 0 and "llama-3.1-405b" in listed.stdout
    shown = runner.invoke(app, ["catalog", "show", "dgx-h100"])
    assert shown.exit_code == 0
    assert shown.stdout.startswith("# system dgx-h100\n")
    assert yaml.safe_load(shown.stdout)["gpus_per_node"] == 8


def test_schema_is_json_schema() -> None:
    result = runner.invoke(app, ["schema", "model"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert "num_layers" in schema["properties"] and schema["additionalProperties"] is False


@pytest.mark.parametrize(("strategy", "words"), [
    ("emb=rw", "strategy.emb shards a recommendation model's embedding tables; llama-3-8b has none"),
    ("dispatcher=deepep", "strategy.dispatcher applies to mixture-of-experts models; llama-3-8b has no experts"),
    ("prefill_workers=1", "strategy.prefill_workers sizes a disaggregated serving worker"),
])
def test_strategy_keys_the_model_would_not_use_are_refused(strategy, words):
    """Nothing a user asks for is silently dropped (issue 28): the result was identical with and without them."""
    from typer.testing import CliRunner

    from madmax.cli import app

    result = CliRunner().invoke(app, ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "8",
                                      "--global-batch", "32", "--strategy", strategy])
    assert result.exit_code == 2 and words in result.output, result.output


def test_a_recommendation_model_is_counted_in_samples_and_inference_in_steps():
    """DLRM printed 'tokens/s per GPU' and 'x 1' tokens per sample; a forward-only run, training words (issue 28)."""
    from typer.testing import CliRunner

    from madmax.cli import app

    base = ["simulate", "-m", "dlrm-a", "-s", "zionex", "--num-gpus", "8"]
    trained = CliRunner().invoke(app, [*base, "--global-batch", "4096"]).output
    assert "samples/s per GPU" in trained and "tokens/s per GPU" not in trained and "x 1 " not in trained
    served = CliRunner().invoke(app, [*base, "--task", "inference", "--batch", "4096"]).output
    assert "step time" in served and "iteration time" not in served and "HFU" not in served
    strategy = next(line for line in served.splitlines() if line.startswith("strategy "))
    assert "zero=" not in strategy and "recompute=" not in strategy  # training's keys
