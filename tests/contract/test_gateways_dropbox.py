"""Dropbox directories as gateway queues (sluice.gateways.dropbox over sluice.dropbox),
on every backend: an incoming dropbox gateway stores what a program moved into its
``target/``, an outgoing one writes its queue's messages there, both run by
``db.gateways`` as ``sluice run`` runs them."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

import sluice
from sluice.errors import ConfigurationError

FIRST = "5.1140429201295000-0123456789.T"  # DropboxMQ's names: priority 5, an id, text
SECOND = "0.1140429201296000-0123456789.T"


def test_files_in_and_messages_out(db: sluice.Database, tmp_path: Path) -> None:
    root = tmp_path / "boxes"
    root.mkdir()
    db.gateways.define("orders", direction="in", transport="dropbox", root=str(root))
    db.gateways.define("invoices", direction="out", transport="dropbox", root=str(root))
    db.gateways.run_until_idle()  # makes the directories
    incoming = root / "orders" / "incoming"
    (incoming / "working" / FIRST).write_text("hello")
    subprocess.run(["mv", str(incoming / "working" / FIRST), str(incoming / "target")],
                   check=True)  # fmt: skip
    db.queue("invoices").put("total 12")

    assert db.gateways.run_until_idle() == 2

    (m,) = db.queue("orders").browse()
    assert (m.body, m.priority) == ("hello", 5)
    assert (incoming / "processed").iterdir().__next__().name.endswith(FIRST)
    (written,) = (root / "invoices" / "incoming" / "target").iterdir()
    assert written.read_bytes() == b"total 12"
    assert db.queue("invoices").stats()["ready"] == 0


def test_an_incoming_dropbox_runs_until_stopped(db: sluice.Database, tmp_path: Path) -> None:
    root = tmp_path / "boxes"
    root.mkdir()
    db.gateways.define("orders", direction="in", transport="dropbox", root=str(root))
    db.gateways.run_until_idle()
    target = root / "orders" / "incoming" / "target"
    db.gateways.start(poll=0.05)
    try:
        stored = threading.Event()

        def watch() -> None:
            m = db.queue("orders").get(wait=30)
            if m is not None:
                m.ack()
                stored.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        working = root / "orders" / "incoming" / "working" / SECOND
        working.write_text("x")
        working.rename(target / SECOND)
        watcher.join(30)
        assert stored.is_set()
    finally:
        db.gateways.stop()


def test_a_dropbox_gateway_needs_its_root(db: sluice.Database) -> None:
    with pytest.raises(ConfigurationError, match="needs its root"):
        db.gateways.define("orders", direction="in", transport="dropbox")
    with pytest.raises(ConfigurationError, match="keep_processed is true or false"):
        db.gateways.define("orders", direction="in", transport="dropbox", root="/tmp/x",
                           keep_processed="yes")  # fmt: skip
