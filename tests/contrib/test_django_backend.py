"""sluice's Django task backend in the test project's own process, on SQLite and PostgreSQL.

The behaviours Django's backend tests and the django-tasks backport's database backend
tests check (enqueue, get_result, status transitions, priorities, run_after, queue
validation, failures with their traceback, async tasks, context), and the promise of
this backend beyond them: an enqueue follows ``transaction.atomic()``, in the same
PostgreSQL transaction where it can.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("django", reason="the 'django' extra is not installed")

from tests.contrib.django_support import Stores


def backend_of(name: str) -> Any:
    from sluice.contrib.django.api import task_backends

    return task_backends[name]


def tasks() -> Any:
    from tests.contrib.django_project.tasksapp import tasks as module

    return module


def run_all(name: str, queues: list[str] | None = None) -> int:
    return int(backend_of(name).worker(queues).run_until_idle())


def test_enqueue_gives_a_ready_result_that_get_result_finds(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultStatus

    t = tasks().add.using(backend=alias)
    result = t.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.id
    assert result.backend == alias
    assert (result.args, result.kwargs) == ([2, 3], {})
    assert result.enqueued_at is not None
    assert result.enqueued_at.tzinfo is not None
    assert result.started_at is None
    assert result.finished_at is None
    assert not result.is_finished
    assert result.worker_ids == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    found = backend_of(alias).get_result(result.id)
    assert found.id == result.id
    assert found.status == TaskResultStatus.READY
    assert found.task.func is t.func
    assert found.task.backend == alias
    assert found.args == [2, 3]
    assert found.enqueued_at == result.enqueued_at
    assert t.get_result(result.id).id == result.id


def test_a_worker_runs_it_and_the_result_says_successful(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultStatus
    from sluice.contrib.django.runner import worker_id

    result = tasks().add.using(backend=alias).enqueue(a=20, b=22)
    assert run_all(alias) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 42
    assert result.errors == []
    assert result.kwargs == {"a": 20, "b": 22}
    assert result.worker_ids == [worker_id()]
    assert result.attempts == 1
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.last_attempted_at == result.started_at
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert run_all(alias) == 0  # ran once


def test_status_is_running_while_the_task_runs(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultStatus

    module = tasks()
    result = module.wait_for_gate.using(backend=alias).enqueue()
    worker = backend_of(alias).worker()
    thread = threading.Thread(target=worker.run_until_idle)
    thread.start()
    try:
        assert module.ENTERED.wait(10)
        assert backend_of(alias).get_result(result.id).status == TaskResultStatus.RUNNING
    finally:
        module.GATE.set()
        thread.join(10)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "through"


def test_a_task_that_raises_is_failed_with_its_exception_and_traceback(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultStatus

    result = tasks().fail.using(backend=alias).enqueue("no stock for order 7")
    assert run_all(alias) == 1
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "no stock for order 7" in error.traceback
    assert "Traceback" in error.traceback
    assert "raise ValueError(message)" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert run_all(alias) == 0  # failed, as Django has it: not run again


def test_a_return_value_json_cannot_hold_fails_the_task(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultStatus

    result = tasks().unserialisable.using(backend=alias).enqueue()
    run_all(alias)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_arguments_json_cannot_hold_are_refused_at_enqueue(alias: str) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks().add.using(backend=alias).enqueue(object(), 1)
    assert run_all(alias) == 0


def test_higher_priority_runs_first_and_equal_priorities_in_enqueue_order(alias: str) -> None:
    module = tasks()
    record = module.record.using(backend=alias)
    for name, priority in [("low", -10), ("first-0", 0), ("top", 100), ("bottom", -100),
                           ("high", 50), ("second-0", 0)]:  # fmt: skip
        record.using(priority=priority).enqueue(name)
    backend_of(alias).worker(batch=1).run_until_idle()
    assert module.RAN == ["top", "high", "first-0", "second-0", "low", "bottom"]


def test_run_after_keeps_the_task_until_then(alias: str) -> None:
    from django.utils import timezone

    import sluice
    from sluice.contrib.django.api import TaskResultStatus

    backend = backend_of(alias)
    clock = sluice.ManualClock(time.time())
    backend.db.clock = clock
    later = timezone.now() + timedelta(hours=1)
    result = tasks().add.using(backend=alias, run_after=later).enqueue(1, 1)
    assert result.task.run_after == later
    assert run_all(alias) == 0
    assert backend.get_result(result.id).status == TaskResultStatus.READY
    assert backend.get_result(result.id).task.run_after == later
    clock.advance(3590)
    assert run_all(alias) == 0
    clock.advance(20)
    assert run_all(alias) == 1
    assert backend.get_result(result.id).return_value == 2


def test_queue_names_are_checked_against_queues_and_kept_apart(alias: str) -> None:
    from sluice.contrib.django.api import InvalidTask, TaskResultStatus

    add = tasks().add.using(backend=alias)
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid for backend"):
        add.using(queue_name="reports")
    email = add.using(queue_name="emails").enqueue(1, 2)
    assert run_all(alias, ["default"]) == 0  # a worker of other queues leaves it
    backend = backend_of(alias)
    assert backend.task_type("emails") == "django.emails"
    assert [m.body["task"] for m in backend.db.queue("tasks.django.emails").browse()] == [
        "tests.contrib.django_project.tasksapp.tasks.add"
    ]
    assert run_all(alias, ["emails"]) == 1
    assert backend.get_result(email.id).status == TaskResultStatus.SUCCESSFUL
    assert backend.get_result(email.id).task.queue_name == "emails"


def test_what_django_validates_is_refused(alias: str) -> None:
    from datetime import datetime

    from sluice.contrib.django.api import InvalidTask

    add = tasks().add.using(backend=alias)
    with pytest.raises(InvalidTask, match="priority must be a whole number"):
        add.using(priority=101)
    with pytest.raises(InvalidTask, match="priority must be a whole number"):
        add.using(priority=-101)
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        add.using(run_after=datetime(2030, 1, 1))
    backend = backend_of(alias)
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority


def test_an_async_task_runs(alias: str) -> None:
    result = tasks().async_add.using(backend=alias).enqueue(3, 4)
    assert run_all(alias) == 1
    result.refresh()
    assert result.return_value == 7


def test_aenqueue_and_aget_result(alias: str) -> None:
    import asyncio

    async def main() -> Any:
        result = await tasks().add.using(backend=alias).aenqueue(5, 6)
        return await backend_of(alias).aget_result(result.id)

    found = asyncio.run(main())
    assert found.args == [5, 6]


def test_a_task_that_takes_context_gets_its_result_and_attempt(alias: str) -> None:
    result = tasks().who_am_i.using(backend=alias).enqueue("x")
    run_all(alias)
    result.refresh()
    assert result.return_value == {"id": result.id, "attempt": 1, "tag": "x"}


def test_get_result_of_an_unknown_id_raises(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultDoesNotExist

    backend = backend_of(alias)
    for unknown in ["999/999/999", "nonsense", ""]:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(unknown)


def test_get_result_of_a_job_that_is_no_django_task_raises(alias: str) -> None:
    from sluice.contrib.django.api import TaskResultDoesNotExist

    backend = backend_of(alias)
    backend.db.jobs.define("other")
    job = backend.db.jobs.submit("not django", [("other", {})])
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend.get_result(job)


def test_signals_are_sent_at_enqueue_start_and_finish(alias: str) -> None:
    from sluice.contrib.django.api import task_enqueued, task_finished, task_started

    seen: list[tuple[str, str]] = []

    def receiver_of(name: str) -> Any:
        def receiver(sender: type, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, str(task_result.status)))

        return receiver

    receivers = [(task_enqueued, receiver_of("enqueued")), (task_started, receiver_of("started")),
                 (task_finished, receiver_of("finished"))]  # fmt: skip
    for signal, function in receivers:
        signal.connect(function, weak=False)
    try:
        tasks().add.using(backend=alias).enqueue(1, 2)
        run_all(alias)
    finally:
        for signal, function in receivers:
            signal.disconnect(function)
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


# --- transactions ----------------------------------------------------------------------------
def database_of(alias: str) -> str:
    return str(backend_of(alias).settings.database)


def test_postgres_joins_the_transaction_and_sqlite_enqueues_on_commit(alias: str) -> None:
    assert backend_of(alias).joins is (alias == "postgres")


def test_a_rolled_back_atomic_block_drops_the_task(alias: str) -> None:
    from django.db import transaction

    from sluice.contrib.django.api import TaskResultDoesNotExist
    from tests.contrib.django_project.tasksapp.models import Order

    db = database_of(alias)

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic(using=db):
        Order.objects.using(db).create(number=1)
        result = tasks().add.using(backend=alias).enqueue(1, 2)
        raise Abandon
    assert not Order.objects.using(db).filter(number=1).exists()
    with pytest.raises(TaskResultDoesNotExist):
        backend_of(alias).get_result(result.id)
    assert run_all(alias) == 0


def test_a_committed_atomic_block_keeps_the_task_and_shows_it_only_then(
    alias: str, stores: Stores
) -> None:
    from django.db import connections, transaction

    from sluice.contrib.django.api import TaskResultDoesNotExist
    from tests.contrib.django_project.tasksapp.models import Order

    db = database_of(alias)
    backend = backend_of(alias)
    with transaction.atomic(using=db):
        Order.objects.using(db).create(number=2)
        result = tasks().add.using(backend=alias).enqueue(2, 2)
        with pytest.raises(TaskResultDoesNotExist):  # not committed: sluice's own connection
            backend.get_result(result.id)
        if alias == "postgres":
            # In the application's own transaction: its connection sees the job already.
            with connections[db].cursor() as cursor:
                cursor.execute(f'SELECT count(*) FROM "{stores.schema}".jobs')
                assert cursor.fetchone() == (1,)
    assert Order.objects.using(db).filter(number=2).exists()
    assert backend.get_result(result.id).id == result.id
    assert run_all(alias) == 1
    assert backend.get_result(result.id).return_value == 4


def test_a_savepoint_rolled_back_drops_only_its_task(alias: str) -> None:
    from django.db import transaction

    from sluice.contrib.django.api import TaskResultDoesNotExist

    db = database_of(alias)
    add = tasks().add.using(backend=alias)
    with transaction.atomic(using=db):
        kept = add.enqueue(1, 0)
        try:
            with transaction.atomic(using=db):
                dropped = add.enqueue(2, 0)
                raise RuntimeError("undo the inner block")
        except RuntimeError:
            pass
    backend = backend_of(alias)
    assert backend.get_result(kept.id).id == kept.id
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(dropped.id)
    assert run_all(alias) == 1


# --- configuration -----------------------------------------------------------------------------
def make_backend(options: dict[str, Any], queues: list[str] | None = None) -> Any:
    from sluice.contrib.django import SluiceBackend

    params: dict[str, Any] = {"OPTIONS": options}
    if queues is not None:
        params["QUEUES"] = queues
    return SluiceBackend("custom", params)


def test_bad_options_are_improperly_configured(stores: Stores) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"unknown option.*'URL'.*docs/django\.md"):
        make_backend({"URL": stores.sluice_url})
    with pytest.raises(ImproperlyConfigured, match="'transaction'] must be 'auto', 'join'"):
        make_backend({"transaction": "later"})
    with pytest.raises(ImproperlyConfigured, match="'max_attempts'] must be an int >= 1"):
        make_backend({"max_attempts": 0})
    with pytest.raises(ImproperlyConfigured, match="'retention'] must be seconds"):
        make_backend({"retention": "a week"})
    with pytest.raises(ImproperlyConfigured, match="'url'] must be a sluice URL"):
        make_backend({"url": ""})


def test_join_without_postgres_says_what_to_do(stores: Stores) -> None:
    from django.core.exceptions import ImproperlyConfigured

    backend = make_backend({"url": stores.sluice_url, "transaction": "join"})
    with pytest.raises(ImproperlyConfigured, match="'join' needs sluice in the PostgreSQL"):
        backend.enqueue(tasks().add, [1, 2], {})


def test_a_missing_django_database_is_named(stores: Stores) -> None:
    from django.core.exceptions import ImproperlyConfigured

    backend = make_backend({"database": "elsewhere"})
    with pytest.raises(ImproperlyConfigured, match=r"no DATABASES\['elsewhere'\]"):
        _ = backend.url


def test_a_url_is_derived_from_the_django_database(stores: Stores) -> None:
    from django.conf import settings

    backend = make_backend({})
    folder = settings.DATABASES["default"]["NAME"].rsplit("/", 1)[0]
    assert backend.url == f"sqlite:///{folder}/sluice.db"


def test_checks_report_what_would_fail_later(stores: Stores) -> None:
    from django.test import override_settings

    assert list(make_backend({"url": stores.sluice_url}).check()) == []
    (error,) = make_backend({"database": "elsewhere"}).check()
    assert error.id == "sluice.E001"
    assert "no DATABASES['elsewhere']" in error.msg
    with override_settings(INSTALLED_APPS=["tests.contrib.django_project.tasksapp"]):
        (warning,) = make_backend({"url": stores.sluice_url}).check()
    assert warning.id == "sluice.W001"
    assert "sluice.contrib.django" in warning.hint


def test_a_queue_sluice_cannot_name_is_improperly_configured(stores: Stores) -> None:
    from django.core.exceptions import ImproperlyConfigured

    backend = make_backend({"url": stores.sluice_url}, queues=["bad\x00name"])
    with pytest.raises(ImproperlyConfigured, match="cannot be a sluice task type"):
        backend.worker()


def test_the_worker_refuses_a_queue_not_in_queues(stores: Stores) -> None:
    from django.core.exceptions import ImproperlyConfigured

    backend = make_backend({"url": stores.sluice_url}, queues=["default"])
    with pytest.raises(ImproperlyConfigured, match="has no queue 'emails'"):
        backend.worker(["emails"])


# --- missing dependencies ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("blocked", "expected"),
    [
        ("django", "needs the 'django' extra, which is not installed (no module 'django')"),
        ("django_tasks", "Django's task API: Django 5.2"),
    ],
    ids=["django", "django-tasks"],
)
def test_a_missing_dependency_names_the_extra(blocked: str, expected: str) -> None:
    import subprocess
    import sys

    from tests.contrib.django_support import ROOT

    if blocked == "django_tasks":
        import django

        if django.VERSION >= (6,):
            pytest.skip("Django 6 has django.tasks: the backport is not needed")
    code = f"""
import sys
sys.modules[{blocked!r}] = None  # as if not installed
import sluice
try:
    import sluice.contrib.django
except sluice.MissingDependency as exc:
    print(exc)
else:
    raise SystemExit("no MissingDependency")
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert "pip install 'sluice-queue[django]'" in done.stdout
