"""The command lines that launch what madmax simulated: Megatron-LM and torchtitan flags for a training
strategy, `vllm serve` / `python -m sglang.launch_server` / `trtllm-serve` (with its YAML) for a serving
replica. Every option comes from the launcher's table (catalog launchers.yaml, `madmax.config.launchers`),
read from its source at the release named; what a launcher cannot express is said in the launch's notes,
never silently dropped. Model-architecture flags (layers, widths, heads) come from the model's own recipe or
checkpoint and are not printed."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from madmax.config.base import DType
from madmax.config.launchers import Launcher, launcher
from madmax.config.stack import weight_format_name
from madmax.config.strategy import Recompute, Strategy


@dataclass
class Launch:
    """One launcher's command for a simulated deployment: the command line, the config file it reads (YAML
    text, or None), and what does not carry over."""

    tool: str
    version: str
    command: str
    config: str | None = None
    notes: list[str] = field(default_factory=list)
    source: str = ""
    config_name: str | None = None  # the config file's name, as the command passes it
    role: str | None = None  # disaggregated serving: prefill, decode (the servers) or router (what clients call)

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "version": self.version, "command": self.command, "config": self.config,
                "config_name": self.config_name, "notes": list(self.notes), "source": self.source, "role": self.role}


class _Line:
    """Options appended in order: `--flag value` pairs and bare switches, each spelled by the launcher."""

    def __init__(self, tool: Launcher) -> None:
        self.tool, self.parts = tool, []

    def set(self, concept: str, value: Any = None) -> None:
        flag = self.tool.flag(concept)
        self.parts.append(flag if value is None else f"{flag} {shlex.quote(str(value))}")

    def text(self, **fields: Any) -> str:
        return " \\\n    ".join([self.tool.command.format(**fields), *self.parts])


# ------------------------------------------------------------------------------------------------ training


def training_launches(model: Any, strategy: Strategy, global_batch: int, seq_len: int, dtype: DType,
                      num_gpus: int, gpus_per_node: int, finetune: str | None = None
                      ) -> tuple[list[Launch], str | None]:
    """Megatron-LM's and torchtitan's flags for a decoder's pre-training or full fine-tuning with `strategy`
    (resolved: dp set, the recompute chosen); none, and why, for what neither launcher trains."""
    if getattr(model, "family", None) != "decoder":
        return [], (f"Megatron-LM's and torchtitan's flags are printed for a decoder's training; {model.name} is a "
                    f"{getattr(model, 'family', 'different')} model")
    if finetune and finetune != "full":
        return [], (f"{finetune} fine-tuning trains adapters, which neither Megatron-LM's pretrain_gpt.py nor "
                    "torchtitan v0.2.0 does: no command is printed")
    return [_megatron(model, strategy, global_batch, seq_len, dtype, num_gpus, gpus_per_node),
            _torchtitan(model, strategy, global_batch, seq_len, dtype, num_gpus, gpus_per_node)], None


def _megatron(model, s: Strategy, gbs: int, seq: int, dtype: DType, n: int, per_node: int) -> Launch:
    tool = launcher("training", "megatron-lm")
    line, notes = _Line(tool), []
    line.set("tp", s.tp)
    line.set("pp", s.pp)
    if s.vp > 1:
        line.set("vp", s.vp)
    if s.cp > 1:
        line.set("cp", s.cp)
    if model.has_experts:
        line.set("ep", s.ep)
        line.set("etp", s.etp)
    if s.tp > 1 and s.sp is not False:
        line.set("sp")
    line.set("mbs", s.mbs)
    line.set("gbs", gbs)
    line.set("seq_len", seq)
    line.set("max_positions", max(seq, model.max_seq_len))
    if s.zero == 3:
        line.set("fsdp")
        line.set("fsdp_sharding", "optim_grads_params")
        line.set("ckpt_format", "fsdp_dtensor")
        if s.shard not in (None, s.dp):
            notes.append(f"shard={s.shard} (hybrid sharding over groups of {s.shard}) has no Megatron-FSDP flag "
                         "here: the command shards over all data-parallel ranks")
    elif s.zero >= 1:
        line.set("distributed_optimizer")
        if s.zero == 2:
            notes.append("zero=2: Megatron's distributed optimizer shards the optimizer state and reduce-scatters "
                         "the gradients (--overlap-grad-reduce), the nearest it has to ZeRO-2")
    _megatron_recompute(line, s, model.num_layers)
    _megatron_precision(line, s, dtype, notes)
    if model.has_experts and s.ep > 1:
        if s.dispatcher == "deepep":
            line.set("dispatcher", "flex")
            line.set("deepep")
        else:
            line.set("dispatcher", "alltoall")
        if s.ep_overlap:
            line.set("ep_overlap")
    if s.tp_overlap and s.tp > 1:
        line.set("tp_comm_overlap")
    if s.dp_overlap and s.dp > 1:
        line.set("overlap_grad_reduce")
        if s.zero >= 1:
            line.set("overlap_param_gather")
    if s.pp_layout:
        line.set("pp_layout", s.pp_layout)
    if s.pp_embedding:
        line.set("pp_embedding")
    if s.pp_loss:
        line.set("pp_loss")
    nodes = max(1, math.ceil(n / per_node))
    return Launch("megatron-lm", tool.version, line.text(gpus_per_node=min(n, per_node), nodes=nodes), None, notes,
                  tool.source)


def _megatron_recompute(line: _Line, s: Strategy, layers: int) -> None:
    if s.recompute is Recompute.SELECTIVE:
        line.set("recompute_granularity", "selective")
    elif s.recompute is Recompute.FULL:
        line.set("recompute_granularity", "full")
        line.set("recompute_method", "block")
        # the block method recomputes the first N layers of each pipeline chunk: all of them unless given
        line.set("recompute_num_layers", s.recompute_layers or math.ceil(layers / (s.pp * s.vp)))


def _megatron_precision(line: _Line, s: Strategy, dtype: DType, notes: list[str]) -> None:
    if dtype is DType.FP16:
        line.set("fp16")
        return
    if dtype in (DType.BF16, DType.FP8, DType.MXFP8, DType.FP4):
        line.set("bf16")
    if dtype is DType.FP8:
        line.set("fp8", "hybrid")
        line.set("fp8_recipe", "delayed")
    elif dtype is DType.MXFP8:
        line.set("fp8", "e4m3")
        line.set("fp8_recipe", "mxfp8")
    elif dtype is DType.FP4:
        notes.append("NVFP4 training: --fp4-format e2m1 --fp4-recipe nvfp4 exist from core_v0.15.0, not in "
                     "core_v0.14.0 whose flags these are")
    elif dtype in (DType.FP32, DType.TF32):
        notes.append(f"{dtype.value}: Megatron-LM trains in fp32 without --bf16/--fp16")
    if s.fp8_params and dtype in (DType.FP8, DType.MXFP8):
        line.set("fp8_param_gather")


def _torchtitan(model, s: Strategy, gbs: int, seq: int, dtype: DType, n: int, per_node: int) -> Launch:
    tool = launcher("training", "torchtitan")
    line, notes = _Line(tool), []
    replicate, shard = _titan_data_parallel(s, notes)
    line.set("dp_replicate", replicate)
    line.set("dp_shard", shard)
    if s.zero == 2:
        line.set("fsdp_reshard", "never")
    line.set("tp", s.tp)
    if s.tp > 1 and s.sp is False:
        notes.append("sp=0: torchtitan always runs sequence parallelism with TP")
    line.set("pp", s.pp)
    if s.pp > 1:
        line.set("pp_schedule", "Interleaved1F1B" if s.vp > 1 else "1F1B")
        if s.vp > 1:
            # torchtitan cuts ceil((layers + the first and last stages' extra) / per) stages
            counted = model.num_layers + int(s.pp_embedding) + int(s.pp_loss)
            per = math.ceil(counted / (s.pp * s.vp))
            line.set("pp_layers_per_stage", per)
            if math.ceil(counted / per) != s.pp * s.vp:
                notes.append(f"{model.num_layers} layers in stages of {per} make {math.ceil(counted / per)} "
                             f"stages, not pp x vp = {s.pp * s.vp}: torchtitan's split differs from the one "
                             "simulated")
        line.set("pp_first_less", int(s.pp_embedding))
        line.set("pp_last_less", int(s.pp_loss))
        line.set("pp_microbatch", s.mbs)
        if s.pp_layout:
            notes.append(f"pp_layout={s.pp_layout} has no torchtitan equivalent but module_fqns_per_model_part")
    if s.cp > 1:
        line.set("cp", s.cp)
    if model.has_experts:
        line.set("ep", s.ep)
        line.set("etp", s.etp)
        if s.etp not in (1, s.tp):
            notes.append(f"etp={s.etp}: torchtitan allows etp = 1 or tp only")
        if s.dispatcher == "deepep" or s.ep_overlap:
            notes.append("DeepEP and the expert all-to-all overlap are torchtitan keys from v0.2.2 "
                         "(parallelism.expert_parallel_comm_backend, pipeline_parallel_expert_parallel_overlap), "
                         "not in v0.2.0")
    dp = s.dp or 1
    local = gbs // dp if s.pp > 1 else s.mbs
    line.set("local_batch", local)
    line.set("gbs", gbs)
    line.set("seq_len", seq)
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full", None: "none"}
    line.set("ac_mode", mode[s.recompute])
    if s.recompute is Recompute.SELECTIVE:
        line.set("ac_option", "op")
    elif s.recompute is Recompute.FULL and s.recompute_layers is not None:
        notes.append(f"recompute_layers={s.recompute_layers}: torchtitan checkpoints whole layers all or every "
                     "N-th (selective_ac_option N), not the first N of a stage; full recompute is printed")
    compiled = False
    if dtype is DType.FP8:
        line.set("converters", "quantize.linear.float8,quantize.grouped_mm.float8" if model.has_experts
                 else "quantize.linear.float8")
        line.set("fp8_recipe", "tensorwise")
        notes.append("fp8: torchtitan's float8 has no delayed scaling (Transformer Engine's recipe, which madmax "
                     "costs); tensorwise scaling is the nearest")
        if s.fp8_params and s.zero == 3:
            line.set("fp8_all_gather")
        compiled = True
    elif dtype is DType.MXFP8:
        line.set("converters", "quantize.linear.mx,quantize.grouped_mm.mx" if model.has_experts
                 else "quantize.linear.mx")
        compiled = True
    elif dtype is DType.FP4:
        notes.append("NVFP4 training has no torchtitan key in v0.2.0")
    elif dtype is DType.FP16:
        notes.append("fp16: set training.mixed_precision_param = \"float16\" in the TOML")
    if s.tp_overlap and s.tp > 1:
        line.set("async_tp")
        compiled = True
    if compiled:
        line.set("compile")
    if n > per_node:
        notes.append(f"{n} GPUs on {math.ceil(n / per_node)} nodes: run_train.sh starts one node; launch torchrun "
                     f"--nnodes {math.ceil(n / per_node)} --nproc_per_node {per_node} -m torchtitan.train "
                     "--job.config_file <toml> with the same options on every node")
    return Launch("torchtitan", tool.version, line.text(gpus_per_node=min(n, per_node)), None, notes, tool.source)


def _titan_data_parallel(s: Strategy, notes: list[str]) -> tuple[int, int]:
    """(replicate, shard) degrees: FSDP over the shard group (zero 2 and 3; hybrid with `shard`), DDP over the
    rest; ZeRO-1 has no torchtitan form."""
    dp = s.dp or 1
    if s.zero == 3:
        shard = s.shard or dp
        return dp // shard, shard
    if s.zero == 2:
        return 1, dp
    if s.zero == 1 and dp > 1:
        notes.append("zero=1 (optimizer state sharded, weights and gradients whole) has no torchtitan form: "
                     "printed as DDP (data_parallel_replicate_degree); FSDP with reshard never is ZeRO-2")
    return dp, 1


# ------------------------------------------------------------------------------------------------ serving


@dataclass(frozen=True)
class LaunchedReplica:
    """What a serving engine's launch needs: the replica's layout, the engine's settings as launched, formats."""

    tp: int
    pp: int
    ep: int
    etp: int
    attention_dp: int  # ranks of one engine stepping together (attention data parallelism), else 1
    engines: int  # copies of the engine the deployment runs
    kv_fp8: bool
    weights: str  # the dtype label: bf16, fp16, fp8, fp4, int8, int4, mxfp4
    speculative: str | None = None  # ngram, eagle, mtp, draft
    draft_len: int = 0
    draft_model: str | None = None  # speculative draft: the draft model's Hugging Face id


