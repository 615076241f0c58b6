"""benchmarks/validate_training.py's breakdown of the vTrain errors by model-shape cell (`cell_lines`)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from madmax.validate.datasets import Case
from madmax.validate.runner import RowResult

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_training.py"
_spec = importlib.util.spec_from_file_location("validate_training_bench", SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def row(hidden: int, layers: int, tp: int, dp: int, mbs: int, gb: int, measured: float, predicted: float,
        pp: int = 1) -> RowResult:
    kwargs = {"model": {"hidden_size": hidden, "num_layers": layers}, "global_batch": gb,
              "strategy": f"tp={tp},pp={pp},dp={dp},mbs={mbs}"}
    case = Case(bench.CELL_DATASET, "r", "label", kwargs, "iteration_time_s", measured, "s", "gpt", "a100", "tp")
    return RowResult(case, predicted=predicted)


def test_monomials_are_every_product_of_the_log_shape_up_to_the_degree():
    cells = [(1024, 1, 1), (2048, 2, 4)]
    assert bench.monomials(cells, 1).tolist() == [[1, 0, 0, 0], [1, 1, 1, 2]]
    quadratic = bench.monomials(cells, 2)
    assert quadratic.shape == (2, 1 + 3 + 6)
    # (h, tp, mbs) = (2048, 2, 4): x = (1, 1, 2); the squares and cross products in combinations order
    assert quadratic[1].tolist() == [1, 1, 1, 2, 1, 1, 2, 1, 2, 4]


def test_a_left_out_cell_is_predicted_from_the_others():
    cells = [(h, tp, m) for h in (1024, 2048) for tp in (1, 2, 4) for m in (1, 2)]
    linear = {c: 0.1 + 0.02 * math.log2(c[0] / 1024) - 0.03 * math.log2(c[1]) + 0.05 * math.log2(c[2])
              for c in cells}
    guessed = bench.left_out_offsets(linear, 1)
    assert all(guessed[c] == pytest.approx(linear[c]) for c in cells)  # a plane is recovered exactly
    constant = bench.left_out_offsets(linear, 0)  # degree 0: the mean of the other cells
    for c in cells:
        assert constant[c] == pytest.approx(np.mean([v for o, v in linear.items() if o != c]))


def test_micro_batch_inversions_count_measured_and_predicted_per_micro_batch_times():
    rows = [
        # h1024 L16 tp2 dp1: mbs1 -> 2 is faster per micro-batch measured (50 -> 40 ms), slower predicted
        row(1024, 16, 2, 1, 1, 8, measured=8 * 0.050, predicted=8 * 0.045),
        row(1024, 16, 2, 1, 2, 8, measured=4 * 0.040, predicted=4 * 0.060),
        # mbs2 -> 4: slower measured (40 -> 70 ms): not an inversion
        row(1024, 16, 2, 1, 4, 8, measured=2 * 0.070, predicted=2 * 0.080),
        # another layout, mbs1 -> 2 faster both measured (30 -> 27 ms) and predicted
        row(2048, 24, 4, 2, 1, 16, measured=8 * 0.030, predicted=8 * 0.030),
        row(2048, 24, 4, 2, 2, 16, measured=4 * 0.027, predicted=4 * 0.029),
        row(2048, 24, 4, 2, 4, 16, measured=1.0, predicted=1.0, pp=2),  # with a pipeline: left out
    ]
    faster, pairs, drop, reproduced = bench.inversions(rows)
    assert (faster, pairs, reproduced) == (2, 3, 1)
    assert drop == pytest.approx(20.0)


def test_cell_lines_split_the_error_between_and_within_cells():
    # two cells, each with a +10% and a +30% row: within-cell residuals are +-ln(1.3/1.1)/2 about the median
    rows = [row(1024, 16, 1, 1, 1, 4, 1.0, 1.1), row(1024, 24, 1, 1, 1, 4, 1.0, 1.3),
            row(2048, 16, 1, 1, 1, 4, 1.0, 1.1), row(2048, 24, 1, 1, 1, 4, 1.0, 1.3)]
    report = bench.Report(rows=tuple(rows), unmapped=(), datasets=(), overall=None, groups={})
    text = "\n".join(bench.cell_lines(report))
    assert "4 rows in 2 cells" in text
    assert "share of the variance of the errors that lies between cells: 0 %" in text
    x = math.log(1.3 / 1.1) / 2  # each row's residual is +x or -x: |error| expm1(x) or -expm1(-x)
    median = 100 * (math.expm1(x) - math.expm1(-x)) / 2
    assert f"removed (in-sample: what per-shape kernel measurements could reach at best): median {median:.2f} %" in text
    assert "| 1024 | 1 | +19.6 |" in text  # the cell's median signed error: sqrt(1.1 * 1.3) - 1
