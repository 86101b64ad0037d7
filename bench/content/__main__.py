"""Content-aware queuing at scale: selective dequeue, priority functions, and the plain-queue way.

Run: ``python -m bench content`` (``--quick`` for a smoke run of a few seconds). Per backend (a
SQLite file in the temp directory; PostgreSQL at 127.0.0.1:5432 in the dedicated schema
``bench_content``, dropped at the end), on a queue of ``--messages`` JPMQ ``OrderMessage``
orders (the type of ``sluice demo``) with the priority function ``sum(body.lines, l -> l.price
* l.amout)`` and the declared property ``customer`` = ``body.customer.name``:

1. selective dequeue on the declared property: ``tx.dequeue(q, where="customer = '<c>'",
   limit=1)`` in its own transaction that commits (the message is consumed), for random
   existing customers; p50/p90/p99. Then the same with ``order_by=["body.total DESC"]``.
2. selective dequeue on undeclared JSON paths, evaluated row by row by the database: a common
   value (``body.region = 'north'``) and a rare one (``body.id = <one id>``); fewer samples.
3. enqueue throughput, ``put_many`` batches of 100, into fresh queues: type-checked with and
   without the priority function, and untyped with and without it for reference. The variants
   are interleaved in rounds so that drift spreads over all of them.
4. the plain-queue alternative for "a message of customer X": one transaction that dequeues in
   delivery order (batches of 100), tests the customer in Python, and re-enqueues every
   non-matching message, until a match; on an untyped queue holding the same orders.

Every answer is checked (the customer, the highest total, the region, the id) against a ledger
of what each queue still holds. Writes ``bench/results/content-<date>.md`` (``--quick``: a file
in the temp directory unless ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sluice
from bench.content.report import render
from bench.content.workload import (
    BACKENDS,
    DEFAULT_PG_URL,
    ORDER_BY,
    PLAIN_QUEUE,
    PRIORITY,
    PROPERTY,
    QUEUE,
    THROUGHPUT,
    TYPE,
    BackendRun,
    Ledger,
    Settings,
    Timed,
    customer_name,
    order_batches,
)
from bench.harness import (
    MEMORY_FS,
    SchemaGuard,
    add_common_options,
    drop_schema,
    filesystem_of,
    host_facts,
    is_postgres,
    one_line,
    package_versions,
    pg_conninfo,
    pg_facts,
    source_revision,
    url_schema,
    write_report,
)
from sluice.demo.orders import ORDER_TYPE


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _phase(run: BackendRun, name: str) -> Iterator[None]:
    start = time.perf_counter()
    load_before = os.getloadavg()[0]
    _log(f"[{run.backend}] {name} ...")
    try:
        yield
    finally:
        took = time.perf_counter() - start
        run.phases.append((name, took, load_before, os.getloadavg()[0]))
        _log(f"[{run.backend}] {name}: {took:.1f} s")
        if is_postgres(run.url):
            state = _pg_state(run.url)
            run.pg_states.append((name, state))
            _log(f"[{run.backend}]   {state}")


# ------------------------------------------------------------------------------ durability, plans


def _sqlite_durability(db: sluice.Database) -> str:
    """Journal mode and synchronous level read back from sluice's own live connection."""
    backend: Any = db.backend
    try:
        with backend._lock:
            conn: sqlite3.Connection = backend._conn
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper()
            level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        read = f"{journal}, synchronous {names.get(level, str(level))} (read back)"
    except Exception as exc:  # private attributes: say what is known instead
        read = f"synchronous {backend.settings.synchronous} (as set; not read back: {exc})"
    group = "on" if backend.settings.group_commit else "off"
    return (
        f"{read}; group commit {group}; sluice commits claims at synchronous NORMAL by design"
        " (no fsync), enqueues and acknowledgements with fsync"
    )


def _pg_durability(url: str) -> str:
    import psycopg

    names = ("fsync", "synchronous_commit", "autovacuum", "wal_sync_method")
    with psycopg.connect(pg_conninfo(url), autocommit=True, connect_timeout=10) as conn:
        values = [f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names]  # type: ignore[index]
    return (
        ", ".join(values) + " (server settings, read back); sluice commits claims with"
        " synchronous_commit off by design, enqueues and acknowledgements wait for the WAL flush"
    )


