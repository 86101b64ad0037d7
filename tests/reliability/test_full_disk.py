"""SQLite on a disk with no free byte (a small tmpfs, filled): writes fail with a clear
StorageError, nothing committed is lost, nothing refused is stored, and a connection
opened meanwhile is not told the file is foreign."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import sluice

from .campaign import small_disk

pytestmark = pytest.mark.slow


def _fill(where: Path) -> Path:
    filler = where / "filler"
    with filler.open("wb") as out, pytest.raises(OSError, match="No space left") as full:
        while True:
            out.write(bytes(1 << 16))
            out.flush()
    assert full.value.errno == errno.ENOSPC
    return filler


def _open_error(url: str) -> sluice.StorageError | None:
    try:
        with sluice.connect(url) as other:
            other.queue("q").stats()
    except sluice.StorageError as exc:
        return exc
    return None


def test_a_full_disk_refuses_writes_and_loses_nothing(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", size="16m") as disk:
        if disk is None:  # CI runs as root on this project's machines: there it must run
            if os.environ.get("CI") == "true":
                pytest.fail("mounting a tmpfs needs root, and CI must test a full disk")
            pytest.skip("mounting a tmpfs needs root")
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
