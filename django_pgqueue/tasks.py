"""A ``django.tasks`` backend (Django 6.0+) whose tasks run on ``manage.py run_jobs`` workers.

::

    TASKS = {"default": {"BACKEND": "django_pgqueue.tasks.PgQueueBackend"}}

A task is a row of the job table like any ``@job``: same claim, retries, dead jobs and admin.
Its job name is the task's ``module_path``. Workers run only names in
:mod:`django_pgqueue.registry`: each task registers itself there when it is created (the
backend's ``task_class``), and :func:`autodiscover` (called from the app's ``ready()``) imports
every installed app's ``tasks`` module, so a worker knows the same tasks as the web processes.
See ``docs/django-tasks.md``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from django.apps import apps
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error
from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules, import_string

from django_pgqueue import enqueue as _enqueue
from django_pgqueue import registry, sql
from django_pgqueue.conf import settings
from django_pgqueue.enqueue import JobOptions
from django_pgqueue.exceptions import UnknownJob

try:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import DEFAULT_TASK_PRIORITY, TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json  # also new in Django 6.0
except ImportError as exc:  # Django < 6.0
    import django

    # A ModuleNotFoundError for this module's own name: tools that import every app's
    # ``tasks`` module and skip missing ones (Celery's autodiscovery) skip this one too.
    raise ModuleNotFoundError(
        f"django_pgqueue.tasks is a backend for django.tasks, which needs Django 6.0 or later "
        f"(this is Django {django.get_version()}). On this version, use @job from "
        "django_pgqueue, or upgrade Django.",
        name=__name__,
    ) from exc

if TYPE_CHECKING:
    from django_pgqueue.models import Job

    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task

__all__ = ["PgQueueBackend", "PgQueueTask", "autodiscover", "task"]

logger = logging.getLogger("django_pgqueue.tasks")

#: Our status -> Django's.
STATUS_MAP: dict[str, TaskResultStatus] = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

#: Keys of a backend's ``OPTIONS``; each is also an option of ``@task`` (per task).
OPTION_NAMES = ("max_attempts", "backoff_base", "backoff_max", "timeout")

_MAX_QUEUE_LENGTH = 100


# ----- the Task class ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(_TaskBase):
    """Django's ``Task`` plus our retry options; ``PgQueueBackend.task_class``.

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
        _register(self)

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
    PgQueueBackend (e.g. ``ImmediateBackend`` in tests), the retry options are dropped and the
    backend's own task class is used, so modules defining tasks import under any TASKS.
    """
    retry_options = {
        "max_attempts": max_attempts,
        "backoff_base": backoff_base,
        "backoff_max": backoff_max,
        "timeout": timeout,
    }

    def wrapper(func: Callable[..., Any]) -> Task[..., Any]:
        task_class = task_backends[backend].task_class
        extra = retry_options if issubclass(task_class, PgQueueTask) else {}
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


class TaskRunnable:
    """A task's entry in the job registry: how a worker runs one attempt of it."""

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
        return _run_attempt(_task_as_enqueued(self.task, job), job)

    def retry_delay(self, attempt: int) -> float:
        task = self.task
        backend = _pgqueue_backend(task)
        base = _first(
            task.backoff_base, backend.backoff_base if backend else None, settings.BACKOFF_BASE
        )
        cap = _first(
            task.backoff_max, backend.backoff_max if backend else None, settings.BACKOFF_MAX
        )
        return _enqueue.retry_delay(attempt, base, cap, settings.BACKOFF_JITTER)

    @property
    def timeout(self) -> float | None:
        """Read by the worker (``registry.timeout_of``); None means ``PGQUEUE_JOB_TIMEOUT``."""
        backend = _pgqueue_backend(self.task)
        value = self.task.timeout
        if value is None and backend is not None:
            value = backend.timeout
        if value is None:
            return None
        return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _first(*values: float | timedelta | None) -> float:
    for value in values:
        if value is not None:
            return value.total_seconds() if isinstance(value, timedelta) else float(value)
    raise AssertionError("the last value is a setting, never None")


def _register(task: PgQueueTask) -> None:
    """Put ``task`` in the job registry under its module path (once per function)."""
    try:
        current = registry.get(task.module_path)
    except UnknownJob:
        current = None
    if isinstance(current, TaskRunnable) and current.task.func is task.func:
        return  # ``using()`` copies and re-validations keep the first registration
    registry.register(TaskRunnable(task))


