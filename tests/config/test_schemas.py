"""Input schemas, strategy grammar and rules, loaders.

Bad input is one sentence naming the field and what is allowed (STYLE.md section 8).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from madmax.config.hardware import GPU, System
from madmax.config.loaders import load_gpu, load_model, load_system, validate
from madmax.config.model import DecoderModel
from madmax.config.strategy import STRATEGY_KEYS, Axis, Recompute, Strategy, parse_strategy, resolve_strategy
from madmax.config.task import Task
from madmax.errors import CatalogError, ConfigError, MadmaxError, StrategyError

GPU_DATA: dict[str, Any] = {
    "name": "test-gpu", "flops_per_s": {"bf16": "989 TFLOPS"}, "hbm_bytes": "80 GiB",
    "hbm_bytes_per_s": "3.35 TB/s", "tdp_w": "700 W",
}
SYSTEM_DATA: dict[str, Any] = {
    "name": "test-node", "gpu": GPU_DATA, "gpus_per_node": 8,
    "scale_up": {"kind": "nvlink", "bytes_per_s": "450 GB/s", "latency_s": "2 us", "domain_size": 8},
    "scale_out": {"kind": "infiniband", "bytes_per_s": "400 Gbit/s", "latency_s": "5 us"},
}
MODEL_DATA: dict[str, Any] = {
    "name": "tiny", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2,
    "ffn_hidden_size": 256, "vocab_size": 1000, "max_seq_len": 128,
}


def with_(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with the dotted `path` set to `value`."""
    out = json.loads(json.dumps(data))
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


def config_error(schema: type, data: dict[str, Any], field: str) -> str:
    with pytest.raises(ConfigError) as info:
        validate(schema, data, field)
    return str(info.value)


# --- valid inputs -------------------------------------------------------------------------------


def test_valid_inputs_parse_units_to_si() -> None:
    system = validate(System, SYSTEM_DATA, "system")
    assert system.gpu.hbm_bytes == 80 * 2**30
    assert system.gpu.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert system.scale_out.bytes_per_s == 50e9  # 400e9 bits / 8
    assert system.scale_up.latency_s == pytest.approx(2e-6)
    assert system.cluster_gpus == 8  # one node when num_gpus is unset
    model = validate(DecoderModel, MODEL_DATA, "model")
    assert (model.kv_heads, model.head_width, model.default_seq_len) == (2, 16, 128)  # 64 / 4 = 16


def test_schemas_are_frozen() -> None:
    model = validate(DecoderModel, MODEL_DATA, "model")
    with pytest.raises(ValidationError):
        model.num_layers = 3  # type: ignore[misc]


# --- unknown keys (extra="forbid") --------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "data", "field", "path", "where"),
    [
        (GPU, GPU_DATA, "gpu", "hbm_gb", "gpu.hbm_gb"),
        (System, SYSTEM_DATA, "system", "nodes", "system.nodes"),
        (System, SYSTEM_DATA, "system", "scale_out.speed", "system.scale_out.speed"),
        (System, SYSTEM_DATA, "system", "gpu.hbm", "system.gpu.hbm"),
        (DecoderModel, MODEL_DATA, "model", "layers", "model.layers"),
        (Task, {"kind": "pretrain"}, "task", "batchsize", "task.batchsize"),
    ],
)
def test_unknown_keys_are_rejected_naming_the_key(schema: type, data: dict, field: str, path: str,
                                                  where: str) -> None:
    message = config_error(schema, with_(data, path, 1), field)
    # top-level keys: "task.batchsize is not a field of task; allowed: ..."; nested: pydantic's wording
    assert message.startswith(f"{where} is not a field of {field}; allowed: ") or (
        message.startswith(f"{where}=1: ") and "not permitted" in message)


def test_unknown_strategy_field_is_rejected_by_the_schema_too() -> None:
    with pytest.raises(ValidationError):
        Strategy.model_validate({"tp": 2, "tensor_parallel": 2})


