"""benchmarks/readme.py: the README's example outputs are redrawn from the program's, keeping `...` cuts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "readme.py"
spec = importlib.util.spec_from_file_location("readme_regen", SCRIPT)
readme = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = readme  # its dataclasses look their module up
spec.loader.exec_module(readme)


def test_whole_output_is_replaced():
    assert readme.regenerate(["a 1", "b 2"], ["a 3", "b 4", "c 5"]) == ["a 3", "b 4", "c 5"]


def test_cut_output_keeps_its_runs_found_by_their_labels():
    shown = ["title 1", "...", "│ time │ 2.0 ms │", "│ mfu  │ 40% │", "..."]
    actual = ["title 7", "x", "y", "│ time │ 3.5 ms │", "│ mfu  │ 41% │", "z"]
    assert readme.regenerate(shown, actual) == ["title 7", "...", "│ time │ 3.5 ms │", "│ mfu  │ 41% │", "..."]


def test_a_run_whose_label_is_gone_is_kept_for_a_person():
    assert readme.regenerate(["kept 1", "...", "gone 2"], ["kept 3", "other"]) == ["kept 3", "...", "gone 2"]


def test_examples_are_found_in_plain_blocks_only():
    lines = ["```bash", "$ madmax skip", "out", "```", "```", "$ madmax simulate \\", "  --x 1", "shown", "```"]
    (example,) = readme.find_examples(lines)
    assert example.command == "madmax simulate --x 1"
    assert lines[example.start:example.end] == ["shown"]


def test_wall_time_numbers_do_not_make_an_example_stale():
    assert readme._same(["wall time 1.2 s", "rows  4"], ["wall time 3.4 s", "rows 4"])
    assert not readme._same(["wall time 1.2 s", "rows 4"], ["wall time 1.2 s", "rows 5"])
