"""Bad values of this session's inputs (pipeline layout, recompute choice, TP overlap, training stacks,
block-scaled dtypes, rail-optimized scale-out, usable memory, slow arrivals): each one line on stderr
and exit 2 from the CLI, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from madmax.cli import app

SIM = ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100"]  # 32 layers, 8 GPUs
GPU = {"name": "g", "flops_per_s": {"bf16": "989 TFLOPS"}, "hbm_bytes": "80 GiB", "hbm_bytes_per_s": "3.35 TB/s",
       "tdp_w": "700 W"}
NODE = {"name": "n", "gpu": "h100-sxm", "gpus_per_node": 8,
        "scale_up": {"kind": "nvlink", "bytes_per_s": "450 GB/s", "latency_s": "1.9 us", "domain_size": 8},
        "scale_out": {"kind": "infiniband", "bytes_per_s": "400 Gbit/s", "latency_s": "4 us"}}


def strategy(text: str) -> list[str]:
    return [*SIM, "--strategy", text]


def node(**scale_out: object) -> dict:
    return {**NODE, "scale_out": {**NODE["scale_out"], **scale_out}}


def gpu(**fields: object) -> dict:
    return {**NODE, "gpu": {**GPU, **fields}}


# (id, arguments, a system or stack file's content or None, words of the message)
CASES = [
    ("pp-layout-unknown-symbol", strategy("pp=2,pp_layout=abc"), None, ["strategy.pp_layout='abc'", "'a'"]),
    ("pp-layout-nested-group", strategy("pp=2,pp_layout=E((t))*32|L"), None, ["strategy.pp_layout", "allowed"]),
    ("pp-layout-huge-count", strategy("pp=2,pp_layout=Et*99999999999999999999|L"), None,
     ["more than 100000 symbols"]),
    ("pp-layout-wrong-layers", strategy("pp=2,pp_layout=Et*16|t*15L"), None, ["31 transformer layers", "32"]),
    ("pp-embedding-not-bool", strategy("pp=2,pp_embedding=2"), None, ["strategy.pp_embedding='2'", "boolean"]),
    ("pp-loss-nan", strategy("pp=2,pp_loss=nan"), None, ["strategy.pp_loss='nan'", "boolean"]),
    # 32 layers + embedding = 33 slots over pp*vp = 8 chunks
    ("pp-embedding-uneven", strategy("pp=2,vp=4,pp_embedding=1"), None, ["33 slots", "allowed"]),
    ("recompute-unknown", strategy("recompute=sometimes"), None, ["strategy.recompute='sometimes'", "auto"]),
    ("recompute-layers-zero", strategy("recompute=full,recompute_layers=0"), None,
     ["strategy.recompute_layers='0'", "greater than 0"]),
    ("recompute-layers-negative", strategy("recompute=full,recompute_layers=-3"), None,
     ["strategy.recompute_layers='-3'", "greater than 0"]),
    ("recompute-layers-huge", strategy(f"recompute=full,recompute_layers={10**30}"), None,
     [f"strategy.recompute_layers='{10**30}'", "has 31 digits", "2**53"]),
    ("recompute-layers-nan", strategy("recompute=full,recompute_layers=nan"), None,
     ["strategy.recompute_layers='nan'", "integer"]),
    ("recompute-layers-text", strategy("recompute=full,recompute_layers=abc"), None,
     ["strategy.recompute_layers='abc'", "integer"]),
    ("recompute-layers-auto", strategy("recompute=auto,recompute_layers=4"), None, ["needs recompute=full"]),
    ("tp-overlap-without-tp", strategy("tp=1,tp_overlap=1"), None, ["strategy.tp_overlap", "tp_overlap=0"]),
    ("tp-overlap-not-bool", strategy("tp=2,tp_overlap=abc"), None, ["strategy.tp_overlap='abc'", "boolean"]),
    ("overlap-cost-nan", strategy("tp=2,overlap_cost=nan"), None, ["strategy.overlap_cost='nan'", "boolean"]),
    ("stack-unknown", [*SIM, "--stack", "nosuch"], None, ["stack 'nosuch'", "megatron-core"]),
    ("stack-missing-file", [*SIM, "--stack", "/nonexistent/x.yaml"], None, ["/nonexistent/x.yaml", "megatron-core"]),
    ("stack-serving-engine", [*SIM, "--stack", "vllm"], None, ["serving engine", "megatron-core"]),
    ("stack-wrong-type", [*SIM, "--stack", "FILE"], {"name": "s", "unfused": {"norm": {"kernels": "abc",
                                                                                      "bytes_factor": 2}}},
     ["stack.unfused.norm.kernels='abc'"]),
    ("stack-nan", [*SIM, "--stack", "FILE"], {"name": "s", "weight_cast_bytes_per_param": float("nan")},
     ["stack.weight_cast_bytes_per_param=nan", "finite"]),
    ("stack-inf", [*SIM, "--stack", "FILE"], {"name": "s", "weight_cast_bytes_per_param": float("inf")},
     ["stack.weight_cast_bytes_per_param=inf", "finite"]),
    ("stack-factor-nan", [*SIM, "--stack", "FILE"],
     {"name": "s", "unfused": {"loss": {"kernels": 2, "bytes_factor": float("nan")}}},
     ["stack.unfused.loss.bytes_factor=nan"]),
    ("mxfp8-on-h100", [*SIM, "--dtype", "mxfp8"], None, ["dtype=mxfp8", "h100-sxm", "allowed"]),
    ("nvfp4-on-h100", [*SIM, "--dtype", "nvfp4"], None, ["dtype=fp4", "h100-sxm", "allowed"]),
    ("mxfp8-inference", [*SIM, "--dtype", "mxfp8", "--task", "inference"], None, ["task.dtype=mxfp8", "allowed"]),
    ("nodes-per-leaf-zero", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(nodes_per_leaf=0),
     ["system.scale_out.nodes_per_leaf=0", "greater than 0"]),
    ("nodes-per-leaf-negative", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(nodes_per_leaf=-2),
     ["system.scale_out.nodes_per_leaf=-2"]),
    ("nodes-per-leaf-nan", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(nodes_per_leaf=float("nan")),
     ["system.scale_out.nodes_per_leaf=nan"]),
    ("spine-zero", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(spine_oversubscription=0),
     ["system.scale_out.spine_oversubscription=0", "greater than or equal to 1"]),
    ("spine-nan", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(spine_oversubscription=float("nan")),
     ["system.scale_out.spine_oversubscription=nan", "finite"]),
    ("spine-inf", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], node(spine_oversubscription=float("inf")),
     ["system.scale_out.spine_oversubscription=inf", "finite"]),
    ("usable-negative", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], gpu(usable_bytes=-5),
     ["system.gpu.usable_bytes=-5"]),
    ("usable-nan", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], gpu(usable_bytes=float("nan")),
     ["system.gpu.usable_bytes=nan", "finite"]),
    # 90 GiB = 9.664e10 B of an 80 GiB = 8.59e10 B part
    ("usable-above-hbm", ["simulate", "-m", "llama-3-8b", "-s", "FILE"], gpu(usable_bytes="90 GiB"),
     ["usable_bytes=9.664e+10 exceeds hbm_bytes=8.59e+10", "allowed: at most hbm_bytes"]),
    ("request-rate-tiny", [*SIM, "--task", "inference", "--mode", "rate", "--prompt-len", "128", "--output-len",
                           "16", "--request-rate", "1e-300"], None, ["task.request_rate=1e-300", "0.001"]),
]


@pytest.mark.parametrize(("args", "content", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_new_input_exits_2_with_one_line(args: list[str], content: dict | None, words: list[str],
                                             tmp_path: Path) -> None:
    if content is not None:
        path = tmp_path / "input.yaml"
        path.write_text(yaml.safe_dump(content))
        args = [str(path) if a == "FILE" else a for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
