"""The schema of a sweep file (pydantic): its axes, what-ifs, co-design, training amount and search options.

Every model rejects unknown keys with the allowed ones; axes take one value or a list. See
`madmax.sweep.spec` for the file's shape and docs/sweeps.md for each field.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from madmax.config.base import Schema
from madmax.config.reliability import MAX_SPARES
from madmax.config.task import COMPUTE_DTYPES
from madmax.sweep.whatif import RESOURCES, multiplier

AXES = ("models", "systems", "num_gpus", "tasks", "global_batches", "seq_lens", "dtypes", "strategies", "stacks",
        "whatifs")
DTYPES = COMPUTE_DTYPES  # one list with simulate
TASKS = ("pretrain", "finetune")


class Mode(StrEnum):
    SIMULATE = "simulate"
    SEARCH = "search"


Resource = StrEnum("Resource", {r.upper(): r for r in RESOURCES})


class _Strict(Schema):
    """A madmax schema (unknown keys refused, every number finite and in range) that names the allowed keys."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [k for k in data if k not in cls.model_fields]
            if unknown:
                raise ValueError(f"{unknown[0]!r} is not a field; allowed: {', '.join(cls.model_fields)}")
        return data


class WhatIf(_Strict):
    """One hardware what-if: a multiplier per resource (1 leaves it as in the catalog)."""

    name: str | None = Field(None, description="Label of the what-if; default e.g. 'flops x2'.")
    flops: float = Field(1, gt=0, description="Multiplier of the GPU's peak FLOP/s (every dtype).")
    hbm_bandwidth: float = Field(1, gt=0, description="Multiplier of the HBM bandwidth.")
    hbm_capacity: float = Field(1, gt=0, description="Multiplier of the HBM capacity.")
    nvlink_bandwidth: float = Field(1, gt=0, description="Multiplier of the scale-up bandwidth.")
    nvlink_latency: float = Field(1, gt=0, description="Multiplier of the scale-up latency.")
    nic_bandwidth: float = Field(1, gt=0, description="Multiplier of the scale-out bandwidth.")
    nic_latency: float = Field(1, gt=0, description="Multiplier of the scale-out latency.")
    failure_rate: float = Field(1, gt=0, description="Multiplier of every interruption rate (time to train).")
    checkpoint_bandwidth: float = Field(1, gt=0, description="Multiplier of the checkpoint bandwidths.")
    restart_time: float = Field(1, gt=0, description="Multiplier of the restart, repair and warm-up times.")
    spares: int | None = Field(None, ge=0, le=MAX_SPARES, description="Spare nodes of the job (time to train), "
                               "replacing the profile's restart.spares.")

    def scales(self) -> dict[str, float]:
        out = {r: float(getattr(self, r)) for r in RESOURCES if getattr(self, r) != 1}
        return out | ({"spares": float(self.spares)} if self.spares is not None else {})


class Codesign(_Strict):
    """What-ifs improving each resource alone by each factor, and all of them together."""

    resources: list[Resource] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["flops", "hbm_bandwidth", "hbm_capacity", "nvlink_bandwidth", "nic_bandwidth"],
        description="Resources to improve; a latency improved k times is divided by k.")
    factors: list[PositiveFloat] = Field(default_factory=lambda: [0.5, 2.0, 4.0],
                                         description="Improvement factors (1 is the baseline, always included).")
    together: bool = Field(True, description="Also improve every listed resource at once by each factor.")

    def whatifs(self) -> list[tuple[WhatIf, str, float]]:
        """(what-if, resource or 'all' or 'baseline', improvement factor), the baseline first."""
        out = [(WhatIf(name="baseline"), "baseline", 1.0)]
        for f in (f for f in self.factors if f != 1):
            for r in self.resources:
                out.append((WhatIf(name=f"{r} x{f:g}", **{str(r): multiplier(str(r), f)}), str(r), f))
            if self.together and len(self.resources) > 1:
                scales = {str(r): multiplier(str(r), f) for r in self.resources}
                out.append((WhatIf(name=f"all x{f:g}", **scales), "all", f))
        return out


class Train(_Strict):
    """How much to train: tokens or samples (sequences); time, cost and energy are for this amount."""

    tokens: PositiveFloat | None = Field(None, description="Tokens to train.")
    samples: PositiveFloat | None = Field(None, description="Samples (sequences) to train.")
    reliability: str | dict | None = Field(None, description="Reliability profile of the time to train: a catalog "
                                                             "name (default llama3-h100; ideal: none), a file or a "
                                                             "mapping (docs/goodput.md).")

    @model_validator(mode="after")
    def _one(self) -> Train:
        if (self.tokens is None) == (self.samples is None):
            raise ValueError("give exactly one of tokens or samples")
        return self


