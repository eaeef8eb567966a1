"""Progress on stderr for the long commands: a bar on a terminal (or with --progress), a line every
few seconds otherwise, and the phases of opening a training run."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import typer

from heed.cli.app import escape, stderr
from heed.plumbing.heartbeat import PROGRESS_LINE_SECONDS, Heartbeat

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class PhaseProgress:
    """`heed prepare`'s progress: one counting bar per phase ("counting", "writing"), on a terminal only."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = enabled  # as Progress's
        self.phase: str | None = None
        self.bar: Progress | None = None

    def __call__(self, phase: str, pairs: int) -> None:
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = Progress(f"sentence pairs {phase}", enabled=self.enabled).__enter__()
        assert self.bar is not None
        self.bar.advance(pairs)

    def warn(self, message: str) -> None:
        (self.bar or Progress("", enabled=False)).warn(message)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def progress_option() -> Any:
    """`--progress/--no-progress` for a command that may run for minutes."""
    return typer.Option(None, "--progress/--no-progress",
                        help="Show progress on stderr: a bar on a terminal, a line every "
                             f"{PROGRESS_LINE_SECONDS:g} s elsewhere (a log). Default: a bar on a terminal only.")


class Progress:
    """Sentences done, on stderr, never on stdout: a bar while stderr is a terminal; where it is not
    (a log), when asked, a plain line every PROGRESS_LINE_SECONDS while the work runs (from a thread:
    a chunk that takes longer still gets its lines) and one final line. `enabled`: None = a bar on a
    terminal, nothing elsewhere; True = also the lines elsewhere; False = nothing. The count never
    passes `total`: a total that was too small grows. `warn` prints above the bar."""

    def __init__(self, what: str, total: int | None = None, *, enabled: bool | None = None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = stderr()
        self._bar: Progress | None = None
        self._what, self._total, self._done = what, total, 0
        self._lines = bool(enabled) and not self.console.is_terminal
        self._started = time.monotonic()
        self._beat = Heartbeat(self._line) if self._lines else None
        self._saying = threading.Lock()  # the heartbeat's lines and the final one, never interleaved
        if enabled is not False and self.console.is_terminal:
            columns = ([TextColumn(what), BarColumn(), MofNCompleteColumn()] if total is not None
                       else [SpinnerColumn(), TextColumn(f"{{task.completed}} {what}")])
            # No redirection: translations written to stdout must stay on stdout.
            self._bar = Progress(*columns, TimeElapsedColumn(), console=self.console, transient=True,
                                 redirect_stdout=False, redirect_stderr=False)
            self._task = self._bar.add_task(what, total=total)

    def __enter__(self) -> Self:
        if self._bar is not None:
            self._bar.start()
        if self._beat is not None:
            self._beat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._beat is not None:
            self._beat.__exit__(None, None, None)  # no heartbeat line after the final one
        if self._lines and exc[0] is None:
            self._line()

    def advance(self, n: int) -> None:
        self._done += n
        if self._total is not None and self._done > self._total:
            self._total = self._done  # an estimate that fell short: the bar ends full, never past its end
            if self._bar is not None:
                self._bar.update(self._task, total=self._total)
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def _line(self) -> None:
        with self._saying:
            of = f" of {self._total:,}" if self._total is not None else ""
            self.console.print(f"{self._what}: {self._done:,}{of} ({time.monotonic() - self._started:.0f} s)",
                               highlight=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)
