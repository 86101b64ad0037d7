"""A private PostgreSQL server for the tests, started from the installed binaries.

``SLUICE_TEST_POSTGRES_URL`` points the tests at an existing server instead. Tests
that stop or restart their server get a cluster of their own either way
(``own_postgres_server``). Without binaries or a URL, PostgreSQL tests skip locally
and fail under CI (``CI=true``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

__all__ = ["PostgresServer", "find_binaries"]


def find_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory with initdb and pg_ctl."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _scratch_dir() -> str | None:
    """/dev/shm when it has room, else the default temporary directory.

    A throwaway cluster needs no disk. In memory, creating and dropping each test's
    tables (the bulk of a PostgreSQL test's time) takes about half as long as on a
    disk, and does not slow down when other work on the machine writes to it.
    """
    try:
        shm = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if shm.f_bavail * shm.f_frsize >= 2 * 2**30 else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """A throwaway cluster on 127.0.0.1 and a free port, in memory if /dev/shm has room."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="sluice-pg-", dir=_scratch_dir()))
        self.data = self.root / "data"
        # initdb refuses to run as root: the cluster then belongs to the postgres user.
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")  # fmt: skip
        # The free port can be taken before the server binds it (pytest-xdist's workers
        # start their clusters at the same moment): then another one.
        for attempt in range(5):
            self.port = _free_port()
            self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
            try:
                self.start()
                break
            except subprocess.CalledProcessError:
                if attempt == 4:
                    raise

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self._user:
            command = ["runuser", "-u", self._user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.root, timeout=120)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"),
                  "-o", options, "-w", "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast``: disconnect everyone; ``immediate``: a crash) and start again."""
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.destroy()
