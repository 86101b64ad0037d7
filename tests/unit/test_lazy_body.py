"""A dequeued JSON body is decoded when first read, and a Message looks the same whichever
way it is read: by name, by position, unpacked, copied, pickled, compared, printed."""

from __future__ import annotations

import copy
import pickle
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice
from sluice.errors import InvalidBody
from sluice.message import Message, StoredJSON

BODY = {"order": 7, "items": [{"sku": "a", "qty": 2}], "note": "ü"}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sluice.Database]:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as database:
        database.create_queue("q")
        yield database


def _stored(message: Message) -> object:
    return tuple.__getitem__(message, 2)


def test_a_json_body_is_decoded_when_read_and_then_kept(db: sluice.Database) -> None:
    db.queue("q").put(BODY)
    m = db.queue("q").get()
    assert m is not None
    assert type(_stored(m)) is StoredJSON  # nothing decoded by the dequeue
    assert m.body == BODY
    assert m.body is m.body  # decoded once: a change to it stays, as to any body
    m.ack()


def test_by_position_the_body_is_the_decoded_one(db: sluice.Database) -> None:
    db.queue("q").put(BODY, priority=3)
    m = db.queue("q").get()
    assert m is not None
    assert m[2] == BODY
    assert m[1:3] == ("q", BODY)
    _id, _queue, body, *_ = m
    assert body == BODY
    assert tuple(m)[2] == BODY
    assert m._asdict()["body"] == BODY
    assert m._replace(priority=9).body == BODY
    assert copy.copy(m).body == BODY
    assert "'order': 7" in repr(m)
    m.ack()


def test_messages_compare_by_their_decoded_bodies(db: sluice.Database) -> None:
    db.queue("q").put_many([BODY, BODY, {"other": 1}])
    first, second, third = db.queue("q").browse()
    # Same fields but the id and the row: equal once those are made equal.
    assert first._replace(id="x", ref=0, enqueued=0.0, available=0.0) == second._replace(
        id="x", ref=0, enqueued=0.0, available=0.0
    )
    assert first._replace(id="x", ref=0) != third._replace(id="x", ref=0)
    decoded = first._replace(body=BODY)  # a body given decoded equals one decoded later
    assert decoded == first


def test_a_pickled_message_carries_its_decoded_body(db: sluice.Database) -> None:
    db.queue("q").put(BODY)
    (m,) = db.queue("q").browse()
    back = pickle.loads(pickle.dumps(m))
    assert back.body == BODY
    assert type(_stored(back)) is dict


def test_text_and_bytes_bodies_come_as_stored(db: sluice.Database) -> None:
    db.queue("q").put_many(["plain text", b"\x00\x01"])
    text, raw = db.queue("q").browse()
    assert (text.body, raw.body) == ("plain text", b"\x00\x01")


def test_a_body_written_outside_sluice_fails_when_read_not_when_taken(
    db: sluice.Database, tmp_path: Path
) -> None:
    db.queue("q").put({"ok": True})
    # What only a foreign writer can do: sluice checks JSON when it is enqueued.
    with sqlite3.connect(tmp_path / "q.db") as raw:
        raw.execute("UPDATE messages SET body = '{not json'")
    m = db.queue("q").get()
    assert m is not None  # taken, and can be settled without its body being read
    with pytest.raises(InvalidBody, match=f"message {m.id}'s stored body is not JSON"):
        _ = m.body
    assert "not JSON: '{not json'" in repr(m)
    m.reject("its body is not JSON")
    assert db.queue("q").stats()["ready"] == 0
