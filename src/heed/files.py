"""Files written so that no reader ever sees half of one, and model files read with clear errors.

Every file heed writes goes through `atomic_open`: a temp file beside the target, flushed to disk,
then `os.replace`d over it. A crash or Ctrl-C midway leaves the previous file as it was.
"""
from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from heed.errors import ModelDirError


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temp file beside `path` for writing ("w": UTF-8 text with "\\n" newlines, "wb": bytes);
    on success it replaces `path`, on error it is removed. Parent directories are created.
    The file gets the usual umask permissions (mkstemp would make it 0600)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    text = {} if mode == "wb" else {"encoding": "utf-8", "newline": "\n"}
    try:
        with open(tmp, mode.replace("w", "x"), **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def read_model_json(path: Path) -> Any:
    """A JSON file of a model directory; a missing or broken one is a ModelDirError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing; not a heed model directory") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelDirError(f"{path}: not valid JSON ({e})") from None
