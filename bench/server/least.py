"""The least server over sluice for ``bench.server``: what any HTTP enqueue costs on this
stack, whatever the server does beyond it.

A raw ASGI app on uvicorn (the settings ``sluice serve`` gives it) answering
``POST /api/queues/{name}/messages`` with the four steps no server can skip: read the
body, validate it as sluice's own ``Enqueue`` model, hand ``put_many`` to a thread (a
commit must not stop the event loop), answer the ids. No keys, no metrics, no routing,
no size limit, no problem documents: its rate is a bound for ``sluice serve``'s, set
against the in-process API in the same run.

Run: ``python -m bench.server.least --db URL --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.types import Receive, Scope, Send

import sluice
from sluice.server.models import Enqueue

__all__ = ["main", "make_app"]


def make_app(db: sluice.Database) -> Any:
    pool = ThreadPoolExecutor(8, thread_name_prefix="least")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan: nothing to start
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        queue = scope["path"].split("/")[3]
        if scope["method"] != "POST" or not body:
            status, answer = 204, b""  # the bench's readiness probe
        else:
            batch = Enqueue.model_validate_json(body)
            bodies = [m.payload() for m in batch.messages]
            put = db.queue(queue).put_many
            ids = await asyncio.get_running_loop().run_in_executor(pool, put, bodies)
            status, answer = 201, json.dumps({"ids": ids}).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(answer)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server.least", description=__doc__)
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    import uvicorn

    with sluice.connect(args.db) as db:
        uvicorn.run(make_app(db), host="127.0.0.1", port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