def _claim_plan(db: sluice.Database, url: str, where: str, order_by: Sequence[str]) -> list[str]:
    """The plan of sluice's own claim statement for a selection (one message).

    Reaches into sluice's private query cache, so any failure is reported as a line of text.
    """
    try:
        select = db.context.content(QUEUE).selection(where, list(order_by) or None)
        backend: Any = db.backend
        params = {"session": 0, "tx": 0, "queue": QUEUE, "limit": 1, "now": time.time()}
        if backend.dialect == "sqlite":
            query, extra = backend._selected("claim_one", select)
            with backend._read() as conn:
                rows = conn.execute("EXPLAIN QUERY PLAN " + query, params | extra).fetchall()
            return [str(r[3]) for r in rows]
        import psycopg

        name, extra = backend._selected("claim", select)
        with psycopg.connect(pg_conninfo(url), autocommit=True, connect_timeout=10) as conn:
            cur = psycopg.ClientCursor(conn)
            cur.execute("EXPLAIN " + backend._q[name], params | extra)
            return _pick_subplan([str(r[0]) for r in cur.fetchall()])
    except Exception as exc:
        return [f"plan not available: {one_line(exc)}"]


def _pg_state(url: str) -> str:
    """Live and dead rows in the schema, and the oldest transaction holding back vacuum."""
    try:
        import psycopg

        schema = url_schema(url) or "sluice"
        with psycopg.connect(pg_conninfo(url), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0)"
                " FROM pg_stat_user_tables WHERE schemaname = %s",
                (schema,),
            ).fetchone()
            live, dead = row if row else (0, 0)
            old = conn.execute(
                "SELECT pid, datname, application_name, state,"
                " extract(epoch FROM now() - xact_start), age(backend_xmin)"
                " FROM pg_stat_activity WHERE backend_xmin IS NOT NULL"
                " AND pid <> pg_backend_pid() ORDER BY age(backend_xmin) DESC LIMIT 1"
            ).fetchone()
    except Exception as exc:
        return f"state not available: {one_line(exc)}"
    text = f"live rows {int(live):,}, dead rows {int(dead):,}"
    if old is None:
        return text + "; no other transaction holds an xmin"
    pid, db, app, state, seconds, age = old
    return (
        f"{text}; oldest xmin held by pid {pid} (database {db}, application {app!r}, {state},"
        f" transaction open {float(seconds or 0):,.1f} s, xmin age {age:,} transactions)"
    )


def _claim_executed(db: sluice.Database, url: str, where: str) -> list[str]:
    """PostgreSQL: EXPLAIN (ANALYZE, BUFFERS) of sluice's claim statement, rolled back."""
    try:
        import psycopg

        select = db.context.content(QUEUE).selection(where, None)
        backend: Any = db.backend
        params = {"session": 0, "tx": 0, "queue": QUEUE, "limit": 1, "now": time.time()}
        name, extra = backend._selected("claim", select)
        with psycopg.connect(pg_conninfo(url), connect_timeout=10) as conn:
            cur = psycopg.ClientCursor(conn)
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + backend._q[name], params | extra)
            lines = [str(r[0]) for r in cur.fetchall()]
            conn.rollback()
    except Exception as exc:
        return [f"plan not available: {one_line(exc)}"]
    return [line if len(line) <= 200 else line[:197] + "..." for line in lines]


def _pick_subplan(lines: list[str]) -> list[str]:
    """The part of a PostgreSQL claim plan that picks the row, with long filters cut short."""
    start = next((i for i, line in enumerate(lines) if "Subquery Scan on pick" in line), None)
    if start is None:
        return lines
    depth = len(lines[start]) - len(lines[start].lstrip())
    picked = [lines[start]]
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= depth:
            break
        picked.append(line)
    indent = len(picked[0]) - len(picked[0].lstrip())
    return [line[indent:] if len(line) <= 200 else line[indent:197] + "..." for line in picked]


