"""Operator actions on chosen jobs: retry, cancel, run now.

The caller's QuerySet picks the jobs (``Job.objects.dead().in_queue("emails")``); these change
the ones the action applies to, with their rows locked so no worker claims them meanwhile, and
wake the workers when the change commits. Each returns the ids it changed, sorted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from django_pgqueue.operations.db import DjangoDatabase
from django_pgqueue.operations.enqueue import wake_after_commit
from django_pgqueue.sql import control as sql
from django_pgqueue.states import RETRYABLE, JobStatus

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_pgqueue.models import Job

#: Jobs a manual retry applies to: dead, cancelled, or pending after a failed attempt
#: (``states.is_retryable`` is the same rule for one job).
RETRYABLE_Q = Q(status__in=RETRYABLE) | Q(status=JobStatus.PENDING, attempts__gt=0)


def scheduled_q() -> Q:
    """Jobs waiting for their ``run_after`` (built per call: it reads the clock)."""
    return Q(status=JobStatus.PENDING, run_after__gt=timezone.now())


def _locked_ids(jobs: QuerySet[Job]) -> list[int]:
    """Lock the rows of ``jobs`` (inside the caller's transaction); their ids, sorted."""
    return sorted(jobs.order_by().select_for_update(of=("self",)).values_list("pk", flat=True))


def _all(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Every job, on the database of ``jobs`` (the selection's filters dropped)."""
    return jobs.model._default_manager.using(jobs.db).all()


def _wake(jobs: QuerySet[Job], ids: list[int]) -> None:
    counts = (
        _all(jobs)
        .filter(pk__in=ids)
        .order_by()
        .values_list("queue")
        .annotate(n=Count("pk"), first=Min("pk"))
    )
    for queue, count, first in counts:
        wake_after_commit(DjangoDatabase(jobs.db), queue, first, count)


def retry(jobs: QuerySet[Job]) -> list[int]:
    """Make the dead, cancelled and failed jobs among ``jobs`` runnable now, attempts and
    interruptions reset.

    Jobs whose unique key is in use by another active job are left as they are.
    """
    values: dict[str, Any] = {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "interruptions": 0,
        "run_after": timezone.now(),
        "locked_at": None,
        "locked_by": None,
        "started_at": None,
        "finished_at": None,
        "cancel_requested_at": None,
        "progress": None,
    }
    candidates = jobs.filter(RETRYABLE_Q)
    with transaction.atomic(using=jobs.db):
        changed = _locked_ids(candidates.filter(unique_key__isnull=True))
        _all(jobs).filter(pk__in=changed).update(**values)
        # Keyed jobs one by one: at most one active job per (queue, unique_key).
        for job_id in candidates.filter(unique_key__isnull=False).values_list("pk", flat=True):
            try:
                with transaction.atomic(using=jobs.db):
                    if _all(jobs).filter(RETRYABLE_Q, pk=job_id).update(**values):
                        changed.append(job_id)
            except IntegrityError:
                continue
        _wake(jobs, changed)
    return sorted(changed)


def cancel(jobs: QuerySet[Job]) -> list[int]:
    """Cancel the pending (and waiting) jobs among ``jobs`` and ask the running ones to stop.

    Pending and waiting jobs are ``cancelled`` at once (the dependents of each with it).
    Running jobs get ``cancel_requested_at`` and their
    workers are told (``NOTIFY`` when this commits; workers without LISTEN poll): the job sees
    ``current_job().cancel_requested`` and ends ``cancelled`` whatever its attempt returns.
    Finished jobs are left alone. Returns the ids changed (cancelled or asked to stop).
    """
    with transaction.atomic(using=jobs.db):
        ids = _locked_ids(jobs.filter(status__in=(JobStatus.PENDING, JobStatus.WAITING)))
        _all(jobs).filter(pk__in=ids).update(
            status=JobStatus.CANCELLED, finished_at=timezone.now(), locked_at=None
        )
        running = list(jobs.filter(status=JobStatus.RUNNING).values_list("pk", flat=True))
        if running:
            with DjangoDatabase(jobs.db).cursor() as cursor:
                cursor.execute(sql.REQUEST_CANCEL, [running])
                asked = [row[0] for row in cursor.fetchall()]
                if asked:
                    cursor.execute(sql.NOTIFY_CONTROL, ["cancel"])
            ids += asked
    return sorted(ids)


def run_now(jobs: QuerySet[Job]) -> list[int]:
    """Make the scheduled jobs among ``jobs`` runnable now.

    Jobs already runnable keep their ``run_after``, and so their place in the queue.
    """
    with transaction.atomic(using=jobs.db):
        ids = _locked_ids(jobs.filter(scheduled_q()))
        _all(jobs).filter(pk__in=ids).update(run_after=timezone.now())
        _wake(jobs, ids)
    return ids
