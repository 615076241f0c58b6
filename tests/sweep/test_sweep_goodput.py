"""A sweep's time to train carries the goodput model: its reliability profile, and reliability what-ifs."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from madmax.errors import ConfigError
from madmax.sweep.evaluate import evaluate_point
from madmax.sweep.spec import load_sweep

BASE = {"name": "g", "models": "llama-2-7b", "systems": "dgx-h100", "num_gpus": 64, "global_batches": 256,
        "seq_lens": 4096, "strategies": ["tp=1"]}


def rows(**spec):
    return {p.whatif: evaluate_point(p) for p in load_sweep({**BASE, **spec}).points()}


def test_reliability_what_ifs_scale_the_profile_not_the_system():
    out = rows(train={"tokens": 1e12}, whatifs=[{}, {"name": "half", "failure_rate": 0.5},
                                                {"name": "slow-restart", "restart_time": 4}])
    base, half, slow = out["baseline"], out["half"], out["slow-restart"]
    assert base["status"] == half["status"] == slow["status"] == "ok"
    # the iteration is the same hardware's; only the goodput terms move
    assert base["iteration_time_s"] == half["iteration_time_s"] == slow["iteration_time_s"]
    assert base["ideal_time_to_train_s"] == half["ideal_time_to_train_s"]
    # interruptions = lambda x wall clock: half the rate, half the interruptions per second of wall clock
    rate = base["interruptions"] / base["time_to_train_s"]
    assert half["interruptions"] / half["time_to_train_s"] == pytest.approx(rate / 2, rel=1e-12)
    assert half["time_to_train_s"] < base["time_to_train_s"] < slow["time_to_train_s"]
    assert half["whatif_resource"] == "failure_rate" and half["whatif_factor"] == 2  # an improvement of 2x
    assert base["reliability"] == "llama3-h100" and 0 < base["goodput"] < 1


def test_the_ideal_profile_trains_in_the_ideal_time_and_one_iteration_has_no_goodput():
    ideal = rows(train={"tokens": 1e12, "reliability": "ideal"})["baseline"]
    assert ideal["time_to_train_s"] == ideal["ideal_time_to_train_s"] and ideal["goodput"] == 1.0
    plain = rows()["baseline"]
    assert "goodput" not in plain and plain["time_to_train_s"] == pytest.approx(plain["iteration_time_s"])


def test_the_profile_is_part_of_the_point_key():
    keys = [next(iter(load_sweep({**BASE, "train": train}).points())).key
            for train in ({"tokens": 1e12}, {"tokens": 1e12, "reliability": "ideal"},
                          {"tokens": 1e12, "reliability": "llama3-h100"})]
    assert keys[0] != keys[1] and keys[0] == keys[2]


def test_a_profile_file_resolves_beside_the_sweep_file(tmp_path):
    (tmp_path / "fleet.yaml").write_text(
        "name: fleet\nfailures: [{component: gpu, per: gpu, rate_per_hour: 1.0e-4}]\n"
        "restart: {restart_s: 600, repair_s: 0}\nstragglers: {speed_sigma: 0}\n"
        "checkpoint: {node_bytes_per_s: 10 GB/s, filesystem_bytes_per_s: 1 TB/s, stall_s: 5}\n")
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**BASE, "train": {"tokens": 1e12, "reliability": "fleet.yaml"}}))
    row = evaluate_point(next(iter(load_sweep(tmp_path / "s.yaml").points())))
    assert row["reliability"] == "fleet" and math.isfinite(row["checkpoint_interval_s"])


@pytest.mark.parametrize(("train", "message"), [
    ({"tokens": 1e12, "reliability": "nope"}, "sweep.train.reliability: reliability 'nope' is neither"),
    ({"tokens": 1e12, "reliability": {"name": "x"}}, "sweep.train.reliability: reliability.restart is required"),
])
def test_a_bad_profile_names_the_sweep_field(train, message):
    with pytest.raises(ConfigError) as err:
        load_sweep({**BASE, "train": train})
    assert str(err.value).startswith(message.split(":")[0]) and "\n" not in str(err.value)


def test_a_spares_whatif_sets_the_pool_and_has_no_codesign_gain(tmp_path):
    # one spare node at this job's failure rate waits a little, none waits a repair (2 h) per node failure; the
    # baseline (the profile's hot spares) waits nothing
    import yaml

    from madmax.cli import app as cli
    from madmax.sweep.codesign import findings_of

    spec = {"name": "spares", "mode": "simulate", "models": "llama-3-8b", "systems": "dgx-h100", "num_gpus": [64],
            "global_batches": 128, "seq_lens": 4096, "strategies": ["tp=2,pp=1"], "train": {"tokens": 1e12},
            "whatifs": [{}, {"spares": 0}, {"spares": 1}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "res"
    result = CliRunner().invoke(cli, ["sweep", str(tmp_path / "s.yaml"), "--out", str(out), "--no-progress",
                                      "--workers", "1"])
    assert result.exit_code == 0, result.output
    from madmax.sweep.store import load

    rows = load(out).set_index("whatif")
    assert rows.loc["spares=0", "time_to_train_s"] > rows.loc["spares=1", "time_to_train_s"] >= rows.loc[
        "baseline", "time_to_train_s"]
    assert rows.loc["spares=1", "spares"] == 1 and math.isnan(rows.loc["baseline", "spares"])
    assert findings_of(out) == []  # a count is a setting, not an improvement factor
    del spec["train"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    refused = CliRunner().invoke(cli, ["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "r2"),
                                       "--no-progress"])
    assert refused.exit_code == 2 and "spares applies to the time to train" in refused.output
