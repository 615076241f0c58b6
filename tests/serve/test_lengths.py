"""Request lengths drawn per request (task.prompt_len_std / output_len_std, aiperf's --isl-stddev/--osl-stddev)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax.api import simulate
from madmax.cli import app
from madmax.errors import MadmaxError
from madmax.serve.lengths import TRUNCATE_SIGMAS, Lengths

SERVE = dict(model="llama-3.1-8b", system="dgx-h100", num_gpus=1, task="inference", dtype="fp8",
             prompt_len=1024, output_len=128)


def test_fixed_lengths_are_the_given_ones():
    prompt, output = Lengths(1024, 128).draw(5)
    assert prompt.tolist() == [1024] * 5 and output.tolist() == [128] * 5
    assert Lengths(1024, 128).longest == (1024, 128) and not Lengths(1024, 128).spread


def test_drawn_lengths_have_the_asked_mean_and_deviation():
    prompt, output = Lengths(1024, 256, prompt_std=256, output_std=32, seed=3).draw(20_000)
    # Truncation at 1 and mean + 4 std removes under 1e-4 of a normal of mean 4 std: moments as asked within
    # the sampling error of 20,000 draws (std / sqrt(n) = 1.8 tokens on the prompt's mean).
    assert prompt.mean() == pytest.approx(1024, abs=8)
    assert prompt.std() == pytest.approx(256, rel=0.02)
    assert output.mean() == pytest.approx(256, abs=1)
    assert output.std() == pytest.approx(32, rel=0.02)
    assert prompt.max() <= 1024 + 4 * 256 and output.max() <= 256 + 4 * 32


def test_draws_are_seeded_and_a_longer_draw_extends_a_shorter_one():
    lengths = Lengths(500, 100, prompt_std=120, output_std=40, seed=7)
    short, long = lengths.draw(10), lengths.draw(1000)
    assert np.array_equal(short[0], long[0][:10]) and np.array_equal(short[1], long[1][:10])
    other = Lengths(500, 100, prompt_std=120, output_std=40, seed=8).draw(10)
    assert not np.array_equal(short[0], other[0])


@given(mean=st.integers(1, 100_000), std=st.floats(0, 50_000, allow_nan=False), n=st.integers(1, 300),
       seed=st.integers(0, 2**32 - 1))
def test_every_draw_lies_within_its_bounds(mean, std, n, seed):
    prompt, _ = Lengths(mean, 1, prompt_std=std, seed=seed).draw(n)
    hi = Lengths(mean, 1, prompt_std=std).longest[0]
    assert prompt.dtype.kind == "i" and len(prompt) == n
    assert prompt.min() >= 1 and prompt.max() <= hi
    assert hi == (mean + int(TRUNCATE_SIGMAS * std) if std > 0 else mean)


def test_a_deviation_of_zero_is_the_fixed_run():
    fixed = simulate(**SERVE, mode="concurrency", batch=16)
    zero = simulate(**SERVE, mode="concurrency", batch=16, prompt_len_std=0, output_len_std=0)
    assert zero.ttft_s == fixed.ttft_s and zero.tpot_s == fixed.tpot_s


def test_drawn_lengths_change_the_closed_loop_and_say_so():
    fixed = simulate(**SERVE, mode="concurrency", batch=16)
    drawn = simulate(**SERVE, mode="concurrency", batch=16, prompt_len_std=256, output_len_std=32, seed=1)
    assert drawn.ttft_s != fixed.ttft_s
    note = next(a for a in drawn.assumptions if a.startswith("request lengths drawn"))
    assert "seed 1" in note and "std 256" in note and "[1, 2,048]" in note
    # The same output tokens on average: the closed loop's throughput stays near the fixed run's.
    assert drawn.output_tokens_per_s == pytest.approx(fixed.output_tokens_per_s, rel=0.15)


@pytest.mark.parametrize("mode, extra", [("rate", {"request_rate": 5.0, "num_requests": 200}),
                                         ("saturation", {"batch": 32, "num_requests": 256}),
                                         ("disaggregated", {"batch": 16, "num_requests": 64})])
def test_every_mode_that_serves_requests_one_by_one_draws_them(mode, extra):
    kwargs = dict(SERVE, num_gpus=2, mode=mode, prompt_len_std=200, output_len_std=20, **extra)
    if mode == "disaggregated":
        kwargs["strategy"] = "prefill_workers=1,decode_workers=1"
    result = simulate(**kwargs)
    assert result.ttft_s > 0 and result.output_tokens_per_s > 0
    assert any(a.startswith("request lengths drawn") for a in result.assumptions)


@pytest.mark.parametrize("extra, words", [
    ({"mode": "static", "batch": 4, "prompt_len_std": 10}, "mode static serves one batch"),
    ({"mode": "concurrency", "batch": 4, "prefix_len": 100, "output_len_std": 10}, "shared prefix"),
    ({"mode": "concurrency", "batch": 4, "prompt_len_std": 40_000}, "exceeds max_seq_len"),
    ({"mode": "concurrency", "batch": 4, "prompt_len_std": -1}, "prompt_len_std"),
    ({"mode": "concurrency", "batch": 4, "output_len_std": float("nan")}, "output_len_std"),
    ({"mode": "concurrency", "batch": 4, "seed": 3}, "task.seed"),
])
def test_lengths_that_cannot_be_drawn_are_refused_in_one_sentence(extra, words):
    with pytest.raises(MadmaxError) as exc:
        simulate(**SERVE, **extra)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_arrivals_list_their_own_lengths(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,100,10\n0.1,200,10\n", encoding="utf-8")
    with pytest.raises(MadmaxError, match=r"task\.prompt_len_std does not apply beside task\.arrivals"):
        simulate(**{**SERVE, "prompt_len": None, "output_len": None}, mode="rate", arrivals=trace, prompt_len_std=5)


def test_the_cli_takes_the_deviations_and_refuses_a_static_batch_with_exit_2():
    args = ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task", "inference",
            "--prompt-len", "512", "--output-len", "64", "--dtype", "fp8"]
    ok = CliRunner().invoke(app, [*args, "--mode", "concurrency", "--batch", "8", "--prompt-len-std", "128",
                                  "--output-len-std", "16", "--json"])
    assert ok.exit_code == 0, ok.output
    assert "request lengths drawn" in ok.output
    bad = CliRunner().invoke(app, [*args, "--batch", "8", "--prompt-len-std", "128"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1


@settings(max_examples=12)
@given(prompt_std=st.floats(0, 3000), output_std=st.floats(0, 300), seed=st.integers(0, 1000),
       mode=st.sampled_from(["rate", "concurrency"]))
def test_any_drawn_lengths_serve_every_request_with_finite_latencies(prompt_std, output_std, seed, mode):
    extra = {"request_rate": 20.0} if mode == "rate" else {"batch": 8}
    drawn = prompt_std > 0 or output_std > 0 or mode == "rate"  # a seed needs something to draw
    result = simulate(**SERVE, mode=mode, num_requests=40, prompt_len_std=prompt_std, output_len_std=output_std,
                      seed=seed if drawn else None, **extra)
    assert np.isfinite(result.ttft_s) and result.ttft_s > 0 and np.isfinite(result.tpot_s) and result.tpot_s > 0
    assert result.fits and np.isfinite(result.output_tokens_per_s) and result.output_tokens_per_s > 0


def test_a_disaggregated_request_sends_its_own_prompts_cache(monkeypatch):
    # Each request's KV transfer is timed for its own prompt: the transfer function is asked for every drawn
    # prompt length, and longer prompts take longer; the note says so.
    import dataclasses

    from madmax.serve import modes

    asked: list[tuple[int, float]] = []
    original = modes.disaggregated

    def spying(dis, *args, **kwargs):
        def transfer(tokens: int) -> float:
            seconds = dis.transfer_s(tokens)
            asked.append((tokens, seconds))
            return seconds
        return original(dataclasses.replace(dis, transfer_s=transfer), *args, **kwargs)

    monkeypatch.setattr(modes, "disaggregated", spying)
    kwargs = dict(SERVE, num_gpus=2, mode="disaggregated", batch=4, num_requests=40, prompt_len=256, output_len=8,
                  strategy="prefill_workers=1,decode_workers=1")
    drawn = simulate(**kwargs, prompt_len_std=100, seed=2)
    prompts, _ = Lengths(256, 8, prompt_std=100, seed=2).draw(40)
    assert sorted(t for t, _ in asked) == sorted(prompts.tolist())
    by_tokens = dict(asked)
    shortest, longest = min(by_tokens), max(by_tokens)
    assert by_tokens[longest] > by_tokens[shortest]
    assert any("each request sends its own prompt's cache" in a for a in drawn.assumptions)
