"""The fault campaign: actors at work on one database, killed and cut off at random.

Producers, movers, topic subscribers, a job submitter and job workers
(tests/reliability/campaign_child.py), an order producer with ``sluice run`` running
the rules RULES over its orders and forwarding them through its outgoing http gateway
(RELAY) to ``sluice serve``, which two HTTP clients (tests/reliability/campaign_http.py)
use too, and a program dropping files into a dropbox that two ``sluice dropbox``
consumers store, run at once on a SQLite file or a PostgreSQL schema. From the moment
sluice serve confirms a first put, for ``seconds``, at random moments drawn from
``seed``, an actor is killed with SIGKILL and started again, or (PostgreSQL) one of the
actors' server backends is terminated, which an actor meets as a failed statement or
commit, or the server crashes; or (SQLite) the disk fills, or the actors' clocks step.
Then every actor is killed, one connection recovers them and drains what is left (the
rules run in-process until idle, on a clock past every echo timer), and the checker
(tests/reliability/campaign_checks.py) compares what the database holds with what the
actors reported as committed:

- every reported transaction is in ``out`` and in each subscription's ``out_<sub>``, each
  message exactly once (nothing lost, nothing doubled);
- every transaction seen there is whole, was about to be committed when its producer said
  so, and was not one written to abort (nothing uncommitted visible);
- each writer's messages are in its order in ``out`` (isolation ``ordered`` over several
  movers) and in each subscription's output (one subscriber each); the same
  transactions are in ``out_grouped`` exactly once, each group's in order (the
  producers write each transaction into one of three groups of ``grouped``);
- every reported job ran each of its tasks' effects exactly once, and the job's counts
  say all succeeded;
- the rules: every order of a reported transaction has exactly one outcome, its
  actions (in ``routed``) or an error message (in ``rule_errors``, and only for an
  ``n`` that is no integer), and nothing else has one (the orders' transactions whole,
  none aborted or unannounced); ``routed`` in each writer's order; the echo timer of
  each routed order that asked for one brought it to ``echoed`` exactly once, the
  ``count`` rule made ``counted`` exactly once for each with an ``n``, and nothing else
  is in either;
- HTTP: each put the server confirmed is in ``web_in`` exactly once (its retries sent
  with the same Idempotency-Key), with the same checks as ``out``; each message of
  ``served`` (the rules' other action) was left after the drain or acknowledged through
  HTTP, not both, and an acknowledgement the server confirmed was the last time it was
  delivered: nobody took it after, and no other lease held it when it was accepted;
  nothing was lost (a message gone from ``served`` had an ack sent for it); no request
  was answered with 500 or raised in sluice serve, and no ``sluice`` actor died of
  an error that is not sluice's;
- the gateway: every routed order reached sluice serve's ``relayed`` exactly once
  through kills of either side, in each writer's order (the drain starts sluice serve
  once more and sends what is left); nothing in ``relay_errors``;
- the dropbox: each file the filer renamed into ``target/`` is in ``dropped`` exactly
  once and in ``processed/`` once; nothing is left in ``target/``, ``processing/``,
  ``error/`` or ``expired/`` after the drain recovered both consumers' claims.

    python -m tests.reliability.campaign --backend sqlite --seconds 600 --seed 1

writes bench/results/campaign-<date>.md (``make campaign`` runs both backends).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sluice
from sluice.clock import ManualClock, OffsetClock
from sluice.dropbox import Dropbox
from sluice.jobs import Task
from sluice.message import Message
from sluice.server.grants import Grant, Keys
from tests.postgres_server import PostgresServer, find_binaries
from tests.reliability.campaign_checks import (
    check_jobs,
    check_made,
    check_order,
    check_rule_errors,
    check_served,
    check_stream,
    tracebacks,
)
from tests.reliability.campaign_child import LEASE

ROOT = Path(__file__).resolve().parents[2]
"""The actors run from here, as modules of the tests package."""
CHILD = [sys.executable, "-m", "tests.reliability.campaign_child"]
HTTP_CHILD = [sys.executable, "-m", "tests.reliability.campaign_http"]
CLOCKED = [sys.executable, "-m", "tests.reliability.campaign_clock"]
"""An actor's ``python -m`` under a stepped clock: its time.sleep works (campaign_clock)."""
SUBSCRIPTIONS = ("a", "b")
# Actor name -> role; subscribers are named after their subscription.
ACTORS = {
    "p1": "producer",
    "p2": "producer",
    "m1": "mover",
    "m2": "mover",
    "a": "subscriber",
    "b": "subscriber",
    "j1": "submitter",
    "w1": "worker",
    "w2": "worker",
    "o1": "orderer",
    "r1": "rules",
    "s1": "server",
    "h1": "http",
    "h2": "http",
    "f1": "filer",
    "d1": "dropbox",
    "d2": "dropbox",
}
COMMANDS = {"rules": "run", "server": "serve", "dropbox": "dropbox"}
"""The roles that are the ``sluice`` command itself, and its subcommand."""
SERVE_START = 120.0  # seconds sluice serve may take to confirm a first put, unfaulted
IDEMPOTENCY_STALE = 5.0
"""sluice serve's ``--idempotency-stale``: a post whose server was killed before it answered
is run again after this (60 s by default would hold the relay's queue that long)."""

