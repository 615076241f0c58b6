"""Regenerate the output shown under the README's `$ madmax ...` examples from what the program prints.

    python benchmarks/readme.py            # list the examples whose shown output is stale (exit 1 if any)
    python benchmarks/readme.py --write    # rewrite those outputs in README.md

Each example runs in process, 120 columns wide, in a scratch directory holding a copy of `examples/`, as
`tests/test_readme.py` runs it. An example that shows its whole output gets the whole new output. One that
leaves lines out with `...` keeps its shape: each shown run of lines is found again in the new output by its
text with the numbers masked (the labels of a table's rows), and the same number of lines is taken from
there. Numbers written in the README's prose are not touched: the command lists the examples it changed so
that the prose around them can be read again.
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
NUMBER = re.compile(r"\d[\d,.]*")
VOLATILE = re.compile(r"wall time|points/s|strategies/s")  # lines whose numbers change from run to run


@dataclass(frozen=True)
class Example:
    """A `$ madmax` command and the README lines [start, end) that show its output."""

    command: str
    start: int
    end: int


def find_examples(lines: list[str]) -> Iterator[Example]:
    """The `$ madmax` commands of the plain code blocks (```` ``` ```` without a language) with shown output."""
    in_block = plain = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_block, plain = (not in_block), line == "```"
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
            yield Example(command, start, i)


def run(command: str) -> list[str]:
    """What `command` prints, line by line, as the README test runs it."""
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(ROOT / "examples", Path(scratch) / "examples")
        cwd = Path.cwd()
        try:
            os.chdir(scratch)
            result = CliRunner().invoke(app, shlex.split(command)[1:], env={"COLUMNS": str(WIDTH)})
        finally:
            os.chdir(cwd)
    return [line.rstrip() for line in result.output.splitlines()]


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
    return NUMBER.sub("#", collapse(line))


def _same(shown: list[str], fresh: list[str]) -> bool:
    """Equal but for the numbers of lines that report wall time or speed (and the widths they cause)."""
    if not any(VOLATILE.search(line) for line in shown):
        return shown == fresh

    def key(line: str) -> str:
        return _masked(line) if VOLATILE.search(line) else collapse(line)

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale outputs in README.md")
    args = parser.parse_args(argv)
    lines = README.read_text(encoding="utf-8").splitlines()
    stale = []
    for example in reversed(list(find_examples(lines))):  # from the end, so earlier spans stay valid
        shown = lines[example.start:example.end]
        fresh = regenerate(shown, run(example.command))
        if not _same(shown, fresh):
            stale.append(example.command)
            lines[example.start:example.end] = fresh
    for command in reversed(stale):
        print(f"{'rewrote' if args.write else 'stale'}: {command}")
    if args.write and stale:
        README.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
