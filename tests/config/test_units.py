"""Unit strings -> SI numbers: decimal prefixes are powers of 1000, binary ones of 1024, 8 bits a byte."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError

from madmax.config.units import Bytes, BytesPerS, FlopsPerS, Seconds, Watts, parse_quantity


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        # bytes: decimal, binary and bits
        ("80 GiB", "bytes", 85899345920),  # 80 * 2**30
        ("80 GB", "bytes", 80e9),
        ("512 KiB", "bytes", 524288),  # 512 * 1024
        ("1 TiB", "bytes", 2**40),
        ("16 Gbit", "bytes", 2e9),  # 16e9 bits / 8
        ("8 b", "bytes", 1.0),  # lower-case b is a bit
        ("1 kB", "bytes", 1e3),
        # bytes/s: per second, bits per second, the 'ps' spellings
        ("3.35 TB/s", "bytes/s", 3.35e12),
        ("400 Gbit/s", "bytes/s", 50e9),  # 400e9 / 8
        ("200 Gb/s", "bytes/s", 25e9),  # 200e9 / 8
        ("100 Gbps", "bytes/s", 12.5e9),
        ("900 GBps", "bytes/s", 900e9),
        ("1 GiB/s", "bytes/s", 2**30),
        ("450GB/s", "bytes/s", 450e9),  # no space
        # FLOP/s
        ("989 TFLOPS", "FLOP/s", 989e12),
        ("989.4 TFLOP/s", "FLOP/s", 989.4e12),
        ("1979 TOPS", "FLOP/s", 1979e12),
        ("2.25 PFLOPS", "FLOP/s", 2.25e15),
        # seconds
        ("5 us", "s", 5e-6),
        ("5 µs", "s", 5e-6),  # micro sign U+00B5
        ("5 μs", "s", 5e-6),  # Greek mu U+03BC
        ("2.5 ms", "s", 2.5e-3),
        ("700 ns", "s", 7e-7),
        ("1.5 h", "s", 5400.0),  # 1.5 * 3600
        ("2 min", "s", 120.0),
        # watts
        ("700 W", "W", 700.0),
        ("10.2 kW", "W", 10200.0),
        # plain numbers are SI already; PyYAML reads 1555e9 (no dot) as a string
        ("1555e9", "bytes/s", 1555e9),
        ("1.5E3", "W", 1500.0),
        ("  42  ", "s", 42.0),
        ("1_000", "W", 1000.0),
        (".5", "s", 0.5),
    ],
)
def test_unit_strings(text: str, kind: str, expected: float) -> None:
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("value", "kind"), [(700, "W"), (80 * 2**30, "bytes"), (3.35e12, "bytes/s"),
                                             (5e-6, "s"), (0, "s"), (-1.5, "W")])
def test_plain_numbers_pass_through(value: float, kind: str) -> None:
    # Signs are the schema's business (gt=0 on the fields), not the parser's.
    got = parse_quantity(value, kind)
    assert got == value and isinstance(got, float)


def test_numpy_numbers_are_numbers() -> None:
    np = pytest.importorskip("numpy")
    assert parse_quantity(np.int64(700), "W") == 700.0
    assert parse_quantity(np.float32(0.5), "s") == 0.5


@pytest.mark.parametrize(
    ("value", "kind", "words"),
    [
        ("fast", "bytes/s", ["'fast'", "'3.35 TB/s'"]),  # the example of the kind
        ("3 parsecs", "s", ["'parsecs'", "allowed: s, ms, us, ns"]),
        ("80 GiB", "bytes/s", ["'GiB'", "bytes/s", "GB/s"]),  # a unit of another kind
        ("989 TB/s", "FLOP/s", ["'TB/s'", "TFLOPS"]),
        ("700 W", "s", ["'W'"]),
        ("", "W", ["''"]),
        ("nan", "W", ["'nan'"]),
        ("inf", "W", ["'inf'"]),
        ("1e400", "bytes", ["finite"]),  # overflows to inf
        ("5 3 W", "W", ["'5 3 W'"]),
        (True, "bytes", ["True"]),  # a YAML `yes` is not a size
        (False, "W", ["False"]),
        (None, "bytes", ["NoneType"]),
        ([80, "GiB"], "bytes", ["list"]),
        (float("nan"), "s", ["finite", "nan"]),
        (float("inf"), "bytes/s", ["finite", "inf"]),
        (10**400, "bytes", ["finite", "too large"]),  # float() would raise OverflowError
    ],
)
def test_garbage_is_a_value_error_naming_the_input(value: object, kind: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity(value, kind)
    for word in words:
        assert word in str(info.value)


class _Fields(BaseModel):
    hbm: Bytes = 0.0
    bw: BytesPerS = 0.0
    peak: FlopsPerS = 0.0
    lat: Seconds = 0.0
    tdp: Watts = 0.0


def test_annotated_types_parse_in_pydantic_models() -> None:
    got = _Fields(hbm="80 GiB", bw="400 Gbit/s", peak="989 TFLOPS", lat="5 us", tdp="700 W")
    assert (got.hbm, got.bw, got.peak, got.tdp) == (85899345920, 50e9, 989e12, 700.0)
    assert math.isclose(got.lat, 5e-6)


def test_pydantic_reports_the_field_of_a_bad_quantity() -> None:
    with pytest.raises(ValidationError) as info:
        _Fields(bw="3 parsecs")
    err = info.value.errors()[0]
    assert err["loc"] == ("bw",)
    assert "unknown unit 'parsecs'" in err["msg"]


def test_overflowing_integer_is_a_validation_error_not_a_crash() -> None:
    with pytest.raises(ValidationError):
        _Fields(hbm=10**400)
