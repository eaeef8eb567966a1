"""A deadline on reading each request, for uvicorn's HTTP/1.1 protocol (h11).

uvicorn closes an idle keep-alive connection, but a client that sends its headers (or its body) a
byte at a time is waited for without end: 200 such connections held 200 sockets and their tasks
for as long as they liked. Here each request must arrive whole (headers and body) within
`read_timeout` seconds of its first byte (of the connection, for the first request); a slower
client is disconnected, and the server logs one line. Responses are not limited: a decoding may
take as long as `--timeout` allows.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("heed.serve")


def read_timeout_protocol(read_timeout: float) -> type[H11Protocol]:
    """uvicorn's H11Protocol with a deadline of `read_timeout` seconds on reading each request;
    pass it as `uvicorn.run(..., http=...)`."""

    class ReadTimeoutH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            # their_state: IDLE until a request's headers are in, SEND_BODY while its body comes,
            # DONE once it is whole.
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self._arm()
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()  # the keep-alive timer waits for the next request's first byte; then handle_events arms

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(read_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            client: Any = self.client
            where = f"{client[0]}:{client[1]}" if client else "a client"
            log.warning("%s sent no whole request within %g s (--read-timeout): disconnected", where, read_timeout)
            self.transport.close()

    return ReadTimeoutH11Protocol


__all__ = ["read_timeout_protocol"]
