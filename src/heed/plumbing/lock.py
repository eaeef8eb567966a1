"""One training run per output directory: a lock file held with `flock` while a run writes there.

`OUTPUT_DIR/.heed.lock` holds "PID HOST" of the run that holds it. The kernel drops an flock when
its process ends, however it ends, so a lock file that nobody holds is the leftover of a run that
was killed (kill -9, a lost node): the next run takes it over and says so. A run that ends normally
removes the file.

The file is written in place, not through `heed.plumbing.files.atomic_open`: the lock belongs to the file's
inode, and replacing the file would hand out a second, unheld inode under the same name.

Windows has no flock; there the directory is not locked (heed targets Linux and macOS). Neither is it
on a file system that refuses locks (some cluster file systems without the `flock` mount option):
training there goes on unlocked, with a note.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

from heed.errors import HeedError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".heed.lock"


class RunLock:
    """`with RunLock(output_dir) as lock:` holds `output_dir/.heed.lock` for the block, or raises a
    HeedError naming the directory and the process that holds it. `lock.note` is a line to show the
    user (a lock taken over from a killed run, or locking not possible here), else None."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.note: str | None = None
        self._file: IO[str] | None = None

    def __enter__(self) -> Self:
        if fcntl is None:
            return self
        while True:
            f = open(self.path, "a+", encoding="utf-8")
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                pid, _, host = f.read().strip().partition(" ")
                f.close()
                holder = f"pid {pid or '?'}{' on ' + host if host else ''}"
                raise HeedError(f"{self.directory}: another heed training ({holder}) is writing into this "
                                "output directory; wait for it or stop it, or choose another --output-dir") from None
            except OSError as e:
                f.close()
                self.note = (f"{self.path}: cannot lock here ({e.strerror or e}); make sure no other run "
                             "uses this directory")
                return self
            # The run before us may have removed the file between our open and our flock: then we hold
            # an inode nobody else will open. Start again on whatever the name points to now.
            try:
                current = os.path.samestat(os.fstat(f.fileno()), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:
                break
            f.close()
        f.seek(0)
        previous = f.read().strip()
        if previous:
            pid, _, host = previous.partition(" ")
            self.note = (f"{self.directory}: took over the lock left by pid {pid}{' on ' + host if host else ''}, "
                         "which ended without releasing it")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()} {socket.gethostname()}\n")
        f.flush()
        self._file = f
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._file is None:
            return
        self.path.unlink(missing_ok=True)  # while still holding the lock: see the inode check in __enter__
        self._file.close()
        self._file = None
