"""Physical invariants over random valid training configurations (issue 28): more FLOP/s or HBM bandwidth never
slows an iteration, overlapping the gradient reductions never slows it, and freezing weights never adds memory."""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import madmax
from madmax.config.loaders import find_in_catalog, load_gpu
from madmax.errors import MadmaxError

SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOL = 1 + 1e-9


@cache
def _system(flops: float = 1.0, hbm: float = 1.0) -> dict:
    """DGX H100 with its GPU's FLOP/s and HBM bandwidth scaled."""
    base = dict(find_in_catalog("systems", "dgx-h100"))
    gpu = load_gpu(base["gpu"])
    faster = gpu.model_dump(mode="json") | {
        "name": f"h100-x{flops}-{hbm}", "flops_per_s": {k: flops * v for k, v in gpu.flops_per_s.items()},
        "hbm_bytes_per_s": gpu.hbm_bytes_per_s * hbm}
    return base | {"name": f"dgx-h100-x{flops}-{hbm}", "gpu": faster}


runs = st.fixed_dictionaries({
    "model": st.sampled_from(["llama-3-8b", "qwen3-8b", "mistral-7b"]),
    "num_gpus": st.sampled_from([8, 16]),
    "global_batch": st.sampled_from([16, 32, 64]),
    "seq_len": st.sampled_from([2048, 4096, 8192]),
    "strategy": st.builds(lambda tp, cp, pp, zero: f"tp={tp},cp={cp},pp={pp},zero={zero}",
                          st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
                          st.sampled_from([0, 1, 2, 3])),
})


def _time(run: dict, system: dict | None = None, extra: str = "") -> float | None:
    try:
        return madmax.simulate(**{**run, "strategy": run["strategy"] + extra}, system=system or _system()
                               ).iteration_time_s
    except MadmaxError:  # a layout this model or cluster cannot take: nothing to compare
        return None


@SLOW
@given(run=runs, resource=st.sampled_from(["flops", "hbm"]))
def test_a_faster_gpu_never_slows_an_iteration(run, resource):
    base = _time(run)
    if base is None:
        return
    faster = _time(run, _system(flops=2.0) if resource == "flops" else _system(hbm=2.0))
    assert faster <= base * TOL, (resource, run, base, faster)


@SLOW
@given(run=runs)
def test_overlapping_the_gradient_reductions_never_slows_an_iteration(run):
    plain, overlapped = _time(run, extra=",dp_overlap=0"), _time(run, extra=",dp_overlap=1")
    if plain is not None:
        assert overlapped <= plain * TOL, (run, plain, overlapped)


@SLOW
@given(run=runs)
def test_freezing_weights_never_adds_memory(run):
    """LoRA's state (weights, gradients, optimizer; its small adapters included) and its peak, at the same
    recompute (the automatic choice would spend the memory saved on keeping activations), stay below a full
    fine-tune's."""
    run = {**run, "strategy": run["strategy"] + ",recompute=full"}
    try:
        full = madmax.simulate(**run, system="dgx-h100", task="finetune", finetune="full")
        lora = madmax.simulate(**run, system="dgx-h100", task="finetune", finetune="lora")
    except MadmaxError:
        return

    def state(result) -> float:
        memory = result.to_dict()["memory"]
        return memory["weights"] + memory["gradients"] + memory["optimizer"]

    assert state(lora) <= state(full) * TOL
    assert lora.peak_memory_bytes <= full.peak_memory_bytes * TOL
