"""The QuerySets pick rows; :mod:`django_pgqueue.operations` changes them.

The operations build and return ``Job`` rows, and the models module imports this one: each
method imports the operations when it runs (as the operations import the models), so neither
layer is imported by the other's import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from django.db import models
from django.utils import timezone

from django_pgqueue.conf import settings
from django_pgqueue.states import FINISHED, JobStatus

if TYPE_CHECKING:
    from django_pgqueue.models import Job, Schedule  # noqa: F401  (Schedule: a type argument)

_M = TypeVar("_M", bound=models.Model)


class QueueManager(models.Manager[_M]):
    """The managers of the queue's models: their querysets run on ``PGQUEUE_DATABASE`` unless
    told otherwise (``.using()``, ``db_manager()``), with or without a database router. So every
    read and write through ``Job.objects``, ``Schedule.objects``..., the queue's own and the
    project's, goes to the queue's database, whichever alias that is."""

    @property
    def db(self) -> str:
        return self._db or settings.DATABASE

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(self.db)


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def runnable(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING, run_after__lte=timezone.now())

    def scheduled(self) -> JobQuerySet:
        from django_pgqueue import operations

        return self.filter(operations.scheduled_q())

    def waiting(self) -> JobQuerySet:
        """Jobs waiting for the jobs they were enqueued after."""
        return self.filter(status=JobStatus.WAITING)

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def completed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.COMPLETED)

    def dead(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DEAD)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED)

    def failed(self) -> JobQuerySet:
        """Pending jobs that failed at least once and wait for their next attempt."""
        return self.filter(status=JobStatus.PENDING, attempts__gt=0)

    def retryable(self) -> JobQuerySet:
        from django_pgqueue import operations

        return self.filter(operations.RETRYABLE_Q)

    def in_queue(self, queue: str) -> JobQuerySet:
        return self.filter(queue=queue)

    # ----- operator actions (operations.control) --------------------------------------------

    def retry(self) -> list[int]:
        """Make the dead, cancelled and failed jobs among these runnable now, attempts reset.

        Jobs whose unique key is in use by another active job are left as they are.
        Returns the ids changed. Workers are woken when the change commits.
        """
        from django_pgqueue import operations

        return operations.retry(self)

    def cancel(self) -> int:
        """Cancel the pending and waiting jobs among these; running and finished jobs are left
        alone."""
        from django_pgqueue import operations

        return len(operations.cancel(self))

    def run_now(self) -> int:
        """Make the scheduled jobs among these runnable now.

        Jobs already runnable keep their ``run_after``, and so their place in the queue.
        """
        from django_pgqueue import operations

        return len(operations.run_now(self))


_BaseJobManager = QueueManager.from_queryset(JobQuerySet)


class JobManager(_BaseJobManager["Job"]):
    def get_queryset(self) -> JobQuerySet:
        return JobQuerySet(self.model, using=self.db)

    def claim(
        self, worker_id: str, queues: Sequence[str] | None = None, limit: int = 1
    ) -> list[Job]:
        """Claim up to ``limit`` runnable jobs for ``worker_id`` with one SKIP LOCKED statement.

        ``queues`` are served in the order given (``None``: every queue). The returned jobs are
        ``running``, locked by ``worker_id``, with their attempt counted. The worker runs the
        same :func:`operations.claim` on its own connection.
        """
        from django_pgqueue import operations

        request = operations.ClaimRequest(
            worker_id=worker_id,
            limit=limit,
            queues=queues,
            visibility_timeout=settings.VISIBILITY_TIMEOUT,
        )
        jobs, _ = operations.claim(operations.DjangoDatabase(self.db), request)
        return jobs

    def retry_dead(self, queue: str | None = None) -> list[int]:
        """Retry every dead job (of ``queue``, if given)."""
        jobs: JobQuerySet = self.get_queryset().dead()
        if queue is not None:
            jobs = jobs.in_queue(queue)
        return jobs.retry()

    def prune(self) -> int:
        """Delete finished jobs past their retention, in bounded batches; returns rows deleted.

        Workers run the same :func:`operations.prune` (which also drops long-gone worker rows).
        """
        from django_pgqueue import operations

        return operations.prune(operations.DjangoDatabase(self.db)).deleted


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def enable(self) -> int:
        """Enable the disabled ones; each next runs at its first tick from now (a disabled
        stretch is not "missed")."""
        count = 0
        for schedule in self.filter(enabled=False):
            schedule.enabled = True
            schedule.reschedule()
            schedule.save(update_fields=["enabled", "next_run_at", "updated_at"])
            count += 1
        return count

    def disable(self) -> int:
        return self.filter(enabled=True).update(
            enabled=False, next_run_at=None, updated_at=timezone.now()
        )


ScheduleManager = QueueManager.from_queryset(ScheduleQuerySet)
