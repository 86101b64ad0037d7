"""Node-to-node forwarding between two real processes, each killed with SIGKILL in the
middle of the transfer: `sluice run` sends the queue `outbox` of one SQLite file through
its outgoing http gateway into the incoming gateway `inbox` that `sluice serve` of
another file exposes, one message per request or in batches (the sender a pipeline,
as `sluice run` runs it). Every message arrives once, in order per group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sluice

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from sluice.server.grants import Grant, Keys
from tests.integration.test_serve import free_port, ready, serve

pytestmark = pytest.mark.slow

GROUPS = 3


def run(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "run", "--db", url, "--poll", "0.05"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    if process.stderr is not None:
        process.stderr.close()


def arrived(url: str) -> int:
    with sluice.connect(url) as db:
        return int(db.queue("inbox").stats()["ready"])


def until(url: str, at_least: int, processes: list[subprocess.Popen[str]], n: int) -> None:
    """Until the receiver holds ``at_least`` messages (real processes: polled, 90 s),
    not yet all ``n`` unless ``at_least`` is all (a kill then is mid-transfer)."""
    deadline = time.monotonic() + 90
    while (got := arrived(url)) < at_least:
        for p in processes:
            if p.poll() is not None:
                raise AssertionError(f"a process exited: {p.stderr.read() if p.stderr else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"only {arrived(url)} of {at_least} arrived in 90 s")
        time.sleep(0.02)
    if at_least < n and got >= n:
        pytest.fail(f"all {n} arrived before the kill meant for the middle; send more")


@pytest.mark.parametrize(("batch", "n"), [(1, 300), (16, 6000)])
def test_every_message_arrives_once_in_order_through_kills(
    tmp_path: Path, batch: int, n: int
) -> None:
    receiver = f"sqlite:///{tmp_path / 'receiver.db'}"
    sender = f"sqlite:///{tmp_path / 'sender.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with sluice.connect(receiver) as db:
        db.gateways.define("inbox", direction="in", transport="http")
        key = Keys(db).add("forwarder", [Grant.parse("inbox:produce")])
    with sluice.connect(sender) as db:
        # Tries enough to outlast a receiver that is down for a while.
        db.gateways.define("outbox", direction="out", transport="http", attempts=10_000,
                           backoff=0.02, max_backoff=0.2, url=f"{base}/api/gateways/inbox",
                           header_authorization=f"Bearer {key}", batch=batch)  # fmt: skip
        for g in range(0, n, 500):
            with db.transaction() as tx:
                for i in range(g, min(g + 500, n)):
                    tx.enqueue("outbox", {"n": i}, group=f"g{i % GROUPS}")

    server = serve(receiver, "--port", str(port))
    ready(base, server)
    sending = run(sender)
    try:
        until(receiver, n // 4, [server, sending], n)
        kill(sending)  # the sender, mid-transfer
        sending = run(sender)
        until(receiver, n // 2, [server, sending], n)
        kill(server)  # the receiver, mid-transfer
        # A post in flight when it died is run again by a retry after this long.
        server = serve(receiver, "--port", str(port), "--idempotency-stale", "1")
        ready(base, server)
        until(receiver, n, [server, sending], n)
        time.sleep(0.3)  # anything more would arrive now: a duplicate would show
    finally:
        for p in (sending, server):
            if p.poll() is None:
                p.terminate()
                p.wait(30)
            if p.stderr is not None:
                p.stderr.close()

    with sluice.connect(receiver) as db:
        got = db.queue("inbox").browse(limit=n * 2)
    numbers = [m.body["n"] for m in got]
    assert sorted(numbers) == list(range(n))  # all, and each once
    for g in range(GROUPS):
        mine = [m.body["n"] for m in got if m.group == f"g{g}"]
        assert mine == sorted(mine)  # in order per group
    with sluice.connect(sender) as db:
        assert db.queue("outbox").stats()["ready"] == 0
