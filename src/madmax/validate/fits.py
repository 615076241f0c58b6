"""Every fitted constant, the sources it was fitted on, and leave-one-source-out validation.

A constant fitted to the end-to-end rows of one source improves that source and says nothing about the
others; scoring the source with it is an in-sample figure. `catalog/calibration/fits.yaml` lists each fit
(its level, sources, range, where it applies, and a *prior*: what a simulation uses without it). The
cross-source run scores every source with the fits of its own rows replaced by their priors:

- a fit of another source stays: that is the point of a fit, to predict what it never saw;
- a fit of the scored source is refitted without it: every shipped end-to-end fit draws on one source, so
  nothing is left to refit on and its prior stands in (a fit over several sources would need a refit on
  the others, which `cross_source_case` refuses to skip: `Fit.sources` of two or more raises);
- a fit with no prior (`prior: null`) leaves its own source scored in-sample only, named as such.

The rule the fits are held to is written in docs/calibration.md, "The rule for fits", and checked by
tests/validate/test_fit_rule.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from madmax.validate.datasets import Case, Dataset, with_stack
from madmax.validate.runner import RowResult, Stats
from madmax.validate.stack import SUFFIX

FITS_FILE = "calibration/fits.yaml"
CROSS = "+cross"  # suffix of a dataset re-run with its own source's fits left out
Task = Literal["training", "inference", "serving"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    group: Literal["dense", "moe", "dlrm", "serving", "vit"]
    title: str
    datasets: list[str]
    stack: str | None = Field(None, description="The training stack the rows ran under, where the dataset runs "
                                                "them under the default.")


class Applies(_Strict):
    stacks: list[str] | None = None
    dtypes: list[str] | None = None
    tasks: list[Task] | None = None
    gpus: list[str] | None = None


class Prior(_Strict):
    profile: str | None = Field(None, description="A compute profile in place of the case's.")
    wgrad_fraction: dict[str, float] | None = Field(None, description="Weight-gradient rates in place of the fit's.")


class Fit(_Strict):
    name: str
    file: str
    what: str
    level: Literal["kernel", "collective", "end-to-end"]
    data: str
    sources: list[str]
    kernel_data: str = ""
    range: str
    applies_to: Applies = Applies()
    beyond_range: str = ""
    prior: Prior | None
    adopted: bool = Field(True, description="Applied by default; a fit that failed the rule is kept on record only.")
    not_adopted: str = Field("", description="Why the fit is not applied (the evidence).")
    with_it: Prior | None = Field(None, description="A fit not adopted: the override that applies it, to show "
                                                    "its effect.")
    unmeasured: str = Field("", description="An adopted fit applied to other sources' rows without a prior: why its "
                                            "cross-source effect is not measured yet, and what would measure it.")


class Registry(_Strict):
    sources: dict[str, Source]
    fits: list[Fit]

    def source_of(self, dataset: str) -> str:
        """The source of a dataset (a re-run's is its base's; a user's CSV is a source of its own)."""
        base = dataset.split("+", 1)[0]
        for name, source in self.sources.items():
            if base in source.datasets:
                return name
        return base

    def fitted_on(self, source: str) -> list[Fit]:
        """The adopted fits drawn on `source` (a fit not adopted is not applied, so nothing to leave out)."""
        return [f for f in self.fits if source in f.sources and f.adopted]


@cache
def load_fits() -> Registry:
    from madmax.hardware.profile import catalog_path

    return Registry.model_validate(yaml.safe_load(catalog_path(FITS_FILE).read_text(encoding="utf-8")))


def task_of(kwargs: Mapping[str, Any]) -> Task:
    """training, inference (a training-engine forward pass, as DLRM's) or serving (an LLM serving run)."""
    if "prompt_len" in kwargs:
        return "serving"
    task = kwargs.get("task")
    kind = task.get("kind") if isinstance(task, Mapping) else task
    return "inference" if kind == "inference" else "training"


def _stack_of(kwargs: Mapping[str, Any]) -> str:
    from madmax.config.training_stack import load_training_stack

    stack = kwargs.get("stack")
    return stack if isinstance(stack, str) else load_training_stack(stack).name


def _gpu_of(kwargs: Mapping[str, Any]) -> str:
    from madmax.config.loaders import load_system

    return load_system(kwargs["system"]).gpu.name


def applies(fit: Fit, kwargs: Mapping[str, Any]) -> bool:
    """Whether a simulation with these arguments uses `fit`."""
    a = fit.applies_to
    return ((a.tasks is None or task_of(kwargs) in a.tasks)
            and (a.stacks is None or _stack_of(kwargs) in a.stacks)
            and (a.dtypes is None or str(kwargs.get("dtype")) in a.dtypes)
            and (a.gpus is None or _gpu_of(kwargs) in a.gpus))


def _profile_of(kwargs: Mapping[str, Any]) -> Any:
    """The compute profile a simulation with `kwargs` runs with: its own, its stack's runtime, or the default."""
    from madmax.config.training_stack import load_training_stack
    from madmax.hardware.profile import load_profile

    given = kwargs.get("calibration")
    if given is None and task_of(kwargs) != "serving":
        given = load_training_stack(kwargs.get("stack")).calibration_for(task_of(kwargs) == "inference")
    return load_profile(given)


def _with_priors(kwargs: dict[str, Any], fits: Sequence[Fit]) -> dict[str, Any]:
    return _overridden(kwargs, [f.prior for f in fits if f.prior is not None])


def _overridden(kwargs: dict[str, Any], overrides: Sequence[Prior]) -> dict[str, Any]:
    from madmax.hardware.profile import load_profile

    named = [o.profile for o in overrides if o.profile]
    updates = {k: v for o in overrides for k, v in o.model_dump(exclude_none=True, exclude={"profile"}).items()}
    if len(set(named)) > 1:
        raise ValueError(f"overrides name different profiles: {', '.join(named)}")
    if not updates:
        return {**kwargs, "calibration": named[0]} if named else kwargs
    profile = load_profile(named[0]) if named else _profile_of(kwargs)
    return {**kwargs, "calibration": profile.model_copy(update=updates)}


def cross_source_case(case: Case, registry: Registry | None = None) -> Case | None:
    """`case` with the fits of its own source left out (their priors in place), under its source's stack;
    the case itself when nothing changes; None when a fit of its source has no prior (in-sample only)."""
    registry = registry or load_fits()
    source = registry.source_of(case.dataset)
    stack = registry.sources[source].stack if source in registry.sources else None
    moved = with_stack(case, stack) if stack and case.kwargs.get("stack") != stack else case
    own = [f for f in registry.fitted_on(source) if applies(f, moved.kwargs)]
    for f in own:
        if len(f.sources) > 1:
            raise ValueError(f"fit {f.name} draws on sources {f.sources}: it must be refitted without {source}, "
                             "which madmax.validate.fits does not do yet")
    if any(f.prior is None for f in own):
        return None
    if not own:
        return moved
    kwargs = _with_priors(dict(moved.kwargs), own)
    left = "; ".join(f"{f.name} left out ({f.file}, fitted on {source})" for f in own)
    return replace(moved, kwargs=kwargs, assumptions=(*moved.assumptions, f"cross-source: {left}"))


def cross_source_datasets(datasets: Sequence[Dataset]) -> tuple[list[Dataset], dict[str, str]]:
    """The re-runs of `datasets` (baselines only) whose rows change with their own source's fits left out,
    and the way each dataset is scored cross-source: 'same' (no fit of its own applies: its rows are its
    cross-source score), 'rerun' (its `+cross` dataset) or 'in-sample only' (a fit without a prior)."""
    registry = load_fits()
    out, how = [], {}
    for d in datasets:
        if d.baseline is not None:
            continue
        crossed = [cross_source_case(c, registry) for c in d.cases]
        if any(c is None for c in crossed):
            how[d.name] = "in-sample only"
        elif all(c is orig for c, orig in zip(crossed, d.cases, strict=True)):
            how[d.name] = "same"
        else:
            cases = tuple(replace(c, dataset=d.name + CROSS) for c in crossed if c is not None)
            out.append(Dataset(d.name + CROSS, f"{d.name} with its own source's fits left out", cases, (),
                               baseline=d.name))
            how[d.name] = "rerun"
    return out, how


WITHOUT = "+without_"  # suffix of a dataset re-run without one fit of another source
WITH = "+with_"  # suffix of a dataset re-run with a fit that is not adopted


def cross_source_names(names: Iterable[str]) -> set[str]:
    """Of a report's dataset names, those whose rows are the cross-source score: each baseline dataset's
    `+cross` re-run where it has one, else the dataset itself (re-runs of any other kind left out)."""
    names = set(names)
    return {n + CROSS if n + CROSS in names else n for n in names if "+" not in n}


def fit_effect_datasets(datasets: Sequence[Dataset]) -> list[Dataset]:
    """The re-runs that show each end-to-end fit's effect: an adopted fit's prior on the rows of the *other*
    sources it applies to (does a constant fitted on one source help the sources it never saw?); a fit not
    adopted applied (`with_it`) to every row it would apply to, its own source's and the others'."""
    registry = load_fits()
    out = []
    for fit in registry.fits:
        if not fit.sources or (fit.prior if fit.adopted else fit.with_it) is None:
            continue
        for d in datasets:
            own = registry.source_of(d.name) in fit.sources
            if d.baseline is not None or (own and fit.adopted):
                continue
            suffix, override, told = ((WITHOUT, fit.prior, "without") if fit.adopted else (WITH, fit.with_it, "with"))
            name = d.name + suffix + fit.name
            cases = tuple(replace(c, dataset=name, kwargs=_overridden(dict(c.kwargs), [override]),
                                  assumptions=(*c.assumptions, f"{told} {fit.name} ({fit.file})"))
                          for c in d.cases if applies(fit, c.kwargs))
            if cases:
                out.append(Dataset(name, f"{d.name} {told} fit {fit.name}", cases, (), baseline=d.name))
    return out


@dataclass(frozen=True)
class FitEffect:
    """One fit's effect: on its own sources (shipped against its prior, in-sample) and on the others."""

    fit: str
    own_rows: int
    own_with: Stats | None
    own_without: Stats | None
    other_rows: int
    other_with: Stats | None
    other_without: Stats | None

    def to_dict(self) -> dict[str, Any]:
        return {k: (asdict(v) if isinstance(v, Stats) else v) for k, v in self.__dict__.items()}


def fit_effects(rows: Sequence[RowResult]) -> tuple[FitEffect, ...]:
    """Each end-to-end fit with a prior: its own sources' rows with it (the datasets' shipped rows where their
    `+cross` re-run left only it out) and without it (the `+cross` rows), and the other sources' rows it
    applies to with and without it (`fit_effect_datasets`)."""
    registry = load_fits()
    by_dataset: dict[str, list[RowResult]] = {}
    for r in rows:
        by_dataset.setdefault(r.case.dataset, []).append(r)
    effects = []
    for fit in registry.fits:
        if not fit.sources or (fit.prior if fit.adopted else fit.with_it) is None:
            continue
        if not fit.adopted:
            effects.append(_effect_not_adopted(fit, by_dataset, registry))
            continue
        own_with, own_without = [], []
        for name, results in by_dataset.items():
            if not name.endswith(CROSS) or registry.source_of(name) not in fit.sources:
                continue
            stem = name[:-len(CROSS)]
            base = {**_by_row(by_dataset.get(stem, [])), **_by_row(by_dataset.get(stem + SUFFIX, []))}
            for r in results:
                if _left_out(r) == {fit.name} and r.case.row_id in base and _same_stack(r, base[r.case.row_id]):
                    own_without.append(r)
                    own_with.append(base[r.case.row_id])
        other_with, other_without = [], []
        for name, results in by_dataset.items():
            if name.endswith(WITHOUT + fit.name):
                base = _by_row(by_dataset.get(name[:-len(WITHOUT + fit.name)], []))
                other_without += results
                other_with += [base[r.case.row_id] for r in results if r.case.row_id in base]
        effects.append(FitEffect(fit.name, len(own_without), Stats.of(own_with), Stats.of(own_without),
                                 len(other_without), Stats.of(other_with), Stats.of(other_without)))
    return tuple(effects)


def _effect_not_adopted(fit: Fit, by_dataset: Mapping[str, list[RowResult]], registry: Registry) -> FitEffect:
    """A fit not adopted: each row it would apply to with it (its `+with_` re-run) and as shipped (without)."""
    rows: dict[bool, tuple[list[RowResult], list[RowResult]]] = {True: ([], []), False: ([], [])}
    for name, results in by_dataset.items():
        if not name.endswith(WITH + fit.name):
            continue
        stem = name[:-len(WITH + fit.name)]
        with_it, without = rows[registry.source_of(stem) in fit.sources]
        base = _by_row(by_dataset.get(stem, []))
        with_it += [r for r in results if r.case.row_id in base]
        without += [base[r.case.row_id] for r in results if r.case.row_id in base]
    (own_with, own_without), (other_with, other_without) = rows[True], rows[False]
    return FitEffect(fit.name + " (not adopted)", len(own_with), Stats.of(own_with), Stats.of(own_without),
                     len(other_with), Stats.of(other_with), Stats.of(other_without))


def _by_row(results: Sequence[RowResult]) -> dict[str, RowResult]:
    return {r.case.row_id: r for r in results}


def _left_out(r: RowResult) -> set[str]:
    """The fits a `+cross` row left out: its source's adopted fits that apply to it."""
    registry = load_fits()
    return {f.name for f in registry.fitted_on(registry.source_of(r.case.dataset)) if applies(f, r.case.kwargs)}


def _same_stack(a: RowResult, b: RowResult) -> bool:
    return a.case.kwargs.get("stack") == b.case.kwargs.get("stack")


GROUP_TITLES = {"dense": "dense training", "moe": "MoE training", "dlrm": "DLRM training and inference",
                "serving": "LLM serving"}  # the groups pooled in the table; vit (reference predictions) is not
BEYOND_PCT = 25.0  # rows beyond this |error| are counted in the table


@dataclass(frozen=True)
class SourceScore:
    """One source (or a group of them): its rows scored cross-source and with the shipped fits."""

    name: str
    title: str
    scored: str  # "cross-source", "no fit of its own" or "in-sample only"
    left_out: tuple[str, ...]  # the fits of its own rows replaced by their priors
    cross: Stats | None
    shipped: Stats | None
    cross_beyond: int
    shipped_beyond: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "scored": self.scored, "left_out": list(self.left_out),
                "cross": None if self.cross is None else asdict(self.cross),
                "shipped": None if self.shipped is None else asdict(self.shipped),
                f"cross_beyond_{BEYOND_PCT:g}_pct": self.cross_beyond,
                f"shipped_beyond_{BEYOND_PCT:g}_pct": self.shipped_beyond}


