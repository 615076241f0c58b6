"""Fit the compute profile and the NVLink bus bandwidth to measurements, and report the fit's errors.

    python -m madmax.hardware.calibration            # print the report
    python -m madmax.hardware.calibration --write    # also rewrite catalog/calibration/h200_profile.yaml

Compute (`fit_profile`): each kernel kind is a roofline (see `madmax.hardware.compute`) whose few
parameters minimize the sum of |log(t_predicted / t_measured)| (a median fit in log time, robust to the
few kernels that cuBLAS runs badly), by Nelder-Mead in log/logit coordinates so that every length stays
positive and every efficiency in (0, 1):

1. GEMMs of the reference dtype (bf16, 91 shapes incl. decode-sized m = 1..512): e_d, k0, n0,
   the launch floor t_launch, the streaming latency t_lat and the memory-roof fraction e_read.
2. Other dtypes (fp8, tf32, fp32: 2-3 large square-ish shapes each): e_d only, with the shape of step 1
   scaled by the dtype's peak over bf16's (k0 and n0 times P_d / P_bf16: a tile's prologue and epilogue
   take the same time while its math runs at the dtype's rate; `GemmFit.shape_scale`), by least squares
   in log time (with two rows the median is not unique). Sharing bf16's k0 and n0 instead left fp8 4096^3
   15% too fast and 8192^3 9% too slow; scaled, both are within 5%.
3. Memory: e_copy = bytes / ((t - t_lat) * H) of the device-to-device copy (median over rows).
4. Decode attention (9 rows, memory-bound): the attention launch floor and e_read of K/V streaming.
5. Flash attention forward and backward (backward = fwd_bwd - fwd): e_max and kv0 of each pass.

Errors are |predicted/measured - 1|: in-sample (the shipped fit on all rows) and held out, refitting
without each GEMM shape (m, k, n) (all its dtypes), each attention sequence length, each decode row.
The memory_read row (a pure 4 GiB read) is never fitted: its in-sample error is already held out.

Results of the shipped fit (`report()` prints them; median / max, rows):

    kind                 in-sample        held out
    gemm (all dtypes)    2.9% / 44%  98   3.0% / 44%
    attention forward    2.4% / 4.8% 10   4.2% / 6.5%
    attention backward   3.3% / 6.4% 10   5.3% / 11%
    decode attention     0.7% / 12%   9   1.2% / 12%
    memory copy / read   0.0% / 2.5%  1+1

Nine GEMMs in ten are within 10.2%. The worst rows are kernels cuBLAS runs worse than their neighbours:
bf16 128x8192x28672 takes 203 us, twice the 113 us of 32x8192x28672 (predicted -44%); 1x4096x4096
and 8x4096x4096 take 24 us, against 14 us for 128x4096x4096 (-23%); 512^3 and 128x4096x4096 sit
below the fitted 18.6 us launch floor (+26%, +32%). Large GEMMs lose 5-10% at long durations (power
and clock limits at 700 W: 4096x12288x12288 reaches 0.59 of peak, 1024x12288x12288 0.77), which a model
monotone in size cannot follow: the 4096^3 row is predicted 7.6% slow.

Collectives (`fit_busbw`): t = 2(n-1) alpha + 2(n-1)/n S / B fitted to the nccl-tests all_reduce_perf
rows of one DGX H100 (alpha = 2.10 us, B = 433.8 GB/s = 0.964 of 450 GB/s; time error median 9.2%,
max 23%), by least squares in log time.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from madmax.config.base import DType
from madmax.config.units import parse_quantity
from madmax.errors import ConfigError
from madmax.hardware.compute import (
    BACKWARD_MATMULS,
    FORWARD_MATMULS,
    ComputeModel,
    attention_bytes,
    attention_compute_s,
    attention_flops,
    flash_head_dim,
    gemm_bytes,
    gemm_efficiency,
    gemm_flops,
    stream_s,
)
from madmax.hardware.profile import ComputeProfile, ReferencePeaks, catalog_path, reference_peaks

KERNELS_FILE = "calibration/h200_kernels.jsonl"
NCCL_FILE = "calibration/nccl_dgx_h100_all_reduce.csv"
PROFILE_FILE = "calibration/h200_profile.yaml"
SIGNIFICANT = 6  # digits kept in the written profile


def load_records(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Kernel measurements, one dict per JSON line (default: the shipped H200 file)."""
    text = Path(path or catalog_path(KERNELS_FILE)).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _logit(p):
    return np.log(p / (1 - p))


