"""Measured LLM serving runs, each mapped to `simulate(task="inference", ...)` and the metric to compare.

- trtllm_static: TensorRT-LLM v0.9 `perf-overview.md` (gptSessionBenchmark, static batching): output
  tokens/s/GPU of a static batch, and the first-token latency of one request; DGX H100 (fp8) and DGX A100
  (fp16). Rows of `published_dev.csv`.
- serving_h100: mean TTFT and TPOT at a fixed client concurrency of TensorRT-LLM, vLLM and SGLang
  deployments on 8 x H100-SXM nodes, aggregated (`mode=agg`) and disaggregated (`mode=disagg`);
  `data/serving/silicon_h100.csv` (ai-dynamo/aiconfigurator, Apache-2.0). Each row gives two cases,
  `<row id>:ttft_ms` and `<row id>:tpot_ms`.

MoE rows map to their catalog models with the engine's expert layout in madmax's grammar
(`docs/serving.md`): aiconfigurator's tp_size, moe_tp_size, moe_ep_size and attention_dp_size a become
`tp=tp_size,etp=moe_tp_size,ep=moe_ep_size` on tp_size x a GPUs (a > 1: attention data parallelism), the
disaggregated workers' `prefill_ep`/`decode_ep` likewise. Every assumption made for a row is in its
`Case.assumptions`; sources and licenses in `data/README.md`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from madmax.config.loaders import find_in_catalog, load_system
from madmax.errors import MadmaxError
from madmax.validate.datasets import PUBLISHED_CSV, Case, Dataset, Rows, build_dataset, read_rows, row_int, row_ints
from madmax.validate.inputs import NotMappable, catalog_gpu, model_family, system_for

TRTLLM_SOURCE = "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md"
SERVING_CSV = "serving/silicon_h100.csv"
DGX_GPUS = 8  # GPUs per DGX H100 / DGX A100 node

# Model names of the TensorRT-LLM tables and of silicon_h100.csv -> catalog models.
TRTLLM_MODELS = {"GPT-J-6B": "gpt-j-6b", "Mistral-7B": "mistral-7b", "Llama-2-7B": "llama-2-7b",
                 "Llama-2-70B": "llama-2-70b", "Falcon-180B": "falcon-180b", "Mixtral-8x7B": "mixtral-8x7b"}
SERVING_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
                  "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
                  "deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-R1": "deepseek-v3",
                  "openai/gpt-oss-120b": "gpt-oss-120b", "MiniMaxAI/MiniMax-M2.5": "minimax-m2"}
# Row columns of the model's shape -> catalog keys (published_dev.csv).
SHAPE_COLUMNS = (("layers", "num_layers"), ("hidden", "hidden_size"), ("heads", "num_heads"),
                 ("kv_heads", "num_kv_heads"), ("ffn_hidden", "ffn_hidden_size"), ("vocab", "vocab_size"))
TRTLLM_NOTES = ("gptSessionBenchmark static batching: the whole batch is prefilled at once, then decoded together "
                "until every request has its output (mode static, stack trtllm-0.9)",)
TTFT_NOTE = "first-token latency of batch 1: the context phase of one request (static mode, 1 output token)"
SERVING_NOTES = (
    "requests per measurement not stated: 20 per client from an idle engine, as AIConfigurator's aiperf runs do",
    "system dgx-h100: the source names h100_sxm; nodes of 8 GPUs (NVLink), InfiniBand between nodes",
)
KV_NOTES = {
    True: "KV cache format not stated: fp8 with fp8 weights under TensorRT-LLM, as trtllm-bench sets it (NVIDIA/"
          "TensorRT-LLM tensorrt_llm/bench/build/build.py: 'If the quantization is NVFP4 or FP8, force the KV cache "
          "dtype to FP8') and ModelOpt's FP8 checkpoints store it",
    False: "KV cache format not stated: the 16-bit activation format (the engines' kv_cache_dtype 'auto')",
}


def shape_notes(row: Mapping[str, str], entry: Mapping[str, Any]) -> list[str]:
    """Where the row's shape columns differ from the catalog model that is simulated (the catalog's is used)."""
    notes = []
    for column, key in SHAPE_COLUMNS:
        ours = entry.get(key) or (entry["num_heads"] if key == "num_kv_heads" else None)
        stated = row_int(row, column)
        if stated is None:
            notes.append(f"row does not state {column}; catalog {entry['name']} has {key}={ours}")
        elif stated != ours:
            notes.append(f"row states {column}={stated}, catalog {entry['name']} has {key}={ours} (catalog used)")
    return notes


def catalog_model(name: str, context: int) -> tuple[str | dict, list[str]]:
    """The catalog model `name`, or a copy with max_seq_len = `context` when the measured engine served longer
    sequences (prompt + output tokens) than the model's context, and the note saying so."""
    entry = find_in_catalog("models", name)
    if entry is None:
        raise NotMappable(f"model {name!r} is not in the catalog")
    if context <= entry["max_seq_len"]:
        return name, []
    model = {k: v for k, v in entry.items() if k != "aliases"}
    model["max_seq_len"] = context
    return model, [f"{name} has a {entry['max_seq_len']}-token context; the measured engine served {context} "
                   f"tokens (ISL + OSL), so max_seq_len={context} is simulated"]