def model_id(model: Any) -> str:
    """The Hugging Face id a launcher loads: the first alias that has one, else the model's name."""
    return next((a for a in getattr(model, "aliases", []) if "/" in a), model.name)


@dataclass(frozen=True)
class Disaggregation:
    """A server's part in a prefill/decode-disaggregated deployment: its role and the other side's layout."""

    role: str  # prefill or decode
    peer: LaunchedReplica


def serving_launch(model: Any, r: LaunchedReplica, stack: Any, part: Disaggregation | None = None
                   ) -> tuple[Launch | None, str | None]:
    """The command that starts one engine of the deployment under `stack` (a `ServingStack` as launched), or
    None and why. `part`: the engine is a prefill or decode server of a disaggregated deployment."""
    engine = getattr(stack.engine, "value", None)
    if engine is None:
        return None, (f"stack {stack.name} names no serving engine with a launcher (vllm, sglang, trtllm): no "
                      "command is printed")
    notes = []
    name = model_id(model)
    if name == model.name:
        notes.append(f"{model.name} has no Hugging Face id in the catalog: replace it by the checkpoint's path")
    build = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[engine]
    launch = build(name, r, stack, notes, part)
    if part is not None:
        launch.role = part.role
        gpus = r.attention_dp * r.tp * r.pp
        servers = (f"{part.role} server, on {gpus} GPUs" if r.engines == 1
                   else f"{r.engines} {part.role} servers, each on {gpus} GPUs")
        launch.notes.insert(0, f"the deployment's {servers}, behind the router below")
    elif r.engines > 1:
        launch.notes.append(f"the deployment runs {r.engines} copies of this engine behind a load balancer, one per "
                            f"{r.attention_dp * r.tp * r.pp} GPUs")
    if stack.version and not launch.version.startswith(stack.version.split("-")[0].rstrip("+")):
        launch.notes.append(f"stack {stack.name} describes {stack.description.split(',')[0]} {stack.version}; the "
                            f"flags were read at {launch.tool} {launch.version}")
    return launch, None