_INDEX_IN_PLAN = (
    re.compile(r"Index (?:Only )?Scan (?:Backward )?using (\S+) on messages"),  # PostgreSQL
    re.compile(r"Seq Scan on (messages\S*)"),
    re.compile(r"SEARCH m USING (?:COVERING )?INDEX (\S+)"),  # SQLite
    re.compile(r"SCAN (m)\b"),
)


def _index_survey(
    db: sluice.Database, url: str, customers: Sequence[int]
) -> tuple[dict[str, int], int]:
    """How often each index (per partition on PostgreSQL) serves ``customer = '<c>'`` claims."""
    counts: Counter[str] = Counter()
    for k in customers:
        for line in _claim_plan(db, url, f"customer = '{customer_name(k)}'", []):
            for pattern in _INDEX_IN_PLAN:
                found = pattern.search(line)
                if found:
                    counts[found.group(1)] += 1
                    break
    return dict(sorted(counts.items())), len(customers)


def _survey_problems(run: BackendRun, when: str, counts: dict[str, int], total: int) -> None:
    for index, used in counts.items():
        if "t1" not in index:
            run.problems.append(
                f"{when}: the claim for `customer = '<c>'` read `{index}` (delivery order, the"
                f" property tested row by row) in {used} of {total} plans, instead of the"
                " property's index: that part of the queue is scanned"
            )


def _analyze(url: str) -> None:
    import psycopg

    schema = url_schema(url) or "sluice"
    quoted = '"' + schema.replace('"', '""') + '"'
    with psycopg.connect(pg_conninfo(url), autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"ANALYZE {quoted}.messages")


# ------------------------------------------------------------------------------ the phases


def _create(db: sluice.Database) -> None:
    db.create_type(jpmq=ORDER_TYPE)
    db.create_queue(QUEUE, types=[TYPE], priority={TYPE: PRIORITY})
    db.create_property(*PROPERTY, queues=[QUEUE])
    db.create_queue(PLAIN_QUEUE)


def _load(db: sluice.Database, run: BackendRun, s: Settings, ledger: Ledger) -> None:
    """The typed queue (type-checked for the first ``typed_load``) and the plain queue."""
    typed, plain = db.queue(QUEUE), db.queue(PLAIN_QUEUE)
    t_typed = t_bulk = t_plain = 0.0
    n_typed = n_bulk = n_plain = 0
    suspended = False
    for batch in order_batches(0, s.n, s.load_batch, s.seed):
        if n_typed < s.typed_load:
            start = time.perf_counter()
            typed.put_many(batch)
            t_typed += time.perf_counter() - start
            n_typed += len(batch)
        else:
            if not suspended:
                # The type check costs ~0.3 ms a message (jsonschema); the rest of the orders
                # (the same generator's, all conforming) go in with it switched off. The
                # priority function and the property are still computed by sluice.
                db.alter_queue(QUEUE, types=[], priority={"*": PRIORITY})
                suspended = True
            start = time.perf_counter()
            typed.put_many(batch)
            t_bulk += time.perf_counter() - start
            n_bulk += len(batch)
        in_plain = n_plain < s.plain_n
        if in_plain:
            start = time.perf_counter()
            plain.put_many(batch)
            t_plain += time.perf_counter() - start
            n_plain += len(batch)
        for body in batch:
            ledger.add(body, plain=in_plain)
        done = n_typed + n_bulk
        if done % 100_000 < s.load_batch:
            _log(f"[{run.backend}]   loaded {done:,}")
    if suspended:
        db.alter_queue(QUEUE, types=[TYPE], priority={TYPE: PRIORITY})
    run.load.append(("typed queue, type-checked", n_typed, t_typed))
    if n_bulk:
        run.load.append(("typed queue, type check suspended", n_bulk, t_bulk))
    run.load.append(("plain queue (untyped, nothing declared)", n_plain, t_plain))
    stats = typed.stats()
    if stats["ready"] != s.n:
        run.problems.append(f"after loading, {QUEUE} has {stats} ready, expected {s.n:,}")


