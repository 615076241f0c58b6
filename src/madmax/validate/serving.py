"""Measured LLM serving runs, each mapped to `simulate(task="inference", ...)` and the metric to compare.

- trtllm_static: TensorRT-LLM v0.9 `perf-overview.md` (gptSessionBenchmark, static batching): output
  tokens/s/GPU of a static batch, and the first-token latency of one request; DGX H100 (fp8) and DGX A100
  (fp16). Rows of `published_dev.csv`.
- serving_h100: mean TTFT and TPOT at a fixed client concurrency of TensorRT-LLM, vLLM and SGLang
  deployments on 8 x H100-SXM nodes, aggregated (`mode=agg`) and disaggregated (`mode=disagg`);
  `data/serving/silicon_h100.csv` (ai-dynamo/aiconfigurator, Apache-2.0). Each row gives two cases,
  `<row id>:ttft_ms` and `<row id>:tpot_ms`.

Dense models only: MoE rows are `Unmapped("MoE not supported yet")`. Every assumption made for a row is in
its `Case.assumptions`; sources and licenses in `data/README.md`.
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
MOE = "MoE not supported yet"
DGX_GPUS = 8  # GPUs per DGX H100 / DGX A100 node

# Model names of the TensorRT-LLM tables and of silicon_h100.csv -> catalog models (dense only).
TRTLLM_MODELS = {"GPT-J-6B": "gpt-j-6b", "Mistral-7B": "mistral-7b", "Llama-2-7B": "llama-2-7b",
                 "Llama-2-70B": "llama-2-70b", "Falcon-180B": "falcon-180b"}
SERVING_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
                  "Qwen/Qwen3-32B": "qwen3-32b"}
SERVING_MOE_MODELS = ("Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "openai/gpt-oss",
                      "MiniMaxAI/MiniMax")
# Row columns of the model's shape -> catalog keys (published_dev.csv).
SHAPE_COLUMNS = (("layers", "num_layers"), ("hidden", "hidden_size"), ("heads", "num_heads"),
                 ("kv_heads", "num_kv_heads"), ("ffn_hidden", "ffn_hidden_size"), ("vocab", "vocab_size"))
TRTLLM_NOTES = ("gptSessionBenchmark static batching: the whole batch is prefilled at once, then decoded together "
                "until every request has its output (mode static, stack trtllm-0.9)",)
TTFT_NOTE = "first-token latency of batch 1: the context phase of one request (static mode, 1 output token)"
SERVING_NOTES = (
    "requests per measurement not stated: madmax's default number of requests simulated",
    "KV cache format not stated: madmax's default for the dtype",
    "system dgx-h100: the source names h100_sxm; nodes of 8 GPUs (NVLink), InfiniBand between nodes",
)


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
    if "MoE" in row["notes"] or model_family(name) == "mixtral" or (row_int(row, "ep") or 1) > 1:
        raise NotMappable(MOE)
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
    """bf16 for the BF16 checkpoint (empty precision), fp8 for fp8 or block-scaled fp8 GEMMs."""
    stated = {row["precision"], row["gemm_quant_mode"]} - {""}
    if not stated:
        return "bf16", []
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


def _serving_inputs(row: Mapping[str, str]) -> tuple[dict[str, Any], str, str, list[str]]:
    """simulate() keywords of the deployment (batch, strategy, num_gpus, mode), its parallelism group, the
    label's layout words, and notes."""
    if row["mode"] == "agg":
        batch, tp, pp = row_ints(row, "batch_size", "tp_size", "pp_size")
        group = _tp_pp(tp, pp)
        return ({"num_gpus": tp * pp, "mode": "concurrency", "batch": batch, "strategy": f"tp={tp},pp={pp}"},
                group, f"{group} c{batch}", [])
    if row["mode"] != "disagg":
        raise NotMappable(f"mode {row['mode']!r} is not mapped; allowed: agg, disagg")
    keys = ("num_workers", "tp_size", "pp_size")
    pw, ptp, ppp = row_ints(row, *(f"prefill_{k}" for k in keys))
    dw, dtp, dpp = row_ints(row, *(f"decode_{k}" for k in keys))
    concurrency, notes = _concurrency(row)
    strategy = (f"prefill_workers={pw},prefill_tp={ptp},prefill_pp={ppp},"
                f"decode_workers={dw},decode_tp={dtp},decode_pp={dpp}")
    notes.append(f"prefill_batch_size={row['prefill_batch_size'] or '-'} and decode_batch_size="
                 f"{row['decode_batch_size'] or '-'} of the source not passed: madmax's workers batch up to the "
                 "stack's limits")
    layout = f"disagg P{pw}x{_tp_pp(ptp, ppp)}/D{dw}x{_tp_pp(dtp, dpp)} c{concurrency}"
    return ({"num_gpus": pw * ptp * ppp + dw * dtp * dpp, "mode": "disaggregated", "batch": concurrency,
             "strategy": strategy}, "disagg", layout, notes)


def _serving_cases(row_id: str, row: dict[str, str]) -> tuple[Case, Case]:
    name = row["model_path"]
    moe_fields = _moe_fields(row) or _moe_fields(row, "prefill_") or _moe_fields(row, "decode_")
    if name.startswith(SERVING_MOE_MODELS) or (name not in SERVING_MODELS and moe_fields):
        raise NotMappable(MOE)
    if name not in SERVING_MODELS:
        raise NotMappable(f"model {name!r} is not mapped; allowed: {', '.join(SERVING_MODELS)}")
    if moe_fields:
        raise NotMappable(f"attention_dp_size or moe_ep_size > 1 on dense model {name}: attention data "
                          "parallelism is not modelled")
    if row["system"] != "h100_sxm":
        raise NotMappable(f"system {row['system']!r} is not mapped; allowed: h100_sxm")
    if row["backend"] not in ("trtllm", "vllm", "sglang"):
        raise NotMappable(f"backend {row['backend']!r} is not mapped; allowed: trtllm, vllm, sglang")
    prompt, output = row_ints(row, "isl", "osl")
    dtype, notes = _serving_dtype(row)
    deployment, group, layout, more = _serving_inputs(row)
    if (reason := _system_error(deployment["num_gpus"])) is not None:
        raise NotMappable(reason)
    catalog = SERVING_MODELS[name]
    model, context_notes = catalog_model(catalog, prompt + output)
    version = row["backend_version"] or "(version not stated)"
    notes = [f"measured with {row['backend']} {version}; simulated with madmax's serving stack "
             f"{row['backend']!r}", *SERVING_NOTES, *notes, *more, *context_notes]
    if row["moe_tp_size"] not in ("", "0", "1"):
        notes.append(f"moe_tp_size={row['moe_tp_size']} ignored: {catalog} is dense (the field repeats tp_size)")
    kwargs = {"model": model, "system": "dgx-h100", "num_gpus": deployment["num_gpus"], "task": "inference",
              "mode": deployment["mode"], "batch": deployment["batch"], "prompt_len": prompt, "output_len": output,
              "dtype": dtype, "strategy": deployment["strategy"], "stack": row["backend"]}
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
