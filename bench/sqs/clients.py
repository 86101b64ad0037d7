"""The clients of ``bench.sqs``: the same work through three APIs, each a factory of one
closed-loop client's operation for ``bench.server.clients.drive``.

- **SQS**: boto3 (one client per thread, Signature Version 4 with a sluice key):
  SendMessageBatch of 10, ReceiveMessage of up to 10 + DeleteMessageBatch, SendMessage.
- **HTTP**: sluice's own API with the same key (``Authorization: Bearer``), the standard
  library's ``http.client`` as in ``bench.server``: an enqueue of 10 (one request), a lease
  of up to 10 then one ack per message, or a transaction (begin, dequeue of up to 10,
  commit: 3 requests), an enqueue of 1.
- **in-process**: ``db.queue(q)``: ``put_many`` of 10, ``tx.dequeue(q, limit=10)`` in a
  transaction (done at its commit), ``put``.

An operation returns the messages it moved; 0 means the queue ran dry (that thread stops).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sluice
from bench.harness import make_bodies
from bench.server.clients import Factory, HttpClient, Op, enqueue_op

__all__ = [
    "BODIES",
    "REGION",
    "WORKLOADS",
    "http_ops",
    "in_process_ops",
    "sqs_ops",
]

REGION = "us-east-1"
WORKLOADS = ("send 10", "receive 10 + delete", "send 1")
BODIES: list[str] = [json.dumps(b) for b in make_bodies(10)]
"""Ten message bodies of about 100 bytes (JSON text; SQS's bodies are strings)."""

_DICTS: list[Any] = make_bodies(10)
_ENQUEUE_10 = json.dumps({"messages": [{"body": b} for b in _DICTS]}).encode()
_ENQUEUE_1 = json.dumps({"messages": [{"body": _DICTS[0]}]}).encode()
_LEASE_10 = json.dumps({"limit": 10, "wait": 0}).encode()
_DEQUEUE_10 = json.dumps({"limit": 10}).encode()


def sqs_ops(endpoint: str, key: str, secret: str, queue_url: str) -> dict[str, Factory]:
    """boto3 against the endpoint: one client (its own connection pool) per thread."""
    import boto3
    from botocore.config import Config

    entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(BODIES)]

    def client() -> Any:
        return boto3.client(
            "sqs", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 0}, max_pool_connections=1),
        )  # fmt: skip

    def send_10() -> tuple[Op, Callable[[], None]]:
        sqs = client()

        def op() -> int:
            done = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
            if done.get("Failed"):
                raise RuntimeError(f"SendMessageBatch: {done['Failed'][:2]}")
            return len(done["Successful"])

        return op, sqs.close

    def receive_delete() -> tuple[Op, Callable[[], None]]:
        sqs = client()

        def op() -> int:
            got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            if not messages:
                return 0
            handles = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                       for i, m in enumerate(messages)]  # fmt: skip
            done = sqs.delete_message_batch(QueueUrl=queue_url, Entries=handles)
            if done.get("Failed"):
                raise RuntimeError(f"DeleteMessageBatch: {done['Failed'][:2]}")
            return len(messages)

        return op, sqs.close

    def send_1() -> tuple[Op, Callable[[], None]]:
        sqs = client()

        def op() -> int:
            sqs.send_message(QueueUrl=queue_url, MessageBody=BODIES[0])
            return 1

        return op, sqs.close

    return {"send 10": send_10, "receive 10 + delete": receive_delete, "send 1": send_1}


def http_ops(port: int, secret: str, queue: str) -> dict[str, Factory]:
    """sluice's HTTP API: enqueue 10, lease 10 + ack each, enqueue 1; and the
    transaction route (begin, dequeue 10, commit) under ``receive 10 + delete (tx)``."""
    auth = {"Authorization": f"Bearer {secret}"}
    path = f"/api/queues/{queue}"

    def enqueue(body: bytes, n: int) -> Factory:
        return enqueue_op(port, auth, path, body, n)

    def lease_ack() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            taken = json.loads(c.post(f"{path}/leases", _LEASE_10, 200))["messages"]
            for m in taken:
                c.post(f"/api/leases/{m['token']}/ack", b"", 204)
            return len(taken)

        return op, c.conn.close

    def transaction() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            ref = json.loads(c.post("/api/transactions", b"{}", 201))["id"]
            taken = json.loads(c.post(f"/api/transactions/{ref}/queues/{queue}/dequeue",
                                      _DEQUEUE_10, 200))  # fmt: skip
            c.post(f"/api/transactions/{ref}/commit", b"", 204)
            return len(taken)

        return op, c.conn.close

    return {"send 10": enqueue(_ENQUEUE_10, 10), "receive 10 + delete": lease_ack,
            "receive 10 + delete (tx)": transaction, "send 1": enqueue(_ENQUEUE_1, 1)}  # fmt: skip


def in_process_ops(db: sluice.Database, queue: str) -> dict[str, Factory]:
    """The Python API on one Database shared by the threads."""

    def make(kind: str) -> Factory:
        def factory() -> tuple[Op, Callable[[], None]]:
            q = db.queue(queue)

            def put_many() -> int:
                return len(q.put_many(_DICTS))

            def dequeue_10() -> int:
                with db.transaction() as tx:
                    return len(tx.dequeue(queue, limit=10))

            def put() -> int:
                q.put(_DICTS[0])
                return 1

            ops: dict[str, Op] = {"send 10": put_many, "receive 10 + delete": dequeue_10,
                                  "send 1": put}  # fmt: skip
            return ops[kind], lambda: None

        return factory

    return {kind: make(kind) for kind in WORKLOADS}
