"""The framework's floor for ``bench.server``: a bare Starlette route that reads the request
body and answers 204, on uvicorn with the settings ``sluice serve`` gives it.

Run: ``python -m bench.server.floor --port N``. ``app`` is also called directly (no socket,
no uvicorn) by bench/server/profile.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["FLOOR_PATH", "app", "main"]

FLOOR_PATH = "/floor"


async def _nothing(request: Request) -> Response:
    await request.body()  # as an enqueue does: the body is read, then dropped
    return Response(status_code=204)


app = Starlette(routes=[Route(FLOOR_PATH, _nothing, methods=["POST"])])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server.floor", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
