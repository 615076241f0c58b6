"""What `madmax validate` does, kept out of the CLI layer: resolve datasets, run, write the outputs.

    madmax validate [DATASET...] [--json] [--out CSV] [--markdown FILE] [--write-bands]
                    [--calibration PROFILE] [--no-vtrain-stack] [--cross-source/--no-cross-source]
                    [--jobs N] [--sample N]

DATASET: a name of `datasets.LOADERS` or a CSV file in a documented format (`usercsv`); all names when
none. With the vtrain datasets, their vTrain-stack re-runs are added (`stack`), held-out rows only. With
--cross-source (the default without --calibration), each source is also scored with the fits of its own
rows left out (`fits`, the `+cross` re-runs).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError
from madmax.validate.conventions import SERVING_METRICS
from madmax.validate.datasets import LOADERS, Dataset
from madmax.validate.markdown import calibration_label
from madmax.validate.runner import Report, run_validation

REGENERATE = "madmax validate --markdown docs/validation.md"
BANDS_COMMAND = "madmax validate --write-bands"
ROW_COLUMNS = ("dataset", "row_id", "label", "family", "gpu", "parallelism", "num_gpus", "metric", "unit",
               "measured", "predicted", "signed_error_pct", "abs_error_pct", "fits", "error", "calibration")


def resolve(names: Sequence[str] | None) -> list[Dataset]:
    """The datasets named (all shipped ones when none): shipped names or CSV file paths."""
    from madmax.validate.datasets import load_datasets
    from madmax.validate.usercsv import load_csv

    if not names:
        return load_datasets()
    datasets = []
    for name in names:
        if name in LOADERS:
            datasets.append(LOADERS[name]())
        elif name.lower().endswith(".csv") or Path(name).is_file():
            datasets.append(load_csv(name))
        else:
            raise ConfigError(f"dataset {name!r} is unknown; allowed: {', '.join(LOADERS)}, or a CSV file path")
    return datasets


def _with_calibration(dataset: Dataset, calibration: str) -> Dataset:
    cases = tuple(replace(c, kwargs={**c.kwargs, "calibration": calibration}) for c in dataset.cases)
    return replace(dataset, cases=cases)


def run(names: Sequence[str] | None = None, *, calibration: str | None = None, vtrain_stack: bool = True,
        cross_source: bool | None = None, jobs: int | None = None, sample: int | None = None,
        seed: int = 0) -> Report:
    """Validate the named datasets (see the module docstring); jobs defaults to the CPU count.

    cross_source: also score each source with the fits of its own rows left out (`madmax.validate.fits`);
    None: unless a profile is given (a given profile replaces every fit, so nothing is left to leave out)."""
    if cross_source and calibration is not None:
        raise ConfigError("--cross-source leaves out the shipped fits, --calibration replaces them all; "
                          "allowed: one of the two")
    datasets = resolve(names)
    if calibration is not None:
        from madmax.hardware.profile import load_profile

        load_profile(calibration)  # a bad file fails here, once, rather than on every row
        datasets = [_with_calibration(d, calibration) for d in datasets]
    if vtrain_stack:
        from madmax.validate.stack import stack_datasets

        datasets += stack_datasets(datasets)
    how: dict[str, str] = {}
    if cross_source is None:
        cross_source = calibration is None
    if cross_source:
        from madmax.validate.fits import cross_source_datasets, fit_effect_datasets

        extra, how = cross_source_datasets(datasets)
        datasets += extra + fit_effect_datasets(datasets)
    report = run_validation(datasets, jobs=jobs or os.cpu_count() or 1, sample=sample, seed=seed)
    if not how:
        return report
    from madmax.validate.fits import cross_source_scores, fit_effects

    return replace(report, cross_source=cross_source_scores(report.rows, how), fit_effects=fit_effects(report.rows))


def check_outputs(out: Path | None, markdown: Path | None) -> None:
    """Refuse, before any row is simulated, an --out or --markdown that is a folder or in a missing one."""
    from madmax.config.checks import writable_file

    for option, path in (("--out", out), ("--markdown", markdown)):
        if path is not None:
            writable_file(path, option)


def write_rows(report: Report, path: Path) -> None:
    """One CSV line per row: inputs in brief, measured and predicted values, errors."""
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=ROW_COLUMNS)
        writer.writeheader()
        for r in report.rows:
            d = r.to_dict()
            d["num_gpus"] = r.case.kwargs.get("num_gpus")
            d["calibration"] = calibration_label(r.case.kwargs.get("calibration"))
            writer.writerow({k: d.get(k) for k in ROW_COLUMNS})


def page(report: Report) -> str:
    """docs/validation.md: how to read and regenerate it, then the report."""
    from madmax.validate.trust import BANDS_FILE

    intro = f"""# Validation: predicted against measured training and serving runs

GENERATED by `{REGENERATE}`; do not edit by hand.

Every mappable training row of the shipped datasets, dense and mixture-of-experts (`madmax.validate.datasets`,
`madmax.validate.moe`; sources, licenses and the CSV format in `src/madmax/validate/data/README.md`), is
simulated with the default compute profile (H200 kernels, torch 2.11) and compared with its measured
metric; so is every LLM serving row (`trtllm_static`, `serving_h100`; `madmax.validate.serving`). Error
e = 100 (predicted - measured) / measured of the row's metric: for times (iteration time, latency,
TTFT, TPOT) e < 0 means the prediction is too fast, for throughputs (TFLOP/s, tokens/s, MFU, output
tokens/s) e > 0 means too fast.

