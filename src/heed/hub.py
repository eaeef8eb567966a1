"""heed's own client for a Hugging Face hub (or a mirror named by HF_ENDPOINT): a model's metadata,
then its files, into a cache whose every path heed chooses.

    GET {endpoint}/api/models/ORG/NAME/revision/REV?blobs=true
        -> the commit (40 hex digits, else refused) and each file's size and hash
    GET {endpoint}/ORG/NAME/resolve/COMMIT/FILE  (FILE one of the names asked for)
        -> HEED_CACHE/hub/ORG--NAME/.fetch.<pid>.<hex>.partial/FILE, checked against the size and
           hash the metadata gave, then the whole directory renamed to .../snapshots/COMMIT
    HEED_CACHE/hub/ORG--NAME/refs.json: {revision asked for: commit}, for offline use

Why not huggingface_hub's cache: it names each download by the server's ETag and its tree cache
by the server's commit, and checks neither, so a hostile hub or mirror could make an import write a
file of its choosing anywhere the user can write (a `.pth` in the venv runs code). Here the server
chooses no path: the repository id is checked before any request, the commit must be 40 hex
digits, and the file names are heed's own list.

Every request has a deadline for each read and a floor on the rate of a download, so a hub that
never answers or trickles a byte at a time ends in a message; a body is cut at the size the
metadata declared (or at a bound per kind of file, where the hub declares none) and the disk's free
space is checked first, so an endless body fills nothing. Every failure is a ModelDirError in one
line, told by what it means (out of reach, refused, not found, too slow), not by one library's
exception classes. The token: HF_TOKEN, else the one `hf auth login` stored (through
huggingface_hub when it is installed); it is sent only to the endpoint's own host.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from heed.errors import ModelDirError
from heed.plumbing.files import atomic_write_text, make_temp_dir
from heed.version import __version__

DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
COMMIT = re.compile(r"[0-9a-f]{40}")
READ_TIMEOUT_SECONDS = 30.0  # one read: a hub that never answers
RATE_GRACE_SECONDS = 30.0  # after this, a download slower than the floor below is given up
MIN_BYTES_PER_SECOND = 16 << 10  # 16 KiB/s on average: a trickle, not a slow line
MAX_METADATA_BYTES = 16 << 20  # a model's file list, with hashes (thousands of files fit)
# Bounds on a file whose size the hub did not declare: weights (an NLLB 3.3B checkpoint is 17.6 GB)
# and everything else (configs, vocabularies, tokenizers: tens of MB at most).
MAX_WEIGHTS_BYTES = 64 << 30
MAX_OTHER_BYTES = 512 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin")
DISK_MARGIN_BYTES = 256 << 20  # free space kept on the cache's disk after a download
DISK_CHECK_BYTES = 64 << 20  # while downloading, the free space is checked again this often
MAX_REDIRECTS = 5


@dataclass(frozen=True)
class RemoteFile:
    """A file of a hub repository as its metadata declares it: `size` in bytes and `sha256` (LFS
    files) or `git_sha1` (the git blob id of small files), each None where the hub gave none."""

    name: str
    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What `download` returns: the local directory holding the files, and the commit."""

    directory: Path
    commit: str


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def token() -> str | None:
    """HF_TOKEN, else the token `hf auth login` stored (read by huggingface_hub where installed)."""
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    try:
        return get_token()
    except Exception:  # noqa: BLE001 (a broken token file is no reason to refuse a public model)
        return None


def check_repo_id(repo: str, where: str) -> None:
    """A ModelDirError unless `repo` is ORG/NAME in the hub's own alphabet (no `..`, no path)."""
    if not REPO_ID.fullmatch(repo) or ".." in repo:
        raise ModelDirError(f"{where}: not a hub model id; give hf:ORG/NAME (letters, digits, '-', '_', '.')")


def repo_cache(cache_root: Path, repo: str) -> Path:
    return cache_root / "hub" / repo.replace("/", "--")


def cached(cache_root: Path, repo: str, revision: str | None) -> Snapshot | None:
    """The complete snapshot of `repo` at `revision` (a commit, or a name an earlier download
    recorded) in heed's cache, or None."""
    home = repo_cache(cache_root, repo)
    commit = revision if revision and COMMIT.fullmatch(revision) else _refs(home).get(revision or "main")
    if commit is None or not COMMIT.fullmatch(commit):
        return None
    directory = home / "snapshots" / commit
    return Snapshot(directory, commit) if (directory / ".complete").is_file() else None


