"""Queues are created, listed, altered and dropped through the API."""

from __future__ import annotations

import pytest

import sluice


def test_create_list_and_get_handles(db: sluice.Database) -> None:
    db.create_queue("b", max_attempts=3, error_queue="b.errors", durability="transient")
    db.create_queue("a")
    specs = {s.name: s for s in db.queues()}
    assert sorted(specs) == ["a", "b", "b.errors"]
    assert specs["b"].max_attempts == 3
    assert specs["b"].error_queue == "b.errors"
    assert specs["b"].durability == "transient"
    assert specs["a"].max_size == 1024 * 1024
    assert db.queue("a").name == "a"


def test_create_existing_queue(db: sluice.Database) -> None:
    db.create_queue("a")
    with pytest.raises(sluice.QueueExists, match="'a' exists already"):
        db.create_queue("a")
    assert db.create_queue("a", exist_ok=True).name == "a"


def test_alter_changes_only_what_is_given(db: sluice.Database) -> None:
    db.create_queue("a", max_attempts=3)
    spec = db.alter_queue("a", error_queue="a.dlq", max_size=10)
    assert (spec.max_attempts, spec.error_queue, spec.max_size) == (3, "a.dlq", 10)
    assert db.queue("a").spec == spec
    assert "a.dlq" in {s.name for s in db.queues()}
    with pytest.raises(sluice.PayloadTooLarge):
        db.queue("a").put("x" * 11)
    assert db.alter_queue("a", max_attempts=None).max_attempts is None


def test_drop_removes_queue_and_messages(db: sluice.Database) -> None:
    q = db.create_queue("a")
    q.put("x")
    db.drop_queue("a")
    assert db.queues() == []
    with pytest.raises(sluice.QueueNotFound):
        db.queue("a")
    q2 = db.create_queue("a")
    assert q2.browse() == []
    assert q2.stats()["ready"] == 0


def test_drop_refuses_an_error_queue_in_use(db: sluice.Database) -> None:
    db.create_queue("a", error_queue="a.errors")
    with pytest.raises(sluice.QueueInUse, match="error queue of 'a'"):
        db.drop_queue("a.errors")
    db.alter_queue("a", error_queue=None)
    db.drop_queue("a.errors")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": "3"},
        {"durability": "sometimes"},
        {"max_size": 0},
        {"error_queue": "a"},
        {"error_queue": "bad name"},
    ],
)
def test_invalid_queue_settings_are_refused(db: sluice.Database, kwargs: dict[str, object]) -> None:
    with pytest.raises(sluice.ConfigurationError):
        db.create_queue("a", **kwargs)  # type: ignore[arg-type]
    assert [s.name for s in db.queues()] == []


@pytest.mark.parametrize("name", ["", "has space", "-dash", "x" * 201, "semi;colon", "a/b"])
def test_invalid_queue_names_are_refused(db: sluice.Database, name: str) -> None:
    with pytest.raises(sluice.ConfigurationError, match="invalid queue name"):
        db.create_queue(name)


def test_drop_refuses_a_queue_with_messages_in_open_transactions(db: sluice.Database) -> None:
    q = db.create_queue("a")
    q.put("x")
    tx = db.begin()
    tx.dequeue("a")
    with pytest.raises(sluice.QueueInUse, match="held or enqueued by open transactions"):
        db.drop_queue("a")
    tx.abort()
    tx2 = db.begin()
    tx2.enqueue("a", "y")
    tx2.browse("a")  # written as pending
    with pytest.raises(sluice.QueueInUse):
        db.drop_queue("a")
    tx2.abort()
    db.drop_queue("a")
    assert db.queues() == []
