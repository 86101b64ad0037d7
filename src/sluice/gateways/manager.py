"""``db.gateways``: define, list and drop gateway queues, and run them: a thread per
outgoing gateway (its Sender) and per incoming one that polls (dropbox), beside the
rules engine under ``sluice run``. A thread that fails with sluice's own error (the
database went away) runs again after a pause, as a worker does; whatever it held went
back to its place."""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.errors import ConfigurationError, QueueExists, SluiceError
from sluice.gateways.model import Direction, Gateway, Setting
from sluice.gateways.pipeline import Pipeline
from sluice.gateways.registry import transport
from sluice.gateways.sender import Sender
from sluice.gateways.stats import DeliveryStats
from sluice.gateways.throttle import Throttle
from sluice.gateways.transports import Inbound, Outbound, Transport
from sluice.rules.model import QueueDef

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["DEFAULT_POLL", "Gateways", "Restarts"]

DEFAULT_POLL = 1.0
"""Seconds a sender waits for a message at a time, and between an inbound's polls when
no event wakes it; also how soon a stop is seen."""

log = logging.getLogger("sluice.gateways")

_PAUSES = (0.5, 30.0)
"""Seconds before a gateway thread that failed with sluice's own error runs again, the
first time and at most (doubling between)."""


class Restarts:
    """The pauses of a thread that fails and runs again: ``first``, doubling up to
    ``most`` while it fails at once, and ``first`` again after a run that lasted longer
    than the pause before it (it worked meanwhile). Else a sender that met a few short
    faults (a full disk, a restarted server) would wait the longest pause after every
    later one, for as long as its process runs."""

    def __init__(self, first: float, most: float) -> None:
        self._first = first
        self._most = most
        self._last = 0.0

    def pause(self, *, ran: float) -> float:
        """The pause after a run of ``ran`` seconds that failed."""
        if ran > self._last:
            self._last = self._first
        else:
            self._last = min(self._last * 2, self._most)
        return self._last


class Gateways:
    """The gateway queues of ``db`` (``db.gateways``)."""

    def __init__(self, db: Engine) -> None:
        self._db = db
        self._stop = threading.Event()
        self._threads: builtins.list[threading.Thread] = []
        self._lock = threading.Lock()
        self.stats = DeliveryStats()
        """What the outgoing gateways run here delivered and failed to, so far (progress)."""

    # --- definitions ------------------------------------------------------------------
    def define(
        self, queue: str, *, direction: Direction, transport: str, **settings: Setting
    ) -> Gateway:
        """Make ``queue`` a gateway: its transport and settings checked, the queue made
        if it does not exist (a plain persistent one), the definition stored (replacing
        one it had). ConfigurationError for a transport or setting that cannot work, or
        a ``profile`` that names no stored profile (docs/gateways.md)."""
        gateway = Gateway(queue, direction, transport, dict(settings))
        made = self.check(gateway)
        Throttle.check(self._db, gateway, sends=made.outbound is not None)
        with contextlib.suppress(QueueExists):  # a gateway of a queue made before
            self._db.create_queue(queue)
        self._db.backend.gateways_put(
            queue, direction, gateway.transport, gateway.stored(), self._db.clock.now()
        )
        return gateway

    @staticmethod
    def check(gateway: Gateway) -> Transport:
        """``gateway``'s transport; ConfigurationError unless it can serve it as set."""
        return transport(gateway)

    def check_definition(self, queue: QueueDef) -> None:
        """What ``define`` checks, for a KIND gateway queue of a rules definition (Rules'
        check): its transport and settings, and its ``profile``."""
        if queue.gateway is not None:
            g = queue.gateway
            gateway = Gateway(queue.name, g.direction, g.transport, dict(g.settings))
            made = transport(gateway)
            Throttle.check(self._db, gateway, sends=made.outbound is not None)

    def list(self) -> list[Gateway]:
        """Every gateway, by queue name."""
        return [Gateway.of(row) for row in self._db.backend.gateways_list()]

    def get(self, queue: str) -> Gateway | None:
        return next((g for g in self.list() if g.queue == queue), None)

    def drop(self, queue: str) -> None:
        """Make ``queue`` a plain queue again (it stays, with its messages)."""
        if not self._db.backend.gateways_drop(queue):
            raise ConfigurationError(f"queue {queue!r} is not a gateway")

    # --- running ----------------------------------------------------------------------
    def _sides(self, stop: threading.Event) -> tuple[builtins.list[Sender], builtins.list[Inbound]]:
        senders: builtins.list[Sender] = []
        inbound: builtins.list[Inbound] = []
        for gateway in self.list():
            made = transport(gateway)
            if gateway.direction == "out" and made.outbound is not None:
                out: Outbound = made.outbound(self._db, gateway)
                senders.append(Sender(self._db, gateway, out, stop, stats=self.stats))
            elif made.inbound is not None:
                inbound.append(made.inbound(self._db, gateway))
        return senders, inbound

    def run_until_idle(self) -> int:
        """Poll every incoming gateway once and send every message waiting in the
        outgoing ones (failures tried again after their backoff); how many messages
        came in or went out (error messages included). For tests and scripts."""
        stop = threading.Event()
        senders, inbound = self._sides(stop)
        done = 0
        try:
            for side in inbound:
                done += side.poll()
            for sender in senders:
                while sent := sender.send():
                    done += sent
        finally:
            for side in inbound:
                side.close()
            for sender in senders:
                sender.close()
        return done

    def start(self, *, poll: float = DEFAULT_POLL) -> None:
        """Run every gateway on threads of this process until ``stop``."""
        with self._lock:
            if self._threads:
                raise ConfigurationError("the gateways run already in this process")
            self._stop.clear()
            senders, inbound = self._sides(self._stop)
            for sender in senders:
                run = sender.run if sender.profiled else Pipeline(self._db, sender, self._stop).run
                self._spawn(f"sluice-gateway-{sender.queue}", functools.partial(run, poll=poll),
                            sender.close)  # fmt: skip
            for side in inbound:
                self._spawn("sluice-gateway-side", functools.partial(side.run, self._stop, poll),
                            side.close)  # fmt: skip

    def _spawn(self, name: str, work: Callable[[], None], close: Callable[[], None]) -> None:
        stop = self._stop

        def body() -> None:
            restarts = Restarts(*_PAUSES)
            try:
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        work()  # until stopped
                        return
                    except SluiceError:  # the database away, say: it runs again after a pause
                        pause = restarts.pause(ran=time.monotonic() - started)
                        log.exception("gateway thread %s failed; again in %g s", name, pause)
                    if stop.wait(pause):
                        return
            except Exception:  # not sluice's own: a bug, logged; the others go on
                log.exception("gateway thread %s failed", name)
            finally:
                close()

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the gateways started here: a message being delivered finishes, one
        waiting to be tried again goes back to its place."""
        with self._lock:
            self._stop.set()
            for thread in self._threads:
                thread.join(timeout)
            self._threads = []
