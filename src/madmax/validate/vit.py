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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from madmax.validate.datasets import Case, Dataset, Rows, build_dataset, read_rows, row_ints
from madmax.validate.inputs import NotMappable, peak_flops_per_s, strategy_string

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
