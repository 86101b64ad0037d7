"""A lean SQS client for ``bench.sqs``: the JSON protocol over the standard library's
``http.client``, each request signed with Signature Version 4 (a few lines of hashlib and
hmac; the day's signing key derived once), and nothing else: no shape validation, no
event hooks, no MD5 checks of the answers.

boto3 spends about a millisecond of CPU per request on this machine, as much as the server
spends on a batch of 10; on 2 cores shared by client and server, its rows measure boto3 as
much as the endpoint. This client's rows measure the endpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from bench.server.clients import Factory, HttpClient, Op
from bench.sqs.clients import BODIES, REGION

__all__ = ["Signer", "lean_ops"]

_SIGNED = "content-type;host;x-amz-date;x-amz-target"
_CONTENT_TYPE = "application/x-amz-json-1.0"


class Signer:
    """Signs a JSON-protocol SQS request for ``key`` with ``secret`` (SigV4, service sqs)."""

    def __init__(self, key: str, secret: str, host: str) -> None:
        self.key, self.secret, self.host = key, secret, host
        self._day = ""
        self._signing = b""

    def headers(self, target: str, body: bytes) -> dict[str, str]:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = stamp[:8]
        if day != self._day:
            k = ("AWS4" + self.secret).encode()
            for part in (day, REGION, "sqs", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            self._day, self._signing = day, k
        target = f"AmazonSQS.{target}"
        canonical = (
            f"POST\n/\n\ncontent-type:{_CONTENT_TYPE}\nhost:{self.host}\nx-amz-date:{stamp}\n"
            f"x-amz-target:{target}\n\n{_SIGNED}\n{hashlib.sha256(body).hexdigest()}"
        )
        scope = f"{day}/{REGION}/sqs/aws4_request"
        to_sign = (
            f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        )
        signature = hmac.new(self._signing, to_sign.encode(), hashlib.sha256).hexdigest()
        return {
            "Content-Type": _CONTENT_TYPE,
            "X-Amz-Date": stamp,
            "X-Amz-Target": target,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={self.key}/{scope}, "
            f"SignedHeaders={_SIGNED}, Signature={signature}",
        }


class _Client:
    def __init__(self, port: int, signer: Signer) -> None:
        self.http = HttpClient(port, {})
        self.signer = signer

    def call(self, target: str, params: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(params).encode()
        conn = self.http.conn
        conn.request("POST", "/", body=body, headers=self.signer.headers(target, body))
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{target}: {response.status} {data[:300]!r}")
        answer: dict[str, Any] = json.loads(data)
        return answer


def lean_ops(port: int, key: str, secret: str, queue_url: str) -> dict[str, Factory]:
    """The workloads of ``bench.sqs.clients.sqs_ops`` through the lean client."""
    signer = Signer(key, secret, f"127.0.0.1:{port}")
    entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(BODIES)]
    assert urlsplit(queue_url).path  # a queue URL of this endpoint

    def make(kind: str) -> Factory:
        def factory() -> tuple[Op, Callable[[], None]]:
            c = _Client(port, signer)

            def send_10() -> int:
                done = c.call("SendMessageBatch", {"QueueUrl": queue_url, "Entries": entries})
                if done.get("Failed"):
                    raise RuntimeError(f"SendMessageBatch: {done['Failed'][:2]}")
                return len(done["Successful"])

            def receive_delete() -> int:
                got = c.call("ReceiveMessage", {"QueueUrl": queue_url, "MaxNumberOfMessages": 10})
                messages = got.get("Messages", [])
                if not messages:
                    return 0
                handles = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                           for i, m in enumerate(messages)]  # fmt: skip
                done = c.call("DeleteMessageBatch", {"QueueUrl": queue_url, "Entries": handles})
                if done.get("Failed"):
                    raise RuntimeError(f"DeleteMessageBatch: {done['Failed'][:2]}")
                return len(messages)

            def send_1() -> int:
                c.call("SendMessage", {"QueueUrl": queue_url, "MessageBody": BODIES[0]})
                return 1

            ops: dict[str, Op] = {"send 10": send_10, "receive 10 + delete": receive_delete,
                                  "send 1": send_1}  # fmt: skip
            return ops[kind], c.http.conn.close

        return factory

    return {kind: make(kind) for kind in ("send 10", "receive 10 + delete", "send 1")}
