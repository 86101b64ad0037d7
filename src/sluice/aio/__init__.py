"""sluice for asyncio: the Database API with awaited operations (docs/aio.md).

    import sluice.aio

    async with sluice.aio.connect("sqlite:///sluice.db") as db:
        q = await db.create_queue("orders", exist_ok=True)
        await q.put({"customer": "Smith"})
        m = await q.get(wait=1.0)
        await m.ack()

On PostgreSQL, messaging runs on psycopg's asyncio connections; on SQLite and
memory, in one thread per database. Catalog, admin and jobs bookkeeping calls
run the blocking API in that thread on every backend.
"""

from sluice.aio.database import AsyncDatabase, Connecting, attach, connect
from sluice.aio.message import AsyncMessage
from sluice.aio.queue import AsyncQueue
from sluice.aio.transaction import AsyncTransaction
from sluice.aio.worker import AsyncWorker

__all__ = [
    "AsyncDatabase",
    "AsyncMessage",
    "AsyncQueue",
    "AsyncTransaction",
    "AsyncWorker",
    "Connecting",
    "attach",
    "connect",
]
