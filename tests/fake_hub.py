"""A Hugging Face hub on loopback, enough for heed's hub client (heed.hub) and huggingface_hub's:
`/api/models/ORG/NAME[/revision/REV]` answers the repository's commit and files (with `?blobs=true`
each file's size, git blob id, and for weights the LFS sha256, as the real hub does),
`/api/models/ORG/NAME/tree/REV` lists them, and
`/ORG/NAME/resolve/REV/FILE` serves a file (HEAD: its commit, etag and size). Unknown repositories,
revisions and files get the hub's 404s with its X-Error-Code. Every request is counted by kind.

`fault` makes it a hostile or broken hub, for the tests of what heed does with one:
"commit" (metadata names a commit that is a path), "etag" (ETags and sibling names that are paths),
"silent" (the API never answers), "trickle" (a file at a byte a second), "endless" (a file's body
never ends, with no length), "short" (a file shorter than its Content-Length, then the connection
closes), "redirect-loop" (every file redirects to itself), "size" (metadata declares another size),
"nested" (metadata of 100,000 nested arrays)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, tuple[str, dict[str, bytes]]] = {}  # repo -> (commit, {file: bytes})
        self.requests: Counter[str] = Counter()  # "api", "HEAD file", "GET file"
        self.fault: str | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo: str, directory: Path) -> str:
        """Serve every file of `directory` as repository `repo`; returns its commit."""
        files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
        commit = hashlib.sha1(b"".join(hashlib.sha256(b).digest() for b in files.values())).hexdigest()
        self.repos[repo] = (commit, files)
        return commit

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                      *, head: bool = False) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _missing(self, code: str, *, head: bool = False) -> None:
                self._send(404, json.dumps({"error": code}).encode(), {"X-Error-Code": code,
                                                                       "Content-Type": "application/json"}, head=head)

            def _repo(self, repo: str, revision: str | None) -> tuple[str, dict[str, bytes]] | None:
                if repo not in hub.repos:
                    self._missing("RepoNotFound", head=self.command == "HEAD")
                    return None
                commit, files = hub.repos[repo]
                if revision not in (None, "main", commit):
                    self._missing("RevisionNotFound", head=self.command == "HEAD")
                    return None
                return commit, files

            def do_GET(self, head: bool = False) -> None:
                path = self.path.split("?")[0]
                api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                if api:
                    hub.requests["api"] += 1
                    if hub.fault == "silent":
                        time.sleep(30)
                        return
                    if hub.fault == "nested":
                        return self._send(200, b"[" * 100_000 + b"]" * 100_000)
                    found = self._repo(api.group(1), api.group(2))
                    if found:
                        commit, files = found
                        blobs = "blobs=true" in self.path
                        siblings = [_sibling(name, body, blobs, grow=hub.fault == "size")
                                    for name, body in files.items()]
                        if hub.fault == "etag":
                            siblings.append({"rfilename": "../../../evil.pth"})
                        info = {"id": api.group(1), "modelId": api.group(1), "private": False, "siblings": siblings,
                                "sha": "../../../../tmp/heed-evil" if hub.fault == "commit" else commit}
                        self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
                    return
                tree = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
                if tree:
                    hub.requests["api"] += 1
                    found = self._repo(tree.group(1), tree.group(2))
                    if found:
                        entries = [{"type": "file", "path": name, "size": len(body),
                                    "oid": hashlib.sha1(body).hexdigest()} for name, body in found[1].items()]
                        self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})
                    return
                resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if not resolve:
                    return self._missing("EntryNotFound", head=head)
                hub.requests[f"{'HEAD' if head else 'GET'} file"] += 1
                found = self._repo(resolve.group(1), resolve.group(2))
                if found:
                    commit, files = found
                    if resolve.group(3) not in files:
                        return self._missing("EntryNotFound", head=head)
                    body = files[resolve.group(3)]
                    etag = "../../../../evil.pth" if hub.fault == "etag" else hashlib.sha256(body).hexdigest()
                    headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
                    if hub.fault == "redirect-loop":
                        return self._send(302, b"", {"Location": self.path}, head=head)
                    if hub.fault in ("trickle", "endless", "short") and not head:
                        return self._misbehave(body, headers)
                    self._send(200, body, headers, head=head)

            def _misbehave(self, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(200)
                for key, value in headers.items():
                    self.send_header(key, value)
                if hub.fault == "short":
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                    return
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for _ in range(1 << 30 if hub.fault == "endless" else 60):
                        self.wfile.write(b"\0" * (1 << 16) if hub.fault == "endless" else b"x")
                        self.wfile.flush()
                        if hub.fault == "trickle":
                            time.sleep(1)
                except OSError:  # the client gave up
                    pass
                self.close_connection = True

            def do_HEAD(self) -> None:
                self.do_GET(head=True)

        return Handler


def _sibling(name: str, body: bytes, blobs: bool, *, grow: bool = False) -> dict[str, object]:
    """One entry of the model API's `siblings`: the name, and with `blobs` the size, the git blob
    id and (for weights, which the real hub keeps in LFS) the sha256; `grow` declares one byte more."""
    if not blobs:
        return {"rfilename": name}
    entry: dict[str, object] = {"rfilename": name, "size": len(body) + grow,
                                "blobId": hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()}
    if name.endswith((".safetensors", ".bin")):
        entry["lfs"] = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body) + grow}
    return entry


TINY_MARIAN = "heed-tests/opus-mt-tiny"


@contextlib.contextmanager
def serving_tiny_marian(directory: Path) -> Iterator[FakeHub]:
    """A FakeHub serving, as TINY_MARIAN, a tiny Marian model that transformers builds in `directory`."""
    from tests.pretrained_models import make_marian

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_marian(directory / "tiny-marian")
    with FakeHub() as hub:
        hub.add(TINY_MARIAN, model)
        yield hub
