"""The engine context: what the engine's parts share about one connection to the queues.

One object holds the backend, this process's session and its lease, the caches
of queue settings and content rules, the message types and the wake-ups.
Transactions, queue handles and the features above the engine (jobs, Spark)
work through it; the public ``Database`` is a facade over it and keeps no
state of its own that the parts would have to reach into.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass

from sluice.backends.base import Backend, Lane, Selection
from sluice.catalog import QueueSpec, check_queue_name
from sluice.clock import Clock
from sluice.engine import lease as leases
from sluice.engine.content import QueueContent
from sluice.engine.observe import Observer, default_observer
from sluice.engine.types import TypeRegistry
from sluice.engine.upkeep import upkeep
from sluice.engine.wakeups import Wakeups
from sluice.errors import ConfigurationError, QueueNotFound, SluiceError

__all__ = ["DEFAULT_LEASE", "DEFAULT_POLL_INTERVAL", "EngineContext", "Stranded"]

log = logging.getLogger("sluice")

DEFAULT_LEASE = 30.0
"""Seconds a session may go without heartbeat before others roll it back."""
DEFAULT_POLL_INTERVAL = 0.05
"""Seconds between change checks while waiting for work written by other processes."""
_SPEC_TTL = 1.0  # queue settings altered by another process are seen within this time
_SPEC_MARGIN = 0.1  # cached settings due to expire sooner count as not cached (is_cached)

# SQLite connections must not be used across fork() (the SQLite docs warn of
# corruption), so every context learns when it finds itself in a forked child.
_open_contexts: weakref.WeakSet[EngineContext] = weakref.WeakSet()


def _forget_in_child() -> None:
    for context in list(_open_contexts):
        context.forked = True


os.register_at_fork(after_in_child=_forget_in_child)


@dataclass(frozen=True, slots=True)
class Stranded:
    """A transaction whose abort the database refused (a full disk, a lost connection):
    what the abort has yet to give back. Its messages stay held meanwhile, as they are
    while any abort runs."""

    session: int
    tx: int
    held: tuple[int, ...]
    lanes: tuple[Lane, ...]
    queues: frozenset[str]
    """The queues (and subscriptions) of the held messages: a take from one of them
    finishes this abort first."""

    @property
    def abort_args(self) -> tuple[int, int, list[int], list[Lane]]:
        """The backend's ``abort`` arguments that give back what it holds (idempotent:
        only rows still held by its session and transaction change, none if recovery
        gave them back already)."""
        return self.session, self.tx, list(self.held), list(self.lanes)


class EngineContext:
    """One session on a backend and everything the engine's parts share. Thread-safe."""

    def __init__(
        self,
        backend: Backend,
        *,
        lease: float = DEFAULT_LEASE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_message_size: int,
    ) -> None:
        if lease <= 0 or poll_interval <= 0:
            raise ConfigurationError("lease and poll_interval must be positive numbers of seconds")
        self.backend = backend
        self.lease = lease
        self.max_message_size = max_message_size
        self.wakeups = Wakeups(backend, poll_interval)
        self.types = TypeRegistry(backend.message_types)
        self.closed = False
        self.forked = False
        self._specs: dict[str, tuple[QueueSpec, float]] = {}
        self._contents: dict[str, QueueContent] = {}
        self.ready_hints: dict[str, int] = {}
        """Per subscription, about how many ready messages it has (engine.topics)."""
        self.observer: Observer | None = default_observer()
        """Telemetry's observer (engine/observe.py); None, the default, is telemetry off."""
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._renewed = time.monotonic()  # before the write: others judge by a later stamp
        self._session = backend.open_session(leases.host_key(), os.getpid(), lease)
        self.writer = self._session
        """The writer an ordered queue's lane names (docs/isolation.md): this connection's
        first session, kept when a lease loss gives it another. A lane of the session
        would split the writer in two there, and a reader could take what it put after
        the loss before what it put before, out of its order (the campaign found it)."""
        self._stranded: dict[tuple[int, int], Stranded] = {}
        _open_contexts.add(self)
        self.recover(wait=False)  # a pass already running does the work
        self._keeper = leases.LeaseKeeper(self._tick, lease)
        self._keeper.start()

    @property
    def clock(self) -> Clock:
        """The time messages are judged by: the backend's, one clock for the engine and jobs."""
        return self.backend.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.backend.clock = clock

    @property
    def session(self) -> int:
        """This connection's session id (the S of message ids)."""
        return self._session

    def next_transaction(self) -> tuple[int, int]:
        """(session, number) of a new transaction; SluiceError once closed or forked."""
        # No lock: it runs for every put and get, and next() on a count and reading
        # two attributes are atomic under the GIL; close() only ever sets closed.
        if self.closed or self.forked:
            raise self.unusable()
        return self._session, next(self._numbers)

    def unusable(self) -> SluiceError:
        """Why this connection can no longer be used."""
        if self.forked:
            return SluiceError(
                "this Database was opened before a fork; call sluice.connect in the child process"
            )
        return SluiceError("the database connection is closed; call sluice.connect again")

    # --- queue settings and content rules, cached -------------------------------------
    def spec(self, name: str, *, fresh: bool = False) -> QueueSpec:
        """A queue's settings (at most a second old unless ``fresh``); QueueNotFound."""
        if self.forked:
            raise self.unusable()
        cached = self._specs.get(name)
        now = time.monotonic()
        if cached is not None and not fresh and cached[1] > now:
            return cached[0]
        spec = self.backend.get_queue(check_queue_name(name))
        if spec is None:
            self._specs.pop(name, None)
            raise self.not_found(name)
        self._specs[name] = (spec, now + _SPEC_TTL)
        return spec

    def not_found(self, name: str, kind: str = "queue") -> QueueNotFound:
        """QueueNotFound for ``name`` with the existing names of that ``kind`` closest to it.

        Only on the error path: it reads the catalog once, which a lookup that found the
        queue never does.
        """
        specs = self.backend.list_queues()
        names = [s.name for s in specs if kind in ("queue", s.kind)]
        create = {"topic": "db.create_topic({!r})", "subscription": "db.subscribe(topic, {!r})"}
        return QueueNotFound(
            name=name,
            kind=kind,
            suggestions=difflib.get_close_matches(name, names, n=3, cutoff=0.6),
            hint="create it with " + create.get(kind, "db.create_queue({!r})").format(name),
        )

    def is_cached(self, name: str) -> bool:
        """Whether ``spec(name)`` and ``content(name)`` would read nothing now (sluice.aio
        reads them in a thread when they would)."""
        cached = self._specs.get(name)
        if cached is None or cached[1] <= time.monotonic() + _SPEC_MARGIN:
            return False
        content = self._contents.get(name)
        return content is not None and content.spec is cached[0]

    def content(self, name: str) -> QueueContent:
        """A queue's content rules (types, priority functions, declared properties)."""
        spec = self.spec(name)
        content = self._contents.get(name)
        if content is None or content.spec is not spec:
            content = QueueContent.build(
                spec, self.backend.queue_properties(name), self.backend.stored_properties(name)
            )
            self._contents[name] = content
        return content

    def subscription_selector(self, spec: QueueSpec) -> Selection | None:
        """A subscription's where, checked against its topic (None: every message)."""
        if spec.topic is None or not spec.selector:
            return None
        return self.content(spec.topic).selection(spec.selector, None)

    def forget(self, name: str) -> None:
        """Drop what is cached of a queue (its settings or properties changed)."""
        self._specs.pop(name, None)
        self._contents.pop(name, None)
        self.ready_hints.pop(name, None)

    # --- the session's life ---------------------------------------------------------
    def recover(self, *, wait: bool = True) -> list[int]:
        """Roll back sessions whose owners died; returns their ids.

        ``wait``: if another pass is running (on PostgreSQL, another process's), wait for
        it, then look. Asked for (``Database.recover``), a pass must not return none
        while a dead session waits: the other pass may be a killed process's, which its
        server ends only when it notices (a test saw ``recover()`` find nothing right
        after a kill -9, on a loaded machine). The heartbeat's passes do not wait.
        """
        dead = self.backend.recover(lambda s: leases.is_dead(s, me=self._session), wait=wait)
        if dead:
            log.info("sluice rolled back dead sessions %s", dead)
            self.wakeups.notify()
        self._upkeep()
        return dead

    def _upkeep(self) -> None:
        upkeep(self.backend, self.forget, lambda name: self.subscription_selector(self.spec(name)))

    # --- aborts the database refused ------------------------------------------------
    def strand(self, stranded: Stranded) -> None:
        """Keep an abort the database refused, to finish it before this connection takes
        from its queues again (``stranded_in``) and at each heartbeat: else this process
        would take the messages behind the ones it still holds, out of the queue's order
        (the fault campaign found a gateway forwarding that way after a full disk)."""
        with self._lock:
            self._stranded[(stranded.session, stranded.tx)] = stranded

    def stranded_in(self, queue: str) -> list[Stranded]:
        """The refused aborts holding messages of ``queue``."""
        if not self._stranded:  # the common case, without the lock
            return []
        with self._lock:
            return [s for s in self._stranded.values() if queue in s.queues]

    def finished(self, stranded: Stranded) -> None:
        """``stranded``'s abort went through: its messages are back for whoever waits."""
        with self._lock:
            self._stranded.pop((stranded.session, stranded.tx), None)
        self.wakeups.notify()

    def _finish_stranded(self) -> None:
        with self._lock:
            waiting = list(self._stranded.values())
        for stranded in waiting:
            self.backend.abort(*stranded.abort_args)  # raises while the database refuses
            self.finished(stranded)

    def lease_held(self, session: int) -> bool:
        """Whether ``session`` is this connection's and its lease surely still holds: renewed
        less than a lease ago by this host's clock (measured from before the renewal's
        write). Past that, another process may have taken it for dead and given its
        messages back, and work it does on them (a gateway's delivery) would come out
        of order or twice; it stops instead (Transaction.check_lease)."""
        return session == self._session and time.monotonic() - self._renewed < self.lease

    def _tick(self) -> None:
        started = time.monotonic()
        if not self.backend.heartbeat(self._session):
            # We were taken for dead (stalled past the lease): our open
            # transactions were rolled back and will fail at commit. Carry on
            # under a new session for new work.
            with self._lock:
                self._session = self.backend.open_session(
                    leases.host_key(), os.getpid(), self.lease
                )
            log.warning("sluice session lease was lost; continuing as session %s", self._session)
        self._renewed = started
        self.recover(wait=False)
        self._finish_stranded()

    def close(self) -> None:
        """End the session: whatever it still holds is rolled back. Idempotent."""
        if self.forked:  # the parent's connection and session: not the child's to end
            self.closed = True
            return
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._keeper.stop()
        try:
            self.backend.close_session(self._session)
            try:
                self._upkeep()  # its non-durable subscriptions end with it
            except SluiceError as exc:  # or with the next process's upkeep
                log.debug("sluice upkeep at close failed: %s", exc)
        finally:
            self.backend.close()
