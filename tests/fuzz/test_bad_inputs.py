"""One regression test per class of bad input the fuzz benchmark (benchmarks/fuzz.py) found: each is refused
with one sentence (a MadmaxError from the API, one `error:` line and exit 2 from the CLI), at once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from madmax import api
from madmax.cli import app
from madmax.config.checks import digits, divisors, prime_factors, shown, whole_number
from madmax.config.loaders import load_model, load_system
from madmax.config.strategy import parse_strategy
from madmax.errors import CatalogError, ConfigError, MadmaxError, StrategyError

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
        "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}
DLRM = {"family": "dlrm", "name": "tiny-dlrm", "num_dense_features": 13, "bottom_mlp": [64, 16],
        "top_mlp": [64, 1], "tables": [{"rows": 1000, "dim": 16, "pooling": 1.0, "count": 4}]}
runner = CliRunner()


def one_line_error(args: list[str]) -> str:
    """The CLI's message for `args`, checked to be one `error:` line with exit status 2."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def write(path: Path, data: dict | str) -> str:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return str(path)


# --- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["m" * 300, "a/" * 3000, "n" * 255 + ".json", "bad\x00name"])
def test_a_name_too_long_for_a_path_is_an_unknown_name(name: str) -> None:
    for field, load in (("model", load_model), ("system", load_system)):
        with pytest.raises(ConfigError if name.endswith(".json") else CatalogError) as info:
            load(name)
        if name.endswith(".json"):
            assert str(info.value) == f"{field} file {shown(name)} does not exist"
        else:
            assert str(info.value).startswith(f"{field} {shown(name)} is neither a catalog name nor a file; see")


def test_a_long_name_is_shown_cut_to_one_short_line() -> None:
    message = one_line_error(["inspect", "x" * 100_000])
    assert len(message) < 300
    assert message.startswith("error: model 'xxxxxxxxxx") and "..." in message


def test_long_calibration_and_base_names_are_refused_with_their_field() -> None:
    with pytest.raises(ConfigError, match=r"^calibration='y+\.\.\.y+' is not a usable path \(File name too long\)"):
        api.simulate("llama3-8b", "dgx-h100", calibration="y" * 5000)


@pytest.mark.parametrize(("value", "kind"), [(5, "int"), (None, "NoneType"), (np.float64(8.0), "float64"),
                                             (["llama3-8b"], "list")])
def test_a_model_that_is_not_a_name_is_refused_with_its_type(value: object, kind: str) -> None:
    with pytest.raises(ConfigError) as info:
        api.simulate(value, "dgx-h100")
    assert str(info.value) == (f"model={shown(value)} is of type {kind}; allowed: a catalog name, a file path or "
                               "a mapping of fields")


# --- files: nesting, digits, types -----------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("depth", [150, 20_000])
def test_a_deeply_nested_file_is_refused(tmp_path: Path, suffix: str, depth: int) -> None:
    path = write(tmp_path / f"deep{suffix}", '{"name": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(ConfigError, match=r"^model file '.*' is nested (too deeply to read|more than 100 levels "
                                          r"deep); allowed: at most 100 levels of lists and mappings$"):
        load_model(path)


def test_a_deeply_nested_strategy_mapping_is_one_short_sentence() -> None:
    nested: object = 8
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(StrategyError, match=r"^strategy\.tp=\[\[\[\[\.\.\.\]\]\]\]: Input should be a valid integer$"):
        parse_strategy({"tp": nested})


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_an_integer_of_thousands_of_digits_in_a_file_is_refused(tmp_path: Path, suffix: str) -> None:
    text = (json.dumps(TINY) if suffix == ".json" else yaml.safe_dump(TINY)).replace("512", "9" * 5000)
    with pytest.raises(ConfigError, match=r"holds a number of more than 4,300 digits; allowed: integers up to "
                                          r"2\*\*53$"):
        load_model(write(tmp_path / f"big{suffix}", text))