# Every order is routed twice (``served`` is consumed through HTTP), may ask for an echo
# timer and may be counted: a property of type integer that a fraction fails, which rolls
# back the order's actions and makes an error message instead (docs/rules.md).
RULES = """
SET ERRORQUEUE rule_errors;
CREATE QUEUE rule_errors;
CREATE QUEUE orders;
CREATE QUEUE routed;
CREATE QUEUE served;
CREATE QUEUE counted;
CREATE QUEUE timers KIND echo;
CREATE QUEUE echoed;
CREATE PROPERTY echo_target AS text QUEUE timers;
CREATE PROPERTY echo_after AS real QUEUE timers;
CREATE PROPERTY n AS integer QUEUE counted;
CREATE RULE route FOR orders
  IF true THEN ENQUEUE body INTO routed, ENQUEUE body INTO served, ENQUEUE body INTO relay;
CREATE RULE remind FOR orders
  IF body.e THEN
    ENQUEUE json_object('w', body.w, 's', body.s, 't', body.t, 'x', body.x) INTO timers
      WITH echo_target = 'echoed', echo_after = body.after;
CREATE RULE count FOR orders
  IF body.n IS NOT NULL THEN
    ENQUEUE json_object('w', body.w, 's', body.s) INTO counted WITH n = body.n;
"""
# Node to node (docs/gateways.md): sluice run's outgoing http gateway forwards every routed
# order to sluice serve's incoming one, each post with the message's id as its key.
RELAY = """
CREATE QUEUE relay_errors;
CREATE QUEUE relayed KIND gateway IN TRANSPORT http;
CREATE QUEUE relay KIND gateway OUT TRANSPORT http
  WITH (url = 'http://127.0.0.1:{port}/api/gateways/relayed',
        header_authorization = 'Bearer {secret}',
        attempts = 1000000, backoff = 0.05, max_backoff = 1, timeout = 5, batch = {batch})
  ERRORQUEUE relay_errors;
"""
RELAY_BATCHES = (1, 16)


def relay_batch(seed: int) -> int:
    """The relay's ``batch``, by the seed's parity: a message per post and transaction, or
    up to 16 (what forwarding under load wants: with every actor at work on two cores, each
    of the relay's commits, claims and the receiver's puts waits its turn for SQLite's
    writer lock, and one at a time it forwarded about 2 messages a second of the 54 routed)."""
    return RELAY_BATCHES[seed % 2]


RULES_BATCHES = (1, 7, 64, 256)
"""``sluice run --batch``: a message per transaction up to the default."""
CLOCK_AHEAD = 300.0
"""Seconds ahead of the wall clock the drain runs the rules: past every step of the
actors' clocks (60 s at most) and every echo timer, so that every timer is due."""
ECHO_LONGEST = 1.0
"""The longest echo timer an order asks for (campaign_child.order)."""


def prepare(url: str, port: int, dropbox: Path, *, relay_batch: int = 1) -> str:
    """The queues, topic, subscriptions, rules and gateways the actors use, and the
    dropbox's directories, made once before they start; returns the secret of the HTTP
    clients' (and the relay's) API key."""
    with sluice.connect(url) as db:
        db.create_queue("in", isolation="ordered")
        db.create_queue("grouped")
        db.create_topic("news")
        for sub in SUBSCRIPTIONS:
            db.subscribe("news", sub)
            db.create_queue(f"out_{sub}")
        db.create_queue("out")
        db.create_queue("out_grouped")
        db.create_queue("jobs_out")
        db.jobs.define("echo")
        db.create_queue("web_in")
        db.create_queue("dropped")
        dropbox.mkdir()
        Dropbox(db, dropbox, consumer_id="prepare").ingest("dropped")  # makes its directories
        grants = ["web_in:produce", "served:consume", "relayed:produce"]
        secret = Keys(db).add("campaign", [Grant.parse(g) for g in grants])
        db.apply(RELAY.format(port=port, secret=secret, batch=relay_batch) + RULES)
        return secret


