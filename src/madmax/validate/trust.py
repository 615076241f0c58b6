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
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from madmax.errors import ConfigError
from madmax.validate.inputs import model_family as family_of
from madmax.validate.inputs import parallelism_group

BANDS_FILE = "error_bands.csv"
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
               gpu: str) -> dict[str, Any]:
    """Expected error of a prediction in this regime, from validation rows like it (scored cross-source).

    model_family: a family ('llama') or a model name ('llama-3.1-70b', 'meta-llama/Llama-3.1-70B'; not
    the schema's `family` 'decoder'); num_gpus >= 1;
    parallelism: 'tp+pp+dp', a strategy string 'tp=8,pp=4,dp=2,zero=1', a mapping of degrees or a
    `Strategy`; gpu: a catalog GPU name or alias. Returns p50_abs_pct and p90_abs_pct (median and 90th
    percentile of |e|, %), median_signed_pct (e > 0: predicted higher than measured), rows, basis (which
    rows: the first of `LEVELS` with >= MIN_ROWS rows) and matched (the keys of those rows).
    """
    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 1:
        raise ConfigError(f"num_gpus={num_gpus!r} must be a positive integer")
    query = {"family": family_of(model_family.rsplit("/", 1)[-1]), "gpu": _gpu_name(gpu),
             "parallelism": _group_of(parallelism), "scale": scale_bucket(num_gpus)}
    table = _table()
    for level in LEVELS:
        for row in table:
            if all(row[k] == query[k] for k in level) and all(row[k] == "" for k in KEYS if k not in level):
                return {"p50_abs_pct": row["p50_abs_pct"], "p90_abs_pct": row["p90_abs_pct"],
                        "median_signed_pct": row["median_signed_pct"], "rows": row["rows"],
                        "basis": _basis(level), "matched": {k: query[k] for k in level}}
    return {"p50_abs_pct": None, "p90_abs_pct": None, "median_signed_pct": None, "rows": 0,
            "basis": "no error-band table (run `madmax validate --write-bands`)", "matched": {}}
