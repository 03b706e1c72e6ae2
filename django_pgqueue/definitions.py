"""``@job`` and the handle it returns."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from django.db import DEFAULT_DB_ALIAS, transaction

from django_pgqueue import enqueue as _enqueue
from django_pgqueue import registry
from django_pgqueue.conf import settings
from django_pgqueue.enqueue import JobOptions
from django_pgqueue.exceptions import InvalidJobArguments

if TYPE_CHECKING:
    from django_pgqueue.models import Job

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class JobFunction[**P, R]:
    """A function registered as a job. Calling it runs it inline; ``enqueue`` queues it.

    Frozen: ``using(...)`` returns a copy with other options, as Django's ``Task.using`` does.
    """

    func: Callable[P, R]
    options: JobOptions
    backoff_base: float | None = None
    backoff_max: float | None = None
    #: The database whose transaction ``enqueue_on_commit`` waits for (default: Django's default).
    commit_using: str | None = None
    #: Seconds an attempt may run before it fails as hung (None: ``PGQUEUE_JOB_TIMEOUT``).
    timeout: float | None = None
    signature: inspect.Signature = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signature", inspect.signature(self.func))
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(self.func, attr):
                object.__setattr__(self, attr, getattr(self.func, attr))

    @property
    def name(self) -> str:
        return self.options.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        commit_using: str | None = None,
    ) -> JobFunction[P, R]:
        """A copy with these options replaced (``None`` keeps the current value)."""
        current = self.options
        options = JobOptions(
            name=current.name,
            queue=current.queue if queue is None else queue,
            priority=current.priority if priority is None else priority,
            run_after=current.run_after if run_after is None else run_after,
            max_attempts=current.max_attempts if max_attempts is None else max_attempts,
            unique_key=current.unique_key if unique_key is None else unique_key,
            concurrency_key=current.concurrency_key if concurrency_key is None else concurrency_key,
        )
        return dataclasses.replace(
            self, options=options, commit_using=commit_using or self.commit_using
        )

    # ----- enqueueing ------------------------------------------------------------------------

    def serialize(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        """Check arguments against the signature and JSON; raises :class:`InvalidJobArguments`."""
        return _enqueue.serialize_arguments(self.name, args, kwargs, self.signature)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """INSERT the job in the caller's transaction on the queue database; returns the row.

        With a ``unique_key`` already pending or running, returns that job instead, with
        ``job.deduplicated`` set to True.
        """
        args_json, kwargs_json = self.serialize(args, kwargs)
        return _enqueue.enqueue(self.options, args_json, kwargs_json)

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Enqueue once the current transaction commits; nothing happens if it rolls back.

        Arguments are checked now, so bad input fails at the call site.
        """
        args_json, kwargs_json = self.serialize(args, kwargs)
        transaction.on_commit(
            functools.partial(_enqueue.enqueue, self.options, args_json, kwargs_json),
            using=self.commit_using or DEFAULT_DB_ALIAS,
        )

    def enqueue_many(self, calls: Iterable[Sequence[Any] | Mapping[str, Any]]) -> list[int]:
        """Bulk-insert one job per item: a tuple of positional arguments or a dict of keyword
        arguments. One round trip per 5,000 jobs; returns the job ids in input order."""
        payloads = []
        for index, call in enumerate(calls):
            call_args: Sequence[Any] = ()
            call_kwargs: Mapping[str, Any] = {}
            if type(call) is tuple:  # the common case, without ABC checks
                call_args = call
            elif isinstance(call, Mapping):
                call_kwargs = call
            elif isinstance(call, Sequence) and not isinstance(call, str | bytes):
                call_args = call
            else:
                raise InvalidJobArguments(
                    f"Job {self.name!r}: item {index} of enqueue_many must be a tuple of "
                    f"arguments or a dict of keyword arguments, not {type(call).__name__}"
                )
            try:
                payloads.append(self.serialize(call_args, call_kwargs))
            except InvalidJobArguments as exc:
                raise InvalidJobArguments(f"Item {index} of enqueue_many: {exc}") from None
        return _enqueue.enqueue_many(self.options, payloads)

    # ----- the worker's side (registry.Runnable) ---------------------------------------------

    def run(self, job: Job) -> Any:
        return self.func(*job.args, **job.kwargs)

    def retry_delay(self, attempt: int) -> float:
        return _enqueue.retry_delay(
            attempt,
            self.backoff_base if self.backoff_base is not None else settings.BACKOFF_BASE,
            self.backoff_max if self.backoff_max is not None else settings.BACKOFF_MAX,
            settings.BACKOFF_JITTER,
        )


@overload
def job[**P, R](func: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    run_after: datetime | timedelta | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...


def job[**P, R](
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    run_after: datetime | timedelta | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    timeout: float | None = None,
) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
    """Register a function as a job, bare (``@job``) or with options (``@job(queue=...)``).

    The job's name is the function's dotted path unless ``name`` is given; the worker finds the
    function by that name in its registry, never by importing a path read from the table.
    """

    def decorate(f: Callable[P, R]) -> JobFunction[P, R]:
        if inspect.iscoroutinefunction(f):
            raise TypeError(f"@job does not take coroutine functions ({f.__qualname__})")
        options = JobOptions(
            name=name or f"{f.__module__}.{f.__qualname__}",
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            run_after=run_after,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
        )
        handle = JobFunction(
            func=f,
            options=options,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            timeout=timeout,
        )
        registry.register(handle)
        return handle

    if func is not None:
        return decorate(func)
    return decorate
