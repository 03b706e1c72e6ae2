"""The Task class of :class:`~django_pgqueue.tasks.PgQueueBackend`: its options, its
:class:`JobSpec`, its entry in the job registry (what a worker runs), and ``@task``.

Nothing here imports the backend: a :class:`~django_pgqueue.tasks.backend.PgQueueBackend`
passes its ``OPTIONS`` in (:func:`set_backend_defaults`) when it is created, which is before any
of its tasks exist (Django validates a task against its backend as the task is made).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task, task_backends
from django.tasks.base import DEFAULT_TASK_PRIORITY
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend

from django_pgqueue import registry
from django_pgqueue.exceptions import UnknownJob
from django_pgqueue.rules import to_seconds
from django_pgqueue.spec import JobSpec
from django_pgqueue.tasks.attempt import arun_attempt, run_attempt

if TYPE_CHECKING:
    from django_pgqueue.models import Job

    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task

__all__ = ["OPTION_NAMES", "PgQueueTask", "task"]

#: Keys of a backend's ``OPTIONS``; each is also an option of ``@task`` (per task).
OPTION_NAMES = ("max_attempts", "backoff_base", "backoff_max", "timeout")

# Backend alias -> its OPTIONS (checked), set by each PgQueueBackend as it is created.
_backend_defaults: dict[str, dict[str, Any]] = {}


def set_backend_defaults(alias: str, options: Mapping[str, Any]) -> None:
    _backend_defaults[alias] = {name: to_seconds(options.get(name)) for name in OPTION_NAMES}


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(_TaskBase):
    """Django's ``Task`` plus our options; ``PgQueueBackend.task_class``.

    On Django 6.1, ``@task(max_attempts=5, backoff_base=30, timeout=60)`` passes these through.
    ``None`` means the backend's ``OPTIONS``, then the ``PGQUEUE_*`` setting.
    """

    #: Attempts before the task fails for good (1 = never retried).
    max_attempts: int | None = None
    #: Retry delay: ``backoff_base * 2 ** (attempt - 1)`` seconds (plus jitter) ...
    backoff_base: float | timedelta | None = None
    #: ... capped at ``backoff_max`` seconds.
    backoff_max: float | timedelta | None = None
    #: Seconds an attempt may run before it fails as hung (``PGQUEUE_JOB_TIMEOUT``).
    timeout: float | timedelta | None = None

    def __post_init__(self) -> None:
        # Explicit base call: zero-argument super() does not work in a slots dataclass.
        Task.__post_init__(self)
        register(self)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | timedelta | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
    ) -> PgQueueTask:
        """A copy with these defaults changed; ``run_after`` may be a timedelta from enqueue."""
        changes: dict[str, Any] = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after,
            "backend": backend,
            "max_attempts": max_attempts,
        }
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


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
        is_async=inspect.iscoroutinefunction(task.func),
    ).with_defaults(**_backend_defaults.get(task.backend, {}))


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
        """The attempt's value; for an ``async def`` task, a coroutine the worker awaits on
        its event loop (docs/async.md)."""
        if inspect.iscoroutinefunction(self.task.func):
            return arun_attempt(task_as_enqueued(self.task, job), job)
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


def task_as_enqueued(task: PgQueueTask, job: Job) -> PgQueueTask:
    """The registered ``task`` with the queue, priority and max_attempts ``job`` was given."""
    if (task.queue_name, task.priority, task.max_attempts) == (
        job.queue,
        job.priority,
        job.max_attempts,
    ):
        return task
    try:
        return replace(
            task, queue_name=job.queue, priority=job.priority, max_attempts=job.max_attempts
        )
    except InvalidTask:
        return task  # e.g. a queue since removed from QUEUES: the job still ran there


@overload
def task(function: Callable[..., Any], /) -> Task[..., Any]: ...


@overload
def task(
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    max_attempts: int | None = None,
    backoff_base: float | timedelta | None = None,
    backoff_max: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
) -> Callable[[Callable[..., Any]], Task[..., Any]]: ...


def task(
    function: Callable[..., Any] | None = None,
    /,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    max_attempts: int | None = None,
    backoff_base: float | timedelta | None = None,
    backoff_max: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
) -> Task[..., Any] | Callable[[Callable[..., Any]], Task[..., Any]]:
    """Django's ``@task`` with our options (``max_attempts``, backoff, ``timeout``), typed, on
    Django 6.0 too.

    (Django 6.1's own ``@task(max_attempts=...)`` works as well.) When ``backend`` is not a
    PgQueueBackend (e.g. ``ImmediateBackend`` in tests), our options are dropped and the
    backend's own task class is used, so modules defining tasks import under any TASKS.
    """
    options = {
        "max_attempts": max_attempts,
        "backoff_base": backoff_base,
        "backoff_max": backoff_max,
        "timeout": timeout,
    }

    def wrapper(func: Callable[..., Any]) -> Task[..., Any]:
        task_class = task_backends[backend].task_class
        extra = options if issubclass(task_class, PgQueueTask) else {}
        return task_class(
            func=func,
            priority=priority,
            queue_name=queue_name,
            backend=backend,
            takes_context=takes_context,
            run_after=None,
            **extra,
        )

    if function is not None:
        return wrapper(function)
    return wrapper
