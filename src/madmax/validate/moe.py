"""Measured mixture-of-experts training runs, mapped to `madmax.api.simulate` (rows of published_dev.csv).

- megatron_bridge_moe: NVIDIA Megatron-Bridge performance summary (Megatron-Core, DGX H100): Qwen3-30B-A3B,
  Qwen3-235B-A22B, GPT-OSS-120B, DeepSeek-V3 pre-training, tokens/s/GPU. The benchmark rows route
  force-balanced and dropless (their note), so they are simulated with balanced routing; rows marked
  "token-drop" (release 25.09) drop beyond capacity, which under balanced routing drops nothing.
- automodel_moe: NVIDIA NeMo AutoModel (PyTorch-native FSDP2 with TE and DeepEP kernels, DGX H100, bf16):
  Qwen3-30B-A3B and GPT-OSS-20B pre-training, iteration time, "fake balanced gate".

The models are the catalog entries (shapes from their Hugging Face configs); the row's sizes are
checked against them. What the tables do not state is assumed and listed per row: the cheapest
activation recompute that fits (`madmax.parallel.recompute`), the all-to-all not overlapped, dispatch in
16 bits.
"""

from __future__ import annotations

from typing import Any

from madmax.config.loaders import load_model
from madmax.config.strategy import RECOMPUTE_AUTO
from madmax.errors import MadmaxError
from madmax.validate.datasets import (
    PUBLISHED_CSV,
    RECOMPUTE_CHOSEN,
    Case,
    Dataset,
    Rows,
    _case,
    build_dataset,
    read_rows,
    row_int,
    row_ints,
    with_stack,
)
from madmax.validate.inputs import NotMappable, peak_flops_per_s, system_for

# The tables' model names -> catalog entries.
CATALOG = {"Qwen3-30B-A3B": "qwen3-30b-a3b", "Qwen3-235B-A22B": "qwen3-235b-a22b", "GPT-OSS-120B": "gpt-oss-120b",
           "GPT-OSS-20B": "gpt-oss-20b", "DeepSeek-V3": "deepseek-v3", "Mixtral-8x7B": "mixtral-8x7b"}
_DTYPES = {"fp8": "fp8", "fp8-cs": "fp8", "bf16": "bf16"}
AUTOMODEL_STACK = "automodel"  # catalog/training_stacks.yaml: AutoModel's expert kernels, megatron-core's others
ASSUMED = ("all-to-all overlap not stated; not overlapped (ep_overlap=0)",
           "token dispatch precision not stated; 16 bits assumed")
# Megatron-MoE-ModelZoo, the Megatron-Core MoE team's best-practice scripts (read in the copy
# github.com/vwxyzjn/Megatron-MoE-ModelZoo: best-practice/qwen3/run_235b.sh, best-practice/DeepSeekV3/run.sh
# and README.md), gives H100 recipes for two of these layouts: what they set that the tables do not say. madmax
# has no module-level recompute, and its overlap costs the compute nothing (no SMs held by the
# communication kernels), so neither is simulated: the two pull the prediction in opposite directions.
MODELZOO = {
    ("DeepSeek-V3", 2, 8, 4, 64): "DeepEP dispatcher, all-to-all overlap, selective recompute of mla_up_proj and mlp, "
                                  "pipeline layout Et|(tt|)*30mL, bf16 optimizer states",
    ("Qwen3-235B-A22B", 2, 8, 4, 32): "all-to-all overlap, selective recompute of moe_act and layernorm",
}
# Megatron-Bridge's own H100 performance configs (scripts/performance/configs, read at v0.3.0 and v0.4.0-v0.5.0):
# what they set that the tables do not say and the rows do not simulate.
BRIDGE = {
    ("GPT-OSS-120B", 1, 4, 1, 8): "all-to-all dispatcher with permute and router fusion, selective recompute of "
                                  "layernorm and moe_act, no CUDA graphs (v0.3.0)",
    ("Qwen3-30B-A3B", 1, 2, 12, 8): "flex dispatcher with DeepEP and the all-to-all overlap (v0.3.0)",
    ("Qwen3-30B-A3B", 1, 1, 1, 16): "flex dispatcher with HybridEP on 32 SMs, no overlap (v0.4.0, v0.5.0)",
}


def _model(row: dict[str, str]) -> dict[str, Any]:
    """The catalog model of the row, checked against the sizes the row states."""
    name = CATALOG.get(row["model"], row["model"].lower())
    try:
        spec = load_model(name)
    except MadmaxError:
        raise NotMappable(f"MoE model {row['model']!r} is not in the catalog; named in the tables: "
                          f"{', '.join(CATALOG)}") from None
    if not spec.has_experts:
        raise NotMappable(f"row has ep > 1 but catalog model {name!r} has no experts")
    for column, value in (("layers", spec.num_layers), ("hidden", spec.hidden_size), ("heads", spec.num_heads)):
        stated = row_int(row, column)
        if stated is not None and stated != value:
            raise NotMappable(f"row states {column}={stated} but catalog {name} has {value}")
    return spec.model_dump(mode="json", exclude_none=True)


