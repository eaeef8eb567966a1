"""heed.plumbing.files.atomic_open: a regular file is replaced whole or not at all; a device, FIFO or symlink
is written as what it is, never replaced by a regular file; every error names the user's path."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from heed.errors import HeedError, ModelDirError, OutputError
from heed.plumbing.files import atomic_open, atomic_write_bytes, atomic_write_text, read_model_json


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def assert_names_only(error: BaseException, path: str | Path) -> None:
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert ".tmp" not in message, message


# --------------------------------------------------------------------------------- regular files


def test_writes_text_and_bytes_and_creates_parents(tmp_path):
    atomic_write_text(tmp_path / "a" / "b" / "out.txt", "héllo\n")
    atomic_write_bytes(tmp_path / "bytes.bin", b"\x00\xff")
    assert (tmp_path / "a" / "b" / "out.txt").read_bytes() == "héllo\n".encode()
    assert (tmp_path / "bytes.bin").read_bytes() == b"\x00\xff"
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "a" / "b") == []


def test_an_error_in_the_middle_leaves_the_previous_file_byte_identical(tmp_path):
    path = tmp_path / "hyps.txt"
    path.write_bytes(b"old line 1\nold line 2\n")
    with pytest.raises(RuntimeError, match="boom"), atomic_open(path) as f:
        f.write("new, half written")
        raise RuntimeError("boom")
    assert path.read_bytes() == b"old line 1\nold line 2\n"
    assert leftovers(tmp_path) == []


def test_a_full_disk_names_the_path_and_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "hyps.txt"
    path.write_bytes(b"previous\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError) as e:
        atomic_write_text(path, "new\n")
    assert str(e.value) == f"{path}: cannot write: no space left on device"
    assert path.read_bytes() == b"previous\n" and leftovers(tmp_path) == []


def test_a_full_disk_during_the_callers_writes_is_an_output_error(tmp_path):
    path = tmp_path / "out.txt"
    path.write_bytes(b"previous\n")
    with pytest.raises(OutputError) as e, atomic_open(path) as f:
        f.write("x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a flush of f would
    assert_names_only(e.value, path)
    assert path.read_bytes() == b"previous\n" and leftovers(tmp_path) == []


def test_an_input_files_error_inside_the_block_is_not_blamed_on_the_output(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(FileNotFoundError) as e, atomic_open(path):
        open(tmp_path / "missing-input.txt")  # noqa: SIM115  # the open itself is what fails
    assert not isinstance(e.value, HeedError) and not path.exists() and leftovers(tmp_path) == []


def test_replacing_keeps_the_previous_files_permissions(tmp_path):
    path = tmp_path / "private.txt"
    path.write_text("old")
    path.chmod(0o600)
    atomic_write_text(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "new"


def test_a_name_of_255_bytes_still_gets_a_temp_file(tmp_path):
    path = tmp_path / ("a" * 255)
    atomic_write_text(path, "ok")
    assert path.read_text() == "ok" and leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- not a regular file


def _device(tmp_path: Path, name: str, minor: int) -> Path:
    """A character device like /dev/NAME (Linux mem major 1). As root, a fresh node in tmp_path: a
    regression that replaces the device must not turn this machine's own /dev/null into a regular
    file. Not as root, the system's one, which only root could replace."""
    if os.geteuid() == 0:
        node = tmp_path / name
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        return node
    system = Path("/dev") / name
    if not system.exists():
        pytest.skip(f"no {system} on this system")
    return system


def test_dev_null_stays_a_character_device(tmp_path):
    null = _device(tmp_path, "null", 3)
    atomic_write_text(null, "discarded\n")
    atomic_write_bytes(null, b"discarded")
    with atomic_open(null) as f:
        f.write("discarded")
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)
    assert null.read_bytes() == b""


def test_dev_full_gives_a_clear_error_and_stays_a_character_device(tmp_path):
    full = _device(tmp_path, "full", 7)
    with pytest.raises(OutputError) as e:
        atomic_write_text(full, "x" * 10)
    assert str(e.value) == f"{full}: cannot write: no space left on device"
    assert stat.S_ISCHR(os.stat(full).st_mode) and os.stat(full).st_rdev == os.makedev(1, 7)


def test_a_mistyped_device_is_not_created():
    path = "/dev/heed-no-such-device"
    try:
        with pytest.raises(OutputError, match=r"^/dev/heed-no-such-device: no such device or file"):
            atomic_write_text(path, "x")
        assert not os.path.lexists(path)
    finally:
        if os.path.isfile(path) and not os.path.islink(path):  # what a regression would leave
            os.unlink(path)


WRITE_TO_STDOUT = "from heed.plumbing.files import atomic_write_text; atomic_write_text('/dev/stdout', 'new line\\n')"


def test_dev_stdout_writes_to_a_pipe():
    done = subprocess.run([sys.executable, "-c", WRITE_TO_STDOUT], capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"new line\n", b"")


