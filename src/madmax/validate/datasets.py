"""Measured training (and serving) runs, each mapped to the arguments of `madmax.api.simulate` and the metric
to compare.

A dataset is a list of `Case`s (rows we can simulate) and `Unmapped` rows (with the reason we cannot).
Sources, licenses and the CSV format are in `data/README.md`; every assumption made for a row is
listed in `Case.assumptions`. Each `load_*` takes optional rows, e.g. `load_nemo(read_csv("mine.csv"))`,
to validate a user's own measurements in the same format.

- narayanan2021: Narayanan et al. 2021 (SC21) Tables 1-2, TFLOP/s per GPU counted with their Eq. 3.
- korthikanti2022: Korthikanti et al. 2022, iteration times (Table 5, Sec. 6.3) and MFU.
- nemo: NeMo 24.07 performance summary (tokens/s/GPU) and NeMo 24.03 long-sequence table (TFLOP/s).
- vtrain_single, vtrain_multi: vTrain (MICRO 2024) Megatron-DeepSpeed iteration times on A100s.
- nvidia_dlrm: NVIDIA DeepLearningExamples TensorFlow2 DLRM and DCNv2 training throughput (samples/s).
- mlperf_dlrm: MLPerf Training v3.0-v4.0 DLRM-DCNv2 on 8 H100 (NVIDIA's HugeCTR submissions), samples/s.
- megatron_bridge_moe, automodel_moe: MoE pre-training on DGX H100, mapped in `madmax.validate.moe`.
- trtllm_static, serving_h100: LLM serving rows, mapped in `madmax.validate.serving`.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from madmax.config.base import DType
from madmax.config.loaders import find_in_catalog
from madmax.config.strategy import RECOMPUTE_AUTO
from madmax.errors import MadmaxError
from madmax.validate.conventions import METRICS, published_flops_per_token
from madmax.validate.inputs import (
    NotMappable,
    catalog_gpu,
    gpt3_model,
    llama_model,
    model_family,
    nemotron_model,
    parallelism_group,
    peak_flops_per_s,
    strategy_string,
    system_for,
)

PUBLISHED_CSV = "published_dev.csv"
VTRAIN_SINGLE_CSV = "vtrain/ground_truth_single.csv"
VTRAIN_MULTI_CSV = "vtrain/ground_truth_multi.csv"
MEGATRON_VOCAB = 51200  # GPT-2 BPE (50257) padded by Megatron to a multiple of 128 * tp (tp = 8)


@dataclass(frozen=True)
class Case:
    """One measured row and the `simulate(**kwargs)` call that should reproduce it.

    metric: one of `conventions.METRICS`; measured: the published value in `unit`.
    published_flops_per_token / layer_passes: the source's FLOP convention (TFLOP/s and MFU rows);
    peak_flops_per_s: the dense peak of the row's GPU at its dtype (FLOP/s).
    """

    dataset: str
    row_id: str
    label: str
    kwargs: dict[str, Any] = field(hash=False)
    metric: str
    measured: float
    unit: str
    family: str
    gpu: str
    parallelism: str
    published_flops_per_token: float | None = None
    layer_passes: int = 3
    peak_flops_per_s: float | None = None
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unmapped:
    """A row that cannot be simulated yet, and why."""

    dataset: str
    row_id: str
    label: str
    reason: str


@dataclass(frozen=True)
class Dataset:
    """Cases and unmapped rows. A dataset with a `baseline` re-runs some rows of that dataset under
    another compute profile (e.g. the vTrain-stack profile): the report compares the two on those rows
    and keeps it out of the overall figures and groupings."""

    name: str
    description: str
    cases: tuple[Case, ...]
    unmapped: tuple[Unmapped, ...]
    baseline: str | None = None


def _label(model: str, num_gpus: int, gpu: str, s: Mapping[str, Any], gb: int, seq: int) -> str:
    degrees = " ".join(f"{k}{s[k]}" for k in ("tp", "pp", "vp", "cp", "ep", "dp", "mbs") if s.get(k, 1) != 1)
    extras = [f"zero{s['zero']}" if s.get("zero") else "",
              f"rc={s['recompute']}" if s.get("recompute") else ""]
    gpu_short = gpu.split("-")[0]
    parts = (model, f"{num_gpus}x{gpu_short}", degrees, f"gb{gb}", f"s{seq}", *extras)
    return " ".join(p for p in parts if p)


def _case(dataset: str, row_id: str, model: dict, *, system: str | dict, gpu: str, num_gpus: int,
          task: str | dict,
          gb: int, seq: int, dtype: str, s: dict[str, Any], metric: str, measured: float, unit: str,
          layer_passes: int = 3, peak: float | None = None, assumptions: Iterable[str] = ()) -> Case:
    if metric not in METRICS:
        raise NotMappable(f"metric {metric!r} is not an iteration-level figure; "
                          f"allowed: {', '.join(METRICS)}")
    counts_flops = metric in ("tflops_per_gpu", "mfu")
    flops = published_flops_per_token(model, seq, layer_passes) if counts_flops else None
    kwargs = {"model": model, "system": system, "num_gpus": num_gpus, "task": task, "global_batch": gb,
              "seq_len": seq, "dtype": dtype, "strategy": strategy_string(**s)}
    return Case(dataset=dataset, row_id=row_id, label=_label(model["name"], num_gpus, gpu, s, gb, seq),
                kwargs=kwargs, metric=metric, measured=measured, unit=unit,
                family=model_family(model["name"]),
                gpu=catalog_gpu(gpu)["name"],
                parallelism=parallelism_group(s["tp"], s["pp"], s.get("dp") or num_gpus // (s["tp"] * s["pp"] * s.get(
                    "cp", 1)), s.get("cp", 1), s.get("zero", 0), s.get("ep", 1)),
                published_flops_per_token=flops, layer_passes=layer_passes, peak_flops_per_s=peak,
                assumptions=tuple(assumptions))


# ------------------------------------------------------------------------------------------ CSV input

Rows = Iterable[tuple[str, dict[str, str]]]


def _rows_of(text: str, file_name: str) -> Iterator[tuple[str, dict[str, str]]]:
    reader = csv.DictReader(text.splitlines())
    for line, row in enumerate(reader, start=2):
        yield f"{file_name}:{line}", {(k or "").strip(): (v or "").strip() for k, v in row.items()}


def _shipped(name: str):
    """A file shipped in `madmax/validate/data/` ('vtrain/x.csv')."""
    return resources.files("madmax.validate").joinpath("data", *name.split("/"))


def shipped_sha256(name: str) -> str:
    """sha256 (16 hex digits) of a file shipped in `data/`, as a fit names the data it read."""
    return hashlib.sha256(_shipped(name).read_bytes()).hexdigest()[:16]


def read_rows(name: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(row id 'file:line', row) for each data row of a CSV shipped in `data/`; line 1 is the header."""
    text = _shipped(name).read_text(encoding="utf-8-sig")
    return _rows_of(text, name.rsplit("/", 1)[-1])


