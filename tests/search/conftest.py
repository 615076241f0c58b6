"""A small search problem shared by the search tests: a 4-layer model on 8 H100s with 3 GiB each.

The GPU memory is cut so that some candidates do not fit (0.6 to 2.6 GiB of it is the runtime reserve:
the CUDA context and the communicators of the candidate's process groups), which exercises the memory
rule; everything else is the catalog dgx-h100. MOE_CASE is its mixture-of-experts sibling: one dense
layer, three MoE layers of 16 experts of 1,024 (top 2, one shared expert), 16 sequences, whose experts'
state does not fit unless expert parallelism or ZeRO spreads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from madmax.config.loaders import find_in_catalog

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 512, "num_heads": 8, "num_kv_heads": 4,
        "ffn_hidden_size": 1536, "is_gated_ffn": True, "vocab_size": 32000, "max_seq_len": 1024}


def cut_node(system: str, gpu_name: str, hbm: str, name: str) -> dict:
    """The catalog `system` with its GPU's memory cut to `hbm`, so that some candidates do not fit."""
    gpu = dict(find_in_catalog("gpus", gpu_name))
    gpu["hbm_bytes"] = hbm
    gpu.pop("usable_bytes", None)  # the driver's figure is of the real part
    node = dict(find_in_catalog("systems", system))
    node.update(name=name, gpu=gpu)
    return node


def small_node() -> dict:
    return cut_node("dgx-h100", "h100-sxm", "3 GiB", "small-h100")


# 8 GPUs, 8 sequences of 1024 tokens; the filters keep the exhaustive check under a second.
CASE = {"model": TINY, "system": small_node(), "num_gpus": 8, "global_batch": 8, "seq_len": 1024,
        "recompute": ["none", "full"], "zero": [0, 2, 3]}


MOE = {**TINY, "name": "tiny-moe", "moe": {"num_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 1024,
                                           "shared_experts": 1, "first_dense_layers": 1}}
MOE_CASE = {**CASE, "model": MOE, "global_batch": 16}


@pytest.fixture
def case() -> dict:
    return dict(CASE)


@pytest.fixture
def moe_case() -> dict:
    return dict(MOE_CASE)


@pytest.fixture(scope="session")
def moe():
    """The search of MOE_CASE with a small replay pool (30) and 5 simulations."""
    from madmax.search.api import find

    return find(**MOE_CASE, top=3, exact=5, refine=30, memory_margin=0)  # its 3 GiB GPU is sized to the byte


def replay_one(outcome, i: int) -> float:
    """The step replay of candidate i on its own (the search replays only its pool)."""
    from madmax.search.costs import combos_of, unit_costs
    from madmax.search.space import unique_rows
    from madmax.search.timing import optimizer_s, refine
    from madmax.search.units import MEMORY, memory_table, stage_layout

    ctx = outcome.ctx
    cols = {k: v[i:i + 1] for k, v in outcome.columns.items()}
    values, _ = unique_rows(cols, MEMORY)
    memory = memory_table(ctx, values)
    table, combo = combos_of(ctx, cols)
    costs = unit_costs(ctx, cols, table, combo, memory, outcome.space.orders)
    layout = stage_layout(ctx, int(cols["pp"][0]), int(cols["vp"][0]), memory.keys)
    return float(refine(layout, int(cols["m"][0]), costs, cols["zero"], optimizer_s(ctx.compute, layout, costs))[0])


@pytest.fixture(scope="session")
def replay():
    return replay_one


@pytest.fixture(scope="session")
def outcome():
    """The search of CASE with a small replay pool (30) and 5 simulations."""
    from madmax.search.api import find

    return find(**CASE, top=3, exact=5, refine=30)


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    """CASE's model and system as files, for the command line."""
    root = tmp_path_factory.mktemp("search")
    paths = {"model": root / "tiny.yaml", "system": root / "small-h100.yaml"}
    paths["model"].write_text(yaml.safe_dump(TINY))
    node = small_node()
    paths["system"].write_text(yaml.safe_dump(node, sort_keys=False))
    return paths
