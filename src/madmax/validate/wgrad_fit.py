"""The rate of fp8 weight-gradient GEMMs, fitted to half of the NeMo H100 rows (`nemo`), held out on the rest.

The shipped profile's fp8 GEMM efficiency comes from H200 kernels of the forward layout with a bf16 output
(torch._scaled_mm). A weight gradient dW = X^T dY is another kernel: Transformer Engine feeds it the
transposed fp8 copies of X and dY and, with Megatron's gradient_accumulation_fusion, accumulates its fp32
result into main_grad (8 bytes per weight element read and written each micro-batch). No measurement of it
is in the calibration data, and the NeMo rows single it out: the LoRA rows (fprop and dgrad in fp8, no
weight gradients for the frozen weights) are within 2% with the forward-layout rate, the SFT and
pre-training rows of the same models 15-25% too fast. So one number r is fitted, every other parameter of
the shipped profile kept:

    r* = argmin_r  sum_i ln(y_i(r) / m_i)^2,   an fp8 wgrad GEMM taking t_gemm / r

over the fitted half of the rows, split by model shape (`madmax.validate.launch_fit.split_by_shape`:
shapes sorted, even positions fitted, odd held out; no row of a held-out shape enters the fit). The
search: a log-spaced grid of r from 0.2 to 1, then a golden-section search between the best point's
neighbours (`fit_log_parameter`). Regenerate the catalog file with

    python -m madmax.validate.wgrad_fit src/madmax/catalog/calibration/fp8_wgrad.yaml
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from madmax.config.base import DType
from madmax.hardware.profile import ComputeProfile, load_profile
from madmax.validate.datasets import PUBLISHED_CSV, load_nemo, shipped_sha256

COMMAND = "python -m madmax.validate.wgrad_fit src/madmax/catalog/calibration/fp8_wgrad.yaml"
# Not applied by default: the rate fails the rule for fits (docs/calibration.md), raising the error of the other
# source's fp8 rows (Megatron-Bridge) that it never saw; `madmax validate` shows its effect ("Each fit").
ADOPTED = False
NOT_ADOPTED = ("fails the rule for fits (docs/calibration.md): it raises the error of the fp8 Megatron-Bridge rows, "
               "which it never saw (docs/validation.md, 'Each fit, in-sample and cross-source'); a profile's "
               "wgrad_fraction applies it")
GRID = (0.2, 1.0, 9)  # first, last and number of log-spaced grid points of r
OBJECTIVE = "sum over rows of ln(predicted/measured)^2 (least squares in log time), 1-D in the fp8 wgrad rate r"


def with_wgrad(profile: ComputeProfile, fraction: float) -> ComputeProfile:
    """`profile` with fp8 weight-gradient GEMMs at `fraction` of the forward-layout rate."""
    return profile.model_copy(update={"wgrad_fraction": {DType.FP8: fraction}})


def fit_wgrad(jobs: int = 1) -> tuple[dict[str, Any], list[str]]:
    """The fitted rate with its provenance and errors (the catalog file's content), and a report."""
    from functools import partial

    from madmax.validate.launch_fit import fit_errors, fit_log_parameter, split_by_shape

    cases = list(load_nemo().cases)
    train, held = split_by_shape(cases)
    base = load_profile(None).model_copy(update={"wgrad_fraction": {}})
    rate, _, evaluations, _ = fit_log_parameter(train, partial(with_wgrad, base), GRID, jobs=jobs)
    before, after = fit_errors(train, held, base, jobs), fit_errors(train, held, with_wgrad(base, rate), jobs)
    data = (f"src/madmax/validate/data/{PUBLISHED_CSV} (sha256 {shipped_sha256(PUBLISHED_CSV)}), "
            "rows of NVIDIA/NeMo docs/source/performance (dataset nemo)")
    table = {
        "wgrad_fraction": {"fp8": float(f"{rate:.4g}")},
        "adopted": ADOPTED,
        **({} if ADOPTED else {"not_adopted": NOT_ADOPTED}),
        "fit": {"data": data, "base_profile": "shipped default profile (fp8 wgrad at the forward-layout rate)",
                "objective": OBJECTIVE,
                "split": "model shapes sorted (hidden, layers, heads, KV heads, FFN width, vocabulary, sequence), "
                         "even positions fitted, odd held out (madmax.validate.launch_fit.split_by_shape)",
                "train_rows": len(train), "held_out_rows": len(held),
                "errors_before": _rounded(before), "errors_after": _rounded(after)},
        "source": "FIT (madmax.validate.wgrad_fit): no fp8 weight-gradient GEMM (transposed fp8 operands, fp32 "
                  "accumulation into main_grad) is in the calibration data; the NeMo H100 rows isolate it "
                  "(LoRA rows, without weight gradients, fit at the forward-layout rate). Fitted on Hopper (H100) "
                  "rows only; bf16 and the block-scaled formats keep rate 1.",
    }
    report = [f"fp8 wgrad rate: {rate:.3f} of the forward-layout GEMM ({evaluations} evaluations of {len(train)} "
              f"rows); |predicted/measured - 1| " + "; ".join(
                  f"{kind} median {before[kind]['median']:.1%} -> {after[kind]['median']:.1%} "
                  f"({after[kind]['count']} rows)" for kind in after)]
    return table, report


def _rounded(errors: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {kind: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in e.items()} for kind, e in errors.items()}


def main(argv: Sequence[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(f"usage: {COMMAND}")
    table, report = fit_wgrad(jobs=4)
    header = (f"# GENERATED by `{COMMAND}`; do not edit by hand.\n# The rate of a weight-gradient GEMM over a "
              "forward-layout GEMM of the same shape and dtype (madmax.hardware.compute.ComputeModel.wgrad_fraction)."
              "\n")
    Path(argv[0]).write_text(header + yaml.safe_dump(table, sort_keys=False, width=110), encoding="utf-8")
    print("\n".join(report))


if __name__ == "__main__":
    main(sys.argv[1:])
