"""The shipped calibration: its data are the copied measurements, its fit reproduces them as reported."""

import hashlib
import math

import numpy as np
import pytest
import yaml

from madmax.config.units import parse_quantity
from madmax.hardware.calibration import (
    fit_busbw,
    fit_errors,
    fit_profile,
    held_out_errors,
    load_nccl_rows,
    load_records,
    minimize,
    report,
)
from madmax.hardware.profile import catalog_path, efficiency_table, load_profile, reference_peaks


def test_copied_measurements_match_their_source_note():
    note = catalog_path("calibration/SOURCE.md").read_text()
    data = catalog_path("calibration/h200_kernels.jsonl").read_bytes()
    assert hashlib.sha256(data).hexdigest() in note
    records = load_records()
    assert len(records) == 120 and records[0]["kind"] == "env" and records[0]["name"] == "NVIDIA H200"
    assert len(load_nccl_rows()) == 10


def test_shipped_profile_reproduces_the_data_within_the_reported_error():
    profile = load_profile()
    measured = fit_errors(profile, load_records())
    reported = profile.fit_errors["in_sample"]
    for kind, err in measured.items():
        # The YAML keeps 6 significant digits of each parameter and each error.
        assert err["median"] <= reported[kind].median * (1 + 1e-4) + 1e-6, kind
        assert err["max"] <= reported[kind].max * (1 + 1e-4) + 1e-6, kind
    # What the report says today (median, max): GEMM 2.9%, 44%; attention fwd 2.4%, 4.8%;
    # attention bwd 3.3%, 6.4%; decode attention 0.7%, 12%; a pure read predicted by the copy fit 2.5%.
    assert measured["gemm"]["median"] < 0.04 and measured["gemm"]["max"] < 0.5
    assert measured["attention_forward"]["max"] < 0.06 and measured["attention_backward"]["max"] < 0.08
    assert measured["decode_attention"]["median"] < 0.02 and measured["memory_read"]["max"] < 0.03


def test_the_fit_regenerates_the_shipped_parameters():
    fitted = fit_profile(load_records(), held_out=False)
    shipped = load_profile().model_dump(mode="json")
    for section, keys in {"gemm": ["k0", "n0", "read_fraction"], "memory": ["latency_s", "copy_fraction"]}.items():
        for key in keys:
            assert fitted[section][key] == pytest.approx(shipped[section][key], rel=1e-3), (section, key)
    for dtype, value in shipped["gemm"]["peak_fraction"].items():
        assert fitted["gemm"]["peak_fraction"][dtype] == pytest.approx(value, rel=1e-3)
    for part in ("forward", "backward"):
        assert fitted["attention"][part] == pytest.approx(shipped["attention"][part], rel=1e-3)
    assert fitted["launch_s"] == pytest.approx(shipped["launch_s"], rel=1e-3)


def test_held_out_errors_are_as_reported():
    # Refits without each GEMM shape, attention length and decode row (about 10 s).
    held = held_out_errors(load_records(), reference_peaks("NVIDIA H200"))
    reported = load_profile().fit_errors["held_out"]
    for kind, err in held.items():
        assert err["median"] == pytest.approx(reported[kind].median, rel=1e-2, abs=1e-4), kind
        assert err["max"] == pytest.approx(reported[kind].max, rel=1e-2, abs=1e-4), kind


def test_reference_peaks_equal_the_catalog_h200():
    peaks = reference_peaks("NVIDIA H200")
    raw = {e["name"]: e for e in yaml.safe_load(catalog_path("gpus.yaml").read_text())}
    if "h200" not in raw:
        pytest.skip("catalog has no h200 yet")
    h200 = raw["h200"]
    assert peaks.hbm_bytes_per_s == parse_quantity(h200["hbm_bytes_per_s"], "bytes/s")
    for dtype, value in h200["flops_per_s"].items():
        assert peaks.flops_per_s[dtype] == parse_quantity(value, "FLOP/s"), dtype


def test_nvlink_all_reduce_fit_matches_the_efficiency_table():
    fit = fit_busbw(load_nccl_rows())
    # alpha ~ 2.1 us per ring step; B = 433.8 GB/s = 0.964 of the 450 GB/s NVLink 4 line rate.
    assert fit["step_latency_s"] == pytest.approx(2.1e-6, rel=0.01)
    assert fit["busbw_bytes_per_s"] == pytest.approx(433.8e9, rel=0.001)
    h100 = next(e for e in efficiency_table()["collectives"]["gpus"] if "h100-sxm" in e["names"])
    assert h100["busbw_fraction"]["all_reduce"][8] == round(fit["peak_fraction"], 3)
    assert fit["median"] < 0.1 and fit["max"] < 0.24


def test_minimize_finds_a_known_minimum():
    # (x - 3)^2 + 10 (y + 1)^2 has its minimum at (3, -1).
    x = minimize(lambda z: (z[0] - 3) ** 2 + 10 * (z[1] + 1) ** 2, [0, 0])
    assert np.allclose(x, [3, -1], atol=1e-6)


def test_report_names_every_kernel_kind():
    text = report()
    for kind in ("gemm", "attention_forward", "attention_backward", "decode_attention", "memory_read", "NVLink"):
        assert kind in text
    assert not math.isnan(load_profile().launch_s)


def test_a_profile_name_too_long_for_a_path_is_a_config_error():
    from madmax.errors import ConfigError
    from madmax.hardware.profile import load_profile

    with pytest.raises(ConfigError, match=r"profile file .* does not exist"):
        load_profile("p" * 5000)
