"""Co-design gains on a table drawn by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from madmax.sweep import codesign_summary, codesign_table
from madmax.sweep.codesign import findings


def _rows():
    # baseline 100 samples/s; flops x2 -> 150 (gain 1.5), nic x2 -> 110 (1.1), all x2 -> 196 (1.96)
    base = {"group_name": "g", "model": "m", "system": "s", "num_gpus": 8, "task": "pretrain", "global_batch": 16,
            "seq_len": 1024, "dtype": "bf16", "mode": "simulate", "strategy_input": "", "status": "ok",
            "fits": True, "strategy": "tp=1"}
    rows = [("baseline", 1.0, 100.0), ("flops", 2.0, 150.0), ("nic_bandwidth", 2.0, 110.0), ("all", 2.0, 196.0),
            ("flops+nic_bandwidth", float("nan"), 300.0)]  # a custom what-if: not a co-design row
    return pd.DataFrame([{**base, "whatif_resource": r, "whatif_factor": f, "samples_per_s": v} for r, f, v in rows])


def test_gains_over_the_baseline():
    table = codesign_table(_rows())
    gains = dict(zip(table["resource"], table["gain"], strict=True))
    assert gains == pytest.approx({"all": 1.96, "baseline": 1.0, "flops": 1.5, "nic_bandwidth": 1.1})
    grid = codesign_summary(table)
    assert list(grid.index.get_level_values("resource")) == ["flops", "nic_bandwidth", "all"]
    assert grid.loc[("m on 8 x s", "all"), 2.0] == pytest.approx(1.96)
    assert findings(table) == ["m on 8 x s, resources improved 2x: alone nic_bandwidth 1.10x, flops 1.50x; "
                               "all together 1.96x (linear would be 2x)."]
