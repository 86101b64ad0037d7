"""A campaign actor: python -m tests.reliability.campaign_child ROLE URL NAME SEED.

Every actor works until it is killed, and reports on stdout, one JSON object a line,
only what it knows to be committed (after ``commit()`` returned): the campaign's checker
(tests/reliability/campaign.py) compares those reports with what the database holds.
A report can be lost (killed between the commit and the print); a commit can never be
reported without having happened. Roles:

- producer: transactions of 1-8 messages to the queue ``in``, the topic ``news`` and the
  queue ``grouped`` at once, in ``grouped`` under one of GROUPS (each body's ``g``); about
  one in seven is written to abort (its bodies say so: ``x`` true) and aborted.
- orderer: the same to the queue ``orders``, whose rules ``sluice run`` runs (the
  campaign's RULES); each body also says whether the rules echo it back after ``after``
  seconds (``e``) and carries an ``n`` for a property of type integer: none, a whole
  number, or now and then a fraction, which the rules must turn into an error message.
- mover: takes from ``in`` (isolation ``ordered``: a writer's messages in order, one
  holder at a time) and enqueues each to ``out`` in the same transaction, or from
  ``grouped`` (a group's messages in order, one holder at a time) to ``out_grouped``;
  some abort.
- subscriber SUB: the same from the subscription SUB of ``news`` to ``out_SUB``.
- submitter: jobs of 1-5 ``echo`` tasks.
- worker: runs ``echo`` tasks; each task enqueues its body to ``jobs_out``, which commits
  with the task's outcome or not at all.
- filer: a program that knows nothing of sluice, dropping one-message files into the
  dropbox of the queue ``dropped`` (URL is then the dropbox root): each written in
  ``working/`` and renamed into ``target/``, its commit.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import sluice
from sluice.jobs import Task
from tests.reliability.campaign_actor import run, say

GROUPS = ("g0", "g1", "g2")
LEASE = 2.0  # a silent session is recovered after this; a dead local pid at once
# Pacing waits on an Event, not time.sleep: under libfaketime (the campaign's clock steps)
# time.sleep's absolute-deadline call fails with EINVAL, a flaw of the preload, not sluice's.
# (campaign_clock now mends time.sleep for every actor, sluice's own sleeps included.)
_pause = threading.Event().wait


def producer(
    db: sluice.Database,
    me: str,
    rng: random.Random,
    into: tuple[str, ...],
    extra: Callable[[random.Random], dict[str, object]] | None = None,
) -> None:
    seq = 0
    for txn in range(1, 1 << 62):
        k, abort, group = rng.randint(1, 8), rng.random() < 0.15, rng.choice(GROUPS)
        bodies = [
            {"w": me, "s": seq + i, "t": txn, "k": k, "x": abort, "g": group}
            | (extra(rng) if extra else {})
            for i in range(k)
        ]
        seq += k
        with db.transaction() as tx:
            for queue in into:
                tx.enqueue_many(queue, bodies, group=group if queue == "grouped" else None)
            if abort:
                tx.abort()
            else:  # a transaction never announced here must never be seen
                say(w=me, t=txn, committing=True)
        if not abort:
            say(w=me, t=txn, s=bodies[0]["s"], k=k, into=into[0])
        _pause(rng.uniform(0.0, 0.02))  # pacing: a producer, not a flood


def order(rng: random.Random) -> dict[str, object]:
    """What the rules look at in an order besides who wrote it (see the campaign's RULES)."""
    fields: dict[str, object] = {"e": rng.random() < 0.3, "after": round(rng.uniform(0.1, 1), 3)}
    if rng.random() < 0.5:
        fields["n"] = rng.randint(0, 99) + (0.5 if rng.random() < 0.1 else 0)
    return fields


def mover(db: sluice.Database, pairs: list[tuple[str, str]], rng: random.Random) -> None:
    while True:
        source, target = rng.choice(pairs)
        with db.transaction() as tx:
            taken = tx.dequeue(source, limit=rng.randint(1, 10), wait=0.5)
            if not taken:
                continue
            tx.enqueue_many(target, [m.body for m in taken])
            if rng.random() < 0.1:
                tx.abort()
                continue
        say(moved=len(taken))


def submitter(db: sluice.Database, me: str, rng: random.Random) -> None:
    seq = 0
    for n in range(1, 1 << 62):
        k = rng.randint(1, 5)
        bodies = [{"w": me, "s": seq + i} for i in range(k)]
        seq += k
        job = db.jobs.submit(f"{me}-{n}", [("echo", b) for b in bodies])
        say(job=job, w=me, s=bodies[0]["s"], k=k)
        _pause(rng.uniform(0.0, 0.05))


def filer(root: Path, me: str, rng: random.Random) -> None:
    incoming = root / "dropped" / "incoming"
    for s in range(1 << 62):
        # DropboxMQ's name: priority 4, an id whose "timestamp" is the writer's sequence (the
        # order files are taken in) and whose number is the writer's pid, class M (JSON).
        name = f"4.{s:016d}-{os.getpid()}.M"
        body = {"w": me, "s": s, "t": s, "k": 1, "x": False}
        (incoming / "working" / name).write_text(json.dumps(body))
        say(w=me, t=s, committing=True)
        os.rename(incoming / "working" / name, incoming / "target" / name)
        say(w=me, t=s, s=s, k=1, into="dropped")
        _pause(rng.uniform(0.0, 0.02))


def main() -> None:
    role, url, name, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    if role == "filer":
        me = f"{name}.{os.getpid()}"
        say(ready=me)
        filer(Path(url), me, rng)
        return
    db = sluice.connect(url, lease=LEASE)

    @db.task("echo", max_attempts=1000)
    def echo(task: Task) -> None:
        task.enqueue("jobs_out", task.body)

    me = f"{name}.{os.getpid()}"  # one writer per incarnation: a restart is a new session
    say(ready=me)
    if role == "producer":
        producer(db, me, rng, ("in", "news", "grouped"))
    elif role == "orderer":
        producer(db, me, rng, ("orders",), order)
    elif role == "mover":
        mover(db, [("in", "out"), ("grouped", "out_grouped")], rng)
    elif role == "subscriber":
        mover(db, [(name, f"out_{name}")], rng)
    elif role == "submitter":
        submitter(db, me, rng)
    elif role == "worker":
        db.worker(tasks=["echo"], poll=0.05).run()
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    run(main)
