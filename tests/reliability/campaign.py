"""The fault campaign: actors at work on one database, killed and cut off at random.

Producers, movers, topic subscribers, a job submitter and job workers
(tests/reliability/campaign_child.py) run at once on a SQLite file or a PostgreSQL
schema. For ``seconds``, at random moments drawn from ``seed``, an actor is killed with
SIGKILL and started again, or (PostgreSQL) one of the actors' server backends is
terminated, which an actor meets as a failed statement or commit. Then every actor is
killed, one connection recovers them and drains what is left, and the checker compares
what the database holds with what the actors reported as committed:

- every reported transaction is in ``out`` and in each subscription's ``out_<sub>``, each
  message exactly once (nothing lost, nothing doubled);
- every transaction seen there is whole, was about to be committed when its producer said
  so, and was not one written to abort (nothing uncommitted visible);
- each writer's messages are in its order in ``out`` (isolation ``ordered`` over several
  movers) and in each subscription's output (one subscriber each);
- every reported job ran each of its tasks' effects exactly once, and the job's counts
  say all succeeded.

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
from sluice.jobs import Task
from tests.postgres_server import PostgresServer, find_binaries

CHILD = Path(__file__).with_name("campaign_child.py")
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
}


def prepare(url: str) -> None:
    """The queues, topic and subscriptions the actors use, made once before they start."""
    with sluice.connect(url) as db:
        db.create_queue("in", isolation="ordered")
        db.create_topic("news")
        for sub in SUBSCRIPTIONS:
            db.subscribe("news", sub)
            db.create_queue(f"out_{sub}")
        db.create_queue("out")
        db.create_queue("jobs_out")
        db.jobs.define("echo")


@dataclass
class Actor:
    name: str
    role: str
    process: subprocess.Popen[str]
    reader: threading.Thread


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
    reported_txs: int = 0
    reported_jobs: int = 0
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
        crash: Callable[[], None] | None = None,
        disk: Path | None = None,
        clock: bool = False,
    ) -> None:
        self.url, self.seed, self.seconds = url, seed, seconds
        self.crash, self.disk = crash, disk
        self.logs = Path(tempfile.mkdtemp(prefix="sluice-campaign-"))
        # The actors' wall clock, stepped by the campaign as NTP steps a host's: libfaketime
        # reads the offset from this file at every call (FAKETIME_NO_CACHE).
        self.clock = self.logs / "clock" if clock else None
        self.env = dict(os.environ)
        if self.clock is not None:
            self.clock.write_text("+0\n")
            self.env |= {
                "LD_PRELOAD": faketime_library(),
                "FAKETIME_TIMESTAMP_FILE": str(self.clock),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # sleeps and timeouts keep real time
            }
        self.rng = random.Random(seed)
        self.outcome = Outcome(backend, seed, seconds)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.actors: dict[str, Actor] = {}
        self._starts = 0

    # --- actors ----------------------------------------------------------------------
    def _start(self, name: str) -> None:
        role = ACTORS[name]
        self._starts += 1
        command = [sys.executable, str(CHILD), role, self.url, name]
        command.append(str(self.seed * 1000 + self._starts))
        # Its stderr (tracebacks, logged errors) is kept with SLUICE_CAMPAIGN_KEEP_LOGS=1.
        with (self.logs / f"{name}.{self._starts}.err").open("w") as err:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, env=self.env
            )
        reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        reader.start()
        self.actors[name] = Actor(name, role, process, reader)

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by SIGKILL
                continue
            with self._lock:
                self.events.append(event)

    def _kill(self, actor: Actor) -> None:
        actor.process.send_signal(signal.SIGKILL)
        self._reap(actor)

    @staticmethod
    def _reap(actor: Actor) -> None:
        actor.process.wait()
        actor.reader.join()
        assert actor.process.stdout is not None
        actor.process.stdout.close()

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
                self._reap(actor)
                self.outcome.exits[actor.role] += 1
                self._start(actor.name)

    def run(self) -> Outcome:
        for name in ACTORS:
            self._start(name)
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
        self._drain()
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

            for source, target in [("in", "out")] + [(s, f"out_{s}") for s in SUBSCRIPTIONS]:
                while True:
                    with db.transaction() as tx:
                        taken = tx.dequeue(source, limit=500)
                        tx.enqueue_many(target, [m.body for m in taken])
                    if not taken:
                        break
            db.worker(tasks=["echo"]).run_until_idle()
            left = {
                name: stats
                for name in ("in", "tasks.echo", *SUBSCRIPTIONS)
                if any((stats := db.queue(name).stats()).values())
            }
            if left:
                self.outcome.violations.append(f"left after the drain: {left}")

    def _taken(self, queue: str) -> list[dict[str, Any]]:
        with sluice.connect(self.url) as db:
            bodies: list[dict[str, Any]] = []
            while True:
                with db.transaction() as tx:
                    taken = tx.dequeue(queue, limit=1000)
                bodies.extend(m.body for m in taken)
                if not taken:
                    return bodies

    def _check(self) -> None:
        committed = {(e["w"], e["t"]): e for e in self.events if "k" in e and "t" in e}
        committing = {(e["w"], e["t"]) for e in self.events if e.get("committing")}
        self.outcome.reported_txs = len(committed)
        for queue in ("out", *(f"out_{s}" for s in SUBSCRIPTIONS)):
            bodies = self._taken(queue)
            self.outcome.checked[queue] = len(bodies)
            self.outcome.violations += check_stream(queue, bodies, committed, committing)
        jobs = [e for e in self.events if "job" in e]
        self.outcome.reported_jobs = len(jobs)
        done = self._taken("jobs_out")
        self.outcome.checked["jobs_out"] = len(done)
        self.outcome.violations += check_jobs(self.url, jobs, done)


def check_stream(
    queue: str,
    bodies: list[dict[str, Any]],
    committed: dict[tuple[str, int], dict[str, Any]],
    committing: set[tuple[str, int]],
) -> list[str]:
    """Exactly once, whole transactions, nothing aborted or unannounced, writer order."""
    bad: list[str] = []
    seen = Counter((b["w"], b["s"]) for b in bodies)
    bad += [f"{queue}: {key} delivered {n} times" for key, n in seen.items() if n > 1]
    per_tx: dict[tuple[str, int], set[int]] = defaultdict(set)
    for b in bodies:
        per_tx[(b["w"], b["t"])].add(b["s"])
        if b["x"]:
            bad.append(f"{queue}: {(b['w'], b['s'])} of an aborted transaction is visible")
    for key, seqs in per_tx.items():
        k = next(b["k"] for b in bodies if (b["w"], b["t"]) == key)
        if len(seqs) != k:
            bad.append(f"{queue}: transaction {key} seen in part: {len(seqs)} of {k}")
        if key not in committing:
            bad.append(f"{queue}: transaction {key} is visible but never reached its commit")
    for key, e in committed.items():
        missing = set(range(e["s"], e["s"] + e["k"])) - per_tx.get(key, set())
        if missing:
            bad.append(f"{queue}: committed transaction {key} lost {sorted(missing)}")
    last: dict[str, int] = {}
    for b in bodies:
        if b["s"] <= last.get(b["w"], -1):
            bad.append(f"{queue}: writer {b['w']} out of order: {b['s']} after {last[b['w']]}")
        last[b["w"]] = b["s"]
    return bad


def check_jobs(url: str, jobs: Iterable[dict[str, Any]], done: list[dict[str, Any]]) -> list[str]:
    """Each reported job's tasks' effects exactly once, and its counts all succeeded."""
    bad: list[str] = []
    seen = Counter((b["w"], b["s"]) for b in done)
    bad += [f"jobs_out: task {key} took effect {n} times" for key, n in seen.items() if n > 1]
    with sluice.connect(url) as db:
        for e in jobs:
            missing = [s for s in range(e["s"], e["s"] + e["k"]) if (e["w"], s) not in seen]
            if missing:
                bad.append(f"job {e['job']}: tasks {missing} never took effect")
            status = db.jobs.get(e["job"])
            if (status.total, status.succeeded) != (e["k"], e["k"]):
                bad.append(
                    f"job {e['job']}: {status.succeeded} of {status.total} succeeded,"
                    f" {e['k']} submitted"
                )
    return bad


_APPLICATION = "sluice-campaign"


def faketime_library() -> str:
    """libfaketime (Debian's package faketime), which the actors' clock steps need."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
    return str(found[0])


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
    prepare(url)
    campaign = Campaign(actor_url(url), backend, seed, seconds, crash=crash, disk=disk, clock=clock)
    return campaign.run()


def report(outcomes: list[Outcome]) -> str:
    out = [
        f"# Fault campaign, {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}. Actors at once: "
        + ", ".join(f"{n} ({r})" for n, r in ACTORS.items())
        + ". A fault every 0.2-1.0 s: SIGKILL of a random actor (restarted at once); on"
        " PostgreSQL (a private cluster) a quarter of them terminate a random actor's server"
        " backend and 7 % crash the server (`pg_ctl stop -m immediate`, then start); on"
        " SQLite (the file on a 64 MB tmpfs) 15 % fill the disk for 0.3-1.0 s and 10 % step"
        " every actor's wall clock (libfaketime) to an offset of -60..+60 s or back to 0. Checks:"
        " tests/reliability/campaign.py's docstring.",
        "",
        "| backend | seed | seconds | kills | died of a fault they met | backends terminated |"
        " server crashes | disk full | clock steps (s) | committed transactions reported |"
        " messages checked | jobs | violations |",
        "|---|---:|---:|---|---|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for o in outcomes:
        kills = ", ".join(f"{r} {n}" for r, n in sorted(o.kills.items()))
        exits = ", ".join(f"{r} {n}" for r, n in sorted(o.exits.items())) or "-"
        checked = ", ".join(f"{q} {n:,}" for q, n in o.checked.items())
        out.append(
            f"| {o.backend} | {o.seed} | {o.seconds:.0f} | {kills} | {exits} |"
            f" {o.terminated_backends} | {o.server_crashes} | {o.disk_full} |"
            f" {' '.join(f'{c:+d}' for c in o.clock_steps) or '-'} |"
            f" {o.reported_txs:,} | {checked} | {o.reported_jobs:,} |"
            f" {len(o.violations)} |"
        )
    out.append("")
    for o in outcomes:
        died = ", ".join(f"`{k}` {n}" for k, n in o.errors.most_common()) or "nothing"
        out.append(f"- {o.backend}: the actors that died of a fault died of {died}.")
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


@contextlib.contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    """A throwaway cluster the campaign may crash: never the machine's shared server."""
    bindir = find_binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries (initdb) are installed")
    server = PostgresServer(bindir)
    try:
        yield server
    finally:
        server.destroy()


def campaign_on(backend: str, seed: int, seconds: float, tmp: Path) -> Outcome:
    """One campaign on a fresh database: SQLite on a small disk it fills, or a private
    PostgreSQL server it crashes."""
    if backend == "sqlite":
        with small_disk(tmp / "disk") as disk:
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
