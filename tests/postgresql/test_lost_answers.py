"""A claim whose answer never came: PostgreSQL claimed and committed, and the connection
broke before the client heard it (a terminated backend, a crash, a cut). The client
cannot know what it holds, so the transaction's end gives back every claim of its own,
known or not. The fault campaign found a transaction that held nothing it knew of
ending without a word to the database: its claimed messages stayed held by a live
session until the process ended, and an outgoing gateway forwarded the ones behind
them first (relayed out of order, PostgreSQL)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

import sluice
from sluice.catalog import Isolation
from sluice.errors import ConnectionLost
from sluice.gateways.model import Gateway
from sluice.gateways.pipeline import Pipeline
from sluice.gateways.registry import TRANSPORTS
from sluice.gateways.transports import Transport
from sluice.message import Message
from tests.lossy_proxy import LossyProxy


@pytest.fixture
def proxy(url: str) -> Iterator[LossyProxy]:
    parts = urlsplit(url)
    lossy = LossyProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield lossy
    lossy.close()


def _lost_claim(db: sluice.Database, proxy: LossyProxy, queue: str) -> sluice.Transaction:
    """A transaction whose claim of ``queue``'s first messages committed unheard."""
    tx = db.transaction()
    proxy.arm(queue.encode())
    with pytest.raises(ConnectionLost):
        tx.dequeue(queue, limit=2)
    assert proxy.cut.is_set()
    return tx


def _three(db: sluice.Database, isolation: Isolation) -> None:
    db.create_queue("unheard", isolation=isolation)  # ordered: one writer's lane
    db.queue("unheard").put_many(["a", "b", "c"])


def _taken_in_order(db: sluice.Database) -> None:
    """All three taken again in their order, no attempt counted for the lost claim."""
    with db.transaction() as after:
        taken = after.dequeue("unheard", limit=3)
    assert [m.body for m in taken] == ["a", "b", "c"]
    assert [m.attempts for m in taken] == [0, 0, 0]


ISOLATIONS = pytest.mark.parametrize("isolation", ["none", "ordered"])


@ISOLATIONS
def test_an_abort_gives_back_a_claim_whose_answer_was_lost(
    url: str, proxy: LossyProxy, isolation: Isolation
) -> None:
    # A long lease: no heartbeat shares the proxy's connections while the answer is lost.
    with sluice.connect(f"{proxy.url(url)}&lease=600") as db, sluice.connect(url) as direct:
        _three(db, isolation)
        tx = _lost_claim(db, proxy, "unheard")
        assert direct.queue("unheard").stats()["claimed"] >= 1  # the server did claim
        tx.abort()
        assert direct.queue("unheard").stats()["claimed"] == 0
        _taken_in_order(db)


@ISOLATIONS
def test_a_commit_gives_back_a_claim_whose_answer_was_lost(
    url: str, proxy: LossyProxy, isolation: Isolation
) -> None:
    """The caller went on after the failed take: what it did else is committed, and the
    claim it never heard of goes back, its own enqueue published."""
    with sluice.connect(f"{proxy.url(url)}&lease=600") as db, sluice.connect(url) as direct:
        _three(db, isolation)
        db.create_queue("made")
        tx = _lost_claim(db, proxy, "unheard")
        assert direct.queue("unheard").stats()["claimed"] >= 1
        tx.enqueue("made", "x")
        tx.commit()
        assert direct.queue("unheard").stats()["claimed"] == 0
        assert direct.queue("made").stats()["ready"] == 1
        _taken_in_order(db)


def test_an_abort_the_server_refused_is_finished_before_the_queue_is_taken_from_again(
    url: str, proxy: LossyProxy
) -> None:
    """The server went away with the claim's answer and is still away for the abort: the
    abort is put off (EngineContext.strand), and the next take from the queue finishes it
    first, so it takes the lost messages in their places, not the ones behind them."""
    through = f"{proxy.url(url)}&lease=600&connect_timeout=1"
    with sluice.connect(through) as db, sluice.connect(url) as direct:
        _three(db, "none")
        tx = _lost_claim(db, proxy, "unheard")
        # Every connection through the proxy goes, not only the cut one: the pool may hold
        # another (its replacement for the cut one, made before refusing began, on a loaded
        # machine), and the abort went through on it (a loaded full run, 2026-12-07: claimed 0).
        proxy.sever()
        tx.abort()  # put off, not raised
        assert direct.queue("unheard").stats()["claimed"] == 2
        proxy.refusing.clear()
        _taken_in_order(db)


class _Told(logging.Handler):
    """Set once a record says ``words``."""

    def __init__(self, *words: str) -> None:
        super().__init__()
        self.words = words
        self.told = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if any(w in record.getMessage() for w in self.words):
            self.told.set()


def test_a_gateway_whose_commit_failed_gives_its_messages_back(
    url: str, proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline (sluice.gateways.pipeline) commits a delivered transaction while the
    next is delivered; when that commit fails (the server went away), the transaction
    gives its messages back (sent again, the receiver's Idempotency-Key stores each once),
    rather than leaving them held by the live session for as long as it runs."""
    got: list[int] = []
    all_in = threading.Event()
    second_taken = threading.Event()
    take = Pipeline._take

    def watched_take(pipeline: Pipeline, *, wait: float) -> object:
        # Set once the take of message 1 has come back to the pipeline: not when the
        # server has claimed it (CI: a sever between the two lost that take's answer, so
        # the pipeline failed before it delivered message 1).
        taken = take(pipeline, wait=wait)
        if taken is not None and any(m.body["n"] == 1 for m in taken[1]):
            second_taken.set()
        return taken

    monkeypatch.setattr(Pipeline, "_take", watched_take)
    through = f"{proxy.url(url)}&lease=600&connect_timeout=1"
    with sluice.connect(through) as db, sluice.connect(url) as direct:

        class Severing:
            """Delivers; the first delivery severs the server once the next message is
            taken, so the first's commit, made while the second is delivered, fails."""

            def __init__(self, db: object, gateway: Gateway) -> None:
                pass

            def deliver(self, message: Message) -> None:
                if not got:
                    assert second_taken.wait(30), "the next message was not taken"
                    proxy.sever()
                got.append(message.body["n"])
                if got[-3:] == [0, 1, 2]:
                    all_in.set()

            def close(self) -> None:
                pass

        made = Transport("severing", ("out",), lambda gateway: None, outbound=Severing)
        monkeypatch.setitem(TRANSPORTS, "severing", lambda: made)
        told = _Told("is put off", "failed; again in")
        for name in ("sluice", "sluice.gateways"):
            logging.getLogger(name).addHandler(told)
        try:
            db.create_queue("outbox")
            db.gateways.define("outbox", direction="out", transport="severing")
            db.queue("outbox").put_many([{"n": n} for n in range(3)])
            db.gateways.start(poll=0.05)
            try:
                assert told.told.wait(30)  # an abort put off, or the thread failed
                proxy.refusing.clear()
                assert all_in.wait(30)
            finally:
                db.gateways.stop()
        finally:
            for name in ("sluice", "sluice.gateways"):
                logging.getLogger(name).removeHandler(told)
        assert got[:2] == [0, 1]  # the first try: both delivered, neither committed
        assert got[-3:] == [0, 1, 2]  # again, in the queue's order
        stats = direct.queue("outbox").stats()
        assert (stats["ready"], stats["claimed"]) == (0, 0), stats
