"""sluice.dropbox on every backend: real files in a temporary root, shell producers and
consumers (mv, cp), names from DropboxMQ's documentation, malformed and hostile names."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

import sluice
from sluice.dropbox import Dropbox, file_of, parse_name

from .conftest import T0

ID = "1140429201295000-1234567890"


def drop(box: Path, name: str, data: str | bytes) -> None:
    """A producer as DropboxMQ's docs have it: write in working/, mv into target/."""
    (box / "working" / name).write_bytes(data.encode() if isinstance(data, str) else data)
    subprocess.run(["sh", "-c", 'mv "$1" "$2"', "sh", box / "working" / name, box / "target"],
                   check=True)  # fmt: skip


def incoming(root: Path, queue: str) -> Path:
    return root / queue / "incoming"


def drain(db: sluice.Database, queue: str) -> list[sluice.Message]:
    with db.transaction() as tx:
        return tx.dequeue(queue, limit=1000)


@pytest.fixture
def dropbox(db: sluice.Database, tmp_path: Path) -> Dropbox:
    db.create_queue("orders")
    return Dropbox(db, tmp_path, consumer_id="host-a")


def test_files_in_are_stored_in_dropboxmq_order(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path
) -> None:
    dropbox.ingest("orders")  # makes the directories
    box = incoming(tmp_path, "orders")
    assert sorted(p.name for p in box.iterdir()) == sorted(
        ["working", "target", "processing", "processed", "expired", "error"]
    )
    drop(box, "4.1140429201296000-1.T", "second")
    drop(box, f"4.{ID}.T", "first")
    drop(box, "9.1140429201299000-2.T", "urgent")
    drop(box, "order.txt", "no metadata")  # the whole name is the id: priority 4, time 0
    assert dropbox.ingest("orders") == 4
    assert [m.body for m in drain(db, "orders")] == ["urgent", "no metadata", "first", "second"]
    assert sorted(os.listdir(box / "processed")) == sorted(
        ["4.1140429201296000-1.T", f"4.{ID}.T", "9.1140429201299000-2.T", "order.txt"]
    )
    assert os.listdir(box / "target") == os.listdir(box / "processing") == []


def test_metadata_of_the_name(db: sluice.Database, dropbox: Dropbox, tmp_path: Path) -> None:
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    drop(box, f"7.{ID}.M..corr1283.QReplies..colorS=dark+red&qtyI=3&rushB=true", '{"id": 1}')
    drop(box, "4.1140429201296000-1.B", b"\x00\xff")
    assert dropbox.ingest("orders") == 2
    first, second = drain(db, "orders")
    assert (first.body, first.priority, first.correlation_id, first.reply_to) == (
        {"id": 1}, 7, "corr1283", "Replies")  # fmt: skip
    assert first.properties == {"color": "dark red", "qty": 3, "rush": True, "dropbox_id": ID}
    assert (second.body, second.content_type) == (b"\x00\xff", "application/octet-stream")


def test_a_typed_queue_refuses_a_file_into_error(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path
) -> None:
    db.create_type("order", schema={"type": "object", "required": ["id"]})
    db.create_queue("typed", types=["order"])
    box = incoming(tmp_path, "typed")
    dropbox.ingest("typed")
    drop(box, f"4.{ID}.M....order", '{"no": "id"}')  # violates its type
    drop(box, "4.1140429201296000-1.M....order", '{"id": 5}')
    drop(box, "4.1140429201297000-1.M", "{not json")  # not what its class says
    drop(box, "4.1140429201298000-1.T", b"\xff\xfe")  # not UTF-8 text
    drop(box, "4.1140429201299000-1.O", b"\xac\xed")  # a Java object
    drop(box, "4.1140429201299500-1.T.....nI=12x", "x")  # a property its letter refuses
    assert dropbox.ingest("typed") == 1
    assert [m.body for m in drain(db, "typed")] == [{"id": 5}]
    errors = sorted(os.listdir(box / "error"))
    assert len(errors) == 10
    reason = (box / "error" / f"4.{ID}.M....order.reason").read_text()
    assert "order" in reason
    assert "JSON" in (box / "error" / "4.1140429201297000-1.M.reason").read_text()
    assert "UTF-8" in (box / "error" / "4.1140429201298000-1.T.reason").read_text()


