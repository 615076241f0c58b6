"""Which query-key pairs an attention computes: causal masks and sliding windows, counted once.

Used by the workload (FLOPs per token), the plan (FLOPs of a serving step's kernels) and the compute
cost model (time), so that all three count the same pairs.
"""

from __future__ import annotations


def attention_pairs(q_len: float, kv_len: float, causal: bool, window: float | None = None) -> float:
    """Query-key pairs per head: q*kv, or for causal masking with the queries last, q*kv - q^2/2.

    With q = kv = s the causal count is s^2/2, the convention of the FlashAttention papers and of
    the calibration file's README. A sliding window of w keys: the query at position x (the queries are
    the last q of kv positions) attends to min(x, w) keys, so pairs = integral of min(x, w) over
    [kv - q, kv] (the same continuous convention: q*kv - q^2/2 when kv <= w, q*w when kv - q >= w).
    """
    if not causal:
        return q_len * (kv_len if window is None else min(kv_len, window))
    if window is None or kv_len <= window:
        return q_len * kv_len - q_len * q_len / 2
    start = kv_len - q_len
    if start >= window:
        return q_len * window
    return (window * window - start * start) / 2 + (kv_len - window) * window


def attended_keys(q_len: float, kv_len: float, window: float | None) -> float:
    """Keys a block of q queries (the last q of kv positions) reads: kv, or q + w under a window of w."""
    return kv_len if window is None else min(kv_len, q_len + window)


def attention_flops(batch: int, heads: int, q_len: float, kv_len: float, head_dim: int, causal: bool,
                    window: float | None = None) -> float:
    """Forward FLOPs of attention: F = 2 products (QK^T, PV) * 2 FLOPs * b * h * d * pairs."""
    return 2 * 2 * batch * heads * head_dim * attention_pairs(q_len, kv_len, causal, window)
