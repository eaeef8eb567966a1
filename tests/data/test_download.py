"""`heed data get` against a loopback HTTP server serving small files (this machine has no internet):
files land checked by sha256 with their SOURCE.md, nothing half-written survives a bad download,
a second run fetches nothing, and the real table's pinned checksums refuse other bytes."""
from __future__ import annotations

import gzip
import hashlib
import io
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from heed.data import download
from heed.data.download import Dataset, Remote, get
from heed.errors import DataError, HeedError


class Files:
    """What the loopback server serves: {path: bytes}; it records every path asked for."""

    def __init__(self) -> None:
        self.content: dict[str, bytes] = {}
        self.asked: list[str] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Files]]:
    files = Files()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            files.asked.append(self.path)
            body = files.content.get(self.path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", files
    httpd.shutdown()
    httpd.server_close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TRAIN = "ein Hund läuft\nzwei Katzen\n".encode()
ABOUT = b"** Info ** a readme\n"
PAIRS = b"Go.\tVa !\nHi.\tSalut !\n"


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _table(base: str) -> dict[str, Dataset]:
    packed = gzip.compress(TRAIN, mtime=0)
    return {
        "small": Dataset("small", files=(
            Remote(f"{base}/raw/train.de.gz", sha(packed), "gzip", {"train.de": sha(TRAIN)}),
            Remote(f"{base}/anki/pairs.zip", None, "zip", {"fra.txt": sha(PAIRS), "_about.txt": None}),
        ), license="CC-BY 2.0", cite="someone 2016"),
    }


def _serve_small(files: Files, *, pairs: bytes = PAIRS) -> None:
    files.content["/raw/train.de.gz"] = gzip.compress(TRAIN, mtime=0)
    files.content["/anki/pairs.zip"] = _zip({"fra.txt": pairs, "_about.txt": ABOUT})


def test_files_land_checked_with_their_source_and_a_second_run_fetches_nothing(server, tmp_path):
    base, files = server
    _serve_small(files)
    got = get("small", tmp_path, datasets=_table(base))
    folder = got.folder
    assert folder == tmp_path / "small" and got.off_release == ()
    assert (folder / "train.de").read_bytes() == TRAIN and (folder / "fra.txt").read_bytes() == PAIRS
    assert (folder / "_about.txt").read_bytes() == ABOUT
    source = (folder / "SOURCE.md").read_text(encoding="utf-8")
    assert sha(TRAIN) in source and "CC-BY 2.0" in source and "someone 2016" in source
    assert sorted(p.name for p in folder.iterdir()) == ["SOURCE.md", "_about.txt", "fra.txt", "train.de"]
    asked = len(files.asked)
    get("small", tmp_path, datasets=_table(base))
    assert files.asked[asked:] == ["/anki/pairs.zip"]  # train.de is there as pinned; the zip has an unpinned readme


def test_a_changed_release_is_refused_unless_any_release_and_nothing_is_written(server, tmp_path):
    base, files = server
    _serve_small(files, pairs=b"Go.\tVa !\tCC-BY 2.0 (France) Attribution\n")
    with pytest.raises(DataError, match=r"pairs.zip: fra.txt has sha256 .* not the pinned release's"):
        get("small", tmp_path, datasets=_table(base))
    assert not (tmp_path / "small" / "fra.txt").exists()
    assert [p.name for p in (tmp_path / "small").iterdir()] == ["train.de"]  # the first file was fine
    got = get("small", tmp_path, datasets=_table(base), any_release=True)
    assert (tmp_path / "small" / "fra.txt").read_bytes().endswith(b"Attribution\n")
    assert got.off_release == ("fra.txt",)
    assert "Not the pinned release: fra.txt" in (tmp_path / "small" / "SOURCE.md").read_text(encoding="utf-8")


def test_a_corrupt_download_writes_nothing(server, tmp_path):
    base, files = server
    _serve_small(files)
    files.content["/raw/train.de.gz"] = gzip.compress(b"tampered\n")
    with pytest.raises(DataError, match=r"train.de.gz: sha256 .* is not the pinned"):
        get("small", tmp_path, datasets=_table(base))
    assert not (tmp_path / "small").exists()  # the folder it made is gone too


def test_a_missing_file_names_the_url(server, tmp_path):
    base, _ = server
    with pytest.raises(HeedError, match=r"/raw/train.de.gz: the server answered 404"):
        get("small", tmp_path, datasets=_table(base))


def test_the_real_table_refuses_other_bytes_at_its_paths(server, tmp_path, heed_cli, assert_user_error):
    """The pinned Multi30k checksums, through the CLI and --mirror: one line naming the URL."""
    base, files = server
    for remote in download.DATASETS["multi30k"].files:
        files.content[remote.url.split("githubusercontent.com", 1)[1]] = gzip.compress(b"not multi30k\n")
    result = heed_cli("data", "get", "multi30k", tmp_path, "--mirror", base)
    assert_user_error(result, "train.de.gz", "sha256", "is not the pinned")
    assert not (tmp_path / "multi30k").exists()
    assert files.asked and all(p.startswith("/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/")
                               for p in files.asked)


def test_every_real_file_is_pinned():
    for dataset in download.DATASETS.values():
        for remote in dataset.files:
            assert remote.url.startswith("https://")
            assert all(len(d) == 64 for d in [remote.sha256, *remote.members.values()] if d is not None)
            assert any(d is not None for d in remote.members.values())


# ------------------------------------------------------------------------ hostile or absent servers


def test_an_unreachable_host_leaves_no_folder_behind(tmp_path, heed_cli, assert_user_error):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = heed_cli("data", "get", "multi30k", tmp_path / "data", "--mirror", f"http://127.0.0.1:{port}")
    assert_user_error(result, "train.de.gz", "cannot download")
    assert not (tmp_path / "data").exists()  # neither data/ nor data/multi30k/


def test_a_server_that_trickles_is_stopped_at_the_deadline(tmp_path, monkeypatch):
    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):  # a byte every 50 ms: 50 s in all
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setattr(download, "DEADLINE_SECONDS", 1.0)
    started = time.monotonic()
    try:
        with pytest.raises(HeedError, match=r"train.de.gz: \d+ of 1,000 bytes after 1 s, the limit for one file"):
            get("small", tmp_path, datasets=_table(f"http://127.0.0.1:{httpd.server_address[1]}"))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert time.monotonic() - started < 10
    assert not (tmp_path / "small").exists()


