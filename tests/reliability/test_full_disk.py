"""SQLite on a disk with no free byte (a small tmpfs, filled): writes fail with a clear
StorageError, nothing committed is lost, nothing refused is stored, and a connection
opened meanwhile is not told the file is foreign."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice

from .campaign import small_disk

pytestmark = pytest.mark.slow


def _fill(where: Path) -> Path:
    filler = where / "filler"
    # Unbuffered: a buffered file keeps what the full disk refused and writes it again at
    # close, where ENOSPC would escape (it did, now and then, under the full suite).
    with filler.open("wb", buffering=0) as out, pytest.raises(OSError, match="No space") as full:
        while True:
            out.write(bytes(1 << 16))
    assert full.value.errno == errno.ENOSPC
    return filler


def _open_error(url: str) -> sluice.StorageError | None:
    try:
        with sluice.connect(url) as other:
            other.queue("q").stats()
    except sluice.StorageError as exc:
        return exc
    return None


@contextlib.contextmanager
def _small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", size="16m") as disk:
        if disk is None:  # CI runs as root on this project's machines: there it must run
            if os.environ.get("CI") == "true":
                pytest.fail("mounting a tmpfs needs root, and CI must test a full disk")
            pytest.skip("mounting a tmpfs needs root")
        yield disk


def _refused(q: sluice.Queue) -> None:
    """Puts until the disk says no: past what the cache and the log's reused pages absorb."""
    with pytest.raises(sluice.StorageError):
        for n in range(10_000):
            q.put({"n": -n, "pad": "x" * 4000})


def test_a_full_disk_refuses_writes_and_loses_nothing(tmp_path: Path) -> None:
    with _small_disk(tmp_path) as disk:
        url = f"sqlite:///{disk / 'q.db'}"
        with sluice.connect(url) as db:
            q = db.create_queue("q")
            q.put_many([{"n": n, "pad": "x" * 200} for n in range(500)])
            filler = _fill(disk)
            with pytest.raises(sluice.StorageError) as refused:
                for n in range(500, 5000):  # the cache absorbs a few; the disk soon says no
                    q.put({"n": n, "pad": "x" * 4000})
            assert not isinstance(refused.value, sluice.NotASluiceDatabase)
            written = n
            filler.unlink()  # room again: the same connection goes on
            q.put({"n": written, "pad": ""})
        # Opened with no other connection holding it, the file cannot get its shared-memory
        # index: a storage error, not "cannot be opened as a sluice database".
        filler = _fill(disk)
        failed = _open_error(url)
        assert isinstance(failed, sluice.StorageError)
        assert not isinstance(failed, sluice.NotASluiceDatabase)
        filler.unlink()
        with sluice.connect(url) as db, db.transaction() as tx:
            got = [m.body["n"] for m in tx.dequeue("q", limit=10_000)]
        assert got == list(range(written + 1))  # every put that returned, none that raised
        with sluice.connect(url) as db:
            assert db.queue("q").stats()["ready"] == 0


def test_an_abort_the_full_disk_refuses_is_finished_before_the_next_take(
    tmp_path: Path,
) -> None:
    """A transaction aborted while the disk is full cannot give its messages back yet.
    The abort is put off, not raised: the connection finishes it before it takes from
    the queue again (so a sole consumer, a gateway, never takes the messages behind
    them first), and its heartbeat finishes it for the other processes."""
    with _small_disk(tmp_path) as disk:
        url = f"sqlite:///{disk / 'q.db'}"
        with sluice.connect(url) as db, sluice.connect(url, lease=0.3) as short:
            q = db.create_queue("q")
            q.put_many([{"n": n} for n in range(3)])
            tx = db.transaction()
            assert [m.body["n"] for m in tx.dequeue("q")] == [0]
            filler = _fill(disk)
            _refused(q)
            tx.abort()  # refused by the database: put off, the transaction ended
            assert tx.closed
            with pytest.raises(sluice.StorageError), db.transaction() as nxt:
                nxt.dequeue("q")  # not message 1 ahead of 0: the abort comes first
            filler.unlink()
            with db.transaction() as nxt:
                assert [m.body["n"] for m in nxt.dequeue("q", limit=3)] == [0, 1, 2]
                nxt.abort()

            # Put off on the short-lease connection, finished by its heartbeat alone.
            tx = short.transaction()
            assert [m.body["n"] for m in tx.dequeue("q")] == [0]
            filler = _fill(disk)
            _refused(short.queue("q"))
            tx.abort()
            filler.unlink()
            deadline = time.monotonic() + 10  # heartbeats every 0.1 s
            while db.queue("q").stats()["claimed"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert db.queue("q").stats()["claimed"] == 0
            with db.transaction() as nxt:
                assert [m.body["n"] for m in nxt.dequeue("q", limit=3)] == [0, 1, 2]
