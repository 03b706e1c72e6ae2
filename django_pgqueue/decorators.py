"""``@job`` and the handle it returns."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar, overload

from django.db import DEFAULT_DB_ALIAS, transaction

from django_pgqueue import context, operations, registry, rules, workflows
from django_pgqueue.arguments import serialize_arguments
from django_pgqueue.conf import settings
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.spec import JobSpec

if TYPE_CHECKING:
    from django_pgqueue.models import Job

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class JobFunction[**P, R]:
    """A function registered as a job. Calling it runs it inline; ``enqueue`` queues it.

    Frozen: ``using(...)`` returns a copy with another :class:`JobSpec`, as Django's
    ``Task.using`` does.
    """

    #: What the registry calls it in messages.
    kind: ClassVar[str] = "job function"

    func: Callable[P, R]
    spec: JobSpec
    signature: inspect.Signature = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signature", inspect.signature(self.func))
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(self.func, attr):
                object.__setattr__(self, attr, getattr(self.func, attr))

    def __repr__(self) -> str:
        return f"<job {self.spec.name} ({self.func.__module__}.{self.func.__qualname__})>"

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if context.bound() is not None:  # in a worker (or called by a running job)
            return self.func(*args, **kwargs)
        if self.spec.is_async:  # the coroutine binds its standalone context as it runs
            return self._standalone(*args, **kwargs)  # type: ignore[return-value]
        # Called directly (a test): current_job() is a standalone context for this call.
        spec = self.spec
        context.bind(
            context.CurrentJob.standalone(
                spec.name, spec.resolved_queue, spec.resolved_max_attempts
            )
        )
        try:
            return self.func(*args, **kwargs)
        finally:
            context.bind(None)

    async def _standalone(self, *args: Any, **kwargs: Any) -> Any:
        """An ``async def`` job called directly: awaited with a standalone ``current_job()``
        for the call (a context variable: the caller's own context is left as it was)."""
        spec = self.spec
        token = context.bind_async(
            context.CurrentJob.standalone(
                spec.name, spec.resolved_queue, spec.resolved_max_attempts
            )
        )
        try:
            return await self.func(*args, **kwargs)  # type: ignore[misc]
        finally:
            context.unbind_async(token)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        commit_using: str | None = None,
        after: Iterable[Job | int] | None = None,
    ) -> JobFunction[P, R]:
        """A copy with these options replaced (``None`` keeps the current value).

        ``after``: jobs (or their ids) the job waits for: it is enqueued ``waiting`` and runs
        once every one of them has completed, cancelled if one ends dead or cancelled
        (docs/workflows.md).
        """
        spec = self.spec.using(
            queue=queue,
            priority=priority,
            run_after=run_after,
            max_attempts=max_attempts,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            rate_limit=rate_limit,
            rate_key=rate_key,
            commit_using=commit_using,
            after=None if after is None else workflows.job_ids(after),
        )
        return dataclasses.replace(self, spec=spec)

    def s(self, *args: P.args, **kwargs: P.kwargs) -> workflows.Signature:
        """A signature: this job with these arguments (checked now), not enqueued yet; for
        ``chain()``, a batch's callbacks, or ``.enqueue()`` later."""
        self.serialize(args, kwargs)
        return workflows.Signature(self, args, dict(kwargs))

    # ----- enqueueing ------------------------------------------------------------------------

    def serialize(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        """Check arguments against the signature and JSON; raises :class:`InvalidJobArguments`."""
        return serialize_arguments(self.name, args, kwargs, self.signature)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """INSERT the job in the caller's transaction on the queue database; returns the row.

        With a ``unique_key`` already pending or running, returns that job instead, with
        ``job.deduplicated`` set to True.
        """
        args_json, kwargs_json = self.serialize(args, kwargs)
        return operations.insert(
            self._database(), self.spec, args_json, kwargs_json, batch=workflows.joining()
        )

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``enqueue`` for async callers (an async view, an async job): the INSERT runs through
        ``sync_to_async`` on Django's thread for sync code, so inside a function that
        ``sync_to_async`` runs in a transaction, ``enqueue`` itself joins it (docs/async.md).
        Arguments are checked before anything is sent."""
        from asgiref.sync import sync_to_async

        args_json, kwargs_json = self.serialize(args, kwargs)
        return await sync_to_async(operations.insert)(
            self._database(), self.spec, args_json, kwargs_json, batch=workflows.joining()
        )

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Enqueue once the current transaction commits; nothing happens if it rolls back.

        Arguments are checked now, so bad input fails at the call site.
        """
        args_json, kwargs_json = self.serialize(args, kwargs)
        using = self.spec.commit_using or DEFAULT_DB_ALIAS
        transaction.on_commit(
            functools.partial(
                operations.insert,
                self._database(),
                self.spec,
                args_json,
                kwargs_json,
                batch=workflows.joining(on_commit=using),
            ),
            using=using,
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
        if not payloads:
            return []
        if self.spec.unique_key is not None:
            # Every job shares the key, so at most one is active: the first is enqueued (or the
            # active job using the key found) and every item gets that job's id.
            job = operations.insert(
                self._database(), self.spec, *payloads[0], batch=workflows.joining()
            )
            _warn_dropped_payloads(self.name, self.spec.unique_key, job, payloads)
            return [job.pk] * len(payloads)
        return operations.insert_many(
            self._database(), self.spec, payloads, batch=workflows.joining()
        )

    @staticmethod
    def _database() -> operations.DjangoDatabase:
        return operations.DjangoDatabase(settings.DATABASE)

    # ----- the worker's side (registry.Runnable) ---------------------------------------------

    def run(self, job: Job) -> Any:
        return self.func(*job.args, **job.kwargs)


class DroppedPayloadsWarning(UserWarning):
    """``enqueue_many`` with a unique key got items whose arguments differ from the job kept."""


def _warn_dropped_payloads(
    name: str, unique_key: str | None, job: Job, payloads: Sequence[tuple[str, str]]
) -> None:
    """Warn when items of a unique-key ``enqueue_many`` differ from the one job kept.

    The behaviour stays (one active job per key, every item gets its id), but arguments that
    are dropped silently are a bug waiting to happen: a warning, not an error, so existing
    callers keep working and tests (``-W error``) can make it fatal.
    """
    kept = (job.args, job.kwargs)  # jsonb's key order: compare values, not texts
    differing = [i for i, (a, k) in enumerate(payloads) if (json.loads(a), json.loads(k)) != kept]
    if differing:
        warnings.warn(
            f"enqueue_many of job {name!r} with unique_key {unique_key!r}: {len(differing)} of "
            f"{len(payloads)} items have arguments that differ from the job kept (#{job.pk}); "
            f"their arguments were dropped (first: item {differing[0]}). One active job per "
            "unique key: give each item its own key to enqueue them all.",
            DroppedPayloadsWarning,
            stacklevel=3,
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
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
    rate_key: str | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    timeout: float | None = None,
    cron: str | None = None,
    every: timedelta | float | None = None,
    schedule_args: Sequence[Any] = (),
    schedule_kwargs: Mapping[str, Any] | None = None,
    cron_timezone: str | None = None,
    catch_up: bool = False,
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
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
    rate_key: str | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    timeout: float | None = None,
    cron: str | None = None,
    every: timedelta | float | None = None,
    schedule_args: Sequence[Any] = (),
    schedule_kwargs: Mapping[str, Any] | None = None,
    cron_timezone: str | None = None,
    catch_up: bool = False,
) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
    """Register a function as a job, bare (``@job``) or with options (``@job(queue=...)``).

    The job's name is the function's dotted path unless ``name`` is given; the worker finds the
    function by that name in its registry, never by importing a path read from the table.

    With ``cron="0 3 * * *"`` (5 fields, or 6 with a leading seconds field; read in
    ``cron_timezone``, default ``TIME_ZONE``) or ``every=timedelta(seconds=30)``, it is also a
    periodic job: workers enqueue it at each tick with ``schedule_args``/``schedule_kwargs``
    (checked against the signature now). See docs/scheduling.md.
    """

    def decorate(f: Callable[P, R]) -> JobFunction[P, R]:
        spec = JobSpec(
            name=name or f"{f.__module__}.{f.__qualname__}",
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            run_after=run_after,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            rate_limit=rate_limit,
            rate_key=rate_key,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            timeout=timeout,
            cron=cron,
            every=rules.to_seconds(every),
            schedule_args=tuple(schedule_args),
            schedule_kwargs=dict(schedule_kwargs or {}),
            cron_timezone=cron_timezone,
            catch_up=catch_up,
            # An async def job runs on the worker's event loop (docs/async.md).
            is_async=inspect.iscoroutinefunction(f),
        )
        handle = JobFunction(func=f, spec=spec)
        if spec.periodic:  # the scheduled calls' arguments fail here, not at every tick
            handle.serialize(spec.schedule_args, spec.schedule_kwargs)
        registry.register(handle)
        return handle

    if func is not None:
        return decorate(func)
    return decorate
