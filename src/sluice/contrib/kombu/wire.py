"""The frames between a worker and its consumer process (sluice.contrib.kombu.sidecar):
each a 4-byte big-endian length, then a pickled tuple whose first item says what it is.

Both ends are this package in the same interpreter (the worker starts the other with its
own ``sys.executable``) over a socketpair nobody else holds, so pickle is safe here and the
cheapest encoding for the payloads kombu already has as dicts.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

__all__ = ["Frames", "frame", "read_frame"]

_LENGTH = struct.Struct(">I")


def frame(message: tuple[Any, ...]) -> bytes:
    """``message`` as one frame."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


class Frames:
    """Frames out of bytes as they arrive in pieces (the worker's non-blocking reads)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        """The frames ``data`` completes, in order; a partial one waits for more."""
        buffer = self._buffer
        buffer += data
        found: list[tuple[Any, ...]] = []
        start = 0
        while len(buffer) - start >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(buffer, start)
            end = start + _LENGTH.size + size
            if len(buffer) < end:
                break
            found.append(pickle.loads(buffer[start + _LENGTH.size : end]))  # noqa: S301 - our peer
            start = end
        del buffer[:start]
        return found


def read_frame(sock: socket.socket) -> tuple[Any, ...] | None:
    """The next frame from a blocking socket; None at its end (the other side is gone)."""
    head = _read_exactly(sock, _LENGTH.size)
    if head is None:
        return None
    body = _read_exactly(sock, _LENGTH.unpack(head)[0])
    if body is None:
        return None
    message: tuple[Any, ...] = pickle.loads(body)  # noqa: S301 - our own peer
    return message


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        try:
            chunk = sock.recv(min(size, 1 << 20))
        except OSError:  # reset, or closed by this side while stopping
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
