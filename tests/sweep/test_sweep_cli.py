"""`madmax sweep`, `madmax query`: good runs, and bad input ending with exit 2 and one sentence."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from madmax.cli import app

runner = CliRunner()


def test_sweep_then_query(spec_file, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(out), "--workers", "1", "--no-progress",
                                 "--price", "dgx-h100=10", "--limit", "4"])
    assert result.exit_code == 0, result.output
    assert "16 points: 0 done before, 4 computed" in result.stdout and "12 points remain" in result.stdout
    result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(out), "--workers", "1", "--no-progress",
                                 "--price", "dgx-h100=10"])
    assert result.exit_code == 0 and "16 points: 4 done before, 12 computed" in result.stdout
    result = runner.invoke(app, ["query", str(out), "SELECT DISTINCT price_per_gpu_hour_usd AS p FROM results "
                                 "WHERE system = 'dgx-h100' AND status = 'ok'", "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == [{"p": 10.0}]
    table = runner.invoke(app, ["query", str(out), "SELECT count(*) AS n FROM results"])
    assert table.exit_code == 0 and "16" in table.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--price", "cheap"], ["price='cheap'", "SYSTEM=USD"]),
    (["--dask", "localhost"], ["dask='localhost'", "tcp://HOST:PORT"]),
    (["--workers", "0"], ["workers=0", "positive"]),
    (["--limit", "0"], ["--limit=0", "positive"]),
])
def test_bad_flags_exit_2(spec_file, tmp_path, args, words):
    result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(tmp_path / "o"), "--no-progress", *args])
    _one_sentence(result, words)


@pytest.mark.parametrize(("change", "words"), [
    ({"systems": ["dgx-z900"]}, ["sweep.systems.0", "'dgx-z900'", "madmax catalog list systems"]),
    ({"global_batches": 0}, ["sweep.global_batches.0=0", "greater than 0"]),
    ({"whatifs": [{"nic": 2}]}, ["sweep.whatifs.0", "'nic' is not a field", "nic_bandwidth"]),
    ({"train": {"hours": 3}}, ["sweep.train", "'hours' is not a field", "tokens, samples"]),
    ({"search": {"top": 0}}, ["sweep.search.top=0", "greater than 0"]),
])
def test_bad_spec_exits_2(make_spec, base_spec, tmp_path, change, words):
    spec = make_spec(tmp_path / "spec", {**base_spec, **change})
    _one_sentence(runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress"]), words)


@pytest.mark.parametrize(("text", "words"), [
    ("[1, 2]", ["sweep file", "must hold a mapping"]),
    ("name: [x\n  y: :", ["sweep file", "not valid YAML/JSON", "line 2"]),
    ("", ["sweep file", "is empty"]),
])
def test_malformed_spec_file_exits_2(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    _one_sentence(runner.invoke(app, ["sweep", str(path), "--no-progress"]), words)


def test_missing_spec_and_bad_query_exit_2(tmp_path):
    _one_sentence(runner.invoke(app, ["sweep", str(tmp_path / "none.yaml")]), ["sweep file", "does not exist"])
    _one_sentence(runner.invoke(app, ["query", str(tmp_path), "SELECT 1"]), ["has no result shards"])
    _one_sentence(runner.invoke(app, ["report", str(tmp_path / "x"), "-o", str(tmp_path / "r.html")]),
                  ["does not exist"])


def _one_sentence(result, words):
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]



def test_examples_load():
    from pathlib import Path

    from madmax.sweep import load_sweep

    examples = Path(__file__).resolve().parents[2] / "examples"
    # cloud study: 12 instance types x 4 sizes x 2 models; co-design: 2 models x (baseline + 3 factors x
    # (5 resources + all together))
    assert sum(1 for _ in load_sweep(examples / "cloud_study.yaml").points()) == 12 * 4 * 2
    assert sum(1 for _ in load_sweep(examples / "codesign.yaml").points()) == 2 * (1 + 3 * 6)


def test_importing_the_sweep_package_stays_light():
    import subprocess
    import sys

    code = ("import sys, madmax.sweep; print(sorted(m for m in ('pandas', 'matplotlib', 'plotly', 'dask', "
            "'duckdb', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