def _pgqueue_backend(task: Task[..., Any]) -> PgQueueBackend | None:
    try:
        backend = task.get_backend()
    except InvalidTaskBackend:
        return None
    return backend if isinstance(backend, PgQueueBackend) else None


# ----- the backend ------------------------------------------------------------------------------


class PgQueueBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as rows of the pgqueue job table, run by ``run_jobs``."""

    task_class = PgQueueTask

    supports_defer = True
    supports_async_task = True  # coroutine functions run through async_to_sync
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]"
        for queue in self.queues:
            if not (isinstance(queue, str) and 0 < len(queue) <= _MAX_QUEUE_LENGTH):
                raise InvalidTaskBackend(
                    f"{where}['QUEUES'] holds {queue!r}: queue names are non-empty strings of "
                    f"at most {_MAX_QUEUE_LENGTH} characters."
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
            _check_options(
                self.options.get("max_attempts"),
                self.options.get("backoff_base"),
                self.options.get("backoff_max"),
                self.options.get("timeout"),
            )
        except ValueError as exc:
            raise InvalidTaskBackend(f"{where}['OPTIONS']: {exc}") from None
        self.max_attempts: int | None = self.options.get("max_attempts")
        self.backoff_base: float | timedelta | None = self.options.get("backoff_base")
        self.backoff_max: float | timedelta | None = self.options.get("backoff_max")
        self.timeout: float | timedelta | None = self.options.get("timeout")

    # ----- validation ------------------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        if isinstance(task.run_after, timedelta):
            # Django's checks expect a datetime; a timedelta counts from each enqueue.
            super().validate_task(_WithoutRunAfter(task))
        else:
            super().validate_task(task)
        queue = task.queue_name
        if not (isinstance(queue, str) and 0 < len(queue) <= _MAX_QUEUE_LENGTH):
            raise InvalidTask(
                f"queue_name must be a non-empty string of at most {_MAX_QUEUE_LENGTH} "
                f"characters, got {queue!r}."
            )
        if isinstance(task, PgQueueTask):
            try:
                _check_options(task.max_attempts, task.backoff_base, task.backoff_max, task.timeout)
            except ValueError as exc:
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
        pgtask = _pgqueue_task(task)
        _register(pgtask)
        args_json, kwargs_json = _serialize(pgtask, args, kwargs)
        options = JobOptions(
            name=pgtask.module_path,
            queue=pgtask.queue_name,
            priority=int(pgtask.priority),
            run_after=pgtask.run_after,
            max_attempts=pgtask.max_attempts or self.max_attempts,
        )
        job = _enqueue.enqueue(options, args_json, kwargs_json)
        result: TaskResult[P, R] = _result_from_job(job, task, self.alias)
        _send(task_enqueued, type(self), result)
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
        if not (text.isascii() and text.isdecimal()) or int(text) > 2**63 - 1:
            raise TaskResultDoesNotExist(result_id)
        job = Job.objects.using(settings.DATABASE).filter(pk=int(text)).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        runnable = registry.get(job.name)  # UnknownJob: the defining module isn't imported
        if not isinstance(runnable, TaskRunnable):
            raise TaskResultDoesNotExist(
                f"{result_id} is the id of @job {job.name!r}, not of a django.tasks task"
            )
        return _result_from_job(job, _task_as_enqueued(runnable.task, job), self.alias)


def _pgqueue_task(task: Task[..., Any]) -> PgQueueTask:
    if not isinstance(task, PgQueueTask):
        raise InvalidTask(
            f"Task {task.module_path!r} was not created by a PgQueueBackend, so workers cannot "
            "know it: define it with @task(backend=...) naming a PgQueueBackend alias (or make "
            "one the 'default'), not with .using(backend=...) on another backend's task."
        )
    return task


class _WithoutRunAfter:
    """A task seen without its (timedelta) run_after, for Django's own validation."""

    run_after = None

    def __init__(self, task: Task[..., Any]) -> None:
        self._task = task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)


def _check_options(max_attempts: Any, backoff_base: Any, backoff_max: Any, timeout: Any) -> None:
    if max_attempts is not None and (
        not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
    ):
        raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    for key, value in (("backoff_base", backoff_base), ("backoff_max", backoff_max)):
        if value is None:
            continue
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise ValueError(
                f"{key} must be a number of seconds >= 0 or a timedelta, got {value!r}"
            )
    if timeout is not None:
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            raise ValueError(
                f"timeout must be a number of seconds > 0 or a timedelta, got {timeout!r}"
            )


