"""Random and adversarial inputs over the `madmax` CLI and Python API; prints the counts by outcome.

    python benchmarks/fuzz.py [--cases 1000] [--seed 0] [--timeout 30] [--jobs 2] [--markdown docs/robustness.md]

Each case is rebuilt from (seed, index) in a worker process, runs once in a fresh temporary folder and
ends in one outcome:

- ok: the CLI exited 0, or the API returned, and every number it printed or returned is finite;
- project_error: the CLI printed one line on stderr and exited non-zero, or the API raised a
  `MadmaxError` with a one-line message;
- multiline_error: the CLI failed with more than one line on stderr (typer's usage box), or a
  `MadmaxError` message spans several lines;
- nonfinite_output: it succeeded but printed or returned Infinity or NaN;
- traceback: any other exception (a Python traceback from the CLI, a bare TypeError from the API);
- hang: no answer within --timeout seconds (the worker is killed and replaced).

Workers are capped at --memory-gib of address space, so a size that would exhaust memory ends in a
MemoryError (a traceback) instead of taking the machine down. The case classes are the bad-input
classes of issue 13 (over-long names, deep nesting, integers with thousands of digits, wrong types in
model, Hugging Face and system files, calibration and validation files, sizes that cannot be simulated,
non-finite numbers, wrong API types) plus random command lines and strategy strings.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import re
import reprlib
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

OUTCOMES = ("ok", "project_error", "multiline_error", "nonfinite_output", "traceback", "hang")
FAILURES = ("multiline_error", "nonfinite_output", "traceback", "hang")
ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "src" / "madmax" / "catalog"
# "infx" is a factor; "Infinity Fabric" (AMD's links, in a schema's prose) is a name, not a number
_NONFINITE = re.compile(r"(?<![\w.])(-?Infinity(?! Fabric)|NaN|-?inf|nan)(?![a-wyzA-Z0-9_.])")

# --- the inputs a case starts from ---------------------------------------------------------------

TINY_MODEL = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
              "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}
TINY_DLRM = {"family": "dlrm", "name": "tiny-dlrm", "num_dense_features": 13, "bottom_mlp": [64, 16],
             "top_mlp": [64, 1], "tables": [{"rows": 1000, "dim": 16, "pooling": 1.0, "count": 4}],
             "interaction": "dot"}
TINY_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
           "intermediate_size": 1536, "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 4,
           "vocab_size": 32000, "max_position_embeddings": 2048, "hidden_act": "silu", "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
TINY_SWEEP = {"name": "fz", "models": "tiny.yaml", "systems": ["dgx-h100"], "num_gpus": [8], "global_batches": 16,
              "seq_lens": 1024, "strategies": ["tp=2"], "whatifs": [{}, {"nic_bandwidth": 2}],
              "train": {"tokens": 1.0e9}}

MODELS = ("llama3-8b", "tiny.yaml", "mixtral-8x7b", "dlrm-a", "gpt3-175b", "tiny-dlrm.yaml", "deepseek-v3")
SYSTEMS = ("dgx-h100", "dgx-a100", "p4d.24xlarge", "gb200-nvl72", "system.yaml")


def _big(digits: int) -> str:
    return "9" * digits


def _bad_scalars(rng: random.Random) -> list[Any]:
    """Values that do not belong where a scalar is expected (file fields, API arguments)."""
    return [[], [1, 2], {"a": 1}, None, "abc", "", True, -1, 0, -0.0, 1.5, 2**40, 2**63, 2**64 + 1, 1e308, "1e3",
            "  ", "x" * rng.choice((300, 5000)), float("inf"), float("-inf"), float("nan"), "nan", "inf",
            f"__BIG{rng.choice((20, 400, 5000))}__", f"__DEEP{rng.choice((50, 2000, 100000))}__", "\x00", "é"]


def _serialize(data: Any, suffix: str) -> str:
    """`data` as JSON or YAML text, with the __BIGn__ and __DEEPn__ markers expanded into integers of n
    digits and n nested lists (which no serializer writes)."""
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    text = re.sub(r"['\"]?__BIG(\d+)__['\"]?", lambda m: _big(int(m.group(1))), text)
    return re.sub(r"['\"]?__DEEP(\d+)__['\"]?", lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)


def _mutate(rng: random.Random, data: dict, rounds: int = 1) -> dict:
    """`data` with fields replaced by bad values, removed, added, or nested (recursing into sub-objects)."""
    data = json.loads(json.dumps(data))
    for _ in range(rounds):
        target = data
        while True:  # walk into a nested mapping or list of mappings now and then
            nested = [k for k, v in target.items() if isinstance(v, dict) or (isinstance(v, list) and v
                                                                               and isinstance(v[0], dict))]
            if not nested or rng.random() < 0.6:
                break
            key = rng.choice(nested)
            target = target[key] if isinstance(target[key], dict) else target[key][0]
        op = rng.random()
        if op < 0.7 and target:
            target[rng.choice(list(target))] = rng.choice(_bad_scalars(rng))
        elif op < 0.8 and target:
            del target[rng.choice(list(target))]
        elif op < 0.9:
            target[rng.choice(("extra", "x" * 300, "name ", ""))] = rng.choice(_bad_scalars(rng))
        elif target:
            key = rng.choice(list(target))
            for _ in range(rng.choice((2, 50))):
                target[key] = [target[key]]
    return data


def _system_entry() -> dict:
    entries = yaml.safe_load((CATALOG / "systems.yaml").read_text(encoding="utf-8"))
    entry = dict(next(e for e in entries if e["name"] == "dgx-h100"))
    entry.pop("aliases", None)
    return entry


def _kernel_lines() -> list[dict]:
    lines = (CATALOG / "calibration" / "h200_kernels.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _published_rows() -> list[str]:
    return (ROOT / "src" / "madmax" / "validate" / "data" / "published_dev.csv").read_text(
        encoding="utf-8").splitlines()[:2]


# --- cases -------------------------------------------------------------------------------------------


class _Short(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return str(x) if x.bit_length() < 128 else f"<int of {x.bit_length()} bits>"


_SHORT = _Short()


@dataclass
class Case:
    """One input: a command line (`argv`) or an API call (`call`, `kwargs`), with files it reads."""

    group: str
    argv: list[str] | None = None
    call: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        text = " ".join(["madmax", *self.argv]) if self.argv is not None else f"{self.call}({_SHORT.repr(self.kwargs)})"
        return text if len(text) < 160 else text[:157] + "..."


def _base_files() -> dict[str, str]:
    return {"tiny.yaml": yaml.safe_dump(TINY_MODEL), "tiny-dlrm.yaml": yaml.safe_dump(TINY_DLRM),
            "system.yaml": yaml.safe_dump(_system_entry())}


def _case(group: str, files: dict[str, str] | None = None, argv: list[str] | None = None,
          call: str | None = None, **kwargs: Any) -> Case:
    return Case(group=group, argv=argv, call=call, kwargs=kwargs, files={**_base_files(), **(files or {})})


def _either(rng: random.Random, group: str, files: dict[str, str], model: str, system: str = "dgx-h100",
            extra: list[str] | None = None, **api: Any) -> Case:
    """The same simulation as a command line or an API call."""
    if rng.random() < 0.5:
        return _case(group, files, argv=["simulate", "-m", model, "-s", system, *(extra or [])])
    if not api and rng.random() < 0.5:
        return _case(group, files, call="inspect", model=model)
    return _case(group, files, call="simulate", model=model, system=system, **api)


def case_long_name(rng: random.Random) -> Case:
    name = rng.choice(("m" * rng.choice((256, 300, 5000, 100000)), "a/" * 3000, "x.yaml" + "y" * 4000,
                       "n" * 255 + ".json", "bad\x00name"))
    where = rng.choice(("model", "system", "inspect", "show", "stack", "calibration", "search", "gpu"))
    if where == "model":
        return _either(rng, "long_name", {}, name)
    if where == "system":
        return _either(rng, "long_name", {}, "llama3-8b", name, num_gpus=8) if rng.random() < 0.5 else \
            _case("long_name", argv=["simulate", "-m", "llama3-8b", "-s", name])
    if where == "inspect":
        return _case("long_name", argv=["inspect", name])
    if where == "show":
        return _case("long_name", argv=["catalog", "show", name])
    if where == "stack":
        return _case("long_name", call="simulate", model="llama3-8b", system="dgx-h100", stack=name)
    if where == "calibration":
        return _case("long_name", argv=["simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--calibration", name])
    if where == "gpu":
        return _case("long_name", argv=["calibrate", "k.jsonl", "--out", "p.yaml", "--gpu", name],
                     files={"k.jsonl": "\n".join(json.dumps(r) for r in _kernel_lines()[:20])})
    return _case("long_name", call="search", model=name, system="dgx-h100", global_batch=16)


def case_deep_nesting(rng: random.Random) -> Case:
    depth = rng.choice((1000, 10000, 100000))
    suffix = rng.choice((".json", ".yaml"))
    kind = rng.choice(("model", "system", "value", "stack", "sweep", "strategy"))
    if kind == "strategy":
        nested: Any = 8
        for _ in range(depth):
            nested = [nested]
        return _case("deep_nesting", call="simulate", model="tiny.yaml", system="dgx-h100", strategy={"tp": nested})
    if kind == "model":
        text = "[" * depth + "]" * depth if rng.random() < 0.5 else "{\"a\": " * depth + "1" + "}" * depth
        return _either(rng, "deep_nesting", {f"deep{suffix}": text}, f"deep{suffix}")
    if kind == "value":
        data = dict(TINY_MODEL, num_layers=f"__DEEP{depth}__")
        return _either(rng, "deep_nesting", {f"deep{suffix}": _serialize(data, suffix)}, f"deep{suffix}")
    if kind == "stack":
        return _case("deep_nesting", {f"stack{suffix}": "[" * depth + "]" * depth}, call="simulate",
                     model="tiny.yaml", system="dgx-h100", stack=f"stack{suffix}")
    if kind == "sweep":
        data = dict(TINY_SWEEP, num_gpus=f"__DEEP{depth}__")
        return _case("deep_nesting", {"sweep.yaml": _serialize(data, ".yaml")},
                     argv=["sweep", "sweep.yaml", "--out", "res", "--workers", "1", "--no-progress"])
    return _either(rng, "deep_nesting", {f"sys{suffix}": "{\"gpu\": " + "[" * depth + "]" * depth + "}"},
                   "tiny.yaml", f"sys{suffix}")


def case_huge_int(rng: random.Random) -> Case:
    digits = rng.choice((30, 400, 4400, 20000))
    big = _big(digits)
    where = rng.choice(("cli", "strategy", "model", "dlrm", "api"))
    if where == "cli":
        option = rng.choice(("--num-gpus", "--global-batch", "--seq-len", "--batch", "--num-requests",
                             "--lora-rank", "--seed", "--request-rate", "--max-ttft"))
        task = ["--task", "inference"] if option in ("--batch", "--num-requests", "--request-rate",
                                                     "--max-ttft") else []
        return _case("huge_int", argv=["simulate", "-m", "tiny.yaml", "-s", "dgx-h100", *task, option, big])
    if where == "strategy":
        key = rng.choice(("tp", "pp", "dp", "mbs", "vp", "cp", "zero", "ep", "recompute_layers"))
        return _either(rng, "huge_int", {}, "tiny.yaml", extra=["--strategy", f"{key}={big}"],
                       strategy=f"{key}={big}")
    if where == "model":
        key = rng.choice(list(TINY_MODEL)[1:])
        return _either(rng, "huge_int", {"big.yaml": _serialize(dict(TINY_MODEL, **{key: f"__BIG{digits}__"}),
                                                                 ".yaml")}, "big.yaml")
    if where == "dlrm":
        key = rng.choice(("rows", "dim", "count", "pooling"))
        data = dict(TINY_DLRM, tables=[dict(TINY_DLRM["tables"][0], **{key: f"__BIG{digits}__"})])
        return _either(rng, "huge_int", {"big.json": _serialize(data, ".json")}, "big.json")
    arg = rng.choice(("num_gpus", "global_batch", "seq_len"))
    return _case("huge_int", call="simulate", model="tiny.yaml", system="dgx-h100", **{arg: 10**digits})


def case_model_file(rng: random.Random) -> Case:
    suffix = rng.choice((".yaml", ".json"))
    data = _mutate(rng, TINY_MODEL, rounds=rng.choice((1, 1, 2)))
    return _either(rng, "model_file_types", {f"m{suffix}": _serialize(data, suffix)}, f"m{suffix}")


def case_hf_config(rng: random.Random) -> Case:
    data = _mutate(rng, TINY_HF, rounds=rng.choice((1, 2)))
    if rng.random() < 0.3:
        data["hidden_act"] = rng.choice((["silu", "gelu"], {"a": 1}, 5, None, "unknown-act"))
    folder = rng.choice(("hf", "x" * 200, "my model"))
    return _either(rng, "hf_config_types", {f"{folder}/config.json": _serialize(data, ".json")},
                   f"{folder}/config.json")


def case_system_file(rng: random.Random) -> Case:
    suffix = rng.choice((".yaml", ".json"))
    data = _mutate(rng, _system_entry(), rounds=rng.choice((1, 2)))
    if rng.random() < 0.3:
        data["gpu"] = rng.choice((["h100-sxm"], {"name": [1]}, 5, None, "h100-sxm" * 100))
    return _either(rng, "system_file_types", {f"s{suffix}": _serialize(data, suffix)}, "tiny.yaml", f"s{suffix}",
                   num_gpus=8)


def case_dlrm(rng: random.Random) -> Case:
    table = dict(TINY_DLRM["tables"][0])
    pick = rng.random()
    if pick < 0.25:
        table["count"] = rng.choice((10_000_000, 10**9, 100_000))
    elif pick < 0.5:
        table["pooling"] = rng.choice((float("inf"), float("nan"), 1e300, -1.0, 0.0, "inf", ".inf"))
    elif pick < 0.7:
        table["rows"] = rng.choice((10**15, 10**30, 2**63))
    data = _mutate(rng, dict(TINY_DLRM, tables=[table]), rounds=1) if pick >= 0.7 else dict(TINY_DLRM, tables=[table])
    suffix = rng.choice((".yaml", ".json"))
    return _either(rng, "dlrm_file", {f"d{suffix}": _serialize(data, suffix)}, f"d{suffix}",
                   extra=["--global-batch", "64"], global_batch=64)


def case_calibrate_kernels(rng: random.Random) -> Case:
    rows = [dict(r) for r in _kernel_lines()]
    lines: list[str] = []
    op = rng.choice(("time", "array", "scalar", "missing", "types", "empty", "kind", "env"))
    for row in rows:
        if op == "time" and row["kind"] != "env" and rng.random() < 0.3:
            key = next(k for k in ("time_s", "fwd_s", "fwd_bwd_s") if k in row)
            row[key] = rng.choice((0, 0.0, -1.0, float("nan"), float("inf"), "fast", None, 1e-300))
        if op == "types" and row["kind"] != "env" and rng.random() < 0.3:
            row[rng.choice(list(row))] = rng.choice(_bad_scalars(rng))
        if op == "missing" and row["kind"] != "env" and rng.random() < 0.2:
            del row[rng.choice([k for k in row if k != "kind"])]
        lines.append(_serialize(row, ".json"))
    if op == "array":
        lines.insert(rng.randrange(len(lines) + 1), json.dumps(rng.choice(([1, 2], [], [{"kind": "gemm"}]))))
    if op == "scalar":
        lines.insert(rng.randrange(1, len(lines) + 1), rng.choice(("5", "\"text\"", "null", "true", "{")))
    if op == "empty":
        lines = lines[:1]
    if op == "kind":
        lines[rng.randrange(len(lines))] = json.dumps({"kind": rng.choice(("unknown", 5, None, ["gemm"]))})
    if op == "env":
        lines[0] = json.dumps({"kind": "env", "name": rng.choice((5, None, ["x"], "x" * 5000))})
    argv = ["calibrate", "k.jsonl", "--out", "p.yaml", "--no-held-out"]
    return _case("calibrate_kernels", {"k.jsonl": "\n".join(lines)}, argv=argv)


def case_calibrate_other(rng: random.Random) -> Case:
    nccl_file = ROOT / "tests" / "validate" / "data" / "all_reduce_perf.txt"
    nccl = nccl_file.read_text(encoding="utf-8") if nccl_file.exists() else "# nThread 1 nGpus 8\n"
    csv = "\n".join(_published_rows())
    op = rng.choice(("nccl_numbers", "nccl_cut", "csv_zero", "binary", "out_dir", "out_missing", "empty",
                     "base", "nothing"))
    files = {"in.txt": nccl, "in.csv": csv}
    argv = ["calibrate", "in.txt", "--out", "p.yaml", "--no-held-out"]
    if op == "nccl_numbers":
        words = nccl.split(" ")
        for _ in range(5):
            i = rng.randrange(len(words))
            if re.fullmatch(r"[\d.]+", words[i]):
                words[i] = rng.choice(("0", "nan", "inf", "-1", "0.00", _big(5000)))
        files["in.txt"] = " ".join(words)
    elif op == "nccl_cut":
        files["in.txt"] = nccl[: rng.randrange(len(nccl))]
    elif op == "csv_zero":
        head, row = _published_rows()
        cells = row.split(",")
        files["in.csv"] = head + "\n" + row.replace(",137,", rng.choice((",0,", ",nan,", ",inf,", ",-5,")))
        argv[1] = "in.csv"
        del cells
    elif op == "binary":
        files["in.txt"] = "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(2000))
    elif op == "out_dir":
        argv[3] = "."
    elif op == "out_missing":
        argv[3] = "missing/dir/p.yaml"
    elif op == "empty":
        files["in.txt"] = ""
    elif op == "base":
        argv += ["--base", rng.choice(("nope", "x" * 5000, "in.csv", "tiny.yaml"))]
    else:
        argv = ["calibrate", "--out", "p.yaml"]
    return _case("calibrate_other", files, argv=argv)


def case_validate(rng: random.Random) -> Case:
    head, row = _published_rows()
    op = rng.choice(("out_dir", "out_missing", "md_dir", "md_missing", "zero", "nan", "junk", "sample", "jobs"))
    files = {"rows.csv": head + "\n" + row}
    argv = ["validate", "rows.csv", "--jobs", "1", "--no-vtrain-stack"]
    if op == "out_dir":
        argv += ["--out", "."]
    elif op == "out_missing":
        argv += ["--out", "missing/folder/rows.csv"]
    elif op == "md_dir":
        argv += ["--markdown", "."]
    elif op == "md_missing":
        argv += ["--markdown", "missing/folder/page.md"]
    elif op in ("zero", "nan"):
        value = "0" if op == "zero" else rng.choice(("nan", "inf", "-inf", "-3", _big(400)))
        files["rows.csv"] = head + "\n" + row.replace(",137,", f",{value},")
    elif op == "junk":
        cells = row.split(",")
        cells[rng.randrange(len(cells))] = rng.choice(("[1]", "x", "", "nan", "0", _big(5000), "-1"))
        files["rows.csv"] = head + "\n" + ",".join(cells)
    elif op == "sample":
        argv += ["--sample", rng.choice(("0", "-1", "abc", _big(30)))]
    else:
        argv[3] = rng.choice(("0", "-2", "x", _big(30)))
    return _case("validate_files", files, argv=argv)


def case_big_sizes(rng: random.Random) -> Case:
    op = rng.choice(("gb40", "gpus_tp3", "gb_mbs3", "gb20", "dlrm_count", "gb_api", "gpus_api", "seq",
                     "requests"))
    if op == "gb40":
        return _either(rng, "big_sizes", {}, rng.choice(("tiny.yaml", "llama3-8b")),
                       extra=["--global-batch", str(2**40)], global_batch=2**40)
    if op == "gpus_tp3":
        return _either(rng, "big_sizes", {}, "tiny.yaml", extra=["--num-gpus", str(2**40), "--strategy", "tp=3"],
                       num_gpus=2**40, strategy="tp=3")
    if op == "gb_mbs3":
        return _either(rng, "big_sizes", {}, "tiny.yaml", extra=["--global-batch", str(2**40), "--strategy", "mbs=3"],
                       global_batch=2**40, strategy="mbs=3")
    if op == "gb20":
        return _either(rng, "big_sizes", {}, "tiny.yaml", extra=["--global-batch", str(2**20), "--strategy",
                                                                 "pp=2,dp=4"], global_batch=2**20,
                       strategy="pp=2,dp=4")
    if op == "dlrm_count":
        data = dict(TINY_DLRM, tables=[dict(TINY_DLRM["tables"][0], count=10_000_000)])
        return _either(rng, "big_sizes", {"d.yaml": yaml.safe_dump(data)}, "d.yaml")
    if op == "gb_api":
        return _case("big_sizes", call="search", model="tiny.yaml", system="dgx-h100",
                     global_batch=rng.choice((2**40, 2**62, 10**30)))
    if op == "gpus_api":
        return _case("big_sizes", call="simulate", model="tiny.yaml", system="dgx-h100",
                     num_gpus=rng.choice((2**40, 2**62, 10**30)))
    if op == "seq":
        return _case("big_sizes", argv=["inspect", "llama3-8b", "--seq-len", rng.choice((str(2**40), str(10**30)))])
    return _case("big_sizes", argv=["simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--task", "inference",
                                    "--mode", "rate", "--request-rate", "1e9", "--num-requests",
                                    rng.choice(("10000000", "100000000")), "--prompt-len", "128",
                                    "--output-len", str(rng.choice((128, 10**9)))])


def case_nonfinite(rng: random.Random) -> Case:
    bad = rng.choice(("nan", "inf", "-inf", "NaN", "Infinity", "1e999", "-0"))
    op = rng.choice(("cli_float", "model", "system", "whatif", "price", "price_file", "expert_load", "tokens",
                     "api_float", "time_to_train", "reliability_file"))
    if op == "cli_float":
        option = rng.choice(("--request-rate", "--max-ttft", "--max-tpot", "--capacity-factor", "--expert-load"))
        moe = option in ("--capacity-factor", "--expert-load")
        extra = [] if moe else ["--task", "inference", "--mode", "rate", "--prompt-len", "64", "--output-len", "8"]
        return _case("nonfinite", argv=["simulate", "-m", "mixtral-8x7b" if moe else "llama3-8b", "-s", "dgx-h100",
                                        *extra, option, bad])
    if op == "model":
        data = dict(TINY_MODEL, **{rng.choice(("norm_eps", "rope_theta", "hidden_size", "num_layers")): float(bad)})
        return _either(rng, "nonfinite", {"m.yaml": yaml.safe_dump(data)}, "m.yaml")
    if op == "system":
        data = _system_entry()
        data[rng.choice(list(data))] = float(bad)
        return _either(rng, "nonfinite", {"s.yaml": yaml.safe_dump(data)}, "tiny.yaml", "s.yaml", num_gpus=8)
    if op in ("whatif", "price_file"):
        spec = dict(TINY_SWEEP)
        if op == "whatif":
            spec["whatifs"] = [{}, {"name": "x", rng.choice(("flops", "nic_bandwidth", "hbm_bandwidth")): float(bad)}]
        else:
            spec["price_per_gpu_hour_usd"] = rng.choice((float(bad), {"dgx-h100": float(bad)}))
        return _case("nonfinite", {"sweep.yaml": yaml.safe_dump(spec)},
                     argv=["sweep", "sweep.yaml", "--out", "res", "--workers", "1", "--no-progress"])
    if op == "price":
        return _case("nonfinite", {"sweep.yaml": yaml.safe_dump(TINY_SWEEP)},
                     argv=["sweep", "sweep.yaml", "--out", "res", "--workers", "1", "--no-progress",
                           "--price", rng.choice((bad, f"dgx-h100={bad}"))])
    if op == "expert_load":
        return _case("nonfinite", call="simulate", model="mixtral-8x7b", system="dgx-h100",
                     expert_load=rng.choice((f"zipf:{bad}", bad, float(bad))))
    if op == "time_to_train":  # simulate --tokens: the goodput model's inputs
        option = rng.choice(("--tokens", "--checkpoint-interval"))
        extra = [] if option == "--tokens" else ["--tokens", "1e12"]
        return _case("nonfinite", argv=["simulate", "-m", "tiny.yaml", "-s", "dgx-h100", "--global-batch", "16",
                                        *extra, option, bad])
    if op == "reliability_file":
        profile = {"name": "r", "failures": [{"component": "gpu", "per": "gpu", "rate_per_hour": 1e-5}],
                   "restart": {"restart_s": 600, "repair_s": 0}, "stragglers": {"speed_sigma": 0.01},
                   "checkpoint": {"node_bytes_per_s": 1e10, "filesystem_bytes_per_s": 1e12, "stall_s": 5}}
        field = rng.choice(("rate_per_hour", "restart_s", "speed_sigma", "node_bytes_per_s", "stall_s"))
        for part in (profile["failures"][0], profile["restart"], profile["stragglers"], profile["checkpoint"]):
            if field in part:
                part[field] = float(bad)
        return _case("nonfinite", {"r.yaml": yaml.safe_dump(profile)},
                     argv=["simulate", "-m", "tiny.yaml", "-s", "dgx-h100", "--global-batch", "16", "--tokens",
                           "1e12", "--reliability", "r.yaml"])
    if op == "tokens":
        return _case("nonfinite", argv=["search", "-m", "tiny.yaml", "-s", "dgx-h100", "--global-batch", "16",
                                        "--objective", "time", "--tokens", bad])
    return _case("nonfinite", call="simulate", model="llama3-8b", system="dgx-h100", task="inference",
                 mode="rate", prompt_len=64, output_len=8,
                 **{rng.choice(("request_rate", "max_ttft", "max_tpot")): float(bad)})


def _api_values(rng: random.Random) -> list[Any]:
    import numpy as np

    return ["8", "8.5", 8.5, np.float64(8.0), np.int64(8), float("nan"), None, True, [8], {"n": 8}, -8, 0, b"8",
            object(), 8 + 0j, np.array([8]), "", 10**400]


def case_api_types(rng: random.Random) -> Case:
    value = rng.choice(_api_values(rng))
    call = rng.choice(("simulate", "simulate", "inspect", "search", "load_model", "load_system", "parse_strategy",
                       "make_task", "load_training_stack"))
    if call == "inspect":
        arg = rng.choice(("model", "seq_len"))
        return _case("api_types", call="inspect", **{"model": "tiny.yaml", arg: value})
    if call in ("load_model", "load_training_stack", "parse_strategy"):
        return _case("api_types", call=call, spec=value)
    if call == "load_system":
        return _case("api_types", call=call, spec=rng.choice(("dgx-h100", value)), num_gpus=value)
    if call == "make_task":
        return _case("api_types", call=call, task=rng.choice(("pretrain", value)),
                     **{rng.choice(("global_batch", "seq_len", "dtype", "lora_rank")): value})
    arg = rng.choice(("num_gpus", "num_gpus", "model", "system", "global_batch", "seq_len", "dtype", "strategy",
                      "task", "stack", "calibration", "finetune", "lora_targets", "expert_load"))
    kwargs = {"model": "tiny.yaml", "system": "dgx-h100", arg: value}
    if call == "search":
        kwargs.setdefault("global_batch", 16)
    return _case("api_types", call=call, **kwargs)


_OPTION_VALUES = {
    "--num-gpus": ("8", "16", "0", "-8", "3", "8.5", "abc", "1e3", "", "nan", " 8"),
    "--global-batch": ("16", "64", "0", "-1", "3", "2.5", "x", "", "1e2"),
    "--seq-len": ("1024", "2048", "0", "-5", "100000", "x", "3"),
    "--dtype": ("bf16", "fp8", "fp16", "fp32", "tf32", "int4", "fp4", "xx", "", "BF16", "int8", "mxfp4", "gptq"),
    "--task": ("pretrain", "finetune", "inference", "x", ""),
    "--finetune": ("full", "lora", "qlora", ""),
    "--lora-rank": ("8", "0", "-1", "x"),
    "--frozen-layers": ("0", "2", "100", "-1"),
    "--lora-targets": ("qkv,out", "up", "x,y", ",", ""),
    "--mode": ("static", "rate", "concurrency", "saturation", "disaggregated", "x"),
    "--batch": ("1", "8", "0", "x", "10000001"),
    "--prompt-len": ("128", "0", "-1", "100000000"),
    "--output-len": ("16", "0", "-1"),
    "--prompt-len-std": ("32", "0", "-1", "1e9", "nan", "inf", "x"),
    "--output-len-std": ("4", "0", "0.5", "-1", "1e308", "x"),
    "--kv-dtype": ("fp8", "bf16", "fp4", "x"),
    "--stack": ("vllm", "trtllm", "megatron-core", "pytorch", "x", ""),
    "--expert-load": ("balanced", "1.3", "zipf:1.1", "zipf:", "zipf:-1", "0.5", "x"),
    "--capacity-factor": ("1.25", "0", "-1", "x"),
    "--calibration": ("missing.yaml", "tiny.yaml", "."),
    "--trace": ("t.json", ".", "missing/t.json"),
    "--prefix-len": ("64", "0", "-1", "127", "128", "1e9", "x"),
    "--prefix-hit": ("0.5", "0", "1", "1.5", "nan", "-0", "x"),
    "--slo": ("p99_ttft=1", "p99_tpot=1e308", "x", ""),
    "--scenario": ("server", "offline", "x"),
    "--speculative": ("eagle", "mtp", "ngram", "medusa", ""),
    "--draft-len": ("3", "0", "17", "x"),
    "--acceptance": ("0.7", "1", "0", "1.5", "nan", "x"),
}
_SEARCH_VALUES = {
    "--objective": ("throughput", "time", "cost", "energy", "x"),
    "--tokens": ("1e9", "0", "-1", "x"),
    "--top": ("1", "0", "-1", "x"),
    "--max-tp": ("1", "2", "0", "-2", "x"),
    "--max-pp": ("1", "2", "0"),
    "--max-mbs": ("1", "0", "x"),
    "--zero": ("1,3", "5", "x", ",", "1,,2"),
    "--recompute": ("none,selective", "x", ","),
    "--orders": ("all", "x", "tp-dp-pp", ","),
    "--exact": ("1", "0", "-1"),
    "--refine": ("0", "10", "-1"),
    "--emb": ("tw", "x", ""),
    "--out": ("o.parquet", "o.csv", "missing/o.parquet", "."),
}


def _strategy(rng: random.Random) -> str:
    keys = ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "mbs", "zero", "recompute", "sp", "shard", "fsdp",
            "pp_layout", "emb", "emb_group", "emb_offload", "tp_overlap", "ep_overlap", "recompute_layers",
            "order", "bogus", "", "TP")
    values = ("1", "2", "4", "8", "3", "0", "-1", "x", "", "1.5", "selective", "full", "none", "tw", "true",
              "on", "E|t*2|L", "tp-dp-pp", "nan", "inf", "1e3", "٣")
    parts = []
    for _ in range(rng.randint(0, 4)):
        key, value = rng.choice(keys), rng.choice(values)
        parts.append(rng.choice((f"{key}={value}", key, f"{key}=", f"={value}")) if rng.random() < 0.1
                     else f"{key}={value}")
    return ",".join(parts)


def case_random_cli(rng: random.Random) -> Case:
    command = rng.choice(("simulate", "simulate", "simulate", "search", "inspect", "catalog", "schema", "query",
                          "report", "bench", "nothing"))
    model, system = rng.choice(MODELS), rng.choice(SYSTEMS)
    if command == "simulate":
        argv = ["simulate", "-m", model, "-s", system]
        options = rng.sample(list(_OPTION_VALUES), rng.randint(0, 4))
        for option in options:
            argv += [option, rng.choice(_OPTION_VALUES[option])]
        if rng.random() < 0.5:
            argv += ["--strategy", _strategy(rng)]
        if rng.random() < 0.2:
            argv.append("--json")
        elif rng.random() < 0.3:
            argv.append("--commands")
    elif command == "search":
        argv = ["search", "-m", rng.choice(("tiny.yaml", "tiny-dlrm.yaml")), "-s", "dgx-h100", "--global-batch",
                rng.choice(("16", "64", "0", "x")), "--refine", "1", "--top", "1"]
        for option in rng.sample(list(_SEARCH_VALUES), rng.randint(0, 3)):
            argv += [option, rng.choice(_SEARCH_VALUES[option])]
    elif command == "inspect":
        argv = ["inspect", rng.choice((*MODELS, "x", "", "."))]
        if rng.random() < 0.5:
            argv += ["--seq-len", rng.choice(("1", "0", "-1", "x", "4096"))]
    elif command == "catalog":
        argv = ["catalog", rng.choice(("list", "show", "x")), rng.choice(("models", "gpus", "systems", "h100-sxm",
                                                                          "x", ""))]
    elif command == "schema":
        argv = ["schema", rng.choice(("model", "system", "gpu", "task", "strategy", "x"))]
    elif command in ("query", "report"):
        argv = [command, rng.choice(("missing", ".", "tiny.yaml"))]
        if command == "query":
            argv.append(rng.choice(("SELECT 1", "SELECT * FROM results", "DROP TABLE x", "")))
    elif command == "bench":
        argv = ["bench", rng.choice(("gpu", "comm", "x")), "--out", rng.choice((".", "missing/x.jsonl"))]
        if argv[1] == "comm":
            argv += ["--nprocs", rng.choice(("0", "-1", "x")), "--backend", rng.choice(("gloo", "x"))]
        if argv[1] == "gpu":
            argv += ["--repeats", rng.choice(("0", "-1", "x")), "--device", rng.choice(("x", "cuda:99"))]
    else:
        argv = rng.choice(([], ["--bogus"], ["x"], ["simulate"], ["simulate", "-m"], ["--help"]))
    return _case("random_cli", argv=argv)


def case_strategy(rng: random.Random) -> Case:
    text = _strategy(rng)
    model = rng.choice(("tiny.yaml", "llama3-8b", "mixtral-8x7b", "tiny-dlrm.yaml"))
    gpus = rng.choice(("8", "16", "32"))
    return _either(rng, "strategy_strings", {}, model, extra=["--num-gpus", gpus, "--strategy", text],
                   num_gpus=int(gpus), strategy=text)


def case_sweep(rng: random.Random) -> Case:
    spec = _mutate(rng, TINY_SWEEP) if rng.random() < 0.6 else dict(TINY_SWEEP)
    op = rng.random()
    if op < 0.2:
        spec["whatifs"] = rng.choice(([], [{}], [{"name": "same"}, {"name": "same"}]))
        spec["codesign"] = {"resources": ["flops"], "factors": [rng.choice((1, 0, -1, float("nan")))]}
    elif op < 0.3:
        # the train amount's goodput: a reliability profile (name, path, mapping) and reliability what-ifs
        spec["train"] = {"tokens": 1e12, "reliability": rng.choice((
            "ideal", "nope", "/etc/passwd", 7, {"name": "x"}, {"name": "x", "failures": [{"component": "gpu",
            "per": "gpu", "rate_per_hour": rng.choice((-1.0, 1e9, float("nan")))}], "restart": {"restart_s": 1,
            "repair_s": 1}, "checkpoint": {"node_bytes_per_s": 1e9, "filesystem_bytes_per_s": 1e12, "stall_s": 1},
            "stragglers": {"speed_sigma": 0}}))}
        spec["whatifs"] = [{}, {rng.choice(("failure_rate", "checkpoint_bandwidth", "restart_time")):
                                rng.choice((0.5, 0, -1, 1e300, float("inf")))}]
    elif op < 0.4:
        spec["num_gpus"] = list(range(8, 8 * 2000, 8))
        spec["global_batches"] = list(range(16, 16 * 2000, 16))
        spec["seq_lens"] = list(range(1, 1000))
    argv = ["sweep", "sweep.yaml", "--out", rng.choice(("res", "res", "sweep.yaml", "missing/res")), "--workers",
            "1", "--no-progress", "--limit", rng.choice(("2", "0", "-1", "x"))]
    return _case("sweep_specs", {"sweep.yaml": _serialize(spec, ".yaml")}, argv=argv)


def case_capacity(rng: random.Random) -> Case:
    """The capacity search's inputs: request rates, SLO texts, lengths, system lists, objectives and caps, each
    valid most of the time so that the search itself runs."""
    def pick(good: tuple[str, ...], bad: tuple[str, ...]) -> str:
        return rng.choice(good) if rng.random() < 0.93 else rng.choice(bad)

    slo = ",".join(pick(("p99_ttft", "p90_tpot", "mean_e2e", "p50_itl", "P99_TTFT"), ("p95_ttft", "ttft", ""))
                   + pick(("=1", "=50ms", "=2 s", "=1e308", "=0.001"), ("=0", "=-1", "=nan", "=inf", "=", "", "=x"))
                   for _ in range(rng.randint(1, 3)))
    argv = ["search", "-m", pick(("tiny.yaml", "llama-3.1-8b"), ("tiny-dlrm.yaml", "x")), "-s",
            pick(("dgx-h100", "dgx-h100,dgx-a100"), (",", "dgx-h100,nope", "x")), "--task", "inference",
            "--prompt-len", pick(("64", "128"), ("0", "-1", "x", "100000000")), "--output-len",
            pick(("8", "16"), ("1", "0", "x")), "--num-requests", pick(("20", "40"), ("0", "-1", "x")),
            "--exact", "1", "--top", "1", "--max-tp", "1", "--max-pp", "1", "--no-progress"]
    if rng.random() < 0.95:
        argv += ["--request-rate", pick(("1", "50", "1e-3"), ("0", "-1", "nan", "inf", "1e300", "x", "1e-300"))]
    if rng.random() < 0.95:
        argv += ["--slo", slo]
    for option, values in (("--objective", ("throughput", "cost", "energy", "time", "x")),
                           ("--num-gpus", ("1", "0", "-1", "x")), ("--price", ("1", "-1", "nan")),
                           ("--mode", ("rate", "static")), ("--global-batch", ("8",)), ("--dtypes", ("fp8", "x")),
                           ("--scenario", ("server", "interactive", "offline", "x", ""))):
        if rng.random() < 0.1:
            argv += [option, rng.choice(values)]
    if rng.random() < 0.3:
        argv.append("--json")
    if rng.random() < 0.35:  # simulate holding a rate (or the highest one) against the SLOs
        argv = ["simulate", "-m", argv[2], "-s", pick(("dgx-h100",), ("dgx-h100,dgx-a100", "x")), "--num-gpus", "1",
                "--task", pick(("inference",), ("pretrain",)), "--mode", pick(("rate",), ("static", "concurrency")),
                "--prompt-len", "64", "--output-len", pick(("8",), ("1",)), "--num-requests", "20",
                "--slo", slo, *(["--request-rate", pick(("2", "1e-3"), ("0", "x"))] if rng.random() < 0.5 else []),
                *(["--seed", "1"] if rng.random() < 0.1 else []), *(["--json"] if rng.random() < 0.3 else []),
                *(["--prompt-len-std", pick(("16", "0"), ("-1", "nan", "1e9"))] if rng.random() < 0.2 else []),
                *(["--output-len-std", pick(("2",), ("-1", "1e9"))] if rng.random() < 0.2 else []),
                *(["--scenario", rng.choice(("server", "offline", "x"))] if rng.random() < 0.2 else [])]
    return _case("capacity", argv=argv)


CASES: dict[str, Callable[[random.Random], Case]] = {
    "long_name": case_long_name, "deep_nesting": case_deep_nesting, "huge_int": case_huge_int,
    "model_file_types": case_model_file, "hf_config_types": case_hf_config, "system_file_types": case_system_file,
    "dlrm_file": case_dlrm, "calibrate_kernels": case_calibrate_kernels, "calibrate_other": case_calibrate_other,
    "validate_files": case_validate, "big_sizes": case_big_sizes, "nonfinite": case_nonfinite,
    "api_types": case_api_types, "random_cli": case_random_cli, "strategy_strings": case_strategy,
    "sweep_specs": case_sweep, "capacity": case_capacity,
}


def make_case(seed: int, index: int, only: str | None = None) -> Case:
    """Case `index` of the run with `seed`; the same pair always gives the same case."""
    rng = random.Random(f"{seed}:{index}")
    names = [only] if only else sorted(CASES)
    return CASES[names[index % len(names)]](rng)


# --- running one case --------------------------------------------------------------------------------


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False, default=str)
    except ValueError:
        return False
    return True


def _resolve(value: Any, folder: Path) -> Any:
    """File names of the case's files as paths inside `folder`."""
    if isinstance(value, str) and value and len(value) < 200 and (folder / value).exists() and value not in (".",):
        return str(folder / value)
    return value


