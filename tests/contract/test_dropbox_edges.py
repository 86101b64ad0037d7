"""sluice.dropbox at the edges issue 40 found, on every backend with real files, links,
FIFOs and sockets: no operation follows a link (also one swapped in while a dropbox
runs), each entry's outcome is its own, names sluice does not take go to error/ once,
names round-trip, and DropboxMQ setups that were refused work."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sluice
from sluice.dropbox import STATES, Dropbox, file_of, metadata, parse_name
from sluice.message import JSON, TEXT

from .test_dropbox import ID, drain, drop, incoming

NAME = "4.1140429201296000-1.T"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret")
    return tmp_path / "root"


@pytest.fixture
def dropbox(db: sluice.Database, root: Path) -> Dropbox:
    db.create_queue("orders")
    box = Dropbox(db, root, consumer_id="host-a", poll=0.05)
    box.ingest("orders")  # makes the directories
    return box


def outside_tree(root: Path) -> dict[str, bytes]:
    out = root.parent / "outside"
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait (up to 30 s, in steps of 10 ms) for a dropbox thread to get there."""
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"not within 30 s: {what}"
        time.sleep(0.01)


# --- no operation follows a link -------------------------------------------------------
def test_a_reason_file_planted_as_a_link_is_replaced_not_written_through(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    secret = root.parent / "outside" / "secret"
    (box / "error" / f"{NAME}.reason").symlink_to(secret)
    drop(box, NAME, b"\xff not UTF-8 text")
    assert dropbox.ingest("orders") == 0
    assert secret.read_text() == "secret"
    assert not (box / "error" / f"{NAME}.reason").is_symlink()
    assert "UTF-8" in (box / "error" / f"{NAME}.reason").read_text()
    assert sorted(os.listdir(box / "error")) == [NAME, f"{NAME}.reason"]  # no scratch file


def test_links_in_processed_and_expired_are_replaced(
    db: sluice.Database, dropbox: Dropbox, root: Path, clock: sluice.ManualClock
) -> None:
    box = incoming(root, "orders")
    secret = root.parent / "outside" / "secret"
    (box / "processed" / NAME).symlink_to(secret)
    expired = f"4.1140429201297000-1.T.{int(clock.now() * 1000) - 1}"
    (box / "expired" / expired).symlink_to(secret)
    drop(box, NAME, "stored")
    drop(box, expired, "late")
    assert dropbox.ingest("orders") == 1
    assert (box / "processed" / NAME).read_text() == "stored"
    assert (box / "expired" / expired).read_text() == "late"
    assert outside_tree(root) == {"secret": b"secret"}


@pytest.mark.parametrize("state", ["target", "processing", "processed", "error", "working"])
def test_a_state_directory_swapped_for_a_link_while_running_is_refused(
    db: sluice.Database, dropbox: Dropbox, root: Path, state: str
) -> None:
    """The issue's case: a running dropbox resolved its directories once, then wrote
    outside the root and took files from a directory outside it."""
    db.create_queue("invoices")
    box, out_box = incoming(root, "orders"), incoming(root, "invoices")
    outside = root.parent / "outside"
    (outside / NAME).write_text("a file outside the root")
    stop = threading.Event()
    runner = threading.Thread(target=dropbox.run, kwargs={
        "inbound": ["orders"], "outbound": ["invoices"], "stop": stop})  # fmt: skip
    runner.start()
    try:
        drop(box, "first.txt", "before the swap")
        first = db.queue("orders").get(wait=30)
        assert first is not None
        first.ack()
        eventually(lambda: all((out_box / st).is_dir() for st in STATES), "invoices/ made")
        # Swapped while it runs: the state's directory for a link to one outside the root.
        for b in (box, out_box):
            (b / state).rename(b / f"{state}.kept")
            (b / state).symlink_to(outside, target_is_directory=True)
        failures = dropbox.stats.failures
        real_target = box / ("target.kept" if state == "target" else "target")
        (real_target / "second.txt").write_text("after the swap")
        db.queue("invoices").put("an invoice")
        eventually(lambda: dropbox.stats.failures >= failures + 2, "the link refused")
        assert sorted(os.listdir(outside)) == sorted([NAME, "secret"])  # nothing in or out
        assert (outside / NAME).read_text() == "a file outside the root"
        assert db.queue("orders").browse() == []  # the file outside was not taken
        # Put back: the dropbox carries on by itself.
        for b in (box, out_box):
            (b / state).unlink()
            (b / f"{state}.kept").rename(b / state)
        second = db.queue("orders").get(wait=30)
        assert second is not None
        assert second.body == "after the swap"
        second.ack()
        eventually(lambda: db.queue("invoices").stats()["ready"] == 0, "the invoice written")
    finally:
        stop.set()
        runner.join()
    assert sorted(os.listdir(outside)) == sorted([NAME, "secret"])
    assert len(os.listdir(out_box / "target")) == 1


@pytest.mark.parametrize("side", ["inbound", "outbound"])
def test_a_state_directory_that_is_a_link_at_start_is_refused_by_run(
    db: sluice.Database, root: Path, side: str
) -> None:
    """Found in CI: an outbound queue's directories were made in its own thread, where
    a link met there ended the thread (and the queue was never written) instead of
    reaching the caller."""
    db.create_queue("invoices")
    (root / "invoices" / "incoming").mkdir(parents=True)
    (root / "invoices" / "incoming" / "error").symlink_to(root.parent / "outside")
    dropbox = Dropbox(db, root, consumer_id="c", poll=0.05)
    with pytest.raises(sluice.DropboxError, match="is a symbolic link"):
        dropbox.run(stop=threading.Event(), **{side: ["invoices"]})  # type: ignore[arg-type]
    assert outside_tree(root) == {"secret": b"secret"}


def test_the_root_s_topic_directory_swapped_for_a_link_is_refused(
    db: sluice.Database, root: Path
) -> None:
    db.create_topic("t")
    dropbox = Dropbox(db, root, consumer_id="c")
    assert dropbox.ingest_topic("t") == 0
    topics = root / "topic-root"
    topics.rename(root / "kept")
    topics.symlink_to(root.parent / "outside", target_is_directory=True)
    with pytest.raises(sluice.DropboxError, match="symbolic link"):
        dropbox.ingest_topic("t")
    assert outside_tree(root) == {"secret": b"secret"}
    assert sorted(os.listdir(root.parent / "outside")) == ["secret"]


# --- each entry's outcome is its own ---------------------------------------------------
@pytest.fixture
def odd_entries(root: Path) -> Iterator[Callable[[Path], list[str]]]:
    sockets: list[socket.socket] = []

    def make(target: Path) -> list[str]:
        (target / "a-directory").mkdir()
        (target / "a-directory" / "inside").write_text("x")
        os.mkfifo(target / "a-fifo")
        (target / "a-link").symlink_to(root.parent / "outside" / "secret")
        (target / "a-dir-link").symlink_to(root.parent / "outside", target_is_directory=True)
        s = socket.socket(socket.AF_UNIX)
        sockets.append(s)
        short = tempfile.mkdtemp(prefix="sock", dir="/tmp")  # a socket's path is short
        s.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), target / "a-socket")
        os.rmdir(short)
        return ["a-directory", "a-fifo", "a-link", "a-dir-link", "a-socket"]

    yield make
    for s in sockets:
        s.close()


