"""kombu's own integration tests (t/integration/common.py of its sdist), unchanged,
against the sluice transport on memory, SQLite and PostgreSQL.

The classes are kombu's; this file only gives them the ``connection`` fixtures
their other transports' files give (t/integration/test_redis.py, test_pgmq.py).
``BaseFailover`` is left out: it needs alternate broker hosts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kombu")

import kombu

import sluice.contrib.kombu
from tests.conftest import url_for
from tests.contrib.peers import load

common = load("kombu", "t/integration/common.py", "kombu_integration_common")

pytestmark = pytest.mark.slow


@pytest.fixture(
    params=[
        ("memory", False),
        # On kombu's event loop (TestEventLoop), a consumer process takes and settles (the
        # default), or the transport's own threads.
        ("sqlite", True),
        ("postgresql", True),
        ("sqlite", False),
        ("postgresql", False),
    ],
    ids=[
        "memory",
        "sqlite",
        "postgresql",
        "sqlite-in-process",
        "postgresql-in-process",
    ],
)
def connection(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[kombu.Connection]:
    backend, consumer_process = request.param
    yield from _connection(backend, consumer_process, tmp_path, request)


def _connection(
    backend: str, consumer_process: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[kombu.Connection]:
    url = url_for(backend, tmp_path, request)
    conn = kombu.Connection(
        f"sluice+{url}", transport_options={"consumer_process": consumer_process}
    )
    yield conn
    conn.release()
    sluice.contrib.kombu.close_databases()


@pytest.fixture
def invalid_connection(tmp_path: Path) -> kombu.Connection:
    # A SQLite file in a directory that does not exist cannot be opened.
    return kombu.Connection(f"sluice+sqlite:///{tmp_path / 'missing' / 'dir' / 'q.db'}")


class TestBasicFunctionality(common.BasicFunctionality):  # type: ignore[misc,name-defined]
    pass


class TestExchangeTypes(common.BaseExchangeTypes):  # type: ignore[misc,name-defined]
    pass


class TestTimeToLive(common.BaseTimeToLive):  # type: ignore[misc,name-defined]
    pass


class TestPriority(common.BasePriority):  # type: ignore[misc,name-defined]
    PRIORITY_ORDER = "asc"  # higher numbers first, as on RabbitMQ


class TestMessage(common.BaseMessage):  # type: ignore[misc,name-defined]
    pass


# Alone, in make test's serial run: kombu's own test gives an acknowledgement from another
# thread 1 s from registering the loop, and it ran out beside the parallel run's workers
# on two cores. On the transport's own threads only: with a consumer process, that 1 s
# includes the process's start (0.5 s of imports, the first delivery 0.5-1.0 s after
# registering), and it ran out even alone, with the code of the last landing as with
# this stop's (3 runs of 4, 2026-12-06). test_kombu_consumer_process.py runs the same
# test with a consumer process, without the start in its time.
@pytest.mark.serial
class TestEventLoop(common.BaseEventLoop):  # type: ignore[misc,name-defined]
    @pytest.fixture(params=["memory", "sqlite", "postgresql"])
    def connection(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[kombu.Connection]:
        yield from _connection(request.param, False, tmp_path, request)
