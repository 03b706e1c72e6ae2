"""``PgQueueBackend``: enqueue tasks as job rows, read their results back."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error
from django.tasks import Task, TaskResult
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.json import normalize_json

from django_pgqueue import operations, registry, workflows
from django_pgqueue.arguments import serialize_arguments
from django_pgqueue.conf import settings
from django_pgqueue.rules import JOB_OPTIONS
from django_pgqueue.spec import JobSpec
from django_pgqueue.tasks.attempt import send
from django_pgqueue.tasks.base import (
    OPTION_NAMES,
    PgQueueTask,
    TaskRunnable,
    register,
    set_backend_defaults,
    task_as_enqueued,
    task_spec,
)
from django_pgqueue.tasks.results import result_from_job

_MAX_ID = 2**63 - 1


class PgQueueBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as rows of the pgqueue job table, run by ``run_jobs``."""

    task_class = PgQueueTask

    supports_defer = True
    supports_async_task = True  # coroutine functions run on the worker's event loop
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]"
        for queue in self.queues:
            problem = JOB_OPTIONS["queue"].problem(queue)
            if queue is None or problem:
                raise InvalidTaskBackend(
                    f"{where}['QUEUES'] holds {queue!r}: queue names "
                    f"{problem or 'must not be None'} ({JOB_OPTIONS['queue'].describe()})."
                )
        if not isinstance(self.options, Mapping):
            raise InvalidTaskBackend(f"{where}['OPTIONS'] must be a dict.")
        unknown = sorted(set(self.options) - set(OPTION_NAMES))
        if unknown:
            raise InvalidTaskBackend(
                f"{where}['OPTIONS'] has unknown keys {unknown}; PgQueueBackend takes "
                f"{', '.join(OPTION_NAMES)}."
            )
        try:
            defaults: dict[str, Any] = {name: self.options.get(name) for name in OPTION_NAMES}
            JobSpec(name="options", **defaults)
        except (TypeError, ValueError) as exc:
            raise InvalidTaskBackend(f"{where}['OPTIONS']: {exc}") from None
        self.max_attempts: int | None = self.options.get("max_attempts")
        self.backoff_base: float | timedelta | None = self.options.get("backoff_base")
        self.backoff_max: float | timedelta | None = self.options.get("backoff_max")
        self.timeout: float | timedelta | None = self.options.get("timeout")
        set_backend_defaults(alias, self.options)

    # ----- validation ------------------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        if isinstance(task.run_after, timedelta):
            # Django's checks expect a datetime; a timedelta counts from each enqueue.
            super().validate_task(_WithoutRunAfter(task))
        else:
            super().validate_task(task)
        if task.queue_name is None or JOB_OPTIONS["queue"].problem(task.queue_name):
            raise InvalidTask(
                f"queue_name {JOB_OPTIONS['queue'].problem(task.queue_name) or 'is None'} "
                f"({JOB_OPTIONS['queue'].describe()})."
            )
        if isinstance(task, PgQueueTask):
            try:
                task_spec(task)
            except (TypeError, ValueError) as exc:
                raise InvalidTask(f"Task {task.module_path!r}: {exc}") from None

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        messages = list(super().check(**kwargs))
        if not apps.is_installed("django_pgqueue"):
            messages.append(
                Error(
                    f"TASKS[{self.alias!r}] uses PgQueueBackend, but django_pgqueue is not in "
                    "INSTALLED_APPS.",
                    hint="Add 'django_pgqueue' to INSTALLED_APPS and run migrate.",
                    id="django_pgqueue.E010",
                )
            )
        return messages

    # ----- enqueue ---------------------------------------------------------------------------

    def enqueue[**P, R](
        self, task: Task[P, R], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[P, R]:
        """INSERT the task's job in the current transaction of the queue database.

        Arguments are normalized like Django does (tuples become lists) and must then survive a
        JSON round trip; otherwise :class:`~django_pgqueue.InvalidJobArguments` names the
        culprit and nothing is inserted.
        """
        self.validate_task(task)
        ours = _pgqueue_task(task)
        register(ours)
        args_json, kwargs_json = _serialize(ours, args, kwargs)
        job = operations.insert(
            operations.DjangoDatabase(settings.DATABASE),
            task_spec(ours),
            args_json,
            kwargs_json,
            batch=workflows.joining(),  # inside a ``batch()`` block: a member (docs/workflows.md)
        )
        result = result_from_job(job, task, self.alias)
        send(task_enqueued, type(self), result)
        return result

    # ----- results ---------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's current state, read from its job row.

        Raises ``TaskResultDoesNotExist`` for ids of no job (or of a ``@job``, not a task), and
        :class:`~django_pgqueue.UnknownJob` for a task that no module imported in this process
        defines.
        """
        from django_pgqueue.models import Job

        text = str(result_id)
        if not (text.isascii() and text.isdecimal()) or int(text) > _MAX_ID:
            raise TaskResultDoesNotExist(result_id)
        job = Job.objects.using(settings.DATABASE).filter(pk=int(text)).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        runnable = registry.get(job.name)  # UnknownJob: the defining module isn't imported
        if not isinstance(runnable, TaskRunnable):
            raise TaskResultDoesNotExist(
                f"{result_id} is the id of @job {job.name!r}, not of a django.tasks task"
            )
        return result_from_job(job, task_as_enqueued(runnable.task, job), self.alias)


class _WithoutRunAfter:
    """A task seen without its (timedelta) run_after, for Django's own validation."""

    run_after = None

    def __init__(self, task: Task[..., Any]) -> None:
        self._task = task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)


def _pgqueue_task(task: Task[..., Any]) -> PgQueueTask:
    if not isinstance(task, PgQueueTask):
        raise InvalidTask(
            f"Task {task.module_path!r} was not created by a PgQueueBackend, so workers cannot "
            "know it: define it with @task(backend=...) naming a PgQueueBackend alias (or make "
            "one the 'default'), not with .using(backend=...) on another backend's task."
        )
    return task


# ----- arguments -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _call_signature(func: Callable[..., Any], takes_context: bool) -> inspect.Signature:
    """The signature callers pass arguments for (without ``context``)."""
    signature = inspect.signature(func)
    if takes_context:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def _normalized(value: Any) -> Any:
    # Django's normalization (tuples -> lists, bytes -> str); anything it refuses is kept as is
    # so that serialize_arguments names the argument.
    try:
        return normalize_json(value)
    except (TypeError, ValueError):
        return value


def _serialize(
    task: PgQueueTask, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[str, str]:
    return serialize_arguments(
        task.module_path,
        [_normalized(value) for value in args],
        {key: _normalized(value) for key, value in kwargs.items()},
        _call_signature(task.func, task.takes_context),
    )
