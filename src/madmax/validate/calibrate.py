"""`madmax calibrate FILE... --out PROFILE`: a compute profile from kernel, collective and iteration timings.

Each FILE is recognised by its content (docs/calibration.md gives the formats):

- kernel JSONL (`{"kind": "env", ...}` then gemm, attention, decode_attention, hbm_copy rows, as
  `catalog/calibration/h200_kernels.jsonl` and `madmax bench gpu`): every kernel parameter is refitted
  by `madmax.hardware.calibration.fit_profile` (in-sample and leave-shapes-out errors);
- nccl-tests output (`madmax.validate.nccl_tests`, also `madmax bench comm`): alpha and bus bandwidth
  per collective, written to the profile's `network` list (in-sample and leave-one-size-out errors);
- measured iteration times, a CSV in the validation formats (`madmax.validate.usercsv`): the launch
  floor `launch_s`, every other parameter kept (`madmax.validate.launch_fit`), fitted on half of the
  model shapes; the other half gives the held-out errors.

Files are applied in that order over a base profile (default: the shipped H200 profile), so iteration
times fit the launch floor of the kernel profile fitted from the same command's JSONL.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from madmax.config.checks import MAX_FLOAT, shown, usable_path
from madmax.errors import ConfigError
from madmax.hardware.profile import ComputeProfile, ReferencePeaks, efficiency_table, load_profile, reference_peaks
from madmax.validate.nccl_tests import fit_run, looks_like_nccl_tests, read_nccl_tests

SIGNIFICANT = 6
OBJECTIVE = "sum over rows of ln(predicted/measured)^2 (least squares in log time), 1-D in launch_s"


@dataclass
class Inputs:
    kernels: list[Path] = field(default_factory=list)
    nccl: list[Path] = field(default_factory=list)
    iterations: list[Path] = field(default_factory=list)


def _head(path: Path) -> str:
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as f:
            return f.read(1 << 16)
    except OSError as exc:
        raise ConfigError(f"calibration file {str(path)!r} cannot be read ({exc.strerror})") from None


def classify(paths: list[Path]) -> Inputs:
    """Sort `paths` into kernel JSONL, nccl-tests output and iteration-time CSVs, by content."""
    inputs = Inputs()
    if not paths:
        raise ConfigError("calibrate needs at least one FILE: kernel JSONL, nccl-tests output or a validation CSV")
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"calibration file {str(path)!r} does not exist")
        head = _head(path)
        first = next((line for line in head.splitlines() if line.strip()), "")
        if first.lstrip().startswith("{"):
            try:
                kind = json.loads(first).get("kind")
            except (json.JSONDecodeError, AttributeError):
                kind = None
            if kind is None:
                raise ConfigError(f"calibration file {path.name}: line 1 is not a JSON object with a 'kind'")
            inputs.kernels.append(path)
        elif looks_like_nccl_tests(head):
            inputs.nccl.append(path)
        elif "," in first:
            inputs.iterations.append(path)
        else:
            raise ConfigError(f"calibration file {path.name} is neither kernel JSONL, nccl-tests output nor a "
                              "validation CSV (see docs/calibration.md)")
    return inputs


def _sha(paths: list[Path]) -> str:
    return ", ".join(f"{p} (sha256 {hashlib.sha256(p.read_bytes()).hexdigest()[:16]})" for p in paths)


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT}g}")
    return value


def device_peaks(device: str, gpu: str | None = None) -> ReferencePeaks:
    """Datasheet peaks of a measured device: `gpu` (a catalog GPU) if given, else efficiency.yaml's
    reference device of that name, else the catalog GPU whose name or alias matches the device name
    ('NVIDIA A100-SXM4-80GB' -> a100-80gb)."""
    from madmax.config.loaders import find_in_catalog, load_gpu

    if gpu is None and device in efficiency_table()["compute"]["reference_devices"]:
        return reference_peaks(device)
    name = gpu or device.lower().removeprefix("nvidia ").strip().replace(" ", "-")
    if gpu is None and find_in_catalog("gpus", name) is None:
        raise ConfigError(f"kernel file device {device!r} has no datasheet peaks; pass --gpu NAME (a catalog GPU, "
                          "see `madmax catalog list gpus`)")
    g = load_gpu(name)
    return ReferencePeaks(flops_per_s=g.flops_per_s, hbm_bytes_per_s=g.hbm_bytes_per_s,
                          source=f"catalog gpus.yaml {g.name!r}")


# The shortest kernel time a row may state: a nanosecond, a thousandth of the few microseconds a kernel
# launch takes; shorter times are not measurements and would turn the fitted rates infinite.
MIN_KERNEL_S = 1e-9


def _kernel_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a kernel JSONL file, each a JSON object with a string `kind` whose numbers (sizes,
    shapes, rates, times) are finite and positive; else a ConfigError naming the line and the field."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"kernel file {path.name}:{number}"
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, a number of over 4,300 digits, or nested too deep
            raise ConfigError(f"{where} is not a JSON object") from None
        if not isinstance(row, dict) or not isinstance(row.get("kind"), str):
            raise ConfigError(f"{where} is not a JSON object with a 'kind' string; got {shown(row)}")
        if row["kind"] == "env" and not isinstance(row.get("name", ""), str):
            raise ConfigError(f"{where} field name={shown(row['name'])} is not a device name (a string)")
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            low = MIN_KERNEL_S if str(key).endswith("_s") else 0
            if not low < value <= MAX_FLOAT:  # also false for NaN
                raise ConfigError(f"{where} field {shown(key)}={shown(value)} is not a positive finite number; "
                                  f"allowed: a size, shape, rate or time above {low:g}")
        rows.append(row)
    return rows


def _kernel_profile(paths: list[Path], gpu: str | None, held_out: bool) -> dict[str, Any]:
    from madmax.hardware.calibration import fit_profile

    records = [row for path in paths for row in _kernel_rows(path)]
    env = next((r for r in records if r.get("kind") == "env"), {})
    try:
        profile = fit_profile(records, reference=device_peaks(env.get("name", "unknown"), gpu), held_out=held_out)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"kernel file {paths[0].name}: a row lacks or mistypes the field {exc}") from None
    profile["source"] = f"{_sha(paths)}, fitted by madmax calibrate (madmax.hardware.calibration.fit_profile)"
    return profile


def _network(runs: list, held_out: bool) -> list[dict[str, Any]]:
    return [fit_run(run, held_out) for run in runs]


def _launch(paths: list[Path], cases: list, base: ComputeProfile, base_name: str,
            jobs: int, stack: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The launch floor fitted to `cases`, the rows of `paths`; the profile fields it changes."""
    from madmax.validate.launch_fit import (
        describe_shape,
        fit_launch_floor,
        predict,
        relative_errors,
        shape_key,
        split_by_shape,
        with_launch,
    )
    train, held = split_by_shape(cases)
    fit = fit_launch_floor(train, base, jobs=jobs)
    if fit.rows == 0:
        raise ConfigError("no iteration row could be simulated with the base profile; see `madmax validate FILE`")
    fitted = with_launch(base, fit.launch_s)
    errors = {"in_sample": relative_errors(predict(train, fitted, jobs))}
    if held:
        errors["held_out"] = relative_errors(predict(held, fitted, jobs))
    shapes = {"fitted": sorted({shape_key(c) for c in train}), "held out": sorted({shape_key(c) for c in held})}
    split = ("model shapes (hidden, layers, heads, KV heads, FFN, vocab, seq) sorted, even positions fitted, "
             "odd held out; " + "; ".join(f"{k}: {', '.join(describe_shape(s) for s in v) or 'none'}"
                                          for k, v in shapes.items()))
    fit_errors = {kind: dict(e) for kind, e in base.model_dump()["fit_errors"].items()}
    for kind, e in errors.items():
        fit_errors.setdefault(kind, {})["iteration_time"] = e
    change = {
        "launch_s": fitted.launch_s, "attention": fitted.attention.model_dump(),
        "software": f"{base.software}; launch floor of the software stack that ran {', '.join(p.name for p in paths)}",
        "source": f"{base.source}; launch_s refitted to the iteration times of {_sha(paths)} by "
                  "madmax.validate.launch_fit (see launch_fit)",
        "fit_errors": fit_errors,
        "launch_fit": {"data": _sha(paths), "base_profile": base_name, "base_launch_s": base.launch_s, "stack": stack,
                       "objective": OBJECTIVE, "split": split, "train_rows": len(train), "held_out_rows": len(held)},
    }
    held_text = (f"held-out median {errors['held_out']['median']:.1%} max {errors['held_out']['max']:.1%} "
                 f"({errors['held_out']['count']} rows)") if held else "no held-out rows (one model shape)"
    report = [f"launch floor: {base.launch_s * 1e6:.1f} us -> {fit.launch_s * 1e6:.1f} us "
              f"({fit.evaluations} evaluations of {len(train)} rows); |predicted/measured - 1| in-sample median "
              f"{errors['in_sample']['median']:.1%} max {errors['in_sample']['max']:.1%}; {held_text}"]
    return change, report


