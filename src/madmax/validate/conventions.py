"""How published sources count FLOPs, and the predicted value of a row's metric.

Papers and vendors report throughput in TFLOP/s or MFU computed with their own FLOP formula, not
with ours (madmax counts causal attention as half of the full score matrix, for instance). To compare
like with like, a predicted iteration time is turned into the source's unit with the source's formula:

    predicted TFLOP/s per GPU = F_tok * (tokens/s/GPU predicted) / 1e12
    predicted MFU             = F_tok * (tokens/s/GPU predicted) / peak

so the error of such a row is exactly the error of the predicted time (|e_time| = |e| / (1 + e)).
The engine's own figure (its `mfu` or `hfu` times the peak) is kept beside it for information.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TERA = 1e12

SERVING_METRICS = ("output_tokens_per_s_per_gpu", "ttft_ms", "tpot_ms")
"""Metrics of LLM serving rows, read from a `ServingResult.to_dict()`."""
METRICS = ("iteration_time_s", "tokens_per_s_per_gpu", "samples_per_s", "tflops_per_gpu", "mfu", "latency_ms",
           *SERVING_METRICS)
"""Row metrics the runner can predict. Times are lower-is-better, the others higher-is-better."""
LOWER_IS_BETTER = frozenset({"iteration_time_s", "latency_ms", "ttft_ms", "tpot_ms"})
"""The time metrics of `METRICS`: for them e > 0 means the prediction is too slow, for the others too fast."""


def published_flops_per_token(model: Mapping[str, Any], seq_len: int, layer_passes: int = 3) -> float:
    """FLOPs per trained token by the Megatron-LM / NeMo convention (dense attention, no causal saving).

    F_tok = p * L * (2h(h + 2 h k/a) + 2h^2 + 2 m h f + 4 s h) + 3 * 2 h V
    L layers, h hidden size, a query heads, k key/value heads, f FFN width, m = 3 for a gated FFN
    (SwiGLU) else 2, s sequence length, V vocabulary; p passes over the layers: 3 (forward and a
    backward of twice its cost) or 4 when full recompute repeats the forward. The LM head is never
    recomputed. Embedding lookups, norms and softmax are not counted.

    For a GPT (k = a, f = 4h, m = 2) with p = 4 this is Narayanan et al. 2021 (SC21, arXiv:2104.04473)
    Eq. 3 divided by B*s: 96 L h^2 (1 + s/(6h) + V/(16 L h)); with p = 3 it is Korthikanti et al. 2022
    (arXiv:2205.05198) Sec. 6: 72 L h^2 (1 + s/(6h) + V/(12 L h)). With p = 3 it reproduces NeMo 24.07's
    "Model TFLOP/s/GPU" from its tokens/s/GPU within 0.1% (Llama-2-7B, GPT3-5B, Nemotron-8B rows).
    """
    h = model["hidden_size"]
    a = model["num_heads"]
    k = model.get("num_kv_heads") or a
    f = model["ffn_hidden_size"]
    m = 3 if model.get("is_gated_ffn") else 2
    layer = 2 * h * (h + 2 * h * k / a) + 2 * h * h + 2 * m * h * f + 4 * seq_len * h
    head = 2 * h * model["vocab_size"]
    return layer_passes * model["num_layers"] * layer + 3 * head


def predicted_value(
    metric: str,
    result: Mapping[str, Any],
    *,
    flops_per_token: float | None = None,
    peak_flops_per_s: float | None = None,
) -> float:
    """The prediction of `metric` from a `Result.to_dict()`, in the row's unit.

    iteration_time_s (s), tokens_per_s_per_gpu, samples_per_s: read directly; latency_ms: the
    iteration (one forward pass of the batch) in milliseconds.
    Serving rows: output_tokens_per_s_per_gpu read directly (output tokens/s/GPU); ttft_ms and tpot_ms:
    the mean time to first token `ttft_s` and time per output token `tpot_s`, times 1e3.
    tflops_per_gpu (TFLOP/s): F_tok * tokens/s/GPU / 1e12 with the source's F_tok.
    mfu (fraction): F_tok * tokens/s/GPU / peak, peak in FLOP/s as the source states it.
    """
    if metric in ("iteration_time_s", "tokens_per_s_per_gpu", "samples_per_s"):
        return float(result[metric])
    if metric == "latency_ms":  # one forward pass of a request batch (recommendation inference)
        return float(result["iteration_time_s"]) * 1e3
    if metric == "output_tokens_per_s_per_gpu":
        return float(result[metric])
    if metric in ("ttft_ms", "tpot_ms"):  # mean over the requests simulated, s -> ms
        return float(result[metric.removesuffix("_ms") + "_s"]) * 1e3
    if flops_per_token is None:
        raise ValueError(f"metric {metric!r} needs the source's FLOPs per token")
    achieved = flops_per_token * float(result["tokens_per_s_per_gpu"])
    if metric == "tflops_per_gpu":
        return achieved / TERA
    if metric == "mfu":
        if not peak_flops_per_s:
            raise ValueError("metric 'mfu' needs the peak FLOP/s the source divided by")
        return achieved / peak_flops_per_s
    raise ValueError(f"metric {metric!r} is not predicted; allowed: {', '.join(METRICS)}")


def direction(metric: str, signed_error_pct: float) -> str:
    """'too slow' or 'too fast' (or 'exact'): what a signed error e of `metric` says of the prediction."""
    if signed_error_pct == 0:
        return "exact"
    return "too slow" if (signed_error_pct > 0) == (metric in LOWER_IS_BETTER) else "too fast"


def engine_value(
    metric: str,
    result: Mapping[str, Any],
    *,
    layer_passes: int = 3,
    peak_flops_per_s: float | None = None,
) -> float | None:
    """The engine's own reading of a FLOP metric: hfu*peak (recompute counted) or mfu*peak, or mfu.

    None for time and rate metrics, which need no convention, and when the peak is unknown.
    """
    if metric == "mfu":
        return float(result["mfu"])
    if metric != "tflops_per_gpu" or not peak_flops_per_s:
        return None
    utilization = result["hfu"] if layer_passes > 3 else result["mfu"]
    return float(utilization) * peak_flops_per_s / TERA