def test_an_integer_beyond_2_53_is_refused_with_its_digits(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model({**TINY, "hidden_size": 10**400})
    assert str(info.value) == ("model.hidden_size=<an integer of 401 digits>: has 401 digits; allowed: at most "
                               "9,007,199,254,740,992 (2**53) in magnitude")


@pytest.mark.parametrize(("field", "value", "words"), [
    ("num_layers", [1, 2], "model.num_layers: Input should be a valid integer"),
    ("name", {"a": 1}, "model.name: Input should be a valid string"),
    ("family", ["decoder"], "model.family=['decoder'] is unknown; allowed: decoder"),
    ("num_layers", math.inf, "model.num_layers=inf: Input should be a finite number"),
])
def test_a_list_dict_or_infinity_where_a_scalar_belongs_is_refused(field: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_model({**TINY, field: value})
    assert str(info.value).startswith(words), str(info.value)


def test_a_system_file_with_a_list_for_its_gpu_is_refused(tmp_path: Path) -> None:
    from madmax.config.loaders import catalog_entries

    entry = {k: v for k, v in catalog_entries("systems")["dgx-h100"].items() if k != "aliases"}
    with pytest.raises(ConfigError, match=r"^system\.gpu"):
        load_system(write(tmp_path / "s.yaml", {**entry, "gpu": ["h100-sxm"]}))
    with pytest.raises(ConfigError, match=r"^system\.gpus_per_node=inf: Input should be a finite number"):
        load_system(write(tmp_path / "s.yaml", {**entry, "gpus_per_node": math.inf}))


def test_a_hugging_face_activation_list_is_refused(tmp_path: Path) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
              "intermediate_size": 1536, "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 4,
              "vocab_size": 32000, "max_position_embeddings": 2048, "hidden_act": ["silu", "gelu"]}
    (tmp_path / "hf").mkdir()
    with pytest.raises(ConfigError, match=r"field 'hidden_act'=\['silu', 'gelu'\] is not supported"):
        load_model(write(tmp_path / "hf" / "config.json", json.dumps(config)))


# --- sizes ------------------------------------------------------------------------------------------


def test_factored_divisors_match_counting() -> None:
    for n in [*range(1, 400), 720720, 2**20, 3 * 2**40]:
        assert divisors(n) == [d for d in range(1, min(n, 10**6) + 1) if n % d == 0] or n > 10**6
    assert divisors(2**40) == [2**k for k in range(41)]
    assert prime_factors(998244353 * 1000000007) == {998244353: 1, 1000000007: 1}
    assert prime_factors(2**53 - 1) == {6361: 1, 69431: 1, 20394401: 1}
    assert len(divisors(2**53)) == 54


def test_num_gpus_beyond_the_largest_cluster_is_refused_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        api.simulate(TINY, "dgx-h100", num_gpus=2**40, strategy="tp=3")
    assert str(info.value) == ("num_gpus=1099511627776 exceeds 1,048,576, five times the largest cluster built (rank "
                               "placement holds an entry per GPU); allowed: an integer from 1 to 1,048,576")


def test_tp3_on_the_largest_cluster_lists_the_divisors_at_once() -> None:
    with pytest.raises(StrategyError) as info:
        api.simulate(TINY, "dgx-h100", num_gpus=2**20, strategy="tp=3")
    assert str(info.value) == ("tp*pp*cp=3*1*1=3 does not divide num_gpus=1048576; allowed products: 1, 2, 4, 8, "
                               "16, 32, 64, 128, 256, 512, 1024, 2048, ...")


def test_mbs3_with_a_global_batch_of_2_30_lists_the_allowed_mbs_at_once() -> None:
    with pytest.raises(StrategyError) as info:
        api.simulate(TINY, "dgx-h100", global_batch=2**30, strategy="mbs=3")
    assert str(info.value) == ("global_batch=1073741824 is not a multiple of dp*mbs=8*3=24; allowed mbs: 1, 2, 4, "
                               "8, 16, 32, 64, 128, 256, 512, 1024, 2048, ...")
    with pytest.raises(ConfigError, match=r"^task\.global_batch=1099511627776: Input should be less than or equal "
                                          r"to 2147483647$"):  # 2**40 is beyond any global batch
        api.simulate(TINY, "dgx-h100", global_batch=2**40, strategy="mbs=3")


@pytest.mark.parametrize(("global_batch", "strategy", "steps", "most"), [
    (2**30, "pp=1", "134,217,728", "524,288"),  # 2**30 / dp 8 micro-batches, one chunk; 2**16 * 8
    (2**20, "pp=2,dp=4", "524,288", "131,072"),  # 2**18 micro-batches on 2 stages; 2**16 / 2 * 4
])
def test_a_schedule_of_more_than_2_16_steps_is_refused(global_batch: int, strategy: str, steps: str,
                                                       most: str) -> None:
    with pytest.raises(StrategyError) as info:
        api.simulate(TINY, "dgx-h100", global_batch=global_batch, strategy=strategy)
    assert f"{steps} (micro-batch, chunk) steps" in str(info.value)
    assert str(info.value).endswith(f"at most 65,536; allowed: global_batch up to {most} with "
                                    f"dp*mbs={8 if strategy == 'pp=1' else 4}*1, or a larger mbs or dp")


def test_a_global_batch_beyond_2_31_is_refused_by_the_search_too() -> None:
    from madmax.search.api import find

    with pytest.raises(ConfigError) as info:
        find(TINY, "dgx-h100", global_batch=2**40, top=1)
    assert str(info.value) == "task.global_batch=1099511627776: Input should be less than or equal to 2147483647"


def test_a_dlrm_with_ten_million_tables_is_refused() -> None:
    model = {**DLRM, "tables": [{**DLRM["tables"][0], "count": 10_000_000}]}
    with pytest.raises(ConfigError, match=r"^model: has 10,000,000 tables .* at most 32,768 are simulated"):
        load_model(model)


@pytest.mark.parametrize("pooling", [math.inf, math.nan, ".inf"])
def test_a_non_finite_pooling_is_refused(tmp_path: Path, pooling: object) -> None:
    text = yaml.safe_dump({**DLRM, "tables": [{**DLRM["tables"][0], "pooling": 7.0}]}).replace("7.0", str(pooling))
    with pytest.raises(ConfigError, match=r"^model\.tables\.0\.pooling=.*(finite|greater than 0)"):
        load_model(write(tmp_path / "d.yaml", text))


def test_a_model_of_2_40_layers_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        api.inspect({**TINY, "num_layers": 2**40})
    assert str(info.value) == "model.num_layers=1099511627776: Input should be less than or equal to 16384"


def test_a_vision_transformer_of_2_40_layers_or_pixels_is_refused() -> None:
    vit = {"family": "vit", "name": "tiny-vit", "image_size": 64, "patch_size": 16, "num_layers": 2,
           "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256, "num_classes": 10}
    assert api.inspect(vit)["seq_len"] == 17  # (64 / 16)^2 patches and the class token
    with pytest.raises(ConfigError, match=r"^model\.num_layers=1099511627776: Input should be less than or equal "
                                          r"to 16384$"):
        api.inspect({**vit, "num_layers": 2**40})
    with pytest.raises(ConfigError) as info:  # (2**40 / 16)^2 + 1 = 2**72 + 1 tokens, beyond 2**53
        api.inspect({**vit, "image_size": 2**40})
    assert str(info.value) == ("model: image_size=1099511627776 / patch_size=16 gives 4,722,366,482,869,645,213,697 "
                               "tokens per image; allowed: at most 9,007,199,254,740,992 (2**53)")


def test_inspect_of_a_huge_model_prints_finite_flops() -> None:
    info = api.inspect({**TINY, "hidden_size": 2**40, "num_heads": 1, "num_kv_heads": 1})
    assert math.isfinite(info["forward_flops_per_token"]) and info["forward_flops_per_token"] > 0


# --- API types -------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_gpus", ["8", 8.0, np.float64(8.0), np.int64(8)])
def test_num_gpus_takes_whole_numbers_as_every_integer_field(num_gpus: object) -> None:
    assert load_system("dgx-h100", num_gpus).cluster_gpus == 8


@pytest.mark.parametrize(("num_gpus", "words"), [
    (8.5, "num_gpus=8.5 is not a whole number of GPUs"), (math.nan, "num_gpus=nan is not a whole number of GPUs"),
    (True, "num_gpus=True is not a whole number of GPUs"), ("eight", "num_gpus='eight' is not a whole number of GPUs"),
    ([8], "num_gpus=[8] is not a whole number of GPUs"), (0, "num_gpus=0 must be a positive number of GPUs"),
])
def test_num_gpus_of_a_wrong_type_or_value_is_a_config_error(num_gpus: object, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        api.simulate("llama3-8b", "dgx-h100", num_gpus=num_gpus)
    assert str(info.value) == f"{words}; allowed: an integer from 1 to 1,048,576"


def test_whole_number_reads_digits_without_converting_them() -> None:
    assert whole_number("1e3", "n") == 1000
    assert digits(10**5000) == 5001 and digits(10**5000 - 1) == 5000 and digits(0) == 1
    with pytest.raises(ConfigError, match=r"^n=<an integer of 5,001 digits> exceeds"):
        whole_number(10**5000, "n")


@pytest.mark.parametrize("strategy", [5, 8.0, ["tp=8"]])
def test_a_strategy_of_a_wrong_type_is_a_strategy_error(strategy: object) -> None:
    with pytest.raises(StrategyError, match=r"^strategy=.* is of type \w+; allowed: a string such as 'tp=8,pp=4'"):
        parse_strategy(strategy)


@pytest.mark.parametrize("seq_len", ["x", 0, 2.5, None])
def test_inspect_seq_len_of_a_wrong_type_is_a_config_error(seq_len: object) -> None:
    if seq_len is None:
        assert api.inspect(TINY)["seq_len"] == 1024
        return
    with pytest.raises(ConfigError, match=r"^seq_len="):
        api.inspect(TINY, seq_len=seq_len)


@pytest.mark.parametrize("tokens", [math.inf, math.nan, -1.0, "many"])
def test_search_tokens_must_be_a_finite_positive_number(tokens: object) -> None:
    from madmax.search.api import find

    with pytest.raises(ConfigError, match=r"^tokens=.*; allowed: a finite number of tokens to train above 0"):
        find(TINY, "dgx-h100", global_batch=16, objective="time", tokens=tokens, top=1)


@pytest.mark.parametrize("load", [10**400, "zipf:inf", "inf", math.nan])
def test_expert_load_out_of_range_is_a_config_error(load: object) -> None:
    with pytest.raises(ConfigError, match=r"^task\.expert_load="):
        api.simulate("mixtral-8x7b", "dgx-h100", expert_load=load)


def test_a_madmax_error_message_is_one_line() -> None:
    assert str(ConfigError("a\nb\r\nc")) == "a b c"
    assert isinstance(ConfigError("x"), MadmaxError)


# --- CLI --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (["simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--num-gpus", "8.5"], "Invalid value for '--num-gpus'"),
    (["simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--lora-rank", "9" * 400],
     "task.lora_rank=<an integer of 400 digits>: has 400 digits"),
    (["nosuch"], "No such command 'nosuch'; see `root --help`"),
    (["calibrate", "--out", "p.yaml"], "Missing argument"),
    (["validate", "--sample", "abc"], "Invalid value for '--sample'"),
])
def test_usage_errors_are_one_line(args: list[str], words: str) -> None:
    assert words in one_line_error(args)


def test_no_arguments_still_prints_the_help() -> None:
    result = runner.invoke(app, [])
    assert "Usage:" in result.output and "simulate" in result.output


# --- calibrate and validate inputs ------------------------------------------------------------------


def kernel_lines() -> list[dict]:
    from importlib import resources

    text = resources.files("madmax.catalog").joinpath("calibration/h200_kernels.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()][:30]


@pytest.mark.parametrize(("time_s", "shown_value"), [(0, "0"), (math.nan, "nan"), (-1e-3, "-0.001"),
                                                     (1e-300, "1e-300"), (10**400, "<an integer of 401 digits>")])
def test_a_kernel_time_of_zero_or_nan_is_refused_with_its_line(tmp_path: Path, time_s: object,
                                                               shown_value: str) -> None:
    rows = kernel_lines()
    number = next(i for i, r in enumerate(rows) if r["kind"] == "gemm")
    rows[number]["time_s"] = time_s
    text = "\n".join(json.dumps(r) for r in rows)
    message = one_line_error(["calibrate", write(tmp_path / "k.jsonl", text), "--out", str(tmp_path / "p.yaml")])
    assert message == (f"error: kernel file k.jsonl:{number + 1} field 'time_s'={shown_value} is not a positive "
                       "finite number; allowed: a size, shape, rate or time above 1e-09")


@pytest.mark.parametrize("line", ["[1, 2]", "5", "null", '{"kind": 5}'])
def test_a_kernel_line_that_is_not_an_object_with_a_kind_is_refused(tmp_path: Path, line: str) -> None:
    rows = [json.dumps(r) for r in kernel_lines()]
    text = "\n".join([rows[0], line, *rows[1:]])
    message = one_line_error(["calibrate", write(tmp_path / "k.jsonl", text), "--out", str(tmp_path / "p.yaml")])
    assert message.startswith("error: kernel file k.jsonl:2 is not a JSON object with a 'kind' string; got ")


def test_calibrate_out_that_is_a_folder_is_refused_before_fitting(tmp_path: Path) -> None:
    text = "\n".join(json.dumps(r) for r in kernel_lines())
    message = one_line_error(["calibrate", write(tmp_path / "k.jsonl", text), "--out", str(tmp_path)])
    assert message == f"error: --out={shown(str(tmp_path))} is a folder; allowed: a file path"


def published_csv(tmp_path: Path, value: str = "137") -> str:
    from importlib import resources

    lines = resources.files("madmax.validate").joinpath("data/published_dev.csv").read_text(
        encoding="utf-8").splitlines()
    return write(tmp_path / "rows.csv", lines[0] + "\n" + lines[1].replace(",137,", f",{value},") + "\n")


@pytest.mark.parametrize(("option", "where"), [("--out", "."), ("--out", "missing/rows.csv"),
                                               ("--markdown", "."), ("--markdown", "missing/page.md")])
def test_validate_outputs_in_a_folder_or_a_missing_folder_are_refused_first(tmp_path: Path, option: str,
                                                                            where: str) -> None:
    path = tmp_path / where
    message = one_line_error(["validate", published_csv(tmp_path), option, str(path), "--jobs", "1"])
    if where == ".":
        assert message == f"error: {option}={shown(str(path))} is a folder; allowed: a file path"
    else:
        assert message == (f"error: {option}={shown(str(path))} is in a folder that does not exist "
                           f"({shown(str(path.parent))}); allowed: a file in an existing folder")


@pytest.mark.parametrize("value", ["0", "nan", "-3", "inf"])
def test_a_measured_value_of_zero_or_nan_is_refused(tmp_path: Path, value: str) -> None:
    message = one_line_error(["validate", published_csv(tmp_path, value), "--jobs", "1"])
    assert message == (f"error: rows.csv:2 column 'value'={value!r} is not a positive finite number; allowed: a "
                       "size, a degree or a measured value above 0")
