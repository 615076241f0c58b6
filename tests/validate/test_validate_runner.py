"""Error statistics and reports of the validation runner, on a fake simulate (no engine involved)."""

import json

import pytest

from madmax.errors import ConfigError
from madmax.validate.conventions import predicted_value
from madmax.validate.datasets import Case, Dataset, Unmapped, load_korthikanti2022
from madmax.validate.runner import Stats, run_case, run_validation


def _case(name, measured, *, dataset="fake", metric="iteration_time_s", family="gpt", parallelism="dp",
          gpu="a100-80gb", **extra):
    # The fake simulate reads the prediction from the model name: "t=1.1" predicts 1.1 s.
    return Case(dataset=dataset, row_id=f"{dataset}:{name}", label=name,
                kwargs={"model": name, "system": "dgx-a100", "num_gpus": 8, "task": "pretrain",
                        "global_batch": 8, "seq_len": 2048, "dtype": "bf16", "strategy": "tp=8"},
                metric=metric, measured=measured, unit="s", family=family, gpu=gpu,
                parallelism=parallelism, **extra)


class _Result:
    def __init__(self, data):
        self._data = data

    def to_dict(self):
        return self._data


def fake_simulate(model, **_):
    if model == "bad":
        raise ConfigError("model.num_heads=0: must be positive")
    if model == "bug":
        raise ZeroDivisionError("division by zero")
    t = float(model.split("=")[1])
    return _Result({"iteration_time_s": t, "tokens_per_s_per_gpu": 8 * 2048 / t / 8,
                    "samples_per_s": 8 / t, "mfu": 0.5, "hfu": 0.6, "fits": t < 2})


def _dataset(cases, unmapped=()):
    return Dataset(cases[0].dataset, "test data", tuple(cases), tuple(unmapped))


def test_signed_and_absolute_percent_error():
    # predicted 1.1 s for a measured 1.0 s: +10 %; predicted 0.8 s: -20 %
    assert run_case(_case("t=1.1", 1.0), fake_simulate).signed_error_pct == pytest.approx(10.0)
    row = run_case(_case("t=0.8", 1.0), fake_simulate)
    assert row.signed_error_pct == pytest.approx(-20.0) and row.abs_error_pct == pytest.approx(20.0)


def test_statistics_by_hand():
    # errors +10, -20, +30, +5, -5 %: |e| sorted 5, 5, 10, 20, 30
    # median 10; mean 70/5 = 14; p90 (linear) at rank 0.9*4 = 3.6: 20 + 0.6*10 = 26; bias 20/5 = 4
    cases = [_case(f"t={t}", 1.0) for t in (1.1, 0.8, 1.3, 1.05, 0.95)]
    report = run_validation([_dataset(cases)], simulate=fake_simulate)
    s = report.dataset("fake").stats
    assert (s.rows, s.median_abs_pct, s.mean_abs_pct) == (5, pytest.approx(10), pytest.approx(14))
    assert s.p90_abs_pct == pytest.approx(26) and s.mean_signed_pct == pytest.approx(4)
    assert s.max_abs_pct == pytest.approx(30)
    worst = report.dataset("fake").worst
    assert [r.case.label for r in worst] == ["t=1.3", "t=0.8", "t=1.1", "t=1.05", "t=0.95"]


def test_five_worst_rows_only():
    cases = [_case(f"t={1 + k / 100}", 1.0) for k in range(1, 9)]  # errors 1..8 %
    worst = run_validation([_dataset(cases)], simulate=fake_simulate).overall.worst
    assert [round(r.abs_error_pct) for r in worst] == [8, 7, 6, 5, 4]


def test_errors_are_recorded_per_row_not_raised():
    cases = [_case("t=1.0", 1.0), _case("bad", 1.0), _case("bug", 1.0)]
    report = run_validation([_dataset(cases, [Unmapped("fake", "fake:9", "x", "MoE not supported yet")])],
                            simulate=fake_simulate)
    s = report.dataset("fake")
    assert (s.mapped, s.unmapped, s.run, s.failed, s.crashed) == (3, 1, 1, 2, 1)
    bad = next(r for r in report.rows if r.case.label == "bad")
    assert bad.error == "model.num_heads=0: must be positive" and not bad.crashed
    bug = next(r for r in report.rows if r.case.label == "bug")
    assert bug.crashed and bug.error.startswith("ZeroDivisionError")
    assert s.stats.rows == 1 and s.stats.median_abs_pct == 0


def test_not_fitting_rows_are_counted():
    report = run_validation([_dataset([_case("t=1.0", 1.0), _case("t=3.0", 3.0)])], simulate=fake_simulate)
    assert report.dataset("fake").not_fitting == 1


