"""``capture_jobs()``: the jobs enqueued inside a ``with`` block, for assertions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_pgqueue.operations import enqueue as enqueue_operations
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


@contextmanager
def capture_jobs() -> Iterator[CapturedJobs]:
    """Collect every job enqueued inside the block, by any path (``enqueue``,
    ``enqueue_many``, ``enqueue_on_commit`` once its transaction commits, ``django.tasks``),
    from any thread, without a worker::

        with capture_jobs() as jobs:
            place_order(cart)
        assert jobs.names == ["shop.jobs.send_order_confirmation"]
        assert jobs[0].args == [order.pk]

    The jobs are in the table as usual; this only watches. An ``enqueue_on_commit`` job is
    enqueued when the transaction commits: in a ``TestCase`` (which never commits), wrap the
    code in ``captureOnCommitCallbacks(execute=True)`` inside the block.
    """
    captured = CapturedJobs()
    lock = threading.Lock()

    def observe(
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
        with lock:
            captured.append(job)

    enqueue_operations.observers.append(observe)
    try:
        yield captured
    finally:
        enqueue_operations.observers.remove(observe)
