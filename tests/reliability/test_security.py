"""Security, checked across the whole surface rather than case by case (issue 25):

1. keys and grants on every route of the server, the routes found by enumerating the
   app (tests/reliability/security_routes.py), and grants as ``Principal`` matches them;
2. selectors and expressions that try to reach outside the message, on every backend;
3. paths that try to leave a dropbox's root: names, links, metadata, consumer ids;
4. bodies too large or too slow, sent to a real uvicorn server over raw sockets;
5. SQL, quotes, NUL and odd Unicode in every name and value, on every backend.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.dropbox import STATES, Dropbox, file_of
from sluice.errors import StorageError
from sluice.server.grants import ACTIONS, Grant, Keys, Principal

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from sluice.server.console.access import COOKIE
from sluice.server.headers import with_header_timeout
from tests.live_server import serve

from .security_routes import (
    ADMIN,
    ALL,
    ANY_KEY,
    PUBLIC,
    PUBLIC_MOUNTS,
    QUEUE,
    ROUTES,
    SOME_BROWSE,
    AnyGrant,
    Call,
    Grants,
    Needs,
    Owner,
    World,
    endpoints,
)

HOSTILE = "'; DROP TABLE messages; --"


def refused(action: Callable[[str], object], text: str) -> str | None:
    """None if ``action(text)`` was refused with a SluiceError raised before the database
    (a StorageError means the text reached it), else what happened instead."""
    try:
        action(text)
    except StorageError as exc:
        return f"reached the database: {exc!r}"
    except sluice.SluiceError:
        return None
    except Exception as exc:
        return f"not a SluiceError: {exc!r}"
    return "accepted"


# --- 1. keys and grants on every route ---------------------------------------------------


@pytest.fixture
def world(db: sluice.Database) -> Iterator[World]:
    with TestClient(create_app(db, sample_every=3600.0), follow_redirects=False) as http:
        yield World(db, http)


def _generic(path: str) -> str:
    """A path template's parameters filled in, for a route the table does not know."""
    for name in ("{name}", "{topic}", "{token}", "{ref}", "{message:path}", "{job:path}",
                 "{task_type}"):  # fmt: skip
        path = path.replace(name, QUEUE)
    return path


def test_every_route_is_in_the_table_or_public_for_a_reason() -> None:
    with sluice.connect("memory://") as db, TestClient(create_app(db)) as http:
        found, mounts = endpoints(http.app)  # type: ignore[arg-type]
    unchecked = found - ROUTES.keys() - PUBLIC.keys()
    assert not unchecked, f"routes no check knows: add them to security_routes.ROUTES: {unchecked}"
    assert not (ROUTES.keys() | PUBLIC.keys()) - found, "the table names routes the app lacks"
    assert mounts == PUBLIC_MOUNTS.keys()


def _console(path: str) -> bool:
    return path == "/" or path.startswith("/console/")