def minimize(f: Callable[[np.ndarray], float], x0: Iterable[float], max_restarts: int = 30) -> np.ndarray:
    """Nelder-Mead simplex search (Nelder and Mead 1965) with unit steps, restarted from its best point
    until a restart no longer improves the value (at most `max_restarts` times).

    Coefficients: reflection 1, expansion 2, contraction 1/2, shrink 1/2. A run stops when the
    simplex's values agree to sqrt(machine epsilon) or after 400 iterations per dimension.
    """
    x = np.asarray(list(x0), dtype=float)
    tol = np.sqrt(np.finfo(float).eps)
    best = f(x)
    for _ in range(max_restarts):
        simplex = np.vstack([x, x + np.eye(len(x))])
        values = np.array([f(p) for p in simplex])
        for _ in range(400 * len(x)):
            order = np.argsort(values)
            simplex, values = simplex[order], values[order]
            if values[-1] - values[0] <= tol * (abs(values[0]) + tol):
                break
            centroid = simplex[:-1].mean(axis=0)
            reflected = 2 * centroid - simplex[-1]
            fr = f(reflected)
            if fr < values[0]:
                expanded = 3 * centroid - 2 * simplex[-1]
                fe = f(expanded)
                simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
            elif fr < values[-2]:
                simplex[-1], values[-1] = reflected, fr
            else:
                contracted = (centroid + simplex[-1]) / 2
                fc = f(contracted)
                if fc < values[-1]:
                    simplex[-1], values[-1] = contracted, fc
                else:
                    simplex[1:] = (simplex[0] + simplex[1:]) / 2
                    values[1:] = [f(p) for p in simplex[1:]]
        i = int(np.argmin(values))
        improved = values[i] < best - tol * (abs(best) + tol)
        if values[i] <= best:
            x, best = simplex[i], values[i]
        if not improved:
            break
    return x


def _log_l1(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sum(np.abs(np.log(predicted / measured))))


def _log_l2(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sum(np.log(predicted / measured) ** 2))


def _rows(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r.get("kind") == kind]


def _dtype(text: str) -> DType:
    return DType(text.split("_")[0])  # 'fp8_e4m3' -> fp8


def _columns(rows: list[dict], *names: str) -> list[np.ndarray]:
    return [np.array([r[n] for r in rows], dtype=float) for n in names]


def _gemm_predict(flops, num_bytes, k, n, peak, shape, bw, lat, launch):
    """Vectorized `compute._gemm_s` of GEMMs of `flops` moving `num_bytes` (precomputed once per fit, for
    speed: the fits evaluate this thousands of times); shape = (e_d, k0, n0)."""
    t_compute = flops / (peak * gemm_efficiency(k, n, *shape))
    return np.maximum(launch, np.maximum(t_compute, stream_s(num_bytes, bw, lat)))


