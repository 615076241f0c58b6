"""The examples of the README and of docs/*.md print what the program prints.

Every `$ madmax ...` command in a plain code block that shows output is run (in process, 120 columns wide;
the examples of one file in order, in one scratch directory) and its shown lines must appear in the real
output: consecutively, except where the file writes `...` to leave lines out. Lines that report wall time or
speed (`wall time`, `points/s`, `strategies/s`) are compared with their numbers masked, and a block holding
one is compared with runs of spaces and rules collapsed, since the width of a rich table follows its widest
cell. Blocks marked `<!-- slow: REASON -->` (sweeps of minutes) are skipped here with REASON;
`python benchmarks/readme.py --docs` runs and regenerates them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# benchmarks/readme.py finds the examples and runs them (and redraws their outputs: `--write`).
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "readme.py"
_spec = importlib.util.spec_from_file_location("readme_regen", SCRIPT)
readme = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = readme  # its dataclasses look their module up
_spec.loader.exec_module(readme)

ROOT, README, VOLATILE = readme.ROOT, readme.README, readme.VOLATILE


@dataclass(frozen=True)
class Example:
    path: Path
    index: int  # its place among the examples of its file
    command: str
    shown: tuple[str, ...]
    slow: str | None

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.command[:60]}"


def examples(path: Path) -> list[Example]:
    """The `$ madmax` commands of the plain code blocks of `path` that show output (`readme.find_examples`)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Example(path, i, e.command, tuple(line.rstrip() for line in lines[e.start:e.end]), e.slow)
            for i, e in enumerate(readme.find_examples(lines))]


def _pattern(line: str, collapse: bool) -> re.Pattern[str]:
    line = readme.collapse(line) if collapse else line
    if not VOLATILE.search(line):
        return re.compile(re.escape(line))
    parts = readme.TIMING.split(line)  # the text between the timings
    return re.compile(r"\d[\d,.]*".join(re.escape(part) for part in parts))


def _find(run: list[re.Pattern[str]], actual: list[str], start: int) -> int | None:
    """The index just past the first place at or after `start` where `run` matches consecutive lines."""
    for i in range(start, len(actual) - len(run) + 1):
        if all(p.fullmatch(actual[i + k]) for k, p in enumerate(run)):
            return i + len(run)
    return None


CASES = [e for path in (README, *readme.DOCS) for e in examples(path)]
_SESSIONS: dict[Path, tuple[object, dict[int, list[str]]]] = {}


def _output(example: Example) -> list[str]:
    """What the example prints after the examples of its file above it have run (once per file and session)."""
    session, outputs = _SESSIONS.setdefault(example.path, (readme.Session(), {}))
    for earlier in CASES:
        if earlier.path == example.path and earlier.index <= example.index and earlier.index not in outputs \
                and not earlier.slow:
            outputs[earlier.index] = session.run(earlier.command)
    return outputs[example.index]


@pytest.fixture(scope="module", autouse=True)
def _close_sessions():
    yield
    for session, _ in _SESSIONS.values():
        session.close()
    _SESSIONS.clear()


def test_the_readme_has_examples_with_output():
    commands = [e.command.split()[1] for e in CASES if e.path == README]
    assert {"simulate", "search", "sweep"} <= set(commands), commands


def test_the_docs_have_examples_with_output():
    assert {e.path.name for e in CASES} >= {"README.md", "sweeps.md"}


@pytest.mark.parametrize("example", CASES, ids=[e.id for e in CASES])
def test_example_prints_what_it_shows(example: Example):
    if example.slow:
        pytest.skip(f"{example.slow}; python benchmarks/readme.py --docs runs it")
    actual = _output(example)
    collapse = any(VOLATILE.search(line) for line in example.shown)
    if collapse:
        actual = [readme.collapse(line) for line in actual]
    position = 0
    for run in filter(None, readme.split_runs(example.shown)):
        patterns = [_pattern(line, collapse) for line in run]
        found = _find(patterns, actual, position)
        assert found is not None, (
            f"{example.path.name} lines not printed by `{example.command}`:\n" + "\n".join(run)
            + "\n--- the program printed ---\n" + "\n".join(actual))
        position = found


