"""A Hugging Face hub on loopback, enough for huggingface_hub's model_info and snapshot_download:
`/api/models/ORG/NAME[/revision/REV]` answers the repository's commit and files,
`/api/models/ORG/NAME/tree/REV` lists them, and
`/ORG/NAME/resolve/REV/FILE` serves a file (HEAD: its commit, etag and size). Unknown repositories,
revisions and files get the hub's 404s with its X-Error-Code. Every request is counted by kind."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, tuple[str, dict[str, bytes]]] = {}  # repo -> (commit, {file: bytes})
        self.requests: Counter[str] = Counter()  # "api", "HEAD file", "GET file"
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

    def __enter__(self) -> "FakeHub":
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
                    found = self._repo(api.group(1), api.group(2))
                    if found:
                        commit, files = found
                        info = {"id": api.group(1), "modelId": api.group(1), "sha": commit, "private": False,
                                "siblings": [{"rfilename": name} for name in files]}
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
                    self._send(200, body, {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(body).hexdigest()}"',
                                           "Content-Type": "application/octet-stream"}, head=head)

            def do_HEAD(self) -> None:
                self.do_GET(head=True)

        return Handler