def download(repo: str, revision: str | None, choose: Callable[[set[str]], list[str]], *,
             cache_root: Path) -> Snapshot:
    """The snapshot of hub repository `repo` at `revision` (None: the default branch) holding the
    files `choose(the names the repository has)` picks, each a plain file name, downloaded into heed's
    cache once per commit. Offline (HF_HUB_OFFLINE), or with the hub out of reach, a snapshot
    downloaded earlier is used; without one, a ModelDirError."""
    where = f"hf:{repo}" + (f"@{revision}" if revision else "")
    check_repo_id(repo, where)
    if offline():
        found = cached(cache_root, repo, revision)
        if found is None:
            raise ModelDirError(f"{where}: not in heed's hub cache, and offline (HF_HUB_OFFLINE); import it once "
                                "online")
        return found
    client = _Client(endpoint(), token(), where)
    try:
        commit, files = client.metadata(repo, revision)
    except _Unreachable as e:
        found = cached(cache_root, repo, revision)
        if found is None:
            raise ModelDirError(f"{where}: not in heed's hub cache, and the hub is out of reach ({e}); check the "
                                "network or HF_ENDPOINT, or import it once online") from None
        return found
    home = repo_cache(cache_root, repo)
    directory = home / "snapshots" / commit
    if not (directory / ".complete").is_file():
        names = [name for name in choose(set(files)) if name in files]
        if any("/" in name or name.startswith(".") for name in names):
            raise ModelDirError(f"{where}: heed fetches only plain file names ({names})")
        _fetch_all(client, repo, commit, [files[name] for name in names], home, directory)
    _record_ref(home, revision or "main", commit)
    return Snapshot(directory, commit)