def test_too_large_goes_to_error(db: sluice.Database, dropbox: Dropbox, tmp_path: Path) -> None:
    db.create_queue("small", max_size=10)
    box = incoming(tmp_path, "small")
    dropbox.ingest("small")
    drop(box, "big.txt", "x" * 11)
    drop(box, "fits.txt", "x" * 10)
    assert dropbox.ingest("small") == 1
    assert "limit of 10 bytes" in (box / "error" / "big.txt.reason").read_text()


def test_expired_files_go_to_expired(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path, clock: sluice.ManualClock
) -> None:
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    now_ms = int(T0 * 1000)
    drop(box, f"4.{ID}.T.{now_ms}", "too late")
    drop(box, f"4.1140429201296000-1.T.{now_ms + 60_000}", "in time")
    assert dropbox.ingest("orders") == 1
    assert os.listdir(box / "expired") == [f"4.{ID}.T.{now_ms}"]
    (m,) = drain(db, "orders")
    assert m.body == "in time"
    assert m.expires == pytest.approx(T0 + 60)


def test_keep_processed_false_removes_the_file(db: sluice.Database, tmp_path: Path) -> None:
    db.create_queue("orders")
    dropbox = Dropbox(db, tmp_path, consumer_id="c", keep_processed=False)
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    drop(box, "a", "1")
    assert dropbox.ingest("orders") == 1
    assert os.listdir(box / "processed") == []


def test_limit(db: sluice.Database, dropbox: Dropbox, tmp_path: Path) -> None:
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    for n in range(5):
        drop(box, f"4.114042920129{n}000-1.T", str(n))
    assert dropbox.ingest("orders", limit=2) == 2
    assert [m.body for m in drain(db, "orders")] == ["0", "1"]
    assert dropbox.ingest("orders") == 3


def test_recover_stores_a_claimed_file_once(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path
) -> None:
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    # As a consumer killed right after its claim leaves it, and one killed after its
    # commit (its record answered) but before the move.
    drop(box, "left.txt", "left")
    os.rename(box / "target" / "left.txt", box / "processing" / "host-a~left.txt")
    drop(box, "other.txt", "another consumer's")
    os.rename(box / "target" / "other.txt", box / "processing" / "host-b~other.txt")
    assert dropbox.recover("orders") == 1
    assert dropbox.recover("orders") == 0
    assert [m.body for m in drain(db, "orders")] == ["left"]
    assert os.listdir(box / "processing") == ["host-b~other.txt"]
    assert os.listdir(box / "processed") == ["left.txt"]


def test_a_name_reused_later_is_stored_again(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path
) -> None:
    box = incoming(tmp_path, "orders")
    dropbox.ingest("orders")
    drop(box, "daily.csv", "monday")
    assert dropbox.ingest("orders") == 1
    drop(box, "daily.csv", "tuesday, a new file of the same name")
    assert dropbox.ingest("orders") == 1
    assert len(drain(db, "orders")) == 2


def test_messages_out_for_mv_consumers(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path, clock: sluice.ManualClock
) -> None:
    q = db.queue("orders")
    q.put({"id": 1}, priority=7, properties={"region": "eu.west", "n": 2}, correlation_id="c1",
          reply_to="replies", ttl=60)  # fmt: skip
    q.put("text")
    q.put(b"\x00bytes")
    assert dropbox.emit("orders") == 3
    assert q.get() is None  # acknowledged once renamed
    box = incoming(tmp_path, "orders")
    names = sorted(os.listdir(box / "target"), key=lambda n: -parse_name(n).priority)
    assert os.listdir(box / "working") == []
    meta = parse_name(names[0])
    assert (meta.priority, meta.kind, meta.correlation, meta.reply_to) == (7, "M", "c1", "Qreplies")
    assert meta.properties == {"region": "eu.west", "n": 2}
    assert meta.expiration == int((T0 + 60) * 1000)
    # A consumer claims with mv, as DropboxMQ's shell clients do.
    out = tmp_path / "consumer"
    out.mkdir()
    subprocess.run(["sh", "-c", 'mv "$1"/* "$2"', "sh", box / "target", out], check=True)
    contents = {parse_name(n).kind: (out / n).read_bytes() for n in os.listdir(out)}
    assert contents == {"M": b'{"id":1}', "T": b"text", "B": b"\x00bytes"}


