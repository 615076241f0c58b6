"""The shipped catalog (src/madmax/catalog/*.yaml): every entry loads, every number names its source,
aliases resolve, and published facts hold.

Expected values are copied by hand from the cited source, never read back from the catalog files.
"""

from __future__ import annotations

from typing import Any

import pytest

from madmax.config.base import DType
from madmax.config.hardware import GPU, FabricKind, System
from madmax.config.loaders import catalog_entries, catalog_names, load_gpu, load_model, load_system
from madmax.workload import param_counts

GPUS = catalog_names("gpus")
SYSTEMS = catalog_names("systems")
MODELS = catalog_names("models")
CLOUD_PROVIDERS = {"AWS", "Azure", "GCP"}


def numeric_paths(data: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every number in a dumped model (booleans are not numbers here)."""
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in numeric_paths(value, f"{prefix}{key}.")]
    if isinstance(data, int | float) and not isinstance(data, bool):
        return [prefix.rstrip(".")]
    return []


def is_sourced(path: str, sources: dict[str, str]) -> bool:
    """`path` (e.g. 'scale_up.latency_s') or one of its parents ('scale_up') has a non-empty source."""
    parts = path.split(".")
    return any(sources.get(".".join(parts[:i]), "").strip() for i in range(1, len(parts) + 1))


# --- every entry loads ----------------------------------------------------------------------------------


def test_catalog_holds_the_required_entries() -> None:
    gpus = {"v100-16gb", "v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200",
            "b300", "gb200", "gb300", "mi300x", "l40s"}
    systems = {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72",
               "gb300-nvl72", "zionex", "dc-a",
               "p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge",
               "nc24rs_v3", "nd40rs_v2", "nd96asr_v4", "nc96ads_a100_v4",
               "a2-highgpu-8g", "a2-megagpu-16g", "n1-v100-8g"}
    models = {"gpt3-175b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
              "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b"}
    assert gpus <= set(GPUS)
    assert systems <= set(SYSTEMS)
    assert models <= set(MODELS)


@pytest.mark.parametrize("name", GPUS)
def test_gpu_loads(name: str) -> None:
    assert load_gpu(name).name == name


@pytest.mark.parametrize("name", SYSTEMS)
def test_system_loads(name: str) -> None:
    system = load_system(name)
    assert system.name == name
    assert system.gpu.name in GPUS  # the node's GPU is itself a catalog entry


@pytest.mark.parametrize("name", MODELS)
def test_model_loads(name: str) -> None:
    model = load_model(name)
    assert model.name == name
    assert model.source.strip()


# --- every number names its source ----------------------------------------------------------------------


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_number_has_a_source(name: str) -> None:
    gpu = load_gpu(name)
    paths = numeric_paths(gpu.model_dump(exclude={"sources"}))
    assert {"hbm_bytes", "hbm_bytes_per_s", "tdp_w"} <= set(paths)
    assert [p for p in paths if not is_sourced(p, gpu.sources)] == []
    assert {key.split(".")[0] for key in gpu.sources} <= set(GPU.model_fields)  # no stale keys


@pytest.mark.parametrize("name", SYSTEMS)
def test_every_system_number_has_a_source(name: str) -> None:
    system = load_system(name)
    paths = numeric_paths(system.model_dump(exclude={"sources", "gpu", "num_gpus"}))
    assert {"gpus_per_node", "scale_up.bytes_per_s", "scale_up.latency_s", "scale_up.domain_size",
            "scale_out.bytes_per_s", "scale_out.latency_s"} <= set(paths)
    assert [p for p in paths if not is_sourced(p, system.sources)] == []
    assert {key.split(".")[0] for key in system.sources} <= set(System.model_fields)


def test_sourced_walks_nested_fields() -> None:
    # The helpers above, on a hand-made case: a parent key covers its children; empty text does not count.
    data = {"a": 1, "b": {"c": 2.0, "d": "text"}, "e": True, "f": None}
    assert numeric_paths(data) == ["a", "b.c"]
    assert is_sourced("b.c", {"b": "datasheet"}) and is_sourced("b.c", {"b.c": "datasheet"})
    assert not is_sourced("b.c", {"b.x": "datasheet", "b": "  "})


# --- aliases resolve --------------------------------------------------------------------------------------


def _aliases(kind: str) -> list[tuple[str, str]]:
    entries = catalog_entries(kind).values()
    return [(alias, entry["name"]) for entry in entries for alias in entry.get("aliases", [])]


@pytest.mark.parametrize(("kind", "load"), [("gpus", load_gpu), ("systems", load_system), ("models", load_model)])
def test_every_alias_resolves_to_its_entry(kind: str, load: Any) -> None:
    pairs = _aliases(kind)
    assert pairs
    for alias, name in pairs:
        assert load(alias).name == name
        assert load(alias.upper()).name == name  # lookup ignores case


@pytest.mark.parametrize("kind", ["gpus", "systems", "models"])
def test_names_and_aliases_are_unique(kind: str) -> None:
    entries = catalog_entries(kind).values()
    keys = [key.lower() for entry in entries for key in [entry["name"], *entry.get("aliases", [])]]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(("alias", "name"), [
    ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-405B", "llama-3.1-405b"),
    ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ("gpt-3-175b", "gpt3-175b"),
])
def test_hugging_face_ids_resolve(alias: str, name: str) -> None:
    assert load_model(alias).name == name


@pytest.mark.parametrize(("alias", "name"), [
    ("aws-p4d.24xlarge", "p4d.24xlarge"),
    ("Standard_ND96asr_v4", "nd96asr_v4"),
    ("standard_nc24rs_v3", "nc24rs_v3"),
    ("NC96ds_A100_v4", "nc96ads_a100_v4"),  # the spelling of the MAD-Max artifact's system configs
    ("gcp-a2-megagpu-16g", "a2-megagpu-16g"),
    ("dgx-gb200", "gb200-nvl72"),
])
def test_instance_names_resolve(alias: str, name: str) -> None:
    assert load_system(alias).name == name


@pytest.mark.parametrize(("alias", "name"), [
    ("h100", "h100-sxm"), ("a100", "a100-80gb"), ("v100", "v100-16gb"), ("H100-SXM5-80GB", "h100-sxm"),
])
def test_gpu_aliases_resolve(alias: str, name: str) -> None:
    assert load_gpu(alias).name == name


# --- published facts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "published"), [
    # Totals as published, to the digits given; Hugging Face pages show the safetensors total.
    ("llama-3.1-405b", 405.85e9),  # meta-llama/Llama-3.1-405B safetensors total, 405.85 B (STYLE.md 9)
    ("llama-3.1-8b", 8.03e9),  # meta-llama/Llama-3.1-8B model page, 8.03B params
    ("llama-3.1-70b", 70.55e9),  # meta-llama/Llama-3.1-70B model page, 70.6B params (70.55 B)
    ("llama-3-8b", 8.03e9),  # meta-llama/Meta-Llama-3-8B model page, 8.03B params
    ("llama-3-70b", 70.55e9),  # meta-llama/Meta-Llama-3-70B model page, 70.6B params (70.55 B)
    ("llama-2-7b", 6.74e9),  # meta-llama/Llama-2-7b-hf model page, 6.74B params
    ("llama-2-70b", 68.98e9),  # meta-llama/Llama-2-70b-hf model page, 69B params (68.98 B)
    ("mistral-7b", 7.24e9),  # mistralai/Mistral-7B-v0.1 model page, 7.24B params
    ("gpt3-175b", 174.6e9),  # Narayanan et al. SC21 (arXiv 2104.04473) Table 1: 174.6 B for GPT-3 175B
])
def test_parameter_totals_match_published(name: str, published: float) -> None:
    total = sum(param_counts(load_model(name)).values())
    assert total == pytest.approx(published, rel=1e-3)


def test_llama_2_7b_total_by_hand() -> None:
    # 32 layers x (4 * 4096^2 attention + 3 * 4096 * 11008 FFN + 2 * 4096 norms)
    #   = 32 x (67,108,864 + 135,266,304 + 8,192) = 6,476,267,520
    # + embedding and untied head 2 * 32000 * 4096 = 262,144,000 + final norm 4096  ->  6,738,415,616
    assert sum(param_counts(load_model("llama-2-7b")).values()) == 6_738_415_616


def test_llama_2_13b_total_by_hand() -> None:
    # Published only as "13B", so derived: 40 x (4 * 5120^2 + 3 * 5120 * 13824 + 2 * 5120)
    #   = 40 x (104,857,600 + 212,336,640 + 10,240) = 12,688,179,200
    # + 2 * 32000 * 5120 = 327,680,000 + final norm 5120  ->  13,015,864,320
    assert sum(param_counts(load_model("llama-2-13b")).values()) == 13_015_864_320


@pytest.mark.parametrize(("name", "train_seq_len", "max_seq_len"), [
    ("gpt3-175b", 2048, 2048),  # Brown et al. 2020 Table 2.1, n_ctx 2048
    ("llama-2-70b", 4096, 4096),  # Llama 2 paper Table 1, 4k context
    ("llama-3-8b", 8192, 8192),  # Llama 3 paper, 8K pre-training sequences
    ("llama-3.1-70b", 8192, 131072),  # 8K pre-training, config max_position_embeddings 131072
    ("mistral-7b", 8192, 32768),  # Mistral 7B paper Table 1 context_len 8192; config 32768
])
def test_sequence_lengths(name: str, train_seq_len: int, max_seq_len: int) -> None:
    model = load_model(name)
    assert (model.default_seq_len, model.max_seq_len) == (train_seq_len, max_seq_len)


# --- spot values in SI --------------------------------------------------------------------------------------


def test_gpu_spot_values() -> None:
    h100 = load_gpu("h100-sxm")
    # H100 datasheet: BF16 1,979 TFLOPS* (sparse) -> 989 dense; FP8 3,958* -> 1,979; 3.35 TB/s; 700 W
    assert h100.peak_flops_per_s(DType.BF16) == 989e12
    assert h100.peak_flops_per_s(DType.FP8) == 1979e12
    assert (h100.hbm_bytes_per_s, h100.tdp_w) == (3.35e12, 700.0)
    a100 = load_gpu("a100-80gb")
    assert a100.hbm_bytes == 80 * 2**30  # nvidia-smi: 81920 MiB
    assert (a100.hbm_bytes_per_s, a100.peak_flops_per_s(DType.BF16)) == (2.039e12, 312e12)
    v100 = load_gpu("v100-16gb")
    assert v100.peak_flops_per_s(DType.FP16) == 125e12  # tensor cores, V100 datasheet
    assert DType.BF16 not in v100.flops_per_s and DType.TF32 not in v100.flops_per_s
    assert DType.FP4 not in load_gpu("h200").flops_per_s  # Hopper has no FP4
    assert load_gpu("b200").peak_flops_per_s(DType.FP4) == 9e15  # HGX B200: 18 PFLOPS sparse / 2
    assert load_gpu("mi300x").vendor == "amd"
    assert load_gpu("l40s").hbm_bytes == 48e9  # GDDR6, decimal


def test_system_spot_values() -> None:
    dgx_h100 = load_system("dgx-h100")
    # 400 Gbit/s NDR per GPU = 50 GB/s; NVLink 900 GB/s both directions = 450 GB/s per direction
    assert dgx_h100.scale_out.bytes_per_s == 50e9
    assert dgx_h100.scale_up.bytes_per_s == 450e9
    assert dgx_h100.scale_up.latency_s == pytest.approx(1.9e-6)  # NCCL tuning.cc NVLink Ring/LL128
    dgx_a100 = load_system("dgx-a100")
    assert (dgx_a100.scale_out.bytes_per_s, dgx_a100.scale_up.bytes_per_s) == (25e9, 300e9)
    nvl72 = load_system("gb200-nvl72")
    assert (nvl72.gpus_per_node, nvl72.scale_up.domain_size) == (4, 72)
    assert load_system("gb200-nvl72", num_gpus=72).scale_up_domain == 72  # one rack = one NVLink domain
    assert load_system("nc24rs_v3").scale_up.kind is FabricKind.PCIE
    assert load_system("zionex").scale_out.kind is FabricKind.ROCE


# Cloud study, MAD-Max artifact (samhsia/MADMax@e229e4c) cloud_provider_gpu_configs.csv, copied by hand:
# hourly rate per GPU (USD), inter-node bandwidth per GPU (GB/s), node TDP (W).
CLOUD_STUDY = {
    "p3.16xlarge": (3.06, 0.390625, 5000),  # row 6
    "p3dn.24xlarge": (3.90125, 1.5625, 5000),  # row 7
    "p4d.24xlarge": (4.0975, 6.25, 6500),  # row 8
    "p4de.24xlarge": (5.12125, 6.25, 6500),  # row 9
    "p5.48xlarge": (12.29, 50.0, 10200),  # row 10
    "nc24rs_v3": (3.365, 0.75, 2500),  # row 11
    "nd40rs_v2": (2.75375, 1.5625, 5000),  # row 12
    "nc96ads_a100_v4": (3.6725, 2.5, 3250),  # row 13
    "nd96asr_v4": (3.4, 25.0, 6500),  # row 14
    "nd96amsr_a100_v4": (4.09625, 25.0, 6500),  # row 15
    "n1-v100-8g": (2.48, 1.5625, 5000),  # row 16
    "a2-highgpu-8g": (3.67375, 1.5625, 6500),  # row 17
    "a2-megagpu-16g": (3.48375, 0.78125, 13000),  # row 18
    "a2-ultragpu-8g": (5.70875, 1.5625, 6500),  # row 19
}


@pytest.mark.parametrize("name", sorted(CLOUD_STUDY))
def test_cloud_study_instances_match_the_artifact(name: str) -> None:
    price, internode_gb_per_s, node_power_w = CLOUD_STUDY[name]
    system = load_system(name)
    assert system.provider in CLOUD_PROVIDERS
    assert system.price_per_gpu_hour_usd == price
    assert system.scale_out.bytes_per_s == pytest.approx(internode_gb_per_s * 1e9, rel=1e-12)
    assert system.node_power_w == node_power_w


def test_every_cloud_study_instance_has_price_and_power() -> None:
    # The paper's study instances are all in the catalog with both; later instances (serving systems such
    # as g6e, p5e, p6-b200) carry what their sources give (p5e has no on-demand price, none a node power).
    clouds = [load_system(n) for n in SYSTEMS if load_system(n).provider in CLOUD_PROVIDERS]
    assert set(CLOUD_STUDY) <= {s.name for s in clouds}
    assert all(s.price_per_gpu_hour_usd and s.node_power_w for s in clouds if s.name in CLOUD_STUDY)


# --- plausibility -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GPUS)
def test_dense_peaks_are_consistent(name: str) -> None:
    # Each step down in precision doubles the tensor-core rate on every part here; a sparse figure left
    # undivided would show up as a 4x step. fp16 and bf16 run at the same rate.
    peaks = load_gpu(name).flops_per_s
    steps = [(DType.TF32, DType.BF16), (DType.BF16, DType.FP8)]
    for low, high in steps:
        if low in peaks and high in peaks:
            assert 1.95 <= peaks[high] / peaks[low] <= 2.05, (low, high)
    if DType.BF16 in peaks and DType.FP16 in peaks:
        assert peaks[DType.BF16] == peaks[DType.FP16]
    if DType.FP4 in peaks:
        assert peaks[DType.FP4] >= 2 * peaks[DType.FP8]


@pytest.mark.parametrize("name", SYSTEMS)
def test_bandwidths_and_latencies_are_plausible(name: str) -> None:
    system = load_system(name)
    up, out = system.scale_up, system.scale_out
    if up.kind is FabricKind.NVLINK:
        assert up.bytes_per_s >= out.bytes_per_s
        assert up.latency_s < out.latency_s
    assert up.bytes_per_s < system.gpu.hbm_bytes_per_s  # no link outruns the GPU's own memory
    assert 0.3e9 <= out.bytes_per_s <= 100e9  # 2.5 Gbit/s .. 800 Gbit/s per GPU
    assert 1e-7 <= up.latency_s <= 1e-5 and 1e-7 <= out.latency_s <= 1e-4
    assert up.domain_size >= system.gpus_per_node and up.domain_size % system.gpus_per_node == 0
    if system.host_link is not None:
        assert system.host_link.kind is FabricKind.PCIE
        assert system.host_link.bytes_per_s <= up.bytes_per_s


@pytest.mark.parametrize("name", [n for n in SYSTEMS if load_system(n).node_power_w is not None])
def test_node_power_covers_its_gpus(name: str) -> None:
    system = load_system(name)
    assert system.node_power_w >= system.gpus_per_node * system.gpu.tdp_w
