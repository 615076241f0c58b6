"""Error bands: the table from residuals, the fallback from fine to coarse groups, the shipped table."""

import pytest

from madmax.config.strategy import parse_strategy
from madmax.errors import ConfigError
from madmax.validate import trust
from madmax.validate.trust import band_rows, error_band, scale_bucket, write_bands


@pytest.fixture
def table(tmp_path, monkeypatch):
    # 5 gpt rows on 8 A100s with tp: signed errors -10, -20, -30, -40, -50 (median |e| 30, median e -30);
    # 5 llama rows on 64 H100s with tp+dp: +1 .. +5 (median 3);
    # 4 gpt rows on 1024 A100s with tp+pp+dp: too few for a group of their own (MIN_ROWS = 5).
    residuals = [("gpt", "a100-80gb", "tp", 8, -10.0 * i) for i in range(1, 6)]
    residuals += [("llama", "h100-sxm", "tp+dp", 64, float(i)) for i in range(1, 6)]
    residuals += [("gpt", "a100-80gb", "tp+pp+dp", 1024, 2.0)] * 4
    path = tmp_path / "bands.csv"
    write_bands(band_rows(residuals), path, "test table\nsecond line")
    monkeypatch.setattr(trust, "bands_path", lambda: path)
    trust._table.cache_clear()
    yield path
    trust._table.cache_clear()


def test_exact_group(table):
    band = error_band("gpt3-175b", 8, "tp", "a100")
    # |e| = 10..50: median 30, p90 = 46 (numpy linear: 40 + 0.6 * 10); median signed -30
    assert (band["p50_abs_pct"], band["p90_abs_pct"], band["median_signed_pct"]) == (30.0, 46.0, -30.0)
    assert band["rows"] == 5 and band["matched"] == {"family": "gpt", "gpu": "a100-80gb", "parallelism": "tp",
                                                      "scale": "1-8"}


def test_strategy_forms_agree(table):
    by_group = error_band("llama-3.1-70b", 64, "tp+dp", "h100")
    assert error_band("llama", 64, "tp=8,pp=1,dp=8", "h100-sxm") == by_group
    assert error_band("llama", 64, {"tp": 8, "dp": 8}, "h100-sxm") == by_group
    assert error_band("llama", 64, parse_strategy("tp=8,dp=8"), "h100-sxm") == by_group
    assert error_band("meta-llama/Llama-3.1-70B", 64, "tp+dp", "H100-SXM5-80GB") == by_group
    assert by_group["p50_abs_pct"] == 3.0


def test_falls_back_to_coarser_groups(table):
    # 4 rows of gpt tp+pp+dp at 513+ GPUs are too few: the family's 9 rows (5 tp + 4 others) answer.
    band = error_band("gpt", 1024, "tp+pp+dp", "a100")
    assert band["basis"] == "same family" and band["rows"] == 9
    # An unknown family on one node: same parallel axes and scale.
    band = error_band("mistral-7b", 4, "tp", "h200")
    assert band["basis"] == "same parallelism, scale" and band["rows"] == 5
    # Nothing alike: all 14 rows.
    assert error_band("qwen2", 4096, "pp", "b200")["basis"] == "all validation rows"


def test_scale_buckets_and_bad_input():
    assert [scale_bucket(n) for n in (1, 8, 9, 64, 65, 512, 513)] == ["1-8", "1-8", "9-64", "9-64", "65-512",
                                                                       "65-512", "513+"]
    with pytest.raises(ConfigError, match="num_gpus=0"):
        error_band("gpt", 0, "tp", "a100")


def test_shipped_table_answers_every_regime():
    trust._table.cache_clear()
    assert trust.bands_path().is_file()
    for args in [("llama-3.1-8b", 8, "dp", "h100-sxm"), ("gpt3-175b", 1024, "tp=8,pp=8,dp=16", "a100-80gb"),
                 ("mixtral-8x7b", 64, "tp+dp", "h200")]:
        band = error_band(*args)
        assert band["rows"] >= trust.MIN_ROWS and 0 <= band["p50_abs_pct"] <= band["p90_abs_pct"]
