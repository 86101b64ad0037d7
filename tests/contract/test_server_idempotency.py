"""Idempotency-Key on enqueue (sluice.server.idempotency), on every backend: a retry
gets the first answer and enqueues nothing more; another request with the key is
refused; a running first request makes a retry wait; a dead one is run again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from sluice.server.idempotency import KEPT, STALE, Answered, Idempotency, Replay, fingerprint
from sluice.server.models import Enqueue
from tests.contract.test_server import key, problem

PATH = "/api/queues/orders/messages"
ONE = {"messages": [{"body": {"order": 1}}]}


@pytest.fixture
def client(db: sluice.Database, clock: ManualClock) -> Iterator[TestClient]:
    db.create_queue("orders", max_size=100)
    with TestClient(create_app(db)) as client:
        yield client


def post(client: TestClient, auth: dict[str, str], idem: str, body: Any = ONE) -> Any:
    return client.post(PATH, headers={**auth, "Idempotency-Key": idem}, json=body)


def test_a_retry_gets_the_first_answer_and_enqueues_nothing_more(
    client: TestClient, db: sluice.Database
) -> None:
    auth = key(db, "shop", "orders:produce")
    first = post(client, auth, "order-1")
    assert first.status_code == 201, first.text
    again = post(client, auth, "order-1")
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert db.queue("orders").stats()["ready"] == 1
    other = post(client, auth, "order-2")
    assert other.json() != first.json()
    assert db.queue("orders").stats()["ready"] == 2


def test_the_key_with_another_request_is_refused(client: TestClient, db: sluice.Database) -> None:
    auth = key(db, "shop", "orders:produce")
    post(client, auth, "k")
    problem(post(client, auth, "k", {"messages": [{"body": {"order": 2}}]}), 422,
            "IdempotencyKeyReused")  # fmt: skip
    assert db.queue("orders").stats()["ready"] == 1


def test_keys_are_each_api_key_s_own(client: TestClient, db: sluice.Database) -> None:
    shop = key(db, "shop", "orders:produce")
    other = key(db, "other", "orders:produce")
    post(client, shop, "k")
    assert "idempotent-replayed" not in post(client, other, "k").headers
    assert db.queue("orders").stats()["ready"] == 2


def test_a_retry_while_the_first_runs_waits_and_a_dead_first_is_run_again(
    client: TestClient, db: sluice.Database, clock: ManualClock
) -> None:
    auth = key(db, "shop", "orders:produce")
    asked = fingerprint("POST", PATH, Enqueue.model_validate(ONE).model_dump(mode="json"))
    assert Idempotency(db).begin("shop", "k", asked) is None  # a first request, running
    problem(post(client, auth, "k"), 409, "IdempotencyKeyBusy")
    assert db.queue("orders").stats()["ready"] == 0
    clock.advance(STALE + 1)  # it never answered: its server died
    assert post(client, auth, "k").status_code == 201
    assert post(client, auth, "k").headers["idempotent-replayed"] == "true"
    assert db.queue("orders").stats()["ready"] == 1


def test_a_client_error_is_the_key_s_answer_too(client: TestClient, db: sluice.Database) -> None:
    auth = key(db, "shop", "orders:produce")
    big = {"messages": [{"body": "x" * 200}]}
    problem(post(client, auth, "k", big), 413, "PayloadTooLarge")
    replayed = post(client, auth, "k", big)
    problem(replayed, 413, "PayloadTooLarge")
    assert replayed.headers["idempotent-replayed"] == "true"
    problem(client.post("/api/queues/nowhere/messages",
                        headers={**key(db, "all", "*:produce"), "Idempotency-Key": "n"},
                        json=ONE), 404, "QueueNotFound")  # fmt: skip


def test_keys_are_kept_a_day(client: TestClient, db: sluice.Database, clock: ManualClock) -> None:
    auth = key(db, "shop", "orders:produce")
    first = post(client, auth, "k").json()
    clock.advance(KEPT + 61)
    later = post(client, auth, "k")
    assert "idempotent-replayed" not in later.headers
    assert later.json() != first
    assert db.queue("orders").stats()["ready"] == 2


def test_a_malformed_key_is_refused(client: TestClient, db: sluice.Database) -> None:
    auth = key(db, "shop", "orders:produce")
    problem(post(client, auth, "x" * 256), 422, "InvalidIdempotencyKey")
    problem(post(client, auth, "two words"), 422, "InvalidIdempotencyKey")
    assert db.queue("orders").stats()["ready"] == 0


def test_one_key_run_by_many_at_once_is_done_once(db: sluice.Database) -> None:
    # The quick path claims nothing: the keys' rows are written by the work's commit,
    # so of requests racing with one key, one commits and the rest get its answer.
    db.create_queue("orders")
    keys = Idempotency(db)
    asked = fingerprint("POST", PATH, {"order": 1})
    start = threading.Barrier(6)

    def run() -> Any:
        def work(answered: Answered) -> str:
            with db.transaction() as tx:
                message_id = tx.enqueue("orders", {"order": 1})
                tx.add_effect(answered([{"id": message_id}]))
            return message_id

        start.wait()
        done = keys.once("shop", [("k", asked)], work)
        return done.answer["id"] if isinstance(done, Replay) else done

    with ThreadPoolExecutor(6) as pool:
        ids = list(pool.map(lambda _: run(), range(6)))
    assert len(set(ids)) == 1
    assert db.queue("orders").stats()["ready"] == 1


def test_a_batch_with_a_used_key_runs_nothing_and_says_so(db: sluice.Database) -> None:
    db.create_queue("orders")
    keys = Idempotency(db)

    def work(n: int) -> Callable[[Answered], list[str]]:
        def run(answered: Answered) -> list[str]:
            with db.transaction() as tx:
                ids = [tx.enqueue("orders", {"n": i}) for i in range(n)]
                tx.add_effect(answered([{"id": i} for i in ids]))
            return ids

        return run

    first = keys.once("shop", [("a", "fa")], work(1))
    assert isinstance(first, list)
    assert keys.once("shop", [("b", "fb"), ("a", "fa")], work(2)) is None
    assert db.queue("orders").stats()["ready"] == 1  # the batch stored nothing, nor "b"
    replay = keys.once("shop", [("a", "fa")], work(1))
    assert isinstance(replay, Replay)
    assert replay.answer == {"id": first[0]}
    assert isinstance(keys.once("shop", [("b", "fb"), ("c", "fc")], work(2)), list)
    assert db.queue("orders").stats()["ready"] == 3


def test_a_new_key_is_written_by_its_work_s_commit_without_a_claim(
    db: sluice.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The quick path (on PostgreSQL one statement with the enqueue) stores a new key;
    # only a key that is there already is looked up through a claim.
    db.create_queue("orders")
    claims: list[str] = []
    claim = db.backend.idempotency_claim

    def counted(owner: str, key: str, *args: Any, **kwargs: Any) -> bool:
        claims.append(key)
        return claim(owner, key, *args, **kwargs)

    monkeypatch.setattr(db.backend, "idempotency_claim", counted)
    keys = Idempotency(db)

    def work(answered: Answered) -> str:
        with db.transaction() as tx:
            message_id = tx.enqueue("orders", {"order": 1})
            tx.add_effect(answered([{"id": message_id}]))
        return message_id

    first = keys.once("shop", [("k", "f")], work)
    assert isinstance(first, str)
    assert claims == []
    again = keys.once("shop", [("k", "f")], work)
    assert isinstance(again, Replay)
    assert again.answer == {"id": first}
    assert claims == ["k"]
    assert db.queue("orders").stats()["ready"] == 1