- MoE training rows: the same configuration measured in different software releases differs by more
  than the model's errors (Megatron-Bridge Qwen3-30B-A3B with pp=2, ep=8: 5,113 tokens/s/GPU in 26.02,
  9,058 in 26.02.01), and the same GPT-OSS architecture runs at 158 model TFLOP/s/GPU under Megatron-Bridge
  and 279 under NeMo AutoModel on the same GPUs: a per-stack profile (issue 11) is what those rows need.
  Rows whose expert all-to-all crosses nodes (Qwen3-30B-A3B ep=16, Qwen3-235B-A22B ep=32, DeepSeek-V3
  ep=64 with DeepEP) are within about 11%, except Qwen3-235B-A22B's 25.09 row (+25%).
- `madmax validate [DATASET...]` runs some datasets (or your CSV files in either documented format);
  `--json` prints the summaries, `--out rows.csv` writes every row, `--markdown FILE` this page.
- **vTrain-stack profile** (`--vtrain-stack`, on by default): vTrain's Megatron-DeepSpeed issues kernels
  more slowly than the eager PyTorch the default profile measured. The profile
  `catalog/calibration/vtrain_megatron_deepspeed_a100.yaml` refits only the launch floor, on half of
  vtrain_single's model shapes (docs/calibration.md). The `+stack` datasets re-run **only rows it never
  saw**: the other half of vtrain_single's shapes, and all of vtrain_multi. `--no-vtrain-stack` skips them.
- **Cross-source first** (`--cross-source`, on by default): the table below leads because it is the
  figure to trust. A constant fitted to one source's rows helps that source; the cross-source columns
  score each source with the fits of its own rows left out (`madmax.validate.fits`, the `+cross`
  re-runs), and "Each fit" shows what every end-to-end fit does on its own rows and on the others'.
- The error bands that `madmax.validate.trust.error_band` returns come from the cross-source residuals
  (`src/madmax/validate/data/{BANDS_FILE}`, regenerated by `{BANDS_COMMAND}`), serving rows excepted.

"""
    return intro + report.to_markdown() + "\n"


def _band_rows(report: Report) -> list:
    """The rows behind the error bands: each baseline dataset's cross-source rows (its `+cross` re-run where one
    exists, else its own rows with the default profile), no serving metric."""
    from madmax.validate.fits import CROSS, cross_source_names

    chosen = cross_source_names(s.name for s in report.datasets)
    return [r for r in report.rows if r.case.dataset in chosen and r.signed_error_pct is not None
            and r.case.metric not in SERVING_METRICS
            and (r.case.dataset.endswith(CROSS) or not r.case.kwargs.get("calibration"))]


def bands_from(report: Report) -> list[dict]:
    """The error-band table of `report`'s cross-source rows (`_band_rows`).

    Serving rows (`conventions.SERVING_METRICS`) are left out: the bands describe training predictions
    (only `simulate` of a training task attaches one), and their parallelism groups differ ('tp4', 'disagg').
    """
    from madmax.validate.trust import band_rows

    return band_rows([(r.case.family, r.case.gpu, r.case.parallelism, int(r.case.kwargs["num_gpus"]),
                       float(r.signed_error_pct)) for r in _band_rows(report)])


def write_bands_of(report: Report, path: Path | None = None) -> Path:
    from madmax.validate.trust import TRANSFER_FILE, bands_path, write_bands

    path = path or bands_path()
    rows = _band_rows(report)
    names = dict.fromkeys(r.case.dataset for r in rows)
    note = (f"GENERATED by `{BANDS_COMMAND}`; do not edit by hand.\n"
            f"Cross-source residuals of {len(rows)} validation rows ({', '.join(names)}): each source with the "
            "fits of its own rows left out (madmax.validate.fits); serving rows are not counted.\n"
            "Empty key cells match any value; madmax.validate.trust.error_band reads the first level with rows.")
    write_bands(bands_from(report), path, note)
    write_transfer_of(rows, path.with_name(TRANSFER_FILE))
    return path


def write_transfer_of(rows: Sequence[Any], path: Path) -> Path:
    """The cross-architecture error (`madmax.validate.trust.transfer_summary`) of the band rows, beside the table:
    the rows on GPUs of an architecture other than the default compute profile's device."""
    from madmax.hardware.profile import architecture_of, device_architecture, load_profile
    from madmax.validate.trust import transfer_summary, write_transfer

    device = load_profile().device
    profile_architecture = device_architecture(device) or "unknown"
    summary = transfer_summary([(architecture_of(r.case.gpu), float(r.signed_error_pct)) for r in rows],
                               profile_architecture)
    note = (f"GENERATED by `{BANDS_COMMAND}`; do not edit by hand.\n"
            f"Cross-source error of the error-band rows on GPU architectures other than {profile_architecture} (the "
            f"default compute profile's device, {device}): what carrying measured kernel efficiencies to another\n"
            "architecture costs. madmax.validate.trust.error_band widens the band of a GPU whose architecture has no "
            "validation rows by it.")
    write_transfer(summary, path, note)
    return path


def check_bands_request(names: Sequence[str] | None, calibration: str | None, sample: int | None,
                        cross_source: bool | None = None) -> None:
    """--write-bands needs every shipped dataset, cross-source, with the shipped profiles and no sampling."""
    if names or calibration is not None or sample is not None or cross_source is False:
        raise ConfigError("--write-bands needs every shipped dataset, cross-source, the shipped profiles and no "
                          f"--sample; allowed: `{BANDS_COMMAND}` alone")
