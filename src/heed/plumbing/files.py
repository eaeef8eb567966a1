"""Files written so that no reader ever sees half of one, and model files read with clear errors.

Every file heed writes goes through `atomic_open`. What it does depends on what the path is:

- a regular file, or nothing yet: a temp file beside it, flushed to disk, then `os.replace`d over
  it. A crash, Ctrl-C or full disk midway leaves the previous file as it was.
- a symlink: the same, at the link's target; the link stays a link.
- a device, FIFO or anything under /dev or /proc (`-o /dev/null`, `-o /dev/stdout`, a named pipe):
  written straight through. Replacing it would turn /dev/null into a regular file (as root) or
  write a file nobody reads.
- a directory or a socket: an OutputError.

Every error is an OutputError naming the path as the user gave it, never the temp file. Temp
files carry the writer's process id, so a later write sweeps those a killed writer left behind.

Directories (model directories, checkpoints, exports) are replaced whole by `replace_dir`, and
found by `resolve_dir`, so that a reader finds a complete copy at every instant (see there).
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import select
import shutil
import stat
from collections.abc import Callable, Iterator
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
    stem = f".{target.name[:200]}."
    sweep_stale(target.parent, stem, ".tmp")
    tmp = target.with_name(f"{stem}{os.getpid()}.{os.urandom(4).hex()}.tmp")
    encoding, newline = (None, None) if mode == "wb" else ("utf-8", "\n")
    try:
        f = open(tmp, mode.replace("w", "x"), encoding=encoding, newline=newline)  # noqa: SIM115  # closed below, before the replace or on failure
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
    encoding, newline = (None, None) if mode == "wb" else ("utf-8", "\n")
    f = os.fdopen(fd, mode, encoding=encoding, newline=newline)
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
        raise OutputError(f"cannot create its directory {parent}: {reason(e)}", path=shown) from None


def _parent_is_a_file(target: Path, shown: str) -> OutputError:
    parent = target.parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), parent)
    return OutputError(f"its parent {blocker} is a file, not a directory", path=shown)


def reason(e: OSError) -> str:
    """An OSError's text for a message: "No space left on device" -> "no space left on device"."""
    text = e.strerror or str(e)
    return text[:1].lower() + text[1:]


def _output_error(e: OSError, shown: str) -> OutputError:
    """`e` about our file (or its temp file) as an OutputError that names only the user's path."""
    if e.errno == errno.EPIPE:
        return OutputError("cannot write: the reading end of the pipe was closed", path=shown)
    if e.errno == errno.ELOOP:
        return OutputError("cannot write: a loop of symbolic links", path=shown)
    return OutputError(f"cannot write: {reason(e)}", path=shown)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a message: "a FIFO (named pipe)", "a character device", ..."""
    return next((name for test, name in _FILE_TYPES if test(mode)), "a special file")


def _open_without_waiting(path: str | os.PathLike[str], mode: str, encoding: str | None, *,
                          regular_only: bool) -> IO[Any]:
    """Open for reading without blocking on the open (O_NONBLOCK: a FIFO opens at once), then read
    blocking as usual. A directory is an IsADirectoryError; with `regular_only`, anything but a
    regular file is an OSError (errno EINVAL) whose strerror says what the path is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", os.fspath(path))
        if regular_only and not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"is {file_kind(st.st_mode)}, not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str | os.PathLike[str], mode: str = "rb", *, encoding: str | None = None) -> IO[Any]:
    """Open a file heed reads, refusing anything but a regular file (a symlink to one is fine) before a
    byte is read: opening a FIFO without a writer would block forever, and /dev/zero never ends.
    The refusal is an OSError (errno EINVAL) whose strerror says what the path is, so every caller's
    "cannot read" handling names it; a directory is an IsADirectoryError."""
    return _open_without_waiting(path, mode, encoding, regular_only=True)


def open_stream(path: str | os.PathLike[str], *, devices: bool = True) -> IO[bytes]:
    """Open a file read once, front to back (`heed translate -i`, a config): a regular file, or a
    stream such as a pipe, process substitution (`<(cmd)`), /dev/stdin or a named pipe (FIFO). A
    FIFO is read as `cat` reads it: the open waits for a writer (Ctrl-C stops the wait), then
    reads until the writer closes it. A directory is an IsADirectoryError; with `devices=False` a
    character or block device (which may never end: /dev/zero, a terminal) is an OSError (EINVAL)
    whose strerror says what it is."""
    f = _open_without_waiting(path, "rb", None, regular_only=False)
    mode = os.fstat(f.fileno()).st_mode
    if not devices and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        f.close()
        raise OSError(errno.EINVAL, f"is {file_kind(mode)}, which may never end; give a file or a pipe",
                      os.fspath(path))
    if stat.S_ISFIFO(mode):
        # Opened without waiting, a FIFO no one has opened for writing reads as empty at once. Linux's
        # poll() reports nothing for it until a writer writes or closes (a pipe whose writer has gone
        # reports a hang-up at once), so this waits as cat's blocking open() would.
        waiter = select.poll()
        waiter.register(f.fileno(), select.POLLIN)
        try:
            waiter.poll()
        except BaseException:
            f.close()
            raise
    return f


def check_regular(path: str | os.PathLike[str]) -> None:
    """`open_regular`'s check alone, for files a library opens itself (safetensors)."""
    open_regular(path).close()


