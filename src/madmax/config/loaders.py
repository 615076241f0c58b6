"""Resolve a name or a file into a validated GPU, System or Model.

A name is looked up in the catalog (YAML shipped in `madmax/catalog/`, aliases included, case
insensitive); anything else is read as a YAML or JSON file of our schema, or as a Hugging Face
`config.json` (recognized by its `model_type` key). Every failure is a `MadmaxError` with one sentence.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from madmax.config.checks import (
    GPUS_WHY,
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_GPUS,
    MAX_NODES,
    file_rule,
    is_file,
    name_or_path,
    readable_file,
    shown,
    whole_number,
)
from madmax.config.hardware import GPU, System
from madmax.config.model import MODEL_FAMILIES, ModelSpec
from madmax.errors import CatalogError, ConfigError

CATALOG_KINDS = ("gpus", "systems", "models")


@cache
def catalog_entries(kind: str) -> dict[str, dict[str, Any]]:
    """Raw catalog entries of `kind` ('gpus', 'systems', 'models') by lower-case name."""
    if kind not in CATALOG_KINDS:
        raise CatalogError(f"catalog kind {kind!r} is unknown; allowed: {', '.join(CATALOG_KINDS)}")
    text = resources.files("madmax.catalog").joinpath(f"{kind}.yaml").read_text(encoding="utf-8")
    entries = yaml.safe_load(text) or []
    return {entry["name"].lower(): entry for entry in entries}


@cache
def _alias_index(kind: str) -> dict[str, str]:
    index: dict[str, str] = {}
    for name, entry in catalog_entries(kind).items():
        index[name] = name
        for alias in entry.get("aliases", []):
            index[alias.lower()] = name
    return index


def catalog_names(kind: str) -> list[str]:
    return [entry["name"] for entry in catalog_entries(kind).values()]


def find_in_catalog(kind: str, name: str) -> dict[str, Any] | None:
    key = _alias_index(kind).get(name.strip().lower())
    return None if key is None else catalog_entries(kind)[key]


def _unknown(kind: str, field: str, name: str) -> CatalogError:
    names = catalog_names(kind)
    close = difflib.get_close_matches(name.lower(), [n.lower() for n in names], n=3) if len(name) < 200 else []
    hint = f"did you mean {', '.join(close)}? " if close else ""
    rule = file_rule() if "/" in name or "\\" in name else ""  # a path, not a misspelt name
    return CatalogError(
        f"{field} {shown(name)} is neither a catalog name nor a file{rule}; {hint}see `madmax catalog list {kind}`"
    )


def read_file(path: Path, field: str) -> dict[str, Any]:
    """A mapping from a YAML or JSON file, or a ConfigError naming the file and the problem."""
    readable_file(path, field, MAX_CONFIG_BYTES)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{field} file {str(path)!r} cannot be read: {exc.__class__.__name__}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{field} file {str(path)!r} is nested too deeply to read; allowed: at most "
                          f"{MAX_DEPTH} levels of lists and mappings") from None
    except ValueError as exc:  # a number of more than 4,300 digits (Python's integer conversion limit)
        if isinstance(exc, json.JSONDecodeError):
            raise ConfigError(f"{field} file {str(path)!r} is not valid YAML/JSON: {exc}") from None
        raise ConfigError(f"{field} file {str(path)!r} holds a number of more than 4,300 digits; allowed: "
                          "integers up to 2**53") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        mark = getattr(exc, "problem_mark", None)
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem and mark is not None:
            first = f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError(f"{field} file {str(path)!r} is not valid YAML/JSON: {first}") from None
    if data is None:
        raise ConfigError(f"{field} file {str(path)!r} is empty; it must hold a mapping of fields")
    if not isinstance(data, dict):
        raise ConfigError(f"{field} file {str(path)!r} must hold a mapping of fields, got {type(data).__name__}")
    check_shape(data, f"{field} file {str(path)!r}")
    return data


def check_shape(data: Any, what: str) -> None:
    """ConfigError when `data` nests more than MAX_DEPTH levels or holds more than MAX_NODES values (YAML
    aliases counted each time they repeat): walked without recursion, and no further than either bound."""
    nodes, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConfigError(f"{what} holds more than {MAX_NODES:,} values once its YAML aliases are expanded; "
                              f"allowed: at most {MAX_NODES:,}")
        if isinstance(item, dict | list):
            if level > MAX_DEPTH:
                raise ConfigError(f"{what} is nested more than {MAX_DEPTH} levels deep; allowed: at most "
                                  f"{MAX_DEPTH} levels of lists and mappings")
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]


def validate(schema: type[BaseModel], data: dict[str, Any], field: str) -> Any:
    """`schema` validated from `data`, turning the first pydantic error into one sentence."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_sentence(schema, exc, field, data)) from None


