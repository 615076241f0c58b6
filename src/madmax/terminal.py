"""What a terminal gets: consoles sized for piped output, and progress bars for long commands.

`make_console()`: a rich console on stdout that does not wrap lines at 80 columns when the output is
piped or redirected. Progress bars go to stderr for `sweep`, `search`, `validate` and `calibrate`.
A bar is drawn only when stderr is a terminal: piped or redirected output (and tests) get nothing.
Code deep in a command reports its work without being handed the bar: `shown(...)` makes a bar the
active one for the work inside it, and `expect(n)` (n more units to do) and `advance(n)` (n done), or
`counted(items)`, reach it; with no active bar they do nothing. Report from the process that opened
the bar: a forked worker's copy of it draws nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")
# Columns of output that is not a terminal (a pipe, a file) when COLUMNS does not say: wide enough that
# no line wraps (rich's 80 would fold strategy strings and notes over several lines).
PIPED_WIDTH = 1000


def make_console() -> Console:
    """A rich console on stdout: the terminal's width, COLUMNS when set, else (piped output) PIPED_WIDTH."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=PIPED_WIDTH)
    return console


class ProgressBar:
    """A rich progress bar on stderr: units done of the total, rate, elapsed time and ETA; nothing at all
    (every method a no-op) when stderr is not a terminal."""

    def __init__(self, description: str, total: int | None, done: int = 0, unit: str = "points") -> None:
        from rich import progress as rp
        from rich.console import Console
        from rich.text import Text

        console = Console(stderr=True)
        self.progress = None
        if not console.is_terminal:
            return

        class Rate(rp.ProgressColumn):
            def render(self, task) -> Text:
                speed = task.finished_speed or task.speed
                return Text(f"{speed:,.1f} {unit}/s" if speed else f"- {unit}/s", style="progress.data.speed")

        self.progress = rp.Progress(rp.TextColumn("[bold]{task.description}"), rp.BarColumn(),
                                    rp.MofNCompleteColumn(), Rate(), rp.TimeElapsedColumn(), rp.TextColumn("ETA"),
                                    rp.TimeRemainingColumn(), console=console, transient=False)
        self.task = self.progress.add_task(description, total=total, completed=done)
        self.progress.start()

    @property
    def drawn(self) -> bool:
        return self.progress is not None

    def update(self, done: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done)

    def expect(self, n: int) -> None:
        """n more units of work to do (the total grows by n)."""
        if self.progress is not None:
            self.progress.update(self.task, total=(self.progress.tasks[0].total or 0) + n)

    def advance(self, n: int = 1) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, n)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


_active: ContextVar[ProgressBar | None] = ContextVar("madmax_progress", default=None)


@contextmanager
def shown(description: str, unit: str, *, enabled: bool = True) -> Iterator[ProgressBar | None]:
    """A bar for the work inside (the active bar there) when `enabled` and stderr is a terminal; else None."""
    bar = ProgressBar(description, total=None, unit=unit) if enabled else None
    if bar is None or not bar.drawn:
        yield None
        return
    token = _active.set(bar)
    try:
        yield bar
    finally:
        _active.reset(token)
        bar.close()


def expect(n: int) -> None:
    """n more units of work for the active bar, if any."""
    if (bar := _active.get()) is not None:
        bar.expect(n)


def advance(n: int = 1) -> None:
    """n units of work done, on the active bar, if any."""
    if (bar := _active.get()) is not None:
        bar.advance(n)


def counted(items: Iterable[T]) -> Iterator[T]:
    """`items`, advancing the active bar by one as each is finished with (when the next one is asked for)."""
    for item in items:
        yield item
        advance()