# ----- arguments and results --------------------------------------------------------------------


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
    return _enqueue.serialize_arguments(
        task.module_path,
        [_normalized(value) for value in args],
        {key: _normalized(value) for key, value in kwargs.items()},
        _call_signature(task.func, task.takes_context),
    )


def _task_as_enqueued(task: PgQueueTask, job: Job) -> PgQueueTask:
    """The registered task with the queue, priority and max_attempts its job was given."""
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


def _worker_ids(job: Job) -> list[str]:
    """One worker id per attempt of the current run (a manual retry starts a new run).

    Every failed attempt left an entry in ``errors``; a running or completed job's latest
    attempt is ``locked_by``'s.
    """
    status = job.status
    finished_attempt = status in ("running", "completed")
    failed = max(job.attempts - 1, 0) if finished_attempt else job.attempts
    entries = (job.errors or [])[-failed:] if failed else []
    ids = [str(entry.get("worker_id") or "") for entry in entries]
    ids = [""] * (failed - len(ids)) + ids
    if finished_attempt and job.attempts:
        ids.append(job.locked_by or "")
    return ids


def _result_from_job[**P, R](job: Job, task: Task[P, R], alias: str) -> TaskResult[P, R]:
    result: TaskResult[P, R] = TaskResult(
        task=task,
        id=str(job.pk),
        status=STATUS_MAP[job.status],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=[
            TaskError(
                exception_class_path=str(entry.get("exception_class", "")),
                traceback=str(entry.get("traceback", "")),
            )
            for entry in job.errors or []
        ],
        worker_ids=_worker_ids(job),
    )
    if job.status == "completed":
        object.__setattr__(result, "_return_value", job.result)
    return result


def _json_return_value(task: Task[..., Any], value: Any) -> Any:
    try:
        normalized = normalize_json(value)
        if json.loads(sql.dumps(normalized)) == normalized:
            return normalized
        back = json.loads(sql.dumps(normalized))
        problem = f"it changes in a JSON round trip (comes back as {back!r})"
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    raise TypeError(
        f"Task {task.module_path!r} returned {value!r} of type {type(value).__name__}, which "
        f"cannot be stored as its JSON return value: {problem}"
    )


# ----- the worker's side ------------------------------------------------------------------------


def _run_attempt(task: PgQueueTask, job: Job) -> Any:
    """Run one attempt of ``task`` for ``job`` (claimed, running) and send Django's signals.

    ``task_finished`` follows every attempt: ``SUCCESSFUL``; ``READY`` when the attempt failed
    and a retry is scheduled; ``FAILED`` when it failed for good. For failures it is sent inside
    the ``except`` block, so ``sys.exc_info()`` (and Django's logging) sees the exception.
    """
    result = _result_from_job(job, task, task.backend)
    backend = _pgqueue_backend(task)
    sender: type[BaseTaskBackend] = type(backend) if backend is not None else PgQueueBackend
    _send(task_started, sender, result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *job.args, **job.kwargs)
        else:
            value = task.call(*job.args, **job.kwargs)
        value = _json_return_value(task, value)
    except Exception as exc:
        # The worker retries while attempts remain (``execute``); say which it will be.
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
        _send(task_finished, sender, result)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    _send(task_finished, sender, result)
    return value


def _send(signal: Signal, sender: type[BaseTaskBackend], result: TaskResult[..., Any]) -> None:
    """Send robustly: a failing receiver is logged and never breaks an enqueue or a task."""
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "Signal receiver %r failed for task result %s",
                receiver,
                result.id,
                exc_info=response,
            )


# ----- discovery --------------------------------------------------------------------------------


def uses_pgqueue_backend() -> bool:
    """Whether any ``TASKS`` backend is a :class:`PgQueueBackend` (or a subclass)."""
    configured = getattr(django_settings, "TASKS", {})
    if not isinstance(configured, Mapping):
        return False
    for params in configured.values():
        path = params.get("BACKEND") if isinstance(params, Mapping) else None
        if not isinstance(path, str):
            continue
        try:
            backend_class = import_string(path)
        except ImportError:
            continue  # Django reports it when that backend is used
        if isinstance(backend_class, type) and issubclass(backend_class, PgQueueBackend):
            return True
    return False


def autodiscover() -> None:
    """Import every installed app's ``tasks`` module when a ``TASKS`` backend is ours.

    Called from ``PgQueueConfig.ready()``: this is how a worker learns the ``@task`` functions
    (each registers itself as it is created), like ``jobs`` modules for ``@job``.
    """
    if uses_pgqueue_backend():
        autodiscover_modules("tasks")