def _checkpoint_note(r: LaunchedReplica, engine: str) -> str | None:
    """What a quantized format needs from the checkpoint (the engines read its format from the checkpoint)."""
    if r.weights in ("bf16", "fp16"):
        return None
    kind = weight_format_name(r.weights)
    if kind is None:  # fp32, tf32: full-precision math, which the engines' serving paths do not default to
        return (f"weights {r.weights}: the command serves the checkpoint's 16-bit format; {engine}'s fp32 setting "
                "is not in the launcher table, so the simulated precision is not carried over")
    # an FP8, an MXFP4, an int4: the letters and words read with a vowel sound
    article = "an" if kind[0].upper() in "AEFHILMNORSX" else "a"
    return (f"weights {r.weights}: serve {article} {kind} checkpoint; {engine} reads its format from the "
            "checkpoint's config")


def _pool_and_formats(line: _Line, r: LaunchedReplica, stack, notes: list[str], engine: str, fp8_kv: str) -> None:
    """The running-request cap, the KV memory fraction, an FP8 KV cache (`fp8_kv`: the engine's spelling) and
    fp8 weights quantized at load, as vLLM and SGLang take them; other formats come from the checkpoint."""
    line.set("max_batch", stack.max_batch)
    line.set("kv_fraction", f"{stack.kv_pool_fraction:g}")
    if r.kv_fp8:
        line.set("kv_dtype", fp8_kv)
    if r.weights == "fp8":
        line.set("quantization", "fp8")
    elif (text := _checkpoint_note(r, engine)) is not None:
        notes.append(text)


