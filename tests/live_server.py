"""A real uvicorn server in a thread of the test's process, for what Starlette's
TestClient cannot do: read an endless stream, or serve a browser."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["serve"]


@contextlib.contextmanager
def serve(app: Any, **config: Any) -> Iterator[str]:
    """``app`` served on a free loopback port until the block ends; its base URL.
    ``config``: more of uvicorn.Config's options (``http=`` a protocol class)."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on",
                                           **config))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # uvicorn sets it once it listens
        if not thread.is_alive():
            raise AssertionError("the server did not start")
        thread.join(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
