"""What the PostgreSQL backend's units of work decide before and after their round trips:
the statements each unit runs, how it is routed, the selections' query texts, claims whose
outcome is unknown, and the news other processes hear. No IO: ``PostgresBackend`` runs
the statements on its pool, ``sluice.aio`` on asyncio connections, and both call these.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from sluice.backends.postgres_notify import Notifier, payload
from sluice.backends.postgres_statements import (
    Route,
    abort_statements,
    acks_statement,
    commit_statements,
    enqueue_statement,
    lanes_params,
)
from sluice.backends.records import CommitPlan, Envelope, Lane, Selection
from sluice.backends.selection import compile_selection
from sluice.catalog import QueueSpec
from sluice.errors import QueueNotFound
from sluice.expr.postgres import PostgresCompiler
from sluice.sql import Template

__all__ = ["PostgresDecisions"]

_MAX_SELECTIONS = 256
# The statements whose selection names the messages table "m" (the others, "s").
_ALIAS_M = frozenset(
    {
        "browse",
        "browse_done",
        "scan",
        "claimed_in_order",
        "failed_origins",
        "retry_failed",
        "discard_failed",
    }
)


class PostgresDecisions:
    """The decisions of ``PostgresBackend``'s units of work (mixed into it)."""

    _q: dict[str, str]
    _templates: dict[str, Template]
    _schema_sql: str
    _selections: dict[str, tuple[str, dict[str, Any]]]
    _uncertain: set[tuple[int, int]]
    _notifier: Notifier
    channel: str

    @abstractmethod
    def list_queues(self) -> list[QueueSpec]: ...

    def selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        """The name of the query shaped by ``select``, and the selection's parameters.

        Values are parameters, so selections that differ only in their values
        share one query text (and one prepared statement): the texts are
        registered once, keyed by the text itself, and never removed.
        """
        if select is None:
            return name, {}
        key = f"{name}#{select.key}"
        cached = self._selections.get(key)
        if cached is None:
            if len(self._selections) >= _MAX_SELECTIONS:
                self._selections = {}  # selections written with inline values are each new
            alias = "m" if name in _ALIAS_M else "s"
            where, order, params = compile_selection(
                select,
                lambda source: PostgresCompiler(source, schema=self._schema_sql),
                alias,
            )
            text = self._templates[name].fill_selection(where, order)
            self._q.setdefault(text, text)
            cached = self._selections[key] = (text, params)
        return cached

    def append_statements(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> list[tuple[str, Any]]:
        """The statements of ``append``."""
        statements = [enqueue_statement(session, tx, envelopes, ready, durable)]
        lanes = sorted({(e.queue, e.lane) for e in envelopes if e.lane is not None})
        if ready and lanes:
            statements.append(("promote", lanes_params(lanes)))
        return statements

    def route(
        self, statements: list[tuple[str, Any]], envelopes: Sequence[Envelope], *, durable: bool
    ) -> Route:
        """How a unit runs: a single statement on its own, in one round trip (``enqueue``
        relaxes its own commit where it may, and carries the NOTIFY when its turn
        comes); several as one pipelined transaction."""
        if len(statements) == 1 and statements[0][0] == "enqueue":
            params = statements[0][1]
            if params["ready"] and self._notifier.take_turn():
                note = payload(self._notifier.origin, (e.queue for e in envelopes))
                params = params | {"channel": self.channel, "payload": note}
                return Route([("enqueue_notify", params)], True, True, True)
            return Route(statements, True, True, False)
        if len(statements) == 1 and durable:
            return Route(statements, True, True, False)
        if (
            len(statements) == 2
            and statements[0][0] == "enqueue"
            and statements[1][0] == "idempotency_record"
        ):
            # An effect with a statement of its own joined with the enqueue
            # (idempotency.sql): one statement, one round trip, no BEGIN and COMMIT.
            # (psycopg costs about as much CPU per statement as the database does per
            # small insert.)
            joined = statements[0][1] | statements[1][1]
            return Route([("enqueue_idempotency_record", joined)], True, True, False)
        return Route(statements, False, durable, False)

    def appended(self, envelopes: Sequence[Envelope], *, ready: bool, notified: bool) -> None:
        """``append`` is done: other processes hear of ready messages."""
        if ready and not notified:
            self._notifier.signal(e.queue for e in envelopes)

    def commit_unit(self, plan: CommitPlan) -> list[tuple[str, Any]]:
        """The statements of ``commit``."""
        return self._unheard(plan.session, plan.tx, plan.held) + commit_statements(plan)

    def _unheard(self, session: int, tx: int, known: Sequence[int]) -> list[tuple[str, Any]]:
        """If a claim of ``tx`` lost its answer: the statement that gives back what it
        holds beside ``known`` (first: its own enqueue goes back to pending, which the
        commit then publishes)."""
        if (session, tx) not in self._uncertain:
            return []
        return [("release_unheard", {"session": session, "tx": tx, "known": list(known)})]

    def group_unit(self, plans: Sequence[CommitPlan]) -> list[tuple[str, Any]]:
        """The statements of several commits made as one transaction (group commit).

        Plain acknowledgements are one statement; not if a claim's outcome is uncertain,
        for then each commit gives back what it never heard of (``commit_unit``).
        """
        sure = not any((p.session, p.tx) in self._uncertain for p in plans)
        return (acks_statement(plans) if sure else []) or [
            s for plan in plans for s in self.commit_unit(plan)
        ]

    def committed(self, plan: CommitPlan, *, notified: bool) -> None:
        """``commit`` is done: other processes hear of what it made available."""
        self._uncertain.discard((plan.session, plan.tx))
        if (plan.pending or plan.rejects) and not notified:
            self._notifier.signal(None)  # which queues gained is not known here
        elif plan.enqueues and not notified:
            self._notifier.signal(e.queue for e in plan.enqueues)
        if plan.freed:  # credit freed: waiters of capped queues elsewhere may take more
            self._notifier.signal(plan.freed)

    def claim_unknown(self, session: int, tx: int) -> None:
        """A claim's connection broke: it may have committed, so the transaction's end must
        settle rows it never heard of."""
        self._uncertain.add((session, tx))

    def released(self) -> None:
        """``release`` is done: other processes may take the messages."""
        self._notifier.signal()

    def abort_unit(
        self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane]
    ) -> list[tuple[str, Any]]:
        """The statements of ``abort``: all it holds, known or not."""
        key = {"session": session, "tx": tx, "ids": None}
        return self._unheard(session, tx, held) + abort_statements(key, bool(held), lanes)

    def aborted(self, session: int, tx: int, held: Sequence[int]) -> None:
        """``abort`` is done: other processes may take what it held."""
        self._uncertain.discard((session, tx))
        if held:
            self._notifier.signal()

    def queue_not_found(self, envelopes: Sequence[Envelope]) -> QueueNotFound:
        existing = {spec.name for spec in self.list_queues()}
        missing = sorted({e.queue for e in envelopes} - existing)
        return QueueNotFound(f"queue {', '.join(map(repr, missing))} does not exist")
