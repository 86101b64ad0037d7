"""A private PgBouncer for the tests: transaction pooling in front of the tests' PostgreSQL.

Debian's ``pgbouncer`` (``make test`` installs it), on a free loopback port, with its
configuration, log and pid file in a temporary directory; ``default_pool_size`` 4, so
that the tests' connections really share server connections.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["POOL_SIZE", "PgBouncer"]

POOL_SIZE = 4
"""Server connections per database and user."""

_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {root}/users.txt
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {root}/pgbouncer.log
pidfile = {root}/pgbouncer.pid
"""


def _binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None
    )
    if found is None:
        raise FileNotFoundError("no pgbouncer binary (apt-get install pgbouncer)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgBouncer:
    """PgBouncer in transaction mode in front of the server at ``server_url``."""

    def __init__(self, server_url: str) -> None:
        binary = _binary()
        server = urlsplit(server_url)
        self.root = Path(tempfile.mkdtemp(prefix="sluice-pgbouncer-"))
        user = server.username or "postgres"
        (self.root / "users.txt").write_text(f'"{user}" ""\n')
        # PgBouncer refuses to run as root: as root, it runs as the postgres user.
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            for path in (self.root, self.root / "users.txt"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._process: subprocess.Popen[bytes] | None = None
        # The free port can be taken before PgBouncer binds it: then another one.
        for attempt in range(5):
            self.port = _free_port()
            config = self.root / "pgbouncer.ini"
            config.write_text(
                _CONFIG.format(
                    host=server.hostname or "127.0.0.1",
                    port=server.port or 5432,
                    listen=self.port,
                    root=self.root,
                    pool=POOL_SIZE,
                )
            )
            self._process = subprocess.Popen(
                [binary, "-q", str(config)], user=self._user, stdin=subprocess.DEVNULL
            )
            if self._ready():
                return
            self.stop(keep_files=attempt < 4)
        raise RuntimeError(f"PgBouncer did not start: {self.log()}")

    def _ready(self) -> bool:
        """Whether PgBouncer accepts connections (False: it exited, or never listened)."""
        assert self._process is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                time.sleep(0.02)  # a start takes a few milliseconds: polled, not waited out
                continue
            return True
        return False

    def url_for(self, url: str) -> str:
        """``url`` (the server's, with its user and database) through this PgBouncer."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def log(self) -> str:
        path = self.root / "pgbouncer.log"
        return path.read_text() if path.exists() else "(no log)"

    def stop(self, *, keep_files: bool = False) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)