def _fit_gemm(rows: list[dict], peaks: ReferencePeaks, hbm_read_fraction: float) -> dict[str, Any]:
    """Steps 1 and 2 of the module docstring: GEMM parameters from `rows`."""
    by_dtype: dict[DType, list[dict]] = {}
    for r in rows:
        by_dtype.setdefault(_dtype(r["dtype"]), []).append(r)
    ref = max(by_dtype, key=lambda d: len(by_dtype[d]))
    m, k, n, t = _columns(by_dtype[ref], "m", "k", "n", "time_s")
    width, peak, hbm = ref.num_bytes, peaks.flops_per_s[ref], peaks.hbm_bytes_per_s
    flops, num_bytes = gemm_flops(m, k, n), gemm_bytes(m, k, n, width)

    def unpack(z):
        return _sigmoid(z[0]), *np.exp(z[1:5]), _sigmoid(z[5])

    def loss(z):
        e, k0, n0, launch, lat, read = unpack(z)
        return _log_l1(_gemm_predict(flops, num_bytes, k, n, peak, (e, k0, n0), hbm * read, lat, launch), t)

    measured = np.median(flops / (peak * t))
    z0 = [_logit(measured), np.log(k.min()), np.log(n.min()), np.log(t.min()), np.log(t.min()),
          _logit(hbm_read_fraction)]
    e, k0, n0, launch, lat, read = unpack(minimize(loss, z0))
    fractions = {ref: e}
    for dtype, dtype_rows in by_dtype.items():
        if dtype == ref:
            continue
        dm, dk, dn, dt = _columns(dtype_rows, "m", "k", "n", "time_s")
        dpeak = peaks.flops_per_s[dtype]

        scale = dpeak / peak  # GemmFit.shape_scale under 'peak' scaling

        dflops, dbytes = gemm_flops(dm, dk, dn), gemm_bytes(dm, dk, dn, dtype.num_bytes)

        def dloss(z, dflops=dflops, dbytes=dbytes, dk=dk, dn=dn, dt=dt, dpeak=dpeak, scale=scale):
            return _log_l2(_gemm_predict(dflops, dbytes, dk, dn, dpeak, (_sigmoid(z[0]), k0 * scale, n0 * scale),
                                         hbm * read, lat, launch), dt)

        start = np.median(dflops / (dpeak * dt))
        fractions[dtype] = _sigmoid(minimize(dloss, [_logit(start)])[0])
    return {"reference_dtype": ref, "peak_fraction": fractions, "k0": k0, "n0": n0, "shape_scaling": "peak",
            "read_fraction": read, "launch_s": launch, "latency_s": lat,
            "min_k": float(min(r["k"] for r in rows)), "min_n": float(min(r["n"] for r in rows))}


def _flash_widths(head_dims: np.ndarray) -> np.ndarray:
    """The padded head widths the flash kernels compute at (`compute.flash_head_dim`), elementwise."""
    return np.array([flash_head_dim(int(d)) for d in head_dims], dtype=float)


def _decode_columns(rows: list[dict]):
    b, kv, h, hkv, d, t = _columns(rows, "batch", "kv_len", "q_heads", "kv_heads", "head_dim", "time_s")
    width = DType.BF16.num_bytes
    return (attention_flops(b, h, 1, kv, _flash_widths(d), False), attention_bytes(b, h, hkv, 1, kv, d, width),
            kv, t)


def _prefill_columns(rows: list[dict], backward: bool):
    b, h, s, d, fwd, both = _columns(rows, "batch", "heads", "seq", "head_dim", "fwd_s", "fwd_bwd_s")
    flops = attention_flops(b, h, s, s, _flash_widths(d), True)
    num_bytes = attention_bytes(b, h, h, s, s, d, DType.BF16.num_bytes)
    if backward:
        return flops * BACKWARD_MATMULS / FORWARD_MATMULS, 2 * num_bytes, s, both - fwd
    return flops, num_bytes, s, fwd


def _attention_predict(flops, num_bytes, kv, rate, kv0, bw, lat, launch):
    return np.maximum(launch, np.maximum(attention_compute_s(flops, kv, rate, kv0), stream_s(num_bytes, bw, lat)))


def _fit_attention(decode: list[dict], prefill: list[dict], peaks: ReferencePeaks, lat: float,
                   read_start: float) -> dict[str, Any]:
    """Steps 4 and 5 of the module docstring (bf16 rows). The decode rows fix the launch floor and the
    read fraction, the prefill rows the compute efficiency; each depends weakly on the other, so the
    two fits alternate twice."""
    peak, hbm = peaks.flops_per_s[DType.BF16], peaks.hbm_bytes_per_s
    df, dnb, dkv, dt = _decode_columns(decode)
    launch, read = float(dt.min()), read_start
    passes: dict[str, dict[str, float]] = {}
    for _ in range(2):
        for name, backward in (("forward", False), ("backward", True)):
            f, nb, kv, t = _prefill_columns(prefill, backward)

            def ploss(z, f=f, nb=nb, kv=kv, t=t, bw=hbm * read, launch=launch):
                return _log_l1(_attention_predict(f, nb, kv, peak * _sigmoid(z[0]), np.exp(z[1]), bw, lat, launch), t)

            z = minimize(ploss, [_logit(np.median(f / (peak * t))), np.log(kv.min())])
            passes[name] = {"peak_fraction": float(_sigmoid(z[0])), "kv0": float(np.exp(z[1]))}

        def dloss(z, rate=peak * passes["forward"]["peak_fraction"], kv0=passes["forward"]["kv0"]):
            return _log_l1(_attention_predict(df, dnb, dkv, rate, kv0, hbm * _sigmoid(z[1]), lat, np.exp(z[0])), dt)

        z = minimize(dloss, [np.log(launch), _logit(read)])
        launch, read = float(np.exp(z[0])), float(_sigmoid(z[1]))
    return {"launch_s": launch, "read_fraction": read, **passes}


