"""The workload of the power-cut test: a seeded mix of everything sluice commits, run through
the "powercut" VFS, whose trace (with the workload's notes) it leaves in a file.

Run by tests/reliability/test_power_cut.py as a process of its own, so that its session
is dead for whoever opens the database after it, as after a power cut:
argv = directory, seed, steps, variant, trace file. The variant is "sound", or one of two
mistakes the test must catch: "unsynced" (every commit without fsync) and "lying"
(enqueues of a transaction that never commits noted as returned). "grouped" adds bursts
of producer threads putting at once, whose commits share fsyncs (group commit); the
threads' interleaving is the OS's, so its trace differs from run to run.

The notes (``Recorder.mark``): ``begin`` before a commit that enqueues or settles,
``end`` once it returned, naming what it enqueued (token -> queue), acknowledged and
rejected; ``never`` for enqueues of transactions that do not commit. A token is the
body of one message, unique in the run.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import sluice
from sluice import Database, Message
from sluice.backends.sqlite_sync import register_sync

from .powercut_vfs import NAME, Recorder

QUEUES = ("a", "b")
BURST_QUEUE = "c"  # only the bursts' threads write it and nobody takes from it
ERROR_QUEUE = "dead"
PRIORITIES = (None, None, 2, 7)


class Workload:
    """Producers and consumers taking turns, as a seeded random walk."""

    def __init__(
        self,
        db: Database,
        recorder: Recorder,
        rng: random.Random,
        *,
        lying: bool = False,
        grouped: bool = False,
    ) -> None:
        self.db = db
        self.lying = lying
        self.grouped = grouped
        self._lock = threading.Lock()  # the bursts' threads note from several threads
        self.recorder = recorder
        self.rng = rng
        self.tokens = 0
        self.ops = 0
        self.held: list[Message] = []  # taken with get and not settled yet
        # A transaction left open all along, its enqueues written as pending rows: a cut
        # finds it uncommitted, and recovery must remove what it put and return what it took.
        self.open_tx = db.begin()

    def run(self, steps: int) -> None:
        moves: list[tuple[int, Callable[[], None]]] = [
            (6, self.put),
            (3, self.put_many),
            (5, self.take),
            (4, self.ack),
            (2, self.release),
            (2, self.reject),
            (3, self.transaction),
            (2, self.aborted),
            (1, self.open_more),
            (1, self.heartbeat),
            (1, self.recover),
            (1, self.stats),
        ]
        if self.grouped:
            moves.append((3, self.burst))
        weights = [w for w, _ in moves]
        for _ in range(steps):
            (move,) = self.rng.choices([m for _, m in moves], weights)
            move()

    # --- notes -------------------------------------------------------------------------
    def token(self) -> str:
        with self._lock:
            self.tokens += 1
            return f"t{self.tokens}"

    def begin(
        self, enqueued: dict[str, str], acked: Sequence[str] = (), rejected: Sequence[str] = ()
    ) -> int:
        with self._lock:
            self.ops += 1
            op = self.ops
        self.recorder.mark(
            {"op": op, "phase": "begin", "enqueued": enqueued, "acked": list(acked),
             "rejected": list(rejected)}
        )  # fmt: skip
        return op

    def end(self, op: int) -> None:
        self.recorder.mark({"op": op, "phase": "end"})

    # --- moves -------------------------------------------------------------------------
    def queue(self) -> str:
        return self.rng.choice(QUEUES)

    def put(self) -> None:
        queue, token = self.queue(), self.token()
        op = self.begin({token: queue})
        self.db.queue(queue).put(token, priority=self.rng.choice(PRIORITIES))
        self.end(op)

    def put_many(self) -> None:
        queue = self.queue()
        tokens = [self.token() for _ in range(self.rng.randint(2, 5))]
        op = self.begin(dict.fromkeys(tokens, queue))
        self.db.queue(queue).put_many(tokens, priority=self.rng.choice(PRIORITIES))
        self.end(op)

    def take(self) -> None:
        if len(self.held) < 6:
            message = self.db.queue(self.queue()).get()
            if message is not None:
                self.held.append(message)

    def _settle(self) -> Message | None:
        if not self.held:
            return None
        return self.held.pop(self.rng.randrange(len(self.held)))

    def ack(self) -> None:
        message = self._settle()
        if message is not None:
            op = self.begin({}, acked=[message.body])
            message.ack()
            self.end(op)

    def release(self) -> None:
        message = self._settle()
        if message is not None:
            message.release()  # not durable: nothing promised

    def reject(self) -> None:
        message = self._settle()
        if message is not None:
            op = self.begin({}, rejected=[message.body])
            message.reject("bad")
            self.end(op)

    def transaction(self) -> None:
        tx = self.db.begin()
        taken = tx.dequeue(self.queue(), limit=self.rng.randint(1, 3))
        acked, rejected = [], []
        for message in taken:
            fate = self.rng.random()
            if fate < 0.2:
                tx.release(message)
            elif fate < 0.35:
                tx.reject(message, "bad")
                rejected.append(message.body)
            else:
                acked.append(message.body)
        enqueued = {self.token(): self.queue() for _ in range(self.rng.randint(0, 3))}
        for token, queue in enqueued.items():
            tx.enqueue(queue, token, priority=self.rng.choice(PRIORITIES))
        op = self.begin(enqueued, acked, rejected)
        tx.commit()
        self.end(op)

    def aborted(self) -> None:
        tx = self.db.begin()
        tx.dequeue(self.queue(), limit=self.rng.randint(1, 2))
        never = {self.token(): self.queue() for _ in range(self.rng.randint(1, 3))}
        self.recorder.mark({"never": never})
        for token, queue in never.items():
            tx.enqueue(queue, token)
        tx.flush()  # written as pending rows, which the abort deletes
        tx.abort()

    def open_more(self) -> None:
        never = {self.token(): self.queue()}
        if self.lying:
            self.end(self.begin(never))  # the lie: its commit never comes
        else:
            self.recorder.mark({"never": never})
        for token, queue in never.items():
            self.open_tx.enqueue(queue, token)
        self.open_tx.flush()
        self.open_tx.dequeue(self.queue())

    def burst(self) -> None:
        """Three producers committing at once: their commits queue behind the one being
        written and go to disk together, one fsync for the group."""
        plans = [[self.token() for _ in range(4)] for _ in range(3)]

        def produce(tokens: list[str]) -> None:
            for token in tokens:
                op = self.begin({token: BURST_QUEUE})
                self.db.queue(BURST_QUEUE).put(token)
                self.end(op)

        threads = [threading.Thread(target=produce, args=(tokens,)) for tokens in plans]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def heartbeat(self) -> None:
        # The lease is extended by the heartbeat the lease thread would send.
        self.db.backend.heartbeat(self.db.session)

    def recover(self) -> None:
        self.db.recover()

    def stats(self) -> None:
        self.db.queue(self.queue()).stats()  # expires what is due: a write without fsync


def prepare(path: Path) -> dict[str, bytes]:
    """Create the queues with the plain VFS; the file's bytes are where the trace starts."""
    with sluice.connect(f"sqlite:///{path}") as db:
        for queue in QUEUES:
            db.create_queue(queue, error_queue=ERROR_QUEUE)
        db.create_queue(BURST_QUEUE)
    assert not Path(f"{path}-wal").exists()  # the last close checkpointed and removed it
    return {str(path): path.read_bytes()}


