"""Results of a simulated serving deployment: latency, throughput, memory and the breakdown of a prefill
and a decode step, in SI units; `to_dict()` is the `--json` output of an inference run.

Latencies are per request, averaged over the requests simulated (`ttft_s`, `tpot_s`, `e2e_latency_s`);
TPOT of a request is (end - first token) / (output - 1), as `vllm bench serve`, SGLang's bench_serving
and genai-perf compute it. Rate mode adds their percentiles, the inter-token latency (pooled over every
token) and goodput (requests per second within the TTFT and TPOT limits; Zhong et al. 2024, DistServe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from madmax.results.breakdown import stream_breakdown
from madmax.sim import Schedule

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class ServingResult:
    """Prediction for one model x system x serving strategy x mode."""

    model: str
    system: str
    num_gpus: int
    task: str
    mode: str
    stack: str
    strategy: str
    dtype: str
    kv_dtype: str
    batch: int
    prompt_len: float
    output_len: float
    max_batch_by_memory: int
    ttft_s: float
    tpot_s: float
    e2e_latency_s: float
    prefill_time_s: float
    decode_step_time_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    requests_per_s: float
    tokens_per_s: float
    mfu: float
    kv_cache_bytes_per_token: float
    weights_bytes_per_gpu: float
    peak_memory_bytes: float
    fits: bool
    fits_reason: str | None
    breakdown: dict[str, Any]
    memory: dict[str, float]
    assumptions: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)  # what queues the requests (`madmax.serve.limits`)
    latency: dict[str, dict[str, float | None]] | None = None  # None: no such interval (`percentiles`)
    goodput: dict[str, float] | None = None
    error_band: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None  # per million output tokens (`madmax.results.cost.cost_of`), as Result's
    slo: dict[str, Any] | None = None  # the SLOs held against (`madmax.search.capacity.slo_block`), highest rate
    # The command lines that launch it (`madmax.results.launch.Launch.to_dict`): Megatron-LM and torchtitan for a
    # decoder's training, the serving stack's engine for a replica; empty where no launcher applies.
    launch: list[dict[str, Any]] = field(default_factory=list)
    launch_note: str | None = None  # why `launch` is empty
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    memory_timeline: dict[int, list[tuple[float, float]]] | None = field(default=None, repr=False, compare=False)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    def to_dict(self) -> dict[str, Any]:
        out = {
            "model": self.model, "system": self.system, "num_gpus": self.num_gpus, "task": self.task,
            "mode": self.mode, "stack": self.stack, "strategy": self.strategy, "dtype": self.dtype,
            "kv_dtype": self.kv_dtype, "batch": self.batch, "prompt_len": self.prompt_len,
            "output_len": self.output_len, "max_batch_by_memory": self.max_batch_by_memory,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_latency_s": self.e2e_latency_s,
            "prefill_time_s": self.prefill_time_s, "decode_step_time_s": self.decode_step_time_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "requests_per_s": self.requests_per_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
            "weights_bytes_per_gpu": self.weights_bytes_per_gpu, "peak_memory_bytes": self.peak_memory_bytes,
            "fits": self.fits, "fits_reason": self.fits_reason, "breakdown": self.breakdown,
            "memory": self.memory, "assumptions": list(self.assumptions), "limits": list(self.limits),
            "error_band": self.error_band, "launch": self.launch,
            "launch_note": self.launch_note,
        }
        if self.latency is not None:
            out["latency"] = self.latency
        if self.goodput is not None:
            out["goodput"] = self.goodput
        if self.cost is not None:
            out["cost"] = self.cost
        if self.slo is not None:
            out["slo"] = self.slo
        return out


def step_breakdown(schedule: Schedule, rank: str, compute_by_kind: dict[str, float],
                   host_s: float) -> dict[str, Any]:
    """One step of one stage: kernel seconds by category, collectives by kind (exposed and overlapped,
    read off the timeline), and the host's time."""
    view = stream_breakdown(schedule, rank)
    comm = {k: v for k, v in view["communication"].items() if not k.startswith("host")}
    return {"compute_s": {**compute_by_kind, "total": sum(compute_by_kind.values())}, "communication_s": comm,
            "exposed_communication_s": sum(v["exposed"] for v in comm.values()), "host_s": host_s}


def percentiles(values, weights=None) -> dict[str, float | None]:
    """Mean and the p50/p90/p99 of `values` (weighted by `weights`, e.g. tokens per inter-token gap); None
    each when there is no value (no request decoded a second token: no TPOT or inter-token gap exists)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(v)
    v, w = v[order], w[order]
    cum = np.cumsum(w) / w.sum()
    out = {"mean": float(np.average(v, weights=w))}
    for p in PERCENTILES:
        out[f"p{p}"] = float(v[min(np.searchsorted(cum, p / 100), len(v) - 1)])
    return out
