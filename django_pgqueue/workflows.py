"""Workflows: signatures, jobs that wait for others, chains, and batches (docs/workflows.md).

Everything here enqueues in the caller's transaction on the queue's database; what a parent's
or a member's end then does (release a waiting child, cancel it, finish a batch and enqueue its
callbacks, once) happens in the database, in the transaction of that outcome (``sql.flow``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.db import transaction

from django_pgqueue.conf import settings

if TYPE_CHECKING:
    from django_pgqueue.models import Batch, Job
    from django_pgqueue.spec import JobSpec


class Enqueueable(Protocol):
    """What a signature holds: a ``@job`` function (``JobFunction``)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> JobSpec: ...

    @property
    def serialize(self) -> Callable[..., tuple[str, str]]: ...

    @property
    def using(self) -> Callable[..., Any]: ...

    @property
    def enqueue(self) -> Callable[..., Job]: ...

    @property
    def enqueue_on_commit(self) -> Callable[..., None]: ...


def job_ids(jobs: Iterable[Job | int]) -> tuple[int, ...]:
    """The ids of ``jobs`` (jobs or ids), for ``after=``; an unsaved job is an error."""
    if isinstance(jobs, str | bytes) or not isinstance(jobs, Iterable):
        raise TypeError(f"after takes a list of jobs or job ids, not {type(jobs).__name__}")
    ids: list[int] = []
    for item in jobs:
        if isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
            continue
        pk = getattr(item, "pk", None)
        if not hasattr(item, "_meta") or pk is None:
            raise TypeError(f"after takes jobs (enqueued) or job ids, not {item!r}")
        ids.append(int(pk))
    return tuple(ids)


@dataclass(frozen=True)
class Signature:
    """A job with its arguments (and ``.using()`` options), not enqueued yet: ``job.s(...)``."""

    job: Enqueueable
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def using(self, **options: Any) -> Signature:
        """A copy whose job has these options replaced (as ``JobFunction.using``)."""
        return dataclasses.replace(self, job=self.job.using(**options))

    def enqueue(self) -> Job:
        """Enqueue it now (in the caller's transaction)."""
        return self.job.enqueue(*self.args, **self.kwargs)

    def enqueue_on_commit(self) -> None:
        self.job.enqueue_on_commit(*self.args, **self.kwargs)

    def callback(self) -> dict[str, Any]:
        """What a batch stores to enqueue it when it finishes (its arguments as JSON)."""
        spec = self.job.spec
        unsupported = [
            name
            for name in ("run_after", "unique_key", "concurrency_key", "rate_limit", "after")
            if getattr(spec, name)
        ]
        if unsupported:
            raise ValueError(
                f"a batch callback ({spec.name}) takes the options queue, priority and "
                f"max_attempts only, not {', '.join(unsupported)}"
            )
        args_json, kwargs_json = self.job.serialize(self.args, self.kwargs)
        from django_pgqueue.operations.rows import decode_json

        return {
            "name": spec.name,
            "queue": spec.resolved_queue,
            "priority": spec.priority,
            "max_attempts": spec.resolved_max_attempts,
            # Its kind, as enqueue() writes it (S13): the finish inserts the row, in SQL.
            "is_async": spec.is_async,
            "args": decode_json(args_json),
            "kwargs": decode_json(kwargs_json),
        }

    def __repr__(self) -> str:
        arguments = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.job.name}.s({', '.join(arguments)})"


def chain(*steps: Signature) -> list[Job]:
    """Enqueue every step now, each after the previous one, in one transaction (a savepoint in
    the caller's); the enqueued jobs, in order. A step reads the previous one's result in
    ``current_job().parent_results``; if a step ends dead or cancelled, the steps after it are
    cancelled without running."""
    if not steps:
        raise ValueError("chain() needs at least one step")
    for step in steps:
        if not isinstance(step, Signature):
            raise TypeError(f"chain() takes signatures (job.s(...)), not {step!r}")
    jobs: list[Job] = []
    with transaction.atomic(using=settings.DATABASE):
        for step in steps:
            if jobs:
                step = step.using(after=[*step.job.spec.after, jobs[-1].pk])
            jobs.append(step.enqueue())
    return jobs


class _OpenBatch:
    """A batch whose block is open in this context: the jobs enqueued join it."""

    def __init__(self, batch_id: int) -> None:
        self.id = batch_id
        #: The databases whose commit some member waits for (``enqueue_on_commit``).
        self.on_commit: set[str] = set()


_open: contextvars.ContextVar[_OpenBatch | None] = contextvars.ContextVar(
    "django_pgqueue_batch", default=None
)


def joining(on_commit: str | None = None) -> int | None:
    """The batch a job enqueued now joins (None: none); ``on_commit``: the job is enqueued
    when that database's transaction commits, and the batch is sealed after it."""
    opened = _open.get()
    if opened is None:
        return None
    if on_commit is not None:
        opened.on_commit.add(on_commit)
    return opened.id


@contextmanager
def batch(
    *,
    on_success: Signature | None = None,
    on_failure: Signature | None = None,
    on_complete: Signature | None = None,
    description: str = "",
) -> Iterator[Batch]:
    """Jobs enqueued inside the block (in this thread or task) are the batch's members.

    Once the block has closed, its transaction has committed, and every member has ended
    (``completed``, ``dead`` or ``cancelled``; a retry is not an end), exactly once:
    ``on_success`` if all completed, ``on_failure`` if any ended dead or cancelled,
    ``on_complete`` in either case. A batch with no member finishes when its block closes.
    """
    from django_pgqueue import operations
    from django_pgqueue.models import Batch

    if not isinstance(description, str):
        raise TypeError("description must be a string")
    callbacks: dict[str, dict[str, Any] | None] = {}
    for name, sig in (
        ("on_success", on_success),
        ("on_failure", on_failure),
        ("on_complete", on_complete),
    ):
        if sig is not None and not isinstance(sig, Signature):
            raise TypeError(f"{name} takes a signature (job.s(...)), not {sig!r}")
        callbacks[name] = None if sig is None else sig.callback()
    db = operations.DjangoDatabase(settings.DATABASE)
    batch_id = operations.create_batch(db, description[:255], callbacks)
    row = Batch.objects.using(db.alias).get(pk=batch_id)
    opened = _OpenBatch(batch_id)
    token = _open.set(opened)
    try:
        yield row
    finally:
        _open.reset(token)
        _seal(db, opened)


def _seal(db: Any, opened: _OpenBatch) -> None:
    """Seal now, or once the last database some member waits for has committed."""
    from django_pgqueue import operations

    if not opened.on_commit:
        operations.seal_batch(db, opened.id)
        return
    waiting = set(opened.on_commit)

    def committed(alias: str) -> None:
        waiting.discard(alias)
        if not waiting:
            operations.seal_batch(db, opened.id)

    # Registered after the members' own callbacks: each runs after them.
    for alias in sorted(opened.on_commit):
        transaction.on_commit(functools.partial(committed, alias), using=alias)


def current_batch_id() -> int | None:
    """The batch whose block is open in this context, if any."""
    opened = _open.get()
    return None if opened is None else opened.id
