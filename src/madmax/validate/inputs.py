"""Builders of `simulate` inputs from a measured row: model shapes by architecture, systems, strategies.

Bandwidths are per GPU per direction; a system is a catalog name when the row's node matches one, else
that catalog system with the row's bandwidths (its latencies kept).
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

from madmax.config.loaders import catalog_entries, find_in_catalog
from madmax.config.units import parse_quantity

GIGA = 1e9


class NotMappable(Exception):
    """Raised while mapping a row; its message becomes `Unmapped.reason`."""


def gpt3_model(name: str, layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int) -> dict:
    """GPT-3 / Megatron GPT: LayerNorm, biases, learned positions, GeLU, dropout, tied embeddings."""
    return {"name": name, "num_layers": layers, "hidden_size": hidden, "num_heads": heads,
            "num_kv_heads": heads, "ffn_hidden_size": ffn, "is_gated_ffn": False, "activation": "gelu",
            "norm": "layernorm", "has_bias": True, "position": "learned", "vocab_size": vocab,
            "tied_embeddings": True, "max_seq_len": seq, "has_dropout": True}


def llama_model(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
                seq: int) -> dict:
    """Llama 2/3: RMSNorm, SwiGLU, RoPE, no biases, no dropout, untied LM head."""
    return {"name": name, "num_layers": layers, "hidden_size": hidden, "num_heads": heads,
            "num_kv_heads": kv_heads, "ffn_hidden_size": ffn, "is_gated_ffn": True, "activation": "silu",
            "norm": "rmsnorm", "has_bias": False, "position": "rope", "vocab_size": vocab,
            "tied_embeddings": False, "max_seq_len": seq, "has_dropout": False}


def nemotron_model(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
                   seq: int) -> dict:
    """Nemotron 3/4 (NeMo NemotronConfig): LayerNorm, squared-ReLU plain FFN, RoPE, no biases, untied."""
    return {**llama_model(name, layers, hidden, heads, kv_heads, ffn, vocab, seq),
            "is_gated_ffn": False, "activation": "squared_relu", "norm": "layernorm"}


# Mixture-of-experts model names -> their family (before the dense prefixes: 'gpt-oss' is not GPT-3, and
# Qwen's MoE models are named '<total>-a<active>b').
MOE_FAMILIES = (("gpt-oss", "gpt-oss"), ("mixtral", "mixtral"), ("deepseek", "deepseek"), ("kimi", "deepseek"),
                ("llama-4", "llama4"), ("llama4", "llama4"))


def model_family(model_name: str) -> str:
    name = model_name.lower()
    for prefix, family in MOE_FAMILIES:
        if name.startswith(prefix):
            return family
    if re.search(r"-a\d+(\.\d+)?b\b", name):
        return name.split("-")[0] + "-moe"
    for family in ("gpt", "llama", "nemotron"):
        if name.startswith(family):
            return family
    return name.split("-")[0]



# Part names used by the validation files, for catalogs that do not list them as aliases.
GPU_NAMES = {"a100-sxm4-80gb": "a100-80gb", "a100-sxm4-40gb": "a100-40gb", "h100-sxm5-80gb": "h100-sxm",
             "v100-sxm2-32gb": "v100-32gb", "v100-sxm2-16gb": "v100-16gb", "v100-sxm3-32gb": "v100-32gb"}


def catalog_gpu(gpu: str) -> dict[str, Any]:
    """The raw catalog entry of a GPU named as in a validation file ('A100-SXM4-80GB (DGX A100)')."""
    name = gpu.split("(")[0].strip().lower()
    entry = find_in_catalog("gpus", name) or find_in_catalog("gpus", GPU_NAMES.get(name, name))
    if entry is None:
        raise NotMappable(f"GPU {gpu!r} is not in the catalog")
    return entry


def _bandwidth_differences(entry: dict[str, Any], wanted: dict[str, float | None]) -> dict[str, float]:
    return {key: value for key, value in wanted.items() if value is not None and not math.isclose(
        parse_quantity(entry[key]["bytes_per_s"], "bytes/s"), value * GIGA, rel_tol=1e-3)}


@cache
def system_for(gpu: str, gpus_per_node: int, scale_up_GBps: float | None = None,
               scale_out_GBps: float | None = None) -> str | dict:
    """A catalog system name when one matches the row's node, else that system with the row's bandwidths.

    Bandwidths are per GPU per direction in GB/s (1e9 bytes/s). Candidates are the catalog systems
    with the same GPU and node size, DGX systems first; the first whose bandwidths match is returned
    by name, else the first one is the template of a custom system (its latencies and kinds kept).
    """
    gpu_name = catalog_gpu(gpu)["name"]
    candidates = [e for e in catalog_entries("systems").values() if e.get("gpus_per_node") == gpus_per_node
                  and (find_in_catalog("gpus", str(e.get("gpu", ""))) or {}).get("name") == gpu_name]
    if not candidates:
        raise NotMappable(f"no catalog system of {gpus_per_node} x {gpu_name} to take latencies from")
    candidates.sort(key=lambda e: not str(e["name"]).startswith("dgx"))
    wanted = {"scale_up": scale_up_GBps, "scale_out": scale_out_GBps}
    for entry in candidates:
        if not _bandwidth_differences(entry, wanted):
            return entry["name"]
    template = candidates[0]
    dropped = ("aliases", "price_per_gpu_hour_usd", "node_power_w", "provider")
    data = {k: v for k, v in template.items() if k not in dropped}
    data["name"] = f"{template['name']}-custom"
    data["sources"] = {**template.get("sources", {})}
    for key, value in _bandwidth_differences(template, wanted).items():
        data[key] = {**template[key], "bytes_per_s": f"{value:g} GB/s"}
        data["sources"][key] = "validation row (per GPU per direction)"
    return data


def peak_flops_per_s(gpu: str, dtype: str) -> float:
    """Dense peak FLOP/s of the catalog GPU at `dtype`."""
    entry = catalog_gpu(gpu)
    peaks = entry.get("flops_per_s", {})
    if dtype not in peaks:
        raise NotMappable(f"GPU {entry['name']} has no {dtype} peak in the catalog")
    return parse_quantity(peaks[dtype], "FLOP/s")


def strategy_string(**keys: Any) -> str:
    """The `key=value,...` grammar of `madmax.config.strategy`, booleans as 1/0, None left out."""
    parts = []
    for key, value in keys.items():
        if value is None:
            continue
        parts.append(f"{key}={int(value) if isinstance(value, bool) else value}")
    return ",".join(parts)


def parallelism_group(tp: int, pp: int, dp: int, cp: int = 1, zero: int = 0, ep: int = 1) -> str:
    """Which axes exceed 1, e.g. 'tp+pp+dp'; ZeRO-3 data parallelism reads 'fsdp'; 'none' for one GPU."""
    axes = [name for name, degree in (("tp", tp), ("cp", cp), ("pp", pp), ("ep", ep)) if degree > 1]
    if dp > 1:
        axes.append("fsdp" if zero == 3 else "dp")
    return "+".join(axes) or "none"