def _call_api(case: Case, folder: Path) -> Any:
    from madmax import api
    from madmax.config.loaders import load_model, load_system
    from madmax.config.strategy import parse_strategy
    from madmax.config.training_stack import load_training_stack
    from madmax.request import make_task
    from madmax.search.api import find

    functions = {"simulate": api.simulate, "inspect": api.inspect, "search": find, "load_model": load_model,
                 "load_system": load_system, "parse_strategy": parse_strategy, "make_task": make_task,
                 "load_training_stack": load_training_stack}
    kwargs = {k: _resolve(v, folder) for k, v in case.kwargs.items()}
    if "spec" in kwargs:  # the loaders' first argument is positional
        return _plain(functions[case.call](kwargs.pop("spec"), **kwargs))
    if case.call == "search":
        kwargs.update(top=1, refine=1)
    result = functions[case.call](**kwargs)
    if case.call == "search":
        from madmax.search.core import summary

        return [summary(result, i) for i in result.top(1)]
    return _plain(result)


def _plain(result: Any) -> Any:
    """A result as plain data, to look for non-finite numbers."""
    if hasattr(result, "to_dict"):
        return result.to_dict()
    return result.model_dump() if hasattr(result, "model_dump") else result


def run_case(case: Case) -> tuple[str, str]:
    """(outcome, one line of detail) of `case`, run in a fresh temporary folder."""
    from madmax.errors import MadmaxError

    with tempfile.TemporaryDirectory(prefix="madmax-fuzz-") as tmp:
        folder = Path(tmp)
        for name, text in case.files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            if case.argv is not None:
                return _run_cli(case.argv)
            try:
                value = _call_api(case, folder)
            except MadmaxError as exc:
                text = str(exc)
                return ("project_error" if "\n" not in text.strip() and text.strip() else "multiline_error",
                        f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}")
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                return "traceback", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            return ("ok", "") if _finite(value) else ("nonfinite_output", "a returned number is not finite")
        finally:
            os.chdir(cwd)


