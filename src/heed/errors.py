"""User-facing errors. The CLI prints them in a line or two and exits with code 2, no traceback.

Asserts are for heed's own bugs; these are for a user's mistakes, and they name what to fix:
the file and line, or the config field.
"""
from __future__ import annotations

import os

# heed's name on PyPI (`heed` there is an unrelated project); the import name and the command stay `heed`.
DISTRIBUTION = "heed-nmt"


def install_hint(extra: str | None = None, *, upgrade: bool = False) -> str:
    """How to install heed with an extra (or upgrade it), from the index and from a clone:
    "pip install 'heed-nmt[onnx]' (in a clone of heed: pip install -e '.[onnx]')"."""
    if upgrade:
        return f"pip install -U {DISTRIBUTION}"
    suffix = f"[{extra}]" if extra else ""
    return f"pip install '{DISTRIBUTION}{suffix}' (in a clone of heed: pip install -e '.{suffix}')"


class HeedError(Exception):
    """A mistake in a user's input that heed can explain."""


class DataError(HeedError):
    """Bad corpus input: the message names the file and (1-based) line."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        where = self.path or ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(HeedError):
    """Bad configuration: the message names the file and the dotted field."""

    def __init__(self, message: str, *, field: str | None = None, path: str | os.PathLike[str] | None = None) -> None:
        self.message = message  # without the file and field, for callers that name them their own way
        self.field = field
        self.path = None if path is None else str(path)
        parts = [p for p in (self.path, f"field '{field}'" if field else None) if p]
        super().__init__(f"{': '.join(parts)}: {message}" if parts else message)


class ModelDirError(HeedError):
    """A model directory that is missing, incomplete or not heed's."""


class Abandoned(HeedError):
    """The caller gave up on a decoding (a server request past its time limit): raised by the
    search's next step, or by a runtime with its own search (heed.export.ct2_run) before its next batch."""

    def __init__(self) -> None:
        super().__init__("the request was given up; decoding stopped")


class OutputError(HeedError):
    """A file heed was told to write and cannot: the message names the path as the user gave it."""

    def __init__(self, message: str, *, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.reason = message
        super().__init__(f"{self.path}: {message}")
