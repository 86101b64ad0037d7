"""The memory probe: a process's resident size from /proc, and the draining processes that
``bench memory`` and tests/reliability/test_memory.py measure.

``python -m bench.memory.probe worker URL [MAX]`` drains at most MAX (default all) no-op tasks
at the default settings; ``python -m bench.memory.probe spark URL QUEUE CHECKPOINT`` reads the
queue to its end with a sluice stream (exclusive, default micro-batches) into Spark's noop
sink. Each prints one JSON line once ready (``rss_mb``: its resident size, Spark's with its
JVM and workers) and one at the end (``ran``: tasks run or rows read, ``own_peak_mb``: its
own ``VmHWM``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import sluice
from sluice.jobs import Task

__all__ = ["resident_mb", "spark_child", "tree_mb", "worker_child"]


def resident_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident set (or its peak, ``VmHWM``) in MB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def tree_mb(pid: int) -> float:
    """The resident sets of a process and all its descendants, summed, in MB (a process
    that ends while the tree is read counts as 0)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += resident_mb(current)
        try:
            tasks = list(Path(f"/proc/{current}/task").glob("*"))
        except FileNotFoundError:  # it ended since its parent listed it
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total


def _say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def worker_child(url: str, most: int | None = None) -> None:
    """Drain the noop tasks (at most ``most``) at the default settings; report the peak."""
    db = sluice.connect(url)

    @db.task("noop")
    def noop(task: Task) -> None:
        return None

    worker = db.worker(tasks=["noop"])
    _say(rss_mb=resident_mb(os.getpid()))
    ran = worker.run_until_idle(max_tasks=most)
    db.close()
    _say(ran=ran, own_peak_mb=resident_mb(os.getpid(), "VmHWM"))


def spark_child(url: str, queue: str, checkpoint: str) -> None:
    """Read the queue to its end with a sluice stream (exclusive), writing to Spark's noop."""
    from sluice.spark import spark_session

    spark = spark_session("local[2]", "sluice-memory")
    _say(rss_mb=tree_mb(os.getpid()))
    stream = (
        spark.readStream.format("sluice")
        .option("url", url)
        .option("queue", queue)
        .option("name", "memory-reader")
        .option("exclusive", "true")
        .load()
    )
    query = (
        stream.select("body")
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    spark.stop()
    _say(ran=rows, own_peak_mb=resident_mb(os.getpid(), "VmHWM"))


def main(argv: list[str]) -> None:
    if argv[0] == "worker":
        worker_child(argv[1], int(argv[2]) if len(argv) > 2 else None)
    elif argv[0] == "spark":
        spark_child(argv[1], argv[2], argv[3])
    else:
        raise SystemExit(f"unknown probe {argv[0]!r}: worker or spark")


if __name__ == "__main__":
    main(sys.argv[1:])
