"""Calibration data of the cost models: a compute profile (fitted) and the efficiency table (sourced).

Two kinds of file, both in `madmax/catalog/`:

- `calibration/<device>_profile.yaml`: a **compute profile**, written by
  `madmax.hardware.calibration.fit_profile` from kernel timings of one GPU and software stack; it names
  the device, the software and the peaks its efficiencies are fractions of. A user may pass another
  one (`compute_model(gpu, profile="my_profile.yaml")`).
- `efficiency.yaml`: hand-entered numbers, each with its source: the datasheet peaks of calibration
  devices, dtype fallbacks, and the achievable bus bandwidth of each fabric (nccl-tests busbw).

Every failure to read or validate either file is a `ConfigError` naming the file and the field.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from madmax.config.base import DType, Schema
from madmax.config.checks import file_rule, is_file, shown
from madmax.config.loaders import read_file, validate
from madmax.config.units import BytesPerS, FlopsPerS, Seconds
from madmax.errors import ConfigError

PeakFraction = Annotated[float, Field(gt=0, le=1)]


class ReferencePeaks(Schema):
    """Datasheet peaks of the calibration device: measured efficiencies are fractions of these."""

    flops_per_s: dict[DType, FlopsPerS] = Field(description="Dense peak FLOP/s per dtype.")
    hbm_bytes_per_s: BytesPerS = Field(gt=0, description="Peak HBM bandwidth, bytes/s.")
    source: str = Field("", description="Where the peaks come from.")


class GemmFit(Schema):
    """GEMM efficiency e = e_dtype * (1 - exp(-k/k0)) * (1 - exp(-n/n0)) and the memory roof."""

    reference_dtype: DType = Field(description="The dtype whose rows fixed k0 and n0.")
    peak_fraction: dict[DType, PeakFraction] = Field(description="e_dtype: large-GEMM fraction of peak FLOP/s.")
    k0: float = Field(gt=0, description="Inner-dimension scale of the k factor 1 - exp(-k/k0).")
    n0: float = Field(gt=0, description="Output-column scale of the n factor 1 - exp(-n/n0).")
    read_fraction: float = Field(gt=0, le=1, description="Fraction of peak HBM bandwidth of the memory roof.")
    min_k: float = Field(0, ge=0, description="Smallest inner dimension measured: below it the k factor is "
                                             "held at its value there instead of extrapolated.")
    min_n: float = Field(0, ge=0, description="Smallest output width measured: below it the n factor is held.")
    shape_scaling: Literal["shared", "peak"] = Field(
        "shared", description="k0 and n0 of a dtype other than the reference: 'shared' uses them as fitted; "
        "'peak' scales them by the dtype's peak over the reference dtype's (on the calibration device), "
        "because a tile's fixed prologue and epilogue take the same time while its math runs at the dtype's "
        "rate (`shape_scale`).")

    def shape_scale(self, dtype: DType, peaks: ReferencePeaks) -> float:
        """Factor on k0 and n0 for GEMMs of `dtype` (a fitted dtype): P_dtype / P_reference under 'peak'
        scaling, else 1. fp8 on Hopper: 1979 / 989 = 2, so an fp8 GEMM needs twice the k and n of a bf16
        one to reach the same fraction of its (twice as high) peak."""
        if self.shape_scaling == "shared" or dtype == self.reference_dtype:
            return 1.0
        return peaks.flops_per_s[dtype] / peaks.flops_per_s[self.reference_dtype]


class AttentionPassFit(Schema):
    """Flash-attention efficiency e(kv) = e_max * kv / (kv + kv0) of one pass."""

    peak_fraction: PeakFraction = Field(description="e_max: fraction of peak at long sequences.")
    kv0: float = Field(ge=0, description="Key/value length at which efficiency is half of e_max.")


class AttentionFit(Schema):
    launch_s: Seconds = Field(ge=0, description="Shortest time of one attention call (host launch floor).")
    read_fraction: float = Field(gt=0, le=1, description="Fraction of peak HBM bandwidth streaming K/V.")
    forward: AttentionPassFit
    backward: AttentionPassFit


class MemoryFit(Schema):
    latency_s: Seconds = Field(ge=0, description="Fixed time of a streaming kernel beyond bytes/bandwidth.")
    copy_fraction: float = Field(gt=0, le=1, description="Fraction of peak HBM bandwidth of a copy.")


class FitError(Schema):
    count: int = Field(ge=0, description="Rows compared.")
    median: float = Field(ge=0, description="Median of |predicted/measured - 1|.")
    max: float = Field(ge=0, description="Largest |predicted/measured - 1|.")


class CollectiveFit(Schema):
    """Alpha-beta fit of one collective measured by nccl-tests (or `madmax bench comm`).

    t = c(n) alpha + f(n) S / B, with c, f of `madmax.hardware.collectives` (ring all_reduce: 2(n-1) and
    2(n-1)/n; all_gather, reduce_scatter: (n-1) and (n-1)/n; all_to_all: 1 and (n-1)/n, its alpha the whole
    latency of the measured group; send_recv: 1 and 1).
    Written by `madmax calibrate`; `simulate --calibration` uses it in place of the busbw table
    (`collectives.network_model(system, fits)`).
    """

    collective: str = Field(description="all_reduce, all_gather, reduce_scatter, all_to_all or send_recv.")
    num_gpus: int = Field(ge=1, description="Ranks in the measured group.")
    num_nodes: int = Field(1, ge=1, description="Hosts the ranks ran on (1: scale-up fabric only).")
    device: str = Field("", description="Device named in the output's rank lines.")
    step_latency_s: Seconds = Field(ge=0, description="alpha: latency of one algorithm step (an all-to-all's "
                                    "whole latency), s.")
    busbw_bytes_per_s: BytesPerS = Field(gt=0, description="B: bus bandwidth per GPU per direction, bytes/s.")
    min_size_bytes: float = Field(0, ge=0, description="Smallest message fitted (nccl-tests size), bytes.")
    max_size_bytes: float = Field(0, ge=0, description="Largest message fitted (nccl-tests size), bytes.")
    source: str = Field("", description="The measurement file.")
    fit_errors: dict[str, FitError] = Field(
        default_factory=dict, description="|predicted/measured - 1| of the times: 'in_sample', 'held_out'."
    )


class HostFit(Schema):
    """Provenance of a host time fitted to measured step times: which rows, which split, which objective."""

    data: str = Field(description="The iteration-time file(s) and their sha256.")
    base_profile: str = Field(description="The profile whose other parameters were kept.")
    objective: str = Field(description="What the 1-D search minimized.")
    split: str = Field(description="How rows were split into fitted and held-out rows.")
    train_rows: int = Field(ge=0, description="Rows fitted.")
    held_out_rows: int = Field(ge=0, description="Rows left out of the fit (their errors are held-out).")


class LaunchFit(HostFit):
    """Provenance of a launch floor fitted to measured iteration times (`madmax calibrate FILE.csv`)."""

    base_launch_s: Seconds = Field(ge=0, description="launch_s of the base profile, s.")
    stack: str | None = Field(None, description="The training stack the rows were simulated under (None: each "
                                                "row's own, Megatron-Core for a CSV).")


class ComputeProfile(Schema):
    """Fitted efficiencies of one GPU and software stack, as fractions of `reference_peaks`."""

    device: str = Field(description="The measured device, e.g. 'NVIDIA H200'.")
    software: str = Field(description="Framework, CUDA and driver versions of the measurement.")
    source: str = Field(description="The measurement file and the function that fitted it.")
    reference_peaks: ReferencePeaks
    launch_s: Seconds = Field(ge=0, description="Shortest time of one GEMM or memory kernel (launch floor).")
    memory: MemoryFit
    gemm: GemmFit
    attention: AttentionFit
    fit_errors: dict[str, dict[str, FitError]] = Field(
        default_factory=dict, description="Relative errors by kernel kind: 'in_sample' and 'held_out'."
    )
    network: tuple[CollectiveFit, ...] = Field(
        (), description="Collective fits from nccl-tests output (informational; see CollectiveFit)."
    )
    launch_fit: LaunchFit | None = Field(
        None, description="Provenance of launch_s when it was fitted to iteration times."
    )
    call_host_s: Seconds = Field(
        0.0, ge=0, description="Host seconds per step call besides its kernel launches (the framework's dispatch "
        "of the step function, the input pipeline's next batch), run beside the GPU's work: a step lasts at "
        "least this long. 0: a step's host costs are those of runtime.yaml step_end alone.")
    call_fit: HostFit | None = Field(None, description="Provenance of call_host_s when it was fitted.")
    wgrad_fraction: dict[DType, PeakFraction] | None = Field(
        None, description="Rate of a weight-gradient GEMM (dW = X^T dY, accumulated into fp32 main_grad) over that "
        "of a GEMM of the same shape and dtype, by dtype (others: 1). None: the catalog's "
        "calibration/fp8_wgrad.yaml.")


CATALOG = resources.files("madmax.catalog")
DEFAULT_PROFILE = "calibration/h200_profile.yaml"


def catalog_path(relative: str) -> Path:
    """Path of a file shipped in `madmax/catalog/`."""
    return Path(str(CATALOG.joinpath(relative)))


@cache
def efficiency_table() -> dict[str, Any]:
    """The parsed `catalog/efficiency.yaml` (hand-entered efficiencies with sources)."""
    return yaml.safe_load(catalog_path("efficiency.yaml").read_text(encoding="utf-8"))


@cache
def _load_profile(path: str) -> ComputeProfile:
    return validate(ComputeProfile, read_file(Path(path), "profile"), "profile")


@cache
def _default_profile() -> ComputeProfile:
    return _load_profile(str(catalog_path(efficiency_table()["compute"]["default_profile"])))


def load_profile(profile: str | Path | ComputeProfile | None = None) -> ComputeProfile:
    """A compute profile: the shipped default (None), a catalog-relative name, or a YAML/JSON file."""
    if isinstance(profile, ComputeProfile):
        return profile
    if profile is None:
        return _default_profile()
    path = Path(profile)
    if not is_file(path):  # False, not OSError, for a name too long for a path
        shipped = catalog_path(str(profile))
        if not is_file(shipped):
            raise ConfigError(f"profile file {shown(str(profile))} does not exist{file_rule()}")
        path = shipped
    return _load_profile(str(path.resolve()))


WGRAD_FILE = "calibration/fp8_wgrad.yaml"


@cache
def architecture_of(gpu: str) -> str | None:
    """The catalog architecture of a GPU name or alias (None: not in the catalog, or none given)."""
    from madmax.config.loaders import find_in_catalog

    entry = find_in_catalog("gpus", gpu.lower())
    return None if entry is None or not entry.get("architecture") else str(entry["architecture"])


def device_architecture(device: str) -> str | None:
    """The architecture of a compute profile's device as a measurement names it ('NVIDIA H200' -> hopper)."""
    return architecture_of(device.lower().removeprefix("nvidia ").strip().replace(" ", "-"))


