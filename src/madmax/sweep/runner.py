"""Run a sweep: the points not yet in the results folder, on local processes or a dask cluster.

Points travel in chunks to workers (`evaluate_chunk`); rows come back in completion order and are
buffered into Parquet shards by this process alone, so workers never touch the folder. At most
2 chunks per worker are in flight, so a sweep of millions of points never holds them all.

Backends: one worker runs in this process; more run in a `concurrent.futures` process pool
(forkserver on POSIX: fresh interpreters forked from a server that imported madmax once); `dask`
takes 'local' (a dask.distributed LocalCluster of `workers` single-thread processes), a scheduler
address ('tcp://HOST:PORT'), or a `distributed.Client`. The rows do not depend on the backend.

One run at a time writes a folder (`store.locked`). Local worker processes die with the sweep, even when it
is killed with SIGKILL: each watches a pipe whose only writing end is in the sweep process, and exits when
the OS closes it (see `_watch_owner`). A sweep of more than `MAX_POINTS` points is refused unless a run is
bounded (`stop_after`, `--limit`); such a run expands points lazily and stops after that many.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError
from madmax.sweep import store
from madmax.sweep.evaluate import evaluate_chunk
from madmax.sweep.spec import Point, Sweep, load_sweep
from madmax.terminal import ProgressBar as _ProgressBar  # points done of the total, on a terminal only

MAX_CHUNK = 64
# Points one unbounded run expands (about 12 us each) and keeps the keys of: more would take minutes
# before the first point is evaluated and gigabytes of keys. Larger sweeps run in parts with --limit.
MAX_POINTS = 1_000_000


@dataclass(frozen=True)
class Summary:
    """What one run of a sweep did."""

    directory: Path
    total: int  # distinct points of the sweep (over max_points, run in parts: counted before repeats drop)
    done_before: int  # points found in the folder when the run started
    computed: int  # points evaluated and stored by this run
    errors: int  # of those, rows with status 'error' (bad input for that point)
    no_fit: int  # of those, searches where no strategy fits in memory
    failed: int  # points that raised a bug: in failures.jsonl, not stored, retried next run
    wall_s: float
    interrupted: bool  # stopped early (stop_after or an exception); rerun to resume

    @property
    def points_per_s(self) -> float:
        return (self.computed + self.failed) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def remaining(self) -> int:
        return self.total - self.done_before - self.computed


def run_sweep(sweep: Sweep | str | Path | dict, out: str | Path, *, workers: int | None = None,
              dask: Any = None, dask_processes: bool = True, prices: dict[str, float] | None = None,
              powers: dict[str, float] | None = None,
              progress: bool = False, on_progress: Callable[[int, int], None] | None = None,
              stop_after: int | None = None, chunk_size: int | None = None, flush_rows: int = 1000,
              flush_s: float = 30.0, max_points: int = MAX_POINTS) -> Summary:
    """Evaluate every point of `sweep` not yet stored in `out`; store the rows as Parquet shards there.

    workers: processes (default: CPU count; 1 runs here). dask: None, 'local', an address or a Client.
    prices: USD per GPU-hour by system name ('*': all) over the sweep's; powers: W per GPU at load by system
    name ('*': all) over the catalog's node power. on_progress(done, total) is
    called after each chunk (done counts points stored before this run). stop_after: stop once this many
    points are evaluated (a partial run, resumed by the next). An exception (Ctrl-C) stops the run after
    the rows received so far are written. A sweep of more than `max_points` points needs `stop_after`.
    ConfigError if another run is writing `out`.
    """
    sweep = sweep if isinstance(sweep, Sweep) else load_sweep(sweep)
    if prices:
        sweep = sweep.with_prices(prices)
    if powers:
        sweep = sweep.with_powers(powers)
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise ConfigError(f"workers={workers} must be a positive number of processes")
    if dask is not None and isinstance(dask, str) and dask != "local" and "://" not in dask:
        raise ConfigError(f"dask={dask!r} must be 'local' or a scheduler address such as tcp://HOST:PORT")
    if stop_after is not None and stop_after < 1:
        raise ConfigError(f"stop_after={stop_after} must be a positive number of points")
    count = sweep.count()
    if count > max_points and stop_after is None:
        raise ConfigError(f"sweep {sweep.name!r} has {count:,} points, more than the {max_points:,} one run "
                          f"expands; run it in parts with --limit N (e.g. --limit {max_points}), each run "
                          "resuming where the last stopped, or make its axes shorter")
    directory = Path(out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"out={str(directory)!r} cannot be created: {exc.__class__.__name__}") from None
    with store.locked(directory):
        return _run_locked(sweep, directory, count if count > max_points else None, workers=workers, dask=dask,
                           dask_processes=dask_processes, progress=progress, on_progress=on_progress,
                           stop_after=stop_after, chunk_size=chunk_size, flush_rows=flush_rows, flush_s=flush_s)


def _run_locked(sweep: Sweep, directory: Path, lazy_total: int | None, *, workers: int, dask: Any,
                dask_processes: bool, progress: bool, on_progress: Callable[[int, int], None] | None,
                stop_after: int | None, chunk_size: int | None, flush_rows: int, flush_s: float) -> Summary:
    """The run, holding the folder's lock. lazy_total: the point count of a sweep too large to expand up front
    (points are then expanded as they are evaluated, and totals count points before repeats are dropped)."""
    store.remove_partial(directory)
    done = store.completed_keys(directory)
    if lazy_total is None:
        total = pending = 0
        for point in sweep.points():
            total += 1
            pending += point.key not in done
        done_before = total - pending
    else:
        total, done_before = lazy_total, len(done)
        pending = total - done_before
    store.write_meta(directory, {"name": sweep.name, "total_points": total,
                                 "spec": sweep.spec.model_dump(mode="json", exclude_defaults=True)})
    todo = min(pending, stop_after) if stop_after is not None else pending
    size = chunk_size or max(1, min(MAX_CHUNK, todo // (8 * workers)))
    points = (p for p in sweep.points() if p.key not in done)
    chunks = _chunks(itertools.islice(points, stop_after) if lazy_total is not None else points, size)
    if dask is not None:
        results = _dask_results(chunks, dask, workers, dask_processes)
    else:
        results = _local_results(chunks, workers)
    bar = _ProgressBar(sweep.name, total, done_before) if progress else None
    writer = store.ShardWriter(directory, flush_rows=flush_rows, flush_s=flush_s)
    counts = {"computed": 0, "error": 0, "no_fit": 0, "failed": 0}
    start = time.perf_counter()
    finished_all = False
    try:
        for rows in results:
            _take(rows, writer, directory, counts)
            finished = done_before + counts["computed"] + counts["failed"]
            if bar is not None:
                bar.update(finished)
            if on_progress is not None:
                on_progress(finished, total)
            if stop_after is not None and counts["computed"] + counts["failed"] >= stop_after:
                break
        else:
            finished_all = True
    finally:
        results.close()
        writer.flush()
        if bar is not None:
            bar.close()
    return Summary(directory=directory, total=total, done_before=done_before, computed=counts["computed"],
                   errors=counts["error"], no_fit=counts["no_fit"], failed=counts["failed"],
                   wall_s=time.perf_counter() - start,
                   interrupted=not finished_all if lazy_total is not None else
                   counts["computed"] + counts["failed"] < pending)


def _take(rows: list[dict[str, Any]], writer: store.ShardWriter, directory: Path, counts: dict[str, int]) -> None:
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        with open(directory / store.FAILURES, "a", encoding="utf-8") as f:
            for r in failed:
                f.write(json.dumps({"key": r["key"], "model": r["model"], "system": r["system"],
                                    "error": r["error"]}) + "\n")
    kept = [r for r in rows if r["status"] != "failed"]
    writer.add(kept)
    counts["computed"] += len(kept)
    counts["failed"] += len(failed)
    for r in kept:
        if r["status"] in counts:
            counts[r["status"]] += 1


def _chunks(points: Iterator[Point], size: int) -> Iterator[list[Point]]:
    chunk: list[Point] = []
    for p in points:
        chunk.append(p)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _local_results(chunks: Iterator[list[Point]], workers: int) -> Iterator[list[dict[str, Any]]]:
    if workers == 1:
        for chunk in chunks:
            yield evaluate_chunk(chunk)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        context.set_forkserver_preload(["madmax.api", "madmax.sweep.evaluate"])
    # The pipe's writing end stays in this process only; the OS closes it when this process ends, however.
    watch, keep = context.Pipe(duplex=False)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_watch_owner, initargs=(watch,))
    try:
        inflight = {pool.submit(evaluate_chunk, c) for c in _take_n(chunks, 2 * workers)}
        while inflight:
            finished, inflight = wait(inflight, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
            inflight |= {pool.submit(evaluate_chunk, c) for c in _take_n(chunks, len(finished))}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        watch.close()
        # Workers finish their chunk and exit; then the pipe can go (at the latest when this process ends).
        threading.Thread(target=_close_after, args=(pool, keep), name="madmax-sweep-pool", daemon=True).start()


def _close_after(pool: ProcessPoolExecutor, pipe: Any) -> None:
    pool.shutdown(wait=True)
    pipe.close()


def _watch_owner(pipe: Any) -> None:
    """Worker initializer: exit this worker as soon as the sweep process that started it is gone.

    `pipe` is the reading end of a pipe whose writing end only the sweep holds. When the sweep ends in any
    way (return, exception, SIGKILL) the OS closes that end and the read below sees end-of-file. The parent
    process id cannot tell: a forkserver, not the sweep, is the workers' parent, and a killed sweep may
    linger as a zombie.
    """

    def wait_then_exit() -> None:
        with contextlib.suppress(EOFError, OSError):
            pipe.recv_bytes()  # the sweep never writes: this returns when its end is closed
        os._exit(1)

    threading.Thread(target=wait_then_exit, name="madmax-sweep-owner", daemon=True).start()


def _take_n(chunks: Iterator[list[Point]], n: int) -> list[list[Point]]:
    out = []
    for _ in range(n):
        chunk = next(chunks, None)
        if chunk is None:
            break
        out.append(chunk)
    return out


def _dask_results(chunks: Iterator[list[Point]], dask: Any, workers: int,
                  processes: bool) -> Iterator[list[dict[str, Any]]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ConfigError("dask needs dask[distributed]; install madmax[dist]") from None
    owned: list[Any] = []
    try:
        if dask == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                                   dashboard_address=None)
            owned.append(cluster)
            client = Client(cluster)
        elif isinstance(dask, str):
            try:
                client = Client(dask, timeout="10s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"dask={dask!r}: no scheduler answers there ({exc.__class__.__name__})") from None
        else:
            client = dask
        if client is not dask:
            owned.insert(0, client)
        slots = 2 * max(1, len(client.scheduler_info().get("workers", {})) or workers)
        futures = as_completed([client.submit(evaluate_chunk, c, pure=False) for c in _take_n(chunks, slots)])
        for future in futures:
            rows = future.result()
            future.release()
            yield rows
            for c in _take_n(chunks, 1):
                futures.add(client.submit(evaluate_chunk, c, pure=False))
    finally:
        for thing in owned:
            thing.close()


def parse_powers(items: list[str]) -> dict[str, float]:
    """`--power` values as {system: W per GPU}: 'SYSTEM=W' for one system, 'W' for all ('*')."""
    return _per_system(items, "power", "W", "W per GPU (> 0), e.g. p4d.24xlarge=800", zero_allowed=False)


def parse_prices(items: list[str]) -> dict[str, float]:
    """`--price` values as {system: USD per GPU-hour}: 'SYSTEM=USD' for one system, 'USD' for all ('*')."""
    return _per_system(items, "price", "USD", "USD per GPU-hour (>= 0), e.g. p4d.24xlarge=3.5", zero_allowed=True)


def _per_system(items: list[str], name: str, unit: str, allowed: str, zero_allowed: bool) -> dict[str, float]:
    """'SYSTEM=VALUE' or 'VALUE' items as {system or '*': value}; a value that is not a finite number, or not
    positive (not negative where zero is allowed), is a ConfigError naming the item and what is allowed."""
    values = {}
    for item in items:
        system, _, text = item.rpartition("=")
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        low_ok = value >= 0 if zero_allowed else value > 0
        if not (low_ok and value < math.inf):
            raise ConfigError(f"{name}={item!r} must be SYSTEM={unit} or {allowed}")
        values[system.strip() or "*"] = value
    return values
