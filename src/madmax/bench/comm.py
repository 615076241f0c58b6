"""`madmax bench comm`: collective bus bandwidth with torch.distributed, written as nccl-tests output.

N processes (torch.multiprocessing spawn, one GPU each with NCCL, or CPU tensors with gloo) run each
collective over message sizes S = min, 2 min, ..., max bytes (nccl-tests size convention, see
`madmax.hardware.collectives`): all_reduce of S per rank, all_gather into S, reduce_scatter of S,
all_to_all of S, and a ring of send/recv of S. After `warmup` untimed runs, `iters` back-to-back runs
are timed; the time is the slowest rank's mean. As in nccl-tests (doc/PERFORMANCE.md):

    algbw = S / t;   busbw = algbw * 2(n-1)/n (all_reduce), * (n-1)/n (all_gather, reduce_scatter,
    all_to_all), * 1 (send_recv)

The output has one section per collective in the nccl-tests layout (`madmax.validate.nccl_tests`
reads it); torch's collectives here are in-place or out-of-place as torch offers them, and the
in-place columns repeat the one measurement.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madmax.bench import import_torch
from madmax.errors import ConfigError

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
TEST_NAMES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
              "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf", "send_recv": "sendrecv_perf"}
FLOAT_BYTES = 4


@dataclass(frozen=True)
class CommPlan:
    backend: str
    nprocs: int
    collectives: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    warmup: int
    iters: int


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw of nccl-tests: 2(n-1)/n, (n-1)/n or 1."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    return 1.0 if collective == "send_recv" else (n - 1) / n


def sizes(plan: CommPlan) -> list[int]:
    """Message sizes from min to max, doubling, each a multiple of 4 n bytes (n float32 chunks)."""
    unit = FLOAT_BYTES * plan.nprocs
    out, s = [], plan.min_bytes
    while s <= plan.max_bytes:
        out.append(max(unit, s // unit * unit))
        s *= 2
    return sorted(set(out))


def _op(torch: Any, dist: Any, collective: str, size: int, rank: int, n: int, device: Any):
    count = size // FLOAT_BYTES
    x = torch.ones(count, device=device)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(x)
    if collective == "all_gather":
        part = torch.ones(count // n, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(x, part)
    if collective == "reduce_scatter":
        part = torch.empty(count // n, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(part, x)
    if collective == "all_to_all":
        y = torch.empty_like(x)
        return lambda: dist.all_to_all_single(y, x)
    y = torch.empty_like(x)

    def ring() -> None:
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, y, (rank - 1) % n)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return ring


def _time_s(torch: Any, dist: Any, fn: Any, plan: CommPlan, device: Any) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(plan.warmup):
        fn()
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(plan.iters):
        fn()
    sync()
    slowest = torch.tensor([(time.perf_counter() - t0) / plan.iters], device=device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def _worker(rank: int, plan: CommPlan, init: str, out: str) -> None:
    torch = import_torch()
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)
    device = torch.device(f"cuda:{rank}") if plan.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(plan.backend, init_method=init, rank=rank, world_size=plan.nprocs)
    try:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({plan.backend})"
        ranks: list[Any] = [None] * plan.nprocs
        dist.all_gather_object(ranks, (socket.gethostname(), os.getpid(), str(device), name))
        results = {c: [(s, _time_s(torch, dist, _op(torch, dist, c, s, rank, plan.nprocs, device), plan, device))
                       for s in sizes(plan)] for c in plan.collectives}
        if rank == 0:
            Path(out).write_text(format_output(plan, ranks, results), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def format_output(plan: CommPlan, ranks: list[tuple[str, int, str, str]], results: dict[str, list]) -> str:
    """nccl-tests text for each collective's (size, seconds) rows."""
    lines = []
    for collective, rows in results.items():
        lines += [f"# Collective test starting: {TEST_NAMES[collective]}",
                  f"# nThread 1 nGpus 1 minBytes {plan.min_bytes} maxBytes {plan.max_bytes} step: 2(factor) "
                  f"warmup iters: {plan.warmup} iters: {plan.iters} agg iters: 1 validation: 0 graph: 0",
                  f"# madmax bench comm: torch.distributed {plan.backend}, {plan.nprocs} processes; "
                  "the in-place columns repeat the one measurement", "#", "# Using devices"]
        lines += [f"#  Rank {i:2d} Group  0 Pid {pid:6d} on {host:>10s} device {i:2d} [{dev}] {name}"
                  for i, (host, pid, dev, name) in enumerate(ranks)]
        lines += ["#", f"#{'out-of-place':>71s}{'in-place':>31s}",
                  f"#{'size':>11s}{'count':>14s}{'type':>10s}{'redop':>8s}{'root':>8s}"
                  f"{'time':>9s}{'algbw':>8s}{'busbw':>8s}{'#wrong':>7s}{'time':>9s}{'algbw':>8s}{'busbw':>8s}{'#wrong':>7s}",
                  f"#{'(B)':>11s}{'(elements)':>14s}{'':>26s}{'(us)':>9s}{'(GB/s)':>8s}{'(GB/s)':>8s}{'':>7s}"
                  f"{'(us)':>9s}{'(GB/s)':>8s}{'(GB/s)':>8s}"]
        busbws = []
        for size, t in rows:
            algbw = size / t / 1e9
            busbw = algbw * bus_factor(collective, plan.nprocs)
            busbws.append(busbw)
            redop = "sum" if collective in ("all_reduce", "reduce_scatter") else "none"
            cells = f"{t * 1e6:9.2f}{algbw:8.2f}{busbw:8.2f}{'N/A':>7s}"
            lines.append(f"{size:12d}{size // FLOAT_BYTES:14d}{'float':>10s}{redop:>8s}{-1:8d}{cells}{cells}")
        lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4g} ", "#"]
    return "\n".join(lines) + "\n"