def _beyond(rows: Sequence[RowResult]) -> int:
    return sum((r.abs_error_pct or 0.0) > BEYOND_PCT for r in rows)


def _score(name: str, title: str, scored: str, left_out: Sequence[str], cross: Sequence[RowResult],
           shipped: Sequence[RowResult]) -> SourceScore:
    return SourceScore(name, title, scored, tuple(left_out), Stats.of(cross), Stats.of(shipped), _beyond(cross),
                       _beyond(shipped))


def cross_source_scores(rows: Sequence[RowResult], how: Mapping[str, str]) -> tuple[SourceScore, ...]:
    """Per source, then per group and over all training rows: the cross-source rows (a dataset's `+cross`
    re-run, else its own rows) against the rows with the shipped fits (each stack's profile: a `+stack`
    re-run, held-out rows only, in place of its dataset)."""
    registry = load_fits()
    by_dataset: dict[str, list[RowResult]] = {}
    for r in rows:
        by_dataset.setdefault(r.case.dataset, []).append(r)
    per_source: dict[str, tuple[list[RowResult], list[RowResult], set[str]]] = {}
    for dataset, way in how.items():
        source = registry.source_of(dataset)
        cross, shipped, ways = per_source.setdefault(source, ([], [], set()))
        cross += by_dataset.get(dataset + CROSS if way == "rerun" else dataset, [])
        shipped += by_dataset.get(dataset + SUFFIX) or by_dataset.get(dataset, [])
        ways.add(way)
    scores, pooled = [], {}
    for source, (cross, shipped, ways) in per_source.items():
        known = registry.sources.get(source)
        left = [f.name for f in registry.fitted_on(source) if f.prior is not None
                and any(applies(f, r.case.kwargs) for r in cross)]
        scored = ("in-sample only" if "in-sample only" in ways else "cross-source" if left else "no fit of its own")
        scores.append(_score(source, known.title if known else source, scored, left, cross, shipped))
        group = known.group if known else "user"
        if group in GROUP_TITLES and scored != "in-sample only":
            pooled.setdefault(group, ([], []))
            pooled[group][0].extend(cross)
            pooled[group][1].extend(shipped)
    for group, (cross, shipped) in pooled.items():
        scores.append(_score(f"all {group}", GROUP_TITLES[group], "pooled", (), cross, shipped))
    training = [g for g in pooled if g != "serving"]
    if len(training) > 1:
        scores.append(_score("all training", "every training source above", "pooled", (),
                             [r for g in training for r in pooled[g][0]], [r for g in training for r in pooled[g][1]]))
    return tuple(scores)
