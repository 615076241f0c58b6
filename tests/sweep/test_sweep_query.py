"""`madmax query` and `madmax.sweep.query`: SQL over the shards."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from madmax.errors import ConfigError
from madmax.sweep import load, query
from madmax.sweep.store import display_value, query_rows


def test_query_returns_the_expected_rows(reference):
    df = load(reference)
    got = query(reference, "SELECT system, num_gpus, iteration_time_s FROM results "
                           "WHERE status = 'ok' AND whatif = 'baseline' ORDER BY system, num_gpus")
    # 2 systems x 2 sizes with the one valid strategy (tp=2), catalog hardware
    assert list(zip(got["system"], got["num_gpus"], strict=True)) == [
        ("dgx-h100", 8), ("dgx-h100", 16), ("p4d.24xlarge", 8), ("p4d.24xlarge", 16)]
    expected = df[(df["status"] == "ok") & (df["whatif"] == "baseline")].sort_values(["system", "num_gpus"])
    assert got["iteration_time_s"].tolist() == expected["iteration_time_s"].tolist()
    counts = dict(query_rows(reference, "SELECT status, count(*) FROM results GROUP BY status")[1])
    assert counts == {"ok": 8, "error": 8}


def test_bad_sql_and_missing_folder_are_config_errors(reference, tmp_path):
    with pytest.raises(ConfigError, match="query failed: Parser Error"):
        query_rows(reference, "SELEC 1")
    with pytest.raises(ConfigError, match="has no result shards"):
        query_rows(tmp_path, "SELECT 1")
    with pytest.raises(ConfigError, match="does not exist"):
        query_rows(tmp_path / "nope", "SELECT 1")


@pytest.mark.parametrize(("value", "shown"), [
    (4023470.0, "4,023,470"), (4023470, "4,023,470"), (-2.5e6, "-2,500,000"), (0.0, "0"), (12.5, "12.5"),
    (0.1234567, "0.123457"), (1234.5678, "1,234.57"), (0.00012345678, "0.000123457"), (1.5e-7, "1.5e-07"),
    (2.0**60, "1.15292e+18"), (Decimal("8.0"), "8"), (Decimal("0.25"), "0.25"), (float("nan"), "NaN"),
    (None, ""), (True, "True"), ("tp=2", "tp=2"),
])
def test_query_cells_for_people(value, shown):
    assert display_value(value) == shown


def test_query_table_prints_whole_numbers_with_separators(reference):
    from typer.testing import CliRunner

    from madmax.cli import app

    sql = "SELECT max(global_batch * 1000000) AS tokens, 0.5 * max(num_gpus) AS half FROM results"
    result = CliRunner().invoke(app, ["query", str(reference), sql])
    assert result.exit_code == 0
    assert "16,000,000" in result.stdout and "e+" not in result.stdout
    # 0.5 x 16 GPUs: a whole number that DuckDB computes as a DECIMAL
    assert "│ 16,000,000 │ 8    │" in result.stdout


@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_query_cells_read_back_to_the_value(value):
    text = display_value(value)
    back = float(text.replace(",", ""))
    if isinstance(value, int):
        assert int(text.replace(",", "")) == value
    else:
        assert back == pytest.approx(value, rel=1e-5, abs=0.0)  # 6 significant digits