def load_profile_entry(schema: type[BaseModel], spec: Any, catalog: dict[str, Any], field: str) -> Any | None:
    """A profile of a small catalog (`catalog["stacks"]`, `catalog["default"]`: the training and serving
    stacks) from `spec`: an instance of `schema` as it is, None (the default entry), a mapping, an entry's
    name (any case), or a YAML/JSON file. None when `spec` is none of these: the caller says what is allowed."""
    if isinstance(spec, schema):
        return spec
    if spec is None:
        spec = catalog["default"]
    if isinstance(spec, dict):
        return validate(schema, spec, field)
    for entry in catalog["stacks"]:
        if str(spec).strip().lower() == entry["name"]:
            return validate(schema, entry, field)
    if not isinstance(spec, (str, Path)):
        return None
    return validate(schema, read_file(Path(spec), field), field) if is_file(spec) else None


def _sentence(schema: type[BaseModel], exc: ValidationError, field: str, data: dict[str, Any]) -> str:
    """The first validation error as one sentence naming the field, the value given and what is allowed."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"] if str(p) != "[key]"]
    where = ".".join([field, *loc])
    if err["type"] == "extra_forbidden" and len(loc) == 1:
        return f"{where} is not a field of {field}; allowed: {', '.join(schema.model_fields)}"
    if err["type"] == "missing":
        return f"{where} is required"
    value = data
    for part in loc:  # show what the user wrote, not a parsed number
        value = value.get(part) if isinstance(value, dict) else err.get("input")
    if isinstance(value, dict | list) or value is None:
        value = err.get("input")
    given = f"={shown(value)}" if loc and not isinstance(value, dict | list) else ""
    return f"{shown(where)[1:-1] if len(where) > 60 else where}{given}: {err['msg'].removeprefix('Value error, ')}"


def _lookup(kind: str, field: str, spec: str | Path | dict) -> tuple[dict[str, Any], bool]:
    """Raw data for `spec` and whether it came from a file."""
    if isinstance(spec, dict):
        check_shape(spec, field)
        return spec, True
    spec = name_or_path(spec, field)
    entry = find_in_catalog(kind, str(spec)) if isinstance(spec, str) else None
    if entry is not None:
        return dict(entry), False
    path = Path(spec)
    if is_file(path):
        return read_file(path, field), True
    if path.suffix.lower() in {".yaml", ".yml", ".json"}:
        raise ConfigError(f"{field} file {shown(str(path))} does not exist{file_rule()}")
    raise _unknown(kind, field, str(spec))


def load_gpu(spec: str | Path | dict | GPU) -> GPU:
    if isinstance(spec, GPU):
        return spec
    data, _ = _lookup("gpus", "gpu", spec)
    return validate(GPU, data, "gpu")


def load_system(spec: str | Path | dict | System, num_gpus: int | None = None) -> System:
    """A system from the catalog or a file, with its GPU resolved and sized to `num_gpus`."""
    if isinstance(spec, System):
        system = spec
    else:
        data, _ = _lookup("systems", "system", spec)
        data = dict(data)
        gpu = data.get("gpu")
        if isinstance(gpu, str):
            data["gpu"] = load_gpu(gpu)
        system = validate(System, data, "system")
    if num_gpus is not None:
        num_gpus = whole_number(num_gpus, "num_gpus", maximum=MAX_GPUS, unit="GPUs", why=GPUS_WHY)
        if num_gpus > system.gpus_per_node and num_gpus % system.gpus_per_node:
            raise ConfigError(
                f"num_gpus={num_gpus} is not a whole number of {system.name} nodes of "
                f"{system.gpus_per_node} GPUs; allowed: 1..{system.gpus_per_node} or a multiple of "
                f"{system.gpus_per_node}"
            )
        system = system.model_copy(update={"num_gpus": num_gpus})
    return system


def load_model(spec: str | Path | dict | ModelSpec) -> ModelSpec:
    """A model from the catalog (name or alias), our YAML/JSON schema, a Hugging Face config.json, or a
    Hugging Face id ('org/name') whose config.json is in the local cache or can be downloaded (hf_hub)."""
    if isinstance(spec, BaseModel):
        return spec  # type: ignore[return-value]
    from madmax.config import hf_hub

    if isinstance(spec, str) and hf_hub.is_repo_id(spec) and find_in_catalog("models", spec) is None \
            and not Path(spec).exists():  # a Hugging Face id: its config.json, named by the id
        data, from_file = read_file(hf_hub.config_path(spec), "model") | {"_name_or_path": spec}, True
    else:
        data, from_file = _lookup("models", "model", spec)
    is_hf = "model_type" in data or "architectures" in data or (
        isinstance(spec, str | Path) and Path(spec).name == "config.json")
    if from_file and is_hf:
        from madmax.config.hf import from_hf_config

        name = Path(spec).parent.name if isinstance(spec, str | Path) else "hf-model"
        data = from_hf_config(data, name=name or "hf-model")
    family = data.get("family", "decoder")
    schema = MODEL_FAMILIES.get(family) if isinstance(family, str) else None
    if schema is None:
        raise ConfigError(f"model.family={shown(family)} is unknown; allowed: {', '.join(MODEL_FAMILIES)}")
    return validate(schema, data, "model")