def _selective(
    db: sluice.Database,
    run: BackendRun,
    s: Settings,
    ledger: Ledger,
    *,
    rng: random.Random,
    customers: list[int],
    order_by: Sequence[str],
) -> Timed:
    """Item 1: one message of a customer per transaction, committed."""
    out = Timed("customer" + (", order_by" if order_by else ""))
    wrong = 0
    for drawn in customers:
        k = drawn
        while not ledger.by_customer[k]:  # consumed by an earlier sample: take another one
            k = ledger.customer[ledger.random_alive(rng)]
        where = f"customer = '{customer_name(k)}'"
        run.wheres.add(where)
        start = time.perf_counter()
        with db.transaction() as tx:
            t0 = time.perf_counter()
            msgs = tx.dequeue(QUEUE, where=where, order_by=list(order_by) or None, limit=1)
            t1 = time.perf_counter()
        end = time.perf_counter()
        out.samples.append(end - start)
        out.claim.append(t1 - t0)
        if len(msgs) != 1:
            wrong += 1
            if wrong <= 3:
                run.problems.append(f"`{where}` returned {len(msgs)} messages, expected 1")
            continue
        body = msgs[0].body
        number = int(body["id"])
        best = max(ledger.total[i] for i in ledger.by_customer[k])
        ok = number in ledger.by_customer[k] and body["customer"]["name"] == customer_name(k)
        if order_by and body["total"] != best:
            ok = False
        if not ok:
            wrong += 1
            if wrong <= 3:
                run.problems.append(
                    f"`{where}`{' order_by ' + str(list(order_by)) if order_by else ''}"
                    f" returned order {number} (customer {body['customer']['name']!r}, total"
                    f" {body['total']}; highest total left {best})"
                )
        ledger.consume(number)
    if wrong:
        out.note = f"{wrong} wrong answers"
    return out


def _scan(
    db: sluice.Database,
    run: BackendRun,
    s: Settings,
    ledger: Ledger,
    rng: random.Random,
    *,
    rare: bool,
) -> Timed:
    """Item 2: a selection on an undeclared path; stops at ``scan_samples`` or the budget."""
    label = "body.id = <one id>" if rare else "body.region = 'north'"
    out = Timed(label)
    deadline = time.perf_counter() + s.scan_budget
    count = s.scan_samples if rare else max(s.scan_samples, 50)
    for _ in range(count):
        if len(out.samples) >= 3 and time.perf_counter() > deadline:
            out.note = f"stopped after {len(out.samples)} samples ({s.scan_budget:g} s budget)"
            break
        wanted = ledger.random_alive(rng)
        where = f"body.id = {wanted}" if rare else "body.region = 'north'"
        run.wheres.add(where)
        start = time.perf_counter()
        with db.transaction() as tx:
            t0 = time.perf_counter()
            msgs = tx.dequeue(QUEUE, where=where, limit=1)
            t1 = time.perf_counter()
        out.samples.append(time.perf_counter() - start)
        out.claim.append(t1 - t0)
        if len(msgs) != 1:
            run.problems.append(f"`{where}` returned {len(msgs)} messages, expected 1")
            break
        body = msgs[0].body
        number = int(body["id"])
        if (rare and number != wanted) or (not rare and body["region"] != "north"):
            run.problems.append(f"`{where}` returned order {number} (region {body['region']})")
        if ledger.alive[number]:
            ledger.consume(number)
        else:
            run.problems.append(f"`{where}` returned order {number}, consumed before")
    return out