def test_no_key_or_a_false_one_is_refused_on_every_route(world: World) -> None:
    found, _ = endpoints(world.http.app)  # type: ignore[arg-type]
    admin = world.admin["Authorization"].removeprefix("Bearer ")
    revoked = Keys(world.db).add("revoked", [Grant.parse(f"{QUEUE}:{ALL}")], admin=True)
    Keys(world.db).revoke("revoked")
    false_keys = [
        {},
        {"Authorization": "Bearer sk_not-a-key"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Bearer {revoked}"},
        {"Authorization": f"Bearer {admin[:-1]}"},
        {"Authorization": f"Basic {base64.b64encode(f'x:{admin}'.encode()).decode()}"},
        {"Authorization": f"Token {admin}"},
        {"Authorization": admin},
        {"X-API-Key": admin},
    ]
    # Every route's request made first (some lease or begin): then nothing may change.
    calls = [
        (method, path, ROUTES[method, path].call(world, world.admin)
         if (method, path) in ROUTES else Call(_generic(path)))
        for method, path in sorted(found - PUBLIC.keys())
    ]  # fmt: skip
    before = world.snapshot()
    wrong: list[str] = []
    for method, path, call in calls:
        # The API never takes the console's cookie: a page elsewhere could send it. The
        # console's actions come from its own pages (else 403 before the key is asked).
        cookie = [] if _console(path) else [{"Cookie": f"{COOKIE}={admin}"}]
        page = {"Sec-Fetch-Site": "same-origin"} if _console(path) else {}
        for headers in false_keys + cookie:
            answer = world.send(method, call, headers | page)
            if answer.status_code != 401:
                wrong.append(f"{method} {call.path} with {headers}: {answer.status_code}")
            elif not _console(path) and answer.json().get("error") != "Unauthorized":
                wrong.append(f"{method} {call.path}: {answer.text}")
        # Nor does another spelling of the path reach the route.
        for variant in (call.path + "/", "/" + call.path, call.path.upper()):
            answer = world.send(method, Call(variant, call.json, call.params, call.form), {})
            if answer.status_code < 300 or answer.status_code >= 500:
                wrong.append(f"{method} {variant} without a key: {answer.status_code}")
    assert not wrong, "\n".join(wrong)
    assert world.snapshot() == before


def _near(queue: str) -> list[str]:
    """Patterns of every action that come close to ``queue`` and must not match it."""
    return [f"{p}:{ALL}" for p in (f"{queue}x", f"x{queue}", queue[:-1], f"{queue}*x",
                                   f"{queue}?", "elsewhere*")]  # fmt: skip


def _lacking(w: World, needs: Needs) -> Iterator[tuple[str, dict[str, str], dict[str, str], int]]:
    """(what it lacks, the key a request is made for, the key that sends it, the answer)."""
    if isinstance(needs, Grants):
        for grant in needs.grants:
            queue, _, action = grant.rpartition(":")
            others = ",".join(sorted(ACTIONS - {action}))
            rest = [g for g in needs.grants if g != grant]
            key = w.key(*rest, f"{queue}:{others}", *_near(queue))
            yield grant, key, key, 403
    elif isinstance(needs, AnyGrant):
        key = w.key(*_near(needs.queue))
        yield f"any grant on {needs.queue}", key, key, 403
    elif isinstance(needs, Owner):
        yield "its transaction", w.key(*needs.grants), w.admin, 404  # an admin's too
    elif needs == ADMIN:
        key = w.key(f"*:{ALL}")
        yield "admin", key, key, 403
    elif needs == SOME_BROWSE:
        key = w.key("*:consume,manage,produce")
        yield "browse", key, key, 403


def _allowed(w: World, needs: Needs) -> Iterator[dict[str, str]]:
    if isinstance(needs, Grants | Owner):
        yield w.key(*needs.grants)
    elif isinstance(needs, AnyGrant):
        yield from (w.key(f"{needs.queue}:{action}") for action in sorted(ACTIONS))
    elif needs == ADMIN:
        yield w.key(admin=True)
    else:  # any key, or browse on some queue: one that has none on QUEUE
        yield w.key("elsewhere:browse")


def test_every_route_refuses_a_key_without_its_grant_and_lets_one_with_it(world: World) -> None:
    wrong: list[str] = []
    for (method, path), route in ROUTES.items():
        for lacks, owner, sender, status in _lacking(world, route.needs):
            call = route.call(world, owner)
            before = world.snapshot()
            answer = world.send(method, call, sender)
            if answer.status_code != status:
                wrong.append(f"{method} {path} without {lacks}: {answer.status_code} {answer.text}")
            elif world.snapshot() != before:
                wrong.append(f"{method} {path} without {lacks}: refused, but changed something")
        for key in _allowed(world, route.needs):
            answer = world.send(method, route.call(world, key), key)
            if answer.status_code != route.ok:
                wrong.append(f"{method} {path} with its grant: {answer.status_code} {answer.text}")
            elif route.needs in (ANY_KEY, SOME_BROWSE) and QUEUE in answer.text:
                wrong.append(f"{method} {path} shows {QUEUE!r} to a key without a grant on it")
    assert not wrong, "\n".join(wrong)


def test_public_routes_and_files_hold_no_data(world: World) -> None:
    admin = world.admin["Authorization"].removeprefix("Bearer ")
    statuses = {("POST", "/console/login"): 401, ("POST", "/console/logout"): 303}
    for method, path in PUBLIC:
        form = "key=" if method == "POST" else None  # from the login page, with no key
        answer = world.send(method, Call(path, form=form), {"Sec-Fetch-Site": "same-origin"})
        assert answer.status_code == statuses.get((method, path), 200), (method, path)
        assert QUEUE not in answer.text
        assert admin not in answer.text
        assert "set-cookie" not in answer.headers or path == "/console/logout"
    assert world.http.get("/console/static/console.css").status_code == 200
    # The static files are a directory of the package: nothing beside it is served.
    for escape in ("..%2F..%2Fapp.py", "%2e%2e/%2e%2e/app.py", "../../app.py",
                   "..%5C..%5Capp.py", "/etc/passwd", "%2Fetc%2Fpasswd"):  # fmt: skip
        answer = world.http.get(f"/console/static/{escape}")
        assert answer.status_code == 404, (escape, answer.status_code)
        assert "create_app" not in answer.text


def _wildcard(pattern: str, name: str) -> bool:
    """A reference matcher: ``*`` stands for any run of characters, all else for itself."""
    head, *parts = pattern.split("*")
    if not parts:
        return name == pattern
    tail = parts.pop()
    if len(name) < len(head) + len(tail) or not (name.startswith(head) and name.endswith(tail)):
        return False
    rest = name[len(head) : len(name) - len(tail)]
    for part in parts:  # each as early as it can be: what is left is the most it can
        at = rest.find(part)
        if at < 0:
            return False
        rest = rest[at + len(part) :]
    return True


_PATTERN_TEXT = st.text(alphabet="ab*?[].\\^$+(){}|:-\n", min_size=1, max_size=8)


@settings(max_examples=300)
@given(pattern=_PATTERN_TEXT, name=st.text(alphabet="ab*?[].\\^$+(){}|:-\n", max_size=10))
def test_a_grant_matches_the_names_its_pattern_spells_and_no_other(pattern: str, name: str) -> None:
    action = "browse"
    key = Principal("k", admin=False, grants=(Grant(pattern, frozenset({action})),))
    assert key.allows(name, action) is _wildcard(pattern, name)
    assert not key.allows(name, "consume")  # another action: never
    # A name the pattern spells literally (its stars as stars) is always allowed.
    assert key.allows(pattern, action)


def test_a_grant_s_action_is_one_it_names() -> None:
    key = Principal("k", admin=False, grants=(Grant.parse("orders:produce"),))
    with pytest.raises(ValueError, match="unknown action"):
        key.allows("orders", "PRODUCE")
    assert [a for a in sorted(ACTIONS) if key.allows("orders", a)] == ["produce"]


# --- 2. selectors that try to reach outside the message ----------------------------------

SELECTORS = [
    # statements, also behind comments
    "1=1; DROP TABLE messages",
    "body.n = 1; DELETE FROM messages",
    "body.n = 1 /* */ ; DROP TABLE messages; /* */",
    "body.n = 1 -- \n; DROP TABLE messages",
    "body.n = 1\uff1bDROP TABLE messages",
    # subqueries and set operations
    "(SELECT 1) = 1",
    "EXISTS (SELECT 1 FROM messages)",
    "body.n IN (SELECT id FROM messages)",
    "body.n = 1 UNION SELECT 1",
    "count(*) OVER () > 0",
    # other columns and tables
    "id = 1",
    "queue_id = 1",
    "state = 1",
    "p_session > 0",
    "error IS NULL",
    "grp IS NULL",
    "lane IS NULL",
    "t1 IS NULL",
    "properties IS NULL",
    "rowid = 1",
    "ctid IS NULL",
    "xmin IS NULL",
    "messages.priority = 0",
    "m.priority = 0",
    "main.messages.id = 1",
    "body.n = 1 OR sqlite_master IS NULL",
    # functions the language does not have
    "sqlite_version() = '3'",
    "load_extension('x') IS NULL",
    "randomblob(4) IS NULL",
    "pg_sleep(1) IS NULL",
    "pg_read_file('/etc/passwd') = ''",
    "current_setting('search_path') = ''",
    "set_config('a.b', 'c', false) = 'c'",
    "json_extract(body, '$.n') = 1",
    "version() = ''",
    "pg_catalog.now() > 0",
    "current_user = 'x'",
    # the drivers' and dialects' own syntax
    "body.n = ?",
    "body.n = :p",
    "body.n = %s",
    "body.n = %(p)s",
    "body.n = $1",
    "body.n = $$1$$",
    "body.s = E'\\''",
    "body.n = x'01'",
    "body.s::regclass IS NULL",
    "CAST(body.n AS regclass) IS NULL",
    "body.s COLLATE \"C\" = 'a'",
    "PRAGMA table_info(messages)",
    "ATTACH DATABASE '/tmp/x' AS x",
    "body.n = 1\x00 OR 1=1",
    "body.s = 'a\ud800'",
]


def _selector_world(db: sluice.Database) -> sluice.Queue:
    q = db.create_queue(QUEUE, error_queue=f"{QUEUE}.errors")
    db.create_queue("bystander").put({"n": 1})
    db.create_topic("news")
    q.put_many([{"n": 1, "s": "a"}, {"n": 2, "s": "b"}, {"n": 3, "s": "c"}])
    failed = q.get(where="body.n = 3")
    assert failed is not None
    failed.reject("kept as failed, for retry(where=) and discard(where=)")
    return q


def _everything(db: sluice.Database) -> object:
    """Every queue's settings and messages, subscriptions and declared properties."""
    states: tuple[Literal["ready", "delayed", "claimed", "failed"], ...]
    states = ("ready", "delayed", "claimed", "failed")
    return [
        (spec.name, spec.kind, sorted(spec.priority),
         [db.backend.queue_properties(spec.name)],
         [(m.id, m.body) for state in states for m in db.queue(spec.name).browse(state=state)])
        for spec in db.queues()
    ], [s.name for s in db.subscriptions()]  # fmt: skip


def test_selectors_that_reach_outside_the_message_are_refused(db: sluice.Database) -> None:
    q = _selector_world(db)
    errors = db.queue(f"{QUEUE}.errors")

    def dequeue(where: str | None = None, order_by: str | None = None) -> object:
        with db.transaction() as tx:
            return tx.dequeue(QUEUE, where=where, order_by=None if order_by is None else [order_by])

    uses: dict[str, Callable[[str], object]] = {
        "browse where": lambda t: q.browse(where=t),
        "browse order_by": lambda t: q.browse(order_by=[t]),
        "get where": lambda t: q.get(where=t),
        "get order_by": lambda t: q.get(order_by=[t]),
        "dequeue where": lambda t: dequeue(where=t),
        "dequeue order_by": lambda t: dequeue(order_by=t),
        "retry where": lambda t: errors.retry(where=t),
        "discard where": lambda t: errors.discard(where=t),
        "subscribe where": lambda t: db.subscribe("news", "picky", where=t),
        "declared property": lambda t: db.create_property("picked", t, queues=[QUEUE]),
        "priority function": lambda t: db.create_queue("ranked", priority={"*": t}),
        "altered priority": lambda t: db.alter_queue(QUEUE, priority={"*": t}),
        "rule": lambda t: db.apply(f"CREATE RULE r FOR {QUEUE} IF {t} THEN RESET;"),
    }
    before = _everything(db)
    wrong = [
        f"{use} {text!r}: {outcome}"
        for text in SELECTORS
        for use, action in uses.items()
        if (outcome := refused(action, text)) is not None
    ]
    assert not wrong, "\n".join(wrong)
    assert _everything(db) == before
    assert db.rules.application.rules == {}
    assert [m.body for m in db.queue("bystander").browse()] == [{"n": 1}]


QUOTED = [HOSTILE, "x' OR '1'='1", "a''b", "\\'", "'", '"', "%", "_", "a\\", "$$", "--", "/*",
          "E'x'", "名前", "🙂", "a\nb", "%(p)s", "?"]  # fmt: skip


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def test_quotes_in_literals_and_keys_select_exactly_their_values(db: sluice.Database) -> None:
    q = db.create_queue(QUEUE)
    db.create_property("label", "body.s", queues=[QUEUE])
    q.put_many([{"s": text, "i": i} for i, text in enumerate(QUOTED)])
    q.put({'we"ird': 1, "it's": 2, "a b": 3})
    for i, text in enumerate(QUOTED):
        for where in (f"body.s = {_literal(text)}", f"label = {_literal(text)}"):
            assert [m.body["i"] for m in q.browse(where=where)] == [i], where
    like = [m.body["s"] for m in q.browse(where="body.s LIKE '%DROP%'")]
    assert like == [HOSTILE]
    for where in ('body."we""ird" = 1', "body['it''s'] = 2", 'body."a b" = 3'):
        assert len(q.browse(where=where)) == 1, where
    assert len(q) == len(QUOTED) + 1


def test_comments_and_a_closing_semicolon_never_reach_the_database(db: sluice.Database) -> None:
    # Part of SQL's syntax, they are read and dropped: the SQL run is made from what the
    # expression means, so what they hide cannot end or extend it.
    q = _selector_world(db)
    plain = [m.id for m in q.browse(where="body.n = 2")]
    assert len(plain) == 1
    commented = [
        *("body.n = 2 -- OR 1=1", "body.n = 2 /* OR 1=1 */", "/* 1=1 OR */ body.n = 2"),
        *("body.n = 2 --", "body.n = 2 /*", "body.n = 2 ;", "body.n = 2 -- ) OR (1=1"),
    ]
    for text in commented:
        try:
            found = [m.id for m in q.browse(where=text)]
        except sluice.ExpressionError:
            continue  # refused is as good
        assert found == plain, text


# --- 3. paths that try to leave a dropbox's root -----------------------------------------


@dataclass
class Boxes:
    """A dropbox root, and beside it a directory outside it with a secret in it."""

    root: Path
    outside: Path

    def tree(self) -> dict[str, bytes | str]:
        """Everything outside the root, and the root's neighbours: what must not change."""
        found: dict[str, bytes | str] = {"": repr(sorted(os.listdir(self.root.parent)))}
        for path in sorted(self.outside.rglob("*")):
            found[str(path)] = path.read_bytes() if path.is_file() else "dir"
        return found


@pytest.fixture
def boxes(tmp_path: Path) -> Boxes:
    base = tmp_path / "boxes"
    root, outside = base / "root", base / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"the secret")
    (outside / "victim").write_bytes(b"not to be written")
    return Boxes(root, outside)


