"""`madmax query` and `madmax.sweep.query`: SQL over the shards."""

from __future__ import annotations

import pytest

from madmax.errors import ConfigError
from madmax.sweep import load, query
from madmax.sweep.store import query_rows


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
