"""Every catalog system and every catalog GPU simulates a training step and a serving run from the CLI."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from madmax.cli import app
from madmax.config.loaders import catalog_names, load_gpu, load_system

runner = CliRunner()
MODEL = "phi-3-mini-4k"  # 3.8 B parameters: fits one GPU of 24 GB for serving, any node for training
TRAIN = ["--global-batch", "16", "--seq-len", "1024", "--json"]  # 16: a multiple of every node
SERVE = ["--task", "inference", "--prompt-len", "128", "--output-len", "32", "--batch", "4", "--json"]


def _run(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", catalog_names("systems"))
def test_every_system_trains_and_serves(name: str) -> None:
    gpus = load_system(name).gpus_per_node
    train = _run(["simulate", "-m", MODEL, "-s", name, *TRAIN])
    assert train["num_gpus"] == gpus and train["iteration_time_s"] > 0 and train["tokens_per_s"] > 0
    serve = _run(["simulate", "-m", MODEL, "-s", name, "--strategy", "tp=1", *SERVE])
    assert serve["output_tokens_per_s"] > 0 and serve["ttft_s"] > 0


@pytest.mark.parametrize("name", catalog_names("gpus"))
def test_every_gpu_trains_and_serves_in_a_node_of_its_own(name: str, tmp_path) -> None:
    # A system file naming the catalog GPU: 8 of them on PCIe, 100 Gb/s Ethernet.
    node = {"name": f"{name}-node", "gpu": name, "gpus_per_node": 8,
            "scale_up": {"kind": "pcie", "bytes_per_s": "32 GB/s", "latency_s": "2.5 us", "domain_size": 8},
            "scale_out": {"kind": "ethernet", "bytes_per_s": "12.5 Gbit/s", "latency_s": "4 us"}}
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(node))
    half = str(load_gpu(name).half_dtype)
    train = _run(["simulate", "-m", MODEL, "-s", str(path), "--dtype", half, *TRAIN])
    assert train["iteration_time_s"] > 0
    serve = _run(["simulate", "-m", MODEL, "-s", str(path), "--strategy", "tp=1", "--dtype", half, *SERVE])
    assert serve["output_tokens_per_s"] > 0
