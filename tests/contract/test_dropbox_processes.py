"""sluice.dropbox across processes on a database shared through a file or a server:
concurrent consumer processes, kill -9 at each step then a restart, a full disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice
from sluice.dropbox import Dropbox
from tests.conftest import url_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture
def shared(url: str) -> Iterator[sluice.Database]:
    db = sluice.connect(url)
    db.create_queue("orders")
    yield db
    db.close()


def child(url: str, root: Path, consumer: str, *crash: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.contract.dropbox_child", url, str(root), "orders",
         consumer, *crash],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def produce(root: Path, count: int, pad: str = "") -> None:
    """count files by a shell producer: written in working/, moved into target/; ``pad``
    is added to each name (as a property, so that it still parses)."""
    script = (
        'cd "$1"; i=0; while [ $i -lt "$2" ]; do n="4.$((1140429201295000 + i))-1.T$3"; '
        'echo "$i" > "working/$n"; mv "working/$n" "target/$n"; i=$((i + 1)); done'
    )
    subprocess.run(["sh", "-c", script, "sh", root / "orders" / "incoming", str(count), pad],
                   check=True)  # fmt: skip


def bodies(db: sluice.Database) -> list[int]:
    with db.transaction() as tx:
        return sorted(int(m.body) for m in tx.dequeue("orders", limit=10_000))


def test_consumer_processes_store_each_file_once(
    shared: sluice.Database, url: str, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    Dropbox(shared, root).ingest("orders")
    produce(root, 300)
    procs = [child(url, root, f"proc-{n}") for n in range(3)]
    counts = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(counts) == 300
    assert bodies(shared) == list(range(300))
    assert len(os.listdir(root / "orders" / "incoming" / "processed")) == 300


@pytest.mark.parametrize("step", ["claimed", "committed"])
def test_kill_9_then_restart_stores_exactly_once(
    shared: sluice.Database, url: str, tmp_path: Path, step: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    Dropbox(shared, root).ingest("orders")
    produce(root, 100)
    killed = child(url, root, "host-a", step)
    killed.communicate(timeout=60)
    assert killed.returncode == -9
    box = root / "orders" / "incoming"
    assert [n for n in os.listdir(box / "processing") if n.startswith("host-a~")]
    restarted = child(url, root, "host-a")
    restarted.communicate(timeout=60)
    assert restarted.returncode == 0
    assert bodies(shared) == list(range(100))
    assert os.listdir(box / "processing") == []
    assert os.listdir(box / "target") == []


@pytest.mark.parametrize("step", ["claimed", "committed"])
def test_kill_9_with_names_too_long_for_a_claim_name(
    shared: sluice.Database, url: str, tmp_path: Path, step: str
) -> None:
    """``host-a~<name>`` is over 255 bytes: claimed into processing/host-a~/ instead (not
    under the bare name, which recovery could not tell from another consumer's)."""
    root = tmp_path / "root"
    root.mkdir()
    Dropbox(shared, root).ingest("orders")
    pad = "....." + "padS=" + "x" * (255 - len("4.1140429201295000-1.T.....padS="))
    produce(root, 20, pad)
    box = root / "orders" / "incoming"
    assert all(len(n) == 255 for n in os.listdir(box / "target"))
    killed = child(url, root, "host-a", step)
    killed.communicate(timeout=60)
    assert killed.returncode == -9
    assert os.listdir(box / "processing") == ["host-a~"]
    # One claimed; or a whole batch claimed and committed, none moved on yet.
    assert len(os.listdir(box / "processing" / "host-a~")) == (1 if step == "claimed" else 20)
    restarted = child(url, root, "host-a")
    restarted.communicate(timeout=60)
    assert restarted.returncode == 0
    assert bodies(shared) == list(range(20))
    assert os.listdir(box / "processing") == []
    assert len(os.listdir(box / "processed")) == 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here (needs root): {done.stderr!r}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_acknowledges_nothing(shared: sluice.Database, small_disk: Path) -> None:
    q = shared.queue("orders")
    q.put_many([b"x" * 10_000 for _ in range(10)])
    dropbox = Dropbox(shared, small_disk, consumer_id="c")
    with pytest.raises(sluice.DropboxError, match="No space left"):
        dropbox.emit("orders")
    box = small_disk / "orders" / "incoming"
    written = len(os.listdir(box / "target"))
    assert os.listdir(box / "working") == []  # no partial file left
    assert q.stats()["ready"] == 10 - written  # only whole batches acknowledged
    for name in os.listdir(box / "target"):
        (box / "target" / name).unlink()
    shutil.rmtree(box / "processed")  # room enough now for a small batch at a time
    emitted = dropbox.emit("orders", limit=4)
    assert emitted == 4
