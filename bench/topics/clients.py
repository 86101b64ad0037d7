"""The publisher and consumer processes of ``bench.topics``, for sluice and for RabbitMQ.

Each runs in a process of its own (spawned), so the publisher never waits for the consumers'
interpreter lock: one publisher process, one consumer process whose threads each drain one
subscription (one RabbitMQ queue). They talk to the parent through a pipe and share counters
in shared memory that the parent samples: messages published (committed, or confirmed) and,
per subscription, messages delivered (committed, or acked) and when the last one was.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness import (
    chunks,
    encode,
    make_bodies,
    one_line,
    rabbit_params,
)
from bench.topics.report import Case, Publish

__all__ = [
    "EXCHANGE",
    "PLAIN",
    "QUEUE",
    "TOPIC",
    "Shared",
    "consume_main",
    "publish_main",
    "queue_names",
]

TOPIC = "orders"
QUEUE = "orders_queue"
PLAIN = "orders_plain"
"""The plain queue a topic's publisher alternates with (see _SluicePublisher)."""
EXCHANGE = "sluice_bench_topics"
WAIT = 0.25
"""Seconds a consumer's dequeue waits on an empty subscription before it looks at stop."""


@dataclass(frozen=True)
class Shared:
    """The counters and signals the parent shares with both processes (shared memory)."""

    published: Any
    """Messages committed (confirmed) so far: a ``multiprocessing.Value('q')``."""
    delivered: Any
    """Per subscription, messages whose consuming transaction committed (acked)."""
    last: Any
    """Per subscription, ``time.monotonic()`` of its last delivery."""
    go: Any
    """Set: the consumers start."""
    stop: Any
    """Set: everyone stops (the end, or a failure)."""


def queue_names(case: Case) -> list[str]:
    """What each consumer drains: the subscriptions, the plain queue, or RabbitMQ's queues."""
    if case.target == "queue":
        return [QUEUE]
    if case.target == "fanout":
        return [f"{EXCHANGE}_{i:03d}" for i in range(case.subscriptions)]
    return [f"sub_{i:03d}" for i in range(case.subscriptions)]


# ---------------------------------------------------------------------- publisher


class _SluicePublisher:
    """Puts the messages into the topic (or the queue): ``put`` one per transaction, or
    ``put_many`` a batch per transaction.

    Publishing into a topic alone is paired: each transaction into the topic alternates with
    the same transaction into a plain queue of the same database (PLAIN, never consumed), so
    that both see the same disk and the same neighbours, whose fsync times on a shared
    machine drift by a factor of 2 or 3 within a minute.
    """

    def __init__(self, case: Case, url: str, shared: Shared) -> None:
        import sluice

        self.case, self.published = case, shared.published
        self.db = sluice.connect(url)
        self.queue = self.db.queue(QUEUE if case.target == "queue" else TOPIC)
        self.plain = self.db.queue(PLAIN) if case.target == "topic" else None
        self.bodies = make_bodies(case.alone + case.live)

    def __call__(self, start: int, count: int, paired: bool) -> tuple[Publish, Publish | None]:
        one = self.case.batch == 1
        mine: list[float] = []
        theirs: list[float] = []
        clock = time.perf_counter

        def put(queue: Any, chunk: Sequence[Any], times: list[float]) -> None:
            t0 = clock()
            if one:
                queue.put(chunk[0])
            else:
                queue.put_many(chunk)
            times.append(clock() - t0)

        began = clock()
        for k, chunk in enumerate(chunks(self.bodies[start : start + count], self.case.batch)):
            if paired and self.plain is not None and k % 2:  # alternate who goes first
                put(self.plain, chunk, theirs)
            put(self.queue, chunk, mine)
            self.published.value += len(chunk)
            if paired and self.plain is not None and not k % 2:
                put(self.plain, chunk, theirs)
        if paired and self.plain is not None:
            return _publish(count, mine), _publish(count, theirs)
        return Publish(count, clock() - began, [t * 1000 for t in mine]), None

    def close(self) -> None:
        self.db.close()


def _publish(count: int, times: Sequence[float]) -> Publish:
    return Publish(count, sum(times), [t * 1000 for t in times])


class _RabbitPublisher:
    """Publishes persistent messages to the fanout on a SelectConnection with publisher
    confirms: a batch, then every confirm of it, then the next batch (pika's blocking channel
    can only wait for each single confirm)."""

    def __init__(self, case: Case, shared: Shared) -> None:
        import pika

        self.case, self.published = case, shared.published
        self.props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        self.bodies = [encode(b).encode() for b in make_bodies(case.alone + case.live)]

    def __call__(self, start: int, count: int, paired: bool) -> tuple[Publish, Publish | None]:
        import pika

        batches = chunks(self.bodies[start : start + count], self.case.batch)
        state: dict[str, Any] = {"next": 0, "outstanding": 0, "sent": 0, "error": None}
        times: list[float] = []
        clock = time.perf_counter
        marks: dict[str, float] = {}

        def publish_next(ch: Any) -> None:
            if state["next"] >= len(batches):
                marks["end"] = clock()
                ch.connection.close()
                return
            marks["batch"] = clock()
            for body in batches[state["next"]]:
                ch.basic_publish(EXCHANGE, "", body, self.props)
                state["outstanding"] += 1
            state["next"] += 1

        def on_confirm(frame: Any) -> None:
            from pika.spec import Basic

            method = frame.method
            if isinstance(method, Basic.Nack):
                state["error"] = f"broker nacked {method.delivery_tag}"
                channel.connection.close()
                return
            done = method.delivery_tag - state["sent"] if method.multiple else 1
            state["sent"] += done
            state["outstanding"] -= done
            if state["outstanding"] == 0:
                times.append((clock() - marks["batch"]) * 1000)
                self.published.value += len(batches[state["next"] - 1])
                publish_next(channel)

        channel: Any = None

        def on_channel(ch: Any) -> None:
            nonlocal channel
            channel = ch
            ch.confirm_delivery(ack_nack_callback=on_confirm, callback=lambda _f: start_timing())

        def start_timing() -> None:
            marks["start"] = clock()
            publish_next(channel)

        def on_open_error(conn: Any, exc: BaseException) -> None:
            state["error"] = one_line(exc)
            conn.ioloop.stop()

        conn = pika.SelectConnection(
            rabbit_params(),
            on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
            on_open_error_callback=on_open_error,
            on_close_callback=lambda c, _reason: c.ioloop.stop(),
        )
        conn.ioloop.start()
        if state["error"] or "end" not in marks:
            raise RuntimeError(f"publisher stopped: {state['error'] or 'connection closed'}")
        return Publish(count, marks["end"] - marks["start"], times), None