def _vllm(name: str, r: LaunchedReplica, stack, notes: list[str], part: Disaggregation | None) -> Launch:
    tool = launcher("serving", "vllm")
    line = _Line(tool)
    line.set("tp", r.tp)
    if r.pp > 1:
        line.set("pp", r.pp)
    if r.attention_dp > 1:
        line.set("dp", r.attention_dp)
    if r.ep > 1:
        line.set("ep")
        if r.etp > 1:
            notes.append(f"ep={r.ep} x etp={r.etp}: vLLM's expert parallelism puts the experts over all TP x DP "
                         "ranks (no expert tensor parallelism beside it)")
    line.set("token_budget", stack.max_num_tokens)
    _pool_and_formats(line, r, stack, notes, "vLLM", "fp8")
    if r.weights == "fp8":
        notes.append("--quantization fp8 quantizes a 16-bit checkpoint as it loads; an FP8 checkpoint needs no flag")
    if stack.cuda_graph_max_batch != min(2 * stack.max_batch, 512):
        line.set("cuda_graph_sizes", stack.cuda_graph_max_batch)
    if stack.host_overlaps_gpu:
        line.set("async_scheduling")
        if r.speculative or r.pp > 1:
            notes.append("vLLM 0.11 refuses --async-scheduling with speculative decoding or pipeline parallelism")
    elif stack.version.startswith("0.14"):
        line.set("no_async_scheduling")
    if r.speculative:
        line.set("speculative", json.dumps(_vllm_speculative(r), separators=(",", ":")))
    if part is not None:  # NIXL moves the KV cache; the proxy decides which server prefills
        line.set("kv_transfer", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                           separators=(",", ":")))
        notes.append("set VLLM_NIXL_SIDE_CHANNEL_HOST to the server's address (and VLLM_NIXL_SIDE_CHANNEL_PORT apart "
                     "for servers sharing a host); needs nixl >= 0.5.1")
    if not stack.chunked_prefill or not stack.mixed_batches:
        notes.append("vLLM V1 always chunks prompts and mixes them with decodes (0.11 turns chunked prefill back on "
                     "for generative models): the simulated scheduler has no vLLM switch")
    return Launch("vllm", tool.version, line.text(model=shlex.quote(name)), None, notes, tool.source)