def catalog_wgrad_fractions() -> dict[DType, float]:
    """The weight-gradient GEMM rates of `catalog/calibration/fp8_wgrad.yaml` (fitted, with its provenance),
    none while the fit is not adopted (`adopted: false`: it failed the rule for fits, docs/calibration.md)."""
    table = yaml.safe_load(catalog_path(WGRAD_FILE).read_text(encoding="utf-8"))
    if not table.get("adopted", True):
        return {}
    return {DType(d): float(v) for d, v in table["wgrad_fraction"].items()}


def reference_peaks(device: str) -> ReferencePeaks:
    """Datasheet peaks of a calibration device named as in a measurement's `env` line."""
    devices = efficiency_table()["compute"]["reference_devices"]
    if device not in devices:
        raise ConfigError(
            f"calibration device {device!r} has no datasheet peaks in efficiency.yaml; "
            f"allowed: {', '.join(devices)}"
        )
    return validate(ReferencePeaks, devices[device], f"efficiency.compute.reference_devices.{device}")


def dtype_fallbacks() -> dict[DType, DType]:
    """Dtype whose fitted efficiency stands in for a dtype without measurements."""
    table = efficiency_table()["compute"]["dtype_fallbacks"]
    return {DType(k): DType(v["use"]) for k, v in table.items()}


