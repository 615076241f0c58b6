"""The vit_reference dataset: each TFLOP/s row of the reference's ViT sheet mapped to a simulate call with the
sheet's FLOP convention, and the table command writes measured, reference and madmax side by side."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from madmax.validate.datasets import LOADERS, load_vit_reference
from madmax.validate.runner import run_case
from madmax.validate.vit import reference_prediction


def test_nine_tflops_rows_map_to_fsdp_on_dc_a() -> None:
    dataset = LOADERS["vit_reference"]()
    assert len(dataset.cases) == 9 and not dataset.unmapped
    first = dataset.cases[0]
    assert first.label == "ViT-L 32xa100 fsdp gb4096 lb128" and first.measured == 46.233
    assert first.kwargs["system"] == "dc-a" and first.kwargs["strategy"] == "tp=1,pp=1,zero=3,dp=32,mbs=128"
    # the sheet's convention: 3 x 0.122 TFLOPs per image over its 14*14 + 1 = 197 tokens
    assert first.published_flops_per_token == pytest.approx(3 * 0.122e12 / 197)
    assert reference_prediction(first.row_id) == pytest.approx(59.52772687499999)


def test_vit_h_gets_its_32_layers() -> None:
    case = next(c for c in load_vit_reference().cases if c.label.startswith("ViT-H"))
    assert case.kwargs["model"]["num_layers"] == 32
    assert any("known error" in note for note in case.assumptions)


def test_a_row_predicts_tflops_by_the_sheets_count() -> None:
    from madmax.api import simulate

    case = load_vit_reference().cases[0]
    row = run_case(case, simulate)
    result = simulate(**case.kwargs)
    assert row.predicted == pytest.approx(3 * 0.122e12 * result.samples_per_s / 32 / 1e12)


def test_the_table_command_writes_both_errors(tmp_path: Path) -> None:
    path = Path(__file__).parents[2] / "benchmarks" / "validate_vit.py"
    spec = importlib.util.spec_from_file_location("validate_vit", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    text = module.markdown(module.rows())
    assert "| ViT-L 32xa100 fsdp gb4096 lb128 | fitted | 46.2 | 59.5 | +28.8% |" in text
    assert "| ViT-H 32xa100 fsdp gb4096 lb128 | held out | 54.2 | 61.6 | +13.8% |" in text
    assert "| all rows (9) | 30.8% |" in text and "| held-out rows (5) | 40.0% |" in text
    assert "| default (used) |" in text and "| fsdp2 |" in text  # the stack sensitivity, from the fit file
