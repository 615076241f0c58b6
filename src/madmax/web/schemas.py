"""Request bodies of the HTTP API, built from the Python API's signatures so both take the same fields.

`SimulateRequest` has the keyword arguments of `madmax.simulate`; `RLRequest` those of `madmax.simulate_rl`;
`SearchRequest` those of the training search (`madmax.search.api.find`), of the serving search (`find_serving`,
with `task="inference"`), of the capacity search (`find_capacity`, with `task="inference"` and a request_rate; its
systems and max_gpus named system and num_gpus) and of the RL layout search (`find_rl`, with `task="rl"`), plus
the time limit. A field that takes a typed object in Python (a `ModelSpec`, a
`Path`) takes its JSON form here (a dict, a string). Unknown fields are refused (`extra="forbid"`).
"""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from madmax import api
from madmax.rl import simulate_rl
from madmax.rl.search import find_rl
from madmax.search import api as search_api
from madmax.search import capacity, serving

# JSON forms of the Python API's argument types; any other type (a pydantic model, a dataclass) is
# left out of the union, its dict form being there already.
_JSON = (str, int, float, bool, dict, list, type(None))
# Arguments the server decides: the worker processes, and keeping the schedule (the page asks for it).
SERVER_SIDE = {"workers", "keep_schedule"}
# The training search's task fields (`find(**task_fields)`), which its signature does not list.
SEARCH_TASK_FIELDS: dict[str, Any] = {"finetune": str | None, "lora_rank": int | None,
                                      "frozen_layers": int | None, "lora_targets": list[str] | None,
                                      "expert_load": str | float | None, "capacity_factor": float | None}


def _json_type(hint: Any) -> Any:
    """`hint` with Path as str and non-JSON members of a union dropped."""
    if hint is Path:
        return str
    if typing.get_origin(hint) in (Union, types.UnionType):
        members = tuple(dict.fromkeys(_json_type(a) for a in typing.get_args(hint)))
        members = tuple(m for m in members if m in _JSON or typing.get_origin(m) in (list, dict))
        return Union[members]  # noqa: UP007 (built from a tuple)
    return hint


def _fields(function: Any) -> dict[str, tuple[Any, Any]]:
    hints = typing.get_type_hints(function)
    fields = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name in SERVER_SIDE or parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        hint = _json_type(hints.get(name, Any))
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hint, default)
    return fields


_FORBID = ConfigDict(extra="forbid")

SimulateRequest = create_model("SimulateRequest", __config__=_FORBID, **_fields(api.simulate))
RLRequest = create_model("RLRequest", __config__=_FORBID, **_fields(simulate_rl))


def _search_fields() -> dict[str, tuple[Any, Any]]:
    fields = _fields(search_api.find)
    fields.update({name: (hint, None) for name, hint in SEARCH_TASK_FIELDS.items()})
    for name, spec in _fields(serving.find_serving).items():
        fields.setdefault(name, (spec[0], None))  # serving-only fields default to "not given"
    for name, spec in _fields(capacity.find_capacity).items():
        if name not in CAPACITY_RENAMED:
            fields.setdefault(name, (spec[0] | None, None))
    for name, spec in _fields(find_rl).items():
        fields.setdefault(name, (spec[0] | None, None))
    fields["system"] = (str | list[str] | dict | None, None)  # one system, or several for a capacity search
    fields["time_limit_s"] = (float | None, Field(None, gt=0))
    return fields


# A capacity search's arguments under the names the other searches give them: system (one or a list) and
# num_gpus (the most GPUs of a deployment).
CAPACITY_RENAMED = {"systems": "system", "max_gpus": "num_gpus"}
SearchRequest = create_model("SearchRequest", __config__=_FORBID, **_search_fields())
SERVING_SEARCH_FIELDS = frozenset(_fields(serving.find_serving))
CAPACITY_SEARCH_FIELDS = frozenset(CAPACITY_RENAMED.get(k, k) for k in _fields(capacity.find_capacity))
TRAINING_SEARCH_FIELDS = frozenset(_fields(search_api.find)) | frozenset(SEARCH_TASK_FIELDS)
RL_SEARCH_FIELDS = frozenset(_fields(find_rl)) | {"top"}


class SweepRequest(BaseModel):
    """A sweep: its file's content as a dict or YAML text (`madmax.sweep.spec`), never a path on the server."""

    model_config = _FORBID
    spec: dict | str
    workers: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)


def sentence(exc: ValidationError | Any, body: str = "request") -> str:
    """One sentence for the first error of a request's validation: the field, the value and what is wrong."""
    errors = exc.errors()
    if not errors:
        return f"the {body} is invalid"
    err = errors[0]
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    field = ".".join(loc) or body
    kind = err.get("type", "")
    if kind == "json_invalid":
        return f"the {body} body is not valid JSON: {err.get('ctx', {}).get('error', err['msg'])}"
    if kind == "extra_forbidden":
        return f"{field} is not a field of the {body}; see GET /openapi.json for the allowed fields"
    if kind == "missing":
        return f"{field} is required"
    if kind in ("model_type", "dict_type") and not loc:
        return f"the {body} body must be a JSON object"
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f"={value!r}"
    return f"{field}{shown}: {err['msg'].removeprefix('Value error, ')}"
