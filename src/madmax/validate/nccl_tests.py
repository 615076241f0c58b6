"""Read nccl-tests output (all_reduce_perf, all_gather_perf, ...) and fit alpha and busbw per collective.

The format (github.com/NVIDIA/nccl-tests, README and doc/PERFORMANCE.md), as printed by every test:

    # Collective test starting: all_reduce_perf          (newer versions; else the file name tells)
    # nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
    # Using devices
    #  Rank  0 Group  0 Pid  43213 on  dgx-a100-01 device  0 [0x07] NVIDIA A100-SXM4-80GB
    ...
    #                                                       out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
         8388608       2097152     float     sum      -1    123.4   67.98  118.96      0    122.9 ...

Columns are read from the header line (older all_gather_perf has no `redop`/`root`; `#wrong` may read
N/A). The out-of-place `time` (us), `algbw` and `busbw` (GB/s = 1e9 bytes/s) are used. `size` follows
nccl-tests: all_reduce the buffer per GPU, all_gather the gathered output, reduce_scatter the input,
alltoall the send buffer, sendrecv the message. The group size n is the number of `Rank` lines (else
nThread x nGpus), the nodes the distinct host names there. A file may hold several tests one after
another (e.g. `madmax bench comm` output).

Fit (per test): t = c(n) alpha + f(n) S / B, c and f of `madmax.hardware.collectives` (all_reduce 2(n-1)
and 2(n-1)/n, so f S / B = S / algbw when B = busbw), by least squares in ln t over the sizes, as
`madmax.hardware.calibration.fit_busbw`. An all-to-all's latency is not n - 1 steps (grouped point-to-point):
its fitted alpha is its whole latency L at the measured group (c = 1), which the cost model then takes as
measured. Held-out errors refit without each size in turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from madmax.errors import ConfigError
from madmax.hardware.calibration import minimize
from madmax.hardware.collectives import Collective, all_to_all_s, ring_all_reduce_s, ring_gather_s, send_recv_s

GIGA = 1e9
MICRO = 1e-6
TESTS = {"all_reduce": Collective.ALL_REDUCE, "allreduce": Collective.ALL_REDUCE,
         "all_gather": Collective.ALL_GATHER, "allgather": Collective.ALL_GATHER,
         "reduce_scatter": Collective.REDUCE_SCATTER, "reducescatter": Collective.REDUCE_SCATTER,
         "alltoall": Collective.ALL_TO_ALL, "all_to_all": Collective.ALL_TO_ALL,
         "sendrecv": Collective.SEND_RECV, "send_recv": Collective.SEND_RECV}
UNMODELLED = ("broadcast", "reduce", "gather", "scatter", "hypercube")

_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_RANK = re.compile(r"#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\S+\s+\[[^\]]*\]\s*(.*)")
_THREADS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: float
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class NcclRun:
    """One test of a file: the collective, the group, and its rows (out-of-place)."""

    collective: Collective
    num_gpus: int
    num_nodes: int
    device: str
    rows: tuple[NcclRow, ...]
    source: str


def collective_of(test: str) -> Collective | None:
    """The collective of a test or file name ('all_reduce_perf', 'alltoall.txt'), None if none."""
    name = test.lower()
    for key, collective in TESTS.items():
        if key in name:
            return collective
    return None


@dataclass
class _Section:
    test: str = ""
    threads: int = 0
    hosts: list[str] | None = None
    device: str = ""
    columns: list[str] | None = None
    rows: list[NcclRow] | None = None


def _row(tokens: list[str], columns: list[str], where: str) -> NcclRow | None:
    if len(tokens) != len(columns) or not tokens[0].isdigit():
        return None
    at = {name: columns.index(name) for name in ("size", "time", "algbw", "busbw")}
    try:
        size, time_us, algbw, busbw = (float(tokens[at[k]]) for k in ("size", "time", "algbw", "busbw"))
    except ValueError:
        raise ConfigError(f"{where}: a result row has a time or bandwidth that is not a number") from None
    return NcclRow(size, time_us * MICRO, algbw * GIGA, busbw * GIGA)


def _sections(text: str, where: str) -> list[_Section]:
    sections = [_Section()]
    for line in text.splitlines():
        s = sections[-1]
        tokens = line.lstrip("#").split()
        if m := _STARTING.match(line):
            if s.test or s.rows:
                sections.append(_Section())
            sections[-1].test = m.group(1)
        elif m := _THREADS.match(line):
            if s.threads or s.rows:
                sections.append(s := _Section())
            s.threads = int(m.group(1)) * int(m.group(2))
        elif m := _RANK.match(line):
            s.hosts = [*(s.hosts or []), m.group(1)]
            s.device = s.device or m.group(2).strip()
        elif line.startswith("#") and {"size", "time", "busbw"} <= set(tokens):
            s.columns, s.rows = tokens, s.rows or []
        elif not line.startswith("#") and s.columns and (row := _row(tokens, s.columns, where)):
            s.rows.append(row)  # type: ignore[union-attr]
    return [s for s in sections if s.rows]


def parse_nccl_tests(text: str, name: str = "nccl-tests output") -> list[NcclRun]:
    """The tests in one nccl-tests output; `name` (the file name) names the collective if the text does not."""
    runs = []
    for s in _sections(text, name):
        test = s.test or name
        collective = collective_of(test)
        if collective is None:
            stem = Path(test).name.lower()
            if any(stem.startswith(u) for u in UNMODELLED):
                raise ConfigError(f"{name}: nccl-tests {test!r} is not a modelled collective; allowed: "
                                  f"{', '.join(str(c) for c in Collective)}")
            raise ConfigError(f"{name}: nccl-tests output names no collective; keep its '# Collective test "
                              "starting' line or name the file after the test (e.g. all_reduce_perf.txt)")
        n = len(s.hosts) if s.hosts else s.threads
        if n < 2:
            raise ConfigError(f"{name}: {collective} ran on {n} rank(s); a fit needs at least 2")
        runs.append(NcclRun(collective, n, len(set(s.hosts or ["?"])), s.device, tuple(s.rows or ()), name))
    if not runs:
        raise ConfigError(f"{name}: no nccl-tests result rows (a '#  size  count  type ... busbw' header "
                          "followed by numbers)")
    return runs


def read_nccl_tests(path: str | Path) -> list[NcclRun]:
    path = Path(path)
    return parse_nccl_tests(path.read_text(encoding="utf-8", errors="replace"), path.name)


def looks_like_nccl_tests(text: str) -> bool:
    """Whether `text` has an nccl-tests result header."""
    return any(line.startswith("#") and {"size", "time", "busbw"} <= set(line.lstrip("#").split())
               for line in text.splitlines())


def collective_s(collective: Collective, size: Any, n: int, busbw: float, alpha: float) -> Any:
    """The model time of `madmax.hardware.collectives` for one group of n GPUs on one fabric."""
    if collective == Collective.ALL_REDUCE:
        return ring_all_reduce_s(size, n, busbw, alpha)
    if collective == Collective.SEND_RECV:
        return send_recv_s(size, busbw, alpha)
    if collective == Collective.ALL_TO_ALL:
        return all_to_all_s(size, n, busbw, alpha)
    return ring_gather_s(size, n, busbw, alpha)


def _fit(collective: Collective, n: int, size: np.ndarray, t: np.ndarray, busbw0: float) -> tuple[float, float]:
    def loss(z: np.ndarray) -> float:
        return float(np.sum(np.log(collective_s(collective, size, n, np.exp(z[1]), np.exp(z[0])) / t) ** 2))

    steps = 1 if collective == Collective.ALL_TO_ALL else 2 * n  # alpha's multiple, about (the initial guess)
    z = minimize(loss, [np.log(max(t.min(), 1e-9) / steps), np.log(busbw0)])
    return float(np.exp(z[0])), float(np.exp(z[1]))


def _summary(errors: Iterable[float]) -> dict[str, Any]:
    e = np.asarray(list(errors), dtype=float)
    return {"count": int(e.size), "median": float(np.median(e)), "max": float(e.max())}


def fit_run(run: NcclRun, held_out: bool = True) -> dict[str, Any]:
    """The `CollectiveFit` dict of one test: alpha, busbw and in-sample (and leave-one-size-out) errors."""
    rows = [r for r in run.rows if r.time_s > 0]
    if len(rows) < 2:
        raise ConfigError(f"{run.source}: {run.collective} has {len(rows)} timed row(s); a fit needs 2 sizes")
    size = np.array([r.size_bytes for r in rows])
    t = np.array([r.time_s for r in rows])
    busbw0 = max(max(r.busbw_bytes_per_s for r in rows), 1.0)
    alpha, busbw = _fit(run.collective, run.num_gpus, size, t, busbw0)
    errors = {"in_sample": _summary(np.abs(collective_s(run.collective, size, run.num_gpus, busbw, alpha) / t - 1))}
    if held_out and len(rows) > 2:
        left = []
        for i in range(len(rows)):
            keep = np.arange(len(rows)) != i
            a, b = _fit(run.collective, run.num_gpus, size[keep], t[keep], busbw0)
            left.append(abs(collective_s(run.collective, size[i], run.num_gpus, b, a) / t[i] - 1))
        errors["held_out"] = _summary(left)
    return {"collective": str(run.collective), "num_gpus": run.num_gpus, "num_nodes": run.num_nodes,
            "device": run.device, "step_latency_s": alpha, "busbw_bytes_per_s": busbw,
            "min_size_bytes": float(size.min()), "max_size_bytes": float(size.max()), "source": run.source,
            "fit_errors": errors}
