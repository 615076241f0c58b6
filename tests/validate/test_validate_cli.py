"""`madmax validate` and `madmax calibrate` on small inputs: output shapes, and exit status 2 on bad input."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from madmax.cli import app
from madmax.hardware.profile import load_profile
from madmax.validate.datasets import load_vtrain_single, read_rows

runner = CliRunner()
DATA = Path(__file__).parent / "data"
VTRAIN_HEAD = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
               "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


def _vtrain_rows(n_per_shape: int = 2, shapes: int = 2) -> str:
    """The first rows of the shipped vtrain_single file: `n_per_shape` rows of each of `shapes` shapes."""
    picked: dict[tuple, list[dict]] = {}
    for _, row in read_rows("vtrain/ground_truth_single.csv"):
        key = (row["hidden size"], row["# layers"])
        if key in picked or len(picked) < shapes:
            picked.setdefault(key, [])
            if len(picked[key]) < n_per_shape:
                picked[key].append(row)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=VTRAIN_HEAD.split(","), lineterminator="\n")
    writer.writeheader()
    for rows in picked.values():
        writer.writerows(rows)
    return out.getvalue()


@pytest.fixture
def tiny_csv(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text(_vtrain_rows())
    return path


def test_validate_json_shape_on_a_user_csv(tiny_csv, tmp_path):
    rows_csv = tmp_path / "rows.csv"
    result = runner.invoke(app, ["validate", str(tiny_csv), "--json", "--jobs", "1", "--out", str(rows_csv)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"overall", "overall_with_stacks", "datasets", "groups", "comparisons", "cross_source",
                         "fit_effects"}
    (ds,) = data["datasets"]
    assert ds["name"] == "mine" and ds["mapped"] == ds["run"] == 4 and ds["failed"] == 0
    assert set(ds["stats"]) == {"rows", "median_abs_pct", "mean_abs_pct", "p90_abs_pct", "max_abs_pct",
                                "mean_signed_pct", "median_signed_pct"}
    assert len(ds["worst"]) == 4 and {"kwargs", "measured", "predicted", "signed_error_pct"} <= set(ds["worst"][0])
    assert set(data["groups"]) == {"family", "gpu", "parallelism", "metric"} and data["groups"]["family"]["gpt"]
    assert data["comparisons"] == []  # a user file is not a vTrain dataset: no stack re-run
    # a user's file is a source of its own: no shipped fit drew on it, so its rows are its cross-source score
    (mine,) = [s for s in data["cross_source"] if s["name"] == "mine"]
    assert mine["scored"] == "no fit of its own" and mine["cross"] == mine["shipped"] == ds["stats"]
    lines = rows_csv.read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("dataset,row_id,label")


def test_markdown_page(tiny_csv, tmp_path):
    page = tmp_path / "page.md"
    result = runner.invoke(app, ["validate", str(tiny_csv), "--markdown", str(page), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("# Validation") and "madmax validate --markdown docs/validation.md" in text
    assert "### mine" in text and "inputs: model gpt-" in text


def test_vtrain_stack_rerun_compares_held_out_rows_only():
    from madmax.validate.command import run
    from madmax.validate.launch_fit import split_by_shape

    report = run(["vtrain_single"], sample=40, jobs=1, cross_source=False)
    (comparison,) = report.comparisons
    assert comparison.name == "vtrain_single+stack" and comparison.baseline == "vtrain_single"
    stack_rows = [r for r in report.rows if r.case.dataset == "vtrain_single+stack"]
    _, held = split_by_shape(load_vtrain_single().cases)
    held_ids = {c.row_id for c in held}
    assert stack_rows and all(r.case.row_id in held_ids for r in stack_rows)
    assert all(r.case.kwargs["calibration"].endswith("vtrain_megatron_deepspeed_a100.yaml") for r in stack_rows)
    assert report.overall.run == 40  # the re-run is not counted twice


def _bad(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("args", "words"), [
    (["validate", "nemoo"], ["'nemoo' is unknown", "narayanan2021"]),
    (["validate", "missing.csv"], ["does not exist"]),
    (["validate", "nemo", "--write-bands"], ["--write-bands needs every shipped dataset"]),
    (["validate", "nemo", "--calibration", "nope.yaml"], ["nope.yaml", "does not exist"]),
    (["validate", "nemo", "--sample", "0"], ["--sample=0"]),
    (["validate", "nemo", "--cross-source", "--calibration", "calibration/h200_profile.yaml"],
     ["--cross-source leaves out the shipped fits", "allowed: one of the two"]),
    (["validate", "--write-bands", "--no-cross-source"], ["--write-bands needs every shipped dataset, cross-source"]),
    (["calibrate", "missing.jsonl", "--out", "p.yaml"], ["does not exist"]),
])
def test_bad_input_exits_2(args, words):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert all(w in result.output for w in words), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("name", "text", "words"), [
    ("cols.csv", "a,b\n1,2\n", ["lacks the column", "# GPUs"]),
    ("num.csv", VTRAIN_HEAD + "\n8,16,x,1024,16,24,1024,1,8,1,300\n", ["num.csv:2", "'micro batch'", "'x'"]),
    ("empty.csv", VTRAIN_HEAD + "\n", ["no rows"]),
])
def test_malformed_csv_exits_2(tmp_path, name, text, words):
    result = runner.invoke(app, ["validate", _bad(tmp_path, name, text)])
    assert result.exit_code == 2, result.output
    assert all(w in result.output for w in words), result.output


def test_calibrate_unknown_format_exits_2(tmp_path):
    result = runner.invoke(app, ["calibrate", _bad(tmp_path, "notes.txt", "hello\n"), "--out", "p.yaml"])
    assert result.exit_code == 2 and "neither kernel JSONL" in result.output


def test_calibrate_nccl_tests_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", str(DATA / "all_reduce_perf.txt"), str(DATA / "all_gather_perf.txt"),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    assert [n.collective for n in profile.network] == ["all_reduce", "all_gather"]
    assert profile.network[0].busbw_bytes_per_s == pytest.approx(230e9, rel=1e-3)
    assert profile.launch_s == load_profile().launch_s  # the compute part is the base profile's
    assert out.read_text().startswith("# Compute profile GENERATED by `madmax calibrate")


def test_calibrate_iteration_times_fits_on_half_the_shapes(tmp_path):
    data = tmp_path / "times.csv"
    data.write_text(_vtrain_rows(n_per_shape=2, shapes=2))
    out = tmp_path / "stack.yaml"
    result = runner.invoke(app, ["calibrate", str(data), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    assert profile.launch_fit.train_rows == 2 and profile.launch_fit.held_out_rows == 2
    assert profile.fit_errors["held_out"]["iteration_time"].count == 2
    assert profile.launch_s != load_profile().launch_s and "held-out" in result.output


def test_calibrate_under_a_named_stack_records_it(tmp_path):
    data = tmp_path / "times.csv"
    data.write_text(_vtrain_rows(n_per_shape=2, shapes=2))
    out = tmp_path / "stack.yaml"
    result = runner.invoke(app, ["calibrate", str(data), "--out", str(out), "--jobs", "1",
                                 "--stack", "megatron-deepspeed"])
    assert result.exit_code == 0, result.output
    assert load_profile(out).launch_fit.stack == "megatron-deepspeed"
    assert "--stack megatron-deepspeed" in out.read_text().splitlines()[0]  # the command that regenerates it


def test_calibrate_unknown_stack_exits_2(tmp_path):
    data = tmp_path / "times.csv"
    data.write_text(_vtrain_rows(n_per_shape=2, shapes=2))
    result = runner.invoke(app, ["calibrate", str(data), "--out", str(tmp_path / "p.yaml"), "--stack", "jax"])
    assert result.exit_code == 2 and "stack 'jax'" in result.output and "megatron-core" in result.output
    assert not (tmp_path / "p.yaml").exists()


def test_shipped_vtrain_stack_profile_and_its_provenance():
    profile = load_profile("calibration/vtrain_megatron_deepspeed_a100.yaml")
    fit = profile.launch_fit
    assert fit is not None and fit.train_rows == fit.held_out_rows == 720
    assert "held out: h1024 L16" in fit.split and "ground_truth_single.csv" in fit.data
    assert fit.stack == "megatron-deepspeed"  # fitted under the stack whose profile it is
    # Host-bound small models: the Megatron-DeepSpeed floor is well above eager torch 2.11's 18.6 us.
    assert 30e-6 < profile.launch_s < 100e-6
    held = profile.fit_errors["held_out"]["iteration_time"]
    assert held.count == 720 and held.median < 0.15
