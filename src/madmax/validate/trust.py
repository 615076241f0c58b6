"""How far to trust a prediction: the error band of validation rows like it, from a shipped table.

    error_band("llama-3.1-70b", num_gpus=64, parallelism="tp+pp+dp", gpu="h100-sxm")
    -> {"p50_abs_pct": ..., "p90_abs_pct": ..., "median_signed_pct": ..., "rows": ..., "basis": ...}

The table `data/error_bands.csv` holds, for groups of validation rows scored cross-source (each source
with the fits of its own rows left out, `madmax.validate.fits`: the error on data the shipped constants
never saw), the median (p50) and 90th percentile of |e| and the median signed e, e = 100 (predicted -
measured) / measured of the row's metric (for throughput metrics, e > 0 means the prediction is faster).
It is written by `madmax validate --write-bands` (all datasets, cross-source), never computed at
import. A query takes the first of `LEVELS` whose group has at least `MIN_ROWS` rows: the same family,
GPU, parallel axes and scale; then coarser groups, ending with all rows. Scale is a bucket of the GPU
count (`SCALES`). The band describes the shipped profiles; a prediction with another `calibration` is
not covered by it.

A GPU whose architecture has no validation rows (B200, L40S, every AMD part today) has no band of its own: the
band of the coarser groups comes from other GPUs, and its kernel efficiencies are the compute profile's
(measured on another device) carried over. Such a band says so (`note`) and is widened by the measured
error of exactly that carry-over: the cross-source error of the validation rows on architectures other than
the profile device's (`data/transfer_error.yaml`, written with the table), combined with the regime's band as
independent errors: p' = sqrt(p^2 + t^2) for p50 and p90 alike.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from madmax.errors import ConfigError
from madmax.hardware.profile import architecture_of
from madmax.validate.inputs import model_family as family_of
from madmax.validate.inputs import parallelism_group

BANDS_FILE = "error_bands.csv"
TRANSFER_FILE = "transfer_error.yaml"
MIN_ROWS = 5
SCALES = ((1, "1-8"), (9, "9-64"), (65, "65-512"), (513, "513+"))  # (first GPU count, label)
KEYS = ("family", "gpu", "parallelism", "scale")
LEVELS: tuple[tuple[str, ...], ...] = (
    ("family", "gpu", "parallelism", "scale"),
    ("family", "parallelism", "scale"),
    ("family", "scale"),
    ("family", "parallelism"),
    ("family",),
    ("parallelism", "scale"),
    ("scale",),
    (),
)
COLUMNS = (*KEYS, "rows", "p50_abs_pct", "p90_abs_pct", "median_signed_pct")


def scale_bucket(num_gpus: int) -> str:
    """The label of the GPU-count bucket of `num_gpus` (>= 1)."""
    return next(label for first, label in reversed(SCALES) if num_gpus >= first)


def _group_of(parallelism: str | Mapping[str, Any] | Any) -> str:
    """'tp+pp+dp' from a group string, a strategy string 'tp=8,pp=2,...', a mapping or a Strategy."""
    if isinstance(parallelism, str) and "=" not in parallelism:
        axes = [a for a in parallelism.lower().replace(" ", "").split("+") if a]
        return "+".join(axes) or "none"
    if isinstance(parallelism, str):
        from madmax.config.strategy import parse_strategy

        parallelism = parse_strategy(parallelism)
    get = parallelism.get if isinstance(parallelism, Mapping) else lambda k, d: getattr(parallelism, k, d)
    degree = {k: int(get(k, 1) or 1) for k in ("tp", "pp", "dp", "cp", "ep")}
    return parallelism_group(degree["tp"], degree["pp"], degree["dp"], degree["cp"], int(get("zero", 0) or 0),
                             degree["ep"])


def _gpu_name(gpu: str) -> str:
    from madmax.config.loaders import find_in_catalog

    entry = find_in_catalog("gpus", gpu.lower())
    return str(entry["name"]) if entry else gpu.lower()


def transfer_summary(residuals: Iterable[tuple[str | None, float]], profile_architecture: str) -> dict[str, Any]:
    """The cross-architecture error: median and p90 of |e| (and the median e) over validation residuals
    (architecture, signed error %) on architectures other than the profile device's, with their count."""
    errors = [(a, e) for a, e in residuals if a is not None and a != profile_architecture]
    if not errors:
        return {"profile_architecture": profile_architecture, "architectures": [], "rows": 0}
    e = np.asarray([x for _, x in errors])
    return {"profile_architecture": profile_architecture, "architectures": sorted({a for a, _ in errors}),
            "rows": len(e), "p50_abs_pct": round(float(np.median(np.abs(e))), 2),
            "p90_abs_pct": round(float(np.percentile(np.abs(e), 90)), 2),
            "median_signed_pct": round(float(np.median(e)), 2)}


