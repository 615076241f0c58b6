"""The sweep file: expansion into points, stable keys, hardware what-ifs, and bad files."""

from __future__ import annotations

import pytest

from madmax.config.loaders import load_system
from madmax.errors import ConfigError
from madmax.sweep.spec import load_sweep
from madmax.sweep.whatif import apply_whatif


def test_points_are_the_product_of_the_axes(tmp_path, make_spec):
    # 1 model x 2 systems x 2 sizes x 2 strategies x 2 what-ifs = 16
    points = list(load_sweep(make_spec(tmp_path)).points())
    assert len(points) == 16
    assert len({p.key for p in points}) == 16
    assert [p.index for p in points] == list(range(16))
    assert {p.whatif for p in points} == {"baseline", "nic_bandwidth x2"}


def test_keys_are_stable_and_ignore_spelling(tmp_path, make_spec, base_spec):
    # An alias of the system and a reordered strategy string are the same points; a different price is not.
    a = [p.key for p in load_sweep(make_spec(tmp_path / "a")).points()]
    b = [p.key for p in load_sweep(make_spec(tmp_path / "b", {
        **base_spec, "systems": ["aws-p4d.24xlarge", "DGX-H100"], "strategies": ["tp=2,pp=1", "pp=1,tp=8"]})).points()]
    c = [p.key for p in load_sweep(make_spec(tmp_path / "c", {**base_spec, "price_per_gpu_hour_usd": 1.0})).points()]
    assert a == b
    assert not set(a) & set(c)


def test_groups_override_and_union(tmp_path, make_spec, base_spec):
    spec = {**base_spec, "groups": [{"name": "small", "num_gpus": 8}, {"name": "big", "num_gpus": 16, "whatifs": [{}]}]}
    points = list(load_sweep(make_spec(tmp_path, spec)).points())
    # small: 2 systems x 1 size x 2 strategies x 2 what-ifs = 8; big: 2 x 1 x 2 x 1 = 4
    assert [p.group for p in points].count("small") == 8 and [p.group for p in points].count("big") == 4


def test_codesign_generates_each_resource_and_all(tmp_path, make_spec, base_spec):
    spec = {**base_spec, "whatifs": None, "codesign": {"resources": ["flops", "nic_latency"], "factors": [2, 4]}}
    points = [p for p in load_sweep(make_spec(tmp_path, spec)).points() if p.system_name == "p4d.24xlarge"
              and p.num_gpus == 8 and p.strategy == "tp=2"]
    # baseline + 2 factors x (2 resources + all) = 7; a latency improved 2x is halved
    assert [p.whatif for p in points] == ["baseline", "flops x2", "nic_latency x2", "all x2", "flops x4",
                                          "nic_latency x4", "all x4"]
    assert dict(points[2].scales) == {"nic_latency": 0.5}
    assert (points[3].whatif_resource, points[3].whatif_factor) == ("all", 2)


def test_whatif_scales_the_system():
    base = load_system("dgx-a100", 16)
    scaled = apply_whatif(base, {"flops": 2, "hbm_capacity": 0.5, "nic_bandwidth": 4, "nvlink_latency": 0.5})
    # A100: 312 TFLOP/s bf16 -> 624; 80 GB -> 40 GB; 200 Gbit/s = 25 GB/s -> 100 GB/s; NVLink 1.9 us -> 0.95 us
    assert scaled.gpu.flops_per_s["bf16"] == pytest.approx(2 * base.gpu.flops_per_s["bf16"])
    assert scaled.gpu.hbm_bytes == pytest.approx(base.gpu.hbm_bytes / 2)
    assert scaled.scale_out.bytes_per_s == pytest.approx(100e9)
    assert scaled.scale_up.latency_s == pytest.approx(0.95e-6)
    assert scaled.gpu.hbm_bytes_per_s == base.gpu.hbm_bytes_per_s and scaled.num_gpus == 16
    assert scaled.price_per_gpu_hour_usd == base.price_per_gpu_hour_usd


