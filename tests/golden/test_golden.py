"""Golden end-to-end predictions: a refactor must reproduce them (relative 1e-9, strings and flags exactly).

Numbers match to a relative 1e-9, or an absolute 1e-12 for values that are rounding noise around zero (a
pipeline bubble of 4e-17 s on one stage): 1e-12 s, 1e-12 bytes and 1e-12 of MFU are all far below
anything the model resolves.

Each `*.json` here holds the inputs of one `madmax.api.simulate` call (the same as `madmax simulate`
flags) and its full `to_dict()` result. When a change to the model is meant to move a number, rewrite
the files with

    MADMAX_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden

and commit them on their own: changing a golden file is a commit that says why the prediction moved
(which equation, constant or calibration changed, and by how much). A golden file is a regression
guard, not a measurement; accuracy against published numbers lives in `madmax validate`/`benchmarks/`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from madmax import api

HERE = Path(__file__).parent
UPDATE = os.environ.get("MADMAX_UPDATE_GOLDEN") == "1"
REL = 1e-9
ABS = 1e-12

# name -> (why this case, inputs of api.simulate)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3.1-8b_8xh100_tp2": (
        "Single node, tensor parallel with sequence parallelism and ZeRO-1 data parallel (dp=4).",
        {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 8, "task": "pretrain", "global_batch": 64,
         "seq_len": 8192, "dtype": "bf16", "strategy": "tp=2"},
    ),
    "gpt3-175b_1024xa100_tp8_pp8": (
        "Narayanan et al. 2021 (arXiv 2104.04473) GPT-3 175B setup: 1024 A100, tp=8, pp=8, dp=16, batch 1536, "
        "seq 2048; 1F1B pipeline over 96 micro-batches per replica and inter-node data parallelism.",
        {"model": "gpt3-175b", "system": "dgx-a100", "num_gpus": 1024, "task": "pretrain", "global_batch": 1536,
         "seq_len": 2048, "dtype": "bf16", "strategy": "tp=8,pp=8,mbs=1"},
    ),
    "llama-3.1-70b_16xh100_lora": (
        "LoRA fine-tuning (rank 16 on qkv and out) across two nodes with tp=8, pp=2: frozen base weights.",
        {"model": "llama-3.1-70b", "system": "dgx-h100", "num_gpus": 16, "task": "finetune", "finetune": "lora",
         "lora_rank": 16, "global_batch": 32, "seq_len": 4096, "dtype": "bf16", "strategy": "tp=8,pp=2"},
    ),
}


def mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Dotted paths where `actual` differs from `expected`: numbers beyond REL (or ABS), anything else unequal."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        keys = sorted(set(expected) | set(actual))
        return [m for k in keys for m in (
            [f"{path}{k}: missing"] if k not in actual else [f"{path}{k}: unexpected"] if k not in expected
            else mismatches(expected[k], actual[k], f"{path}{k}."))]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for m in mismatches(e, a, f"{path}{i}.")]
    numbers = (int, float)
    if (isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool)
            and not isinstance(actual, bool)):
        if math.isclose(expected, actual, rel_tol=REL, abs_tol=ABS):
            return []
    elif expected == actual and type(expected) is type(actual):
        return []
    return [f"{path.rstrip('.')}: golden {expected!r}, now {actual!r}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_prediction(name: str) -> None:
    why, inputs = CASES[name]
    path = HERE / f"{name}.json"
    result = json.loads(json.dumps(api.simulate(**inputs).to_dict()))  # what `--json` prints
    if UPDATE:
        path.write_text(json.dumps({"why": why, "inputs": inputs, "result": result}, indent=2) + "\n")
    golden = json.loads(path.read_text())
    assert golden["inputs"] == inputs, f"{path.name}: inputs changed; rerun with MADMAX_UPDATE_GOLDEN=1"
    diff = mismatches(golden["result"], result)
    assert not diff, f"{path.name} moved (MADMAX_UPDATE_GOLDEN=1 rewrites it; commit why):\n" + "\n".join(diff)


def test_mismatches_finds_moved_numbers() -> None:
    golden = {"a": 1.0, "b": {"c": 2.0, "d": "x"}, "f": True}
    assert mismatches(golden, {"a": 1.0 + 1e-12, "b": {"c": 2.0, "d": "x"}, "f": True}) == []
    assert mismatches(golden, {"a": 1.001, "b": {"c": 2.0, "d": "y"}, "f": 1}) == [
        "a: golden 1.0, now 1.001", "b.d: golden 'x', now 'y'", "f: golden True, now 1"]
    assert mismatches({"a": 1}, {"b": 1}) == ["a: missing", "b: unexpected"]
    assert mismatches({"bubble": 4.2e-17}, {"bubble": 0.0}) == []  # noise around zero
