"""What a new user meets first: the top-level API, `--version`, catalog listings with numbers, output
that survives a pipe, the search's objective column, `--trace` saying where it wrote, progress bars."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import madmax
from madmax import api, terminal
from madmax.cli import app
from madmax.search.api import find


@pytest.fixture
def piped(monkeypatch):
    """A CliRunner as a pipe sees it: not a terminal, no COLUMNS."""
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


def test_top_level_api_is_lazy_and_is_the_api():
    code = "import sys, madmax; print('madmax.api' in sys.modules, 'madmax.search' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    assert madmax.simulate is api.simulate and madmax.inspect is api.inspect
    assert callable(madmax.search)
    assert madmax.inspect("llama-3.1-8b")["total_params"] == api.inspect("llama-3.1-8b")["total_params"]


def test_version(piped):
    result = piped.invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, f"madmax {madmax.__version__}\n")


def test_catalog_lists_show_headline_numbers(piped):
    gpus = piped.invoke(app, ["catalog", "list", "gpus"]).output
    h100 = next(line for line in gpus.splitlines() if line.startswith("│ h100-sxm "))
    # H100 SXM: 80 GiB, 989 TFLOP/s dense bf16, 3.35 TB/s (catalog gpus.yaml).
    assert [c.strip() for c in h100.split("│")[2:5]] == ["80 GiB", "989 TFLOP/s bf16", "3.35 TB/s"]
    systems = piped.invoke(app, ["catalog", "list", "systems"]).output
    dgx = next(line for line in systems.splitlines() if line.startswith("│ dgx-h100 "))
    # NVLink 4: 900 GB/s both directions = 450 GB/s per direction; one 400 Gbit/s NIC per GPU = 50 GB/s.
    assert [c.strip() for c in dgx.split("│")[2:7]] == ["8 x h100-sxm", "80 GiB", "989 TFLOP/s bf16", "450 GB/s",
                                                        "50.0 GB/s"]
    models = piped.invoke(app, ["catalog", "list", "models"]).output
    llama = next(line for line in models.splitlines() if line.startswith("│ llama-3.1-8b "))
    assert [c.strip() for c in llama.split("│")[2:4]] == ["8.03 B", ""]  # 8,030,261,248 parameters, dense
    mixtral = next(line for line in models.splitlines() if line.startswith("│ mixtral-8x7b "))
    assert [c.strip() for c in mixtral.split("│")[2:4]] == ["46.70 B", "12.88 B"]


def test_piped_output_does_not_wrap_strategies_or_notes(piped):
    strategy = "tp=2,pp=2,dp=2,vp=2,mbs=1,zero=1,recompute=selective,sp=1"
    result = piped.invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--global-batch", "16",
                                "--seq-len", "2048", "--strategy", strategy])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("strategy tp=2,pp=2,dp=2,cp=1") and line.endswith("sp=1") for line in lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("assumed: "))
    assert all(line.startswith("assumed: ") for line in lines[first:])  # each note whole on its line


def test_trace_says_where_it_wrote(piped, tmp_path):
    path = tmp_path / "trace.json"
    result = piped.invoke(app, ["simulate", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--global-batch", "8",
                                "--seq-len", "1024", "--trace", str(path), "--json"])
    assert result.exit_code == 0
    assert f"wrote trace {path}" in result.output
    assert json.loads(path.read_text())  # a trace was written


def test_search_objective_column_has_its_unit_and_scope(piped):
    args = ["search", "-m", "llama-3.1-8b", "-s", "p5.48xlarge", "--num-gpus", "8", "--global-batch", "16",
            "--seq-len", "2048", "--objective", "cost", "--top", "1", "--max-pp", "1", "--refine", "50"]
    one = piped.invoke(app, args)
    assert one.exit_code == 0, one.output
    assert "cost USD per iteration" in one.output
    more = piped.invoke(app, [*args, "--tokens", "1e12"])
    assert "cost USD for 1e+12 tokens" in more.output


def test_progress_is_off_when_stderr_is_not_a_terminal(monkeypatch):
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(forcing, raising=False)
    with terminal.shown("search", "simulations") as bar:
        assert bar is None
        terminal.expect(3)  # nothing active: no-ops
        assert list(terminal.counted([1, 2])) == [1, 2]
    assert not terminal.ProgressBar("x", 3).drawn


def test_progress_counts_the_simulations_of_a_search(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws as on a terminal
    monkeypatch.setenv("TERM", "xterm")
    with terminal.shown("search", "simulations") as bar:
        assert bar is not None
        outcome = find("llama-3.1-8b", "dgx-h100", 8, "pretrain", 16, 2048, top=2, exact=4,
                       refine=20, max_pp=1)
        task = bar.progress.tasks[0]
        assert task.total == task.completed == len(outcome.exact) == 4
