"""``sluice serve`` as a real process on a real port: keys asked, a message through it,
and kill -9 while it holds a lease loses nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sluice

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from sluice.server.grants import Grant, Keys  # noqa: E402

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve(url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "serve", "--db", url, "--log-level", "warning",
         *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def ready(base: str, process: subprocess.Popen[str]) -> None:
    """Until the server answers (a real process starting: polled, for at most 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"sluice serve exited: {process.stderr.read() if process.stderr else ''}"
            )
        try:
            if httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("sluice serve did not answer within 60 s")


@pytest.fixture
def database(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    with sluice.connect(url) as db:
        db.create_queue("orders")
        secret = Keys(db).add("app", [Grant.parse("orders:produce,consume,browse")])
    return url, secret


def test_a_served_database_takes_and_gives_messages(database: tuple[str, str]) -> None:
    url, secret = database
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = serve(url, "--port", str(port))
    try:
        ready(base, process)
        auth = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(f"{base}/api/queues").status_code == 401
        two = {"messages": [{"body": {"id": 1}}, {"body": {"id": 2}}]}
        sent = httpx.post(f"{base}/api/queues/orders/messages", headers=auth, json=two)
        assert sent.status_code == 201, sent.text
        taken = httpx.post(f"{base}/api/queues/orders/leases", headers=auth,
                           json={"limit": 1}).json()["messages"]  # fmt: skip
        assert [m["body"] for m in taken] == [{"id": 1}]
        # And a transaction across requests that took the second and made a third.
        ref = httpx.post(f"{base}/api/transactions", headers=auth, json={}).json()["id"]
        moved = httpx.post(f"{base}/api/transactions/{ref}/queues/orders/dequeue",
                           headers=auth, json={}).json()  # fmt: skip
        assert [m["body"] for m in moved] == [{"id": 2}]
        made = httpx.post(f"{base}/api/transactions/{ref}/queues/orders/messages",
                          headers=auth, json={"messages": [{"body": {"id": 3}}]})  # fmt: skip
        assert made.status_code == 201, made.text
        # kill -9 with a message leased and the transaction open: nothing is lost, and
        # nothing of the transaction shows.
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()
    with sluice.connect(url) as db:
        db.recover()  # the dead server's session: its lease rolled back
        assert [m.body for m in db.queue("orders").browse()] == [{"id": 1}, {"id": 2}]


def test_no_auth_is_refused_off_loopback(tmp_path: Path) -> None:
    process = serve(f"sqlite:///{tmp_path / 'x.db'}", "--no-auth", "--host", "0.0.0.0")
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "--no-auth serves only on loopback" in err


def test_slow_clients_are_cut_off_at_the_timeouts_given(database: tuple[str, str]) -> None:
    url, secret = database
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = serve(url, "--port", str(port), "--header-timeout", "0.5", "--body-timeout", "0.5")
    try:
        ready(base, process)
        headers, body = (socket.create_connection(("127.0.0.1", port)) for _ in range(2))
        headers.sendall(b"GET /api/queues HTTP/1.1\r\nHost: x\r\n")  # never finished
        body.sendall(
            b"POST /api/queues/orders/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer " + secret.encode()
            + b"\r\n\r\n{"
        )  # fmt: skip
        for sock in (headers, body):
            sock.settimeout(30)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            sock.close()
            assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.parametrize("flag", ["--header-timeout", "--body-timeout"])
def test_a_timeout_that_is_not_positive_is_refused(tmp_path: Path, flag: str) -> None:
    process = serve(f"sqlite:///{tmp_path / 'x.db'}", flag, "0")
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "must be positive seconds" in err


def stopped(process: subprocess.Popen[str]) -> str:
    """What ``process`` wrote on stderr, once it is killed."""
    process.kill()
    _, err = process.communicate(timeout=30)
    return err


def test_a_database_without_keys_is_warned_of_with_how_to_add_one(
    database: tuple[str, str], tmp_path: Path
) -> None:
    # It started without a word, then answered 401 to every request.
    keyless = f"sqlite:///{tmp_path / 'keyless.db'}"
    sluice.connect(keyless).close()
    port = free_port()
    process = serve(keyless, "--port", str(port))
    try:
        ready(f"http://127.0.0.1:{port}", process)
    finally:
        err = stopped(process)
    warned = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warned) == 1, err
    assert f"the database {keyless} has no API key" in warned[0]
    assert f"sluice keys add NAME --admin --db {keyless}" in warned[0]
    # A database with a key: not a word of it.
    url, _ = database
    port = free_port()
    process = serve(url, "--port", str(port))
    try:
        ready(f"http://127.0.0.1:{port}", process)
    finally:
        assert "has no API key" not in stopped(process)
