"""Fit the attention-kernel curves to published kernel timings (catalog/calibration/attention_kernel_points.yaml).

    python -m madmax.hardware.attention_fit            # print the fits and their errors
    python -m madmax.hardware.attention_fit --write    # also rewrite catalog/calibration/attention_kernels.yaml

Each panel (a kernel, a pass, a mask, on one architecture) is fitted with madmax's own form of a flash-attention
pass (`madmax.hardware.compute.attention_compute_s`): the rate at kv keys is

    R(kv) = P * e_max * kv / (kv + kv0)

P: the device's dense peak the paper reports against; e_max: the fraction of it at long sequences; kv0: the key
length at which half of e_max is reached (the fixed work of each row of tiles, its prologue and epilogue, against
its kv / block_n iterations). The pair minimizes sum (log R_fit - log R_measured)^2 over the panel's sequence
lengths (least squares in log rate: six points and no outliers), by `calibration.minimize` in logit/log
coordinates. Panels the papers do not show are derived first by the rules in the points file's header
(`causal_backward`, `scaled_from`), and marked `derived`.

The fit uses the compute term only: at the papers' shapes (16K tokens, 16 heads of 128) the shortest kernel runs
for 0.2 ms, ten times the launch floor, and its K/V bytes stream in a few per cent of that time.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import yaml

from madmax.hardware.attention_kernels import KERNELS_FILE, POINTS_FILE
from madmax.hardware.calibration import SIGNIFICANT, _log_l2, _logit, _sigmoid, minimize
from madmax.hardware.profile import catalog_path

PASSES, MASKS = ("forward", "backward"), ("causal", "full")


def load_points() -> dict[str, Any]:
    """The hand-entered panels (`attention_kernel_points.yaml`)."""
    return yaml.safe_load(catalog_path(POINTS_FILE).read_text(encoding="utf-8"))


def rate(kv: np.ndarray, peak_fraction: float, kv0: float) -> np.ndarray:
    """Fraction of peak at kv keys: e(kv) = e_max * kv / (kv + kv0)."""
    return peak_fraction * kv / (kv + kv0)


def fit_panel(seq_len: np.ndarray, fraction: np.ndarray) -> tuple[float, float]:
    """(e_max, kv0) of `rate` fitted to measured fractions of peak at `seq_len` keys (least squares in log)."""
    def loss(z):
        return _log_l2(rate(seq_len, _sigmoid(z[0]), np.exp(z[1])), fraction)

    z = minimize(loss, [_logit(float(fraction.max())), np.log(float(seq_len.min()))])
    return float(_sigmoid(z[0])), float(np.exp(z[1]))


def panels(points: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every (kernel, architecture) with its panels as fractions of peak, derived ones included:
    {(kernel, arch): {"seq_len", "meta", "panels": {(pass, mask): (fractions, derived)}}}."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    archs = points["architectures"]
    scaled = [(arch, kernel) for arch, a in archs.items() for kernel, k in a["kernels"].items() if "scaled_from" in k]
    for arch, a in archs.items():
        for kernel, k in a["kernels"].items():
            if (arch, kernel) in scaled:
                continue
            seq = np.asarray(a["seq_len"], dtype=float)
            measured = {(p, m): (np.asarray(k[p][m], dtype=float) / a["peak_tflop_per_s"], False)
                        for p in PASSES for m in MASKS if m in k.get(p, {})}
            if ("backward", "causal") not in measured:  # rule causal_backward
                ratio = measured[("forward", "causal")][0] / measured[("forward", "full")][0]
                measured[("backward", "causal")] = (measured[("backward", "full")][0] * ratio, True)
            out[(kernel, arch)] = {"seq_len": seq, "meta": a, "software": k["software"], "panels": measured}
    for arch, kernel in scaled:  # rule scaled_from, from the measured panels above
        a, k = archs[arch], archs[arch]["kernels"][kernel]
        base = out[(kernel, k["scaled_from"])]
        factor = (k["anchor"]["tflop_per_s"] / a["peak_tflop_per_s"]) / (
            k["anchor"]["source_tflop_per_s"] / archs[k["scaled_from"]]["peak_tflop_per_s"])
        out[(kernel, arch)] = {"seq_len": base["seq_len"], "meta": a, "software": k["software"],
                               "panels": {key: (f * factor, True) for key, (f, _) in base["panels"].items()},
                               "scaled": (k["scaled_from"], factor)}
    return out


def _sig(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


def fit_table(points: dict[str, Any] | None = None) -> dict[str, Any]:
    """The generated table (the dict form of `attention_kernels.AttentionKernelTable`)."""
    points = points or load_points()
    fitted = panels(points)
    kernels: dict[str, Any] = {}
    for name, k in points["kernels"].items():
        archs = {}
        for (kernel, arch), entry in sorted(fitted.items()):
            if kernel != name:
                continue
            meta = entry["meta"]
            curves: dict[str, dict[str, Any]] = {p: {} for p in PASSES}
            for (p, m), (fraction, derived) in sorted(entry["panels"].items()):
                e, kv0 = fit_panel(entry["seq_len"], fraction)
                errors = np.abs(rate(entry["seq_len"], e, kv0) / fraction - 1)
                curves[p][m] = {"peak_fraction": _sig(e), "kv0": _sig(kv0), "derived": derived,
                                "median_error": _sig(float(np.median(errors))), "max_error": _sig(float(errors.max()))}
            how = (f"{entry['scaled'][0]}'s panels scaled by {_sig(entry['scaled'][1])} (rule scaled_from), fitted"
                   if "scaled" in entry else "fitted to the panels")
            archs[arch] = {"device": meta["device"], "software": entry["software"], "head_dim": meta["head_dim"],
                           "source": f"{how}; {meta['source']}", **curves}
        kernels[name] = {"description": k["description"], "architectures": archs}
    return {"kernels": kernels}


HEADER = """\
# Attention kernels by GPU architecture: GENERATED by `python -m madmax.hardware.attention_fit --write`
# from attention_kernel_points.yaml (the published panels and their sources); do not edit by hand. Each
# pass and mask: e(kv) = peak_fraction * kv / (kv + kv0), the fraction of the architecture's dense peak at
# kv keys (causal FLOPs counted halved); derived: the panel was not measured (rules in the points file);
# errors: |fit / measured - 1| over the panel's sequence lengths. Read by madmax.hardware.attention_kernels.
"""


def render(table: dict[str, Any] | None = None) -> str:
    """The text of attention_kernels.yaml."""
    return HEADER + yaml.safe_dump(table or fit_table(), sort_keys=False, width=110)


def report(table: dict[str, Any] | None = None) -> str:
    """One line per fitted panel: kernel, architecture, pass, mask, e_max, kv0, errors."""
    table = table or fit_table()
    lines = ["kernel       arch     pass     mask    e_max    kv0     median  max   derived"]
    for name, k in table["kernels"].items():
        for arch, a in k["architectures"].items():
            for p in PASSES:
                for m, c in a[p].items():
                    lines.append(f"{name:12s} {arch:8s} {p:8s} {m:6s} {c['peak_fraction']:.4f} {c['kv0']:7.1f} "
                                 f"{c['median_error']:.3f} {c['max_error']:.3f} {c['derived']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    table = fit_table()
    if "--write" in argv:
        catalog_path(KERNELS_FILE).write_text(render(table), encoding="utf-8")
    print(report(table))


if __name__ == "__main__":
    main()