def test_entries_that_are_not_files_go_to_error_and_the_rest_is_stored(
    db: sluice.Database, dropbox: Dropbox, root: Path, odd_entries: Callable[[Path], list[str]]
) -> None:
    box = incoming(root, "orders")
    odd = odd_entries(box / "target")
    for n in range(5):
        drop(box, f"4.114042920129{n}000-1.T", str(n))
    assert dropbox.ingest("orders") == 5
    assert sorted(m.body for m in drain(db, "orders")) == ["0", "1", "2", "3", "4"]
    assert os.listdir(box / "target") == os.listdir(box / "processing") == []
    errors = set(os.listdir(box / "error"))
    assert errors == set(odd) | {f"{n}.reason" for n in odd}
    reasons = {n: (box / "error" / f"{n}.reason").read_text() for n in odd}
    assert "a directory" in reasons["a-directory"]
    assert "a named pipe" in reasons["a-fifo"]
    assert "a socket" in reasons["a-socket"]
    assert "a symbolic link" in reasons["a-link"]
    assert "a symbolic link" in reasons["a-dir-link"]
    assert (box / "error" / "a-directory" / "inside").read_text() == "x"  # moved itself
    assert os.readlink(box / "error" / "a-link") == str(root.parent / "outside" / "secret")
    assert outside_tree(root) == {"secret": b"secret"}
    assert dropbox.stats.errors == len(odd)