def read_csv(path: str | Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Rows of a user's CSV in a shipped file's format (see data/README.md), for the `load_*` functions."""
    path = Path(path)
    return _rows_of(path.read_text(encoding="utf-8-sig"), path.name)


def row_int(row: Mapping[str, str], key: str) -> int | None:
    """The row's integer in column `key`, None when the row leaves it empty."""
    text = row.get(key, "")
    return None if text == "" else int(float(text))


def row_ints(row: Mapping[str, str], *keys: str) -> list[int]:
    """The row's integers in columns `keys`; a row missing any is not mappable."""
    missing = [k for k in keys if row_int(row, k) is None]
    if missing:
        raise NotMappable(f"row does not state {', '.join(missing)} (partial row)")
    return [row_int(row, k) for k in keys]  # type: ignore[misc]


def build_dataset(name: str, description: str, rows: Rows,
                  mapper: Callable[[str, dict[str, str]], Case | Sequence[Case]]) -> Dataset:
    """Map every row: `mapper` returns its case (or several, one per metric) or raises with the reason."""
    cases: list[Case] = []
    unmapped = []
    for row_id, row in rows:
        try:
            mapped = mapper(row_id, row)
        except (NotMappable, MadmaxError) as exc:
            label = row.get("model", "") or row.get("model_path", "") or row_id
            unmapped.append(Unmapped(name, row_id, label, str(exc)))
            continue
        cases.extend([mapped] if isinstance(mapped, Case) else mapped)
    return Dataset(name, description, tuple(cases), tuple(unmapped))


# ------------------------------------------------------------------------------- published CSV rows

_DTYPES = {"fp16 (mixed)": "fp16", "fp16/bf16 (mixed)": "bf16", "fp8": "fp8", "bf16": "bf16", "fp16": "fp16"}
_ZERO = {"none": 0, "": None, "distributed optimizer": 1, "ZeRO-3 (DeepSpeed)": 3}


# The note of a row that does not state its recompute, run with recompute=auto.
RECOMPUTE_CHOSEN = "recompute not stated; the cheapest that fits is chosen (recompute=auto)"


def _published_case(dataset: str, row_id: str, row: dict[str, str], *, defaults: dict[str, Any],
                    layer_passes: int = 3, vocab: int | None = None, notes: Iterable[str] = (),
                    task: str | dict | None = None) -> Case:
    """Map one row of published_dev.csv; `defaults` fill strategy keys the row leaves empty.

    task: what to pass as simulate(task=...) when the row's task column is not enough (LoRA).
    """
    if row["task"] not in ("pretrain", "finetune"):
        raise NotMappable(f"task {row['task']!r} is not training")
    name = row["model"]
    if "moe" in name.lower() or model_family(name) == "mixtral" or (row_int(row, "ep") or 1) > 1:
        from madmax.validate.moe import moe_case  # MoE rows: the catalog model, expert parallelism

        zero = _ZERO.get(row["zero_or_fsdp"].split(" (")[0])
        zero = 3 if "FSDP" in row["zero_or_fsdp"] else defaults["zero"] if zero is None else zero
        return moe_case(dataset, row_id, row, zero=zero, notes=list(notes))
    layers, hidden, heads, ffn, seq = row_ints(row, "layers", "hidden", "heads", "ffn_hidden", "seq_len")
    num_gpus, tp, pp, dp = row_ints(row, "num_gpus", "tp", "pp", "dp")
    gb, per_node = row_ints(row, "global_batch", "gpus_per_node")
    kv = row_int(row, "kv_heads") or heads
    notes = list(notes)
    if row_int(row, "vocab") is None:
        if vocab is None:
            raise NotMappable("row does not state vocab")
        notes.append(f"vocab not stated; {vocab} assumed")
    v = row_int(row, "vocab") or vocab
    family = model_family(name)
    if family == "gpt":
        model = gpt3_model(name, layers, hidden, heads, ffn, v, seq)
    elif family == "llama":
        model = llama_model(name, layers, hidden, heads, kv, ffn, v, seq)
    elif family == "nemotron":
        model = nemotron_model(name, layers, hidden, heads, kv, ffn, v, seq)
    else:
        raise NotMappable(f"architecture of {name!r} is unknown (gpt, llama, nemotron are mapped)")
    model["source"] = f"madmax validation row {row_id}"
    if row["dtype"] not in _DTYPES:
        raise NotMappable(f"dtype {row['dtype']!r} is not mapped")
    dtype = _DTYPES[row["dtype"]]
    s: dict[str, Any] = {"tp": tp, "pp": pp, "dp": dp, "cp": row_int(row, "cp") or 1}
    for key, column in (("vp", "vp"), ("mbs", "micro_batch")):
        s[key] = row_int(row, column)
        if s[key] is None:
            s[key] = defaults[key]
            notes.append(f"{column} not stated; {key}={s[key]} assumed")
    s["zero"] = _ZERO.get(row["zero_or_fsdp"])
    if s["zero"] is None:
        s["zero"] = defaults["zero"]
        notes.append(f"optimizer sharding not stated; zero={s['zero']} assumed")
    s["recompute"] = row["recompute"] or defaults["recompute"]
    if not row["recompute"]:
        notes.append(RECOMPUTE_CHOSEN if s["recompute"] == RECOMPUTE_AUTO
                     else f"recompute not stated; {s['recompute']} assumed")
    s["sp"] = {"yes": True, "no": False}.get(row["sp"])
    s.update({k: defaults[k] for k in ("flash", "dp_overlap") if k in defaults})
    if defaults.get("fp8_params") and dtype == "fp8":
        s["fp8_params"] = True
    intra, inter = (float(row[k]) if row[k] else None for k in ("intra_bw_GBps", "inter_bw_GBps"))
    system = system_for(row["gpu"], per_node, intra, inter)
    peak = peak_flops_per_s(row["gpu"], dtype)
    return _case(dataset, row_id, model, system=system, gpu=row["gpu"], num_gpus=num_gpus,
                 task=task or row["task"],
                 gb=gb, seq=seq, dtype=dtype, s=s, metric=row["metric"], measured=float(row["value"]),
                 unit=row["unit"], layer_passes=layer_passes, peak=peak, assumptions=notes)


def _published(source_prefix: str, rows: Rows | None) -> Iterator[tuple[str, dict[str, str]]]:
    """Training rows of `source_prefix` from `rows` (the shipped published_dev.csv when None)."""
    return ((i, r) for i, r in (read_rows(PUBLISHED_CSV) if rows is None else rows)
            if r["source"].startswith(source_prefix) and r["task"] in ("pretrain", "finetune"))


# Megatron-LM of 2021-22: no flash attention (fused softmax), gradients all-reduced after the
# pipeline flush (no overlap with backward), no distributed optimizer.
_MEGATRON_2021 = {"vp": 1, "mbs": 1, "zero": 0, "recompute": "full", "flash": False, "dp_overlap": False}


def with_stack(case: Case, stack: str) -> Case:
    """The case run under training stack `stack` (`madmax.config.training_stack`), named in its assumptions."""
    return replace(case, kwargs={**case.kwargs, "stack": stack},
                   assumptions=(*case.assumptions, f"software stack: {stack}"))


# The software stack of each dataset's runs (catalog/training_stacks.yaml): Megatron-LM of 2021-22 (apex and
# jit fusions, fp32 vocabulary-parallel loss), DeepSpeed ZeRO-3 for Narayanan's ZeRO-3 comparison rows.
MEGATRON_2021_STACK, DEEPSPEED_STACK = "megatron-lm-2021", "deepspeed"


def load_narayanan2021(rows: Rows | None = None) -> Dataset:
    """SC21 Tables 1-2: TFLOP/s per GPU with Eq. 3, which counts the recomputed forward (4 passes)."""

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        defaults = dict(_MEGATRON_2021)
        notes = ["TFLOP/s by Eq. 3 (recompute forward counted): compared as Eq. 3 FLOPs / predicted time"]
        stack = MEGATRON_2021_STACK
        if "ZeRO-3" in row["zero_or_fsdp"]:
            defaults["dp_overlap"] = True  # DeepSpeed ZeRO-3 overlaps its gradient reductions
            stack = DEEPSPEED_STACK
        if "Table 1" in row["source_detail"]:
            notes.append("Table 1 used the interleaved schedule with an unstated chunk count; vp=1 simulated")
        return with_stack(_published_case("narayanan2021", row_id, row, defaults=defaults, layer_passes=4,
                                          notes=notes), stack)

    return build_dataset("narayanan2021", "Narayanan et al. 2021 (SC21) Tables 1-2, GPT on A100 (Selene)",
                  _published("Narayanan", rows), mapper)


def load_korthikanti2022(rows: Rows | None = None) -> Dataset:
    """Table 5 iteration times and MFU, Sec. 6.3 iteration time with 8-way data parallelism."""

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        if row["metric"] == "layer_fwd_bwd_time_ms":
            raise NotMappable("one layer's forward+backward time; simulate() reports whole iterations")
        notes = ["MFU by Korthikanti Sec. 6 (72 B s l h^2 (1 + s/6h + V/12lh)) over 312 TFLOP/s"] \
            if row["metric"] == "mfu" else []
        return with_stack(_published_case("korthikanti2022", row_id, row, defaults=_MEGATRON_2021, notes=notes),
                          MEGATRON_2021_STACK)

    return build_dataset("korthikanti2022", "Korthikanti et al. 2022, GPT 22B-1T on A100 (Selene)",
                  _published("Korthikanti", rows), mapper)


# NeMo 24.x (Megatron-Core): flash attention, distributed optimizer, gradient reduction overlapped.
# NeMo's fp8 recipes keep the weights in fp8 (fp8_params): nemo/collections/llm/recipes/precision/
# mixed_precision.py bf16_with_fp8_mixed sets fp8_params=True (later spelled fp8_param_gather); NVIDIA's NeMo 1.x
# fp8 benchmark configs set model.fp8_params: true as well.
_NEMO = {"vp": 1, "mbs": 1, "zero": 1, "recompute": RECOMPUTE_AUTO, "flash": True, "dp_overlap": True,
         "fp8_params": True}
# NeMo's megatron_gpt_finetuning_config.yaml: lora_tuning.adapter_dim 32, target_modules [attention_qkv].
NEMO_LORA = {"kind": "finetune", "finetune": "lora", "lora_rank": 32, "lora_targets": ["qkv"]}


def load_nemo(rows: Rows | None = None) -> Dataset:
    """NeMo 24.07 tokens/s/GPU (pre-training, SFT) and NeMo 24.03 long-sequence TFLOP/s, DGX H100, fp8."""

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        notes = ["model TFLOP/s by the Megatron/NeMo formula (dense attention): F_tok * predicted tokens/s"] \
            if row["metric"] == "tflops_per_gpu" else []
        task = None
        if "LoRA" in row["source_detail"]:
            task = dict(NEMO_LORA)
            notes.append("LoRA as NeMo's default: rank 32 on the QKV projection (not stated in the table)")
        return _published_case("nemo", row_id, row, defaults=_NEMO, vocab=MEGATRON_VOCAB, notes=notes,
                               task=task)

    return build_dataset("nemo", "NVIDIA NeMo performance tables, DGX H100, fp8",
                  _published("NVIDIA/NeMo", rows), mapper)


# -------------------------------------------------------------------------------------------- vTrain

VTRAIN_NOTES = (
    "vTrain: GPT-3 style, vocab 51200, fp16, DGX A100 80GB assumed (the files state neither)",
    "vTrain validation configs: full recompute, no gradient bucketing (all-reduce after backward), 1F1B",
)


def _vtrain_case(dataset: str, row_id: str, row: dict[str, str], system: str | dict) -> Case:
    num_gpus, gb, mbs = row_ints(row, "# GPUs", "global batch", "micro batch")
    hidden, heads, layers, seq = row_ints(row, "hidden size", "attention heads", "# layers", "sequence length")
    tp, dp, pp = row_ints(row, "tensor parallelism", "data parallelism", "pipeline parallelism")
    if tp * dp * pp != num_gpus:
        raise NotMappable(f"tp*dp*pp={tp}*{dp}*{pp} differs from {num_gpus} GPUs")
    name = f"gpt-{layers}l-{hidden}h"
    model = gpt3_model(name, layers, hidden, heads, 4 * hidden, MEGATRON_VOCAB, seq)
    model["source"] = f"madmax validation row {row_id}"
    s = {"tp": tp, "pp": pp, "dp": dp, "mbs": mbs, "zero": 0, "recompute": "full", "sp": False,
         "flash": False, "dp_overlap": False}
    return _case(dataset, row_id, model, system=system, gpu="a100-80gb", num_gpus=num_gpus, task="pretrain",
                 gb=gb, seq=seq, dtype="fp16", s=s, metric="iteration_time_s",
                 measured=float(row["iteration time (ms)"]) / 1e3, unit="s", assumptions=VTRAIN_NOTES)


def load_vtrain_single(rows: Rows | None = None) -> Dataset:
    """1,440 runs on one DGX A100 node (2-8 GPUs)."""
    return build_dataset("vtrain_single", "vTrain single-node Megatron-DeepSpeed runs, 2-8 A100",
                  read_rows(VTRAIN_SINGLE_CSV) if rows is None else rows,
                  lambda i, r: _vtrain_case("vtrain_single", i, r, system_for("a100-80gb", 8)))


# vTrain's validation configs give 800 Gb/s of inter-node bandwidth per 8-GPU node: 12.5 GB/s per GPU.
VTRAIN_SCALE_OUT_GBPS = 800 / 8 / 8


def load_vtrain_multi(rows: Rows | None = None) -> Dataset:
    """109 runs on 64-512 A100s; scale-out 800 Gb/s per node as in vTrain's validation configs."""
    return build_dataset("vtrain_multi", "vTrain multi-node Megatron-DeepSpeed runs, 64-512 A100",
                  read_rows(VTRAIN_MULTI_CSV) if rows is None else rows,
                  lambda i, r: _vtrain_case("vtrain_multi", i, r,
                                            system_for("a100-80gb", 8, None, VTRAIN_SCALE_OUT_GBPS)))


# ------------------------------------------------------------------------- NVIDIA DLRM / DCNv2 (TF2)

# Rows of Criteo 1TB embedding tables after frequency thresholding T15, T3, T0 (26 one-hot features):
# NVIDIA/DeepLearningExamples TensorFlow2/Recommendation/DLRM_and_DCNv2/dataloading/generate_feature_spec.py
# (commit d53419f2) variants criteo_t15/t3/t0_synthetic. Times 128 columns they hold 4.187 B, 22.777 B and
# 112.995 B elements (15.6, 84.9 and 420.9 GiB in fp32; the T0 maximum, 139.6 GiB, is README.md's "largest
# table weighs 140 GiB"): the 4.2B, 22.8B and 113B models of doc/DLRM.md and doc/DCNv2.md.
CRITEO_TABLE_ROWS = {
    15: (7912889, 33823, 17139, 7339, 20046, 4, 7105, 1382, 63, 5554114, 582469, 245828, 11, 2209, 10667, 104,
         4, 968, 15, 8165896, 2675940, 7156453, 302516, 12022, 97, 35),
    3: (45833188, 36747, 1572176, 345139, 11, 2209, 11268, 128, 4, 975, 15, 48937457, 17246, 11316796,
        40094537, 452104, 12607, 105, 36, 7414, 20244, 4, 7115, 1442, 63, 29275261),
    0: (227605432, 39061, 3067956, 405283, 11, 2209, 11939, 155, 4, 977, 15, 292775614, 17296, 40790948,
        187188510, 590152, 12974, 109, 37, 7425, 20266, 4, 7123, 1544, 64, 130229467),
}
# dlrm.py / dcnv2.py flags of the same repository: embedding_dim 128, bottom 512-256-128, top
# 1024-1024-512-256-1; DCNv2 num_cross_layers 3, cross_layer_projection_dim 512 (low rank, nn/dcn.py Cross:
# U N x 512 without bias, V 512 x N with bias); 13 numerical features.
NVIDIA_DLRM_SHAPE = {"num_dense_features": 13, "bottom_mlp": [512, 256, 128], "top_mlp": [1024, 1024, 512, 256, 1]}
NVIDIA_DLRM_DIM = 128
NVIDIA_DCN = {"interaction": "dcnv2", "num_cross_layers": 3, "low_rank": 512}
# Merlin Distributed Embeddings cuts tables above main.py's column_slice_threshold (1e10 elements at commit
# 2693c632; 5e9 in a later main.py and in the older DLRM README's V100 commands, which would also cut three
# T3 tables in two) into column slices. The four T0 tables above 1e10 must be cut: the largest, 139.6 GiB,
# exceeds an 80 GB GPU.
MDE_COLUMN_SLICE_ELEMENTS = 10**10


def _v100_dgx(name: str, gpus: int, scale_up_GBps: float, sources: dict[str, str]) -> dict:
    """A DGX of V100 32GB (not in the catalog): NVLink 2 at `scale_up_GBps` per GPU per direction, 50 Gb/s
    of EDR InfiniBand per GPU (4 x 100 Gb/s per DGX-1, 8 x 100 Gb/s per DGX-2), PCIe Gen3 x16 to the host,
    and the catalog's NCCL latencies (NVIDIA/nccl src/graph/tuning.cc hwLat: NVLink 1.9, NET 4.0, PCI 2.5 us)."""
    return {"name": name, "gpu": "v100-32gb", "gpus_per_node": gpus,
            "scale_up": {"kind": "nvlink", "bytes_per_s": f"{scale_up_GBps:g} GB/s", "latency_s": "1.9 us",
                         "domain_size": gpus},
            "scale_out": {"kind": "infiniband", "bytes_per_s": "50 Gbit/s", "latency_s": "4.0 us"},
            "host_link": {"kind": "pcie", "bytes_per_s": "16 GB/s", "latency_s": "2.5 us"},
            "sources": {"gpu": "V100 SXM2/SXM3 32GB: same 125 TFLOPS fp16 / 15.7 fp32 and 900 GB/s "
                               "(DGX-2 datasheet: 2 PFLOPS over 16 GPUs)",
                        "scale_out.bytes_per_s": "NVIDIA DGX-1 / DGX-2 datasheets (4 / 8 x 100 Gb/s EDR IB)",
                        "host_link.bytes_per_s": "NVIDIA Tesla V100 datasheet (PCIe Gen3 32 GB/s, both "
                                                 "directions) / 2", **sources}}


# DGX-1 (V100): 6 NVLink 2 links of 25 GB/s per direction per GPU in a hybrid cube-mesh; each GPU reaches 4
# peers directly (two over 2 links, two over 1; nvidia-smi topo NV2/NV1) and 3 only over PCIe and the CPU
# link (SYS). madmax has one scale-up bandwidth for every collective: 150 GB/s, as though every pair were
# linked, is an upper bound for the all-to-all of the tables (assumed; the DGX-1 rows are optimistic).
V100_NVLINK_GBPS = 150.0
DGX1_V100 = _v100_dgx("dgx-1-v100-32gb", 8, V100_NVLINK_GBPS, {
    "scale_up.bytes_per_s": "NVIDIA DGX-1 with Tesla V100 System Architecture whitepaper: 6 NVLink links x "
                            "25 GB/s per direction per GPU, hybrid cube-mesh (not all-to-all)"})
# DGX-2: 16 V100 SXM3, each with 6 NVLink 2 links, one to each NVSwitch of its baseboard (6 of 12),
# non-blocking: 150 GB/s per GPU per direction to any peer.
DGX2_V100 = _v100_dgx("dgx-2-v100-32gb", 16, V100_NVLINK_GBPS, {
    "scale_up.bytes_per_s": "NVIDIA DGX-2 datasheet and NVSwitch whitepaper: 6 NVLink links x 25 GB/s per "
                            "direction per GPU, one to each of its baseboard's 6 NVSwitches (12 in all), "
                            "2.4 TB/s bisection"})
NVIDIA_DLRM_NOTES = (
    "tables: 26 one-hot Criteo features (pooling 1), dim 128, fp32 (TF2 DLRM_and_DCNv2 defaults)",
    "strategy: Merlin Distributed Embeddings memory_balanced: tables model-parallel, sorted by size and dealt to "
    "the GPUs in snake order (emb_balance=count), MLPs data-parallel with Horovod (zero=0); one micro-batch of "
    "global batch / GPUs per GPU",
    "kernels: madmax's GEMM and element-wise costs (H200 eager-PyTorch profile) stand in for TF2, with the tf2 "
    "stack's host times fitted to half of these rows: 118.4 us per kernel in training (XLA), 1.565 ms per step "
    "call in inference (graph executor, no XLA); the tf2 stack folds the ReLUs into the GEMM epilogues and runs "
    "the embedding update unfused (IndexedSlices)",
    "optimizer: TF2 DLRM uses SGD (no state), DCNv2 LazyAdam (8 B per element); madmax's embedding update "
    "assumes row-wise Adagrad (4 B per row)",
)
# The examples' training stack: TF2 with XLA, Horovod and Merlin Distributed Embeddings (training_stacks.yaml).
NVIDIA_DLRM_STACK = "tf2"


def _criteo_rows(row: Mapping[str, str]) -> tuple[tuple[int, ...], str]:
    """Table rows of a row's model: the T15/T3/T0 counts named by '(Criteo Tn)', else the MLPerf Criteo
    Terabyte profile (catalog dlrm-mlperf-v1) scaled so rows * 128 equals the row's parameter count."""
    threshold = re.search(r"\bT(\d+)\b", row["model"])
    if threshold and int(threshold.group(1)) in CRITEO_TABLE_ROWS:
        return (CRITEO_TABLE_ROWS[int(threshold.group(1))],
                f"table rows: Criteo T{threshold.group(1)} synthetic feature spec (generate_feature_spec.py)")
    if not row.get("params_b"):
        raise NotMappable("row names no Criteo frequency threshold (T15, T3, T0) and no params_b")
    profile = [t["rows"] for t in find_in_catalog("models", "dlrm-mlperf-v1")["tables"]]
    scale = float(row["params_b"]) * 1e9 / NVIDIA_DLRM_DIM / sum(profile)
    return (tuple(max(1, round(r * scale)) for r in profile),
            f"table rows: MLPerf Criteo Terabyte profile scaled by {scale:.4g} to {row['params_b']} B elements "
            "(lookups per sample do not depend on rows; memory and table-wise balance do)")


def nvidia_dlrm_model(name: str, table_rows: Iterable[int], *, dcn: bool, embedding_dtype: str = "fp32") -> dict:
    """The TF2 DLRM (dot interaction) or DCNv2 (3 low-rank cross layers) over one-hot tables of dim 128."""
    model = {"family": "dlrm", "name": name, **NVIDIA_DLRM_SHAPE,
             "tables": [{"rows": r, "dim": NVIDIA_DLRM_DIM, "pooling": 1} for r in table_rows],
             "interaction": "dot", "embedding_dtype": embedding_dtype}
    return {**model, **NVIDIA_DCN} if dcn else model


def _nvidia_dlrm_dtype(text: str) -> str:
    """Compute dtype of the MLPs: tf32 and fp32 as written; amp: fp16 MLPs (tables stay fp32)."""
    if text in ("tf32", "fp32"):
        return text
    if text.startswith("amp"):
        return "fp16"
    raise NotMappable(f"dtype {text!r} is not mapped; allowed: tf32, fp32, amp")


def _nvidia_dlrm_system(row: Mapping[str, str], per_node: int) -> str | dict:
    gpu = catalog_gpu(row["gpu"])["name"]
    if gpu == "v100-32gb":
        by_node = {8: DGX1_V100, 16: DGX2_V100}
        if per_node not in by_node:
            raise NotMappable(f"no V100 DGX of {per_node} GPUs (8: DGX-1, 16: DGX-2)")
        if row.get("intra_bw_GBps") and float(row["intra_bw_GBps"]) != V100_NVLINK_GBPS:
            raise NotMappable(f"intra_bw_GBps={row['intra_bw_GBps']} differs from V100 NVLink's "
                              f"{V100_NVLINK_GBPS:g} GB/s per GPU per direction")
        return by_node[per_node]
    intra = float(row["intra_bw_GBps"]) if row.get("intra_bw_GBps") else None
    return system_for(row["gpu"], per_node, intra)


def _nvidia_dlrm_case(row_id: str, row: dict[str, str]) -> Case:
    if row["task"] not in ("pretrain", "inference"):
        raise NotMappable(f"task {row['task']!r} is neither pretrain nor inference")
    inference = row["task"] == "inference"
    kind = row["model"].split()[0].lower()
    if kind not in ("dlrm", "dcnv2"):
        raise NotMappable(f"model {row['model']!r} is neither DLRM nor DCNv2")
    num_gpus, per_node, gb = row_ints(row, "num_gpus", "gpus_per_node", "global_batch")
    mbs = row_int(row, "micro_batch") or gb // num_gpus
    if mbs * num_gpus != gb:
        raise NotMappable(f"global_batch={gb} is not {num_gpus} GPUs x micro_batch={mbs} (no accumulation)")
    rows, rows_note = _criteo_rows(row)
    dtype = _nvidia_dlrm_dtype(row["dtype"])
    size = f"{row['params_b']}b" if row.get("params_b") else "custom"
    name = f"dlrm-{size}" if kind == "dlrm" else f"dlrm-dcnv2-{size}"
    model = nvidia_dlrm_model(name, rows, dcn=kind == "dcnv2")
    model["source"] = f"madmax validation row {row_id}"
    notes = [rows_note, *NVIDIA_DLRM_NOTES]
    emb = "tw"
    if num_gpus > 1 and any(r * NVIDIA_DLRM_DIM > MDE_COLUMN_SLICE_ELEMENTS for r in rows):
        emb = "cw"  # one sharding for all tables: TW cannot hold the 139.6 GiB T0 table on one GPU
        notes.append("tables above 1e10 elements are column-sliced by Merlin DE; madmax applies one sharding "
                     "to all tables, so emb=cw (every table in 2 column slices) is simulated")
    if dtype == "fp16":
        notes.append("amp: fp16 MLPs over fp32 tables; the pooled vectors are exchanged in fp32 (the table "
                     "dtype: main.py runs the embeddings outside fp16, stack tf2)")
    system = _nvidia_dlrm_system(row, per_node)
    if isinstance(system, dict):
        notes.append(f"{system['name']}: NVLink {system['scale_up']['bytes_per_s']} per GPU per direction"
                     + (" (hybrid cube-mesh: an upper bound for the all-to-all)" if per_node == 8 else ""))
    s = {"tp": 1, "pp": 1, "dp": num_gpus, "mbs": mbs, "zero": 0, "emb": emb, "emb_balance": "count"}
    case = _case("nvidia_dlrm", row_id, model, system=system, gpu=row["gpu"], num_gpus=num_gpus,
                 task=row["task"], gb=gb, seq=1, dtype=dtype, s=s, metric=row["metric"],
                 measured=float(row["value"]), unit=row["unit"], assumptions=notes)
    if inference:  # a request batch, one forward pass: simulate takes it as `batch`
        kwargs = {k: v for k, v in case.kwargs.items() if k != "global_batch"}
        case = replace(case, kwargs={**kwargs, "batch": gb})
    where = "DGX-1" if "DGX-1" in row["gpu"] else "DGX-2" if "DGX-2" in row["gpu"] else ""
    label = " ".join(p for p in (case.label, row["dtype"].split()[0], f"emb={emb}", where) if p)
    return with_stack(replace(case, label=label), NVIDIA_DLRM_STACK)


def load_nvidia_dlrm(rows: Rows | None = None) -> Dataset:
    """NVIDIA DeepLearningExamples TF2 DLRM and DCNv2 (doc/DLRM.md, doc/DCNv2.md): samples/s of training
    on DGX A100, DGX-1 and DGX-2 (V100), and the latency of one-GPU inference batches."""
    source = "NVIDIA/DeepLearningExamples TensorFlow2/Recommendation/DLRM_and_DCNv2"
    chosen = ((i, r) for i, r in (read_rows(PUBLISHED_CSV) if rows is None else rows)
              if r["source"].startswith(source))
    return build_dataset("nvidia_dlrm", "NVIDIA DeepLearningExamples TF2 DLRM/DCNv2, samples/s on A100 and V100",
                  chosen, _nvidia_dlrm_case)


# ------------------------------------------------------------------------- MLPerf DLRM-DCNv2 (HugeCTR)

MLPERF_DLRM_SOURCE = "MLCommons MLPerf Training results"
MLPERF_DLRM_MODEL = "dlrm-dcnv2"  # the catalog's MLPerf DLRM v2 (26 multi-hot tables, DCNv2 3 x rank 512)
MLPERF_DLRM_STACK = "hugectr"
# What each submission's launch configuration sets for HugeCTR's embedding planner (sharding/generate_plan.py):
# on one node SHARDING_PLAN=auto (GPUs as the planner's buckets, CommunicationStrategy::Uniform: one all-to-all);
# on more (train.py: Hierarchical when num_nodes > 1) hier_auto (nodes as buckets, each node's tables row-wise
# over its 8 GPUs, reduced in the node, exchanged between nodes on each rail): madmax's emb_cold=twrw.
# DP_SHARDING_THRESHOLD (GB of table + Adagrad accumulator, 8 B per element: ev_size x byte_per_elem x 1e-9 per
# row) replicates the smaller tables; absent (v3.0) it is 0: none. MEM_COMM_BW_RATIO over train.py's
# mem_comm_work_ratio (8/2) is the planner's cost of one table shard, in lookups per sample.
# Sources: mlcommons/training_results_v3.0, v3.1 NVIDIA/benchmarks/dlrm_dcnv2/implementations/hugectr and
# v4.0 .../merlin_hugectr: config_DGXH100_1x8x6912.sh, config_DGXH100_8x8x2112.sh, config_DGXH100_16x8x1056.sh
# (one node: MEM_COMM_BW_RATIO=7, DP_SHARDING_THRESHOLD=0.008 from v3.1; more: 67 and 0.0125), train.py.
MLPERF_DLRM_PLANNER = {  # version -> (one node, more nodes): (DP_SHARDING_THRESHOLD GB, MEM_COMM_BW_RATIO)
    "v3.0": ((0.0, 7.0), (0.0, 67.0)),
    "v3.1": ((0.008, 7.0), (0.0125, 67.0)),
    "v4.0": ((0.008, 7.0), (0.0125, 67.0)),
}
MLPERF_DLRM_WORK_RATIO = 4.0  # train.py --mem_comm_work_ratio default 8 / 2
MLPERF_DLRM_ADAGRAD_BYTES = 8  # generate_plan.py byte_per_elem for adagrad: the fp32 element and its accumulator
MLPERF_DLRM_NOTES = (
    "strategy: HugeCTR's embedding planner as emb=hybrid,emb_balance=lookup with the submission's "
    "DP_SHARDING_THRESHOLD (emb_dp_bytes: the replicated tables' elements) and MEM_COMM_BW_RATIO / 4 "
    "(emb_shard_cost); across nodes hier_auto as emb_cold=twrw; dense MLPs data-parallel with a plain "
    "all-reduce (zero=0); one micro-batch",
    "dtype: HugeCTR mixed precision (fp16 MLPs, pooled vectors and gradients; fp32 tables and per-element Adagrad "
    "state)",
    "kernels: madmax's GEMM and element-wise costs (H200 eager-PyTorch profile) stand in for HugeCTR's cuBLASLt "
    "layers; its embedding backward as one fused kernel where HugeCTR runs a local reduce and an update",
)


def mlperf_dlrm_planner(version: str, num_nodes: int) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The strategy keys of HugeCTR's planner for a submission (MLPERF_DLRM_PLANNER) and what they assume: a
    version without its configuration takes the latest one's."""
    notes: tuple[str, ...] = ()
    if version not in MLPERF_DLRM_PLANNER:
        latest = max(MLPERF_DLRM_PLANNER)
        notes = (f"planner: no configuration of {version or 'this submission'} read; {latest}'s taken",)
        version = latest
    threshold_gb, ratio = MLPERF_DLRM_PLANNER[version][num_nodes > 1]
    table_bytes = DType.FP32.num_bytes  # the tables' elements, without the accumulator
    keys: dict[str, Any] = {"emb_dp_bytes": f"{threshold_gb * 1e9 * table_bytes / MLPERF_DLRM_ADAGRAD_BYTES:g}",
                            "emb_shard_cost": f"{ratio / MLPERF_DLRM_WORK_RATIO:g}"}
    if num_nodes > 1:
        keys["emb_cold"] = "twrw"
    return keys, notes


def _mlperf_dlrm_case(row_id: str, row: dict[str, str]) -> Case:
    if row["task"] != "pretrain" or not row["model"].startswith("DLRM-DCNv2"):
        raise NotMappable(f"row {row['model']!r} ({row['task']}) is not MLPerf DLRM-DCNv2 training")
    num_gpus, per_node, gb = row_ints(row, "num_gpus", "gpus_per_node", "global_batch")
    if gb % num_gpus:
        raise NotMappable(f"global_batch={gb} is not a multiple of {num_gpus} GPUs")
    model = {**find_in_catalog("models", MLPERF_DLRM_MODEL), "source": f"madmax validation row {row_id}"}
    intra = float(row["intra_bw_GBps"]) if row.get("intra_bw_GBps") else None
    inter = float(row["inter_bw_GBps"]) if row.get("inter_bw_GBps") else None
    version = row["source_detail"].split()[0] if row.get("source_detail") else ""
    planner, notes = mlperf_dlrm_planner(version, -(-num_gpus // per_node))
    s = {"tp": 1, "pp": 1, "dp": num_gpus, "mbs": gb // num_gpus, "zero": 0, "emb": "hybrid",
         "emb_balance": "lookup", **planner}
    case = _case("mlperf_dlrm", row_id, model, system=system_for(row["gpu"], per_node, intra, inter),
                 gpu=row["gpu"], num_gpus=num_gpus, task="pretrain", gb=gb, seq=1, dtype="fp16", s=s,
                 metric=row["metric"], measured=float(row["value"]), unit=row["unit"],
                 assumptions=(*MLPERF_DLRM_NOTES, *notes))
    cold = "emb=hybrid" + (",emb_cold=twrw" if "emb_cold" in planner else "")
    return with_stack(replace(case, label=" ".join(p for p in (case.label, version, cold) if p)), MLPERF_DLRM_STACK)


def load_mlperf_dlrm(rows: Rows | None = None) -> Dataset:
    """MLPerf Training DLRM-DCNv2 (v3.0-v4.0), NVIDIA's HugeCTR submissions on 8 H100: samples/s."""
    chosen = ((i, r) for i, r in (read_rows(PUBLISHED_CSV) if rows is None else rows)
              if r["source"].startswith(MLPERF_DLRM_SOURCE) and "dlrm" in r["model"].lower())
    return build_dataset("mlperf_dlrm", "MLPerf Training DLRM-DCNv2 (HugeCTR), samples/s on 8 H100",
                         chosen, _mlperf_dlrm_case)


def load_megatron_bridge_moe(rows: Rows | None = None) -> Dataset:
    """Megatron-Bridge MoE pre-training on DGX H100, tokens/s/GPU (`validate.moe`)."""
    from madmax.validate.moe import load_megatron_bridge_moe as load

    return load(rows)


def load_automodel_moe(rows: Rows | None = None) -> Dataset:
    """NeMo AutoModel MoE pre-training on one DGX H100, iteration time (`validate.moe`)."""
    from madmax.validate.moe import load_automodel_moe as load

    return load(rows)


def load_trtllm_static(rows: Rows | None = None) -> Dataset:
    """TensorRT-LLM v0.9 static-batching throughput and first-token latency (`validate.serving`)."""
    from madmax.validate.serving import load_trtllm_static as load

    return load(rows)


def load_serving_h100(rows: Rows | None = None) -> Dataset:
    """Mean TTFT and TPOT of TensorRT-LLM, vLLM and SGLang deployments on H100 (`validate.serving`)."""
    from madmax.validate.serving import load_serving_h100 as load

    return load(rows)


MLPERF_AMD_CSV = "mlperf_amd/training_v5.0.csv"


def _mlperf_amd_case(row_id: str, row: dict[str, str]) -> Case:
    """One MLPerf Training v5.0 LoRA result on AMD GPUs (data/mlperf_amd/SOURCE.md): the catalog's Llama-2-70B
    with the benchmark's 8,192-token context, LoRA on the attention projections, the submission's layout."""
    from madmax.config.loaders import load_model

    seq, gb, rank, n = row_ints(row, "seq_len", "global_batch", "lora_rank", "num_gpus")
    model = load_model(row["model"]).model_dump(mode="json") | {"max_seq_len": seq, "source": f"madmax validation "
                                                                 f"row {row_id} (the catalog's, 8K context)"}
    s: dict[str, Any] = {k: row_int(row, k) for k in ("tp", "pp", "cp", "dp")} | {"mbs": 1, "zero": 1}
    s["recompute"] = row["recompute"]
    if row["recompute_layers"]:
        s["recompute_layers"] = row_int(row, "recompute_layers")
    s["fp8_params"] = row["fp8_params"] == "1"
    task = {"kind": "finetune", "finetune": "lora", "lora_rank": rank, "lora_targets": row["lora_targets"].split(";")}
    notes = [f"{row['submitter']}: {row['notes']}",
             "fp8 activation storage (FP8_ACTIVATION) and LORA_A2A are not modelled"]
    return _case("mlperf_amd", row_id, model, system=row["system"], gpu=row["gpu"], num_gpus=n, task=task, gb=gb,
                 seq=seq, dtype=row["dtype"], s=s, metric=row["metric"], measured=float(row["value"]),
                 unit=row["unit"], assumptions=notes)


def load_mlperf_amd(rows: Rows | None = None) -> Dataset:
    """MLPerf Training v5.0 llama2_70b_lora on AMD MI300X and MI325X (AMD, Dell, MangoBoost; 8-32 GPUs)."""
    return build_dataset("mlperf_amd", "MLPerf Training v5.0 Llama-2-70B LoRA on AMD Instinct MI300X/MI325X",
                         rows if rows is not None else read_rows(MLPERF_AMD_CSV), _mlperf_amd_case)


def load_vit_reference(rows: Rows | None = None) -> Dataset:
    """ViT training TFLOP/s per GPU on A100 clusters, beside the MAD-Max reference's predictions (`validate.vit`)."""
    from madmax.validate.vit import load_vit_reference as load

    return load(rows)


LOADERS: dict[str, Callable[[], Dataset]] = {
    "narayanan2021": load_narayanan2021,
    "korthikanti2022": load_korthikanti2022,
    "nemo": load_nemo,
    "vtrain_single": load_vtrain_single,
    "vtrain_multi": load_vtrain_multi,
    "nvidia_dlrm": load_nvidia_dlrm,
    "mlperf_dlrm": load_mlperf_dlrm,
    "megatron_bridge_moe": load_megatron_bridge_moe,
    "automodel_moe": load_automodel_moe,
    "trtllm_static": load_trtllm_static,
    "serving_h100": load_serving_h100,
    "vit_reference": load_vit_reference,
    "mlperf_amd": load_mlperf_amd,
}


def load_datasets(names: Iterable[str] | None = None) -> list[Dataset]:
    """The named datasets (all when None), in the order of `LOADERS` or of `names`."""
    chosen = list(LOADERS) if names is None else list(names)
    unknown = [n for n in chosen if n not in LOADERS]
    if unknown:
        raise ValueError(f"dataset {unknown[0]!r} is unknown; allowed: {', '.join(LOADERS)}")
    return [LOADERS[n]() for n in chosen]
