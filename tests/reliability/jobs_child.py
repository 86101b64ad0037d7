"""A worker process for the jobs reliability tests: python jobs_child.py URL MODE [ARG].

Reports on stdout, one JSON object a line, so the parent waits for events
instead of sleeping. Modes:
- limited T: run the mail tasks it can at clock time T (a profile caps them), report how many
- hang: start a task that never ends (the parent kills the process)
- finish: run what is there (the task that hung elsewhere included), report how many
- fire T: fire due schedules at clock time T, report how many it fired
- serve: run a worker until SIGTERM; each task reports when it starts, then takes a while
- batch LOG: run the logged tasks at the default settings (adaptive batches); each run
  appends its body to the file LOG (an effect outside the database), and the run of
  body 40 reports and hangs (the parent kills the process)
- batch-finish LOG: the same tasks, none hanging, report how many ran
"""

from __future__ import annotations

import json
import sys
import threading
import time

import sluice
from sluice.jobs import ManualClock, Task


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    db = sluice.connect(url, lease=2.0)
    if arg is not None and mode in ("limited", "fire"):
        db.jobs.clock = ManualClock(float(arg))

    @db.task("mail")
    def mail(task: Task) -> None:
        task.enqueue("sent", task.body)

    @db.task("hangs", max_attempts=3)
    def hangs(task: Task) -> None:
        task.enqueue("sent", task.body)
        if mode == "hang":
            say(event="started", task=task.id)
            threading.Event().wait()  # until killed

    @db.task("slow")
    def slow(task: Task) -> None:
        say(event="started", task=task.id)
        time.sleep(float(str(task.body)))  # the work itself
        task.enqueue("sent", task.id)

    @db.task("logged", max_attempts=3)
    def logged(task: Task) -> None:
        with open(str(arg), "a") as log:
            log.write(f"{task.body}\n")
        task.enqueue("sent", task.body)
        if mode == "batch" and task.body == 40:
            say(event="started", task=task.id)
            threading.Event().wait()  # until killed

    if mode == "limited":
        say(ran=db.worker(tasks=["mail"]).run_until_idle())
    elif mode == "hang":
        db.worker(tasks=["hangs"]).run_until_idle()
    elif mode == "finish":
        say(ran=db.worker(tasks=["hangs"]).run_until_idle())
    elif mode in ("batch", "batch-finish"):
        say(ran=db.worker(tasks=["logged"]).run_until_idle())
    elif mode == "fire":
        say(fired=sum(db.jobs.fire_schedules() for _ in range(20)))
    elif mode == "serve":
        say(event="ready")
        worker = db.worker(tasks=["slow"], grace=float(arg or 30), poll=0.05)
        worker.run()
        say(event="stopped", processed=worker.processed)
    db.close()


if __name__ == "__main__":
    main()
