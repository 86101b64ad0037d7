"""The servers of ``bench.server``, each in a process of its own: ``sluice serve`` (the real
CLI on uvicorn), the bare Starlette floor, and RabbitMQ's management API (its plugin enabled
when it is off). Also the CPU time a process has used, read from /proc.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import sluice
from bench.harness import RABBIT_HOST, RABBIT_PASSWORD, RABBIT_USER

__all__ = [
    "LOG_LEVEL",
    "RABBIT_API_PORT",
    "Server",
    "beam_pid",
    "canned_sqs",
    "child_environment",
    "cpu_seconds",
    "ensure_management",
    "floor",
    "least",
    "rabbit_auth",
    "sluice_serve",
]

LOG_LEVEL = "warning"
"""uvicorn's log level for both servers: no access log line per request (see the report)."""

RABBIT_API_PORT = 15672
_READY_SECONDS = 30.0
_PLUGIN = "rabbitmq_management"


@dataclass(frozen=True)
class Server:
    """A server process listening on 127.0.0.1:``port``."""

    pid: int
    port: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def child_environment() -> dict[str, str]:
    """This process's environment, with the sluice and bench it imports first on the path:
    the child runs the same code (a worktree's, not whatever is installed)."""
    src = Path(sluice.__file__).resolve().parent.parent
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(src), str(root), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)}


def _answers(port: int, method: str, path: str) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body=b"" if method == "POST" else None)
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


@contextmanager
def _process(name: str, argv: Sequence[str], probe: tuple[str, str]) -> Iterator[Server]:
    port = _free_port()
    proc = subprocess.Popen([*argv, "--port", str(port)], env=child_environment())
    try:
        deadline = time.monotonic() + _READY_SECONDS
        while not _answers(port, *probe):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} at its start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no answer on port {port} after {_READY_SECONDS:g} s")
            time.sleep(0.1)
        yield Server(proc.pid, port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sluice_serve(url: str, *extra: str) -> AbstractContextManager[Server]:
    """``sluice serve --db URL`` with keys asked, through the CLI's own entry point;
    ``extra``: more of its options (``--signing-key FILE`` for the SQS endpoint)."""
    entry = "import sys; from sluice.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", entry, "serve", "--db", url, "--log-level", LOG_LEVEL,
            *extra]  # fmt: skip
    return _process("sluice serve", argv, ("GET", "/openapi.json"))


def floor() -> AbstractContextManager[Server]:
    """The bare Starlette route on uvicorn (bench/server/floor.py)."""
    argv = [sys.executable, "-m", "bench.server.floor", "--log-level", LOG_LEVEL]
    return _process("the floor", argv, ("POST", "/floor"))


def canned_sqs() -> AbstractContextManager[Server]:
    """An SQS endpoint of canned answers, no work at all (bench/sqs/floor.py)."""
    argv = [sys.executable, "-m", "bench.sqs.floor", "--log-level", LOG_LEVEL]
    return _process("the canned SQS endpoint", argv, ("POST", "/"))


def least(url: str) -> AbstractContextManager[Server]:
    """The least server over sluice on uvicorn (bench/server/least.py)."""
    argv = [sys.executable, "-m", "bench.server.least", "--db", url, "--log-level", LOG_LEVEL]
    return _process("the least server", argv, ("POST", "/api/queues/bench/messages"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def beam_pid() -> int | None:
    """The RabbitMQ node's process (beam.smp), to read its CPU time; None if not found."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "beam.smp":
                    return int(entry.name)
            except OSError:
                continue
    return None


def rabbit_auth() -> str:
    """The Authorization header of the management API (HTTP Basic)."""
    pair = f"{RABBIT_USER}:{RABBIT_PASSWORD}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def _overview() -> dict[str, object] | None:
    conn = http.client.HTTPConnection(RABBIT_HOST, RABBIT_API_PORT, timeout=5)
    try:
        conn.request("GET", "/api/overview", headers={"Authorization": rabbit_auth()})
        response = conn.getresponse()
        data = response.read()
    except OSError:
        return None
    finally:
        conn.close()
    if response.status != 200:
        return None
    found: dict[str, object] = json.loads(data)
    return found


def ensure_management() -> str:
    """The RabbitMQ version, once its management API answers; the plugin is enabled
    (``rabbitmq-plugins enable rabbitmq_management``) when the API does not answer.
    RuntimeError, saying what to do, when it cannot be."""
    found = _overview()
    if found is None:
        tool = shutil.which("rabbitmq-plugins")
        if tool is None:
            raise RuntimeError(
                f"RabbitMQ's management API does not answer on port {RABBIT_API_PORT} and "
                f"rabbitmq-plugins is not on PATH: run `rabbitmq-plugins enable {_PLUGIN}`"
            )
        print(f"enabling RabbitMQ's management plugin: {tool} enable {_PLUGIN}",
              file=sys.stderr, flush=True)  # fmt: skip
        subprocess.run([tool, "enable", _PLUGIN], check=True, capture_output=True)
        deadline = time.monotonic() + _READY_SECONDS
        while (found := _overview()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"RabbitMQ's management API still does not answer on port "
                    f"{RABBIT_API_PORT} {_READY_SECONDS:g} s after enabling {_PLUGIN}"
                )
            time.sleep(0.5)
    return f"RabbitMQ {found.get('rabbitmq_version')}, Erlang {found.get('erlang_version')}"
