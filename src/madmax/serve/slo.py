"""Service-level objectives of a served deployment: parsing them ("p99_ttft=1,p99_tpot=50ms"), holding a
rate-mode result against them, and the highest Poisson request rate that meets them.

An SLO names a statistic and a latency: `p99_ttft=1` (seconds), with statistics mean, p50, p90, p99 of
ttft (time to first token), tpot (time per output token of a request), itl (inter-token latency, pooled
over tokens) and e2e (end-to-end latency), as `simulate --mode rate` reports them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from madmax.config.task import MIN_REQUEST_RATE
from madmax.errors import ConfigError
from madmax.results.serving import ServingResult

STATISTICS = ("mean", "p50", "p90", "p99")
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2e": "e2e_latency_s"}
# The longest latency an SLO may name: a day (a limit beyond it is no serving objective).
MAX_SLO_S = 86_400
# Requests simulated per replica for each rate tried: simulate --mode rate's default, so a p99 rests on 10.
DEFAULT_REQUESTS = 1000
# A rate is simulated over at least STEADY_LIFETIMES lifetimes of a request served alone (its end-to-end
# latency): a burst shorter than a few lifetimes ends before an overloaded queue shows (1,000 requests at 400/s
# last 2.5 s, the queue of a 10% overload grows a request a second), so every rate gets
# max(num_requests, rate x STEADY_LIFETIMES x lifetime) requests, at most MAX_STEADY_REQUESTS.
STEADY_LIFETIMES = 10
MAX_STEADY_REQUESTS = 20_000


def parse_slos(slo: str | dict[str, Any] | None) -> dict[str, float]:
    """`{"p99_ttft": 1.0, ...}` (seconds) from "p99_ttft=1,p99_tpot=50ms" or a mapping; ConfigError naming
    the SLO and what is allowed otherwise."""
    if slo is None:
        return {}
    allowed = (f"SLOs named <statistic>_<latency> with statistic {', '.join(STATISTICS)} and latency "
               f"{', '.join(METRICS)}, each a time in seconds (or with ms), e.g. p99_ttft=1,p99_tpot=50ms")
    if isinstance(slo, str):
        items = []
        for part in (p.strip() for p in slo.split(",") if p.strip()):
            name, sep, value = part.partition("=")
            if not sep:
                raise ConfigError(f"slo={part!r} has no value; allowed: {allowed}")
            items.append((name.strip(), value.strip()))
    elif isinstance(slo, dict):
        items = list(slo.items())
    else:
        raise ConfigError(f"slo={slo!r} must be text or a mapping; allowed: {allowed}")
    out: dict[str, float] = {}
    for name, value in items:
        key = str(name).strip().lower()
        stat, _, metric = key.partition("_")
        if stat not in STATISTICS or metric not in METRICS:
            raise ConfigError(f"slo {name!r} is unknown; allowed: {allowed}")
        seconds = _seconds(value)
        if seconds is None:
            raise ConfigError(f"slo {key}={value!r} must be a positive time up to {MAX_SLO_S:,} s (a day); "
                              f"allowed: {allowed}")
        if key in out:
            raise ConfigError(f"slo {key} is given twice; allowed: each SLO once")
        out[key] = seconds
    if not out:
        raise ConfigError(f"slo is empty; allowed: {allowed}")
    return out


def _seconds(value: Any) -> float | None:
    text = str(value).strip().lower()
    match = re.fullmatch(r"([0-9.eE+-]+)\s*(ms|s)?", text)
    if isinstance(value, bool) or match is None:
        return None
    try:
        number = float(match.group(1))
    except ValueError:
        return None
    seconds = number / 1000 if match.group(2) == "ms" else number
    return seconds if math.isfinite(seconds) and 0 < seconds <= MAX_SLO_S else None


def missed(result: ServingResult, slos: dict[str, float]) -> list[str]:
    """The SLOs `result` (a rate-mode result, with latency percentiles) misses, e.g. 'p99_ttft 1.42 s > 1 s';
    a run that does not fit in memory misses them all."""
    if not result.fits:
        return [f"memory: {result.fits_reason}"]
    out = []
    for key, limit in slos.items():
        value = measured(result, key)
        if value is None or value > limit:
            out.append(f"{key} {_fmt(value)} > {_fmt(limit)}")
    return out


def measured(result: ServingResult, key: str) -> float | None:
    """The value of SLO `key` (e.g. p99_ttft) in a rate-mode result, None where there is none."""
    stat, _, metric = key.partition("_")
    return (result.latency or {}).get(METRICS[metric], {}).get(stat)


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


# The highest-rate search: the rate first tried (requests/s), the factor of its bracketing steps, the ratio to
# which it bisects, and the rates below which a deployment serves nothing within the SLOs and above which
# it stops (a bound of the search, not of the deployment).
FIRST_RATE = 1.0
BRACKET_FACTOR = 4.0
RATE_TOLERANCE = 0.02
MIN_RATE = MIN_REQUEST_RATE  # the least a task takes
MAX_RATE = 1e6


def slo_block(result: ServingResult, slos: dict[str, float]) -> dict[str, Any]:
    """A rate-mode result held against the SLOs: each limit, the value measured, and what is missed."""
    misses = missed(result, slos)
    return {"limits": dict(slos), "measured": {k: measured(result, k) for k in slos}, "met": not misses,
            "missed": misses}


def highest_rate(run, slos: dict[str, float], num_requests: int = DEFAULT_REQUESTS
                 ) -> tuple[ServingResult | None, dict[str, Any]]:
    """The highest request rate at which `run(rate, n)` (a rate-mode simulation of one deployment over n
    requests) meets every SLO: bracketed from FIRST_RATE by steps of BRACKET_FACTOR, then bisected
    geometrically to RATE_TOLERANCE (latencies grow with the rate). Each rate runs `steady_requests` (the
    lifetime: the shortest median end-to-end latency seen so far). Returns the result at that rate (None when
    even MIN_RATE misses) and the block for it: slo_block's, with highest_rate, the lowest rate tried that
    misses (rate_missed, None when MAX_RATE met), what it misses, and the simulations run."""
    results: dict[float, ServingResult] = {}
    requests: dict[float, int] = {}
    lifetime = [0.0]

    def meets(rate: float) -> bool:
        if rate not in results:
            requests[rate] = steady_requests(rate, num_requests, lifetime[0])
            results[rate] = run(rate, requests[rate])
            e2e = (results[rate].latency or {}).get("e2e_latency_s", {}).get("p50")
            if e2e:
                lifetime[0] = min(lifetime[0], e2e) if lifetime[0] else e2e
        return not missed(results[rate], slos)

    lo, hi, rate = 0.0, math.inf, FIRST_RATE
    while MIN_RATE <= rate <= MAX_RATE and not (lo and hi < math.inf):  # up while it meets, down while it misses
        if meets(rate):
            lo, rate = rate, rate * BRACKET_FACTOR
        else:
            hi, rate = rate, rate / BRACKET_FACTOR
    while lo and hi < math.inf and hi / lo > 1 + RATE_TOLERANCE:
        mid = math.sqrt(lo * hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    best = results.get(lo)
    block = slo_block(best, slos) if best is not None else {"limits": dict(slos), "met": False}
    block.update({"highest_rate": lo or None, "num_requests": requests.get(lo),
                  "rate_missed": hi if hi < math.inf else None,
                  "missed_at_rate_missed": missed(results[hi], slos) if hi < math.inf else [],
                  "simulations": len(results)})
    return best, block


def steady_requests(rate: float, num_requests: int, lifetime_s: float) -> int:
    """Requests to simulate at `rate`: `num_requests`, or enough to span STEADY_LIFETIMES lifetimes of a request
    (at most MAX_STEADY_REQUESTS)."""
    return max(num_requests, min(MAX_STEADY_REQUESTS, math.ceil(rate * STEADY_LIFETIMES * lifetime_s)))


__all__ = ["DEFAULT_REQUESTS", "METRICS", "MIN_RATE", "STATISTICS", "highest_rate", "measured", "missed",
           "parse_slos", "slo_block", "steady_requests"]
