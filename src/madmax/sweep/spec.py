"""The sweep file: which models, systems, cluster sizes, tasks and hardware what-ifs to evaluate.

    name: cloud-study
    mode: search                 # simulate: each strategy given; search: the best strategy per point
    models: llama-2-70b          # catalog names or files (relative to this file); a value or a list
    systems: [p4d.24xlarge, p5.48xlarge]
    num_gpus: [64, 128, 256, 512]
    tasks: pretrain              # pretrain or finetune
    global_batches: 1024         # sequences (samples) per optimizer step
    seq_lens: 4096
    dtypes: bf16
    strategies: ["tp=8,pp=4"]    # simulate: one point each; search: the candidates (default: every strategy)
    stacks: [megatron-core, fsdp2]  # training stacks (catalog names or files); default megatron-core
    whatifs: [{}, {name: fast-nic, nic_bandwidth: 2}]       # multipliers of catalog numbers (see whatif)
    codesign: {resources: [flops, nic_bandwidth], factors: [0.5, 2, 4], together: true}
    train: {tokens: 2.0e12}      # or {samples: 5.0e9}: time, GPU-hours, cost and energy to train this much,
                                 # with failures, checkpoints, restarts and stragglers (reliability: llama3-h100)
    price_per_gpu_hour_usd: {p5.48xlarge: 9.8}                # or one number for every system
    search: {objective: throughput, top: 3, refine: 200}
    groups:                      # optional sub-sweeps; each overrides the fields above
      - {models: dlrm-a, global_batches: 65536, seq_lens: null, train: {samples: 5.0e9}}

The points are the union over groups of the product of the axes (models x systems x num_gpus x tasks x
global_batches x seq_lens x dtypes x strategies x stacks x what-ifs). A null axis value takes simulate's default.
Each point has a key: a hash of everything that changes its row, so a sweep resumes exactly.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError, MadmaxError
from madmax.sweep.schema import Group, Mode, SearchOptions, SweepSpec, WhatIf
from madmax.sweep.whatif import COUNTS, LATENCIES, RELIABILITY_RESOURCES, describe


@dataclass(frozen=True)
class Point:
    """One evaluation: inputs only (no results). `key` identifies it across runs."""

    key: str
    index: int
    group: str
    mode: str
    model: str | dict
    model_name: str
    system: str | dict
    system_name: str
    num_gpus: int | None
    task: str
    global_batch: int | None
    seq_len: int | None
    dtype: str | None
    strategy: str | None
    candidates: tuple[str, ...]
    scales: tuple[tuple[str, float], ...]
    whatif: str
    whatif_resource: str
    whatif_factor: float
    train_tokens: float | None
    train_samples: float | None
    price: float | None
    search: tuple[tuple[str, Any], ...]
    power: float | None = None  # W per GPU at load (`--power`), over the system's node power
    reliability: str | dict | None = None  # the train amount's reliability profile (catalog name, file or mapping)
    stack: str | dict | None = None  # the training stack to load (catalog name, file or mapping); None: the default
    stack_name: str | None = None  # its name (the `stack` column)


@dataclass(frozen=True)
class Sweep:
    """A checked sweep file: its groups with inherited fields filled in, ready to expand into points."""

    spec: SweepSpec
    base_dir: Path
    groups: tuple[dict[str, Any], ...]
    prices: tuple[tuple[str, float], ...] = ()
    powers: tuple[tuple[str, float], ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    def count(self) -> int:
        """The number of points before repeated ones are dropped (at least len(points)), without expanding them:
        the sum over groups of the product of the axis lengths."""
        return sum(math.prod(len(axis) for axis in _axes(g)) for g in self.groups)

    def points(self) -> Iterator[Point]:
        """Every point once (a repeated point is skipped), in file order."""
        seen: set[str] = set()
        index = 0
        for g in self.groups:
            for point in _group_points(g, self, index):
                index += 1
                if point.key not in seen:
                    seen.add(point.key)
                    yield point

    def with_prices(self, prices: dict[str, float]) -> Sweep:
        """The sweep with USD per GPU-hour overrides by system name ('*' for every system) on top."""
        return Sweep(self.spec, self.base_dir, self.groups, tuple(prices.items()), self.powers)

    def with_powers(self, powers: dict[str, float]) -> Sweep:
        """The sweep with W-per-GPU power overrides by system name ('*' for every system) on top."""
        return Sweep(self.spec, self.base_dir, self.groups, self.prices, tuple(powers.items()))


def load_sweep(source: str | Path | dict, base_dir: Path | None = None) -> Sweep:
    """A sweep from a YAML/JSON file or a mapping; ConfigError (one sentence naming the field) if bad."""
    from madmax.config.loaders import check_shape, read_file, validate

    if isinstance(source, dict):
        check_shape(source, "sweep")  # a dict from YAML text (the web's) may hold an alias bomb
        data, base = source, base_dir or Path.cwd()
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"sweep file {str(path)!r} does not exist")
        data, base = read_file(path, "sweep"), base_dir or path.resolve().parent
    spec = validate(SweepSpec, data, "sweep")
    groups = spec.groups or [None]
    resolved = tuple(_resolve_group(spec, g, i, base) for i, g in enumerate(groups))
    return Sweep(spec=spec, base_dir=base, groups=resolved)


_INHERITED = tuple(f for f in Group.model_fields if f != "name")


def _resolve_group(spec: SweepSpec, group: Group | None, i: int, base: Path) -> dict[str, Any]:
    """The effective fields of group i, each with the path of the file field it came from."""
    out: dict[str, Any] = {"where": {}}
    for field in _INHERITED:
        if group is not None and field in group.model_fields_set:
            out[field], out["where"][field] = getattr(group, field), f"sweep.groups.{i}.{field}"
        else:
            out[field], out["where"][field] = getattr(spec, field), f"sweep.{field}"
    out["name"] = (group.name if group is not None and group.name else None) or (
        f"group{i + 1}" if spec.groups else spec.name)
    out["mode"] = out["mode"] or Mode.SIMULATE
    for field in ("models", "systems"):
        if not out[field]:
            raise ConfigError(f"{out['where'][field]} is required: a catalog name, a file, or a list of them")
    out["models"] = [_check_input("models", v, f"{out['where']['models']}.{k}", base)
                     for k, v in enumerate(out["models"])]
    out["systems"] = [_check_input("systems", v, f"{out['where']['systems']}.{k}", base)
                      for k, v in enumerate(out["systems"])]
    out["stacks"] = [None if v is None else _check_stack(v, f"{out['where']['stacks']}.{k}", base)
                     for k, v in enumerate(out["stacks"] or [None])]
    _check_strategies(out)
    _check_prices(out)
    out["reliability"] = _check_reliability(out["train"], out["where"]["train"], base) if out["train"] else None
    if out["mode"] is Mode.SEARCH:
        _check_search(out)
    return out


def _check_reliability(train: Any, where: str, base: Path) -> tuple[str | dict, Any]:
    """(the reliability profile to load, its identity for the key) of a `train` amount, or ConfigError naming it."""
    from madmax.config.reliability import load_reliability, reliability_names

    def in_catalog(name: str) -> str | None:
        return name.strip().lower() if name.strip().lower() in reliability_names() else None

    value = reliability_names()[0] if train.reliability is None else train.reliability
    value, ident, loaded = _resolve(value, f"{where}.reliability", base, load_reliability, in_catalog)
    return (loaded.name if "catalog" in ident else value), ident


def _check_input(kind: str, value: str | dict, where: str, base: Path) -> tuple[str | dict, Any, str]:
    """(the value to load, its identity for the key, its name), or ConfigError naming `where`."""
    from madmax.config.loaders import find_in_catalog, load_model, load_system

    def in_catalog(name: str) -> str | None:
        entry = find_in_catalog(kind, name)
        return None if entry is None else entry["name"]

    value, ident, loaded = _resolve(value, where, base, load_model if kind == "models" else load_system, in_catalog)
    return value, ident, loaded.name


def _check_stack(value: str | dict, where: str, base: Path) -> tuple[str | dict, Any, str]:
    """(the training stack to load, its identity for the key, its name), or ConfigError naming `where`."""
    from madmax.config.training_stack import load_training_stack, training_stack_names

    def in_catalog(name: str) -> str | None:
        return name.strip().lower() if name.strip().lower() in training_stack_names() else None

    value, ident, loaded = _resolve(value, where, base, load_training_stack, in_catalog)
    return value, ident, loaded.name


def _resolve(value: str | dict, where: str, base: Path, loader: Any, in_catalog: Any) -> tuple[str | dict, Any, Any]:
    """A catalog name, a file (relative to the sweep file) or a mapping: (the value to load, its identity for the
    key: the catalog name, the file's name and hash, or the mapping, and what `loader` made of it), or
    ConfigError naming `where`."""
    from madmax.config.checks import is_file

    if isinstance(value, str) and in_catalog(value) is None:
        path = Path(value) if Path(value).is_absolute() else base / value
        if is_file(path):
            value = str(path)
    try:
        loaded = loader(value)
    except MadmaxError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if isinstance(value, dict):
        ident: Any = {"inline": value}
    elif (name := in_catalog(value)) is not None:
        ident = {"catalog": name}
    else:
        ident = {"file": Path(value).name, "sha256": hashlib.sha256(Path(value).read_bytes()).hexdigest()}
    return value, ident, loaded


def _check_strategies(g: dict[str, Any]) -> None:
    from madmax.config.strategy import parse_strategy

    canon = []
    for k, s in enumerate(g["strategies"] or [None]):
        try:
            parsed = parse_strategy(s)
        except MadmaxError as exc:
            raise ConfigError(f"{g['where']['strategies']}.{k}={s!r}: {exc}") from None
        canon.append((s, json.dumps(parsed.model_dump(mode="json", exclude_defaults=True), sort_keys=True)))
    g["strategies"] = canon


def _check_prices(g: dict[str, Any]) -> None:
    price = g["price_per_gpu_hour_usd"]
    if isinstance(price, dict):
        names = {n.lower() for _, _, n in g["systems"]}
        for name, usd in price.items():
            if name.lower() not in names:
                raise ConfigError(f"{g['where']['price_per_gpu_hour_usd']}.{name} is not a system of this sweep; "
                                  f"allowed: {', '.join(sorted(names))}")
            if usd < 0:
                raise ConfigError(f"{g['where']['price_per_gpu_hour_usd']}.{name}={usd} must be >= 0 USD")
    elif price is not None and price < 0:
        raise ConfigError(f"{g['where']['price_per_gpu_hour_usd']}={price} must be >= 0 USD per GPU-hour")


def _check_search(g: dict[str, Any]) -> None:
    from madmax.config.loaders import load_model

    if any(b is None for b in g["global_batches"] or [None]):
        raise ConfigError(f"{g['where']['global_batches']} is required with mode=search (sequences per "
                          "optimizer step, e.g. 1024)")
    given = [s for s, _ in g["strategies"] if s is not None]
    if not given:
        for k, (value, _, name) in enumerate(g["models"]):
            if load_model(value).family not in ("decoder", "vit"):  # the families the search enumerates
                raise ConfigError(f"{g['where']['models']}.{k}={name!r} is a {load_model(value).family} model, "
                                  "which mode=search cannot enumerate; allowed: give strategies to choose from")
    opts = g["search"] or SearchOptions()
    if opts.exact is not None and opts.exact < opts.top:
        raise ConfigError(f"{g['where']['search']}.exact={opts.exact} must be at least top={opts.top}")


def _price_of(g: dict[str, Any], system_name: str, overrides: tuple[tuple[str, float], ...]) -> float | None:
    by_name = {k.lower(): v for k, v in overrides}
    if system_name.lower() in by_name:
        return by_name[system_name.lower()]
    if "*" in by_name:
        return by_name["*"]
    price = g["price_per_gpu_hour_usd"]
    if isinstance(price, dict):
        return {k.lower(): v for k, v in price.items()}.get(system_name.lower())
    return price


def _power_of(system_name: str, overrides: tuple[tuple[str, float], ...]) -> float | None:
    by_name = {k.lower(): v for k, v in overrides}
    return by_name.get(system_name.lower(), by_name.get("*"))


def _whatifs(g: dict[str, Any]) -> list[tuple[WhatIf, str, float]]:
    out = []
    for w in g["whatifs"] or ([] if g["codesign"] else [WhatIf()]):
        scales = w.scales()
        if not g["train"] and (given := [r for r in (*RELIABILITY_RESOURCES, *COUNTS) if r in scales]):
            raise ConfigError(f"whatif {w.name or describe(scales)!r}: {given[0]} applies to the time to train an "
                              "amount (failures, checkpoints, restarts); allowed: give the group train: {tokens: N}, "
                              "or leave it out")
        if not scales:
            resource, factor = "baseline", 1.0
        elif len(scales) == 1:
            (resource, m), = scales.items()
            factor = 1 / m if resource in LATENCIES else m
        else:
            resource, factor = "+".join(scales), float("nan")
        out.append((w, resource, factor))
    if g["codesign"]:
        reliability = [str(r) for r in g["codesign"].resources if str(r) in RELIABILITY_RESOURCES]
        if reliability and not g["train"]:
            raise ConfigError(f"codesign.resources has {reliability[0]}, which applies to the time to train an amount; "
                              "allowed: give the group train: {tokens: N}, or leave it out")
        out += g["codesign"].whatifs()
    return out


def _axes(g: dict[str, Any]) -> list[list[Any]]:
    """The value lists of group g whose product is its points: models, systems, num_gpus, tasks, global
    batches, sequence lengths, dtypes, strategies, training stacks and what-ifs."""
    # In search mode the strategies are the candidates of one point, not an axis.
    strategies = g["strategies"] if Mode(g["mode"]) is Mode.SIMULATE else [(None, None)]
    return [g["models"], g["systems"], g["num_gpus"] or [None], g["tasks"] or ["pretrain"],
            g["global_batches"] or [None], g["seq_lens"] or [None], g["dtypes"] or [None], strategies, g["stacks"],
            _whatifs(g)]


def _group_points(g: dict[str, Any], sweep: Sweep, start: int) -> Iterator[Point]:
    mode = Mode(g["mode"])
    opts = (g["search"] or SearchOptions()) if mode is Mode.SEARCH else None
    search = tuple(sorted(opts.model_dump(mode="json").items())) if opts else ()
    train = g["train"]
    candidates = tuple(s for s, _ in g["strategies"] if s is not None) if mode is Mode.SEARCH else ()
    axes = itertools.product(*_axes(g))
    for i, (model, system, n, task, gb, seq, dtype, (strategy, canon), stack, (w, resource, factor)) in enumerate(axes):
        price = _price_of(g, system[2], sweep.prices)
        power = _power_of(system[2], sweep.powers)
        scales = tuple(sorted(w.scales().items()))
        ident = {"mode": mode.value, "model": model[1], "system": system[1], "num_gpus": n, "task": task,
                 "global_batch": gb, "seq_len": seq, "dtype": dtype, "strategy": canon,
                 "candidates": list(candidates), "scales": scales,
                 "train": train.model_dump(exclude={"reliability"}) if train else None, "price": price,
                 "search": search}
        if train:  # the time to train carries the goodput model's terms, by this profile
            ident["reliability"] = g["reliability"][1]
        if power is not None:  # only then: the keys of sweeps without --power stay as they were
            ident["power"] = power
        if stack is not None:  # likewise for sweeps without stacks
            ident["stack"] = stack[1]
        key = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]
        yield Point(key=key, index=start + i, group=g["name"], mode=mode.value, model=model[0],
                    model_name=model[2], system=system[0], system_name=system[2],
                    num_gpus=n, task=task, global_batch=gb, seq_len=seq, dtype=dtype, strategy=strategy,
                    candidates=candidates, scales=scales, whatif=w.name or describe(dict(scales)),
                    whatif_resource=resource, whatif_factor=factor,
                    train_tokens=train.tokens if train else None, train_samples=train.samples if train else None,
                    price=price, search=search, power=power,
                    reliability=g["reliability"][0] if g["reliability"] else None,
                    stack=None if stack is None else stack[0], stack_name=None if stack is None else stack[2])
