"""An SQS-compatible endpoint in ``sluice serve`` (docs/sqs.md): SQS's JSON and query
protocols, Signature Version 4 against sluice's keys, and SQS's operations on ordinary
sluice queues."""

from __future__ import annotations

from fastapi import FastAPI

from sluice.server.sqs import moto as moto_tests
from sluice.server.sqs.context import ACCOUNT, SqsState
from sluice.server.sqs.endpoint import SqsEndpoint

__all__ = ["ACCOUNT", "install"]


def install(app: FastAPI, *, moto: bool = False) -> None:
    """Answer SQS's requests in ``app`` (made by create_app: its database, keys and
    leases). ``moto``: for moto's test suite only (sqs/moto.py): its account id and URLs,
    STS's GetCallerIdentity, and its reset route, ``POST /moto-api/reset``, which drops
    every queue of the database."""
    state = SqsState(moto_tests.MOTO_ACCOUNT, moto_tests.MOTO_BASE) if moto else SqsState()
    reset = moto_tests.reset_for(app.state.db, app.state.leases, state) if moto else None
    app.add_middleware(
        SqsEndpoint,
        db=app.state.db,
        gate=app.state.gate,
        leases=app.state.leases,
        aio=app.state.aio,
        state=state,
        offload=app.state.offload,
        reset=reset,
        extra=moto_tests.OPERATIONS if moto else {},
    )
