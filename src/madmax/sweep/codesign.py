"""Co-design sensitivity: how much faster training gets when one resource, or all, improves k times.

For each setting (model x system x cluster size x task x strategy input), the gain of a what-if is

    gain = throughput(what-if) / throughput(baseline) = T_baseline / T_what-if

at the same global batch; with a `train` amount, the gain is in the time to train it instead (its expected wall
clock with failures, checkpoints and restarts, so the reliability what-ifs have a gain too):

    gain = time_to_train(baseline) / time_to_train(what-if)

Linear scaling is gain = k. MAD-Max (Hsia et al., ISCA 2024, Sec. VI) finds
that improving one resource alone saturates (the others become the bottleneck) and only balanced
scaling of compute, memory and network gives gains close to linear.
"""

from __future__ import annotations

SETTING = ["group_name", "model", "system", "num_gpus", "task", "global_batch", "seq_len", "dtype", "mode",
           "strategy_input"]


TRAIN_SPEED = "train_speed"  # 1 / time_to_train_s: the gain metric of sweeps with a train amount


def gain_metric(df) -> str:
    """The column a co-design gain compares: the time to train (as its inverse, `TRAIN_SPEED`) when every
    compared row trains an amount with the goodput model, else samples_per_s."""
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if "goodput" in ok.columns and len(ok) and ok["goodput"].notna().all():
        return TRAIN_SPEED
    return "samples_per_s"


def codesign_table(df, metric: str | None = None):
    """One row per what-if with `resource`, `factor` (improvement), `metric`, `gain` over the baseline.
    metric: a column where higher is better; default `gain_metric(df)`.

    Only rows with `whatif_resource` of a single resource (not a count such as spares), 'all' or 'baseline' and
    status 'ok' are used; a setting without a baseline row is dropped. `fits` tells whether the what-if fits in memory.
    """
    import pandas as pd

    metric = metric or gain_metric(df)
    if metric == TRAIN_SPEED:
        df = df.assign(**{TRAIN_SPEED: 1.0 / df["time_to_train_s"]})
    from madmax.sweep.whatif import COUNTS

    # counts (spares) are settings, not improvement factors: they have no co-design gain
    ok = df[(df["status"] == "ok") & df["whatif_resource"].notna() & ~df["whatif_resource"].str.contains(r"\+")
            & ~df["whatif_resource"].isin(COUNTS)]
    empty = pd.DataFrame(columns=["setting", *SETTING, "resource", "factor", metric, "gain", "fits", "strategy"])
    if ok.empty:
        return empty
    setting = [c for c in SETTING if c in ok.columns]
    base = ok[ok["whatif_resource"] == "baseline"][[*setting, metric]].rename(columns={metric: "_base"})
    base = base.drop_duplicates(setting)
    merged = ok.merge(base, on=setting, how="inner")
    if merged.empty:  # no what-if has a baseline of its setting to compare with
        return empty
    merged = merged.assign(resource=merged["whatif_resource"], factor=merged["whatif_factor"],
                           gain=merged[metric] / merged["_base"], setting=_labels(merged, setting))
    cols = ["setting", *setting, "resource", "factor", metric, "gain", "fits", "strategy"]
    return merged[cols].sort_values([*setting, "resource", "factor"], kind="stable").reset_index(drop=True)


def _labels(rows, setting: list[str]):
    """'model on N x system', plus the setting columns that differ among rows of that model and system."""
    place = ["model", "system", "num_gpus"]
    rest = [c for c in setting if c not in place]
    varying = rows.groupby(place, sort=False)[rest].transform(lambda c: c.nunique(dropna=False) > 1)

    def label(i: int) -> str:
        r = rows.iloc[i]
        extra = [f"{c}={r[c] if r[c] != '' else 'default'}" for c in rest if varying[c].iloc[i]]
        return f"{r['model']} on {int(r['num_gpus'])} x {r['system']}" + "".join(f", {e}" for e in extra)

    return [label(i) for i in range(len(rows))]


def codesign_summary(table):
    """Gains as a grid: one row per setting and resource ('all' last), one column per factor."""
    if table.empty:
        return table
    keys = ["setting"]
    grid = table.pivot_table(index=[*keys, "resource"], columns="factor", values="gain", aggfunc="first")
    grid = grid.drop(index="baseline", level="resource", errors="ignore")
    if 1.0 in grid.columns:  # the baseline's column: every resource at its catalog value gains 1x
        grid[1.0] = grid[1.0].fillna(1.0)
    order = sorted(grid.index, key=lambda k: (k[:-1], k[-1] == "all", k[-1]))
    return grid.loc[order]


def findings(table) -> list[str]:
    """One sentence per setting: the gain of each resource alone and of all together at the largest factor."""
    out = []
    if table.empty:
        return out
    for setting, sub in table[table["resource"] != "baseline"].groupby("setting", sort=False):
        top = sub["factor"].max()
        at = sub[sub["factor"] == top].set_index("resource")["gain"]
        alone = ", ".join(f"{r} {g:.2f}x" for r, g in at.drop("all", errors="ignore").sort_values().items())
        together = f"; all together {at['all']:.2f}x" if "all" in at else ""
        out.append(f"{setting}, resources improved {top:g}x: alone {alone}{together} "
                   f"(linear would be {top:g}x).")
    return out


NOTHING_TO_COMPARE = ("co-design: no what-if can be compared, as no point of the same setting ran on the "
                      "catalog hardware; add {} to whatifs (codesign adds it) to measure the gains")


def findings_of(directory) -> list[str]:
    """`findings` of a results folder; empty when its sweep has no single-resource what-ifs (counts aside), and one
    sentence saying so when none of its what-ifs has a baseline row (ok, no what-if) to compare with."""
    from madmax.sweep.store import load
    from madmax.sweep.whatif import COUNTS

    frame = load(directory)
    whatifs = frame["whatif_resource"].fillna("baseline")
    if not ((whatifs != "baseline") & ~whatifs.str.contains(r"\+") & ~whatifs.isin(COUNTS)).any():
        return []
    return findings(codesign_table(frame)) or [NOTHING_TO_COMPARE]
