"""The http transport's client: POSTs over kept-alive HTTP/1.1 connections (the standard
library's http.client), a connection per origin, with failures said as Demaq's kinds.

Why not httpx: a sender posts one message (or batch) at a time and waits for the answer,
so a pool, HTTP/2 and an async core buy it nothing, and on this project's machines
httpx spends about three times http.client's CPU per request (1.0 against 0.3 ms),
CPU the receiving server on the same host could use.

Failures: nobody listening, a reset or any other socket error is ``disconnected``; no
connection or answer within ``timeout`` is ``timed out``; an answer that is not HTTP
(or is cut short) is ``bad response``. All three may pass (``retry``). A connection kept
from an earlier request that the server has closed meanwhile (it keeps idle ones only
so long) is found closed before it is used, or fails before any answer came back; that
request is sent again, once, on a new connection. The status is the caller's to judge.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sluice.errors import DeliveryFailed

__all__ = ["Answer", "HttpClient"]

_ORIGINS = 8
"""Connections kept (the most recently used origins): a ``url_property`` may name many."""
_GONE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a kept connection the server closed meanwhile fails with, before any answer."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer, read whole."""

    status: int
    content_type: str | None
    charset: str | None
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode(self.charset or "utf-8", errors="replace")


class HttpClient:
    """POSTs with fixed ``headers``, ``timeout`` seconds for connecting and each read."""

    def __init__(self, *, timeout: float, headers: dict[str, str]) -> None:
        self._timeout = timeout
        self._headers = headers
        self._connections: OrderedDict[tuple[str, str], http.client.HTTPConnection] = OrderedDict()
        self._tls: ssl.SSLContext | None = None

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        parts = urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target = f"{target}?{parts.query}"
        origin = (parts.scheme, parts.netloc)
        sent = {**self._headers, **headers}
        kept = self._kept(origin)
        conn = kept or self._connect(origin, parts.hostname or "", parts.port)
        try:
            return self._exchange(conn, target, body, sent)
        except Exception as exc:
            self._drop(origin)
            if kept is None or not isinstance(exc, _GONE):
                raise _failure(url, exc) from None
        conn = self._connect(origin, parts.hostname or "", parts.port)  # once, anew
        try:
            return self._exchange(conn, target, body, sent)
        except Exception as exc:
            self._drop(origin)
            raise _failure(url, exc) from None

    def _kept(self, origin: tuple[str, str]) -> http.client.HTTPConnection | None:
        """The origin's kept connection if it is still open: a server that closed it
        has made it readable (its end of file) while nothing was asked. (Not looked at
        over TLS, where a server may send session tickets unasked: the one resend
        covers it.)"""
        conn = self._connections.get(origin)
        if conn is None:
            return None
        sock = conn.sock
        closed = sock is None or (
            not isinstance(sock, ssl.SSLSocket) and bool(select.select([sock], [], [], 0)[0])
        )
        if closed:
            self._drop(origin)
            return None
        self._connections.move_to_end(origin)
        return conn

    def _connect(
        self, origin: tuple[str, str], host: str, port: int | None
    ) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if origin[0] == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            conn = http.client.HTTPSConnection(host, port, timeout=self._timeout,
                                               context=self._tls)  # fmt: skip
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._timeout)
        self._connections[origin] = conn
        while len(self._connections) > _ORIGINS:
            _, old = self._connections.popitem(last=False)
            old.close()
        return conn

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection, target: str, body: bytes, headers: dict[str, str]
    ) -> Answer:
        if conn.sock is None:
            conn.connect()
            # The request goes in one write (http.client joins a bytes body to its
            # head), so no Nagle delay waits on it; small answers need none either.
            if conn.sock is not None:
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request("POST", target, body, headers)
        response = conn.getresponse()
        content = response.read()
        if response.will_close:
            conn.close()
        message = response.msg
        kind = message.get("content-type")
        return Answer(response.status, kind, message.get_content_charset(), content)

    def _drop(self, origin: tuple[str, str]) -> None:
        conn = self._connections.pop(origin, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


def _failure(url: str, exc: Exception) -> DeliveryFailed:
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return DeliveryFailed("timed out", f"POST {url}: no answer in time ({exc})")
    if isinstance(exc, http.client.HTTPException):  # not HTTP, or cut short
        return DeliveryFailed("bad response", f"POST {url}: {exc!r}")
    if isinstance(exc, (OSError, ValueError)):  # refused, reset, unreachable, bad host
        return DeliveryFailed("disconnected", f"POST {url}: {exc!r}")
    raise exc
