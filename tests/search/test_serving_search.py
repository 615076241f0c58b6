"""The serving search: its space, its estimate against simulate, its limits and its command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.search.serving import find_serving

ARGS = {"model": "llama-3.1-8b", "system": "dgx-h100", "num_gpus": 8, "prompt_len": 512, "output_len": 64}


@pytest.fixture(scope="module")
def search():
    return find_serving(**ARGS, max_tpot=0.02, top=3, exact=6)


def test_space_by_hand(search):
    # tp x pp over the divisor pairs of 8 GPUs: (1,1..8: 4), (2,1..4: 3), (4,1..2: 2), (8,1): 10 layouts;
    # formats on H100: weights bf16 or fp8 x cache bf16 or fp8 = 4.
    assert search.enumerated == 10 * 4
    assert sum(search.rejected.values()) == 0  # an 8B model fits everywhere; tp divides 32, 8 and 14336


def test_estimate_is_the_simulated_static_batch(search):
    # The estimate is the serving builder's closed form; simulate adds nothing to a static batch.
    for candidate, result in search.exact:
        assert result.output_tokens_per_s_per_gpu == pytest.approx(candidate.output_tokens_per_s_per_gpu, rel=1e-3)


def test_best_layouts_are_ranked_and_within_the_limits(search):
    best = search.top(3)
    rates = [r.output_tokens_per_s_per_gpu for _, r in best]
    assert rates == sorted(rates, reverse=True)
    assert all(r.tpot_s <= 0.02 and r.fits for _, r in best)
    # No estimated candidate beats the best simulated one by more than the estimate's error.
    assert max(c.output_tokens_per_s_per_gpu for c in search.candidates) <= rates[0] * 1.001


def test_the_best_beats_a_naive_layout(search):
    (_, best), *_ = search.top(1)
    naive = api.simulate("llama-3.1-8b", "dgx-h100", 8, task="inference", batch=8, prompt_len=512, output_len=64,
                         strategy="tp=8")
    assert best.output_tokens_per_s_per_gpu > naive.output_tokens_per_s_per_gpu


def test_cli_json_and_refused_training_flags():
    runner = CliRunner()
    base = ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference", "--prompt-len", "256",
            "--output-len", "32", "--top", "2", "--dtypes", "fp8", "--kv-dtypes", "fp8", "--max-tp", "2"]
    out = runner.invoke(app, [*base, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert len(data["results"]) == 2 and all(r["dtype"] == "fp8" for r in data["results"])
    bad = runner.invoke(app, [*base, "--global-batch", "64"])
    assert bad.exit_code == 2 and "global_batch applies to training searches" in bad.stderr
    for flag, value in (("--lora-rank", "8"), ("--objective", "cost"), ("--no-hybrid", None), ("--workers", "4")):
        bad = runner.invoke(app, [*base, flag, *([value] if value else [])])
        assert bad.exit_code == 2 and "applies to training searches" in bad.stderr, (flag, bad.output)
    missing = runner.invoke(app, ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference"])
    assert missing.exit_code == 2 and "prompt_len" in missing.stderr
    fp4 = runner.invoke(app, [*base[:-6], "--dtypes", "fp4"])
    assert fp4.exit_code == 2 and "dtypes=['fp4']" in fp4.stderr and "allowed:" in fp4.stderr
