"""A kombu virtual channel whose messages are sluice messages.

A message taken for a consumer is held by sluice until the consumer settles it:
``ack`` is sluice's settle, ``reject(requeue=True)`` a release to the message's
original place (counted against the queue's ``max_attempts``), ``reject`` without
requeue sends it to the queue's error queue (or keeps it ``failed``). What a
consumer still holds when its channel closes is released; what a killed process
held returns as soon as its session is judged dead, in place, not after a
visibility timeout. ETA and countdown tasks wait in the store as delayed
messages; kombu priorities are sluice priorities (higher first).
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC, datetime
from typing import Any

from kombu.transport import virtual
from kombu.transport.virtual.base import Empty

import sluice
from sluice.contrib.kombu.bindings import Bindings
from sluice.contrib.kombu.names import from_sluice, to_sluice
from sluice.contrib.kombu.payloads import Payload, as_payload, delivery_tag

__all__ = ["Channel", "QoS", "settle_held"]

log = logging.getLogger("sluice.contrib.kombu")


class QoS(virtual.QoS):  # type: ignore[misc]
    """kombu's unacked bookkeeping, with each settle done in sluice."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        try:
            self.channel.settle(delivery_tag, "ack")
        finally:
            super().ack(delivery_tag)
            self.channel.room()  # after the books: a reader looking now sees the room

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        try:
            self.channel.settle(delivery_tag, "release" if requeue else "reject")
        finally:
            self._quick_ack(delivery_tag)  # off the books, as kombu's own reject does
            self.channel.room()

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Give back every message still held: released to its place, in one go each."""
        self._flush()
        errors: list[tuple[BaseException, Any]] = []
        while self._delivered:
            tag, message = self._delivered.popitem()
            try:
                self.channel.settle(tag, "release")
            except sluice.SluiceError as exc:
                errors.append((exc, message))
        return errors


def _seconds_until(eta: str) -> float:
    """Celery's ``eta`` header (ISO 8601; naive means UTC) as a delay from now."""
    moment = datetime.fromisoformat(eta)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - datetime.now(UTC)).total_seconds(), 0.0)


