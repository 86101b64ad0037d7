"""A draining process for the memory tests.

``python memory_child.py URL MAX``: prints its resident size once ready, then runs
at most MAX no-op tasks at the default settings and prints how many it ran and its
peak resident size (VmHWM).
``python memory_child.py URL spark CHECKPOINT``: reads the queue "feed" to its end with
a sluice stream (exclusive, default micro-batches) into Spark's noop sink; prints
"ready" once its session is up and the rows it read at the end.
"""

from __future__ import annotations

import json
import os
import sys

import sluice
from sluice.jobs import Task


def resident_mb(field: str) -> float:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def spark(url: str, checkpoint: str) -> None:
    from sluice.spark import spark_session

    session = spark_session("local[2]", "sluice-memory-test")
    print(json.dumps({"ready": True}), flush=True)
    stream = (
        session.readStream.format("sluice")
        .option("url", url)
        .option("queue", "feed")
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
    session.stop()
    print(json.dumps({"rows": rows}), flush=True)


def main() -> None:
    if sys.argv[2] == "spark":
        spark(sys.argv[1], sys.argv[3])
        return
    url, most = sys.argv[1], int(sys.argv[2])
    db = sluice.connect(url)

    @db.task("noop")
    def noop(task: Task) -> None:
        return None

    worker = db.worker(tasks=["noop"])
    ready = resident_mb("VmRSS")
    ran = worker.run_until_idle(max_tasks=most)
    db.close()
    print(json.dumps({"ready_mb": ready, "ran": ran, "peak_mb": resident_mb("VmHWM")}))


if __name__ == "__main__":
    main()