def test_out_and_back_in_round_trips(db: sluice.Database, tmp_path: Path) -> None:
    db.create_queue("a")
    db.create_queue("b")
    dropbox = Dropbox(db, tmp_path, consumer_id="c")
    db.queue("a").put({"k": [1, 2]}, priority=3, properties={"x": "y"}, correlation_id="z")
    assert dropbox.emit("a") == 1
    dropbox.ingest("b")
    subprocess.run(["sh", "-c", 'cp "$1"/* "$2"', "sh", incoming(tmp_path, "a") / "target",
                    incoming(tmp_path, "b") / "target"], check=True)  # fmt: skip
    assert dropbox.ingest("b") == 1
    (m,) = drain(db, "b")
    (name,) = os.listdir(incoming(tmp_path, "a") / "target")
    assert (m.body, m.priority, m.correlation_id) == ({"k": [1, 2]}, 3, "z")
    assert m.properties == {"x": "y", "dropbox_id": parse_name(name).id}


def test_expired_files_in_an_outbound_target(
    db: sluice.Database, dropbox: Dropbox, tmp_path: Path, clock: sluice.ManualClock
) -> None:
    db.queue("orders").put("short-lived", ttl=10)
    assert dropbox.emit("orders") == 1
    clock.advance(11)
    assert dropbox.emit("orders") == 0
    box = incoming(tmp_path, "orders")
    assert os.listdir(box / "target") == []
    assert len(os.listdir(box / "expired")) == 1


def test_the_file_name_of_a_message_is_deterministic(db: sluice.Database, dropbox: Dropbox) -> None:
    db.queue("orders").put("x")
    with db.transaction() as tx:
        (first,) = tx.dequeue("orders")
        tx.release(first)
    (again,) = drain(db, "orders")
    assert file_of(first) == file_of(again)


def test_topics_in_and_out(db: sluice.Database, tmp_path: Path) -> None:
    db.create_topic("a.b.c")
    db.subscribe("a.b.c", "billing")
    db.subscribe("a.b.c", "big.orders", where="body.total >= 1000")
    dropbox = Dropbox(db, tmp_path, consumer_id="c")
    topic = tmp_path / "topic-root" / "a" / "b" / "c"
    assert dropbox.ingest_topic("a.b.c") == 0
    drop(topic / ".incoming", f"4.{ID}.M", '{"total": 10}')
    drop(topic / ".incoming", "4.1140429201296000-1.M", '{"total": 5000}')
    assert dropbox.ingest_topic("a.b.c") == 2
    assert dropbox.emit_topic("a.b.c") == 3
    subs = topic / ".subscriptions"
    assert sorted(os.listdir(subs)) == ["big%2Eorders", "billing"]
    assert len(os.listdir(subs / "billing" / "target")) == 2
    (big,) = os.listdir(subs / "big%2Eorders" / "target")
    assert (subs / "big%2Eorders" / "target" / big).read_bytes() == b'{"total":5000}'


@pytest.mark.parametrize("name", ["..", ".", "a/b", "/etc", "x\0y", "q" * 256, "topic-root", ""])
def test_hostile_queue_names_are_refused(dropbox: Dropbox, name: str) -> None:
    with pytest.raises(sluice.DropboxError):
        dropbox.ingest(name)


@pytest.mark.parametrize("topic", ["a..b", "../x", "a./b", ".hidden", "a.b/c"])
def test_hostile_topic_names_are_refused(dropbox: Dropbox, topic: str) -> None:
    with pytest.raises(sluice.DropboxError):
        dropbox.ingest_topic(topic)


