"""Hardware descriptions: a GPU, and a system of GPUs joined by a scale-up and a scale-out network.

Bandwidths are per GPU per direction (a DGX A100's NVLink: 300 GB/s per direction of its 600 GB/s
bidirectional figure; a 200 Gb/s HDR NIC per GPU: 25 GB/s). FLOP/s are dense peaks per dtype.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, PositiveInt, model_validator

from madmax.config.base import DType, Schema
from madmax.config.units import Bytes, BytesPerS, FlopsPerS, Seconds, Watts


class Architecture(StrEnum):
    """A GPU's architecture (its streaming-multiprocessor generation), which sets which kernels run on it and
    how fast: a kernel library's measured rates are per architecture (`catalog/calibration/`)."""

    VOLTA = "volta"  # sm70
    AMPERE = "ampere"  # sm80, sm86
    ADA = "ada"  # sm89
    HOPPER = "hopper"  # sm90
    BLACKWELL = "blackwell"  # sm100 (B200, GB200)
    BLACKWELL_ULTRA = "blackwell-ultra"  # sm103 (B300, GB300)
    BLACKWELL_RTX = "blackwell-rtx"  # sm120 (GeForce RTX 50, RTX PRO Blackwell): no tcgen05 tensor cores
    CDNA3 = "cdna3"  # gfx942 (MI300X, MI325X)
    CDNA4 = "cdna4"  # gfx950 (MI350X, MI355X)


class GPU(Schema):
    """One accelerator: peak dense FLOP/s per dtype, HBM and power, each number with a source."""

    name: str = Field(description="Catalog name, e.g. 'h100-sxm'.")
    aliases: list[str] = Field(default_factory=list, description="Other names, e.g. 'h100'.")
    vendor: str = Field("nvidia", description="Vendor name, informational.")
    architecture: Architecture | None = Field(
        None, description="Architecture (hopper, blackwell, ...): picks the kernel rates measured on it; unset: the "
        "compute profile's own measurements are used as fractions of this part's peaks.")
    flops_per_s: dict[DType, FlopsPerS] = Field(
        description="Dense peak FLOP/s per dtype (no 2:4 sparsity), e.g. {bf16: '989 TFLOPS'}."
    )
    hbm_bytes: Bytes = Field(gt=0, description="HBM capacity in bytes (the datasheet's figure).")
    usable_bytes: Bytes | None = Field(
        None, gt=0, description="Device memory CUDA can allocate from, as the driver reports it (cudaMemGetInfo's "
        "total, PyTorch's 'total capacity': nvidia-smi's Total less its Reserved line), before the CUDA context; "
        "unset: hbm_bytes, an upper bound; never more than hbm_bytes.")
    hbm_bytes_per_s: BytesPerS = Field(gt=0, description="Peak HBM bandwidth in bytes/s.")
    tdp_w: Watts = Field(gt=0, description="Board power (TDP) in watts.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source of each number, by field name.")

    @model_validator(mode="after")
    def _positive_peaks(self) -> GPU:
        for dtype, value in self.flops_per_s.items():
            if value <= 0:
                raise ValueError(f"flops_per_s.{dtype} must be > 0, got {value}")
        if not self.flops_per_s:
            raise ValueError("flops_per_s must name at least one dtype")
        if self.usable_bytes is not None and self.usable_bytes > self.hbm_bytes:
            raise ValueError(f"usable_bytes={self.usable_bytes:.4g} exceeds hbm_bytes={self.hbm_bytes:.4g}; allowed: "
                             "at most hbm_bytes (the driver's allocatable part of the HBM), or omit usable_bytes")
        return self

    @property
    def usable_memory_bytes(self) -> float:
        """What a plan must fit in: `usable_bytes` (at most `hbm_bytes`, which a what-if may have lowered),
        or `hbm_bytes` where the driver's figure is not known."""
        return self.hbm_bytes if self.usable_bytes is None else min(self.usable_bytes, self.hbm_bytes)

    def peak_flops_per_s(self, dtype: DType) -> float:
        """Dense peak FLOP/s of `dtype`; raises KeyError if the part has no such unit."""
        return self.flops_per_s[dtype]

    @property
    def half_dtype(self) -> DType:
        """The 16-bit format the part computes in: bf16, or fp16 on parts without bf16 (V100, T4)."""
        return DType.BF16 if DType.BF16 in self.flops_per_s else DType.FP16


