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


@pytest.fixture
def transfer(tmp_path, monkeypatch, table):
    # A cross-architecture error of 20% typical, 40% p90, measured on ampere rows with hopper kernels.
    path = tmp_path / "transfer.yaml"
    trust.write_transfer({"profile_architecture": "hopper", "architectures": ["ampere"], "rows": 12,
                          "p50_abs_pct": 20.0, "p90_abs_pct": 40.0, "median_signed_pct": -20.0}, path, "test")
    monkeypatch.setattr(trust, "transfer_path", lambda: path)
    for cached in (trust.transfer_error, trust.measured_architectures):
        cached.cache_clear()
    yield path
    for cached in (trust.transfer_error, trust.measured_architectures):
        cached.cache_clear()


def test_a_gpu_of_a_measured_architecture_keeps_its_band(transfer):
    # h200 (hopper) has no rows of its own but h100-sxm (hopper) has: the band as before, no note.
    band = error_band("mistral-7b", 4, "tp", "h200")
    assert band["p50_abs_pct"] == 30.0 and "note" not in band
    assert trust.measured_architectures() == {"ampere", "hopper"}


def test_an_unmeasured_architecture_is_widened_and_says_so(transfer):
    # b200 (blackwell): the gpt/tp/1-8 group, |e| p50 30, p90 46, combined with the transfer error 20 / 40
    # as independent errors: sqrt(30^2 + 20^2) = 36.06, sqrt(46^2 + 40^2) = 60.96.
    band = error_band("gpt3-175b", 8, "tp", "b200", kernels_from="NVIDIA H200")
    assert (band["p50_abs_pct"], band["p90_abs_pct"]) == (36.06, 60.96)
    assert (band["median_signed_pct"], band["rows"]) == (-30.0, 5)
    assert band["basis"] == "same family, parallelism, scale"
    assert band["widened_by"] == {"p50_abs_pct": 20.0, "p90_abs_pct": 40.0}
    assert band["note"].startswith("no measured runs on this GPU (b200, blackwell): kernel efficiency borrowed from "
                                   "NVIDIA H200; band widened by the cross-architecture error, ±20% typical, ±40% p90")


def test_a_system_files_own_gpu_is_judged_by_its_architecture(transfer):
    # A GPU that is no catalog entry: its architecture decides (ampere has rows; cdna3 and none have not).
    assert "note" not in error_band("gpt", 8, "tp", "my-gpu", architecture="ampere")
    assert error_band("gpt", 8, "tp", "my-gpu", architecture="cdna3")["p50_abs_pct"] == 36.06
    assert error_band("gpt", 8, "tp", "my-gpu")["note"].startswith("no measured runs on this GPU (my-gpu): ")


def test_without_a_transfer_error_the_band_is_kept_but_flagged(table, tmp_path, monkeypatch):
    monkeypatch.setattr(trust, "transfer_path", lambda: tmp_path / "absent.yaml")
    trust.transfer_error.cache_clear()
    trust.measured_architectures.cache_clear()
    band = error_band("gpt3-175b", 8, "tp", "mi300x")
    assert band["p50_abs_pct"] == 30.0 and band["widened_by"] is None
    assert band["note"].endswith("no cross-architecture error to widen the band by")
    trust.transfer_error.cache_clear()
    trust.measured_architectures.cache_clear()


def test_transfer_summary_by_hand():
    # Residuals on hopper are the profile's own architecture and left out; the others: |e| = 10, 20, 30, 40:
    # median 25, p90 = 30 + 0.7 * 10 = 37 (numpy linear); signed -20, -10, 30, 40: median (-10 + 30) / 2 = 10.
    residuals = [("hopper", 99.0), ("ampere", -10.0), ("ampere", -20.0), ("volta", 30.0), ("ampere", 40.0),
                 (None, 50.0)]
    s = trust.transfer_summary(residuals, "hopper")
    assert s == {"profile_architecture": "hopper", "architectures": ["ampere", "volta"], "rows": 4,
                 "p50_abs_pct": 25.0, "p90_abs_pct": 37.0, "median_signed_pct": 10.0}
    assert trust.transfer_summary([("hopper", 1.0)], "hopper")["rows"] == 0


def test_the_shipped_transfer_error_widens_amd():
    for cached in (trust._table, trust.transfer_error, trust.measured_architectures):
        cached.cache_clear()
    t = trust.transfer_error()
    assert t is not None and t["profile_architecture"] == "hopper" and "hopper" not in t["architectures"]
    band = error_band("llama-3.1-70b", 16, "tp+dp", "mi300x", kernels_from="NVIDIA H200")
    assert band["widened_by"] == {"p50_abs_pct": t["p50_abs_pct"], "p90_abs_pct": t["p90_abs_pct"]}
    assert "no measured runs on this GPU (mi300x, cdna3)" in band["note"]
    assert "note" not in error_band("llama-3.1-70b", 16, "tp+dp", "h100-sxm")


def test_write_bands_writes_the_transfer_error_beside(tmp_path):
    # Two A100 rows (ampere) and one H100 row (hopper, the default profile's device, left out):
    # |e| 10 and 30 -> median 20, p90 10 + 0.9 * 20 = 28; signed -10, +30 -> median +10.
    from types import SimpleNamespace

    from madmax.validate.command import write_transfer_of

    rows = [SimpleNamespace(case=SimpleNamespace(gpu=g), signed_error_pct=e)
            for g, e in (("a100-80gb", -10.0), ("a100-40gb", 30.0), ("h100-sxm", 99.0))]
    path = write_transfer_of(rows, tmp_path / "transfer_error.yaml")
    text = path.read_text()
    assert text.startswith("# GENERATED by `madmax validate --write-bands`")
    import yaml

    assert yaml.safe_load(text) == {"profile_architecture": "hopper", "architectures": ["ampere"], "rows": 2,
                                    "p50_abs_pct": 20.0, "p90_abs_pct": 28.0, "median_signed_pct": 10.0}