def _label(model: str, num_gpus: int, gpu: str, parallelism: str, *words: object) -> str:
    return " ".join(str(w) for w in (model, f"{num_gpus}x{gpu.split('-')[0]}", parallelism, *words) if w != "")


def _tp_pp(tp: int, pp: int) -> str:
    return f"tp{tp}" + (f"pp{pp}" if pp > 1 else "")


# ------------------------------------------------------------------------------ TensorRT-LLM v0.9

def _trtllm_lengths(row: Mapping[str, str]) -> tuple[int, int]:
    """(ISL, OSL) from the notes: 'ISL 128 / OSL 2048', or 'input length 128; output 1 token'."""
    notes = row["notes"]
    found = re.search(r"ISL (\d+) / OSL (\d+)", notes)
    if found:
        return int(found.group(1)), int(found.group(2))
    prompt, output = re.search(r"input length (\d+)", notes), re.search(r"output (\d+) token", notes)
    if prompt and output:
        return int(prompt.group(1)), int(output.group(1))
    raise NotMappable("notes state neither 'ISL n / OSL m' nor 'input length n; output m token'")


def _trtllm_case(row_id: str, row: dict[str, str]) -> Case:
    name = row["model"]
    if name not in TRTLLM_MODELS:
        raise NotMappable(f"model {name!r} is not mapped; allowed: {', '.join(TRTLLM_MODELS)}")
    if row["metric"] not in ("output_tokens_per_s_per_gpu", "ttft_ms"):
        raise NotMappable(f"metric {row['metric']!r} is not mapped; allowed: output_tokens_per_s_per_gpu, ttft_ms")
    if row["dtype"] not in ("fp8", "fp16"):
        raise NotMappable(f"dtype {row['dtype']!r} is not mapped; allowed: fp8, fp16")
    num_gpus, tp, pp, batch = row_ints(row, "num_gpus", "tp", "pp", "global_batch")
    if tp * pp != num_gpus:
        raise NotMappable(f"tp*pp={tp}*{pp} differs from {num_gpus} GPUs")
    prompt, output = _trtllm_lengths(row)
    catalog = TRTLLM_MODELS[name]
    model, notes = catalog_model(catalog, prompt + output)
    notes = [*TRTLLM_NOTES, *shape_notes(row, find_in_catalog("models", catalog)), *notes]
    if row["metric"] == "ttft_ms":
        notes.append(TTFT_NOTE)
    per_node = row_int(row, "gpus_per_node")
    if per_node is None:
        per_node = DGX_GPUS
        notes.append(f"gpus_per_node not stated: a DGX node of {DGX_GPUS} GPUs")
    intra = float(row["intra_bw_GBps"]) if row["intra_bw_GBps"] else None
    system = system_for(row["gpu"], per_node, intra)
    kwargs: dict[str, Any] = {"model": model, "system": system, "num_gpus": num_gpus, "task": "inference",
                              "mode": "static", "batch": batch, "prompt_len": prompt, "output_len": output,
                              "dtype": row["dtype"]}
    if row["dtype"] == "fp8":  # perf-overview: "KV cache FP8 for FP8 engines"
        kwargs["kv_dtype"] = "fp8"
        if "KV cache FP8 for FP8 engines" not in row["notes"]:
            notes.append("KV cache fp8, as the throughput table states for FP8 engines (not stated in this row)")
    else:
        notes.append(f"KV cache in the engine's dtype ({row['dtype']})")
    kwargs.update(strategy=f"tp={tp},pp={pp}", stack="trtllm-0.9")
    if find_in_catalog("models", catalog).get("moe"):
        notes.append(f"experts split by width over tp={tp} (TensorRT-LLM's default MoE tensor parallelism)")
    gpu = catalog_gpu(row["gpu"])["name"]
    label = _label(catalog, num_gpus, gpu, _tp_pp(tp, pp), row["dtype"], f"b{batch}", f"{prompt}/{output}",
                   "trtllm 0.9")
    return Case(dataset="trtllm_static", row_id=row_id, label=label, kwargs=kwargs, metric=row["metric"],
                measured=float(row["value"]), unit="ms" if row["metric"] == "ttft_ms" else "tokens/s/GPU",
                family=model_family(catalog), gpu=gpu, parallelism=_tp_pp(tp, pp), assumptions=tuple(notes))