def test_the_python_example_returns_what_it_shows():
    # The README's Python block: run it up to the line whose comment shows a tuple, and compare that line's
    # value with the tuple, each number at the precision shown.
    block = re.search(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M).group(1)
    lines = block.splitlines()
    at = next(i for i, line in enumerate(lines) if re.search(r"#\s*\(", line))
    expression, shown = (part.strip() for part in lines[at].split("#", 1))
    scope: dict = {}
    exec("\n".join(lines[:at]), scope)
    actual = eval(expression, scope)
    expected = [part.strip() for part in shown.strip("()").split(",")]
    assert len(actual) == len(expected)
    for value, text in zip(actual, expected, strict=True):
        if text in ("True", "False"):
            assert value is (text == "True")
        else:
            decimals = len(text.split(".")[1]) if "." in text else 0
            assert round(value, decimals) == float(text), (expression, actual)


def test_the_readme_accuracy_sentence_is_the_benchmarks():
    # docs/training_accuracy.md is written by benchmarks/validate_training.py; the README quotes it rounded.
    page = (ROOT / "docs" / "training_accuracy.md").read_text()

    def figure(name: str) -> float:
        return float(re.search(rf"{re.escape(name)}: ([\d.]+)", page).group(1))

    text = " ".join(README.read_text().split())
    quoted = re.search(r"mean absolute error is ([\d.]+)%\. Scored leave one source out .*?, the ([\d,]+) dense "
                       r"training rows, each under its software stack, err by a median ([\d.]+)% and a 90th "
                       r"percentile ([\d.]+)%, .*?\(with every shipped fit: ([\d.]+)% and ([\d.]+)%\), and the "
                       r"(\d+) MoE rows by a median ([\d.]+)%", text)
    assert quoted, "the README's accuracy sentence changed its wording"
    korthikanti, rows, median, p90, shipped_median, shipped_p90, moe_rows, moe = quoted.groups()
    counted = re.search(r"cross-source rows, each under its stack: (\d+) dense, (\d+) MoE", page)
    assert (int(rows.replace(",", "")), int(moe_rows)) == (int(counted.group(1)), int(counted.group(2)))
    for shown, name in ((korthikanti, "Korthikanti 2022 iteration times: mean |error| %"),
                        (median, "dense rows, cross-source: median |error| %"),
                        (p90, "dense rows, cross-source: p90 |error| %"),
                        (shipped_median, "all dense rows, in-sample (shipped fits): median |error| %"),
                        (shipped_p90, "all dense rows, in-sample (shipped fits): p90 |error| %"),
                        (moe, "MoE rows, cross-source: median |error| %")):
        assert abs(float(shown) - figure(name)) <= 0.05 + 1e-9, (name, shown, figure(name))


# benchmarks/readme.py: the README's example outputs are redrawn from the program's, keeping `...` cuts.

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
    assert example.slow is None


def test_a_block_marked_slow_carries_its_reason():
    lines = ["<!-- slow: a 3-minute sweep -->", "```", "$ madmax sweep x.yaml", "96 points", "$ madmax query x",
             "row", "```", "```", "$ madmax simulate", "out", "```"]
    assert [(e.command, e.slow) for e in readme.find_examples(lines)] == [
        ("madmax sweep x.yaml", "a 3-minute sweep"), ("madmax query x", "a 3-minute sweep"), ("madmax simulate", None)]


def test_wall_time_numbers_do_not_make_an_example_stale():
    assert readme._same(["wall time 1.2 s", "rows  4"], ["wall time 3.4 s", "rows 4"])
    assert not readme._same(["wall time 1.2 s", "rows 4"], ["wall time 1.2 s", "rows 5"])


def test_a_timed_line_keeps_its_counts_checked():
    # the sweep's summary line times the run and counts its errors: only the timings may differ
    shown = ["96 points: 0 done before, 96 computed in 288.5 s (0.3 points/s); 2 errors, 6 without a fitting strategy"]
    faster = ["96 points: 0 done before, 96 computed in 101.0 s (0.9 points/s); 2 errors, 6 without a fitting strategy"]
    fixed = ["96 points: 0 done before, 96 computed in 288.5 s (0.3 points/s); 0 errors, 6 without a fitting strategy"]
    assert readme._same(shown, faster) and not readme._same(shown, fixed)
    assert _timed_pattern(shown[0]).fullmatch(faster[0]) and not _timed_pattern(shown[0]).fullmatch(fixed[0])


def _timed_pattern(line: str) -> re.Pattern[str]:
    return _pattern(line, collapse=True)
