"""Fixtures shared by the test folders."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from madmax.config.loaders import load_model
from madmax.errors import MadmaxError
from madmax.workload import param_counts

# No test depends on the machine's speed: Hypothesis's per-example deadline (200 ms by default) is off, so a
# slow or shared CI core (the suite runs one worker per core) cannot fail an example that is correct. And every run
# draws the same examples (derandomize): a test passes or fails on the code, not on the draw. Random exploration
# is `benchmarks/fuzz.py`'s job, and `MADMAX_HYPOTHESIS=explore` draws afresh here (what it finds becomes an
# @example).
settings.register_profile("madmax", deadline=None, derandomize=True, database=None)
settings.register_profile("explore", deadline=None)
settings.load_profile("explore" if os.environ.get("MADMAX_HYPOTHESIS") == "explore" else "madmax")


def mangled(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with each key of `changes` set to its value, or removed where the value is None."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _mangled_configs_import_or_fail(base: dict[str, Any], keys: Sequence[str], values: Sequence[Any],
                                    examples: int) -> None:
    """Up to 3 of `keys` of the Hugging Face config `base` set to one of `values` (None: removed): each
    config imports as a model with parameters, or fails with one MadmaxError sentence."""

    @settings(max_examples=examples, deadline=None)
    @given(st.dictionaries(st.sampled_from(keys), st.sampled_from(values), max_size=3))
    def check(changes: dict[str, Any]) -> None:
        try:
            model = load_model(mangled(base, changes))
        except MadmaxError as exc:
            message = str(exc)
            assert "\n" not in message and "Traceback" not in message
            return
        assert sum(param_counts(model).values()) > 0

    check()


@pytest.fixture
def mangled_configs_import_or_fail() -> Callable[..., None]:
    return _mangled_configs_import_or_fail


@pytest.fixture
def mangle() -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    """`mangled`: a config with some keys set or removed, for the fuzz tests."""
    return mangled