def load_trtllm_static(rows: Rows | None = None) -> Dataset:
    """TensorRT-LLM v0.9 perf-overview: static-batch output tokens/s/GPU and batch-1 first-token latency."""
    chosen = ((i, r) for i, r in (read_rows(PUBLISHED_CSV) if rows is None else rows)
              if r["source"].startswith(TRTLLM_SOURCE) and r["task"] == "inference")
    return build_dataset("trtllm_static", "TensorRT-LLM v0.9 static batching, DGX H100 (fp8) and DGX A100 (fp16)",
                  chosen, _trtllm_case)


# ---------------------------------------------------------------------------- silicon_h100.csv

@cache
def _system_error(num_gpus: int) -> str | None:
    """Why dgx-h100 cannot hold `num_gpus` GPUs (None when it can)."""
    try:
        load_system("dgx-h100", num_gpus)
    except MadmaxError as exc:
        return str(exc)
    return None


def _serving_dtype(row: Mapping[str, str]) -> tuple[str, list[str]]:
    """bf16 for the BF16 checkpoint (empty precision), fp8 for fp8 or block-scaled fp8 GEMMs; 4-bit weights
    (fp4, nvfp4, mxfp4: GPT-OSS's MXFP4 checkpoint, the only 4-bit rows) as mxfp4, which H100 (no fp4 tensor
    cores) runs weight-only: 4-bit weights read into 16-bit GEMMs, as the engines' MXFP4 kernels do on Hopper."""
    stated = {row["precision"], row["gemm_quant_mode"]} - {""}
    if not stated:
        return "bf16", []
    if stated <= {"fp4", "nvfp4", "mxfp4"}:
        return "mxfp4", ["4-bit weights: GPT-OSS's MXFP4 checkpoint, read into 16-bit GEMMs on H100"]
    if all(s.startswith("fp8") for s in stated):
        blocked = "fp8_block" in stated
        return "fp8", ["fp8_block (block-scaled fp8 GEMMs) simulated as fp8"] if blocked else []
    raise NotMappable(f"precision {'/'.join(sorted(stated))} is not mapped; allowed: fp8, fp8_block, empty (bf16)")


def _concurrency(row: Mapping[str, str]) -> tuple[int, list[str]]:
    """The client concurrency: `silicon_concurrency=N` of silicon_data_source, else decode_batch_size x
    decode_num_workers, which equals it on every disaggregated row that states both (8 DeepSeek rows)."""
    found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    if found:
        return int(found.group(1)), []
    batch, workers = row_int(row, "decode_batch_size"), row_int(row, "decode_num_workers")
    if not batch or not workers:
        raise NotMappable("row states no client concurrency (silicon_concurrency) nor decode batch and workers")
    return batch * workers, [f"client concurrency not stated: decode_batch_size x decode_num_workers = "
                             f"{batch} x {workers} = {batch * workers} (equal to it on the rows that state both)"]


def _moe_fields(row: Mapping[str, str], prefix: str = "") -> bool:
    return any((row_int(row, f"{prefix}{k}") or 1) > 1 for k in ("attention_dp_size", "moe_ep_size"))


def _expert_keys(row: Mapping[str, str], prefix: str, tp: int, moe: bool) -> tuple[str, int, list[str]]:
    """The expert layout of one engine (aiconfigurator's columns, `prefix` 'prefill_'/'decode_' or ''): the
    strategy keys, the attention data-parallel degree a (GPUs = tp x pp x a), and notes. Attention DP
    without expert parallelism (moe_ep_size 0 or 1) splits the experts by width over all a x tp GPUs."""
    adp = row_int(row, f"{prefix}attention_dp_size") or 1
    ep = row_int(row, f"{prefix}moe_ep_size") or 1
    etp = row_int(row, f"{prefix}moe_tp_size") or 0
    if not moe:
        if adp > 1 or ep > 1:
            raise NotMappable("attention_dp_size or moe_ep_size > 1 on a dense model: not an MoE layout")
        return "", 1, []
    notes = []
    if ep == 1 and adp > 1:
        etp = adp * tp
        notes.append(f"{prefix}moe_ep_size not set with attention DP {adp}: experts split by width over all "
                     f"{adp * tp} GPUs (etp={etp})")
    return (f",ep={ep}" + (f",etp={etp}" if etp else "")), adp, notes


