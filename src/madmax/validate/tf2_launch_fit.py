"""The tf2 stack's host costs, fitted to half of the NVIDIA TF2 DLRM/DCNv2 rows (`nvidia_dlrm`).

The examples run their two tasks under two runtimes (doc/DLRM.md, doc/DCNv2.md): training with `--xla`
and Horovod, the inference benchmark without `--xla`, on one GPU, in TensorFlow's graph executor. Neither
runtime's host time is measured, so each is fitted, one number each, every other parameter of the shipped
profile kept:

- training (`tf2_dlrm_xla.yaml`, the stack's `calibration`): the host's time per kernel L, like the vTrain
  stack's (`madmax.validate.launch_fit`, docs/calibration.md), over the fitted half's *training* rows:

      L* = argmin_L  sum_i ln(y_i(L) / m_i)^2

- inference (`tf2_dlrm_graph.yaml`, the stack's `inference_calibration`): the host's time per step call C
  (`call_host_s`: the step function's dispatch and the input pipeline's next batch, beside the GPU's work),
  over the fitted half's *inference* rows, the kernels issued at the shipped profile's floor:

      C* = argmin_C  sum_i ln(max-plus step y_i(C) / m_i)^2

A recommendation model has no transformer shape, so rows are split by *model and batch*: (model name,
task, micro-batch) keys sorted as text, even positions fitted, odd ones held out; no row of a held-out
key enters either fit.

Regenerate both profiles with

    python -m madmax.validate.tf2_launch_fit src/madmax/catalog/calibration/tf2_dlrm_xla.yaml \
        src/madmax/catalog/calibration/tf2_dlrm_graph.yaml
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from madmax.hardware.profile import load_profile
from madmax.validate.datasets import PUBLISHED_CSV, Case, load_nvidia_dlrm, shipped_sha256

COMMAND = ("python -m madmax.validate.tf2_launch_fit src/madmax/catalog/calibration/tf2_dlrm_xla.yaml "
           "src/madmax/catalog/calibration/tf2_dlrm_graph.yaml")
# C is searched on this log-spaced grid (first, last, points), s: a step call from 10 us to 100 ms.
CALL_GRID = (1e-5, 1e-1, 17)


def dlrm_key(case: Case) -> tuple[str, str, int]:
    """(model name, task, micro-batch per GPU) of a recommendation row."""
    kwargs = case.kwargs
    parts = dict(p.split("=", 1) for p in str(kwargs.get("strategy", "")).split(",") if "=" in p)
    batch = int(parts["mbs"]) if "mbs" in parts else int(kwargs.get("batch") or kwargs.get("global_batch") or 0)
    return (kwargs["model"]["name"], str(kwargs["task"]), batch)


def split_by_model(cases: Sequence[Case]) -> tuple[list[Case], list[Case]]:
    """(fitted, held out): keys `dlrm_key` sorted as text, even positions fitted, odd ones held out."""
    keys = sorted({dlrm_key(c) for c in cases}, key=str)
    held = set(keys[1::2])
    return [c for c in cases if dlrm_key(c) not in held], [c for c in cases if dlrm_key(c) in held]


def _describe(cases: Sequence[Case]) -> str:
    return ", ".join(" ".join(map(str, k)) for k in sorted({dlrm_key(c) for c in cases}, key=str))


def _data() -> str:
    return (f"src/madmax/validate/data/{PUBLISHED_CSV} (sha256 {shipped_sha256(PUBLISHED_CSV)}), rows of "
            "NVIDIA/DeepLearningExamples TensorFlow2 DLRM_and_DCNv2")


def _split_text(train: Sequence[Case], held: Sequence[Case]) -> str:
    return ("(model, task, micro-batch) keys sorted as text, even positions fitted, odd held out; "
            f"fitted: {_describe(train)}; held out: {_describe(held)}")


def _errors(profile: dict[str, Any], errors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    fit_errors = {kind: dict(e) for kind, e in profile["fit_errors"].items()}
    for kind, e in errors.items():
        fit_errors.setdefault(kind, {})["iteration_time"] = e
    return fit_errors


def _scores(errors: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{kind} median {e['median']:.1%} max {e['max']:.1%} ({e['count']} rows)"
                     for kind, e in errors.items())


def _task_rows(cases: Sequence[Case], inference: bool) -> list[Case]:
    return [c for c in cases if (c.kwargs["task"] == "inference") == inference]


def _profile(fitted: Any, train: Sequence[Case], held: Sequence[Case], jobs: int,
             **fields: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The fitted profile as written (its errors on the fitted and held-out rows added, `fields` set) and
    those errors."""
    from madmax.validate.calibrate import _rounded
    from madmax.validate.launch_fit import fit_errors

    errors = fit_errors(train, held, fitted, jobs)
    profile = fitted.model_dump(mode="json")
    profile.update(fit_errors=_errors(profile, errors), **fields)
    return _rounded(profile), errors


