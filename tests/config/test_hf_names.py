"""A Hugging Face config is named from its contents, defaults to a training length users pick, and a Hugging
Face id that is not a catalog alias resolves from the local cache (madmax.config.hf, madmax.config.hf_hub)."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config import hf_hub
from madmax.config.hf import DEFAULT_TRAIN_SEQ_LEN, model_name
from madmax.config.loaders import load_model
from madmax.errors import ConfigError

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
QWEN2 = json.loads((HF / "qwen2-7b" / "config.json").read_text())  # no _name_or_path


@pytest.mark.parametrize(("cfg", "expected"), [
    ({"_name_or_path": "Qwen/Qwen2-7B", "architectures": ["Qwen2ForCausalLM"]}, "Qwen/Qwen2-7B"),
    ({"_name_or_path": "/fsx/runs/ckpt-7/", "architectures": ["Qwen2ForCausalLM"]}, "ckpt-7"),
    ({"_name_or_path": "./out", "architectures": ["X"]}, "out"),
    ({"_name_or_path": "", "architectures": ["Qwen2ForCausalLM"]}, "Qwen2ForCausalLM"),
    ({"_name_or_path": ["not", "a", "name"], "architectures": ["Qwen2ForCausalLM"]}, "Qwen2ForCausalLM"),
    ({"architectures": []}, "hf"),
    ({"architectures": [3]}, "hf"),
    ({}, "hf"),
])
def test_model_name_from_the_config(cfg, expected):
    assert model_name(cfg, "hf") == expected


def test_a_config_in_a_folder_named_hf_is_named_by_its_architecture_and_trains_at_4096(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(QWEN2))
    model = load_model(tmp_path / "hf" / "config.json")
    assert model.name == "Qwen2ForCausalLM"
    # max_position_embeddings 131,072 is the context it serves; it trains at min(131,072, 4,096).
    assert (model.max_seq_len, model.train_seq_len, model.default_seq_len) == (131072, 4096, 4096)
    assert "max_position_embeddings 131,072" in model.train_seq_len_source


def test_the_default_length_is_said_in_the_assumptions_only_when_used(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN2 | {"_name_or_path": "Qwen/Qwen2-7B"}))
    kwargs = {"model": str(path), "system": "dgx-h100", "num_gpus": 8, "global_batch": 8, "strategy": "tp=4"}
    result = api.simulate(**kwargs)
    assert (result.model, result.seq_len) == ("Qwen/Qwen2-7B", 4096)
    assert any(a.startswith("seq_len not given: 4,096 tokens, min(max_position_embeddings 131,072, 4,096)")
               for a in result.assumptions)
    given = api.simulate(**kwargs, seq_len=2048)
    assert given.seq_len == 2048 and not any(a.startswith("seq_len not given") for a in given.assumptions)


def test_configs_with_their_own_training_length_keep_it():
    llama = load_model(HF / "llama-3.1-8b" / "config.json")  # rope_scaling.original_max_position_embeddings
    assert (llama.default_seq_len, llama.train_seq_len_source) == (8192, "")
    gpt2 = load_model(HF / "gpt2" / "config.json")  # n_positions 1024 < 4096: its own context
    assert (gpt2.default_seq_len, gpt2.train_seq_len, gpt2.train_seq_len_source) == (1024, None, "")
    assert DEFAULT_TRAIN_SEQ_LEN == 4096


def fake_cache(root: Path, repo_id: str, cfg: dict, commits: tuple[str, ...] = ("abc123",),
               main: str | None = "abc123") -> Path:
    """A folder laid out as huggingface_hub's cache: models--org--name/{refs/main, snapshots/<commit>/config.json}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    for commit in commits:
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text(json.dumps(cfg | {"_commit": commit}))
    if main is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(main)
    return root


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # no download: the cache alone
    return root


def test_an_uncatalogued_hf_id_loads_from_the_cache_named_by_the_id(hub_cache):
    fake_cache(hub_cache, "Qwen/Qwen2-7B", QWEN2)
    model = load_model("Qwen/Qwen2-7B")
    assert (model.name, model.num_layers, model.hidden_size, model.default_seq_len) == ("Qwen/Qwen2-7B", 28, 3584,
                                                                                        4096)


def test_the_cache_prefers_the_snapshot_refs_main_names(hub_cache):
    fake_cache(hub_cache, "org/m", QWEN2, commits=("old", "new"), main="old")
    assert hf_hub.cached_config("org/m").parent.name == "old"
    # Without refs/main, the newest snapshot.
    repo = fake_cache(hub_cache / "b", "org/m", QWEN2, commits=("one", "two"), main=None) / "models--org--m"
    os.utime(repo / "snapshots" / "one" / "config.json", (1, 1))
    os.utime(repo / "snapshots" / "two" / "config.json", (2, 2))
    assert hf_hub.cache_dir() == hub_cache
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(hub_cache / "b"))
        assert hf_hub.cached_config("org/m").parent.name == "two"


def test_cache_folder_follows_the_hf_environment(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hf_hub.cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub.cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub.cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hf_hub.cache_dir() == tmp_path / "cache"


def test_a_missing_id_is_one_sentence_saying_where_it_looked(hub_cache):
    with pytest.raises(ConfigError) as err:
        load_model("Qwen/Qwen2-7B")
    message = str(err.value)
    assert str(hub_cache / "models--Qwen--Qwen2-7B" / "snapshots" / "*" / "config.json") in message
    assert "huggingface_hub is not installed" in message and "\n" not in message


def test_the_cli_resolves_the_id_and_refuses_a_missing_one_in_one_line(hub_cache):
    fake_cache(hub_cache, "Qwen/Qwen2-7B", QWEN2)
    ok = CliRunner().invoke(app, ["inspect", "Qwen/Qwen2-7B", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["model"]["name"] == "Qwen/Qwen2-7B"
    missing = CliRunner().invoke(app, ["inspect", "Qwen/Qwen2-0.5B"])
    assert missing.exit_code == 2
    assert missing.output.startswith("error: model 'Qwen/Qwen2-0.5B' is not a catalog name")


def test_with_huggingface_hub_the_config_is_downloaded(hub_cache, tmp_path, monkeypatch):
    downloaded = tmp_path / "dl" / "config.json"
    downloaded.parent.mkdir()
    downloaded.write_text(json.dumps(QWEN2))
    calls = []

    def hf_hub_download(repo_id: str, filename: str) -> str:
        calls.append((repo_id, filename))
        return str(downloaded)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hf_hub_download))
    assert load_model("org/qwen-copy").name == "org/qwen-copy"
    assert calls == [("org/qwen-copy", "config.json")]

    def offline(repo_id: str, filename: str) -> str:
        raise OSError("offline")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=offline))
    with pytest.raises(ConfigError, match=r"downloading it failed \(OSError\)"):
        load_model("org/other")


def test_catalog_aliases_and_files_still_win(hub_cache, tmp_path, monkeypatch):
    assert load_model("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"  # a catalog alias, not the cache
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "config.json").write_text(json.dumps(QWEN2))
    monkeypatch.chdir(tmp_path)
    assert load_model("org/config.json").name == "Qwen2ForCausalLM"  # a file that exists