class SearchOptions(_Strict):
    """Options of `madmax.search.api.find` for mode=search (see `madmax search --help`)."""

    objective: str = Field("throughput", description="throughput, time, cost or energy.")
    top: PositiveInt = Field(3, description="Best strategies kept per point (each simulated).")
    exact: PositiveInt | None = Field(None, description="Candidates re-simulated; default top.")
    refine: PositiveInt = Field(200, description="Candidates replayed step by step.")
    max_tp: PositiveInt | None = None
    max_pp: PositiveInt | None = None
    max_cp: PositiveInt | None = None
    max_vp: PositiveInt | None = None
    max_mbs: PositiveInt | None = None
    zero: list[int] | None = None
    recompute: list[str] | None = None
    sp: list[bool] | None = None
    hybrid: bool = True
    orders: list[str] | str | None = None
    memory_margin: float | str | None = Field(None, description="HBM each GPU keeps free: a share (0.05, '5%', "
                                              "default) or bytes ('4 GiB'); 0 uses it all.")
    tp_overlap: list[Literal[0, 1]] | None = Field(
        None, description="TP communication overlap settings the simulated candidates try ([0, 1]: each with tp > 1 "
                          "and sequence parallelism keeps the faster); default [0].")
    dispatcher: list[Literal["alltoall", "deepep"]] | None = Field(
        None, description="Token dispatchers the simulated MoE candidates try (['alltoall', 'deepep']: each with "
                          "ep > 1 keeps the faster); default ['alltoall'].")

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str) -> str:
        allowed = ("throughput", "time", "cost", "energy")
        if value not in allowed:
            raise ValueError(f"is not an objective; allowed: {', '.join(allowed)}")
        return value


def _listify(value: Any) -> Any:
    return value if isinstance(value, list) or value is None else [value]


class Group(_Strict):
    """The axes and settings of (part of) a sweep; unset fields inherit the sweep's."""

    name: str | None = Field(None, description="Label of the group (the `group_name` column).")
    mode: Mode | None = Field(None, description="simulate (default) or search.")
    models: list[str | dict] | None = Field(None, description="Catalog names, files, or inline models.")
    systems: list[str | dict] | None = Field(None, description="Catalog names, files, or inline systems.")
    num_gpus: list[PositiveInt | None] | None = Field(None, description="Cluster sizes in GPUs.")
    tasks: list[str] | None = Field(None, description="pretrain or finetune.")
    global_batches: list[PositiveInt | None] | None = Field(None, description="Sequences per optimizer step.")
    seq_lens: list[PositiveInt | None] | None = Field(None, description="Tokens per sequence.")
    dtypes: list[str | None] | None = Field(None, description="bf16, fp16, fp8 or fp32.")
    strategies: list[str | None] | None = Field(None, description="Strategy strings, e.g. 'tp=8,pp=4'.")
    stacks: list[str | dict | None] | None = Field(
        None, description="Training stacks: catalog names (`madmax catalog list stacks`), files or mappings; "
                          "default the catalog's default (megatron-core).")
    whatifs: list[WhatIf] | None = Field(None, description="Hardware what-ifs; default the catalog system.")
    codesign: Codesign | None = Field(None, description="Generate co-design what-ifs (added to whatifs).")
    train: Train | None = Field(None, description="Tokens or samples to train; default one iteration.")
    price_per_gpu_hour_usd: float | dict[str, float] | None = Field(
        None, description="USD per GPU-hour overriding the catalog: one number, or by system name.")
    search: SearchOptions | None = Field(None, description="Search options (mode=search).")

    @field_validator(*AXES, mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _listify(value)

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, value: list[str] | None) -> list[str] | None:
        for t in value or []:
            if t not in TASKS:
                raise ValueError(f"task {t!r} is not supported by sweeps; allowed: {', '.join(TASKS)}")
        return value

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str | None] | None) -> list[str | None] | None:
        for d in value or []:
            if d is not None and d not in DTYPES:
                raise ValueError(f"dtype {d!r} is not a compute dtype; allowed: {', '.join(DTYPES)}")
        return value


class SweepSpec(Group):
    """A sweep file: a group of axes, and optionally sub-groups overriding them."""

    name: str = Field("sweep", description="Name of the sweep (titles, default output folder).")
    groups: list[Group] = Field(default_factory=list, description="Sub-sweeps; default one, the top level.")
