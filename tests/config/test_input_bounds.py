"""Input files are bounded before they are walked: a YAML alias bomb, a huge file, a device (issue 28)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from madmax.cli import app
from madmax.config.checks import MAX_CONFIG_BYTES, MAX_NODES
from madmax.config.loaders import load_model
from madmax.errors import ConfigError
from madmax.sweep import load_sweep


def _alias_bomb(levels: int = 9, fanout: int = 10) -> str:
    """A few hundred bytes that expand to fanout**levels values (here a billion)."""
    lines = ["a0: &a0 [x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"name: bomb\nbomb: *a{levels}\n"])


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert len(path.read_bytes()) < 600
    # the walk stops at MAX_NODES values, not the billion: the refusal names the bound (no clock is read)
    with pytest.raises(ConfigError, match=rf"holds more than {MAX_NODES:,} values once its YAML aliases are expanded"):
        load_model(path)


def test_the_cli_refuses_it_with_one_sentence(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2 and "YAML aliases are expanded" in result.output, result.output


def test_a_sweep_mapping_is_bounded_too():
    import yaml

    with pytest.raises(ConfigError, match=r"^sweep holds more than"):
        load_sweep(yaml.safe_load(_alias_bomb()))


def test_a_config_file_over_its_cap_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing is written, nothing should be read
    with pytest.raises(ConfigError, match=r"huge.yaml' is 8 MiB; allowed: at most 8 MiB"):
        load_model(path)


def test_deep_nesting_is_still_refused():
    deep: dict = {}
    node = deep
    for _ in range(150):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ConfigError, match="nested more than 100 levels"):
        load_model({"name": "deep", **deep})
