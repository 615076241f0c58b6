"""A user's CSV of measured runs as a `Dataset`, in either documented format (data/README.md).

- **published format** (the header of `published_dev.csv`): each row goes to the loader its `source`
  names (`Narayanan...`, `Korthikanti...`, `NVIDIA/NeMo...`, with their software defaults); rows of any
  other source take the Megatron-Core defaults of the NeMo loader, listed in the row's assumptions.
- **vTrain format** (`# GPUs`, ..., `iteration time (ms)`): Megatron-DeepSpeed on DGX A100 nodes as
  vTrain's files; rows of more than 8 GPUs get vTrain's 800 Gb/s per node between nodes.

The dataset is named after the file (its stem). A file that is neither format, or a number column that
does not hold a number, is a `ConfigError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

from madmax.config.checks import shown
from madmax.errors import ConfigError
from madmax.validate.datasets import (
    _NEMO,
    VTRAIN_SCALE_OUT_GBPS,
    Case,
    Dataset,
    _published_case,
    _rows_of,
    _vtrain_case,
    build_dataset,
    load_automodel_moe,
    load_korthikanti2022,
    load_megatron_bridge_moe,
    load_narayanan2021,
    load_nemo,
    row_int,
)
from madmax.validate.inputs import system_for

VTRAIN_COLUMNS = ("# GPUs", "global batch", "micro batch", "hidden size", "attention heads", "# layers",
                  "sequence length", "tensor parallelism", "data parallelism", "pipeline parallelism",
                  "iteration time (ms)")
PUBLISHED_COLUMNS = ("source", "source_detail", "task", "model", "layers", "hidden", "heads", "kv_heads",
                     "ffn_hidden", "vocab", "seq_len", "gpu", "num_gpus", "gpus_per_node", "intra_bw_GBps",
                     "inter_bw_GBps", "dtype", "tp", "pp", "dp", "cp", "ep", "vp", "zero_or_fsdp", "recompute",
                     "sp", "global_batch", "micro_batch", "metric", "value", "unit")
PUBLISHED_NUMBERS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "num_gpus",
                     "gpus_per_node", "intra_bw_GBps", "inter_bw_GBps", "tp", "pp", "dp", "cp", "ep", "vp",
                     "global_batch", "micro_batch", "value")
SOURCES = {"Narayanan": load_narayanan2021, "Korthikanti": load_korthikanti2022, "NVIDIA/NeMo": load_nemo,
           "NVIDIA-NeMo/Megatron-Bridge": load_megatron_bridge_moe, "NVIDIA-NeMo/Automodel": load_automodel_moe}
GENERIC_NOTE = "source not one of Narayanan, Korthikanti, NVIDIA/NeMo: Megatron-Core (NeMo) defaults assumed"


def _check_numbers(rows: list[tuple[str, dict[str, str]]], columns: tuple[str, ...]) -> None:
    for row_id, row in rows:
        for column in columns:
            text = row.get(column, "")
            try:
                number = float(text) if text else 1.0
            except ValueError:
                raise ConfigError(f"{row_id} column {column!r}={shown(text)} is not a number") from None
            if not (math.isfinite(number) and number > 0):  # sizes, degrees and measured values
                raise ConfigError(f"{row_id} column {column!r}={shown(text)} is not a positive finite number; "
                                  "allowed: a size, a degree or a measured value above 0")


def _generic(name: str, rows: list[tuple[str, dict[str, str]]]) -> Dataset:
    def mapper(row_id: str, row: dict[str, str]) -> Case:
        return _published_case(name, row_id, row, defaults=_NEMO, notes=[GENERIC_NOTE])

    return build_dataset(name, "user rows, Megatron-Core defaults", rows, mapper)


def _published_dataset(name: str, rows: list[tuple[str, dict[str, str]]]) -> Dataset:
    parts, rest = [], list(rows)
    for prefix, loader in SOURCES.items():
        mine = [(i, r) for i, r in rest if r["source"].startswith(prefix)]
        rest = [(i, r) for i, r in rest if not r["source"].startswith(prefix)]
        if mine:
            parts.append(loader(mine))
    if rest:
        parts.append(_generic(name, rest))
    cases = tuple(replace(c, dataset=name) for d in parts for c in d.cases)
    unmapped = tuple(replace(u, dataset=name) for d in parts for u in d.unmapped)
    return Dataset(name, "user rows (published format)", cases, unmapped)


def _vtrain_dataset(name: str, rows: list[tuple[str, dict[str, str]]]) -> Dataset:
    single, multi = system_for("a100-80gb", 8), system_for("a100-80gb", 8, None, VTRAIN_SCALE_OUT_GBPS)

    def mapper(row_id: str, row: dict[str, str]) -> Case:
        return _vtrain_case(name, row_id, row, single if (row_int(row, "# GPUs") or 0) <= 8 else multi)

    return build_dataset(name, "user rows (vTrain format)", rows, mapper)


def load_csv(path: str | Path) -> Dataset:
    """The rows of a user's CSV file in the published or the vTrain format (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"dataset file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"dataset file {path.name} cannot be read as UTF-8 text ({exc})") from None
    header = [h.strip() for h in next(csv.reader(text.splitlines()), [])]
    rows = list(_rows_of(text, path.name))
    name = path.stem
    if all(c in header for c in VTRAIN_COLUMNS):
        _check_numbers(rows, VTRAIN_COLUMNS)
        kind, dataset = "vTrain", _vtrain_dataset
    elif all(c in header for c in PUBLISHED_COLUMNS):
        _check_numbers(rows, PUBLISHED_NUMBERS)
        kind, dataset = "published", _published_dataset
    else:
        vtrain_missing = [c for c in VTRAIN_COLUMNS if c not in header]
        published_missing = [c for c in PUBLISHED_COLUMNS if c not in header]
        missing = min(vtrain_missing, published_missing, key=len)
        raise ConfigError(f"dataset file {path.name} lacks the column(s) {', '.join(map(repr, missing[:6]))}; "
                          "allowed: the published_dev.csv or the vTrain header (docs/validation.md)")
    if not rows:
        raise ConfigError(f"dataset file {path.name} has a {kind} header but no rows")
    return dataset(name, rows)