def _drop(box: Path, name: str, data: bytes) -> None:
    (box / "working" / name).write_bytes(data)
    os.replace(box / "working" / name, box / "target" / name)


QUEUE_NAMES = ["..", ".", "", "/", "/etc", "a/b", "../x", "x\x00y", "\\", "a\\..\\b",
               "topic-root", "q" * 256]  # fmt: skip
TOPIC_NAMES = [*QUEUE_NAMES[:-2], "a..b", ".hidden", "a./b", "a.b/c", "a.\x00"]


def test_names_that_leave_the_root_are_refused_at_every_entry_point(
    db: sluice.Database, boxes: Boxes
) -> None:
    db.create_topic("a..b")  # a valid topic name, with a part no directory can have
    db.subscribe("a..b", "mine")
    db.queue("a..b").put("published")
    box = Dropbox(db, boxes.root, consumer_id="c")
    before = boxes.tree()
    uses: dict[str, Callable[[str], object]] = {
        "ingest": box.ingest,
        "recover": box.recover,
        "emit": box.emit,
        "run inbound": lambda n: box.run(inbound=[n], stop=threading.Event()),
    }
    topic_uses: dict[str, Callable[[str], object]] = {
        "ingest_topic": box.ingest_topic,
        "recover_topic": box.recover_topic,
        "emit_topic": box.emit_topic,
        "run topics_in": lambda n: box.run(topics_in=[n], stop=threading.Event()),
    }
    wrong = [
        f"{use} {name!r}: {outcome}"
        for names, table in ((QUEUE_NAMES, uses), (TOPIC_NAMES, topic_uses))
        for name in names
        for use, action in table.items()
        if (outcome := refused(action, name)) is not None
    ]
    assert not wrong, "\n".join(wrong)
    assert os.listdir(boxes.root) == []  # nothing made for a name refused
    assert boxes.tree() == before


