"""Redis for the benchmarks: a private ``redis-server`` with the AOF fsync policy asked for
(``appendfsync always``: the durability of a PostgreSQL commit), and what a server keeps on
disk, read back from its own configuration for the report."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.harness.facts import filesystem_of
from bench.harness.processes import stop_groups

__all__ = ["RedisTarget", "free_port", "private_redis", "redis_target"]


@dataclass(frozen=True)
class RedisTarget:
    """A Redis server to measure on: base URL (no database), label and what it keeps on disk."""

    url: str
    label: str
    durability: str
    version: str


def redis_target(url: str, label: str) -> RedisTarget:
    """Describe a Redis server from its own configuration, read back over the connection."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        config = client.config_get("*")
        version = str(client.info("server")["redis_version"])
    finally:
        client.close()
    if config.get("appendonly") == "yes":
        fsync = str(config.get("appendfsync", "?"))
        device, _mount, fstype = filesystem_of(Path(str(config.get("dir", "/"))))
        when = {
            "always": "every write fsynced before its reply",
            "everysec": "an fsync once a second (up to ~1 s of acknowledged writes lost)",
            "no": "no fsync (the OS flushes when it likes)",
        }.get(fsync, fsync)
        text = f"AOF appendfsync {fsync}: {when}; {fstype} on {device}"
    elif config.get("save"):
        text = f"RDB snapshots only (save '{config['save']}'): recent writes lost on a crash"
    else:
        text = "nothing on disk (appendonly no, save ''): a restart loses every queued task"
    return RedisTarget(url=url, label=label, durability=text, version=version)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis(appendfsync: str = "always") -> Iterator[str]:
    """A private redis-server on a free loopback port, AOF on, in a temporary directory.

    Yields its base URL; the server is stopped and its directory removed afterwards.
    """
    import redis

    redis_server = shutil.which("redis-server")
    if redis_server is None:
        raise RuntimeError("redis-server is not on PATH: install it (apt-get install redis-server)")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-redis-"))
    port = free_port()
    argv = [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp)]
    argv += ["--appendonly", "yes", "--appendfsync", appendfsync, "--save", ""]
    argv += ["--daemonize", "no", "--logfile", str(tmp / "redis.log")]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"redis://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10.0
        while True:
            client = redis.Redis.from_url(url, socket_timeout=1)
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (tmp / "redis.log").read_text() if (tmp / "redis.log").exists() else ""
                    problem = f"private redis-server did not start: {log[-300:]}"
                    raise RuntimeError(problem) from None
                time.sleep(0.05)
            finally:
                client.close()
        yield url
    finally:
        stop_groups([proc])
        shutil.rmtree(tmp, ignore_errors=True)