def file_digest(path: str | os.PathLike[str]) -> tuple[int, str]:
    """(bytes, sha256 hex) of a file, read in 1 MiB chunks (a corpus or weights may be gigabytes)."""
    digest, size = hashlib.sha256(), 0
    with open_regular(path) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


VERIFY_ENV = "HEED_VERIFY"
_verify_default: list[bool | None] = [None]  # set per command by `heed --no-verify`


def set_verify_default(verify: bool | None) -> None:
    """What `verifying()` answers when not told: False for `heed --no-verify`, None for the environment."""
    _verify_default[0] = verify


def verifying(verify: bool | None = None) -> bool:
    """Whether loading checks sha256s: `verify` if given, else the command's `--no-verify`, else
    unless the environment sets HEED_VERIFY=0."""
    for answer in (verify, _verify_default[0]):
        if answer is not None:
            return answer
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def read_model_json(path: Path) -> Any:
    """A JSON file of a model directory; a missing or broken one is a ModelDirError naming it."""
    try:
        with open_regular(path, "r", encoding="utf-8") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing; not a heed model directory") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelDirError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:  # a directory or FIFO in its place, no permission
        raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None


# ------------------------------------------------------------------------------- stale temp files


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (on this machine): signal 0 reaches it, or it exists as another user's."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


def sweep_stale(parent: Path, prefix: str, suffix: str) -> None:
    """Remove the temp files or directories `PREFIX<pid>.<hex>SUFFIX` in `parent` whose writer
    (process <pid>) is gone: what a kill -9 mid-write left. A live writer's are left alone."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.[0-9a-f]+" + re.escape(suffix) + "$")
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = pattern.match(name)
        if match is None or _alive(int(match.group(1))):
            continue
        path = parent / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                pass


def umask() -> int:
    """This process's umask, read without changing it where Linux shows it (/proc/self/status),
    else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The permissions a new file gets from open(): 0666 less the umask."""
    return 0o666 & ~umask()


def make_temp_dir(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new directory `PREFIX<pid>.<hex>SUFFIX` in `parent`, with the umask's permissions (as any
    directory the user makes; tempfile.mkdtemp would make it 0700, unreadable to a server running as
    another user). Stale ones of killed writers are swept first."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(parent, prefix, suffix)
    while True:
        path = parent / f"{prefix}{os.getpid()}.{os.urandom(4).hex()}{suffix}"
        try:
            os.mkdir(path, 0o777)  # the umask applies
            return path
        except FileExistsError:
            continue


# ---------------------------------------------------------------------------- atomic directories

# A directory is complete once it holds one of these (written last): a model directory or
# checkpoint (heed.json), an export (manifest.json).
COMPLETE_MARKERS = ("heed.json", "manifest.json")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths `a` and `b` in one step (Linux renameat2 RENAME_EXCHANGE): no instant in
    which either name is missing. False where the kernel, C library or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), os.fspath(b))


def replace_dir(target: str | os.PathLike[str], fill: Callable[[Path], None]) -> Path:
    """Build a directory with `fill(tmp)` and swap it in at `target`, so that a reader going through
    `resolve_dir` finds a complete copy, old or new, at every instant. Returns `target`.

    `tmp` is `.NAME.<pid>.<hex>.tmp-dir` beside the target, made with the umask's permissions; a
    target that is a symlink to a directory is followed (the link stays, its directory is
    replaced). Where Linux can exchange two names atomically (renameat2), the new directory and
    the old one trade places in one step and the old one is removed. Elsewhere: `NAME` -> `NAME.old`,
    then `tmp` -> `NAME`; killed between the two renames, `NAME.old` is complete and `resolve_dir`
    reads it until the next save. A killed `fill` leaves only a temp directory, swept by the next
    save."""
    target = Path(target)
    if target.is_symlink() and target.is_dir():
        target = Path(os.path.realpath(target))
    parent = target.parent
    tmp = make_temp_dir(parent, f".{target.name[:200]}.", ".tmp-dir")
    old = parent / f"{target.name}.old"
    try:
        try:
            fill(tmp)
        except OutputError as e:  # a file of the new copy: name the directory the user asked for
            raise OutputError(e.reason, path=target) from None
        except OSError as e:
            if e.errno in _WRITE_ERRNOS:
                raise OutputError(f"cannot write: {reason(e)}", path=target) from None
            raise
        _fsync_dir(tmp)
        if target.is_dir() and _exchange(tmp, target):
            _fsync_dir(parent)
            shutil.rmtree(old, ignore_errors=True)
            return target  # `tmp` now holds the old copy: removed below
        if target.exists() or target.is_symlink():
            if old.exists():  # left by a swap that finished except for its clean-up
                shutil.rmtree(old)
            os.replace(target, old)
        # If `target` was missing, `old` (if any) is the last complete copy: keep it until `tmp` is in.
        os.replace(tmp, target)
        _fsync_dir(parent)
        shutil.rmtree(old, ignore_errors=True)
        return target
    finally:
        # A failed fill's copy; nothing once swapped in by rename; the old copy after an exchange.
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_dir(target: str | os.PathLike[str], markers: tuple[str, ...] = COMPLETE_MARKERS) -> Path | None:
    """The complete copy of the directory `target`: itself, or `NAME.old` while a swap is between
    its two renames (see `replace_dir`). Complete means it holds one of `markers` (by default a
    model directory's or an export's). None if neither is complete."""
    target = Path(target)
    for candidate in (target, target.with_name(f"{target.name}.old")):
        if any((candidate / marker).is_file() for marker in markers):
            return candidate
    return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
