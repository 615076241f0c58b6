"""Settings the search's closed form and replay do not cost, tried on its simulated candidates (issue 26 item 3):
with tp_overlap=[0, 1] each candidate with tp > 1 and sequence parallelism is simulated again with tp_overlap=1
(the TP collectives pipelined into the GEMMs) and keeps it when faster; by default it is not tried."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.errors import ConfigError
from madmax.search.api import find, to_frame

from .conftest import CASE, TINY

runner = CliRunner()
# The shared case's model, four times wider: 0.4 B parameters whose 16 bytes each (zero=0) exceed the 3 GiB GPUs
# unless tensor (or pipeline) parallelism splits them, so the simulated candidates have tp > 1.
WIDE = {**TINY, "name": "tiny-wide", "hidden_size": 2048, "ffn_hidden_size": 8192, "num_heads": 16, "num_kv_heads": 8}
CASE = {**CASE, "model": WIDE, "zero": [0]}
SIMULATE = {k: v for k, v in CASE.items() if k not in ("recompute", "zero")}


def _search(**options):
    return find(**CASE, top=4, exact=8, refine=30, **options)


@pytest.fixture(scope="module")
def both():
    return _search(tp_overlap=[0, 1])


def _eligible(outcome, i: int) -> bool:
    return outcome.columns["tp"][i] > 1 and bool(outcome.columns["sp"][i])


def test_a_simulated_candidate_keeps_the_overlap_where_it_is_faster(both):
    eligible = [i for i in both.exact if _eligible(both, i)]
    assert eligible, "the case must simulate tensor-parallel candidates"
    for i in both.exact:
        strategy = both.strategy(i)
        assert both.exact[i].iteration_time_s == pytest.approx(
            api.simulate(**SIMULATE, strategy=strategy).iteration_time_s, rel=1e-9)
        if not _eligible(both, i):
            assert "tp_overlap" not in strategy
            continue
        plain = strategy.removesuffix(",tp_overlap=1")
        times = {o: api.simulate(**SIMULATE, strategy=f"{plain},tp_overlap={o}").iteration_time_s for o in (0, 1)}
        assert strategy.endswith(",tp_overlap=1") == (times[1] < times[0])
        assert both.exact[i].iteration_time_s == pytest.approx(min(times.values()), rel=1e-9)
    assert any(both.strategy(i).endswith(",tp_overlap=1") for i in eligible)


def test_the_settings_tried_are_the_users(both):
    never, always = _search(), _search(tp_overlap=[1])
    assert never.ctx.tp_overlap == (False,)  # the default: not tried
    assert not never.variants and all("tp_overlap" not in never.strategy(i) for i in never.exact)
    assert all(always.strategy(i).endswith(",tp_overlap=1") == _eligible(always, i) for i in always.exact)
    # the best of both is never slower than either alone
    best = {name: o.exact[o.top(1)[0]].iteration_time_s for name, o in (("both", both), ("never", never),
                                                                          ("always", always))}
    assert best["both"] <= min(best["never"], best["always"]) * (1 + 1e-12)


def test_the_frame_carries_the_variant(both):
    pytest.importorskip("pandas")
    frame = to_frame(both)
    simulated = frame[frame["simulated"]]
    assert (simulated["strategy"].str.endswith(",tp_overlap=1") == simulated["tp_overlap"]).all()
    assert not frame.loc[~frame["simulated"], "tp_overlap"].any()


@pytest.mark.parametrize("value", [[2], [], "1"])
def test_bad_settings_are_refused(value):
    with pytest.raises(ConfigError, match=r"tp_overlap=.* must list TP overlap settings; allowed: 0, 1"):
        _search(tp_overlap=value)


def test_the_cli_takes_the_settings(tmp_path):
    import yaml

    model, system = tmp_path / "tiny.yaml", tmp_path / "small.yaml"
    model.write_text(yaml.safe_dump(CASE["model"]))
    system.write_text(yaml.safe_dump(CASE["system"]))
    base = ["search", "-m", str(model), "-s", str(system), "--num-gpus", "8", "--global-batch", "8", "--seq-len",
            "1024", "--top", "2", "--exact", "4", "--refine", "30", "--no-progress"]
    assert runner.invoke(app, [*base, "--tp-overlap", "1"]).exit_code == 0
    result = runner.invoke(app, [*base, "--tp-overlap", "yes"])
    assert result.exit_code == 2 and result.output.startswith("error: tp_overlap='yes'"), result.output


def test_an_moe_candidate_keeps_its_fastest_dispatcher():
    # MOE_CASE (16 experts): with both dispatchers, every simulated candidate with ep > 1 is its faster form
    # (DeepEP's or the all-to-all's), simulated as its strategy string says.
    from .conftest import MOE_CASE

    outcome = find(**MOE_CASE, top=3, exact=6, refine=30, dispatcher=["alltoall", "deepep"])
    plain = {k: v for k, v in MOE_CASE.items() if k not in ("recompute", "zero")}
    experts = [i for i in outcome.exact if outcome.columns["ep"][i] > 1]
    assert experts, "the case must simulate expert-parallel candidates"
    for i in experts:
        strategy = outcome.strategy(i)
        base = strategy.removesuffix(",dispatcher=deepep")
        times = {d: api.simulate(**plain, strategy=f"{base},dispatcher={d}").iteration_time_s
                 for d in ("alltoall", "deepep")}
        assert outcome.exact[i].iteration_time_s == pytest.approx(min(times.values()), rel=1e-9)
        assert strategy.endswith(",dispatcher=deepep") == (times["deepep"] < times["alltoall"])
    frame = to_frame(outcome)
    simulated = frame[frame["simulated"]]
    assert ((simulated["dispatcher"] == "deepep") == simulated["strategy"].str.endswith(",dispatcher=deepep")).all()
    assert not simulated["tp_overlap"].any()  # a DeepEP variant is no TP overlap
    only = find(**MOE_CASE, top=3, exact=6, refine=30, dispatcher=["deepep"])
    assert all(only.strategy(i).endswith(",dispatcher=deepep") == (only.columns["ep"][i] > 1) for i in only.exact)


def test_settings_a_search_cannot_apply_are_refused():
    from .test_dlrm_search import FIND as DLRM

    with pytest.raises(ConfigError, match=r"dispatcher=\['nccl'\] must list token dispatchers; allowed: alltoall, "):
        _search(dispatcher=["nccl"])
    with pytest.raises(ConfigError, match="dispatcher applies to mixture-of-experts models"):
        _search(dispatcher=["deepep"])
    with pytest.raises(ConfigError, match="tp_overlap applies to transformer searches"):
        find(**DLRM, tp_overlap=[1])
