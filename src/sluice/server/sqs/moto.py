"""What moto's own SQS test suite needs of a server to run against it unchanged
(``sluice serve --moto-tests``, never in production): moto's account id, the queue URLs
moto's server answers (``http://localhost:5000/...``, which its tests compare), STS's
GetCallerIdentity (its ``account_id`` fixture asks the endpoint), and its reset route,
called before every test, which drops every queue of the database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

import sluice
from sluice.server.leases import Leases
from sluice.server.sqs.context import Call, SqsState

__all__ = ["MOTO_ACCOUNT", "MOTO_BASE", "OPERATIONS", "reset_for"]

MOTO_ACCOUNT = "123456789012"
"""The account id moto's tests expect in queue URLs and ARNs."""

MOTO_BASE = "http://localhost:5000"
"""Where moto's tests expect queue URLs to point in server mode (moto's default port)."""


def caller_identity(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """STS's GetCallerIdentity, as moto's server answers it."""
    return {
        "UserId": "AKIAIOSFODNN7EXAMPLE",
        "Account": call.state.account,
        "Arn": f"arn:aws:sts::{call.state.account}:user/moto",
    }


OPERATIONS = {"GetCallerIdentity": caller_identity}
"""The operations beyond SQS's that moto's tests ask of the endpoint."""


def reset_for(
    db: sluice.Database, leases: Leases, state: SqsState
) -> Callable[[], Awaitable[None]]:
    """The reset: every queue dropped (error queues last), with what was leased from it
    and the attributes the endpoint remembered."""

    async def reset() -> None:
        for spec in db.queues():
            await leases.end_queue(spec.name)
        await anyio.to_thread.run_sync(_drop_all, db)
        state.forget()

    return reset


def _drop_all(db: sluice.Database) -> None:
    for spec in db.queues():
        if spec.error_queue is not None:
            db.alter_queue(spec.name, error_queue=None, max_attempts=None)
    for spec in db.queues():
        db.drop_queue(spec.name)  # its SQS record and deduplication ids with it