REQUIRED_KINDS = ("gemm", "hbm_copy", "attention", "decode_attention")


def _read_fraction(records: list[dict], peaks: ReferencePeaks) -> float:
    """Median measured HBM read bandwidth over the datasheet's (1/2 without read rows)."""
    reads = _rows(records, "hbm_read")
    if not reads:
        return 1 / 2
    return float(np.median([r["bytes_moved"] / (r["time_s"] * peaks.hbm_bytes_per_s) for r in reads]))


def _fit_parameters(records: list[dict], peaks: ReferencePeaks,
                    gemm: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile's parameters fitted to `records`. `gemm`: the result of `_fit_gemm` on these records'
    GEMM rows when the caller already has it (it depends on no other kind)."""
    missing = [kind for kind in REQUIRED_KINDS if not _rows(records, kind)]
    if missing:
        raise ConfigError(f"calibration records have no {', '.join(missing)} rows; "
                          f"needed: {', '.join(REQUIRED_KINDS)}")
    hbm = peaks.hbm_bytes_per_s
    read_fraction = _read_fraction(records, peaks)
    g = dict(gemm or _fit_gemm(_rows(records, "gemm"), peaks, read_fraction))
    lat = g.pop("latency_s")
    copy = float(np.median([r["bytes_moved"] / ((r["time_s"] - lat) * hbm) for r in _rows(records, "hbm_copy")]))
    attention = _fit_attention(_rows(records, "decode_attention"), _rows(records, "attention"), peaks, lat,
                               read_fraction)
    return {"launch_s": g.pop("launch_s"), "memory": {"latency_s": lat, "copy_fraction": copy},
            "gemm": g, "attention": attention}


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, float | np.floating):
        return float(f"{float(value):.{SIGNIFICANT}g}")
    return value


def _env(records: list[dict]) -> dict[str, Any]:
    return next((r for r in records if r.get("kind") == "env"), {})


def fit_profile(records: list[dict], reference: ReferencePeaks | None = None,
                held_out: bool = True) -> dict[str, Any]:
    """A compute profile (the dict form of `ComputeProfile`) fitted to kernel `records`.

    `reference`: datasheet peaks of the measured device (default: looked up in efficiency.yaml by the
    `env` line's device name). With `held_out`, also the leave-shapes-out errors (about 10 s).
    The records need the kinds env, gemm, hbm_copy, attention and decode_attention (see SOURCE.md).
    """
    env = _env(records)
    peaks = reference or reference_peaks(env.get("name", ""))
    params = _rounded(_fit_parameters(records, peaks))
    profile = {
        "device": env.get("name", "unknown"),
        "software": f"torch {env.get('torch', '?')}, python {env.get('python', '?')}, "
                    f"compute capability {env.get('cc', '?')}, {env.get('sms', '?')} SMs, "
                    f"nvidia-smi clocks/power/driver: {env.get('smi', '?')}",
        "source": f"{KERNELS_FILE} (see calibration/SOURCE.md), fitted by "
                  "madmax.hardware.calibration.fit_profile",
        "reference_peaks": {"flops_per_s": {str(d): v for d, v in peaks.flops_per_s.items()},
                            "hbm_bytes_per_s": peaks.hbm_bytes_per_s, "source": peaks.source},
        **params,
    }
    errors = {"in_sample": fit_errors(ComputeProfile.model_validate(profile), records)}
    if held_out:
        errors["held_out"] = held_out_errors(records, peaks)
    profile["fit_errors"] = _rounded(errors)
    return profile


def _relative(predicted: Iterable[float], measured: Iterable[float]) -> np.ndarray:
    return np.abs(np.asarray(list(predicted)) / np.asarray(list(measured)) - 1)


def _summary(errors: np.ndarray) -> dict[str, Any]:
    return {"count": len(errors), "median": float(np.median(errors)), "max": float(errors.max())}


def predictions(profile: ComputeProfile, records: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """(predicted, measured) seconds per kernel kind, through `ComputeModel` itself."""
    from madmax.config.hardware import GPU

    p = profile.reference_peaks
    gpu = GPU(name="calibration-device", flops_per_s=p.flops_per_s, hbm_bytes=1, hbm_bytes_per_s=p.hbm_bytes_per_s,
              tdp_w=1)
    cm = ComputeModel(gpu, profile)
    out: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        kind = r.get("kind")
        if kind == "gemm":
            out.setdefault("gemm", []).append((cm.gemm_s(r["m"], r["k"], r["n"], _dtype(r["dtype"])), r["time_s"]))
        elif kind == "attention":
            shape = (r["batch"], r["heads"], r["heads"], r["seq"], r["seq"], r["head_dim"], True, DType.BF16)
            fwd, bwd = cm.attention_s(*shape), cm.attention_s(*shape, backward=True)
            out.setdefault("attention_forward", []).append((fwd, r["fwd_s"]))
            out.setdefault("attention_backward", []).append((bwd, r["fwd_bwd_s"] - r["fwd_s"]))
        elif kind == "decode_attention":
            t = cm.attention_s(r["batch"], r["q_heads"], r["kv_heads"], 1, r["kv_len"], r["head_dim"], False,
                               DType.BF16)
            out.setdefault("decode_attention", []).append((t, r["time_s"]))
        elif kind in ("hbm_copy", "hbm_read"):
            out.setdefault(f"memory_{kind.removeprefix('hbm_')}", []).append(
                (cm.memory_s(r["bytes_moved"]), r["time_s"]))
    return out


def fit_errors(profile: ComputeProfile, records: list[dict]) -> dict[str, dict[str, Any]]:
    """In-sample |predicted/measured - 1| of `profile` on `records`, by kernel kind (memory_read is a
    check: the copy fit predicting a pure read)."""
    return {kind: _summary(_relative(*zip(*pairs, strict=True)))
            for kind, pairs in predictions(profile, records).items()}


def held_out_errors(records: list[dict], peaks: ReferencePeaks) -> dict[str, dict[str, Any]]:
    """Errors on rows left out of the fit: each GEMM shape (m, k, n), each attention sequence length,
    each decode-attention row. (The in-sample `memory_read` is already held out: no read row is fitted.)"""
    def refit_predict(keep: Callable[[dict], bool], kind: str, gemm: dict | None) -> list[tuple[float, float]]:
        fitted = _fit_parameters([r for r in records if keep(r)], peaks, gemm)
        profile = ComputeProfile.model_validate({"device": "held-out", "software": "", "source": "",
                                                 "reference_peaks": peaks.model_dump(), **fitted})
        left = [r for r in records if not keep(r) or r.get("kind") == "env"]
        return predictions(profile, left).get(kind, [])

    groups = {
        "gemm": ("gemm", lambda r: (r["m"], r["k"], r["n"])),
        "attention_forward": ("attention", lambda r: r["seq"]),
        "attention_backward": ("attention", lambda r: r["seq"]),
        "decode_attention": ("decode_attention", lambda r: (r["batch"], r["kv_len"])),
    }
    # Leaving out attention or decode rows does not change the GEMM fit: it is fitted once for them.
    all_gemm = _fit_gemm(_rows(records, "gemm"), peaks, _read_fraction(records, peaks))
    out = {}
    for kind, (record_kind, key) in groups.items():
        pairs = []
        for value in sorted({key(r) for r in _rows(records, record_kind)}):
            def keep(r, value=value, record_kind=record_kind, key=key):
                return r.get("kind") != record_kind or key(r) != value
            pairs += refit_predict(keep, kind, None if record_kind == "gemm" else all_gemm)
        out[kind] = _summary(_relative(*zip(*pairs, strict=True)))
    return out


def load_nccl_rows(path: str | Path | None = None) -> list[dict[str, Any]]:
    """nccl-tests rows (collective, group size, size_bytes, time_us, busbw; see calibration/SOURCE.md)."""
    with open(path or catalog_path(NCCL_FILE), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def fit_busbw(rows: list[dict[str, Any]], step_latency_s: float | None = None) -> dict[str, Any]:
    """alpha and B of t = 2(n-1) alpha + 2(n-1)/n * S / B fitted to all_reduce rows.

    Least squares in log time: the rows have no outliers, and the misfit of alpha-beta (NCCL's
    bandwidth ramps up over 1 MB - 1 GB more slowly than S/B) is spread over the sizes rather than
    left on the smallest. `step_latency_s`: alpha held at this value (the system's, which the cost model
    uses) and B alone fitted. Returns alpha (s), B (bytes/s), B as a fraction of the link's peak per GPU
    per direction, and the fit's relative errors.
    """
    rows = [r for r in rows if r["collective"] == "all_reduce"]
    n = np.array([int(r["num_gpus"]) for r in rows], dtype=float)
    size = np.array([float(r["size_bytes"]) for r in rows])
    t = np.array([parse_quantity(f"{r['time_us']} us", "s") for r in rows])
    peak = np.array([parse_quantity(f"{r['scale_up_peak_GBps']} GB/s", "bytes/s") for r in rows])
    busbw = np.array([parse_quantity(f"{r['busbw_GBps']} GB/s", "bytes/s") for r in rows])

    def predict(z):
        alpha = np.exp(z[0]) if step_latency_s is None else step_latency_s
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / np.exp(z[-1])

    start = [np.log(busbw.max())]
    if step_latency_s is None:
        start = [np.log(t.min() / (2 * n.max())), *start]
    z = minimize(lambda z: _log_l2(predict(z), t), start)
    errors = _relative(predict(z), t)
    alpha = float(np.exp(z[0])) if step_latency_s is None else step_latency_s
    return {"step_latency_s": alpha, "busbw_bytes_per_s": float(np.exp(z[-1])),
            "peak_fraction": float(np.exp(z[-1]) / np.median(peak)), **_summary(errors)}


def report(records: list[dict] | None = None, profile: ComputeProfile | None = None) -> str:
    """The fit errors of the shipped (or given) profile and of the NVLink all-reduce fit, as text."""
    from madmax.hardware.profile import load_profile

    records = records or load_records()
    profile = profile or load_profile()
    lines = [f"compute profile: {profile.device} ({profile.software})",
             "|predicted/measured - 1| by kernel kind: in-sample / held-out (median, max, rows)"]
    in_sample = fit_errors(profile, records)
    held = profile.fit_errors.get("held_out", {})
    for kind, e in in_sample.items():
        h = held.get(kind)
        tail = f" / {h.median:.3f} {h.max:.3f} ({h.count})" if h else ""
        lines.append(f"  {kind:20s} {e['median']:.3f} {e['max']:.3f} ({e['count']}){tail}")
    nccl = fit_busbw(load_nccl_rows())
    lines.append(f"NVLink all-reduce (DGX H100, n=8): alpha {nccl['step_latency_s']:.3g} s, busbw "
                 f"{nccl['busbw_bytes_per_s']:.4g} B/s = {nccl['peak_fraction']:.4f} of peak; "
                 f"error median {nccl['median']:.3f} max {nccl['max']:.3f} ({nccl['count']} sizes)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--write" in argv:
        profile = fit_profile(load_records())
        header = ("# Compute profile of madmax.hardware: GENERATED by `python -m madmax.hardware.calibration "
                  "--write`;\n# do not edit by hand. Efficiencies are fractions of reference_peaks.\n")
        text = yaml.safe_dump(json.loads(json.dumps(profile, default=str)), sort_keys=False, width=110)
        catalog_path(PROFILE_FILE).write_text(header + text, encoding="utf-8")
    print(report())


if __name__ == "__main__":
    main()
