"""Sweeps that lose nothing: kill -9 (workers die too, a shard cut mid-write), damaged shards, two runs into
one folder, duplicated shards, and sweeps too large to expand."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from madmax.cli import app
from madmax.errors import ConfigError
from madmax.sweep import load, query, run_sweep
from madmax.sweep.store import LOCK, QUARANTINE, SweepWarning, locked, query_rows, shard_paths

runner = CliRunner()
posix_only = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and fork are POSIX")


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.sort_values("key").reset_index(drop=True),
                                  b.sort_values("key").reset_index(drop=True), check_like=True)


def _start(script: str, *args: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@posix_only
def test_kill_9_takes_the_worker_processes_with_it(make_spec, base_spec, tmp_path):
    psutil = pytest.importorskip("psutil")
    # 2 systems x 6 sizes x 10 batches x 2 strategies x 2 what-ifs = 480 points: minutes on 2 workers,
    # killed as soon as the first shard is written.
    spec = make_spec(tmp_path / "spec", {**base_spec, "num_gpus": [8, 16, 32, 64, 128, 256],
                                         "global_batches": [16 * k for k in range(1, 11)]})
    out = tmp_path / "out"
    sweep = _start("import sys; from madmax.sweep import run_sweep; "
                   "run_sweep(sys.argv[1], sys.argv[2], workers=2, chunk_size=1, flush_rows=1)", spec, out)
    parent = psutil.Process(sweep.pid)
    # the forkserver, its 2 workers and the resource tracker
    _wait_for(lambda: len(parent.children(recursive=True)) >= 4 and shard_paths(out), "workers and a shard")
    descendants = parent.children(recursive=True)
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()

    def running() -> list:
        alive = []
        for p in descendants:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive

    _wait_for(lambda: not running(), "the workers to exit", timeout_s=10)
    # the lock died with the sweep: a new run resumes, and no point is stored twice
    done = len(load(out))
    summary = run_sweep(spec, out, workers=1, stop_after=3)
    assert summary.done_before == done and summary.computed == 3
    df = load(out)
    assert len(df) == done + 3 and sum(len(pd.read_parquet(p)) for p in shard_paths(out)) == done + 3


@posix_only
def test_kill_9_in_the_middle_of_a_shard_write_loses_nothing(reference, make_spec, tmp_path):
    spec, out = make_spec(tmp_path / "spec"), tmp_path / "out"
    # The third shard write stops half-way through its bytes and the process is SIGKILLed there.
    script = """
import os, signal, sys
import pyarrow.parquet as pq
from madmax.sweep import run_sweep
write, calls = pq.write_table, []
def dying_write(table, where, **kw):
    calls.append(1)
    if len(calls) == 3:
        write(table.slice(0, 1), where)  # some bytes of the shard, not all
        where.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    write(table, where, **kw)