def bench_comm(out: Path, *, backend: str | None = None, nprocs: int | None = None,
               collectives: tuple[str, ...] = COLLECTIVES, min_bytes: int | None = None,
               max_bytes: int | None = None, warmup: int = 2, iters: int | None = None) -> Path:
    """Run the collectives in `nprocs` spawned processes and write nccl-tests-like text to `out`.

    backend: 'nccl' (one GPU per process; the default with 2+ GPUs) or 'gloo' (CPU tensors; 2 processes
    by default). Sizes in bytes: 1 MiB - 1 GiB on GPUs, 4 KiB - 1 MiB on CPUs by default.
    """
    torch = import_torch()
    import torch.multiprocessing as mp

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= 2 else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ConfigError(f"backend={backend!r} is unknown; allowed: nccl, gloo")
    nprocs = nprocs or (gpus if backend == "nccl" else 2)
    if nprocs < 2 or (backend == "nccl" and nprocs > gpus):
        raise ConfigError(f"nprocs={nprocs} needs 2 to {max(gpus, 2) if backend == 'nccl' else 'any'} processes"
                          f"{f' (torch sees {gpus} GPUs)' if backend == 'nccl' else ''}")
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise ConfigError(f"collective {unknown[0]!r} is unknown; allowed: {', '.join(COLLECTIVES)}")
    gpu = backend == "nccl"
    plan = CommPlan(backend, nprocs, tuple(collectives), min_bytes or (1 << 20 if gpu else 1 << 12),
                    max_bytes or (1 << 30 if gpu else 1 << 20), warmup, iters or (20 if gpu else 5))
    if plan.min_bytes <= 0 or plan.max_bytes < plan.min_bytes:
        raise ConfigError(f"min_bytes={plan.min_bytes}, max_bytes={plan.max_bytes}: need 0 < min <= max")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(plan, f"file://{Path(tmp) / 'init'}", str(out)), nprocs=nprocs, join=True)
    return out


__all__ = ["COLLECTIVES", "bench_comm", "bus_factor", "format_output"]
