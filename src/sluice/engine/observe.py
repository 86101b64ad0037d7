"""The engine's seam for telemetry: an ``Observer`` told of every send, receive, settle
and processing of messages, with none of a telemetry library's names.

Telemetry is off unless an observer is set (``db.observer = ...``, or for every
Database connected later ``set_default_observer``); ``sluice.contrib.otel`` is the one
sluice ships, over OpenTelemetry. The engine never imports a telemetry library: each
hook site reads ``context.observer`` once and does nothing more when it is None, so the
off state costs an attribute read and an ``is None`` per operation (bench/otel measures
it). What an observer sees:

- ``send``: an enqueue of messages (their ids known beforehand) begins; it returns the
  properties to store (the producer's trace context added) and a ``Span`` the engine
  ends when the transaction commits (or with the error that ended it otherwise).
- ``received``: messages were taken; reported afterwards, with when the take began.
- ``settle``: a transaction's commit (ack, reject), a release or an abort of held
  messages begins; ended as a send is.
- ``process``: the engine's own consumers (job workers, the rules engine) process
  messages inside it; its span is current meanwhile, so what the processing enqueues
  is traced as the processing's work.
- ``incoming``: a request from outside (the HTTP API) carries trace headers; what the
  request enqueues is traced under them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sluice.catalog import QueueSpec
from sluice.errors import ConfigurationError, SluiceError

if TYPE_CHECKING:
    from sluice.message import Message

__all__ = [
    "OTEL_FACTORY",
    "TRACE_PROPERTIES",
    "Destination",
    "Observer",
    "Span",
    "default_observer",
    "destination_of",
    "set_default_observer",
    "settle_operation",
    "settled",
]

TRACE_PROPERTIES = ("traceparent", "tracestate")
"""The message properties a producer's trace context travels in (W3C Trace Context's
header names): a rule's actions inherit them from their trigger, gateways forward them."""


class Destination(NamedTuple):
    """Where messages go or come from, as telemetry names it: a queue or topic, and the
    subscription of the topic a consumer reads (None for a queue)."""

    name: str
    subscription: str | None = None


def destination_of(spec: QueueSpec) -> Destination:
    """A queue's destination: a subscription's is its topic, with its own name."""
    if spec.kind == "subscription" and spec.topic is not None:
        return Destination(spec.topic, spec.name)
    return Destination(spec.name)


class Span(Protocol):
    """One observed operation under way."""

    def count(self, messages: int) -> None:
        """How many messages it covered, once known (a rules batch learns it at its end)."""
        ...

    def end(self, error: BaseException | None = None) -> None:
        """It is over, failed with ``error`` if given; a second end changes nothing."""
        ...


class Observer(Protocol):
    """What the engine tells telemetry (module docstring). Called from any thread; an
    observer must not raise (a failure of telemetry must not fail the work)."""

    def send(
        self, destination: Destination, ids: Sequence[str], properties: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, Span]:
        """An enqueue of the messages ``ids`` begins: the properties to store with them
        and its span (ended by the engine when the transaction ends)."""
        ...

    def received(self, destination: Destination, messages: Sequence[Message], started: int) -> None:
        """``messages`` were taken by a take that began at ``started`` (time.time_ns())."""
        ...

    def settle(
        self, operation: str, destination: Destination | None, messages: Sequence[Message]
    ) -> Span:
        """Held ``messages`` are being settled: ``operation`` is ack, reject, release or
        commit (a transaction acknowledging some and rejecting others); ``destination``
        None when they came from several queues."""
        ...

    def process(
        self,
        destination: Destination,
        messages: Sequence[Message],
        *,
        operation: str,
        target: str | None = None,
    ) -> AbstractContextManager[Span]:
        """``messages`` (none known: a rules batch) are processed inside the block, its span
        current there; ``target`` names it when not the destination (a job's task type)."""
        ...

    def incoming(self, headers: Mapping[str, str]) -> AbstractContextManager[None]:
        """Inside the block, the trace context of ``headers`` (W3C ``traceparent``,
        ``tracestate``) is the current one."""
        ...


_default: Observer | None = None

OTEL_FACTORY = "sluice.contrib.otel:observer"
"""What ``SLUICE_OTEL=1`` names: the OpenTelemetry observer's factory, found by name so
the engine imports no integration (the integration sits above it)."""
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def set_default_observer(observer: Observer | None) -> None:
    """The observer every Database connected from now on starts with (None: none, unless
    the environment's ``SLUICE_OTEL`` or ``SLUICE_OBSERVER`` names one)."""
    global _default  # noqa: PLW0603  (the process-wide choice, made once at startup)
    _default = observer


def default_observer() -> Observer | None:
    """The observer a new Database starts with: the one set, or else the one the
    environment names, made once per process: ``SLUICE_OTEL=1`` (OpenTelemetry's,
    ``sluice.contrib.otel``), or ``SLUICE_OBSERVER=module:factory``."""
    if _default is not None:
        return _default
    named = os.environ.get("SLUICE_OBSERVER")
    otel = os.environ.get("SLUICE_OTEL", "").strip().lower()
    if otel not in _ON + _OFF:
        raise ConfigurationError(f"SLUICE_OTEL must be 1 (telemetry on) or 0 (off), not {otel!r}")
    if not named and otel in _ON:
        named = OTEL_FACTORY
    if not named:
        return None
    module, _, factory = named.partition(":")
    if not module or not factory:
        raise ConfigurationError(
            f"SLUICE_OBSERVER must name a factory as module:function, not {named!r}"
        )
    # An integration's MissingDependency (its extra not installed) is raised here, when
    # the first Database connects, rather than a traceback later.
    made: Observer = getattr(importlib.import_module(module), factory)()
    set_default_observer(made)
    return made


def settled(
    observer: Observer,
    operation: str,
    messages: Sequence[Message],
    spec: Callable[[str], QueueSpec],
) -> Span:
    """The settle span of held ``messages``: their one destination's, or none when they
    came from several queues (or the queue is gone, so nothing names it any more)."""
    queues = {m.queue for m in messages}
    destination = None
    if len(queues) == 1:
        (queue,) = queues
        try:
            destination = destination_of(spec(queue))
        except SluiceError:  # dropped meanwhile: named as the message names it
            destination = Destination(queue)
    return observer.settle(operation, destination, messages)


def settle_operation(held: int, rejected: int) -> str:
    """What a commit does to its held messages: ack, reject, or commit when both."""
    if not rejected:
        return "ack"
    return "reject" if rejected == held else "commit"
