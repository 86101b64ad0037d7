"""boto3's ceiling for ``bench.sqs``: an SQS endpoint that does no work at all, answering
each of the bench's requests with a canned, valid answer (the MD5s of the bench's fixed
bodies worked out once), on uvicorn with the settings ``sluice serve`` gives it.

No signature is checked and nothing is stored. boto3's rate against it is what boto3 can do
on this machine when the server costs nothing: the bound of the boto3 rows, since client
and server share the same 2 cores and one client process's threads share its GIL.

Run: ``python -m bench.sqs.floor --port N``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from bench.sqs.clients import BODIES

__all__ = ["ANSWERS", "app", "main"]


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _canned() -> dict[str, bytes]:
    ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(len(BODIES))]
    sent = [{"Id": str(i), "MessageId": m, "MD5OfMessageBody": _md5(b)}
            for i, (m, b) in enumerate(zip(ids, BODIES, strict=True))]  # fmt: skip
    received = [{"MessageId": m, "ReceiptHandle": f"canned-{i}", "MD5OfBody": _md5(b), "Body": b}
                for i, (m, b) in enumerate(zip(ids, BODIES, strict=True))]  # fmt: skip
    answers: dict[str, Any] = {
        "SendMessageBatch": {"Successful": sent, "Failed": []},
        "ReceiveMessage": {"Messages": received},
        "DeleteMessageBatch": {"Successful": [{"Id": str(i)} for i in range(len(BODIES))]},
        "SendMessage": {"MessageId": ids[0], "MD5OfMessageBody": _md5(BODIES[0])},
    }
    return {f"AmazonSQS.{op}": json.dumps(a).encode() for op, a in answers.items()}


ANSWERS = _canned()
"""The answer to each ``X-Amz-Target`` the bench sends."""
_HEADERS = [(b"content-type", b"application/x-amz-json-1.0")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A bare ASGI app: reads the body (as any endpoint must), answers from ANSWERS."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    target = dict(scope["headers"]).get(b"x-amz-target", b"").decode()
    body = ANSWERS.get(target)
    status = 200 if body is not None else 400
    body = body if body is not None else b'{"__type": "InvalidAction"}'
    headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sqs.floor", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level.lower())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