def _vllm_speculative(r: LaunchedReplica) -> dict[str, Any]:
    if r.speculative == "draft":  # a draft model: no method, vLLM infers draft_model from model
        return {"model": r.draft_model, "num_speculative_tokens": r.draft_len}
    if r.speculative == "eagle":
        return {"method": "eagle3", "model": "<EAGLE-3 draft head>", "num_speculative_tokens": r.draft_len}
    return {"method": r.speculative, "num_speculative_tokens": r.draft_len}


def _sglang(name: str, r: LaunchedReplica, stack, notes: list[str], part: Disaggregation | None) -> Launch:
    tool = launcher("serving", "sglang")
    line = _Line(tool)
    line.set("tp", r.tp * r.attention_dp)
    if r.pp > 1:
        line.set("pp", r.pp)
    if r.attention_dp > 1:
        line.set("dp", r.attention_dp)
        line.set("attention_dp")
    if r.ep > 1:
        line.set("ep", r.ep)
    if stack.chunked_prefill:
        line.set("token_budget", stack.max_num_tokens)
    else:
        line.set("token_budget", -1)
        line.set("max_prefill", stack.max_num_tokens)
    if stack.mixed_batches:
        line.set("mixed_chunk")
    _pool_and_formats(line, r, stack, notes, "SGLang", "fp8_e4m3")
    line.set("cuda_graph_max_batch", stack.cuda_graph_max_batch)
    if not stack.host_overlaps_gpu:
        line.set("no_overlap")
    if r.speculative == "ngram":
        line.set("spec_algorithm", "NGRAM")
        line.set("spec_tokens", r.draft_len)
    elif r.speculative:
        line.set("spec_algorithm", {"eagle": "EAGLE3", "draft": "STANDALONE"}.get(r.speculative, "NEXTN"))
        if r.speculative in ("eagle", "draft"):
            line.set("spec_draft", r.draft_model if r.speculative == "draft" else "<EAGLE-3 draft head>")
        line.set("spec_steps", r.draft_len)
        line.set("spec_topk", 1)
        line.set("spec_tokens", r.draft_len + 1)
    if part is not None:
        line.set("disagg_mode", part.role)
        peer = part.peer
        if part.role == "prefill" and peer.tp * peer.attention_dp != r.tp * r.attention_dp:
            line.set("disagg_decode_tp", peer.tp * peer.attention_dp)
        if part.role == "prefill" and peer.attention_dp != r.attention_dp:
            line.set("disagg_decode_dp", peer.attention_dp)
        if part.role == "decode" and peer.pp > 1:
            line.set("disagg_prefill_pp", peer.pp)
        notes.append("the KV cache moves over Mooncake (the default transfer backend; "
                     "--disaggregation-transfer-backend nixl for NIXL)")
    return Launch("sglang", tool.version, line.text(model=shlex.quote(name)), None, notes, tool.source)