def _alternative(
    db: sluice.Database, run: BackendRun, s: Settings, ledger: Ledger, customers: list[int]
) -> Timed:
    """Item 4: without selective dequeue, scan in delivery order and put back the others."""
    out = Timed("plain queue: scan and re-enqueue")
    deadline = time.perf_counter() + s.alt_budget
    for k in customers:
        if len(out.samples) >= s.alt_samples:
            break
        if len(out.samples) >= 3 and time.perf_counter() > deadline:
            out.note = f"stopped after {len(out.samples)} samples ({s.alt_budget:g} s budget)"
            break
        if ledger.plain_count[k] == 0:
            continue
        name = customer_name(k)
        start = time.perf_counter()
        scanned = 0
        found: sluice.Message | None = None
        with db.transaction() as tx:
            keep: list[Any] = []
            while found is None:
                msgs = tx.dequeue(PLAIN_QUEUE, limit=s.alt_batch)
                if not msgs:
                    break
                for i, m in enumerate(msgs):
                    scanned += 1
                    if m.body["customer"]["name"] == name:
                        found = m
                        keep.extend(other.body for other in msgs[i + 1 :])
                        break
                    keep.append(m.body)
            tx.enqueue_many(PLAIN_QUEUE, keep)
        out.samples.append(time.perf_counter() - start)
        out.scanned.append(scanned)
        if found is None:
            run.problems.append(f"plain queue: no message of {name} found in {scanned:,}")
        else:
            ledger.plain_count[k] -= 1
    left = db.queue(PLAIN_QUEUE).stats()["ready"]
    expected = int(sum(ledger.plain_count))
    if left != expected:
        run.problems.append(
            f"plain queue holds {left:,} messages after item 4, expected {expected:,}"
        )
    return out