def fit_tf2_profile(jobs: int = 1) -> tuple[dict[str, Any], list[str]]:
    """The training runtime: the shipped profile with the launch floor fitted to the fitted half's training
    rows of `nvidia_dlrm`, and a report."""
    from madmax.validate.calibrate import OBJECTIVE
    from madmax.validate.launch_fit import fit_launch_floor, with_launch

    train, held = (_task_rows(rows, inference=False) for rows in split_by_model(list(load_nvidia_dlrm().cases)))
    base = load_profile(None)
    fit = fit_launch_floor(train, base, jobs=jobs)
    data = _data()
    profile, errors = _profile(
        with_launch(base, fit.launch_s), train, held, jobs,
        software=f"{base.software}; launch floor of TensorFlow 2 training (XLA, Horovod, Merlin Distributed "
                 "Embeddings) as NVIDIA DeepLearningExamples' DLRM_and_DCNv2 benchmarks ran it",
        source=f"{base.source}; launch_s refitted to the NVIDIA TF2 DLRM/DCNv2 training rows of {data} by "
               "madmax.validate.tf2_launch_fit (see launch_fit)",
        launch_fit={"data": data, "base_profile": "shipped default profile", "objective": OBJECTIVE,
                    "split": _split_text(train, held) + " (training rows; inference runs under tf2_dlrm_graph.yaml)",
                    "train_rows": len(train), "held_out_rows": len(held), "base_launch_s": base.launch_s})
    report = [f"training launch floor: {base.launch_s * 1e6:.1f} us -> {fit.launch_s * 1e6:.1f} us "
              f"({fit.evaluations} evaluations of {len(train)} rows); |predicted/measured - 1| {_scores(errors)}"]
    return profile, report


def fit_tf2_inference_profile(jobs: int = 1) -> tuple[dict[str, Any], list[str]]:
    """The inference runtime: the shipped profile (its own launch floor) with the host's time per step call
    fitted to the fitted half's inference rows of `nvidia_dlrm`, and a report."""
    from madmax.validate.launch_fit import fit_log_parameter, with_call

    train, held = (_task_rows(rows, inference=True) for rows in split_by_model(list(load_nvidia_dlrm().cases)))
    base = load_profile(None)
    call, _, evaluations, _ = fit_log_parameter(train, partial(with_call, base), CALL_GRID, jobs=jobs)
    data = _data()
    profile, errors = _profile(
        with_call(base, call), train, held, jobs,
        software=f"{base.software}; host time per step call of TensorFlow 2's graph executor (tf.function "
                 "without XLA) as the DLRM_and_DCNv2 inference benchmark ran it",
        source=f"{base.source}; call_host_s fitted to the NVIDIA TF2 DLRM/DCNv2 inference rows of {data} by "
               "madmax.validate.tf2_launch_fit (see call_fit)",
        call_fit={"data": data, "base_profile": "shipped default profile",
                  "objective": "sum over rows of ln(predicted/measured)^2 (least squares in log time), 1-D in "
                               "call_host_s",
                  "split": _split_text(train, held) + " (inference rows; training runs under tf2_dlrm_xla.yaml)",
                  "train_rows": len(train), "held_out_rows": len(held)})
    report = [f"inference step call: {call * 1e3:.3f} ms ({evaluations} evaluations of {len(train)} rows); "
              f"|predicted/measured - 1| {_scores(errors)}"]
    return profile, report


def main(argv: Sequence[str]) -> None:
    from madmax.validate.calibrate import write_profile

    if len(argv) != 2:
        raise SystemExit(f"usage: {COMMAND}")
    lines = []
    for fit, out in ((fit_tf2_profile, argv[0]), (fit_tf2_inference_profile, argv[1])):
        profile, report = fit(jobs=4)
        write_profile(profile, Path(out), COMMAND)
        lines += report
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