@pytest.mark.parametrize(("change", "words"), [
    ({"modles": ["x"]}, ["sweep", "'modles' is not a field", "allowed: name, mode, models"]),
    ({"models": ["llama-9"]}, ["sweep.models.0", "'llama-9'", "neither a catalog name nor a file"]),
    ({"systems": None}, ["sweep.systems", "is required"]),
    ({"num_gpus": [-8]}, ["sweep.num_gpus.0=-8", "greater than 0"]),
    ({"tasks": "inference"}, ["sweep.tasks", "'inference'", "allowed: pretrain, finetune"]),
    ({"dtypes": "fp7"}, ["sweep.dtypes", "'fp7'", "allowed: bf16"]),
    ({"strategies": ["tp=two"]}, ["sweep.strategies.0='tp=two'", "integer"]),
    ({"whatifs": [{"flopz": 2}]}, ["sweep.whatifs.0", "'flopz' is not a field", "allowed: name, flops"]),
    ({"whatifs": [{"flops": 0}]}, ["sweep.whatifs.0.flops=0", "greater than 0"]),
    ({"whatifs": [{"flops": float("inf")}]}, ["sweep.whatifs.0.flops", "not a finite number"]),
    ({"price_per_gpu_hour_usd": float("inf")}, ["sweep.price_per_gpu_hour_usd", "not a finite number"]),
    ({"price_per_gpu_hour_usd": {"dgx-h100": float("nan")}}, ["sweep.price_per_gpu_hour_usd", "not a finite"]),
    ({"train": {"tokens": 1e9, "samples": 5}}, ["sweep.train", "exactly one of tokens or samples"]),
    ({"price_per_gpu_hour_usd": {"p9": 3}}, ["sweep.price_per_gpu_hour_usd.p9", "not a system of this sweep"]),
    ({"mode": "search", "global_batches": None}, ["sweep.global_batches", "required with mode=search"]),
    ({"mode": "serach"}, ["sweep.mode='serach'", "'simulate'", "'search'"]),
    ({"groups": [{"models": "nope"}]}, ["sweep.groups.0.models.0", "'nope'"]),
    ({"stacks": ["fsdp2", "fsdp9"]}, ["sweep.stacks.1", "'fsdp9'", "allowed: megatron-core"]),
    ({"stacks": ["vllm"]}, ["sweep.stacks.0", "stack='vllm' is a serving engine", "allowed for training"]),
])
def test_bad_spec_names_the_field(tmp_path, make_spec, base_spec, change, words):
    with pytest.raises(ConfigError) as info:
        load_sweep(make_spec(tmp_path, {**base_spec, **change}))
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_search_needs_candidates_for_non_decoder_models(tmp_path, make_spec, base_spec):
    spec = {**base_spec, "mode": "search", "models": "dlrm-a", "strategies": None, "seq_lens": None}
    with pytest.raises(ConfigError, match=r"sweep.models.0='dlrm-a' is a dlrm model.*give strategies"):
        load_sweep(make_spec(tmp_path, spec))


@pytest.mark.parametrize("factor", [0.0, -1.0, float("inf"), float("nan")])
def test_whatif_factor_must_be_positive_and_finite(factor):
    with pytest.raises(ConfigError, match=r"whatif.flops=.* must be a positive, finite multiplier"):
        apply_whatif(load_system("dgx-h100"), {"flops": factor})


@pytest.mark.parametrize("item", ["inf", "dgx-h100=inf", "nan", "-1", "x"])
def test_price_option_must_be_a_finite_non_negative_number(item):
    from madmax.sweep.runner import parse_prices

    with pytest.raises(ConfigError, match="must be SYSTEM=USD or USD per GPU-hour"):
        parse_prices([item])


def test_stacks_are_an_axis_and_leave_other_keys_alone(tmp_path, make_spec, base_spec):
    # Two stacks double the 16 points; a sweep that names no stack keeps the keys it always had, and naming the
    # default stack is a different point (its key says which stack ran), though it computes the same row.
    plain = list(load_sweep(make_spec(tmp_path / "a")).points())
    both = list(load_sweep(make_spec(tmp_path / "b", {**base_spec, "stacks": ["megatron-core", "FSDP2"]})).points())
    assert len(both) == 2 * len(plain) == 32
    assert {p.stack_name for p in both} == {"megatron-core", "fsdp2"}
    assert {p.stack for p in plain} == {None} and not {p.key for p in plain} & {p.key for p in both}
    again = [p.key for p in load_sweep(make_spec(tmp_path / "c")).points()]
    assert again == [p.key for p in plain]


def test_a_stack_file_is_found_beside_the_sweep(tmp_path, make_spec, base_spec):
    import yaml

    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"name": "mine", "description": "a stack of my own",
                                                        "weight_cast_bytes_per_param": 6}))
    points = list(load_sweep(make_spec(tmp_path, {**base_spec, "stacks": ["mine.yaml"]})).points())
    assert {p.stack_name for p in points} == {"mine"} and all(str(p.stack).endswith("mine.yaml") for p in points)
