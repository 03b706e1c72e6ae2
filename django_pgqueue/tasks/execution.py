"""The worker's side: a task's registry entry, one attempt of it, and Django's signals."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTaskBackend
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from django_pgqueue import enqueue as _enqueue
from django_pgqueue import registry, sql
from django_pgqueue.conf import settings
from django_pgqueue.exceptions import UnknownJob
from django_pgqueue.tasks.results import result_from_job, task_as_enqueued

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.tasks.backend import PgQueueBackend
    from django_pgqueue.tasks.base import PgQueueTask

logger = logging.getLogger("django_pgqueue.tasks")


class TaskRunnable:
    """A task's entry in the job registry (``registry.Runnable``): what a worker runs."""

    __slots__ = ("task",)

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

    def run(self, job: Job) -> Any:
        return run_attempt(task_as_enqueued(self.task, job), job)

    def retry_delay(self, attempt: int) -> float:
        task, backend = self.task, pgqueue_backend(self.task)
        base = _seconds(
            task.backoff_base, backend.backoff_base if backend else None, settings.BACKOFF_BASE
        )
        cap = _seconds(
            task.backoff_max, backend.backoff_max if backend else None, settings.BACKOFF_MAX
        )
        return _enqueue.retry_delay(attempt, base, cap, settings.BACKOFF_JITTER)

    @property
    def timeout(self) -> float | None:
        """Read by the worker (``registry.timeout_of``); None means ``PGQUEUE_JOB_TIMEOUT``."""
        backend = pgqueue_backend(self.task)
        value = self.task.timeout
        if value is None and backend is not None:
            value = backend.timeout
        return None if value is None else _seconds(value)


def _seconds(*values: float | timedelta | None) -> float:
    """The first value that is not None, in seconds."""
    for value in values:
        if value is not None:
            return value.total_seconds() if isinstance(value, timedelta) else float(value)
    raise ValueError("no value")


def register(task: PgQueueTask) -> None:
    """Put ``task`` in the job registry under its module path (once per function)."""
    try:
        current = registry.get(task.module_path)
    except UnknownJob:
        current = None
    if isinstance(current, TaskRunnable) and current.task.func is task.func:
        return  # ``using()`` copies and re-validations keep the first registration
    registry.register(TaskRunnable(task))


def pgqueue_backend(task: Task[..., Any]) -> PgQueueBackend | None:
    """The task's backend if it is a PgQueueBackend (None if not, or not configured)."""
    from django_pgqueue.tasks.backend import PgQueueBackend  # imports this module

    try:
        backend = task.get_backend()
    except InvalidTaskBackend:
        return None
    return backend if isinstance(backend, PgQueueBackend) else None


def run_attempt(task: PgQueueTask, job: Job) -> Any:
    """Run one attempt of ``task`` for ``job`` (claimed, running) and send Django's signals.

    ``task_finished`` follows every attempt: ``SUCCESSFUL``; ``READY`` when the attempt failed
    and a retry is scheduled; ``FAILED`` when it failed for good. For failures it is sent inside
    the ``except`` block, so ``sys.exc_info()`` (and Django's logging) sees the exception.
    """
    from django_pgqueue.tasks.backend import PgQueueBackend  # imports this module

    result = result_from_job(job, task, task.backend)
    backend = pgqueue_backend(task)
    sender: type[BaseTaskBackend] = type(backend) if backend is not None else PgQueueBackend
    send(task_started, sender, result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *job.args, **job.kwargs)
        else:
            value = task.call(*job.args, **job.kwargs)
        value = json_return_value(task, value)
    except Exception as exc:
        # The worker retries while attempts remain (``worker.execution``): say which it will be.
        final = job.attempts >= job.max_attempts
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
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    send(task_finished, sender, result)
    return value


def json_return_value(task: Task[..., Any], value: Any) -> Any:
    """``value`` normalized like Django does (tuples -> lists); TypeError if not JSON."""
    try:
        normalized = normalize_json(value)
        back = json.loads(sql.dumps(normalized))
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