def test_subscription_names_are_encoded(db: sluice.Database, tmp_path: Path) -> None:
    db.create_topic("t")
    db.subscribe("t", "up..stairs:1")  # a queue name may hold dots, which would be '..'
    db.queue("t").put("x")
    assert Dropbox(db, tmp_path).emit_topic("t") == 1
    subs = tmp_path / "topic-root" / "t" / ".subscriptions"
    assert os.listdir(subs) == ["up%2E%2Estairs%3A1"]


def test_links_out_of_the_root(db: sluice.Database, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("secret")
    dropbox = Dropbox(db, root, consumer_id="c")
    db.create_queue("orders")
    db.create_queue("linked")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(sluice.DropboxError, match="symbolic link"):
        dropbox.ingest("linked")
    box = incoming(root, "orders")
    dropbox.ingest("orders")
    (box / "target" / "4.1140429201296000-1.T").symlink_to(outside / "secret")
    assert dropbox.ingest("orders") == 0
    assert db.queue("orders").get() is None
    assert "symbolic link" in (box / "error" / "4.1140429201296000-1.T.reason").read_text()
    assert (outside / "secret").read_text() == "secret"


def test_hostile_file_names(db: sluice.Database, tmp_path: Path) -> None:
    db.create_queue("orders")
    root = tmp_path / "root"
    root.mkdir()
    dropbox = Dropbox(db, root)
    box = incoming(root, "orders")
    dropbox.ingest("orders")
    hostile = ["4.%2E%2E%2F%2E%2E%2Fx-1.T", "..%2F..%2Fetc", "-rf", "a b\nc", "é.1-1.T", "~~"]
    for name in hostile:
        drop(box, name, name)
    n = "9.1140429201296000-1.T.....pathS=..%2F..%2Fetc%2Fpasswd"
    drop(box, n, "p")
    assert dropbox.ingest("orders") == len(hostile) + 1
    assert sorted(m.body for m in drain(db, "orders")) == sorted([*hostile, "p"])
    assert os.listdir(root) == ["orders"]
    assert sorted(os.listdir(box / "processed")) == sorted([*hostile, n])


def test_threads_store_each_file_once(db: sluice.Database, tmp_path: Path) -> None:
    db.create_queue("orders")
    boxes = [Dropbox(db, tmp_path, consumer_id=f"t{n}") for n in range(4)]
    box = incoming(tmp_path, "orders")
    boxes[0].ingest("orders")
    for n in range(200):
        (box / "target" / f"4.{1140429201295000 + n}-1.T").write_text(str(n))
    counts: list[int] = []
    threads = [threading.Thread(target=lambda b=b: counts.append(b.ingest("orders")))
               for b in boxes]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 200
    assert sorted(int(m.body) for m in drain(db, "orders")) == list(range(200))


def test_run_watches_and_moves_both_ways(db: sluice.Database, tmp_path: Path) -> None:
    db.create_queue("in")
    db.create_queue("out")
    dropbox = Dropbox(db, tmp_path, consumer_id="c", poll=0.05)
    stop = threading.Event()
    runner = threading.Thread(target=dropbox.run, kwargs={"inbound": ["in"], "outbound": ["out"],
                                                          "stop": stop})  # fmt: skip
    runner.start()
    try:
        box = incoming(tmp_path, "in")
        while not (box / "working").exists():
            stop.wait(0.01)
        drop(box, "hello.txt", "hello")
        m = db.queue("in").get(wait=10)
        assert m is not None
        assert m.body == "hello"
        m.ack()
        db.queue("out").put("bye")
        target = incoming(tmp_path, "out") / "target"
        while not (target.exists() and os.listdir(target)):
            stop.wait(0.01)
        (name,) = os.listdir(target)
        assert (target / name).read_text() == "bye"
    finally:
        stop.set()
        runner.join()


def test_run_refuses_a_queue_both_ways(dropbox: Dropbox) -> None:
    with pytest.raises(sluice.ConfigurationError):
        dropbox.run(inbound=["orders"], outbound=["orders"], stop=threading.Event())