# --- zero and negative sizes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "data", "field", "path", "value", "where"),
    [
        (GPU, GPU_DATA, "gpu", "hbm_bytes", 0, "gpu.hbm_bytes"),
        (GPU, GPU_DATA, "gpu", "hbm_bytes", "-80 GB", "gpu.hbm_bytes"),
        (GPU, GPU_DATA, "gpu", "hbm_bytes_per_s", "0 TB/s", "gpu.hbm_bytes_per_s"),
        (GPU, GPU_DATA, "gpu", "tdp_w", -700, "gpu.tdp_w"),
        (System, SYSTEM_DATA, "system", "gpus_per_node", 0, "system.gpus_per_node"),
        (System, SYSTEM_DATA, "system", "num_gpus", -8, "system.num_gpus"),
        (System, SYSTEM_DATA, "system", "scale_up.domain_size", 0, "system.scale_up.domain_size"),
        (System, SYSTEM_DATA, "system", "scale_out.bytes_per_s", "0 Gbit/s", "system.scale_out.bytes_per_s"),
        (DecoderModel, MODEL_DATA, "model", "num_layers", 0, "model.num_layers"),
        (DecoderModel, MODEL_DATA, "model", "hidden_size", -64, "model.hidden_size"),
        (DecoderModel, MODEL_DATA, "model", "num_heads", 0, "model.num_heads"),
        (DecoderModel, MODEL_DATA, "model", "vocab_size", 0, "model.vocab_size"),
        (DecoderModel, MODEL_DATA, "model", "max_seq_len", -1, "model.max_seq_len"),
        (Task, {"kind": "pretrain"}, "task", "global_batch", 0, "task.global_batch"),
        (Task, {"kind": "pretrain"}, "task", "seq_len", -2048, "task.seq_len"),
        (Task, {"kind": "inference"}, "task", "batch", 0, "task.batch"),
        (Task, {"kind": "inference"}, "task", "output_len", 0, "task.output_len"),
    ],
)
def test_zero_or_negative_sizes_are_rejected(schema: type, data: dict, field: str, path: str, value: Any,
                                            where: str) -> None:
    message = config_error(schema, with_(data, path, value), field)
    assert message.startswith(f"{where}=")
    assert "greater than 0" in message


def test_negative_latency_is_rejected_zero_is_allowed() -> None:
    message = config_error(System, with_(SYSTEM_DATA, "scale_out.latency_s", "-1 us"), "system")
    assert message.startswith("system.scale_out.latency_s=") and "greater than or equal to 0" in message
    assert validate(System, with_(SYSTEM_DATA, "scale_out.latency_s", 0), "system").scale_out.latency_s == 0


def test_peak_flops_must_be_positive_and_present() -> None:
    assert "flops_per_s.bf16 must be > 0" in config_error(GPU, with_(GPU_DATA, "flops_per_s.bf16", 0), "gpu")
    assert "flops_per_s must name at least one dtype" in config_error(
        GPU, with_(GPU_DATA, "flops_per_s", {}), "gpu")


def test_a_bad_unit_names_the_field_and_an_example() -> None:
    message = config_error(GPU, with_(GPU_DATA, "hbm_bytes_per_s", "fast"), "gpu")
    assert message.startswith("gpu.hbm_bytes_per_s='fast': ") and "'3.35 TB/s'" in message


@pytest.mark.parametrize(
    ("schema", "data", "field", "path", "value", "words"),
    [
        (DecoderModel, MODEL_DATA, "model", "activation", "tanh",
         ["model.activation='tanh'", "'gelu'", "'silu'"]),
        (DecoderModel, MODEL_DATA, "model", "norm", "batchnorm", ["model.norm='batchnorm'", "'rmsnorm'"]),
        (DecoderModel, MODEL_DATA, "model", "num_kv_heads", 3, ["num_kv_heads=3", "num_heads=4"]),
        (DecoderModel, MODEL_DATA | {"num_kv_heads": None}, "model", "num_heads", 5,
         ["hidden_size=64", "num_heads=5", "head_dim"]),
        (Task, {"kind": "pretrain"}, "task", "kind", "train",
         ["task.kind='train'", "'pretrain'", "'inference'"]),
        (Task, {"kind": "pretrain"}, "task", "dtype", "int2",
         ["dtype='int2'", "allowed: bf16, fp16, fp8, fp32"]),
        (Task, {"kind": "pretrain"}, "task", "dtype", "int8",
         ["dtype=int8 applies to inference", "allowed for pretrain: bf16, fp16, fp8, fp32"]),
        (Task, {"kind": "finetune"}, "task", "lora_targets", ["mlp"],
         ["'mlp'", "allowed: down, gate, out, qkv, up"]),
        (Task, {"kind": "pretrain"}, "task", "frozen_layers", 2, ["frozen_layers", "'finetune'"]),
        (System, SYSTEM_DATA, "system", "num_gpus", 12, ["num_gpus=12", "gpus_per_node=8"]),
        (System, SYSTEM_DATA, "system", "scale_up.kind", "wifi", ["system.scale_up.kind='wifi'", "'nvlink'"]),
    ],
)
def test_out_of_range_values_name_field_and_allowed(schema: type, data: dict, field: str, path: str,
                                                   value: Any, words: list[str]) -> None:
    message = config_error(schema, with_(data, path, value), field)
    for word in words:
        assert word in message


