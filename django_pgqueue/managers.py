"""The QuerySet picks rows; the SQL lives in :mod:`django_pgqueue.sql`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction
from django.db.models import Q
from django.utils import timezone

from django_pgqueue import sql
from django_pgqueue.conf import settings

if TYPE_CHECKING:
    from django_pgqueue.models import Job

_JSON_COLUMNS = frozenset({"args", "kwargs", "errors", "result"})
_JSON_INDEXES = tuple(i for i, c in enumerate(sql.JOB_COLUMNS) if c in _JSON_COLUMNS)

#: Statuses a manual retry applies to (plus pending jobs waiting for an automatic retry).
RETRYABLE_STATUSES = ("dead", "cancelled")

# How often a claim is retried when a concurrent claim won the race for a concurrency key.
CLAIM_RACE_RETRIES = 5


def jobs_from_rows(db: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Turn claim rows (``sql.JOB_COLUMNS``, jsonb as text) into model instances."""
    from django_pgqueue.models import Job

    jobs = []
    for row in rows:
        values = list(row)
        for i in _JSON_INDEXES:
            if values[i] is not None:
                values[i] = json.loads(values[i])
        jobs.append(Job.from_db(db, sql.JOB_COLUMNS, values))
    return jobs


def jobs_from_claim(
    db: str, rows: Iterable[Sequence[Any]], queues: Sequence[str] | None
) -> list[Job]:
    """Model instances for the rows a claim returned, in claim order.

    Abandoned jobs that ran out of attempts went ``dead`` in the claim and are left out.
    """
    jobs = [job for job in jobs_from_rows(db, rows) if job.status == "running"]
    order = {name: i for i, name in enumerate(queues or ())}
    jobs.sort(key=lambda j: (order.get(j.queue, 0), -j.priority, j.run_after, j.pk))
    return jobs


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        return self.filter(status="pending")

    def runnable(self) -> JobQuerySet:
        return self.filter(status="pending", run_after__lte=timezone.now())

    def scheduled(self) -> JobQuerySet:
        return self.filter(status="pending", run_after__gt=timezone.now())

    def running(self) -> JobQuerySet:
        return self.filter(status="running")

    def completed(self) -> JobQuerySet:
        return self.filter(status="completed")

    def dead(self) -> JobQuerySet:
        return self.filter(status="dead")

    def cancelled(self) -> JobQuerySet:
        return self.filter(status="cancelled")

    def failed(self) -> JobQuerySet:
        """Pending jobs that failed at least once and wait for their next attempt."""
        return self.filter(status="pending", attempts__gt=0)

    def retryable(self) -> JobQuerySet:
        return self.filter(Q(status__in=RETRYABLE_STATUSES) | Q(status="pending", attempts__gt=0))

    def in_queue(self, queue: str) -> JobQuerySet:
        return self.filter(queue=queue)

    # ----- operator actions -----------------------------------------------------------------

    def retry(self) -> list[int]:
        """Make the dead, cancelled and failed jobs among these runnable now, attempts reset.

        Jobs whose unique key is held by another active job are left as they are.
        Returns the ids changed. Workers are woken when the change commits.
        """
        now = timezone.now()
        values: dict[str, Any] = {
            "status": "pending",
            "attempts": 0,
            "run_after": now,
            "locked_at": None,
            "started_at": None,
            "finished_at": None,
        }
        candidates = self.retryable()
        keyless = candidates.filter(unique_key__isnull=True)
        with transaction.atomic(using=self.db):
            # Row locks keep a worker from claiming a failed job between the select and update.
            changed = list(keyless.select_for_update().values_list("id", flat=True).order_by())
            self._fresh().filter(id__in=changed).update(**values)
            # Keyed jobs one by one: at most one active job per (queue, unique_key).
            for job_id in candidates.filter(unique_key__isnull=False).values_list("id", flat=True):
                try:
                    with transaction.atomic(using=self.db):
                        if self._fresh().filter(id=job_id).retryable().update(**values):
                            changed.append(job_id)
                except IntegrityError:
                    continue
            self._notify(self._fresh().filter(id__in=changed))
        return changed

    def cancel(self) -> int:
        """Cancel the pending jobs among these; running and finished jobs are left alone."""
        return self.filter(status="pending").update(
            status="cancelled", finished_at=timezone.now(), locked_at=None
        )

    def run_now(self) -> int:
        """Make the scheduled jobs among these runnable now.

        Jobs already runnable keep their ``run_after``, and so their place in the queue.
        """
        now = timezone.now()
        with transaction.atomic(using=self.db):
            scheduled = self._fresh().filter(
                id__in=list(
                    self.filter(status="pending", run_after__gt=now)
                    .select_for_update()
                    .values_list("id", flat=True)
                )
            )
            self._notify(scheduled)
            count = scheduled.update(run_after=now)
        return count

    def _fresh(self) -> JobQuerySet:
        """All jobs, on this queryset's database."""
        return JobQuerySet(self.model, using=self.db)

    def _notify(self, jobs: JobQuerySet) -> None:
        queues = list(jobs.order_by().values_list("queue", flat=True).distinct())
        if queues:
            with connections[self.db].cursor() as cursor:
                sql.notify(cursor, queues)


_BaseJobManager = models.Manager.from_queryset(JobQuerySet)


class JobManager(_BaseJobManager["Job"]):
    def get_queryset(self) -> JobQuerySet:
        return JobQuerySet(self.model, using=self._db)

    def claim(
        self, worker_id: str, queues: Sequence[str] | None = None, limit: int = 1
    ) -> list[Job]:
        """Claim up to ``limit`` runnable jobs for ``worker_id`` with one SKIP LOCKED statement.

        ``queues`` are served in the order given (``None``: every queue). The returned jobs are
        ``running``, locked by ``worker_id``, with their attempt counted.
        """
        db = self.db
        visibility = settings.VISIBILITY_TIMEOUT
        for attempt in range(CLAIM_RACE_RETRIES):
            try:
                with transaction.atomic(using=db), connections[db].cursor() as cursor:
                    rows = sql.claim(cursor, worker_id, queues, limit, visibility)
                return jobs_from_claim(db, rows, queues)
            except IntegrityError:
                # A concurrent claim took the same concurrency key first; the unique index
                # refused ours. Claim again: that key is now visibly running.
                if attempt == CLAIM_RACE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def retry_dead(self, queue: str | None = None) -> list[int]:
        """Retry every dead job (of ``queue``, if given)."""
        jobs: JobQuerySet = self.get_queryset().dead()
        if queue is not None:
            jobs = jobs.in_queue(queue)
        return jobs.retry()

    def prune(self) -> int:
        """Delete finished jobs past their retention, in bounded batches; returns rows deleted."""
        batch = settings.PRUNE_BATCH_SIZE
        deleted = 0
        with connections[self.db].cursor() as cursor:
            deleted += sql.prune(cursor, ["completed", "cancelled"], settings.RETENTION, batch)
            dead_retention = settings.DEAD_RETENTION
            if dead_retention is not None:
                deleted += sql.prune(cursor, ["dead"], dead_retention, batch)
        return deleted
