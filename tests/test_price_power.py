"""--price and --power (simulate, search, sweep): they replace the catalog's price and power, by hand;
bad values end in one line and exit status 2; `madmax catalog template gpu|system`."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

import madmax
from madmax.cli import app
from madmax.config.hardware import GPU, System
from madmax.config.loaders import load_gpu, load_system
from madmax.errors import ConfigError
from madmax.results.cost import cost_of, power_w
from madmax.search.api import find
from madmax.sweep.runner import parse_powers
from madmax.sweep.spec import load_sweep

runner = CliRunner()
SIM = ["simulate", "-m", "llama-3.1-8b", "--global-batch", "16", "--seq-len", "2048", "--strategy", "tp=2"]


def test_with_costs_replaces_price_and_node_power_by_hand():
    # --power 1500 W per GPU on a 4-GPU GB200 tray: node_power_w = 1500 * 4 = 6000 W; 8 GPUs = 2 trays = 12 kW
    system = load_system("gb200-nvl72", 8).with_costs(6.0, 1500)
    assert (system.price_per_gpu_hour_usd, system.node_power_w) == (6.0, 6000.0)
    assert power_w(system) == 12000.0
    assert system.sources["price_per_gpu_hour_usd"] == "given: --price"
    assert load_system("dgx-h100").with_costs() == load_system("dgx-h100")  # nothing given: the same system
    # A price of 0 is allowed (own hardware, sunk cost); a power of 0 is not.
    assert load_system("dgx-h100").with_costs(0.0).price_per_gpu_hour_usd == 0.0


def test_cost_of_by_hand():
    # p5.48xlarge: 8 GPUs at $12.29, node 10,200 W. 1 s making 1e6 tokens:
    # USD per million tokens = 12.29 * 8 * 1 / 3600 / 1e6 * 1e6 = 0.027311; joules per token = 10200 / 1e6
    c = cost_of(load_system("p5.48xlarge"), 1.0, 1e6)
    assert c["usd_per_hour"] == pytest.approx(98.32)
    assert c["usd_per_million_tokens"] == pytest.approx(12.29 * 8 / 3600, rel=1e-12)
    assert c["joules_per_token"] == pytest.approx(0.0102, rel=1e-12)
    assert c["power_basis"] == "node_power_w"
    # No price, no node power (amd-mi300x-8): no money figure; the GPUs' 750 W board power, 8 x 750 = 6 kW
    c = cost_of(load_system("amd-mi300x-8"), 1.0, 1e6)
    assert c["usd_per_million_tokens"] is None and c["power_w"] == 6000.0 and c["power_basis"] == "gpu tdp_w"


def test_simulate_carries_a_cost_block_only_with_a_price_or_power():
    dgx = madmax.simulate("llama-3.1-8b", "dgx-h100", global_batch=16, seq_len=2048, strategy="tp=2").to_dict()
    assert "cost" not in dgx  # no price in the catalog, no --price: the result keeps its keys
    priced = madmax.simulate("llama-3.1-8b", "dgx-h100", global_batch=16, seq_len=2048, strategy="tp=2",
                             price=2.0, power=1200).to_dict()
    assert priced["iteration_time_s"] == dgx["iteration_time_s"]  # price and power change no timing
    tokens_per_s = 16 * 2048 / priced["iteration_time_s"]
    # USD per million tokens = 2.0 * 8 / 3600 / tokens_per_s * 1e6; J per token = 1200 * 8 / tokens_per_s
    assert priced["cost"]["usd_per_million_tokens"] == pytest.approx(2.0 * 8 / 3600 / tokens_per_s * 1e6)
    assert priced["cost"]["joules_per_token"] == pytest.approx(9600 / tokens_per_s)


def test_serving_cost_is_per_output_token():
    r = madmax.simulate("llama-3.1-8b", "amd-mi300x-8", task="inference", prompt_len=128, output_len=64,
                        batch=8, strategy="tp=1", price=3.0)
    c = r.to_dict()["cost"]
    # 8 GPUs (tp=1, dp=8) at $3: 24 USD per hour over output_tokens_per_s
    assert c["usd_per_million_output_tokens"] == pytest.approx(24 / 3600 / r.output_tokens_per_s * 1e6)
    assert c["joules_per_output_token"] == pytest.approx(8 * 750 / r.output_tokens_per_s)


def test_cli_flags_equal_the_api():
    result = runner.invoke(app, [*SIM, "-s", "gb200-nvl72", "--price", "6", "--power", "1500", "--json"])
    assert result.exit_code == 0, result.output
    api = madmax.simulate("llama-3.1-8b", "gb200-nvl72", global_batch=16, seq_len=2048, strategy="tp=2",
                          price=6, power=1500)
    assert json.loads(result.stdout) == api.to_dict()


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--price", "-1", ["price=-1.0", "out of range", "USD per GPU-hour"]),
    ("--price", "nan", ["price=nan", "out of range"]),
    ("--price", "inf", ["price=inf", "out of range"]),
    ("--power", "0", ["power=0.0", "out of range", "W per GPU above 0"]),
    ("--power", "-300", ["power=-300.0", "out of range"]),
    ("--price", "cheap", ["--price", "number"]),
])
def test_bad_price_or_power_is_one_line(flag, value, words):
    result = runner.invoke(app, [*SIM, "-s", "dgx-h100", flag, value])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert all(w in lines[0] for w in words), lines[0]


def test_search_cost_objective_with_a_price():
    # gb200-nvl72 has no catalog price: refused, naming --price; with --price 6 the objective is priced.
    with pytest.raises(ConfigError, match="--price USD per GPU-hour"):
        find("llama-3.1-8b", "gb200-nvl72", 8, global_batch=64, objective="cost", top=1)
    out = find("llama-3.1-8b", "gb200-nvl72", 8, global_batch=64, objective="cost", top=1, price=6.0)
    t = out.best_time_s()[out.ranked[0]]
    # cost of one iteration (tokens = one iteration's): 6 USD x 8 GPUs x t / 3600
    assert out.scorer.value(t) == pytest.approx(6.0 * 8 * t / 3600, rel=1e-12)
    energy = find("llama-3.1-8b", "gb200-nvl72", 8, global_batch=64, objective="energy", top=1, power=2000)
    assert energy.scorer.power_w == 16000.0  # 2000 W x 4 GPUs per tray x 2 trays


def test_search_cli_refuses_a_bad_price():
    result = runner.invoke(app, ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--global-batch", "64",
                                 "--objective", "cost", "--price", "-2", "--no-progress"])
    assert result.exit_code == 2 and result.output.startswith("error: price=-2.0 is out of range")


def test_sweep_power_overrides_by_system():
    assert parse_powers(["p4d.24xlarge=800", "650"]) == {"p4d.24xlarge": 800.0, "*": 650.0}
    for bad in ("x=-1", "0", "x=abc"):
        with pytest.raises(ConfigError, match=r"power='.*' must be SYSTEM=W or W per GPU \(> 0\)"):
            parse_powers([bad])
    spec = {"name": "t", "groups": [{"models": ["llama-3.1-8b"], "systems": ["dgx-h100", "p4d.24xlarge"],
                                     "global_batches": [16], "strategies": ["tp=8"]}]}
    plain = {p.system_name: p for p in load_sweep(spec).points()}
    powered = {p.system_name: p for p in load_sweep(spec).with_powers({"p4d.24xlarge": 800.0}).points()}
    assert plain["dgx-h100"].key == powered["dgx-h100"].key  # no power given there: the same point
    assert powered["p4d.24xlarge"].power == 800.0 and powered["p4d.24xlarge"].key != plain["p4d.24xlarge"].key


@pytest.mark.parametrize(("kind", "schema"), [("gpu", GPU), ("system", System)])
def test_template_is_valid_and_names_every_field(kind, schema, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["catalog", "template", kind, "--out", f"{kind}.yaml"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / f"{kind}.yaml").read_text()
    for field in schema.model_fields:
        assert f"{field}:" in text or (field in {"num_gpus"} and "num_gpus" in text), field
    loaded = load_gpu(str(tmp_path / "gpu.yaml")) if kind == "gpu" else load_system(str(tmp_path / "system.yaml"))
    assert loaded.name == ("my-gpu" if kind == "gpu" else "my-node")
    # printed without --out; never overwrites
    assert runner.invoke(app, ["catalog", "template", kind]).stdout == text
    again = runner.invoke(app, ["catalog", "template", kind, "--out", f"{kind}.yaml"])
    assert again.exit_code == 2 and "exists" in again.output


def test_template_system_with_the_template_gpu_simulates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner.invoke(app, ["catalog", "template", "gpu", "--out", "my-gpu.yaml"])
    runner.invoke(app, ["catalog", "template", "system", "--out", "my-node.yaml"])
    node = yaml.safe_load((tmp_path / "my-node.yaml").read_text()) | {"gpu": "my-gpu.yaml"}
    (tmp_path / "my-node.yaml").write_text(yaml.safe_dump(node))
    result = runner.invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "my-node.yaml", "--global-batch", "16",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cost"]["price_per_gpu_hour_usd"] == 2.0
