"""A deadline for a request's headers, which uvicorn does not have.

uvicorn closes a kept-alive connection that stays silent, but a connection that sends
part of a request line or header and then trickles or stops is held for as long as the
client likes (slowloris): its keep-alive timer is cancelled by the first byte, and a new
connection has none. With ``--limit-concurrency`` such connections would take every place.
The app's own middleware (``body_timeout``) cannot help: the app is only called once the
headers are whole. So the HTTP protocol itself gets the deadline: from the connection's
start, and from the end of each response on a kept-alive one, the next request's headers
must be whole within ``timeout`` seconds, or the connection is answered 408 and closed.

It extends uvicorn's httptools protocol (``uvicorn.run(http=...)`` takes a protocol
class), through the parser callbacks and the transport that class is built on.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sluice.errors import ConfigurationError
from sluice.server.problems import problem_body

__all__ = ["HEADER_TIMEOUT", "with_header_timeout"]

HEADER_TIMEOUT = 30.0
"""Seconds a request's headers may take to arrive, by default (nginx gives 60)."""


def _answer(timeout: float) -> bytes:
    detail = f"the request's headers did not all arrive within {timeout:g} s"
    body = json.dumps(problem_body(408, detail, error="RequestTimeout")).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def with_header_timeout(timeout: float | None = None) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, answering 408 to headers slower than ``timeout``
    seconds (None: HEADER_TIMEOUT)."""
    seconds = HEADER_TIMEOUT if timeout is None else timeout
    if not seconds > 0:
        raise ConfigurationError(f"header_timeout must be positive seconds, not {seconds!r}")
    answer = _answer(seconds)

    class HeaderDeadline(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            # Only between requests: a request whose headers came is the app's to end.
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(answer)
                self.transport.close()

    return HeaderDeadline
