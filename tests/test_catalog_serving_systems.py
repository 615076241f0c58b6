"""The AWS serving instances of the catalog (g6e.48xlarge, p5e.48xlarge, p6-b200.48xlarge): they load, hold
8 GPUs of the right part, and carry the published link, network and price figures.

Expected values are copied by hand from the cited source (AWS accelerated-computing instance specs, NVIDIA
datasheets, AWS us-east-1 On-Demand price list), never read back from the catalog files. Bandwidths are
per GPU per direction, as the catalog's convention says.
"""

from __future__ import annotations

import pytest

from madmax.config.hardware import FabricKind
from madmax.config.loaders import load_system

GB = 1e9


@pytest.mark.parametrize(("name", "gpu"), [
    ("g6e.48xlarge", "l40s"),  # AWS instance specs: 8 x NVIDIA L40S GPU
    ("p5e.48xlarge", "h200"),  # AWS instance specs: 8 x NVIDIA H200 GPU
    ("p6-b200.48xlarge", "b200"),  # AWS instance specs: 8 x NVIDIA B200 GPU
])
def test_serving_instance_loads_with_eight_gpus(name: str, gpu: str) -> None:
    system = load_system(name)
    assert system.name == name
    assert system.provider == "AWS"
    assert system.gpu.name == gpu
    assert system.gpus_per_node == 8
    assert system.scale_up.domain_size == 8
    assert load_system(f"aws-{name}").name == name  # the aws- alias, like the cloud-study instances


def test_g6e_48xlarge_is_pcie_only() -> None:
    system = load_system("g6e.48xlarge")
    assert system.scale_up.kind is FabricKind.PCIE  # L40S has no NVLink
    # NVIDIA L40S datasheet: PCIe Gen4 x16 64 GB/s bidirectional -> 32 GB/s per direction
    assert system.scale_up.bytes_per_s == 32 * GB
    assert system.host_link is not None and system.host_link.bytes_per_s == 32 * GB
    # AWS: g6e.48xlarge 400 Gbit/s EFA over 8 GPUs = 50 Gbit/s = 6.25 GB/s per GPU
    assert system.scale_out.bytes_per_s == pytest.approx(400e9 / 8 / 8, rel=1e-12)
    # AWS us-east-1 On-Demand $30.13118 per instance-hour / 8 GPUs
    assert system.price_per_gpu_hour_usd == pytest.approx(30.13118 / 8, rel=1e-12)
    assert system.scale_up.latency_s == pytest.approx(2.5e-6)  # NCCL tuning.cc PCI Ring/LL128


def test_p5e_48xlarge_links() -> None:
    system = load_system("p5e.48xlarge")
    assert system.scale_up.kind is FabricKind.NVLINK
    # AWS P5 page / H200: 900 GB/s NVSwitch, both directions -> 450 GB/s per direction
    assert system.scale_up.bytes_per_s == 450 * GB
    # AWS: p5e.48xlarge 3200 Gbit/s EFA over 8 GPUs = 400 Gbit/s = 50 GB/s per GPU
    assert system.scale_out.bytes_per_s == pytest.approx(3200e9 / 8 / 8, rel=1e-12)
    # AMD EPYC 7R13 host (Zen 3, PCIe Gen4): Gen4 x16 = 32 GB/s per direction
    assert system.host_link is not None and system.host_link.bytes_per_s == 32 * GB
    assert system.price_per_gpu_hour_usd is None  # no us-east-1 On-Demand SKU (Capacity Blocks only)
    assert system.scale_up.latency_s == pytest.approx(1.9e-6)  # NCCL tuning.cc NVLink Ring/LL128


def test_p6_b200_48xlarge_links() -> None:
    system = load_system("p6-b200.48xlarge")
    assert system.scale_up.kind is FabricKind.NVLINK
    # AWS P6 page: 14.4 TB/s bidirectional NVLink over 8 GPUs = 1.8 TB/s per GPU -> 900 GB/s per direction
    assert system.scale_up.bytes_per_s == pytest.approx(14.4e12 / 8 / 2, rel=1e-12)
    assert system.scale_up.bytes_per_s == 900 * GB
    # AWS: p6-b200.48xlarge 3200 Gbit/s EFAv4 (8 cards x 400 Gbit/s) = 400 Gbit/s = 50 GB/s per GPU
    assert system.scale_out.bytes_per_s == pytest.approx(3200e9 / 8 / 8, rel=1e-12)
    # B200 PCIe 5.x at 64 GB/s to an Emerald Rapids (PCIe 5.0) host
    assert system.host_link is not None and system.host_link.bytes_per_s == 64 * GB
    # AWS us-east-1 On-Demand $113.9328 per instance-hour / 8 GPUs
    assert system.price_per_gpu_hour_usd == pytest.approx(113.9328 / 8, rel=1e-12)


def test_serving_instances_every_number_has_a_source() -> None:
    for name in ("g6e.48xlarge", "p5e.48xlarge", "p6-b200.48xlarge"):
        system = load_system(name)
        fields = ["gpus_per_node", "scale_up.bytes_per_s", "scale_up.latency_s", "scale_up.domain_size",
                  "scale_out.bytes_per_s", "scale_out.latency_s", "host_link.bytes_per_s",
                  "host_link.latency_s"]
        if system.price_per_gpu_hour_usd is not None:
            fields.append("price_per_gpu_hour_usd")
        assert [f for f in fields if not system.sources.get(f, "").strip()] == [], name
