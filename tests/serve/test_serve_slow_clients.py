"""Slow clients against a real uvicorn server on loopback: connections that trickle their headers
or body, or send nothing, are closed after --read-timeout, while a normal client is served."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
import httpx
import uvicorn

from heed.api import Translator
from heed.serve.app import ServeSettings, create_app
from heed.serve.slow_clients import read_timeout_protocol

READ_TIMEOUT = 1.5


@pytest.fixture
def server(trained_run: Path) -> Iterator[tuple[str, int]]:
    app = create_app({"tiny": Translator.load(trained_run, device="cpu")}, ServeSettings(read_timeout=READ_TIMEOUT))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                            http=read_timeout_protocol(READ_TIMEOUT))
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield "127.0.0.1", port
    running.should_exit = True
    thread.join(10)


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `sock` (recv gives b""), or None if it stays open."""
    started = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - started < seconds:
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def test_trickling_and_silent_clients_are_disconnected_and_others_served(server: tuple[str, int]) -> None:
    host, port = server
    body = b'{"model": "tiny", "sentences": ["le 3 mars 1998"]}'
    slow = []
    for kind in ("silent", "headers", "body") * 10:  # 30 connections, bounded in count
        sock = socket.create_connection((host, port))
        if kind == "headers":
            sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        elif kind == "body":
            sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])  # never the rest
        slow.append(sock)
    started = time.monotonic()
    # Keep trickling one byte a second on the header senders: each byte must not reset the deadline.
    for _ in range(2):
        time.sleep(0.5)
        for sock, kind in zip(slow, ("silent", "headers", "body") * 10):
            if kind == "headers":
                sock.sendall(b"X")
    reply = httpx.post(f"http://{host}:{port}/v1/translate", content=body,
                       headers={"content-type": "application/json"}, timeout=20)
    assert reply.status_code == 200, reply.text
    waits = [_closed_within(sock, READ_TIMEOUT + 5) for sock in slow]
    for sock in slow:
        sock.close()
    assert all(w is not None for w in waits), waits
    assert time.monotonic() - started < READ_TIMEOUT + 6


def test_a_keep_alive_client_gets_a_fresh_deadline_per_request(server: tuple[str, int]) -> None:
    host, port = server
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=20) as client:
        for _ in range(3):  # one connection, requests spread over more than one read timeout
            assert client.get("/health").status_code == 200
            time.sleep(READ_TIMEOUT / 2)