def main() -> None:
    directory, seed, steps, variant, out = sys.argv[1:6]
    path = Path(directory).resolve() / "q.db"
    start = prepare(path)
    recorder = Recorder.install()
    # sluice syncs the WAL itself after a plain acknowledgement at FULL, outside SQLite:
    # through the recorder, so that the trace has those syncs as it has SQLite's own.
    register_sync(NAME, recorder.sync_file)
    recorder.recording = True
    synchronous = {"sound": "FULL", "unsynced": "OFF", "lying": "FULL", "grouped": "FULL"}[variant]
    # A lease of an hour: no heartbeat thread writes at times of its own choosing, so the
    # trace is the seed's alone.
    db = sluice.connect(f"sqlite:///{path}?vfs={NAME}&synchronous={synchronous}", lease=3600)
    # Checkpoints every few commits, not every thousand pages: a cut then falls into
    # checkpoints too, where the main file is written and synced.
    # Under the backend's lock, as all its use of the connection is: its change watcher
    # may be reading through it already, and two threads in one connection with this
    # VFS's callbacks (which need the GIL) can deadlock (a child hung here once in ~60).
    with db.backend._lock:  # type: ignore[attr-defined]
        db.backend._conn.execute("PRAGMA wal_autocheckpoint=40")  # type: ignore[attr-defined]
    rng = random.Random(int(seed))
    Workload(db, recorder, rng, lying=variant == "lying", grouped=variant == "grouped").run(
        int(steps)
    )
    recorder.recording = False
    with open(out, "wb") as fh:
        pickle.dump(
            {"start": start, "trace": recorder.trace, "errors": list(map(repr, recorder.errors))},
            fh,
        )
    # No close: the session ends with the process, its claims and transactions open.
    os._exit(0)


if __name__ == "__main__":
    main()
