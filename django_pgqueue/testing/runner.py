"""``run_jobs()``: run the queued jobs in the test, through the worker's own code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg.pq
from django.db import connections
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.context import CurrentJob, bind
from django_pgqueue.states import Attempt
from django_pgqueue.worker.performer import log_outcome, perform

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from django_pgqueue.models import Job

#: ``run_jobs`` stops after this many attempts: a job that enqueues itself forever would
#: otherwise never let the test end.
DEFAULT_LIMIT = 1000


@dataclass(frozen=True)
class RanAttempt:
    """One attempt :func:`run_jobs` ran."""

    job_id: int
    name: str
    queue: str
    #: 1 for the first attempt of the job, 2 for its first retry...
    attempt: int
    #: ``"completed"``, ``"retried"`` or ``"dead"``
    outcome: str
    #: The return value (JSON) of a completed attempt.
    result: Any
    #: What a failed attempt raised.
    exception: BaseException | None


class JobsRun(list[RanAttempt]):
    """What :func:`run_jobs` did: every attempt, in the order they ran (a list)."""

    @property
    def completed(self) -> list[RanAttempt]:
        return [a for a in self if a.outcome == Attempt.COMPLETED]

    @property
    def retried(self) -> list[RanAttempt]:
        """Failed attempts that were retried (and ran again in the same call)."""
        return [a for a in self if a.outcome == Attempt.RETRIED]

    @property
    def dead(self) -> list[RanAttempt]:
        """Last attempts that failed: those jobs are dead."""
        return [a for a in self if a.outcome == Attempt.DEAD]

    @property
    def failures(self) -> list[RanAttempt]:
        return [a for a in self if a.exception is not None]

    @property
    def names(self) -> list[str]:
        """The names of the jobs run, each once, in the order they first ran."""
        return list(dict.fromkeys(a.name for a in self))

    @property
    def results(self) -> dict[int, Any]:
        """Job id -> return value, for the jobs that completed."""
        return {a.job_id: a.result for a in self.completed}

    def raise_failures(self) -> None:
        """Raise what the first failed attempt raised (for a test that expects none)."""
        for attempt in self.failures:
            raise AssertionError(
                f"{attempt.name} #{attempt.job_id} attempt {attempt.attempt} failed "
                f"({attempt.outcome})"
            ) from attempt.exception


def run_jobs(
    queue: str | Sequence[str] | None = None,
    *,
    scheduled: bool = False,
    limit: int = DEFAULT_LIMIT,
    worker_id: str = "run_jobs",
    respect_limits: bool = False,
) -> JobsRun:
    """Run the pending jobs now, in this thread, and return every attempt.

    Jobs go through the worker's own path: the claim statement (``SKIP LOCKED``, priorities,
    queue order, concurrency keys), the performer (the registered function, signals, the retry
    decision, results jsonb can store) and the outcome write. What differs from ``run_jobs``
    the command: one job at a time, in the caller's thread and on its connection (inside a
    ``TestCase`` transaction too, so the test sees the jobs' writes and no commit is needed),
    retries run at once instead of after their backoff (each counts as an attempt, up to
    ``max_attempts``), and job timeouts are not enforced.

    Runs until nothing runnable is left, jobs enqueued by the jobs included. ``queue``: a queue
    name or a list of them, served in that order (default every queue, by priority).
    ``scheduled=True`` also runs jobs scheduled for later (``run_after`` in the future).
    Raises RuntimeError after ``limit`` attempts.

    Paused queues are left alone, as a worker leaves them. Rate limits (a job's or a queue's)
    are not waited for: a test wants the work done. ``respect_limits=True`` keeps them, as a
    worker does: a job whose window is full is left pending. Concurrency limits hold either
    way (one job runs at a time here).
    """
    queues = [queue] if isinstance(queue, str) else (list(queue) if queue else None)
    db = operations.DjangoDatabase(settings.DATABASE)
    ran = JobsRun()
    while True:
        if connections[db.alias].in_atomic_block:  # a test's transaction: it never commits
            operations.settle_edges(db)
        operations.make_due(db, queues, wall_clock=timezone.now(), scheduled=scheduled)
        request = operations.ClaimRequest(
            worker_id=worker_id,
            limit=1,
            queues=queues,
            visibility_timeout=settings.VISIBILITY_TIMEOUT,
            reclaim=False,
            rate_limits=respect_limits,
        )
        jobs, _ = operations.claim(db, request)
        if not jobs:
            return ran
        if len(ran) >= limit:
            operations.release(db, worker_id, jobs)
            raise RuntimeError(
                f"run_jobs ran {limit} attempts and jobs are still runnable ({jobs[0].name} "
                "next): does a job enqueue itself? Pass limit=... to allow more."
            )
        for job in jobs:
            ran.append(_run_one(db, job, worker_id))


def _run_one(db: operations.Database, job: Job, worker_id: str) -> RanAttempt:
    bind(CurrentJob(job, worker_id=worker_id))  # current_job() sees this attempt, as under a worker
    try:
        outcome = perform(job, worker_id, TestConnections())
    finally:
        bind(None)
    log_outcome(job, outcome, worker_id)
    operations.finish(db, worker_id, [outcome], delete_completed=settings.RETENTION <= 0)
    return RanAttempt(
        job_id=job.pk,
        name=job.name,
        queue=job.queue,
        attempt=job.attempts,
        outcome=outcome.outcome,
        result=job_result(outcome.result_json),
        exception=outcome.exception,
    )


def job_result(result_json: str | None) -> Any:
    return None if result_json is None else json.loads(result_json)


class TestConnections:
    """An attempt on the test's own connections (``AttemptConnections``).

    Inside a transaction (a ``TestCase``, or ``django_db`` without ``transaction=True``), each
    attempt runs in a savepoint: what it wrote stays, as it would be committed in a worker,
    unless a statement failed and broke the transaction, which is then rolled back to the
    savepoint so the test carries on. A job that leaves ``transaction.atomic()`` blocks open
    is reported (and they are unwound). Outside a transaction, there is nothing to do.
    """

    __test__ = False  # not a test class, for pytest

    def __init__(self) -> None:
        self._savepoints: list[tuple[BaseDatabaseWrapper, str, int]] = []
        self._done = False

    def before(self) -> None:
        for connection in connections.all(initialized_only=True):
            if connection.in_atomic_block:
                depth = len(connection.atomic_blocks)
                savepoint = connection.savepoint()
                if savepoint is not None:
                    self._savepoints.append((connection, savepoint, depth))

    def after(self, *, failed: bool) -> list[str]:
        if self._done:
            return []
        self._done = True
        left_open = []
        for connection, savepoint, depth in self._savepoints:
            if len(connection.atomic_blocks) > depth:
                left_open.append(connection.alias)
                del connection.atomic_blocks[depth:]
                connection.savepoint_ids = connection.savepoint_ids[: depth - 1]
                connection.needs_rollback = False
            if connection.alias in left_open or _broken(connection):
                connection.needs_rollback = False  # Django refuses any statement until then
                connection.savepoint_rollback(savepoint)
            else:
                connection.savepoint_commit(savepoint)
        return left_open


def _broken(connection: BaseDatabaseWrapper) -> bool:
    """The transaction is aborted (a statement failed): only a rollback helps."""
    raw = connection.connection
    status = raw.info.transaction_status if raw is not None else None
    return bool(connection.needs_rollback or status == psycopg.pq.TransactionStatus.INERROR)