def test_groupings_and_overall():
    a = [_case("t=1.1", 1.0, dataset="a", family="gpt", parallelism="tp"),
         _case("t=1.2", 1.0, dataset="a", family="llama", parallelism="tp+pp")]
    b = [_case("t=0.7", 1.0, dataset="b", family="llama", gpu="h100-sxm", parallelism="tp+pp")]
    report = run_validation([_dataset(a), _dataset(b)], simulate=fake_simulate)
    assert [s.name for s in report.datasets] == ["a", "b"]
    assert report.overall.stats.rows == 3 and report.overall.stats.median_abs_pct == pytest.approx(20)
    assert report.groups["family"]["gpt"].mean_abs_pct == pytest.approx(10)
    assert report.groups["family"]["llama"].mean_abs_pct == pytest.approx(25)  # (20 + 30) / 2
    assert set(report.groups["gpu"]) == {"a100-80gb", "h100-sxm"}
    assert report.groups["parallelism"]["tp+pp"].rows == 2


def test_flop_metrics_use_the_source_convention():
    # 1 s per iteration of 8 x 2048 tokens on 8 GPUs: 2048 tokens/s/GPU.
    # F_tok = 1e9 FLOPs per token: 2.048e12 FLOP/s per GPU = 2.048 TFLOP/s; MFU over 4.096e12 = 0.5
    result = fake_simulate("t=1.0").to_dict()
    assert predicted_value("tflops_per_gpu", result, flops_per_token=1e9) == pytest.approx(2.048)
    mfu = predicted_value("mfu", result, flops_per_token=1e9, peak_flops_per_s=4.096e12)
    assert mfu == pytest.approx(0.5)
    case = _case("t=1.0", 2.048 / 1.1, metric="tflops_per_gpu", published_flops_per_token=1e9,
                 layer_passes=4, peak_flops_per_s=10e12)
    row = run_case(case, fake_simulate)
    assert row.signed_error_pct == pytest.approx(10.0)
    assert row.engine_value == pytest.approx(0.6 * 10)  # hfu * peak in TFLOP/s, recompute counted


def test_sampling_is_deterministic():
    cases = [_case(f"t={1 + k / 1000}", 1.0) for k in range(50)]
    first = run_validation([_dataset(cases)], simulate=fake_simulate, sample=10, seed=3)
    again = run_validation([_dataset(cases)], simulate=fake_simulate, sample=10, seed=3)
    assert first.dataset("fake").run == 10 and first.dataset("fake").mapped == 50
    assert [r.case.row_id for r in first.rows] == [r.case.row_id for r in again.rows]


def test_report_renders():
    cases = [_case("t=1.1", 1.0), _case("bad", 1.0)]
    report = run_validation([_dataset(cases, [Unmapped("fake", "fake:9", "x", "MoE not supported yet")])],
                            simulate=fake_simulate)
    text = report.to_markdown()
    assert "### fake" in text and "MoE not supported yet" in text and "model.num_heads=0" in text
    assert "worst rows" in text and "+10.0" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["overall"]["stats"]["median_abs_pct"] == pytest.approx(10)
    assert data["rows"][0]["kwargs"]["strategy"] == "tp=8"


def test_real_dataset_through_a_fake_engine():
    # Korthikanti's 13 rows through a fake that always answers 10 s, 1,000 tokens/s/GPU, MFU 0.5.
    def constant(**_):
        return {"iteration_time_s": 10.0, "tokens_per_s_per_gpu": 1000.0, "samples_per_s": 1.0,
                "mfu": 0.5, "hfu": 0.5, "fits": True}

    report = run_validation([load_korthikanti2022()], simulate=constant)
    s = report.dataset("korthikanti2022")
    assert (s.mapped, s.unmapped, s.run, s.failed) == (13, 5, 13, 0)
    row = next(r for r in report.rows if r.case.row_id == "published_dev.csv:32")  # measured 13.75 s
    assert row.signed_error_pct == pytest.approx(100 * (10 - 13.75) / 13.75)


def test_stats_of_nothing_is_none():
    assert Stats.of([]) is None


CALLS: list[str] = []


def counting_simulate(model, **kwargs):
    CALLS.append(model)
    return _Result({"ttft_s": 0.2, "tpot_s": 0.01, "fits": True})


def test_cases_sharing_their_inputs_are_simulated_once():
    # A serving row gives a TTFT and a TPOT case with the same keyword arguments: one simulation scores both.
    cases = [_case("same", 100.0, metric="ttft_ms"), _case("same", 20.0, metric="tpot_ms"),
             _case("other", 100.0, metric="ttft_ms")]
    cases = [Case(**{**c.__dict__, "row_id": f"{c.row_id}:{c.metric}"}) for c in cases]
    CALLS.clear()
    report = run_validation([Dataset("serving", "fake", tuple(cases), (), None)], simulate=counting_simulate)
    assert sorted(CALLS) == ["other", "same"]
    assert [round(r.signed_error_pct, 6) for r in report.rows] == [100.0, -50.0, 100.0]  # 200 vs 100, 10 vs 20 ms


def test_serving_errors_by_hand():
    from madmax.validate.serving_report import Errors

    # predicted / measured = 0.2, 1.1, 3, 5: |e| 80, 10, 200, 400; beyond 2x: 0.2, 3, 5; beyond 4x: 0.2, 5.
    e = Errors.of([2.0, 11.0, 30.0, 50.0], [10.0] * 4)
    assert (e.rows, e.median, e.bias, e.beyond_2x, e.beyond_4x) == (4, 140.0, 105.0, 3, 2)
    assert e.p90 == pytest.approx(340.0)
    assert Errors.of([], []) is None