def _trtllm(name: str, r: LaunchedReplica, stack, notes: list[str], part: Disaggregation | None) -> Launch:
    tool = launcher("serving", "trtllm")
    line, config = _Line(tool), {}
    line.set("tp", r.tp * r.attention_dp)
    if r.pp > 1:
        line.set("pp", r.pp)
    if r.ep > 1:
        line.set("ep", r.ep)
    line.set("max_batch", stack.max_batch)
    line.set("token_budget", stack.max_num_tokens)
    if r.attention_dp > 1:
        config[tool.flag("attention_dp")] = True
        if r.tp > 1:
            notes.append(f"tp={r.tp} within each of {r.attention_dp} attention data-parallel ranks: TensorRT-LLM's "
                         "attention DP runs attention with no tensor parallelism")
    if stack.chunked_prefill:
        config[tool.flag("chunked_prefill")] = True
    kv = {"free_gpu_memory_fraction": float(f"{stack.kv_pool_fraction:g}")}
    if r.kv_fp8:
        kv["dtype"] = "fp8"
    config[tool.flag("kv_cache_config")] = kv
    config[tool.flag("cuda_graph_config")] = {"max_batch_size": stack.cuda_graph_max_batch, "enable_padding": True}
    if not stack.host_overlaps_gpu:
        config[tool.flag("no_overlap")] = True
    if part is not None:  # both sides exchange the KV cache (UCX: DEFAULT in release/1.0's example)
        config[tool.flag("cache_transceiver")] = {"backend": "DEFAULT"}
    if r.speculative == "draft":
        notes.append(f"speculative decoding with the draft model {r.draft_model}: not among the TensorRT-LLM 1.0 "
                     "options of catalog launchers.yaml (MTP, Eagle, NGram); the command serves without it")
    elif r.speculative:
        config[tool.flag("speculative")] = _trtllm_speculative(r)
        if r.speculative == "ngram":
            notes.append("max_matching_ngram_size 5: vLLM's default prompt_lookup_max (TensorRT-LLM's default, 0, "
                         "matches nothing)")
    if r.weights == "int8":
        notes.append("TensorRT-LLM's PyTorch backend (1.0) lists no int8 W8A8 recipe")
    elif (text := _checkpoint_note(r, "TensorRT-LLM")) is not None:
        notes.append(text)
    if not stack.mixed_batches:
        notes.append("TensorRT-LLM's in-flight batching always mixes prompts and decodes: the simulated scheduler "
                     "has no switch there")
    file = tool.config_file if part is None else f"{'ctx' if part.role == 'prefill' else 'gen'}_{tool.config_file}"
    line.set("config_file", file)
    text = "".join(f"{key}: {_yaml(value)}\n" for key, value in config.items())
    return Launch("trtllm", tool.version, line.text(model=shlex.quote(name)), text, notes, tool.source,
                  config_name=file)