@dataclass
class Actor:
    name: str
    role: str
    process: subprocess.Popen[str]
    reader: threading.Thread
    err: Path


@dataclass
class Outcome:
    """What a campaign did and what the checker found."""

    backend: str
    seed: int
    seconds: float
    kills: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)  # actors that died of a fault
    terminated_backends: int = 0
    server_crashes: int = 0  # PostgreSQL stopped with -m immediate and started again
    disk_full: int = 0  # moments the SQLite file's filesystem had no free byte
    clock_steps: list[int] = field(default_factory=list)  # the actors' clock offsets, in turn
    reported_txs: Counter[str] = field(default_factory=Counter)  # by the queue written
    reported_jobs: int = 0
    http: Counter[str] = field(default_factory=Counter)  # answers other than success
    served_after: float | None = None  # seconds until sluice serve confirmed a first put
    resent: int = 0  # puts an HTTP client sent again after a restart, with their key
    routed_by_run: int = 0  # orders routed by sluice run (the rest by the drain)
    relayed_by_run: int = 0  # orders forwarded to sluice serve by sluice run's gateway
    stored_by_dropbox: int = 0  # files stored by sluice dropbox (the rest by the drain)
    checked: dict[str, int] = field(default_factory=dict)  # queue -> messages checked
    errors: Counter[str] = field(default_factory=Counter)  # what actors died of, by type
    violations: list[str] = field(default_factory=list)


