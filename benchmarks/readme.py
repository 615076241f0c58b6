"""Regenerate the output shown under the `$ madmax ...` examples of README.md and docs/*.md from the program.

    python benchmarks/readme.py                  # list README.md's examples whose shown output is stale (exit 1)
    python benchmarks/readme.py --docs           # README.md and every docs/*.md
    python benchmarks/readme.py docs/sweeps.md   # the files named
    python benchmarks/readme.py --docs --write   # rewrite the stale outputs
    python benchmarks/readme.py --docs --skip-slow   # leave out the blocks marked slow

The examples of one file run in order, in process, 120 columns wide, in one scratch directory holding a copy of
`examples/` (so a `madmax query` reads the folder an earlier `madmax sweep` of the file wrote), as
`tests/test_readme.py` runs them. A plain code block preceded by the line `<!-- slow: REASON -->` holds
examples that take minutes (a sweep): the test skips them with REASON, this script runs them. An example that
shows its whole output gets the whole new output. One that leaves lines out with `...` keeps its shape: each
shown run of lines is found again in the new output by its text with the numbers masked (the labels of a
table's rows), and the same number of lines is taken from there. Numbers written in the prose are not touched:
the command lists the examples it changed so that the prose around them can be read again.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from madmax.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 120
ELLIPSIS = "..."
VOLATILE = re.compile(r"wall time|points/s|strategies/s")  # lines with timings, which change from run to run
NUMBER = re.compile(r"\d[\d,.]*")
# The timings of such a line: seconds and rates; its counts (points, errors) are checked like any text.
TIMING = re.compile(r"\d[\d,.]*(?= s\b| (?:points|strategies)/s)")


DOCS = sorted((ROOT / "docs").glob("*.md"))
SLOW = re.compile(r"^<!-- slow: (.+) -->$")


@dataclass(frozen=True)
class Example:
    """A `$ madmax` command and the lines [start, end) of its file that show its output; slow: why its block
    is left out of the tests (None: it is tested)."""

    command: str
    start: int
    end: int
    slow: str | None = None


def find_examples(lines: list[str]) -> Iterator[Example]:
    """The `$ madmax` commands of the plain code blocks (```` ``` ```` without a language) with shown output."""
    in_block = plain = False
    slow = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_block, plain = (not in_block), line == "```"
            marker = SLOW.match(lines[i - 1]) if in_block and i else None
            slow = marker.group(1) if marker else None
            i += 1
            continue
        if not (in_block and plain and line.startswith("$ madmax ")):
            i += 1
            continue
        command = line[2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i].strip()
        i += 1
        start = i
        while i < len(lines) and not lines[i].startswith("$ ") and not lines[i].startswith("```"):
            i += 1
        shown = lines[start:i]
        if any(s != ELLIPSIS for s in shown) and "#" not in command:
            yield Example(command, start, i, slow)


class Session:
    """A scratch directory holding a copy of `examples/` in which the examples of one file run, in order."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        shutil.copytree(ROOT / "examples", Path(self._dir.name) / "examples")

    def run(self, command: str) -> list[str]:
        """What `command` prints, line by line, as the README test runs it."""
        cwd = Path.cwd()
        try:
            os.chdir(self._dir.name)
            result = CliRunner().invoke(app, shlex.split(command)[1:], env={"COLUMNS": str(WIDTH)})
        finally:
            os.chdir(cwd)
        return [line.rstrip() for line in result.output.splitlines()]

    def close(self) -> None:
        self._dir.cleanup()


def run(command: str) -> list[str]:
    """What `command` prints in a scratch directory of its own."""
    session = Session()
    try:
        return session.run(command)
    finally:
        session.close()


def collapse(line: str) -> str:
    """`line` with runs of spaces and table rules made one (a rich table's width follows its widest cell)."""
    return re.sub(r"([─━ ])\1+", r"\1", line).strip()


def split_runs(shown: list[str] | tuple[str, ...]) -> list[list[str]]:
    """The runs of shown lines between the `...` cuts, empty ones included (a cut at either end)."""
    runs: list[list[str]] = [[]]
    for line in shown:
        if line == ELLIPSIS:
            runs.append([])
        else:
            runs[-1].append(line)
    return runs


def _masked(line: str) -> str:
    """`line` with every number masked: a run of shown lines is found by its labels."""
    return NUMBER.sub("#", collapse(line))


def _untimed(line: str) -> str:
    return TIMING.sub("#", collapse(line))


def _same(shown: list[str], fresh: list[str]) -> bool:
    """Equal but for the timings of lines that report wall time or speed (and the widths they cause)."""
    if not any(VOLATILE.search(line) for line in shown):
        return shown == fresh

    def key(line: str) -> str:
        return _untimed(line) if VOLATILE.search(line) else collapse(line)

    return [key(line) for line in shown] == [key(line) for line in fresh]


def regenerate(shown: list[str], actual: list[str]) -> list[str]:
    """`shown` redrawn from `actual`: whole when it leaves nothing out, else run by run (see the module doc)."""
    if ELLIPSIS not in shown:
        return actual
    out: list[str] = []
    position = 0
    for index, part in enumerate(split_runs(shown)):
        if index:
            out.append(ELLIPSIS)
        if not part:
            continue
        key = _masked(part[0])
        found = next((i for i in range(position, len(actual)) if _masked(actual[i]) == key), None)
        if found is None:  # the labels changed: keep what is shown, for a person to redo
            out.extend(part)
            continue
        out.extend(actual[found:found + len(part)])
        position = found + len(part)
    return out


def refresh(path: Path, write: bool, skip_slow: bool) -> list[str]:
    """The commands of `path` whose shown output is stale (rewritten in the file with `write`)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples = list(find_examples(lines))
    session = Session()
    fresh: dict[int, list[str]] = {}
    try:
        for index, example in enumerate(examples):  # in order: a query reads what a sweep above it wrote
            if not (skip_slow and example.slow):
                fresh[index] = regenerate(lines[example.start:example.end], session.run(example.command))
    finally:
        session.close()
    stale = []
    for index in sorted(fresh, reverse=True):  # from the end, so earlier spans stay valid
        example = examples[index]
        if not _same(lines[example.start:example.end], fresh[index]):
            stale.append(example.command)
            lines[example.start:example.end] = fresh[index]
    if write and stale:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return stale[::-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default README.md)")
    parser.add_argument("--docs", action="store_true", help="README.md and every docs/*.md")
    parser.add_argument("--write", action="store_true", help="rewrite the stale outputs in the files")
    parser.add_argument("--skip-slow", action="store_true", help="leave out the blocks marked <!-- slow: ... -->")
    args = parser.parse_args(argv)
    files = [README, *DOCS] if args.docs else (args.files or [README])
    any_stale = False
    for path in files:
        for command in refresh(path.resolve(), args.write, args.skip_slow):
            any_stale = True
            print(f"{'rewrote' if args.write else 'stale'}: {path.name}: {command}")
    return 1 if any_stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
