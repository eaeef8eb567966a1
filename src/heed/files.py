"""Files written so that no reader ever sees half of one, and model files read with clear errors.

Every file heed writes goes through `atomic_open`. What it does depends on what the path is:

- a regular file, or nothing yet: a temp file beside it, flushed to disk, then `os.replace`d over
  it. A crash, Ctrl-C or full disk midway leaves the previous file as it was.
- a symlink: the same, at the link's target; the link stays a link.
- a device, FIFO or anything under /dev or /proc (`-o /dev/null`, `-o /dev/stdout`, a named pipe):
  written straight through. Replacing it would turn /dev/null into a regular file (as root) or
  write a file nobody reads.
- a directory or a socket: an OutputError.

Every error is an OutputError naming the path as the user gave it, never the temp file.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from heed.errors import ModelDirError, OutputError

# Errors that only a write can cause: raised inside the caller's `with` block they are about our
# file (an input file's read error, also an OSError, passes through untouched).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# Beyond these, a path is a kernel interface (devices, /dev/stdout -> /proc/self/fd/1): never replaced.
_SPECIAL_ROOTS = ("/dev/", "/proc/")


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open `path` for writing a whole file ("w": UTF-8 text with "\\n" newlines, "wb": bytes).

    A regular file (or a new one) is written to a temp file beside it that replaces it on success
    and is removed on error; a symlink's target is written that way; a device or FIFO is written
    straight through (see the module doc). Parent directories are created. The new file keeps the
    permissions of the one it replaces, else gets the usual umask ones (mkstemp would make it 0600).
    Raises OutputError naming `path`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    shown = os.fspath(path)
    target = _target(Path(path), shown)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise _parent_is_a_file(target, shown) from None
    except OSError as e:
        raise _output_error(e, shown) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError("is a directory; give a file path", path=shown)
    if st is not None and stat.S_ISSOCK(st.st_mode):
        raise OutputError("is a socket; give a file path", path=shown)
    if (st is not None and not stat.S_ISREG(st.st_mode)) or _is_special(target):
        with _write_through(target, mode, shown) as f:
            yield f
        return
    with _replace(target, mode, shown, st) as f:
        yield f


def _target(path: Path, shown: str) -> Path:
    """The path to write: a symlink's final target (a dangling link's too, so writing creates it)."""
    if shown.endswith(os.sep) and not path.is_dir():
        raise OutputError("ends with a slash, like a directory; give a file path", path=shown)
    if not path.is_symlink() or _is_special(path):
        return path  # /dev/stdout is a link into /proc: written through, not resolved
    return Path(os.path.realpath(path))


def _is_special(path: Path) -> bool:
    return os.path.abspath(path).startswith(_SPECIAL_ROOTS)


@contextmanager
def _replace(target: Path, mode: str, shown: str, st: os.stat_result | None) -> Iterator[IO[Any]]:
    _make_parent(target, shown)
    # The temp name is capped so that a target with a 255-byte name still gets a temp file.
    tmp = target.with_name(f".{target.name[:200]}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    text = {} if mode == "wb" else {"encoding": "utf-8", "newline": "\n"}
    try:
        f = open(tmp, mode.replace("w", "x"), **text)
    except OSError as e:
        raise _output_error(e, shown) from None
    try:
        with _ours(shown):
            yield f
        try:
            f.flush()
            os.fsync(f.fileno())
            if st is not None:
                os.chmod(tmp, stat.S_IMODE(st.st_mode))
            f.close()
            os.replace(tmp, target)
        except OSError as e:
            raise _output_error(e, shown) from None
    except BaseException:
        _close_quietly(f)
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def _write_through(target: Path, mode: str, shown: str) -> Iterator[IO[Any]]:
    """Write into a device or FIFO as it is: no temp file, no replace, no fsync (EINVAL there)."""
    try:
        # O_NONBLOCK: opening a FIFO nobody reads would block forever; this way it fails with ENXIO.
        # O_APPEND: /dev/stdout redirected with `>>` to a file keeps what is already there.
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OutputError("a named pipe (FIFO) with no reader; start the reading process first",
                              path=shown) from None
        if e.errno == errno.ENOENT:
            raise OutputError("no such device or file (heed creates no files under /dev or /proc)",
                              path=shown) from None
        raise _output_error(e, shown) from None
    os.set_blocking(fd, True)  # once open, writes wait for a slow reader instead of failing with EAGAIN
    text = {} if mode == "wb" else {"encoding": "utf-8", "newline": "\n"}
    f = os.fdopen(fd, mode, **text)
    try:
        with _ours(shown, extra=(errno.EPIPE,)):
            yield f
        try:
            f.close()  # flushes: /dev/full reports ENOSPC only here for a short text
        except OSError as e:
            raise _output_error(e, shown) from None
    except BaseException:
        _close_quietly(f)
        raise


@contextmanager
def _ours(shown: str, extra: tuple[int, ...] = ()) -> Iterator[None]:
    """Around the caller's writes: an error only a write can cause is about our file, so it becomes
    an OutputError naming it. Anything else (an input file's read error) passes through untouched."""
    try:
        yield
    except OSError as e:
        if e.filename is None and (e.errno in _WRITE_ERRNOS or e.errno in extra):
            raise _output_error(e, shown) from None
        raise


def _close_quietly(f: IO[Any]) -> None:
    """Close after an error: a full disk refuses the buffered rest again, but the first error is the
    one to report (the file descriptor is closed either way)."""
    try:
        f.close()
    except OSError:
        pass


def _make_parent(target: Path, shown: str) -> None:
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise _parent_is_a_file(target, shown) from None
    except OSError as e:
        raise OutputError(f"cannot create its directory {parent}: {_reason(e)}", path=shown) from None


def _parent_is_a_file(target: Path, shown: str) -> OutputError:
    parent = target.parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), parent)
    return OutputError(f"its parent {blocker} is a file, not a directory", path=shown)


def _reason(e: OSError) -> str:
    return (e.strerror or str(e)).lower()


def _output_error(e: OSError, shown: str) -> OutputError:
    """`e` about our file (or its temp file) as an OutputError that names only the user's path."""
    if e.errno == errno.EPIPE:
        return OutputError("cannot write: the reading end of the pipe was closed", path=shown)
    if e.errno == errno.ELOOP:
        return OutputError("cannot write: a loop of symbolic links", path=shown)
    return OutputError(f"cannot write: {_reason(e)}", path=shown)


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
    except OSError as e:  # a directory in its place, no permission
        raise ModelDirError(f"{path}: cannot read: {_reason(e)}") from None
