"""``capture_jobs()``: the jobs enqueued inside a ``with`` block, for assertions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_pgqueue.operations import enqueue as enqueue_operations
from django_pgqueue.operations.db import Database, DjangoDatabase
from django_pgqueue.spec import JobSpec


@dataclass(frozen=True)
class CapturedJob:
    """One enqueue seen by :func:`capture_jobs`: what was asked, and the row it gave."""

    id: int
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    #: None: due at once (the database's clock at insert time).
    run_after: datetime | None
    max_attempts: int
    unique_key: str | None
    concurrency_key: str | None
    #: True when a job using the same unique key was returned instead of a new one.
    deduplicated: bool

    @property
    def options(self) -> dict[str, Any]:
        """The options the job was enqueued with (``using()`` / ``@job`` / the settings)."""
        return {
            "queue": self.queue,
            "priority": self.priority,
            "run_after": self.run_after,
            "max_attempts": self.max_attempts,
            "unique_key": self.unique_key,
            "concurrency_key": self.concurrency_key,
        }


def _name_of(job: object) -> str:
    """A job name, or the name of a ``@job`` function or a ``django.tasks`` task."""
    if isinstance(job, str):
        return job
    name = getattr(job, "name", None)  # a JobFunction
    if isinstance(name, str) and not hasattr(job, "module_path"):
        return name
    module_path = getattr(job, "module_path", None)  # a django.tasks Task
    if isinstance(module_path, str):
        return module_path
    raise TypeError(f"expected a job name, a @job function or a task, not {job!r}")


class CapturedJobs(list[CapturedJob]):
    """The jobs captured so far, in enqueue order (a list), with a few ways to look at them."""

    @property
    def names(self) -> list[str]:
        return [job.name for job in self]

    def filter(self, job: object = None, *, queue: str | None = None) -> CapturedJobs:
        """Those of ``job`` (a name, a ``@job`` function or a task) and/or ``queue``."""
        name = None if job is None else _name_of(job)
        return CapturedJobs(
            captured
            for captured in self
            if (name is None or captured.name == name)
            and (queue is None or captured.queue == queue)
        )

    def get(self, job: object = None, *, queue: str | None = None) -> CapturedJob:
        """The one job of ``job`` / ``queue``; AssertionError if there are none or several."""
        found = self.filter(job, queue=queue)
        if len(found) != 1:
            raise AssertionError(
                f"expected one job{'' if job is None else ' ' + _name_of(job)}"
                f"{'' if queue is None else f' in queue {queue!r}'}, found {len(found)}: "
                f"{self.names}"
            )
        return found[0]


class _Followed:
    """A job captured inside a transaction: visible while that transaction (or savepoint) may
    still commit, and once it did; gone when it rolled back, as its row is.

    It is a no-op ``on_commit`` callback of the enqueuing connection: Django runs it when the
    outermost transaction commits, and drops it, without running it, when the savepoint (or
    transaction) it was registered in rolls back.
    """

    __slots__ = ("committed", "connection", "job")

    def __init__(self, job: CapturedJob, connection: BaseDatabaseWrapper) -> None:
        self.job = job
        self.connection = connection
        self.committed = False

    def __call__(self) -> None:
        self.committed = True

    @property
    def alive(self) -> bool:
        if self.committed:
            return True
        # Still waiting for the commit: in the connection's hooks. Rolled back: not any more.
        return any(hook[1] is self for hook in self.connection.run_on_commit)


class _LiveCapturedJobs(CapturedJobs):
    """What ``capture_jobs()`` yields: the captured jobs whose transaction has not rolled back,
    brought up to date whenever the list is read."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._entries: list[CapturedJob | _Followed] = []

    def record(self, entry: CapturedJob | _Followed) -> None:
        with self._lock:
            self._entries.append(entry)

    def _sync(self) -> None:
        with self._lock:
            self._entries = [
                entry for entry in self._entries if not isinstance(entry, _Followed) or entry.alive
            ]
            list.__setitem__(
                self,
                slice(None),
                [entry.job if isinstance(entry, _Followed) else entry for entry in self._entries],
            )

    # Every way of reading the list reads it up to date.
    def __len__(self) -> int:
        self._sync()
        return super().__len__()

    def __iter__(self) -> Iterator[CapturedJob]:
        self._sync()
        return super().__iter__()

    def __reversed__(self) -> Iterator[CapturedJob]:
        self._sync()
        return super().__reversed__()

    def __getitem__(self, index: Any) -> Any:
        self._sync()
        return super().__getitem__(index)

    def __contains__(self, value: object) -> bool:
        self._sync()
        return super().__contains__(value)

    def __eq__(self, other: object) -> bool:
        self._sync()
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        self._sync()
        return super().__ne__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._sync()
        return super().__repr__()

    def index(self, *args: Any) -> int:
        self._sync()
        return super().index(*args)

    def count(self, value: CapturedJob) -> int:
        self._sync()
        return super().count(value)

    def copy(self) -> list[CapturedJob]:
        return CapturedJobs(iter(self))


@contextmanager
def capture_jobs() -> Iterator[CapturedJobs]:
    """Collect every job enqueued inside the block, by any path (``enqueue``,
    ``enqueue_many``, ``enqueue_on_commit`` once its transaction commits, ``django.tasks``),
    from any thread, without a worker::

        with capture_jobs() as jobs:
            place_order(cart)
        assert jobs.names == ["shop.jobs.send_order_confirmation"]
        assert jobs[0].args == [order.pk]

    The list follows the transactions as the rows do: a job enqueued in a transaction or
    savepoint that rolls back leaves the list when it rolls back (also after the block); one
    in a transaction that commits, or in the test's own transaction, stays.

    The jobs are in the table as usual; this only watches. An ``enqueue_on_commit`` job is
    enqueued when the transaction commits: in a ``TestCase`` (which never commits), wrap the
    code in ``captureOnCommitCallbacks(execute=True)`` inside the block.
    """
    captured = _LiveCapturedJobs()

    def observe(
        db: Database,
        spec: JobSpec,
        args_json: str,
        kwargs_json: str,
        job_id: int,
        run_after: datetime | None,
        deduplicated: bool,
    ) -> None:
        job = CapturedJob(
            id=job_id,
            name=spec.name,
            args=json.loads(args_json),
            kwargs=json.loads(kwargs_json),
            queue=spec.resolved_queue,
            priority=spec.priority,
            run_after=run_after,
            max_attempts=spec.resolved_max_attempts,
            unique_key=spec.unique_key,
            concurrency_key=spec.concurrency_key,
            deduplicated=deduplicated,
        )
        # Called in the enqueuing thread: connections[alias] is the connection that inserted.
        connection = connections[db.alias] if isinstance(db, DjangoDatabase) else None
        if connection is not None and connection.in_atomic_block:
            followed = _Followed(job, connection)
            connection.on_commit(followed)
            captured.record(followed)
        else:
            # Autocommit (already committed), or a connection whose transactions we can't see.
            captured.record(job)

    enqueue_operations.observers.append(observe)
    try:
        yield captured
    finally:
        enqueue_operations.observers.remove(observe)