def _throughput(db: sluice.Database, run: BackendRun, s: Settings) -> None:
    """Item 3: put_many batches into fresh queues, the variants interleaved in rounds."""
    names = {label: f"tp_{i}" for i, (label, _) in enumerate(THROUGHPUT)}
    for label, options in THROUGHPUT:
        db.create_queue(names[label], **options)
    bodies = [b for batch in order_batches(s.n, s.throughput_n, 5_000, s.seed + 1) for b in batch]
    batches = [
        bodies[i : i + s.throughput_batch] for i in range(0, len(bodies), s.throughput_batch)
    ]
    per_round = max(1, 5_000 // s.throughput_batch)
    spent = dict.fromkeys(names, 0.0)
    for r in range(0, len(batches), per_round):
        for label, queue in names.items():
            q = db.queue(queue)
            start = time.perf_counter()
            for batch in batches[r : r + per_round]:
                q.put_many(batch)
            spent[label] += time.perf_counter() - start
    for label, queue in names.items():
        run.throughput[label] = (len(bodies), spent[label])
        ready = db.queue(queue).stats()["ready"]
        if ready != len(bodies):
            run.problems.append(f"{queue} ({label}) holds {ready:,}, expected {len(bodies):,}")
    for queue in names.values():
        db.drop_queue(queue)


def _inspect(db: sluice.Database, run: BackendRun, url: str, surveyed: Sequence[int]) -> None:
    """The plans of the claim statements measured, and which index the property claims read."""
    for label, where, order in (
        ("customer = '<c>'", "customer = 'Smith'", []),
        ("customer = '<c>', order_by body.total DESC", "customer = 'Smith'", ORDER_BY),
        ("body.region = 'north'", "body.region = 'north'", []),
        ("body.id = <id>", "body.id = 123456", []),
    ):
        run.plans.append((label, _claim_plan(db, url, where, order)))
    counts, total = _index_survey(db, url, surveyed)
    run.surveys.append(("after loading", counts, total))
    _survey_problems(run, "after loading", counts, total)


def _after_analyze(
    db: sluice.Database,
    run: BackendRun,
    s: Settings,
    ledger: Ledger,
    *,
    rng: random.Random,
    surveyed: Sequence[int],
) -> None:
    """PostgreSQL: item 1 again once the planner has statistics (autovacuum may be off)."""
    _analyze(run.url)
    counts, total = _index_survey(db, run.url, surveyed)
    run.surveys.append(("after ANALYZE", counts, total))
    _survey_problems(run, "after ANALYZE", counts, total)
    for order_by in ([], ORDER_BY):
        again = [ledger.customer[ledger.random_alive(rng)] for _ in range(s.samples)]
        run.analyzed.append(
            _selective(db, run, s, ledger, rng=rng, customers=again, order_by=order_by)
        )
    where = f"customer = '{customer_name(ledger.customer[ledger.random_alive(rng)])}'"
    run.executed_plans.append(
        (f"{where}, after ANALYZE and item 1 again", _claim_executed(db, run.url, where))
    )


def _final_checks(db: sluice.Database, run: BackendRun, ledger: Ledger) -> None:
    stats = db.queue(QUEUE).stats()
    left = int(sum(ledger.alive))
    if stats["ready"] != left:
        run.problems.append(f"{QUEUE} holds {stats['ready']:,} at the end, expected {left:,}")
    selections = getattr(db.backend, "_selections", None)
    queries = getattr(db.backend, "_q", None)
    if isinstance(selections, dict) and isinstance(queries, dict):
        run.notes.append(
            f"after {run.distinct_where:,} distinct where texts, sluice's backend holds"
            f" {len(selections):,} compiled selections and {len(queries):,} query texts"
            " (private caches, read for this report)"
        )


def _measure(db: sluice.Database, run: BackendRun, s: Settings) -> None:
    rng = random.Random(s.seed + 2)
    ledger = Ledger(s.n)
    _create(db)
    with _phase(run, "load"):
        _load(db, run, s, ledger)
    # Customers weighted by their share of the queue; Smith first.
    customers = [0] + [ledger.customer[ledger.random_alive(rng)] for _ in range(s.samples - 1)]
    surveyed = [ledger.customer[ledger.random_alive(rng)] for _ in range(50)]
    _inspect(db, run, run.url, surveyed)
    with _phase(run, "item 1: selective dequeue on the declared property"):
        run.selective = _selective(db, run, s, ledger, rng=rng, customers=customers, order_by=[])
    with _phase(run, "item 1: the same, order_by body.total DESC"):
        more = [ledger.customer[ledger.random_alive(rng)] for _ in range(s.samples)]
        run.ordered = _selective(db, run, s, ledger, rng=rng, customers=more, order_by=ORDER_BY)
    if is_postgres(run.url):
        where = f"customer = '{customer_name(ledger.customer[ledger.random_alive(rng)])}'"
        run.executed_plans.append((f"{where}, after item 1", _claim_executed(db, run.url, where)))
        with _phase(run, "item 1 again after ANALYZE"):
            _after_analyze(db, run, s, ledger, rng=rng, surveyed=surveyed)
    with _phase(run, "item 2: undeclared JSON paths"):
        run.scans.append(_scan(db, run, s, ledger, rng, rare=False))
        run.scans.append(_scan(db, run, s, ledger, rng, rare=True))
    with _phase(run, "item 4: plain-queue alternative"):
        run.alternative = _alternative(db, run, s, ledger, customers)
    with _phase(run, "item 3: enqueue throughput"):
        _throughput(db, run, s)
    _final_checks(db, run, ledger)


def run_backend(backend: str, url: str, s: Settings) -> BackendRun:
    run = BackendRun(backend, url, s.n, min(s.plain_n, s.n))
    db = sluice.connect(url)
    try:
        run.durability = _pg_durability(url) if is_postgres(url) else _sqlite_durability(db)
        _measure(db, run, s)
    except Exception as exc:
        run.error = one_line(exc)
        _log(f"[{backend}] error: {run.error}")
        import traceback

        traceback.print_exc(file=sys.stderr)
    finally:
        db.close()
    return run


# ------------------------------------------------------------------------------ main


def _sqlite_run(s: Settings, tmp_root: Path) -> BackendRun:
    with tempfile.TemporaryDirectory(prefix="bench-content-", dir=tmp_root) as tmp:
        path = Path(tmp) / "content.db"
        run = run_backend("sqlite", f"sqlite:///{path}", s)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        device, mount, fstype = filesystem_of(Path(tmp))
        run.storage = (
            f"{tmp_root} on {device} ({fstype}, mounted at {mount}); file + WAL at the end:"
            f" {size / 2**20:,.0f} MiB"
        )
        if fstype in MEMORY_FS:
            run.notes.append(f"{fstype}: fsync costs nothing there; use --tmp-dir on disk")
    return run


def _pg_run(s: Settings, url: str) -> BackendRun:
    schema = url_schema(url)
    guard = SchemaGuard(url)
    if guard.preexisting and schema and schema.startswith("bench_content"):
        drop_schema(pg_conninfo(url), schema)  # left over from an interrupted run
        guard.preexisting = False
    elif guard.preexisting:
        run = BackendRun("postgresql", url, s.n, s.plain_n)
        run.error = f"schema {schema!r} exists already; pass a URL naming a new one"
        return run
    try:
        run = run_backend("postgresql", url, s)
    finally:
        note = guard.cleanup()
    if note:
        run.notes.append(note)
    elif schema:
        run.notes.append(f"schema {schema} dropped at the end")
    return run


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench content",
        description="Selective dequeue, priority functions and the plain-queue alternative, "
        "on a queue of --messages orders, on SQLite and PostgreSQL.",
    )
    p.add_argument("--messages", type=int, help="orders in the queue (default 1,000,000)")
    p.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: sqlite,postgresql"
    )
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help=f"default {DEFAULT_PG_URL}")
    p.add_argument("--samples", type=int, help="item 1 dequeues per variant (default 2,000)")
    p.add_argument("--scan-samples", type=int, help="item 2 rare-value samples (default 20)")
    p.add_argument("--scan-budget", type=float, default=60.0, help="seconds per item 2 series")
    p.add_argument("--throughput-messages", type=int, help="item 3 per queue (default 50,000)")
    p.add_argument("--throughput-batch", type=int, default=100)
    p.add_argument("--alt-samples", type=int, help="item 4 samples (default 30)")
    p.add_argument("--alt-budget", type=float, default=120.0, help="seconds for item 4")
    p.add_argument("--alt-batch", type=int, default=100, help="item 4 dequeue batch")
    p.add_argument(
        "--plain-messages", type=int, help="orders in the plain queue (default: --messages)"
    )
    p.add_argument(
        "--typed-load",
        type=int,
        help="orders loaded type-checked before the check is suspended for the rest of the"
        " load, for slow type checks (default: all)",
    )
    p.add_argument("--load-batch", type=int, default=5_000)
    p.add_argument("--seed", type=int, default=20261122)
    add_common_options(
        p, quick="a small smoke run (20,000 orders)", tmp_dir=Path(tempfile.gettempdir())
    )
    args = p.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in BACKENDS for b in backends):
        p.error(f"--backends takes a comma-separated subset of {','.join(BACKENDS)}")
    args.backends = backends
    return args


