"""Compute cost model: the time of one kernel as a roofline with measured, shape-dependent efficiency.

    t = max(t_launch, F / (P * e(shape)), t_lat + bytes / (H * e_bw))

F: FLOPs of the kernel; P: the GPU's dense peak FLOP/s of the dtype; e(shape): the fraction of peak a
kernel of that shape reaches; bytes: HBM traffic (read + write); H: the GPU's peak HBM bandwidth;
e_bw: the fraction of it a streaming kernel reaches; t_lat: the fixed time of a streaming kernel
(ramp-up and tail); t_launch: the shortest time of one kernel as the host issues them back to back.
Units: FLOP, bytes, seconds, FLOP/s, bytes/s.

Every efficiency comes from a compute profile fitted to kernel timings (default: one NVIDIA H200, torch
2.11 + CUDA 13; `catalog/calibration/h200_profile.yaml`, fitted by `madmax.hardware.calibration`, whose
docstring gives the fit's errors). In that profile the large-GEMM bf16 efficiency is 0.70 of peak, a
copy reaches 0.90 of peak HBM bandwidth, and the launch floor is 18.6 us per GEMM or memory-bound kernel
and 22.4 us per attention call: tiny kernels issued back to back by eager PyTorch (the measurement);
a profile with `launch_s: 0` models CUDA graphs.

Assumptions, listed in `ComputeModel.assumptions` where they apply: on another GPU the same efficiencies
hold as fractions of that GPU's own peak FLOP/s and HBM bandwidth (same software, similar tensor-core
architecture), rescaled by its measured large-GEMM ceiling per dtype against the profile device's
(efficiency.yaml `gemm_ceiling`, `_ceilings`); a dtype without measurements takes another's (efficiency.yaml
`dtype_fallbacks`);
attention, measured in bf16, has the same fractions of peak in every dtype.

Flash attention runs at the profile's curve, one per pass, unless the software stack names the kernel it runs
(`attention_kernel`: FlashAttention-2, FlashAttention-3, cuDNN, ...): its curves on the GPU's architecture, one
per pass and mask, fitted to published kernel timings (`madmax.hardware.attention_kernels`), replace the
profile's; a kernel without timings on that architecture keeps the profile's curve and says so
(`attention_notes`). Unfused attention (`scores_saved`) keeps the profile's curve.

Flash attention computes a head of a width it has no kernel for in the kernel of the next larger width
(`flash_head_dim`: 80 -> 96, zero-padded in shared memory): its FLOPs are counted at the padded width,
its HBM bytes at the real one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

import yaml

from madmax.config.base import DType
from madmax.config.hardware import GPU
from madmax.config.units import parse_quantity
from madmax.errors import ConfigError
from madmax.hardware.attention_kernels import KernelCurves, kernel_curves
from madmax.hardware.profile import (
    ComputeProfile,
    catalog_path,
    catalog_wgrad_fractions,
    device_architecture,
    dtype_fallbacks,
    efficiency_table,
    gemm_ceiling_assumed,
    gemm_ceiling_scale,
    load_profile,
)
from madmax.workload.attention import attended_keys, attention_flops

FLASH_HEAD_DIMS_FILE = "calibration/flash_attention.yaml"

# Flash-attention backward runs 5 matrix products per tile (S = QK^T recomputed, dV, dP, dQ, dK) against
# 2 in the forward pass (Dao 2023, FlashAttention-2, arXiv 2307.08691, section 3.1.2).
BACKWARD_MATMULS, FORWARD_MATMULS = 5, 2


def gemm_flops(m: float, k: float, n: float) -> float:
    """FLOPs of (m x k) @ (k x n): F = 2*m*k*n (one multiply and one add per term)."""
    return 2 * m * k * n


def gemm_bytes(m: float, k: float, n: float, width: float, weight_width: float | None = None) -> float:
    """HBM bytes of a GEMM reading A (m x k) and B (k x n) once and writing C (m x n):
    width*(mk + mn) + w_B*kn, where w_B (bytes per element of the weight B) is `width` unless the weights
    are stored narrower (weight-only quantization: int4 weights read at 0.5 bytes into a bf16 GEMM)."""
    weight_width = width if weight_width is None else weight_width
    return width * (m * k + m * n) + weight_width * k * n


def gemm_efficiency(k: float, n: float, peak_fraction: float, k0: float, n0: float) -> float:
    """Fraction of peak FLOP/s of a compute-bound GEMM: e = e_d * (1 - exp(-k/k0)) * (1 - exp(-n/n0)).

    e_d: the large-GEMM fraction of the dtype. The k factor: a short inner loop cannot hide the
    pipeline's prologue and epilogue; the n factor: few output columns leave SMs idle. The time
    2mkn / (P e) then grows with k as k / (1 - exp(-k/k0)), a smooth max(k, k0): a GEMM never gets
    faster by growing, and its efficiency rises smoothly and monotonically with k and n to e_d <= 1.
    The rows m do not enter: in the H200 data small-m GEMMs are explained by the memory roof (a fitted
    m factor went to zero). Source: k0, n0, e_d from the compute profile (fit to measured GEMM times).
    (Written with `math.e **` so that it also takes NumPy arrays, for the fit.)
    """
    return peak_fraction * (1 - math.e ** (-k / k0)) * (1 - math.e ** (-n / n0))


def stream_s(num_bytes: float, bytes_per_s: float, latency_s: float) -> float:
    """Memory-bound time: t = t_lat + bytes / (H * e_bw); `bytes_per_s` = H * e_bw."""
    return latency_s + num_bytes / bytes_per_s


def attention_bytes(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: float, head_dim: int,
                    width: float, kv_width: float | None = None) -> float:
    """Forward HBM bytes of fused attention: read Q and write O (width each), read K and V once (kv_width
    each, the KV cache's format; default width): 2*b*d*(width*h*q + kv_width*h_kv*kv)."""
    kv_width = width if kv_width is None else kv_width
    return 2 * batch * head_dim * (width * heads * q_len + kv_width * kv_heads * kv_len)


@cache
def flash_head_dims() -> tuple[int, ...]:
    """Head dimensions the flash-attention kernels are compiled for, ascending
    (`catalog/calibration/flash_attention.yaml`, with its source)."""
    table = yaml.safe_load(catalog_path(FLASH_HEAD_DIMS_FILE).read_text(encoding="utf-8"))
    return tuple(sorted(int(d) for d in table["head_dims"]))


def flash_head_dim(head_dim: int) -> int:
    """The head width flash attention computes at: the smallest compiled head dimension >= `head_dim`
    (a head of 80 runs in the 96-wide kernel, zero-padded), or `head_dim` itself above the largest (no
    kernel exists; costed unpadded). Only the FLOPs grow: HBM holds and streams the real width."""
    return next((d for d in flash_head_dims() if d >= head_dim), head_dim)


def attention_compute_s(flops: float, kv_len: float, rate: float, kv0: float) -> float:
    """Compute-bound attention time: t = F / (P * e_max * kv/(kv+kv0)); `rate` = P * e_max."""
    return flops * (kv_len + kv0) / (kv_len * rate)


def _rates(curves: KernelCurves, causal: bool, backward: bool, peak: float) -> tuple[float, float]:
    """(P e_max, kv0) of a kernel's pass and mask at dense peak `peak`."""
    c = curves.curve(causal, backward)
    return peak * c.peak_fraction, c.kv0


# Registry of coefficient tuples, so the per-shape caches below are keyed by small ints and shapes.
_COEFFS: list[tuple[float, ...]] = []
_COEFF_IDS: dict[tuple[float, ...], int] = {}


def _register(coeffs: tuple[float, ...]) -> int:
    if coeffs not in _COEFF_IDS:
        _COEFF_IDS[coeffs] = len(_COEFFS)
        _COEFFS.append(coeffs)
    return _COEFF_IDS[coeffs]


def _check(name: str, value: float) -> None:
    if value < 0:
        raise ConfigError(f"{name}={value} must be >= 0")


@lru_cache(maxsize=1 << 20)
def _gemm_s(cid: int, m: int, k: int, n: int, weight_width: float | None) -> float:
    for name, value in (("m", m), ("k", k), ("n", n)):
        _check(name, value)
    if not (m and k and n):
        return 0.0
    peak, e_d, k0, n0, width, bw, lat, launch, min_k, min_n = _COEFFS[cid]
    # Below the measured shapes the efficiency is held, not extrapolated: a GEMM with k = 13 or n = 1
    # (the first and last layers of a recommendation MLP) is bound by its bytes, which the roof counts.
    t_compute = gemm_flops(m, k, n) / (peak * gemm_efficiency(max(k, min_k), max(n, min_n), e_d, k0, n0))
    t_memory = stream_s(gemm_bytes(m, k, n, width, weight_width), bw, lat)
    return max(launch, t_compute, t_memory)


@lru_cache(maxsize=1 << 18)
def _grouped_gemm_s(cid: int, groups: int, m: int, k: int, n: int, weight_width: float | None, row_tile: int,
                    group_s: float, multi_stream: bool) -> float:
    for name, value in (("groups", groups), ("m", m), ("k", k), ("n", n)):
        _check(name, value)
    if not (groups and m and k and n):
        return 0.0
    peak, e_d, k0, n0, width, bw, lat, launch, min_k, min_n = _COEFFS[cid]
    padded = -(-m // row_tile) * row_tile
    if multi_stream:  # one GEMM per group over several streams: no column (n) penalty, t_g per group
        efficiency, per_group = e_d * (1 - math.e ** (-max(k, min_k) / k0)), group_s
    else:
        efficiency, per_group = gemm_efficiency(max(k, min_k), max(n, min_n), e_d, k0, n0), 0.0
    t_compute = groups * (gemm_flops(padded, k, n) / (peak * efficiency) + per_group)
    t_memory = stream_s(groups * gemm_bytes(m, k, n, width, weight_width), bw, lat)
    return max(launch, t_compute, t_memory)


def _curve(curves: list[float], causal: bool, backward: bool) -> tuple[float, float]:
    """(P e_max, kv0) of one pass and mask from an attention coefficient tuple, laid out as
    forward causal, forward full, backward causal, backward full (rate, kv0 each)."""
    i = 4 * backward + 2 * (not causal)
    return curves[i], curves[i + 1]


@lru_cache(maxsize=1 << 18)
def _attention_s(cid: int, batch: int, heads: int, kv_heads: int, q_len: int, kv_len: float, head_dim: int,
                 causal: bool, backward: bool, window: int | None = None, kv_width: float | None = None,
                 scores_saved: bool = False) -> float:
    shape = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q_len, "kv_len": kv_len,
             "head_dim": head_dim}
    for name, value in shape.items():
        _check(name, value)
    if causal and q_len > kv_len:
        raise ConfigError(f"causal attention needs q_len <= kv_len, got q_len={q_len}, kv_len={kv_len}")
    if not all(shape.values()):
        return 0.0
    *curves, width, bw, lat, launch = _COEFFS[cid]
    rate, kv0 = _curve(curves, causal, backward)
    keys = attended_keys(q_len, kv_len, window)
    flops = attention_flops(batch, heads, q_len, kv_len, flash_head_dim(head_dim), causal, window)
    num_bytes = attention_bytes(batch, heads, kv_heads, q_len, keys, head_dim, width, kv_width)
    if backward:  # 5/2 the products (4/2 with the scores saved); reads Q, K, V, O, dO, writes dQ, dK, dV: 2x bytes
        products = BACKWARD_MATMULS - (1 if scores_saved else 0)
        flops, num_bytes = flops * products / FORWARD_MATMULS, 2 * num_bytes
    return max(launch, attention_compute_s(flops, keys, rate, kv0), stream_s(num_bytes, bw, lat))


@lru_cache(maxsize=1 << 16)
def _attention_varlen_s(cid: int, segments: tuple[tuple[int, float], ...], heads: int, kv_heads: int,
                        head_dim: int, causal: bool, window: int | None, kv_width: float | None) -> float:
    for q_len, kv_len in segments:
        _check("q_len", q_len)
        if causal and q_len > kv_len:
            raise ConfigError(f"causal attention needs q_len <= kv_len, got q_len={q_len}, kv_len={kv_len}")
    if not segments or not (heads and kv_heads and head_dim):
        return 0.0
    *curves, width, bw, lat, launch = _COEFFS[cid]
    rate_f, kv0_f = _curve(curves, causal, backward=False)
    t_compute = num_bytes = 0.0
    for q_len, kv_len in segments:
        keys = attended_keys(q_len, kv_len, window)
        flops = attention_flops(1, heads, q_len, kv_len, flash_head_dim(head_dim), causal, window)
        t_compute += attention_compute_s(flops, keys, rate_f, kv0_f)
        num_bytes += attention_bytes(1, heads, kv_heads, q_len, keys, head_dim, width, kv_width)
    return max(launch, t_compute, stream_s(num_bytes, bw, lat))


@lru_cache(maxsize=1 << 16)
def _memory_s(cid: int, num_bytes: float) -> float:
    _check("num_bytes", num_bytes)
    if not num_bytes:
        return 0.0
    bw, lat, launch = _COEFFS[cid]
    return max(launch, stream_s(num_bytes, bw, lat))


@dataclass(frozen=True, eq=False)
class ComputeModel:
    """Kernel times on one GPU from a compute profile (default: the shipped H200 calibration).

    Efficiencies are fractions of the profile's reference peaks, applied to `gpu`'s own peaks. Build it
    with `compute_model(gpu)` (cached). Instances compare and hash by identity.
    """

    gpu: GPU
    profile: ComputeProfile = field(default_factory=load_profile)
    # The shortest time of one kernel in the runtime that issues them: None keeps the profile's floors
    # (measured eagerly, one host launch per kernel); a CUDA-graph replay's floor is far lower, and bounds
    # a streaming kernel's fixed time too (measured eagerly as well).
    floor_s: float | None = None
    # The fused-attention kernel the stack runs (catalog/calibration/attention_kernels.yaml): its curves on the
    # GPU's architecture replace the profile's for flash attention; None (or no curves there) keeps the profile's.
    attention_kernel: str | None = None
    assumptions: tuple[str, ...] = field(init=False, default=())
    # What the flash-attention curves are, for a result's assumptions (empty when no kernel is named).
    attention_notes: tuple[str, ...] = field(init=False, default=())
    _gemm: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _attention: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _flash: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _memory: int = field(init=False, repr=False, default=0)
    _wgrad: dict[str, float] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        p, gpu = self.profile, self.gpu
        hbm = gpu.hbm_bytes_per_s
        fallbacks = dtype_fallbacks()
        notes = []
        ref = p.reference_peaks
        if gpu.flops_per_s != ref.flops_per_s or hbm != ref.hbm_bytes_per_s:
            notes.append(f"kernel efficiencies measured on {p.device} ({p.software}) applied to gpu "
                         f"{gpu.name} as fractions of its own peak FLOP/s and HBM bandwidth")
        fitted_of = {d: d if d in p.gemm.peak_fraction else fallbacks.get(d) for d in gpu.flops_per_s}
        fitted_of = {d: f for d, f in fitted_of.items() if f in p.gemm.peak_fraction}
        gemm_ceiling, attention_ceiling, ceiling_notes = _ceilings(gpu, p.device, fitted_of)
        gemm, attention, flash = {}, {}, {}
        curves = self._kernel_curves()
        launch = p.launch_s if self.floor_s is None else self.floor_s
        attention_launch = p.attention.launch_s if self.floor_s is None else self.floor_s
        # A streaming kernel's fixed time was measured eagerly too: in a graph replay the floor bounds it.
        latency = p.memory.latency_s if self.floor_s is None else min(p.memory.latency_s, self.floor_s)
        for dtype, fitted in fitted_of.items():
            datasheet_peak = gpu.flops_per_s[dtype]
            if fitted != dtype:
                notes.append(f"{dtype} GEMM efficiency taken from {fitted} (no {dtype} measurements)")
            width = dtype.num_bytes
            g = p.gemm
            scale = g.shape_scale(fitted, ref)
            gemm[str(dtype)] = _register((
                datasheet_peak * gemm_ceiling[dtype], g.peak_fraction[fitted], g.k0 * scale, g.n0 * scale, width,
                hbm * g.read_fraction, latency, launch, g.min_k, g.min_n))
            # Attention was measured in bf16 only: its fractions of peak are used for every dtype. The profile has
            # one curve per pass, for both masks, carried to this GPU by its bf16 GEMM ceiling; a kernel's curves are
            # fractions of the datasheet peak of its architecture, where they were measured (no ceiling to carry
            # them across).
            a, peak = p.attention, datasheet_peak * attention_ceiling
            roofs = (width, hbm * a.read_fraction, latency, attention_launch)
            fwd = (peak * a.forward.peak_fraction, a.forward.kv0)
            bwd = (peak * a.backward.peak_fraction, a.backward.kv0)
            attention[str(dtype)] = _register((*fwd, *fwd, *bwd, *bwd, *roofs))
            flash[str(dtype)] = attention[str(dtype)] if curves is None else _register((
                *(value for backward in (False, True) for causal in (True, False)
                  for value in _rates(curves, causal, backward, datasheet_peak)), *roofs))
        notes += ceiling_notes
        notes.append("attention efficiency measured in bf16 (flash attention) is used for every dtype")
        memory = _register((hbm * p.memory.copy_fraction, latency, launch))
        object.__setattr__(self, "_gemm", gemm)
        object.__setattr__(self, "_attention", attention)
        object.__setattr__(self, "_flash", flash)
        object.__setattr__(self, "_memory", memory)
        wgrad = catalog_wgrad_fractions() if p.wgrad_fraction is None else p.wgrad_fraction
        object.__setattr__(self, "_wgrad", {str(d): f for d, f in wgrad.items()})
        object.__setattr__(self, "assumptions", tuple(notes))

    def _kernel_curves(self) -> KernelCurves | None:
        """The named kernel's curves on this GPU's architecture, setting `attention_notes` to say which curves
        flash attention runs at (or that the profile's stand in, where the kernel has none on it)."""
        name, arch = self.attention_kernel, self.gpu.architecture
        if name is None:
            measured_on = device_architecture(self.profile.device)
            if arch and measured_on and arch != measured_on:
                object.__setattr__(self, "attention_notes", (
                    f"flash attention costed with the compute profile's curve, measured on {measured_on} "
                    f"({self.profile.device}, {self.profile.software.split(',')[0]}), as fractions of this {arch} "
                    "GPU's peak: the stack names no attention kernel with timings on it",))
            return None
        curves = kernel_curves(name, arch)
        if curves is None:
            where = f"the {arch} architecture" if arch else f"gpu {self.gpu.name}, which names no architecture,"
            note = (f"attention kernel {name} has no published timings on {where}: flash attention costed with the "
                    f"compute profile's curve ({self.profile.device}, {self.profile.software.split(',')[0]}) as "
                    "fractions of this GPU's peak")
        else:
            note = (f"flash attention costed as kernel {name} on {arch} ({curves.software}; curves fitted to "
                    f"{curves.device}, head_dim {curves.head_dim}; catalog "
                    "calibration/attention_kernels.yaml)")
        object.__setattr__(self, "attention_notes", (note,))
        return curves

    def _no_dtype(self, dtype: DType | str) -> ConfigError:
        allowed = ", ".join(str(d) for d in self.gpu.flops_per_s if str(d) in self._gemm)
        if dtype not in self.gpu.flops_per_s:
            return ConfigError(f"gpu {self.gpu.name} has no {dtype} peak; allowed dtypes: {allowed}")
        return ConfigError(f"profile of {self.profile.device} has no {dtype} efficiency and no fallback; "
                           f"allowed dtypes: {allowed}")

    def gemm_s(self, m: int, k: int, n: int, dtype: DType, weight_width: float | None = None) -> float:
        """Seconds of (m x k) @ (k x n) in `dtype`: max(t_launch, 2mkn / (P e(k,n)),
        t_lat + bytes / (H e_read)), bytes from `gemm_bytes` (weights at `weight_width` bytes per
        element when stored narrower than `dtype`). See `gemm_efficiency` and `stream_s`."""
        cid = self._gemm.get(dtype)
        if cid is None:
            raise self._no_dtype(dtype)
        return _gemm_s(cid, m, k, n, weight_width)

    def grouped_gemm_s(self, groups: int, m: int, k: int, n: int, dtype: DType,
                       weight_width: float | None = None, multi_stream: bool = False) -> float:
        """Seconds of a grouped GEMM (routed experts): g = `groups` GEMMs (m x k) @ (k x n), each with its own
        weights, max(t_launch, t_compute, t_lat + g bytes / (H e_read)). Each group's rows are padded to the
        tensor-core tile's row count (m' = m rounded up to `row_tile`), which is what makes few tokens per
        expert slow; every group reads its own weights, which is what bounds a decode step's experts.

        One grouped kernel (serving engines' fused MoE): t_compute = g 2 m' k n / (P e(k, n)).
        `multi_stream`, one GEMM launch per group over several streams (Transformer Engine's GroupedLinear on
        Hopper): t_compute = g (2 m' k n / (P e_k) + t_g), e_k = e_d (1 - exp(-k/k0)) the k factor alone (the
        measured kernel shows no column penalty) and t_g (`group_s`) each GEMM's own launch and last partial
        wave, fitted to Transformer Engine's grouped GEMM on H100 (efficiency.yaml `grouped_gemm`). Either way
        the time never falls when the same rows are split over more groups."""
        cid = self._gemm.get(dtype)
        if cid is None:
            raise self._no_dtype(dtype)
        row_tile, group_s = grouped_gemm_terms()
        return _grouped_gemm_s(cid, groups, m, k, n, weight_width, row_tile, group_s, multi_stream)

    def attention_s(self, batch: int, heads: int, kv_heads: int, q_len: int, kv_len: float, head_dim: int,
                    causal: bool, dtype: DType, backward: bool = False, window: int | None = None,
                    kv_width: float | None = None, scores_saved: bool = False) -> float:
        """Seconds of fused (flash) attention, forward or, with `backward`, the backward pass alone.

        t = max(t_launch, F / (P e_max kv/(kv+kv0)), t_lat + bytes / (H e_read)), F from
        `attention_flops` at the kernel's padded head width `flash_head_dim(head_dim)` (x 5/2 backward),
        bytes from `attention_bytes` at the real width (x 2 backward); e_max and kv0 those of the stack's
        kernel for this pass and mask (`attention_kernel`), else the profile's. `heads` are
        query heads, `kv_heads` key/value heads (grouped-query attention); lengths in tokens (kv_len may
        be a mean over a batch of sequences: decode reads the sum of their caches). `window`: a sliding
        window of keys (`attention_pairs`; kv is then the keys read, `attended_keys`); `kv_width`: bytes
        per element of the K/V cache when it differs from `dtype` (an fp8 KV cache); `scores_saved`: the
        backward reads the probabilities the forward kept (an unfused attention) instead of recomputing the
        scores, 4/2 the forward's products instead of 5/2.
        """
        cid = (self._attention if scores_saved else self._flash).get(dtype)
        if cid is None:
            raise self._no_dtype(dtype)
        return _attention_s(cid, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, window,
                            kv_width, scores_saved)

    def attention_varlen_s(self, segments: tuple[tuple[int, float], ...], heads: int, kv_heads: int,
                           head_dim: int, causal: bool, dtype: DType, window: int | None = None,
                           kv_width: float | None = None) -> float:
        """Seconds of one variable-length flash-attention forward over sequences of (queries, keys):
        t = max(t_launch, sum_i F_i / (P e_max kv_i/(kv_i+kv0)), t_lat + sum_i bytes_i / (H e_read)),
        the terms of `attention_s` summed over the sequences of one launch (a serving step's prefill
        chunks, each attending to its cached keys and its own)."""
        cid = self._flash.get(dtype)
        if cid is None:
            raise self._no_dtype(dtype)
        return _attention_varlen_s(cid, segments, heads, kv_heads, head_dim, causal, window, kv_width)

    def wgrad_fraction(self, dtype: DType) -> float:
        """Rate of a weight-gradient GEMM in `dtype` over that of a GEMM of the same shape (profile
        `wgrad_fraction`, else catalog calibration/fp8_wgrad.yaml; 1 for a dtype not listed): an fp8 one
        reads transposed fp8 operands and accumulates into fp32 main_grad, which the fprop-layout kernels of
        the calibration (bf16 output) do not."""
        return self._wgrad.get(str(dtype), 1.0)

    @property
    def launch_s(self) -> float:
        """Shortest time of one kernel: the runtime's floor, else the profile's (issued back to back from
        the host)."""
        return self.profile.launch_s if self.floor_s is None else self.floor_s

    def memory_s(self, num_bytes: float) -> float:
        """Seconds of a memory-bound kernel moving `num_bytes` (read + write): max(t_launch,
        t_lat + bytes / (H e_copy)), e_copy from a measured device-to-device copy."""
        return _memory_s(self._memory, num_bytes)


def _ceilings(gpu: GPU, device: str, fitted_of: dict[DType, DType]) -> tuple[dict[DType, float], float, list[str]]:
    """Factors on the datasheet peaks of `gpu` for its GEMMs (by dtype) and its attention, from the measured
    large-GEMM ceilings (efficiency.yaml `gemm_ceiling`, `profile.gemm_ceiling_scale`), and the notes for
    `assumptions`. `fitted_of`: the profile dtype whose efficiency each dtype takes. Attention takes the bf16
    ratio in every dtype (it was measured in bf16); a GPU or device without a ceiling keeps 1."""
    names = (gpu.name, *gpu.aliases)
    bf16 = gemm_ceiling_scale(names, device, DType.BF16, DType.BF16)
    if bf16 is None:
        return dict.fromkeys(fitted_of, 1.0), 1.0, [
            f"no measured GEMM ceiling for gpu {gpu.name}: {device}'s efficiencies used as they are"]
    factors, carried = {}, {}
    for dtype, fitted in fitted_of.items():
        scale, read = gemm_ceiling_scale(names, device, dtype, fitted) or (1.0, str(dtype))
        factors[dtype] = scale
        if read != dtype:
            carried.setdefault(read, []).append(str(dtype))
    notes = [f"GEMM ceiling of gpu {gpu.name} for {', '.join(ds)} taken from its {k} ceiling (none measured in "
             "those dtypes; efficiency.yaml gemm_ceiling)" for k, ds in carried.items()]
    assumed, origin = gemm_ceiling_assumed(names)
    if assumed:
        notes.append(f"GEMM ceiling of gpu {gpu.name} for {', '.join(assumed)} not measured on it: {origin}")
    return factors, bf16[0], notes


@cache
def grouped_gemm_terms() -> tuple[int, float]:
    """(rows of the tensor-core tile a grouped GEMM pads each group to, seconds each group adds)
    (efficiency.yaml `grouped_gemm`)."""
    table = efficiency_table()["compute"]["grouped_gemm"]
    return int(table["row_tile"]), parse_quantity(table["group_s"], "s")


def _gpu_key(gpu: GPU) -> tuple:
    return (gpu.name, tuple(sorted((str(d), v) for d, v in gpu.flops_per_s.items())), gpu.hbm_bytes_per_s,
            gpu.architecture)


_MODELS: dict[tuple, ComputeModel] = {}


def compute_model(gpu: GPU, profile: str | Path | ComputeProfile | None = None,
                  floor_s: float | None = None, attention_kernel: str | None = None) -> ComputeModel:
    """The (cached) compute model of `gpu` under `profile` (None: the shipped default profile).

    floor_s: the shortest kernel of the runtime (a CUDA-graph replay), replacing the profile's eager
    launch floors; None keeps them. attention_kernel: the fused-attention kernel the software stack runs
    (`madmax.hardware.attention_kernels`); None keeps the profile's attention curve.
    """
    loaded = load_profile(profile)
    key = (_gpu_key(gpu), id(loaded), floor_s, attention_kernel)
    model = _MODELS.get(key)
    if model is None or model.profile is not loaded:
        model = _MODELS[key] = ComputeModel(gpu, loaded, floor_s, attention_kernel)
    return model
