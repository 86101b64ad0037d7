"""The Markdown report of ``python -m bench celery``: the machine and servers, how the cases
ran, rates and latencies with ratios to RabbitMQ, the kill run, and each broker's durability."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.celery.app import PREFETCH
from bench.celery.brokers import BROKERS
from bench.celery.runs import CONCURRENCY, KillResult, RateResult
from bench.harness import (
    facts_table,
    machine_facts,
    pg_facts,
    rabbit_version,
    source_revision,
)

__all__ = ["render"]

_PACKAGES = ("celery", "kombu", "billiard", "redis", "SQLAlchemy", "psycopg", "sluice-queue")


def _sluice_batch() -> str:
    try:
        from sluice.contrib.kombu.transport import DRAIN_BATCH
    except ImportError:
        return ""
    return (
        " The sluice transport takes up to"
        f" {DRAIN_BATCH} messages at once, within the prefetch, in one claim"
        " (`Database.get_many`), each held on its own; a thread commits the acknowledgements"
        " that pile up together (`Database.ack_many`: one commit, one fsync)."
    )


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}" if ours and theirs else "-"


def _kind(seconds: float) -> str:
    return "no-op" if not seconds else f"{seconds * 1000:g} ms sleep"


def medians(rates: Sequence[RateResult]) -> list[tuple[RateResult, list[float]]]:
    """Per broker and task, in first-run order: the run with the median worker tasks/s
    (a failed run counts as 0), and every run's tasks/s."""
    runs: dict[tuple[str, float], list[RateResult]] = {}
    for r in rates:
        runs.setdefault((r.broker, r.seconds), []).append(r)
    out = []
    for group in runs.values():
        ranked = sorted(group, key=lambda r: (r.tasks_per_s or 0.0) if r.status == "ok" else 0.0)
        out.append((ranked[(len(ranked) - 1) // 2], [r.tasks_per_s or 0.0 for r in group]))
    return out


def _cpu(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.3f}"


def _rate_table(rates: Sequence[RateResult]) -> list[str]:
    chosen = medians(rates)
    rabbit = {r.seconds: r for r, _ in chosen if r.broker == "rabbitmq" and r.status == "ok"}
    out = [
        "| broker | task | N | enqueue tasks/s | worker tasks/s | vs RabbitMQ | every run"
        " | main process CPU ms/task | consumer process CPU ms/task | broker server CPU ms/task"
        " | machine CPU ms/task | latency p50 ms | p99 ms | p50 vs RabbitMQ | status |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r, every in chosen:
        peer = rabbit.get(r.seconds)
        p50 = r.latency(50)
        out.append(
            f"| {BROKERS[r.broker].label} | {_kind(r.seconds)} | {r.n:,}"
            f" | {r.enqueue_per_s or 0:,.0f} | {r.tasks_per_s or 0:,.0f}"
            f" | {_ratio(r.tasks_per_s, peer.tasks_per_s if peer else None)}"
            f" | {', '.join(f'{x:,.0f}' for x in every)}"
            f" | {_cpu(r.main_cpu_ms)} | {_cpu(r.consumer_process_cpu_ms)}"
            f" | {_cpu(r.broker_cpu_ms)} | {_cpu(r.machine_cpu_ms)}"
            f" | {_ms(p50)} | {_ms(r.latency(99))}"
            f" | {_ratio(p50, peer.latency(50) if peer else None)} | {r.status} |"
        )
    return out


def _kill_table(kills: Sequence[KillResult]) -> list[str]:
    out = [
        "| broker | SIGKILL to | N | kills | done | lost | run twice | started again"
        " | s to all done | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in kills:
        seconds = "-" if k.seconds is None else f"{k.seconds:.1f}"
        out.append(
            f"| {BROKERS[k.broker].label} | {k.target} | {k.n} | {k.kills} | {k.done}"
            f" | **{k.lost}** | **{k.twice}** | {k.rerun} | {seconds} | {k.status} |"
        )
    return out


def render(
    rates: Sequence[RateResult],
    kills: Sequence[KillResult],
    *,
    tmp_root: Path,
    samples: int,
    rate: float,
    kill_seconds: float,
    gap: float,
    settle: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    quick: bool,
) -> str:
    facts = machine_facts(tmp_root, _PACKAGES)
    facts += [
        ("Load average before (1, 5, 15 min)", _load(load_before)),
        ("Load average after", _load(load_after)),
        *pg_facts(),
        ("RabbitMQ", f"{rabbit_version()} at 127.0.0.1:5672"),
        ("Source", source_revision()),
    ]
    title = "# Celery on sluice, Redis, RabbitMQ and kombu's SQLAlchemy transport"
    out = [title + (" (--quick: a smoke run, not figures)" if quick else ""), ""]
    out += facts_table(facts)
    out += [
        "",
        "## How it ran",
        "",
        f"One `celery worker -P prefork -c {CONCURRENCY} --without-gossip --without-mingle"
        " --without-heartbeat` per case (a subprocess of its own), the same app for every broker"
        " (bench/celery/app.py): `task_acks_late=True`, `task_reject_on_worker_lost=True`,"
        f" `worker_prefetch_multiplier={PREFETCH}` (Celery's default: up to"
        f" {PREFETCH * CONCURRENCY} tasks reserved by the worker), no result backend"
        f" (`task_ignore_result`), JSON.{_sluice_batch()} The producer is the bench's process,"
        " one `apply_async` per task (Celery's way: one publish, no batch), on one connection;"
        ' RabbitMQ with `broker_transport_options={"confirm_publish": True}`. Every case runs'
        " on a fresh place: a new SQLite file, a new PostgreSQL schema, a new private"
        " redis-server, a new RabbitMQ queue.",
        "",
        "What the tasks did is read from a sink outside every broker: the task appends"
        " `start` (with the enqueue time it was given) and `end` lines to a file of its own"
        " pool process (one `os.write` each, `O_APPEND`: microseconds, equal for all brokers,"
        " and kept when the process is killed). Celery's result backend is not used.",
        "",
        "- **enqueue tasks/s**: N tasks published with no worker running, one durable publish"
        " each.",
        "- **worker tasks/s**: the worker then started on that backlog; N / (the first task's"
        " start to the last task's end). Each case runs several times, every broker once per"
        " round; the row is the run with the median rate (its latencies too), **every run**"
        " lists all of them in order.",
        f"- **latency**: then {samples} tasks published one every {1000 / rate:g} ms to the idle"
        " worker; from just before each `apply_async` to the task's start (`time.time()` in"
        " both processes), nearest-rank percentiles. It includes the durable publish.",
        "- **CPU ms/task**: CPU time (user + system, from /proc) over the backlog's run, per"
        " task: the worker's main process (all its threads), sluice's consumer process, the"
        " broker's server processes (PostgreSQL's backends and background processes, RabbitMQ's"
        " VM, redis-server; none for SQLite, which runs inside the consumer), and the whole"
        " machine (every process and the kernel, both cores). Where the machine's figure times"
        " the rate comes near 2,000 ms a second, the run is bound by the two cores.",
        "",
        "## Tasks/s and latency",
        "",
        *_rate_table(rates),
        "",
        "Target (issue 42): sluice at or above RabbitMQ's rate at equal durability, with nothing"
        " lost.",
        "",
        "## Workers killed mid-task",
        "",
        f"N tasks of {kill_seconds * 1000:g} ms published to a running worker; while they run,"
        f" SIGKILL, at least {gap:g} s apart, to either the pool process running a task (Celery's"
        " parent sees it die and, with `task_reject_on_worker_lost`, rejects the task with"
        " requeue) or the whole worker (its process group: parent and pool, as kill -9 or the"
        " OOM killer of a container does; another worker is started at once). Then up to"
        f" {settle:g} s after the last kill for every task to end. **lost**: never ended in that"
        " time; **run twice**: ended twice; started again: tasks whose run a kill cut short and"
        " that started once more (a kill lands as soon as the sink shows a task running, often"
        " before the new worker has all four busy). Redis gives a dead worker's unacknowledged"
        " tasks back only once the visibility timeout (3600 s, kombu's default) has passed, so in"
        " this window they count as lost; kombu's SQLAlchemy transport marks a fetched row"
        " invisible and has nothing that makes it visible again. Celery's parent waits up to"
        " `worker_lost_wait` (10 s) before it declares a killed pool process's task lost.",
        "",
        *_kill_table(kills),
        "",
        "## Durability and redelivery, per broker",
        "",
    ]
    durability: dict[str, str] = {}
    for broker, text in [(r.broker, r.durability) for r in rates] + [
        (k.broker, k.durability) for k in kills
    ]:
        if text:
            durability.setdefault(broker, text)
    out += [f"- **{BROKERS[b].label}**: {text}." for b, text in durability.items()]
    return "\n".join(out) + "\n"