def test_a_state_directory_linked_outside_the_root_is_refused(
    db: sluice.Database, boxes: Boxes
) -> None:
    db.create_queue(QUEUE)
    db.queue(QUEUE).put("to emit")
    box = Dropbox(db, boxes.root, consumer_id="c")
    incoming = boxes.root / QUEUE / "incoming"
    box.ingest(QUEUE)  # makes the directories
    _drop(incoming, "4.1140429201296000-1.T", b"dropped")
    before = boxes.tree()
    for state in STATES:
        kept = incoming / f"{state}.kept"
        (incoming / state).rename(kept)
        (incoming / state).symlink_to(boxes.outside, target_is_directory=True)
        for use in (box.ingest, box.recover, box.emit):
            with pytest.raises(sluice.DropboxError, match="symbolic link"):
                use(QUEUE)
        (incoming / state).unlink()
        kept.rename(incoming / state)
    assert boxes.tree() == before
    assert os.listdir(incoming / "target") == ["4.1140429201296000-1.T"]
    assert [m.body for m in db.queue(QUEUE).browse()] == ["to emit"]


def test_a_topic_s_directories_linked_outside_the_root_are_refused(
    db: sluice.Database, boxes: Boxes
) -> None:
    db.create_topic("news.eu")
    db.subscribe("news.eu", "mine")
    db.queue("news.eu").put("published")
    box = Dropbox(db, boxes.root)
    before = boxes.tree()
    topics = boxes.root / "topic-root"
    topics.symlink_to(boxes.outside, target_is_directory=True)
    for use in (box.ingest_topic, box.recover_topic, box.emit_topic):
        with pytest.raises(sluice.DropboxError, match="symbolic link"):
            use("news.eu")
    topics.unlink()
    (topics / "news" / "eu" / ".subscriptions").mkdir(parents=True)
    (topics / "news" / "eu" / ".subscriptions" / "mine").symlink_to(boxes.outside)
    with pytest.raises(sluice.DropboxError, match="symbolic link"):
        box.emit_topic("news.eu")
    assert boxes.tree() == before
    assert [m.body for m in db.queue("mine").browse()] == ["published"]


