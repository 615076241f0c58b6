"""A small sweep with everything a report shows: prices, several strategies, co-design what-ifs."""

from __future__ import annotations

import pytest

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
        "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}

# 2 systems x 2 sizes x 2 strategies x (baseline + 1 factor x (2 resources + all)) = 32 points
SPEC = {"name": "report-test", "models": [TINY], "systems": ["p4d.24xlarge", "a2-highgpu-8g"], "num_gpus": [8, 16],
        "global_batches": 16, "seq_lens": 1024, "strategies": ["tp=1", "tp=2"], "train": {"tokens": 1.0e9},
        "codesign": {"resources": ["flops", "nic_bandwidth"], "factors": [2]}}


@pytest.fixture(scope="session")
def results(tmp_path_factory):
    from madmax.sweep import run_sweep

    out = tmp_path_factory.mktemp("report") / "results"
    run_sweep(SPEC, out, workers=1)
    return out
