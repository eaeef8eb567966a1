"""Python's cyclic garbage collector paused over a stretch of work that makes many objects which
live to its end and then die by reference counting (markup's parsed fragments, their spans and
translations).

Such a stretch promotes enough objects to trigger a full collection, which walks every object of
the interpreter: with torch and a model loaded that is 300,000 objects and about 0.35 s on one
core, more than translating 1,000 short sentences (bench/RESULTS.md, "Markup's cost at batch
64"). Paused, nothing is promoted, and the objects are freed as before when the stretch ends.

Threads share the collector: it is switched off by the first pause and back on by the last one
to end, and only if it was on when the first began.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off inside the block (reference counting still frees objects), then as
    it was before the outermost pause of any thread."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()