def write_transfer(summary: Mapping[str, Any], path: Path, note: str) -> None:
    """Write the cross-architecture summary as YAML after '#' comment lines saying how it was generated."""
    import yaml

    header = "".join(f"# {line}\n" for line in note.splitlines())
    path.write_text(header + yaml.safe_dump(dict(summary), sort_keys=False), encoding="utf-8")


def transfer_path() -> Path:
    return Path(str(resources.files("madmax.validate").joinpath("data", TRANSFER_FILE)))


@cache
def transfer_error() -> dict[str, Any] | None:
    """The shipped cross-architecture error (`data/transfer_error.yaml`), None when absent or empty."""
    import yaml

    path = transfer_path()
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data if data.get("rows") else None


@cache
def measured_architectures() -> frozenset[str]:
    """Architectures of the GPUs with validation rows in the shipped table."""
    gpus = {row["gpu"] for row in _table() if row["gpu"]}
    return frozenset(a for a in (architecture_of(g) for g in gpus) if a)


def band_rows(residuals: Iterable[tuple[str, str, str, int, float]]) -> list[dict[str, Any]]:
    """The table from (family, gpu, parallelism, num_gpus, signed error %) of validation rows: one row
    per group of each level with at least MIN_ROWS rows (empty key cells: any value)."""
    rows = [dict(zip(KEYS, (f, g, p, scale_bucket(n)), strict=True)) | {"e": e} for f, g, p, n, e in residuals]
    table = []
    for level in LEVELS:
        groups: dict[tuple[str, ...], list[float]] = {}
        for r in rows:
            groups.setdefault(tuple(r[k] for k in level), []).append(r["e"])
        for key, errors in sorted(groups.items()):
            if len(errors) < MIN_ROWS:
                continue
            e = np.asarray(errors)
            cells = dict(zip(level, key, strict=True))
            table.append({**{k: cells.get(k, "") for k in KEYS}, "rows": len(errors),
                          "p50_abs_pct": round(float(np.median(np.abs(e))), 2),
                          "p90_abs_pct": round(float(np.percentile(np.abs(e), 90)), 2),
                          "median_signed_pct": round(float(np.median(e)), 2)})
    return table


