"""`madmax search` and `madmax.search.search`: the best strategy, the counts, the outputs, bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.search import search
from madmax.search.api import find

runner = CliRunner()


def test_best_equals_exhaustive_simulation(outcome):
    # Simulate every evaluated candidate (those that fit; the rest must not fit): the search, which
    # replayed only 30 and simulated 5, finds the same best iteration time.
    times = {}
    for i in range(outcome.evaluated):
        result = api.simulate(**outcome.ctx.simulate_kwargs, strategy=outcome.strategy(i))
        assert result.fits
        times[outcome.strategy(i)] = result.iteration_time_s
    best = outcome.top(1)[0]
    assert outcome.exact[best].iteration_time_s == pytest.approx(min(times.values()), rel=1e-12)
    ranked = [outcome.exact[i].iteration_time_s for i in outcome.top(3)]
    assert ranked == sorted(ranked)


def test_pruning_counts_add_up(outcome):
    assert outcome.enumerated == sum(outcome.rejected.values()) + outcome.evaluated
    assert outcome.rejected["memory"] > 0  # 3 GiB GPUs: some candidates do not fit
    assert outcome.valid == outcome.evaluated + outcome.rejected["memory"]


def test_dataframe_has_every_evaluated_candidate(outcome):
    pytest.importorskip("pandas")
    from madmax.search.api import to_frame

    frame = to_frame(outcome)
    assert len(frame) == outcome.evaluated
    assert frame["simulated"].sum() == len(outcome.exact)
    top = frame.iloc[0]
    assert top["simulated"] and top["strategy"] == outcome.strategy(outcome.top(1)[0])
    assert frame.loc[frame["simulated"], "iteration_time_s"].is_monotonic_increasing
    assert frame.attrs["enumerated"] == outcome.enumerated and frame.attrs["rejected"] == outcome.rejected
    # Every row's strategy string is the one `describe` writes (and `simulate` reads).
    for pos in range(0, len(frame), 37):
        assert frame["strategy"].iloc[pos] == outcome.strategy(int(outcome.ranked[pos]))


def test_search_function_returns_a_dataframe(case):
    pytest.importorskip("pandas")
    frame = search(**{**case, "zero": [1]}, top=2, exact=2, refine=10)
    assert {"strategy", "tp", "pp", "iteration_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes",
            "exposed_communication_s", "objective", "simulated"} <= set(frame.columns)
    assert frame.attrs["evaluated"] == len(frame)


def test_workers_give_the_same_results(outcome, case):
    again = find(**case, top=3, exact=5, refine=30, workers=2)
    assert [outcome.strategy(i) for i in outcome.top(3)] == [again.strategy(i) for i in again.top(3)]


def _cli(files, *extra: str):
    return runner.invoke(app, ["search", "-m", str(files["model"]), "-s", str(files["system"]), "--num-gpus", "8",
                               "--global-batch", "8", "--seq-len", "1024", "--zero", "1,3", "--recompute", "none",
                               *extra])


def test_json_shape(files):
    result = _cli(files, "--json", "--top", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert isinstance(data["evaluated"], int) and data["evaluated"] > 0
    assert len(data["results"]) == 2
    first = data["results"][0]
    assert first["strategy"].startswith("tp=")
    for key in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "hfu", "peak_memory_bytes", "fits", "breakdown",
                "memory"):
        assert key in first
    assert first["iteration_time_s"] <= data["results"][1]["iteration_time_s"]


def test_text_and_parquet(files, tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    out = tmp_path / "all.parquet"
    result = _cli(files, "--top", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "rejected: memory" in result.output and "Top 3 by throughput" in result.output
    frame = pd.read_parquet(out)
    assert len(frame) == int(json.loads(_cli(files, "--json").output)["evaluated"])


@pytest.mark.parametrize(("extra", "words"), [
    (["--objective", "cost"], ["objective=cost", "price_per_gpu_hour_usd"]),  # the system has no price
    (["--objective", "speed"], ["objective='speed'", "allowed: throughput"]),
    (["--top", "0"], ["top=0"]),
    (["--zero", "5"], ["zero=[5]", "allowed: 0, 1, 2, 3"]),
    (["--zero", "one"], ["zero='one'"]),
    (["--recompute", "some"], ["recompute='some'", "allowed: none, selective, full"]),
    (["--max-tp", "0"], ["max_tp=0"]),
    (["--orders", "tp-dp"], ["strategy.order"]),
    # a serving search takes no global batch (the training search's fixture gives one)
    (["--task", "inference"], ["global_batch applies to training searches", "allowed with --task inference"]),
    # ... and a training search takes no serving option: nothing asked for is silently dropped
    (["--prompt-len", "128"], ["prompt_len applies to serving searches", "--task inference"]),
    # a serving engine is no training stack
    (["--stack", "vllm"], ["stack='vllm'", "serving engine", "allowed for training: megatron-core"]),
    (["--mode", "saturation"], ["mode applies to serving searches"]),
    (["--out", "x.csv"], ["out='x.csv'", ".parquet"]),
    (["--tokens", "-5"], ["tokens=-5"]),
])
def test_bad_input_exits_2_with_one_sentence(files, extra, words):
    result = _cli(files, *extra)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0]


def test_global_batch_is_required(files):
    result = runner.invoke(app, ["search", "-m", str(files["model"]), "-s", str(files["system"])])
    assert result.exit_code == 2 and "global_batch is required" in result.output
