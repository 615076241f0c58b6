"""A training search under a training stack other than the default (issue 26 item 3: every stack that `simulate`
takes, the search takes): the candidates are screened and replayed with Megatron-Core's schedule under the
stack's compute profile and attention kernel, and the simulated ones, which the ranking reports, run under the
stack itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.errors import ConfigError
from madmax.search.api import find
from madmax.search.context import prepare

from .conftest import CASE

runner = CliRunner()

DLRM = {"model": "dlrm-dcnv2", "system": "dgx-h100", "num_gpus": 8, "global_batch": 55296}


@pytest.fixture(scope="module")
def fsdp2():
    return find(**CASE, stack="fsdp2", top=3, exact=4, refine=30)


def test_every_reported_strategy_is_simulated_under_the_stack(fsdp2):
    assert fsdp2.ctx.stack == "fsdp2"
    assert fsdp2.top(3)
    for i in fsdp2.top(3):
        strategy = fsdp2.strategy(i)
        under = api.simulate(**{k: v for k, v in CASE.items() if k not in ("recompute", "zero")}, stack="fsdp2",
                             strategy=strategy)
        assert fsdp2.exact[i].iteration_time_s == pytest.approx(under.iteration_time_s, rel=1e-9)
        assert any("software stack: fsdp2" in a for a in fsdp2.exact[i].assumptions)
    # ... and the stack is not a label only: FSDP2's eager kernels make the same plan slower than Megatron-Core's
    best = fsdp2.strategy(fsdp2.top(1)[0])
    core = api.simulate(**{k: v for k, v in CASE.items() if k not in ("recompute", "zero")}, strategy=best)
    assert fsdp2.exact[fsdp2.top(1)[0]].iteration_time_s > core.iteration_time_s


def test_the_screen_takes_the_stacks_runtime_profile():
    # Megatron-DeepSpeed's runtime (vTrain's launch floor, calibration/vtrain_megatron_deepspeed_a100.yaml) costs the
    # closed form and the replay as `simulate` costs the candidates; a profile given by the user wins.
    default = prepare(CASE["model"], CASE["system"], 8, global_batch=8, seq_len=1024)
    vtrain = prepare(CASE["model"], CASE["system"], 8, global_batch=8, seq_len=1024, stack="megatron-deepspeed")
    assert vtrain.stack == "megatron-deepspeed" and default.stack == "megatron-core"
    assert vtrain.compute.profile.launch_s > default.compute.profile.launch_s
    assert vtrain.simulate_kwargs["stack"].name == "megatron-deepspeed" and "stack" not in default.simulate_kwargs
    given = prepare(CASE["model"], CASE["system"], 8, global_batch=8, seq_len=1024, stack="megatron-deepspeed",
                    calibration="calibration/h200_profile.yaml")
    assert given.compute.profile.launch_s == default.compute.profile.launch_s


def test_a_dlrm_search_under_hugectr_ranks_by_hugectr():
    # Every candidate of a table search is simulated, under the stack asked for: its best, re-simulated under
    # hugectr, is at least as fast as the default stack's best re-simulated under hugectr, and, with every
    # table-placement balance tried, as the hand-picked MLPerf plan (emb=hybrid with emb_balance=lookup, 4.35 ms).
    hugectr = find(**DLRM, stack="hugectr", top=1, emb_balance=["size", "lookup", "count"])
    default = find(**DLRM, top=1)
    ours, theirs = hugectr.strategy(hugectr.top(1)[0]), default.strategy(default.top(1)[0])
    assert "emb=hybrid,emb_balance=lookup" in ours
    at = {s: api.simulate(**DLRM, stack="hugectr", strategy=s).iteration_time_s for s in (ours, theirs)}
    assert hugectr.exact[hugectr.top(1)[0]].iteration_time_s == pytest.approx(at[ours], rel=1e-9)
    assert at[ours] <= at[theirs]
    hand = api.simulate(**DLRM, stack="hugectr", strategy="emb=hybrid,emb_balance=lookup,zero=0").iteration_time_s
    assert at[ours] <= hand


def test_the_outputs_name_the_stack():
    result = runner.invoke(app, ["search", "-m", "dlrm-dcnv2", "-s", "dgx-h100", "--num-gpus", "8", "--global-batch",
                                 "55296", "--stack", "hugectr", "--top", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "stack hugectr: every candidate simulated under it" in result.output
    result = runner.invoke(app, ["search", "-m", "dlrm-dcnv2", "-s", "dgx-h100", "--num-gpus", "8", "--global-batch",
                                 "55296", "--stack", "hugectr", "--top", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["stack"] == "hugectr"


def test_an_unknown_stack_is_refused_in_one_sentence():
    with pytest.raises(ConfigError, match=r"stack 'fsdp9' is neither a catalog training stack nor a file; allowed: "):
        find(**CASE, stack="fsdp9")
