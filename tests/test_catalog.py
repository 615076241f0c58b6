"""The shipped catalog (src/madmax/catalog/*.yaml): every entry loads, every number names its source,
aliases resolve, and published facts hold.

Expected values are copied by hand from the cited source, never read back from the catalog files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from madmax.config.base import DType
from madmax.config.hardware import GPU, FabricKind, System
from madmax.config.loaders import catalog_entries, catalog_names, load_gpu, load_model, load_system
from madmax.workload import param_counts
from madmax.workload.transformer import active_params

GPUS = catalog_names("gpus")
SYSTEMS = catalog_names("systems")
MODELS = catalog_names("models")
CLOUD_PROVIDERS = {"AWS", "Azure", "GCP"}
HF = Path(__file__).parent / "data" / "hf"


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


# --- mixture of experts: total and active parameters as each publisher states them ---------------------------


def published(count: int, figure: str, *, cut: bool = False) -> bool:
    """Whether `count` gives the published `figure` ('46.7B', '1T') at the figure's precision: rounded, or cut
    off (`cut`) where the publisher's figures are (DeepSeek's '37B' for 37.55 B)."""
    value, scale = figure[:-1], {"B": 1e9, "T": 1e12}[figure[-1]]
    decimals = len(value.partition(".")[2])
    shifted = count / scale * 10**decimals
    return (math.floor(shifted) if cut else round(shifted)) == round(float(value) * 10**decimals)


def totals(name: str) -> tuple[int, int, dict[str, int]]:
    model = load_model(name)
    counts = param_counts(model)
    return sum(counts.values()), active_params(model, counts), counts


@pytest.mark.parametrize(("name", "total", "active", "cut"), [
    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total, 12.9B per token. 46,702,792,704 and
    # 12,879,925,248, derived in tests/config/test_hf_moe.py.
    ("mixtral-8x7b", "46.7B", "12.9B", False),
    # Mistral AI, "Cheaper, Better, Faster, Stronger" (2024-04-17): 141B total, 39B active. h = 6144, 56 layers:
    # untied 2*32000*6144 = 393,216,000; layer: q and o 2*6144^2 = 75,497,472, k and v 2*6144*1024 =
    # 12,582,912, router 6144*8 = 49,152, experts 8 * 3*6144*16384 = 8 * 301,989,888 = 2,415,919,104, norms
    # 12,288 -> 2,504,060,928 * 56 = 140,227,411,968; + 6,144 -> 140,620,634,112. Active: 2 experts:
    # (2,504,060,928 - 1,811,939,328) * 56 + 393,222,144 = 39,152,031,744.
    ("mixtral-8x22b", "141B", "39B", False),
    # Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated" (3,353,032,704 cut to one decimal;
    # derived in tests/config/test_hf_moe.py).
    ("qwen3-30b-a3b", "30.5B", "3.3B", True),
    # Qwen3-235B-A22B model card: 235B total, 22B activated. h = 4096, 94 layers: untied 2*151936*4096 =
    # 1,244,659,712; layer: q 4096*8192 and o 8192*4096 = 67,108,864, k and v 2*4096*512 = 4,194,304, QK-norm
    # 256, router 4096*128 = 524,288, experts 128 * 3*4096*1536 = 128 * 18,874,368 = 2,415,919,104, norms
    # 8,192 -> 2,487,755,008 * 94 = 233,848,970,752; + 4,096 -> 235,093,634,560. Active: 8 experts:
    # (2,487,755,008 - 2,264,924,160) * 94 + 1,244,663,808 = 22,190,763,520.
    ("qwen3-235b-a22b", "235B", "22B", False),
    # Moonshot's model card: 1 trillion total, 32 billion activated (1,026,408,232,448 and 32,861,500,928,
    # derived in tests/config/test_hf_moe.py; the active count cut to billions).
    ("kimi-k2", "1T", "32B", True),
])
def test_moe_totals_and_active_match_published(name: str, total: str, active: str, cut: bool) -> None:
    count, active_count, _ = totals(name)
    assert published(count, total)
    assert published(active_count, active, cut=cut)


def test_published_figures_by_hand() -> None:
    # The helper above: 46,702,792,704 rounds to 46.7B; 37.55 B rounds to 38B but is cut to 37B.
    assert published(46_702_792_704, "46.7B") and not published(46_802_792_704, "46.7B")
    assert published(37_552_297_472, "37B", cut=True) and not published(37_552_297_472, "37B")
    assert published(1_026_408_232_448, "1T")


def test_deepseek_v3_main_model_and_mtp() -> None:
    # DeepSeek-V3 report (arXiv 2412.19437): 671B total with 37B activated, the main model; the Hub's 685B
    # adds 14B of MTP module weights. The MTP module here is 11,610,068,224 (eh_proj, norms, one MoE layer);
    # the checkpoint also stores its own copies of the embedding and the LM head, 2 * 129280 * 7168 =
    # 1,853,358,080, which the module shares with the main model: 13,463,426,304 stored, DeepSeek's "14B".
    # (The Hub total, 684.49 B by this count, is not checked: it also counts the FP8 weights' scales.)
    total, active, counts = totals("deepseek-v3")
    assert (total - counts["mtp"], counts["mtp"], active) == (671_026_419_200, 11_610_068_224, 37_552_297_472)
    assert published(total - counts["mtp"], "671B") and published(active, "37B", cut=True)


@pytest.mark.parametrize(("name", "total", "active"), [
    # OpenAI gpt-oss model card Table 1: total 20.91B and 116.83B; active 3.61B and 5.13B, which leave the
    # input embedding out (its "Embed + Unembed" row, 1.16B, counts the LM head once in the active figure).
    # gpt-oss-120b: layer (as gpt-oss-20b's in tests/config/test_hf_moe.py) attention 26,550,144 with sinks,
    # router 2880*128 + 128 = 368,768, experts 128 * 24,891,840 = 3,186,155,520, norms 5,760 -> 3,213,080,192
    # * 36 = 115,670,886,912 + 1,158,266,880 + 2,880 = 116,829,156,672. Active without the embedding:
    # (3,213,080,192 - 124 * 24,891,840) * 36 + 579,133,440 + 2,880 = 5,132,849,472.
    ("gpt-oss-20b", 20_914_757_184, 3_608_307_264),
    ("gpt-oss-120b", 116_829_156_672, 5_132_849_472),
])
def test_gpt_oss_counts_leave_the_input_embedding_out_of_active(name: str, total: int, active: int) -> None:
    count, active_count, counts = totals(name)
    assert (count, active_count - counts["embedding"]) == (total, active)
    figures = {"gpt-oss-20b": ("20.91B", "3.61B"), "gpt-oss-120b": ("116.83B", "5.13B")}[name]
    assert published(count, figures[0]) and published(active_count - counts["embedding"], figures[1])


def test_llama_4_scout_counts_the_text_model() -> None:
    # Meta's card: 17B activated, 109B total with the vision encoder and projector (871,932,416, derived in
    # tests/config/test_hf_moe.py), which are not modelled: 107,769,861,120 + 871,932,416 = 108.64 B.
    total, active, _ = totals("llama-4-scout")
    assert (total, active) == (107_769_861_120, 17_172_894_720)
    assert published(total + 871_932_416, "109B") and published(active, "17B")


def test_llama_4_maverick_counts_the_text_model() -> None:
    # Meta's card: 17B activated, 400B total. h = 5120, 48 layers, MoE on every 2nd (24 layers):
    #   attention 2*5120^2 + 2*5120*1024 = 62,914,560 and norms 10,240 per layer
    #   dense layer: + MLP 3*5120*16384 = 251,658,240 -> 314,583,040
    #   MoE layer: + router 5120*128 = 655,360, 128 experts and the shared one 129 * 3*5120*8192 =
    #   129 * 125,829,120 = 16,231,956,480 -> 16,295,536,640
    #   24 * (314,583,040 + 16,295,536,640) + embedding, LM head and final norm 2,068,976,640 = 400,711,848,960
    # Active: 24 * (314,583,040 + 16,295,536,640 - 127 * 125,829,120) + 2,068,976,640 = 17,184,691,200.
    # "400B" is given to two digits (with the 871,932,416 vision encoder, not modelled, 401.58 B).
    total, active, _ = totals("llama-4-maverick")
    assert (total, active) == (400_711_848_960, 17_184_691_200)
    assert round((total + 871_932_416) / 1e10) == 40 and published(active, "17B")


@pytest.mark.parametrize(("name", "fixture"), [
    ("mixtral-8x7b", "mixtral-8x7b-v0.1"), ("qwen3-30b-a3b", "qwen3-30b-a3b"), ("deepseek-v3", "deepseek-v3"),
    ("kimi-k2", "kimi-k2-instruct"), ("gpt-oss-20b", "gpt-oss-20b"),
    ("llama-4-scout", "llama-4-scout-17b-16e-instruct"),
])
def test_moe_entries_are_their_hugging_face_import(name: str, fixture: str) -> None:
    # The entry's fields are the import of its config.json, but for names, source and the pre-training
    # length (which the catalog takes from the models' reports where their configs do not give it).
    skip = {"name", "aliases", "source", "train_seq_len", "train_seq_len_source"}
    imported = load_model(HF / fixture / "config.json")
    assert load_model(name).model_dump(exclude=skip) == imported.model_dump(exclude=skip)


@pytest.mark.parametrize(("name", "train_seq_len", "max_seq_len"), [
    ("gpt3-175b", 2048, 2048),  # Brown et al. 2020 Table 2.1, n_ctx 2048
    ("llama-2-70b", 4096, 4096),  # Llama 2 paper Table 1, 4k context
    ("llama-3-8b", 8192, 8192),  # Llama 3 paper, 8K pre-training sequences
    ("llama-3.1-70b", 8192, 131072),  # 8K pre-training, config max_position_embeddings 131072
    ("mistral-7b", 8192, 32768),  # Mistral 7B paper Table 1 context_len 8192; config 32768
    ("mixtral-8x7b", 32768, 32768),  # Mixtral paper Sec. 2: pre-trained with a 32k context
    ("deepseek-v3", 4096, 163840),  # DeepSeek-V3 report Sec. 4.2: 4K pre-training; config 163840
    ("gpt-oss-120b", 4096, 131072),  # config initial_context_length 4096, YaRN to 131072
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
        # PCIe, or NVLink-C2C to the Grace CPU of a Grace-Hopper/Blackwell superchip
        assert system.host_link.kind in (FabricKind.PCIE, FabricKind.NVLINK_C2C)
        assert system.host_link.bytes_per_s <= up.bytes_per_s


@pytest.mark.parametrize("name", [n for n in SYSTEMS if load_system(n).node_power_w is not None])
def test_node_power_covers_its_gpus(name: str) -> None:
    system = load_system(name)
    assert system.node_power_w >= system.gpus_per_node * system.gpu.tdp_w
