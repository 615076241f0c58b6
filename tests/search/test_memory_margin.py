"""The training search's memory margin (`--memory-margin`): HBM each GPU keeps free, 5% unless told."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from madmax.cli import app
from madmax.config.units import GIB
from madmax.errors import ConfigError
from madmax.search.api import DEFAULT_MEMORY_MARGIN, find, memory_margin_bytes

from .conftest import CASE

USABLE = 80 * GIB


@pytest.mark.parametrize("value, expected", [
    (None, DEFAULT_MEMORY_MARGIN * USABLE), ("5%", 0.05 * USABLE), (" 12.5% ", 0.125 * USABLE), (0.1, 0.1 * USABLE),
    (0, 0.0), ("0", 0.0), ("1e-2", 0.01 * USABLE), ("4GiB", 4 * GIB), ("4 GiB", 4 * GIB), ("500 MB", 500e6),
])
def test_a_margin_is_a_share_or_bytes(value, expected):
    assert memory_margin_bytes(value, USABLE) == pytest.approx(expected)


@pytest.mark.parametrize("value", [-0.01, 0.5, "50%", "-1%", "x", "4 parsecs", "40 GiB", True, math.nan, math.inf,
                                   "nan%", [5]])
def test_a_margin_that_is_not_headroom_is_one_sentence(value):
    with pytest.raises(ConfigError) as exc:
        memory_margin_bytes(value, USABLE)
    assert str(exc.value).startswith("memory_margin=") and "\n" not in str(exc.value)


def test_every_ranked_plan_keeps_the_margin_free():
    # The 3 GiB test GPU: without a margin the best plans fill it; with 25% kept free every simulated plan that
    # ranks as fitting stays within three quarters of it, and more candidates are refused for memory.
    full = find(**CASE, top=3, memory_margin=0)
    kept = find(**CASE, top=3, memory_margin="25%")
    usable = full.ctx.capacity_bytes
    assert kept.ctx.memory_margin_bytes == pytest.approx(0.25 * usable)
    assert kept.ctx.capacity_bytes == pytest.approx(0.75 * usable)
    assert kept.top(3) and all(kept.exact[i].peak_memory_bytes <= 0.75 * usable for i in kept.top(3))
    assert max(full.exact[i].peak_memory_bytes for i in full.top(3)) > 0.75 * usable
    assert kept.rejected["memory"] > full.rejected["memory"]


def test_the_cli_states_the_margin_and_refuses_a_bad_one():
    args = ["search", "-m", "llama-2-7b", "-s", "dgx-h100", "--num-gpus", "8", "--global-batch", "16", "--seq-len",
            "1024", "--max-pp", "1", "--max-cp", "1", "--top", "1", "--exact", "1", "--refine", "10", "--no-progress"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "GiB kept free; --memory-margin 0 uses it all" in out.output
    zero = CliRunner().invoke(app, [*args, "--memory-margin", "0"])
    assert "(no margin kept free)" in zero.output
    bad = CliRunner().invoke(app, [*args, "--memory-margin", "60%"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "memory_margin" in bad.output
    serving = CliRunner().invoke(app, ["search", "-m", "llama-3.1-8b", "-s", "dgx-h100", "--task", "inference",
                                       "--prompt-len", "128", "--output-len", "16", "--memory-margin", "5%"])
    assert serving.exit_code == 2 and "memory_margin applies to training searches" in serving.output