def test_an_answer_that_is_not_http_is_one_error(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def garbage() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(4096)
            connection.sendall(b"SSH-2.0-OpenSSH_9.2 not http at all\r\n\r\n")

    threading.Thread(target=garbage, daemon=True).start()
    try:
        with pytest.raises(HeedError, match=r"train.de.gz: the server's answer is not HTTP \(BadStatusLine\)"):
            get("small", tmp_path, datasets=_table(f"http://127.0.0.1:{listener.getsockname()[1]}"))
    finally:
        listener.close()


def test_a_zip_bomb_stops_at_the_inflated_bound_not_in_memory(server, tmp_path, monkeypatch):
    base, files = server
    _serve_small(files)
    monkeypatch.setattr(download, "MAX_INFLATED_BYTES", 1 << 20)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("fra.txt", b"\0" * (64 << 20))  # 64 MiB of zeros: a 64 KiB zip
        archive.writestr("_about.txt", ABOUT)
    files.content["/anki/pairs.zip"] = buffer.getvalue()
    assert len(buffer.getvalue()) < 100_000
    with pytest.raises(DataError, match=r"pairs.zip: fra.txt inflates to more than 1 MiB"):
        get("small", tmp_path, datasets=_table(base))
    assert not (tmp_path / "small" / "fra.txt").exists()


def test_any_release_says_what_was_taken_and_cites_no_pinned_release(server, tmp_path, heed_cli, monkeypatch):
    base, files = server
    _serve_small(files, pairs=b"Go.\tVa !\tCC-BY 2.0 (France) Attribution\n")
    table = _table(base)
    small = table["small"]
    monkeypatch.setattr(download, "DATASETS", {"small": Dataset(small.name, small.files, small.license,
                                                                "someone 2016", release="2019-04-07")})
    result = heed_cli("data", "get", "small", tmp_path, "--any-release")
    assert result.exit_code == 0, result.output
    assert "fra.txt: not the pinned release, taken as it is with --any-release and checked against nothing" in result.stdout
    assert "release of 2019-04-07" not in result.stdout and "a release other than the pinned 2019-04-07" in result.stdout


def test_data_list_names_the_files_their_size_and_where_they_go(heed_cli):
    result = heed_cli("data", "list")
    assert result.exit_code == 0, result.output
    assert "multi30k: train.de, train.en, val.de, val.en, test_2016_flickr.de, test_2016_flickr.en" in result.stdout
    assert "writes DIR/multi30k/ (default data/multi30k/)" in result.stdout and "MB of text" in result.stdout
    assert "tatoeba-fra-eng: fra.txt, _about.txt" in result.stdout