def test_head_dim_lifts_the_divisibility_rule() -> None:
    # hidden 64 over 5 heads is not whole; an explicit head_dim of 16 makes the shape well defined.
    data = MODEL_DATA | {"num_heads": 5, "num_kv_heads": 5, "head_dim": 16}
    model = validate(DecoderModel, data, "model")
    assert model.head_width == 16


# --- strategy grammar ---------------------------------------------------------------------------

FULL = "tp=8,pp=4,dp=32,cp=1,ep=1,vp=1,mbs=1,zero=1,recompute=selective,sp=1"


def test_strategy_round_trips_through_describe() -> None:
    s = parse_strategy(FULL)
    assert (s.tp, s.pp, s.dp, s.cp, s.ep, s.vp, s.mbs, s.zero) == (8, 4, 32, 1, 1, 1, 1, 1)
    assert s.recompute is Recompute.SELECTIVE and s.sequence_parallel
    assert s.describe() == FULL
    assert parse_strategy(s.describe()) == s


def test_strategy_defaults_and_aliases() -> None:
    s = parse_strategy(None)
    assert (s.tp, s.pp, s.dp, s.zero, s.recompute) == (1, 1, None, 1, None)  # recompute: chosen when unset
    assert parse_strategy(" tp = 2 , ").tp == 2  # spaces and a trailing comma
    assert parse_strategy("fsdp=1").zero == 3  # FSDP is ZeRO-3
    assert parse_strategy("fsdp=0").zero == 0
    assert parse_strategy("vpp=2,micro_batch=4").vp == 2
    assert parse_strategy({"tp": 4}) == parse_strategy("tp=4")
    assert parse_strategy(s) is s


@pytest.mark.parametrize("spec", ["tp=8,foo=1", {"tp": 2, "foo": 1}])
def test_unknown_strategy_key_names_the_allowed_keys(spec: str | dict) -> None:
    with pytest.raises(StrategyError) as info:
        parse_strategy(spec)
    message = str(info.value)
    assert "'foo'" in message
    assert "allowed: " + ", ".join(STRATEGY_KEYS) in message
    assert "tp, pp, dp, cp, ep, vp, mbs, zero" in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tp=0", ["strategy.tp='0'", "greater than 0"]),
        ("tp=two", ["strategy.tp='two'", "integer"]),
        ("zero=4", ["strategy.zero='4'", "less than or equal to 3"]),
        ("recompute=some", ["strategy.recompute='some'", "allowed: none, selective, full, auto"]),
        ("order=tp-dp", ["order='tp-dp'", "tp-cp-ep-dp-pp"]),
        ("tp", ["'tp'", "key=value"]),
        ("tp=", ["'tp='", "key=value"]),
    ],
)
def test_bad_strategy_values_name_field_and_allowed(text: str, words: list[str]) -> None:
    with pytest.raises(StrategyError) as info:
        parse_strategy(text)
    for word in words:
        assert word in str(info.value)


# --- strategy rules (resolve_strategy) ----------------------------------------------------------

# A Llama-3.1-70B-like shape: 64 query heads, 8 KV heads, 80 layers.
HEADS = {Axis.TP: [("num_heads", 64), ("num_kv_heads", 8)]}


def resolve(text: str, num_gpus: int, *, global_batch: int | None = None, experts: bool = False,
            seq_len: int = 8192) -> tuple[Strategy, int]:
    return resolve_strategy(parse_strategy(text), num_gpus=num_gpus, model_name="llama-3.1-70b",
                            constraints=HEADS, num_pipeline_units=80, has_experts=experts,
                            global_batch=global_batch, seq_len=seq_len)


