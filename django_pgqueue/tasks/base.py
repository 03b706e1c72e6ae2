"""The Task class of :class:`~django_pgqueue.tasks.PgQueueBackend`, its options and ``@task``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task, task_backends
from django.tasks.base import DEFAULT_TASK_PRIORITY

from django_pgqueue.tasks.runnable import OPTION_NAMES, register

if TYPE_CHECKING:
    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task

__all__ = ["OPTION_NAMES", "PgQueueTask", "task"]


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