def _serving_inputs(row: Mapping[str, str], moe: bool) -> tuple[dict[str, Any], str, str, list[str]]:
    """simulate() keywords of the deployment (batch, strategy, num_gpus, mode), its parallelism group, the
    label's layout words, and notes."""
    if row["mode"] == "agg":
        batch, tp, pp = row_ints(row, "batch_size", "tp_size", "pp_size")
        experts, adp, notes = _expert_keys(row, "", tp, moe)
        group = _tp_pp(tp, pp) + (f"adp{adp}" if adp > 1 else "")
        return ({"num_gpus": tp * pp * adp, "mode": "concurrency", "batch": batch,
                 "strategy": f"tp={tp},pp={pp}" + experts}, group, f"{group}{experts.replace(',', ' ')} c{batch}",
                notes)
    if row["mode"] != "disagg":
        raise NotMappable(f"mode {row['mode']!r} is not mapped; allowed: agg, disagg")
    keys = ("tp_size", "pp_size")
    ptp, ppp = row_ints(row, *(f"prefill_{k}" for k in keys))
    dtp, dpp = row_ints(row, *(f"decode_{k}" for k in keys))
    concurrency, notes = _concurrency(row)
    pw, dw = row_int(row, "prefill_num_workers"), row_int(row, "decode_num_workers")
    if pw is None and dw is None:
        # Not "one worker each": 10 such TensorRT-LLM DeepSeek-R1 rows carry, to the last digit, the TTFT and TPOT
        # of rows that state their layout (silicon_h100.csv lines 2-9: a prefill worker of tp 1 with attention DP
        # 16, two or three decode workers), not the tp-16 prefill their own columns name.
        raise NotMappable("prefill_num_workers and decode_num_workers not stated: the deployment is unknown (rows "
                          "without them repeat the measurements of rows with other worker layouts)")
    if pw is None or dw is None:
        raise NotMappable("row states the workers of one side only (partial row)")
    sizes = []
    strategy = (f"prefill_workers={pw},prefill_tp={ptp},prefill_pp={ppp},"
                f"decode_workers={dw},decode_tp={dtp},decode_pp={dpp}")
    for prefix, tp, pp in (("prefill", ptp, ppp), ("decode", dtp, dpp)):
        adp = row_int(row, f"{prefix}_attention_dp_size") or 1
        ep = row_int(row, f"{prefix}_moe_ep_size") or 1
        if moe and adp > 1 and ep <= 1:
            raise NotMappable(f"{prefix} attention DP {adp} without expert parallelism (experts split by width over "
                              f"the DP group) has no disaggregated form in madmax ({prefix}_ep places experts by EP)")
        if moe and (adp > 1 or ep > 1):
            if ep not in (tp, adp * tp):
                raise NotMappable(f"{prefix}_moe_ep_size={ep} with tp {tp} and attention DP {adp} is not a layout "
                                  f"madmax's {prefix}_ep expresses (ep = tp or tp x attention DP)")
            strategy += f",{prefix}_ep={ep}"
        elif not moe and (adp > 1 or ep > 1):
            raise NotMappable("attention_dp_size or moe_ep_size > 1 on a dense model: not an MoE layout")
        sizes.append(tp * pp * adp)
    notes.append(f"prefill_batch_size={row['prefill_batch_size'] or '-'} and decode_batch_size="
                 f"{row['decode_batch_size'] or '-'} of the source not passed: madmax's workers batch up to the "
                 "stack's limits")
    layout = f"disagg P{pw}x{_tp_pp(ptp, ppp)}/D{dw}x{_tp_pp(dtp, dpp)} c{concurrency}"
    return ({"num_gpus": pw * sizes[0] + dw * sizes[1], "mode": "disaggregated", "batch": concurrency,
             "strategy": strategy}, "disagg", layout, notes)


# The first date AIConfigurator's generator wrote each engine's launch settings (ai-dynamo/aiconfigurator:
# TensorRT-LLM in its first commit efcae124c, vLLM and SGLang in 95ddf241a), and the release month of the
# engine versions whose rows state no measurement date (pypi.org release histories of vllm and sglang).
GENERATOR_SINCE = {"trtllm": "2025-08-11", "vllm": "2025-12-04", "sglang": "2025-12-04"}
RELEASED = {("vllm", "0.11.2"): "2025-11", ("vllm", "0.12.0"): "2025-12", ("sglang", "0.5.1.post1"): "2025-08",
            ("sglang", "0.5.8.post1"): "2026-02"}