def strategy_error(text: str, num_gpus: int, **kwargs: Any) -> str:
    with pytest.raises(StrategyError) as info:
        resolve(text, num_gpus, **kwargs)
    return str(info.value)


def test_resolve_fills_dp_and_the_default_batch() -> None:
    # 512 GPUs / (tp 8 * pp 4 * cp 1) = dp 16; default global batch dp*mbs*pp = 16*1*4 = 64.
    s, global_batch = resolve("tp=8,pp=4", 512)
    assert (s.dp, global_batch) == (16, 64)
    s, global_batch = resolve(FULL, 1024, global_batch=1024)  # 1024 / 32 = 32 = the given dp
    assert (s.dp, global_batch) == (32, 1024)


def test_tp_not_dividing_kv_heads() -> None:
    # tp=16 divides the 64 query heads but not the 8 KV heads; common divisors of 64 and 8: 1, 2, 4, 8.
    message = strategy_error("tp=16", 128)
    assert message == "strategy.tp=16 does not divide num_kv_heads=8 of llama-3.1-70b; allowed: 1, 2, 4, 8"


def test_product_not_dividing_gpus() -> None:
    # tp*pp*cp = 8*4*1 = 32 does not divide 48; the divisors of 48 are allowed.
    message = strategy_error("tp=8,pp=4", 48)
    assert message.startswith("tp*pp*cp=8*4*1=32 does not divide num_gpus=48")
    assert message.endswith("allowed products: 1, 2, 3, 4, 6, 8, 12, 16, 24, 48")


def test_dp_mismatch() -> None:
    # 512 / 32 = 16, so dp=32 is impossible; the only allowed value is 16.
    message = strategy_error("tp=8,pp=4,dp=32", 512)
    assert message.startswith("strategy.dp=32 ")
    assert "num_gpus=512" in message and "set dp=16" in message


def test_vp_without_pp() -> None:
    message = strategy_error("vp=2", 8)
    assert message.startswith("strategy.vp=2 ") and "pp > 1" in message and "allowed with pp=1: 1" in message


def test_ep_on_a_dense_model() -> None:
    message = strategy_error("ep=2", 8)
    assert message.startswith("strategy.ep=2 ") and "mixture-of-experts" in message
    assert message.endswith("allowed: 1")
    assert resolve("ep=2", 8, experts=True)[0].ep == 2


def test_global_batch_not_a_multiple_of_dp_times_mbs() -> None:
    # dp=8, mbs=2: 24 sequences are 3 per replica; mbs must divide 3, so 1 or 3.
    message = strategy_error("mbs=2", 8, global_batch=24)
    assert message == "global_batch=24 is not a multiple of dp*mbs=8*2=16; allowed mbs: 1, 3"
    # 20 is not even a multiple of dp=8.
    message = strategy_error("mbs=2", 8, global_batch=20)
    assert message.startswith("global_batch=20 ") and "dp=8" in message


def test_interleaved_schedule_needs_microbatches_multiple_of_pp() -> None:
    # 8 GPUs, pp=4 -> dp=2; global batch 6 -> 6/(2*1) = 3 micro-batches, not a multiple of pp=4.
    message = strategy_error("pp=4,vp=2", 8, global_batch=6)
    assert "vp=2" in message and "(3)" in message and "multiple of pp=4" in message
    # 8 -> 4 micro-batches per replica: allowed.
    assert resolve("pp=4,vp=2", 8, global_batch=8)[1] == 8


def test_other_rules() -> None:
    assert strategy_error("pp=8,vp=20", 8).startswith("strategy.pp*vp=8*20 exceeds the 80 layers")
    assert strategy_error("cp=3", 24) == "strategy.cp=3 does not divide seq_len=8192; allowed: 1, 2, 4, 8"
    assert strategy_error("shard=3", 8).endswith("allowed: 1, 2, 4, 8")  # divisors of dp=8


# --- loaders ------------------------------------------------------------------------------------


def load_error(loader: Any, spec: Any, error: type[MadmaxError] = ConfigError) -> str:
    with pytest.raises(error) as info:
        loader(spec)
    return str(info.value)


@pytest.mark.parametrize("loader,field", [(load_model, "model"), (load_system, "system")])
@pytest.mark.parametrize("name", ["missing.yaml", "missing.json", "missing.yml"])
def test_missing_file(tmp_path: Path, loader: Any, field: str, name: str) -> None:
    path = tmp_path / name
    assert load_error(loader, str(path)) == f"{field} file {str(path)!r} does not exist"
    assert load_error(loader, path) == f"{field} file {str(path)!r} does not exist"