class Channel(virtual.Channel):  # type: ignore[misc]
    """kombu's virtual channel over one sluice database (shared by the process)."""

    QoS = QoS
    supports_fanout = True
    # Bodies stay as kombu encoded them; sluice stores the payload as JSON.
    do_restore = True

    connection: Any  # the Transport

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._db: sluice.Database = connection.database
        self._bindings: Bindings = connection.bindings
        self._held: dict[str, sluice.Message] = {}
        self._held_lock = threading.Lock()
        self._no_ack: set[str] = set()  # queues consumed without acknowledgement
        self._known: set[str] = set()  # sluice queues this channel has seen exist
        self._ttl: dict[str, float] = {}  # x-message-ttl of queues declared here (seconds)
        self._pid = os.getpid()

    # --- queues --------------------------------------------------------------------
    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        name = to_sluice(queue)
        arguments = kwargs.get("arguments") or {}
        if "x-message-ttl" in arguments:
            self._ttl[queue] = float(arguments["x-message-ttl"]) / 1000.0
        if name not in self._known:
            options = self.connection.queue_options
            self._db.create_queue(name, exist_ok=True, **options)
            self._known.add(name)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return self._exists(to_sluice(queue))

    def _size(self, queue: str) -> int:
        try:
            return self._db.queue(to_sluice(queue)).stats()["ready"]
        except sluice.QueueNotFound:
            return 0

    def _purge(self, queue: str) -> int:
        return self._db.queue(to_sluice(queue)).purge("ready")

    def queue_delete(
        self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any
    ) -> None:
        """Delete the queue, its messages and every binding of it, in every process."""
        if if_empty and self._size(queue):
            return
        self._bindings.remove(queue=queue)
        self.state.queue_bindings_delete(queue)
        name = to_sluice(queue)
        self._known.discard(name)
        try:
            self._db.drop_queue(name)
        except sluice.QueueNotFound:
            pass
        except sluice.QueueInUse as exc:
            # Consumers still hold some of its messages (an unacked reply, say): what
            # is ready goes now; the queue stays for the holders to settle.
            gone = self._purge(queue)
            log.info("queue %r kept, its %d ready messages purged: %s", queue, gone, exc)

    # --- exchanges and bindings, shared by every process -----------------------------
    def queue_bind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        exchange = exchange or "amq.direct"
        if self.state.has_binding(queue, exchange, routing_key):
            return
        self.state.binding_declare(queue, exchange, routing_key, arguments)
        kind = self.typeof(exchange).type
        key, pattern, _ = self.typeof(exchange).prepare_bind(
            queue, exchange, routing_key, arguments
        )
        self._bindings.add(exchange, kind, key, pattern, queue)

    def queue_unbind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        exchange = exchange or "amq.direct"
        self.state.binding_delete(queue, exchange, routing_key)
        self._bindings.remove(queue=queue, exchange=exchange, routing_key=routing_key)

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        super().exchange_delete(exchange, if_unused=if_unused, nowait=nowait)
        self._bindings.remove(exchange=exchange)

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        return self._bindings.table(exchange)[1]

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        declared = self.state.exchanges.get(exchange)
        if declared is not None:
            return self.exchange_types[declared["type"]]
        # Declared in another process: its bindings say what it is.
        kind = self._bindings.table(exchange)[0] if exchange else None
        return self.exchange_types[kind or default]

    def get_exchanges(self) -> list[str]:
        return list(self.state.exchanges)

    # --- publishing ----------------------------------------------------------------
    def _put(self, queue: str, message: Payload, **kwargs: Any) -> None:
        name = to_sluice(queue)
        options = self._put_options(queue, message)
        try:
            self._db.queue(name).put(message, **options)
        except sluice.QueueNotFound:
            # Routed to a queue nobody declared (or one deleted since): made, as
            # kombu's other virtual transports do.
            self._known.discard(name)
            self._new_queue(queue)
            self._db.queue(name).put(message, **options)

    def _put_fanout(self, exchange: str, message: Payload, routing_key: str, **kwargs: Any) -> None:
        """A copy to every bound queue, all or none: one sluice transaction."""
        queues = sorted({queue for _, _, queue in self.get_table(exchange)})
        with self._db.transaction() as tx:
            for queue in queues:
                self._new_queue(queue)
                tx.enqueue(to_sluice(queue), message, **self._put_options(queue, message))

    def _put_options(self, queue: str, message: Payload) -> dict[str, Any]:
        properties = message.get("properties") or {}
        headers = message.get("headers") or {}
        options: dict[str, Any] = {}
        priority = properties.get("priority")
        if isinstance(priority, int) and not isinstance(priority, bool) and priority:
            options["priority"] = priority
        eta = headers.get("eta")
        if isinstance(eta, str) and (delay := _seconds_until(eta)) > 0:
            options["delay"] = delay
        expiration = properties.get("expiration")
        if "expires" in headers:
            # A Celery task's expiry is its worker's to judge: it receives the task and
            # records it REVOKED, where an expiry in the store would leave its result
            # PENDING for good (celery's test_expired waits for the REVOKED).
            pass
        elif expiration is not None:
            options["ttl"] = max(float(expiration) / 1000.0, 0.001)
        elif queue in self._ttl:
            options["ttl"] = self._ttl[queue]
        return options

    # --- consuming -----------------------------------------------------------------
    def basic_consume(
        self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any
    ) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        consumed = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self.consumers_changed()
        return consumed

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._no_ack.discard(queue)
        self.consumers_changed()
        return result

    def basic_qos(self, *args: Any, **kwargs: Any) -> Any:
        result = super().basic_qos(*args, **kwargs)
        self.consumers_changed()  # a new prefetch count: more (or less) room
        return result

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = self.take([queue], no_ack=no_ack, wait=0.0)
        if message is None:
            return None
        payload = self.payload(message, keep=not no_ack)
        if payload is None:
            return None
        received = self.Message(payload, channel=self)
        if not no_ack:
            self.qos.append(received, received.delivery_tag)
        return received

    def _get(self, queue: str, timeout: float | None = None) -> Payload:
        message = self.take([queue], no_ack=queue in self._no_ack, wait=0.0)
        payload = None if message is None else self.payload(message, keep=queue not in self._no_ack)
        if payload is None:
            raise Empty()
        return payload

    def take(
        self,
        queues: list[str],
        *,
        no_ack: bool,
        wait: float,
        until: threading.Event | None = None,
    ) -> sluice.Message | None:
        """The next message of the first of ``queues`` that has one (waiting up to
        ``wait`` for one, or until ``until`` is set); a consumer without
        acknowledgement has it settled at once."""
        taken = self.take_many(queues, limit=1, wait=wait, until=until)
        if taken and no_ack:
            taken[0].ack()
        return taken[0] if taken else None

    def take_many(
        self,
        queues: list[str],
        *,
        limit: int,
        wait: float,
        until: threading.Event | None = None,
    ) -> list[sluice.Message]:
        """Up to ``limit`` messages of ``queues``, the first queue's first (waiting up to
        ``wait`` for one, or until ``until`` is set), each held on its own."""
        names = [to_sluice(q) for q in queues]
        try:
            return self._db.get_many(names, limit=limit, wait=wait, until=until)
        except sluice.QueueNotFound:
            # A queue consumed but not (or no longer) declared: nothing in it yet.
            names = [n for n in names if self._exists(n)]
            if not names:
                return []
            return self._db.get_many(names, limit=limit, wait=wait, until=until)

    def _exists(self, name: str) -> bool:
        try:
            self._db.queue(name)
        except sluice.QueueNotFound:
            return False
        return True

    def payload(self, message: sluice.Message, *, keep: bool) -> Payload | None:
        """kombu's payload of ``message`` (None: not kombu's, rejected); ``keep``: hold
        it until it is settled."""
        payload = as_payload(message, held=keep)
        if payload is not None and keep:
            with self._held_lock:
                self._held[delivery_tag(message)] = message
        return payload

    def queue_of(self, message: sluice.Message) -> str:
        """kombu's name of the queue ``message`` was taken from."""
        return from_sluice(message.queue)

    def settle(self, tag: str, how: str) -> None:
        """Settle the held message ``tag``: ``ack``, ``release`` or ``reject``."""
        if os.getpid() != self._pid:
            # A forked child (Celery's prefork pool) closing what it inherited: the
            # messages are its parent's, held by the parent's session.
            return
        with self._held_lock:
            message = self._held.pop(tag, None)
        if message is None:
            if self.connection is not None:
                # Held by the connection's consumer process, or settled already (kombu
                # marks a tag once per settle).
                self.connection.settle_elsewhere(tag, how)
            return
        acker = None if self.connection is None else self.connection.acker
        if how == "ack" and acker is not None:
            # Off the caller's thread (Celery's event loop): acks of several tasks then
            # commit together, with one fsync.
            acker.ack(message)
        else:
            settle_held(message, how)

    def room(self) -> None:
        """A settle made room in this consumer's prefetch: whoever waits for it looks again."""
        if self.connection is not None:
            self.connection.settled()

    def consumers_changed(self) -> None:
        """Queues consumed or prefetch changed: a reader (or the consumer process) looks
        again now at what to take for whom."""
        if self.connection is not None:
            self.connection.consumers_changed()

    def close(self) -> None:
        super().close()
        if os.getpid() != self._pid:
            return
        with self._held_lock:
            left = list(self._held.values())
            self._held.clear()
        for message in left:  # taken by basic_get and never appended: given back
            try:
                message.release()
            except sluice.SluiceError:
                log.warning("message %s could not be given back at close", message.id)


def settle_held(message: sluice.Message, how: str) -> None:
    """Settle a held message in sluice: ``ack``, ``release`` or ``reject``."""
    try:
        if how == "ack":
            message.ack()
        elif how == "release":
            message.release()
        else:
            message.reject("rejected by its consumer (kombu reject without requeue)")
    except sluice.LeaseLost:
        # This process stalled past its lease: the message went back to its queue and
        # is (or will be) delivered again; the settle cannot count.
        log.warning(
            "message %s of %r was given back while this consumer held it (its session "
            "lost its lease); it will be delivered again",
            message.id,
            message.queue,
        )
    except sluice.SluiceError:
        if how != "ack":
            raise
        # kombu's ack has no answer to give (AMQP's basic.ack has none either). Still
        # held, the message is given back when this consumer's session ends, and
        # delivered again.
        log.exception("message %s of %r could not be acknowledged", message.id, message.queue)
