"""The fault campaign's checker (tests/reliability/campaign.py): what the database holds
after the drain against what the actors reported, each kind of violation named."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import sluice


def check_stream(
    queue: str,
    bodies: list[dict[str, Any]],
    committed: dict[tuple[str, int], dict[str, Any]],
    committing: set[tuple[str, int]],
    order: Callable[[dict[str, Any]], str] | None = lambda b: str(b["w"]),
) -> list[str]:
    """Exactly once, whole transactions, nothing aborted or unannounced, and each
    ``order`` (its writer; a writer's group on a grouped queue) in its writer's order
    (None: no order promised)."""
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
    return bad if order is None else bad + check_order(queue, bodies, order)


def check_order(
    queue: str,
    bodies: list[dict[str, Any]],
    order: Callable[[dict[str, Any]], str] = lambda b: str(b["w"]),
) -> list[str]:
    """Each writer's messages in the order it wrote them, by ``order``: the writer, or
    what else its order is promised within (a group)."""
    bad: list[str] = []
    last: dict[str, int] = {}
    for b in bodies:
        key = order(b)
        if b["s"] <= last.get(key, -1):
            bad.append(f"{queue}: writer {key} out of order: {b['s']} after {last[key]}")
        last[key] = b["s"]
    return bad


def check_made(
    queue: str, bodies: list[dict[str, Any]], expected: set[tuple[str, int]]
) -> list[str]:
    """A rule's conditional output: exactly one message for each of ``expected``, the
    orders (writer, seq) that asked for it, and none for any other."""
    made = Counter((b["w"], b["s"]) for b in bodies)
    bad = [f"{queue}: {key} made {n} times" for key, n in made.items() if n > 1]
    bad += [f"{queue}: {key} made for an order that did not ask" for key in made.keys() - expected]
    bad += [f"{queue}: {key} never made" for key in sorted(expected - made.keys())]
    return bad


def check_rule_errors(errors: list[dict[str, Any]]) -> list[str]:
    """Error messages only where the count rule's integer property was given a fraction."""
    bad = []
    for e in errors:
        n = e["trigger"]["body"].get("n")
        if (e["error"], e["rule"]) != ("message", "count") or not isinstance(n, float):
            bad.append(f"rule_errors: an error the rules should not have made: {e}")
    return bad


def check_served(
    left: list[dict[str, Any]], events: list[dict[str, Any]], expected: set[tuple[str, int]]
) -> list[str]:
    """``served`` through HTTP leases: each message either left after the drain or
    acknowledged, and a confirmed acknowledgement its delivery's last (see the module
    docstring); ``expected``: what the rules routed."""
    took: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    acking: set[tuple[str, int]] = set()
    acked: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    sent: dict[str, float] = {}
    for e in events:
        if "took" in e:
            took[(e["took"][0], e["took"][1])].append(e)
        elif "acking" in e:
            acking.add((e["acking"][0], e["acking"][1]))
            sent[e["token"]] = e["sent"]
        elif "acked" in e:
            acked[(e["acked"][0], e["acked"][1])].append(e)
    remaining = Counter((b["w"], b["s"]) for b in left)
    bad = [f"served: {key} left {n} times" for key, n in remaining.items() if n > 1]
    for key in (remaining.keys() | took.keys()) - expected:
        bad.append(f"served: {key} delivered but never routed")
    for key in sorted(expected - remaining.keys() - acked.keys() - acking):
        bad.append(f"served: {key} lost (neither left nor acknowledged)")
    for key, acks in acked.items():
        if len(acks) > 1 or key in remaining:
            bad.append(f"served: {key} acknowledged and delivered again")
        for ack in acks:
            mine = next(t for t in took[key] if t["token"] == ack["token"])
            for other in took[key]:
                if other["asked"] > ack["at"]:
                    bad.append(f"served: {key} taken again after its acknowledgement")
                elif (
                    other is not mine
                    and mine["got"] < other["asked"]
                    and (other["got"] < sent[ack["token"]])
                ):
                    bad.append(f"served: {key} acknowledged while another lease held it")
    return bad


def tracebacks(lines: list[str]) -> list[tuple[str, str, int]]:
    """Python's tracebacks in ``lines``: for each chain (exceptions raised from others),
    the line before it, its last exception and the index of the line after that."""
    chains: list[tuple[str, str, int]] = []
    n = 0
    while n < len(lines):
        if not lines[n].startswith(_TRACEBACK):
            n += 1
            continue
        before = lines[n - 1] if n else ""
        while True:
            n += 1  # past "Traceback ...", then its frames (indented) to the exception
            while n < len(lines) and (not lines[n] or lines[n][0].isspace()):
                n += 1
            raised = lines[n] if n < len(lines) else "?"
            n = min(n + 1, len(lines))
            after = [m for m in range(n, min(n + 4, len(lines))) if lines[m]]
            if len(after) < 2 or not lines[after[0]].startswith(_CHAINED):
                break
            n = after[1]  # the chain's next "Traceback ..."
        chains.append((before, raised, n))
    return chains


_TRACEBACK = "Traceback (most recent call last)"
_CHAINED = ("The above exception was the direct cause", "During handling of the above")


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