def _dtype(text: str) -> str:
    key = text.split(" ")[0].lower()
    if key not in _DTYPES:
        raise NotMappable(f"dtype {text!r} is not mapped")
    return _DTYPES[key]


def moe_case(dataset: str, row_id: str, row: dict[str, str], *, zero: int, notes: list[str],
             dispatcher: str = "alltoall") -> Case:
    """One MoE training row of the published format: its catalog model, the row's degrees (ep included)
    and `zero`; what the row leaves out is assumed and listed (`ASSUMED`, `notes`)."""
    model = _model(row)
    num_gpus, tp, pp, seq, gb, per_node = row_ints(row, "num_gpus", "tp", "pp", "seq_len", "global_batch",
                                                   "gpus_per_node")
    ep = row_int(row, "ep")
    if ep is None:
        raise NotMappable("row does not state ep")
    s: dict[str, Any] = {"tp": tp, "pp": pp, "cp": row_int(row, "cp") or 1, "ep": ep,
                         "vp": row_int(row, "vp") or 1, "mbs": row_int(row, "micro_batch") or 1, "zero": zero,
                         "recompute": row["recompute"] or RECOMPUTE_AUTO, "dispatcher": dispatcher}
    if not row["recompute"]:
        notes.insert(0, RECOMPUTE_CHOSEN)
    if row_int(row, "dp") is not None:
        s["dp"] = row_int(row, "dp")
    if row_int(row, "micro_batch") is None:
        notes.append("micro-batch not stated; mbs=1 assumed")
    dtype = _dtype(row["dtype"])
    intra, inter = (float(row[k]) if row[k] else None for k in ("intra_bw_GBps", "inter_bw_GBps"))
    system = system_for(row["gpu"], per_node, intra, inter)
    return _case(dataset, row_id, model, system=system, gpu=row["gpu"], num_gpus=num_gpus, task=row["task"], gb=gb,
                 seq=seq, dtype=dtype, s=s, metric=row["metric"], measured=float(row["value"]), unit=row["unit"],
                 peak=peak_flops_per_s(row["gpu"], dtype), assumptions=[*ASSUMED, *notes])


def _rows(prefix: str, rows: Rows | None):
    return ((i, r) for i, r in (read_rows(PUBLISHED_CSV) if rows is None else rows)
            if r["source"].startswith(prefix) and r["task"] in ("pretrain", "finetune"))


def load_megatron_bridge_moe(rows: Rows | None = None) -> Dataset:
    """Megatron-Bridge MoE pre-training on DGX H100, tokens/s/GPU (distributed optimizer: zero=1)."""

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        notes = ["force-balanced dropless routing in the benchmark: balanced routing simulated"]
        if "token-drop" in row["notes"]:
            notes = ["token-drop routing: balanced routing simulated (drops nothing when balanced)"]
        dispatcher = "alltoall"
        if row["model"].startswith("DeepSeek"):
            # Megatron-Core's DeepSeek-V3 H100 recipe uses the flex dispatcher with DeepEP.
            dispatcher = "deepep"
            notes.append("dispatcher not stated; DeepEP assumed (the DeepSeek-V3 recipe's flex dispatcher)")
        layout = (row["model"], *row_ints(row, "tp", "pp"), row_int(row, "vp") or 1, row_int(row, "ep"))
        if layout in BRIDGE:
            notes.append(f"Megatron-Bridge's H100 performance config of this layout sets: {BRIDGE[layout]}; simulated "
                         "with the all-to-all dispatcher and no overlap")
        recipe = MODELZOO.get(layout)
        if recipe:
            notes.append(f"Megatron-MoE-ModelZoo's H100 recipe of this layout sets: {recipe}; the overlap and the "
                         "module recompute are not simulated (madmax's overlap is free, it has no module recompute)")
        return moe_case("megatron_bridge_moe", row_id, row, zero=1, notes=notes, dispatcher=dispatcher)

    return build_dataset("megatron_bridge_moe", "NVIDIA Megatron-Bridge MoE pre-training, DGX H100",
                         _rows("NVIDIA-NeMo/Megatron-Bridge", rows), mapper)


def load_automodel_moe(rows: Rows | None = None) -> Dataset:
    """NeMo AutoModel (PyTorch-native, FSDP2 = zero=3) MoE pre-training on one DGX H100, iteration time."""

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        notes = ["FSDP2 over the 8 GPUs: zero=3", "PyTorch-native stack simulated with the Megatron-Core kernel "
                 "profile but AutoModel's own expert kernels (stack automodel; stack profiles are issue 11)",
                 "DeepEP dispatcher (the benchmark configs' backend.dispatcher: deepep, examples/llm_benchmark @ "
                 "36044ad3d)"]
        if not row["ep"]:
            row = dict(row, ep=str(row_int(row, "num_gpus")))
            notes.append("ep not stated; DeepEP over all the node's GPUs (ep=8) assumed")
        return with_stack(moe_case("automodel_moe", row_id, row, zero=3, notes=notes, dispatcher="deepep"),
                          AUTOMODEL_STACK)

    return build_dataset("automodel_moe", "NVIDIA NeMo AutoModel MoE pre-training, DGX H100, bf16",
                         _rows("NVIDIA-NeMo/Automodel", rows), mapper)