def _run_cli(argv: list[str]) -> tuple[str, str]:
    from typer.testing import CliRunner

    from madmax.cli import app
    from madmax.errors import MadmaxError

    result = CliRunner().invoke(app, argv, catch_exceptions=True)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, MadmaxError):  # main() turns an escaped MadmaxError into its sentence
            return "project_error", f"{type(exc).__name__}: {exc}"
        return "traceback", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    stderr = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code == 0:
        if _NONFINITE.search(result.stdout):
            return "nonfinite_output", _NONFINITE.search(result.stdout).group(0)
        if argv[0] == "sweep" and (columns := _infinite_columns(Path(argv[argv.index("--out") + 1]))):
            return "nonfinite_output", f"sweep rows with infinite {', '.join(columns[:4])}"
        return "ok", ""
    if len(stderr) == 1 and "Traceback" not in stderr[0]:
        return "project_error", stderr[0][:300]
    if argv == []:  # bare `madmax`: typer prints the help (exit 2), which is the answer
        return "ok", ""
    return "multiline_error", f"exit {result.exit_code}: " + " | ".join(s.strip() for s in stderr[:4])[:300]


def _infinite_columns(folder: Path) -> list[str]:
    """Numeric columns of a sweep's Parquet shards that hold an infinity (NaN is a missing value there)."""
    import numpy as np
    import pyarrow.parquet as pq

    found: set[str] = set()
    for shard in folder.rglob("*.parquet"):
        table = pq.read_table(shard)
        for name in table.column_names:
            column = table.column(name).to_numpy(zero_copy_only=False)
            if column.dtype.kind == "f" and np.isinf(column).any():
                found.add(name)
    return sorted(found)