def calibrate(paths: list[Path], *, base: str | Path | None = None, gpu: str | None = None,
              held_out: bool = True, jobs: int = 1, stack: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The profile (dict form of `ComputeProfile`) fitted to `paths`, and a report, one line per fit.

    stack: the training stack the iteration rows ran under (`madmax.config.training_stack`); its kernels and
    collectives, not its compute profile, apply while the launch floor is fitted. None: Megatron-Core."""
    from madmax.config.training_stack import load_training_stack
    from madmax.validate.datasets import with_stack
    from madmax.validate.usercsv import load_csv

    base = None if base is None else usable_path(base, "base")
    stack = None if stack is None else load_training_stack(stack).name  # an unknown stack fails before any fit
    inputs = classify(paths)
    runs = [run for path in inputs.nccl for run in read_nccl_tests(path)]  # read every input before fitting
    cases = [c for p in inputs.iterations for c in load_csv(p).cases]
    if stack is not None:
        cases = [with_stack(c, stack) for c in cases]
    if inputs.iterations and not cases:
        raise ConfigError(f"iteration file(s) {', '.join(p.name for p in inputs.iterations)} have no row "
                          "that can be simulated (see `madmax validate FILE`)")
    report: list[str] = []
    base_name = str(base) if base else "shipped default profile (" + \
        efficiency_table()["compute"]["default_profile"] + ")"
    if inputs.kernels:
        profile = _kernel_profile(inputs.kernels, gpu, held_out)
        base_name = f"kernel fit of {', '.join(p.name for p in inputs.kernels)}"
        for split, kinds in profile["fit_errors"].items():
            report += [f"kernels {split:9s} {kind:20s} median {e['median']:.1%} max {e['max']:.1%} ({e['count']})"
                       for kind, e in kinds.items()]
    else:
        profile = load_profile(base).model_dump(mode="json")
    if inputs.nccl:
        network = _network(runs, held_out)
        profile["network"] = network
        for n in network:
            errs = "; ".join(f"{k} median {e['median']:.1%} max {e['max']:.1%}" for k, e in n["fit_errors"].items())
            report.append(f"{n['collective']} on {n['num_gpus']} ranks ({n['num_nodes']} node(s)): alpha "
                          f"{n['step_latency_s'] * 1e6:.2f} us, busbw {n['busbw_bytes_per_s'] / 1e9:.2f} GB/s; {errs}")
    if inputs.iterations:
        change, lines = _launch(inputs.iterations, cases, ComputeProfile.model_validate(profile), base_name, jobs,
                                stack)
        profile.update(change)
        report += lines
    return _rounded(json.loads(json.dumps(ComputeProfile.model_validate(profile).model_dump(mode="json")))), report


def write_profile(profile: dict[str, Any], out: Path, command: str) -> None:
    """Write `profile` as YAML with a header naming the command that generated it."""
    import yaml

    header = (f"# Compute profile GENERATED by `{command}`;\n# do not edit by hand. Efficiencies are "
              "fractions of reference_peaks; see docs/calibration.md.\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + yaml.safe_dump(profile, sort_keys=False, width=110), encoding="utf-8")
