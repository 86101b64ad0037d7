"""Django's task API, from ``django.tasks`` (Django 6) or the ``django-tasks`` backport.

Django 6 ships ``django.tasks``; on Django 5.2 the ``django-tasks`` package is the same
API under the module ``django_tasks`` (0.12 matches Django 6.0: ``TaskResult.worker_ids``,
``TaskContext``, ``supports_priority``). Every other module of this package takes the API
from here, so the choice is made once. mypy reads the backport's annotations (the one
installed where sluice's checks run); the classes are the same at run time.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from sluice.errors import MissingDependency
from sluice.extras import install_hint, require

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "get_module_path",
    "normalize_json",
    "source",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

_WHAT = "sluice's Django task backend (sluice.contrib.django)"


def _modules() -> tuple[str, dict[str, ModuleType]]:
    """The package that has the API and its modules by role."""
    require("django", _WHAT)
    try:
        importlib.import_module("django.tasks")
        prefix = "django.tasks"
    except ImportError:  # Django < 6: the backport
        try:
            importlib.import_module("django_tasks")
        except ImportError as exc:
            version = importlib.import_module("django").get_version()
            raise MissingDependency(
                f"{_WHAT} needs Django's task API: Django {version} has no "
                "django.tasks (Django 6 has, on Python >= 3.12), and the django-tasks "
                f"backport is not installed ({exc}): {install_hint('django')}, or "
                "pip install 'django-tasks>=0.12'"
            ) from exc
        prefix = "django_tasks"
    names = ("base", "exceptions", "signals", "backends.base")
    modules = {n: importlib.import_module(f"{prefix}.{n}") for n in names}
    # Django 6 keeps normalize_json in django.utils.json; the backport, in its utils.
    try:
        modules["json"] = importlib.import_module("django.utils.json")
    except ImportError:  # Django < 6
        modules["json"] = importlib.import_module(f"{prefix}.utils")
    return prefix, modules


if TYPE_CHECKING:
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    source: str
else:
    source, _m = _modules()
    task_backends = importlib.import_module(source).task_backends
    BaseTaskBackend = _m["backends.base"].BaseTaskBackend
    DEFAULT_TASK_QUEUE_NAME = _m["base"].DEFAULT_TASK_QUEUE_NAME
    Task = _m["base"].Task
    TaskContext = _m["base"].TaskContext
    TaskError = _m["base"].TaskError
    TaskResult = _m["base"].TaskResult
    TaskResultStatus = _m["base"].TaskResultStatus
    TASK_MAX_PRIORITY = _m["base"].TASK_MAX_PRIORITY
    TASK_MIN_PRIORITY = _m["base"].TASK_MIN_PRIORITY
    # Django 6 names it InvalidTask; the backport, InvalidTaskError.
    InvalidTask = (
        getattr(_m["exceptions"], "InvalidTask", None) or _m["exceptions"].InvalidTaskError
    )
    TaskResultDoesNotExist = _m["exceptions"].TaskResultDoesNotExist
    task_enqueued = _m["signals"].task_enqueued
    task_started = _m["signals"].task_started
    task_finished = _m["signals"].task_finished
    normalize_json = _m["json"].normalize_json


def get_module_path(value: object) -> str:
    """The dotted path that imports ``value`` (a function, a Task's function, a class)."""
    return f"{value.__module__}.{value.__qualname__}"  # type: ignore[attr-defined]
