"""The worker's side: a task's registry entry, one attempt of it, and Django's signals.

Nothing here imports the backend: a :class:`~django_pgqueue.tasks.backend.PgQueueBackend`
passes its ``OPTIONS`` in (:func:`set_backend_defaults`) when it is created, which is before any
of its tasks exist (Django validates a task against its backend as the task is made).
"""

from __future__ import annotations

import contextlib
import json
import logging
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTaskBackend
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from django_pgqueue import registry
from django_pgqueue.exceptions import UnknownJob
from django_pgqueue.printable import get_logger
from django_pgqueue.retries import is_final_attempt
from django_pgqueue.rules import to_seconds
from django_pgqueue.spec import JobSpec
from django_pgqueue.sql import dumps
from django_pgqueue.tasks.results import result_from_job, task_as_enqueued
from django_pgqueue.worker.performer import TRACEBACK_LOGGED

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.tasks.base import PgQueueTask

#: Keys of a backend's ``OPTIONS``; each is also an option of ``@task`` (per task).
OPTION_NAMES = ("max_attempts", "backoff_base", "backoff_max", "timeout")

# Backend alias -> its OPTIONS (checked), set by each PgQueueBackend as it is created.
_backend_defaults: dict[str, dict[str, Any]] = {}


def set_backend_defaults(alias: str, options: Mapping[str, Any]) -> None:
    _backend_defaults[alias] = {name: to_seconds(options.get(name)) for name in OPTION_NAMES}


def task_spec(task: PgQueueTask) -> JobSpec:
    """The task's :class:`JobSpec`: its own options, then its backend's ``OPTIONS``, then the
    ``PGQUEUE_*`` settings (left to the spec). Raises ValueError/TypeError for bad values."""
    with contextlib.suppress(InvalidTaskBackend):
        task.get_backend()  # made on first use (and after a settings change): it passes OPTIONS
    return JobSpec(
        name=task.module_path,
        queue=task.queue_name,
        priority=int(task.priority),
        run_after=task.run_after,
        max_attempts=task.max_attempts,
        backoff_base=to_seconds(task.backoff_base),
        backoff_max=to_seconds(task.backoff_max),
        timeout=to_seconds(task.timeout),
    ).with_defaults(**_backend_defaults.get(task.backend, {}))


logger = get_logger("django_pgqueue.tasks")


class TaskRunnable:
    """A task's entry in the job registry (``registry.Runnable``): what a worker runs."""

    __slots__ = ("task",)
    #: What the registry calls it in messages.
    kind = "django.tasks task"

    def __init__(self, task: PgQueueTask) -> None:
        self.task = task

    def __repr__(self) -> str:
        return f"<task {self.task.module_path}>"

    @property
    def name(self) -> str:
        return self.task.module_path

    @property
    def func(self) -> Callable[..., Any]:
        # The registry compares origins (module, qualname) to allow re-imports.
        return self.task.func

    @property
    def spec(self) -> JobSpec:
        return task_spec(self.task)

    def run(self, job: Job) -> Any:
        return run_attempt(task_as_enqueued(self.task, job), job)


def register(task: PgQueueTask) -> None:
    """Put ``task`` in the job registry under its module path (once per function)."""
    try:
        current = registry.get(task.module_path)
    except UnknownJob:
        current = None
    if isinstance(current, TaskRunnable) and current.task.func is task.func:
        return  # ``using()`` copies and re-validations keep the first registration
    registry.register(TaskRunnable(task))


def run_attempt(task: PgQueueTask, job: Job) -> Any:
    """Run one attempt of ``task`` for ``job`` (claimed, running) and send Django's signals.

    ``task_finished`` follows every attempt: ``SUCCESSFUL``; ``READY`` when the attempt failed
    and a retry is scheduled; ``FAILED`` when it failed for good. For failures it is sent inside
    the ``except`` block, so ``sys.exc_info()`` (and Django's logging) sees the exception.
    """
    result = result_from_job(job, task, task.backend)
    sender = _backend_class(task)
    send(task_started, sender, result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *job.args, **job.kwargs)
        else:
            value = task.call(*job.args, **job.kwargs)
        value = json_return_value(task, value)
    except Exception as exc:
        # The worker retries while attempts remain (``worker.performer``): say which it will be.
        final = is_final_attempt(job.attempts, job.max_attempts)
        cls = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        object.__setattr__(
            result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY
        )
        if final:
            object.__setattr__(result, "finished_at", timezone.now())
        send(task_finished, sender, result)
        if _django_logs_traceback(final):
            # Django's receiver of task_finished logged it with the traceback: the worker's
            # line for this attempt leaves it out (one traceback per failure).
            with contextlib.suppress(AttributeError):
                setattr(exc, TRACEBACK_LOGGED, True)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    send(task_finished, sender, result)
    return value


def _django_logs_traceback(final: bool) -> bool:
    """Whether Django's ``log_task_finished`` receiver just logged the exception with its
    traceback: at ERROR for a task that failed for good, at INFO before a retry."""
    django_logger = logging.getLogger("django.tasks")  # noqa: TID251  (Django's, read only)
    level = logging.ERROR if final else logging.INFO
    return django_logger.isEnabledFor(level) and django_logger.hasHandlers()


def _backend_class(task: Task[..., Any]) -> type[BaseTaskBackend]:
    """The class of the task's backend: the sender of Django's task signals."""
    try:
        return type(task.get_backend())
    except InvalidTaskBackend:
        return BaseTaskBackend


def json_return_value(task: Task[..., Any], value: Any) -> Any:
    """``value`` normalized like Django does (tuples -> lists); TypeError if not JSON."""
    try:
        normalized = normalize_json(value)
        back = json.loads(dumps(normalized))
        if back == normalized:
            return normalized
        problem = f"it changes in a JSON round trip (comes back as {back!r})"
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    raise TypeError(
        f"Task {task.module_path!r} returned {value!r} of type {type(value).__name__}, which "
        f"cannot be stored as its JSON return value: {problem}"
    )


def send(signal: Signal, sender: type[BaseTaskBackend], result: TaskResult[..., Any]) -> None:
    """Send robustly: a failing receiver is logged and never breaks an enqueue or a task."""
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "Signal receiver %r failed for task result %s",
                receiver,
                result.id,
                exc_info=response,
            )
