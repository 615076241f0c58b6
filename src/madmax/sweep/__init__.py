"""Sweeps over models, systems, cluster sizes, tasks and hardware what-ifs; results as Parquet shards.

    from madmax.sweep import run_sweep, load, query, pareto
    run_sweep("examples/cloud_study.yaml", "cloud")          # resumes if interrupted
    df = load("cloud")                                       # one row per point (pandas)
    best = pareto(df, ["time_to_train_s", "cost_usd", "energy_j"])
    query("cloud", "SELECT system, min(cost_usd) FROM results GROUP BY system")

Heavy libraries (pandas, pyarrow, duckdb, dask) load inside the functions that use them.
"""

from madmax.sweep.codesign import codesign_summary, codesign_table
from madmax.sweep.pareto import pareto
from madmax.sweep.runner import Summary, run_sweep
from madmax.sweep.spec import Sweep, load_sweep
from madmax.sweep.store import load, query

__all__ = ["Summary", "Sweep", "codesign_summary", "codesign_table", "load", "load_sweep", "pareto", "query",
           "run_sweep"]