class GemmCeiling(Schema):
    """One GPU's measured large-GEMM ceilings (efficiency.yaml `compute.gemm_ceiling.gpus`)."""

    names: tuple[str, ...] = Field(min_length=1, description="Catalog GPU names (and aliases) it applies to.")
    devices: tuple[str, ...] = Field((), description="Device names as a measurement's `env` line (nvidia-smi) "
                                     "reports them: a compute profile measured on one of them is this GPU's.")
    mamf_fraction: dict[DType, PeakFraction] = Field(
        min_length=1, description="Maximum achievable matmul FLOP/s by dtype as a fraction of the dense "
        "datasheet peak (mamf: the best of a search over large shapes).")
    assumed: tuple[DType, ...] = Field((), description="Dtypes whose fraction is not measured on this GPU "
                                       "(taken from a similar part; listed in ComputeModel.assumptions).")
    assumed_from: str = Field("", description="What the assumed fractions are taken from, in a few words.")
    source: str = Field(description="Where the fractions come from.")


@cache
def gemm_ceilings() -> tuple[GemmCeiling, ...]:
    """The validated `compute.gemm_ceiling.gpus` entries of efficiency.yaml."""
    entries = efficiency_table()["compute"]["gemm_ceiling"]["gpus"]
    return tuple(validate(GemmCeiling, e, f"efficiency.compute.gemm_ceiling.gpus[{i}]") for i, e in enumerate(entries))