def write_bands(table: Sequence[Mapping[str, Any]], path: Path, note: str) -> None:
    """Write the table as CSV, after '#' comment lines saying how it was generated."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    header = "".join(f"# {line}\n" for line in note.splitlines())
    path.write_text(header + buffer.getvalue(), encoding="utf-8")


def bands_path() -> Path:
    return Path(str(resources.files("madmax.validate").joinpath("data", BANDS_FILE)))


@cache
def _table() -> tuple[dict[str, Any], ...]:
    path = bands_path()
    if not path.is_file():
        return ()
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return tuple({**r, "rows": int(r["rows"]), **{k: float(r[k]) for k in COLUMNS[5:]}}
                 for r in csv.DictReader(lines))


def _basis(level: tuple[str, ...]) -> str:
    return "same " + ", ".join(level) if level else "all validation rows"


def error_band(model_family: str, num_gpus: int, parallelism: str | Mapping[str, Any] | Any,
               gpu: str, architecture: str | None = None, kernels_from: str | None = None) -> dict[str, Any]:
    """Expected error of a prediction in this regime, from validation rows like it (scored cross-source).

    model_family: a family ('llama') or a model name ('llama-3.1-70b', 'meta-llama/Llama-3.1-70B'; not
    the schema's `family` 'decoder'); num_gpus >= 1;
    parallelism: 'tp+pp+dp', a strategy string 'tp=8,pp=4,dp=2,zero=1', a mapping of degrees or a
    `Strategy`; gpu: a catalog GPU name or alias. Returns p50_abs_pct and p90_abs_pct (median and 90th
    percentile of |e|, %), median_signed_pct (e > 0: predicted higher than measured), rows, basis (which
    rows: the first of `LEVELS` with >= MIN_ROWS rows) and matched (the keys of those rows).

    architecture: the GPU's architecture when it is not a catalog entry (a system file's own GPU); kernels_from:
    where its kernel efficiencies come from, for the note (e.g. "NVIDIA H200"). A GPU of an architecture with
    no validation rows gets the band widened by the cross-architecture error (module docstring) and two more
    keys: `note` ("no measured runs on this GPU: ...") and `widened_by` (the transfer error's p50 and p90).
    """
    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 1:
        raise ConfigError(f"num_gpus={num_gpus!r} must be a positive integer")
    query = {"family": family_of(model_family.rsplit("/", 1)[-1]), "gpu": _gpu_name(gpu),
             "parallelism": _group_of(parallelism), "scale": scale_bucket(num_gpus)}
    table = _table()
    for level in LEVELS:
        for row in table:
            if all(row[k] == query[k] for k in level) and all(row[k] == "" for k in KEYS if k not in level):
                band = {"p50_abs_pct": row["p50_abs_pct"], "p90_abs_pct": row["p90_abs_pct"],
                        "median_signed_pct": row["median_signed_pct"], "rows": row["rows"],
                        "basis": _basis(level), "matched": {k: query[k] for k in level}}
                return _unvalidated(band, query["gpu"], architecture or architecture_of(gpu), kernels_from)
    return {"p50_abs_pct": None, "p90_abs_pct": None, "median_signed_pct": None, "rows": 0,
            "basis": "no error-band table (run `madmax validate --write-bands`)", "matched": {}}


def _unvalidated(band: dict[str, Any], gpu: str, architecture: str | None, kernels_from: str | None) -> dict[str, Any]:
    """`band` as it stands for a GPU whose architecture has validation rows; else widened by the
    cross-architecture error, p' = sqrt(p^2 + t^2), with a note saying why."""
    if architecture is not None and architecture in measured_architectures():
        return band
    transfer = transfer_error()
    where = f"{gpu}, {architecture}" if architecture else gpu
    note = f"no measured runs on this GPU ({where}): kernel efficiency borrowed from {kernels_from or 'another GPU'}"
    # (kernels_from e.g. "NVIDIA H200, rescaled by mi300x's measured large-GEMM ceiling")
    if transfer is None:
        return {**band, "note": note + "; no cross-architecture error to widen the band by", "widened_by": None}
    t50, t90 = float(transfer["p50_abs_pct"]), float(transfer["p90_abs_pct"])
    widened = {"p50_abs_pct": round(math.hypot(band["p50_abs_pct"], t50), 2),
               "p90_abs_pct": round(math.hypot(band["p90_abs_pct"], t90), 2)}
    note += (f"; band widened by the cross-architecture error, ±{t50:.0f}% typical, ±{t90:.0f}% p90 "
             f"({transfer['rows']} validation rows on {', '.join(transfer['architectures'])} GPUs, kernels "
             f"measured on {transfer['profile_architecture']})")
    return {**band, **widened, "note": note, "widened_by": {"p50_abs_pct": t50, "p90_abs_pct": t90}}
