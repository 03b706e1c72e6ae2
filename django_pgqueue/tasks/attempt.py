"""One attempt of a task on a worker, as Django's ``TaskResult`` shows it: the signals
``task_started`` and ``task_finished``, the attempt's errors and its JSON return value.

It needs only Django's :class:`~django.tasks.Task`; what a :class:`~.base.PgQueueTask` adds
(its options, its job spec, its registry entry) is :mod:`.base`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import traceback
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTaskBackend
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from django_pgqueue.printable import get_logger
from django_pgqueue.retries import is_final_attempt
from django_pgqueue.sql import dumps
from django_pgqueue.tasks.results import result_from_job
from django_pgqueue.worker.performer import TRACEBACK_LOGGED

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.tasks")


def run_attempt(task: Task[..., Any], job: Job) -> Any:
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
        _failed(task, job, result, sender, exc)
        raise
    return _succeeded(result, sender, value)


async def arun_attempt(task: Task[..., Any], job: Job) -> Any:
    """:func:`run_attempt` for an ``async def`` task, awaited on the worker's event loop (not
    through ``async_to_sync`` on a thread): the same signals, errors and return value."""
    result = result_from_job(job, task, task.backend)
    sender = _backend_class(task)
    send(task_started, sender, result)
    try:
        if task.takes_context:
            value = await task.acall(TaskContext(task_result=result), *job.args, **job.kwargs)
        else:
            value = await task.acall(*job.args, **job.kwargs)
        value = json_return_value(task, value)
    except Exception as exc:
        _failed(task, job, result, sender, exc)
        raise
    return _succeeded(result, sender, value)


def _failed(
    task: Task[..., Any],
    job: Job,
    result: TaskResult[..., Any],
    sender: type[BaseTaskBackend],
    exc: Exception,
) -> None:
    """The attempt raised ``exc`` (the caller re-raises it, inside its ``except`` block, so
    ``sys.exc_info()`` still sees it): record it and say so."""
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


def _succeeded(result: TaskResult[..., Any], sender: type[BaseTaskBackend], value: Any) -> Any:
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