def _ceiling_entry(gpu_names: tuple[str, ...] = (), device: str | None = None) -> GemmCeiling | None:
    """The entry naming one of `gpu_names`, or the one of a measured `device`: listed in its `devices`, or
    its name as the catalog spells it ('NVIDIA B200' -> b200, as `madmax calibrate` finds a device's peaks)."""
    wanted = {name.lower() for name in gpu_names}
    if device is not None:
        wanted.add(device.lower().removeprefix("nvidia ").strip().replace(" ", "-"))
    device = None if device is None else device.lower()
    for entry in gemm_ceilings():
        if wanted & {n.lower() for n in entry.names} or device in {d.lower() for d in entry.devices}:
            return entry
    return None


def gemm_ceiling_scale(gpu_names: tuple[str, ...], device: str, dtype: DType,
                       fitted: DType) -> tuple[float, str] | None:
    """c(gpu, k) / c(device, k'): the factor on the efficiency fitted for `fitted` on the calibration
    `device` that carries it to a `dtype` GEMM on the GPU named `gpu_names`, and the dtype k it read;
    None when either has no ceiling in efficiency.yaml.

    c is the maximum achievable matmul FLOP/s as a fraction of the dense peak (mamf). It is read for the
    first of (k, k') = (dtype, fitted), (fitted, fitted), (bf16, bf16) that both GPUs list: the GPU's own
    dtype (fp4 on B200 over the fp8 measured on H200, whose efficiency fp4 takes), else the dtype whose
    efficiency it uses (mxfp8, int8 -> fp8), else the bf16 ratio (tf32, fp32, fp16). Equal GPUs give 1.
    """
    gpu, ref = _ceiling_entry(gpu_names), _ceiling_entry(device=device)
    if gpu is None or ref is None:
        return None
    for k, k_ref in ((dtype, fitted), (fitted, fitted), (DType.BF16, DType.BF16)):
        if k in gpu.mamf_fraction and k_ref in ref.mamf_fraction:
            return gpu.mamf_fraction[k] / ref.mamf_fraction[k_ref], str(k)
    return None


def gemm_ceiling_assumed(gpu_names: tuple[str, ...]) -> tuple[tuple[DType, ...], str]:
    """The dtypes whose ceiling the GPU's entry takes from a similar part, and what from."""
    entry = _ceiling_entry(gpu_names)
    return ((), "") if entry is None else (entry.assumed, entry.assumed_from)