def _refs(home: Path) -> dict[str, str]:
    try:
        refs = json.loads((home / "refs.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in refs.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(refs, dict) else {}


def _record_ref(home: Path, revision: str, commit: str) -> None:
    refs = _refs(home)
    if refs.get(revision) != commit:
        atomic_write_text(home / "refs.json", json.dumps({**refs, revision: commit}, indent=1, sort_keys=True))


def _fetch_all(client: _Client, repo: str, commit: str, files: list[RemoteFile], home: Path,
               directory: Path) -> None:
    """Download `files` into a temp directory under `home`, check each, then rename it to
    `directory` whole: a failed or killed download leaves nothing that looks complete."""
    staging = make_temp_dir(home, ".fetch.", ".partial")
    try:
        for remote in files:
            client.fetch(repo, commit, remote, staging / remote.name)
        (staging / ".complete").write_text(commit + "\n", encoding="utf-8")
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staging, directory)
        except OSError:
            if not (directory / ".complete").is_file():  # not a twin process that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _Unreachable(Exception):
    """The hub could not be reached at all (nothing answered): a cached snapshot may stand in."""


class _RedirectWithinLimits(urllib.request.HTTPRedirectHandler):
    """Redirects (a CDN for large files) to http(s) only, at most MAX_REDIRECTS, and the token only
    to the host it was meant for."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise ModelDirError(f"{req.full_url}: the hub redirects to {newurl[:80]!r}, which is not http(s)")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


class _Client:
    def __init__(self, base: str, bearer: str | None, where: str) -> None:
        if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
            raise ModelDirError(f"HF_ENDPOINT {base[:80]!r} is not an http(s) URL")
        self.base, self.bearer, self.where = base, bearer, where
        self.host = urllib.parse.urlsplit(base).netloc
        self.opener = urllib.request.build_opener(_RedirectWithinLimits())

    def _open(self, url: str) -> http.client.HTTPResponse:
        headers = {"User-Agent": f"heed/{__version__}"}
        if self.bearer:
            headers["Authorization"] = f"Bearer {self.bearer}"
        try:
            return self.opener.open(urllib.request.Request(url, headers=headers), timeout=READ_TIMEOUT_SECONDS)
        except urllib.error.HTTPError as e:
            raise self._refused(e) from None
        except ModelDirError:
            raise
        except http.client.HTTPException as e:
            raise ModelDirError(f"{self.where}: the hub's answer is not HTTP ({type(e).__name__}); check "
                                "HF_ENDPOINT") from None
        except OSError as e:  # URLError wraps what the socket said; a timeout may come bare
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise ModelDirError(f"{self.where}: the hub at {self.base} gave no answer within "
                                    f"{READ_TIMEOUT_SECONDS:.0f} s; try again later") from None
            raise _Unreachable(f"{self.base}: {getattr(reason, 'strerror', None) or reason}") from None

    def _refused(self, e: urllib.error.HTTPError) -> ModelDirError:
        code = e.headers.get("X-Error-Code", "") if e.headers else ""
        if code == "RepoNotFound" or (e.code == 404 and "/api/models/" in e.url and not code):
            return ModelDirError(f"{self.where}: no such model on the hub (or it is private: log in with "
                                 "`hf auth login` or set HF_TOKEN)")
        if code == "RevisionNotFound":
            return ModelDirError(f"{self.where}: the model has no revision {self.where.partition('@')[2]!r}")
        if code == "EntryNotFound":
            return ModelDirError(f"{self.where}: the hub lists a file it then does not serve "
                                 f"({urllib.parse.urlsplit(e.url).path.rsplit('/', 1)[-1][:80]})")
        if code == "GatedRepo" or e.code in (401, 403):
            return ModelDirError(f"{self.where}: the hub refuses access ({e.code}): the model is private or gated; "
                                 "accept its terms on the hub and log in (`hf auth login` or HF_TOKEN)")
        if e.code in (301, 302, 303, 307, 308, 310):
            return ModelDirError(f"{self.where}: the hub redirects in a loop or more than {MAX_REDIRECTS} times")
        return ModelDirError(f"{self.where}: the hub answered {e.code} {str(e.reason)[:80]}; try again later")

    def metadata(self, repo: str, revision: str | None) -> tuple[str, dict[str, RemoteFile]]:
        """(commit, {file name: RemoteFile}) of `repo` at `revision`, from the hub's model API."""
        path = f"/api/models/{repo}" + (f"/revision/{urllib.parse.quote(revision, safe='')}" if revision else "")
        url = f"{self.base}{path}?blobs=true"
        with self._open(url) as response:
            body = self._read_bounded(response, MAX_METADATA_BYTES, "the model's metadata")
        try:
            info = json.loads(body)
        except (ValueError, RecursionError):
            raise ModelDirError(f"{self.where}: the hub's metadata is not JSON; check HF_ENDPOINT") from None
        commit = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
            raise ModelDirError(f"{self.where}: the hub's metadata names no commit of 40 hex digits; refused (a "
                                "hostile or broken mirror?)")
        files: dict[str, RemoteFile] = {}
        for sibling in info.get("siblings") or ():
            if isinstance(sibling, dict) and isinstance(sibling.get("rfilename"), str):
                files[sibling["rfilename"]] = _remote_file(sibling)
        return commit, files

    def fetch(self, repo: str, commit: str, remote: RemoteFile, target: Path) -> None:
        """Download `remote` at `commit` into `target` (a new file in heed's own directory), checked
        against the size and hash the metadata declared."""
        url = f"{self.base}/{repo}/resolve/{commit}/{urllib.parse.quote(remote.name)}"
        bound = remote.size if remote.size is not None else (
            MAX_WEIGHTS_BYTES if remote.name.endswith(WEIGHT_SUFFIXES) else MAX_OTHER_BYTES)
        with self._open(url) as response:
            length = response.headers.get("Content-Length")
            offered = int(length) if length and length.isdigit() and len(length) < 20 else None
            if offered is not None and offered > bound:
                raise ModelDirError(f"{self.where}: the hub offers {offered:,} bytes of {remote.name}, more than "
                                    f"{'its metadata declared' if remote.size is not None else 'such a file can be'} "
                                    f"({bound:,}); not downloaded")
            _check_disk(target.parent, offered if offered is not None else (remote.size or 0), self.where)
            sha256, sha1, seen = hashlib.sha256(), hashlib.sha1(), 0
            if remote.git_sha1 is not None:
                sha1.update(f"blob {remote.size}\0".encode())
            started = time.monotonic()
            with open(target, "xb") as out:
                while chunk := self._read1(response, remote.name):
                    seen += len(chunk)
                    if seen > bound:
                        raise ModelDirError(f"{self.where}: {remote.name} runs past {bound:,} bytes, "
                                            f"{'its declared size' if remote.size is not None else 'the bound for such a file'}; "
                                            "stopped")
                    out.write(chunk)
                    if seen // DISK_CHECK_BYTES != (seen - len(chunk)) // DISK_CHECK_BYTES:
                        _check_disk(target.parent, 0, self.where)  # a body with no declared end
                    sha256.update(chunk)
                    if remote.git_sha1 is not None:
                        sha1.update(chunk)
                    self._check_rate(seen, started, remote.name)
        if offered is not None and seen != offered:
            raise ModelDirError(f"{self.where}: {remote.name}: the download broke off at {seen:,} of {offered:,} "
                                "bytes; try again")
        if remote.size is not None and seen != remote.size:
            raise ModelDirError(f"{self.where}: {remote.name} arrived with {seen:,} bytes, not the {remote.size:,} "
                                "its metadata declared; try again")
        if remote.sha256 is not None and sha256.hexdigest() != remote.sha256:
            raise ModelDirError(f"{self.where}: {remote.name}'s sha256 is not the one its metadata declared; the "
                                "download is corrupt; try again")
        if remote.git_sha1 is not None and sha1.hexdigest() != remote.git_sha1:
            raise ModelDirError(f"{self.where}: {remote.name} is not the file its metadata declared (git blob id); "
                                "the download is corrupt; try again")

    def _read1(self, response: http.client.HTTPResponse, what: str) -> bytes:
        try:
            return response.read1(1 << 20)
        except TimeoutError:
            raise ModelDirError(f"{self.where}: {what}: no byte from the hub within {READ_TIMEOUT_SECONDS:.0f} s; "
                                "try again later") from None
        except (http.client.HTTPException, OSError) as e:
            raise ModelDirError(f"{self.where}: {what}: the download broke off ({type(e).__name__}); try "
                                "again") from None

    def _check_rate(self, seen: int, started: float, what: str) -> None:
        elapsed = time.monotonic() - started
        if elapsed > RATE_GRACE_SECONDS and seen < MIN_BYTES_PER_SECOND * elapsed:
            raise ModelDirError(f"{self.where}: {what}: {seen:,} bytes in {elapsed:.0f} s, slower than "
                                f"{MIN_BYTES_PER_SECOND >> 10} KiB/s; the hub is too slow: try again later")

    def _read_bounded(self, response: http.client.HTTPResponse, bound: int, what: str) -> bytes:
        chunks, seen, started = [], 0, time.monotonic()
        while chunk := self._read1(response, what):
            seen += len(chunk)
            if seen > bound:
                raise ModelDirError(f"{self.where}: {what} runs past {bound:,} bytes; refused")
            chunks.append(chunk)
            self._check_rate(seen, started, what)
        return b"".join(chunks)


def _remote_file(sibling: dict[str, object]) -> RemoteFile:
    """A RemoteFile from one entry of the model API's `siblings` (with `?blobs=true`: `size`,
    `blobId` and, for LFS files, `lfs.sha256`); fields of the wrong kind are treated as absent."""
    lfs = sibling.get("lfs") if isinstance(sibling.get("lfs"), dict) else {}
    size = sibling.get("size")
    sha256 = lfs.get("sha256") if isinstance(lfs, dict) else None
    blob = sibling.get("blobId")
    declared = size if isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 1 << 50 else None
    return RemoteFile(
        name=str(sibling["rfilename"]),
        size=declared,
        sha256=sha256 if isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256) else None,
        git_sha1=blob if not lfs and declared is not None and isinstance(blob, str) and COMMIT.fullmatch(blob)
        else None,
    )


def _check_disk(directory: Path, size: int, where: str) -> None:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return
    if size + DISK_MARGIN_BYTES > free:
        raise ModelDirError(f"{where}: {size:,} bytes to download, and {directory} has {free:,} free; make room or "
                            "point HEED_CACHE elsewhere")
