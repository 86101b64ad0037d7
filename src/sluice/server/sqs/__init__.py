"""An SQS-compatible endpoint in ``sluice serve`` (docs/sqs.md): SQS's JSON and query
protocols, Signature Version 4 against sluice's keys, and SQS's operations on ordinary
sluice queues."""

from __future__ import annotations

from fastapi import FastAPI

from sluice.server.sqs.context import ACCOUNT, SqsState
from sluice.server.sqs.endpoint import SqsEndpoint
from sluice.server.sqs.moto import MOTO_ACCOUNT, reset_for

__all__ = ["ACCOUNT", "MOTO_ACCOUNT", "install"]


def install(app: FastAPI, *, moto: bool = False) -> None:
    """Answer SQS's requests in ``app`` (made by create_app: its database, keys and
    leases). ``moto``: for moto's test suite only: its account id in URLs and ARNs and its
    reset route, ``POST /moto-api/reset``, which drops every queue of the database."""
    state = SqsState(MOTO_ACCOUNT if moto else ACCOUNT)
    reset = reset_for(app.state.db, app.state.leases) if moto else None
    app.add_middleware(
        SqsEndpoint,
        db=app.state.db,
        gate=app.state.gate,
        leases=app.state.leases,
        aio=app.state.aio,
        state=state,
        reset=reset,
    )