def test_a_directory_in_the_way_in_error_does_not_stop_the_move(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    (box / "error" / NAME).mkdir()
    drop(box, NAME, b"\xff")  # not UTF-8: to error/, where a directory has its name
    assert dropbox.ingest("orders") == 0
    (moved,) = [n for n in os.listdir(box / "error") if n.startswith(NAME + ".")
                and not n.endswith(".reason")]  # fmt: skip
    assert (box / "error" / moved).read_bytes() == b"\xff"
    assert (box / "error" / f"{moved}.reason").exists()
    assert os.listdir(box / "processing") == []


def test_a_nul_in_a_property_goes_to_error_alone(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    bad = f"4.{ID}.T.....pS=a%00b"
    drop(box, bad, "nul")
    drop(box, NAME, "fine")
    assert dropbox.ingest("orders") == 1
    assert [m.body for m in drain(db, "orders")] == ["fine"]
    assert "NUL" in (box / "error" / f"{bad}.reason").read_text()


def test_a_batch_the_database_refuses_at_commit_is_stored_file_by_file(
    db: sluice.Database, dropbox: Dropbox, root: Path, monkeypatch: pytest.MonkeyPatch,
    backend_url: str,
) -> None:  # fmt: skip
    """Without sluice's own check, a NUL reaches the database: PostgreSQL refuses it at
    commit (the issue's case: the whole batch stayed in processing/ for good); the others
    store it. Either way every other file of the batch is stored."""
    monkeypatch.setattr(metadata, "_check_properties", lambda properties: None)
    box = incoming(root, "orders")
    bad = f"4.{ID}.T.....pS=a%00b"
    drop(box, bad, "nul")
    for n in range(3):
        drop(box, f"4.114042920129{n + 5}000-1.T", str(n))
    refused = backend_url.startswith("postgresql")
    assert dropbox.ingest("orders") == (3 if refused else 4)
    bodies = sorted(m.body for m in drain(db, "orders"))
    assert bodies == (["0", "1", "2"] if refused else ["0", "1", "2", "nul"])
    assert os.listdir(box / "processing") == []
    if refused:
        assert "refused" in (box / "error" / f"{bad}.reason").read_text()


def test_recovery_moves_every_entry_on(
    db: sluice.Database, dropbox: Dropbox, root: Path, odd_entries: Callable[[Path], list[str]]
) -> None:
    box = incoming(root, "orders")
    processing = box / "processing"
    scratch = root.parent / "scratch"
    scratch.mkdir()
    for name in odd_entries(scratch):
        (scratch / name).rename(processing / f"host-a~{name}")
    (processing / "host-a~bad.T").write_bytes(b"\xff")
    (processing / f"host-a~{NAME}").write_text("left by a crash")
    (processing / "host-b~other").write_text("another consumer's")
    assert dropbox.recover("orders") == 1
    assert [m.body for m in drain(db, "orders")] == ["left by a crash"]
    assert os.listdir(processing) == ["host-b~other"]
    assert "bad.T.reason" in os.listdir(box / "error")


# --- long names, names sluice does not take ---------------------------------------------
def test_a_file_whose_claim_name_is_too_long_is_recovered(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    long = NAME + "....." + "pS=" + "x" * (255 - len(NAME) - 8)
    assert len(long.encode()) == 255
    drop(box, long, "long")
    # As a consumer killed right after its claim leaves it (tests/contract/
    # test_dropbox_processes.py kills a real one).
    (box / "processing" / "host-a~").mkdir()
    os.rename(box / "target" / long, box / "processing" / "host-a~" / long)
    assert dropbox.recover("orders") == 1
    (m,) = drain(db, "orders")
    assert (m.body, m.properties["p"]) == ("long", "x" * (255 - len(NAME) - 8))
    assert os.listdir(box / "processing") == []
    assert os.listdir(box / "processed") == [long]
    drop(box, long, "again")
    assert dropbox.ingest("orders") == 1
    assert os.listdir(box / "processing") == []


def test_an_entry_in_the_way_of_a_claim_sends_it_aside(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    (box / "processing" / f"host-a~{NAME}").mkdir()  # not ours to move: another kind
    (box / "processing" / f"host-a~{NAME}" / "x").write_text("x")
    drop(box, NAME, "claimed aside")
    assert dropbox.ingest("orders") == 1
    assert [m.body for m in drain(db, "orders")] == ["claimed aside"]
    assert os.listdir(box / "processed") == [NAME]


def test_a_name_sluice_does_not_take_goes_to_error_once(
    db: sluice.Database, dropbox: Dropbox, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    box = incoming(root, "orders")
    caplog.set_level(logging.WARNING, "sluice.dropbox")
    drop(box, "back\\slash.txt", "b")
    os.close(os.open(os.fsencode(box / "target") + b"/latin1-\xe9.txt", os.O_CREAT | os.O_WRONLY))
    for _ in range(5):
        assert dropbox.ingest("orders") == 0
    assert os.listdir(box / "target") == []
    assert "backslash" in (box / "error" / "back\\slash.txt.reason").read_text()
    assert os.path.exists(os.fsencode(box / "error") + b"/latin1-\xe9.txt.reason")
    assert len([r for r in caplog.records if "error" in r.getMessage()]) == 2  # once each
    assert dropbox.stats.errors == 2


# --- names round-trip ------------------------------------------------------------------
def test_the_dropboxmq_id_is_kept_and_written_back(db: sluice.Database, root: Path) -> None:
    db.create_queue("in")
    dropbox = Dropbox(db, root, consumer_id="c")
    dropbox.ingest("in")
    drop(incoming(root, "in"), f"7.{ID}.T", "x")
    assert dropbox.ingest("in") == 1
    (m,) = drain(db, "in")
    assert m.properties == {"dropbox_id": ID}
    db.create_queue("out")
    db.queue("out").put(m.body, properties=m.properties, priority=m.priority)
    assert dropbox.emit("out") == 1
    assert os.listdir(incoming(root, "out") / "target") == [f"7.{ID}.T"]


def test_values_past_what_dropboxmq_holds_round_trip(db: sluice.Database, root: Path) -> None:
    db.create_queue("a")
    db.create_queue("b")
    dropbox = Dropbox(db, root, consumer_id="c")
    props = {"list": [1, {"k": None}], "none": None, "big": 2**70, "": "empty"}
    db.queue("a").put("high", priority=2**31, properties=props)
    db.queue("a").put("low", priority=-(2**40))
    assert dropbox.emit("a") == 2
    names = os.listdir(incoming(root, "a") / "target")
    assert sorted(parse_name(n).priority for n in names) == [-(2**31), 2**31 - 1]  # DropboxMQ's
    dropbox.ingest("b")
    for n in names:
        os.rename(incoming(root, "a") / "target" / n, incoming(root, "b") / "target" / n)
    assert dropbox.ingest("b") == 2
    high, low = drain(db, "b")
    assert (high.body, high.priority, low.body, low.priority) == ("high", 2**31, "low", -(2**40))
    assert {k: v for k, v in high.properties.items() if k != "dropbox_id"} == props


def test_too_long_metadata_drops_whole_properties_and_is_counted(
    db: sluice.Database, root: Path
) -> None:
    db.create_queue("out")
    dropbox = Dropbox(db, root, consumer_id="c")
    props = {"a": "x" * 100, "b": "y" * 120, "c": "z" * 10}
    db.queue("out").put("m", properties=props, correlation_id="corr")
    assert dropbox.emit("out") == 1
    (name,) = os.listdir(incoming(root, "out") / "target")
    meta = parse_name(name)
    assert meta.properties == {"a": "x" * 100, "c": "z" * 10}  # b, the longest, whole
    assert meta.correlation == "corr"
    assert dropbox.stats.trimmed == 1
    assert db.queue("out").stats()["ready"] == 0


# --- DropboxMQ setups ------------------------------------------------------------------
def test_a_type_field_is_a_label_unless_it_names_a_type_of_the_body_s_kind(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    db.create_type("Order", schema={"type": "object", "required": ["id"]})
    box = incoming(root, "orders")
    drop(box, f"4.{ID}.T....Order", "a text order")  # a JSON type, a text body: a label
    drop(box, "4.1140429201296000-1.B....Invoice", b"\x00")  # no such type: a label
    drop(box, "4.1140429201297000-1.M....Order", '{"id": 1}')  # typed, and checked
    drop(box, "4.1140429201298000-1.M....Order", '{"no": "id"}')  # violates its type
    assert dropbox.ingest("orders") == 3
    text, data, typed = drain(db, "orders")
    assert (text.type, text.properties["dropbox_type"]) == (None, "Order")
    assert (data.type, data.properties["dropbox_type"]) == (None, "Invoice")
    assert (typed.type, "dropbox_type" in typed.properties) == ("Order", False)
    refused = "4.1140429201298000-1.M....Order"
    assert sorted(os.listdir(box / "error")) == [refused, f"{refused}.reason"]
    db.create_queue("out")
    db.queue("out").put(text.body, properties=text.properties)
    assert dropbox.emit("out") == 1
    assert parse_name(os.listdir(incoming(root, "out") / "target")[0]).type == "Order"


def test_a_json_file_without_metadata_is_json(
    db: sluice.Database, dropbox: Dropbox, root: Path
) -> None:
    box = incoming(root, "orders")
    drop(box, "order.json", '{"id": 7}')
    drop(box, "broken.JSON", "{not json")
    drop(box, "order.txt", '{"id": 8}')
    assert dropbox.ingest("orders") == 2
    j, t = sorted(drain(db, "orders"), key=lambda m: m.content_type)
    assert (j.body, j.content_type, t.body, t.content_type) == (
        {"id": 7}, JSON, '{"id": 8}', TEXT)  # fmt: skip
    assert "JSON" in (box / "error" / "broken.JSON.reason").read_text()


def test_the_topic_distributor_runs_in_one_process(db: sluice.Database, root: Path) -> None:
    db.create_topic("news")
    db.subscribe("news", "reader")
    dropbox = Dropbox(db, root, consumer_id="c", poll=0.05)
    stop = threading.Event()
    runner = threading.Thread(target=dropbox.run, kwargs={
        "topics_in": ["news"], "topics_out": ["news"], "stop": stop})  # fmt: skip
    runner.start()
    try:
        topic = root / "topic-root" / "news"
        eventually((topic / ".incoming" / "working").exists, "the directories made")
        drop(topic / ".incoming", f"4.{ID}.T", "hello")
        target = topic / ".subscriptions" / "reader" / "target"
        eventually(lambda: target.exists() and bool(os.listdir(target)), "the copy written")
    finally:
        stop.set()
        runner.join()
    (name,) = os.listdir(target)
    assert (target / name).read_text() == "hello"
    assert name == f"4.{ID}.T"  # the id kept through the topic
    assert os.listdir(topic / ".incoming" / "target") == []


def test_a_queue_that_does_not_exist_is_refused_at_start(db: sluice.Database, root: Path) -> None:
    db.create_queue("orders")
    dropbox = Dropbox(db, root, consumer_id="c")
    for kwargs in ({"inbound": ["ordres"]}, {"outbound": ["ordres"]}, {"topics_in": ["ordres"]}):
        with pytest.raises(sluice.QueueNotFound, match="did you mean 'orders'"):
            dropbox.run(stop=threading.Event(), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(sluice.ConfigurationError, match="not a topic"):
        dropbox.run(topics_out=["orders"], stop=threading.Event())
    with pytest.raises(sluice.QueueNotFound):
        dropbox.ingest("ordres")
    assert not (root / "ordres").exists()


def test_the_cli_refuses_an_unknown_queue_with_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluice import cli

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with sluice.connect(url) as db:
        db.create_queue("orders")
    (tmp_path / "boxes").mkdir()
    code = cli.main(["dropbox", "--db", url, "--root", str(tmp_path / "boxes"), "--in", "ordres"])
    assert code == 2
    assert "did you mean 'orders'" in capsys.readouterr().err
    assert os.listdir(tmp_path / "boxes") == []


def test_file_of_is_stable(db: sluice.Database, dropbox: Dropbox) -> None:
    db.queue("orders").put("x", properties={"dropbox_id": ID, "z": 1, "a": 2})
    (m,) = db.queue("orders").browse()
    name, _ = file_of(m)
    assert name == f"0.{ID}.T.....aI=2&zI=1"