VLLM_ASYNC_SINCE = (0, 14)  # vLLM 0.14: async scheduling on by default (catalog/serving.yaml vllm-0.14)


def _stack_and_launch(row: Mapping[str, str]) -> tuple[str, str, list[str]]:
    """The serving-stack profile of the row's engine version, the launch its settings came from, and notes.

    The rows were run through AIConfigurator's generator where it wrote that engine's settings when the row was
    measured (its date, else its version's release month): launch aiconfigurator; earlier rows ran the
    engine's defaults: launch engine."""
    backend, version = row["backend"], row["backend_version"]
    stack = backend
    if backend == "vllm" and version:
        release = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
        stack = "vllm-0.14" if release >= VLLM_ASYNC_SINCE else "vllm"
    found = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row["silicon_data_source"])
    when = found.group(1) if found else RELEASED.get((backend, version), "")
    since = GENERATOR_SINCE[backend]
    if backend == "trtllm" or (when and when >= since[:len(when)]):
        return stack, "aiconfigurator", [f"launched as AIConfigurator's generator sets {backend} up (its rule since "
                                         f"{since}; row of {when or 'its benchmark sweep'}): launch aiconfigurator"]
    return stack, "engine", [f"measured {when or 'on a date not stated'}, before AIConfigurator's generator wrote "
                             f"{backend} settings ({since}): the engine's defaults (launch engine)"]


def _serving_cases(row_id: str, row: dict[str, str]) -> tuple[Case, Case]:
    name = row["model_path"]
    if name not in SERVING_MODELS:
        raise NotMappable(f"model {name!r} is not mapped; allowed: {', '.join(SERVING_MODELS)}")
    moe = bool(find_in_catalog("models", SERVING_MODELS[name]).get("moe"))
    if row["system"] != "h100_sxm":
        raise NotMappable(f"system {row['system']!r} is not mapped; allowed: h100_sxm")
    if row["backend"] not in ("trtllm", "vllm", "sglang"):
        raise NotMappable(f"backend {row['backend']!r} is not mapped; allowed: trtllm, vllm, sglang")
    prompt, output = row_ints(row, "isl", "osl")
    dtype, notes = _serving_dtype(row)
    deployment, group, layout, more = _serving_inputs(row, moe)
    if (reason := _system_error(deployment["num_gpus"])) is not None:
        raise NotMappable(reason)
    catalog = SERVING_MODELS[name]
    model, context_notes = catalog_model(catalog, prompt + output)
    version = row["backend_version"] or "(version not stated)"
    stack, launch, launch_notes = _stack_and_launch(row)
    notes = [f"measured with {row['backend']} {version}; simulated with madmax's serving stack {stack!r}",
             *launch_notes, *SERVING_NOTES, *notes, *more, *context_notes]
    if not moe and row["moe_tp_size"] not in ("", "0", "1"):
        notes.append(f"moe_tp_size={row['moe_tp_size']} ignored: {catalog} is dense (the field repeats tp_size)")
    kwargs = {"model": model, "system": "dgx-h100", "num_gpus": deployment["num_gpus"], "task": "inference",
              "mode": deployment["mode"], "batch": deployment["batch"], "prompt_len": prompt, "output_len": output,
              "dtype": dtype, "strategy": deployment["strategy"], "stack": stack, "launch": launch}
    fp8_kv = row["backend"] == "trtllm" and dtype == "fp8"
    if fp8_kv:
        kwargs["kv_dtype"] = "fp8"
    notes.append(KV_NOTES[fp8_kv])
    label = _label(catalog, deployment["num_gpus"], "h100", layout, dtype, f"{prompt}/{output}", row["backend"],
                   row["backend_version"] or "?")
    def case(metric: str, column: str) -> Case:
        return Case(dataset="serving_h100", row_id=f"{row_id}:{metric}", label=label, kwargs=kwargs, metric=metric,
                    measured=float(row[column]), unit="ms", family=model_family(catalog), gpu="h100-sxm",
                    parallelism=group, assumptions=tuple(notes))

    return case("ttft_ms", "silicon_ttft_ms"), case("tpot_ms", "silicon_tpot_ms")


def load_serving_h100(rows: Rows | None = None) -> Dataset:
    """silicon_h100.csv: mean TTFT and TPOT (ms) of each dense-model deployment, two cases per row."""
    return build_dataset("serving_h100", "TensorRT-LLM, vLLM and SGLang serving on H100: mean TTFT and TPOT",
                  read_rows(SERVING_CSV) if rows is None else rows, _serving_cases)
