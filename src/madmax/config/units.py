"""Physical quantities written as plain SI numbers or as unit strings.

Catalog and user files may write `3.35 TB/s`, `400 Gbit/s`, `80 GiB`, `989 TFLOPS`, `5 us`, `700 W` or a
plain number in SI units (`1555e9`, which PyYAML reads as a string, is accepted too). Everything inside
madmax is SI: bytes, bytes/s, FLOP/s, seconds, watts. Decimal prefixes are powers of 1000, binary ones
(KiB, MiB, GiB, TiB) powers of 1024; bits are converted to bytes (8 bits per byte).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Annotated

from pydantic import BeforeValidator

GIB = 2**30  # bytes in a GiB, the unit memory is reported in

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
# Micro: "us", the micro sign U+00B5 and the Greek mu U+03BC (both are typed for "µs").
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9,
         "min": 60.0, "h": 3600.0}


def _prefixed(base_units: dict[str, float], *, binary: bool) -> dict[str, float]:
    """Every prefix combined with every base unit, e.g. GB, GiB, Gbit for bytes."""
    table: dict[str, float] = {}
    prefixes = dict(_DECIMAL)
    if binary:
        prefixes.update(_BINARY)
    for prefix, factor in prefixes.items():
        for unit, unit_factor in base_units.items():
            table[prefix + unit] = factor * unit_factor
    return table


_BYTES = _prefixed({"B": 1.0, "bit": 1 / 8, "b": 1 / 8}, binary=True)
_BYTES_PER_S = {
    **{u + "/s": f for u, f in _BYTES.items()},
    **{u: f for u, f in _prefixed({"bps": 1 / 8, "Bps": 1.0}, binary=False).items()},
}
_FLOPS_PER_S = _prefixed({"FLOPS": 1.0, "FLOP/s": 1.0, "flops": 1.0, "OPS": 1.0, "OP/s": 1.0}, binary=False)
_WATTS = _prefixed({"W": 1.0}, binary=False)

UNITS: dict[str, dict[str, float]] = {
    "bytes": _BYTES,
    "bytes/s": _BYTES_PER_S,
    "FLOP/s": _FLOPS_PER_S,
    "s": _TIME,
    "W": _WATTS,
}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d].*?)?\s*$")


def parse_quantity(value: object, kind: str) -> float:
    """Value in SI units of `kind` ('bytes', 'bytes/s', 'FLOP/s', 's', 'W') from a number or unit string.

    Raises ValueError (which pydantic reports with the field name) for text that is not a number
    followed by one of the units of `kind`.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a number or a quantity in {kind}, got {value!r}")
    if isinstance(value, numbers.Real):  # int, float and their NumPy kin
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"expected a finite number in {kind}, got an integer too large") from None
    elif isinstance(value, str):
        match = _QUANTITY.match(value.replace("_", ""))
        if not match:
            raise ValueError(
                f"expected a number or a quantity in {kind} such as {_example(kind)}, got {value!r}"
            )
        number = float(match.group(1))
        unit = (match.group(2) or "").strip()
        if unit:
            table = UNITS[kind]
            if unit not in table:
                raise ValueError(
                    f"unknown unit {unit!r} for a quantity in {kind}; allowed: {_allowed(kind)}"
                )
            number *= table[unit]
    else:
        raise ValueError(f"expected a number or a quantity in {kind}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def _example(kind: str) -> str:
    return {"bytes": "'80 GiB'", "bytes/s": "'3.35 TB/s' or '400 Gbit/s'", "FLOP/s": "'989 TFLOPS'",
            "s": "'5 us'", "W": "'700 W'"}[kind]


def _allowed(kind: str) -> str:
    common = {"bytes": "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, Gbit",
              "bytes/s": "B/s, GB/s, TB/s, GiB/s, Gbit/s, Gb/s, Gbps",
              "FLOP/s": "FLOPS, GFLOPS, TFLOPS, PFLOPS, TFLOP/s, TOPS",
              "s": "s, ms, us, ns", "W": "W, kW"}
    return common[kind]


def _validator(kind: str) -> BeforeValidator:
    return BeforeValidator(lambda v: parse_quantity(v, kind))


Bytes = Annotated[float, _validator("bytes")]
BytesPerS = Annotated[float, _validator("bytes/s")]
FlopsPerS = Annotated[float, _validator("FLOP/s")]
Seconds = Annotated[float, _validator("s")]
Watts = Annotated[float, _validator("W")]