class FabricKind(StrEnum):
    NVLINK = "nvlink"
    NVLINK_C2C = "nvlink-c2c"  # Grace-Hopper/Blackwell chip-to-chip link between the GPU and its CPU (host_link)
    PCIE = "pcie"
    XGMI = "xgmi"
    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"


class Fabric(Schema):
    """One level of the network: bandwidth per GPU per direction and the latency of one message."""

    kind: FabricKind = Field(description="Link technology.")
    bytes_per_s: BytesPerS = Field(gt=0, description="Peak bandwidth per GPU per direction, bytes/s.")
    latency_s: Seconds = Field(ge=0, description="Latency of one point-to-point message, seconds.")


class ScaleUpTopology(StrEnum):
    """How the GPUs of a scale-up domain are wired.

    switch: every GPU reaches the switch (NVSwitch, a PCIe switch or root complex) at `bytes_per_s`, whichever
    peers it talks to. full_mesh: every GPU has one direct link to each of the other domain_size - 1 GPUs (AMD
    Instinct platforms: 7 Infinity Fabric (xGMI) links per GPU on an 8-GPU board), so a group of n GPUs inside
    the domain reaches only n - 1 of its links: bytes_per_s (n - 1) / (domain_size - 1)."""

    SWITCH = "switch"
    FULL_MESH = "full_mesh"


class ScaleUp(Fabric):
    """The scale-up domain (NVLink/NVSwitch, xGMI or PCIe) joining `domain_size` GPUs."""

    domain_size: PositiveInt = Field(description="GPUs in one scale-up domain, e.g. 8 (DGX) or 72 (NVL72).")
    topology: ScaleUpTopology = Field(
        ScaleUpTopology.SWITCH, description="switch (default): every group gets bytes_per_s per GPU per direction; "
        "full_mesh: one link per peer, bytes_per_s is the sum over a GPU's domain_size - 1 links, and a group of n "
        "GPUs in the domain gets (n - 1) / (domain_size - 1) of it (AMD xGMI).")

    @model_validator(mode="after")
    def _mesh_has_peers(self) -> ScaleUp:
        if self.topology is ScaleUpTopology.FULL_MESH and self.domain_size < 2:
            raise ValueError(f"topology=full_mesh needs domain_size >= 2, got {self.domain_size}; allowed: a mesh of "
                             "2 or more GPUs, or topology=switch")
        return self

    def group_bytes_per_s(self, n: int) -> float:
        """Peak bandwidth per GPU per direction a group of n GPUs inside the domain can use (bytes/s):
        bytes_per_s on a switch; bytes_per_s (n - 1) / (D - 1) on a full mesh of D GPUs (n - 1 of its links)."""
        if self.topology is ScaleUpTopology.SWITCH or n < 2:
            return self.bytes_per_s
        return self.bytes_per_s * (min(n, self.domain_size) - 1) / (self.domain_size - 1)


class ScaleOut(Fabric):
    """The scale-out network: a rail-optimized fat tree. Each node's GPU i has its own NIC on rail i;
    the same-rail NICs of `nodes_per_leaf` nodes share one leaf switch, and leaves join through a
    spine tier whose uplinks may be oversubscribed."""

    nodes_per_leaf: PositiveInt | None = Field(
        None, description="Nodes whose same-rail NICs share one leaf switch (a DGX SuperPOD scalable unit); "
        "unset: one switch tier joins every node.")
    spine_oversubscription: float | None = Field(
        None, ge=1.0, allow_inf_nan=False, description="Leaf downlinks per uplink (1 = non-blocking): traffic "
        "crossing the spine gets bytes_per_s / this; unset: 1, an assumption when nodes_per_leaf is given.")
    spine_latency_s: Seconds | None = Field(
        None, ge=0, description="Extra latency of a message that crosses the spine (two more switch hops), s; "
        "unset: 0.")


