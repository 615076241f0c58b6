"""Hypothesis fuzzing of the CLI and the Python API: any input ends in a result or in the project's error
(a MadmaxError with a one-line message; from the CLI, one `error:` line and a non-zero exit), never in
another exception. Bounded: few examples, small models; `benchmarks/fuzz.py` runs the 1,000-case version."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy
from madmax.errors import MadmaxError

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
        "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}
DLRM = {"family": "dlrm", "name": "tiny-dlrm", "num_dense_features": 13, "bottom_mlp": [64, 16],
        "top_mlp": [64, 1], "tables": [{"rows": 1000, "dim": 16, "pooling": 1.0, "count": 4}]}
FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# Anything a caller might pass where a number or a name belongs.
junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([2**40, 10**400, 2**20, 8, 16, 0, -8]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["8", "8.5", "x" * 300, "a/" * 200, "", "nan", "inf", "\x00"]),
    st.lists(st.integers(min_value=-3, max_value=9), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                                   max_size=2),
    st.sampled_from([np.float64(8.0), np.int64(8), np.float64("nan")]),
)
number_text = st.one_of(st.integers(min_value=-(10**25), max_value=10**25).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr),
                        st.sampled_from(["8", "16", "0", "-1", "8.5", "x", "", "9" * 400, "1e3", str(2**40)]))
strategy_text = st.lists(
    st.tuples(st.sampled_from(["tp", "pp", "dp", "cp", "vp", "mbs", "zero", "recompute", "sp", "ep", "shard",
                               "bogus", "emb", "recompute_layers", "pp_layout", ""]),
              st.one_of(number_text, st.sampled_from(["selective", "full", "none", "tw", "on", "E|t*2|L"]))),
    max_size=4).map(lambda items: ",".join(f"{k}={v}" for k, v in items))


def settle(call: Any) -> Any:
    """`call()`'s result, or None when it raised a MadmaxError with a one-line message."""
    try:
        return call()
    except MadmaxError as exc:
        text = str(exc)
        assert text and "\n" not in text, repr(text)
        return None


@FUZZ
@given(field=st.sampled_from(sorted(TINY)), value=junk)
def test_model_fields_of_any_value(field: str, value: Any) -> None:
    info = settle(lambda: api.inspect({**TINY, field: value}))
    if info is not None:
        assert math.isfinite(info["forward_flops_per_token"])


VIT = {"family": "vit", "name": "tiny-vit", "image_size": 64, "patch_size": 16, "num_layers": 2, "hidden_size": 64,
       "num_heads": 4, "ffn_hidden_size": 256, "num_classes": 10}


@FUZZ
@given(field=st.sampled_from(sorted(VIT)[1:]), value=junk)
def test_vit_fields_of_any_value(field: str, value: Any) -> None:
    info = settle(lambda: api.inspect({**VIT, field: value}))
    if info is not None:
        assert math.isfinite(info["forward_flops_per_token"])


@FUZZ
@given(field=st.sampled_from(["rows", "dim", "pooling", "count", "sharding"]), value=junk)
def test_dlrm_table_fields_of_any_value(field: str, value: Any) -> None:
    settle(lambda: load_model({**DLRM, "tables": [{**DLRM["tables"][0], field: value}]}))


@FUZZ
@given(system=st.one_of(st.sampled_from(["dgx-h100", "p4d.24xlarge"]), junk), num_gpus=junk)
def test_systems_and_gpu_counts_of_any_value(system: Any, num_gpus: Any) -> None:
    settle(lambda: load_system(system, num_gpus))


@FUZZ
@given(text=st.one_of(strategy_text, junk))
def test_strategies_of_any_text(text: Any) -> None:
    settle(lambda: parse_strategy(text))


@FUZZ
@given(num_gpus=st.one_of(st.sampled_from([8, 16]), junk), global_batch=st.one_of(st.sampled_from([16, 64]), junk),
       seq_len=st.one_of(st.none(), st.sampled_from([512, 1024]), junk), strategy=st.one_of(strategy_text, junk))
def test_simulate_with_any_arguments(num_gpus: Any, global_batch: Any, seq_len: Any, strategy: Any) -> None:
    result = settle(lambda: api.simulate(TINY, "dgx-h100", num_gpus=num_gpus, global_batch=global_batch,
                                         seq_len=seq_len, strategy=strategy))
    if result is not None:
        assert math.isfinite(result.iteration_time_s) and result.iteration_time_s > 0


@settings(FUZZ, max_examples=10)
@given(num_gpus=st.one_of(st.sampled_from([8, 16]), junk), global_batch=st.one_of(st.sampled_from([16, 64]), junk),
       objective=st.one_of(st.sampled_from(["throughput", "time", "cost"]), junk), tokens=st.one_of(st.none(), junk))
def test_search_with_any_arguments(num_gpus: Any, global_batch: Any, objective: Any, tokens: Any) -> None:
    from madmax.search.api import find

    settle(lambda: find(TINY, "dgx-h100", num_gpus, global_batch=global_batch, objective=objective, tokens=tokens,
                        top=1, refine=1))


simulate_options = st.dictionaries(
    st.sampled_from(["--num-gpus", "--global-batch", "--seq-len", "--dtype", "--task", "--strategy", "--batch",
                     "--mode", "--request-rate", "--capacity-factor", "--expert-load", "--lora-rank"]),
    st.one_of(number_text, strategy_text, st.sampled_from(["bf16", "fp8", "inference", "finetune", "rate"])),
    max_size=4)


@FUZZ
@given(model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "dlrm-f", "nosuch", "x" * 300]), options=simulate_options)
def test_cli_simulate_with_any_options(model: str, options: dict[str, str]) -> None:
    args = ["simulate", "-m", model, "-s", "dgx-h100"] + [part for item in options.items() for part in item]
    check_cli(args)


@FUZZ
@given(args=st.lists(st.one_of(st.sampled_from(["simulate", "inspect", "search", "catalog", "show", "list",
                                                "schema", "model", "--json", "-m", "-s", "--seq-len", "llama3-8b",
                                                "dgx-h100", "--num-gpus", "--help"]), number_text), max_size=6))
def test_cli_with_any_words(args: list[str]) -> None:
    if "search" in args:  # a search of a catalog model takes seconds; other entry points cover its options
        args = [a for a in args if a != "search"]
    check_cli(args)


def check_cli(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    if isinstance(result.exception, MadmaxError):
        return  # main() prints it as one sentence
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        is_help = "Usage:" in result.output and "Error" not in result.output  # a group named without a command
        assert is_help or (len(lines) == 1 and lines[0].startswith("error: ")), result.output
