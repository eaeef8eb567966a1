"""A line every few seconds while a long command runs with its stderr in a log (`--progress` where
stderr is no terminal): a thread that calls `say` on a fixed interval, so lines come during the work
(a chunk of translations, a dev evaluation) and not only where the work happens to report."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from heed.errors import HeedError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

PROGRESS_LINE_SECONDS = 5.0  # where stderr is a log and progress was asked for: a line this often

# Shortens the interval (tests, which cannot wait for 5 s lines); not a setting users need.
SECONDS_VARIABLE = "HEED_PROGRESS_SECONDS"


def line_seconds() -> float:
    """PROGRESS_LINE_SECONDS, or $HEED_PROGRESS_SECONDS where set; a HeedError naming the variable
    for anything but a positive number of seconds."""
    text = os.environ.get(SECONDS_VARIABLE, "").strip()
    if not text:
        return PROGRESS_LINE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise HeedError(f"{SECONDS_VARIABLE}={text!r}: give the seconds between progress lines, a number above 0")
    return seconds


class Heartbeat:
    """`with Heartbeat(say):` calls `say()` every `seconds` (default: line_seconds()) from a daemon
    thread until the block ends; `say` reads what it reports from its owner (a count, a step)."""

    def __init__(self, say: Callable[[], None], seconds: float | None = None) -> None:
        self.seconds = line_seconds() if seconds is None else seconds
        self._say = say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heed-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            self._say()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