pq.write_table = dying_write
run_sweep(sys.argv[1], sys.argv[2], workers=1, chunk_size=1, flush_rows=3)
"""
    killed = _start(script, spec, out)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert len(shard_paths(out)) == 2 and len(load(out)) == 6  # the two whole shards
    assert len(list(out.glob(".part-*.tmp"))) == 1  # the cut one never got its name
    summary = run_sweep(spec, out, workers=1)
    assert (summary.done_before, summary.computed) == (6, 10)
    assert not list(out.glob(".part-*.tmp"))
    _same(load(out), load(reference))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_shard_is_skipped_by_query_and_recomputed_by_resume(reference, make_spec, tmp_path):
    spec, out = make_spec(tmp_path / "spec"), tmp_path / "out"
    run_sweep(spec, out, workers=1, stop_after=8, flush_rows=4, chunk_size=1)
    first, second = shard_paths(out)
    _truncate(first)
    # query and load: one warning naming the shard, and the rows of the readable shard
    with pytest.warns(SweepWarning, match=f"skipping shard {first.name}.*magic bytes"):
        assert query_rows(out, "SELECT count(*) FROM results")[1] == [(4,)]
    with pytest.warns(SweepWarning, match=first.name):
        assert len(load(out)) == 4
    result = runner.invoke(app, ["query", str(out), "SELECT count(*) AS n FROM results"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: skipping shard {first.name}")
    # resume: the shard goes to quarantine/ and its 4 points are computed again
    with pytest.warns(SweepWarning, match=f"{first.name}.*moved to {QUARANTINE}/"):
        summary = run_sweep(spec, out, workers=1)
    assert (summary.done_before, summary.computed) == (4, 12)
    assert (out / QUARANTINE / first.name).is_file() and not first.exists() and second.exists()
    _same(load(out), load(reference))


def test_the_sweep_command_prints_the_quarantine_as_one_line(spec_file, tmp_path):
    out = tmp_path / "out"
    run_sweep(spec_file, out, workers=1, stop_after=4)
    (shard,) = shard_paths(out)
    shard.write_bytes(b"PAR1 not a shard PAR1")
    result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(out), "--workers", "1", "--no-progress"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert result.stderr.count("warning: ") == 1 and f"shard {shard.name}" in result.stderr
    assert "16 points: 0 done before, 16 computed" in result.stdout


def test_a_second_run_into_a_folder_in_use_is_refused_in_one_sentence(spec_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with locked(out):
        with pytest.raises(ConfigError, match="is being written by another sweep"):
            run_sweep(spec_file, out, workers=1)
        result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(out), "--no-progress"])
    assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == (f"error: results folder {str(out)!r} is being written by another sweep (process {os.getpid()}); "
                    "wait for it to finish, or give another --out")
    assert not shard_paths(out)
    # released: the next run goes ahead
    assert run_sweep(spec_file, out, workers=1).computed == 16


@posix_only
def test_a_killed_holder_releases_the_lock(spec_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    holder = _start("import sys, time; from pathlib import Path; from madmax.sweep.store import locked\n"
                    "with locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)", out)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(ConfigError, match=f"process {holder.pid}"):
        run_sweep(spec_file, out, workers=1)
    holder.kill()
    holder.wait()
    assert (out / LOCK).is_file() and run_sweep(spec_file, out, workers=1).computed == 16


def test_two_sweeps_at_once_store_each_point_once(make_spec, base_spec, tmp_path):
    # 2 systems x 6 sizes x 3 strategies x 2 what-ifs = 72 points at one worker: seconds, so the runs overlap
    spec = make_spec(tmp_path / "spec", {**base_spec, "num_gpus": [8, 16, 32, 64, 128, 256],
                                         "strategies": ["tp=1", "tp=2", "tp=4"]})
    out = tmp_path / "out"
    command = [sys.executable, "-m", "madmax.cli", "sweep", str(spec), "--out", str(out), "--workers", "1",
               "--no-progress"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [r.communicate() for r in runs]
    outcomes = [(r.returncode, out, err) for r, (out, err) in zip(runs, outputs, strict=True)]
    for code, _, stderr in outcomes:
        assert "Traceback" not in stderr
        assert code == 0 or (code == 2 and stderr.strip() == stderr.strip().splitlines()[0]
                             and "is being written by another sweep" in stderr)
    assert 0 in [code for code, _, _ in outcomes]
    stored = pd.concat([pd.read_parquet(p, columns=["key"]) for p in shard_paths(out)])
    assert len(stored) == 72 and stored["key"].is_unique


def test_query_and_load_keep_one_row_per_key(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    (shard,) = shard_paths(out)
    shutil.copy(shard, out / "part-99999999999999999999-1-00001.parquet")  # every row twice
    assert query_rows(out, "SELECT count(*), count(DISTINCT key) FROM results")[1] == [(16, 16)]
    assert len(load(out)) == 16
    _same(query(out, "SELECT * FROM results"), query(reference, "SELECT * FROM results"))


def test_a_billion_points_are_counted_not_expanded(make_spec, base_spec, tmp_path):
    # 1000 sizes x 1000 batches x 1000 sequence lengths x 2 systems x 2 strategies x 2 what-ifs
    spec = make_spec(tmp_path / "spec", {**base_spec, "num_gpus": [8 * k for k in range(1, 1001)],
                                         "global_batches": [16 * k for k in range(1, 1001)],
                                         "seq_lens": [k for k in range(1, 1001)]})
    result = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: sweep 'tiny' has 8,000,000,000 points, more than the 1,000,000 one run expands; "
                           "run it in parts with --limit N (e.g. --limit 1000000)")
    assert not (tmp_path / "out").exists()
    # with a limit, a run expands only what it evaluates, and the next run resumes after it
    first = run_sweep(spec, tmp_path / "out", workers=1, stop_after=3)
    assert (first.total, first.done_before, first.computed, first.interrupted) == (8_000_000_000, 0, 3, True)
    second = run_sweep(spec, tmp_path / "out", workers=1, stop_after=2)
    assert (second.done_before, second.computed) == (3, 2)
    assert len(load(tmp_path / "out")) == 5 and load(tmp_path / "out")["key"].is_unique


def test_count_is_the_product_of_the_axes(make_spec, base_spec, tmp_path):
    from madmax.sweep import load_sweep

    spec = {**base_spec, "groups": [{"name": "a"}, {"name": "b", "systems": "dgx-h100", "whatifs": None,
                                                    "codesign": {"resources": ["flops"], "factors": [2, 4]}}]}
    sweep = load_sweep(make_spec(tmp_path / "spec", spec))
    # a: 2 systems x 2 sizes x 2 strategies x 2 what-ifs; b: 1 x 2 x 2 x (baseline, flops x2, flops x4)
    assert sweep.count() == 16 + 12
    # b's 4 baselines on dgx-h100 are points of a: the count is before repeats are dropped
    assert sum(1 for _ in sweep.points()) == 28 - 4


def test_a_full_disk_is_one_sentence_and_leaves_no_temporary_file(spec_file, tmp_path, monkeypatch):
    import errno

    import pyarrow.parquet as pq

    def full(table, where, **kwargs):
        where.write(b"PAR1 a few bytes")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(spec_file), "--out", str(out), "--workers", "1", "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == (f"error: results folder {str(out)!r}: a shard cannot be written (No space left on device); "
                    "its 16 rows are computed again when the sweep is resumed")
    assert not shard_paths(out) and not list(out.glob(".part-*"))


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.sampled_from([8, 16, 32, 64]), min_size=1, max_size=3, unique=True),
       batches=st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True),
       strategies=st.lists(st.sampled_from(["tp=1", "tp=2", "pp=2", "tp=2,pp=2"]), min_size=1, max_size=3,
                           unique=True),
       factors=st.lists(st.sampled_from([0.5, 2.0, 4.0]), max_size=2, unique=True))
def test_count_matches_the_points_of_distinct_axes(sizes, batches, strategies, factors):
    from madmax.sweep import load_sweep

    spec = {"name": "fuzz", "models": "llama-2-7b", "systems": "dgx-h100", "num_gpus": sizes, "global_batches": batches,
            "strategies": strategies,
            "codesign": {"resources": ["flops", "nic_bandwidth"], "factors": factors} if factors else None}
    sweep = load_sweep(spec)
    whatifs = 1 + 3 * len(factors) if factors else 1  # baseline + (2 resources + together) per factor
    assert sweep.count() == len(sizes) * len(batches) * len(strategies) * whatifs == sum(1 for _ in sweep.points())
