"""Gateways: dropbox directories and node-to-node forwarding over HTTP.

Dropbox (sluice.dropbox): ingest and emit in files/s on a SQLite file (synchronous=FULL,
the default) and PostgreSQL (127.0.0.1:5432, a private schema), against the bare floor of
the same files: create + write + fsync + rename. Target: ingest >= 0.5 x the floor.
Writes ``bench/results/gateways-dropbox-<date>.md``.

Forwarding (bench/gateways/forward.py): a backlog in database A's outgoing http gateway
sent by ``db.gateways`` into the incoming http gateway of a real ``sluice serve`` of
database B, in msgs/s, against B's own enqueue rate at the same batch size (one message
per request, one client). Target: forwarding >= 0.5 x that rate. Writes
``bench/results/gateways-forwarding-<date>.md``.

    python -m bench gateways [--only dropbox|forwarding] [--files N] [--messages N]
                             [--repeats R] [--backend sqlite|postgresql] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sluice
from bench.harness import PG_CONNINFO, SchemaGuard, add_common_options, store_facts, write_report
from sluice.dropbox import Dropbox
from sluice.dropbox.inbound import BATCH

TARGET = 0.5
BODY = b'{"order": 12345, "customer": "Smith", "lines": [1, 2, 3]}\n'


def _names(n: int) -> list[str]:
    return [f"4.{1764000000000000 + i}-1.M" for i in range(n)]


def floor(directory: Path, n: int) -> float:
    """Files/s of create + write + fsync + rename into target/, as a producer does."""
    working, target = directory / "working", directory / "target"
    working.mkdir(parents=True)
    target.mkdir()
    start = time.perf_counter()
    for name in _names(n):
        fd = os.open(working / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, BODY)
        os.fsync(fd)
        os.close(fd)
        os.rename(working / name, target / name)
    return n / (time.perf_counter() - start)


def produce(target: Path, n: int) -> None:
    for name in _names(n):
        (target / name).write_bytes(BODY)


def dropbox_case(url: str, root: Path, n: int) -> tuple[float, float]:
    """(ingest files/s, emit files/s) on a fresh database."""
    guard = SchemaGuard(url)
    db = sluice.connect(url)
    try:
        db.create_queue("in", exist_ok=True)
        db.create_queue("out", exist_ok=True)
        box = Dropbox(db, root, consumer_id="bench")
        box.ingest("in")
        produce(root / "in" / "incoming" / "target", n)
        start = time.perf_counter()
        stored = box.ingest("in")
        ingest = stored / (time.perf_counter() - start)
        assert stored == n, stored
        db.queue("out").put_many([BODY.decode()] * n)
        start = time.perf_counter()
        emitted = box.emit("out")
        emit = emitted / (time.perf_counter() - start)
        assert emitted == n, emitted
        return ingest, emit
    finally:
        db.close()
        guard.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench gateways", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--only", choices=("dropbox", "forwarding"), help="one part only")
    parser.add_argument("--files", type=int, default=2000, help="dropbox: files per run")
    parser.add_argument("--messages", type=int, default=2000,
                        help="forwarding: the backlog forwarded per run")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="forwarding: length of a run of the server's own enqueue")  # fmt: skip
    parser.add_argument("--parts", type=int, default=1000,
                        help="forwarding: messages whose sender's parts are timed")  # fmt: skip
    parser.add_argument("--batch", type=int, action="append",
                        help="forwarding: messages per request (1 and 64)")  # fmt: skip
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"),
                        help="forwarding: backends to run (both)")  # fmt: skip
    parser.add_argument("--note", action="append", default=[],
                        help="forwarding: a note for the report (repeatable)")  # fmt: skip
    add_common_options(
        parser,
        quick="a smoke run: 100 files, 100 messages, 1 s, 1 repeat",
        repeats=3,
        repeats_help="runs per case",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.files, args.messages, args.seconds, args.parts, args.repeats = 100, 100, 1.0, 50, 1
    if args.only != "forwarding":
        dropbox(args)
    if args.only != "dropbox":
        forwarding(args)


def forwarding(args: argparse.Namespace) -> None:
    from bench.gateways.forward import Settings, render, run_forwarding

    s = Settings(messages=args.messages, repeats=args.repeats, seconds=args.seconds,
                 warmup=20, parts=args.parts, batches=tuple(args.batch or (1, 64)))  # fmt: skip
    backends = args.backend or ["sqlite", "postgresql"]
    tmp_root = Path(tempfile.mkdtemp(prefix="sluice-bench-forward-"))
    try:
        facts = store_facts(tmp_root, backends)
        facts.append(
            ("Load average at the start", "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg()))
        )
        log = functools.partial(print, file=sys.stderr, flush=True)
        rows = [row for backend in backends for row in run_forwarding(backend, s, tmp_root, log)]
        facts.append(("Load average at the end", "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    out = args.out if args.only == "forwarding" else None
    write_report("gateways-forwarding", render(rows, s, facts, args.note), out)


def dropbox(args: argparse.Namespace) -> None:
    tmp_root = Path(tempfile.mkdtemp(prefix="sluice-bench-gateways-"))
    stores: dict[str, Callable[[int], str]] = {
        "sqlite": lambda run: f"sqlite:///{tmp_root / f'db{run}' / 'bench.db'}",
        "postgresql": lambda run: f"{PG_CONNINFO}?schema=sluice_bench_gateways_{os.getpid()}",
    }
    rows: list[tuple[str, float, float, float]] = []
    try:
        for store, url_of in stores.items():
            best = (0.0, 0.0, 0.0)
            for run in range(args.repeats):
                base = tmp_root / f"{store}-{run}"
                (base / "db").mkdir(parents=True)
                (tmp_root / f"db{run}").mkdir(exist_ok=True)
                fs = floor(base / "floor", args.files)
                (base / "root").mkdir()
                ingest, emit = dropbox_case(url_of(run), base / "root", args.files)
                shutil.rmtree(base)
                shutil.rmtree(tmp_root / f"db{run}", ignore_errors=True)
                if ingest / fs > best[1] / max(best[0], 1e-9):
                    best = (fs, ingest, emit)
            rows.append((store, *best))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    out = args.out if args.only == "dropbox" else None
    write_report("gateways-dropbox", render(rows, args, tmp_root), out)


def render(rows: list[tuple[str, float, float, float]], args: argparse.Namespace,
           tmp_root: Path) -> str:  # fmt: skip
    tmp_root.mkdir(exist_ok=True)
    facts = store_facts(tmp_root, ["sqlite", "postgresql"])
    lines = ["# Gateways: dropbox directories (sluice.dropbox)", "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in facts]
    lines += [
        "",
        "## Workload",
        "",
        f"- {args.files} files of {len(BODY)} bytes per run, best of {args.repeats} runs "
        "(the run with the best ingest/floor ratio; the floor is measured in the same run, "
        "on the same file system).",
        "- Floor: per file, create + write + fsync + rename working/ -> target/ (what a "
        "careful producer does; no database).",
        f"- Ingest: `Dropbox.ingest` of the files already in target/: claim by rename into "
        f"processing/, one idempotency record per file (a durable write), {BATCH} files "
        "per queue transaction (their enqueues and their records' answers, one commit), "
        "then rename into processed/. Each file stored exactly once.",
        f"- Emit: `Dropbox.emit` of as many messages: {BATCH} per transaction, each "
        "written to working/ with fsync, renamed into target/, one fsync of target/, then "
        "the acknowledgement's commit.",
        "- Durability: SQLite synchronous=FULL (fsync per commit); PostgreSQL as the "
        "server's settings above (synchronous_commit read back).",
        "",
        "## Results (files/s)",
        "",
        "| store | floor | ingest | ingest / floor | emit | emit / floor |",
        "|---|---|---|---|---|---|",
    ]
    for store, fs, ingest, emit in rows:
        lines.append(f"| {store} | {fs:,.0f} | {ingest:,.0f} | {ingest / fs:.2f} | "
                     f"{emit:,.0f} | {emit / fs:.2f} |")  # fmt: skip
    lines += ["", "## Targets", ""]
    for store, fs, ingest, _ in rows:
        verdict = "PASS" if ingest / fs >= TARGET else "MISS"
        lines.append(f"- {verdict}: {store} ingest {ingest / fs:.2f} x the floor "
                     f"(target >= {TARGET})")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