SERVER_PORT = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}  # each engine's default --port


def disaggregated_launches(model: Any, prefill: LaunchedReplica, decode: LaunchedReplica, prefill_stack: Any,
                           decode_stack: Any) -> tuple[list[Launch], str | None]:
    """The prefill servers', the decode servers' and the router's commands of a disaggregated deployment (each
    server's layout as simulated, the router's host names placeholders), or none and why."""
    pre, why = serving_launch(model, prefill, prefill_stack, Disaggregation("prefill", decode))
    dec, _ = serving_launch(model, decode, decode_stack, Disaggregation("decode", prefill))
    if pre is None or dec is None:
        return [], why
    return [pre, dec, _router(pre.tool, prefill.engines, decode.engines)], None


def _router(engine: str, prefills: int, decodes: int) -> Launch:
    tool = launcher("routers", engine)
    port = SERVER_PORT[engine]
    hosts = {role: [f"<{role}-host-{i}>" for i in range(1, count + 1)]
             for role, count in (("prefill", prefills), ("decode", decodes))}
    line, config = _Line(tool), None
    if engine == "vllm":
        line.set("port", 8000)
        for role in ("prefill", "decode"):  # lists of values: one flag, many words
            line.parts.append(f"{tool.flag(role + '_hosts')} {' '.join(map(shlex.quote, hosts[role]))}")
            line.parts.append(f"{tool.flag(role + '_ports')} {' '.join([str(port)] * len(hosts[role]))}")
    elif engine == "sglang":
        line.set("pd")
        for role in ("prefill", "decode"):
            for host in hosts[role]:
                line.set(role, f"http://{host}:{port}")
    else:
        line.set("config_file", tool.config_file)
        urls = {role: [f"{h}:{port}" for h in hosts[role]] for role in hosts}
        fields = {"hostname": "localhost", "port": 8000, "backend": "pytorch",
                  "context_servers": {"num_instances": prefills, "urls": urls["prefill"]},
                  "generation_servers": {"num_instances": decodes, "urls": urls["decode"]}}
        config = "".join(f"{tool.flag(key)}: {_yaml(value)}\n" for key, value in fields.items())
    notes = [f"clients send their requests here; <prefill-host-i> and <decode-host-i> stand for the servers' "
             f"addresses (each server on the engine's default port {port})"]
    return Launch(tool.name, tool.version, line.text(), config, notes, tool.source,
                  config_name=tool.config_file or None, role="router")


def _trtllm_speculative(r: LaunchedReplica) -> dict[str, Any]:
    if r.speculative == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": r.draft_len}
    if r.speculative == "eagle":
        return {"decoding_type": "Eagle", "max_draft_len": r.draft_len,
                "speculative_model_dir": "<EAGLE-3 draft head>", "eagle3_one_model": True}
    return {"decoding_type": "NGram", "max_draft_len": r.draft_len, "max_matching_ngram_size": 5}


def _yaml(value: Any) -> str:
    """A value in YAML flow style: true/false, numbers, strings, and {key: value} mappings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, str) and not value.replace("_", "").isalnum():
        return json.dumps(value)
    return str(value)