def test_a_link_left_in_processing_is_not_followed_on_recovery(
    db: sluice.Database, boxes: Boxes
) -> None:
    db.create_queue(QUEUE)
    box = Dropbox(db, boxes.root, consumer_id="c")
    box.ingest(QUEUE)
    incoming = boxes.root / QUEUE / "incoming"
    name = "4.1140429201296000-1.T"
    (incoming / "processing" / f"c~{name}").symlink_to(boxes.outside / "secret")
    before = boxes.tree()
    assert box.recover(QUEUE) == 0
    assert db.queue(QUEUE).browse() == []
    assert os.path.islink(incoming / "error" / name)  # moved on, as a link, never read
    assert "symbolic link" in (incoming / "error" / f"{name}.reason").read_text()
    assert boxes.tree() == before


def test_a_message_is_never_written_through_a_link(db: sluice.Database, boxes: Boxes) -> None:
    db.create_queue(QUEUE)
    db.queue(QUEUE).put(b"the message")
    box = Dropbox(db, boxes.root)
    target = boxes.root / QUEUE / "incoming"
    box.emit(QUEUE)  # makes the directories; the message is written
    (written,) = os.listdir(target / "target")
    os.unlink(target / "target" / written)
    db.queue(QUEUE).put(b"the second")
    (m,) = db.queue(QUEUE).browse()
    name, _ = file_of(m)
    (target / "working" / name).symlink_to(boxes.outside / "victim")
    (target / "target" / name).symlink_to(boxes.outside / "secret")
    before = boxes.tree()
    # The link in working/ is removed and the file made anew (O_EXCL, O_NOFOLLOW); the
    # link in target/ is replaced by the rename, not followed.
    assert box.emit(QUEUE) == 1
    assert not os.path.lexists(target / "working" / name)
    assert not os.path.islink(target / "target" / name)
    assert (target / "target" / name).read_bytes() == b"the second"
    assert boxes.tree() == before


def test_metadata_and_consumer_ids_cannot_name_a_path(db: sluice.Database, boxes: Boxes) -> None:
    db.create_queue(QUEUE)
    db.create_queue("back")
    hostile = ["../../outside/x", "/etc/passwd", "a/b", "..\\..\\x", ".."]
    for text in hostile:
        db.queue(QUEUE).put(text, correlation_id=text, reply_to=text,
                            properties={text: text, "k": text})  # fmt: skip
    out = Dropbox(db, boxes.root)
    before = boxes.tree()
    assert out.emit(QUEUE) == len(hostile)
    target = boxes.root / QUEUE / "incoming" / "target"
    names = os.listdir(target)
    assert len(names) == len(hostile)
    assert all("/" not in n and n not in (".", "..") for n in names)
    # The files back in, under consumer ids that try to leave the root as well.
    incoming = boxes.root / "back" / "incoming"
    for i, consumer in enumerate(["../../outside", "a/b", "..", "x\x00y", "~"]):
        inbound = Dropbox(db, boxes.root, consumer_id=consumer)
        inbound.ingest("back")
        os.replace(target / names[i], incoming / "target" / names[i])
        assert inbound.ingest("back") == 1
    back = {m.body: m for m in db.queue("back").browse()}
    assert sorted(back) == sorted(hostile)
    assert all(m.correlation_id == m.body for m in back.values())
    assert sorted(os.listdir(boxes.root)) == ["back", QUEUE]
    assert boxes.tree() == before


def test_a_fifo_dropped_in_is_refused_without_blocking(db: sluice.Database, boxes: Boxes) -> None:
    db.create_queue(QUEUE)
    box = Dropbox(db, boxes.root)
    box.ingest(QUEUE)
    incoming = boxes.root / QUEUE / "incoming"
    os.mkfifo(incoming / "target" / "4.1140429201296000-1.T")  # a read would wait for ever
    assert box.ingest(QUEUE) == 0
    assert (
        "not a regular file" in (incoming / "error" / "4.1140429201296000-1.T.reason").read_text()
    )


# --- 4. bodies too large and too slow, to a real server -----------------------------------

LIMIT = 4096
TIMEOUT = 0.5
"""The served app's body limit and body timeout, small to keep the test short."""


