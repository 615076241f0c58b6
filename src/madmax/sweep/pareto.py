"""The Pareto frontier of a results table: the rows no other row beats on every objective.

Row a dominates row b when a is no worse than b on every objective and better on at least one
(minimizing; a maximized column is negated). Rows equal on every objective do not dominate each other,
so both stay. The rows are sorted lexicographically first, so only a row earlier in that order can
dominate a later one, and each row is compared with the frontier found so far: O(n f) for f frontier rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from madmax.errors import ConfigError

OBJECTIVES = ("time_to_train_s", "cost_usd", "energy_j")


def frontier_mask(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of `values` (n rows x k objectives, all minimized)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort(values.T[::-1])
    front = np.empty((0, values.shape[1]))
    for i in order:
        v = values[i]
        if len(front) and np.any(np.all(front <= v, axis=1) & np.any(front < v, axis=1)):
            continue
        keep[i] = True
        front = np.vstack([front, v])
    return keep


def pareto(df, objectives: Sequence[str] = OBJECTIVES, *, maximize: Sequence[str] = (), feasible: bool = True):
    """Rows of `df` on the Pareto frontier of `objectives` (minimized) and `maximize` (maximized).

    feasible: first drop rows that are not results (status other than 'ok'), do not fit in memory
    (`fits` false), or lack a value of an objective (NaN: e.g. a cost without a price). The frontier is
    returned sorted by the first objective, with the index of `df`.
    """
    columns = [*objectives, *maximize]
    if not columns:
        raise ConfigError("objectives must name at least one column to minimize or maximize")
    numeric = [c for c in df.columns if df[c].dtype.kind in "fiub"]
    bad = [c for c in columns if c not in numeric]
    if bad:
        what = "is not a numeric column" if bad[0] in df.columns else "is not a column"
        raise ConfigError(f"objective {bad[0]!r} {what}; allowed: {', '.join(c for c in numeric if c != 'fits')}")
    if len(set(columns)) < len(columns):
        twice = next(c for c in columns if columns.count(c) > 1)
        raise ConfigError(f"objective {twice!r} is named twice; allowed: distinct columns")
    rows = df
    if feasible:
        ok = np.ones(len(df), dtype=bool)
        if "status" in df.columns:
            ok &= (df["status"] == "ok").to_numpy()
        if "fits" in df.columns:
            ok &= df["fits"].fillna(False).astype(bool).to_numpy()
        ok &= np.isfinite(df[columns].to_numpy(dtype=float)).all(axis=1)
        rows = df[ok]
    values = np.array(rows[columns].to_numpy(dtype=float), dtype=float, copy=True)
    values[:, len(objectives):] *= -1
    front = rows[frontier_mask(values)]
    return front.sort_values(columns[0], ascending=columns[0] in objectives, kind="stable")
