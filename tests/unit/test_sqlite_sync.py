"""Plain acknowledgements at synchronous=FULL sync the WAL outside the connection
(sluice.backends.sqlite_sync): written at NORMAL, then synced by the acknowledging
thread once the connection is free, so other threads claim meanwhile and the
acknowledgements written during a sync share the next one; every other durable commit
keeps SQLite's own fsync. (That what returned survives a power cut is the power-cut
simulation's to show: tests/reliability/test_power_cut.py, whose VFS records these syncs
too.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice
from sluice.backends.sqlite import SQLiteBackend
from sluice.backends.sqlite_sync import WalSync, register_sync, wal_sync

WAIT = 30.0


def test_sluice_syncs_only_at_full_on_a_vfs_whose_sync_it_knows() -> None:
    assert isinstance(wal_sync("q.db", "FULL", None), WalSync)
    for level in ("NORMAL", "OFF", "EXTRA"):  # EXTRA: SQLite's own, with its directory syncs
        assert wal_sync("q.db", level, None) is None
    assert wal_sync("q.db", "FULL", "unix-excl") is None  # what a sync means there is its own


def test_a_database_in_memory_has_no_wal_to_sync(tmp_path: Path) -> None:
    with sluice.connect("sqlite:///:memory:") as db:
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        assert backend._wal is None  # SQLite keeps it in memory, journal_mode=memory
        db.create_queue("q").put("x")
        message = db.queue("q").get()
        assert message is not None
        message.ack()  # it tried to sync a file ":memory:-wal" that never exists
        assert db.queue("q").stats()["ready"] == 0


def _wal(db: sluice.Database) -> WalSync:
    backend = db.backend
    assert isinstance(backend, SQLiteBackend)
    assert backend._wal is not None
    return backend._wal


def test_only_a_plain_acknowledgement_syncs_outside(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        wal = _wal(db)
        db.create_queue("q")
        db.create_queue("errors")
        db.create_queue("checked", error_queue="errors")
        db.queue("q").put_many(["a", "b"])  # SQLite's own fsync: a consumer may take them
        assert wal.syncs == 0
        with db.transaction() as tx:
            assert [m.body for m in tx.dequeue("q")] == ["a"]  # a claim: no sync at all
            assert wal.syncs == 0
        assert wal.syncs == 1  # its acknowledgement
        with db.transaction() as tx:  # an acknowledgement that also enqueues: SQLite's
            tx.dequeue("q")
            tx.enqueue("checked", "c")
        assert wal.syncs == 1
        message = db.queue("checked").get()
        assert message is not None
        message.reject("no")  # into the error queue, a new row there: SQLite's
        assert wal.syncs == 1


def test_acknowledgements_written_during_a_sync_share_the_next(tmp_path: Path) -> None:
    syncing, go = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow_sync(path: str) -> None:
        calls.append(path)
        if len(calls) == 1:
            syncing.set()
            assert go.wait(WAIT)

    wal = WalSync(str(tmp_path / "q.db"), slow_sync)
    first = threading.Thread(target=wal.sync, args=(wal.wrote(),))
    first.start()
    assert syncing.wait(WAIT)
    later = [threading.Thread(target=wal.sync, args=(wal.wrote(),)) for _ in range(3)]
    for t in later:
        t.start()
    go.set()
    for t in (first, *later):
        t.join(WAIT)
        assert not t.is_alive()
    assert len(calls) == 2  # the first acknowledgement's, then one for the three


@pytest.fixture
def held_sync() -> Iterator[tuple[threading.Event, threading.Event, threading.Event]]:
    """SQLite's unix-excl VFS (WAL, its index in the heap), whose syncs sluice makes
    through a function that, once ``armed``, says it is ``syncing`` and waits for ``go``."""
    armed, syncing, go = threading.Event(), threading.Event(), threading.Event()

    def sync(path: str) -> None:
        if armed.is_set():
            armed.clear()
            syncing.set()
            assert go.wait(WAIT)

    register_sync("unix-excl", sync)
    try:
        yield armed, syncing, go
    finally:
        go.set()
        register_sync("unix-excl", None)


def test_another_thread_claims_while_an_acknowledgement_syncs(
    tmp_path: Path, held_sync: tuple[threading.Event, threading.Event, threading.Event]
) -> None:
    armed, syncing, go = held_sync
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}?vfs=unix-excl") as db:
        db.create_queue("q")
        db.queue("q").put_many(["first", "second"])
        taken = db.transaction()
        assert [m.body for m in taken.dequeue("q")] == ["first"]
        armed.set()
        acking = threading.Thread(target=taken.commit)
        acking.start()
        assert syncing.wait(WAIT)  # the acknowledgement is written, its sync under way
        other = db.transaction()  # at FULL in SQLite's COMMIT, this claim waited for it
        assert [m.body for m in other.dequeue("q")] == ["second"]
        assert acking.is_alive()  # the acknowledgement has not returned
        go.set()
        acking.join(WAIT)
        assert not acking.is_alive()
        other.commit()


def test_a_lone_acknowledger_never_waits_for_company(tmp_path: Path) -> None:
    pauses: list[float] = []
    wal = WalSync(str(tmp_path / "q.db"), lambda path: None, gather=5.0, pause=pauses.append)
    for _ in range(3):
        wal.sync(wal.wrote())
    assert (wal.syncs, pauses) == (3, [])  # each sync covered one: nobody else acknowledges


def test_after_a_shared_sync_the_next_waits_and_covers_what_was_written_meanwhile(
    tmp_path: Path,
) -> None:
    """Once a sync covered more than one acknowledgement, the next waits (GATHER) before
    it begins; the acknowledgements written during its wait share it, and their own
    syncs find them covered. Once a sync covers one alone, the next does not wait."""
    pauses: list[float] = []
    during: list[int] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:  # other threads, writing during the first wait
            during.extend(wal.wrote() for _ in range(2))

    wal = WalSync(str(tmp_path / "q.db"), lambda path: None, gather=0.001, pause=pause)
    first, second = wal.wrote(), wal.wrote()
    wal.sync(second)  # covers both, without a wait: the sync before covered none
    assert (wal.syncs, pauses) == (1, [])
    wal.sync(first)  # covered already
    wal.sync(wal.wrote())  # waits, then covers itself and the two written meanwhile
    assert (wal.syncs, pauses) == (2, [0.001])
    for n in during:
        wal.sync(n)
    assert wal.syncs == 2
    wal.sync(wal.wrote())  # the sync before covered three: waits, and covers one alone
    assert (wal.syncs, len(pauses)) == (3, 2)
    wal.sync(wal.wrote())  # the sync before covered one: no wait
    assert (wal.syncs, len(pauses)) == (4, 2)
    wal.close()