class Campaign:
    """``crash``: stops the PostgreSQL server as a crash would and starts it again;
    ``disk``: the directory of the SQLite file, on a filesystem of its own that the
    campaign fills now and then (a small tmpfs)."""

    def __init__(
        self,
        url: str,
        backend: str,
        seed: int,
        seconds: float,
        *,
        secret: str,
        port: int,
        logs: Path,
        crash: Callable[[], None] | None = None,
        disk: Path | None = None,
        clock: bool = False,
    ) -> None:
        self.url, self.seed, self.seconds = url, seed, seconds
        self.crash, self.disk = crash, disk
        self.logs = logs
        self.dropbox = logs / "dropbox"
        # The sluice command's actors: dead sessions rolled back as soon as the others'.
        self.cli_url = f"{url}{'&' if '?' in url else '?'}lease={LEASE:g}"
        self.port = port
        # The actors' wall clock, stepped by the campaign as NTP steps a host's: libfaketime
        # reads the offset from this file at every call (FAKETIME_NO_CACHE).
        self.clock = self.logs / "clock" if clock else None
        self.env = dict(os.environ)
        self.env |= {"SLUICE_CAMPAIGN_KEY": secret, "SLUICE_CAMPAIGN_STATE": str(self.logs)}
        if self.clock is not None:
            self.clock.write_text("+0\n")
            self.env |= stepped_clock(self.clock)
        self.rng = random.Random(seed)
        self.outcome = Outcome(backend, seed, seconds)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.actors: dict[str, Actor] = {}
        self._served = threading.Event()  # an HTTP client's put was confirmed ...
        self._served_at = 0.0  # ... at this monotonic time
        self._starts = 0

    # --- actors ----------------------------------------------------------------------
    def _start(self, name: str) -> None:
        role = ACTORS[name]
        self._starts += 1
        # Its stderr (tracebacks, logged errors) is kept with SLUICE_CAMPAIGN_KEEP_LOGS=1.
        path = self.logs / f"{name}.{self._starts}.err"
        command = self._command(name, role)
        if self.clock is not None:  # its sleeps kept working under libfaketime
            command = [*CLOCKED, *command[2:]]
        with path.open("w") as err:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True,
                env=self.env, cwd=ROOT,
            )  # fmt: skip
        reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        reader.start()
        self.actors[name] = Actor(name, role, process, reader, path)

    def _command(self, name: str, role: str) -> list[str]:
        seed = self.seed * 1000 + self._starts
        if role == "http":
            return [*HTTP_CHILD, f"http://127.0.0.1:{self.port}", name,
                    str(seed)]  # fmt: skip
        if role == "filer":  # no database: the dropbox's root
            return [*CHILD, role, str(self.dropbox), name, str(seed)]
        if role not in COMMANDS:
            return [*CHILD, role, self.url, name, str(seed)]
        command = [sys.executable, "-m", "sluice.cli", COMMANDS[role], "--db", self.cli_url]
        if role == "rules":  # one engine at a time, its batches and workers drawn anew
            choice = random.Random(seed)
            batch, workers = choice.choice(RULES_BATCHES), choice.randint(1, 2)
            return [*command, "--batch", str(batch), "--workers", str(workers)]
        if role == "dropbox":  # two consumers of one dropbox, each claiming under its name
            return [*command, "--root", str(self.dropbox), "--in", "dropped",
                    "--consumer-id", name, "--poll", "0.2"]  # fmt: skip
        return [*command, "--port", str(self.port), "--log-level", "warning",
                "--idempotency-stale", f"{IDEMPOTENCY_STALE:g}"]  # fmt: skip

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by SIGKILL
                continue
            with self._lock:
                self.events.append(event)
            if event.get("into") == "web_in" and not self._served.is_set():
                self._served_at = time.monotonic()
                self._served.set()

    def _kill(self, actor: Actor) -> None:
        actor.process.send_signal(signal.SIGKILL)
        self._reap(actor)

    def _reap(self, actor: Actor, *, exited: bool = False) -> None:
        actor.process.wait()
        actor.reader.join()
        assert actor.process.stdout is not None
        actor.process.stdout.close()
        if actor.role in COMMANDS:
            self._said(actor, exited=exited)

    def _said(self, actor: Actor, *, exited: bool) -> None:
        """What a ``sluice`` actor said on stderr. Its errors go to the tally; a traceback
        is a violation where sluice serve answered a request with it (uvicorn's
        "Exception in ASGI application", or sluice serve's own "error while answering"
        before its 500), or where the process died of an error not
        sluice's. The tracebacks sluice logs where it goes on (a heartbeat on a full
        disk) are not."""
        command = f"sluice {COMMANDS[actor.role]}"
        lines = actor.err.read_text(errors="replace").splitlines()
        for line in lines:
            if line.startswith("sluice: error:"):
                self.outcome.errors[f"{command}: {line.removeprefix('sluice: error: ')[:60]}"] += 1
        chains = tracebacks(lines)
        for before, raised, _ in chains:
            # uvicorn's line for a request that raised past the app, or the app's own
            # (problems.install) for one it answered 500: either way a bug, named by
            # the exception, which the client's 500 does not carry.
            if any(said in before for said in _REQUEST_RAISED):
                self.outcome.violations.append(
                    f"{actor.name} ({command}): a request raised {raised}"
                )
        if exited and chains and chains[-1][2] == len(lines):
            raised = chains[-1][1]
            self.outcome.errors[f"{command}: {raised[:60]}"] += 1
            if not raised.startswith("sluice."):
                self.outcome.violations.append(f"{actor.name} ({command}) died of {raised}")

    # --- faults ----------------------------------------------------------------------
    def _terminate_backend(self) -> bool:
        """Cut one actor's PostgreSQL connection (application_name marks the actors')."""
        import psycopg

        with psycopg.connect(_libpq_url(self.url), autocommit=True) as conn:
            pids = [
                row[0]
                for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                    (_APPLICATION,),
                )
            ]
            if not pids:
                return False
            conn.execute("SELECT pg_terminate_backend(%s)", (self.rng.choice(sorted(pids)),))
        return True

    def _fill_disk(self) -> None:
        """Take every free byte of the file's filesystem for a moment, then give it back."""
        assert self.disk is not None
        filler = self.disk / "filler"
        try:
            with filler.open("wb") as out:
                while True:
                    out.write(bytes(1 << 16))
                    out.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        time.sleep(self.rng.uniform(0.3, 1.0))  # the actors meet a full disk meanwhile
        filler.unlink()

    def _step_clock(self) -> None:
        """Step every actor's wall clock forward or back by up to a minute, or home again."""
        assert self.clock is not None
        offset = (
            0 if self.rng.random() < 0.4 else self.rng.choice((-1, 1)) * self.rng.randint(5, 60)
        )
        self.clock.write_text(f"{offset:+d}\n")
        self.outcome.clock_steps.append(offset)

    def _restart_exited(self) -> None:
        for actor in list(self.actors.values()):  # died of a fault it met: start again
            if actor.process.poll() is not None:
                self._reap(actor, exited=True)
                self.outcome.exits[actor.role] += 1
                self._start(actor.name)

    def run(self) -> Outcome:
        try:
            return self._run()
        finally:  # a campaign that raised leaves no actor running (sluice serve on its port)
            for actor in self.actors.values():
                if actor.process.poll() is None:
                    actor.process.kill()
                    actor.process.wait()

    def _run(self) -> Outcome:
        for name in ACTORS:
            self._start(name)
        start = time.monotonic()
        # The faults begin once sluice serve has confirmed an HTTP client's first put: its
        # start takes seconds of imports, more on a loaded machine, and a short run whose
        # faults began first could kill it before it ever answered (seen in CI). The run's
        # ``seconds`` are the faults' own.
        if not self._served.wait(SERVE_START):
            self.outcome.violations.append(
                f"sluice serve confirmed no put within {SERVE_START:g} s of its start"
            )
        deadline = time.monotonic() + self.seconds
        postgres = self.outcome.backend == "postgresql"
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0.2, 1.0))  # the fault schedule itself
            self._restart_exited()
            fault = self.rng.random()
            if postgres and fault < 0.25:
                self.outcome.terminated_backends += self._terminate_backend()
                continue
            if postgres and self.crash is not None and fault < 0.32:
                self.crash()
                self.outcome.server_crashes += 1
                continue
            if self.clock is not None and fault > 0.9:
                self._step_clock()
                continue
            if self.disk is not None and fault < 0.15:
                self._fill_disk()
                self.outcome.disk_full += 1
                continue
            victim = self.actors[self.rng.choice(sorted(self.actors))]
            self._kill(victim)
            self.outcome.kills[victim.role] += 1
            self._start(victim.name)
        for actor in self.actors.values():
            self._kill(actor)
        if self.clock is not None:
            # The drain's sluice serve on the wall's time: a clock left a minute ahead
            # would take the drain's own session (30 s lease) for dead and roll it back.
            self.clock.write_text("+0\n")
        if self._served.is_set():
            self.outcome.served_after = self._served_at - start
        self._drain()
        if os.environ.get("SLUICE_CAMPAIGN_KEEP_LOGS") and self.url.startswith("sqlite:///"):
            # Drained, not yet read by the checker: what a defect's trace starts from.
            with (
                contextlib.closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as db,
                contextlib.closing(sqlite3.connect(self.logs / "drained.db")) as kept,
            ):
                db.backup(kept)
        self._check()
        self._errors()
        return self.outcome

    def _errors(self) -> None:
        """What the actors died of: every one must be sluice's own error, never a driver's."""
        for event in self.events:
            if "died" in event:
                self.outcome.errors[event["died"]] += 1
                if not event["died"].startswith("sluice."):
                    self.outcome.violations.append(f"an actor died of {event['message']}")
        if not os.environ.get("SLUICE_CAMPAIGN_KEEP_LOGS"):
            shutil.rmtree(self.logs, ignore_errors=True)

    # --- after the faults ------------------------------------------------------------
    def _drain(self) -> None:
        """One connection recovers every dead session and finishes what is left."""
        with sluice.connect(self.url) as db:

            @db.task("echo", max_attempts=1000)
            def echo(task: Task) -> None:
                task.enqueue("jobs_out", task.body)

            moves = [("in", "out"), ("grouped", "out_grouped")]
            for source, target in moves + [(s, f"out_{s}") for s in SUBSCRIPTIONS]:
                while True:
                    with db.transaction() as tx:
                        taken = tx.dequeue(source, limit=500)
                        tx.enqueue_many(target, [m.body for m in taken])
                    if not taken:
                        break
            db.worker(tasks=["echo"]).run_until_idle()
            self._left(db, ("in", "grouped", "tasks.echo", *SUBSCRIPTIONS))
            # The files the dropbox consumers had claimed when killed, then those not taken.
            self.outcome.stored_by_dropbox = db.queue("dropped").stats()["ready"]
            for consumer in [name for name, role in ACTORS.items() if role == "dropbox"]:
                box = Dropbox(db, self.dropbox, consumer_id=consumer)
                box.recover("dropped")
            while box.ingest("dropped"):
                pass
        # The echo timers are due by the clocks of the runs that made them, stepped up to a
        # minute ahead, and this process's clock would hold still until it caught up with
        # them (sluice.clock): a clock ahead of every step makes them all due now, and
        # moved on, those of the orders processed here.
        clock = ManualClock(time.time() + CLOCK_AHEAD)
        with sluice.connect(self.url, clock=clock) as db:
            self.outcome.routed_by_run = db.queue("routed").stats()["ready"]
            while db.rules.run_until_idle().processed:
                clock.advance(ECHO_LONGEST)
            self._left(db, ("orders", "timers"))
        self._relay()

    def _relay(self) -> None:
        """What sluice run's relay has not forwarded goes to a sluice serve started once
        more, with no faults now."""
        self._start("s1")
        up = time.monotonic() + SERVE_START
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > up:
                    raise RuntimeError("sluice serve did not start for the drain") from None
                time.sleep(0.1)
        # On the drain's clock: the orders it routed were stamped ahead of the wall's.
        with sluice.connect(self.url, clock=OffsetClock(2 * CLOCK_AHEAD)) as db:
            self.outcome.relayed_by_run = db.queue("relayed").stats()["ready"]
            db.gateways.run_until_idle()
            self._left(db, ("relay", "relay_errors"))
        self._kill(self.actors["s1"])

    def _left(self, db: sluice.Database, queues: Iterable[str]) -> None:
        left = {name: stats for name in queues if any((stats := db.queue(name).stats()).values())}
        if left:
            self.outcome.violations.append(f"left after the drain: {left}")

    def _taken(self, queue: str) -> list[Message]:
        # On a clock ahead of every time stamped, the rules drain's too: everything is due.
        with sluice.connect(self.url, clock=OffsetClock(2 * CLOCK_AHEAD)) as db:
            messages: list[Message] = []
            while True:
                with db.transaction() as tx:
                    taken = tx.dequeue(queue, limit=1000)
                messages.extend(taken)
                if not taken:
                    return messages

    def _bodies(self, queue: str) -> list[dict[str, Any]]:
        bodies = [m.body for m in self._taken(queue)]
        self.outcome.checked[queue] = len(bodies)
        return bodies

    def _check(self) -> None:
        committed: dict[str, dict[tuple[str, int], dict[str, Any]]] = defaultdict(dict)
        for e in self.events:
            if "k" in e and "t" in e:
                committed[e["into"]][(e["w"], e["t"])] = e
        committing = {(e["w"], e["t"]) for e in self.events if e.get("committing")}
        self.outcome.reported_txs.update({queue: len(txs) for queue, txs in committed.items()})
        for queue in ("out", *(f"out_{s}" for s in SUBSCRIPTIONS)):
            bodies = self._bodies(queue)
            self.outcome.violations += check_stream(queue, bodies, committed["in"], committing)
        self.outcome.violations += check_stream(
            "out_grouped", self._bodies("out_grouped"), committed["in"], committing,
            order=lambda b: f"{b['w']} in {b['g']}",  # each group in order, whoever wrote it
        )  # fmt: skip
        self._check_dropbox(committed["dropped"], committing)
        jobs = [e for e in self.events if "job" in e]
        self.outcome.reported_jobs = len(jobs)
        self.outcome.violations += check_jobs(self.url, jobs, self._bodies("jobs_out"))
        routed = self._check_rules(committed["orders"], committing)
        self._check_http(committed["web_in"], committing, routed)
        relayed = self._bodies("relayed")
        self.outcome.violations += check_made("relayed", relayed, set(routed))
        self.outcome.violations += check_order("relayed", relayed)

    def _check_dropbox(
        self, committed: dict[tuple[str, int], dict[str, Any]], committing: set[tuple[str, int]]
    ) -> None:
        """Each file the filer renamed into target/ stored once and moved on to
        processed/; nothing left anywhere else. Two consumers take files side by side, each
        storing its own in a transaction of its own: their order across them is not
        promised (a single consumer's would be its taking order, DropboxMQ's)."""
        bodies = self._bodies("dropped")
        self.outcome.violations += check_stream(
            "dropped", bodies, committed, committing, order=None
        )
        incoming = self.dropbox / "dropped" / "incoming"
        for place in ("target", "processing", "error", "expired"):
            if left := sorted(os.listdir(incoming / place)):
                self.outcome.violations.append(f"dropped: files left in {place}/: {left[:5]}")
        processed = Counter(name.split("~", 1)[-1] for name in os.listdir(incoming / "processed"))
        if twice := [name for name, n in processed.items() if n > 1]:
            self.outcome.violations.append(f"dropped: files processed twice: {twice[:5]}")
        if len(processed) != len(bodies):
            self.outcome.violations.append(
                f"dropped: {len(processed)} files processed, {len(bodies)} messages stored"
            )

    def _check_rules(
        self, committed: dict[tuple[str, int], dict[str, Any]], committing: set[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """The rules' outputs (see the module docstring); returns the orders routed."""
        routed = self._taken("routed")
        self.outcome.checked["routed"] = len(routed)
        errors = self._bodies("rule_errors")
        # An order's outcome is its actions or its error message: by the order's id, the
        # orders' queue, whole transactions, in the writers' order.
        outcomes = [(m.properties["trigger_id"], m.body) for m in routed]
        outcomes += [(e["trigger"]["seq"], e["trigger"]["body"]) for e in errors]
        outcomes.sort(key=lambda outcome: int(outcome[0]))
        bad = check_stream("orders", [body for _, body in outcomes], committed, committing)
        bad += check_order("routed", [m.body for m in routed])
        bad += check_rule_errors(errors)
        made = {(m.body["w"], m.body["s"]): m.body for m in routed}
        bad += check_made("echoed", self._bodies("echoed"), {k for k, b in made.items() if b["e"]})
        counted = self._taken("counted")
        self.outcome.checked["counted"] = len(counted)
        bad += check_made(
            "counted", [m.body for m in counted], {k for k, b in made.items() if "n" in b}
        )
        for m in counted:
            order = made.get((m.body["w"], m.body["s"]))
            if order is not None and m.properties.get("n") != order["n"]:
                bad.append(f"counted: {m.body} has n {m.properties.get('n')}, not {order['n']}")
        self.outcome.violations += bad
        return made

    def _check_http(
        self,
        committed: dict[tuple[str, int], dict[str, Any]],
        committing: set[tuple[str, int]],
        routed: dict[tuple[str, int], dict[str, Any]],
    ) -> None:
        """What the HTTP clients put and took through sluice serve."""
        web = self._bodies("web_in")
        self.outcome.violations += check_stream("web_in", web, committed, committing)
        left = self._bodies("served")
        self.outcome.violations += check_served(left, self.events, set(routed))
        acked = {tuple(e["acked"]) for e in self.events if "acked" in e}
        self.outcome.resent = sum("resent" in e for e in self.events)
        self.outcome.checked["served acked"] = len(acked)
        for e in self.events:
            if "http" in e:
                answer = f"{e.get('path', '')} {e['http']} {e.get('error', '')}".strip()
                self.outcome.http[answer] += 1
                if e["http"] == 500:
                    self.outcome.violations.append(f"sluice serve answered 500: {e}")


_REQUEST_RAISED = ("Exception in ASGI application", "error while answering")
"""What uvicorn and sluice serve log before the traceback of a request that raised."""

_APPLICATION = "sluice-campaign"


def faketime_library() -> str:
    """libfaketime (Debian's package faketime), which the actors' clock steps need."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
    return str(found[0])


def stepped_clock(offset_file: Path) -> dict[str, str]:
    """The environment of a process whose wall clock is ``offset_file``'s offset (``+60``,
    read at every call), its monotonic clock left alone as NTP leaves it. Run its Python
    through CLOCKED, whose time.sleep works under the preload (campaign_clock)."""
    return {
        "LD_PRELOAD": faketime_library(),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _libpq_url(url: str) -> str:
    """The server part of a sluice PostgreSQL URL, for the campaign's own fault connection."""
    return url.split("?", 1)[0]


def actor_url(url: str) -> str:
    """The URL the actors use: on PostgreSQL, their connections are marked for the faults."""
    if not url.startswith("postgresql"):
        return url
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={_APPLICATION}"


def run_campaign(
    url: str,
    backend: str,
    seed: int,
    seconds: float,
    *,
    crash: Callable[[], None] | None = None,
    disk: Path | None = None,
    clock: bool = False,
) -> Outcome:
    port, logs = free_port(), Path(tempfile.mkdtemp(prefix="sluice-campaign-"))
    secret = prepare(url, port, logs / "dropbox", relay_batch=relay_batch(seed))
    campaign = Campaign(actor_url(url), backend, seed, seconds, secret=secret, port=port,
                        logs=logs, crash=crash, disk=disk, clock=clock)  # fmt: skip
    return campaign.run()


def free_port() -> int:
    """A port nobody listens on now, for ``sluice serve`` (the same at every restart)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def report(outcomes: list[Outcome]) -> str:
    out = [
        f"# Fault campaign, {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}. Actors at once: "
        + ", ".join(f"{n} ({r})" for n, r in ACTORS.items())
        + "; rules is `sluice run` (`--batch` 1, 7, 64 or 256 and `--workers` 1 or 2, drawn at"
        " each start) and forwards every routed order through its http gateway, server is"
        " `sluice serve` and http its clients (campaign_http.py), filer drops files into a"
        " dropbox and dropbox is `sluice dropbox` storing them."
        " Once sluice serve confirmed a first put, for the seconds given, a fault"
        " every 0.2-1.0 s: SIGKILL of a random actor (restarted at once); on"
        " PostgreSQL (a private cluster) a quarter of them terminate a random actor's server"
        " backend and 7 % crash the server (`pg_ctl stop -m immediate`, then start); on"
        " SQLite (the file on a tmpfs of 64 MB, or 1 MB a second of the run) 15 % fill the"
        " disk for 0.3-1.0 s and 10 % step every actor's wall clock (libfaketime) to an"
        " offset of -60..+60 s or back to 0. Checks: tests/reliability/campaign.py's"
        " docstring.",
        "",
        "| backend | seed | seconds | kills | died of a fault they met | backends terminated |"
        " server crashes | disk full | clock steps (s) | committed transactions reported |"
        " messages checked | jobs | violations |",
        "|---|---:|---:|---|---|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for o in outcomes:
        kills = ", ".join(f"{r} {n}" for r, n in sorted(o.kills.items()))
        exits = ", ".join(f"{r} {n}" for r, n in sorted(o.exits.items())) or "-"
        checked = ", ".join(f"{q} {n:,}" for q, n in o.checked.items())
        out.append(
            f"| {o.backend} | {o.seed} | {o.seconds:.0f} | {kills} | {exits} |"
            f" {o.terminated_backends} | {o.server_crashes} | {o.disk_full} |"
            f" {' '.join(f'{c:+d}' for c in o.clock_steps) or '-'} |"
            f" {', '.join(f'{q} {n:,}' for q, n in sorted(o.reported_txs.items()))} | {checked} |"
            f" {o.reported_jobs:,} |"
            f" {len(o.violations)} |"
        )
    out.append("")
    for o in outcomes:
        died = ", ".join(f"`{k}` {n}" for k, n in o.errors.most_common()) or "nothing"
        out.append(f"- {o.backend}: the actors that died of a fault died of {died}.")
        http = ", ".join(f"`{k}` {n}" for k, n in o.http.most_common()) or "none"
        out.append(
            f"- {o.backend}: sluice run routed {o.routed_by_run:,} of the"
            f" {o.checked.get('routed', 0):,} orders routed (the drain the rest)."
        )
        out.append(
            f"- {o.backend}: sluice run's gateway (batch {relay_batch(o.seed)}) forwarded"
            f" {o.relayed_by_run:,} of the {o.checked.get('relayed', 0):,} orders relayed;"
            " sluice dropbox stored"
            f" {o.stored_by_dropbox:,} of the {o.checked.get('dropped', 0):,} files"
            " (the drain the rest)."
        )
        up = "never" if o.served_after is None else f"after {o.served_after:.1f} s"
        out.append(
            f"- {o.backend}: sluice serve confirmed a first put {up}; puts sent again after"
            f" an HTTP client's restart: {o.resent}; the HTTP clients' failed requests: {http}."
        )
    for o in outcomes:
        for v in o.violations[:50]:
            out.append(f"- {o.backend} seed {o.seed}: {v}")
    return "\n".join(out) + "\n"


@contextlib.contextmanager
def small_disk(where: Path, size: str = "64m") -> Iterator[Path | None]:
    """A tmpfs of ``size`` mounted at ``where`` (a disk the campaign can fill), or None
    where this process may not mount one (not root)."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def private_postgres() -> PostgresServer:
    """A throwaway cluster the campaign may crash, never the machine's shared server:
    started, and destroyed at the end of its ``with``."""
    bindir = find_binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries (initdb) are installed")
    return PostgresServer(bindir)


def campaign_on(backend: str, seed: int, seconds: float, tmp: Path) -> Outcome:
    """One campaign on a fresh database: SQLite on a small disk it fills, or a private
    PostgreSQL server it crashes."""
    if backend == "sqlite":
        # Small enough to fill at once, large enough for the run's own growth (about
        # 0.25 MB a second with every actor at work; a 5-minute run outgrew 64 MB).
        with small_disk(tmp / "disk", size=f"{max(64, round(seconds))}m") as disk:
            where = disk or tmp
            url = f"sqlite:///{where}/campaign.db"
            return run_campaign(url, backend, seed, seconds, disk=disk, clock=True)
    with private_postgres() as server:
        return run_campaign(
            server.url, backend, seed, seconds, crash=lambda: server.restart("immediate")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    outcomes = []
    for backend in args.backend or ["sqlite", "postgresql"]:
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
            outcomes.append(campaign_on(backend, args.seed, args.seconds, Path(tmp)))
        print(report(outcomes[-1:]), flush=True)
    text = report(outcomes)
    path = args.out or Path(__file__).resolve().parents[2] / "bench" / "results" / (
        f"campaign-{time.strftime('%Y-%m-%d')}.md"
    )
    path.write_text(text)
    print(f"report written to {path}")
    if any(o.violations for o in outcomes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
