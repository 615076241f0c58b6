"""ViT training on A100 clusters, measured beside the MAD-Max reference's predictions (dataset `vit_reference`).

Source: the reference's artifact sheet `[B] ViT Validation.xlsx` (samhsia/MADMax@e229e4c), copied in
`data/reference/`. Each row states a model, a GPU count, a global and a local batch, the measured TFLOP/s
per GPU and the reference's prediction of it. TFLOP/s are the sheet's: 3 x its forward FLOPs per sample
(`vit_model_flops_per_sample.csv`) x samples/s / GPUs, so a prediction is turned into the same unit with the
same FLOPs (`Case.published_flops_per_token` = 3 x forward FLOPs per sample / tokens per sample); the error
of a row is then the error of the predicted iteration time. The sheet's MFU and samples/s rows restate the
TFLOP/s rows (the same measurement divided by the peak, or multiplied back by the FLOPs) and are not
compared again.

Models: the reference's `model_cfgs/vit/*.json` (`vit_model_configs.csv`): layers, heads, width, MLP width,
224-pixel images, patch 16 (L, H) or 14 (10B and up), a 1000-class head. Its ViT-H has 4 layers, a known
error of the reference's configs; the sheet's 0.254 forward TFLOPs per sample are those of 32 layers
(ViT-Huge, Dosovitskiy et al. 2021), which are simulated.

What the sheet does not state, and what is assumed for every row alike:
- the cluster: 'A100 GPU cluster' with a BF16 peak of 312 TFLOP/s, network not named. The reference's own
  A100 datacenter, `dc-a` (8 x A100 40 GB per node, NVLink, 200 Gbit/s RoCE per GPU), is simulated;
- the strategy: FSDP over all GPUs (zero=3, one micro-batch of the local batch per GPU), as the reference's
  `task_cfgs/vit/vit_train.json` (transformer_parallel fsdp);
- recompute: the cheapest that fits in memory (recompute=auto);
- bf16 compute (the sheet divides by the BF16 peak).

The cluster fit (`fit_cluster`, option of `benchmarks/validate_vit.py --fit`): the rows themselves say the
network was far slower than dc-a's. Under FSDP each node sends and receives about the model's bf16 bytes
three times per iteration whatever the GPU count (two all-gathers, one reduce-scatter), while the compute
per GPU falls with the GPU count; so a network-bound row takes a time that grows with the parameters and
hardly with the local batch. ViT-25B on 128 GPUs does: 37.5 s at 16 images per GPU, 42.1 s at 32 (the 2.0 s
of peak compute added cost 4.6 s, 44% of peak, as the 32-GPU row's 42% MFU), leaving ~33 s of
communication for ~150 GB per node, ~40 Gbit/s per node. Two unknowns are fitted, nothing per row:

    (B*, k*) = argmin_{B, k}  sum_i ln(y_i(B, k) / m_i)^2   over the fitted rows

B the scale-out bandwidth per GPU of the cluster (dc-a's node with B in place of its 200 Gbit/s RoCE), k the
software stack's compute efficiency relative to the shipped profile (its GEMM and attention peak fractions
times k, at most 1: a 2022-23 eager PyTorch FSDP ViT step, no flash attention, data loading and fp32
element-wise work included). The search: a grid of B log-spaced over `BANDWIDTH_GRID_GBIT` by k over
`COMPUTE_GRID`, then a finer grid between the neighbours of the best point. Split by model
(`split_by_model`): models sorted by (width, layers), even positions fitted, odd ones held out, so no row of
a held-out model enters the fit. The fitted values and their errors are in `FIT_YAML`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

import numpy as np

from madmax.validate.datasets import Case, Dataset, Rows, build_dataset, read_rows, row_ints, shipped_sha256
from madmax.validate.inputs import NotMappable, peak_flops_per_s, strategy_string

FIT_YAML = "reference/vit_cluster_fit.yaml"
BANDWIDTH_GRID_GBIT = (1.0, 400.0, 27)  # first, last and number of log-spaced grid points of B, Gbit/s per GPU
COMPUTE_GRID = (0.1, 1.0, 19)  # first, last and number of grid points of k
REFINE_POINTS = 9  # points per axis of the finer grid between the best point's neighbours
MEASURED_CSV = "reference/vit_validation_measured_vs_predicted.csv"
FLOPS_CSV = "reference/vit_model_flops_per_sample.csv"
CONFIGS_CSV = "reference/vit_model_configs.csv"
SOURCE = "MAD-Max reference artifact sheet '[B] ViT Validation.xlsx' (samhsia/MADMax@e229e4c)"
SYSTEM = "dc-a"
GPU = "a100-40gb"
DTYPE = "bf16"
STRATEGY = {"tp": 1, "pp": 1, "zero": 3}
TFLOPS_METRIC = "TFLOPS per GPU (training, 3x fwd FLOPs)"
IMAGENET_CLASSES = 1000
# The reference's ViT-H config has 4 layers; its sheet's FLOPs are those of ViT-Huge's 32 (see the docstring).
LAYER_FIXES = {"ViT_H": (32, "the reference's model_cfgs/vit/vit_h.json gives 4 layers, a known error; its sheet's "
                             "0.254 forward TFLOPs per sample are ViT-Huge's 32 layers, simulated here")}
ASSUMPTIONS = (
    f"cluster not named in the sheet: the reference's A100 datacenter {SYSTEM} (200 Gbit/s RoCE per GPU) is simulated",
    "strategy not stated: FSDP over all GPUs (zero=3), as the reference's task_cfgs/vit/vit_train.json; "
    "the local batch as one micro-batch",
    "recompute not stated; the cheapest that fits is chosen (recompute=auto)",
    "TFLOP/s per GPU counted as the sheet does: 3 x its forward FLOPs per sample",
)


def _sheet_name(model: str) -> str:
    """'ViT-10B' (the sheet) -> 'ViT_10B' (the reference's config names)."""
    return model.replace("-", "_")


def reference_model(name: str, row: Mapping[str, str]) -> dict[str, Any]:
    """Our vit model of a `vit_model_configs.csv` row (the reference's model config)."""
    layers, heads, width, mlp, image, patch = row_ints(row, "num_transformer_layers", "num_transformer_heads",
                                                       "attention_dim", "transformer_fc_dim", "image_size",
                                                       "patch_dim")
    layers = LAYER_FIXES.get(row["name"], (layers, ""))[0]
    return {"family": "vit", "name": name.lower(), "image_size": image, "patch_size": patch, "num_layers": layers,
            "hidden_size": width, "num_heads": heads, "ffn_hidden_size": mlp, "num_classes": IMAGENET_CLASSES,
            "source": f"MAD-Max reference {row['file']} (samhsia/MADMax@e229e4c)"}


def _tables() -> tuple[dict[str, dict[str, str]], dict[str, float]]:
    configs = {row["name"]: row for _, row in read_rows(CONFIGS_CSV)}
    flops = {row["model"]: float(row["fwd_tflops_per_sample_sheet"]) * 1e12 for _, row in read_rows(FLOPS_CSV)}
    return configs, flops


def vit_case(row_id: str, row: dict[str, str], configs: Mapping[str, Mapping[str, str]],
             fwd_flops: Mapping[str, float]) -> Case:
    """The case of one TFLOP/s row: the reference model simulated on `SYSTEM` under FSDP."""
    if row["metric"] != TFLOPS_METRIC:
        raise NotMappable(f"metric {row['metric']!r} restates the row's TFLOP/s measurement")
    sheet = row["model"]
    if _sheet_name(sheet) not in configs or sheet not in fwd_flops:
        raise NotMappable(f"model {sheet!r} has no reference config or forward FLOPs in the sheet")
    num_gpus, gb, local = row_ints(row, "gpus", "global_batch", "local_batch")
    if local * num_gpus != gb:
        raise NotMappable(f"global_batch={gb} is not {num_gpus} GPUs x local_batch={local}")
    config = configs[_sheet_name(sheet)]
    model = reference_model(sheet, config)
    seq = (model["image_size"] // model["patch_size"]) ** 2 + 1
    notes = [*ASSUMPTIONS]
    if config["name"] in LAYER_FIXES:
        notes.append(LAYER_FIXES[config["name"]][1])
    s = {**STRATEGY, "dp": num_gpus, "mbs": local}
    kwargs = {"model": model, "system": SYSTEM, "num_gpus": num_gpus, "task": "pretrain", "global_batch": gb,
              "seq_len": seq, "dtype": DTYPE, "strategy": strategy_string(**s)}
    return Case(dataset="vit_reference", row_id=row_id, label=f"{sheet} {num_gpus}xa100 fsdp gb{gb} lb{local}",
                kwargs=kwargs, metric="tflops_per_gpu", measured=float(row["measured"]), unit="TFLOP/s",
                family="vit", gpu=GPU, parallelism="fsdp",
                published_flops_per_token=3 * fwd_flops[sheet] / seq, layer_passes=3,
                peak_flops_per_s=peak_flops_per_s(GPU, DTYPE), assumptions=tuple(notes))


def reference_prediction(row_id: str, rows: Rows | None = None) -> float:
    """The reference model's predicted TFLOP/s per GPU of row `row_id` (its 'predicted' column)."""
    for rid, row in read_rows(MEASURED_CSV) if rows is None else rows:
        if rid == row_id:
            return float(row["predicted"])
    raise KeyError(row_id)


def load_vit_reference(rows: Rows | None = None) -> Dataset:
    """Measured ViT training TFLOP/s per GPU on 32 and 128 A100s (`SOURCE`); rows of another metric are
    the same measurements restated and are left out."""
    configs, flops = _tables()
    chosen = [(i, r) for i, r in (read_rows(MEASURED_CSV) if rows is None else rows) if r["metric"] == TFLOPS_METRIC]
    return build_dataset("vit_reference", f"ViT training TFLOP/s per GPU on A100 clusters, {SOURCE}", chosen,
                         lambda row_id, row: vit_case(row_id, row, configs, flops))


@dataclass(frozen=True)
class ClusterFit:
    """The unnamed cluster and stack of the sheet's rows: scale-out Gbit/s per GPU and compute scale k."""

    scale_out_gbit_per_s: float
    compute_scale: float


def _model_key(case: Case) -> tuple[int, int]:
    model = case.kwargs["model"]
    return model["hidden_size"], model["num_layers"]


def split_by_model(cases: Sequence[Case]) -> tuple[list[Case], list[Case]]:
    """(fitted, held out): models sorted by (width, layers), even positions fitted, odd ones held out."""
    models = sorted({_model_key(c) for c in cases})
    held = set(models[1::2])
    return [c for c in cases if _model_key(c) not in held], [c for c in cases if _model_key(c) in held]


def cluster_system(scale_out_gbit_per_s: float) -> dict[str, Any]:
    """`SYSTEM` with its scale-out bandwidth per GPU replaced by the fitted one."""
    from madmax.config.loaders import find_in_catalog

    entry = find_in_catalog("systems", SYSTEM)
    assert entry is not None, SYSTEM
    system = copy.deepcopy(dict(entry))
    system["name"] = f"{SYSTEM}-vit-fit"
    system["scale_out"] = {**system["scale_out"], "bytes_per_s": f"{scale_out_gbit_per_s:.6g} Gbit/s"}
    return system


def stack_profile(compute_scale: float) -> Any:
    """The shipped compute profile with its GEMM and attention peak fractions times k (at most 1)."""
    from madmax.hardware.profile import ComputeProfile, load_profile

    data = load_profile(None).model_dump()
    data["gemm"]["peak_fraction"] = {d: min(1.0, f * compute_scale) for d, f in data["gemm"]["peak_fraction"].items()}
    for direction in ("forward", "backward"):
        fit = data["attention"][direction]
        fit["peak_fraction"] = min(1.0, fit["peak_fraction"] * compute_scale)
    return ComputeProfile.model_validate(data)


def fitted_case(case: Case, fit: ClusterFit, stack: str | None = None) -> Case:
    """`case` on the fitted cluster and compute scale (stated in its assumptions), under the training
    `stack` (default: the default stack)."""
    kwargs = {**case.kwargs, "system": cluster_system(fit.scale_out_gbit_per_s),
              "calibration": stack_profile(fit.compute_scale), **({"stack": stack} if stack else {})}
    notes = (*case.assumptions, f"cluster fitted to the fitted half of the rows: {fit.scale_out_gbit_per_s:.3g} "
             f"Gbit/s scale-out per GPU, compute efficiency x{fit.compute_scale:.3g} of the shipped profile")
    return replace(case, kwargs=kwargs, assumptions=notes)


def _log_loss(cases: Sequence[Case], fit: ClusterFit, simulate: Callable[..., Any], stack: str | None) -> float:
    from madmax.validate.runner import run_case

    total = 0.0
    for case in cases:
        row = run_case(fitted_case(case, fit, stack), simulate)
        if row.predicted is None or row.predicted <= 0:
            return math.inf
        total += math.log(row.predicted / case.measured) ** 2
    return total


def grid_minimum(loss: Callable[[float, float], float], bandwidths: Sequence[float],
                 scales: Sequence[float]) -> tuple[float, float, float]:
    """(loss, B, k) at the smallest loss over the grid, then over a finer grid between its neighbours."""
    def best(bs: Sequence[float], ks: Sequence[float]) -> tuple[float, int, int]:
        values = [(loss(b, k), i, j) for i, b in enumerate(bs) for j, k in enumerate(ks)]
        return min(values)

    _, i, j = best(bandwidths, scales)
    lo_b, hi_b = bandwidths[max(i - 1, 0)], bandwidths[min(i + 1, len(bandwidths) - 1)]
    lo_k, hi_k = scales[max(j - 1, 0)], scales[min(j + 1, len(scales) - 1)]
    fine_b = np.geomspace(lo_b, hi_b, REFINE_POINTS).tolist()
    fine_k = np.linspace(lo_k, hi_k, REFINE_POINTS).tolist()
    value, i, j = best(fine_b, fine_k)
    return value, fine_b[i], fine_k[j]


def fit_cluster(cases: Sequence[Case], simulate: Callable[..., Any],
                stack: str | None = None) -> tuple[ClusterFit, float]:
    """The (B, k) of least squared log error of `cases` under `stack` (see the module docstring), and that
    loss."""
    bandwidths = np.geomspace(BANDWIDTH_GRID_GBIT[0], BANDWIDTH_GRID_GBIT[1], int(BANDWIDTH_GRID_GBIT[2])).tolist()
    scales = np.linspace(COMPUTE_GRID[0], COMPUTE_GRID[1], int(COMPUTE_GRID[2])).tolist()
    value, b, k = grid_minimum(lambda b, k: _log_loss(cases, ClusterFit(b, k), simulate, stack), bandwidths, scales)
    return ClusterFit(round(b, 4), round(k, 4)), value


def measured_sha256() -> str:
    """sha256 (16 hex digits) of the sheet's CSV the fit read."""
    return shipped_sha256(MEASURED_CSV)


def load_cluster_fit() -> ClusterFit:
    """The fitted cluster of `FIT_YAML` (written by `benchmarks/validate_vit.py --fit`)."""
    import yaml

    text = resources.files("madmax.validate").joinpath("data", *FIT_YAML.split("/")).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return ClusterFit(float(data["scale_out_gbit_per_s"]), float(data["compute_scale"]))