# --- the worker pool ---------------------------------------------------------------------------------


def _serve(conn: multiprocessing.connection.Connection, seed: int, only: str | None, memory_gib: float) -> None:
    if memory_gib > 0:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    while True:
        index = conn.recv()
        if index is None:
            return
        case = make_case(seed, index, only)
        outcome, detail = run_case(case)
        conn.send((index, case.group, case.describe(), outcome, detail))


@dataclass
class _Worker:
    process: multiprocessing.Process
    conn: multiprocessing.connection.Connection
    index: int | None = None
    started: float = 0.0


def run_all(cases: int, seed: int, jobs: int, timeout: float, memory_gib: float, only: str | None = None,
            progress: bool = True) -> list[tuple[int, str, str, str, str]]:
    """Every case's (index, group, description, outcome, detail), each under `timeout` seconds."""
    context = multiprocessing.get_context("fork")
    import madmax.api
    import madmax.cli  # noqa: F401

    def start() -> _Worker:
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, seed, only, memory_gib), daemon=True)
        process.start()
        return _Worker(process, parent)

    pending = list(range(cases))[::-1]
    workers = [start() for _ in range(max(1, jobs))]
    results: list[tuple[int, str, str, str, str]] = []
    while pending or any(w.index is not None for w in workers):
        for w in workers:
            if w.index is None and pending:
                w.index, w.started = pending.pop(), time.monotonic()
                w.conn.send(w.index)
        busy = [w for w in workers if w.index is not None]
        ready = multiprocessing.connection.wait([w.conn for w in busy], timeout=1.0)
        for i, w in enumerate(workers):
            if w.index is None:
                continue
            if w.conn in ready:
                try:
                    results.append(w.conn.recv())
                    w.index = None
                    continue
                except EOFError:  # the worker died (killed by the OS for memory, a crash in C code)
                    case = make_case(seed, w.index, only)
                    results.append((w.index, case.group, case.describe(), "traceback", "worker process died"))
            elif time.monotonic() - w.started > timeout:
                case = make_case(seed, w.index, only)
                results.append((w.index, case.group, case.describe(), "hang", f"no answer in {timeout:g} s"))
            else:
                continue
            w.process.kill()
            w.process.join()
            workers[i] = start()
        if progress:
            print(f"\r{len(results)}/{cases}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    for w in workers:
        w.conn.send(None)
        w.process.join(timeout=5)
        if w.process.is_alive():
            w.process.kill()
    return sorted(results)


# --- report ------------------------------------------------------------------------------------------


def tables(results: list[tuple[int, str, str, str, str]]) -> tuple[Counter, dict[str, Counter]]:
    totals = Counter(r[3] for r in results)
    by_group: dict[str, Counter] = defaultdict(Counter)
    for _, group, _, outcome, _ in results:
        by_group[group][outcome] += 1
    return totals, by_group


def markdown(results: list[tuple[int, str, str, str, str]], args: argparse.Namespace, wall_s: float) -> str:
    totals, by_group = tables(results)
    lines = ["# Robustness: adversarial inputs over the CLI and the Python API", "",
             "Generated by `python benchmarks/fuzz.py --markdown docs/robustness.md` "
             f"({args.cases} cases, seed {args.seed}, {args.timeout:g} s per case, {args.memory_gib:g} GiB "
             f"of address space per worker; {wall_s:.0f} s on this machine). Do not edit by hand.", "",
             "Each case is an adversarial command line or API call (the bad-input classes of issue 13). Outcomes: "
             "**ok** (exit 0 or a returned result, every number finite), **project_error** (one sentence on "
             "stderr and a non-zero exit, or a `MadmaxError` with a one-line message), **multiline_error** "
             "(a usage box or a message of several lines), **nonfinite_output** (Infinity or NaN printed or "
             "returned), **traceback** (any other exception, including MemoryError and RecursionError) and "
             "**hang** (no answer within the per-case timeout).", "",
             f"| outcome | before (commit {BEFORE['commit']}) | now |", "|---|---:|---:|"]
    lines += [f"| {o} | {BEFORE[o]} | {totals.get(o, 0)} |" for o in OUTCOMES]
    lines += ["", f"Before, the run took {BEFORE['wall_s']:,} s, most of it waiting out the hangs."]
    lines += ["", "## By case class", "", "| class | " + " | ".join(OUTCOMES) + " |",
              "|---|" + "---:|" * len(OUTCOMES)]
    for group in sorted(by_group):
        lines.append(f"| {group} | " + " | ".join(str(by_group[group].get(o, 0)) for o in OUTCOMES) + " |")
    failures = [r for r in results if r[3] in FAILURES]
    lines += ["", "## Failures", ""]
    if not failures:
        lines.append("None.")
    for _, group, text, outcome, detail in failures[:40]:
        lines.append(f"- {outcome} ({group}): `{text}`: {detail}")
    if any(text.startswith("madmax sweep") and outcome == "nonfinite_output" for _, _, text, outcome, _ in failures):
        lines += ["", "Non-finite sweep rows come from an infinite price (`--price inf`, `price_per_gpu_hour_usd: "
                  ".inf`) or what-if factor that `madmax.sweep` lets through: its spec schema and `parse_prices` "
                  "are not `Schema` models, and the price and factors reach the system by `model_copy`, which "
                  "does not validate."]
    lines += ["", "## What is refused, and why", "", *REFUSALS]
    return "\n".join(lines) + "\n"


REFUSALS = [
    "- Every number of every model, system, GPU, task and strategy field (nested lists and mappings included) "
    "must be finite; an integer at most 2**53 (exact in a float64; an integer of thousands of digits is refused "
    "with its digit count), any other number at most 1e30 in magnitude (`madmax.config.checks.check_numbers`, "
    "run by the base `Schema` on every field). Kernel JSONL rows and validation CSV numbers must be finite and "
    "above 0; kernel times at least a nanosecond.",
    "- Sizes that would never answer are bounded, each with its reason in the message: at most 2**20 GPUs "
    "(`num_gpus`), 16,384 layers, 32,768 embedding tables, a global batch of 2**31 - 1, 100 levels of nesting "
    "in a file.",
    "- The pipeline schedule is built per micro-batch: the program builder writes and the engine schedules each "
    "micro-batch's forward and backward on each chunk (about 0.2 ms and 10 kB apiece). A training iteration may "
    "have at most 2**16 (micro-batch, chunk) pairs, micro-batches per replica x pp x vp (the largest validated "
    "run, GPT 530B, has 39,200); a larger global batch is refused with the largest one the strategy allows. "
    "Simulating the periodic schedule in time independent of the micro-batch count is not done.",
    "- The allowed divisors an error lists are computed from the prime factors (Pollard's rho), so "
    "`--num-gpus 1048576 --strategy tp=3` or `--global-batch 2**40 --strategy mbs=3` answer at once.",
    "- Names that are not strings (a number, None, a list) and names too long for a path are refused with the "
    "field and the type; long values are shown cut to 160 characters.",
    "- CLI usage errors (a wrong type, a missing option, an unknown command) are one line, \"error: ...; see "
    "`madmax CMD --help`\", with exit status 2, as every other error; `validate --out/--markdown` and "
    "`calibrate --out` naming a folder or a missing folder are refused before anything is simulated.",
]

# Counts of this benchmark on the code before the hardening of issue 13 (commit 78baa2c, same cases, seed 0,
# 30 s per case, 2 workers); the page shows them beside the current counts.
BEFORE = {"commit": "78baa2c", "wall_s": 1027, "ok": 154, "project_error": 478, "multiline_error": 59,
          "nonfinite_output": 23, "traceback": 239, "hang": 47}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0, help="Seconds a case may take before it is a hang.")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--memory-gib", type=float, default=4.0, help="Address space per worker (0: no limit).")
    parser.add_argument("--only", choices=sorted(CASES), help="Run one case class.")
    parser.add_argument("--show", type=int, default=20, help="Failures listed.")
    parser.add_argument("--markdown", type=Path, help="Also write the report page here.")
    parser.add_argument("--verbose", action="store_true", help="Print every case with its outcome.")
    args = parser.parse_args()
    start = time.perf_counter()
    results = run_all(args.cases, args.seed, args.jobs, args.timeout, args.memory_gib, args.only,
                      progress=sys.stderr.isatty())
    wall = time.perf_counter() - start
    totals, by_group = tables(results)
    print(f"{len(results)} cases in {wall:.0f} s: " + ", ".join(f"{o} {totals.get(o, 0)}" for o in OUTCOMES))
    width = max(map(len, by_group))
    for group in sorted(by_group):
        print(f"  {group:<{width}}  " + "  ".join(f"{o} {by_group[group].get(o, 0)}" for o in OUTCOMES
                                                   if by_group[group].get(o)))
    if args.verbose:
        for index, group, text, outcome, detail in results:
            print(f"[{index}] {outcome} {group}: {text}\n      {detail}")
    shown = [r for r in results if r[3] in FAILURES][: args.show]
    for index, group, text, outcome, detail in shown:
        print(f"[{index}] {outcome} {group}: {text}\n      {detail}")
    if args.markdown:
        args.markdown.write_text(markdown(results, args, wall), encoding="utf-8")
        print(f"wrote {args.markdown}")
    if math.isfinite(wall) and any(totals.get(o) for o in FAILURES):
        sys.exit(1)


if __name__ == "__main__":
    main()
