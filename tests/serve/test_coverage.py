"""Serving works for every catalog dense model in every mode, for every imported dense family, and on every
catalog system: a result with finite times, or a clear refusal, never a crash."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from madmax import api
from madmax.config.loaders import catalog_names, load_model, load_system

DENSE = [m for m in catalog_names("models") if load_model(m).family == "decoder"]
HF = sorted(p.parent.name for p in (Path(__file__).parents[1] / "data" / "hf").glob("*/config.json")
            if p.parent.name not in ("bert-base-uncased", "mixtral-8x7b-v0.1", "opt-350m"))
MODES = {
    "static": {"batch": 4},
    "concurrency": {"batch": 4, "num_requests": 16},
    "saturation": {"num_requests": 16},
    "rate": {"request_rate": 5.0, "num_requests": 24},
    "disaggregated": {"batch": 4, "num_requests": 16},
}


def tp_for(model, gpus: int) -> int:
    """The largest tensor-parallel degree up to `gpus` that the model allows at inference."""
    spec = load_model(model)
    return max(t for t in range(1, gpus + 1) if gpus % t == 0 and spec.num_heads % t == 0
               and spec.ffn_hidden_size % t == 0 and (spec.kv_heads % t == 0 or t % spec.kv_heads == 0))


def finite(result) -> bool:
    values = (result.ttft_s, result.tpot_s, result.output_tokens_per_s, result.prefill_time_s,
              result.decode_step_time_s, result.peak_memory_bytes)
    return all(math.isfinite(v) and v >= 0 for v in values) and result.output_tokens_per_s > 0


@pytest.mark.parametrize("model", DENSE)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_catalog_dense_model_in_every_mode(model, mode):
    tp = tp_for(model, 4)
    strategy = (f"prefill_workers=1,prefill_tp={tp},decode_workers=1,decode_tp={tp}" if mode == "disaggregated"
                else f"tp={tp}")
    # Two replicas of tp GPUs, or one prefill and one decode worker of tp GPUs each.
    r = api.simulate(model, "dgx-h100", 2 * tp, task="inference", mode=mode, prompt_len=256, output_len=32,
                     strategy=strategy, **MODES[mode])
    assert finite(r)
    assert r.fits or r.fits_reason


@pytest.mark.parametrize("name", HF)
def test_every_imported_dense_family(name):
    path = Path(__file__).parents[1] / "data" / "hf" / name / "config.json"
    r = api.simulate(str(path), "dgx-h100", 8, task="inference", batch=2, prompt_len=128, output_len=16,
                     strategy=f"tp={tp_for(str(path), 8)}")
    assert finite(r)


@pytest.mark.parametrize("system", catalog_names("systems"))
def test_every_catalog_system(system):
    node = load_system(system).gpus_per_node
    r = api.simulate("llama-3.1-8b", system, task="inference", batch=4, prompt_len=256, output_len=32,
                     strategy=f"tp={tp_for('llama-3.1-8b', node)}")
    assert finite(r)
    # GPUs without bf16 (V100) serve in fp16.
    assert r.dtype in ("bf16", "fp16")