class System(Schema):
    """A cluster of identical nodes; `num_gpus` may be changed per run (`--num-gpus`)."""

    name: str = Field(description="Catalog name, e.g. 'dgx-h100'.")
    gpu: GPU = Field(description="The GPU of every node (a catalog name in files, resolved on load).")
    gpus_per_node: PositiveInt = Field(description="GPUs in one node (server or tray).")
    num_gpus: PositiveInt | None = Field(None, description="Cluster size in GPUs; default one node.")
    scale_up: ScaleUp = Field(description="Intra-domain network (NVLink/NVSwitch or PCIe).")
    scale_out: ScaleOut = Field(description="Inter-domain network; bandwidth is per GPU per direction.")
    host_link: Fabric | None = Field(None, description="GPU-to-host link (PCIe/C2C), for offload.")
    price_per_gpu_hour_usd: float | None = Field(None, ge=0, description="On-demand price per GPU-hour, USD.")
    node_power_w: Watts | None = Field(None, gt=0, description="Power of one node at load (GPUs and rest), W.")
    provider: str | None = Field(None, description="Cloud provider or owner, informational.")
    aliases: list[str] = Field(default_factory=list, description="Other names, e.g. a cloud instance name.")
    sources: dict[str, str] = Field(default_factory=dict, description="Source of each number, by field name.")

    @model_validator(mode="after")
    def _consistent(self) -> System:
        if self.num_gpus is not None and self.num_gpus % self.gpus_per_node and self.num_gpus > self.gpus_per_node:
            raise ValueError(
                f"num_gpus={self.num_gpus} is not a multiple of gpus_per_node={self.gpus_per_node}"
            )
        return self

    @property
    def cluster_gpus(self) -> int:
        """GPUs in the cluster: `num_gpus`, or one node when unset."""
        return self.num_gpus or self.gpus_per_node

    @property
    def scale_up_domain(self) -> int:
        """GPUs sharing the scale-up network (at most the cluster)."""
        return min(self.scale_up.domain_size, self.cluster_gpus)

    def with_gpus(self, num_gpus: int) -> System:
        """The same system sized to `num_gpus` GPUs."""
        return System.model_validate({**self.model_dump(), "num_gpus": num_gpus})

    def with_costs(self, price_per_gpu_hour_usd: float | None = None, power_per_gpu_w: float | None = None) -> System:
        """The system with its price and power replaced (`--price`, `--power`); None keeps the system's own.

        price_per_gpu_hour_usd: USD per GPU-hour (>= 0). power_per_gpu_w: what the system draws at load per GPU,
        the rest of the node included (> 0): node_power_w = power_per_gpu_w x gpus_per_node. ConfigError (one
        sentence naming `price` or `power`) for a negative, zero power, infinite or non-numeric value.
        """
        from madmax.config.checks import nonnegative_number, positive_number

        update: dict[str, float] = {}
        if price_per_gpu_hour_usd is not None:
            update["price_per_gpu_hour_usd"] = nonnegative_number(price_per_gpu_hour_usd, "price", "USD per GPU-hour")
        if power_per_gpu_w is not None:
            watts = positive_number(power_per_gpu_w, "power", "W per GPU")
            update["node_power_w"] = watts * self.gpus_per_node
        if not update:
            return self
        sources = {k: v for k, v in self.sources.items() if k not in update}
        given = {"price_per_gpu_hour_usd": "--price", "node_power_w": "--power (W per GPU x gpus_per_node)"}
        return self.model_copy(update={**update, "sources": {**sources, **{k: f"given: {given[k]}" for k in update}}})
