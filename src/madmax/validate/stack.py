"""Validate vTrain's rows with a profile of their own software stack, fitted on a training split only.

vTrain's runs use Megatron-DeepSpeed on A100s (training stack `megatron-deepspeed`), whose host issues
kernels more slowly than the eager PyTorch 2.11 that the shipped H200 profile measured; its small
single-node models are host-bound. The profile `catalog/calibration/vtrain_megatron_deepspeed_a100.yaml`
is the shipped H200 profile with its
launch floor fitted (`madmax.validate.launch_fit`) to the *fitted half* of vtrain_single's model shapes.
Accuracy with it is reported only on rows it never saw:

- `vtrain_single+stack`: the held-out half of vtrain_single's shapes (`launch_fit.split_by_shape`);
- `vtrain_multi+stack`: every vtrain_multi row (64-512 GPUs; none was fitted).

Each is compared with the default profile on the same rows (`runner.Comparison`). Regenerate the
profile with the command in its `launch_fit` provenance, `STACK_COMMAND` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from madmax.validate.datasets import Dataset, with_stack
from madmax.validate.launch_fit import split_by_shape

VTRAIN_STACK = "megatron-deepspeed"  # catalog/training_stacks.yaml; its compute profile is the one below
VTRAIN_STACK_PROFILE = "calibration/vtrain_megatron_deepspeed_a100.yaml"
SUFFIX = "+stack"
STACK_COMMAND = (f"madmax calibrate src/madmax/validate/data/vtrain/ground_truth_single.csv "
                 f"--out src/madmax/catalog/{VTRAIN_STACK_PROFILE} --stack {VTRAIN_STACK}")


def _rerun(dataset: Dataset, cases: Sequence, description: str, profile: str) -> Dataset:
    name = dataset.name + SUFFIX
    moved = tuple(with_stack(replace(c, dataset=name, kwargs={**c.kwargs, "calibration": profile}), VTRAIN_STACK)
                  for c in cases)
    return Dataset(name, description, moved, (), baseline=dataset.name)


def stack_datasets(datasets: Sequence[Dataset], profile: str = VTRAIN_STACK_PROFILE) -> list[Dataset]:
    """The vTrain-stack re-runs of the vtrain datasets among `datasets` (held-out rows only)."""
    out = []
    for d in datasets:
        if d.name == "vtrain_single":
            _, held_out = split_by_shape(d.cases)
            out.append(_rerun(d, held_out, "vtrain_single held-out shapes, vTrain-stack profile", profile))
        elif d.name == "vtrain_multi":
            out.append(_rerun(d, d.cases, "vtrain_multi (never fitted), vTrain-stack profile", profile))
    return out
