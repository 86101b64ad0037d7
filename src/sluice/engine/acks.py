"""Acknowledging many messages at once: each one's own transaction commits, all of them
with one durable commit.

A consumer that processes messages side by side (Celery's worker, whose pool finishes
tasks one after another) acknowledges them one by one; each ``ack()`` is a commit of
its own and, at full durability, a disk flush of its own. ``ack_many`` commits the
acknowledgements that have piled up meanwhile together: each stays all or nothing on
its own (one whose lease was lost fails alone), and one flush makes them all durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sluice.backends.base import CommitPlan
from sluice.engine import steps
from sluice.engine.transaction import Transaction
from sluice.errors import LeaseLost, MessageStateError, SluiceError
from sluice.message import Message, settled_by

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["ack_many"]


def ack_many(context: EngineContext, messages: Sequence[Message]) -> list[SluiceError | None]:
    """Acknowledge ``messages``, each taken by ``get``, ``get_any`` or ``get_many`` (its
    own implicit transaction), in one database commit. Per message, None or the error
    its acknowledgement met (``LeaseLost``: recovery gave it back; it is delivered
    again). MessageStateError, and nothing acknowledged, if one was browsed, belongs
    to an explicit transaction, was settled already or is given twice."""
    holders: list[Transaction] = []
    seen: set[int] = set()
    for message in messages:
        holder = settled_by(message.id, message.holder)
        if not isinstance(holder, Transaction) or id(holder) in seen:
            raise MessageStateError(f"message {message.id} is given twice, or not held here")
        seen.add(id(holder))
        holders.append(holder)
    plans: list[CommitPlan] = []
    freed: list[dict[str, int] | None] = []
    for holder in holders:
        plan, credit = steps.run(holder.plan_steps(), context.backend, context.wakeups)
        if plan is None:  # pragma: no cover - a held message always makes a plan
            raise MessageStateError(f"transaction {holder.id} holds nothing to acknowledge")
        plans.append(plan)
        freed.append(credit)
    results = context.backend.commit_many(plans) if plans else []
    errors: list[SluiceError | None] = []
    for holder, credit, result in zip(holders, freed, results, strict=True):
        if result is None:
            holder.committed(credit)
            errors.append(None)
        elif isinstance(result, SluiceError):
            if isinstance(result, LeaseLost):
                holder.lost(result)
            errors.append(result)
        else:
            raise result
    return errors
