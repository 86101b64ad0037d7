"""A TCP proxy in front of PostgreSQL that can lose one answer, for tests of a statement
whose outcome the client never heard: the server ran and committed it, and the client's
connection broke before the answer came (a backend terminated, a server crashed, a
network cut at that moment).

Armed with a needle (bytes a request carries, a queue's name in a statement's
parameters), the proxy lets the next request with the needle through to the server,
swallows the server's answer up to its ReadyForQuery (the statement and its implicit
transaction are over by then), and closes both sides of that connection. Every other
connection, before and after, is passed through unchanged. While ``refusing`` is set,
a new connection is closed at once (the server is down).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["LossyProxy"]

_READY = b"Z\x00\x00\x00\x05"
"""PostgreSQL's ReadyForQuery message, its tag and length: the server's answer to a
request (an implicit transaction's statement and its commit) is over."""


class LossyProxy:
    """Listens on a loopback port and forwards to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._needle: bytes | None = None
        self._victim: socket.socket | None = None
        self.cut = threading.Event()
        """Set once an answer was swallowed and its connection closed."""
        self.refusing = threading.Event()
        """While set, new connections are closed at once."""
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, name="lossy-proxy", daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (a PostgreSQL URL) through this proxy."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def arm(self, needle: bytes) -> None:
        """Lose the answer to the next request that carries ``needle``."""
        with self._lock:
            self._needle, self._victim = needle, None
            self.cut.clear()

    def sever(self) -> None:
        """The server goes away: every open connection is closed, new ones are refused
        until ``refusing`` is cleared."""
        with self._lock:  # no connection is let in between the two (see _accept)
            self.refusing.set()
            socks, self._open = self._open, []
        _close(*socks)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            if self.refusing.is_set():
                _close(client)
                continue
            server = socket.create_connection(self._target)
            with self._lock:
                # Severed while this one was being connected: it is refused as well.
                refused = self.refusing.is_set()
                if not refused:
                    self._open += [client, server]
            if refused:
                _close(client, server)
                continue
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self._lock:
                    if self._needle is not None and self._needle in data:
                        self._needle, self._victim = None, client
                server.sendall(data)
        _close(client, server)

    def _answers(self, server: socket.socket, client: socket.socket) -> None:
        swallowed = b""
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                with self._lock:
                    lost = self._victim is client
                if not lost:
                    client.sendall(data)
                    continue
                swallowed += data
                if _READY in swallowed:
                    with self._lock:
                        self._victim = None
                    self.cut.set()  # before the close the client meets
                    break
        _close(client, server)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
