"""ViT training and inference through the API and CLI: every parallelism that applies runs, samples/s are
images/s, the search enumerates a vit, and bad input exits 2 with one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from madmax.api import simulate
from madmax.cli import app
from madmax.errors import StrategyError

runner = CliRunner()


@pytest.mark.parametrize("strategy", ["zero=1", "zero=3", "tp=2,sp=1", "pp=4,mbs=8", "tp=2,pp=2,mbs=16,sp=1"])
def test_every_parallelism_runs(strategy: str) -> None:
    r = simulate("vit-h/14", "dgx-a100", 32, global_batch=4096, strategy=strategy)
    assert r.fits and r.seq_len == 257 and r.global_batch == 4096
    assert r.samples_per_s == pytest.approx(4096 / r.iteration_time_s)
    assert 0.1 < r.mfu < 0.7


def test_the_local_batch_is_one_micro_batch_by_default() -> None:
    r = simulate("vit-l/16", "dgx-a100", 32, global_batch=4096)
    assert r.strategy.startswith("tp=1,pp=1,dp=32") and "mbs=128" in r.strategy


def test_inference_is_one_forward_pass_of_the_batch() -> None:
    infer = simulate("vit-b/16", "dgx-a100", 8, task="inference", batch=1024)
    train = simulate("vit-b/16", "dgx-a100", 8, global_batch=1024)
    assert infer.samples_per_s > 2 * train.samples_per_s  # no backward (about 2x the forward) or update


def test_context_parallelism_is_refused() -> None:
    with pytest.raises(StrategyError, match=r"strategy.cp=2 is not modelled for vit-b/16: .* 197 tokens; allowed: 1"):
        simulate("vit-b/16", "dgx-a100", 8, strategy="cp=2")


def test_search_enumerates_a_vit() -> None:
    from madmax.search import search

    ranked = search("vit-b/16", "dgx-a100", 8, global_batch=1024, top=2)
    assert len(ranked) >= 1 and ranked.iloc[0]["iteration_time_s"] > 0


def test_cli_bad_patch_exits_2_with_one_sentence(tmp_path: Path) -> None:
    model = {"family": "vit", "name": "v", "image_size": 224, "patch_size": 15, "num_layers": 2,
             "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256, "num_classes": 10}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(model))
    result = runner.invoke(app, ["simulate", "--model", str(path), "--system", "dgx-a100", "--num-gpus", "8"])
    assert result.exit_code == 2
    assert "patch_size=15 does not divide image_size=224" in result.output
    assert "Traceback" not in result.output
    path.write_text(yaml.safe_dump(model | {"patch_size": 16, "num_classes": 0}))
    result = runner.invoke(app, ["simulate", "--model", str(path), "--system", "dgx-a100", "--num-gpus", "8"])
    assert result.exit_code == 2 and "model.num_classes=0" in result.output


def test_sweeps_take_vit_models_in_both_modes(tmp_path: Path) -> None:
    from madmax.sweep import load, run_sweep

    spec = {"name": "vit", "models": ["vit-b/16"], "systems": "dgx-a100", "num_gpus": 8, "global_batches": 1024,
            "groups": [{"name": "listed", "strategies": ["zero=1", "tp=2,sp=1"]},
                       {"name": "searched", "mode": "search", "search": {"top": 2, "refine": 20}}]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_sweep(path, tmp_path / "out", workers=1)
    df = load(tmp_path / "out")
    assert len(df) == 3 and set(df["status"]) == {"ok"} and (df["samples_per_s"] > 0).all()


def test_serving_search_refuses_a_model_that_generates_no_tokens() -> None:
    # it used to crash (an AssertionError for a vit, a KeyError for a DLRM) deep in the serving layouts
    for model in ("vit-b/16", "dlrm-dcnv2"):
        result = runner.invoke(app, ["search", "--model", model, "--system", "dgx-a100", "--num-gpus", "8",
                                     "--task", "inference", "--prompt-len", "4", "--output-len", "1"])
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert f"{model} runs one forward pass per batch" in " ".join(result.output.split())


def test_inspect_shows_the_image_shape() -> None:
    result = runner.invoke(app, ["inspect", "vit-l/16"])
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in result.output.splitlines()
            if line.count("│") == 3}
    assert rows["image_size"] == "224" and rows["patch_size"] == "16" and rows["num_classes"] == "1000"
    assert rows["total params"] == "0.304 B" and "vocab_size" not in rows
