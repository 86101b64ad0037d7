"""The machine a report was measured on: CPU, memory, kernel, file system, PostgreSQL's
settings, package versions and the source revision, as (name, value) rows."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sqlite3
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from bench.harness.places import PG_CONNINFO
from bench.harness.report import one_line

__all__ = [
    "MEMORY_FS",
    "filesystem_of",
    "host_facts",
    "machine_facts",
    "package_versions",
    "pg_facts",
    "source_revision",
    "store_facts",
]

MEMORY_FS = frozenset({"tmpfs", "ramfs"})
"""File systems whose numbers say nothing about durability: fsync there is free."""

# PostgreSQL settings that decide what a commit costs; all are read back from the server.
_PG_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "wal_level",
    "commit_delay",
    "shared_buffers",
    "max_connections",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                kib = int(line.split()[1])
                return f"{kib / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def filesystem_of(path: Path) -> tuple[str, str, str]:
    """(device, mount point, filesystem type) of the mount holding path, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("unknown", "", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        device, mount, fstype = parts[0], parts[1], parts[2]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        # The longest matching mount point wins; later lines shadow earlier ones on a tie.
        if inside and len(mount) >= len(best[1]):
            best = (device, mount, fstype)
    return best


def package_versions(dists: Sequence[str]) -> str:
    """``name version`` for each distribution, or ``name not installed``."""
    out = []
    for dist in dists:
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} not installed")
    return ", ".join(out)


def host_facts() -> list[tuple[str, str]]:
    """Date, CPU, cores, RAM, kernel and Python: the rows every report starts with."""
    return [
        ("Date", dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("CPU", _cpu_model()),
        ("Cores", str(os.cpu_count())),
        ("RAM", _ram()),
        ("Kernel", f"{platform.system()} {platform.release()}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
    ]


def machine_facts(tmp_root: Path, packages: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The host, the SQLite library, the file system of ``tmp_root`` and, if any are named,
    the versions of ``packages``: what lets a reader compare with another machine's report."""
    device, mount, fstype = filesystem_of(tmp_root)
    rows = [
        *host_facts(),
        ("SQLite library", sqlite3.sqlite_version),
        ("Temp dir", f"{tmp_root} on {device} ({fstype}, mounted at {mount})"),
    ]
    if packages:
        rows.append(("Packages", package_versions(packages)))
    return rows


def pg_facts(conninfo: str = PG_CONNINFO) -> list[tuple[str, str]]:
    """The PostgreSQL server's version and the settings that decide what a commit costs."""
    try:
        import psycopg

        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT version()").fetchone()
            version = str(row[0]) if row else "unknown"
            rows = conn.execute(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
                (list(_PG_SETTINGS),),
            ).fetchall()
    except Exception as exc:
        return [("PostgreSQL", f"unreachable at {conninfo}: {one_line(exc)}")]
    settings = ", ".join(f"{n}={s}{'' if not u else ' x ' + u}" for n, s, u in rows)
    return [("PostgreSQL", version.split(" on ")[0]), ("PostgreSQL settings", settings)]


def store_facts(tmp_root: Path, systems: Sequence[str]) -> list[tuple[str, str]]:
    """The machine, and the SQLite file (and PostgreSQL, if among ``systems``) a bench's
    cases run on: the rows every sluice-on-both-backends report starts with."""
    from sluice.backends.sqlite_settings import SQLiteSettings

    device, mount, fstype = filesystem_of(tmp_root)
    rows = [
        *host_facts(),
        ("SQLite library", sqlite3.sqlite_version),
        (
            "SQLite file",
            f"in {tmp_root} on {device} ({fstype}, mounted at {mount}); WAL, synchronous="
            f"{SQLiteSettings().synchronous} (sluice's default: fsync at every commit;"
            " concurrent commits of one Database share an fsync, group commit)",
        ),
    ]
    if "postgresql" in systems:
        rows += pg_facts(PG_CONNINFO)
    return rows


def source_revision() -> str:
    """The git commit of the tree measured, and whether src/ had local changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    changed = [line[3:] for line in dirty if line.strip()]
    text = head if len(head) <= 120 else head[:117] + "..."
    if changed:
        text += f"; with uncommitted changes in {', '.join(changed)}"
    return text