@dataclass(frozen=True, slots=True)
class Live:
    db: sluice.Database
    port: int
    secret: str

    def open(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def head(self, method: str, path: str, **headers: str) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
        lines.append(f"Authorization: Bearer {self.secret}")
        lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


@contextlib.contextmanager
def _served(timeout: float) -> Iterator[Live]:
    with sluice.connect("memory://") as db:
        db.create_queue(QUEUE)
        secret = Keys(db).add("root", [], admin=True)
        app = create_app(db, max_request=LIMIT, body_timeout=timeout, sample_every=3600.0)
        with serve(app, http=with_header_timeout(timeout)) as url:  # as sluice serve does
            yield Live(db, int(url.rsplit(":", 1)[1]), secret)


@pytest.fixture
def live() -> Iterator[Live]:
    with _served(TIMEOUT) as served:
        yield served


def _answer(sock: socket.socket) -> tuple[int, bytes]:
    """The server's whole answer, read until it closes the connection (a socket timeout
    fails the test: the server kept it open); its status."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 "), data
    return int(data.split(b" ", 2)[1]), data


def _bodied() -> list[tuple[str, str]]:
    """Every route that takes a body, with its path filled in."""
    return sorted(
        (method, _generic(path))
        for method, path in ROUTES.keys() | PUBLIC.keys()
        if method in ("POST", "PUT", "PATCH")
    )


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(live: Live) -> None:
    for method, path in _bodied():
        sock = live.open()
        sock.sendall(live.head(method, path, Content_Length=str(10**12)))
        status, data = _answer(sock)
        assert status == 413, (method, path, data)
    assert live.db.queue(QUEUE).stats()["ready"] == 0


def test_a_streamed_body_over_the_limit_is_refused_without_its_end(live: Live) -> None:
    chunk = b"%x\r\n%s\r\n" % (LIMIT + 1, b" " * (LIMIT + 1))
    for method, path in _bodied():
        sock = live.open()
        sock.sendall(live.head(method, path, Transfer_Encoding="chunked") + chunk)
        status, data = _answer(sock)  # the last chunk never sent
        assert status == 413, (method, path, data)
        assert b"PayloadTooLarge" in data
    assert live.db.queue(QUEUE).stats()["ready"] == 0


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_a_body_that_stops_is_cut_off_at_the_timeout_on_every_route(live: Live) -> None:
    started = time.monotonic()
    socks = []
    for method, path in _bodied():
        sock = live.open()
        sock.sendall(live.head(method, path, Content_Length="100") + b'{"mess')
        socks.append((method, path, sock))
    for method, path, sock in socks:
        status, data = _answer(sock)
        assert status == 408, (method, path, data)
        assert b"RequestTimeout" in data
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 3
    assert live.db.queue(QUEUE).stats()["ready"] == 0


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_a_body_that_trickles_is_cut_off_at_the_timeout(live: Live) -> None:
    sock = live.open()
    started = time.monotonic()
    sock.sendall(live.head("POST", f"/api/queues/{QUEUE}/messages", Content_Length="1000"))
    answer, sent = _trickle(sock, b" ")
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 3
    assert sent > 3  # it did trickle: each byte came well within any per-read timeout


def _trickle(sock: socket.socket, piece: bytes) -> tuple[bytes, int]:
    """Send ``piece`` whenever the server has not answered for a while, until it does:
    its whole answer (read until it closes), and how many pieces were sent."""
    sent, first = 0, b""
    sock.settimeout(0.05)
    while not first:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # answered just now
            sock.sendall(piece)
            sent += 1
        with contextlib.suppress(TimeoutError):
            first = sock.recv(65536)
    sock.settimeout(5)
    rest = b""
    while chunk := sock.recv(65536):
        rest += chunk
    sock.close()
    return first + rest, sent


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_slow_clients_do_not_hold_up_the_others() -> None:
    import httpx

    with contextlib.ExitStack() as stack:
        # A longer timeout here: the others are served before it ends, on a busy host too.
        live = stack.enter_context(_served(TIMEOUT * 3))
        headers = {"Authorization": f"Bearer {live.secret}"}
        base = f"http://127.0.0.1:{live.port}"
        http = stack.enter_context(httpx.Client(base_url=base, headers=headers))
        _slow_and_others(live, http)


def _slow_and_others(live: Live, http: Any) -> None:
    slow = []
    for n in range(20):
        sock = live.open()
        if n % 2:  # headers never finished
            sock.sendall(live.head("GET", "/api/queues").removesuffix(b"\r\n\r\n"))
        else:  # a body never finished
            sock.sendall(live.head("POST", f"/api/queues/{QUEUE}/messages", Content_Length="99"))
        slow.append(sock)
    for n in range(5):
        put = http.post(f"/api/queues/{QUEUE}/messages", json={"messages": [{"body": n}]})
        assert put.status_code == 201
        assert http.get(f"/api/queues/{QUEUE}").json()["counts"]["ready"] == n + 1
    for sock in slow:  # all still waiting while the others were served
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(1)
        sock.settimeout(5)
    for sock in slow:  # then cut off, the headers' and the bodies' alike
        assert _answer(sock)[0] == 408


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_headers_that_stop_trickle_or_never_start_are_cut_off_at_the_timeout(
    live: Live,
) -> None:
    started = time.monotonic()
    stopped, silent, trickling = live.open(), live.open(), live.open()
    stopped.sendall(live.head("GET", "/api/queues")[:30])  # part of the request line
    trickling.sendall(b"GET /api/queues HTTP/1.1\r\n")
    answer, sent = _trickle(trickling, b"X-Slow: 1\r\n")  # a header line at a time
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert sent > 3
    for sock in (stopped, silent):
        status, data = _answer(sock)
        assert status == 408, data
        assert b"RequestTimeout" in data
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 3


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_a_kept_alive_connection_gets_the_timeout_for_each_request(live: Live) -> None:
    sock = live.open()
    for _ in range(3):  # whole requests, each within the timeout, on one connection
        sock.sendall(live.head("GET", f"/api/queues/{QUEUE}"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    started = time.monotonic()
    sock.sendall(live.head("GET", f"/api/queues/{QUEUE}")[:20])  # then one that stops
    status, _ = _answer(sock)
    assert status == 408
    assert time.monotonic() - started < TIMEOUT + 3


def test_a_request_longer_than_the_header_timeout_is_answered(live: Live) -> None:
    """Only headers have the deadline: a lease that waits past it is answered in full."""
    sock = live.open()
    body = b'{"limit": 1, "wait": %g}' % (TIMEOUT * 3)
    sock.sendall(live.head("POST", f"/api/queues/{QUEUE}/leases",
                           Content_Length=str(len(body))) + body)  # fmt: skip
    started = time.monotonic()
    status, data = _answer_one(sock)
    assert status == 200, data
    assert time.monotonic() - started >= TIMEOUT * 2


def _answer_one(sock: socket.socket) -> tuple[int, bytes]:
    """One whole answer of a kept-alive connection (its Content-Length read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    sock.close()
    return int(head.split()[1]), body


def test_the_timeout_does_not_end_a_stream_whose_request_was_whole(live: Live) -> None:
    sock = live.open()
    sock.sendall(live.head("GET", f"/api/queues/{QUEUE}/events"))
    got = b""
    while b"sluice event stream" not in got:
        got += sock.recv(65536)
    assert got.startswith(b"HTTP/1.1 200 ")
    sock.settimeout(TIMEOUT * 2)
    with pytest.raises(TimeoutError):  # past the body timeout: nothing, and still open
        sock.recv(65536)
    live.db.queue(QUEUE).put({"after": "the timeout"})
    sock.settimeout(5)
    got = b""
    while b"event: message" not in got:
        got += sock.recv(65536)
    assert b'"after":"the timeout"' in got
    sock.close()


# --- 5. SQL, quotes, NUL and odd Unicode in every name and value ------------------------

NAMES = [HOSTILE, "x' OR '1'='1", 'x" OR "1"="1', "x`y", "a\x00b", "\ud800", "名前", "a b",
         "a\nb", "a/b", "../x", "%s", "%(x)s", "$1", "?", "", "a" * 201, "a;b", "\\", "--",
         "/*", "🙂", "-x", ".x"]  # fmt: skip


def _never(name: str) -> bool:
    """No name of the list is a valid one."""
    return False


def _canary(db: sluice.Database) -> object:
    return sorted(s.name for s in db.queues()), [m.body for m in db.queue("canary").browse()]


def test_hostile_names_are_refused_wherever_a_name_goes(db: sluice.Database) -> None:
    db.create_queue("canary").put({"still": "here"})
    db.create_topic("news")
    db.jobs.define("t")
    keys = Keys(db)
    key_name = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a key's own rule (test_keys.py)
    made: dict[str, tuple[Callable[[str], object], Callable[[str], bool]]] = {
        "queue": (db.create_queue, _never),
        "topic": (db.create_topic, _never),
        "subscription": (lambda n: db.subscribe("news", n), _never),
        "error queue": (lambda n: db.create_queue("q2", error_queue=n), _never),
        "altered error queue": (lambda n: db.alter_queue("canary", error_queue=n), _never),
        "message type": (lambda n: db.create_type(n, schema={"type": "object"}), _never),
        "message's type": (lambda n: db.queue("canary").put({}, type=n), _never),
        "property": (lambda n: db.create_property(n, "body.n", queues=["canary"]), _never),
        "property's queue": (lambda n: db.create_property("p", "body.n", queues=[n]), _never),
        "task type": (db.jobs.define, _never),
        "task type of a queue": (lambda n: db.jobs.define(n, queue="tq"), _never),
        "task type's queue": (lambda n: db.jobs.define("t2", queue=n), lambda n: n == ""),
        "job's task type": (lambda n: db.jobs.submit("j", [(n, 1)]), _never),
        "alert queue": (lambda n: db.jobs.submit("j", [("t", 1)], alert_queue=n), _never),
        "gateway": (lambda n: db.gateways.define(n, direction="in", transport="http"), _never),
        "key": (
            lambda n: keys.add(n, [Grant.parse("canary:browse")]),
            lambda n: bool(key_name.fullmatch(n)),
        ),
        # and names looked up
        "queue looked up": (lambda n: db.queue(n).stats(), _never),
        "queue dropped": (db.drop_queue, _never),
        "subscriptions of": (db.subscriptions, _never),
        "unsubscribed": (db.unsubscribe, _never),
        "job looked up": (db.jobs.get, _never),
        "profile looked up": (db.jobs.profile, _never),
        "key revoked": (keys.revoke, _never),
    }
    before = _canary(db)
    wrong = [
        f"{what} {name!r}: {outcome}"
        for name in NAMES
        for what, (action, valid) in made.items()
        if not valid(name) and (outcome := refused(action, name)) is not None
    ]
    assert not wrong, "\n".join(wrong)
    assert _canary(db) == before
    db.queue("canary").put("after")  # the messages table is still there, and works
    with db.transaction() as tx:
        assert [m.body for m in tx.dequeue("canary", limit=2)] == [{"still": "here"}, "after"]


VALUES = [HOSTILE, "x' OR '1'='1", 'a"b', "a\\b", "\\'", "a\x00b", "\x00", "a\ud800b",
          "\udfff", "名前", "🙂", "e\u0301", "\u202eevil", "%s", "%(x)s", "$1", "?", "a\nb",
          "--", "/*", "' || pg_sleep(1) || '", "x" * 5000]  # fmt: skip


def _plain_text(value: str) -> bool:
    """Text a database column can hold on every backend: no NUL, no lone surrogate."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def _outcome(action: Callable[[str], object], value: str) -> object:
    try:
        return ("stored", action(value))
    except StorageError as exc:
        return ("reached the database", repr(exc))
    except sluice.SluiceError:
        return "refused"
    except Exception as exc:
        return ("not a SluiceError", repr(exc))


def test_hostile_values_are_stored_exactly_or_refused_alike(
    db: sluice.Database, backend_url: str
) -> None:
    """Text columns (headers, a reason, a job's name) hold any text but NUL and lone
    surrogates, refused on every backend alike; JSON (properties, bodies) holds NUL too,
    but PostgreSQL's JSON cannot, so there it is refused before it is stored; bytes
    hold anything. Whatever is stored comes back exactly."""
    postgres = backend_url.startswith("postgresql")
    db.create_queue("canary").put({"still": "here"})
    q = db.create_queue(QUEUE, error_queue=f"{QUEUE}.errors")
    db.jobs.define("t")
    keys = Keys(db)

    def one(**options: Any) -> sluice.Message:
        put = q.put(options.pop("body", "x"), **options)
        with db.transaction() as tx:  # what a refused put left behind goes too
            (m,) = [m for m in tx.dequeue(QUEUE, limit=1000) if m.id == put]
        return m

    def rejected(reason: str) -> str | None:
        q.put("to reject")
        m = q.get()
        assert m is not None
        try:
            m.reject(reason)
        except BaseException:
            m.release()
            raise
        (failed,) = db.queue(f"{QUEUE}.errors").browse()
        db.queue(f"{QUEUE}.errors").discard()
        return failed.error

    def granted(grant: Grant) -> object:
        found = keys.authenticate(keys.add(f"k{len(keys.list())}", [grant]))
        return None if found is None else found.grants

    stored: dict[str, Callable[[str], object]] = {
        "correlation_id": lambda v: one(correlation_id=v).correlation_id,
        "reply_to": lambda v: one(reply_to=v).reply_to,
        "group": lambda v: one(group=v).group,
        "content_type": lambda v: one(content_type=f"text/x-{v}").content_type,
        "property value": lambda v: one(properties={"k": v}).properties,
        "property key": lambda v: one(properties={v: 1}).properties,
        "JSON body": lambda v: one(body={v: v}).body,
        "text body": lambda v: one(body=v).body,
        "bytes body": lambda v: one(body=v.encode("utf-8", "surrogatepass")).body,
        "reject reason": rejected,
        "job name": lambda v: db.jobs.get(db.jobs.submit(v, [("t", 1)])).name,
        "job info": lambda v: db.jobs.get(db.jobs.submit("j", [("t", 1)], info={v: v})).info,
        "grant pattern": lambda v: granted(Grant(v, frozenset({"browse"}))),
    }
    wrong: list[str] = []
    for v in VALUES:
        text, unicode = _plain_text(v), _plain_text(v.replace("\x00", ""))
        json = unicode and not (postgres and "\x00" in v)
        expected: dict[str, tuple[object, bool]] = {
            "correlation_id": (v, text),
            "reply_to": (v, text),
            "group": (v, text and len(v) <= 1000),  # its documented limit
            "content_type": (f"text/x-{v}", text),
            "property value": ({"k": v}, json),
            "property key": ({v: 1}, json),
            "JSON body": ({v: v}, json),
            "text body": (v, unicode and (text or not postgres)),
            "bytes body": (v.encode("utf-8", "surrogatepass"), True),
            "reject reason": (v, text),
            "job name": (v, text),
            "job info": ({v: v}, True),
            "grant pattern": ((Grant(v, frozenset({"browse"})),), True),
        }
        for field, action in stored.items():
            value, storable = expected[field]
            got = _outcome(action, v)
            want = ("stored", value) if storable else "refused"
            if got != want:
                wrong.append(f"{field} {v[:40]!r}: {got!r}, not {want!r}"[:300])
    assert not wrong, "\n".join(wrong)
    assert q.stats()["ready"] == 0
    assert [m.body for m in db.queue("canary").browse()] == [{"still": "here"}]


def test_hostile_names_and_values_over_http_are_refused_or_kept_never_a_5xx(
    world: World,
) -> None:
    # What the HTTP API passes on of a name or a value is checked as above: a refusal is
    # the client's error (4xx), never the server's (a 503 said "retry" for ever).
    import json
    from urllib.parse import quote

    def send(method: str, path: str, body: Any) -> Any:
        # As JSON escapes them: a lone surrogate too, which httpx would not encode.
        headers = world.admin | {"Content-Type": "application/json"}
        content = None if body is None else json.dumps(body).encode()
        return world.http.request(method, path, headers=headers, content=content)

    wrong: list[str] = []
    for n in NAMES:
        asked = [
            ("POST", "/api/queues", {"name": n}),
            ("POST", "/api/topics", {"name": n}),
            ("POST", "/api/topics/news/subscriptions", {"name": n}),
            ("POST", "/api/types", {"name": n, "schema": {"type": "object"}}),
            ("POST", "/api/properties", {"name": n, "expression": "body.n", "queues": [QUEUE]}),
            ("POST", "/api/jobs", {"name": "j", "tasks": [{"type": n}]}),
            ("GET", f"/api/jobs/{quote(n, safe='', errors='surrogatepass')}", None),
            ("PUT", f"/api/profiles/{quote(n, safe='', errors='surrogatepass')}", {}),
        ]
        for method, path, body in asked:
            answer = send(method, path, body)
            # (An empty name in a path is another path: its redirect to it changes nothing.)
            if not 400 <= answer.status_code < 500 and not (n == "" and method != "POST"):
                wrong.append(f"{method} {path} {n!r}: {answer.status_code} {answer.text[:200]}")
    for v in VALUES:
        job = send("POST", "/api/jobs", {"name": v, "tasks": [{"type": "t"}]})
        if not (job.status_code == 201 or 400 <= job.status_code < 500):
            wrong.append(f"job {v[:40]!r}: {job.status_code} {job.text[:200]}")
        for field, value in (("body", {v: v}), ("correlation_id", v), ("group", v[:1000]),
                             ("properties", {v: v})):  # fmt: skip
            sent = send("POST", f"/api/queues/{QUEUE}/messages",
                        {"messages": [{"body": 1, field: value}]})  # fmt: skip
            if sent.status_code == 201:
                (m,) = world.db.queue(QUEUE).browse()
                with world.db.transaction() as tx:  # taken, so the next one is alone
                    tx.dequeue(QUEUE)
                if getattr(m, field) != value:
                    wrong.append(f"{field} {v[:40]!r} came back as {getattr(m, field)!r}"[:300])
            elif not 400 <= sent.status_code < 500:
                wrong.append(f"{field} {v[:40]!r}: {sent.status_code} {sent.text[:200]}")
    assert not wrong, "\n".join(wrong)
