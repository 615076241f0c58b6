"""The tf2 training stack's launch floor, fitted to half of the NVIDIA TF2 DLRM/DCNv2 rows (`nvidia_dlrm`).

TensorFlow 2 issues its GPU work from the graph executor (XLA clusters, Merlin Distributed Embeddings'
lookups, Horovod's collectives, the IndexedSlices optimizer updates), and each `tf.function` call costs
the host a fixed time besides (the tf.data `get_next`, the call's dispatch). Neither is measured, so the
host's time per kernel is fitted like the vTrain stack's (`madmax.validate.launch_fit`, docs/calibration.md):

    L* = argmin_L  sum_i ln(y_i(L) / m_i)^2

over the fitted half of the rows, every other parameter of the shipped profile kept. A recommendation
model has no transformer shape, so rows are split by *model and batch*: (model name, task, micro-batch)
keys sorted as text, even positions fitted, odd ones held out; no row of a held-out key enters the fit.

Regenerate the profile with

    python -m madmax.validate.tf2_launch_fit src/madmax/catalog/calibration/tf2_dlrm_xla.yaml
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from madmax.hardware.profile import load_profile
from madmax.validate.datasets import PUBLISHED_CSV, Case, load_nvidia_dlrm

COMMAND = "python -m madmax.validate.tf2_launch_fit src/madmax/catalog/calibration/tf2_dlrm_xla.yaml"


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


def fit_tf2_profile(jobs: int = 1) -> tuple[dict[str, Any], list[str]]:
    """The shipped profile with the launch floor fitted to the fitted half of `nvidia_dlrm`, and a report."""
    from madmax.validate.calibrate import OBJECTIVE, _rounded
    from madmax.validate.launch_fit import fit_launch_floor, predict, relative_errors, with_launch

    cases = list(load_nvidia_dlrm().cases)
    train, held = split_by_model(cases)
    base = load_profile(None)
    fit = fit_launch_floor(train, base, jobs=jobs)
    fitted = with_launch(base, fit.launch_s)
    errors = {"in_sample": relative_errors(predict(train, fitted, jobs)),
              "held_out": relative_errors(predict(held, fitted, jobs))}
    text = resources.files("madmax.validate").joinpath("data", PUBLISHED_CSV).read_bytes()
    data = (f"src/madmax/validate/data/{PUBLISHED_CSV} (sha256 {hashlib.sha256(text).hexdigest()[:16]}), rows of "
            "NVIDIA/DeepLearningExamples TensorFlow2 DLRM_and_DCNv2")
    profile = fitted.model_dump(mode="json")
    fit_errors = {kind: dict(e) for kind, e in profile["fit_errors"].items()}
    for kind, e in errors.items():
        fit_errors.setdefault(kind, {})["iteration_time"] = e
    profile.update({
        "software": f"{base.software}; launch floor of TensorFlow 2 (XLA, Horovod, Merlin Distributed Embeddings) "
                    "as NVIDIA DeepLearningExamples' DLRM_and_DCNv2 benchmarks ran it",
        "source": f"{base.source}; launch_s refitted to the NVIDIA TF2 DLRM/DCNv2 rows of {data} by "
                  "madmax.validate.tf2_launch_fit (see launch_fit)",
        "fit_errors": fit_errors,
        "launch_fit": {"data": data, "base_profile": "shipped default profile", "base_launch_s": base.launch_s,
                       "objective": OBJECTIVE,
                       "split": "(model, task, micro-batch) keys sorted as text, even positions fitted, odd held "
                                f"out; fitted: {_describe(train)}; held out: {_describe(held)}",
                       "train_rows": len(train), "held_out_rows": len(held)},
    })
    scores = "; ".join(f"{kind} median {e['median']:.1%} max {e['max']:.1%} ({e['count']} rows)"
                       for kind, e in errors.items())
    report = [f"launch floor: {base.launch_s * 1e6:.1f} us -> {fit.launch_s * 1e6:.1f} us ({fit.evaluations} "
              f"evaluations of {len(train)} rows); |predicted/measured - 1| {scores}"]
    return _rounded(profile), report


def main(argv: Sequence[str]) -> None:
    from madmax.validate.calibrate import write_profile

    if len(argv) != 1:
        raise SystemExit(f"usage: {COMMAND}")
    profile, report = fit_tf2_profile(jobs=4)
    write_profile(profile, Path(argv[0]), COMMAND)
    print("\n".join(report))


if __name__ == "__main__":
    main(sys.argv[1:])