def test_dev_stdout_appended_to_a_file_keeps_what_was_there(tmp_path):
    log = tmp_path / "log.txt"
    log.write_bytes(b"old line\n")
    with open(log, "ab") as sink:
        done = subprocess.run([sys.executable, "-c", WRITE_TO_STDOUT], stdout=sink, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    assert log.read_bytes() == b"old line\nnew line\n" and leftovers(tmp_path) == []


def test_a_symlink_stays_a_link_and_its_target_gets_the_content(tmp_path):
    target = tmp_path / "real" / "out.txt"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert leftovers(tmp_path) == [] and leftovers(target.parent) == []


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "later.txt")
    atomic_write_text(link, "made")
    assert link.is_symlink() and (tmp_path / "later.txt").read_text() == "made"


def test_a_fifo_with_a_reader_receives_the_data(tmp_path, deadline):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with deadline(10):
            atomic_write_text(fifo, "through the pipe\n")
        assert os.read(reader, 1000) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and leftovers(tmp_path) == []


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path, deadline):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with deadline(10), pytest.raises(OutputError) as e:
        atomic_write_text(fifo, "nobody listens")
    assert str(e.value) == f"{fifo}: a named pipe (FIFO) with no reader; start the reading process first"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_target_is_an_error_naming_it(tmp_path):
    with pytest.raises(OutputError) as e:
        atomic_write_text(tmp_path, "x")
    assert str(e.value) == f"{tmp_path}: is a directory; give a file path"
    assert tmp_path.is_dir() and leftovers(tmp_path) == []


def test_a_symlink_to_a_directory_is_an_error_naming_the_link(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    with pytest.raises(OutputError, match=r"link: is a directory; give a file path$"):
        atomic_write_text(tmp_path / "link", "x")


def test_a_path_ending_in_a_slash_is_an_error(tmp_path):
    with pytest.raises(OutputError, match="ends with a slash"):
        atomic_write_text(f"{tmp_path}/new/", "x")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("below", ["out.txt", "a/b/out.txt"])
def test_a_file_as_parent_is_an_error_naming_the_users_path_and_the_file(tmp_path, below):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"keep me")
    path = f"{blocker}/{below}"
    with pytest.raises(OutputError) as e:
        atomic_write_text(path, "x")
    assert str(e.value) == f"{path}: its parent {blocker} is a file, not a directory"
    assert blocker.read_bytes() == b"keep me"


def test_a_symlink_loop_is_an_error_naming_the_link(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OutputError) as e:
        atomic_write_text(loop, "x")
    assert_names_only(e.value, loop)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (0555) directory anyway")
def test_a_read_only_directory_names_the_users_path(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "out.txt").write_text("old")
    directory.chmod(0o555)
    try:
        with pytest.raises(OutputError) as e:
            atomic_write_text(directory / "out.txt", "new")
    finally:
        directory.chmod(0o755)
    assert str(e.value) == f"{directory / 'out.txt'}: cannot write: permission denied"
    assert (directory / "out.txt").read_text() == "old"


def test_permission_denied_names_the_users_path_not_the_temp_file(tmp_path, monkeypatch):
    # Root may write anywhere, so the refusal is simulated where the temp file is created.
    import heed.plumbing.files

    def refuse(file: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))

    path = tmp_path / "out.txt"
    path.write_text("old")
    monkeypatch.setattr(heed.plumbing.files, "open", refuse, raising=False)
    with pytest.raises(OutputError) as e:
        atomic_write_text(path, "new")
    assert str(e.value) == f"{path}: cannot write: permission denied"
    assert path.read_text() == "old" and leftovers(tmp_path) == []


def _read_only_mount() -> str | None:
    """A directory on a read-only file system, where even root cannot create a file."""
    for candidate in ("/sys", "/proc/sys"):
        try:
            if os.statvfs(candidate).f_flag & os.ST_RDONLY:
                return candidate
        except OSError:
            continue
    return None


def test_a_read_only_file_system_names_the_users_path():
    mount = _read_only_mount()
    if mount is None or mount.startswith("/proc"):
        pytest.skip("no read-only mount outside /proc here")
    path = f"{mount}/heed-test-output.txt"
    with pytest.raises(OutputError) as e:
        atomic_write_text(path, "x")
    assert str(e.value) in (f"{path}: cannot write: read-only file system", f"{path}: cannot write: permission denied")
    assert not os.path.lexists(path)


# ------------------------------------------------------------------------------- model files


def test_read_model_json_errors_are_model_dir_errors(tmp_path):
    with pytest.raises(ModelDirError, match="missing; not a heed model directory"):
        read_model_json(tmp_path / "heed.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ModelDirError, match="not valid JSON"):
        read_model_json(tmp_path / "bad.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ModelDirError, match=r"dir.json: cannot read: is a directory"):
        read_model_json(tmp_path / "dir.json")
