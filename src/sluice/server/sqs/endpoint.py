"""The SQS endpoint in the app: ASGI middleware that answers SQS's requests (``POST /``
with ``X-Amz-Target: AmazonSQS.<Op>``, or a form with ``Action=<Op>`` to ``/`` or a queue
URL) before the rest of the app, checks their signature against the sluice key their
access key id names, and runs the operation under that key's grants."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import sluice
from sluice.errors import (
    ConfigurationError,
    ConnectionLost,
    QueueNotFound,
    SluiceError,
    StorageError,
)
from sluice.server.asyncdb import AsyncDb
from sluice.server.auth import ANONYMOUS, Gate
from sluice.server.grants import Principal
from sluice.server.leases import Leases
from sluice.server.offload import Offload
from sluice.server.sqs import handles, messages, queues, sigv4
from sluice.server.sqs.context import Call, SqsState
from sluice.server.sqs.errors import SqsError, invalid_parameter, no_queue, unsupported
from sluice.server.sqs.held import Acks
from sluice.server.sqs.protocol import Answer, Asked, error_answer, from_form, from_json, ok_answer

__all__ = ["SqsEndpoint"]

log = logging.getLogger(__name__)

Sync = Callable[[Call, dict[str, Any]], dict[str, Any]]
Async = Callable[[Call, dict[str, Any]], Awaitable[dict[str, Any]]]

_SYNC: dict[str, Sync] = {**queues.OPERATIONS, **messages.OPERATIONS}
_ASYNC: dict[str, Async] = {
    **queues.ASYNC_OPERATIONS,
    **messages.ASYNC_OPERATIONS,
    **handles.ASYNC_OPERATIONS,
}
_UNSUPPORTED = {
    "AddPermission": "access is sluice's keys and grants (sluice keys add --grant)",
    "RemovePermission": "access is sluice's keys and grants (sluice keys revoke)",
    "StartMessageMoveTask": "move failed messages back with Queue.retry or the console",
    "ListMessageMoveTasks": "there are no message-move tasks",
    "CancelMessageMoveTask": "there are no message-move tasks",
}
_QUEUE_PATH = re.compile(r"^/\d{12}/[^/]+/?$")
_REGION = "us-east-1"


class SqsEndpoint:
    """The middleware (see the module docstring); everything else goes on to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        db: sluice.Database,
        gate: Gate,
        leases: Leases,
        aio: AsyncDb,
        state: SqsState,
        offload: Offload,
        reset: Callable[[], Awaitable[None]] | None = None,
        extra: Mapping[str, Sync] | None = None,
    ) -> None:
        self.app = app
        self._offload = offload
        self._acks = Acks(db, offload)
        self._db = db
        self._gate = gate
        self._leases = leases
        self._aio = aio
        self._state = state
        self._reset = reset
        self._sync = {**_SYNC, **(extra or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path: str = scope["path"]
        if self._reset is not None and path == "/moto-api/reset":
            await self._reset()
            await _send(send, (200, [(b"content-type", b"application/json")], b'{"status": "ok"}'))
            return
        target = headers.get("x-amz-target")
        form = headers.get("content-type", "").startswith("application/x-www-form-urlencoded")
        if target is None and not (form and (path == "/" or _QUEUE_PATH.match(path))):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        protocol = "json" if target is not None else "query"
        try:
            if target is not None:
                asked = from_json(target, body)
            else:
                asked = from_form(body, scope.get("query_string", b"").decode("latin-1"), path)
            answer = await self._answer(scope, headers, body, asked)
        except SqsError as exc:
            answer = error_answer(protocol, exc)
        await _send(send, answer)

    async def _answer(self, scope: Scope, headers: Headers, body: bytes, asked: Asked) -> Answer:
        who, region = await self._principal(scope, headers, body)
        host = headers.get("host", "localhost")
        call = Call(
            self._db,
            self._leases,
            self._aio,
            who,
            self._state,
            region,
            f"{scope.get('scheme', 'http')}://{host}",
            self._offload,
            self._acks,
        )
        try:
            result = await self._run(call, asked)
        except SqsError:
            raise
        except QueueNotFound:
            raise no_queue() from None
        except ConfigurationError as exc:
            raise invalid_parameter(str(exc)) from None
        except (ConnectionLost, StorageError) as exc:
            raise SqsError(
                "ServiceUnavailable", f"the database is unavailable: {exc}", 503, sender=False
            ) from None
        except SluiceError as exc:
            raise SqsError(type(exc).__name__, str(exc)) from None
        except Exception:
            log.exception("SQS %s failed", asked.operation)
            raise SqsError(
                "InternalError", "the server failed; see its log", 500, sender=False
            ) from None
        return ok_answer(asked, result)

    async def _run(self, call: Call, asked: Asked) -> dict[str, Any]:
        op = asked.operation
        if op in self._sync:
            return await self._offload(self._sync[op], call, asked.params)
        if op in _ASYNC:
            return await _ASYNC[op](call, asked.params)
        if op in _UNSUPPORTED:
            raise unsupported(op, _UNSUPPORTED[op])
        raise SqsError("InvalidAction", f"The action {op} is not valid for this endpoint.")

    async def _principal(
        self, scope: Scope, headers: Headers, body: bytes
    ) -> tuple[Principal, str]:
        keys = self._gate.keys
        if keys is None:
            return ANONYMOUS, _REGION
        cred = sigv4.credential(headers)
        # Remembered for a second: read on the loop, no thread hop per request.
        found = keys.remembered_signer(cred.access_key) or await self._offload(
            keys.signer, cred.access_key
        )
        if found is None:
            raise SqsError(
                "InvalidClientTokenId",
                "The security token included in the request is invalid: the access key id is "
                "not the name of a valid key of this database, or its secret cannot be "
                "recovered here (docs/sqs.md, keys)",
                403,
            )
        who, secret = found
        sigv4.verify(
            cred,
            secret,
            method="POST",
            raw_path=scope.get("raw_path", b"/").decode("latin-1").split("?")[0],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
            body=body,
        )
        return who, cred.region


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message: Message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send(send: Send, answer: Answer) -> None:
    status, headers, body = answer
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