def _settings(args: argparse.Namespace) -> Settings:
    quick = args.quick

    def pick(value: int | None, full: int, small: int) -> int:
        return value if value is not None else (small if quick else full)

    n = pick(args.messages, 1_000_000, 20_000)
    return Settings(
        n=n,
        plain_n=min(pick(args.plain_messages, n, n), n),
        typed_load=pick(args.typed_load, n, n),
        load_batch=args.load_batch,
        samples=pick(args.samples, 2_000, 200),
        scan_samples=pick(args.scan_samples, 20, 5),
        scan_budget=args.scan_budget,
        throughput_n=pick(args.throughput_messages, 50_000, 5_000),
        throughput_batch=args.throughput_batch,
        alt_samples=pick(args.alt_samples, 30, 5),
        alt_budget=args.alt_budget,
        alt_batch=args.alt_batch,
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    s = _settings(args)
    tmp_root: Path = args.tmp_dir.resolve()
    facts = host_facts()
    facts.append(("SQLite library", sqlite3.sqlite_version))
    if "postgresql" in args.backends:
        facts += pg_facts(pg_conninfo(args.pg_url))
    facts.append(
        (
            "Packages",
            package_versions(("sluice", "psycopg", "jsonschema", "fastjsonschema", "sqlglot")),
        )
    )
    facts.append(("sluice source", source_revision()))
    runners: dict[str, Callable[[], BackendRun]] = {
        "sqlite": lambda: _sqlite_run(s, tmp_root),
        "postgresql": lambda: _pg_run(s, args.pg_url),
    }
    started = time.perf_counter()
    runs = [runners[name]() for name in args.backends]
    report = render(runs, s, facts)
    report += f"\nTotal run time: {(time.perf_counter() - started) / 60:,.1f} min.\n"
    out = args.out
    if out is None and args.quick:
        out = tmp_root / "content-quick.md"
    write_report("content", report, out)
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