def publish_main(case: Case, url: str, pipe: Any, shared: Shared) -> None:
    """The publisher process: ``("publish", start, count, paired)`` ->
    ``("published", Publish, Publish | None)``."""
    try:
        publish: _SluicePublisher | _RabbitPublisher
        if case.system == "rabbitmq":
            publish = _RabbitPublisher(case, shared)
        else:
            publish = _SluicePublisher(case, url, shared)
        pipe.send(("ready",))
        while True:
            command = pipe.recv()
            if command[0] != "publish":
                break
            pipe.send(("published", *publish(command[1], command[2], command[3])))
        if isinstance(publish, _SluicePublisher):
            publish.close()
    except Exception as exc:
        with contextlib.suppress(Exception):
            pipe.send(("error", f"publisher: {one_line(exc)}"))


# ---------------------------------------------------------------------- consumers


class _Consumers:
    """What the consumer threads share: counters, the go and stop signals, their errors."""

    def __init__(self, case: Case, shared: Shared) -> None:
        self.case, self.delivered, self.last = case, shared.delivered, shared.last
        self.go, self.stop = shared.go, shared.stop
        self.errors: list[str] = []

    def count(self, slot: int, n: int) -> None:
        self.delivered[slot] += n
        self.last[slot] = time.monotonic()

    def fail(self, where: str, exc: BaseException | str) -> None:
        self.errors.append(f"{where}: {exc if isinstance(exc, str) else one_line(exc)}")
        self.stop.set()


def _sluice_consumer(shared: _Consumers, db: Any, name: str, slot: int) -> None:
    case = shared.case
    selective = case.target == "topic" and case.selective(slot)
    try:
        shared.go.wait()
        while not shared.stop.is_set():
            with db.transaction() as tx:
                msgs = tx.dequeue(name, limit=case.batch, wait=WAIT)
            if msgs:
                if selective and any(m.body["n"] % 10 for m in msgs):
                    shared.fail(name, "received a message its selector does not hold for")
                shared.count(slot, len(msgs))
    except Exception as exc:
        shared.fail(name, exc)


def _rabbit_consumer(shared: _Consumers, name: str, slot: int, ready: threading.Barrier) -> None:
    import pika

    batch = shared.case.batch
    try:
        conn = pika.BlockingConnection(rabbit_params())
    except Exception as exc:
        shared.fail(name, exc)
        ready.abort()
        return
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=batch)

        def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
            # One ack (multiple) per batch, as one sluice transaction settles a batch.
            if method.delivery_tag % batch == 0:
                ch.basic_ack(delivery_tag=method.delivery_tag, multiple=True)
                shared.count(slot, batch)

        ready.wait()
        shared.go.wait()
        ch.basic_consume(name, on_message, auto_ack=False)
        while not shared.stop.is_set():
            conn.process_data_events(time_limit=0.05)
    except Exception as exc:
        shared.fail(name, exc)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def consume_main(case: Case, url: str, pipe: Any, counters: Shared) -> None:
    """The consumer process: a thread per subscription; ``("ready",)`` once they can start
    at ``go``, ``("done", errors)`` once ``stop`` has ended them."""
    names = queue_names(case)
    shared = _Consumers(case, counters)
    stop = counters.stop
    db: Any = None
    try:
        threads: list[threading.Thread] = []
        if case.system == "rabbitmq":
            ready = threading.Barrier(len(names) + 1)
            threads = [
                threading.Thread(target=_rabbit_consumer, args=(shared, n, i, ready))
                for i, n in enumerate(names)
            ]
            for t in threads:
                t.start()
            ready.wait(60.0)
        else:
            import sluice

            # One Database shared by the threads, as an application would (on SQLite one
            # connection behind a lock, whose commits group their fsyncs; on PostgreSQL a pool).
            db = sluice.connect(url)
            threads = [
                threading.Thread(target=_sluice_consumer, args=(shared, db, n, i))
                for i, n in enumerate(names)
            ]
            for t in threads:
                t.start()
        pipe.send(("ready",))
        stop.wait()
        _join(threads, 30.0, shared)
    except Exception as exc:
        shared.fail("consumers", exc)
    finally:
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()
    with contextlib.suppress(Exception):
        pipe.send(("done", shared.errors))


def _join(threads: Sequence[threading.Thread], timeout: float, shared: _Consumers) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    stuck = sum(t.is_alive() for t in threads)
    if stuck:
        shared.errors.append(f"{stuck} consumer thread(s) still running after stop")
