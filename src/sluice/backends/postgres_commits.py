"""The PostgreSQL backend's writes that carry messages: appends and commits, with the
acknowledgements that threads of one Database make at once grouped into one transaction
(``commit_many``). What each unit runs and decides is ``postgres_decisions``; this runs it."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from sluice.backends.group_commit import GroupCommitter
from sluice.backends.postgres_decisions import PostgresDecisions
from sluice.backends.postgres_statements import Expected, commit_failure
from sluice.backends.records import CommitPlan, Envelope, Row, plain_ack
from sluice.errors import QueueNotFound, SluiceError

__all__ = ["PostgresCommits"]


class PostgresCommits(PostgresDecisions):
    """The appends and commits of ``PostgresBackend`` (mixed into it)."""

    _group: GroupCommitter[CommitPlan] | None
    """Gathers plain acknowledgements into ``commit_many``; None when grouping is off."""

    @abstractmethod
    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]: ...

    @abstractmethod
    def _unit(
        self, statements: Sequence[tuple[str, Any]], *, durable: bool = True
    ) -> list[list[Row]]: ...

    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        statements = self.append_statements(session, tx, envelopes, ready=ready, durable=durable)
        notified = self._run_checked(statements, envelopes, durable=durable)
        self.appended(envelopes, ready=ready, notified=notified)

    def _run_checked(
        self,
        statements: list[tuple[str, Any]],
        envelopes: Sequence[Envelope],
        *,
        durable: bool = True,
    ) -> bool:
        """Run a unit whose ``expect()`` failures mean a missing queue or a lost lease.

        Returns whether the unit carried a wake-up NOTIFY itself.
        """
        route = self.route(statements, envelopes, durable=durable)
        try:
            if route.single:
                self._one(*route.statements[0])
            else:
                self._unit(route.statements, durable=route.durable)
        except Expected as exc:
            if exc.what == "queue not found":
                raise self.queue_not_found(envelopes) from None
            raise
        return route.notified

    def commit(self, plan: CommitPlan) -> None:
        # Acknowledgements that threads of this Database make at once go as one statement
        # in one transaction (commit_many): one round trip (and WAL flush) for them all, and
        # a fraction of the server's work each, where the server is the bound. Transient
        # ones too: one grouped with a persistent one is only made durable sooner.
        if self._group is not None and plain_ack(plan):
            self._group.commit(plan)
        else:
            self._commit_one(plan)

    def _commit_one(self, plan: CommitPlan) -> None:
        try:
            notified = self._run_checked(
                self.commit_unit(plan), plan.enqueues, durable=plan.durable
            )
        except Expected as exc:
            raise commit_failure(plan, exc) from exc
        self.committed(plan, notified=notified)

    def commit_many(self, plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        """All plans in one transaction, one round trip and one WAL flush; if any fails
        (its lease lost, its queue gone), nothing did, and each is committed alone."""
        if len(plans) > 1:
            statements = self.group_unit(plans)
            enqueues = [e for plan in plans for e in plan.enqueues]
            try:
                notified = self._run_checked(
                    statements, enqueues, durable=any(p.durable for p in plans)
                )
            except (Expected, QueueNotFound):
                pass
            else:
                for plan in plans:
                    self.committed(plan, notified=notified)
                return [None] * len(plans)
        results: list[BaseException | None] = []
        for plan in plans:
            try:
                self._commit_one(plan)
            except SluiceError as exc:
                results.append(exc)
            else:
                results.append(None)
        return results