@pytest.mark.parametrize("loader,field", [(load_model, "model"), (load_system, "system")])
@pytest.mark.parametrize(("name", "text"), [("bad.yaml", "a: [1, 2\n"), ("bad.json", '{"a": 1,}')])
def test_malformed_file(tmp_path: Path, loader: Any, field: str, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_error(loader, path).startswith(f"{field} file {str(path)!r} is not valid YAML/JSON: ")


@pytest.mark.parametrize("loader,field", [(load_model, "model"), (load_system, "system")])
@pytest.mark.parametrize(("name", "text", "kind"), [("list.json", "[1, 2]", "list"),
                                                    ("list.yaml", "- a\n- b\n", "list"),
                                                    ("scalar.yaml", "42\n", "int")])
def test_file_that_is_not_a_mapping(tmp_path: Path, loader: Any, field: str, name: str, text: str,
                                    kind: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_error(loader, path) == f"{field} file {str(path)!r} must hold a mapping of fields, got {kind}"


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00")
    assert "cannot be read" in load_error(load_model, path)


@pytest.mark.parametrize(
    ("loader", "name", "kind", "close"),
    [(load_model, "llama-3.1-40b", "models", "llama-3.1-405b"),
     (load_system, "dgx-h10", "systems", "dgx-h100")],
)
def test_unknown_name_suggests_close_names(loader: Any, name: str, kind: str, close: str) -> None:
    message = load_error(loader, name, CatalogError)
    assert f"{name!r} is neither a catalog name nor a file" in message
    assert "did you mean" in message and close in message
    assert f"madmax catalog list {kind}" in message


def test_unknown_name_without_close_names() -> None:
    message = load_error(load_gpu, "zzzz", CatalogError)
    assert message == "gpu 'zzzz' is neither a catalog name nor a file; see `madmax catalog list gpus`"


def test_catalog_model_by_name_and_alias() -> None:
    assert load_model("llama-3.1-405b").name == "llama-3.1-405b"
    assert load_model("META-LLAMA/Llama-3.1-405B").name == "llama-3.1-405b"  # aliases, any case


def test_model_file_of_our_schema(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(MODEL_DATA))
    assert load_model(path) == validate(DecoderModel, MODEL_DATA, "model")
    path.write_text(yaml.safe_dump(with_(MODEL_DATA, "num_layers", 0)))
    assert load_error(load_model, path).startswith("model.num_layers=0: ")
    path.write_text(yaml.safe_dump(MODEL_DATA | {"family": "cnn"}))
    assert load_error(load_model, path).startswith("model.family='cnn' is unknown; allowed: decoder, dlrm, vit")


def test_system_file_and_num_gpus(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    # PyYAML reads 1555e9 (no dot) as a string; the unit parser accepts it.
    path.write_text(yaml.safe_dump(with_(SYSTEM_DATA, "gpu.hbm_bytes_per_s", "1555e9")))
    system = load_system(path, num_gpus=16)
    assert (system.gpu.hbm_bytes_per_s, system.cluster_gpus) == (1555e9, 16)
    assert load_system(path, num_gpus=4).cluster_gpus == 4  # part of one node
    with pytest.raises(ConfigError) as info:
        load_system(path, num_gpus=12)
    assert str(info.value) == ("num_gpus=12 is not a whole number of test-node nodes of 8 GPUs; "
                               "allowed: 1..8 or a multiple of 8")
    with pytest.raises(ConfigError, match=r"^num_gpus=0 must be a positive number of GPUs; allowed: an integer "
                                          r"from 1 to 1,048,576$"):
        load_system(path, num_gpus=0)


def test_system_file_with_unknown_gpu_name(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(with_(SYSTEM_DATA, "gpu", "h1000")))
    message = load_error(load_system, path, CatalogError)
    assert message.startswith("gpu 'h1000' is neither a catalog name nor a file") and "h100" in message


def test_catalog_systems_and_gpus_load() -> None:
    assert load_gpu("h100").name == "h100-sxm"
    system = load_system("dgx-h100", num_gpus=16)
    assert (system.gpu.name, system.cluster_gpus) == ("h100-sxm", 16)
