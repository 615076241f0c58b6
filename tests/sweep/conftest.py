"""A tiny sweep shared by the sweep and report tests: a 4-layer model on small clusters, ~30 ms a point.

The model is written to a file next to the sweep file, so the sweep also exercises relative paths.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
        "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}

# 2 systems x 2 sizes x 2 strategies x 2 what-ifs = 16 points; tp=8 does not divide the 4 KV heads,
# so 8 of them are rows with status 'error'.
SPEC = {"name": "tiny", "models": "tiny.yaml", "systems": ["p4d.24xlarge", "dgx-h100"], "num_gpus": [8, 16],
        "global_batches": 16, "seq_lens": 1024, "strategies": ["tp=2", "tp=8"],
        "whatifs": [{}, {"nic_bandwidth": 2}], "train": {"tokens": 1.0e9}}


def write_spec(directory: Path, spec: dict | None = None, name: str = "sweep.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    path = directory / name
    path.write_text(yaml.safe_dump(spec if spec is not None else SPEC, sort_keys=False))
    return path


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "spec")


@pytest.fixture
def make_spec():
    """write_spec(directory, spec=None): the tiny sweep file (or `spec`) and its model file in `directory`."""
    return write_spec


@pytest.fixture
def base_spec() -> dict:
    return dict(SPEC)


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Path:
    """The tiny sweep run once, uninterrupted, in this process: its results folder."""
    from madmax.sweep import run_sweep

    root = tmp_path_factory.mktemp("reference")
    run_sweep(write_spec(root / "spec"), root / "out", workers=1)
    return root / "out"
